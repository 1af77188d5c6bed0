"""The front as text, shared by the report files, the dashboard page and the console table:
the columns and their cells, the facts stated with the front, and the command that exports a
trial."""

from __future__ import annotations

import math
from typing import Any

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
    "shown_note",
]

LATENCIES = ("ttft_ms", "decode_ms", "e2e_ms")  # predicted latencies: shown with their error

# a cluster study's front can hold tens of thousands of architectures: tables show the first
# rows by the first axis (front.json and `archsearch export` have every one)
SHOWN_ROWS = 200
SHOWN_CONFIGS = 50  # full configurations in the report


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
        ("params", "params"),
        ("active_params", "active"),
        (p.kv_label, f"KV/state @{kv.get('context', '?')} ({kv.get('bits', 16)}-bit)"),
    ]


def axis_error(label: str) -> float | None:
    """The relative error a predicted latency (`decode_ms[rpi5,...]`) carries: its device
    profile's held-out error (`archsearch.cost.devices.latency_error`); None for other
    metrics and for profiles without validation figures."""
    from archsearch.cost.devices import spec_error

    try:
        spec = MetricSpec.parse(label)
    except ValueError:
        return None
    return spec_error(spec)


def latency_note(p: Pareto) -> str | None:
    """How the latencies on the axes were obtained and what their +- means (None: no latency
    axis)."""
    from archsearch.cost.devices import describe_error, load_device

    devices = []
    for a in p.axes:
        name, args = parse_label(a.label)
        if name in LATENCIES:
            devices.append(args.get("device", p.device))
    if not devices:
        return None
    return " | ".join(describe_error(load_device(d)) for d in dict.fromkeys(devices))


def format_cell(label: str, v: Any) -> str:
    """One cell of the column `label`: counts and bytes in human units, '-' when unknown."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    name = parse_label(label)[0]
    if name in ("params", "active_params", "non_embedding_params"):
        return human(v)
    if "bytes" in name:
        return human(v, "B")
    if name in LATENCIES:
        return f"{v:.4g} {fmt_error(axis_error(label))}"
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
        ("axes", ", ".join(f"{a.label} ({a.direction})" for a in p.axes)),
        ("constraints", "; ".join(meta.get("constraints", [])) or "none"),
        ("front", f"{int(p.on_front.sum())} of {len(p.trained)} fully trained architectures"),
        ("reference point", f"({', '.join(f'{x:.6g}' for x in p.reference)}): {ref_how}"),
        ("hypervolume", f"{p.hypervolume:.6g} (in the axes' stored units: bytes, ms, nats...)"),
        ("latency error", latency_note(p) or "no latency axis"),
        ("training recipe", training_recipe(meta.get("train") or {})),
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
    return (
        f"budget {c['budget']} per trial; corpus {corpus}; tokenizer {c['tokenizer']}; "
        f"sequence length {c['seq_len']}; batch {c['batch_size']}; lr {c['lr']:g} "
        f"({c['schedule']} schedule, warmup {c['warmup']:g}); seed {c['seed']}; "
        "val_loss in nats/token"
    )
