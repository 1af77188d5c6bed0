"""Ready-made search spaces (installed as `archsearch.search_spaces`)."""
