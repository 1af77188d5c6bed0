"""Sweeps: a parsed search space becomes a stored multi-objective study, with Ray Tune running
the sandbox trials.

- `runner`: `run_sweep(space, cfg)`, the order of work, samplers and early-stopping rules;
- `searcher`: Optuna suggests, the space builds, `pricing` prices and judges constraints, and
  only feasible new architectures reach Tune;
- `recorder`: a Tune callback telling the study how each trial ended (through
  `archsearch.study.StudyWriter`, the one writer of the stored schema);
- `state`: what the searcher and the recorder share; `ray_runtime`: a private local Ray or a
  cluster; `trainable`: the sandbox trial as a Tune trainable; `measure`: latency measured on
  a resource-tagged node; `device_calibration`: `archsearch calibrate` as a Ray task on such a
  node; `progress`: the live progress line; `testing`: stand-in trainables.
"""

from archsearch.sweep.pricing import Priced, price
from archsearch.sweep.runner import check_feasible, run_sweep, train_settings

__all__ = ["Priced", "check_feasible", "price", "run_sweep", "train_settings"]
