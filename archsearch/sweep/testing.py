"""Stand-in trainables with known behaviour, for testing and benchmarking the orchestration.

They live in the library, not with the tests, because Ray's workers import a trainable by its
path (`trainable=archsearch.sweep.testing:synthetic`), on every node of a cluster.

They follow the contract of `archsearch.sweep.trainable.sandbox` (intermediate results with
`final: False`, then one `final: True` result with the trial result as JSON) but compute a
synthetic validation loss from the architecture instead of training it, so a sweep's
bookkeeping (early stopping, faults, resume, clusters) can be checked in seconds:

- `synthetic`: loss = 2 + 40 / sqrt(non-embedding params) + a fixed offset from the hash at
  seed 0 and a budget of `REFERENCE_TOKENS` tokens (any budget that is not in tokens counts as
  that), shrinking towards its final value over the eval points; another seed adds a fixed
  offset of at most +-0.025 per (architecture, seed), and a token budget T adds
  gap(arch) x ((REFERENCE_TOKENS / T)^0.3 - 1), the gap differing between architectures, so
  replicates and confirmations at a larger budget can reorder them;
  `ARCHSEARCH_SYNTHETIC_SLEEP` seconds (default 0.05) between eval points;
- `faulty`: like `synthetic`, but the trial's number in the study picks a fault (`fault_of`):
  raise an exception, end with a non-finite loss, run out of memory (a real allocation
  failure), have its worker process killed (SIGKILL, as the OOM killer does), or succeed.

Their result's `execution` holds what the trial saw of its placement (the GPU ids Ray assigned,
`CUDA_VISIBLE_DEVICES`) and when it started and ended (epoch seconds), so tests can check how
trials were packed onto declared resources.
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
from typing import Any

FAULTS = ("raise", "nan", "oom", "kill", "ok")


def fault_of(trial_number: int) -> str:
    return FAULTS[trial_number % len(FAULTS)]


REFERENCE_TOKENS = 1e6  # the token budget at which `synthetic_loss` is the plain formula


def synthetic_loss(arch_dict: dict[str, Any], train: dict[str, Any] | None = None) -> float:
    """The synthetic final validation loss of an architecture trained with `train` (a
    TrainConfig dict: its seed and token budget; None: seed 0 at `REFERENCE_TOKENS`)."""
    import hashlib

    from archsearch.arch import ArchConfig

    arch = ArchConfig.from_dict(arch_dict)
    n = _non_embedding_params(arch_dict)
    h = int(arch.arch_hash, 16)
    loss = 2.0 + 40.0 / math.sqrt(n) + (h % 97) / 970.0
    seed = int((train or {}).get("seed", 0))
    if seed:
        digest = hashlib.sha256(f"{arch.arch_hash}:{seed}".encode()).digest()
        loss += (int.from_bytes(digest[:4], "big") % 100 - 49.5) / 2000.0  # never 0
    budget = str((train or {}).get("budget", ""))
    if budget.startswith("tokens:"):
        from archsearch.trainers.config import parse_budget

        gap = 10.0 / math.sqrt(n) * (1.0 + (h % 13) / 13.0)
        loss += gap * ((REFERENCE_TOKENS / parse_budget(budget).amount) ** 0.3 - 1.0)
    return loss


def _non_embedding_params(arch_dict: dict[str, Any]) -> float:
    from archsearch.arch import ArchConfig
    from archsearch.cost import columns, params

    arch = ArchConfig.from_dict(arch_dict)
    return max(float(params(columns(arch))["non_embedding_params"][0]), 1.0)


def _run(config: dict[str, Any], fault: str) -> None:
    import ray
    from ray import tune

    from archsearch.sweep.trainable import node_id

    started = time.time()
    sleep = float(os.environ.get("ARCHSEARCH_SYNTHETIC_SLEEP", "0.05"))
    final = synthetic_loss(config["arch"], config.get("train"))
    flops_per_token = 6.0 * _non_embedding_params(config["arch"])
    node = node_id()
    evals = []
    for i, fraction in enumerate((0.25, 0.5, 0.75)):
        time.sleep(sleep)
        if fault == "raise" and i == 1:
            raise RuntimeError("synthetic failure in the training step")
        if fault == "oom" and i == 1:
            import torch

            torch.empty(2**50, dtype=torch.uint8)  # 1 PiB: the allocator refuses
        if fault == "kill" and i == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        loss = final * (1 + 0.5 * (1 - fraction))
        evals.append(
            {"fraction": fraction, "step": i + 1, "tokens": 1000 * (i + 1), "val_loss": loss}
        )
        tune.report(
            {
                "val_loss": loss,
                "fraction": fraction,
                "final": False,
                "node": node,
                "tokens": 1000 * (i + 1),
            }
        )
    time.sleep(sleep)
    status, reason, metrics = "completed", None, {"val_loss": final, "val_ppl": math.exp(final)}
    if fault == "nan":
        status, reason, metrics = "failed", "non-finite loss (nan) at step 3", {}
    result = {
        "status": status,
        "failure_reason": reason,
        "metrics": metrics,
        "fraction": 1.0,
        "tokens": 4000,
        "flops": 4000.0 * flops_per_token,
        "flops_per_token": flops_per_token,  # 6 N, N the non-embedding parameters
        "steps": 4,
        "budget": "tokens:4000",
        "curve": [[1, 1000, final * 1.3], [4, 4000, final]],
        "evals": [*evals, {"fraction": 1.0, "step": 4, "tokens": 4000, "val_loss": final}],
        "config": config.get("train", {}),
        "execution": {
            "device": "cpu",
            "workers": 1,
            "gpu_ids": [str(i) for i in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "started": started,
            "ended": time.time(),
        },
    }
    tune.report({**metrics, "final": True, "node": node, "result_json": json.dumps(result)})


def synthetic(config: dict[str, Any]) -> None:
    _run(config, "ok")


def faulty(config: dict[str, Any]) -> None:
    _run(config, fault_of(config["optuna_number"]))


def replay(config: dict[str, Any]) -> None:
    """Replay a recorded sandbox trial instead of training: the eval points and the final result
    of the same architecture and settings, from the JSON file named by ARCHSEARCH_REPLAY_CACHE
    (keyed by arch hash; written by benchmarks/bench_search_efficiency.py). Training is seeded
    and deterministic, so this reports what retraining would, in milliseconds."""
    from pathlib import Path

    from ray import tune

    from archsearch.arch import ArchConfig
    from archsearch.sweep.trainable import node_id

    cache = json.loads(Path(os.environ["ARCHSEARCH_REPLAY_CACHE"]).read_text())
    result = cache[ArchConfig.from_dict(config["arch"]).arch_hash]
    node = node_id()
    for point in result["evals"]:
        if point["fraction"] < 1.0:
            tune.report(
                {
                    **{k: v for k, v in point.items() if isinstance(v, (int, float))},
                    "final": False,
                    "node": node,
                }
            )
    tune.report(
        {**result["metrics"], "final": True, "node": node, "result_json": json.dumps(result)}
    )
