"""Inference memory, latency and throughput against sequence length and batch size, measured on
this machine and predicted for any device: the comparison of [MCSD] section 4 (Figs. 5-8:
memory vs sequence length, latency vs batch size, throughput vs sequence length and vs batch
size, after a 128-token prompt) for any set of architectures.

Measured: each architecture runs in a fresh process (so the process memory is its own) with a
fixed number of torch threads, fp32, under `torch.inference_mode`: a prefill of `prompt`
tokens, then greedy decoding one token per step up to the longest length, for every batch size,
`repeats` times after a warm-up. At each length of `lengths` it records the time since the
prompt started, the step latency (median of the steps since the previous length), the bytes
the decode state holds (`LanguageModel.state_nbytes`: the KV cache or the recurrent state) and
the process's resident memory. Figures are medians over the repeats. `runtime` says where the
model runs (`archsearch.runtimes`): `torch` eager, or `onnxruntime`, where the prefill and the
decode step (with its state as inputs and outputs) are exported once before timing and the
runtime's logits are checked against PyTorch's over the prompt and `check_steps` decode steps
(`logit_check`); a candidate that does not export is not measured, with the one-line reason.

Predicted: the latency model (`archsearch.latency.predict`) on a device profile at a precision:
total inference memory and cache bytes, decode time per step at that context, and the end-to-end
time of the prompt plus the generated tokens.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Settings:
    prompt: int
    lengths: tuple[int, ...]  # generated tokens, ascending
    batches: tuple[int, ...]  # ascending
    repeats: int
    threads: int
    precision: str  # of the predictions
    runtime: str = "torch"  # where the measurement runs (archsearch.runtimes.RUNTIMES)
    check_steps: int = 4  # decode steps of the logits check against PyTorch (not torch)


# ---- measured -----------------------------------------------------------------------------------


def measure(arch_dict: dict[str, Any], s: Settings) -> dict[str, Any]:
    """Time and size the real model (call it in a fresh process: see `measure_isolated`)."""
    import resource

    import psutil
    import torch

    from archsearch.arch import ArchConfig
    from archsearch.models import build_model
    from archsearch.runtimes import deploy, logit_error

    torch.set_num_threads(s.threads)
    torch.manual_seed(0)
    arch = ArchConfig.from_dict(arch_dict)
    model = build_model(arch).eval()
    proc = psutil.Process()
    n_max = s.lengths[-1]
    run = deploy(
        model,
        s.runtime,
        prompt=s.prompt,
        max_context=s.prompt + n_max,
        threads=s.threads,
        batches=tuple(s.batches),
    )
    out: dict[str, Any] = {
        "runtime": s.runtime,
        "rss_after_build": proc.memory_info().rss,
        "batches": {},
    }
    g = torch.Generator().manual_seed(0)
    if s.runtime != "torch":
        # at the first batch size measured (ExecuTorch lowers programs per batch size)
        idx = torch.randint(0, arch.vocab_size, (s.batches[0], s.prompt), generator=g)
        diff, scale = logit_error(model, run, idx, min(s.check_steps, n_max))
        out["logit_check"] = {"max_abs_diff": diff, "max_abs_logit": scale, "steps": s.check_steps}
    with torch.inference_mode():
        for B in s.batches:
            runs = []
            for _ in range(s.repeats + 1):  # the first run warms up
                idx = torch.randint(0, arch.vocab_size, (B, s.prompt), generator=g)
                runs.append(_generate(model, run, idx, s.lengths, proc))
            out["batches"][B] = _medians(runs[1:], B, s.lengths)
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return out


def _generate(model, run, idx, lengths: tuple[int, ...], proc) -> tuple[float, list[dict]]:
    """A prefill of `idx`, then greedy decoding one token a step up to the longest of `lengths`:
    the prefill's seconds, and at each length the time since the prompt started, the median
    step since the previous length, the bytes of the decode state and of the process."""
    t0 = time.perf_counter()
    logits, state = run.prefill(idx)
    tok = logits[:, -1].argmax(-1)
    t_prefill = time.perf_counter() - t0
    steps, snaps, last = [], [], 0
    for n in range(1, lengths[-1] + 1):
        t = time.perf_counter()
        logits, state = run.step(tok, state)
        tok = logits.argmax(-1)
        steps.append(time.perf_counter() - t)
        if n in lengths:
            snaps.append(
                {
                    "length": n,
                    "time_s": t_prefill + sum(steps),
                    "step_ms": 1e3 * statistics.median(steps[last:]),
                    "state_bytes": model.state_nbytes(state),
                    "rss_bytes": proc.memory_info().rss,
                }
            )
            last = n
    return t_prefill, snaps


def _medians(runs: list[tuple[float, list[dict]]], B: int, lengths: tuple[int, ...]) -> dict:
    """Batch `B`'s figures over the repeats' `_generate` runs: medians of the times, the last
    run's state bytes, the most resident memory."""
    points = []
    for k, n in enumerate(lengths):
        at = [snaps[k] for _, snaps in runs]
        t = statistics.median(p["time_s"] for p in at)
        points.append(
            {
                "length": n,
                "time_s": t,
                "step_ms": statistics.median(p["step_ms"] for p in at),
                "tokens_per_s": B * n / t,
                "state_bytes": at[-1]["state_bytes"],
                "rss_bytes": max(p["rss_bytes"] for p in at),
            }
        )
    return {"prefill_ms": 1e3 * statistics.median(t for t, _ in runs), "points": points}


