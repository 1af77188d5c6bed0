"""Predicted latency: a profile and a table of candidates -> TTFT and decode, with their error.

On a profile `archsearch calibrate` wrote, fp32 latency is the sum of the model's kernels
(`kernels`), each learned on the device, plus the memory stalls of its working set; other
precisions, and the published-fit profiles, are priced by the roofline (`cost.model`). Numpy
only: nothing here imports torch.

A kernel takes its learned roofline, a x launches + b x bytes + c x FLOPs + e (its work terms,
the `WORK` coefficients fitted by non-negative least squares), times exp(its correction):
boosted trees over its shape features (`trees`), constant beyond their last split, so the
roofline alone carries the scaling to shapes never timed. A kernel without a fit (the deploy
runtime cannot run it) and a plugin's traced ops take their analytic time: the learned `gemm`
for each linear layer, the roofline at the device's peaks for the rest, and the profile's
overhead per operator.

Memory stalls (`Memory`, per phase): timed alone, again and again, a kernel finds its weights
and state in the cache; in a model whose working set (`cost.model.working_set`) outgrows the
cache, the other layers have evicted them. On B > 1 sequences a linear layer may stream its
weights more than once (`Passes`, measured per runtime). Each fitted term below is kept because
leaving it out costs held-out accuracy beyond the spread between two calibrations
(`bench_latency_ablation.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import NamedTuple

import numpy as np

from archsearch.cost import devices, model
from archsearch.cost.counts import block_modules
from archsearch.cost.devices import ERROR_QUANTITIES, DeviceProfile, latency_error
from archsearch.cost.model import prefill_phase, step_phase, working_set
from archsearch.cost.ops import Columns, Op, Phase
from archsearch.latency import kernels as K
from archsearch.latency.trees import Ensemble

__all__ = ["KernelFit", "Memory", "Passes", "Prediction", "Predictor", "decode_s", "e2e_s"]
__all__ += ["latency_errors", "phase_seconds", "prediction", "seconds_by_part", "ttft_s"]

WORK = ("launch_s", "byte_s", "flop_s", "call_s")  # a kernel's learned-roofline coefficients
# a decode step's weight GEMMs hide stalls behind their extra compute from this many sequences:
# on 2-4 rows the passes probe finds a linear layer's stalls whole (its time from memory is its
# time from the cache plus one row's stalls, or more), on 8 part hidden (`bench_latency_batch`)
HIDES_FROM = 8
_HASH = np.random.default_rng(20240613).uniform(1.0, 2.0, 16) * np.pi


@dataclass(frozen=True)
class Passes:
    """How many times a linear layer streams its weights from memory on `rows` rows, relative
    to one row, by rows and by the layer's fp32 weight bytes (measured: its stalls, timed from
    memory less from the cache, over one row's; at least 1). A BLAS may run two or three rows
    as that many matrix-vector products, each reading the weights again, where a blocked
    kernel at more rows reads them once. Linear in rows and in log bytes between the grid's
    points, held at its ends."""

    rows: tuple[float, ...]
    nbytes: tuple[float, ...]
    table: tuple[tuple[float, ...], ...]  # [rows][nbytes]; its first row (one row) is 1

    def at(self, rows: float, nbytes) -> np.ndarray:
        """The passes of a layer of `nbytes` weight bytes (an array) on `rows` rows."""
        line = [np.interp(rows, self.rows, column) for column in zip(*self.table)]
        log_bytes = np.log(np.maximum(np.asarray(nbytes, dtype=np.float64), 1.0))
        return np.interp(log_bytes, np.log(self.nbytes), line)


@dataclass(frozen=True)
class Memory:
    """A phase's memory terms. A model pays `stall_s` per byte of its working set that misses
    the cache, the share that misses going from 0 at `lo` bytes to 1 at `hi` (log-linear).
    A decode step also pays `miss_s` per layer x that share (deep, narrow models beyond the
    cache decode slower than their bytes say; the cause is not measured), and on B > 1
    sequences its weight GEMMs hide part of the stalls behind their extra compute (from
    `HIDES_FROM` sequences): `overlap` x the sum over GEMMs of min(its share of the stalls, its
    time at B rows less at one), its weights' stalls paid again for each of their `passes`
    beyond the first."""

    stall_s: float  # seconds per working-set byte that misses the cache
    lo: float  # bytes: below this working set nothing misses
    hi: float  # bytes: beyond it every byte misses
    miss_s: float = 0.0  # seconds per layer x the share that misses (decode step)
    overlap: float = 0.0  # share of the stalls a batched step's GEMMs can hide (decode step)
    passes: Passes | None = None  # a batched step's passes over its weights (None: one)

    def missing(self, nbytes) -> np.ndarray:
        """The share of a working set of `nbytes` that misses the cache."""
        nbytes = np.maximum(np.asarray(nbytes, dtype=np.float64), 1.0)
        lo = max(self.lo, 1.0)
        span = math.log(max(self.hi, lo * (1 + 1e-9)) / lo)
        return np.clip(np.log(nbytes / lo) / span, 0.0, 1.0)

    def byte_stalls(self, nbytes) -> np.ndarray:
        return self.stall_s * np.asarray(nbytes, dtype=np.float64) * self.missing(nbytes)

    def stalls(self, nbytes, layers) -> np.ndarray:
        """The byte stalls and the per-layer miss of a model of `layers` layers."""
        per_layer = self.miss_s * np.asarray(layers, dtype=np.float64) * self.missing(nbytes)
        return self.byte_stalls(nbytes) + per_layer

    def per_byte(self, nbytes) -> np.ndarray:
        """The stalls per byte a model of working set `nbytes` streams."""
        nbytes = np.asarray(nbytes, dtype=np.float64)
        return self.byte_stalls(nbytes) / np.maximum(nbytes, 1.0)

    def hidden(self, nbytes, extra, streamed) -> np.ndarray:
        """What the weight GEMMs hide, `extra` seconds and `streamed` bytes [GEMMs, rows]."""
        share = np.asarray(streamed) * self.per_byte(nbytes)
        return self.overlap * np.minimum(np.asarray(extra, dtype=np.float64), share).sum(axis=0)

    def batched(self, nbytes, extra, weights, streamed) -> np.ndarray:
        """What B > 1 sequences add to a step's stalls, from its weight GEMMs' extra seconds,
        weight bytes and bytes streamed (weights x passes), each [GEMMs, rows]: the passes
        beyond the first, less what the GEMMs hide."""
        again = np.sum(streamed, axis=0) - np.sum(weights, axis=0)
        return self.per_byte(nbytes) * again - self.hidden(nbytes, extra, streamed)


@dataclass(frozen=True)
class KernelFit:
    """A kernel's learned-roofline coefficients (`WORK`) and correction (None: the roofline
    alone), fitted to `samples` timings."""

    base: tuple[float, float, float, float]  # seconds per launch, byte, FLOP and call
    trees: Ensemble | None  # the correction of log(measured / base) (`trees`)
    samples: int  # timings it was fitted to

    def seconds(self, w: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Seconds per row of work terms `w` [rows, 4] and features `X`."""
        base = w @ np.asarray(self.base)
        if self.trees is None or len(X) == 0:
            return base
        key = X @ _HASH[: X.shape[1]]  # a table of candidates repeats shapes: each once
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        if not np.array_equal(X[first][inverse.reshape(-1)], X):  # a collision: every row
            first, inverse = np.arange(len(X)), np.arange(len(X))
        return base * np.exp(self.trees.predict(X[first]))[inverse.reshape(-1)]


