"""Pictures of a front: a PNG (matplotlib) and an interactive HTML figure (plotly).

Every trial is drawn where its numbers allow: fully trained trials as filled circles (the front
ringed in black and joined by its staircase; with measured seed noise, points tied with a front
point within the noise ringed in grey, and error bars of +-1 standard error of the mean over
seeds on the training axis), infeasible ones as crosses, trials stopped early
as open circles, failed ones as open triangles. A trial that never trained has costs but no
loss: it sits in a grey band beyond the worst loss ("not trained"), at its cost. Colours are
the mixer family (hybrids such as `gla+gqa` are their own family) or, in the second panel / the
second view, the share of softmax-attention layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from archsearch.analysis.front import Axis, axis_title, display_scale, log_axis, points
from archsearch.analysis.front_table import LATENCIES, axis_error
from archsearch.analysis.pareto import Pareto
from archsearch.metrics import parse_label
from archsearch.study import TrialRecord
from archsearch.units import fmt_error

PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#637939",
    "#8c6d31",
    "#843c39",
    "#7b4173",
    "#3182bd",
)
OTHER_MARKERS = {  # group -> (matplotlib marker, plotly symbol, legend text)
    "infeasible": ("x", "x", "infeasible (breaks a constraint)"),
    "stopped_early": ("o", "circle-open", "stopped early"),
    "failed": ("v", "triangle-down-open", "failed / interrupted"),
}
STRIP = 0.12  # the "not trained" band sits this fraction of the range beyond the worst value
BAND_COLOUR = "#dddddd"
DOMINATED_STYLE = {"s": 34, "alpha": 0.6, "linewidths": 0}  # fully trained, not on the front
FRONT_STYLE = {"s": 90, "edgecolors": "black", "linewidths": 1.3, "zorder": 3}
TIED_COLOUR = "#8a8a8a"  # the ring of a point tied with a front point within the seed noise
TIED_STYLE = {"s": 90, "edgecolors": TIED_COLOUR, "linewidths": 1.3, "zorder": 3}
TIED_TEXT = "tied with the front within seed noise (grey ring)"


def family_colours(families: list[str]) -> dict[str, str]:
    """A stable colour per mixer family (sorted names, so every plot of a study agrees)."""
    return {f: PALETTE[i % len(PALETTE)] for i, f in enumerate(sorted(set(families)))}


def _family(r: TrialRecord) -> str:
    return str(r.attrs.get("family") or "unknown")


def _share(r: TrialRecord) -> float:
    v = r.attrs.get("attention_share")
    return float(v) if v is not None else float("nan")


def plotted(p: Pareto) -> Pareto:
    """What is drawn: a one-objective study against its trials' parameter counts (the front
    stays the best trial, and ties)."""
    if len(p.axes) != 1:
        return p
    x = Axis("params")
    objectives = p.study.objectives
    return replace(
        p,
        axes=[x, *p.axes],
        values=np.hstack([points(p.trained, [x], objectives), p.values]),
        other_values=np.hstack([points(p.others, [x], objectives), p.other_values]),
    )


@dataclass(frozen=True)
class AxisView:
    """How one axis is drawn: values divided by `scale`, `title` with the unit, `log` scale."""

    scale: float
    title: str
    log: bool


def axis_views(p: Pareto) -> list[AxisView]:
    """Per axis, from the values of every trial that has one: the unit the largest value reaches
    (KiB, MiB, GiB; GFLOP; K, M params) and a log scale for sizes and times spanning decades."""
    views = []
    for k, a in enumerate(p.axes):
        col = np.concatenate([p.values[:, k], p.other_values[:, k]])
        col = col[np.isfinite(col)]
        scale, _ = display_scale(a.label, col)
        views.append(AxisView(scale, axis_title(a.label, col), log_axis(a.label, col)))
    return views


def placed(p: Pareto, views: list[AxisView]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Display coordinates: (trained [n, d], others [m, d], which axes of others sit in the
    'not trained' band [m, d] bool); values scaled to display units; 2-D only places others
    with one unknown axis (in the band, beyond the worst value: on a log axis in log space)."""
    scale = np.array([v.scale for v in views])
    tv = p.values / scale
    ov = p.other_values / scale if len(p.others) else np.zeros((0, len(p.axes)))
    band = ~np.isfinite(ov)
    if len(p.axes) == 2 and len(ov):
        for k, axis in enumerate(p.axes):
            col = np.concatenate([tv[:, k], ov[:, k]])
            col = col[np.isfinite(col)]
            if len(col) == 0:
                continue
            if views[k].log:
                col = np.log10(col)
            lo, hi = col.min(), col.max()
            span = hi - lo if hi > lo else max(abs(hi), 1e-12)
            at = hi + STRIP * span if axis.direction == "minimize" else lo - STRIP * span
            ov[band[:, k], k] = 10**at if views[k].log else at
    keep = np.isfinite(ov).all(axis=1) & (band.sum(axis=1) <= 1)
    band[~keep] = False
    return tv, np.where(keep[:, None], ov, np.nan), band


