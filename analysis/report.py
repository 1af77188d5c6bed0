"""What `archsearch pareto` and a finished sweep write: the front as a table, the plots, a
Markdown and an HTML report listing the front's full configurations, and front.json."""

from __future__ import annotations

import hashlib
import html
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from archsearch.analysis.front import parse_label
from archsearch.analysis.pareto import Pareto, redact
from archsearch.cli import output
from archsearch.errors import UserError


def sweep_epilogue(summary: dict[str, Any], *, fmt: str) -> None:
    """After a sweep: its front on the sweep's device, the plots and reports written under
    `<run dir>/pareto/<device>/`, and where everything is."""
    from rich.markup import escape

    from archsearch.analysis.pareto import analyse, choose_axes
    from archsearch.analysis.study import load

    data = load(summary["storage"], summary["study_name"])
    data.home = Path(summary["run_dir"])
    device = summary["device"]
    axes, _ = choose_axes(data, device, None, None, None)
    rows: list[dict[str, Any]] = []
    files: dict[str, Path] = {}
    note = ""
    try:
        p = analyse(data, device, axes)
    except UserError as err:  # nothing trained yet: no front, no plots
        note = str(err)
    else:
        rows = p.front_rows()
        files = write_outputs(p, default_out_dir(p))
    dashboard = f"archsearch dashboard study={summary['run_dir']}"
    out = {
        **summary,
        "front": rows,
        "files": {k: str(v) for k, v in files.items()},
        "dashboard": dashboard,
        "trials_in_study": len(data.records),
    }
    if fmt == "json":
        output.print_json(out)
        return
    con = output.console()
    counts = summary["counts"]
    con.print(
        f"\n[bold]study {escape(summary['study_name'])}[/bold]: {len(data.records)} trials "
        f"({summary['trained_in_study']} trained; this run: "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k != "launched")
        + f") in {summary['wall_s']:.0f} s"
    )
    if files:
        print_front(p, files)
    else:
        con.print(f"no front: {escape(note)}")
    con.print(escape(f"study:           {summary['storage']}"))
    con.print(escape(f"run dir:         {summary['run_dir']}"))
    con.print(escape(f"other devices:   archsearch pareto study={summary['run_dir']} device=..."))
    con.print(escape(f"dashboard:       {dashboard}"))


# ---- archsearch pareto: the files ---------------------------------------------------------------


def default_out_dir(p: Pareto) -> Path:
    """`<run dir>/pareto/<device>` (other axes: a sub-folder named after them); a study on a
    database server writes under `runs/pareto/<study>/` of the working directory."""
    base = p.study.home if p.study.home is not None else Path("runs") / "pareto" / p.study.name
    base = base / "pareto" / p.device if p.study.home is not None else base / p.device
    if p.default_axes:
        return base
    names = "-vs-".join(parse_label(a.label)[0] for a in p.axes)
    digest = hashlib.sha256("|".join(a.label for a in p.axes).encode()).hexdigest()[:6]
    return base / f"{names}-{digest}"


def write_outputs(p: Pareto, out_dir: Path) -> dict[str, Path]:
    """front.png, front.html, hypervolume.png, report.md, report.html and front.json."""
    from archsearch.analysis import plots

    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "png": plots.front_png(p, out_dir / "front.png"),
        "html": plots.front_html(p, out_dir / "front.html"),
        "hypervolume_png": plots.hypervolume_png(p, out_dir / "hypervolume.png"),
    }
    files["report_md"] = out_dir / "report.md"
    files["report_md"].write_text(markdown_report(p))
    files["report_html"] = out_dir / "report.html"
    files["report_html"].write_text(html_report(p))
    files["json"] = out_dir / "front.json"
    files["json"].write_text(json.dumps(p.summary(), indent=2, default=_jsonable) + "\n")
    return files


def _jsonable(v: Any) -> Any:
    return v.tolist() if hasattr(v, "tolist") else str(v)


def _fmt(label: str, v: Any) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    name = parse_label(label)[0]
    if name in ("params", "active_params", "non_embedding_params"):
        return output.human(v)
    if "bytes" in name:
        return output.human(v, "B")
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _resolved_yaml(r) -> str:
    from archsearch.arch import ArchConfig

    return ArchConfig.from_dict(r.attrs["arch"]).resolved().to_yaml()


def _facts(p: Pareto) -> list[tuple[str, str]]:
    meta = p.study.meta
    ref_how = (
        "given with reference="
        if not _auto_reference(p)
        else "the worst value of each axis over the fully trained trials, moved out by 10% of "
        "the axis's range"
    )
    return [
        ("study", f"{p.study.name} ({redact(p.study.url)})"),
        ("search space", f"{meta.get('space', '?')} ({meta.get('space_source', '?')})"),
        ("device", f"{p.device} (the sweep's own: {meta.get('device', '?')})"),
        ("trials", ", ".join(f"{k} {v}" for k, v in p.status_counts().items())),
        ("axes", ", ".join(f"{a.label} ({a.direction})" for a in p.axes)),
        ("constraints", "; ".join(meta.get("constraints", [])) or "none"),
        ("front", f"{int(p.on_front.sum())} of {len(p.trained)} fully trained architectures"),
        ("reference point", f"({', '.join(f'{x:.6g}' for x in p.reference)}): {ref_how}"),
        ("hypervolume", f"{p.hypervolume:.6g} (in the axes' stored units: bytes, ms, nats...)"),
    ]


