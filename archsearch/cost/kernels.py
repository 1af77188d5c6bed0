"""The kernel catalogue of the learned latency predictor, and its fitted form in a device profile.

A kernel is the unit whose time on a device is a function of its shape alone, as the models
run it ([nn-Meter]'s "kernel": the fused unit a runtime dispatches as one):

- `gemm`: one linear layer, x [m, k] @ W [n, k]^T (`archsearch.models.gemm`);
- `norm`, `residual`, `embedding`: a norm, a residual add, the token lookup over N tokens;
- `ffn`, `moe`: a whole channel mixer over N tokens (its GEMMs, activation, MoE routing and
  dispatch);
- `<mixer>.forward` and `<mixer>.step` for every sequence mixer (`gqa`, `mla`, each linear
  family, `mcsd`): the real module's chunked / parallel forward over T tokens of B sequences,
  and its recurrent / cached step at a context.

Each kernel's time is predicted in two parts, both fitted by `archsearch calibrate`
(`archsearch.cost.kernel_fit`) to the kernel's own timings:

- a **learned roofline**: seconds = a x launches + b x bytes + c x FLOPs + e, the work terms
  of the kernel's ops in the cost model (`archsearch.cost.kernel_latency.work`), with the four
  coefficients (`base`) fitted by non-negative least squares. It carries the scaling to shapes
  never measured along the physics (a wider layer moves more bytes and does more FLOPs, at the
  rates this kernel reached on this device);
- times exp(a learned **correction**) of the shape features (log2 of the sizes): a
  gradient-boosted ensemble of shallow trees (`archsearch.cost.trees`) fitted to the log ratio
  of measured to learned-roofline time. Boosting learns the piecewise, interacting effects a
  linear model misses (cache levels, small-matrix kernels, chunk sizes); a tree is constant
  beyond its last split, so the correction never extrapolates on its own.

Why both parts: in cross-validation over timed shapes, trees alone over a roofline of the
device's peaks (this predictor's first form) and the learned roofline alone both predicted held-out
shapes worse than the learned roofline with its trees: the roofline carries the scaling to
shapes never timed, the trees what it misses at the shapes that were.

The profile stores the fit under `kernels` as plain data (`Kernels.to_dict`): the runtime it
was timed in, torch version, threads, date, CPU, the dispatch overhead per operator, the
model-level terms (`glue`, by phase: `Glue`), per kernel its roofline coefficients and
ensemble, and the extra passes GEMMs of a few rows make over their weights (`passes`:
`Passes`; absent from profiles calibrated before it, or in a runtime other than torch, and then
every GEMM makes one pass), and the span over which its whole models were sampled (`sample_s`:
`kernel_timing.SAMPLE_S`; 0, back to back, in profiles calibrated before it).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from archsearch.arch import LINEAR_FAMILIES
from archsearch.cost.ops import Columns, Phase
from archsearch.cost.trees import Ensemble, parse
from archsearch.errors import UserError

__all__ = [
    "KERNELS",
    "PHASES",
    "WORK",
    "Cache",
    "Glue",
    "Kernels",
    "Passes",
    "features",
    "gemm_features",
    "mixer_kernels",
    "parse_kernels",
]

PHASES = ("forward", "step")
WORK = ("launch_s", "byte_s", "flop_s", "call_s")  # a kernel's learned-roofline coefficients
SEQUENCE_MIXERS = ("gqa", "mla", *LINEAR_FAMILIES, "mcsd")


def _log2(x) -> np.ndarray:
    return np.log2(np.maximum(np.asarray(x, dtype=np.float64), 1.0))


def _tokens(c: Columns, p: Phase) -> dict[str, np.ndarray]:
    return {"log2_N": _log2(np.full(c.n, p.tokens))}


def _context(c: Columns, p: Phase) -> np.ndarray:
    """Keys an attention step attends to (the window caps them)."""
    m = np.full(c.n, p.n0 + 1.0)
    return np.where(c.W > 0, np.minimum(m, c.W), m)


def _phase(c: Columns, p: Phase, attends: bool) -> dict[str, np.ndarray]:
    batch = {"log2_B": _log2(np.full(c.n, p.B))}
    if p.kind == "forward":
        return {"log2_T": _log2(np.full(c.n, p.T)), **batch}
    return {"log2_ctx": _log2(_context(c, p)), **batch} if attends else batch


def _gqa(c: Columns, p: Phase) -> dict[str, np.ndarray]:
    shape = {"log2_d": _log2(c.d), "log2_H": _log2(c.H), "log2_G": _log2(c.G)}
    return {**shape, "log2_dh": _log2(c.dh), **_phase(c, p, attends=True)}


def _mla(c: Columns, p: Phase) -> dict[str, np.ndarray]:
    shape = {
        "log2_d": _log2(c.d),
        "log2_H": _log2(c.H),
        "log2_dh": _log2(c.dh),
        "log2_dv": _log2(c.dv),
        "log2_dc": _log2(c.dc),
        "log2_1+dq": _log2(1 + c.dq),
        "log2_1+dr": _log2(1 + c.dr),
    }
    return {**shape, **_phase(c, p, attends=True)}


def _linear(c: Columns, p: Phase) -> dict[str, np.ndarray]:
    shape = {
        "log2_d": _log2(c.d),
        "log2_H": _log2(c.lH),
        "log2_dk": _log2(c.dk),
        "log2_dv": _log2(c.ldv),
        "gate": c.gate,
        "log2_1+R": _log2(1 + c.R),
        "log2_1+K": _log2(1 + c.K),
    }
    return {**shape, **_phase(c, p, attends=False)}


def _mcsd(c: Columns, p: Phase) -> dict[str, np.ndarray]:
    return {"log2_d": _log2(c.d), "log2_C": _log2(c.C), **_phase(c, p, attends=False)}


def _ffn(c: Columns, p: Phase) -> dict[str, np.ndarray]:
    return {**_tokens(c, p), "log2_d": _log2(c.d), "log2_F": _log2(c.F), "gated": c.gated}


def _moe(c: Columns, p: Phase) -> dict[str, np.ndarray]:
    return {
        **_tokens(c, p),
        "log2_d": _log2(c.d),
        "log2_Fe": _log2(c.Fe),
        "log2_E": _log2(c.E),
        "topk": c.topk,
        "log2_1+S": _log2(1 + c.S),
    }


def _width(c: Columns, p: Phase) -> dict[str, np.ndarray]:
    return {**_tokens(c, p), "log2_d": _log2(c.d)}


FeatureFn = Callable[[Columns, Phase], dict[str, np.ndarray]]
_MIXER_FEATURES: dict[str, FeatureFn] = {"gqa": _gqa, "mla": _mla, "mcsd": _mcsd}
_MIXER_FEATURES.update({f: _linear for f in LINEAR_FAMILIES})
_FEATURES: dict[str, FeatureFn] = {
    "norm": _width,
    "residual": _width,
    "embedding": _width,
    "ffn": _ffn,
    "moe": _moe,
}
_FEATURES.update({f"{m}.{phase}": fn for m, fn in _MIXER_FEATURES.items() for phase in PHASES})
GEMM_FEATURES = ("log2_m", "log2_k", "log2_n")


def _names(fn: FeatureFn, kernel: str) -> tuple[str, ...]:
    probe = Columns(**{k: np.ones(1) for k in Columns.__dataclass_fields__})
    phase = Phase(kernel.rpartition(".")[2] if "." in kernel else "forward", T=1.0)
    return tuple(fn(probe, phase))


# kernel name -> its feature names, in column order
KERNELS: dict[str, tuple[str, ...]] = {
    "gemm": GEMM_FEATURES,
    **{k: _names(fn, k) for k, fn in _FEATURES.items()},
}


def mixer_kernels(mixer: str) -> tuple[str, str]:
    return f"{mixer}.forward", f"{mixer}.step"


def features(kernel: str, c: Columns, p: Phase) -> np.ndarray:
    """The feature rows [c.n, len(KERNELS[kernel])] of a (non-GEMM) kernel."""
    cols = _FEATURES[kernel](c, p)
    return np.column_stack(
        [np.broadcast_to(np.asarray(v, dtype=np.float64), (c.n,)) for v in cols.values()]
    )


def gemm_features(m, k, n) -> np.ndarray:
    """[rows, 3] log2 (m, k, n), a scalar broadcast over the others (an LM head's m is the
    phase's token count for every candidate of a table)."""
    return np.column_stack(np.broadcast_arrays(_log2(m), _log2(k), _log2(n)))


# ---- the fitted form ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Cache:
    """A level of the memory hierarchy a working set can outgrow: each byte that misses it costs
    `byte_s` more than one that hits; the share that misses is 0 below `lo` bytes, 1 above
    `hi`, log-linear between. The capacities are measured (`archsearch calibrate` times a
    matrix-vector product over weights of 1/8-256 MiB: the effective capacity is the machine's
    share of a shared cache, which its other tenants move, so it is measured, not read)."""

    byte_s: float
    lo: float
    hi: float

    def missing(self, nbytes) -> np.ndarray:
        """The share of a working set of `nbytes` that misses this cache."""
        nbytes = np.maximum(np.asarray(nbytes, dtype=np.float64), 1.0)
        lo = max(self.lo, 1.0)
        span = math.log(max(self.hi, lo * (1 + 1e-9)) / lo)
        return np.clip(np.log(nbytes / lo) / span, 0.0, 1.0)

    def stalls(self, nbytes) -> np.ndarray:
        """Seconds of the stalls of a working set of `nbytes` read once per call."""
        return self.byte_s * np.asarray(nbytes, dtype=np.float64) * self.missing(nbytes)

    def to_dict(self) -> dict[str, float]:
        return {k: float(f"{v:.4g}") for k, v in zip(CACHE_KEYS, (self.byte_s, self.lo, self.hi))}


CACHE_KEYS = ("byte_s", "cache_lo", "cache_hi")


@dataclass(frozen=True)
class Glue:
    """What a model costs beyond the sum of its kernels, for one phase: seconds per model and
    per layer (Python, state bookkeeping), and the memory stalls of its working set.

    A kernel timed alone, again and again, finds its weights and state in the cache while they
    fit; in a model the other layers have evicted them once the model's working set (weights
    and decode state) outgrows the cache. The stalls are summed over the cache levels the probe
    found (`caches`: e.g. a private L2 and the machine's share of a shared L3, or the shared
    L3 alone), each level's
    `byte_s` the probe's cost per missed byte scaled by a factor fitted to whole models. A
    kernel's learned time excludes the stalls it met alone (`stalls` of its own resident
    bytes, subtracted from its timings before its fit); a model adds those of its whole
    working set.

    Beyond its bytes, a layer of a decode step whose model misses the largest cache costs
    `layer_miss_s` x the share that misses (fitted for the step only: `kernel_fit._fit_glue`).
    Decode steps of deep, narrow models whose working sets straddle the cache run slower than
    their kernels and per-byte stalls, while shallow models of the same size do not. What it
    is is not measured; a layer's many small tensors (norm weights, biases, its decode state),
    missed one at a time at DRAM latency rather than streamed, would cost so.

    A decode step on B sequences hides part of its stalls behind compute: a weight GEMM of B
    rows whose weights come from memory takes max(its compute, its stream), the roofline, not
    their sum. Of each weight GEMM's share of the byte stalls, the step pays back `overlap` x
    min(that share, the GEMM's time at B rows less at one row); `overlap` (0 to 1: 1 is the
    roofline's perfect overlap) is fitted to whole models for the step only. Batched steps of
    wide dense models beyond the cache hide most of the extra compute of their GEMMs, while
    Mamba2, HGRN2 and MoE steps, whose extra compute at a larger batch is mostly in their state
    updates and expert routing, hide little: the rule pays back only what each weight GEMM's
    own extra time can cover (`hidden`)."""

    model_s: float
    layer_s: float
    caches: tuple[Cache, ...] = ()
    layer_miss_s: float = 0.0
    overlap: float = 0.0

    def overhead(self, layers) -> np.ndarray:
        """Seconds per model and per layer."""
        return self.model_s + self.layer_s * np.asarray(layers, dtype=np.float64)

    def byte_stalls(self, nbytes) -> np.ndarray:
        """Seconds of the stalls of the bytes of a working set of `nbytes` that miss, summed
        over the cache levels (without the per-layer miss)."""
        out = np.zeros(np.shape(nbytes))
        for cache in self.caches:
            out = out + cache.stalls(nbytes)
        return out

    def stalls(self, nbytes, layers=0) -> np.ndarray:
        """Seconds of memory stalls of a working set of `nbytes` read once per call by a model
        of `layers` layers."""
        out = self.byte_stalls(nbytes)
        if self.layer_miss_s:
            layers = np.asarray(layers, dtype=np.float64)
            out = out + self.layer_miss_s * layers * self.missing(nbytes)
        return out

    def hidden(self, nbytes, extra, weight_bytes) -> np.ndarray:
        """Seconds of the stalls of a working set of `nbytes` that its weight GEMMs hide behind
        their compute: `overlap` x the sum over GEMMs of min(its share of the byte stalls, by
        its weights' bytes, its `extra` seconds at B rows beyond one row). `extra` and
        `weight_bytes` are [GEMMs, rows]."""
        if not self.overlap or not self.caches:
            return np.zeros(np.shape(nbytes))
        share = self.shares(nbytes, weight_bytes)
        return self.overlap * np.minimum(np.asarray(extra, dtype=np.float64), share).sum(axis=0)

    def shares(self, nbytes, weight_bytes) -> np.ndarray:
        """Each weight GEMM's share of the byte stalls of a working set of `nbytes`, by its
        weights' bytes (`weight_bytes`: [GEMMs, rows])."""
        nbytes = np.asarray(nbytes, dtype=np.float64)
        per_byte = self.byte_stalls(nbytes) / np.maximum(nbytes, 1.0)
        return np.asarray(weight_bytes, dtype=np.float64) * per_byte

    def missing(self, nbytes) -> np.ndarray:
        """The share of a working set of `nbytes` that misses the largest cache (0 with none):
        what `layer_miss_s` is paid on."""
        if not self.caches:
            return np.zeros(np.shape(nbytes))
        return self.caches[-1].missing(nbytes)

    def scaled(self, w: float) -> tuple[Cache, ...]:
        """The caches with every missed byte costing `w` times as much."""
        return tuple(dataclasses.replace(c, byte_s=w * c.byte_s) for c in self.caches)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model_s": float(f"{self.model_s:.4g}"),
            "layer_s": float(f"{self.layer_s:.4g}"),
            "caches": [c.to_dict() for c in self.caches],
            "layer_miss_s": float(f"{self.layer_miss_s:.4g}"),
            "overlap": float(f"{self.overlap:.4g}"),
        }


