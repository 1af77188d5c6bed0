"""Timing on this machine: kernels at shapes drawn from grids, whole models, the two probes.

Every kernel is timed as the models run it: the real module of `archsearch.models` (a mixer,
channel mixer, norm or embedding built alone, drawn as the model draws it; `models.gemm.Linear`
for a GEMM), through `archsearch.runtimes.prepare(runtime, module, inputs)`, so the same timings
can be taken in a deploy runtime. A shape is a point of a kernel's grid (`GRIDS`: widths 64-768,
1-32 heads, prompts 16-512, contexts 16-2048, batches 1-8, GEMMs of up to 8e10 FLOPs).

A whole model (`time_model`) is timed as the least over fresh builds of the least of its
samples over the plan's span, after its warm-up: the warm-up removes the transient of a step
right after its prefill, the span the machine's busy moments, the least of builds what is left
of a build's memory placement. A kernel's samples loop for the plan's minimum time and call it
again and again, which takes it to the same steady state. The probes time what a kernel timed
alone does not meet: the memory probe a matrix-vector product over weights beyond the cache
(`memory_seconds`), the passes probe linear layers of a few rows from memory and from the cache
(`pass_seconds`). Every timing holds the process's allocator steady first (`steady_allocator`).
"""

from __future__ import annotations

import ctypes
import functools
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from archsearch import arch as A
from archsearch.cost.ops import Columns, Phase
from archsearch.latency.calibrate.models import WholeModel
from archsearch.latency.calibrate.plan import TimingPlan
from archsearch.latency.kernels import KERNELS, features, gemm_features

if TYPE_CHECKING:  # torch is imported only to measure
    import torch

    from archsearch.models.lm import LanguageModel, State

__all__ = ["BATCHES", "DTYPES", "GRIDS", "Shape", "affordable", "memory_seconds", "neighbour"]
__all__ += ["pass_seconds"]
__all__ += ["random_shape", "seconds_per_call", "shape_rows", "state_after", "steady_allocator"]
__all__ += ["time_model"]
__all__ += ["time_shape"]

WIDTHS = (64, 128, 192, 256, 384, 512, 768)
BATCHES = (1, 2, 4, 8)
TOKENS = (1, 2, 4, 8, 16, 64, 128, 256, 512, 1024, 2048)
_MIXER = {"d": WIDTHS, "H": (1, 2, 4, 8, 16, 32), "B": BATCHES}  # heads: at most d / 32
_FORWARD = {**_MIXER, "T": (16, 32, 64, 128, 256, 512)}
_STEP = {**_MIXER, "ctx": (16, 64, 128, 256, 512, 1024, 2048)}
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
    "ffn": {"N": TOKENS, "d": WIDTHS, "kind": A.FFN_KINDS, "mult": (2, 3, 4)},
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
    "mcsd.forward": {"d": WIDTHS, "C": (2, 4, 8), "B": BATCHES, "T": _FORWARD["T"]},
    "mcsd.step": {"d": WIDTHS, "C": (2, 4, 8), "B": BATCHES, "ctx": (16, 64)},
}
for _fam in A.LINEAR_FAMILIES:
    GRIDS[f"{_fam}.forward"] = {**_FORWARD, **_LINEAR}
    GRIDS[f"{_fam}.step"] = {**_STEP, **_LINEAR, "ctx": (16, 64)}
assert set(GRIDS) == set(KERNELS)
MAX_TOKENS = 2048  # B x T of a timed prefill
MAX_CONTEXT_TOKENS = 8192  # B x ctx of a timed step (its context is built by a prefill)
MAX_GEMM_FLOPS = 8e10  # enough for the LM head over a batched prefill's every token
# the torch dtype a whole model is timed in, by the precision it checks: a CPU's half precision
# is bf16 (torch's CPU matmuls have a fast bf16 path and none for float16)
DTYPES = {"fp32": "float32", "fp16": "bfloat16", "bf16": "bfloat16"}


