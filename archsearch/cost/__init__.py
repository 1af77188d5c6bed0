"""The cost model: exact counts (params, FLOPs/MACs, cache bytes) and predicted edge latency of
architectures, known before training, vectorised over tables of candidates.

    from archsearch.cost import metric_value
    metric_value(arch, MetricSpec("decode_ms", (("device", "rpi5"), ("context", 2048),
                                                ("precision", "q4"))))

Modules, bottom up:
- `ops`: the candidate table (`Columns`), a `Phase` of a forward, one operation (`Op`);
- `attention`, `linear`, `mcsd`, `ffn`: each family's ops, parameters and decode state, beside
  its siblings (checked against torch's FLOP counter and the real modules);
- `counts`: the whole model's ops, parameters and state;
- `evaluate`: the registry of cost-metric evaluators (`@evaluator`, filled beside each formula)
  and `metric_values`, which dispatches through it;
- `devices`: the device profiles; `model`: model-level sums and the roofline latency model;
- `kernels`, `trees`, `kernel_latency`: the learned kernel-level predictor a calibrated profile
  carries (the catalogue and its stored fit, boosted trees as data, a model's latency as the
  sum of its kernels); `kernel_timing`, `kernel_fit`: timing and fitting it (`calibrate`);
- `breakdown`: what `archsearch cost` reports; `table`: pruning a space by its cost
  constraints; `calibrate`: measuring this machine's profile.
"""

from __future__ import annotations

from archsearch.cost import model
from archsearch.cost.counts import params, state_elements
from archsearch.cost.devices import DeviceProfile, load_device
from archsearch.cost.evaluate import (
    EVALUATORS,
    columns,
    evaluator,
    metric_value,
    metric_values,
    train_flops_per_token,
)
from archsearch.cost.ops import Columns, Op, Phase

__all__ = [
    "EVALUATORS",
    "Columns",
    "DeviceProfile",
    "Op",
    "Phase",
    "columns",
    "evaluator",
    "load_device",
    "metric_value",
    "metric_values",
    "model",
    "params",
    "state_elements",
    "train_flops_per_token",
]
