"""Device profiles: the hardware figures the latency model needs, as data (`conf/device/*.yaml`).

A profile holds peak compute by precision class (FLOP/s; a multiply-add is 2 FLOPs), memory
bandwidth and capacity, a source line for every figure, and the efficiency factors of the
latency model (`archsearch.cost.model`): the fraction of peak compute a large matmul reaches,
the row count at which matmuls reach half of that, the fraction of peak bandwidth a streaming
read reaches, and a fixed overhead per operator. `archsearch calibrate` measures them for this
machine and writes the `local` profile.

Every profile says how it was obtained (`provenance`: `measured` by calibrate on the device,
or `published-fit` to published throughputs, with a one-line reason) and how well it predicts
(`validation`: held-out figures per quantity, `ttft` and `decode`, one check or several, each
at the precisions it was measured at, and for a measured profile's fp32 check the same figures
by the working set of what was predicted, `by_working_set`). `latency_error` turns them into
the relative error a prediction at a precision carries on the device (None where no check
covers that precision), `Validation.error_at` into each prediction's by its working set.

A measured profile records the machine it was measured on (`measured_on`); `local` stands for
the machine it is read on, so where that machine has another processor its description says
that its latencies and their +- are the other machine's (`measured_elsewhere`).

This module is a profile's figures as data; `archsearch.latency.profile` finds, reads and
writes profile files (with the learned predictor a calibrated one carries beside its YAML).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from archsearch import plugins
from archsearch.errors import UserError
from archsearch.metrics import PRECISIONS
from archsearch.resources import check_name

LOCAL = "local"  # the profile that stands for the machine it is read on
COMPUTE_CLASSES = ("fp32", "fp16", "int8")
PROVENANCE_KINDS = ("measured", "published-fit")
QUANTITIES = ("ttft", "decode")  # what a validation entry measures
# the quantity whose held-out error a latency metric carries (e2e: the larger of its parts)
ERROR_QUANTITIES = {"ttft_ms": ("ttft",), "decode_ms": ("decode",), "e2e_ms": ("ttft", "decode")}
# which compute class executes the matmuls of a weight precision
COMPUTE_CLASS_OF = {"fp32": "fp32", "bf16": "fp16", "fp16": "fp16", "q8": "int8", "q4": "int8"}


@dataclass(frozen=True)
class Efficiency:
    """Latency-model factors (fractions of peak; seconds)."""

    compute: float = 0.5  # fraction of peak FLOP/s a large matmul reaches
    half_rows: float = 8.0  # rows (tokens) at which a matmul reaches half that efficiency
    bandwidth: float = 0.7  # fraction of peak bandwidth a streaming read reaches
    op_overhead_s: float = 5e-6  # fixed time per operator (dispatch, launch, sync)
    vector: float = 1.0  # throughput of non-matmul kernels (scans, softmax, norms) vs roofline
    # the rate (fraction of peak, whatever the batch) of softmax attention with one query per
    # sequence, a decode step's `attn.sdpa`, where measured (`calibrate.fit_half`); None: the
    # matmul law above
    attention_step: float | None = None
    source: str = "default"


@dataclass(frozen=True)
class Provenance:
    """How a profile was obtained: `measured` (calibrate on the device) or `published-fit`
    (fitted to published figures), and why its error is what it is (one line)."""

    kind: str
    reason: str


@dataclass(frozen=True)
class WorkingSetBands:
    """Held-out |error| by the working set of the predicted phase (fp32 bytes of its weights and
    decode state, `cost.model.working_set`): `edges` (increasing) split working sets into
    len(edges) + 1 bands, band i holding `n[i]` predictions whose 90th percentile of |error| is
    `p90[i]` (and its upper bound `bound[i]`: `Validation.bound`). A prediction misses by more
    near the edge of a shared cache, whose share the machine's other tenants move, than well
    inside or beyond it (`archsearch.latency.calibrate.fit`)."""

    edges: tuple[float, ...]  # bytes
    p90: tuple[float, ...]
    n: tuple[int, ...]
    bound: tuple[float, ...] | None = None

    @property
    def errors(self) -> tuple[float, ...]:
        """Each band's error: its bound where given, else its 90th percentile."""
        return self.bound if self.bound is not None else self.p90

    def at(self, working_set) -> np.ndarray:
        """The error of the band each working set (bytes, scalar or array) falls in."""
        band = np.searchsorted(self.edges, np.asarray(working_set, dtype=np.float64), "right")
        return np.asarray(self.errors)[band]

    def to_dict(self) -> dict[str, list]:
        out = {"edges": list(self.edges), "p90": list(self.p90), "n": list(self.n)}
        return out if self.bound is None else {**out, "bound": list(self.bound)}


