"""Timing the kernels of `archsearch.cost.kernels` on this machine, at shapes drawn from grids.

Every kernel is timed as the models run it: the real modules of `archsearch.models` (the
mixer, channel mixer, norm or embedding of a one-layer model of the sampled architecture,
built alone; `archsearch.models.gemm.Linear` the GEMMs), through
`archsearch.runtimes.prepare(runtime, module, inputs)`, so the same timings can be taken in
any deploy runtime. A mixer's `forward` kernel is its prefill of T tokens of B sequences from
an empty state; its `step` kernel one decoded token after a context of n tokens.

A shape is a point of a kernel's grid (`GRIDS`: one tuple of values per knob, an index per
knob); `neighbour` moves a point one step along one or two knobs (adaptive sampling refines
around the shapes predicted worst). The grids are the calibration set: widths 64-768, 1-32
heads, prompts of 16-512 tokens, contexts of 16-2048, batches of 1-8, GEMMs up to
2048 x 3072 x 16384 (at most MAX_GEMM_FLOPS).

Whole models (`time_model`) are timed as the least over `instances` fresh builds of the least
of their samples over `SAMPLE_S` seconds, each after `WARMUP_S` of calls. A decode step right
after its prefill runs slower for its first calls, as its weights settle into the shared cache
(a matrix-vector product over a large weight, too, reaches its steady time only after a few
calls); builds of one model agree closely once warm and far less in their first calls.
The warm-up removes the transient, the least of samples over a span the noise of a call and
the machine's busy moments, the least of builds what is left of a build's memory placement.
A kernel is called again and again within its own samples (calls looped for `min_time`, the
least of repeats), which take it to its steady time, so the two agree on what they measure:
the undisturbed steady time (not checked: a GEMM whose weight alone is as large as the cache
may be timed before it). Both run with the process's allocator held steady
(`steady_allocator`): without it, a kernel's large temporaries are page-faulted in anew on
every call or not, by what ran before it in the process.
"""

from __future__ import annotations

import ctypes
import functools
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from archsearch.arch import (
    FFN_KINDS,
    LINEAR_FAMILIES,
    ArchConfig,
    AttentionConfig,
    FFNConfig,
    LayersConfig,
    LinearConfig,
    MCSDConfig,
    MoEConfig,
)
from archsearch.cost.kernels import KERNELS, features, gemm_features
from archsearch.cost.ops import Columns, Phase

__all__ = [
    "BATCHES",
    "DTYPES",
    "GRIDS",
    "MAX_GEMM_FLOPS",
    "MAX_TOKENS",
    "MEMORY_SIZES",
    "SAMPLE_S",
    "WARMUP_S",
    "Shape",
    "affordable",
    "dispatch_seconds",
    "memory_seconds",
    "neighbour",
    "random_shape",
    "seconds_per_call",
    "shape_rows",
    "steady_allocator",
    "time_model",
    "time_model_once",
    "time_shape",
]

WIDTHS = (64, 128, 192, 256, 384, 512, 768)
HEADS = (1, 2, 4, 8, 16, 32)  # at most d / 32 (`_arch`): 24 at d = 768, as Mamba2 sets them
PROMPTS = (16, 32, 64, 128, 256, 512)
CONTEXTS = (16, 64, 128, 256, 512, 1024, 2048)
BATCHES = (1, 2, 4, 8)
TOKENS = (1, 2, 4, 8, 16, 64, 128, 256, 512, 1024, 2048)
_MIXER = {"d": WIDTHS, "H": HEADS, "B": BATCHES}
_FORWARD = {**_MIXER, "T": PROMPTS}
_STEP = {**_MIXER, "ctx": CONTEXTS}
_LINEAR = {"gate": (0, 1), "conv": (0, 4)}