@dataclass(frozen=True)
class Predictor:
    """A profile's learned predictor: per kernel its fit, per phase its memory terms (None: no
    cache level found), and how it was timed."""

    runtime: str
    torch: str
    threads: int
    date: str
    cpu: str
    sample_s: float  # seconds over which each whole model's samples were taken
    kernels: dict[str, KernelFit] = field(default_factory=dict)
    memory: dict[str, Memory | None] = field(default_factory=dict)

    def gemm(self, device: DeviceProfile, m, k, n) -> np.ndarray:
        """Seconds of x [m, k] @ W [n, k]^T."""
        w, fit = K.gemm_work(m, k, n), self.kernels.get("gemm")
        return (
            fit.seconds(w, K.gemm_features(m, k, n)) if fit else _roofline(device, w[:, 2], w[:, 1])
        )

    def kernel(self, name: str, c: Columns, p: Phase, device: DeviceProfile) -> np.ndarray:
        """Seconds of one call of a kernel per row (its analytic time without a fit)."""
        fit = self.kernels.get(name)
        if fit is None:
            return self.analytic(K.kernel_ops(name, c, p), device, c.n)
        return fit.seconds(K.work(name, c, p), K.features(name, c, p))

    def analytic(self, ops: list[Op], device: DeviceProfile, n: int) -> np.ndarray:
        total = np.zeros(n)
        for op in ops:
            if op.kind == "matmul" and np.any(np.asarray(op.k) > 0):
                total = total + self.matmul(op, device, n)
            else:
                nbytes = K.FP32 * (np.asarray(op.weights) + op.acts + op.state)
                total = total + _roofline(device, op.flops + op.extra_flops, nbytes)
            total = total + np.asarray(op.launches) * device.eff("fp32").op_overhead_s
        return total

    def matmul(self, op: Op, device: DeviceProfile, n: int) -> np.ndarray:
        """A linear layer's op as copies of the learned `gemm` at its rows and shape."""
        k, rows = np.asarray(op.k, dtype=float), np.maximum(np.asarray(op.rows, dtype=float), 1.0)
        width = np.where(k > 0, np.asarray(op.kn, dtype=float) / np.maximum(k, 1.0), 0)
        one = 2.0 * rows * k * width
        copies = np.divide(op.flops, one, out=np.zeros(n), where=one > 0)
        return copies * self.gemm(device, rows, k, width)

    def seconds(self, c: Columns, p: Phase, device: DeviceProfile, lm_head_tokens=None):
        """(part, seconds per row) of a phase of table `c` (one group), multiplicity included:
        its mixers and channel mixers, 2L + 1 norms, 2L residual adds, the embedding, the LM
        head over `lm_head_tokens` of each sequence (None: every token) and the stalls."""
        out = []
        for category, count, fn in block_modules(c):
            if np.any(count):
                name = K.module_kernel(fn, c, p)
                t = (
                    self.kernel(name, c, p, device)
                    if name
                    else self.analytic(fn(c, p), device, c.n)
                )
                out.append((Op(name or fn.__name__, category=category), count * t))
        for name, category, count in (
            ("norm", "norms+residual", 2 * c.L + 1),
            ("residual", "norms+residual", 2 * c.L),
            ("embedding", "embedding", np.ones(c.n)),
        ):
            out.append((Op(name, category=category), count * self.kernel(name, c, p, device)))
        rows = p.tokens if lm_head_tokens is None else p.B * lm_head_tokens
        out.append((Op("lm_head", category="lm head"), self.gemm(device, rows, c.d, c.V)))
        memory = self.memory.get(p.kind)
        if memory is not None:
            nbytes = working_set(c, p)
            stalls = memory.stalls(nbytes, c.L)
            if p.B > 1 and (memory.overlap or memory.passes):  # one sequence: one pass, no rows
                gemms = self.weight_gemms(c, p, device, rows, memory.passes)
                stalls = stalls + memory.batched(nbytes, *gemms)
            out.append((Op("memory stalls", category="norms+residual"), stalls))
        return out

    def weight_gemms(self, c: Columns, p: Phase, device, head_rows, passes: Passes | None = None):
        """(extra seconds, weight bytes, bytes streamed) [GEMMs, rows] of each GEMM with fp32
        weights of a phase on B sequences, multiplicity included: its time at the phase's rows
        less at one sequence's (none below `HIDES_FROM` sequences: nothing to hide behind), and
        its weights x their `passes` on B rows (`Memory.batched`)."""
        one = Phase(p.kind, p.T, p.n0, 1.0, p.causal)
        gemms = [  # (count, op on B sequences, op on one) of each block GEMM with weights
            (count + np.zeros(c.n), op, op1)
            for _, count, fn in block_modules(c)
            if np.any(count)
            for op, op1 in zip(fn(c, p), fn(c, one))
            if op.kind == "matmul" and np.any(np.asarray(op.k) > 0) and np.any(op.weights)
        ]
        head = K.FP32 * np.asarray(c.d * c.V, dtype=np.float64)
        nbytes = [K.FP32 * np.asarray(op.weights, dtype=np.float64) for _, op, _ in gemms]
        each = np.array([b + np.zeros(c.n) for b in (head, *nbytes)])  # one copy's weight bytes
        weights = np.array([np.ones(c.n)] + [n for n, _, _ in gemms]) * each
        streamed = weights if passes is None else weights * passes.at(p.B, each)
        if p.B < HIDES_FROM:
            return np.zeros_like(weights), weights, streamed
        extra = [
            self.gemm(device, head_rows, c.d, c.V) - self.gemm(device, head_rows / p.B, c.d, c.V)
        ]
        for n, op, op1 in gemms:
            extra.append(n * (self.matmul(op, device, c.n) - self.matmul(op1, device, c.n)))
        return np.maximum(np.array(extra), 0.0), weights, streamed


