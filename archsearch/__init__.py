"""archsearch: declarative, measured architecture search for efficient language models.

The package is split by concept, in layers that import only downward (`docs/ARCHITECTURE.md`,
checked by `tests/test_layering.py`); each module imports only what it needs, so that the
commands that need neither torch nor ray (`archsearch space ...`) start quickly.

- `archsearch.arch`: `ArchConfig`, the typed description of one candidate language model.
- `archsearch.metrics`: the metric vocabulary (names, arguments, labels, constraints, objectives).
- `archsearch.space`: the YAML search-space language (Hydra sweep grammar plus conditions,
  derived values, hybrid layouts, constraints and objectives) and candidate generation.
- `archsearch.models`: PyTorch models built from an `ArchConfig` (every mixer in a parallel and
  a recurrent form).
- `archsearch.cost`: analytic params/FLOPs/memory counts and the edge-latency model.
- `archsearch.study`: the stored study (schema, storages, the one writer and reader).
- `archsearch.trainers`: sandbox pretraining trials and probe tasks.
- `archsearch.sweep`: Ray Tune + Optuna sweeps stored in a relational database.
- `archsearch.analysis`: Pareto fronts, plots, reports, export and the dashboard.
- `archsearch.cli`: the `archsearch` command line.
"""

__version__ = "0.1.0"

# the documentation site (mkdocs.yml's site_url); `archsearch <command> --help` ends with its page
DOCS_URL = "https://archsearch.readthedocs.io/en/latest/"