def band_at(ov: np.ndarray, band: np.ndarray, k: int) -> float | None:
    """Where the 'not trained' band of axis k lies (None: no trial sits in it)."""
    rows = band[:, k]
    return float(ov[rows, k][0]) if rows.any() else None


def staircase(p: Pareto, pts: np.ndarray) -> tuple[np.ndarray, str]:
    """The front's points sorted by x, and the step style of its attainment boundary: each
    corner takes the worse x and the worse y of its two points, so horizontal-then-vertical
    ('post') when x is minimised, vertical-then-horizontal ('pre') when it is maximised."""
    order = np.argsort(pts[:, 0], kind="stable")
    return pts[order], "post" if p.axes[0].direction == "minimize" else "pre"


# ---- matplotlib ---------------------------------------------------------------------------------


def front_png(p: Pareto, path: Path) -> Path:
    """The front as a PNG (`front_mpl`)."""
    fig = front_mpl(p)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def front_mpl(p: Pareto):
    """The matplotlib Figure of `front_png`: two panels for two axes (colour by family | by
    attention share); for three axes the three pairwise projections coloured by family (front =
    non-dominated in all three). One legend below the panels names the marker kinds and the
    families that are drawn."""
    from matplotlib.figure import Figure

    p = plotted(p)
    views = axis_views(p)
    at = (views, *placed(p, views))
    colours = family_colours([_family(r) for r in p.trained + p.others])
    d = len(p.axes)
    pairs = [(0, 1), (0, 1)] if d == 2 else [(0, 1), (0, 2), (1, 2)]
    fig = Figure(figsize=(6.6 * len(pairs), 5.6))
    axs = fig.subplots(1, len(pairs), squeeze=False)
    drawn = {_family(r) for r in p.trained}
    groups_drawn: set[str] = set()
    banded = False
    for n, (i, j) in enumerate(pairs):
        by_share = d == 2 and n == 1
        families, groups, band = _front_panel(fig, axs[0][n], p, (i, j), by_share, colours, at)
        drawn |= families
        groups_drawn |= groups
        banded |= band
    handles = _front_legend(p, colours, drawn, groups_drawn, banded)
    ncol = min(5, len(handles))
    rows = -(-len(handles) // ncol)
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    fig.suptitle(title(p), fontsize=11)
    fig.tight_layout(rect=(0, (0.1 + 0.19 * rows) / fig.get_figheight(), 1, 1))
    return fig


def _front_panel(
    fig, ax, p: Pareto, pair: tuple[int, int], by_share: bool, colours: dict[str, str], at: tuple
) -> tuple[set[str], set[str], bool]:
    """One panel of `front_mpl`: the trained trials of axes `pair` (x, y) coloured by family
    or, `by_share`, by attention share, the front's error bars and (two axes) staircase, the
    other trials by their markers and the band of those not trained; `at`: the axes' views and
    where the trials are placed (`axis_views`, `placed`). Returns the families and marker groups
    of other trials it drew, and whether it drew a band."""
    i, j = pair
    d = len(p.axes)
    views, tv, ov, band = at
    if by_share:
        colour = np.array([_share(r) for r in p.trained])
        kw = {"cmap": "viridis", "vmin": 0.0, "vmax": 1.0}
    else:
        colour = np.array([colours[_family(r)] for r in p.trained], dtype=object)
        kw = {}
    strict = p.strict_front
    groups = [(~p.on_front, DOMINATED_STYLE), (strict, FRONT_STYLE)]
    if p.ties:
        groups.append((p.on_front & ~strict, TIED_STYLE))
    for rows, style in groups:
        sc = ax.scatter(tv[rows, i], tv[rows, j], c=list(colour[rows]), **kw, **style)
    bars = error_bars(p, tv, np.flatnonzero(p.on_front), views)
    if bars[i] is not None or bars[j] is not None:
        ax.errorbar(
            tv[p.on_front, i],
            tv[p.on_front, j],
            xerr=bars[i],
            yerr=bars[j],
            fmt="none",
            ecolor="black",
            elinewidth=0.8,
            alpha=0.5,
            zorder=1,
        )
    if d == 2:
        stairs, where = staircase(p, tv[strict][:, [i, j]])
        ax.step(stairs[:, 0], stairs[:, 1], where=where, color="black", lw=1, ls="--", zorder=2)
    families, groups_drawn, banded = set(), set(), False
    for group, (marker, _, _) in OTHER_MARKERS.items():
        rows = [k for k, r in enumerate(p.others) if p.group_of_other(r) == group]
        rows = [k for k in rows if np.isfinite(ov[k, [i, j]]).all()]
        if not rows:
            continue
        groups_drawn.add(group)
        families |= {_family(p.others[k]) for k in rows}
        col = ["#555555" if by_share else colours[_family(p.others[k])] for k in rows]
        style = {"facecolors": "none", "edgecolors": col} if marker != "x" else {"c": col}
        ax.scatter(
            ov[rows, i], ov[rows, j], marker=marker, s=40, alpha=0.8, linewidths=1.2, **style
        )
    for k, which in ((i, "x"), (j, "y")):
        if views[k].log:
            log_scale(ax, which)
    if d == 2:
        for k, horizontal in ((j, True), (i, False)):
            at = band_at(ov, band, k)
            if at is not None:
                _draw_band(ax, at, horizontal, ov[band[:, k]][:, i if horizontal else j])
                banded = True
    ax.set_xlabel(views[i].title + _error_note(p, p.axes[i].label), fontsize=9)
    ax.set_ylabel(views[j].title + _error_note(p, p.axes[j].label), fontsize=9)
    ax.grid(alpha=0.3)
    if by_share:
        fig.colorbar(sc, ax=ax, label="attention share (softmax layers / all)")
        ax.set_title("coloured by hybrid share (other trials grey)", fontsize=10)
    else:
        ax.set_title("coloured by mixer family", fontsize=10)
    return families, groups_drawn, banded


def _front_legend(
    p: Pareto, colours: dict[str, str], drawn: set[str], groups_drawn: set[str], banded: bool
) -> list:
    """The legend's entries of `front_mpl`: the front, the dominated, the tied, the seed bars,
    each marker group drawn, the band, and the families drawn."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    d = len(p.axes)
    grey = "#9a9a9a"
    front_text = "on the Pareto front (outlined" + (", dashed staircase)" if d == 2 else ")")
    handles = [
        Line2D(
            [],
            [],
            marker="o",
            ms=9,
            mfc=grey,
            mec="black",
            mew=1.3,
            color="black",
            ls="--" if d == 2 else "",
            label=front_text,
        ),
        Line2D(
            [],
            [],
            marker="o",
            ms=5,
            mfc=grey,
            mec=grey,
            alpha=0.6,
            ls="",
            label="fully trained, dominated",
        ),
    ]
    if p.ties:
        tied = {"mfc": grey, "mec": TIED_COLOUR, "mew": 1.3, "ls": "", "label": TIED_TEXT}
        handles.append(Line2D([], [], marker="o", ms=9, **tied))
    for label in seed_bar_axes(p):
        bar = {"ms": 12, "mew": 1, "color": "black", "ls": "", "label": seed_bar_text(p, label)}
        handles.append(Line2D([], [], marker="|", **bar))
    for group, (marker, _, text) in OTHER_MARKERS.items():
        if group in groups_drawn:
            face = {"mfc": "none"} if marker != "x" else {}
            handles.append(
                Line2D(
                    [],
                    [],
                    marker=marker,
                    ms=7,
                    mec="#555555",
                    color="#555555",
                    mew=1.2,
                    ls="",
                    label=text,
                    **face,
                )
            )
    if banded:
        handles.append(Patch(color=BAND_COLOUR, label="not trained (no loss): the grey band"))
    handles += [
        Line2D([], [], marker="o", ls="", ms=7, color=c, label=f"family {f}")
        for f, c in colours.items()
        if f in drawn
    ]
    return handles


def error_bars(
    p: Pareto, tv: np.ndarray, rows: np.ndarray, views: list[AxisView]
) -> list[np.ndarray | None]:
    """Per axis, the half-widths of the error bars of the trained points `rows` (`tv`: display
    coordinates of `p.trained`), in display units: a predicted latency's +-error (its device
    profile's), a training axis's +-1 standard error of the mean over seeds when the study's
    seed noise is measured; None for an axis that carries neither."""
    out = []
    for k, a in enumerate(p.axes):
        err, se = p.axis_errors.get(a.label), p.noise.std_error(a.label)
        if se is not None:
            out.append(se[rows] / views[k].scale)
        elif err is None or np.isnan(err).all():
            out.append(None)
        else:
            out.append(np.abs(tv[rows, k]) * np.nan_to_num(err[rows]))
    return out


def seed_bar_axes(p: Pareto) -> list[str]:
    """The axes that carry seed-noise error bars."""
    return [a.label for a in p.axes if p.noise.noisy(a.label) is not None]


def seed_bar_text(p: Pareto, label: str) -> str:
    """What an error bar on a training axis is, for the legend."""
    pooled = p.noise.noisy(label)
    sigma = f" {pooled.std:.2g}" if pooled is not None else ""
    return f"{parse_label(label)[0]} bars: +-1 std error, sigma/sqrt(n seeds) (sigma{sigma})"


def _error_note(p: Pareto, label: str) -> str:
    """' (+-14%)' after the title of a predicted-latency axis, ' (+-5-43% by working set)'
    where its trained points' errors differ (' (+-?)' when unvalidated)."""
    if parse_label(label)[0] not in LATENCIES:
        return ""
    errors = p.axis_errors.get(label)
    known = errors[np.isfinite(errors)] if errors is not None else np.array([])
    if len(known) and round(100 * known.min()) != round(100 * known.max()):
        return f" (+-{100 * known.min():.0f}-{100 * known.max():.0f}% by working set)"
    return f" ({fmt_error(known[0] if len(known) else axis_error(label))})"


def log_scale(ax, which: str, base: int = 10) -> None:
    """A log scale on axis `which` ('x' or 'y') of `ax`, its ticks written as plain numbers
    ('1', '10', '100', not '10^0') with faint grid lines at the minor ticks."""
    from matplotlib.ticker import FuncFormatter

    getattr(ax, f"set_{which}scale")("log", base=base)
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.grid(which="minor", axis=which, alpha=0.08)


def _draw_band(ax, at: float, horizontal: bool, along: np.ndarray) -> None:
    """The grey 'not trained' band at `at` (horizontal: a y value) with its label written on
    it in the widest gap between its markers (positions `along` the band)."""
    (ax.axhline if horizontal else ax.axvline)(at, color=BAND_COLOUR, lw=16, zorder=0)
    ax.autoscale_view()
    to_axes = ax.transData + ax.transAxes.inverted()
    xy = np.column_stack(
        [along, np.full(len(along), at)] if horizontal else [np.full(len(along), at), along]
    )
    k = 0 if horizontal else 1
    inside = np.clip(to_axes.transform(xy)[:, k], 0, 1) if len(along) else np.zeros(0)
    edges = np.concatenate([[0.0], np.sort(inside), [1.0]])
    gap = int(np.argmax(np.diff(edges)))
    if gap == 0:
        where, anchor = 0.01, "start"
    elif gap == len(edges) - 2:
        where, anchor = 0.99, "end"
    else:
        where, anchor = (edges[gap] + edges[gap + 1]) / 2, "center"
    text = {
        "s": "not trained",
        "fontsize": 9,
        "color": "#222222",
        "zorder": 0.5,
        "bbox": {"boxstyle": "round,pad=0.15", "fc": BAND_COLOUR, "ec": "none"},
    }
    if horizontal:
        ha = {"start": "left", "end": "right", "center": "center"}[anchor]
        ax.text(where, at, transform=ax.get_yaxis_transform(), va="center", ha=ha, **text)
    else:
        va = {"start": "bottom", "end": "top", "center": "center"}[anchor]
        ax.text(
            at, where, transform=ax.get_xaxis_transform(), ha="center", va=va, rotation=90, **text
        )


def title(p: Pareto) -> str:
    return (
        f"{p.study.name} on {p.device}: front of {int(p.on_front.sum())} among "
        f"{len(p.trained)} fully trained (of {len(p.study.records)} trials); "
        f"hypervolume {p.hypervolume:.4g}"
    )


def hypervolume_png(p: Pareto, path: Path) -> Path:
    """The hypervolume history as a PNG (`hypervolume_mpl`)."""
    fig = hypervolume_mpl(p)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def hypervolume_mpl(p: Pareto):
    """The hypervolume after each fully trained trial, against the reference point; the
    hypervolume is in the product of the axes' stored units (e.g. ms x nats/token)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.8, 4.2))
    ax = fig.subplots()
    if p.history:
        n, hv = zip(*p.history)
        ax.step(n, hv, where="post", marker="o", ms=3)
    units = [display_scale(a.label, [])[1] for a in p.axes]
    product = " × ".join(u or parse_label(a.label)[0] for a, u in zip(p.axes, units))
    ax.set_xlabel("trial number (a point per fully trained trial)")
    ax.set_ylabel(f"hypervolume ({product})")
    ref = ", ".join(f"{x:.4g} {u}".strip() for x, u in zip(p.reference, units))
    ax.set_title(
        f"hypervolume on {p.device} up to the reference point ({ref})\n"
        f"axes: {'; '.join(axis_title(a.label, []) for a in p.axes)}",
        fontsize=8,
    )
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


# ---- plotly -------------------------------------------------------------------------------------


def front_figure(p: Pareto):
    """The interactive figure: traces per mixer family, the front ('Pareto front', a staircase
    through exactly the front's points), the other trials by kind, and a second view coloured
    by attention share (buttons switch views)."""
    import plotly.graph_objects as go

    p = plotted(p)
    views = axis_views(p)
    tv, ov, band = placed(p, views)
    colours = family_colours([_family(r) for r in p.trained + p.others])
    hover = _Hover(p)
    traces = [
        *_family_traces(p, tv, colours, hover),
        _share_trace(p, tv, hover),
        _front_trace(p, tv, hover, views),
        *([_tied_trace(p, tv, hover, views)] if p.ties else []),
        *_other_traces(p, ov, colours, hover),
    ]
    scatter = go.Scatter if len(p.axes) == 2 else go.Scatter3d
    fig = go.Figure([scatter(**t) for t in traces])
    fig.update_layout(**_layout(p, views, ov, band, [t["meta"]["kind"] for t in traces]))
    return fig


class _Hover:
    """The hover texts of a figure's trials, each written once (a study can have 100,000)."""

    def __init__(self, p: Pareto) -> None:
        self.p = p
        self.notes = [_error_note(p, a.label) for a in p.axes]  # one profile read per axis
        self.trained = np.array(
            [
                self.text(
                    r,
                    v,
                    "front" if on else "trained",
                    [*self.order(k), *self.seeds(r)],
                    self.errors(k),
                )
                for k, (r, v, on) in enumerate(zip(p.trained, p.values, p.on_front))
            ],
            dtype=str,
        )

    def order(self, k: int) -> list[str]:
        """A front point's chance of being faster than the next slower one on each latency
        axis (`Pareto.faster_than_next`), beside the +- of each."""
        return [
            f"faster than #{nxt[k]} (next on the front) on {label}: P = {odds[k]:.2f}"
            for label, (nxt, odds) in self.p.faster_than_next.items()
            if nxt[k] >= 0
        ]

    def errors(self, k: int) -> list[str]:
        """Trained trial k's note per axis: ' (+-14%)' on a latency axis with its own error."""
        return [
            f" ({fmt_error(float(e[k]))})"
            if (e := self.p.axis_errors.get(a.label)) is not None and np.isfinite(e[k])
            else note
            for a, note in zip(self.p.axes, self.notes)
        ]

    def seeds(self, r: TrialRecord) -> list[str]:
        """A trained trial's seeds and standard errors, and its ties (measured noise only)."""
        cells = self.p.seed_cells(r)
        lines = [
            f"{a.label}: mean of {cells[f'{a.label}:seeds']} seeds, "
            f"s.e. {cells[f'{a.label}:std_error']:.2g}"
            for a in self.p.axes
            if f"{a.label}:seeds" in cells
        ]
        if cells.get("tied_with"):
            lines.append("tied with " + ", ".join(f"#{n}" for n in cells["tied_with"][:5]))
        return lines

    def text(
        self,
        r: TrialRecord,
        v: np.ndarray,
        group: str,
        extra: Sequence[str] = (),
        notes: Sequence[str] | None = None,
    ) -> str:
        from html import escape

        lines = [f"trial {r.number} ({group.replace('_', ' ')})", str(r.attrs.get("summary"))]
        lines.append(f"family {_family(r)}, attention share {_share(r):.2f}")
        for a, x, note in zip(self.p.axes, v, notes or self.notes):
            lines.append(
                f"{a.label} = {x:.5g}{note}" if np.isfinite(x) else f"{a.label}: not trained"
            )
        lines += extra
        if r.reason:
            lines.append(r.reason[:120])
        return "<br>".join(escape(line) for line in lines)


def _coords(points: np.ndarray) -> dict[str, np.ndarray]:
    """A trace's x, y (and z) from display coordinates [n, d]; arrays, which plotly takes
    without checking each element (lists of 100,000 points take seconds)."""
    return {
        name: np.ascontiguousarray(points[:, k]) for k, name in enumerate("xyz"[: points.shape[1]])
    }


def _family_traces(p: Pareto, tv: np.ndarray, colours: dict[str, str], hover: _Hover) -> list[dict]:
    """One trace per mixer family of the fully trained trials (the family view)."""
    families = [_family(r) for r in p.trained]
    traces = []
    for f in sorted(set(families)):
        rows = [k for k, x in enumerate(families) if x == f]
        traces.append(
            {
                **_coords(tv[rows]),
                "mode": "markers",
                "name": f,
                "legendgroup": f,
                "marker": {"color": colours[f], "size": _size(p, 9, 5), "opacity": 0.85},
                "hovertext": hover.trained[rows],
                "hoverinfo": "text",
                "meta": {"kind": "family", "trials": [p.trained[k].number for k in rows]},
            }
        )
    return traces


def _share_trace(p: Pareto, tv: np.ndarray, hover: _Hover) -> dict:
    """The fully trained trials coloured by attention share (the share view, hidden at first)."""
    return {
        **_coords(tv),
        "mode": "markers",
        "name": "attention share",
        "marker": {
            "color": np.array([_share(r) for r in p.trained], dtype=float),
            "colorscale": "Viridis",
            "cmin": 0.0,
            "cmax": 1.0,
            "size": _size(p, 9, 5),
            "colorbar": {"title": {"text": "attention<br>share"}},
        },
        "hovertext": hover.trained,
        "hoverinfo": "text",
        "visible": False,
        "meta": {"kind": "share", "trials": [r.number for r in p.trained]},
    }


def _front_trace(p: Pareto, tv: np.ndarray, hover: _Hover, views: list[AxisView]) -> dict:
    """The front's points ringed in black; in 2-D joined by its staircase (sorted by x). With
    measured seed noise, the points tied with it are `_tied_trace`'s."""
    order = np.flatnonzero(p.strict_front)
    if len(p.axes) == 2:
        order = order[np.argsort(tv[order, 0], kind="stable")]
        shape = {"post": "hv", "pre": "vh"}[staircase(p, tv[order])[1]]
        style = {
            "mode": "lines+markers",
            "line": {"color": "black", "dash": "dash", "shape": shape, "width": 1},
        }
    else:
        style = {"mode": "markers"}
    return {
        **_coords(tv[order]),
        **_error_arrays(p, tv, order, views),
        "name": "Pareto front",
        "marker": {
            "size": _size(p, 15, 8),
            "color": "rgba(0,0,0,0)",
            "line": {"color": "black", "width": 2},
            "symbol": "circle" if len(p.axes) == 2 else "circle-open",
        },
        "hovertext": hover.trained[order],
        "hoverinfo": "text",
        "meta": {"kind": "front", "trials": [p.trained[k].number for k in order]},
        **style,
    }


def _error_arrays(p: Pareto, tv: np.ndarray, rows: np.ndarray, views: list[AxisView]) -> dict:
    """A 2-D trace's error bars (`error_bars`) as plotly's `error_x` / `error_y`."""
    bars = error_bars(p, tv, rows, views) if len(p.axes) == 2 else [None, None]
    return {
        f"error_{name}": {"type": "data", "array": b.tolist(), "thickness": 1, "color": "black"}
        for name, b in zip("xy", bars)
        if b is not None
    }


def _tied_trace(p: Pareto, tv: np.ndarray, hover: _Hover, views: list[AxisView]) -> dict:
    """The points tied with the front within the seed noise, ringed in grey."""
    rows = np.flatnonzero(p.on_front & ~p.strict_front)
    return {
        **_coords(tv[rows]),
        **_error_arrays(p, tv, rows, views),
        "mode": "markers",
        "name": TIED_TEXT,
        "marker": {
            "size": _size(p, 15, 8),
            "color": "rgba(0,0,0,0)",
            "line": {"color": TIED_COLOUR, "width": 2},
            "symbol": "circle" if len(p.axes) == 2 else "circle-open",
        },
        "hovertext": hover.trained[rows],
        "hoverinfo": "text",
        "meta": {"kind": "tied", "trials": [p.trained[k].number for k in rows]},
    }


def _other_traces(p: Pareto, ov: np.ndarray, colours: dict[str, str], hover: _Hover) -> list[dict]:
    """The trials that are not fully trained and feasible, one trace per kind (both views)."""
    traces = []
    for group, (_, symbol, text) in OTHER_MARKERS.items():
        rows = [
            k
            for k, r in enumerate(p.others)
            if p.group_of_other(r) == group and np.isfinite(ov[k]).all()
        ]
        if not rows:
            continue
        traces.append(
            {
                **_coords(ov[rows]),
                "mode": "markers",
                "name": text,
                "marker": {
                    "symbol": symbol,
                    "size": _size(p, 9, 4),
                    "color": [colours[_family(p.others[k])] for k in rows],
                    "line": {"width": 1.5},
                },
                "hovertext": np.array(
                    [hover.text(p.others[k], p.other_values[k], group) for k in rows], dtype=str
                ),
                "hoverinfo": "text",
                "meta": {"kind": group, "trials": [p.others[k].number for k in rows]},
            }
        )
    return traces


def _size(p: Pareto, flat: int, deep: int) -> int:
    """A marker size: `flat` in a 2-D figure, `deep` in a 3-D one."""
    return flat if len(p.axes) == 2 else deep


def _layout(
    p: Pareto, views: list[AxisView], ov: np.ndarray, band: np.ndarray, kinds: list[str]
) -> dict:
    """Title, legend, axis titles (with units; log axes where sizes and times span decades),
    the view buttons and the 'not trained' bands; `kinds` are the traces' meta kinds, in
    order."""
    shapes, notes = _not_trained_bands(p, views, ov, band)
    buttons = [  # the family and the share view; the front and the other trials are in both
        {
            "label": label,
            "method": "update",
            "args": [{"visible": [k == want or k not in ("family", "share") for k in kinds]}],
        }
        for label, want in (
            ("colour: mixer family", "family"),
            ("colour: attention share", "share"),
        )
    ]
    layout = {
        "title": {"text": title(p), "font": {"size": 13}},
        "template": "plotly_white",
        "height": 700,
        # the legend below the plot, so the attention-share colour bar has the right side
        "legend": {
            "title": {
                "text": "; ".join(
                    ["ringed in black = on the Pareto front"]
                    + [seed_bar_text(p, label) for label in seed_bar_axes(p)]
                )
                + ":"
            },
            "font": {"size": 10},
            "orientation": "h",
            "x": 0,
            "y": -0.18,
            "yanchor": "top",
        },
        "margin": {"b": 150},
        "updatemenus": [
            {
                "type": "buttons",
                "direction": "right",
                "x": 0,
                "y": 1.08,
                "xanchor": "left",
                "buttons": buttons,
                "showactive": True,
            }
        ],
        "shapes": shapes,
        "annotations": notes,
    }
    titles = [{"title": {"text": v.title}, "type": "log" if v.log else "linear"} for v in views]
    if len(p.axes) == 2:
        layout["xaxis"], layout["yaxis"] = titles
    else:
        layout["scene"] = dict(zip(("xaxis", "yaxis", "zaxis"), titles))
    return layout


def _not_trained_bands(
    p: Pareto, views: list[AxisView], ov: np.ndarray, band: np.ndarray
) -> tuple[list, list]:
    """2-D only: grey bands where trials lacking a value sit (shapes, in data units), each
    labelled 'not trained' (annotations: plotly places them on a log axis by the log10 of the
    value)."""
    shapes: list[dict] = []
    notes: list[dict] = []
    if len(p.axes) != 2:
        return shapes, notes
    style = {"type": "rect", "fillcolor": BAND_COLOUR, "line": {"width": 0}, "layer": "below"}
    for k in (1, 0):
        at = band_at(ov, band, k)
        if at is None:
            continue
        col = np.concatenate([p.values[:, k], p.other_values[:, k]]) / views[k].scale
        col = col[np.isfinite(col)]
        if views[k].log:
            half = 0.4 * STRIP * max(np.log10(col.max() / col.min()), 1e-12)
            lo, hi, on_axis = at / 10**half, at * 10**half, np.log10(at)
        else:
            half = 0.4 * STRIP * max(col.max() - col.min(), 1e-12)
            lo, hi, on_axis = at - half, at + half, at
        note = {"text": "not trained", "showarrow": False, "font": {"size": 12, "color": "#222222"}}
        if k == 1:
            shapes.append(
                {**style, "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": lo, "y1": hi}
            )
            notes.append(
                {**note, "xref": "paper", "yref": "y", "x": 0.005, "y": on_axis, "xanchor": "left"}
            )
        else:
            shapes.append(
                {**style, "xref": "x", "yref": "paper", "x0": lo, "x1": hi, "y0": 0, "y1": 1}
            )
            notes.append(
                {
                    **note,
                    "xref": "x",
                    "yref": "paper",
                    "x": on_axis,
                    "y": 0.995,
                    "yanchor": "top",
                    "textangle": -90,
                }
            )
    return shapes, notes


def front_html(p: Pareto, path: Path) -> Path:
    """The interactive figure as a page; plotly.js is written once beside it (no network)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    front_figure(p).write_html(path, include_plotlyjs="directory", full_html=True)
    return path