def measure_isolated(arch_dict: dict[str, Any], s: Settings) -> dict[str, Any]:
    """`measure` in a fresh (spawned) process."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        return pool.submit(measure, arch_dict, s).result()


# ---- predicted ----------------------------------------------------------------------------------


def predict(arch, device: str, s: Settings) -> dict[str, Any]:
    """The cost model's numbers at the same lengths and batch sizes."""
    from archsearch.cost import model
    from archsearch.latency import columns, decode_s, e2e_s, load_device

    c = columns(arch)
    dev = load_device(device)
    bits = model.cache_bits(s.precision)
    out: dict[str, Any] = {"device": device, "precision": s.precision, "batches": {}}
    for B in s.batches:
        points = []
        for n in s.lengths:
            ctx = s.prompt + n
            e2e = float(e2e_s(c, dev, s.prompt, n, s.precision, B)[0])
            points.append(
                {
                    "length": n,
                    "time_s": e2e,
                    "step_ms": 1e3 * float(decode_s(c, dev, ctx, s.precision, B)[0]),
                    "tokens_per_s": B * n / e2e,
                    "cache_bytes": float(model.cache_bytes(c, ctx, bits, B)[0]),
                    "cache_bytes_fp32": float(model.cache_bytes(c, ctx, 32, B)[0]),
                    "memory_bytes": float(model.memory_bytes(c, ctx, s.precision, B)[0]),
                }
            )
        out["batches"][B] = {"points": points}
    return out


# ---- the whole comparison -----------------------------------------------------------------------


def profile(
    archs: list,
    devices: list[str],
    s: Settings,
    *,
    measure_max_params: float | None,
    progress: Callable[[int, int, str], None] | None = None,
) -> list[dict[str, Any]]:
    """For each architecture: its size, the measured numbers (None when not measured, with the
    reason: too large, or the one-line reason it does not export to `s.runtime`) and the
    predictions for every device; `progress(done, total, step)` after each architecture."""
    from archsearch.cost import columns, params
    from archsearch.runtimes import ExportError

    out = []
    for arch in archs:
        n_params = float(params(columns(arch))["params"][0])
        entry: dict[str, Any] = {
            "arch": arch.name,
            "summary": arch.summary(),
            "params": n_params,
            "max_seq_len": arch.max_seq_len,
            "measured": None,
            "not_measured": None,
            "predicted": {d: predict(arch, d, s) for d in devices},
        }
        if measure_max_params is None:
            entry["not_measured"] = "measure=false"
        elif n_params > measure_max_params:
            entry["not_measured"] = f"{n_params / 1e6:.3g}M params > max_params"
        else:
            try:
                entry["measured"] = measure_isolated(arch.to_dict(), s)
            except ExportError as e:
                entry["not_measured"] = f"does not run in {s.runtime}: {e}"
        out.append(entry)
        if progress is not None:
            how = "measured and predicted" if entry["measured"] else "predicted"
            progress(len(out), len(archs), f"architectures {how}, last {arch.name}")
    return out


# ---- plots ([MCSD] Figs. 5-8) ----------------------------------------------------------------


def _panels(results, devices: list[str]):
    """(title, getter) per panel: the measured one (when anything was measured), then one per
    device; getter(entry) -> the measured or predicted dict, or None."""
    panels = []
    if any(e["measured"] for e in results):
        panels.append(("measured on this machine (fp32)", lambda e: e["measured"]))
    for d in devices:
        panels.append((f"predicted on {d}", lambda e, d=d: e["predicted"][d]))
    return panels


def plot_all(results: list[dict[str, Any]], devices: list[str], s: Settings, out: Path) -> dict:
    """The four figures (`figures`) as PNGs in `out`: {name: path}."""
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, fig in figures(results, devices, s).items():
        files[name] = out / f"{name}.png"
        fig.savefig(files[name], dpi=110)
    return files


