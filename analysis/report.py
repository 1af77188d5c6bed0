"""What a finished sweep prints: the Pareto table and where everything is."""

from __future__ import annotations

from typing import Any

from archsearch.cli import output


def sweep_epilogue(summary: dict[str, Any], *, fmt: str) -> None:
    import optuna

    from archsearch.analysis.front import Axis, front
    from archsearch.sweep.study import open_storage, records, study_meta

    study = optuna.load_study(
        study_name=summary["study_name"], storage=open_storage(summary["storage"])
    )
    meta = study_meta(study)
    objectives = meta["objectives"]
    axes = [Axis(label, d) for label, d in zip(objectives, meta["directions"])]
    recs = records(study)
    cands, values, mask = front(recs, axes, objectives)
    rows = []
    for r, v, on in sorted(zip(cands, values, mask), key=lambda t: tuple(t[1])):
        if on:
            rows.append(
                {
                    "trial": r.number,
                    "arch_hash": r.attrs.get("arch_hash"),
                    "summary": r.attrs.get("summary"),
                    "params": r.attrs.get("params"),
                    **{a.label: float(x) for a, x in zip(axes, v)},
                }
            )
    dashboard = f"archsearch dashboard study={summary['run_dir']}"
    data = {**summary, "front": rows, "dashboard": dashboard, "trials_in_study": len(recs)}
    if fmt == "json":
        output.print_json(data)
        return
    con = output.console()
    counts = summary["counts"]
    con.print(
        f"\n[bold]study {summary['study_name']}[/bold]: {len(recs)} trials "
        f"({summary['trained_in_study']} trained; this run: "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k != "launched")
        + f") in {summary['wall_s']:.0f} s"
    )
    table_rows = [
        [
            r["trial"],
            r["summary"],
            output.human(r["params"]),
            *[output.fmt_value(r[a.label]) for a in axes],
        ]
        for r in rows
    ]
    con.print(
        output.table(
            f"Pareto front on {summary['device']} ({len(rows)} of {len(cands)} fully trained)",
            ["trial", "architecture", "params", *[a.label for a in axes]],
            table_rows,
        )
    )
    con.print(f"study:     {summary['storage']}")
    con.print(f"run dir:   {summary['run_dir']}")
    con.print(f"plots:     archsearch pareto study={summary['run_dir']} device=<device>")
    con.print(f"dashboard: {dashboard}")