@dataclass(frozen=True)
class Passes:
    """The extra passes over its weights a GEMM of a few rows makes when they come from
    memory: `extra[i][j]` for weights of `sizes[i]` bytes on `rows[j]` rows, measured by
    `archsearch calibrate` as (stalls at those rows / stalls at one row) - 1, floored at 0
    (`kernel_timing.pass_stalls`). A GEMM's weights that miss the cache are streamed
    1 + extra times, each byte at the working set's per-byte stall (`Glue.shares`).

    The library's kernels for a few rows are not one blocked pass: PyTorch's MKL `F.linear`, which
    `archsearch.models.gemm` leaves below 8 rows, runs 2-3 rows much as separate matrix-vector
    products, so weights streamed from beyond the last-level cache stall longer on them than on one
    row, more so the larger the weight, while oneDNN's kernel from 8 rows overlaps its stream. Rows
    between the table's are interpolated (0 extra at one row), bytes in log2 and held at the ends;
    GEMMs of more rows than the table's last make one pass."""

    rows: tuple[float, ...]
    sizes: tuple[float, ...]  # bytes of one weight
    extra: tuple[tuple[float, ...], ...]  # [sizes][rows]

    def __call__(self, rows, nbytes) -> np.ndarray:
        """Extra passes of GEMMs of `rows` rows over weights of `nbytes` (broadcast)."""
        rows, nbytes = np.broadcast_arrays(
            np.asarray(rows, dtype=np.float64), np.asarray(nbytes, dtype=np.float64)
        )
        xs = [1.0, *self.rows]
        by_size = np.array(
            [np.interp(rows, xs, [0.0, *e], left=0.0, right=0.0) for e in self.extra]
        )
        at = np.interp(
            np.log2(np.maximum(nbytes, 1.0)), np.log2(self.sizes), range(len(self.sizes))
        )
        index = np.arange(len(self.sizes)).reshape(-1, *(1,) * at.ndim)
        return (np.maximum(0.0, 1.0 - np.abs(at - index)) * by_size).sum(axis=0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": [float(f"{r:.4g}") for r in self.rows],
            "bytes": [int(s) for s in self.sizes],
            "extra": [[float(f"{e:.3g}") for e in row] for row in self.extra],
        }


