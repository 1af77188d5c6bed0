"""Typed schemas of the commands' configs (their defaults live in `conf/<command>.yaml`).

Hydra validates every override against these: an unknown key or a value of the wrong type is
rejected before any work starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING


@dataclass
class SpaceConfig:
    search_space: str = MISSING
    space_file: str | None = MISSING
    n: int = MISSING
    seed: int = MISSING
    format: str = MISSING


@dataclass
class TrainCmdConfig:
    """`archsearch train`: the trial settings of `archsearch.trainers.TrainConfig` (same names;
    tests/test_trainers_cli.py checks they match) plus what the command itself needs."""

    arch: str = MISSING
    run_dir: str | None = MISSING
    resume: bool = MISSING
    format: str = MISSING
    budget: str = MISSING
    batch_size: int = MISSING
    seq_len: int = MISSING
    lr: float = MISSING
    min_lr: float | None = MISSING
    weight_decay: float = MISSING
    beta1: float = MISSING
    beta2: float = MISSING
    grad_clip: float = MISSING
    schedule: str = MISSING
    warmup: float = MISSING
    decay: float = MISSING
    constant: float = MISSING
    precision: str = MISSING
    threads: int = MISSING
    seed: int = MISSING
    data: list[str] = field(default_factory=lambda: MISSING)
    tokenizer: str = MISSING
    bpe_vocab_size: int | None = MISSING
    val_fraction: float = MISSING
    cache_dir: str | None = MISSING
    eval_at: list[float] = field(default_factory=lambda: MISSING)
    eval_batches: int = MISSING
    log_every: int = MISSING
    objective: str = MISSING
    probe_tasks: list[str] = field(default_factory=lambda: MISSING)
    probe_steps: int = MISSING
    probe_batch_size: int = MISSING
    probe_seq_len: int = MISSING
    probe_vocab: int = MISSING
    probe_eval_size: int = MISSING
    probe_untied_head: bool = MISSING
    keep_checkpoint: bool = MISSING


@dataclass
class StorageSection:
    url: str | None = None


@dataclass
class RaySection:
    address: str | None = None
    num_cpus: int | None = None
    verbose: bool = False


@dataclass
class LatencySection:
    mode: str = "predicted"
    resource: str | None = None
    repeats: int = 5


@dataclass
class SweepConfig:
    search_space: str = MISSING
    space_file: str | None = MISSING
    device: str = MISSING
    trials: int = MISSING
    sampler: str = MISSING
    seed: int = MISSING
    study_name: str | None = MISSING
    run_dir: str | None = MISSING
    concurrency: int = MISSING
    cpus_per_trial: int = MISSING
    early_stopping: str = MISSING
    budget: str | None = MISSING
    train: dict[str, Any] = field(default_factory=dict)
    storage: StorageSection = field(default_factory=StorageSection)
    ray: RaySection = field(default_factory=RaySection)
    latency: LatencySection = field(default_factory=LatencySection)
    trainable: str = MISSING
    format: str = MISSING


@dataclass
class CostConfig:
    arch: str = MISSING
    device: str = MISSING
    precision: str = MISSING
    prompt: int = MISSING
    context: int = MISSING
    generate: int = MISSING
    batch: int = MISSING
    seq_lens: list[int] = field(default_factory=lambda: MISSING)
    plot: str | None = MISSING
    format: str = MISSING


@dataclass
class PruneConfig:
    search_space: str = MISSING
    space_file: str | None = MISSING
    device: str = MISSING
    limit: int = MISSING
    seed: int = MISSING
    show: int = MISSING
    format: str = MISSING


@dataclass
class CalibrateConfig:
    threads: int = MISSING
    repeats: int = MISSING
    quick: bool = MISSING
    output: str | None = MISSING
    format: str = MISSING


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
    format: str = MISSING


@dataclass
class ExportConfig:
    study: str | None = MISSING
    study_name: str | None = MISSING
    trial: int | None = MISSING
    name: str | None = MISSING
    out: str | None = MISSING
    format: str = MISSING


@dataclass
class DashboardConfig:
    study: str | None = MISSING
    study_name: str | None = MISSING
    host: str = MISSING
    port: int = MISSING
    format: str = MISSING


@dataclass
class ProfileConfig:
    arch: str = MISSING
    device: str = MISSING
    precision: str = MISSING
    prompt: int = MISSING
    lengths: list[int] = field(default_factory=lambda: MISSING)
    batches: list[int] = field(default_factory=lambda: MISSING)
    repeats: int = MISSING
    threads: int = MISSING
    measure: bool = MISSING
    max_params: str = MISSING
    out: str | None = MISSING
    format: str = MISSING


SCHEMAS: dict[str, type] = {
    "space": SpaceConfig,
    "train": TrainCmdConfig,
    "sweep": SweepConfig,
    "cost": CostConfig,
    "prune": PruneConfig,
    "calibrate": CalibrateConfig,
    "pareto": ParetoConfig,
    "export": ExportConfig,
    "dashboard": DashboardConfig,
    "profile": ProfileConfig,
}