def _auto_reference(p: Pareto) -> bool:
    from archsearch.analysis.front import reference_point

    return bool(np.allclose(p.reference, reference_point(p.values, p.axes)))


def _columns(p: Pareto) -> list[tuple[str, str]]:
    """(row key, column title) of the front table."""
    kv = parse_label(p.kv_label)[1]
    return [
        ("trial", "trial"),
        ("summary", "architecture"),
        ("family", "family"),
        ("attention_share", "attn share"),
        *[(a.label, a.label) for a in p.axes],
        ("params", "params"),
        ("active_params", "active"),
        (p.kv_label, f"KV/state @{kv.get('context', '?')} ({kv.get('bits', 16)}-bit)"),
    ]


def _export_cmd(p: Pareto, trial: int) -> str:
    where = str(p.study.home) if p.study.home is not None else redact(p.study.url)
    return f"archsearch export study={where} study_name={p.study.name} trial={trial}"


def markdown_report(p: Pareto) -> str:
    cols = _columns(p)
    lines = [f"# Pareto front of `{p.study.name}` on `{p.device}`", ""]
    lines += [f"- **{k}**: {v}" for k, v in _facts(p)]
    lines += [
        "",
        "![front](front.png)",
        "",
        "Interactive: [front.html](front.html). Hypervolume over the trials:",
        "",
        "![hypervolume](hypervolume.png)",
        "",
        "## The front",
        "",
        "| " + " | ".join(t for _, t in cols) + " |",
        "|" + "---|" * len(cols),
    ]
    for row in p.front_rows():
        lines.append("| " + " | ".join(_fmt(k, row.get(k)) for k, _ in cols) + " |")
    lines += ["", "## Configurations", ""]
    for r, v in p.front:
        lines += [
            f"### Trial {r.number}: {r.attrs.get('summary')} (`{r.attrs.get('arch_hash')}`)",
            "",
            ", ".join(f"{a.label} = {x:.6g}" for a, x in zip(p.axes, v)),
            "",
            f"Export: `{_export_cmd(p, r.number)}`",
            "",
            "```yaml",
            _resolved_yaml(r).rstrip(),
            "```",
            "",
        ]
    return "\n".join(lines)


def html_report(p: Pareto) -> str:
    from archsearch.analysis.plots import front_figure

    e = html.escape
    cols = _columns(p)
    facts = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in _facts(p))
    head = "".join(f"<th>{e(t)}</th>" for _, t in cols)
    body = "".join(
        "<tr>" + "".join(f"<td>{e(_fmt(k, row.get(k)))}</td>" for k, _ in cols) + "</tr>"
        for row in p.front_rows()
    )
    configs = "".join(
        f"<h3>Trial {r.number}: {e(str(r.attrs.get('summary')))} "
        f"(<code>{e(str(r.attrs.get('arch_hash')))}</code>)</h3>"
        f"<p>{e(', '.join(f'{a.label} = {x:.6g}' for a, x in zip(p.axes, v)))}</p>"
        f"<p>Export: <code>{e(_export_cmd(p, r.number))}</code></p>"
        f"<pre>{e(_resolved_yaml(r))}</pre>"
        for r, v in p.front
    )
    figure = front_figure(p).to_html(full_html=False, include_plotlyjs=False, div_id="front")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Pareto front of {e(p.study.name)} on {e(p.device)}</title>
<script src="plotly.min.js"></script>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1200px; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }}
pre {{ background: #f6f6f6; padding: 0.8em; font-size: 0.85em; }}
</style></head><body>
<h1>Pareto front of <code>{e(p.study.name)}</code> on <code>{e(p.device)}</code></h1>
<table>{facts}</table>
{figure}
<p><img src="front.png" alt="front" style="max-width: 100%"></p>
<p><img src="hypervolume.png" alt="hypervolume history"></p>
<h2>The front</h2>
<table><tr>{head}</tr>{body}</table>
<h2>Configurations</h2>
{configs}
</body></html>
"""


def print_front(p: Pareto, files: dict[str, Path]) -> None:
    """The front as a rich table, the facts under it, and where the files are."""
    from rich.markup import escape

    con = output.console()
    cols = _columns(p)
    rows = [[escape(_fmt(k, row.get(k))) for k, _ in cols] for row in p.front_rows()]
    con.print(
        output.table(
            f"Pareto front of {p.study.name} on {p.device} ({int(p.on_front.sum())} of "
            f"{len(p.trained)} fully trained)",
            [escape(t) for _, t in cols],
            rows,
        )
    )
    for k, v in _facts(p):
        if k in ("trials", "reference point", "hypervolume", "constraints"):
            con.print(escape(f"{k + ':':<17}{v}"))
    for k, path in files.items():
        con.print(escape(f"{k + ':':<17}{path}"))