def _roofline(device: DeviceProfile, flops, nbytes) -> np.ndarray:
    """max(compute at the fp32 peak, memory time at the cache bandwidth when the bytes fit the
    cache the profile models, else at the memory bandwidth)."""
    nbytes = np.asarray(nbytes, dtype=np.float64)
    bandwidth = device.memory_bandwidth
    if device.cache_capacity > 0 and device.cache_bandwidth > 0:
        bandwidth = np.where(nbytes <= device.cache_capacity, device.cache_bandwidth, bandwidth)
    return np.maximum(np.asarray(flops, dtype=np.float64) / device.peak("fp32"), nbytes / bandwidth)


def seconds_by_part(c: Columns, p: Phase, device, precision: str, *, lm_head_tokens=None):
    """(part, seconds per row) of a phase: per kernel on the learned predictor (fp32 on a
    calibrated profile), else per op of the roofline (`cost.model.op_seconds`); each distinct
    row once, rows with the same modules together."""
    if device.predictor is None or precision != "fp32":
        return model.op_seconds(c, p, device, precision, lm_head_tokens=lm_head_tokens)
    distinct, inverse = _distinct(c)
    if inverse is not None:
        parts = seconds_by_part(distinct, p, device, precision, lm_head_tokens=lm_head_tokens)
        return [(op, t[inverse]) for op, t in parts]
    totals: dict[tuple[str, str], np.ndarray] = {}
    for idx, sub in c.groups():
        for op, t in device.predictor.seconds(sub, p, device, lm_head_tokens):
            totals.setdefault((op.name, op.category), np.zeros(c.n))[idx] = t
    return [(Op(name, category=category), t) for (name, category), t in totals.items()]