@dataclass(frozen=True)
class Validation:
    """Held-out accuracy of one predicted quantity at some precisions: relative errors
    |pred / measured - 1| of `n` predictions the fit did not see (`method` says which: held-out
    models, leave-one-out), made at `precisions` (a prediction at another precision is not
    covered by this check)."""

    mape: float  # mean absolute relative error (0.14: 14%)
    within_10: float  # share of held-out predictions within +-10%
    n: int
    method: str
    p90: float | None = None  # 90th percentile of the absolute relative error
    # an upper bound of that 90th percentile at 90% confidence (`latency.calibrate.fit.p90_bound`)
    bound: float | None = None
    by_working_set: WorkingSetBands | None = None
    precisions: tuple[str, ...] = PRECISIONS
    # the signed held-out errors pred / measured - 1 themselves, in groups whose predictions
    # share their conditions (one precision, one timing run): how often the profile orders two
    # architectures right (`archsearch.latency.order`) follows from pairs within a group
    held_out: dict[str, tuple[float, ...]] | None = None

    @property
    def error(self) -> float:
        """The relative error a prediction carries (`statistic`): the upper bound of the 90th
        percentile of the held-out absolute error where known (a +- that holds for at least
        nine predictions in ten, at 90% confidence), else that 90th percentile, else the mean
        (MAPE)."""
        for e in (self.bound, self.p90):
            if e is not None:
                return e
        return self.mape

    @property
    def statistic(self) -> str:
        """What `error` is."""
        if self.bound is not None:
            return "upper 90%-confidence bound of the 90th percentile"
        return "90th percentile" if self.p90 is not None else "mean (MAPE)"

    def error_at(self, working_set) -> np.ndarray:
        """The error of predictions of these working sets (bytes): their band's where the
        profile gives bands, else `error` for each."""
        if self.by_working_set is None:
            return np.full(np.shape(working_set), self.error)
        return self.by_working_set.at(working_set)


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    description: str
    kind: str  # cpu | gpu
    peak_flops: dict[str, float]
    memory_bandwidth: float  # bytes/s
    memory_capacity: float  # bytes
    efficiency: dict[str, Efficiency] = field(default_factory=dict)  # by compute class
    sources: dict[str, str] = field(default_factory=dict)
    prefill_logits: str = "last"  # last (llama.cpp) | all (archsearch.models' prefill)
    # measured profiles (`archsearch calibrate`): the last-level cache that holds the weights of
    # a model small enough to fit in it
    cache_capacity: float = 0.0  # bytes (0: no cache level modelled)
    cache_bandwidth: float = 0.0  # bytes/s
    provenance: Provenance | None = None
    # by quantity (QUANTITIES): its checks, each at other precisions
    validation: dict[str, tuple[Validation, ...]] = field(default_factory=dict)
    # the machine a measured profile was measured on: hostname, cpu, torch, runtime, ray_node...
    measured_on: dict[str, str] = field(default_factory=dict)
    # the learned predictor of a calibrated profile (`archsearch.latency.predict.Predictor`,
    # attached by `archsearch.latency.profile`): fp32 latency is then the sum of its kernels
    predictor: Any = None
    path: str = ""

    def peak(self, precision: str) -> float:
        return self.peak_flops[COMPUTE_CLASS_OF[precision]]

    def check(self, quantity: str, precision: str) -> Validation | None:
        """The held-out check of `quantity` (`ttft`, `decode`) predicted at `precision`; None
        where the profile has none (nothing is known of that error)."""
        checks = self.validation.get(quantity, ())
        return next((v for v in checks if precision in v.precisions), None)

    def with_predictor(self, predictor: Any) -> DeviceProfile:
        return dataclasses.replace(self, predictor=predictor)

    def eff(self, precision: str) -> Efficiency:
        """The efficiencies of a precision's compute class (fp32 falls back to fp16's)."""
        cls = COMPUTE_CLASS_OF[precision]
        for key in (cls, "fp16", "default"):
            if key in self.efficiency:
                return self.efficiency[key]
        return Efficiency()


