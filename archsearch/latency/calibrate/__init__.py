"""`archsearch calibrate`: measure this machine into a device profile, probe -> time -> fit.

Within a `TimingPlan` (`PLANS`: full, fast, quick), in named steps:

1. `roofline.measure`, the memory probe (`timing.memory_seconds`) and, in torch, the passes
   probe (`timing.pass_seconds`);
2. `time_kernels`: every kernel at adaptively sampled shapes (`sample.Sampler`, the kernels
   taking their passes in turn), each fitted as it is sampled;
3. `time_models`: the glue models (the memory terms are fitted to them) and the held-out
   models (the profile's validation), whole;
4. `fit_raw`: the memory terms, and the fp32 validation pooled from the held-out models and each
   glue model predicted by the terms fitted without it. From the raw timings alone: `refit`
   gives the same predictor from a saved calibration (`without` leaves terms out:
   `benchmarks/bench_latency_ablation.py`);
5. `half`: the roofline's half-precision factors and their held-out check (`roofline`).

`pooled` joins an earlier calibration's raw timings of this machine to these and refits
(`pool`).

It returns the profile as plain data (`latency.profile.write_profile` writes it) and the raw
timings (`archsearch calibrate format=json` prints both).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import random
from collections.abc import Callable
from typing import Any

import numpy as np

from archsearch.cost.devices import DeviceProfile, cpu_name
from archsearch.latency.calibrate import fit, pool, roofline, timing
from archsearch.latency.calibrate.models import (
    WholeModel,
    glue_models,
    held_out_models,
    timed_models,
)
from archsearch.latency.calibrate.plan import PLANS, TimingPlan, plan
from archsearch.latency.calibrate.sample import Sampler, budget, kernel_rows
from archsearch.latency.predict import Predictor
from archsearch.latency.profile import predictor_dict
from archsearch.runtimes import ExportError

__all__ = ["PLANS", "TimingPlan", "assemble", "calibrate", "plan", "pooled", "refit", "steps"]

LEAVE_ONE_OUT = 8  # the fewest glue models whose left-out predictions join the validation


def steps(p: TimingPlan) -> int:
    """The progress steps `calibrate` reports within plan `p`: each a second or two."""
    passes = max(Sampler.schedule(budget(k, p.samples))[2] for k in p.kernels)
    glue, held = len(glue_models()[: p.glue_models]), len(held_out_models()[: p.held_out])
    return 4 + passes * len(p.kernels) + glue + 3 * held + len(roofline.references(p)) + 1


def calibrate(p: TimingPlan, progress: Callable[[int, int, str], None] | None = None) -> dict:
    """Measure this machine (see the module docstring): {"profile": ..., "raw": ...}."""
    import torch

    torch.set_num_threads(p.threads)
    done, total = [0], steps(p)

    def step(text: str) -> None:
        done[0] += 1
        if progress is not None:
            progress(min(done[0], total), total, f"steps ({text})")

    raw: dict[str, Any] = {"plan": dataclasses.asdict(p), "roofline": roofline.measure(p)}
    step("peaks and bandwidths")
    sizes = list(p.memory_sizes)
    raw["memory"] = {"bytes": sizes, "seconds": [timing.memory_seconds(n, p) for n in sizes]}
    step(f"memory stalls: a matrix-vector product over {p.memory_mib[0]}-{p.memory_mib[-1]} MiB")
    raw["passes"] = timing.pass_seconds(p) if p.runtime == "torch" else None
    step(f"passes over the weights: linear layers at {p.pass_rows[0]}-{p.pass_rows[-1]} rows")
    device = roofline.device(raw["roofline"], p)
    probe = fit.fit_memory(sizes, raw["memory"]["seconds"])
    raw["kernels"], kernels = time_kernels(p, probe, step)
    raw["glue"] = time_models(glue_models()[: p.glue_models], p, p.glue_builds, step)
    raw["held_out"] = time_models(held_out_models()[: p.held_out], p, p.held_out_builds, step)
    predictor, validation = fit_raw(raw, device, probe, kernels)
    step("memory terms fitted, each glue model left out")
    raw["half"] = roofline.half(raw["roofline"], p, step)
    return {"profile": assemble(raw, p, predictor, validation), "raw": raw}


def assemble(raw: dict, p: TimingPlan, predictor: Predictor, validation: dict) -> dict:
    """The profile of a calibration's raw timings, its predictor and fp32 validation: the
    roofline with the half precision's factors, the validation with their check, the sources."""
    profile = {
        **roofline.profile(raw["roofline"], p, raw["half"]["factors"]),
        "predictor": predictor_dict(predictor),
    }
    validation = {q: list(v) for q, v in validation.items()}
    for q, v in raw["half"]["validation"].items():
        validation.setdefault(q, []).append(v)
    where = f"{cpu_name()}, {os.cpu_count()} CPUs, {p.threads} threads, {datetime.date.today()}"
    timed = sum(f.samples for f in predictor.kernels.values())
    pooled = raw.get("pooled", 1)
    profile["sources"]["predictor"] = (
        f"archsearch calibrate budget={p.name}: {len(predictor.kernels)} kernels, {timed} "
        f"timings in {p.runtime} at adaptively sampled shapes ({where})"
        + (f"; the timings of {pooled} calibrations pooled" if pooled > 1 else "")
    )
    checked = "; ".join(
        f"{v['n']} at {'/'.join(v['precisions'])}" for v in validation.get("ttft", [])
    )
    profile["validation"] = validation
    profile["provenance"] = {
        "kind": "measured",
        "reason": f"archsearch calibrate on this machine ({where}): kernels timed in "
        f"{p.runtime}, checked on held-out predictions ({checked or 'none ran there'})",
    }
    return profile


