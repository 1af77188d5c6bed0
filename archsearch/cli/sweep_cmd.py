"""`archsearch sweep`: run a search and print where its results are."""

from __future__ import annotations

from typing import Any

from archsearch.cli import output


def run(_sub: str | None, cfg: Any) -> int:
    from archsearch.space import open_space
    from archsearch.sweep import run_sweep

    space = open_space(search_space=cfg.search_space, space_file=cfg.space_file)
    summary = run_sweep(space, cfg)
    print_summary(summary, fmt=cfg.format)
    return 0


def print_summary(summary: dict[str, Any], *, fmt: str) -> None:
    """After a sweep: its front on the sweep's device (plots and reports written under
    `<run dir>/pareto/<device>/`), and where everything is."""
    from rich.markup import escape

    from archsearch.analysis.report import write_sweep_front
    from archsearch.cli.analysis_cmd import print_front

    done = write_sweep_front(
        summary["storage"], summary["study_name"], summary["run_dir"], summary["device"]
    )
    dashboard = f"archsearch dashboard study={summary['run_dir']}"
    n_trials = len(done.study.records)
    if fmt == "json":
        output.print_json(
            {
                **summary,
                "front": done.pareto.front_rows() if done.pareto is not None else [],
                "files": {k: str(v) for k, v in done.files.items()},
                "dashboard": dashboard,
                "trials_in_study": n_trials,
            }
        )
        return
    con = output.console()
    counts = summary["counts"]
    con.print(
        f"\n[bold]study {escape(summary['study_name'])}[/bold]: {n_trials} trials "
        f"({summary['trained_in_study']} trained; this run: "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k != "launched")
        + f") in {summary['wall_s']:.0f} s"
    )
    if done.pareto is not None:
        print_front(done.pareto, done.files)
    else:
        con.print(f"no front: {escape(done.note)}")
    con.print(escape(f"study:           {summary['storage']}"))
    con.print(escape(f"run dir:         {summary['run_dir']}"))
    con.print(escape(f"other devices:   archsearch pareto study={summary['run_dir']} device=..."))
    con.print(escape(f"dashboard:       {dashboard}"))