def _known_keys(entry: dict, known: set[str], source: str, key: str) -> None:
    """A one-line error naming the first key of `entry` (at `key`) not in `known`."""
    bad = sorted(set(map(str, entry)) - known)
    if bad:
        raise UserError(
            f"unknown key (known: {', '.join(sorted(known))})", source=source, key=f"{key}.{bad[0]}"
        )


def _number(raw: Any, *, source: str, key: str, zero_ok: bool = False) -> float:
    if (
        isinstance(raw, bool)
        or not isinstance(raw, (int, float))
        or not math.isfinite(raw)
        or raw < 0
        or (raw == 0 and not zero_ok)
    ):
        what = "a number >= 0" if zero_ok else "a positive number"
        raise UserError(f"expected {what}, got {raw!r}", source=source, key=key)
    return float(raw)


# the range a device's figure may take: far beyond any real device's on both sides, so that a
# slip of units (bandwidth in GB/s, 100 for 1e11) or of exponent is refused instead of priced
# into latencies that overflow or vanish
PLAUSIBLE = {
    "peak_flops": (1e6, 1e19, "FLOP/s"),
    "memory_bandwidth": (1e6, 1e16, "B/s"),
    "memory_capacity": (1e6, 1e17, "B"),
    "cache_capacity": (1e3, 1e14, "B"),
    "cache_bandwidth": (1e6, 1e17, "B/s"),
}


def _plausible(value: float, *, source: str, key: str) -> float:
    low, high, unit = PLAUSIBLE[key.split(".")[0]]
    if value and not low <= value <= high:
        raise UserError(
            f"{value:g} {unit} is no device's figure (expected {low:g} to {high:g} {unit}; "
            "is it in the unit the key names?)",
            source=source,
            key=key,
        )
    return value


def parse_device(
    raw: Any, *, source: str, default_name: str, learned: bool = False
) -> DeviceProfile:
    """A profile's YAML mapping, checked (one-line errors name the key path). `learned`: the
    profile carries a learned predictor (its checks then cover fp32 unless they say)."""
    if not isinstance(raw, dict):
        raise UserError("a device profile must be a mapping", source=source, key="(top level)")
    known = {
        "name",
        "description",
        "kind",
        "peak_flops",
        "memory_bandwidth",
        "memory_capacity",
        "efficiency",
        "sources",
        "prefill_logits",
        "cache_capacity",
        "cache_bandwidth",
        "provenance",
        "validation",
        "measured_on",
    }
    unknown = sorted(set(map(str, raw)) - known)
    if unknown:
        raise UserError(
            f"unknown key (known: {', '.join(sorted(known))})", source=source, key=unknown[0]
        )
    for key in ("peak_flops", "memory_bandwidth", "memory_capacity"):
        if key not in raw:
            raise UserError("missing required key", source=source, key=key)
    peak_flops = _peak_flops(raw["peak_flops"], source)
    figures = {
        key: _plausible(
            _number(raw.get(key, 0), source=source, key=key, zero_ok=key.startswith("cache")),
            source=source,
            key=key,
        )
        for key in ("memory_bandwidth", "memory_capacity", "cache_capacity", "cache_bandwidth")
    }
    for key in ("efficiency", "sources"):
        if not isinstance(raw.get(key) or {}, dict):
            raise UserError(f"expected a mapping, got {raw[key]!r}", source=source, key=key)
    texts = {}
    for key, default in (("name", default_name), ("description", ""), ("kind", "cpu")):
        texts[key] = raw.get(key, default)
        if not isinstance(texts[key], str):
            raise UserError(f"expected a string, got {texts[key]!r}", source=source, key=key)
    if texts["kind"] not in ("cpu", "gpu"):
        raise UserError(f"must be cpu or gpu, got {texts['kind']!r}", source=source, key="kind")
    check_name(texts["name"], what="device", key="name", source=source)
    efficiency = _efficiency(raw.get("efficiency") or {}, source)
    sources = {str(k): str(v) for k, v in (raw.get("sources") or {}).items()}
    return DeviceProfile(
        name=texts["name"],
        description=texts["description"],
        kind=texts["kind"],
        peak_flops=peak_flops,
        memory_bandwidth=figures["memory_bandwidth"],
        memory_capacity=figures["memory_capacity"],
        efficiency=efficiency,
        sources=sources,
        prefill_logits=_prefill_logits(raw.get("prefill_logits", "last"), source),
        cache_capacity=figures["cache_capacity"],
        cache_bandwidth=figures["cache_bandwidth"],
        provenance=_provenance(raw.get("provenance"), source),
        validation=_validation(raw.get("validation"), source, learned),
        measured_on=_measured_on(raw.get("measured_on"), source),
        path=source,
    )


