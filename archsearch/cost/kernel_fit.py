"""Fitting the kernel-level latency predictor on this machine (part of `archsearch calibrate`).

1. The dispatch overhead per operator (`kernel_timing.dispatch_seconds`).
2. The machine's memory stalls (`fit_memory`): a matrix-vector product over weights of 1/8-256
   MiB, called again and again, runs from the cache while its weight fits and from memory
   beyond; per cache level it outgrows (up to two, `kernels.Cache`), the extra seconds per byte
   that misses and the two capacities between which the share that misses goes from 0 to 1
   are fitted to its times. Measured on a 2-vCPU EPYC VM (32 MiB of L3 shared with other
   tenants), quiet: 83-88 GB/s up to 14 MiB, 21-23 GB/s from 48 MiB (one level); on a 2-vCPU Xeon
   VM: 50-56 GB/s within the 2 MiB L2, 28-30 GB/s to 96 MiB, 16 GB/s at 256 MiB (two; timed
   warm, `kernel_timing.WARMUP_S`).
3. Per kernel (`archsearch.cost.kernels.KERNELS`), adaptive sampling after nn-Meter (Zhang et
   al., MobiSys 2021): time half the budget at random points of the kernel's grid and fit;
   then, in rounds, time fresh random points, record the fitted predictor's error on them (an
   out-of-sample figure: `fresh_error`), time grid neighbours of the worst predicted ones, add
   all and refit. The kernels take their passes in turn (`KernelFit`), so the timings of each
   are spread over the whole calibration. Each fit is of the kernel's time with its weights
   and state in the cache (its timings less the stalls of step 2 over its own resident bytes):
   the kernel's learned roofline (seconds per launch, byte, FLOP and call of its work terms,
   non-negative least squares on relative errors) and a gradient-boosted correction of the log
   ratio of measured to roofline time (`archsearch.cost.trees`; why: `archsearch.cost.kernels`).
4. The model-level terms (`kernels.Glue`): whole models (`glue_models`, 3-300 MB of weights)
   are timed and fitted as (sum of their kernels) + w x (the stalls of step 2 over the model's
   working set: weights and decode state) + a + b x layers (+ u x layers x the share of the
   working set that misses the largest cache, for the decode step) per phase, a, b, w, u >= 0
   (Python and bookkeeping per model and per layer; how much more a missed byte costs in a
   model than in the probe; what a layer costs beyond its bytes when it misses: `Glue`) by
   non-negative least squares on relative errors, with the capacity of the largest cache as a
   model meets it searched on a grid. In a model the other layers evict a kernel's weights
   once the working set outgrows the cache, so every resident byte stalls as it would in a
   kernel that large. The kernels' sum is not scaled: each kernel is timed as the models run
   it.
5. A held-out check: other whole models (`validation_models`, other families, widths, depths,
   vocabularies, prompt and context lengths than anything fitted above) are timed and
   predicted, and each glue model is predicted by the model-level terms fitted without it
   (leave one out: its kernels' predictors never timed it either); their errors, pooled, are
   the profile's `validation` figures, decode's also by the working set of its step (bands
   with edges at `BAND_EDGES` x the probe's largest cache, `WorkingSetBands`). Why both: the
   twelve held-out models alone gave a 90th percentile that moved from 19% to 89% between
   calibrations on the EPYC VM, ten of them decoding 8-22 MiB, at the edge of its 32 MiB L3
   share, where decode errors run both ways and widest; pooled with the glue models (3-245
   MiB) and split by working set, decode's bands read 11-46% below half the cache, 11-86%
   around it and 19-43% beyond in six calibrations, and each calibration's benchmark found
   its held-out architectures inside their band's +- for 83-96% of decode steps (90% is what
   a 90th percentile promises), against 83-100% with the twelve's one figure, 0.11-0.89 wide.
   Each 90th percentile is stated with its upper 90%-confidence bound (`p90_bound`), the +- a
   prediction carries. The check covers fp32, the precision the kernel predictor prices;
   `precision_check` checks the roofline at another one on the same held-out models
   (`archsearch calibrate`: fp16, timed in bf16).
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import math
import random
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from archsearch.arch import (
    ArchConfig,
    AttentionConfig,
    InvalidArch,
    LayersConfig,
    LinearConfig,
    MCSDConfig,
    MoEConfig,
)
from archsearch.cost import kernel_timing as timing
from archsearch.cost import trees
from archsearch.cost.devices import DeviceProfile
from archsearch.cost.kernel_latency import (
    FP32,
    gemm_work,
    resident,
    restreamed_bytes,
    weight_gemms,
    work,
    working_set,
)
from archsearch.cost.kernels import KERNELS, NO_GLUE, PHASES, Cache, Glue, Kernels, Passes
from archsearch.cost.model import prefill_phase, step_phase
from archsearch.cost.ops import Columns, Phase
from archsearch.runtimes import ExportError

__all__ = [
    "BUDGETS",
    "HELD_OUT_BUILDS",
    "QUICK_KERNELS",
    "Budget",
    "KernelFit",
    "WholeModel",
    "fit_kernel",
    "fit_kernels",
    "fit_memory",
    "glue_models",
    "kernel_steps",
    "p90_bound",
    "pooled_check",
    "precision_check",
    "validation_models",
]

QUICK_KERNELS = ("gemm", "norm", "residual", "embedding", "ffn", "gqa.forward", "gqa.step")
GLUE_PROMPT = GLUE_CONTEXT = 128
TREES = dict(trees=100, depth=3, rate=0.1, min_leaf=3)  # each kernel's correction


class Budget(NamedTuple):
    """How much a calibration times (`archsearch calibrate budget=`): shapes per kernel
    (`_budget`: gemm, the decode steps and the kernels drawn at decode rows twice as many),
    builds of each kernel shape and of each glue model (the least over them); the held-out
    models, whose errors are the profile's `validation`, are timed in `HELD_OUT_BUILDS` whatever
    the budget, and the `precision_check` models in one."""

    samples: int
    kernel_builds: int
    glue_builds: int


HELD_OUT_BUILDS = 3  # builds of each held-out model, whatever the budget
BUDGETS = {"full": Budget(128, 2, 3), "fast": Budget(64, 1, 2)}
"""`full`, the default, and `fast`, half the time. Measured on this project's 2-vCPU Xeon VM
(480 MiB of L3) on 2026-11-28, one calibration of each, each benchmark run's timings priced
on both (`bench_latency_accuracy.py --rescore`): `full` took 17 min 19 s (kernels 8.5 min, glue
models 4 min) and `fast` 8 min 24 s (2 min 9 s, 2 min 46 s); on the run timed right after
`full`, TTFT / decode within +-10% 92% / 69% (`full`) and 79% / 58% (`fast`), and on the one
timed after `fast` 62% / 77% and 83% / 54%: TTFT alike, decode 11-23 points worse, and `fast`'s
held-out decode bound wider (+-32% against +-21%). Two builds of the same kernel shape there
differed by 2% (median) and 7% (90th percentile) over 216 shapes."""
SUSPECT = 1.25  # measured / fitted above which a shape is timed again
VALIDATION_PROMPT, VALIDATION_CONTEXT = 192, 384
SHARED_SCALES = tuple(float(s) for s in np.geomspace(0.35, 1.4, 13))
APART = 2.0  # the least ratio between two cache levels' capacities
NOISE = 0.01  # the memory probe's RMS relative miss below which no cache level is added
OVERLAPS = tuple(float(s) for s in np.linspace(0.0, 1.0, 11))  # `Glue.overlap`'s grid
# kernels drawn at the rows of a decode step (knob: `timing.BATCHES`, one row per sequence) as
# often as at random over the grid, whose rows reach a prefill's thousands (`timing.TOKENS`).
# The FFN is a decode step's largest kernel and changes library at 8 rows (MKL below,
# oneDNN from: `archsearch.models.gemm.MIN_ROWS`), where its time is not monotone in its rows
# (measured on the EPYC VM: a d-768 SwiGLU 1.09 ms on 4 rows, 0.87 ms on 8). Drawn uniformly,
# 8 of `epyc27w`'s 121 FFN shapes had 8 rows, and its fit priced a d-512 SwiGLU there at 516
# us against 362 measured. On 150 FFN shapes at 1-16 rows timed apart, the fit errs by 8.2%
# with these draws and 10.1% refitted from the same timings without them (README)
DECODE_DRAWN = {"ffn": "N"}
REFITS = 8  # fits of w with the GEMMs' bounds at the last one's (`_fit_glue`)
COARSE_STEP, FINE_STEP = 1.32, 1.097  # `fit_memory`'s capacity grids: 32% and 9.7% apart
BAND_EDGES = (0.5, 2.0)  # the validation bands' edges, x the probe's largest cache capacity
MIN_BAND = 5  # the fewest held-out predictions a band holds (fewer: merged with a neighbour)
# the quantities whose validation is also given by working set: the decode step's, which streams
# its working set once per token; a prefill reuses each weight over its prompt, and its error
# showed no trend with the working set (TTFT's 90th percentile 5-14% in every band of five
# calibrations, ordered differently in each): banded, its +- held for fewer benchmark rows
BANDED = ("decode",)
LEAVE_ONE_OUT = 8  # the fewest glue models whose leave-one-out predictions join the check
# precisions the cost model prices alike (2-byte weights and activations, the fp16 peak): one
# check covers them
ALIKE = {"fp16": {"fp16", "bf16"}, "bf16": {"fp16", "bf16"}}
LONG = (512, 2048)  # the longest prompt and context of the calibration ranges (`precision_check`)


def _arch(d: int, depth: int, vocab: int, **sections) -> ArchConfig:
    return ArchConfig(vocab_size=vocab, d_model=d, n_layers=depth, max_seq_len=4096, **sections)


def _linear(family: str) -> dict:
    return dict(layers=LayersConfig(mixer="linear"), linear=LinearConfig(family=family))


class WholeModel(NamedTuple):
    """A whole model calibration times, and the setting of its two phases: the prefill of
    `prompt` tokens and one decode step after `context`, on `batch` sequences."""

    arch: ArchConfig
    prompt: int = GLUE_PROMPT
    context: int = GLUE_CONTEXT
    batch: int = 1

    def timed(
        self,
        runtime: str,
        repeats: int,
        min_time: float,
        instances: int = 3,
        precision: str = "fp32",
        span: float | None = None,
    ) -> tuple[float, float]:
        """(seconds to first token, seconds of the decode step) measured in `runtime` at
        `precision` (`kernel_timing.DTYPES`), the least over `instances` builds
        (`kernel_timing.time_model`, samples over `span` seconds)."""
        return timing.time_model(
            self.arch,
            runtime,
            self.prompt,
            self.context,
            repeats,
            min_time,
            self.batch,
            instances,
            precision,
            span,
        )

    def phases(self) -> tuple[Phase, Phase]:
        """The prefill of `prompt` tokens and the decode step after `context`, on `batch`
        sequences."""
        return prefill_phase(self.prompt, self.batch), step_phase(self.context, self.batch)

    def working_sets(self) -> tuple[float, float]:
        """The working sets (bytes) of the prefill and the decode step
        (`kernel_latency.working_set`)."""
        c = Columns.from_archs([self.arch])
        forward, step = (float(working_set(c, p)[0]) for p in self.phases())
        return forward, step

    def step_gemms(self, device: DeviceProfile) -> tuple[np.ndarray, np.ndarray]:
        """(extra seconds, weight bytes) of the decode step's weight GEMMs on `device`
        (`kernel_latency.weight_gemms`), one entry per GEMM."""
        extra, nbytes = weight_gemms(Columns.from_archs([self.arch]), self.phases()[1], device)
        return extra[:, 0], nbytes[:, 0]

    def restreamed(self, passes: Passes | None) -> tuple[float, float]:
        """The weight bytes the prefill and the decode step stream beyond one pass
        (`kernel_latency.restreamed_bytes`; 0 without a passes probe)."""
        if passes is None:
            return 0.0, 0.0
        c = Columns.from_archs([self.arch])
        forward, step = (float(restreamed_bytes(c, p, passes)[0]) for p in self.phases())
        return forward, step

    def predicted(self, device: DeviceProfile, precision: str = "fp32") -> tuple[float, float]:
        """(seconds to first token, seconds of the decode step) predicted on `device`."""
        from archsearch.cost import model

        c = Columns.from_archs([self.arch])
        return (
            float(model.ttft_s(c, device, self.prompt, precision, self.batch)[0]),
            float(model.decode_s(c, device, self.context, precision, self.batch)[0]),
        )


def glue_models() -> list[WholeModel]:
    """Whole models whose unexplained time fits the model-level terms: thirteen small and large
    ones at one setting, eight whose working sets (59-180 MiB) fill the range where a shared
    cache runs out, at other prompts, contexts and batches, two small ones and five wide ones
    at batch 8, four deep and narrow ones, and eight at 16-39 MiB on one sequence (none of the
    benchmark's held-out architectures, `benchmarks/bench_latency_accuracy.py`: none has one's
    width, depth and vocabulary)."""
    v, big = 2048, 4096
    gqa = dict(attention=AttentionConfig(n_heads=10, n_kv_heads=2))
    fixed = [
        _arch(256, 4, v, attention=AttentionConfig(n_heads=4, n_kv_heads=2)),
        _arch(192, 3, v, **_linear("gla")),
        _arch(384, 2, v, attention=AttentionConfig(kind="mla", n_heads=4, kv_rank=96)),
        _arch(256, 2, v, **_linear("mamba2")),
        _arch(128, 6, v, **_linear("deltanet")),
        _arch(256, 3, v, layers=LayersConfig(mixer="mcsd"), mcsd=MCSDConfig(n_channels=4)),
        _arch(
            192,
            2,
            v,
            attention=AttentionConfig(n_heads=3, n_kv_heads=1),
            moe=MoEConfig(n_experts=4, top_k=2, d_expert=192),
        ),
        _arch(320, 2, v, **_linear("rwkv6")),
        _arch(768, 2, v, attention=AttentionConfig(n_heads=12, n_kv_heads=4)),
        _arch(640, 3, v, **_linear("retnet")),
        _arch(1024, 2, v, layers=LayersConfig(mixer="mcsd"), mcsd=MCSDConfig(n_channels=8)),
        _arch(1024, 5, 8192, attention=AttentionConfig(n_heads=16, n_kv_heads=4)),
        _arch(768, 8, 8192, **_linear("gla")),
    ]
    mla = AttentionConfig(kind="mla", n_heads=7, kv_rank=224, rope_dim=32)
    moe = MoEConfig(n_experts=8, top_k=2, d_expert=576)
    mla_small = AttentionConfig(kind="mla", n_heads=5, kv_rank=80)
    gqa_8_2 = AttentionConfig(n_heads=8, n_kv_heads=2)
    # one sequence, 16-39 MiB: where the share that misses the L3 of the EPYC VM (32 MiB) goes
    # from 0 to 1. With no glue model there (none between 16 and 30 MiB, none at batch 1
    # between 16 and 54), the fit placed the ramp where nothing constrained it and predicted
    # the decode steps of the held-out 17-40 MiB architectures 10-27% fast
    edge = [
        WholeModel(_arch(160, 10, big, **_linear("linear_attention"))),
        WholeModel(_arch(288, 5, big, attention=AttentionConfig(n_heads=6, n_kv_heads=2))),
        WholeModel(_arch(224, 7, big, attention=AttentionConfig(kind="mha", n_heads=4))),
        WholeModel(
            _arch(544, 2, v, attention=gqa_8_2, moe=MoEConfig(n_experts=4, top_k=2, d_expert=544))
        ),
        WholeModel(_arch(224, 8, big, **_linear("mamba2"))),
        WholeModel(_arch(352, 4, big, **_linear("rwkv6"))),
        WholeModel(_arch(416, 3, big, **_linear("retnet"))),
        WholeModel(_arch(480, 3, v, **_linear("gated_deltanet"))),
    ]
    # deep and narrow, in the cache: they tell the per-layer term from the stalls (without
    # them it took up 45 us a layer on the Xeon VM and 12-layer models were predicted 15-27%
    # slow; refitted with them, 0: a layer costs its kernels)
    deep = [
        WholeModel(_arch(96, 10, v, attention=AttentionConfig(n_heads=2, n_kv_heads=1))),
        WholeModel(_arch(64, 12, v, **_linear("gla"))),
        WholeModel(_arch(160, 9, v, **_linear("retnet"))),
        WholeModel(_arch(192, 8, v, layers=LayersConfig(mixer="mcsd"), mcsd=MCSDConfig(4))),
    ]
    return [WholeModel(a) for a in fixed] + [
        WholeModel(_arch(640, 3, big, **gqa), 256, 1024),
        WholeModel(_arch(896, 2, big, attention=mla), 128, 512),
        WholeModel(_arch(960, 3, big, **_linear("hgrn2")), 64, 256, 2),
        WholeModel(_arch(512, 5, big, **_linear("retnet")), 256, 2048),
        WholeModel(_arch(768, 4, big, **_linear("mamba2")), 128, 256, 4),
        WholeModel(_arch(384, 7, big, **_linear("deltanet")), 64, 1024, 2),
        WholeModel(_arch(704, 5, big, **_linear("gated_deltanet")), 192, 512),
        WholeModel(
            _arch(576, 5, big, attention=AttentionConfig(n_heads=9, n_kv_heads=3), moe=moe),
            128,
            512,
            2,
        ),
        WholeModel(_arch(448, 3, big, **_linear("hgrn2")), 64, 256, 8),
        WholeModel(_arch(320, 4, big, attention=mla_small), 96, 512, 8),
        # wide and beyond the cache at batch 8: their GEMMs' compute hides stalls (`overlap`).
        # With only these two (50 and 97 MiB) and the two small ones above (30-43 MiB), the fit
        # took 0.5-0.7 and the benchmark's batch-8 steps of 76-166 MiB were predicted 11-22%
        # slow in every calibration; the three of 145-209 MiB tell it that regime
        WholeModel(
            _arch(832, 3, big, attention=AttentionConfig(n_heads=13, n_kv_heads=1)), 64, 256, 8
        ),
        WholeModel(_arch(640, 2, big, **_linear("gla")), 64, 256, 8),
        WholeModel(
            _arch(1024, 3, big, attention=AttentionConfig(kind="mha", n_heads=8)), 64, 256, 8
        ),
        WholeModel(_arch(1088, 2, big, **_linear("deltanet")), 64, 256, 8),
        WholeModel(_arch(1152, 2, big, **_linear("retnet")), 64, 256, 8),
        *deep,
        *edge,
    ]


def validation_models() -> list[WholeModel]:
    """Held-out whole models: never timed by the fit (other shapes, vocabulary and lengths)."""
    v = 3000
    archs = [
        _arch(320, 3, v, attention=AttentionConfig(kind="mha", n_heads=5)),
        _arch(256, 3, v, **_linear("retnet")),
        _arch(448, 2, v, attention=AttentionConfig(kind="mqa", n_heads=7)),
        _arch(384, 2, v, **_linear("hgrn2")),
        _arch(
            192,
            4,
            v,
            attention=AttentionConfig(kind="mla", n_heads=3, kv_rank=48, q_rank=96, rope_dim=16),
        ),
        _arch(192, 4, v, **_linear("linear_attention")),
        _arch(320, 2, v, **_linear("gated_deltanet")),
        _arch(
            256,
            4,
            v,
            layers=LayersConfig(pattern="LN"),
            linear=LinearConfig(family="gla"),
            attention=AttentionConfig(n_heads=4, n_kv_heads=2),
        ),
        _arch(448, 2, v, layers=LayersConfig(mixer="mcsd"), mcsd=MCSDConfig(n_channels=8)),
        _arch(896, 2, v, attention=AttentionConfig(kind="mha", n_heads=14)),
        _arch(704, 3, v, **_linear("gla")),
        _arch(
            256,
            3,
            v,
            attention=AttentionConfig(n_heads=4, n_kv_heads=1),
            moe=MoEConfig(n_experts=8, top_k=2, d_expert=128),
        ),
    ]
    return [WholeModel(a, VALIDATION_PROMPT, VALIDATION_CONTEXT) for a in archs]


def _plan(quick: bool, samples: int) -> dict[str, Any]:
    """What a calibration times: kernels, samples per kernel, glue and held-out models (None:
    all), a kernel sample's looping time and a whole model's sampling span (`SAMPLE_S`)."""
    if quick:
        return dict(kernels=QUICK_KERNELS, samples=4, glue=2, validation=2, min_time=0.0, span=0.0)
    return dict(
        kernels=tuple(KERNELS),
        samples=samples,
        glue=None,
        validation=None,
        min_time=0.005,
        span=timing.SAMPLE_S,
    )


def kernel_steps(quick: bool, samples: int = BUDGETS["full"].samples, checks: int = 0) -> int:
    """Progress steps `fit_kernels` reports: dispatch, memory, GEMM passes, each kernel's every
    pass, each whole model timed, the model-level fit, the glue models left out of it (when
    there are `LEAVE_ONE_OUT`); and those of `checks` `precision_check`s. Steps of about a
    second or two each (a pass of one kernel, one whole model), so that a progress line's ETA,
    the pace so far times the steps left, holds (with one step per pass of every kernel it
    said 24 s left with 3 min to go)."""
    plan = _plan(quick, samples)
    passes = max(sum(_schedule(_budget(k, plan["samples"]))[1:]) for k in plan["kernels"])
    glue = len(glue_models()[: plan["glue"]])
    held_out = len(validation_models()[: plan["validation"]])
    models = glue + held_out * (1 + checks)
    return 3 + passes * len(plan["kernels"]) + models + 1 + (glue >= LEAVE_ONE_OUT)


def _budget(kernel: str, samples: int) -> int:
    """Shapes a kernel is timed at: gemm twice the others (every analytic fallback prices its
    GEMMs with it), and so each mixer's decode step: a decode step sums several steps' small
    errors, and a step's fit still improved with its last samples (error on a held-out fifth of
    two Xeon calibrations' timings, mean over the eleven steps: 7.2% fitted to 57 timings,
    6.2-6.3% to 76, 5.6-5.8% to 95), while a step shape costs little to time (0.06-0.11 s,
    as much as a GEMM's); and so the kernels drawn at decode rows (`DECODE_DRAWN`): their
    random draws as before, and as many again at decode rows."""
    twice = kernel == "gemm" or kernel.endswith(".step") or kernel in DECODE_DRAWN
    return samples * (2 if twice else 1)


def _schedule(samples: int) -> tuple[int, int, int]:
    """(shapes per pass, initial random passes, adaptive rounds) of a budget: half of it drawn
    at random, the rest in rounds of fresh shapes and neighbours of the worst."""
    per_round = max(1, samples // 8)
    first = max(2, samples // 2)
    return (
        per_round,
        max(1, math.ceil(first / per_round)),
        max(1, (samples - first) // (2 * per_round)),
    )


def _draw(kernel: str, rng: random.Random, n: int, seen: set) -> list[timing.Shape]:
    """Up to n new valid shapes of a kernel's grid; of a kernel in `DECODE_DRAWN`, every other
    one at the rows of a decode step."""
    out: list[timing.Shape] = []
    for _ in range(20 * n):
        if len(out) == n:
            break
        shape = timing.random_shape(kernel, rng)
        if kernel in DECODE_DRAWN and len(out) % 2:
            shape = _at_decode_rows(shape, rng)
        if shape not in seen and _valid(shape):
            seen.add(shape)
            out.append(shape)
    return out


def _at_decode_rows(shape: timing.Shape, rng: random.Random) -> timing.Shape:
    """The shape with its row count drawn from a decode step's (one row per sequence)."""
    knob = DECODE_DRAWN[shape.kernel]
    index = dict(shape.index)
    index[knob] = timing.GRIDS[shape.kernel][knob].index(rng.choice(timing.BATCHES))
    return timing.Shape(shape.kernel, tuple(index.items()))


def _valid(shape: timing.Shape) -> bool:
    if not timing.affordable(shape):
        return False
    try:
        timing.shape_rows(shape)
    except InvalidArch:
        return False
    return True


class KernelFit:
    """One kernel's adaptive sampling, a pass at a time (`step`), so that `fit_kernels` can
    interleave the kernels: a slow spell of a shared machine then touches a few shapes of
    every kernel rather than every shape of one (measured on this project's VM: one kernel's
    timings, all taken within ten seconds, came out 23% slow and its fit with them).

    The first half of the budget is drawn at random in passes of a round's size; then each
    adaptive round times fresh random shapes, records the fit's error on them before they are
    added (`fresh_error`) and times grid neighbours of the worst predicted ones."""

    def __init__(
        self,
        kernel: str,
        measure: Callable[[timing.Shape], float | None],
        samples: int,
        rng: random.Random,
        memory: Glue = NO_GLUE,
    ) -> None:
        self.kernel, self.measure, self.rng, self.memory = kernel, measure, rng, memory
        self.per_round, self.initial, self.rounds = _schedule(samples)
        self.passes = self.initial + self.rounds
        self.done = 0  # passes taken
        self.seen: set = set()
        self.shapes: list[timing.Shape] = []
        self.X: list[np.ndarray] = []
        self.W: list[np.ndarray] = []
        self.R: list[float] = []  # resident bytes (weights, state): the stalls met alone
        self.y: list[float] = []
        self.coef: np.ndarray | None = None
        self.ens: trees.Ensemble | None = None
        self.fresh_error = float("nan")
        self.runs = True  # False once the runtime ran none of a pass's shapes before a fit

    def step(self) -> None:
        """Take the next pass (nothing once all are taken or the runtime runs none)."""
        if not self.runs or self.done >= self.passes:
            return
        self.done += 1
        if self.done <= self.initial:
            self._add(self._take(_draw(self.kernel, self.rng, self.per_round, self.seen)))
            if not self.y:
                self.runs = False
            elif self.done == self.initial:
                self._refit()
            return
        fresh = self._take(_draw(self.kernel, self.rng, self.per_round, self.seen))
        if not fresh or self.coef is None or self.ens is None:
            return
        predicted = _predict_rows(self.coef, self.ens, self.memory, fresh)
        errors = np.abs(predicted / [s for *_, s in fresh] - 1)
        self.fresh_error = float(np.mean(errors))
        worst = [fresh[i][0] for i in np.argsort(-errors)[: self.per_round]]
        near = [timing.neighbour(w, self.rng) for w in worst]
        near = [s for s in near if s not in self.seen and _valid(s)]
        self.seen.update(near)
        self._retime_slowest()
        self._add(fresh + self._take(near))
        self._refit()

    def _retime_slowest(self) -> None:
        """Time again the shapes measured most above their fit (more than SUSPECT x) and keep
        the lesser time: a slow spell of the machine only ever adds to a timing (measured
        here: one step kernel timed at 603 us in a spell, 83 us before and after)."""
        if self.coef is None or self.ens is None:
            return
        W, X, y = np.array(self.W), np.array(self.X), np.array(self.y)
        stalls = self.memory.stalls(np.array(self.R))
        ratio = y / (np.maximum(W @ self.coef, 1e-12) * np.exp(self.ens.predict(X)) + stalls)
        for i in np.argsort(-ratio)[: max(1, self.per_round // 2)]:
            if ratio[i] <= SUSPECT:
                break
            again = self.measure(self.shapes[i])
            if again is not None:
                self.y[i] = min(self.y[i], again)

    def result(self) -> tuple[tuple[float, ...] | None, trees.Ensemble | None, int, float]:
        """(learned-roofline coefficients, correction ensemble, shapes timed, fresh error);
        no fit when the runtime ran none of its shapes."""
        if not self.y:
            return None, None, 0, float("nan")
        if self.ens is None:
            self._refit()
        assert self.coef is not None
        return tuple(float(v) for v in self.coef), self.ens, len(self.y), self.fresh_error

    def _take(self, shapes: list[timing.Shape]) -> list[tuple]:
        rows = []
        for shape in shapes:
            x, c, p = timing.shape_rows(shape)
            if self.kernel == "gemm":
                v = shape.values()
                w = gemm_work(v["m"], v["k"], v["n"])[0]
                r = FP32 * v["k"] * v["n"]
            else:
                w = work(self.kernel, c, p)[0]
                r = float(resident(self.kernel, c, p)[0])
            seconds = self.measure(shape)
            if seconds is not None:
                rows.append((shape, x[0], w, r, seconds))
        return rows

    def _add(self, rows) -> None:
        for shape, x, w, r, seconds in rows:
            self.shapes.append(shape)
            self.X.append(x)
            self.W.append(w)
            self.R.append(r)
            self.y.append(seconds)

    def _refit(self) -> None:
        y = np.array(self.y)
        # what the kernel costs with its weights and state in the cache: less the stalls it
        # met alone (at most 9/10 of a timing: a timing is never all stalls)
        cached = np.maximum(y - self.memory.stalls(np.array(self.R)), 0.1 * y)
        self.coef, self.ens = _fit(np.array(self.X), np.array(self.W), cached, KERNELS[self.kernel])


def fit_kernel(
    kernel: str,
    measure: Callable[[timing.Shape], float | None],
    samples: int,
    rng: random.Random,
    memory: Glue = NO_GLUE,
) -> tuple[tuple[float, ...] | None, trees.Ensemble | None, int, float]:
    """Adaptive sampling and fit of one kernel alone (`KernelFit`, every pass in a row):
    (learned-roofline coefficients, correction ensemble, shapes timed, relative error on the
    last round's fresh shapes before they were added). `measure(shape)` gives seconds, or None
    where the runtime cannot run the shape (no fit when it runs none of the first ones);
    `memory` the machine's stalls (`fit_memory`), which the fit leaves out."""
    fit = KernelFit(kernel, measure, samples, rng, memory)
    for _ in range(fit.passes):
        fit.step()
    return fit.result()


def _nnls(A: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, float]:
    """Non-negative least squares of A x = b, solved on unit-scaled columns (a fit's terms span
    1 .. 1e13): (x, residual)."""
    from scipy.optimize import nnls

    norm = np.maximum(A.max(axis=0), 1e-300)
    x, residual = nnls(A / norm, b)
    return x / norm, float(residual)


def _fit(
    X: np.ndarray, W: np.ndarray, y: np.ndarray, names: tuple[str, ...]
) -> tuple[np.ndarray, trees.Ensemble]:
    """(roofline coefficients: non-negative least squares of the work terms W on the timings y,
    relative errors; the trees' fit of log(y / roofline) on the features X)."""
    coef = _nnls(W / y[:, None], np.ones(len(y)))[0]
    base = np.maximum(W @ coef, 1e-12)
    return coef, trees.fit(X, np.log(y / base), names, **TREES)


def _predict_rows(coef: np.ndarray, ens: trees.Ensemble, memory: Glue, rows) -> np.ndarray:
    X = np.array([x for _, x, *_ in rows])
    W = np.array([w for _, _, w, *_ in rows])
    R = np.array([r for *_, r, _ in rows])
    return np.maximum(W @ coef, 1e-12) * np.exp(ens.predict(X)) + memory.stalls(R)


def fit_memory(sizes, seconds, max_levels: int = 2) -> Glue:
    """The machine's memory stalls (`Glue` with no per-model or per-layer terms) from the
    seconds of a matrix-vector product over weights of `sizes` bytes
    (`kernel_timing.memory_seconds`): seconds = t0 + r x bytes + the stalls of each cache
    level the weight outgrows (`Cache`: byte_s x bytes x missing(bytes)).

    Each level's two capacities by grid search over the sizes' range, `APART` x away from the
    other levels' (the caches of a hierarchy differ in size by 4x and more): every combination
    on a coarse grid (`COARSE_STEP`), then each level refined on a fine one (`FINE_STEP`, as the
    grids of 21 and 61 points over 1-256 MiB were) with the others held; t0, r and
    the byte_s >= 0 by non-negative least squares on relative errors. Of the fits with 0, 1,
    ... `max_levels` levels, more levels are taken while the fit with fewer misses by more
    than `NOISE` (RMS) and the one with more halves that miss. Two probes on this project's
    Xeon VM (a 2 MiB L2, a share of L3 of about 100 MiB): no level missed by 28% RMS, the
    best one by 13-28%, two by 1.1-1.2%."""
    sizes = np.asarray(sizes, dtype=np.float64)
    seconds = np.asarray(seconds, dtype=np.float64)

    def spans(step: float) -> list[tuple[float, float]]:
        """Every (lo, hi) on a log grid over the sizes' range, `step` x apart."""
        points = 1 + math.ceil(math.log(sizes.max() / sizes.min()) / math.log(step))
        grid = np.geomspace(sizes.min(), sizes.max(), points)
        return [(float(lo), float(hi)) for lo in grid for hi in grid[grid > lo]]

    base = np.column_stack([np.ones_like(sizes), sizes]) / seconds[:, None]
    columns: dict[tuple[float, float], np.ndarray] = {}  # a level's stalls per byte_s, relative

    def fit(levels) -> tuple[float, np.ndarray]:
        for span in levels:
            if span not in columns:
                columns[span] = Cache(1.0, *span).stalls(sizes) / seconds
        A = np.column_stack([base, *(columns[span] for span in levels)])
        coef, residual = _nnls(A, np.ones_like(sizes))
        return residual / math.sqrt(len(sizes)), coef

    def apart(a: tuple[float, float], b: tuple[float, float]) -> bool:
        return APART * a[1] <= b[0] or a[0] >= APART * b[1]

    coarse, fine = spans(COARSE_STEP), spans(FINE_STEP)
    fits: list[list[tuple[float, float]]] = [[]]  # the best fit with 0, 1, ... levels
    for n in range(1, max_levels + 1):
        sets = (c for c in itertools.combinations(coarse, n) if all(map(apart, c[:-1], c[1:])))
        levels = list(min(sets, key=lambda c: fit(c)[0], default=()))
        for _ in range(2):  # each level refined on the fine grid, the others held
            for j in range(len(levels)):
                rest = levels[:j] + levels[j + 1 :]
                near = [s for s in fine if all(apart(s, o) or apart(o, s) for o in rest)]
                levels[j] = min(
                    near, key=lambda s: fit([*rest[:j], s, *rest[j:]])[0], default=levels[j]
                )
        fits.append(levels)
    levels = fits[0]
    for more in fits[1:]:
        if fit(levels)[0] > NOISE and fit(more)[0] <= fit(levels)[0] / 2:
            levels = more
    coef = fit(levels)[1]
    caches = (Cache(float(b), float(lo), float(hi)) for (lo, hi), b in zip(levels, coef[2:]))
    return Glue(0.0, 0.0, tuple(sorted((c for c in caches if c.byte_s > 0), key=lambda c: c.lo)))


def _with(device: DeviceProfile, kernels: Kernels) -> DeviceProfile:
    return dataclasses.replace(device, kernels=kernels)


def _passes(sizes, rows, stalls: list[list[float]]) -> Passes:
    """The extra passes of the passes probe's stalls (`kernel_timing.pass_stalls`: per size,
    one row's then each of `rows`'): stalls / one row's - 1, floored at 0 (less than one
    row's: the GEMM overlaps its stream, which `Glue.overlap` prices); 0 where one row's
    weight met no stall (it stayed in the cache)."""
    extra = []
    for one, *more in stalls:
        extra.append(tuple(max(0.0, t / one - 1.0) if one > 0 else 0.0 for t in more))
    return Passes(tuple(float(r) for r in rows), tuple(float(n) for n in sizes), tuple(extra))


def _shared_capacity(memory: Glue, scale: float) -> Glue:
    """`memory` with its largest cache (the VM's share of the shared one) `scale` x as large."""
    if not memory.caches:
        return memory
    *private, shared = memory.caches
    shared = dataclasses.replace(shared, lo=scale * shared.lo, hi=scale * shared.hi)
    return dataclasses.replace(memory, caches=(*private, shared))


def _fit_glue(
    measured, predicted, layers, working, memory: Glue, gemms=None, restreamed=None
) -> dict[str, Glue]:
    """measured = predicted + a + b x layers + w x memory's stalls of the working set (+ u x
    layers x the share of it that misses the largest cache, less what the weight GEMMs hide at
    `overlap`, for the decode step), per phase (see the module docstring and `Glue`): a, b, w,
    u >= 0 by non-negative least squares on relative errors; the capacity of the largest cache
    as a model meets it (`SHARED_SCALES` x the probe's) and the overlap (`OVERLAPS`) are the
    ones of least residual. w is how much a byte that misses costs in a model against the
    probe's one long stream (about 1.1 for a decode step, 0.6 for a prefill, whose weights are
    read once for many tokens, on the EPYC VM's earlier profiles). A model holds less of a
    shared cache than the probe's one weight streamed again and again: on this project's Xeon
    VM, with the probe's capacity, decode steps of 80-160 MiB of weights were predicted 10-30%
    fast; fitted, a model's capacity came out at 0.6-0.7 x the probe's.

    `gemms`: per model, the (extra seconds, weight bytes) of its decode step's weight GEMMs
    (`kernel_latency.weight_gemms`); what they hide depends on w, so the fit is repeated with
    each GEMM's bound (its compute or its stalls) at the last fit's w, `REFITS` times.
    `restreamed`: per model, the (prefill, step) weight bytes streamed beyond one pass
    (`WholeModel.restreamed`), each at the per-byte stall of its working set."""
    layers = np.array(layers, dtype=np.float64)
    glue = {}
    for i, phase in enumerate(PHASES):
        meas = np.array([m[i] for m in measured])
        pred = np.array([p[i] for p in predicted])
        nbytes = np.array([w[i] for w in working], dtype=np.float64)
        again = np.array([r[i] for r in restreamed] if restreamed else np.zeros_like(nbytes))
        overlaps = OVERLAPS if phase == "step" and gemms is not None else (0.0,)
        best: tuple[float, Glue] | None = None
        for scale in SHARED_SCALES if memory.caches else (1.0,):
            mem = _shared_capacity(memory, scale)
            # the per-layer miss in decode steps only (`Glue`): fitted to prefills as well, it
            # took the place of their per-byte stall, and TTFT within +-10% fell in four of six
            # refits (two calibrations' timings, three benchmarks; EPYC VM) and rose in none
            missing = mem.missing(nbytes) if phase == "step" else np.zeros_like(meas)
            stalls = mem.stalls(nbytes) + mem.shares(nbytes, again)
            A = np.column_stack([np.ones_like(meas), layers, stalls, layers * missing])
            for overlap in overlaps:
                w = 1.0
                for _ in range(REFITS if overlap else 1):
                    fixed, per_w = _hidden_terms(mem, nbytes, gemms, w, overlap)
                    Aw = A.copy()
                    Aw[:, 2] -= per_w
                    (a, b, w, u), _ = _nnls(Aw / meas[:, None], 1.0 - (pred - fixed) / meas)
                fit = Glue(float(a), float(b), mem.scaled(float(w)), float(u), overlap)
                hidden = (
                    np.array([fit.hidden(n, *g) for n, g in zip(nbytes, gemms)])
                    if overlap
                    else np.zeros_like(meas)
                )
                stalled = fit.stalls(nbytes, layers) + fit.shares(nbytes, again)
                total = pred + fit.overhead(layers) + stalled - hidden
                residual = float(np.linalg.norm(total / meas - 1.0))
                if best is None or residual < best[0]:
                    best = (residual, fit)
        assert best is not None
        glue[phase] = best[1]
    return glue


def _hidden_terms(mem: Glue, nbytes, gemms, w: float, overlap: float):
    """What the models' weight GEMMs hide (`Glue.hidden`) at per-byte scale w, as (seconds
    that do not depend on w, seconds per unit of w), each GEMM hiding its extra compute or its
    weights' stalls, whichever is less at w: linear in w near w, so w is refitted with it."""
    fixed, per_w = np.zeros(len(nbytes)), np.zeros(len(nbytes))
    if not overlap:
        return fixed, per_w
    per_byte = mem.byte_stalls(nbytes) / np.maximum(nbytes, 1.0)  # at w = 1 (`Glue.shares`)
    for i, (extra, weights) in enumerate(gemms):
        share = np.asarray(weights, dtype=np.float64) * per_byte[i]
        stalled = w * share < extra
        fixed[i] = overlap * extra[~stalled].sum()
        per_w[i] = overlap * share[stalled].sum()
    return fixed, per_w


def _setting(m: WholeModel) -> dict[str, Any]:
    return {"arch": m.arch.summary(), "prompt": m.prompt, "context": m.context, "batch": m.batch}


def _glue_inputs(device: DeviceProfile, models, measured, predicted) -> tuple[list, ...]:
    """Per model, what `_fit_glue` takes beside the memory probe: (measured, predicted,
    layers, working sets, step GEMMs, restreamed bytes); `device` carries the kernels."""
    return (
        list(measured),
        list(predicted),
        [m.arch.n_layers for m in models],
        [m.working_sets() for m in models],
        [m.step_gemms(device) for m in models],
        [m.restreamed(device.kernels.passes) for m in models],
    )


def _left_out(device: DeviceProfile, kernels: Kernels, models, inputs, memory):
    """Each of the glue models `models` predicted (seconds to first token, of the decode step)
    by the model-level terms fitted to the others (`_fit_glue` on their `inputs`, from
    `_glue_inputs`)."""
    out = []
    for i, m in enumerate(models):
        rest = [[v for j, v in enumerate(values) if j != i] for values in inputs]
        glue = _fit_glue(*rest[:4], memory, *rest[4:])
        out.append(m.predicted(_with(device, dataclasses.replace(kernels, glue=glue))))
    return out


def _bands(working, err, edges: list[float]) -> dict[str, list] | None:
    """The held-out errors `err` by working set (`WorkingSetBands`): bands split at `edges`,
    each of fewer than `MIN_BAND` merged with its smaller neighbour; None when one is left."""
    edges = list(edges)
    while edges:
        n = np.bincount(np.searchsorted(edges, working, "right"), minlength=len(edges) + 1)
        k = int(np.argmin(n))
        if n[k] >= MIN_BAND:
            break
        # drop the edge between band k and its smaller neighbour
        edges.pop(0 if k == 0 else k - 1 if k == len(edges) or n[k - 1] <= n[k + 1] else k)
    if not edges:
        return None
    band = np.searchsorted(edges, working, "right")
    return {
        "edges": [round(float(e)) for e in edges],
        "p90": [round(float(np.quantile(err[band == k], 0.9)), 4) for k in range(len(edges) + 1)],
        "n": [int(np.sum(band == k)) for k in range(len(edges) + 1)],
        "bound": [round(p90_bound(err[band == k]), 4) for k in range(len(edges) + 1)],
    }


def pooled_check(
    measured, predicted, working, held_out: int, capacity: float
) -> dict[str, dict[str, Any]]:
    """The profile's `validation`: per quantity the figures of the pooled held-out predictions
    (the first `held_out` of them the held-out models', the rest the glue models' left out),
    and by working set (`working`: per prediction, (prefill, step) bytes) with bands at
    `BAND_EDGES` x `capacity` (no bands at 0: no cache level found)."""
    out = {}
    left_out = len(measured) - held_out
    for i, quantity in enumerate(("ttft", "decode")):
        signed = np.array([p[i] / m[i] - 1 for m, p in zip(measured, predicted)])
        err = np.abs(signed)
        what = (
            f"{held_out} held-out whole models no calibration step timed (prompt "
            f"{VALIDATION_PROMPT}, context {VALIDATION_CONTEXT})"
        )
        if left_out:
            what += (
                f" and {left_out} glue models, each predicted by the model-level terms fitted "
                "without it"
            )
        out[quantity] = _check(err, what, ["fp32"])  # the kernel predictor prices fp32 only
        out[quantity]["held_out"] = {"fp32": _signed(signed)}  # one run: shared conditions
        ws = np.array([w[i] for w in working], dtype=np.float64)
        banded = capacity > 0 and quantity in BANDED
        bands = _bands(ws, err, [e * capacity for e in BAND_EDGES]) if banded else None
        if bands is not None:
            out[quantity]["by_working_set"] = bands
    return out


def precision_check(
    device: DeviceProfile,
    precision: str,
    *,
    runtime: str = "torch",
    repeats: int = 5,
    quick: bool = False,
    step: Callable[[str], None] | None = None,
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """The held-out check of `device`'s predictions at `precision` (a roofline one: the kernel
    predictor prices fp32 only): the held-out models (`validation_models`), at their setting and
    at the calibration ranges' longest (`LONG`), timed with their weights and activations in
    the precision's torch dtype (`kernel_timing.DTYPES`) and predicted at it. Returns the
    profile's `validation` entries per quantity (covering the precisions priced alike: `ALIKE`;
    empty where no model ran) and the raw timings. A model torch cannot run in that dtype is
    left out, and the entry's `method` names it with the reason. Why the long setting: on this
    project's EPYC VM, bf16 decode steps of attention models after 1536-4096 tokens ran 2-3x
    slower than the fp16 roofline (torch's CPU attention in bf16), which the check at context
    384 alone never saw: its +-31% held for 67% of the benchmark's decode steps). Each model
    is timed in one build, not the least of three: the roofline's error there (a bound of
    +-36-70% on the Xeon VM) dwarfs a build's 2-7%, and it saves 80 s of a calibration."""
    plan = _plan(quick, BUDGETS["full"].samples)
    covers = sorted(ALIKE.get(precision, {precision}))
    ran, raw, skipped = [], [], []
    held_out = validation_models()[: plan["validation"]]
    models = [s for m in held_out for s in (m, m._replace(prompt=LONG[0], context=LONG[1]))]
    dtype = timing.DTYPES[precision]
    for i, m in enumerate(models):
        try:
            measured = m.timed(
                runtime, 1 if quick else repeats, plan["min_time"], 1, precision, plan["span"]
            )
        except RuntimeError as e:  # torch has no kernel for an op in that dtype here
            if m.context != LONG[1]:
                skipped.append(f"{m.arch.summary()} ({str(e).splitlines()[0][:80]})")
        else:
            predicted = m.predicted(device, precision)
            ran.append((measured, predicted))
            raw.append({**_setting(m), "measured_s": measured, "predicted_s": predicted})
        if step is not None and i % 2:
            step(f"{precision} check: whole model {i // 2 + 1} of {len(held_out)}")
    if not ran:
        return {}, raw
    what = (
        f"{len(ran)} predictions of held-out whole models (prompt {VALIDATION_PROMPT}, context "
        f"{VALIDATION_CONTEXT}; prompt {LONG[0]}, context {LONG[1]}) timed in {runtime} in "
        f"{dtype}, predicted by the roofline at {precision}"
    ) + (f"; not run in {dtype}: {'; '.join(skipped)}" if skipped else "")
    out = {}
    for i, quantity in enumerate(("ttft", "decode")):
        signed = np.array([p[i] / m[i] - 1 for m, p in ran])
        err = np.abs(signed)
        out[quantity] = _check(err, what, covers)
        out[quantity]["held_out"] = {precision: _signed(signed)}
    return out, raw


def _check(err: np.ndarray, method: str, precisions: list[str]) -> dict[str, Any]:
    """A `validation` entry (profile YAML keys) of held-out absolute relative errors `err`."""
    return {
        "mape": round(float(err.mean()), 4),
        "within_10": round(float(np.mean(err <= 0.10)), 4),
        "n": len(err),
        "method": method,
        "p90": round(float(np.quantile(err, 0.9)), 4),
        "bound": round(p90_bound(err), 4),
        "precisions": list(precisions),
    }


def _signed(errors: np.ndarray) -> list[float]:
    """Signed held-out errors as a check stores them (`held_out`, read by `cost.order`)."""
    return [round(float(e), 4) for e in errors]


def p90_bound(err: np.ndarray, confidence: float = 0.9) -> float:
    """An upper bound of the 90th percentile of the |error| distribution that `err` samples, at
    `confidence`, free of any assumption on that distribution: the least order statistic
    err_(k) with P(Binomial(n, 0.9) <= k - 1) >= `confidence` (err_(k) falls below the
    percentile only when k or more of the n errors do, a Binomial(n, 0.9) count); the largest
    error where none reaches it (n < 22 at 0.9). Why: the 90th percentile of a calibration's
    49-52 held-out errors, stated as the +-, held for 78% of the TTFT and 86% of the decode
    predictions of the accuracy benchmark (mean over 64 pairs of eight EPYC VM calibrations and
    eight runs' timings; as low as 50% and 65%); this bound, for 88% and 94%
    (`benchmarks/bench_error_bound.py`; README, "An error you can trust")."""
    from scipy.stats import binom

    e = np.sort(np.asarray(err, dtype=np.float64))
    k = int(binom.ppf(confidence, len(e), 0.9)) + 1  # the least k with cdf(k - 1) >= confidence
    return float(e[min(k, len(e)) - 1])


def fit_kernels(
    device: DeviceProfile,
    *,
    runtime: str = "torch",
    threads: int = 1,
    repeats: int = 5,
    quick: bool = False,
    budget: Budget = BUDGETS["full"],
    cpu: str = "",
    seed: int = 0,
    step: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure and fit the kernel predictor of this machine on top of `device` (the measured
    roofline profile, whose peaks give the analytic times). Returns `kernels` (the profile
    section), `validation` (held-out figures; empty when no held-out model runs in the
    runtime), and the raw whole-model timings."""
    import torch

    plan = _plan(quick, budget.samples)
    rng = random.Random(seed)
    reps = 1 if quick else repeats
    # each shape the least over the budget's builds of three repeats each (one export per build
    # in another runtime: one build of all the repeats there)
    builds = budget.kernel_builds if runtime == "torch" and not quick else 1
    kernel_reps = max(1, math.ceil(reps * 3 / 5)) if builds > 1 else reps

    def note(text: str) -> None:
        if step is not None:
            step(text)

    kernels = Kernels(
        runtime=runtime,
        torch=str(torch.__version__),
        threads=threads,
        date=datetime.date.today().isoformat(),
        cpu=cpu or "unknown",
        dispatch_s=timing.dispatch_seconds(runtime, reps),
        glue={phase: NO_GLUE for phase in PHASES},
        sample_s=plan["span"],
    )
    note("dispatch overhead per operator")
    sizes = timing.MEMORY_SIZES[:8] if quick else timing.MEMORY_SIZES
    memory_s = [timing.memory_seconds(n, reps, plan["min_time"]) for n in sizes]
    memory = fit_memory(sizes, memory_s)
    note("memory stalls: a matrix-vector product over 1/8-256 MiB")
    pass_sizes, pass_rows = (
        (timing.PASS_SIZES[1:2], (2, 3)) if quick else (timing.PASS_SIZES, timing.PASS_ROWS)
    )
    pass_s = (
        [timing.pass_stalls(n, pass_rows, reps, plan["min_time"]) for n in pass_sizes]
        if runtime == "torch"  # the probe runs torch's GEMMs; another runtime has its own
        else []
    )
    if pass_s:
        kernels = dataclasses.replace(kernels, passes=_passes(pass_sizes, pass_rows, pass_s))
    note(f"passes over the weights of GEMMs of 2-{pass_rows[-1]} rows")

    def measure(shape: timing.Shape) -> float | None:
        try:
            return timing.time_shape(shape, runtime, kernel_reps, plan["min_time"], builds)
        except ExportError:  # the runtime cannot run it: that kernel keeps its analytic time
            return None

    fits = {
        k: KernelFit(k, measure, _budget(k, plan["samples"]), rng, memory) for k in plan["kernels"]
    }
    passes = max(f.passes for f in fits.values())
    for i in range(passes):  # interleaved: a pass of every kernel, then the next
        for fit in fits.values():
            fit.step()
            timed_now = sum(len(f.y) for f in fits.values())
            note(f"kernels: pass {i + 1} of {passes}, {fit.kernel} ({timed_now} shapes timed)")
    skipped = []
    for kernel, fit in fits.items():
        coef, ens, n, fresh = fit.result()
        if coef is None or ens is None:
            skipped.append(kernel)
            continue
        kernels = dataclasses.replace(
            kernels,
            predictors={**kernels.predictors, kernel: ens},
            bases={**kernels.bases, kernel: coef},
            samples={**kernels.samples, kernel: n},
            fresh_error={**kernels.fresh_error, kernel: 0.0 if math.isnan(fresh) else fresh},
        )

    def timed(
        models: list[WholeModel], what: str, builds: int
    ) -> tuple[list[WholeModel], list[tuple[float, float]]]:
        """(the models that run in the runtime, their timings: the least over `builds`)."""
        ran, times = [], []
        for i, m in enumerate(models):
            try:
                times.append(m.timed(runtime, reps, plan["min_time"], builds, span=plan["span"]))
                ran.append(m)
            except ExportError:
                pass
            note(f"{what}: whole model {i + 1} of {len(models)} ({m.arch.summary()})")
        return ran, times

    glue_archs, glue_meas = timed(
        glue_models()[: plan["glue"]], "model-level terms", budget.glue_builds
    )
    glue_pred = [m.predicted(_with(device, kernels)) for m in glue_archs]
    inputs = _glue_inputs(_with(device, kernels), glue_archs, glue_meas, glue_pred)
    if glue_archs:  # else no whole model runs in the runtime: the kernels' sum and stalls
        glue = _fit_glue(*inputs[:4], memory, *inputs[4:])
    else:
        glue = {phase: memory for phase in PHASES}
    kernels = dataclasses.replace(kernels, glue=glue)
    if skipped:
        note(f"model-level terms fitted; {', '.join(skipped)}: not run in {runtime}, analytic kept")
    else:
        note("model-level terms fitted")
    held_out, val_meas = timed(
        validation_models()[: plan["validation"]], "held-out models", HELD_OUT_BUILDS
    )
    fitted = _with(device, kernels)
    val_pred = [m.predicted(fitted) for m in held_out]
    left_out = []
    if held_out and len(glue_archs) >= LEAVE_ONE_OUT:
        left_out = _left_out(device, kernels, glue_archs, inputs, memory)
        note(f"{len(left_out)} glue models predicted, each left out of the model-level fit")
    checked = held_out + glue_archs[: len(left_out)]
    capacity = memory.caches[-1].hi if memory.caches else 0.0
    return {
        "kernels": kernels.to_dict(),
        "validation": pooled_check(
            val_meas + glue_meas[: len(left_out)],
            val_pred + left_out,
            [m.working_sets() for m in checked],
            len(held_out),
            capacity,
        )
        if held_out
        else {},
        "raw": {
            "memory": [{"bytes": n, "seconds": t} for n, t in zip(sizes, memory_s)],
            "passes": [
                {"bytes": n, "rows": [1, *pass_rows], "stall_s": t}
                for n, t in zip(pass_sizes, pass_s)
            ],
            "kernels": {
                k: [{**shape.values(), "seconds": t} for shape, t in zip(f.shapes, f.y)]
                for k, f in fits.items()
            },
            "glue": [
                {**_setting(a), "measured_s": m, "predicted_s": p}
                | ({"left_out_s": left_out[i]} if left_out else {})
                for i, (a, m, p) in enumerate(zip(glue_archs, glue_meas, glue_pred))
            ],
            "validation": [
                {**_setting(a), "measured_s": m, "predicted_s": p}
                for a, m, p in zip(held_out, val_meas, val_pred)
            ],
        },
    }
