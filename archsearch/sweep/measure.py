"""Hardware in the loop: time the real model's prefill and decode as a Ray task.

With `latency.mode=measured`, each candidate's latency objective comes from timing the real
PyTorch model (median of repeats) in a Ray task; with `latency.resource=NAME` the task runs only
on nodes that advertise the custom resource NAME (e.g. a Raspberry Pi joined with
`ray start --address=... --resources='{"rpi5": 1}'`).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from archsearch.metrics import METRICS
from archsearch.space import SearchSpace


def measure_latency(
    arch_dict: dict[str, Any], settings: dict[str, int], repeats: int = 5, threads: int = 1
) -> dict[str, Any]:
    """Median wall times of the real model: prefill of `prompt` tokens (ttft_ms), one decode
    step at `context` tokens (decode_ms), and prompt + `generate` tokens (e2e_ms)."""
    import torch

    from archsearch.arch import ArchConfig
    from archsearch.models import build_model

    torch.set_num_threads(threads)
    arch = ArchConfig.from_dict(arch_dict)
    model = build_model(arch).eval()
    gen = torch.Generator().manual_seed(0)
    vocab = arch.vocab_size

    def tokens(n: int) -> torch.Tensor:
        return torch.randint(0, vocab, (1, n), generator=gen)

    out: dict[str, Any] = {}
    with torch.inference_mode():
        times = []
        for _ in range(repeats):
            idx = tokens(settings["prompt"])
            t0 = time.perf_counter()
            model.prefill(idx)
            times.append(time.perf_counter() - t0)
        out["ttft_ms"] = 1e3 * statistics.median(times)
        _, state = model.prefill(tokens(settings["context"]))
        tok = tokens(1)[:, 0]
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            _, state = model.step(tok, state)
            times.append(time.perf_counter() - t0)
        out["decode_ms"] = 1e3 * statistics.median(times)
        out["e2e_ms"] = out["ttft_ms"] + settings["generate"] * out["decode_ms"]
    try:
        import ray

        out["node"] = ray.get_runtime_context().get_node_id()
    except Exception:  # outside Ray
        out["node"] = "local"
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


def remote_measurer(space: SearchSpace, device: str, resource: str | None, repeats: int):
    """A function arch_dict -> ObjectRef of `measure_latency`, placed by `resource`."""
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
    return lambda arch_dict: task.options(**options).remote(arch_dict, settings, repeats)
