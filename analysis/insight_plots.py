"""Pictures of what a study learned, per objective: the importance of each parameter with its
interval (a bar chart), and the effect of each level against its reference with its interval
(a forest plot: a dot and a 95% whisker per level, resolved ones in colour, unresolved grey,
levels without an estimate listed with the reason). PNG (matplotlib) and interactive HTML
(plotly) of the same figures; each PNG writer has a function returning its Figure
(`importance_mpl`, `effects_mpl`) for the tests."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from archsearch.analysis.design import Design
from archsearch.analysis.insights import ObjectiveInsights, short_label

__all__ = [
    "effect_rows",
    "effects_figure",
    "effects_mpl",
    "importance_figure",
    "importance_mpl",
    "slug",
    "write_plots",
]

RESOLVED = "#1f77b4"
UNRESOLVED = "#9a9a9a"


def slug(label: str) -> str:
    """A file-name part for an objective: `decode_ms@rpi5` -> `decode_ms-rpi5`."""
    return re.sub(r"[^A-Za-z0-9_.]+", "-", short_label(label)).strip("-")


def effect_rows(o: ObjectiveInsights, d: Design) -> list[dict]:
    """The effects as drawn, top to bottom: label, estimate, interval, resolved, or the
    reason there is no estimate."""
    rows = []
    for e in o.effects:
        f = d.factor(e.factor)
        what = (
            f"{e.factor} {e.level}"
            if f.slope
            else f"{e.factor}: {f.level_text(e.level)} vs {f.level_text(e.reference)}"
        )
        rows.append(
            {
                "label": f"{what} (n={e.n})",
                "estimate": e.interval.estimate if e.interval else np.nan,
                "low": e.interval.low if e.interval else np.nan,
                "high": e.interval.high if e.interval else np.nan,
                "resolved": e.resolved,
                "why": "" if e.interval else e.status,
            }
        )
    return rows


def _unit_title(o: ObjectiveInsights) -> str:
    unit = o.observed.unit
    what = "change" if unit == "%" else "effect"
    return f"{what} on {short_label(o.label)} ({unit or 'its unit'}; 95% bootstrap interval)"


def _importance_title(o: ObjectiveInsights) -> str:
    """What the importance chart shows, or why it shows nothing yet."""
    trials = int(o.observed.has_value.sum())
    title = f"what matters for {short_label(o.label)} ({trials} trials)"
    if not o.importance and o.support.terms:
        title += f": not estimated yet, it takes at least {o.support.needed}"
    return title


def importance_mpl(o: ObjectiveInsights):
    """The fANOVA importances of `o` as horizontal bars with their 95% intervals."""
    from matplotlib.figure import Figure

    imp = list(reversed(o.importance))
    fig = Figure(figsize=(6.8, 0.9 + 0.38 * max(1, len(imp))))
    ax = fig.subplots()
    y = np.arange(len(imp))
    share = np.array([i.share for i in imp])
    lo = np.clip(share - np.array([i.low for i in imp]), 0, None)
    hi = np.clip(np.array([i.high for i in imp]) - share, 0, None)
    ax.barh(y, share, color=RESOLVED, alpha=0.8)
    ax.errorbar(share, y, xerr=np.vstack([lo, hi]), fmt="none", ecolor="black", capsize=3, lw=1)
    ax.set_yticks(y, [i.factor for i in imp], fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the objective's variance (fANOVA, Optuna), 95% bootstrap interval")
    ax.set_title(_importance_title(o), fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def effects_mpl(o: ObjectiveInsights, d: Design):
    """The main effects of `o`: a dot and whisker per level, resolved in colour."""
    from matplotlib.figure import Figure

    rows = list(reversed(effect_rows(o, d)))
    fig = Figure(figsize=(7.6, 1.0 + 0.36 * max(1, len(rows))))
    ax = fig.subplots()
    ax.axvline(0, color="black", lw=0.8)
    spans = [abs(v) for r in rows for v in (r["low"], r["high"]) if np.isfinite(v)]
    edge = max(spans, default=1.0)
    for k, r in enumerate(rows):
        if not np.isfinite(r["estimate"]):
            ax.text(0, k, f"  {r['why']}", va="center", fontsize=7, color=UNRESOLVED)
            continue
        colour = RESOLVED if r["resolved"] else UNRESOLVED
        ax.plot([r["low"], r["high"]], [k, k], color=colour, lw=2)
        ax.plot([r["estimate"]], [k], "o", color=colour, ms=5)
    ax.set_yticks(range(len(rows)), [r["label"] for r in rows], fontsize=7)
    ax.set_xlim(-1.15 * edge, 1.15 * edge)
    ax.set_xlabel(_unit_title(o), fontsize=8)
    ax.set_title(
        f"main effects on {short_label(o.label)} against each reference (grey: not resolved)",
        fontsize=9,
    )
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def importance_figure(o: ObjectiveInsights):
    """The interactive importance chart (plotly)."""
    import plotly.graph_objects as go

    imp = list(reversed(o.importance))
    share = [i.share for i in imp]
    fig = go.Figure(
        go.Bar(
            x=share,
            y=[i.factor for i in imp],
            orientation="h",
            error_x={
                "type": "data",
                "symmetric": False,
                "array": [max(i.high - i.share, 0) for i in imp],
                "arrayminus": [max(i.share - i.low, 0) for i in imp],
            },
            hovertext=[f"{i.share:.0%} (95%: {i.low:.0%}..{i.high:.0%})" for i in imp],
            hoverinfo="text",
            marker_color=RESOLVED,
        )
    )
    fig.update_layout(
        title=_importance_title(o),
        xaxis={"range": [0, 1], "title": "share of the objective's variance, 95% interval"},
        height=160 + 28 * len(imp),
        margin={"l": 160},
    )
    return fig


def effects_figure(o: ObjectiveInsights, d: Design):
    """The interactive effect plot (plotly)."""
    import plotly.graph_objects as go

    rows = [r for r in reversed(effect_rows(o, d)) if np.isfinite(r["estimate"])]
    traces = []
    kinds = ((True, RESOLVED, "resolved"), (False, UNRESOLVED, "not resolved"))
    for resolved, colour, name in kinds:
        sel = [r for r in rows if r["resolved"] == resolved]
        traces.append(
            go.Scatter(
                x=[r["estimate"] for r in sel],
                y=[r["label"] for r in sel],
                mode="markers",
                name=name,
                marker={"color": colour, "size": 8},
                error_x={
                    "type": "data",
                    "symmetric": False,
                    "array": [r["high"] - r["estimate"] for r in sel],
                    "arrayminus": [r["estimate"] - r["low"] for r in sel],
                },
            )
        )
    fig = go.Figure(traces)
    fig.add_vline(x=0, line_color="black", line_width=1)
    fig.update_layout(
        title=f"main effects on {short_label(o.label)}",
        xaxis={"title": _unit_title(o)},
        height=180 + 26 * len(rows),
        margin={"l": 260},
    )
    return fig


def write_plots(o: ObjectiveInsights, d: Design, out: Path, index: int) -> dict[str, Path]:
    """importance and effects, PNG and HTML, named after the objective."""
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{index:02d}-{slug(o.label)}"
    files = {}
    for kind, mpl, figure in (
        ("importance", lambda: importance_mpl(o), lambda: importance_figure(o)),
        ("effects", lambda: effects_mpl(o, d), lambda: effects_figure(o, d)),
    ):
        if kind == "importance" and not o.importance:
            continue
        png, page = out / f"{kind}-{stem}.png", out / f"{kind}-{stem}.html"
        mpl().savefig(png, dpi=110)
        figure().write_html(page, include_plotlyjs="directory", full_html=True)
        files[f"{kind}_png:{o.label}"] = png
        files[f"{kind}_html:{o.label}"] = page
    return files
