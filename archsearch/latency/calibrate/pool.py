"""Pooled calibrations of one machine: an earlier calibration's raw timings joined with these.

One calibration times each kernel shape and whole model at one moment of a shared machine, and
its errors follow that moment (a slow spell during its whole models biases every decode step
the memory terms predict). Another calibration's moment is another: pooled, the two time
every shape either timed (a shape or model timed in both at its least time, as a timing is the
least of its samples) and the predictor refitted to them errs less
(`benchmarks/bench_latency_pooled.py`), the more so where the two timed other shapes: a
calibration pooled with N earlier ones draws its shapes with seed N (`TimingPlan.seed`), the
plans otherwise the same. The earlier timings come from the JSON that
`archsearch calibrate format=json` printed, read here as data a user did not write: checked
against this calibration's plan, every number finite and positive, every shape on its grid.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from archsearch.errors import UserError
from archsearch.latency.calibrate.models import glue_models, held_out_models
from archsearch.latency.calibrate.plan import TimingPlan
from archsearch.latency.calibrate.timing import GRIDS
from archsearch.latency.profile import strict_json

__all__ = ["join", "read_earlier", "same_machine"]

MAX_BYTES = 64 * 2**20
MODEL_KEYS = {"arch", "prompt", "context", "batch", "measured_s"}
POOLED_ON = ("cpu", "isa", "cpu_id")  # what must match between pooled calibrations' machines
# plan fields pooled calibrations may differ in: the shapes' draws, and the half precision's
# check (each calibration keeps its own; only the fp32 timings are pooled)
UNPOOLED = ("seed", "check_repeats")


def read_earlier(path: str, p: TimingPlan) -> tuple[dict[str, Any], dict[str, str]]:
    """(raw timings, processor) of the calibration output at `path`, checked against plan `p`:
    the processor as its `node` states it (`cpu`, and where stated `isa` and `cpu_id`:
    `cost.devices.processor`)."""

    def fail(what: str, key: str) -> UserError:
        return UserError(what, source=path, key=key)

    try:
        blob = Path(path).read_bytes()
    except OSError as err:
        raise UserError(f"cannot read it: {err.strerror or err}", source=path) from None
    if len(blob) > MAX_BYTES:
        raise UserError(f"larger than {MAX_BYTES // 2**20} MiB: not a calibration", source=path)
    try:
        data = strict_json(blob)
    except (ValueError, RecursionError) as err:
        what = f"not the JSON of `archsearch calibrate format=json`: {err}"
        raise UserError(what, source=path) from None
    node, raw = (data.get("node"), data.get("raw")) if isinstance(data, dict) else (None, None)
    cpu = node.get("cpu") if isinstance(node, dict) else None
    if not isinstance(cpu, str) or not isinstance(raw, dict):
        raise fail("expected the output of `archsearch calibrate format=json`", "raw")
    machine = {k: node[k] for k in POOLED_ON if k in node}
    for k, v in machine.items():
        if not isinstance(v, str):
            raise fail(f"expected text, got {repr(v)[:40]}", f"node.{k}")
    mine, theirs = json.loads(json.dumps(dataclasses.asdict(p))), raw.get("plan")
    if not isinstance(theirs, dict) or _pooled_fields(theirs) != _pooled_fields(mine):
        raise fail(f"timed under another plan than budget={p.name} at these settings", "raw.plan")
    pooled = raw.get("pooled", 1)
    if isinstance(pooled, bool) or not isinstance(pooled, int) or pooled < 1:
        raise fail(f"expected a count of calibrations, got {pooled!r}", "raw.pooled")
    memory = raw.get("memory")
    if not isinstance(memory, dict) or memory.get("bytes") != list(p.memory_sizes):
        raise fail("expected the memory probe's sizes of this plan", "raw.memory")
    _seconds(memory.get("seconds"), len(p.memory_sizes), fail, "raw.memory.seconds")
    _passes(raw.get("passes"), p, fail)
    kernels = raw.get("kernels")
    if not isinstance(kernels, dict) or not set(kernels) <= set(p.kernels):
        raise fail(f"expected a mapping of this plan's kernels {list(p.kernels)}", "raw.kernels")
    for kernel, entries in kernels.items():
        _shapes(entries, GRIDS[kernel], fail, f"raw.kernels.{kernel}")
    for part, models in (("glue", glue_models()), ("held_out", held_out_models())):
        _models(raw.get(part), {_setting(m.setting()) for m in models}, fail, f"raw.{part}")
    return raw, machine


def _pooled_fields(plan: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in plan.items() if k not in UNPOOLED}


def same_machine(earlier: dict[str, str], here: dict[str, str], path: str) -> None:
    """Refuse to pool timings of another processor: its name, vector extension and id
    (`POOLED_ON`; `earlier` as `read_earlier` returns it, `here` as `cost.devices.processor`
    records this machine) must be this one's, and one this machine states must be stated (a
    calibration that does not state it cannot be told from another processor of the name)."""
    for key in POOLED_ON:
        theirs, mine = earlier.get(key), here.get(key)
        if theirs == mine:
            continue
        if theirs is None:
            what = f"does not state the processor's {key} ({mine!r} here); calibrate afresh"
        else:
            what = f"timed on {theirs!r}, not on this calibration's {mine or 'unstated'!r}"
        raise UserError(f"{what}: pool one machine's", source=path, key=f"node.{key}")


def join(raw: dict[str, Any], earlier: dict[str, Any], both: Callable = min) -> dict[str, Any]:
    """`raw` with `earlier`'s timings pooled in: per kernel the union of the shapes, per shape
    timed in both, whole model timed in both and memory probe size `both` of the two times (the
    least, as a timing is the least of its samples; the geometric mean predicts worse:
    `benchmarks/bench_latency_pooled.py --both`)."""
    out = copy.deepcopy(raw)
    for kernel, entries in earlier["kernels"].items():
        mine = out["kernels"].setdefault(kernel, [])
        at = {_shape(e): e for e in mine}
        for e in entries:
            shape = _shape(e)
            if shape in at:
                at[shape]["seconds"] = both(at[shape]["seconds"], e["seconds"])
            else:
                mine.append(dict(e))
                at[shape] = mine[-1]
    for part in ("glue", "held_out"):
        theirs = {_setting(e): e["measured_s"] for e in earlier[part]}
        for e in out[part]:
            if _setting(e) in theirs:
                e["measured_s"] = [both(a, b) for a, b in zip(e["measured_s"], theirs[_setting(e)])]
    memory = out["memory"]
    memory["seconds"] = [
        both(a, b) for a, b in zip(memory["seconds"], earlier["memory"]["seconds"])
    ]
    if out.get("passes") and earlier.get("passes"):
        for k in ("memory_s", "cache_s"):
            pairs = zip(out["passes"][k], earlier["passes"][k])
            out["passes"][k] = [[both(a, b) for a, b in zip(*rows)] for rows in pairs]
    out["pooled"] = raw.get("pooled", 1) + earlier.get("pooled", 1)
    return out


def _shape(entry: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in entry.items() if k != "seconds"))


def _setting(entry: dict) -> tuple:
    return tuple(entry[k] for k in ("arch", "prompt", "context", "batch"))


def _positive(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def _whole(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int)


def _seconds(values: Any, n: int, fail, key: str) -> None:
    if not isinstance(values, list) or len(values) != n or not all(map(_positive, values)):
        raise fail(f"expected {n} positive numbers of seconds", key)


def _passes(passes: Any, p: TimingPlan, fail) -> None:
    """The passes probe's timings at the plan's sizes and rows, or None (not timed: a deploy
    runtime)."""
    if passes is None:
        return
    axes = {"bytes": list(p.pass_sizes), "rows": list(p.pass_rows)}
    if not isinstance(passes, dict) or {k: passes.get(k) for k in axes} != axes:
        raise fail("expected the passes probe's sizes and rows of this plan", "raw.passes")
    for k in ("memory_s", "cache_s"):
        lines = passes.get(k)
        if not isinstance(lines, list) or len(lines) != len(p.pass_rows):
            raise fail(f"expected {len(p.pass_rows)} rows of seconds", f"raw.passes.{k}")
        for i, line in enumerate(lines):
            _seconds(line, len(p.pass_sizes), fail, f"raw.passes.{k}[{i}]")


def _shapes(entries: Any, grid: dict[str, tuple], fail, key: str) -> None:
    """Each entry a shape of the kernel's grid with its positive seconds."""
    if not isinstance(entries, list):
        raise fail("expected a list of timed shapes", key)
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or set(e) != {*grid, "seconds"}:
            raise fail(f"expected the keys {sorted({*grid, 'seconds'})}", f"{key}[{i}]")
        for knob, values in grid.items():
            if isinstance(e[knob], bool) or e[knob] not in values:
                what = f"{repr(e[knob])[:40]} is not on its grid {list(values)}"
                raise fail(what, f"{key}[{i}].{knob}")
        _seconds([e["seconds"]], 1, fail, f"{key}[{i}].seconds")


def _models(entries: Any, known: set[tuple], fail, key: str) -> None:
    """Each entry a model of this plan's list at its setting, with its two positive times."""
    if not isinstance(entries, list):
        raise fail("expected a list of timed whole models", key)
    for i, e in enumerate(entries):
        typed = isinstance(e, dict) and set(e) == MODEL_KEYS and isinstance(e["arch"], str)
        whole = typed and all(_whole(e[k]) for k in ("prompt", "context", "batch"))
        if not whole or _setting(e) not in known:
            raise fail("expected a whole model this plan times, at its setting", f"{key}[{i}]")
        _seconds(e["measured_s"], 2, fail, f"{key}[{i}].measured_s")