def pooled(result: dict, earlier: dict, p: TimingPlan) -> dict:
    """A calibration's result (`calibrate`'s) with the raw timings `earlier` of another
    calibration of this machine under plan `p` pooled in (`pool.join`), its predictor refitted;
    the roofline and the half precision's check stay this calibration's."""
    raw = pool.join(result["raw"], earlier)
    predictor, validation = refit(raw)
    return {**result, "profile": assemble(raw, p, predictor, validation), "raw": raw}


def time_kernels(p: TimingPlan, probe, step) -> tuple[dict, dict]:
    """Every kernel of the plan sampled and fitted: (raw timings, fits) by kernel (one the
    runtime cannot run has no fit and keeps its analytic time)."""

    def measure(shape: timing.Shape) -> float | None:
        try:
            return timing.time_shape(shape, p)
        except ExportError:
            return None

    rng = random.Random(p.seed)
    samplers = [Sampler(k, measure, budget(k, p.samples), rng, probe) for k in p.kernels]
    passes = max(s.passes for s in samplers)
    for i in range(passes):  # a pass of every kernel, then the next
        for s in samplers:
            s.step()
            step(f"kernels: pass {i + 1} of {passes}, {s.kernel}")
    raw = {
        s.kernel: [{**x.values(), "seconds": t} for x, t in zip(s.shapes, s.y)] for s in samplers
    }
    fits = {s.kernel: s.result() for s in samplers}
    return raw, {k: f for k, f in fits.items() if f is not None}


def time_models(models: list[WholeModel], p: TimingPlan, builds: int, step) -> list[dict]:
    """Each model that runs in the runtime with its (prefill, step) seconds."""
    out = []
    for m in models:
        with contextlib.suppress(ExportError):  # a model the runtime cannot run is left out
            out.append({**m.setting(), "measured_s": timing.time_model(m, p, builds)})
        step(f"whole model {m.arch.summary()}")
    return out


def fit_raw(raw: dict, device: DeviceProfile, probe, kernels: dict, without=()) -> tuple:
    """(predictor, fp32 validation) from the raw timings, the probe and the kernels' fits."""
    import torch

    p = raw["plan"]
    when = datetime.date.today().isoformat()
    bare = Predictor(
        p["runtime"],
        str(torch.__version__),
        p["threads"],
        when,
        cpu_name(),
        p["span"],
        kernels,
        dict.fromkeys(("forward", "step")),
    )
    glue, held = timed_models(raw["glue"]), timed_models(raw["held_out"])
    glue_s = np.array([e["measured_s"] for e in raw["glue"]], dtype=float).reshape(-1, 2)
    passes = None if "passes" in without else fit.fit_passes(raw.get("passes"))
    terms = fit.model_terms(glue, device.with_predictor(bare), passes) if glue else None
    memory = fit.fit_memory_terms(glue_s, *terms, probe, without) if glue else {}
    if memory.get("step") is not None:
        memory["step"] = dataclasses.replace(memory["step"], passes=passes)
    predictor = dataclasses.replace(bare, memory={**bare.memory, **memory})
    if not held:
        return predictor, {}
    loo = np.zeros((0, 2))
    if len(glue) >= LEAVE_ONE_OUT:
        loo = fit.left_out(glue_s, *terms, probe, without)
    predicted = [m.predicted(device.with_predictor(predictor)) for m in held] + loo.tolist()
    measured = [e["measured_s"] for e in raw["held_out"]] + glue_s[: len(loo)].tolist()
    method = f"{len(held)} held-out whole models no calibration step timed" + (
        f" and {len(loo)} glue models, each predicted by the memory terms fitted without it"
        if len(loo)
        else ""
    )
    working = [m.working_sets() for m in held + glue[: len(loo)]]
    check = fit.pooled_check(measured, predicted, working, method, probe.hi if probe else 0.0)
    return predictor, {q: [v] for q, v in check.items()}


def refit(raw: dict, without=()) -> tuple[Predictor, dict]:
    """The predictor and its fp32 validation refitted from a saved calibration's raw timings
    (its `raw`), with the terms of `without` (`fit.TERMS`) left out."""
    device = roofline.device(raw["roofline"], plan(raw["plan"]["name"]))
    memory = raw["memory"]
    probe = None if "stalls" in without else fit.fit_memory(memory["bytes"], memory["seconds"])
    kernels = {}
    for kernel, entries in raw["kernels"].items():
        grid = timing.GRIDS[kernel]
        shapes = [
            timing.Shape(kernel, tuple((k, grid[k].index(e[k])) for k in grid)) for e in entries
        ]
        if shapes:
            X, W, R = zip(*map(kernel_rows, shapes))
            y = [e["seconds"] for e in entries]
            kernels[kernel] = fit.fit_kernel(kernel, X, W, R, y, probe, without)
    return fit_raw(raw, device, probe, kernels, without)
