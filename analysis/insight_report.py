"""The files `archsearch insights` writes (insights.md, insights.html, insights.json and the
plots of every objective), and the "What the study learned" section of the front's report.
Printing them is the command line's (`archsearch.cli.analysis_cmd.insights_cmd`)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from archsearch.analysis.insight_plots import write_plots
from archsearch.analysis.insights import Insights, short_label

__all__ = ["default_insights_dir", "html_page", "markdown", "markdown_section", "write_insights"]

SECTION_LINES = 8  # statements per objective in the front report's section


def default_insights_dir(ins: Insights) -> Path:
    """`<run dir>/insights`; a study on a database server: `runs/insights/<study>/`."""
    home = ins.data.home
    return home / "insights" if home is not None else Path("runs") / "insights" / ins.data.name


def write_insights(ins: Insights, out: Path) -> dict[str, Path]:
    """Every objective's plots, insights.md, insights.html and insights.json under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    for k, o in enumerate(ins.objectives):
        files.update(write_plots(o, ins.design, out, k))
    files["report_md"] = out / "insights.md"
    files["report_md"].write_text(markdown(ins, files, out))
    files["report_html"] = out / "insights.html"
    files["report_html"].write_text(html_page(ins, files, out))
    files["json"] = out / "insights.json"
    files["json"].write_text(json.dumps(ins.summary(), indent=2, default=_plain) + "\n")
    return files


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else str(v)


def _figures(ins: Insights, files: dict[str, Path], out: Path, label: str) -> list[str]:
    return [
        files[key].relative_to(out).as_posix()
        for key in (f"importance_png:{label}", f"effects_png:{label}")
        if key in files
    ]


def markdown(ins: Insights, files: dict[str, Path], out: Path) -> str:
    lines = [f"# What `{ins.data.name}` learned", ""]
    for title, statements in ins.sections():
        lines += [f"## {title}", ""]
        lines += [f"- {s}" for s in statements] + [""]
        label = next((o.label for o in ins.objectives if short_label(o.label) == title), None)
        if label is not None:
            lines += [f"![{title}]({p})" for p in _figures(ins, files, out, label)] + [""]
    lines += [
        "## How these figures are made",
        "",
        f"- Intervals: 95% percentile bootstrap over {ins.resamples} resamples of the trials "
        "(a trial's seeds resampled where it has replicates; a predicted loss moved by its own "
        "1-sigma error). An effect whose interval covers 0 is not resolved at this budget.",
        "- Effects: a least-squares model of every parameter at once (a size or a time on the "
        "log scale, shown in %), each level against the parameter's reference level; a "
        "conditional parameter among the trials where it is active.",
        "- Importance: Optuna's fANOVA per objective, an inactive parameter as a level of its "
        "own ('-').",
        "- P(faster): how often the device profile's held-out predictions order two models "
        "right at that predicted ratio (`archsearch.latency.order`).",
        "",
    ]
    return "\n".join(lines)


def html_page(ins: Insights, files: dict[str, Path], out: Path) -> str:
    e = html.escape
    body = []
    for title, statements in ins.sections():
        body.append(f"<h2>{e(title)}</h2><ul>")
        body += [f"<li>{e(s)}</li>" for s in statements]
        body.append("</ul>")
        label = next((o.label for o in ins.objectives if short_label(o.label) == title), None)
        if label is not None:
            for kind in ("importance", "effects"):
                page = files.get(f"{kind}_html:{label}")
                if page is not None:
                    src = page.relative_to(out).as_posix()
                    body.append(
                        f'<p><a href="{e(src)}">interactive {kind} plot</a></p>'
                        f'<p><img src="{e(src[:-5])}.png" alt="{kind}" style="max-width: 100%"></p>'
                    )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>What {e(ins.data.name)} learned</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1100px; }}
li {{ margin: 0.25em 0; }}
</style></head><body>
<h1>What <code>{e(ins.data.name)}</code> learned</h1>
{"".join(body)}
</body></html>
"""


def markdown_section(ins: Insights) -> list[str]:
    """The front report's section: the headline statements of each objective and the front
    by factor, and where the full analysis is (`archsearch insights`)."""
    lines = ["## What the study learned", "", f"- {ins.design.describe()}"]
    for title, statements in ins.sections()[1:]:
        shown = statements[:SECTION_LINES]
        lines += ["", f"**{title}**", "", *[f"- {s}" for s in shown]]
        if len(statements) > len(shown):
            lines.append(f"- ... {len(statements) - len(shown)} more in `archsearch insights`")
    lines += [
        "",
        "Every objective's importances, effects and interactions, with their plots: "
        f"`archsearch insights study={ins.data.home or ins.data.name}`.",
        "",
    ]
    return lines
