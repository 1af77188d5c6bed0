"""The front as text, shared by the report files, the dashboard page and the console table:
the columns and their cells, the facts stated with the front, the seed noise and the cheap
signals in words, and the command that exports a trial."""

from __future__ import annotations

import math
from typing import Any

from archsearch.analysis.front import LATENCIES, display_scale
from archsearch.analysis.noise import ALPHA
from archsearch.analysis.pareto import Pareto
from archsearch.metrics import MetricSpec, parse_label
from archsearch.study import redact
from archsearch.units import fmt_error, human

__all__ = [
    "LATENCIES",
    "SHOWN_CONFIGS",
    "SHOWN_ROWS",
    "axis_error",
    "export_command",
    "format_cell",
    "front_columns",
    "front_facts",
    "latency_note",
    "proxy_table",
    "row_cell",
    "seed_noise_lines",
    "shown_note",
]


# a cluster study's front can hold tens of thousands of architectures: tables show the first
# rows by the first axis (front.json and `archsearch export` have every one)
SHOWN_ROWS = 200
SHOWN_CONFIGS = 50  # full configurations in the report
PLAIN = ": each point is one seed, the front uses plain dominance"  # without replicates


def shown_note(p: Pareto, shown: int) -> str | None:
    """What a table of the first `shown` front members leaves out (None: nothing)."""
    n = int(p.on_front.sum())
    if n <= shown:
        return None
    return (
        f"showing the first {shown} of the {n} front members by {p.axes[0].label}; front.json "
        "lists every one"
    )


def front_columns(p: Pareto) -> list[tuple[str, str]]:
    """(row key, column title) of the front table."""
    kv = parse_label(p.kv_label)[1]
    return [
        ("trial", "trial"),
        ("summary", "architecture"),
        ("family", "family"),
        ("attention_share", "attn share"),
        *[(a.label, a.label) for a in p.axes],
        *[
            (f"{a.label}:predicted_std", "predicted +-1 sigma")
            for a in p.axes
            if _predicted(a.label)
        ],
        *[
            (f"{label}:faster_than_next", f"P(faster than next) {parse_label(label)[0]}")
            for label in p.faster_than_next
        ],
        *seed_columns(p),
        ("params", "params"),
        ("active_params", "active"),
        (p.kv_label, f"KV/state @{kv.get('context', '?')} ({kv.get('bits', 16)}-bit)"),
    ]


def _predicted(label: str) -> bool:
    """Whether an axis is a loss predicted at another budget (`val_loss[tokens=100M]`)."""
    try:
        return MetricSpec.parse(label).predicted_at is not None
    except ValueError:
        return False


def seed_columns(p: Pareto) -> list[tuple[str, str]]:
    """With measured seed noise: per noisy axis the standard error of each point's mean and
    its seeds, and the points each one is tied with (`Pareto.seed_cells`); else none."""
    if not p.noise.measured:
        return []
    cols = []
    for a in p.axes:
        if p.noise.noisy(a.label) is not None:
            name = parse_label(a.label)[0]
            cols += [(f"{a.label}:std_error", f"{name} +- s.e."), (f"{a.label}:seeds", "seeds")]
    return [*cols, ("tied_with", "tied with")]


def axis_error(label: str) -> float | None:
    """The relative error a predicted latency (`decode_ms[rpi5,...]`) carries: its device
    profile's held-out error (`archsearch.cost.devices.latency_error`); None for other
    metrics and where the profile has no check at its precision."""
    from archsearch.latency import spec_error

    try:
        spec = MetricSpec.parse(label)
    except ValueError:
        return None
    return spec_error(spec)


def latency_note(p: Pareto) -> str | None:
    """How the latencies on the axes were obtained and what their +- means (None: no latency
    axis)."""
    from archsearch.cost.devices import describe_error
    from archsearch.latency import load_device

    devices = []
    for a in p.axes:
        name, args = parse_label(a.label)
        if name in LATENCIES:
            devices.append(args.get("device", p.device))
    if not devices:
        return None
    return " | ".join(describe_error(load_device(d)) for d in dict.fromkeys(devices))


def row_cell(label: str, row: dict[str, Any]) -> str:
    """`format_cell` of a front row's column `label` (a latency with the row's own error)."""
    return format_cell(label, row.get(label), row.get(f"{label}:error"))