def _distinct(c: Columns) -> tuple[Columns, np.ndarray | None]:
    """(c's distinct rows, each row's index among them), or (c, None) when all are distinct;
    once per table (a million candidates drawn from a space hold a few thousand)."""
    if "_distinct" not in c.__dict__:
        names = [f.name for f in fields(Columns)]
        weights = np.random.default_rng(7).uniform(1.0, 2.0, len(names)) * np.pi
        key = sum(w * getattr(c, k) for w, k in zip(weights, names))
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        distinct, inverse = Columns(**{k: getattr(c, k)[first] for k in names}), inverse.reshape(-1)
        same = all(np.array_equal(getattr(distinct, k)[inverse], getattr(c, k)) for k in names)
        c.__dict__["_distinct"] = (distinct, inverse) if same and len(first) < c.n else (c, None)
    return c.__dict__["_distinct"]


def phase_seconds(c, p: Phase, device: DeviceProfile, precision: str, *, lm_head_tokens=None):
    """Seconds of one phase per row."""
    parts = seconds_by_part(c, p, device, precision, lm_head_tokens=lm_head_tokens)
    return sum((t for _, t in parts), np.zeros(c.n))


def ttft_s(c: Columns, device: DeviceProfile, prompt: int, precision: str, batch: float = 1.0):
    """Seconds to the first token: a prefill of `prompt` tokens (its LM head over the last
    token only where the profile's runtime computes only those logits)."""
    last = 1.0 if device.prefill_logits == "last" else None
    return phase_seconds(c, prefill_phase(prompt, batch), device, precision, lm_head_tokens=last)


