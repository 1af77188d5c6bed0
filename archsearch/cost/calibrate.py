"""`archsearch calibrate`: measure this machine and write the `local` device profile.

Three measurements, each a median of repeats at a fixed number of torch threads:

1. matmul throughput of the models' own linear layers (`archsearch.models.gemm`) over shapes
   (rows m from 1 to 1024 against weights of 128^2 to 512x8192), in fp32 and bf16: kept as a
   table of rates by weight size and row count (`matmul_table`); the best rate is the peak of
   its compute class, and `half_rows` is fitted to eff(m) = m / (m + half_rows);
2. memory bandwidth: a streaming read (sum) and copy of 256 MiB give the peak; a
   matrix-vector product over a weight twice the last-level cache, which streams its whole
   weight from memory once per call as a large model's decode step does, gives the bandwidth
   efficiency (measured, not fitted: the reference models below fit in the cache);
3. whole models: the time to first token and the decode step of 21 small reference models
   (attention, MLA, GLA, Mamba2, DeltaNet, MCSD and MoE, each at three sizes) fit, by least
   squares on log times, the fraction of the measured matmul rates that models reach
   (compute), the throughput of their other kernels over many tokens
   (vector), and the fixed overhead per operator they dispatch
   (`archsearch.cost.counts.LAUNCHES`). A last-level-cache term covers models whose weights
   fit in the cache.

These give the roofline profile (used for other precisions and as the analytic part of the
kernel predictor). Then 4. the kernel-level predictor (`archsearch.cost.kernel_fit`): every
kernel the cost model emits is timed at adaptively sampled shapes and fitted, the model-level
overhead is fitted to whole models, and held-out whole models give the profile's `validation`
figures (with `provenance: measured`); the profile's `kernels` section then prices fp32
latency (`archsearch.cost.kernel_latency`). 5. The roofline's half precision (`fit_half`):
its fp16 compute, vector and per-operator factors fitted to the reference models timed in
bf16, and checked on the held-out models timed in bf16 and predicted at fp16
(`kernel_fit.precision_check`): a second `validation` entry per quantity, for fp16/bf16
(`precisions`); q8 and q4, which no runtime here executes, have none (their latencies show
+-?).

How much is timed is the calibration's `budget` (`kernel_fit.BUDGETS`: `full`, or `fast`
in half the time).

The profile is written with a source line for every figure (the CPU model, the date, the
thread count), and `prefill_logits: all` because archsearch's own prefill computes the logits
of every prompt position.
"""

from __future__ import annotations

import datetime
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from archsearch import yamlio
from archsearch.cost.devices import cpu_name
from archsearch.cost.kernel_timing import DTYPES, WARMUP_S, seconds_per_call

MATMUL_ROWS = (1, 4, 16, 64, 256, 1024)
HALF = "fp16"  # the half precision the roofline prices, checked on held-out models
MATMUL_WEIGHTS = (
    (128, 128),
    (256, 256),
    (512, 512),
    (1024, 1024),
    (2048, 2048),
    (1024, 4096),
    (512, 8192),
)


def _median_time(fn: Callable[[], Any], repeats: int, min_time: float = 0.05) -> float:
    """Median seconds per call; each sample loops until `min_time` has passed."""
    return seconds_per_call(fn, repeats, min_time, reduce=statistics.median)


def _least_time(fn: Callable[[], Any], repeats: int) -> float:
    """A whole model's steady seconds per call: the least of `repeats` samples (each looped for
    5 ms) after `WARMUP_S` of calls (see `kernel_timing`)."""
    return seconds_per_call(fn, repeats, 0.005, warmup=WARMUP_S)


def measure_matmuls(
    dtype_name: str, repeats: int, step: Callable[[str], None] | None = None
) -> list[dict[str, float]]:
    """Throughput of the models' own linear layers (`archsearch.models.gemm.linear`: oneDNN
    from 8 rows up, PyTorch's default below), weight [n, k] against m rows; `step(text)` after
    each weight."""
    import torch

    from archsearch.models.gemm import linear

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    out = []
    for k, n in MATMUL_WEIGHTS:
        w = torch.randn(n, k, dtype=dtype)
        for m in MATMUL_ROWS:
            x = torch.randn(m, k, dtype=dtype)
            t = _median_time(lambda x=x, w=w: linear(x, w), repeats)
            out.append({"m": m, "k": k, "n": n, "seconds": t, "flops_per_s": 2 * m * k * n / t})
        if step is not None:
            step(f"{dtype_name} matmuls, weight {n}x{k}")
    return out


