"""The metric vocabulary: what a space can constrain or optimise, a study stores and an axis
shows; labels printed and parsed in one place.

A metric is a name plus arguments, for example `decode_ms` on device `rpi5` at context 2048 in q4.
Cost metrics (params, bytes, FLOPs, predicted latency) are known before training and are
evaluated by `archsearch.cost`; training metrics (validation loss, probe accuracy) come from the
sandbox trial. Constraints bound a metric (`max:` / `min:`); objectives minimise or maximise one.

```yaml
constraints:
  - {metric: params, max: 20M}
  - {metric: cache_bytes, max: 64MiB, context: 4096, bits: 8}
  - {metric: decode_ms, max: 40, device: rpi5, context: 2048, precision: q4}
objectives:
  - {metric: val_loss, direction: minimize}
  - {metric: decode_ms, direction: minimize, device: rpi5}
```

A metric that takes a device and names none uses the run's device (`device=` on the command);
`MetricSpec.on_device` is "this metric on device X". A spec's `label`
(`decode_ms[rpi5,context=2048,precision=q4]`) names it in studies, tables and plots;
`parse_label` / `MetricSpec.parse` read a label back (also the command line's
`decode_ms@rpi5@context:2048`). Cost metrics are evaluated by the evaluators registered in
`archsearch.cost`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from archsearch.errors import UserError

__all__ = [
    "CACHE_BITS",
    "MARGINS",
    "MARGIN_METRICS",
    "METRICS",
    "PRECISIONS",
    "PROBE_TASKS",
    "Constraint",
    "MetricDef",
    "MetricSpec",
    "Objective",
    "check_argument",
    "count_text",
    "parse_constraints",
    "parse_label",
    "parse_objectives",
    "parse_quantity",
    "typed_value",
]

PRECISIONS = ("fp32", "bf16", "fp16", "q8", "q4")
CACHE_BITS = (32, 16, 8, 4)


@dataclass(frozen=True)
class MetricDef:
    phase: str  # "cost" (known before training) or "train" (from the sandbox trial)
    unit: str  # count, bytes, flops, ms, nats, fraction
    args: dict[str, Any]  # allowed arguments and their defaults (None: the run's device)
    help: str
    direction: str = "minimize"  # the natural direction, used when an objective names none


METRICS: dict[str, MetricDef] = {
    "params": MetricDef("cost", "count", {}, "total parameters"),
    "non_embedding_params": MetricDef("cost", "count", {}, "parameters outside the embeddings"),
    "active_params": MetricDef("cost", "count", {}, "parameters used per token (MoE: top-k)"),
    "cache_bytes": MetricDef(
        "cost",
        "bytes",
        {"context": 2048, "bits": 16, "batch": 1},
        "KV cache or recurrent state at a context length and bit width",
    ),
    "weight_bytes": MetricDef(
        "cost", "bytes", {"precision": "fp16"}, "weights at a precision (q8/q4 with group scales)"
    ),
    "memory_bytes": MetricDef(
        "cost",
        "bytes",
        {"context": 2048, "precision": "fp16", "batch": 1},
        "peak inference memory: weights + cache + activations",
    ),
    "prefill_flops": MetricDef(
        "cost", "flops", {"tokens": 512, "batch": 1}, "FLOPs of a prefill of `tokens` tokens"
    ),
    "train_flops_per_token": MetricDef(
        "cost", "flops", {"context": 512}, "forward + backward FLOPs per training token"
    ),
    "ttft_ms": MetricDef(
        "cost",
        "ms",
        {"device": None, "prompt": 512, "precision": "fp16"},
        "predicted time to first token for a prompt",
    ),
    "decode_ms": MetricDef(
        "cost",
        "ms",
        {"device": None, "context": 2048, "precision": "fp16"},
        "predicted decode time per token at a context length",
    ),
    "e2e_ms": MetricDef(
        "cost",
        "ms",
        {"device": None, "prompt": 512, "generate": 128, "precision": "fp16"},
        "predicted prompt + generation time ([PLM] Table 12 setting)",
    ),
    "val_loss": MetricDef(
        "train",
        "nats",
        {"tokens": None},
        "sandbox validation loss (LM objective); with `tokens`, the loss predicted at that "
        "budget from the trial's learning curve (archsearch.trainers.extrapolate)",
    ),
    "val_ppl": MetricDef("train", "ppl", {}, "sandbox validation perplexity"),
    "probe_acc": MetricDef(
        "train",
        "fraction",
        {"task": "recall"},
        "accuracy on a synthetic probe task",
        direction="maximize",
    ),
}

PROBE_TASKS = (
    "recall",
    "noisy_recall",
    "fuzzy_recall",
    "selective_copy",
    "compression",
    "memorization",
)

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*$")
_COUNT_SUFFIX = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
_BYTE_SUFFIX = {
    "": 1,
    "B": 1,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}


def parse_quantity(raw: Any, unit: str, *, source: str | None, key: str) -> float:
    """Numbers, optionally with a suffix: 20M / 1.8B (counts), 64MiB / 1.5GB (bytes)."""
    if isinstance(raw, bool):
        raise UserError(f"expected a number, got {raw!r}", source=source, key=key)
    if isinstance(raw, (int, float)):
        value = float(raw)
    elif isinstance(raw, str) and (m := _SIZE.match(raw)):
        number, suffix = float(m.group(1)), m.group(2)
        table = _BYTE_SUFFIX if unit == "bytes" else _COUNT_SUFFIX
        if suffix not in table:
            raise UserError(
                f"unknown suffix {suffix!r} in {raw!r} (known for {unit}: "
                f"{', '.join(s for s in table if s)})",
                source=source,
                key=key,
            )
        value = number * table[suffix]
    else:
        raise UserError(
            f"expected a number (optionally with a suffix such as 20M or 64MiB), got {raw!r}",
            source=source,
            key=key,
        )
    if not math.isfinite(value):
        raise UserError(f"{raw!r} is not a finite number", source=source, key=key)
    if value < 0:
        raise UserError(f"must not be negative, got {raw!r}", source=source, key=key)
    return value


@dataclass(frozen=True)
class MetricSpec:
    """A metric name with its arguments filled in (device may be None: the run's device)."""

    metric: str
    args: tuple[tuple[str, Any], ...] = ()

    @property
    def definition(self) -> MetricDef:
        return METRICS[self.metric]

    @property
    def phase(self) -> str:
        return self.definition.phase

    def arg(self, name: str) -> Any:
        return dict(self.args)[name]

    def on_device(self, device: str, *, only_unset: bool = False) -> MetricSpec:
        """This metric on `device` (metrics without a device argument are returned as they
        are). `only_unset=True` fills a device the space left to the run, and keeps a named
        one."""
        if "device" not in dict(self.args):
            return self
        if only_unset and self.arg("device") is not None:
            return self
        return MetricSpec(
            self.metric, tuple((k, device if k == "device" else v) for k, v in self.args)
        )

    @property
    def label(self) -> str:
        """A compact, stable name: `decode_ms[rpi5,context=2048,precision=q4]` (the inverse of
        `MetricSpec.parse`)."""
        parts = []
        for k, v in self.args:
            if v is None and k not in POSITIONAL_ARGS:  # an optional argument left out
                continue
            parts.append(str(v) if k in POSITIONAL_ARGS else f"{k}={v}")
        return f"{self.metric}[{','.join(parts)}]" if parts else self.metric

    @property
    def predicted_at(self) -> str | None:
        """The budget a training metric is predicted at (`val_loss[tokens=100M]` ->
        "tokens:100M"), or None for a metric the trial measures."""
        tokens = dict(self.args).get("tokens")
        return f"tokens:{tokens}" if self.phase == "train" and tokens is not None else None

    @property
    def measured(self) -> MetricSpec:
        """The metric the trial measures that this one is predicted from (itself when it is
        not a prediction)."""
        if self.predicted_at is None:
            return self
        args = tuple((k, None if k == "tokens" else v) for k, v in self.args)
        return MetricSpec(self.metric, args)

    @classmethod
    def parse(cls, label: str) -> MetricSpec:
        """A label as `label` writes it, back to a spec; arguments the label leaves out take
        the metric's defaults. ValueError for a name that is not a metric."""
        name, given = parse_label(label)
        if name not in METRICS:
            raise ValueError(f"unknown metric {name!r}")
        args = {**METRICS[name].args, **{k: typed_value(v) for k, v in given.items()}}
        if args.get("tokens") is not None:
            try:
                args["tokens"] = check_argument("tokens", args["tokens"], key="tokens")
            except UserError as err:
                raise ValueError(err.detail) from None
        return cls(name, tuple((k, args[k]) for k in METRICS[name].args))


# arguments a label writes by value alone: `decode_ms[rpi5,...]`, `probe_acc[recall]`
POSITIONAL_ARGS = ("device", "task")


def parse_label(label: str) -> tuple[str, dict[str, str]]:
    """The one parser of metric labels and axis names. Two spellings:
    `decode_ms[rpi5,context=2048,precision=q4]` (as stored) and the shell- and Hydra-friendly
    `decode_ms@rpi5@context:2048@precision:q4`. A bare value is the device, or the task of
    `probe_acc`. Values stay text (`MetricSpec.parse` types them)."""
    label = label.strip()
    if "[" in label or "@" not in label:
        name, _, rest = label.partition("[")
        parts, sep = (rest.rstrip("]").split(",") if rest else []), "="
    else:
        name, *parts = label.split("@")
        sep = ":"
    args: dict[str, str] = {}
    for part in parts:
        if sep in part:
            k, v = part.split(sep, 1)
            args[k.strip()] = v.strip()
        elif part.strip():
            args["task" if name.strip() == "probe_acc" else "device"] = part.strip()
    return name.strip(), args


def count_text(n: float) -> str:
    """A token count as a label writes it: 100M, 1.6M, 160K, 512 (read back by
    `parse_quantity`). Rounded to 6 significant digits before the suffix is chosen, so the
    text reads back to itself (999,999,500,000 is 1T, not 1000B)."""
    n = float(f"{n:.6g}")
    for suffix, unit in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= unit:
            return f"{n / unit:.6g}{suffix}"
    return f"{n:.6g}"


def typed_value(value: Any) -> Any:
    """Label text back to the argument's type (whole numbers are ints)."""
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return value
    return value


# metrics a constraint may bound with `margin: error` (predicted latencies, whose device
# profile states their error: `archsearch.cost.devices.latency_error`)
MARGIN_METRICS = ("ttft_ms", "decode_ms", "e2e_ms")
MARGINS = ("none", "error")


@dataclass(frozen=True)
class Constraint:
    spec: MetricSpec
    max: float | None = None
    min: float | None = None
    # "error": bound the conservative end of the prediction's band instead of the prediction
    margin: str = "none"

    @property
    def name(self) -> str:
        return self.spec.label

    def violation(self, value: float, error: float = 0.0) -> float:
        """<= 0 when satisfied (Optuna's convention), else how far outside the bound. With
        `margin: error`, `error` is the prediction's relative error e: `max` bounds
        value x (1 + e) and `min` bounds value x (1 - e) (the band's far end)."""
        e = error if self.margin == "error" else 0.0
        excess = []
        if self.max is not None:
            excess.append(value * (1.0 + e) - self.max)
        if self.min is not None:
            excess.append(self.min - value * (1.0 - e))
        return max(excess)

    def describe(self) -> str:
        bounds = []
        if self.min is not None:
            bounds.append(f">= {self.min:g}")
        if self.max is not None:
            bounds.append(f"<= {self.max:g}")
        margin = " (margin: error, the prediction's far end)" if self.margin == "error" else ""
        return f"{self.spec.label} {' and '.join(bounds)}{margin}"


@dataclass(frozen=True)
class Objective:
    spec: MetricSpec
    direction: str = "minimize"

    @property
    def name(self) -> str:
        return self.spec.label


@dataclass
class _Reader:
    source: str | None
    known_devices: tuple[str, ...] = field(default_factory=tuple)

    def metric(self, entry: Any, key: str, extra: tuple[str, ...]) -> tuple[MetricSpec, dict]:
        if not isinstance(entry, dict):
            raise UserError(
                "expected a mapping such as {metric: params, max: 20M}", source=self.source, key=key
            )
        if "metric" not in entry:
            raise UserError("missing 'metric'", source=self.source, key=key)
        name = entry["metric"]
        if not isinstance(name, str) or name not in METRICS:
            raise UserError(
                f"unknown metric {name!r} (known: {', '.join(METRICS)})",
                source=self.source,
                key=f"{key}.metric",
            )
        mdef = METRICS[name]
        rest = {k: v for k, v in entry.items() if k != "metric" and k not in extra}
        unknown = sorted(set(map(str, rest)) - set(mdef.args))
        if unknown:
            allowed = ", ".join([*mdef.args, *extra]) or "none"
            raise UserError(
                f"unknown argument {unknown[0]!r} for metric {name!r} (allowed: {allowed})",
                source=self.source,
                key=f"{key}.{unknown[0]}",
            )
        args = []
        for arg, default in mdef.args.items():
            value = rest.get(arg, default)
            args.append((arg, self.check_arg(arg, value, f"{key}.{arg}")))
        return MetricSpec(name, tuple(args)), {k: entry[k] for k in extra if k in entry}

    def check_arg(self, arg: str, value: Any, key: str) -> Any:
        return check_argument(arg, value, key=key, source=self.source, devices=self.known_devices)


# arguments that take one of a list of names: (what to call them, the names)
_NAMED_VALUES = {"precision": ("precision", PRECISIONS), "task": ("probe task", PROBE_TASKS)}


def check_argument(
    arg: str, value: Any, *, key: str, source: str | None = None, devices: tuple[str, ...] = ()
) -> Any:
    """A metric argument's value, checked (a one-line `UserError` naming `key` when bad).
    Devices are checked against `devices` when given (else only for being a name)."""
    if arg == "device":
        if value is None:
            return None
        if not isinstance(value, str) or (devices and value not in devices):
            raise UserError(
                f"unknown device {value!r} (known: {', '.join(devices)})",
                source=source,
                key=key,
            )
        return value
    if arg in _NAMED_VALUES:
        what, known = _NAMED_VALUES[arg]
        if value not in known:
            raise UserError(
                f"unknown {what} {value!r} (known: {', '.join(known)})", source=source, key=key
            )
        return value
    if arg == "tokens":  # a training budget in tokens, written canonically (100M, 1.6M, 160K)
        if value is None:
            return None
        n = parse_quantity(value, "count", source=source, key=key)
        if n < 1:
            raise UserError(f"tokens must be at least 1, got {value!r}", source=source, key=key)
        return count_text(n)
    if arg == "bits":
        if value not in CACHE_BITS:
            raise UserError(
                f"bits must be one of {CACHE_BITS}, got {value!r}", source=source, key=key
            )
        return value
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UserError(f"{arg} must be a positive integer, got {value!r}", source=source, key=key)
    return value


def parse_constraints(
    raw: Any, *, source: str | None, devices: tuple[str, ...]
) -> list[Constraint]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise UserError(
            "expected a list of {metric: ..., max: ...} entries", source=source, key="constraints"
        )
    reader = _Reader(source, devices)
    out = []
    for i, entry in enumerate(raw):
        key = f"constraints[{i}]"
        spec, given = reader.metric(entry, key, ("max", "min", "margin"))
        margin = given.pop("margin", "none")
        bounds = given
        if not bounds:
            raise UserError(
                f"constraint on {spec.metric!r} needs 'max' or 'min'", source=source, key=key
            )
        if margin not in MARGINS:
            raise UserError(
                f"margin must be one of {', '.join(MARGINS)}, got {margin!r}",
                source=source,
                key=f"{key}.margin",
            )
        if margin == "error" and spec.metric not in MARGIN_METRICS:
            raise UserError(
                f"margin: error applies to predicted latencies ({', '.join(MARGIN_METRICS)}), "
                f"not {spec.metric!r}",
                source=source,
                key=f"{key}.margin",
            )
        unit = spec.definition.unit
        lo = (
            parse_quantity(bounds["min"], unit, source=source, key=f"{key}.min")
            if "min" in bounds
            else None
        )
        hi = (
            parse_quantity(bounds["max"], unit, source=source, key=f"{key}.max")
            if "max" in bounds
            else None
        )
        if lo is not None and hi is not None and lo > hi:
            raise UserError(f"min {lo:g} is above max {hi:g}", source=source, key=key)
        out.append(Constraint(spec, max=hi, min=lo, margin=margin))
    return out


def parse_objectives(raw: Any, *, source: str | None, devices: tuple[str, ...]) -> list[Objective]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not raw:
        raise UserError(
            "expected a non-empty list of {metric: ..., direction: ...} entries",
            source=source,
            key="objectives",
        )
    reader = _Reader(source, devices)
    out = []
    for i, entry in enumerate(raw):
        key = f"objectives[{i}]"
        spec, extra = reader.metric(entry, key, ("direction",))
        direction = extra.get("direction", spec.definition.direction)
        if direction not in ("minimize", "maximize"):
            raise UserError(
                f"direction must be minimize or maximize, got {direction!r}",
                source=source,
                key=f"{key}.direction",
            )
        out.append(Objective(spec, direction))
    labels = [o.spec for o in out]
    if len(set(labels)) != len(labels):
        raise UserError("the same objective is listed twice", source=source, key="objectives")
    return out
