"""Calibrating a device of a Ray cluster: `archsearch.latency.calibrate.calibrate` as a Ray task on
the node that advertises a custom resource (a Raspberry Pi 5 joined with
`ray start --address=HEAD:6379 --resources='{"rpi5": 1}'`), its progress relayed to the driver
through a `ray.util.queue.Queue`, the measured profile returned with a record of the node it was
measured on (`node_record`).

The task takes `threads` CPUs and all of the resource a node advertises, so no measured-latency
task (`latency.resource`, a sliver of it) or second calibration shares the device while it is
timed; it is never retried (a calibration interrupted half way is not a profile). Nothing waits
without bound: a node that advertises the resource must be in the cluster within `wait_s`, and
one that leaves while the task waits for it ends the wait the same way.
"""

from __future__ import annotations

import importlib.metadata
import platform
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from archsearch.errors import UserError
from archsearch.sweep.ray_runtime import ResourceWatch, resource_nodes

__all__ = ["RemoteCalibrationError", "calibrate_on_node", "node_record"]

POLL_S = 0.5  # how often the driver relays progress and checks that the node is still there


class RemoteCalibrationError(UserError):
    """The calibration task failed on its node (one line: the node and the task's error)."""

    exit_code = 1


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def node_record(runtime: str = "torch") -> dict[str, str]:
    """The machine this process runs on, as a measured profile records it (`measured_on`):
    hostname, the processor (`cost.devices.processor`: its name, CPU count, vector extension
    and id), platform, Python, torch, the deploy runtime and archsearch, and the Ray node
    inside a Ray task."""
    import torch

    from archsearch.cost.devices import processor

    record = {
        "hostname": socket.gethostname(),
        **processor(),
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "runtime": runtime if runtime == "torch" else f"{runtime} {_version(runtime)}",
        "archsearch": _version("archsearch"),
    }
    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            record["ray_node"] = ray.get_runtime_context().get_node_id()
    return record


def _calibrate_here(plan: Any, queue: Any, earlier: dict | None = None) -> dict[str, Any]:
    """The Ray task: calibrate this node within `plan` (a `TimingPlan`), relaying progress
    through `queue`, and pool an earlier calibration's raw timings in (`calibrate.pooled`)."""
    from archsearch.latency.calibrate import calibrate, pooled

    def progress(done: int, total: int, step: str) -> None:
        queue.put_nowait((done, total, step))

    result = calibrate(plan, progress=progress)
    result["node"] = node_record(plan.runtime)
    return result if earlier is None else pooled(result, earlier, plan)


def _cluster_resources(ray: Any) -> str:
    names = sorted(k for k in ray.cluster_resources() if not k.startswith("node:"))
    return ", ".join(names) or "none"


def _wait_for_nodes(ray: Any, resource: str, wait_s: float, key: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + wait_s
    while True:
        nodes = resource_nodes(resource)
        if nodes:
            return nodes
        if time.monotonic() >= deadline:
            raise UserError(
                f"no node of the Ray cluster advertises the resource {resource!r} (waited "
                f"{wait_s:g} s; the cluster has: {_cluster_resources(ray)})",
                key=key,
            )
        time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))


def _nodes_with_cpus(
    ray: Any, resource: str, threads: int, wait_s: float, key: str
) -> list[dict[str, Any]]:
    """The nodes that advertise `resource` (waited for up to `wait_s` seconds) and have the
    CPUs for `threads`; a `UserError` naming `key` when none has."""
    nodes = _wait_for_nodes(ray, resource, wait_s, key)
    fitting = [n for n in nodes if n["Resources"].get("CPU", 0) >= threads]
    if not fitting:
        most = max(n["Resources"].get("CPU", 0) for n in nodes)
        raise UserError(
            f"the nodes that advertise the resource {resource!r} have at most {most:g} CPUs; "
            f"threads={threads} needs {threads} (join the device with more `--num-cpus`, or "
            "calibrate with fewer threads)",
            key=key,
        )
    return fitting


def _one_line(err: BaseException) -> str:
    cause = getattr(err, "cause", None) or err
    lines = [ln.strip() for ln in str(cause).splitlines() if ln.strip()]
    text = lines[0] if lines else ""
    return f"{type(cause).__name__}: {text}" if text else type(cause).__name__


def calibrate_on_node(
    resource: str,
    plan: Any,
    *,
    wait_s: float = 10.0,
    progress: Callable[[int, int, str], None] | None = None,
    key: str = "device_resource",
    earlier: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run `calibrate(plan)` (a `latency.calibrate.TimingPlan`) as a Ray task on a node that
    advertises `resource` (Ray must be initialised, e.g. by
    `archsearch.sweep.ray_runtime.ray_session`); returns calibrate's
    result with `node` (`node_record` of the node it ran on) added, and `earlier`'s raw timings
    pooled in on the node (`latency.calibrate.pooled`). Raises a `UserError` naming
    `key` when no node advertises the resource within `wait_s` seconds or none has the CPUs for
    `plan.threads`, and `RemoteCalibrationError` when the task fails."""
    import ray
    from ray.util.queue import Queue

    threads = int(plan.threads)
    fitting = _nodes_with_cpus(ray, resource, threads, wait_s, key)
    amount = min(n["Resources"][resource] for n in fitting)
    queue = Queue(actor_options={"num_cpus": 0})
    task = ray.remote(_calibrate_here).options(
        num_cpus=threads, resources={resource: amount}, max_retries=0
    )
    ref = task.remote(plan, queue, earlier)

    def relay() -> None:
        while not queue.empty():
            item = queue.get_nowait()
            if progress is not None:
                progress(*item)

    watch = ResourceWatch(resource)
    try:
        while not ray.wait([ref], timeout=POLL_S)[0]:
            relay()
            if watch.gone_for() > wait_s:
                ray.cancel(ref, force=True)
                raise RemoteCalibrationError(
                    f"the node that advertised the resource {resource!r} left the cluster "
                    f"before the calibration finished (the cluster has: "
                    f"{_cluster_resources(ray)})",
                    key=key,
                )
        try:
            result = ray.get(ref)
        except ray.exceptions.RayError as err:
            raise RemoteCalibrationError(
                f"the calibration on the node with {resource!r} failed: {_one_line(err)}",
                key=key,
            ) from None
        relay()
    finally:
        ray.kill(queue.actor)
    return result
