"""Fitting the learned predictor to a calibration's timings (pure functions: no timing here).

1. The memory probe (`fit_memory`): a matrix-vector product over weights of 1/8-256 MiB runs
   from the cache while its weight fits and from memory beyond; seconds = t0 + r x bytes +
   stall_s x bytes x missing(bytes) (`predict.Memory`): t0, r and stall_s by non-negative
   least squares on relative errors for each pair of capacities `lo` < `hi` (between which the
   share that misses goes from 0 to 1): every pair of a log grid, then the grid's best few
   refined (Powell's method on log `lo`, log `hi`): the capacities need not fall on the grid,
   nor the stall per byte bend to make up for an edge placed between the probe's sizes.
2. Each kernel (`fit_kernel`): its timings less the stalls it met alone (the probe's over its
   resident bytes: in a model, those come back as the model's own), fitted as a learned
   roofline (`WORK` coefficients, non-negative least squares on relative errors) times
   exp(boosted trees of the log ratio) (`archsearch.latency.trees`).
3. The memory terms of whole models (`fit_memory_terms`): per phase, measured = the sum of the
   model's kernels + w x the probe's stalls of its working set (+ u x layers x the share that
   misses, and on B > 1 sequences the weights' passes beyond the first (`fit_passes`) less what
   its weight GEMMs hide at `overlap`, for the decode step), w, u >= 0 by non-negative least
   squares on relative errors, `overlap` on a grid.
4. The validation (`pooled_check`): held-out models, and every glue model predicted by the
   memory terms fitted without it, pooled; per quantity the MAPE, share within +-10%, 90th
   percentile and its upper confidence bound (`p90_bound`), decode's also by working set.

`without` names terms to leave out (`TERMS`), for `benchmarks/bench_latency_ablation.py`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable

import numpy as np

from archsearch.cost.devices import DeviceProfile
from archsearch.latency import trees
from archsearch.latency.calibrate.models import WholeModel
from archsearch.latency.kernels import KERNELS, PHASES
from archsearch.latency.predict import KernelFit, Memory, Passes

__all__ = ["TERMS", "by_working_set", "fit_kernel", "fit_memory", "fit_memory_terms", "left_out"]
__all__ += ["fit_passes", "model_terms", "p90_bound", "pooled_check", "span_fit", "stalls_alone"]

TERMS = ("trees", "stalls", "miss", "overlap", "passes")  # what `without` may leave out
TREES = dict(trees=100, depth=3, rate=0.1, min_leaf=3)  # each kernel's correction
GRID, STARTS = 1.32, 3  # the probe's capacity grid (32% apart); how many of its pairs refined
NOISE = 0.01  # the probe's RMS relative miss below which no cache level is fitted
STALLED = 0.05  # the least share of a layer's time from memory its stalls must take to count
OVERLAPS = tuple(float(s) for s in np.linspace(0.0, 1.0, 11))
REFITS = 8  # fits of w with each GEMM's bound (its compute or its stalls) at the last one's
BAND_EDGES = (0.5, 2.0)  # the validation bands' edges, x the probe's capacity `hi`
MIN_BAND = 5  # the fewest predictions a band holds (fewer: merged with a neighbour)


def nnls(A: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, float]:
    """Non-negative least squares of A x = b on unit-scaled columns (terms span 1 .. 1e13):
    (x, residual)."""
    from scipy.optimize import nnls as solve

    norm = np.maximum(np.abs(A).max(axis=0), 1e-300)
    x, residual = solve(A / norm, b)
    return x / norm, float(residual)


def span_fit(sizes: np.ndarray, seconds: np.ndarray, lo: float, hi: float) -> tuple:
    """The probe's timings fitted with the cache's capacities at `lo` .. `hi` bytes: (the
    residual of the relative errors, [t0, r, stall_s]) by non-negative least squares."""
    stalls = Memory(1.0, lo, hi).byte_stalls(sizes)
    A = np.column_stack([np.ones_like(sizes), sizes, stalls]) / seconds[:, None]
    coef, residual = nnls(A, np.ones_like(sizes))
    return residual, coef


def fit_memory(sizes: Iterable[float], seconds: Iterable[float]) -> Memory | None:
    """The machine's memory stalls from the probe's timings (step 1): every pair of capacities
    on a log grid, the `STARTS` best refined; None where a straight line (no cache level)
    already fits the times within `NOISE` (RMS relative error)."""
    from scipy.optimize import minimize

    sizes, seconds = np.asarray(sizes, dtype=float), np.asarray(seconds, dtype=float)

    def fit(log_span) -> tuple[float, np.ndarray]:
        return span_fit(sizes, seconds, *np.exp(np.sort(log_span)))

    base = np.column_stack([np.ones_like(sizes), sizes]) / seconds[:, None]
    if nnls(base, np.ones_like(sizes))[1] <= NOISE * math.sqrt(len(sizes)):
        return None
    points = 1 + math.ceil(math.log(sizes.max() / sizes.min()) / math.log(GRID))
    grid = np.linspace(math.log(sizes.min()), math.log(sizes.max()), points)
    starts = sorted(itertools.combinations(grid, 2), key=lambda span: fit(span)[0])[:STARTS]
    tol = dict(xtol=1e-4, ftol=1e-14)  # capacities to about 0.01%
    runs = [minimize(lambda x: fit(x)[0], s, method="Powell", options=tol) for s in starts]
    best = np.sort(min(runs, key=lambda run: run.fun).x)
    stall_s = float(fit(best)[1][2])
    lo, hi = np.exp(best)
    return Memory(stall_s, float(lo), float(hi)) if stall_s > 0 else None


def fit_passes(timed: dict | None) -> Passes | None:
    """The weights' passes (`predict.Passes`) of the passes probe's timings
    (`timing.pass_seconds`; None: not timed): per layer size its stalls, timed from memory
    less from the cache, at each row count over those at one row, at least 1; a size whose
    stalls are under `STALLED` of its time from memory at one row streams once."""
    if not timed:
        return None
    memory, cache = np.asarray(timed["memory_s"], float), np.asarray(timed["cache_s"], float)
    stalls = memory - cache
    streams = stalls[0] > STALLED * memory[0]
    table = np.where(streams, stalls / np.where(streams, stalls[0], 1.0), 1.0)
    table = np.maximum(table, 1.0).round(4)
    return Passes(tuple(timed["rows"]), tuple(timed["bytes"]), tuple(map(tuple, table.tolist())))


def stalls_alone(probe: Memory | None, resident) -> np.ndarray:
    """The stalls a kernel of `resident` bytes met timed alone (0 without a probe)."""
    resident = np.asarray(resident, dtype=np.float64)
    return np.zeros_like(resident) if probe is None else probe.byte_stalls(resident)


def fit_kernel(kernel: str, X, W, R, y, probe: Memory | None, without=()) -> KernelFit:
    """A kernel's fit (step 2) from its rows: features `X`, work terms `W`, resident bytes `R`
    and measured seconds `y` of each timed shape."""
    X, W, y = np.asarray(X, float), np.asarray(W, float), np.asarray(y, float)
    if "stalls" not in without:  # at most 9/10 of a timing: a timing is never all stalls
        y = np.maximum(y - stalls_alone(probe, R), 0.1 * y)
    coef = nnls(W / y[:, None], np.ones(len(y)))[0]
    base = np.maximum(W @ coef, 1e-12)
    ens = None if "trees" in without else trees.fit(X, np.log(y / base), KERNELS[kernel], **TREES)
    return KernelFit(tuple(float(v) for v in coef), ens, len(y))


def model_terms(models: list[WholeModel], device: DeviceProfile, passes=None) -> tuple:
    """What `fit_memory_terms` reads of whole models on `device` (its kernels' predictor without
    memory terms): the kernels' sum [models, (prefill, step)], layers, working sets [models, 2]
    and the decode step's weight GEMMs (`Predictor.weight_gemms` at `passes`: extra seconds,
    weight bytes, bytes streamed)."""
    gemms = []
    for m in models:
        step = m.phases()[1]
        terms = device.predictor.weight_gemms(m.table(), step, device, step.tokens, passes)
        gemms.append(tuple(t[:, 0] for t in terms))
    kernels = np.array([m.predicted(device) for m in models])
    layers = np.array([m.arch.n_layers for m in models], dtype=np.float64)
    return kernels, layers, np.array([m.working_sets() for m in models]), gemms


def fit_memory_terms(measured, kernels, layers, working, gemms, probe, without=()) -> dict:
    """The memory terms per phase (step 3) from whole models' timings `measured` [models, 2]
    and their `model_terms`; none without a probe (no cache level found) or stalls."""
    if probe is None or "stalls" in without:
        return dict.fromkeys(PHASES)
    measured, working = np.asarray(measured), np.asarray(working)
    return {
        phase: _fit_phase(
            measured[:, i],
            kernels[:, i],
            layers,
            working[:, i],
            gemms,
            probe,
            without,
            phase == "step",
        )
        for i, phase in enumerate(PHASES)
    }


def _fit_phase(meas, pred, layers, nbytes, gemms, probe: Memory, without, step: bool) -> Memory:
    missing = probe.missing(nbytes) if step and "miss" not in without else np.zeros_like(meas)
    again = np.array([np.sum(g[2]) - np.sum(g[1]) for g in gemms]) if step else 0.0
    A = np.column_stack([probe.byte_stalls(nbytes) * (1 + again / nbytes), layers * missing])
    best: tuple[float, Memory] | None = None
    for overlap in OVERLAPS if step and "overlap" not in without else (0.0,):
        w = 1.0
        for _ in range(REFITS if overlap else 1):
            fixed, per_w = _hidden(probe, nbytes, gemms, w, overlap)
            Aw = A.copy()
            Aw[:, 0] -= per_w
            (w, u), _ = nnls(Aw / meas[:, None], 1.0 - (pred - fixed) / meas)
        fit = Memory(float(w) * probe.stall_s, probe.lo, probe.hi, float(u), overlap)
        residual = float(
            np.linalg.norm((pred + added(fit, nbytes, layers, gemms, step)) / meas - 1.0)
        )
        if best is None or residual < best[0]:
            best = (residual, fit)
    assert best is not None
    return best[1]


def added(memory: Memory, nbytes, layers, gemms, step: bool = True) -> np.ndarray:
    """What `memory` adds to each model's kernels: stalls, and for the decode step (`gemms`
    are its) their passes beyond the first less what its GEMMs hide."""
    batched = [memory.batched(n, *g) if step else 0.0 for n, g in zip(nbytes, gemms)]
    return memory.stalls(nbytes, layers) + np.array(batched, dtype=np.float64)


def _hidden(probe: Memory, nbytes, gemms, w: float, overlap: float):
    """What the models' weight GEMMs hide at per-byte scale w, as (seconds independent of w,
    seconds per unit of w): each GEMM hides its extra compute or its weights' stalls,
    whichever is less at w (linear in w near w, so w is refitted with it)."""
    fixed, per_w = np.zeros(len(nbytes)), np.zeros(len(nbytes))
    if not overlap:
        return fixed, per_w
    per_byte = probe.per_byte(nbytes)
    for i, (extra, _, streamed) in enumerate(gemms):
        share = np.asarray(streamed, dtype=np.float64) * per_byte[i]
        stalled = w * share < extra
        fixed[i] = overlap * extra[~stalled].sum()
        per_w[i] = overlap * share[stalled].sum()
    return fixed, per_w


def left_out(measured, kernels, layers, working, gemms, probe, without=()) -> np.ndarray:
    """Each model's (prefill, step) seconds predicted by the memory terms fitted to the others
    (the arguments of `fit_memory_terms`)."""
    out = np.array(kernels, dtype=np.float64)
    if probe is None or "stalls" in without:
        return out
    measured, working = np.asarray(measured), np.asarray(working)
    for j in range(len(out)):
        rest = [i for i in range(len(out)) if i != j]
        fit = fit_memory_terms(
            measured[rest],
            kernels[rest],
            layers[rest],
            working[rest],
            [gemms[i] for i in rest],
            probe,
            without,
        )
        for i, phase in enumerate(PHASES):
            at = (working[j : j + 1, i], layers[j : j + 1], gemms[j : j + 1], phase == "step")
            one = added(fit[phase], *at)
            out[j, i] += one[0]
    return out


def by_working_set(working, err, edges: list[float]) -> dict[str, list] | None:
    """The errors `err` by working set: bands split at `edges`, each of fewer than `MIN_BAND`
    merged with its smaller neighbour; None when one is left."""
    edges = list(edges)
    while edges:
        n = np.bincount(np.searchsorted(edges, working, "right"), minlength=len(edges) + 1)
        k = int(np.argmin(n))
        if n[k] >= MIN_BAND:
            break
        edges.pop(0 if k == 0 else k - 1 if k == len(edges) or n[k - 1] <= n[k + 1] else k)
    if not edges:
        return None
    band = np.searchsorted(edges, working, "right")
    parts = [err[band == k] for k in range(len(edges) + 1)]
    return {
        "edges": [round(float(e)) for e in edges],
        "p90": [round(float(np.quantile(e, 0.9)), 4) for e in parts],
        "n": [len(e) for e in parts],
        "bound": [round(p90_bound(e), 4) for e in parts],
    }


def pooled_check(measured, predicted, working, method: str, capacity: float) -> dict[str, dict]:
    """The profile's fp32 `validation` (step 4): per quantity the figures of the pooled
    held-out predictions, decode's also by working set (`working`: per prediction, (prefill,
    step) bytes), bands at `BAND_EDGES` x `capacity` (none at 0: no cache level found)."""
    out = {}
    for i, quantity in enumerate(("ttft", "decode")):
        signed = np.asarray(predicted)[:, i] / np.asarray(measured)[:, i] - 1
        out[quantity] = check(np.abs(signed), method, ["fp32"], held_out={"fp32": signed})
        if capacity > 0 and quantity == "decode":  # a prefill's error shows no trend with it
            ws = np.asarray(working, dtype=np.float64)[:, i]
            bands = by_working_set(ws, np.abs(signed), [e * capacity for e in BAND_EDGES])
            if bands is not None:
                out[quantity]["by_working_set"] = bands
    return out


def check(
    err: np.ndarray, method: str, precisions: list[str], held_out: dict | None = None
) -> dict:
    """A `validation` entry (profile keys) of held-out absolute relative errors `err`; with
    `held_out` (group -> signed errors, predicted / measured - 1, of predictions made under
    shared conditions), those too, which `latency.order` reads to say how often the profile
    orders two architectures right."""
    out = {
        "mape": round(float(err.mean()), 4),
        "within_10": round(float(np.mean(err <= 0.10)), 4),
        "n": len(err),
        "method": method,
        "p90": round(float(np.quantile(err, 0.9)), 4),
        "bound": round(p90_bound(err), 4),
        "precisions": list(precisions),
    }
    if held_out:
        out["held_out"] = {k: [round(float(e), 4) for e in v] for k, v in held_out.items()}
    return out


def p90_bound(err, confidence: float = 0.9) -> float:
    """An upper bound of the 90th percentile of the |error| distribution `err` samples, at
    `confidence`, free of any assumption on it: the least order statistic err_(k) with
    P(Binomial(n, 0.9) <= k - 1) >= `confidence` (err_(k) falls below the percentile only when
    k or more of the n errors do); the largest error where none reaches it (n < 22 at 0.9). The
    90th percentile of some fifty errors is itself noisy, as often below the true one as above:
    as the +- it holds for fewer than nine predictions in ten, its bound for at least that many
    nine times in ten (`benchmarks/bench_error_bound.py`)."""
    from scipy.stats import binom

    e = np.sort(np.asarray(err, dtype=np.float64))
    k = int(binom.ppf(confidence, len(e), 0.9)) + 1
    return float(e[min(k, len(e)) - 1])
