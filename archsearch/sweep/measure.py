"""Hardware in the loop: time the real model's prefill and decode as a Ray task.

With `latency.mode=measured`, each candidate's latency objective comes from timing the real
model (timed as calibration times whole models) in a Ray task, in `latency.runtime`: PyTorch
eager, or exported to ONNX Runtime or ExecuTorch (`archsearch.runtimes`). A candidate that does
not run there is measured as `{"not_measured": reason}` (one line), which fails its trial with
that reason. With `latency.resource=NAME` the task runs only on nodes that advertise the custom
resource NAME (e.g. a Raspberry Pi joined with `ray start --address=... --resources='{"rpi5": 1}'`).
"""

from __future__ import annotations

from typing import Any

from archsearch.metrics import METRICS
from archsearch.space import SearchSpace

MEASURED = ("ttft_ms", "decode_ms", "e2e_ms")  # the latency metrics `measure_latency` times


def measure_latency(
    arch_dict: dict[str, Any],
    settings: dict[str, int],
    repeats: int = 5,
    threads: int = 1,
    runtime: str = "torch",
) -> dict[str, Any]:
    """Wall times of the real model in `runtime`, timed as calibration and the latency
    benchmark time them (`kernel_timing.time_model_once`: the least of calls over `SAMPLE_S`
    after a warm-up): prefill of `prompt` tokens (ttft_ms), one decode step at `context` tokens
    (decode_ms), and prompt + `generate` tokens (e2e_ms); or `not_measured`, the one-line
    reason the model does not run in `runtime`."""
    import torch

    from archsearch.arch import ArchConfig
    from archsearch.cost.kernel_timing import time_model_once
    from archsearch.runtimes import ExportError

    torch.set_num_threads(threads)
    arch = ArchConfig.from_dict(arch_dict)
    out: dict[str, Any] = {"runtime": runtime}
    try:
        ttft, decode = time_model_once(
            arch, runtime, settings["prompt"], settings["context"], repeats, 0.0, batch=1
        )
    except ExportError as e:
        out["not_measured"] = f"does not run in {runtime}: {e}"
    else:
        out.update(ttft_ms=1e3 * ttft, decode_ms=1e3 * decode)
        out["e2e_ms"] = out["ttft_ms"] + settings["generate"] * out["decode_ms"]
    import ray

    # outside Ray: asking for the runtime context would start a Ray instance
    out["node"] = ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"
    return out


def latency_settings(space: SearchSpace) -> dict[str, int]:
    """Prompt, context and generation lengths from the space's latency objective."""
    settings = {k: METRICS["e2e_ms"].args[k] for k in ("prompt", "generate")}
    settings["context"] = METRICS["decode_ms"].args["context"]
    for o in space.objectives:
        for k, v in o.spec.args:
            if k in settings:
                settings[k] = v
    return settings


def remote_measurer(
    space: SearchSpace, device: str, resource: str | None, repeats: int, runtime: str = "torch"
):
    """A function arch_dict -> ObjectRef of `measure_latency` in `runtime`, placed by
    `resource`."""
    import ray

    task = ray.remote(measure_latency)
    options: dict[str, Any] = {"num_cpus": 1}
    if resource:
        options["resources"] = {resource: 0.001}
        nodes = [n for n in ray.nodes() if n.get("Alive") and resource in n.get("Resources", {})]
        if not nodes:
            from archsearch.errors import UserError

            raise UserError(
                f"no node of the Ray cluster advertises the resource {resource!r}",
                key="latency.resource",
            )
    settings = latency_settings(space)
    return lambda arch_dict: task.options(**options).remote(
        arch_dict, settings, repeats, 1, runtime
    )