def figures(results: list[dict[str, Any]], devices: list[str], s: Settings) -> dict:
    """{name: matplotlib Figure}: memory vs length, latency vs batch, throughput vs length and
    vs batch; a panel per measurement and device, bytes in the unit the largest value reaches,
    a log scale where a panel's values span decades, a legend in panels that draw anything."""
    from matplotlib import rcParams
    from matplotlib.figure import Figure

    from archsearch.analysis.plots import log_scale
    from archsearch.units import scale_for, spans_decades

    colours = rcParams["axes.prop_cycle"].by_key()["color"]
    panels = _panels(results, devices)
    b_small, n_long = s.batches[0], s.lengths[-1]
    byte_keys = ("state_bytes", "rss_bytes", "cache_bytes", "memory_bytes")
    all_bytes = [
        p[k]
        for e in results
        for data in (e["measured"], *e["predicted"].values())
        if data is not None
        for p in data["batches"][b_small]["points"]
        for k in byte_keys
        if k in p
    ]
    b_scale, b_unit = scale_for("bytes", all_bytes)
    figs = {}

    def figure(name: str, title: str, draw) -> None:
        fig = Figure(figsize=(max(6.4, 5.2 * len(panels)), 4.4))
        axs = fig.subplots(1, len(panels), squeeze=False)
        for ax, (ptitle, get) in zip(axs[0], panels):
            for i, e in enumerate(results):
                data = get(e)
                if data is not None:
                    draw(ax, e["arch"], data, colours[i % len(colours)], ptitle.startswith("m"))
            ys = [y for line in ax.get_lines() for y in line.get_ydata()]
            if spans_decades(ys):
                log_scale(ax, "y")
            ax.set_title(ptitle, fontsize=9)
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        figs[name] = fig

    def points(data, B):
        return data["batches"][B]["points"]

    def memory(ax, label, data, c, measured):
        pts = points(data, b_small)
        x = [p["length"] for p in pts]
        solid, dashed = ("state", "process") if measured else ("cache", "total")
        for key, style, what in (
            ("state_bytes" if measured else "cache_bytes", "o-", solid),
            ("rss_bytes" if measured else "memory_bytes", "s--", dashed),
        ):
            y = [p[key] / b_scale for p in pts]
            ax.plot(x, y, style, c=c, label=f"{label} {what}")
        log_scale(ax, "x", base=2)
        ax.set_xlabel("generated tokens")
        ax.set_ylabel(f"memory ({b_unit})")

    def latency(ax, label, data, c, measured):
        for n, style in ((n_long, "o-"), (s.lengths[0], "s:")):
            k = s.lengths.index(n)
            y = [points(data, B)[k]["step_ms"] for B in s.batches]
            ax.plot(s.batches, y, style, c=c, label=f"{label} at {n} tokens")
        log_scale(ax, "x", base=2)
        ax.set_xlabel("batch size (sequences)")
        ax.set_ylabel("decode latency (ms per step)")

    def throughput_len(ax, label, data, c, measured):
        for j, B in enumerate(s.batches):
            pts = points(data, B)
            ax.plot(
                [p["length"] for p in pts],
                [p["tokens_per_s"] for p in pts],
                "o-",
                c=c,
                alpha=0.35 + 0.65 * (j + 1) / len(s.batches),
                lw=0.8 + j * 0.6,
                label=f"{label} batch {B}",
            )
        log_scale(ax, "x", base=2)
        ax.set_xlabel("generated tokens")
        ax.set_ylabel("throughput (tokens/s)")

    def throughput_batch(ax, label, data, c, measured):
        y = [points(data, B)[-1]["tokens_per_s"] for B in s.batches]
        ax.plot(s.batches, y, "o-", c=c, label=label)
        log_scale(ax, "x", base=2)
        ax.set_xlabel("batch size (sequences)")
        ax.set_ylabel(f"throughput generating {n_long} tokens (tokens/s)")

    head = f"prompt {s.prompt} tokens; predictions at {s.precision}"
    figure("memory_vs_length", f"memory vs sequence length, batch {b_small}\n({head})", memory)
    figure("latency_vs_batch", f"decode latency vs batch size\n({head})", latency)
    figure("throughput_vs_length", f"throughput vs sequence length\n({head})", throughput_len)
    figure(
        "throughput_vs_batch",
        f"throughput vs batch size at {n_long} tokens\n({head})",
        throughput_batch,
    )
    return figs


def summary_rows(results: list[dict[str, Any]], devices: list[str], s: Settings) -> list[dict]:
    """One row per architecture at the longest length and the smallest batch."""
    B = s.batches[0]
    rows = []
    for e in results:
        row: dict[str, Any] = {"arch": e["arch"], "params": e["params"]}
        m = e["measured"]
        if m is not None:
            p = m["batches"][B]["points"][-1]
            if "logit_check" in m:
                row["max_abs_logit_diff"] = m["logit_check"]["max_abs_diff"]
            row.update(
                state_bytes=p["state_bytes"],
                step_ms=p["step_ms"],
                tokens_per_s_max_batch=m["batches"][s.batches[-1]]["points"][-1]["tokens_per_s"],
                peak_rss_bytes=m["peak_rss_bytes"],
            )
        else:
            row["not_measured"] = e["not_measured"]
        first = e["predicted"][devices[0]]["batches"][B]["points"][-1]
        row.update(
            predicted_cache_bytes_fp32=first["cache_bytes_fp32"],
            **{
                f"predicted_step_ms[{d}]": e["predicted"][d]["batches"][B]["points"][-1]["step_ms"]
                for d in devices
            },
        )
        rows.append(row)
    return rows
