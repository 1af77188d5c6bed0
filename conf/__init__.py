"""The Hydra config tree of archsearch (installed as `archsearch.conf`)."""
