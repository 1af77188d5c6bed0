"""`archsearch calibrate`: measure this machine and write the `local` device profile.

Three measurements, each a median of repeats at a fixed number of torch threads:

1. matmul throughput over shapes (rows m from 1 to 1024 against weights of 512^2 to 2048x4096),
   in fp32 and bf16: the best large-matmul rate is the peak of its compute class, and the
   half-efficiency row count `half_rows` is fitted to eff(m) = m / (m + half_rows);
2. memory bandwidth: a streaming read (sum) and copy of 256 MiB, and a matrix-vector product
   (which reads its whole weight once per call): the best of them is the bandwidth;
3. overhead per operator: what the roofline of those figures leaves unexplained in the decode
   steps of five small reference models (attention, MLA, GLA, Mamba2, MCSD), per operator
   they dispatch (`archsearch.cost.counts.LAUNCHES`), by least squares.

The profile is written with a source line for every figure (the CPU model, the date, the
thread count), and `prefill_logits: all` because archsearch's own prefill computes the logits
of every prompt position.
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from archsearch import yamlio

MATMUL_ROWS = (1, 4, 16, 64, 256, 1024)
MATMUL_WEIGHTS = ((512, 512), (1024, 1024), (2048, 2048), (1024, 4096))


def _median_time(fn: Callable[[], Any], repeats: int, min_time: float = 0.05) -> float:
    """Median seconds per call; each sample loops until `min_time` has passed."""
    fn()
    samples = []
    for _ in range(repeats):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= min_time:
                break
        samples.append(elapsed / n)
    return statistics.median(samples)


def measure_matmuls(dtype_name: str, repeats: int) -> list[dict[str, float]]:
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    out = []
    for k, n in MATMUL_WEIGHTS:
        w = torch.randn(k, n, dtype=dtype)
        for m in MATMUL_ROWS:
            x = torch.randn(m, k, dtype=dtype)
            t = _median_time(lambda x=x, w=w: torch.matmul(x, w), repeats)
            out.append({"m": m, "k": k, "n": n, "seconds": t, "flops_per_s": 2 * m * k * n / t})
    return out


def measure_bandwidth(repeats: int) -> dict[str, float]:
    import torch

    a = torch.ones(64 * 2**20)  # 256 MiB of fp32
    b = torch.empty_like(a)
    nbytes = a.numel() * 4
    t_sum = _median_time(lambda: a.sum(), repeats)
    t_copy = _median_time(lambda: b.copy_(a), repeats)
    w = torch.randn(4096, 4096)
    v = torch.randn(1, 4096)
    t_gemv = _median_time(lambda: torch.matmul(v, w), repeats)
    return {"read": nbytes / t_sum, "copy": 2 * nbytes / t_copy, "gemv": w.numel() * 4 / t_gemv}


def measure_overhead(repeats: int, profile: dict[str, Any]) -> dict[str, Any]:
    """Seconds per dispatched operator: the part of real decode steps that the roofline of the
    measured peaks and bandwidth does not explain, divided by the operators they dispatch
    (least squares through the origin over reference models of every kind of mixer, each
    timed as the least disturbed of its repeats)."""
    import dataclasses

    import numpy as np
    import torch

    from archsearch.arch import ArchConfig, AttentionConfig, LayersConfig, LinearConfig, MCSDConfig
    from archsearch.cost import model as cost_model
    from archsearch.cost.counts import Columns, Phase
    from archsearch.cost.devices import parse_device
    from archsearch.models import build_model

    device = parse_device(profile, source="calibration", default_name="local")
    device = dataclasses.replace(
        device,
        efficiency={
            k: dataclasses.replace(e, op_overhead_s=0.0) for k, e in device.efficiency.items()
        },
    )
    base = dict(vocab_size=2048, d_model=128, n_layers=2, max_seq_len=1024)
    archs = [
        ArchConfig(**base, attention=AttentionConfig(n_heads=2)),
        ArchConfig(**base, attention=AttentionConfig(kind="mla", n_heads=2, kv_rank=32)),
        ArchConfig(**base, layers=LayersConfig(mixer="linear"), linear=LinearConfig("gla")),
        ArchConfig(**base, layers=LayersConfig(mixer="linear"), linear=LinearConfig("mamba2")),
        ArchConfig(**base, layers=LayersConfig(mixer="mcsd"), mcsd=MCSDConfig(n_channels=4)),
    ]
    excess, launches = [], []
    for arch in archs:
        model = build_model(arch).eval()
        with torch.inference_mode():
            _, state = model.prefill(torch.zeros(1, 64, dtype=torch.long))
            token = torch.zeros(1, dtype=torch.long)
            t = min(
                _median_time(lambda m=model, s=state, x=token: m.step(x, s), 1)
                for _ in range(repeats)
            )
        c = Columns.from_archs([arch])
        phase = Phase("step", T=1, n0=64)
        excess.append(t - float(cost_model.phase_seconds(c, phase, device, "fp32")[0]))
        launches.append(float(cost_model.launch_count(c, phase)[0]))
    x, y = np.array(launches), np.array(excess)
    per_op = max(float(x @ y / (x @ x)), 0.0)
    return {"op_overhead_s": per_op, "launches": launches, "excess_s": excess}


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


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def calibrate(threads: int, repeats: int = 5, quick: bool = False) -> dict[str, Any]:
    """Measure this machine; returns the `local` profile as a mapping (and the raw data)."""
    import torch

    torch.set_num_threads(threads)
    if quick:
        global MATMUL_ROWS, MATMUL_WEIGHTS
        MATMUL_ROWS, MATMUL_WEIGHTS = (1, 16, 256), ((512, 512), (1024, 1024))
    fp32 = measure_matmuls("fp32", repeats)
    bf16 = measure_matmuls("bf16", repeats)
    bw = measure_bandwidth(repeats)
    peak32 = max(p["flops_per_s"] for p in fp32)
    peak16 = max(p["flops_per_s"] for p in bf16)
    bandwidth = max(bw.values())
    when = datetime.date.today().isoformat()
    where = (
        f"{cpu_name()}, {os.cpu_count()} CPUs, torch {torch.__version__}, {threads} threads, {when}"
    )
    eff32 = {
        "compute": 1.0,
        "half_rows": round(fit_half_rows(fp32, peak32), 3),
        "bandwidth": 1.0,
        "op_overhead_s": 0.0,  # fitted below, once the rest of the profile is known
        "source": f"archsearch calibrate: peaks are measured maxima; half_rows fitted to "
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
        "sources": {
            "peak_flops.fp32": f"best fp32 torch.matmul over {len(fp32)} shapes ({where})",
            "peak_flops.fp16": f"best bf16 torch.matmul over {len(bf16)} shapes ({where})",
            "peak_flops.int8": "no int8 matmul path in eager PyTorch here: the fp32 rate",
            "memory_bandwidth": f"best of streaming read {bw['read'] / 1e9:.3g} GB/s, copy "
            f"{bw['copy'] / 1e9:.3g} GB/s and 4096^2 fp32 GEMV "
            f"{bw['gemv'] / 1e9:.3g} GB/s ({where})",
            "memory_capacity": "MemTotal of /proc/meminfo",
        },
    }
    overhead = measure_overhead(repeats, profile)
    for eff in profile["efficiency"].values():
        eff["op_overhead_s"] = float(f"{overhead['op_overhead_s']:.3g}")
    return {
        "profile": profile,
        "raw": {"fp32": fp32, "bf16": bf16, "bandwidth": bw, "overhead": overhead},
    }


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
    header = (
        "# The `local` device profile: this machine, measured by `archsearch calibrate`.\n"
        "# Re-run `archsearch calibrate` to refresh it.\n"
    )
    tmp.write_text(header + yamlio.dumps(profile))
    os.replace(tmp, path)
