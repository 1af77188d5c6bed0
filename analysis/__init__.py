"""Analysis of a stored study: Pareto fronts, plots, reports, export, dashboard, profiling.

- `study`: open a study from a run directory, an SQLite file or a database URL;
- `front`: fronts, hypervolume and axes over the stored trials (any device, any objectives);
- `pareto`: one front with everything the table, plots and reports show;
- `plots`, `report`: the PNG/HTML figures, the Markdown/HTML reports, the sweep's epilogue;
- `export`: a trial as an ArchConfig preset and a Hugging Face-style config.json;
- `dashboard`: optuna-dashboard plus the archsearch front page;
- `profile`: measured vs predicted memory, latency and throughput (seed MCSD Figs. 5-8);
- `testing`: stand-in studies with known content, for tests.
"""
