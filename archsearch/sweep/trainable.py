"""The Ray Tune function trainables: one sandbox trial of one candidate per call.

A trainable receives `{"arch": ArchConfig dict, "train": TrainConfig dict, "trial_dir": path,
"metrics": [training metric labels]}` and reports through `ray.tune.report`:

- one result per intermediate eval point (`final: False`, with `fraction` and the early-stopping
  metric), which the scheduler (ASHA / median rule) may answer by stopping the trial;
- a last result with `final: True` and the whole trial result as JSON (`result_json`).

A trial the scheduler stops never sends `final: True`: the study records it as PRUNED, never as
COMPLETE with an under-trained loss. The trial directory is keyed by the candidate and its
training settings, so a trial interrupted with its driver resumes from its checkpoint.

`config["placement"]` says how the sweep placed the trial: `{"workers": N, "cpus": c, "gpus": g}`
per worker. One worker trains in the Tune trial's own process, on the accelerator Ray assigned
to it. N workers train one trial data-parallel with Ray Train's `TorchTrainer` (DDP: gloo on CPU,
NCCL on GPU), started from the Tune trial as Ray Train V2 runs a distributed job inside a Tune
sweep: the Tune trial is the Train driver, its N workers get one placement group (strategy PACK:
on one node where they fit), and `TuneReportCallback` hands rank 0's reports to Tune, so the
early-stopping rule, the recorder and resume see the same results as from one worker. Stopping
the Tune trial ends its driver and with it the Train controller and workers.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
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


def _train(config: dict[str, Any], send, gpu_index=None) -> None:
    """Run the trial of `config` here, sending intermediate and final results with `send`."""
    import ray

    from archsearch.arch import ArchConfig
    from archsearch.trainers.config import TrainConfig
    from archsearch.trainers.trial import Placement, run_trial

    arch = ArchConfig.from_dict(config["arch"])
    cfg = TrainConfig.from_dict(config["train"])
    node = node_id()
    gpu_ids = tuple(str(i) for i in ray.get_gpu_ids()) if ray.is_initialized() else None
    placement = Placement(gpu_ids=gpu_ids, cuda_index=gpu_index)

    def report(metrics: dict[str, Any]) -> bool:
        if metrics.get("fraction", 0.0) < 1.0:  # the last point comes with the final result
            send({**_numbers(metrics), "final": False, "node": node})
        return False

    result = run_trial(arch, cfg, run_dir=config["trial_dir"], report=report, placement=placement)
    final = {**_numbers(result.metrics), "final": True, "node": node}
    send({**final, "result_json": json.dumps(result.to_dict())})


def sandbox(config: dict[str, Any]) -> None:
    """Train the candidate with the sandbox trainer (`archsearch.trainers`): in this process,
    or data-parallel by `config["placement"]["workers"]` Ray Train workers."""
    from ray import tune

    placement = config.get("placement") or {}
    if placement.get("workers", 1) > 1:
        fit_data_parallel(config, in_tune=True)
    else:
        _train(config, tune.report)


def fit_data_parallel(config: dict[str, Any], *, in_tune: bool = False) -> dict[str, Any]:
    """Train the trial of `config` with `placement.workers` Ray Train workers (TorchTrainer,
    DDP) and return the trial result (as rank 0 saved it in the trial directory, which every
    worker reaches, as Ray Train's own storage requires). Inside a Tune trial (`in_tune`),
    every report also goes to Tune. Ray must be running."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    placement = config["placement"]
    per_worker = {"CPU": float(placement.get("cpus", 1))}
    gpus = float(placement.get("gpus", 0))
    if gpus:
        per_worker["GPU"] = gpus
    callbacks = []
    if in_tune:
        from ray.tune.integration.ray_train import TuneReportCallback

        callbacks.append(TuneReportCallback())
    trainer = TorchTrainer(
        _data_parallel_worker,
        train_loop_config=config,
        scaling_config=ScalingConfig(
            num_workers=int(placement["workers"]),
            use_gpu=gpus > 0,  # TorchConfig's backend follows: NCCL on GPU, gloo on CPU
            resources_per_worker=per_worker,
            placement_strategy="PACK",
        ),
        run_config=RunConfig(
            name=f"train-{time.strftime('%Y%m%d-%H%M%S')}-{time.monotonic_ns() % 10**6}",
            storage_path=str(Path(config["trial_dir"]).resolve() / "ray-train"),
            callbacks=callbacks,
            failure_config=FailureConfig(max_failures=0),
        ),
    )
    trainer.fit()  # raises when a worker failed
    return json.loads((Path(config["trial_dir"]) / "result.json").read_text())


def _data_parallel_worker(config: dict[str, Any]) -> None:
    """One Ray Train worker: the process group is up (DDP); rank 0's reports reach Tune, and
    every worker reports at the same points (Ray Train's reports are a barrier)."""
    import ray.train
    from ray.train.torch import get_device

    device = get_device()
    _train(config, ray.train.report, device.index if device.type == "cuda" else None)