GLUE_KEYS = ("model_s", "layer_s", "caches", "layer_miss_s", "overlap")
NO_GLUE = Glue(0.0, 0.0)


@dataclass(frozen=True)
class Kernels:
    """A fitted kernel-level predictor (see the module docstring)."""

    runtime: str
    torch: str
    threads: int
    date: str
    cpu: str
    dispatch_s: float  # seconds per dispatched operator
    glue: dict[str, Glue]  # phase -> the model-level terms
    predictors: dict[str, Ensemble] = field(default_factory=dict)
    bases: dict[str, tuple[float, ...]] = field(default_factory=dict)  # kernel -> WORK coefs
    samples: dict[str, int] = field(default_factory=dict)  # timings each predictor was fitted to
    fresh_error: dict[str, float] = field(default_factory=dict)  # MAPE on its last fresh shapes
    passes: Passes | None = None  # GEMMs of a few rows (None: one pass at every row count)
    sample_s: float = 0.0  # seconds over which its whole models' samples were taken

    def correction(self, kernel: str, X: np.ndarray) -> np.ndarray:
        """exp(learned log ratio) of measured to base time per row (1 without a predictor).

        Rows with equal features are evaluated once (tables of candidates repeat shapes)."""
        ens = self.predictors.get(kernel)
        if ens is None or len(X) == 0:
            return np.ones(len(X))
        key = X @ _HASH[: X.shape[1]]
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        unique = X[first]
        if not np.array_equal(unique[inverse], X):  # a hash collision: evaluate every row
            unique, inverse = X, np.arange(len(X))
        return np.exp(ens.predict(unique))[inverse]

    def to_dict(self) -> dict[str, Any]:
        return {
            "runtime": self.runtime,
            "torch": self.torch,
            "threads": self.threads,
            "date": self.date,
            "cpu": self.cpu,
            "dispatch_s": float(f"{self.dispatch_s:.4g}"),
            "glue": {phase: g.to_dict() for phase, g in self.glue.items()},
            "predictors": {
                name: {
                    "samples": self.samples.get(name, 0),
                    "fresh_error": round(self.fresh_error.get(name, 0.0), 4),
                    "base": {k: float(f"{v:.6g}") for k, v in zip(WORK, self.bases[name])},
                    "model": ens.to_dict(),
                }
                for name, ens in self.predictors.items()
            },
            **({"passes": self.passes.to_dict()} if self.passes is not None else {}),
            "sample_s": self.sample_s,
        }


