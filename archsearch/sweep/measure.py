"""Hardware in the loop: time the real model's prefill and decode as a Ray task.

With `latency.mode=measured`, each candidate's latency objective comes from timing the real
model (timed as calibration times whole models) in a Ray task, in `latency.runtime`: PyTorch
eager, or exported to ONNX Runtime or ExecuTorch (`archsearch.runtimes`). A candidate that does
not run there is measured as `{"not_measured": reason}` (one line), which fails its trial with
that reason. With `latency.resource=NAME` the task runs only on nodes that advertise the custom
resource NAME (e.g. a Raspberry Pi joined with `ray start --address=... --resources='{"rpi5": 1}'`),
one at a time on each (`remote_measurer`).
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


class Measurer:
    """Times candidates one after another (a Ray actor: its calls run in order)."""

    def measure(self, *args: Any) -> dict[str, Any]:
        return measure_latency(*args)


def remote_measurer(
    space: SearchSpace, device: str, resource: str | None, repeats: int, runtime: str = "torch"
):
    """A function arch_dict -> ObjectRef of `measure_latency` in `runtime`.

    A measurement holds no CPU slot of Ray's: a trial may hold every CPU of the node that
    measures it, and Tune frees a trial's CPUs only after it has told the sweep the trial ended,
    so a measurement queued for one would wait on its own trial. It runs one at a time instead:
    with `resource`, as a task holding all of that resource a node advertises (so never beside
    another measurement or a calibration there; several such nodes measure in parallel);
    without, in one actor of the sweep's."""
    import ray

    settings = latency_settings(space)
    if not resource:
        measurer = ray.remote(num_cpus=0)(Measurer).remote()
        return lambda arch_dict: measurer.measure.remote(arch_dict, settings, repeats, 1, runtime)
    nodes = [n for n in ray.nodes() if n.get("Alive") and resource in n.get("Resources", {})]
    if not nodes:
        from archsearch.errors import UserError

        raise UserError(
            f"no node of the Ray cluster advertises the resource {resource!r}",
            key="latency.resource",
        )
    amount = min(n["Resources"][resource] for n in nodes)
    task = ray.remote(measure_latency).options(num_cpus=0, resources={resource: amount})
    return lambda arch_dict: task.remote(arch_dict, settings, repeats, 1, runtime)
