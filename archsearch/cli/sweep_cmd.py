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
    return 1 if summary["outcome"] == "gave_up" else 0


STATUS_WORDS = {
    "trained": "trained",
    "stopped_early": "stopped early",
    "failed": "failed",
    "infeasible": "pruned by cost",
    "invalid": "invalid",
    "duplicate": "duplicates",
    "interrupted": "interrupted",
    "replicate": "replicates",
    "confirmation": "confirmations",
}


def counts_text(counts: dict[str, int]) -> str:
    """'12 trained, 3 stopped early, 4 pruned by cost' (statuses in a fixed order)."""
    parts = [f"{counts[k]} {w}" for k, w in STATUS_WORDS.items() if counts.get(k)]
    return ", ".join(parts) or "nothing"


def headline(summary: dict[str, Any]) -> str:
    """What the run did, in the words of `trials=`: fully trained architectures."""
    from archsearch.units import fmt_duration

    name, want, have = summary["study_name"], summary["trials"], summary["trained_in_study"]
    if summary["outcome"] == "nothing_to_do":
        return (
            f"study {name} already holds {have} trained trials; nothing to do "
            f"(trials={have + 10} adds 10)"
        )
    text = (
        f"study {name}: {have} of {want} trained (trials={want}); this run: "
        f"{counts_text(summary['counts'])} in {fmt_duration(summary['wall_s'])}"
    )
    if summary["outcome"] == "exhausted":
        text += "; the space has no new feasible architecture left"
    elif summary["outcome"] == "gave_up" and summary.get("gave_up_reason"):
        text += f"; gave up: {summary['gave_up_reason']}"
    elif summary["outcome"] == "gave_up":
        text += (
            f"; gave up after {summary['counts'].get('failed', 0)} failed trials "
            f"(max_failures; the reasons: archsearch pareto study={summary['run_dir']})"
        )
    return text


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
    con.print("\n" + escape(headline(summary)))
    con.print(escape(f"in the study: {n_trials} trials, {counts_text(summary['in_study'])}"))
    for key, what in (("replicated", "replicates"), ("confirmed", "confirmation")):
        done_here = summary.get(key) or {}
        if done_here.get("jobs"):
            ran = counts_text(done_here["this_run"])
            con.print(
                escape(
                    f"{what}: {done_here['jobs']} runs of trials {done_here['trials']}; this "
                    f"run: {ran}, {done_here['already_stored']} stored before"
                )
            )
    if done.pareto is not None:
        print_front(done.pareto, done.files)
    else:
        con.print(f"no front: {escape(done.note)}")
    con.print(escape(f"study:           {summary['storage']}"))
    con.print(escape(f"run dir:         {summary['run_dir']}"))
    con.print(escape(f"other devices:   archsearch pareto study={summary['run_dir']} device=..."))
    con.print(escape(f"dashboard:       {dashboard}"))
    for record in summary.get("left_alone") or []:
        con.print(escape(f"left alone:      {record}"))