@dataclass(frozen=True)
class Shape:
    """A point of a kernel's grid: knob -> index into `GRIDS[kernel][knob]`."""

    kernel: str
    index: tuple[tuple[str, int], ...]

    def values(self) -> dict[str, Any]:
        grid = GRIDS[self.kernel]
        return {knob: grid[knob][i] for knob, i in self.index}


def affordable(shape: Shape) -> bool:
    """A prefill of at most MAX_TOKENS tokens, a step after at most MAX_CONTEXT_TOKENS, a GEMM
    of at most MAX_GEMM_FLOPS: cheap enough to time."""
    v = shape.values()
    if shape.kernel == "gemm":
        return 2.0 * v["m"] * v["k"] * v["n"] <= MAX_GEMM_FLOPS
    if "ctx" in v:
        return v["B"] * v["ctx"] <= MAX_CONTEXT_TOKENS
    return v.get("B", 1) * v.get("T", 1) <= MAX_TOKENS


def random_shape(kernel: str, rng: random.Random) -> Shape:
    return Shape(kernel, tuple((k, rng.randrange(len(v))) for k, v in GRIDS[kernel].items()))


def neighbour(shape: Shape, rng: random.Random) -> Shape:
    """The shape one grid step away along one or two knobs."""
    grid = GRIDS[shape.kernel]
    index = dict(shape.index)
    for knob in rng.sample(list(grid), min(len(grid), rng.choice((1, 2)))):
        index[knob] = min(max(index[knob] + rng.choice((-1, 1)), 0), len(grid[knob]) - 1)
    return Shape(shape.kernel, tuple(index.items()))


