"""The files `archsearch pareto` and a finished sweep write: the plots, a Markdown and an HTML
report listing the front's full configurations and what the study learned (its section of
`archsearch.analysis.insights`), and front.json. Printing them is the command
line's (`archsearch.cli.analysis_cmd.print_front`)."""

from __future__ import annotations

import hashlib
import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from archsearch.analysis import confirm, plots
from archsearch.analysis.front_table import (
    SHOWN_CONFIGS,
    SHOWN_ROWS,
    export_command,
    front_columns,
    front_facts,
    proxy_table,
    row_cell,
    seed_noise_lines,
    shown_note,
)
from archsearch.analysis.insight_report import SECTION_LINES, markdown_section
from archsearch.analysis.insights import Insights, insights
from archsearch.analysis.pareto import Pareto, analyse, choose_axes
from archsearch.arch import ArchConfig
from archsearch.errors import UserError
from archsearch.metrics import parse_label
from archsearch.study import StudyData, TrialRecord, load

REPORT_RESAMPLES = 200  # the report's section: `archsearch insights` takes more
REPORT_IMPORTANCE_RESAMPLES = 10

__all__ = [
    "SweepFront",
    "default_out_dir",
    "html_report",
    "markdown_report",
    "write_outputs",
    "write_sweep_front",
]


@dataclass
class SweepFront:
    """A finished sweep's front on its own device and the files written for it."""

    study: StudyData
    pareto: Pareto | None  # None: no front yet, `note` says why
    files: dict[str, Path] = field(default_factory=dict)
    note: str = ""


def write_sweep_front(storage: str, study_name: str, run_dir: str, device: str) -> SweepFront:
    """After a sweep: its front on the sweep's device, the plots and reports written under
    `<run dir>/pareto/<device>/` (nothing written while no trial is fully trained)."""
    data = load(storage, study_name)
    data.home = Path(run_dir)
    axes, _ = choose_axes(data, device, None, None, None)
    try:
        p = analyse(data, device, axes)
    except UserError as err:  # nothing trained yet: no front, no plots
        return SweepFront(data, None, note=str(err))
    return SweepFront(data, p, write_outputs(p, default_out_dir(p)))


def default_out_dir(p: Pareto) -> Path:
    """`<run dir>/pareto/<device>` (other axes: a sub-folder named after them); a study on a
    database server writes under `runs/pareto/<study>/` of the working directory."""
    base = p.study.home if p.study.home is not None else Path("runs") / "pareto" / p.study.name
    device = Path(p.device).stem  # a profile given by path: its file name, inside `base`
    base = base / "pareto" / device if p.study.home is not None else base / device
    if p.default_axes:
        return base
    names = "-vs-".join(parse_label(a.label)[0] for a in p.axes)
    digest = hashlib.sha256("|".join(a.label for a in p.axes).encode()).hexdigest()[:6]
    return base / f"{names}-{digest}"


def learned(p: Pareto) -> Insights | None:
    """What the study learned, for the report's section: effects with `REPORT_RESAMPLES`
    resamples, importances with `REPORT_IMPORTANCE_RESAMPLES` (`archsearch insights` takes
    more); None where it cannot say (no searched parameter stored)."""
    try:
        return insights(
            p.study,
            [p.device],
            fronts=[p.device],
            resamples=REPORT_RESAMPLES,
            importance_resamples=REPORT_IMPORTANCE_RESAMPLES,
        )
    except UserError:
        return None


def write_outputs(p: Pareto, out_dir: Path) -> dict[str, Path]:
    """front.png, front.html, hypervolume.png, report.md, report.html and front.json."""
    out_dir.mkdir(parents=True, exist_ok=True)
    study = learned(p)
    files = {
        "png": plots.front_png(p, out_dir / "front.png"),
        "html": plots.front_html(p, out_dir / "front.html"),
        "hypervolume_png": plots.hypervolume_png(p, out_dir / "hypervolume.png"),
    }
    files["report_md"] = out_dir / "report.md"
    files["report_md"].write_text(markdown_report(p, study))
    files["report_html"] = out_dir / "report.html"
    files["report_html"].write_text(html_report(p, study))
    files["json"] = out_dir / "front.json"
    summary = {**p.summary(), "proxies": p.proxies.summary()}
    files["json"].write_text(json.dumps(summary, indent=2, default=_jsonable) + "\n")
    return files


def _learned_html(study: Insights | None) -> str:
    if study is None:
        return ""
    e = html.escape
    parts = ["<h2>What the study learned</h2>"]
    for title, lines in study.sections():
        parts.append(f"<h3>{e(title)}</h3><ul>")
        parts += [f"<li>{e(line)}</li>" for line in lines[:SECTION_LINES]]
        parts.append("</ul>")
    return "".join(parts)


