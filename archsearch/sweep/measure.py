"""Hardware in the loop: time the real model's prefill and decode as a Ray task.

With `latency.mode=measured`, each candidate's latency objective comes from timing the real
model (timed as calibration times whole models) in a Ray task, in `latency.runtime`: PyTorch
eager, or exported to ONNX Runtime or ExecuTorch (`archsearch.runtimes`). A candidate that does
not run there is measured as `{"not_measured": reason}` (one line), which fails its trial with
that reason. With `latency.resource=NAME` the task runs only on nodes that advertise the custom
resource NAME (e.g. a Raspberry Pi joined with `ray start --address=... --resources='{"rpi5": 1}'`),
one at a time on each (`remote_measurer`). A measurement never waits for good on a device that
left: once no node has advertised NAME for `latency.wait_s` seconds, the measurer says so
(`RemoteMeasurer.lost`), and the sweep fails the trials still waiting with that reason and
gives up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from archsearch.metrics import METRICS
from archsearch.space import SearchSpace
from archsearch.sweep.ray_runtime import ResourceWatch, resource_nodes

MEASURED = ("ttft_ms", "decode_ms", "e2e_ms")  # the latency metrics `measure_latency` times
CHECK_S = 1.0  # the least seconds between two looks at the cluster's nodes (`RemoteMeasurer.lost`)


def measure_latency(
    arch_dict: dict[str, Any],
    settings: dict[str, int],
    repeats: int = 5,
    threads: int = 1,
    runtime: str = "torch",
) -> dict[str, Any]:
    """Wall times of the real model in `runtime`, timed as calibration and the latency
    benchmark time them (`latency.calibrate.timing.time_model`: the least of calls over `SAMPLE_S`
    after a warm-up): prefill of `prompt` tokens (ttft_ms), one decode step at `context` tokens
    (decode_ms), and prompt + `generate` tokens (e2e_ms); or `not_measured`, the one-line
    reason the model does not run in `runtime`."""
    import torch

    from archsearch.arch import ArchConfig
    from archsearch.latency.calibrate.models import WholeModel
    from archsearch.latency.calibrate.plan import TimingPlan
    from archsearch.latency.calibrate.timing import time_model
    from archsearch.runtimes import ExportError

    arch = ArchConfig.from_dict(arch_dict)
    out: dict[str, Any] = {"runtime": runtime}
    before = torch.get_num_threads()  # the caller's, restored: a reused worker or this process
    torch.set_num_threads(threads)
    try:
        model = WholeModel(arch, settings["prompt"], settings["context"])
        how = TimingPlan("measured", runtime=runtime, threads=threads, repeats=repeats)
        ttft, decode = time_model(model, how)
    except ExportError as e:
        out["not_measured"] = f"does not run in {runtime}: {e}"
    else:
        out.update(ttft_ms=1e3 * ttft, decode_ms=1e3 * decode)
        out["e2e_ms"] = out["ttft_ms"] + settings["generate"] * out["decode_ms"]
    finally:
        torch.set_num_threads(before)
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


@dataclass
class RemoteMeasurer:
    """`measurer(arch_dict)` -> ObjectRef of `measure_latency`; `lost()` says why no more
    measurement can run: the nodes that advertise `resource` have been gone from the cluster
    for over `wait_s` seconds (None while one is there, or for the rest of the wait)."""

    submit: Callable[[dict[str, Any]], Any]
    resource: str | None = None
    wait_s: float = 60.0
    _watch: ResourceWatch | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        # None: the sweep's own actor, which fails its calls if it dies
        self._watch = ResourceWatch(self.resource, every_s=CHECK_S) if self.resource else None

    def __call__(self, arch_dict: dict[str, Any]) -> Any:
        return self.submit(arch_dict)

    def lost(self) -> str | None:
        if self._watch is None or self._watch.gone_for() <= self.wait_s:
            return None
        return (
            f"latency measurement lost: no node of the Ray cluster has advertised the resource "
            f"{self.resource!r} for {self.wait_s:g} s (latency.wait_s); the device left the cluster"
        )


def remote_measurer(
    space: SearchSpace,
    device: str,
    resource: str | None,
    repeats: int,
    runtime: str = "torch",
    wait_s: float = 60.0,
) -> RemoteMeasurer:
    """The measurer of a sweep: `measure_latency` in `runtime`, as a Ray task.

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
        return RemoteMeasurer(
            lambda arch_dict: measurer.measure.remote(arch_dict, settings, repeats, 1, runtime)
        )
    nodes = resource_nodes(resource)
    if not nodes:
        from archsearch.errors import UserError

        raise UserError(
            f"no node of the Ray cluster advertises the resource {resource!r}",
            key="latency.resource",
        )
    amount = min(n["Resources"][resource] for n in nodes)
    task = ray.remote(measure_latency).options(num_cpus=0, resources={resource: amount})
    return RemoteMeasurer(
        lambda arch_dict: task.remote(arch_dict, settings, repeats, 1, runtime), resource, wait_s
    )