GRIDS: dict[str, dict[str, tuple]] = {
    "gemm": {
        "m": (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048),
        "k": (64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072),
        "n": (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384),
    },
    "norm": {"N": TOKENS, "d": WIDTHS},
    "residual": {"N": TOKENS, "d": WIDTHS},
    "embedding": {"N": TOKENS, "d": WIDTHS},
    "ffn": {"N": TOKENS, "d": WIDTHS, "kind": FFN_KINDS, "mult": (2, 3, 4)},
    "moe": {
        "N": TOKENS,
        "d": WIDTHS,
        "E": (4, 8, 16),
        "topk": (1, 2, 4),
        "S": (0, 1),
        "mult": (0.5, 1),
    },
    "gqa.forward": {**_FORWARD, "G": (1, 2, 0)},  # G = 0: as many KV heads as heads (MHA)
    "gqa.step": {**_STEP, "G": (1, 2, 0)},
    "mla.forward": {**_FORWARD, "rank": (8, 4, 2), "q": (0, 1)},
    "mla.step": {**_STEP, "rank": (8, 4, 2), "q": (0, 1)},
    "mcsd.forward": {"d": WIDTHS, "C": (2, 4, 8), "B": BATCHES, "T": PROMPTS},
    "mcsd.step": {"d": WIDTHS, "C": (2, 4, 8), "B": BATCHES, "ctx": (16, 64)},
}
for _fam in LINEAR_FAMILIES:
    GRIDS[f"{_fam}.forward"] = {**_FORWARD, **_LINEAR}
    GRIDS[f"{_fam}.step"] = {**_STEP, **_LINEAR, "ctx": (16, 64)}
assert set(GRIDS) == set(KERNELS)


@dataclass(frozen=True)
class Shape:
    """A point of a kernel's grid: knob -> index into `GRIDS[kernel][knob]`."""

    kernel: str
    index: tuple[tuple[str, int], ...]

    def values(self) -> dict[str, Any]:
        grid = GRIDS[self.kernel]
        return {knob: grid[knob][i] for knob, i in self.index}


MAX_TOKENS = 2048  # B x T of a timed prefill (longer ones cost seconds and add little)
MAX_CONTEXT_TOKENS = 8192  # B x ctx of a timed step (its context is built by a prefill)
# of a timed GEMM (a fraction of a second on one core): large enough for the LM head over a
# batched prefill's every token (1536 rows x 896 x 10192 is 2.8e10 FLOPs), which a grid capped
# lower left to the trees to extrapolate, each calibration differently
MAX_GEMM_FLOPS = 8e10


def affordable(shape: Shape) -> bool:
    """Whether a shape is cheap enough to time: a prefill of at most MAX_TOKENS tokens, a step
    after at most MAX_CONTEXT_TOKENS, a GEMM of at most MAX_GEMM_FLOPS."""
    v = shape.values()
    if shape.kernel == "gemm":
        return 2.0 * v["m"] * v["k"] * v["n"] <= MAX_GEMM_FLOPS
    if "ctx" in v:
        return v["B"] * v["ctx"] <= MAX_CONTEXT_TOKENS
    return v.get("B", 1) * v.get("T", 1) <= MAX_TOKENS


def random_shape(kernel: str, rng: random.Random) -> Shape:
    grid = GRIDS[kernel]
    return Shape(kernel, tuple((k, rng.randrange(len(v))) for k, v in grid.items()))


def neighbour(shape: Shape, rng: random.Random) -> Shape:
    """The shape one grid step away along one or two knobs."""
    grid = GRIDS[shape.kernel]
    index = dict(shape.index)
    for knob in rng.sample(list(grid), min(len(grid), rng.choice((1, 2)))):
        index[knob] = min(max(index[knob] + rng.choice((-1, 1)), 0), len(grid[knob]) - 1)
    return Shape(shape.kernel, tuple(index.items()))


# ---- what a shape is: an architecture and a phase -----------------------------------------------