_HASH = np.random.default_rng(20240613).uniform(1.0, 2.0, 16) * np.pi


def parse_kernels(raw: Any, *, source: str, key: str = "kernels") -> Kernels | None:
    """The `kernels` section of a profile, checked: one-line errors name the key path."""
    if raw is None:
        return None

    def fail(what: str, sub: str) -> UserError:
        return UserError(what, source=source, key=f"{key}.{sub}" if sub else key)

    if not isinstance(raw, dict):
        raise fail(f"expected a mapping, got {type(raw).__name__}", "")
    known = {"runtime", "torch", "threads", "date", "cpu", "dispatch_s", "glue", "predictors"}
    optional = {"passes", "sample_s"}  # absent from profiles calibrated before them
    extra = sorted(set(map(str, raw)) - known - optional)
    if extra:
        raise fail(f"unknown key (known: {', '.join(sorted(known | optional))})", extra[0])
    for k in sorted(known):
        if k not in raw:
            raise fail("missing required key", k)
    for k in ("runtime", "torch", "date", "cpu"):
        if not isinstance(raw[k], str) or not raw[k].strip():
            raise fail(f"expected a non-empty string, got {raw[k]!r}", k)
    threads = raw["threads"]
    if isinstance(threads, bool) or not isinstance(threads, int) or threads <= 0:
        raise fail(f"expected a positive integer, got {threads!r}", "threads")
    dispatch = _seconds(raw["dispatch_s"], fail, "dispatch_s")
    glue_raw = raw["glue"]
    if not isinstance(glue_raw, dict) or set(map(str, glue_raw)) != set(PHASES):
        raise fail(f"expected {{forward: {{{', '.join(GLUE_KEYS)}}}, step: {{...}}}}", "glue")
    glue = {phase: _glue(glue_raw[phase], fail, f"glue.{phase}") for phase in PHASES}
    preds_raw = raw["predictors"]
    if not isinstance(preds_raw, dict):
        raise fail("expected a mapping of kernel -> {samples, fresh_error, model}", "predictors")
    predictors, bases, samples, fresh = {}, {}, {}, {}
    entry_keys = {"samples", "fresh_error", "base", "model"}
    for name, entry in preds_raw.items():
        sub = f"predictors.{name}"
        if name not in KERNELS:
            raise fail(f"unknown kernel (known: {', '.join(KERNELS)})", sub)
        if isinstance(entry, dict) and set(map(str, entry)) == entry_keys - {"base"}:
            raise fail(f"{_EARLIER} (no base): re-run `archsearch calibrate`", sub)
        if not isinstance(entry, dict) or set(map(str, entry)) != entry_keys:
            raise fail("expected {samples, fresh_error, base, model}", sub)
        base = entry["base"]
        if not isinstance(base, dict) or set(map(str, base)) != set(WORK):
            raise fail(f"expected {{{', '.join(WORK)}}}, got {base!r}"[:160], f"{sub}.base")
        bases[name] = tuple(_seconds(base[k], fail, f"{sub}.base.{k}") for k in WORK)
        n = entry["samples"]
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise fail(f"expected a positive integer, got {n!r}", f"{sub}.samples")
        samples[name] = n
        fresh[name] = _seconds(entry["fresh_error"], fail, f"{sub}.fresh_error")
        predictors[name] = parse(
            entry["model"], source=source, key=f"{key}.{sub}.model", features=KERNELS[name]
        )
    return Kernels(
        runtime=raw["runtime"],
        torch=raw["torch"],
        threads=threads,
        date=raw["date"],
        cpu=raw["cpu"],
        dispatch_s=dispatch,
        glue=glue,
        predictors=predictors,
        bases=bases,
        samples=samples,
        fresh_error=fresh,
        passes=_passes(raw["passes"], fail) if "passes" in raw else None,
        sample_s=_seconds(raw.get("sample_s", 0.0), fail, "sample_s"),
    )


