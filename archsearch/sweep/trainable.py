"""The Ray Tune function trainables: one sandbox trial of one candidate per call.

A trainable receives `{"arch": ArchConfig dict, "train": TrainConfig dict, "trial_dir": path,
"metrics": [training metric labels]}` and reports through `ray.tune.report`:

- one result per intermediate eval point (`final: False`, with `fraction` and the early-stopping
  metric), which the scheduler (ASHA / median rule) may answer by stopping the trial;
- a last result with `final: True` and the whole trial result as JSON (`result_json`).

A trial the scheduler stops never sends `final: True`: the study records it as PRUNED, never as
COMPLETE with an under-trained loss. The trial directory is keyed by the candidate and its
training settings, so a trial interrupted with its driver resumes from its checkpoint.
"""

from __future__ import annotations

import json
import math
from typing import Any


def node_id() -> str:
    import ray

    try:
        return ray.get_runtime_context().get_node_id()
    except Exception:  # outside Ray (direct calls in tests)
        return "local"


def _numbers(d: dict[str, Any]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in d.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }


def sandbox(config: dict[str, Any]) -> None:
    """Train the candidate with the sandbox trainer (`archsearch.trainers`)."""
    from ray import tune

    from archsearch.arch import ArchConfig
    from archsearch.trainers.config import TrainConfig
    from archsearch.trainers.trial import run_trial

    arch = ArchConfig.from_dict(config["arch"])
    cfg = TrainConfig.from_dict(config["train"])
    node = node_id()

    def report(metrics: dict[str, Any]) -> bool:
        if metrics.get("fraction", 0.0) < 1.0:  # the last point comes with the final result
            tune.report({**_numbers(metrics), "final": False, "node": node})
        return False

    result = run_trial(arch, cfg, run_dir=config["trial_dir"], report=report)
    tune.report(
        {
            **_numbers(result.metrics),
            "final": True,
            "node": node,
            "result_json": json.dumps(result.to_dict()),
        }
    )