# (query heads, KV heads, cached tokens) of the one-query attention `measure_attention_step` times
ATTENTION_SHAPES = ((4, 4, 512), (8, 1, 2048), (14, 14, 1024), (10, 10, 4096))


def measure_attention_step(precision: str, repeats: int) -> dict[str, Any]:
    """The rate of softmax attention with one query (a decode step's
    `scaled_dot_product_attention` over its KV cache, heads of 64) at `precision`'s torch dtype,
    as a fraction of the peak it is priced against (`attention_step`: the median over
    `ATTENTION_SHAPES`). Why measured: torch's CPU kernel runs one-query attention in bf16 at a
    rate far below what the roofline's law for a one-row product gives, nearly the same at any
    batch, context and head count, so the roofline alone prices the attention models' decode
    steps after long contexts at a fraction of their time."""
    import torch
    import torch.nn.functional as F

    dtype = getattr(torch, DTYPES[precision])
    rates = []
    for heads, kv_heads, tokens in ATTENTION_SHAPES:
        q = torch.randn(1, heads, 1, 64, dtype=dtype)
        k, v = (torch.randn(1, kv_heads, tokens, 64, dtype=dtype) for _ in range(2))
        gqa = heads != kv_heads
        t = seconds_per_call(
            lambda q=q, k=k, v=v, g=gqa: F.scaled_dot_product_attention(q, k, v, enable_gqa=g),
            repeats,
            0.02,
            warmup=0.05,
        )
        rates.append(4.0 * heads * 64 * tokens / t)
    return {"flops_per_s": rates, "shapes": [list(s) for s in ATTENTION_SHAPES]}