def _passes(raw: Any, fail) -> Passes:
    """`passes`: {rows: [r, ...], bytes: [b, ...], extra: [[per row] per size]}, rows and bytes
    increasing, rows above one, every extra a finite number >= 0."""
    form = "expected {rows: [...], bytes: [...], extra: [[...], ...]}"
    if not isinstance(raw, dict) or set(map(str, raw)) != {"rows", "bytes", "extra"}:
        raise fail(f"{form}, got {raw!r}"[:160], "passes")
    axes = {}
    for k, least in (("rows", 1.0), ("bytes", 0.0)):
        v = raw[k]
        if not isinstance(v, list) or not v:
            raise fail(f"expected a non-empty list, got {v!r}"[:160], f"passes.{k}")
        values = [_seconds(x, fail, f"passes.{k}[{i}]") for i, x in enumerate(v)]
        if values[0] <= least or any(b <= a for a, b in itertools.pairwise(values)):
            raise fail(
                f"expected increasing values above {least:g}, got {v!r}"[:160], f"passes.{k}"
            )
        axes[k] = tuple(values)
    table = raw["extra"]
    if not isinstance(table, list) or len(table) != len(axes["bytes"]):
        raise fail(f"expected one list per entry of bytes, got {table!r}"[:160], "passes.extra")
    extra = []
    for i, row in enumerate(table):
        if not isinstance(row, list) or len(row) != len(axes["rows"]):
            raise fail(
                f"expected one number per entry of rows, got {row!r}"[:160], f"passes.extra[{i}]"
            )
        extra.append(tuple(_seconds(x, fail, f"passes.extra[{i}][{j}]") for j, x in enumerate(row)))
    return Passes(axes["rows"], axes["bytes"], tuple(extra))


