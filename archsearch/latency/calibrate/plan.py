"""What a calibration times and how: one `TimingPlan`; `PLANS` holds the three budgets.

Every timing function takes the plan as an argument: nothing about what is timed lives in
module state, so a quick and a full calibration in one process (a test worker, a reused Ray
worker) each time their own grids.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from archsearch.latency.kernels import KERNELS

__all__ = ["PLANS", "SAMPLE_S", "WARMUP_S", "TimingPlan", "plan"]

# a decode step right after its prefill runs slower for its first calls, while its weights and
# state settle into the cache; a deployed model decodes hundreds of tokens in a row, so its
# steady time is what is predicted: whole models are called this long before they are timed
WARMUP_S = 0.25
# a shared machine slows down for tenths of a second at a time: the least of a whole model's
# samples over this long takes such moments out (`benchmarks/bench_timing_window.py`)
SAMPLE_S = 0.5
MEMORY_MIB = (0.125, 0.25, 0.5, 1, 2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 32, 48, 64, 96, 128, 256)
QUICK_KERNELS = ("gemm", "norm", "residual", "embedding", "ffn", "gqa.forward", "gqa.step")


@dataclass(frozen=True)
class TimingPlan:
    """How (runtime, threads, precision, repeats, minimum time, span, builds) and what (the
    grids) a calibration times. A timing is the least of `repeats` samples (the half
    precision's held-out check: `check_repeats`): a kernel's each loop for `min_time`, a whole
    model's span `span` seconds after `warmup`."""

    name: str
    runtime: str = "torch"
    threads: int = 1
    precision: str = "fp32"  # what the learned predictor prices (its half check: fp16)
    repeats: int = 5
    min_time: float = 0.005
    span: float = SAMPLE_S
    warmup: float = WARMUP_S
    glue_builds: int = 1  # fresh builds of each glue model (the least over them)
    held_out_builds: int = 2  # of each held-out model
    # the half precision's held-out check takes the least of this many samples (at most
    # `repeats`; more until `span`): fewer than the reference models its factors are fitted
    # to, since fewer move the check less than two calibrations' checks differ, while a bf16
    # prefill on a CPU without native bf16 takes seconds (`benchmarks/bench_half_repeats.py`)
    check_repeats: int = 2
    kernels: tuple[str, ...] = tuple(KERNELS)
    samples: int = 48  # shapes per kernel (twice as many for gemm, the steps and the FFN)
    glue_models: int | None = None  # the first N of `models.glue_models()` (None: all)
    held_out: int | None = None  # the first N of `models.held_out_models()`
    references: int = 1  # every N-th reference model of the roofline's half-precision fit
    memory_mib: tuple[float, ...] = MEMORY_MIB  # the weights the memory probe streams
    matmul_rows: tuple[int, ...] = (1, 4, 16, 64, 256, 1024)
    matmul_weights: tuple[tuple[int, int], ...] = ((256, 256), (1024, 1024), (1024, 4096))
    pass_mib: tuple[float, ...] = (1, 4, 16)  # the weights of the passes probe's layers
    pass_rows: tuple[int, ...] = (1, 2, 3, 4, 8)  # its rows (the first: one)
    seed: int = 0  # the shapes' draws: a calibration pooled with N earlier ones draws with N

    @property
    def memory_sizes(self) -> tuple[int, ...]:
        return tuple(int(2**20 * mib) for mib in self.memory_mib)

    @property
    def pass_sizes(self) -> tuple[int, ...]:
        return tuple(int(2**20 * mib) for mib in self.pass_mib)


PLANS = {
    "full": TimingPlan("full"),  # the default: its time is measured by the latency benchmarks
    "fast": TimingPlan("fast", samples=24, span=0.25, held_out_builds=1),
    "quick": TimingPlan(  # a smoke run of seconds: too few timings to trust
        "quick",
        repeats=1,
        min_time=0.0,
        span=0.0,
        warmup=0.0,
        held_out_builds=1,
        kernels=QUICK_KERNELS,
        samples=4,
        glue_models=2,
        held_out=2,
        references=3,
        memory_mib=MEMORY_MIB[:8],
        matmul_rows=(1, 16, 256),
        matmul_weights=((256, 256),),
        pass_mib=(4,),
        pass_rows=(1, 2),
    ),
}


def plan(budget: str, **settings) -> TimingPlan:
    """`PLANS[budget]` with `settings` (runtime, threads, repeats, ...) replaced."""
    return dataclasses.replace(PLANS[budget], **settings)