def arch_of(kernel: str, v: dict[str, Any]) -> A.ArchConfig:
    """The one-layer architecture whose module (or norm, embedding) a shape times."""
    d = v["d"]
    mixer = kernel.partition(".")[0]
    base = dict(vocab_size=256, d_model=d, n_layers=1, max_seq_len=4096, tie_embeddings=False)
    heads = min(v.get("H", 1), d // 32)
    if mixer == "gqa":
        kv = heads if v["G"] == 0 else min(v["G"], heads)
        return A.ArchConfig(**base, attention=A.AttentionConfig(n_heads=heads, n_kv_heads=kv))
    if mixer == "mla":
        heads = max(heads, d // 128)  # heads at most 128 wide, as in MLA models
        rope = 16 if d // heads <= 64 else 32
        attn = A.AttentionConfig(
            "mla", heads, kv_rank=d // v["rank"], rope_dim=rope, q_rank=d // 2 if v["q"] else None
        )
        return A.ArchConfig(**base, attention=attn)
    if mixer == "mcsd":
        return A.ArchConfig(**base, layers=A.LayersConfig(mixer="mcsd"), mcsd=A.MCSDConfig(v["C"]))
    if mixer in A.LINEAR_FAMILIES:
        lin = A.LinearConfig(mixer, heads, output_gate=bool(v["gate"]), conv_size=v["conv"])
        return A.ArchConfig(**base, layers=A.LayersConfig(mixer="linear"), linear=lin)
    attn = A.AttentionConfig(n_heads=1)
    if kernel == "ffn":
        return A.ArchConfig(**base, attention=attn, ffn=A.FFNConfig(v["kind"], d_ffn=v["mult"] * d))
    if kernel == "moe":
        moe = A.MoEConfig(v["E"], min(v["topk"], v["E"]), v["S"], d_expert=int(v["mult"] * d))
        return A.ArchConfig(**base, attention=attn, moe=moe)
    return A.ArchConfig(**base, attention=attn)  # norm, residual, embedding


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
    c = Columns.from_archs([arch_of(shape.kernel, v).resolved()])
    p = _phase(shape.kernel, v)
    return features(shape.kernel, c, p), c, p


@functools.cache
def steady_allocator() -> bool:
    """Keep glibc's malloc from handing memory back to the kernel for the rest of this process
    (no `mmap` per allocation, no trim of the heap), so that a timed call reuses pages it has
    touched; True where it took effect (Linux with glibc). By default a large temporary is a
    fresh `mmap`, page-faulted in again on every call or not, by what ran before it in the
    process: a kernel's fit would learn the faults. A model in its steady state faults none."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
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
    """Seconds per call: `reduce` (by default the least: others' work only adds to a sample) of
    samples that each loop until `min_time`, taken after calls for `warmup` seconds (at least
    one): `repeats` of them, and more until they span `span` seconds."""
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


def _call(module, method: str, *fixed):
    """An nn.Module whose forward(*args) is `module.<method>(*args, *fixed)` (what a runtime
    exports and times; torch is imported only to measure)."""
    from torch import nn

    class Call(nn.Module):
        def __init__(self):
            super().__init__()
            self.module = module

        def forward(self, *args):
            return getattr(self.module, method)(*args, *fixed)

    return Call()


def target(shape: Shape):
    """(module, inputs) that run the kernel of a shape once: its module built alone and drawn
    as the model draws it (`archsearch.models.init_weights`); a step's state is what a
    prefill of `ctx` tokens leaves."""
    import torch
    from torch import nn

    from archsearch.models import build_channel_mixer, build_sequence_mixer, init_weights
    from archsearch.models.gemm import Linear
    from archsearch.models.norm import make_norm

    v, kernel = shape.values(), shape.kernel
    torch.manual_seed(0)
    if kernel == "gemm":
        return Linear(v["k"], v["n"], bias=False), (torch.randn(v["m"], v["k"]),)
    x = torch.randn(1, v.get("N", 1), v["d"])
    if kernel == "residual":
        return _call(torch.Tensor, "add"), (x, torch.randn_like(x))
    arch = arch_of(kernel, v).resolved()
    if kernel == "embedding":
        emb = nn.Embedding(arch.vocab_size, arch.d_model).apply(init_weights)
        return emb, (torch.randint(0, arch.vocab_size, (1, v["N"])),)
    if kernel in ("ffn", "moe", "norm"):
        build = (
            build_channel_mixer
            if kernel != "norm"
            else lambda a: make_norm(a.norm, v["d"], a.norm_eps)
        )
        return build(arch).apply(init_weights).eval(), (x,)
    mixer = build_sequence_mixer(arch, arch.pattern[0]).apply(init_weights).eval()
    state = mixer.init_state(v["B"], None, torch.float32)
    if kernel.endswith(".forward"):
        return _call(mixer, "prefill", 0), (torch.randn(v["B"], v["T"], v["d"]), state)
    with torch.inference_mode():
        state = mixer.prefill(torch.randn(v["B"], v["ctx"], v["d"]), state, 0)[1]
    state = {name: t.clone() for name, t in state.items()}  # ordinary tensors, not inference
    return _call(mixer, "step", v["ctx"]), (torch.randn(v["B"], v["d"]), state)


def time_shape(shape: Shape, plan: TimingPlan) -> float:
    """Seconds of one run of the kernel at `shape` in the plan's runtime: the least of its
    samples."""
    from archsearch.runtimes import prepare

    call = prepare(plan.runtime, *target(shape))
    return seconds_per_call(call, plan.repeats, plan.min_time)


def memory_seconds(nbytes: int, plan: TimingPlan) -> float:
    """Seconds of one matrix-vector product streaming an fp32 weight of `nbytes` (1024 columns)
    called again and again, as a kernel is timed: its weight stays in the cache while it fits
    and comes from memory beyond (the machine's memory hierarchy, whatever the runtime)."""
    import torch

    weight = torch.randn(max(1, int(nbytes) // 4096), 1024)
    x = torch.randn(1024)
    mv = lambda: torch.mv(weight, x)  # noqa: E731
    return seconds_per_call(mv, plan.repeats, plan.min_time, warmup=max(plan.warmup, 0.05))


def pass_seconds(plan: TimingPlan) -> dict[str, list]:
    """The passes probe (`fit.fit_passes`), in eager torch: a linear layer (1024 inputs) of
    each of the plan's weight sizes at each of its row counts, timed from memory (each call on
    the next of copies as large in all as the memory probe's largest weight, at least two) and
    from the cache (one copy again and again): {"bytes", "rows", "memory_s", "cache_s"}, the
    seconds [rows][sizes]. (A deploy runtime would export each copy anew, a second apiece.)"""
    import torch

    from archsearch.models.gemm import Linear

    out: dict[str, list] = {"bytes": list(plan.pass_sizes), "rows": list(plan.pass_rows)}
    memory, cache = np.zeros((2, len(plan.pass_rows), len(plan.pass_sizes)))
    timed = dict(repeats=plan.repeats, min_time=plan.min_time)
    for j, nbytes in enumerate(plan.pass_sizes):
        torch.manual_seed(0)
        copies = max(2, plan.memory_sizes[-1] // nbytes)
        layers = [Linear(1024, max(1, nbytes // 4096), bias=False) for _ in range(copies)]
        for i, rows in enumerate(plan.pass_rows):
            x = torch.randn(rows, 1024)
            with torch.inference_mode():
                memory[i, j] = seconds_per_call(_each(layers, x), **timed) / copies
                cache[i, j] = seconds_per_call(_each(layers[:1], x), **timed)
    return out | {"memory_s": memory.tolist(), "cache_s": cache.tolist()}


def _each(layers: list, x) -> Callable[[], list]:
    return lambda: [layer(x) for layer in layers]


def time_model(model: WholeModel, plan: TimingPlan, builds: int = 1) -> tuple[float, float]:
    """(seconds to first token, seconds of one decode step) of a whole model in the plan's
    runtime at its precision (the torch dtype of `DTYPES`): the least over `builds` fresh
    builds of the least of samples over `plan.span` after `plan.warmup` of calls. Raises
    `runtimes.ExportError` where the runtime cannot run it, RuntimeError where torch has no
    kernel for one of its ops in that dtype.

    In half precision the step's state is the same prefill's in fp32 (`state_after`)."""
    import copy

    import torch

    from archsearch.models import build_model
    from archsearch.runtimes import prepare

    arch, batch = model.arch, model.batch
    dtype = getattr(torch, DTYPES[plan.precision])
    timed = dict(repeats=plan.repeats, min_time=0.0, warmup=plan.warmup, span=plan.span)
    runs = []
    for _ in range(builds):
        torch.manual_seed(0)
        built = build_model(arch).eval()
        fp32 = copy.deepcopy(built) if dtype != torch.float32 else None
        built = built.to(dtype)
        idx = torch.randint(0, arch.vocab_size, (batch, model.prompt))
        ttft = seconds_per_call(prepare(plan.runtime, _call(built, "prefill"), (idx,)), **timed)
        context = torch.randint(0, arch.vocab_size, (batch, model.context))
        state = state_after(built, context, fp32)
        del fp32
        token = torch.randint(0, arch.vocab_size, (batch,))
        step = prepare(plan.runtime, _call(built, "step", state), (token,))
        runs.append((ttft, seconds_per_call(step, **timed)))
    return min(r[0] for r in runs), min(r[1] for r in runs)


def state_after(
    built: LanguageModel, context: torch.Tensor, fp32: LanguageModel | None = None
) -> State:
    """The decode state of `built` after the tokens `context` [B, T]: its own prefill's, or,
    given `fp32` (the same model in fp32), that one's cast to the dtypes of `built`'s own. The
    step timed reads its state's values, not how long they took, and a CPU without native bf16
    takes seconds over a context of thousands of tokens."""
    import torch

    with torch.inference_mode():
        if fp32 is None:
            return built.prefill(context)[1]
        state = fp32.prefill(context)[1]
        like = built.prefill(context[:, :1])[1]  # the dtypes, from one token
        state.layers = [
            {k: t.to(mine[k].dtype) for k, t in layer.items()}
            for layer, mine in zip(state.layers, like.layers)
        ]
    return state