def _peak_flops(peaks: Any, source: str) -> dict[str, float]:
    """`peak_flops`: FLOP/s by compute class (fp32, fp16, int8), each plausible."""
    if not isinstance(peaks, dict):
        raise UserError(
            "expected a mapping of fp32/fp16/int8 -> FLOP/s", source=source, key="peak_flops"
        )
    missing = [c for c in COMPUTE_CLASSES if c not in peaks]
    if missing:
        raise UserError(f"missing compute class {missing[0]!r}", source=source, key="peak_flops")
    return {
        c: _plausible(
            _number(peaks[c], source=source, key=f"peak_flops.{c}"),
            source=source,
            key=f"peak_flops.{c}",
        )
        for c in COMPUTE_CLASSES
    }


EFFICIENCY_KEYS = {"compute", "half_rows", "bandwidth", "op_overhead_s", "vector"}
EFFICIENCY_KEYS |= {"attention_step", "source"}


def _efficiency(raw: dict, source: str) -> dict[str, Efficiency]:
    """`efficiency`: the roofline's factors by compute class (or `default`)."""
    efficiency = {}
    for cls, entry in raw.items():
        if cls not in (*COMPUTE_CLASSES, "default") or not isinstance(entry, dict):
            raise UserError(
                "expected fp32/fp16/int8/default -> {compute, half_rows, "
                "bandwidth, op_overhead_s, source}",
                source=source,
                key=f"efficiency.{cls}",
            )
        _known_keys(entry, EFFICIENCY_KEYS, source, f"efficiency.{cls}")
        values = {
            k: _number(v, source=source, key=f"efficiency.{cls}.{k}", zero_ok=k == "op_overhead_s")
            for k, v in entry.items()
            if k != "source"
        }
        efficiency[cls] = Efficiency(**values, source=str(entry.get("source", "")))
    return efficiency


def _provenance(raw: Any, source: str) -> Provenance | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(map(str, raw)) != {"kind", "reason"}:
        raise UserError(
            f"expected {{kind: {' | '.join(PROVENANCE_KINDS)}, reason: one line}}, got {raw!r}",
            source=source,
            key="provenance",
        )
    if raw["kind"] not in PROVENANCE_KINDS:
        raise UserError(
            f"must be one of {', '.join(PROVENANCE_KINDS)}, got {raw['kind']!r}",
            source=source,
            key="provenance.kind",
        )
    reason = raw["reason"]
    if not isinstance(reason, str) or not reason.strip() or "\n" in reason.strip():
        raise UserError(
            f"expected one non-empty line, got {reason!r}", source=source, key="provenance.reason"
        )
    return Provenance(kind=raw["kind"], reason=reason.strip())