def _arch(kernel: str, v: dict[str, Any]) -> ArchConfig:
    """The one-layer architecture whose module (or norm, embedding) a shape times."""
    d = v["d"]
    mixer = kernel.partition(".")[0]
    base = dict(vocab_size=256, d_model=d, n_layers=1, max_seq_len=4096, tie_embeddings=False)
    heads = min(v.get("H", 1), d // 32)
    if mixer == "gqa":
        kv = heads if v["G"] == 0 else min(v["G"], heads)
        return ArchConfig(**base, attention=AttentionConfig(n_heads=heads, n_kv_heads=kv))
    if mixer == "mla":
        heads = max(heads, d // 128)  # heads at most 128 wide, as in MLA models (DeepSeek-V2)
        attn = AttentionConfig(
            kind="mla",
            n_heads=heads,
            kv_rank=d // v["rank"],
            q_rank=d // 2 if v["q"] else None,
            rope_dim=16 if d // heads <= 64 else 32,
        )
        return ArchConfig(**base, attention=attn)
    if mixer == "mcsd":
        return ArchConfig(**base, layers=LayersConfig(mixer="mcsd"), mcsd=MCSDConfig(v["C"]))
    if mixer in LINEAR_FAMILIES:
        lin = LinearConfig(
            family=mixer, n_heads=heads, output_gate=bool(v["gate"]), conv_size=v["conv"]
        )
        return ArchConfig(**base, layers=LayersConfig(mixer="linear"), linear=lin)
    attn = AttentionConfig(n_heads=1)
    if kernel == "ffn":
        kind = v["kind"]
        return ArchConfig(**base, attention=attn, ffn=FFNConfig(kind=kind, d_ffn=v["mult"] * d))
    if kernel == "moe":
        moe = MoEConfig(
            n_experts=v["E"],
            top_k=min(v["topk"], v["E"]),
            n_shared=v["S"],
            d_expert=int(v["mult"] * d),
        )
        return ArchConfig(**base, attention=attn, moe=moe)
    return ArchConfig(**base, attention=attn)  # norm, residual, embedding


def _phase(kernel: str, v: dict[str, Any]) -> Phase:
    if kernel.endswith(".step"):
        return Phase("step", T=1, n0=v["ctx"], B=v["B"])
    if kernel.endswith(".forward"):
        return Phase("forward", T=v["T"], B=v["B"], causal="half")
    return Phase("forward", T=v["N"], B=1)


def shape_rows(shape: Shape) -> tuple[np.ndarray, Columns | None, Phase | None]:
    """(features [1, f], the one-row table, the phase) of a shape; raises InvalidArch for a
    combination the architecture rules refuse."""
    v = shape.values()
    if shape.kernel == "gemm":
        return gemm_features(v["m"], v["k"], v["n"]), None, None
    arch = _arch(shape.kernel, v).resolved()
    c = Columns.from_archs([arch])
    p = _phase(shape.kernel, v)
    return features(shape.kernel, c, p), c, p


# ---- timing -------------------------------------------------------------------------------------


WARMUP_S = 0.25
"""Seconds a whole model's prefill or decode step is called before it is timed. A decode step
right after the prefill of its context runs slower than its steady time for its first calls,
while its weights and state settle into the cache. A deployed model decodes hundreds of
tokens in a row, so the steady time is the one to predict; a few calls after one warm-up
call measure the transient instead, which varies from build to build."""
SAMPLE_S = 0.5
"""Seconds over which a whole model's samples are taken after its warm-up (at least `repeats`
of them). A shared machine slows down for tenths of a second at a time (its other tenants'
work on the cache and memory), and a few samples back to back fall inside such a moment or
not; the least over half a second takes the moments out, so that two timings minutes apart
agree (`benchmarks/bench_timing_window.py` measures how well, against shorter and longer
spans). It takes out moments, not the machine's drift over minutes. A profile's model-level
terms fitted to timings taken back to back (`kernels.sample_s` 0) predict slower times."""
# the torch dtype a whole model is timed in, by the precision it checks: a CPU's half precision
# is bf16 (torch's CPU matmuls have a fast bf16 path and none for float16)
DTYPES = {"fp32": "float32", "fp16": "bfloat16", "bf16": "bfloat16"}


@functools.cache
def steady_allocator() -> bool:
    """Keep glibc's malloc from handing memory back to the kernel for the rest of this process
    (no `mmap` per allocation, no trim of the heap), so that a timed call reuses pages it has
    already touched; True where it took effect (Linux with glibc), False elsewhere.

    By default glibc serves a large allocation with a fresh `mmap` and unmaps it on free, and
    the threshold between heap and `mmap` moves with the process's history (from 128 KiB up to
    32 MiB; always `mmap` above). A call whose temporaries take that path page-faults them all
    in again on every call: a prefill with large temporaries (Mamba2's over a batch, say) runs
    far slower than its steady time, and which timings fault depends on the shapes timed
    before them, so a kernel's fit would learn the faults. Whole models in their steady state
    fault none, nor does a deploy runtime with an arena or a caching allocator; every timing
    (`seconds_per_call`) measures that state. The process
    keeps the memory it frees (its resident size stays at its peak)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no mallopt: not glibc (musl's returns 0: False below)
        return False
    m_trim_threshold, m_mmap_max = -1, -4  # glibc's <malloc.h>
    return bool(mallopt(m_mmap_max, 0)) and bool(mallopt(m_trim_threshold, 2**31 - 1))


def seconds_per_call(
    fn: Callable[[], Any],
    repeats: int,
    min_time: float,
    reduce: Callable[[list[float]], float] = min,
    warmup: float = 0.0,
    span: float = 0.0,
) -> float:
    """Seconds per call: `reduce` of the samples, each looping until `min_time` (by default
    the least, the undisturbed time, as `timeit` advises; others' work only adds to a sample),
    taken after calls for `warmup` seconds (at least one call): `repeats` of them, and more
    until they span `span` seconds. The process's allocator is made steady first
    (`steady_allocator`)."""
    steady_allocator()
    t0 = time.perf_counter()
    fn()
    while time.perf_counter() - t0 < warmup:
        fn()
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < repeats or time.perf_counter() - start < span:
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= min_time:
                break
        samples.append(elapsed / n)
    return reduce(samples)


def _modules():
    """The wrapper modules a timing runs (built lazily: torch is imported only to measure)."""
    from torch import nn

    class Prefill(nn.Module):
        def __init__(self, mixer):
            super().__init__()
            self.mixer = mixer

        def forward(self, x, state):
            return self.mixer.prefill(x, state, 0)

    class Step(nn.Module):
        def __init__(self, mixer, pos: int):
            super().__init__()
            self.mixer, self.pos = mixer, pos

        def forward(self, x, state):
            return self.mixer.step(x, state, self.pos)

    class Add(nn.Module):
        def forward(self, a, b):
            return a + b

    class Chain(nn.Module):
        """`length` dependent tiny operators: the dispatch overhead per operator."""

        def __init__(self, length: int):
            super().__init__()
            self.length = length

        def forward(self, x):
            for _ in range(self.length):
                x = x + 1.0
            return x

    return Prefill, Step, Add, Chain


def _component(kernel: str, arch: ArchConfig):
    """The module of `arch`'s one layer that `kernel` runs, built alone (not the one-layer
    model around it, whose FFN and LM head would take much of a kernel's timing to build) and
    drawn as the model draws it (`archsearch.models.init_weights`)."""
    from torch import nn

    from archsearch.models import build_channel_mixer, build_sequence_mixer, init_weights
    from archsearch.models.norm import make_norm

    if kernel == "embedding":
        module = nn.Embedding(arch.vocab_size, arch.d_model)
    elif kernel == "norm":
        module = make_norm(arch.norm, arch.d_model, arch.norm_eps)
    elif kernel in ("ffn", "moe"):
        module = build_channel_mixer(arch)
    else:  # a sequence mixer: a one-layer model's only letter
        module = build_sequence_mixer(arch, arch.pattern[0])
    return module.apply(init_weights).eval()


def _targets(shape: Shape, builds: int):
    """(module, inputs) that run the kernel of a shape once, for each of `builds` fresh builds
    of its module. A step's context (the state a prefill of `ctx` tokens leaves) is built once,
    by the first build, and each build steps from its own copy of it (the same weights: every
    build is seeded alike)."""
    import torch

    from archsearch.models.gemm import Linear

    Prefill, Step, Add, _ = _modules()
    v = shape.values()
    context = None
    for _ in range(builds):
        torch.manual_seed(0)
        if shape.kernel == "gemm":
            yield Linear(v["k"], v["n"], bias=False), (torch.randn(v["m"], v["k"]),)
            continue
        if shape.kernel == "residual":
            x = torch.randn(1, v["N"], v["d"])
            yield Add(), (x, torch.randn_like(x))
            continue
        arch = _arch(shape.kernel, v).resolved()
        module = _component(shape.kernel, arch)
        if shape.kernel == "embedding":
            yield module, (torch.randint(0, arch.vocab_size, (1, v["N"])),)
        elif shape.kernel in ("ffn", "moe", "norm"):
            yield module, (torch.randn(1, v["N"], arch.d_model),)
        elif shape.kernel.endswith(".forward"):
            empty = module.init_state(v["B"], None, torch.float32)
            yield Prefill(module), (torch.randn(v["B"], v["T"], arch.d_model), empty)
        else:
            token = torch.randn(v["B"], arch.d_model)
            if context is None:
                empty = module.init_state(v["B"], None, torch.float32)
                with torch.inference_mode():
                    x = torch.randn(v["B"], v["ctx"], arch.d_model)
                    context = module.prefill(x, empty, 0)[1]
            state = {name: t.clone() for name, t in context.items()}
            yield Step(module, v["ctx"]), (token, state)


def time_shape(shape: Shape, runtime: str, repeats: int, min_time: float, builds: int = 1) -> float:
    """Seconds of one run of the kernel at `shape` in `runtime`: the least of repeats, and
    the least over `builds` fresh builds of its module (one build of a kernel can run
    markedly slower than another of the same shape: its memory placement)."""
    from archsearch.runtimes import prepare

    return min(
        seconds_per_call(prepare(runtime, module, inputs), repeats, min_time)
        for module, inputs in _targets(shape, builds)
    )


def dispatch_seconds(runtime: str, repeats: int) -> float:
    """Seconds per dispatched operator: a chain of 200 adds on one element, less a chain of
    100, per extra operator (the fixed cost of calling a module cancels)."""
    import torch

    from archsearch.runtimes import prepare

    *_, Chain = _modules()
    x = torch.zeros(1)
    t = [seconds_per_call(prepare(runtime, Chain(n), (x,)), repeats, 0.01) for n in (100, 200)]
    return max(t[1] - t[0], 0.0) / 100


MEMORY_SIZES = tuple(
    int(2**20 * mb)
    for mb in (0.125, 0.25, 0.5, 1, 2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 32, 48, 64, 96, 128, 256)
)
"""Weights the memory probe streams (bytes): from well inside a private L2 (where only the
call's overhead and the cache's rate show, which pins them) to beyond a shared L3. Without
the points below 1 MiB the fit traded the overhead and rate against the L2 level's stall per
byte: three calibrations on this project's Xeon VM put that stall at 18, 25 and 31 ps/B,
while three probes with the smaller sizes, back to back, put it at 16.8-17.8 ps/B."""


def memory_seconds(nbytes: int, repeats: int, min_time: float) -> float:
    """Seconds of one matrix-vector product streaming an fp32 weight of `nbytes` (1024 columns)
    called again and again, as a kernel is timed: its weight stays in the cache while it fits
    and comes from memory once it does not (the memory hierarchy of the machine, whatever the
    runtime)."""
    import torch

    weight = torch.randn(max(1, int(nbytes) // 4096), 1024)
    x = torch.randn(1024)
    return seconds_per_call(lambda: torch.mv(weight, x), repeats, min_time, warmup=WARMUP_S)


PASS_SIZES = tuple(int(2**20 * mb) for mb in (0.5, 2, 6, 16))
PASS_ROWS = tuple(range(2, 9))
PASS_STREAM = 256 * 2**20
"""The passes probe (`pass_stalls`): weights of 1/2-16 MiB on 2-8 rows (`Linear` runs fewer
than 8 on MKL's `F.linear`, 8 and more on oneDNN: `archsearch.models.gemm`), each weight one
of copies that fill 256 MiB, beyond a shared L3."""


def pass_stalls(nbytes: int, rows: tuple[int, ...], repeats: int, min_time: float) -> list[float]:
    """Seconds of the memory stalls of one `Linear` GEMM over a weight of `nbytes` (1024
    inputs), on one row and on each of `rows`: the time per GEMM of a chain over copies of the
    weight that fill `PASS_STREAM` bytes (each weight from memory) less that of the same
    chain over one copy (in the cache). Their ratio to one row's is the passes it makes
    (`kernels.Passes`)."""
    import torch

    from archsearch.models.gemm import Linear

    n = max(1, int(nbytes) // 4096)
    far = [Linear(1024, n) for _ in range(max(4, PASS_STREAM // (4096 * n)))]
    near = [far[0]] * len(far)
    out = []
    for m in (1, *rows):
        x = torch.randn(m, 1, 1024)

        def chain(layers, x=x):
            def run():
                with torch.no_grad():
                    for layer in layers:
                        layer(x)

            return run

        far_s, near_s = (
            seconds_per_call(chain(layers), repeats, min_time, warmup=min_time)
            for layers in (far, near)
        )
        out.append((far_s - near_s) / len(far))
    return out


def time_model(
    arch: ArchConfig,
    runtime: str,
    prompt: int,
    context: int,
    repeats: int,
    min_time: float,
    batch: int = 1,
    instances: int = 3,
    precision: str = "fp32",
    span: float | None = None,
) -> tuple[float, float]:
    """(seconds to first token of a `prompt`-token prefill, seconds of one decode step after
    `context` tokens) of a whole model of `arch` on `batch` sequences, in `runtime`, its
    weights and activations at `precision` (their torch dtype: `DTYPES`): the least over
    `instances` builds (see the module docstring; `span`: `time_model_once`)."""
    runs = [
        time_model_once(arch, runtime, prompt, context, repeats, min_time, batch, precision, span)
        for _ in range(instances)
    ]
    return min(r[0] for r in runs), min(r[1] for r in runs)


def time_model_once(
    arch: ArchConfig,
    runtime: str,
    prompt: int,
    context: int,
    repeats: int,
    min_time: float,
    batch: int,
    precision: str = "fp32",
    span: float | None = None,
) -> tuple[float, float]:
    """(seconds to first token, seconds of one decode step) of one fresh build of `arch` (see
    `time_model`): each the least of samples over `span` seconds (`SAMPLE_S` by default), at
    least `repeats` of them, after `WARMUP_S` of calls."""
    import torch
    from torch import nn

    from archsearch.models import build_model
    from archsearch.runtimes import prepare

    class Prefill(nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, idx):
            return self.model.prefill(idx)

    class Step(nn.Module):
        def __init__(self, model, state):
            super().__init__()
            self.model, self.state = model, state

        def forward(self, token):
            return self.model.step(token, self.state)

    torch.manual_seed(0)
    model = build_model(arch).eval().to(getattr(torch, DTYPES[precision]))
    idx = torch.randint(0, arch.vocab_size, (batch, prompt))
    prefill = prepare(runtime, Prefill(model), (idx,))
    span = SAMPLE_S if span is None else span
    ttft = seconds_per_call(prefill, repeats, min_time, warmup=WARMUP_S, span=span)
    with torch.inference_mode():
        _, state = model.prefill(torch.randint(0, arch.vocab_size, (batch, context)))
    token = torch.randint(0, arch.vocab_size, (batch,))
    step = prepare(runtime, Step(model, state), (token,))
    decode = seconds_per_call(step, repeats, min_time, warmup=WARMUP_S, span=span)
    return ttft, decode
