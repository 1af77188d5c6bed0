"""What the searcher and the recorder share while a sweep runs (both live in the driver)."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from archsearch.arch import ArchConfig
from archsearch.metrics import MetricSpec
from archsearch.space import SearchSpace
from archsearch.study import StudyWriter

__all__ = ["Launched", "SweepState"]


@dataclass
class Launched:
    """A trial handed to Ray Tune, until it ends."""

    optuna_trial: Any
    arch: ArchConfig
    costs: dict[str, float]
    started: float
    measure_ref: Any = None  # the Ray task timing the real model (latency.mode=measured)
    intermediate: list[list[float]] = field(default_factory=list)
    latest: dict[str, float] = field(default_factory=dict)  # its last eval point (progress)


@dataclass
class SweepState:
    writer: StudyWriter
    space: SearchSpace
    device: str
    devices: list[str]
    train: dict[str, Any]
    run_dir: Path
    target: int  # fully trained trials wanted in the study (`trials=`)
    trained: int = 0  # fully trained trials in the study (earlier runs included)
    max_failures: int = 0  # failed trials in this run before it gives up (0: never)
    failed: int = 0  # failed trials in this run
    gave_up: bool = False
    gave_up_reason: str = ""  # why, when not its failed trials (max_failures): a lost device
    launched: int = 0
    counts: Counter = field(default_factory=Counter)
    by_tune_id: dict[str, Launched] = field(default_factory=dict)
    done_by_hash: dict[str, int] = field(default_factory=dict)  # arch hash -> trial number
    running_by_hash: dict[str, int] = field(default_factory=dict)
    running_elsewhere: int = 0  # trials other drivers of the study are training (`drivers.sync`)
    synced_at: float = 0.0  # when the study was last re-read
    pending_duplicates: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))
    exhausted: bool = False
    es_metric: str | None = None
    stop_reasons: dict[str, str] = field(default_factory=dict)  # tune id -> why a rule stopped it
    measure: Any = None  # callable(arch_dict) -> ObjectRef, for latency.mode=measured
    # trials Tune has ended whose latency is still being measured: tune id -> (result, error)
    awaiting_measurement: dict[str, tuple[dict[str, Any], str | None]] = field(default_factory=dict)
    placement: dict[str, Any] = field(default_factory=dict)  # workers, cpus, gpus per worker
    on_change: Any = None  # progress callback: on_change(state, event, launched)
    started: float = field(default_factory=time.time)
    trial_walls: list[float] = field(default_factory=list)  # wall time of trials ended this run

    @property
    def objective_specs(self) -> list[MetricSpec]:
        return [o.spec.on_device(self.device, only_unset=True) for o in self.space.objectives]

    @property
    def training_labels(self) -> list[str]:
        return sorted({s.measured.label for s in self.objective_specs if s.phase == "train"})

    @property
    def done(self) -> bool:
        """Whether the sweep should launch nothing more."""
        return self.trained >= self.target or self.exhausted or self.gave_up

    def notify(self, event: str = "", launched: Launched | None = None) -> None:
        """Tell the progress display: `event` is one of started, evaluated, finished,
        stopped, failed, or empty for a change of the counts."""
        if self.on_change is not None:
            self.on_change(self, event, launched)
