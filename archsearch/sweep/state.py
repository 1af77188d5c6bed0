"""What the searcher and the recorder share while a sweep runs (both live in the driver)."""

from __future__ import annotations

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


@dataclass
class SweepState:
    writer: StudyWriter
    space: SearchSpace
    device: str
    devices: list[str]
    train: dict[str, Any]
    run_dir: Path
    target: int  # trained trials wanted in the study
    trained: int = 0  # trained trials in the study (earlier runs included)
    launched: int = 0
    counts: Counter = field(default_factory=Counter)
    by_tune_id: dict[str, Launched] = field(default_factory=dict)
    done_by_hash: dict[str, int] = field(default_factory=dict)  # arch hash -> trial number
    running_by_hash: dict[str, int] = field(default_factory=dict)
    pending_duplicates: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))
    exhausted: bool = False
    es_metric: str | None = None
    measure: Any = None  # callable(arch_dict) -> ObjectRef, for latency.mode=measured
    on_change: Any = None  # progress callback

    @property
    def objective_specs(self) -> list[MetricSpec]:
        return [o.spec.on_device(self.device, only_unset=True) for o in self.space.objectives]

    @property
    def training_labels(self) -> list[str]:
        return [s.label for s in self.objective_specs if s.phase == "train"]

    def notify(self) -> None:
        if self.on_change is not None:
            self.on_change(self)
