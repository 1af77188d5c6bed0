"""The sweep's settings as OmegaConf structured configs: `SweepConfig` and its sections.

`archsearch sweep` composes them with Hydra (`archsearch.cli.schemas` adds the output format;
the defaults and their documentation live in `conf/sweep.yaml`), and `run_sweep` reads them.
Enumerated settings are `Choice` enums, so Hydra rejects an unknown sampler, early-stopping
rule or latency mode before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from archsearch.trainers.config import Choice


class Sampler(Choice):
    """Multi-objective samplers, seeded: Optuna's (`gp` is its Gaussian-process sampler,
    log-EHVI over every objective), and expected hypervolume improvement over the cost model's
    known objectives (`sweep/ehvi.py`); `auto` is `ehvi` where it applies (one objective that
    training measures, latencies predicted), else `tpe`."""

    auto = "auto"
    tpe = "tpe"
    nsga2 = "nsga2"
    random = "random"
    ehvi = "ehvi"
    gp = "gp"


class EarlyStopping(Choice):
    """Ray Tune's rule for stopping trials early: ASHA or the median rule on the first training
    objective, or `pareto` on the whole objective vector (`sweep/pareto_stopping.py`)."""

    asha = "asha"
    median = "median"
    pareto = "pareto"
    none = "none"


class LatencyMode(Choice):
    """Latency objectives predicted by the cost model, or measured on the real model."""

    predicted = "predicted"
    measured = "measured"


# where a model is timed: `archsearch.runtimes.RUNTIMES`, named here without importing torch
# (tests/test_runtimes.py checks they agree); the command line's `runtime=` uses it too
Runtime = Choice.of("Runtime", ("torch", "onnxruntime", "executorch"), module=__name__)


@dataclass
class StorageSection:
    url: str | None = None


@dataclass
class RaySection:
    address: str | None = None
    num_cpus: int | None = None
    num_gpus: float | None = None
    verbose: bool = False


@dataclass
class LatencySection:
    mode: LatencyMode = LatencyMode.predicted
    resource: str | None = None
    repeats: int = 5
    runtime: Runtime = Runtime.torch  # type: ignore[attr-defined]
    wait_s: float = 60.0  # with `resource`: seconds its nodes may be gone before the sweep gives up


@dataclass
class ConfirmSection:
    """A confirmation at the end of the sweep (`archsearch.sweep.retrain`): the front and `n`
    trials spread over the ranking trained at `factor` x the budget (0: none)."""

    factor: float = 0.0
    n: int = 4


@dataclass
class SweepConfig:
    search_space: str = MISSING
    space_file: str | None = MISSING
    device: str = MISSING
    trials: int = MISSING
    sampler: Sampler = MISSING
    seed: int = MISSING
    study_name: str | None = MISSING
    run_dir: str | None = MISSING
    concurrency: int = MISSING
    cpus_per_trial: int = MISSING
    gpus_per_trial: float = MISSING
    workers_per_trial: int = MISSING
    early_stopping: EarlyStopping = MISSING
    budget: str | None = MISSING
    max_failures: int = MISSING
    reference: list[float] | None = MISSING
    replicates: int | None = None  # seeds per front architecture (None: the space's, else 1)
    train: dict[str, Any] = field(default_factory=dict)  # checked by TrainConfig.from_dict
    storage: StorageSection = field(default_factory=StorageSection)
    ray: RaySection = field(default_factory=RaySection)
    latency: LatencySection = field(default_factory=LatencySection)
    confirm: ConfirmSection = field(default_factory=ConfirmSection)
    trainable: str = MISSING
