"""archsearch: declarative, measured architecture search for efficient language models.

The package is split by concept; each module imports only what it needs, so that the commands
that need neither torch nor ray (`archsearch space ...`) start quickly.

- `archsearch.arch`: `ArchConfig`, the typed description of one candidate language model.
- `archsearch.space`: the YAML search-space language (Hydra sweep grammar plus conditions,
  derived values, hybrid layouts, constraints and objectives) and candidate generation.
- `archsearch.models`: PyTorch models built from an `ArchConfig` (every mixer in a parallel and
  a recurrent form).
- `archsearch.cost`: analytic params/FLOPs/memory counts and the edge-latency model.
- `archsearch.trainers`: sandbox pretraining trials and probe tasks.
- `archsearch.sweep`: Ray Tune + Optuna sweeps stored in a relational database.
- `archsearch.analysis`: Pareto fronts, plots, reports, export and the dashboard.
"""

__version__ = "0.1.0"