_EARLIER = "a kernel fit in the form of an earlier archsearch calibrate"
_ONE_CACHE = {"model_s", "layer_s", *CACHE_KEYS}  # an earlier calibrate's form: one cache level


def _glue(entry: Any, fail, sub: str) -> Glue:
    """A phase's `glue`: {model_s, layer_s, caches: [{byte_s, cache_lo, cache_hi}, ...],
    layer_miss_s, overlap}; earlier profiles' forms read with none of the terms they lack:
    without `overlap`, without `layer_miss_s` and `overlap`, and the one-level {model_s,
    layer_s, byte_s, cache_lo, cache_hi}."""
    if isinstance(entry, dict) and "scale" in entry:
        raise fail(f"{_EARLIER}: re-run `archsearch calibrate`", f"{sub}.scale")
    keys = set(map(str, entry)) if isinstance(entry, dict) else set()
    later = ("layer_miss_s", "overlap")  # the terms profiles gained, in order
    forms = [set(GLUE_KEYS) - set(later[i:]) for i in range(len(later) + 1)]
    if keys not in (*forms, _ONE_CACHE):
        raise fail(f"expected {{{', '.join(GLUE_KEYS)}}}, got {entry!r}"[:160], sub)
    model_s, layer_s = (_seconds(entry[k], fail, f"{sub}.{k}") for k in ("model_s", "layer_s"))
    layer_miss_s, overlap = (
        _seconds(entry[k], fail, f"{sub}.{k}") if k in keys else 0.0 for k in later
    )
    if overlap > 1:
        raise fail(f"expected a share from 0 to 1, got {overlap!r}", f"{sub}.overlap")
    levels = [entry] if keys == _ONE_CACHE else entry["caches"]
    if not isinstance(levels, list):
        raise fail(f"expected a list of {{{', '.join(CACHE_KEYS)}}}, got {levels!r}"[:160], sub)
    caches = []
    for i, level in enumerate(levels):
        at = sub if keys == _ONE_CACHE else f"{sub}.caches[{i}]"
        if keys != _ONE_CACHE and (
            not isinstance(level, dict) or set(map(str, level)) != set(CACHE_KEYS)
        ):
            raise fail(f"expected {{{', '.join(CACHE_KEYS)}}}, got {level!r}"[:160], at)
        caches.append(Cache(*(_seconds(level[k], fail, f"{at}.{k}") for k in CACHE_KEYS)))
    return Glue(model_s, layer_s, tuple(caches), layer_miss_s, overlap)


def _seconds(v: Any, fail, sub: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise fail(f"expected a finite number >= 0, got {v!r}", sub)
    return float(v)