def _validation(raw: Any, source: str, kernels: bool) -> dict[str, tuple[Validation, ...]]:
    """`validation`: per quantity one check or a list of them, each at its `precisions`.
    Unstated, a check covers what the profile's predictor it validated prices: fp32 on a
    profile with a learned predictor (it prices fp32 only), else every precision."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise UserError(
            f"expected a mapping of {'/'.join(QUANTITIES)} -> {{mape, within_10, n, method}}",
            source=source,
            key="validation",
        )
    out = {}
    for quantity, entries in raw.items():
        key = f"validation.{quantity}"
        if quantity not in QUANTITIES:
            raise UserError(
                f"unknown quantity (known: {', '.join(QUANTITIES)})", source=source, key=key
            )
        many = isinstance(entries, list)
        if many and not entries:
            raise UserError("expected at least one check", source=source, key=key)
        checks = tuple(
            _check(entry, source, f"{key}.{i}" if many else key, kernels)
            for i, entry in enumerate(entries if many else [entries])
        )
        for (_, a), (j, b) in itertools.combinations(enumerate(checks), 2):
            both = sorted(set(a.precisions) & set(b.precisions))
            if both:
                raise UserError(
                    f"two checks cover {', '.join(both)}", source=source, key=f"{key}.{j}"
                )
        out[quantity] = checks
    return out


def _check(entry: Any, source: str, key: str, kernels: bool) -> Validation:
    fields = {
        "mape",
        "within_10",
        "n",
        "method",
        "p90",
        "bound",
        "by_working_set",
        "precisions",
        "held_out",
    }
    if not isinstance(entry, dict) or not {"mape", "within_10", "n", "method"} <= set(entry):
        raise UserError(
            "expected {mape, within_10, n, method} (and optionally p90, bound, precisions, "
            "by_working_set, held_out), or a list of them",
            source=source,
            key=key,
        )
    _known_keys(entry, fields, source, key)
    n = entry["n"]
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise UserError(f"expected a positive integer, got {n!r}", source=source, key=f"{key}.n")
    within = _number(entry["within_10"], source=source, key=f"{key}.within_10", zero_ok=True)
    if within > 1:
        raise UserError(
            f"expected a share in [0, 1], got {within!r}", source=source, key=f"{key}.within_10"
        )
    method = entry["method"]
    if not isinstance(method, str) or not method.strip():
        raise UserError(
            f"expected a non-empty string, got {method!r}", source=source, key=f"{key}.method"
        )
    precisions = entry.get("precisions", ["fp32"] if kernels else list(PRECISIONS))
    if (
        not isinstance(precisions, list)
        or not precisions
        or not all(isinstance(p, str) and p in PRECISIONS for p in precisions)
        or len(set(precisions)) < len(precisions)
    ):
        raise UserError(
            f"expected a list of distinct precisions among {', '.join(PRECISIONS)}, got "
            f"{precisions!r}",
            source=source,
            key=f"{key}.precisions",
        )
    p90, bound = entry.get("p90"), entry.get("bound")
    return Validation(
        mape=_number(entry["mape"], source=source, key=f"{key}.mape", zero_ok=True),
        within_10=within,
        n=n,
        method=method.strip(),
        p90=None if p90 is None else _number(p90, source=source, key=f"{key}.p90", zero_ok=True),
        bound=None
        if bound is None
        else _number(bound, source=source, key=f"{key}.bound", zero_ok=True),
        by_working_set=_bands(entry.get("by_working_set"), source, f"{key}.by_working_set"),
        precisions=tuple(precisions),
        held_out=_held_out(entry.get("held_out"), source, f"{key}.held_out"),
    )


def _held_out(raw: Any, source: str, key: str) -> dict[str, tuple[float, ...]] | None:
    """`held_out`: group name -> the signed relative errors (pred / measured - 1, each > -1)
    of the held-out predictions made under that group's conditions."""
    if raw is None:
        return None
    expected = "expected a mapping of group -> [relative errors pred / measured - 1, > -1]"
    if not isinstance(raw, dict) or not raw:
        raise UserError(expected, source=source, key=key)
    out = {}
    for group, errors in raw.items():
        where = f"{key}.{group}"
        if not isinstance(errors, list) or not errors:
            raise UserError(expected, source=source, key=where)
        for i, e in enumerate(errors):
            if (
                isinstance(e, bool)
                or not isinstance(e, (int, float))
                or not math.isfinite(e)
                or e <= -1
            ):
                raise UserError(
                    f"expected a relative error > -1, got {e!r}", source=source, key=f"{where}.{i}"
                )
        out[str(group)] = tuple(float(e) for e in errors)
    return out