def cache_capacity() -> float:
    """Half the last-level cache (the rest holds activations and other tenants), in bytes."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip()
        mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1], 1)
        try:
            sizes.append(int(text.rstrip("KMG")) * mult)
        except ValueError:
            continue
    return max(sizes, default=0) / 2


def measure_cache_bandwidth(capacity: float, repeats: int) -> float:
    """Matrix-vector products over layers of weights that together fit the cache, read again
    and again as a small model's decode steps do: bytes/s."""
    import torch

    from archsearch.models.gemm import linear

    layers = [torch.randn(512, 512) for _ in range(max(1, int(capacity / 2 // (512 * 512 * 4))))]
    v = torch.randn(1, 512)

    def sweep():
        for w in layers:
            linear(v, w)

    t = _median_time(sweep, repeats)
    return sum(w.numel() * 4 for w in layers) / t


def gemv_rows(llc: float) -> int:
    """Rows of the 4096-wide fp32 weight the bandwidth GEMV streams: 256 MiB, or twice the
    last-level cache where that is larger (capped at 1 GiB), so that the weight comes from
    memory, as a large model's does (a weight that fits a large shared cache streams at the
    cache's speed, not memory's)."""
    nbytes = min(max(256 * 2**20, 2 * 2 * llc), 2**30)  # llc is half the cache (cache_capacity)
    return int(nbytes // (4096 * 4))


def measure_bandwidth(repeats: int, llc: float = 0.0) -> dict[str, float]:
    """Memory bandwidth, bytes/s: a streaming read (sum) and copy of 256 MiB, and a
    matrix-vector product over a weight larger than the cache (`gemv_rows`)."""
    import torch

    from archsearch.models.gemm import linear

    a = torch.ones(64 * 2**20)  # 256 MiB of fp32
    b = torch.empty_like(a)
    nbytes = a.numel() * 4
    t_sum = _median_time(lambda: a.sum(), repeats)
    t_copy = _median_time(lambda: b.copy_(a), repeats)
    w = torch.randn(gemv_rows(llc), 4096)
    v = torch.randn(1, 4096)
    t_gemv = _median_time(lambda: linear(v, w), repeats)
    return {"read": nbytes / t_sum, "copy": 2 * nbytes / t_copy, "gemv": w.numel() * 4 / t_gemv}


REFERENCE_PROMPT = 128


def reference_models(quick: bool = False) -> list:
    """Small models of every kind of mixer at three sizes, deep-narrow to wide-shallow (so that
    the weights, the arithmetic and the operator count vary independently), timed by
    `fit_to_models`. Their sizes, vocabulary
    and lengths differ from those of benchmarks/bench_latency_accuracy.py, which checks the fit
    out of sample. `quick` (a smoke run): every third of the 21, seven models of seven kinds
    over the three sizes (their timings are most of a quick calibration's time)."""
    from archsearch.arch import (
        ArchConfig,
        AttentionConfig,
        LayersConfig,
        LinearConfig,
        MCSDConfig,
        MoEConfig,
    )

    out = []
    for d, layers in ((128, 8), (320, 3), (640, 2)):
        heads = d // 64
        base = dict(vocab_size=4096, d_model=d, n_layers=layers, max_seq_len=1024)
        out += [
            ArchConfig(**base, attention=AttentionConfig(n_heads=heads, n_kv_heads=1)),
            ArchConfig(
                **base, attention=AttentionConfig(kind="mla", n_heads=heads, kv_rank=d // 4)
            ),
            ArchConfig(**base, layers=LayersConfig(mixer="linear"), linear=LinearConfig("gla")),
            ArchConfig(**base, layers=LayersConfig(mixer="linear"), linear=LinearConfig("mamba2")),
            ArchConfig(
                **base, layers=LayersConfig(mixer="linear"), linear=LinearConfig("deltanet")
            ),
            ArchConfig(**base, layers=LayersConfig(mixer="mcsd"), mcsd=MCSDConfig(n_channels=4)),
            ArchConfig(
                **base,
                attention=AttentionConfig(n_heads=heads, n_kv_heads=1),
                moe=MoEConfig(n_experts=4, top_k=2, d_expert=d),
            ),
        ]
    return out[::3] if quick else out


def fit_to_models(
    repeats: int,
    profile: dict[str, Any],
    step: Callable[[str], None] | None = None,
    precision: str = "fp32",
    quick: bool = False,
) -> dict[str, Any]:
    """Fit the compute efficiency, the non-matmul throughput (`vector`) and the overhead per
    operator at `precision` to real models: the time to first token of a 128-token prompt and
    a decode step at context 128 of each reference model (the least of repeats after
    `WARMUP_S` of calls, as whole models are timed everywhere else; its weights and
    activations in the precision's torch dtype, `kernel_timing.DTYPES`), by least squares on
    log times (the least after a warm-up rather than a median of cold calls, which moves the
    fitted compute from one fit to the next). The measured peaks stay the ceiling; the fit says
    how much of them whole models reach. The bandwidth efficiency stays the one measured
    (`measure_bandwidth`'s GEMV): the reference models' weights fit in the cache, so their
    times cannot tell it (fitted, it can run to its lower bound and price a large model's
    decode step absurdly slow). A model
    torch cannot run in that dtype (no kernel for one of its ops) is left out (`skipped`)."""
    import dataclasses

    import numpy as np
    import torch
    from scipy.optimize import least_squares

    from archsearch.cost import model as cost_model
    from archsearch.cost.devices import parse_device
    from archsearch.cost.ops import Columns
    from archsearch.models import build_model

    base_device = parse_device(profile, source="calibration", default_name="local")
    dtype = getattr(torch, DTYPES[precision])
    archs, measured, skipped = [], [], []
    for arch in reference_models(quick):
        torch.manual_seed(0)
        model = build_model(arch).eval().to(dtype)
        prompt = torch.randint(0, arch.vocab_size, (1, REFERENCE_PROMPT))
        try:
            with torch.inference_mode():
                ttft = _least_time(lambda m=model, x=prompt: m.prefill(x), repeats)
                _, state = model.prefill(prompt)
                token = prompt[:, -1]
                decode = _least_time(lambda m=model, s=state, x=token: m.step(x, s), repeats)
        except RuntimeError as e:  # torch has no kernel for one of its ops in that dtype
            skipped.append(f"{arch.summary()} ({str(e).splitlines()[0][:80]})")
        else:
            archs.append(arch)
            measured.append((ttft, decode))
        if step is not None:
            step(f"reference model {arch.summary()} ({precision})")
    tables = [Columns.from_archs([a]) for a in archs]

    def device_with(x):
        compute, overhead, vector = (float(v) for v in x)
        eff = {
            k: dataclasses.replace(
                e,
                compute=compute,
                op_overhead_s=overhead * 1e-6,
                vector=vector,
            )
            for k, e in base_device.efficiency.items()
        }
        return dataclasses.replace(base_device, efficiency=eff)

    def residuals(x):
        dev = device_with(x)
        out = []
        for c, (ttft, decode) in zip(tables, measured):
            out.append(np.log(cost_model.ttft_s(c, dev, REFERENCE_PROMPT, precision)[0] / ttft))
            out.append(np.log(cost_model.decode_s(c, dev, REFERENCE_PROMPT, precision)[0] / decode))
        return out

    eff = base_device.eff(precision)
    start = [eff.compute, max(eff.op_overhead_s * 1e6, 1.0), 1.0]
    fit = least_squares(residuals, start, bounds=([0.02, 0.0, 0.02], [1.0, 100.0, 1.0]))
    errors = np.abs(np.exp(np.array(residuals(fit.x))) - 1)
    return {
        "compute": float(fit.x[0]),
        "op_overhead_s": float(fit.x[1]) * 1e-6,
        "vector": float(fit.x[2]),
        "measured": measured,
        "fit_mape_percent": float(100 * errors.mean()),
        "models": len(archs),
        "skipped": skipped,
    }


def fit_half(
    profile: dict[str, Any],
    repeats: int,
    *,
    quick: bool = False,
    step: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The roofline at the half precision (`HALF`), fitted and checked in torch: its
    efficiencies' compute, vector and op_overhead_s fitted to the reference models timed in
    bf16 (`fit_to_models`; `profile` is updated), its one-query attention rate measured
    (`measure_attention_step`), then the held-out models timed in bf16 and predicted at fp16
    (`kernel_fit.precision_check`). Returns the profile's `validation` entries
    for fp16/bf16 per quantity and the raw figures. Why fitted apart: with the fp32 fit's
    factors the fp16 roofline under-predicts the bf16 times of every held-out model; fitted to
    bf16 times its errors run both ways and stay wide (bf16 kernels in eager torch on a CPU
    follow no one roofline), which is why these precisions carry their own, wider check."""
    from archsearch.cost.devices import parse_device
    from archsearch.cost.kernel_fit import precision_check

    fitted = fit_to_models(repeats, profile, step, HALF, quick)
    if step is not None:
        step(f"fit to the reference models at {HALF}")
    attention = measure_attention_step(HALF, repeats)
    if step is not None:
        step(f"one-query attention at {HALF}")
    eff = profile["efficiency"][HALF]
    eff["compute"] = round(fitted["compute"], 4)
    eff["op_overhead_s"] = float(f"{fitted['op_overhead_s']:.3g}")
    eff["vector"] = round(fitted["vector"], 4)
    peak = profile["peak_flops"][HALF]
    eff["attention_step"] = float(f"{statistics.median(attention['flops_per_s']) / peak:.4g}")
    not_run = f"; {len(fitted['skipped'])} not run in bf16" if fitted["skipped"] else ""
    eff["source"] = (
        "archsearch calibrate: half_rows fitted to bf16 matmuls of the models' linear layers; "
        "bandwidth a GEMV's share of the memory bandwidth; compute, vector and op_overhead_s "
        f"fitted to the prefill and decode times of {fitted['models']} reference models in "
        f"bf16 (fit error {fitted['fit_mape_percent']:.1f}%{not_run}); attention_step the "
        f"median rate of bf16 one-query attention over {len(ATTENTION_SHAPES)} shapes"
    )
    device = parse_device(profile, source="calibration", default_name=profile.get("name", "local"))
    validation, raw = precision_check(device, HALF, repeats=repeats, quick=quick, step=step)
    return {
        "validation": validation,
        "raw": {"fit": fitted, "attention_step": attention, "check": raw},
    }


def fit_half_rows(points: list[dict[str, float]], peak: float) -> float:
    """Least squares (in log space) of eff(m) = m / (m + h) over the measured points."""
    import numpy as np

    best, best_err = 1.0, float("inf")
    for h in np.geomspace(0.01, 4096, 400):
        err = sum(
            (np.log(p["flops_per_s"] / peak) - np.log(p["m"] / (p["m"] + h))) ** 2 for p in points
        )
        if err < best_err:
            best, best_err = float(h), err
    return best


def calibrate(
    threads: int,
    repeats: int = 5,
    quick: bool = False,
    progress: Callable[[int, int, str], None] | None = None,
    runtime: str = "torch",
    budget: str = "full",
) -> dict[str, Any]:
    """Measure this machine; returns the `local` profile as a mapping (and the raw data);
    `progress(done, total, step)` after each measurement. The kernel predictor is timed in
    `runtime` (`archsearch.runtimes`) within `budget` (`kernel_fit.BUDGETS`: `full` or `fast`)."""
    import torch

    from archsearch.cost.devices import parse_device
    from archsearch.cost.kernel_fit import BUDGETS, fit_kernels, kernel_steps

    torch.set_num_threads(threads)
    if quick:
        global MATMUL_ROWS, MATMUL_WEIGHTS
        MATMUL_ROWS, MATMUL_WEIGHTS = (1, 16, 256), ((256, 256), (1024, 1024))
    total = (
        2 * len(MATMUL_WEIGHTS)
        + 2
        + 2 * len(reference_models(quick))
        + 3
        + kernel_steps(quick, BUDGETS[budget].samples, checks=1)
    )
    done = 0

    def step(text: str) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total, f"steps ({text})")

    fp32 = measure_matmuls("fp32", repeats, step)
    bf16 = measure_matmuls("bf16", repeats, step)
    llc = cache_capacity()
    bw = measure_bandwidth(repeats, llc)
    step("memory bandwidth")
    peak32 = max(p["flops_per_s"] for p in fp32)
    peak16 = max(p["flops_per_s"] for p in bf16)
    bandwidth = max(bw["read"], bw["copy"])
    cache_bw = measure_cache_bandwidth(llc, repeats) if llc else 0.0
    step("cache bandwidth")
    gemv_eff = min(1.0, bw["gemv"] / bandwidth)
    when = datetime.date.today().isoformat()
    where = (
        f"{cpu_name()}, {os.cpu_count()} CPUs, torch {torch.__version__}, {threads} threads, {when}"
    )
    eff32 = {
        "compute": 1.0,
        "half_rows": round(fit_half_rows(fp32, peak32), 3),
        "bandwidth": round(gemv_eff, 4),
        "op_overhead_s": 0.0,  # fitted below, once the rest of the profile is known
        "source": f"archsearch calibrate: peaks are measured maxima; bandwidth efficiency is a "
        f"weight-streaming matrix-vector product's share of it; half_rows fitted to "
        f"{len(fp32)} fp32 matmuls; op_overhead_s fitted to decode steps of five reference models",
    }
    eff16 = {
        **eff32,
        "half_rows": round(fit_half_rows(bf16, peak16), 3),
        "source": eff32["source"].replace("fp32 matmuls", "bf16 matmuls"),
    }
    profile = {
        "name": "local",
        "description": f"this machine, measured: {cpu_name()}",
        "kind": "cpu",
        "prefill_logits": "all",
        "peak_flops": {
            "fp32": float(f"{peak32:.4g}"),
            "fp16": float(f"{peak16:.4g}"),
            "int8": float(f"{peak32:.4g}"),
        },
        "memory_bandwidth": float(f"{bandwidth:.4g}"),
        "memory_capacity": float(_memory_bytes()),
        "efficiency": {"fp32": eff32, "fp16": eff16},
        "matmul_table": {
            "weights": sorted({k * n for k, n in MATMUL_WEIGHTS}),
            "rows": list(MATMUL_ROWS),
            "rate": [
                [float(f"{_rate(fp32, kn, m):.4g}") for m in MATMUL_ROWS]
                for kn in sorted({k * n for k, n in MATMUL_WEIGHTS})
            ],
        },
        "cache_capacity": float(llc),
        "cache_bandwidth": float(f"{cache_bw:.4g}"),
        "sources": {
            "peak_flops.fp32": f"best fp32 torch.matmul over {len(fp32)} shapes ({where})",
            "peak_flops.fp16": f"best bf16 torch.matmul over {len(bf16)} shapes ({where})",
            "peak_flops.int8": "no int8 matmul path in eager PyTorch here: the fp32 rate",
            "memory_bandwidth": f"best of a streaming read {bw['read'] / 1e9:.3g} GB/s and "
            f"copy {bw['copy'] / 1e9:.3g} GB/s of 256 MiB; a {gemv_rows(llc)}x4096 fp32 GEMV "
            f"streams its weight at {bw['gemv'] / 1e9:.3g} GB/s ({where})",
            "memory_capacity": "MemTotal of /proc/meminfo",
            "matmul_table": f"fp32 rates of the models' linear layers over {len(fp32)} shapes "
            f"({where})",
            "cache_capacity": "half the last-level cache of /sys/devices/system/cpu/cpu0/cache",
            "cache_bandwidth": f"matrix-vector products over cache-resident weights ({where})",
        },
    }
    fitted = fit_to_models(repeats, profile, step, quick=quick)
    step("fit to the reference models")
    for eff in profile["efficiency"].values():
        eff["compute"] = round(fitted["compute"], 4)
        eff["op_overhead_s"] = float(f"{fitted['op_overhead_s']:.3g}")
        eff["vector"] = round(fitted["vector"], 4)
        eff["source"] = (
            f"archsearch calibrate: half_rows fitted to {len(fp32)} matmuls of the "
            f"models' linear layers; bandwidth a GEMV's share of the memory bandwidth; "
            f"compute, vector and op_overhead_s fitted to the prefill and decode times of "
            f"{fitted['models']} reference models (fit error "
            f"{fitted['fit_mape_percent']:.1f}%)"
        )
    roofline = parse_device(profile, source="calibration", default_name="local")
    learned = fit_kernels(
        roofline,
        runtime=runtime,
        threads=threads,
        repeats=repeats,
        quick=quick,
        budget=BUDGETS[budget],
        cpu=cpu_name(),
        step=step,
    )
    profile["kernels"] = learned["kernels"]
    timings = sum(e["samples"] for e in learned["kernels"]["predictors"].values())
    profile["sources"]["kernels"] = (
        f"archsearch calibrate: {len(learned['kernels']['predictors'])} kernels, {timings} "
        f"timings in {runtime} at adaptively sampled shapes ({where})"
    )
    validation = {q: [v] for q, v in learned["validation"].items()}
    half = fit_half(profile, repeats, quick=quick, step=step)
    for q, v in half["validation"].items():
        validation.setdefault(q, []).append(v)
    checked = "no held-out model ran there"
    if validation:
        profile["validation"] = validation
        checked = "checked on " + ", ".join(
            f"{v['n']} held-out predictions at {'/'.join(v['precisions'])}"
            for v in validation["ttft"]
        )
    profile["provenance"] = {
        "kind": "measured",
        "reason": f"archsearch calibrate on this machine ({where}): kernels timed in "
        f"{runtime}, {checked}",
    }
    return {
        "profile": profile,
        "raw": {
            "fp32": fp32,
            "bf16": bf16,
            "bandwidth": bw,
            "fit": fitted,
            "kernels": learned["raw"],
            HALF: half["raw"],
        },
    }


def _rate(points: list[dict[str, float]], kn: int, m: int) -> float:
    """Best measured rate for a weight size and row count (shapes of equal size: the best)."""
    return max(p["flops_per_s"] for p in points if p["k"] * p["n"] == kn and p["m"] == m)


def _memory_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * 2**30


def write_profile(profile: dict[str, Any], path: Path) -> None:
    """Atomic write: a half-written profile never replaces a good one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".yaml.tmp")
    name = profile.get("name", "local")
    where = profile.get("measured_on", {}).get("hostname", "this machine")
    header = (
        f"# The `{name}` device profile: {where}, measured by `archsearch calibrate`.\n"
        "# Re-run `archsearch calibrate` to refresh it.\n"
    )
    tmp.write_text(header + yamlio.dumps(profile))
    os.replace(tmp, path)