def _jsonable(v: Any) -> Any:
    return v.tolist() if hasattr(v, "tolist") else str(v)


def _resolved_yaml(r: TrialRecord) -> str:
    """The trial's architecture, resolved, as YAML; a comment where the study does not store
    one that reads (a study written by another tool)."""
    arch = r.attrs.get("arch")
    if arch is None:
        return "# the study stores no architecture for this trial\n"
    try:
        return ArchConfig.from_dict(arch).resolved().to_yaml()
    except UserError as err:
        return f"# the stored architecture does not read as one: {err}\n"


def markdown_report(p: Pareto, study: Insights | None = None) -> str:
    cols = front_columns(p)
    lines = [f"# Pareto front of `{p.study.name}` on `{p.device}`", ""]
    lines += [f"- **{k}**: {v}" for k, v in front_facts(p)]
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
    for row in p.front_rows(SHOWN_ROWS):
        lines.append("| " + " | ".join(row_cell(k, row) for k, _ in cols) + " |")
    note = shown_note(p, SHOWN_ROWS)
    lines += ["", note or ""]
    if p.noise.measured:
        lines += ["## Seed noise", "", *[f"- {line}" for line in seed_noise_lines(p)], ""]
    titles, proxy_rows, findings = proxy_table(p)
    lines += ["## Cheap signals against the sandbox loss", ""]
    lines += [f"- {line}" for line in findings] + ["", "| " + " | ".join(titles) + " |"]
    lines += ["|" + "---|" * len(titles)] + ["| " + " | ".join(r) + " |" for r in proxy_rows]
    lines += ["", *confirm.markdown_section(p.study)]
    if study is not None:
        lines += markdown_section(study)
    lines += ["## Configurations", ""]
    if shown_note(p, SHOWN_CONFIGS):
        lines += [f"The first {SHOWN_CONFIGS}; `archsearch export` writes any other.", ""]
    for r, v in p.front[:SHOWN_CONFIGS]:
        lines += [
            f"### Trial {r.number}: {r.attrs.get('summary')} (`{r.attrs.get('arch_hash')}`)",
            "",
            ", ".join(f"{a.label} = {x:.6g}" for a, x in zip(p.axes, v)),
            "",
            f"Export: `{export_command(p, r.number)}`",
            "",
            "```yaml",
            _resolved_yaml(r).rstrip(),
            "```",
            "",
        ]
    return "\n".join(lines)


def html_report(p: Pareto, study: Insights | None = None) -> str:
    e = html.escape
    cols = front_columns(p)
    facts = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in front_facts(p))
    head = "".join(f"<th>{e(t)}</th>" for _, t in cols)
    body = "".join(
        "<tr>" + "".join(f"<td>{e(row_cell(k, row))}</td>" for k, _ in cols) + "</tr>"
        for row in p.front_rows(SHOWN_ROWS)
    )
    body_note = f"<p>{e(shown_note(p, SHOWN_ROWS) or '')}</p>"
    configs = "".join(
        f"<h3>Trial {r.number}: {e(str(r.attrs.get('summary')))} "
        f"(<code>{e(str(r.attrs.get('arch_hash')))}</code>)</h3>"
        f"<p>{e(', '.join(f'{a.label} = {x:.6g}' for a, x in zip(p.axes, v)))}</p>"
        f"<p>Export: <code>{e(export_command(p, r.number))}</code></p>"
        f"<pre>{e(_resolved_yaml(r))}</pre>"
        for r, v in p.front[:SHOWN_CONFIGS]
    )
    figure = plots.front_figure(p).to_html(full_html=False, include_plotlyjs=False, div_id="front")
    noise = (
        "<h2>Seed noise</h2><ul>"
        + "".join(f"<li>{e(line)}</li>" for line in seed_noise_lines(p))
        + "</ul>"
        if p.noise.measured
        else ""
    )
    titles, proxy_rows, findings = proxy_table(p)
    proxies = (
        "<h2>Cheap signals against the sandbox loss</h2><ul>"
        + "".join(f"<li>{e(line)}</li>" for line in findings)
        + "</ul><table><tr>"
        + "".join(f"<th>{e(t)}</th>" for t in titles)
        + "</tr>"
        + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in proxy_rows)
        + "</table>"
    )
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
{body_note}
{noise}
{proxies}
{confirm.html_section(p.study)}
{_learned_html(study)}
<h2>Configurations</h2>
{configs}
</body></html>
"""