def _bands(raw: Any, source: str, key: str) -> WorkingSetBands | None:
    if raw is None:
        return None
    expected = (
        "expected {edges: [bytes, increasing], p90: [...], n: [...]} (and optionally bound: "
        "[...]), one more p90, n and bound than edges"
    )
    lists = ["edges", "p90", "n"] + (["bound"] if isinstance(raw, dict) and "bound" in raw else [])
    if not isinstance(raw, dict) or set(map(str, raw)) != set(lists):
        raise UserError(expected, source=source, key=key)
    if not all(isinstance(raw[k], list) for k in lists):
        raise UserError(expected, source=source, key=key)
    edges = [_number(e, source=source, key=f"{key}.edges.{i}") for i, e in enumerate(raw["edges"])]

    def errors(k: str) -> list[float]:
        return [
            _number(e, source=source, key=f"{key}.{k}.{i}", zero_ok=True)
            for i, e in enumerate(raw[k])
        ]

    p90 = errors("p90")
    bound = errors("bound") if "bound" in raw else None
    for i, n in enumerate(raw["n"]):
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise UserError(
                f"expected a positive integer, got {n!r}", source=source, key=f"{key}.n.{i}"
            )
    if any(b <= a for a, b in itertools.pairwise(edges)):
        raise UserError(f"edges must increase, got {edges}", source=source, key=f"{key}.edges")
    if not len(p90) == len(raw["n"]) == len(edges) + 1 or (
        bound is not None and len(bound) != len(p90)
    ):
        raise UserError(expected, source=source, key=key)
    return WorkingSetBands(
        tuple(edges), tuple(p90), tuple(raw["n"]), None if bound is None else tuple(bound)
    )


def latency_error(device: DeviceProfile, metric: str, precision: str) -> float | None:
    """The relative error (0.14: +-14%) a latency metric (`ttft_ms`, `decode_ms`, `e2e_ms`)
    predicted at `precision` carries on `device`: the held-out `Validation.error` of the check
    at that precision (`DeviceProfile.check`: the upper bound of the 90th percentile of |error|
    where the profile gives it, else that percentile, else the MAPE); e2e takes the larger of
    TTFT's and decode's (the error of a sum of two positive parts is at most the larger
    relative error). None where the profile has no check at that precision (nothing is
    known)."""
    checks = _checks(device, metric, precision)
    return None if checks is None else max(v.error for v in checks.values())


def latency_errors(
    device: DeviceProfile, metric: str, precision: str, working_sets: dict[str, Any]
) -> np.ndarray | None:
    """`latency_error` per prediction: each quantity's error in the band of its working set
    (`working_sets`: quantity -> bytes per prediction, `ttft` the prefill's, `decode` the
    step's), where its check gives bands (`Validation.by_working_set`), else its one figure;
    e2e takes the larger of its parts. None where the profile has no check at `precision`."""
    checks = _checks(device, metric, precision)
    if checks is None:
        return None
    return np.maximum.reduce(
        [np.asarray(v.error_at(working_sets[q]), float) for q, v in checks.items()]
    )


def _checks(device: DeviceProfile, metric: str, precision: str) -> dict[str, Validation] | None:
    """The checks of a latency metric's quantities at `precision` (None: one is missing)."""
    quantities = ERROR_QUANTITIES.get(metric)
    if quantities is None:
        raise ValueError(f"{metric!r} is not a latency metric")
    checks = {q: device.check(q, precision) for q in quantities}
    return None if any(v is None for v in checks.values()) else checks


def cpu_name() -> str:
    """This machine's processor as /proc/cpuinfo names it (else what `platform` says)."""
    return _name(_fields(_cpuinfo()))


# the widest vector extension a processor's flags list, widest first: it decides which kernels a
# BLAS runs, so two processors of one name and different extensions time GEMMs differently
# (AVX-512 counts where its byte/word instructions come too, as torch's and oneDNN's kernels ask)
_ISA = (("avx512bw", "avx512"), ("avx2", "avx2"), ("avx", "avx"), ("sse4_2", "sse4.2"))
_ISA += (("sve2", "sve2"), ("sve", "sve"), ("asimd", "neon"), ("neon", "neon"))
IDENTITY = ("cpu", "cpus", "isa", "cpu_id")  # what `measured_on` compares, where it states it