def format_cell(label: str, v: Any, error: float | None = None) -> str:
    """One cell of the column `label`: counts and bytes in human units, '-' when unknown;
    a standard error as '+-0.012', the points a point is tied with as '#3, #7'; a predicted
    latency with its relative `error` (the row's `<label>:error`), else its profile's."""
    if label == "tied_with":
        shown = ", ".join(f"#{n}" for n in (v or [])[:3])
        return (shown + (f" +{len(v) - 3} more" if len(v) > 3 else "")) if v else "-"
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if label.endswith(":faster_than_next"):  # [next trial, P(this one is faster)]
        return f"{v[1]:.2f} vs #{v[0]}" if v[1] is not None else "-"
    if label.endswith((":std_error", ":predicted_std")):
        return f"+-{v:.2g}"
    if label.endswith(":seeds"):
        return str(int(v))
    name = parse_label(label)[0]
    if name in ("params", "active_params", "non_embedding_params"):
        return human(v)
    if "bytes" in name:
        return human(v, "B")
    if name in LATENCIES:
        return f"{v:.4g} {fmt_error(error if error is not None else axis_error(label))}"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def export_command(p: Pareto, trial: int) -> str:
    """The `archsearch export` command line of one trial of the study."""
    where = str(p.study.home) if p.study.home is not None else redact(p.study.url)
    return f"archsearch export study={where} study_name={p.study.name} trial={trial}"


def front_facts(p: Pareto) -> list[tuple[str, str]]:
    """(name, value) of what the front was computed from and what it came to."""
    meta = p.study.meta
    ref_how = {
        "reference=": "given with reference=",
        "study": "fixed when the study was created ("
        + (meta.get("reference_source") or "stored")
        + "): later trials and reruns never move it",
        "data": "this study stores none for these axes (written before schema 2, or other "
        "axes): the worst value of each axis over the fully trained trials, moved out by 10% "
        "of the axis's range, so it moves as trials are added",
    }[p.reference_source]
    return [
        ("study", f"{p.study.name} ({redact(p.study.url)})"),
        ("search space", f"{meta.get('space', '?')} ({meta.get('space_source', '?')})"),
        ("device", f"{p.device} (the sweep's own: {meta.get('device', '?')})"),
        ("trials", ", ".join(f"{k} {v}" for k, v in p.status_counts().items())),
        *([("unreadable", p.study.unreadable_note())] if p.study.unreadable else []),
        ("axes", ", ".join(f"{a.label} ({a.direction})" for a in p.axes)),
        ("constraints", "; ".join(meta.get("constraints", [])) or "none"),
        ("front", f"{int(p.on_front.sum())} of {len(p.trained)} fully trained architectures"),
        ("reference point", f"({', '.join(f'{x:.6g}' for x in p.reference)}): {ref_how}"),
        ("hypervolume", f"{p.hypervolume:.6g} (in the axes' stored units: bytes, ms, nats...)"),
        ("latency error", latency_note(p) or "no latency axis"),
        ("seed noise", p.noise.describe() + ("" if p.noise.replicates else PLAIN)),
        *[
            (
                "predicted loss",
                f"{a.label}: "
                + (
                    p.corrected.get(a.label)
                    or "each trial's sandbox curve extrapolated by the annealing law (the "
                    "study holds no confirmation at this budget; `archsearch confirm` measures "
                    "the error)"
                ),
            )
            for a in p.axes
            if _predicted(a.label)
        ],
        ("training recipe", training_recipe(meta.get("train") or {})),
        *([("learning rates", rates)] if (rates := rate_search_note(p.trained)) else []),
        (
            "cost conventions",
            "params count every weight (embeddings once when tied); FLOPs count a multiply-add "
            "as 2; cache_bytes is the KV cache or recurrent state at the stated context and bits; "
            "latencies are the cost model's predictions for the device (ms) unless measured",
        ),
    ]


def training_recipe(train: dict) -> str:
    """The sweep's sandbox-training settings in one line (budget, corpus, tokenizer, sequence
    length, batch, lr, schedule, seed); losses are in nats/token."""
    if not train:
        return "not stored in this study"
    from archsearch.trainers.config import TrainConfig

    c = TrainConfig.from_dict(train).to_dict()
    corpus = ", ".join(c.get("data") or []) or "the embedded standard-library corpus"
    lr = f"lr {c['lr']:g}" if c.get("lr_search", "off") == "off" else "lr searched per trial"
    return (
        f"budget {c['budget']} per trial; corpus {corpus}; tokenizer {c['tokenizer']}; "
        f"sequence length {c['seq_len']}; batch {c['batch_size']}; {lr} "
        f"({c['schedule']} schedule, warmup {c['warmup']:g}); seed {c['seed']}; "
        "val_loss in nats/token"
    )