def decode_s(c: Columns, device: DeviceProfile, context, precision: str, batch: float = 1.0):
    """Seconds of one decode step after `context` tokens."""
    return phase_seconds(c, step_phase(context, batch), device, precision)


def e2e_s(c, device: DeviceProfile, prompt: int, generate: int, precision: str, batch=1.0):
    """TTFT plus `generate` steps at the mean context (exact where the step time is affine in
    the context, as it is on either side of a roofline ridge)."""
    step = decode_s(c, device, model.mean_context(prompt, generate), precision, batch)
    return ttft_s(c, device, prompt, precision, batch) + generate * step


def latency_errors(c: Columns, device, metric: str, precision: str, *, batch=1.0, **setting):
    """The relative error each row's latency metric (`ttft_ms`, `decode_ms`, `e2e_ms` at the
    `setting`'s prompt, context and generate) carries: the profile's check at `precision`, in
    the band of the row's working set where it gives bands (e2e: the larger of the prefill's
    and the mean-context step's), else its one figure; None where no check covers it."""
    one = latency_error(device, metric, precision)
    if one is None:
        return None
    if all(device.check(q, precision).by_working_set is None for q in ERROR_QUANTITIES[metric]):
        return np.full(c.n, one)
    prompt, context, generate = (setting.get(k, 0) for k in ("prompt", "context", "generate"))
    phases = {}
    if metric in ("ttft_ms", "e2e_ms"):
        phases["ttft"] = prefill_phase(prompt, batch)
    if metric in ("decode_ms", "e2e_ms"):
        n0 = context if metric == "decode_ms" else model.mean_context(prompt, generate)
        phases["decode"] = step_phase(n0, batch)
    out = np.empty(c.n)
    for idx, sub in c.groups():
        sets = {q: working_set(sub, p) for q, p in phases.items()}
        out[idx] = devices.latency_errors(device, metric, precision, sets)
    return out


class Prediction(NamedTuple):
    """Seconds to the first token and of one decode step per row, with their relative errors
    (None: the profile has no check at that precision)."""

    ttft_s: np.ndarray
    decode_s: np.ndarray
    ttft_error: np.ndarray | None
    decode_error: np.ndarray | None


def prediction(c: Columns, device, *, prompt: int, context: int, precision="fp32", batch=1.0):
    """TTFT of a `prompt`-token prefill and one decode step after `context` tokens on `batch`
    sequences, with their errors, for every row of `c`."""
    settings = dict(prompt=prompt, context=context, batch=batch)
    return Prediction(
        ttft_s(c, device, prompt, precision, batch),
        decode_s(c, device, context, precision, batch),
        latency_errors(c, device, "ttft_ms", precision, **settings),
        latency_errors(c, device, "decode_ms", precision, **settings),
    )
