"""Analysis of a stored study (`archsearch.analysis`, the top-level `analysis/` folder): Pareto
fronts, plots, report files, export and the dashboard. Printing to the console is the command
line's (`archsearch.cli`); nothing here imports it.

Modules, lowest first (each imports only those above it):
- `hypervolume`: the exact 2-D/3-D hypervolume;
- `front`: fronts, hypervolume and axes over the stored trials (any device, any objectives);
- `noise`: seed noise from replicates (pooled seed std) and noise-aware dominance (ties);
- `proxies`: rank correlations of the sandbox loss with the study's cheap signals;
- `pareto`: `analyse(...) -> Pareto`, one front with everything the table, plots and reports show;
- `front_table`: the front as text (columns, cells, facts, export commands), shared by the
  report files, the dashboard and the console table;
- what a study learned: `design` (the trials an analysis of effects uses, the factors and
  their levels, each objective's observations), `importance` (Optuna's fANOVA per objective
  with bootstrap intervals), `effects` (main effects and two-way interactions with bootstrap
  intervals), `insights` (all of it with the front by factor per device and which front
  neighbour is faster, worded), `insight_plots` and `insight_report` (its figures and files);
- `plots`: the PNG and interactive HTML figures; `report`: the files `archsearch pareto` and a
  finished sweep write (plots, Markdown/HTML reports, front.json);
- `export`: a trial as an ArchConfig preset and a Hugging Face-style config.json;
- `notebook`: `open_study`, the study as pandas DataFrames and plotly figures for Jupyter;
- `dashboard`: optuna-dashboard plus the archsearch front page;
- `profile`: measured vs predicted memory, latency and throughput ([MCSD] Figs. 5-8); its
  entry points (`profile`, `plot_all`, `summary_rows`) stay in the module, whose name the
  function `profile` would shadow here.
"""

from archsearch.analysis.dashboard import front_payload, make_app, serve
from archsearch.analysis.export import HFConfig, hf_config
from archsearch.analysis.front import Axis
from archsearch.analysis.front_table import (
    export_command,
    format_cell,
    front_columns,
    front_facts,
    row_cell,
)
from archsearch.analysis.pareto import Pareto, analyse, choose_axes
from archsearch.analysis.plots import front_figure, front_html, front_png, hypervolume_png
from archsearch.analysis.report import (
    SweepFront,
    default_out_dir,
    html_report,
    markdown_report,
    write_outputs,
    write_sweep_front,
)

__all__ = [
    "Axis",
    "HFConfig",
    "Pareto",
    "SweepFront",
    "analyse",
    "choose_axes",
    "default_out_dir",
    "export_command",
    "format_cell",
    "front_columns",
    "front_facts",
    "front_figure",
    "front_html",
    "front_payload",
    "front_png",
    "hf_config",
    "html_report",
    "hypervolume_png",
    "make_app",
    "markdown_report",
    "row_cell",
    "serve",
    "write_outputs",
    "write_sweep_front",
]
