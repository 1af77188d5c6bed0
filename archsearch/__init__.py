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
- `archsearch.cost`: analytic params/FLOPs/memory counts, device profiles and the roofline.
- `archsearch.latency`: predicted latency with its error, device profile files, calibration.
- `archsearch.study`: the stored study (schema, storages, the one writer and reader).
- `archsearch.trainers`: sandbox pretraining trials and probe tasks.
- `archsearch.sweep`: Ray Tune + Optuna sweeps stored in a relational database.
- `archsearch.analysis`: Pareto fronts, plots, reports, export and the dashboard.
- `archsearch.cli`: the `archsearch` command line.

From a notebook: `archsearch.open_study(path_or_url)` (`archsearch.analysis.notebook`), a
stored study as pandas DataFrames and plotly figures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from archsearch.analysis.notebook import Study

__version__ = "0.1.0"
__all__ = ["DOCS_URL", "__version__", "open_study"]

# the documentation site (mkdocs.yml's site_url); `archsearch <command> --help` ends with its page
DOCS_URL = "https://archsearch.readthedocs.io/en/latest/"


def open_study(path_or_url: str, study_name: str | None = None) -> Study:
    """A stored study for a notebook (`archsearch.analysis.notebook.open_study`): its trials,
    fronts and what it learned as DataFrames, its figures as plotly objects. Imported on first
    use, so `import archsearch` stays light."""
    from archsearch.analysis.notebook import open_study as _open

    return _open(path_or_url, study_name)