def rate_search_note(records) -> str:
    """How the trained trials' learning rates were found (`train.lr_search`): the rates chosen
    and the compute the searches added to the trials' own; "" when no trial searched."""
    searches = [r.attrs.get("lr_search") for r in records]
    searches = [s for s in searches if isinstance(s, dict) and s.get("chosen")]
    if not searches:
        return ""
    chosen: dict[float, int] = {}
    for s in searches:
        chosen[float(s["chosen"])] = chosen.get(float(s["chosen"]), 0) + 1
    spent = sum(float(s.get("flops") or 0) for s in searches)
    own = sum(float((r.attrs.get("budget") or {}).get("flops") or 0) for r in records)
    grid = ", ".join(f"{lr:g}" for lr in searches[0].get("grid", []))
    counts = ", ".join(f"{lr:g} x{n}" for lr, n in sorted(chosen.items()))
    share = f"{spent / own:.0%}" if own > 0 else "an unknown share"
    return (
        f"each trial's peak rate searched by successive halving over {grid} "
        f"({len(searches)} trials; chosen: {counts}); the searches added {share} to the "
        f"trained trials' training FLOPs ({spent:.3g} FLOPs)"
    )


def seed_noise_lines(p: Pareto) -> list[str]:
    """The seed noise in words (the report's "Seed noise" section): the pooled std per
    training axis, its degrees of freedom and architectures, the test and its thresholds, what
    an error bar is, and the ties; one line when it was not measured."""
    if not p.noise.measured:
        return [p.noise.describe() + ("" if p.noise.replicates else PLAIN)]
    lines = []
    for a in p.axes:
        pooled = p.noise.noisy(a.label)
        if pooled is None:
            continue
        unit = f" {display_scale(a.label)[1]}".rstrip()
        lines.append(
            f"{a.label}: pooled seed std {pooled.std:.3g}{unit} with {pooled.dof} degrees of "
            f"freedom from {pooled.architectures} replicated architectures; t_0.95 = "
            f"{pooled.t:.3g}: a difference of means must exceed {pooled.threshold(1, 1):.3g}"
            f"{unit} between two single-seed points, {pooled.threshold(3, 3):.3g}{unit} "
            "between two 3-seed points"
        )
    lines += [
        f"{p.noise.replicates} replicate trials of {p.noise.replicated_architectures()} "
        "architectures (the trained trial itself is the first seed).",
        f"Test: a one-sided two-sample Student t test with pooled variance at {ALPHA:.0%}. A "
        "point dominates another when it is at least as good on every axis by its mean and "
        "better on one, and on each training axis where its mean is better the difference "
        "exceeds t_0.95,dof x sigma x sqrt(1/n_A + 1/n_B); cost axes are exact. Dominating by "
        "means but within the noise is a tie: the dominated point stays on the front.",
        "Seed noise is taken to be the same for every architecture of the study (a few seeds "
        "give one architecture's spread too poorly), so a point trained once carries +-sigma.",
        "Error bars and +- columns: +-1 standard error of the mean, sigma / sqrt(n) over the "
        "point's n seeds.",
    ]
    ties = {n: by for n, by in p.ties.items() if by}
    if ties:
        listed = "; ".join(
            f"#{n} tied with {format_cell('tied_with', by)}" for n, by in sorted(ties.items())
        )
        points = "1 front point is" if len(ties) == 1 else f"{len(ties)} front points are"
        lines.append(f"{points} tied within the noise: {listed}.")
    else:
        lines.append("No ties: every point dominated by means is dominated beyond the noise.")
    return lines


def proxy_table(p: Pareto) -> tuple[list[str], list[list[str]], list[str]]:
    """The cheap signals against the sandbox training objectives (`Pareto.proxies`): (column
    titles, rows, findings in words)."""
    px = p.proxies

    def num(v: float) -> str:
        return f"{v:+.2f}" if math.isfinite(v) else "-"

    rows = [[c.objective, c.signal, str(c.n), num(c.spearman), num(c.kendall)] for c in px.rows]
    titles = ["training objective", "cheap signal", "trials", "Spearman rho", "Kendall tau"]
    return titles, rows, px.lines()
