"""Adaptive sampling of a kernel's shapes, after [nn-Meter]: half the budget at random points of
its grid, then rounds that time fresh random shapes, score the current fit on them and time grid
neighbours of the worst predicted. The kernels take their passes in turn (`Sampler.step`): a
slow spell of a shared machine then touches a few shapes of every kernel rather than all of one.

A random point is stratified: each is the one of `CANDIDATES` random points whose knob values
(its width, heads, batch, prompt, ...) the kernel's shapes so far hold least often, for their
knob's number of values (`least_taken`). Some fifty independent draws over five or six knobs
often leave a knob's largest values out, and the fit then extrapolates to the shapes a large
model's prefill runs; which shapes a calibration timed moves its TTFT accuracy as much as how
many (`benchmarks/bench_latency_same_timings.py`).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable

import numpy as np

from archsearch.arch import InvalidArch
from archsearch.latency.calibrate import timing
from archsearch.latency.calibrate.fit import fit_kernel, stalls_alone
from archsearch.latency.kernels import FP32, gemm_work, resident, work
from archsearch.latency.predict import KernelFit, Memory

__all__ = ["CANDIDATES", "Sampler", "budget", "kernel_rows", "least_taken"]

CANDIDATES = 16  # random shapes each drawn shape is chosen from (`least_taken`)

SUSPECT = 1.25  # measured / fitted above which a shape is timed again (the lesser kept)
# the FFN changes library at 8 rows (MKL below, oneDNN from), where its time is not monotone in
# its rows; drawn uniformly over rows up to a prefill's thousands, few shapes fall at a decode
# step's: every other one is drawn at a decode step's rows (one per sequence)
DECODE_DRAWN = {"ffn": "N"}


def budget(kernel: str, samples: int) -> int:
    """Shapes a kernel is timed at: twice `samples` for the GEMM (every analytic time prices its
    linear layers with it), each decode step (a step sums several steps' small errors) and the
    kernels drawn at decode rows."""
    twice = kernel == "gemm" or kernel.endswith(".step") or kernel in DECODE_DRAWN
    return samples * (2 if twice else 1)


def kernel_rows(shape: timing.Shape) -> tuple[np.ndarray, np.ndarray, float]:
    """(features, work terms, resident bytes) of a shape."""
    x, c, p = timing.shape_rows(shape)
    if shape.kernel == "gemm":
        v = shape.values()
        return x[0], gemm_work(v["m"], v["k"], v["n"])[0], FP32 * v["k"] * v["n"]
    return x[0], work(shape.kernel, c, p)[0], float(resident(shape.kernel, c, p)[0])


def least_taken(candidates: list[timing.Shape], taken: Counter) -> timing.Shape:
    """The first of `candidates` (in random order) whose knob values, (knob, grid index)
    pairs, the shapes `taken` so far hold least often in all, each value's count in units of
    its knob's fair share (the count x the knob's number of values): a knob of eleven values,
    whose counts are small, weighs as much as a knob of two."""

    def held(shape: timing.Shape) -> int:
        grid = timing.GRIDS[shape.kernel]
        return sum(taken[v] * len(grid[v[0]]) for v in shape.index)

    return min(candidates, key=held)


def valid(shape: timing.Shape) -> bool:
    if not timing.affordable(shape):
        return False
    try:
        timing.shape_rows(shape)
    except InvalidArch:
        return False
    return True


class Sampler:
    """One kernel's adaptive sampling, a pass at a time. `measure(shape)` gives seconds, or
    None where the runtime cannot run the shape."""

    def __init__(
        self, kernel: str, measure: Callable, samples: int, rng: random.Random, probe: Memory | None
    ) -> None:
        self.kernel, self.measure, self.rng, self.probe = kernel, measure, rng, probe
        self.per_round, self.initial, self.passes = self.schedule(samples)
        self.done = 0
        self.seen: set = set()
        self.shapes: list[timing.Shape] = []
        self.rows: list[tuple[np.ndarray, np.ndarray, float]] = []
        self.y: list[float] = []
        self.fit: KernelFit | None = None

    @staticmethod
    def schedule(samples: int) -> tuple[int, int, int]:
        """(shapes per pass, random passes, all passes) of a budget of `samples` shapes: half
        drawn at random, the rest in rounds of fresh shapes and neighbours of the worst."""
        per_round, first = max(1, samples // 8), max(2, samples // 2)
        initial = max(1, math.ceil(first / per_round))
        return per_round, initial, initial + max(1, (samples - first) // (2 * per_round))

    def step(self) -> None:
        """Take the next pass (nothing once all are taken, or the runtime ran none at first)."""
        if self.done >= self.passes or (self.done and not self.y):
            return
        self.done += 1
        fresh = self._take(self._draw(self.per_round))
        if self.done <= self.initial:
            self._add(fresh)
            if self.done == self.initial and self.y:
                self._refit()
            return
        if not fresh or self.fit is None:
            return
        errors = np.abs(self._predict([r for _, r, _ in fresh]) / [t for *_, t in fresh] - 1)
        worst = [fresh[i][0] for i in np.argsort(-errors)[: self.per_round]]
        near = [timing.neighbour(s, self.rng) for s in worst]
        near = [s for s in near if s not in self.seen and valid(s)]
        self.seen.update(near)
        self._retime_slowest()
        self._add(fresh + self._take(near))
        self._refit()

    def result(self) -> KernelFit | None:
        """The fit to every timing (None: the runtime ran none of its shapes)."""
        if self.y and self.fit is None:
            self._refit()
        return self.fit

    def _draw(self, n: int) -> list[timing.Shape]:
        """Up to `n` new valid shapes, each the least taken of `CANDIDATES` random ones (of a
        kernel in `DECODE_DRAWN`, every other one at a decode step's rows)."""
        taken = Counter(v for shape in self.shapes for v in shape.index)
        out: list[timing.Shape] = []
        for _ in range(n):
            pool: list[timing.Shape] = []
            for _ in range(20 * CANDIDATES):
                if len(pool) == CANDIDATES:
                    break
                shape = self._random(at_decode_rows=bool(len(out) % 2))
                if shape not in self.seen and shape not in pool and valid(shape):
                    pool.append(shape)
            if pool:
                out.append(least_taken(pool, taken))
                taken.update(out[-1].index)
                self.seen.add(out[-1])
        return out

    def _random(self, at_decode_rows: bool) -> timing.Shape:
        shape = timing.random_shape(self.kernel, self.rng)
        knob = DECODE_DRAWN.get(self.kernel)
        if knob and at_decode_rows:
            index = dict(shape.index)
            index[knob] = timing.GRIDS[self.kernel][knob].index(self.rng.choice(timing.BATCHES))
            shape = timing.Shape(self.kernel, tuple(index.items()))
        return shape

    def _take(self, shapes: list[timing.Shape]) -> list[tuple]:
        out = []
        for shape in shapes:
            seconds = self.measure(shape)
            if seconds is not None:
                out.append((shape, kernel_rows(shape), seconds))
        return out

    def _add(self, taken: list[tuple]) -> None:
        for shape, rows, seconds in taken:
            self.shapes.append(shape)
            self.rows.append(rows)
            self.y.append(seconds)

    def _predict(self, rows) -> np.ndarray:
        X, W, R = (np.array(v) for v in zip(*rows))
        return self.fit.seconds(W, X) + stalls_alone(self.probe, R)

    def _retime_slowest(self) -> None:
        """Time again the shapes measured most above their fit (more than SUSPECT x), keeping
        the lesser time: a slow spell only ever adds to a timing."""
        ratio = np.array(self.y) / self._predict(self.rows)
        for i in np.argsort(-ratio)[: max(1, self.per_round // 2)]:
            if ratio[i] <= SUSPECT:
                break
            again = self.measure(self.shapes[i])
            if again is not None:
                self.y[i] = min(self.y[i], again)

    def _refit(self) -> None:
        X, W, R = zip(*self.rows)
        self.fit = fit_kernel(self.kernel, X, W, R, self.y, self.probe)