def processor() -> dict[str, str]:
    """This machine's processor as `measured_on` records it: `cpu` (its name), `cpus`, and
    where /proc/cpuinfo tells them (of its first processor), `isa` (the widest vector extension
    its flags list) and `cpu_id` (x86: its family and model; Arm: its implementer and part). A
    virtual machine's processor is often named by its vendor's line alone ("AMD EPYC"), which
    two generations share: the id and the extension tell them apart."""
    info = _fields(_cpuinfo())
    out = {"cpu": _name(info), "cpus": str(os.cpu_count() or 1)}
    flags = set((info.get("flags") or info.get("Features") or "").split())
    isa = next((name for flag, name in _ISA if flag in flags), None)
    if isa:
        out["isa"] = isa
    for keys in (("cpu family", "model"), ("CPU implementer", "CPU part")):
        if all(info.get(k) for k in keys):
            out["cpu_id"] = " ".join(f"{k.split()[-1]} {info[k]}" for k in keys)
    return out


def _cpuinfo() -> str:
    """/proc/cpuinfo (empty where it cannot be read: not Linux)."""
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def _name(info: dict[str, str]) -> str:
    return info.get("model name") or platform.processor() or platform.machine()


def _fields(cpuinfo: str) -> dict[str, str]:
    """The fields of the first processor's block of /proc/cpuinfo's text, each key as the
    first line that gives it."""
    fields: dict[str, str] = {}
    for line in cpuinfo.strip().split("\n\n")[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def measured_elsewhere(device: DeviceProfile) -> str | None:
    """For `local`, which stands for this machine: a one-line note when it was measured on
    another processor (its name, CPU count, vector extension or id, those `measured_on` states),
    since its latencies and their +- are then that machine's; None where they match or
    `measured_on` does not say, and for every other profile (a named device's profile is meant
    to be read on any machine)."""
    if device.name != LOCAL:
        return None
    there = {k: device.measured_on[k] for k in IDENTITY if device.measured_on.get(k)}
    here = processor()
    if all(there[k] == here.get(k) for k in there):
        return None
    extra = [k for k in ("isa", "cpu_id") if k in there]
    theirs = ", ".join([f"{there.get('cpus', '?')} CPUs", *(there[k] for k in extra)])
    mine = ", ".join([f"{here['cpus']} CPUs", *(here.get(k, "?") for k in extra)])
    return (
        f"{LOCAL} was measured on {there.get('cpu', 'another CPU')} ({theirs}), not on this "
        f"machine ({here['cpu']}, {mine}): its latencies and their +- are that machine's; run "
        "`archsearch calibrate` to measure this one"
    )


def describe_error(device: DeviceProfile) -> str:
    """How a profile was obtained and what the +- on its latencies means, in one line (first,
    where `local` was measured on another machine, the note that says so)."""
    text = _describe_error(device)
    elsewhere = measured_elsewhere(device)
    return f"warning: {elsewhere}. {text}" if elsewhere else text


def _describe_error(device: DeviceProfile) -> str:
    how = (
        f"{device.provenance.kind}: {device.provenance.reason}"
        if device.provenance
        else "provenance not stated in the profile"
    )
    if not device.validation:
        return f"{device.name}: {how}; no validation figures, so latencies carry no error (+-?)"
    checks = [v for vs in device.validation.values() for v in vs]
    parts = []
    for group in dict.fromkeys(v.precisions for v in checks):
        these = [(q, v) for q, vs in device.validation.items() for v in vs if v.precisions == group]
        stats = {v.statistic for _, v in these}
        figs = ", ".join(
            f"{q} +-{100 * v.error:.0f}% ("
            + (f"the {v.statistic}; " if len(stats) > 1 else "")
            + f"MAPE {100 * v.mape:.0f}%, {100 * v.within_10:.0f}% within +-10%, n={v.n}"
            + (f"; by working set: {describe_bands(v.by_working_set)}" if v.by_working_set else "")
            + ")"
            for q, v in these
        )
        stat = f", +- the {stats.pop()} of the held-out |error|" if len(stats) == 1 else ""
        parts.append(f"at {'/'.join(group)}{stat}: {figs}; {these[0][1].method}")
    unchecked = [p for p in PRECISIONS if not any(p in v.precisions for v in checks)]
    tail = f"; {'/'.join(unchecked)} unchecked (+-?)" if unchecked else ""
    return f"{device.name}: {how}; {' | '.join(parts)}{tail}"


def describe_bands(bands: WorkingSetBands) -> str:
    """'below 14 MiB +-19% (n=10), 14-56 MiB +-86% (n=15), from 56 MiB +-24% (n=16)'."""
    mib = [f"{e / 2**20:.0f}" for e in bands.edges]
    where = [f"{lo}-{hi} MiB" for lo, hi in itertools.pairwise(mib)]
    where = [f"below {mib[0]} MiB", *where, f"from {mib[-1]} MiB"] if mib else ["all"]
    return ", ".join(
        f"{w} +-{100 * e:.0f}% (n={n})" for w, e, n in zip(where, bands.errors, bands.n)
    )


def _measured_on(raw: Any, source: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(
        isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in raw.values()
    ):
        raise UserError(
            "expected a mapping of what -> text (hostname, cpu, torch, runtime, ...)",
            source=source,
            key="measured_on",
        )
    return {str(k): str(v) for k, v in raw.items()}


def _prefill_logits(value: Any, source: str) -> str:
    if value not in ("last", "all"):
        raise UserError(
            f"must be 'last' or 'all', got {value!r}", source=source, key="prefill_logits"
        )
    return value


# ---- where profiles are found -------------------------------------------------------------------


def devices_dir() -> Path:
    """The shipped profiles (`conf/device/`)."""
    from archsearch.resources import conf_dir

    return conf_dir() / "device"


def user_devices_dir() -> Path:
    """The user's own measured profiles (`archsearch calibrate name=NAME`, on this machine or
    on a Ray node): `$ARCHSEARCH_DEVICE_DIR`, else `$XDG_CONFIG_HOME/archsearch/devices`, else
    `~/.config/archsearch/devices`; outside the installed package, which may be read-only and
    is replaced on upgrade. `device=NAME` finds them after the shipped and plugin profiles,
    whose names they may not take."""
    if os.environ.get("ARCHSEARCH_DEVICE_DIR"):
        return Path(os.environ["ARCHSEARCH_DEVICE_DIR"]).expanduser()
    config = os.environ.get("XDG_CONFIG_HOME") or Path("~/.config").expanduser()
    return Path(config) / "archsearch" / "devices"


def reserved_device_names() -> list[str]:
    """The names a user profile may not take: the shipped profiles' and the plugins'."""
    from archsearch.resources import shipped_names

    return shipped_names(devices_dir()) + list(plugins.names(plugins.DEVICES))


def device_names() -> list[str]:
    """The shipped profiles, those installed packages register (`archsearch.plugins`), then
    the user's own (`user_devices_dir`)."""
    from archsearch.resources import shipped_names

    reserved = reserved_device_names()
    return reserved + [n for n in shipped_names(user_devices_dir()) if n not in reserved]


def profile_path(name_or_path: str, *, key: str = "device") -> Path:
    """The YAML of a shipped profile by name (`rpi5`), a plugin's by its registered name
    (`pkg.board`: the entry point gives the path), a user profile by name, or a path."""
    from archsearch.resources import resolve

    if plugins.is_plugin(plugins.DEVICES, name_or_path):
        target = plugins.load(plugins.DEVICES, name_or_path)
        if not isinstance(target, (str, os.PathLike)) or not Path(target).is_file():
            raise plugins.PluginError(
                f"device plugin {name_or_path!r} must register the path of a profile YAML, "
                f"got {target!r}",
                key=key,
            )
        return Path(target).resolve()
    try:
        return resolve(name_or_path, devices_dir(), "device", key).resolve()
    except UserError as err:
        if not err.detail.startswith("unknown device"):
            raise
        mine = user_devices_dir() / f"{name_or_path}.yaml"
        if mine.is_file():
            return mine.resolve()
        raise UserError(
            f"unknown device {name_or_path!r} (known: {', '.join(device_names())}; or give a "
            "path to a .yaml file)",
            key=key,
        ) from None
