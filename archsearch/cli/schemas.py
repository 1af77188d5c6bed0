"""Typed schemas of the commands' configs, registered in Hydra's ConfigStore.

Hydra validates every override against these: an unknown key, a value of the wrong type or
outside an enumeration is rejected before any work starts. Most commands' defaults live in
`conf/<command>.yaml`; `train` and `sweep` reuse the library's own configs (`TrainConfig`,
declared once with its defaults, and `archsearch.sweep.settings.SweepConfig`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from omegaconf import MISSING

from archsearch.metrics import PRECISIONS
from archsearch.sweep.settings import RaySection, Runtime, StorageSection, SweepConfig
from archsearch.trainers.config import Choice, TrainConfig


class Format(Choice):
    """How a command prints: rich tables for people, JSON for scripts."""

    table = "table"
    json = "json"


InferencePrecision = Choice.of("InferencePrecision", PRECISIONS, module=__name__)
CalibrationBudget = Choice.of(
    "CalibrationBudget", ("full", "fast", "quick"), module=__name__
)  # latency.calibrate.PLANS


@dataclass
class SpaceConfig:
    search_space: str = MISSING
    space_file: str | None = MISSING
    n: int = MISSING
    seed: int = MISSING
    format: Format = MISSING


@dataclass(frozen=True)
class _TrainCommandKeys:
    arch: str = MISSING
    run_dir: str | None = MISSING
    resume: bool = MISSING
    format: Format = MISSING


@dataclass(frozen=True)
class TrainCmdConfig(TrainConfig, _TrainCommandKeys):
    """`archsearch train`: the command's own keys (first, as `--help` lists them), then every
    `TrainConfig` setting with its default."""

    def trial_config(self) -> TrainConfig:
        """The trial's settings alone (what the trial stores and hashes)."""
        return TrainConfig(
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(TrainConfig)}
        )


@dataclass
class SweepCmdConfig(SweepConfig):
    format: Format = MISSING


@dataclass
class CostConfig:
    arch: str = MISSING
    device: str = MISSING
    precision: InferencePrecision = MISSING
    prompt: int = MISSING
    context: int = MISSING
    generate: int = MISSING
    batch: int = MISSING
    seq_lens: list[int] = field(default_factory=lambda: MISSING)
    plot: str | None = MISSING
    format: Format = MISSING


@dataclass
class PruneConfig:
    search_space: str = MISSING
    space_file: str | None = MISSING
    device: str = MISSING
    limit: int = MISSING
    seed: int = MISSING
    show: int = MISSING
    format: Format = MISSING


@dataclass
class ClusterSection:
    """The Ray cluster a command reaches (`calibrate device_resource=`)."""

    address: str | None = MISSING
    verbose: bool = MISSING


@dataclass
class CalibrateConfig:
    threads: int = MISSING
    runtime: Runtime = MISSING
    repeats: int = MISSING
    budget: CalibrationBudget = MISSING
    output: str | None = MISSING
    name: str | None = MISSING
    device_resource: str | None = MISSING
    wait_s: float = MISSING
    pool: str | None = MISSING
    ray: ClusterSection = field(default_factory=ClusterSection)
    format: Format = MISSING


@dataclass
class ParetoConfig:
    study: str | None = MISSING
    study_name: str | None = MISSING
    device: str | None = MISSING
    x: str | None = MISSING
    y: str | None = MISSING
    z: str | None = MISSING
    reference: list[float] = field(default_factory=lambda: MISSING)
    out: str | None = MISSING
    plots: bool = MISSING
    format: Format = MISSING


@dataclass
class InsightsConfig:
    study: str | None = MISSING
    study_name: str | None = MISSING
    device: str | None = MISSING  # one device, or several: rpi5,jetson_orin_nx
    fronts: str | None = MISSING
    metrics: list[str] = field(default_factory=lambda: MISSING)
    resamples: int = MISSING
    importance_resamples: int = MISSING
    seed: int = MISSING
    out: str | None = MISSING
    plots: bool = MISSING
    format: Format = MISSING


@dataclass
class ExportConfig:
    study: str | None = MISSING
    study_name: str | None = MISSING
    trial: int | None = MISSING
    name: str | None = MISSING
    out: str | None = MISSING
    overwrite: bool = MISSING
    format: Format = MISSING


@dataclass
class DashboardConfig:
    study: str | None = MISSING
    study_name: str | None = MISSING
    host: str = MISSING
    port: int = MISSING
    format: Format = MISSING


@dataclass
class ProfileConfig:
    arch: str = MISSING
    device: str = MISSING
    precision: InferencePrecision = MISSING
    prompt: int = MISSING
    lengths: list[int] = field(default_factory=lambda: MISSING)
    batches: list[int] = field(default_factory=lambda: MISSING)
    repeats: int = MISSING
    threads: int = MISSING
    measure: bool = MISSING
    max_params: str = MISSING
    runtime: Runtime = MISSING
    out: str | None = MISSING
    format: Format = MISSING


@dataclass
class ConfirmConfig:
    """`archsearch confirm`: the study, the confirmation, and the sweep's resource keys."""

    study: str | None = MISSING
    study_name: str | None = MISSING
    run_dir: str | None = MISSING
    storage: StorageSection = field(default_factory=StorageSection)
    factor: float = MISSING
    n: int = MISSING
    data: list[str] | None = MISSING
    seed: int | None = MISSING
    concurrency: int = MISSING
    cpus_per_trial: int = MISSING
    gpus_per_trial: float = MISSING
    workers_per_trial: int = MISSING
    trainable: str = MISSING
    ray: RaySection = field(default_factory=RaySection)
    out: str | None = MISSING
    plots: bool = MISSING
    format: Format = MISSING


@dataclass
class CheckMixerConfig:
    mixer: str | None = MISSING
    d_model: int = MISSING
    tokens: int = MISSING
    batch: int = MISSING
    format: Format = MISSING


SCHEMAS: dict[str, type] = {
    "space": SpaceConfig,
    "train": TrainCmdConfig,
    "sweep": SweepCmdConfig,
    "cost": CostConfig,
    "prune": PruneConfig,
    "calibrate": CalibrateConfig,
    "pareto": ParetoConfig,
    "insights": InsightsConfig,
    "export": ExportConfig,
    "dashboard": DashboardConfig,
    "profile": ProfileConfig,
    "check_mixer": CheckMixerConfig,
    "confirm": ConfirmConfig,
}
