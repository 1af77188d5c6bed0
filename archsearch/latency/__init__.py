"""Predicted latency: the learned predictor of a calibrated device profile, its calibration and
its file format, above the exact counts and the roofline of `archsearch.cost`.

    from archsearch.latency import load_device, metric_value
    metric_value(arch, MetricSpec.parse("decode_ms[local,context=2048,precision=fp32]"))

Modules, bottom up:
- `kernels`: the kernel catalogue (features, work terms) read off the cost model's ops;
- `trees`: boosted trees as plain data (numpy to predict, scikit-learn only to fit);
- `predict`: a profile and a table of candidates -> TTFT and decode with their error (numpy
  only: nothing imports torch);
- `profile`: the profile files, one versioned format, one reader (`read_profile`,
  `load_device`) and one writer (`write_profile`);
- `evaluate`: the latency metrics in the cost model's registry, and their errors by name;
- `breakdown`: what `archsearch cost` reports; `prune`: a space pruned by its cost constraints;
- `calibrate`: measuring a machine into a profile: a timing plan, probe -> time -> fit.

Importing this package registers the latency metrics: price through `metric_value(s)` here.
"""

from __future__ import annotations

from archsearch.cost.devices import device_names
from archsearch.cost.evaluate import columns, metric_value, metric_values
from archsearch.latency.evaluate import spec_error, spec_errors
from archsearch.latency.predict import (
    Prediction,
    decode_s,
    e2e_s,
    latency_errors,
    phase_seconds,
    prediction,
    seconds_by_part,
    ttft_s,
)
from archsearch.latency.profile import load_device, read_profile, write_profile

__all__ = [
    "Prediction",
    "columns",
    "decode_s",
    "device_names",
    "e2e_s",
    "latency_errors",
    "load_device",
    "metric_value",
    "metric_values",
    "phase_seconds",
    "prediction",
    "read_profile",
    "seconds_by_part",
    "spec_error",
    "spec_errors",
    "ttft_s",
    "write_profile",
]
