"""`benchmarks/bench_profile_on_calibration.py`: a profile's predictions of a calibration's timed
whole models, scored against their measured seconds."""

from __future__ import annotations

import numpy as np
import pytest
from benchmark_scripts import load

from archsearch.latency import load_device
from archsearch.latency.calibrate.models import glue_models, held_out_models

bench = load("bench_profile_on_calibration")


def test_scores_read_the_ratio_of_each_quantity():
    measured = np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [1.0, 2.0]])
    predicted = np.array([[1.05, 1.0], [0.95, 1.0], [1.5, 2.1], [1.0, 1.0]])
    got = bench.scores(predicted, measured)
    assert got["ttft"]["within_10"] == 0.75 and got["decode"]["within_10"] == 0.25
    assert got["ttft"]["median_ratio"] == pytest.approx(1.025)
    assert got["decode"]["mape_percent"] == pytest.approx(100 * (0.5 * 3 + 0.05) / 4)


@pytest.mark.parametrize("factor", [1.0, 3.0])
def test_a_profile_priced_on_timings_it_predicts_scores_them(factor):
    """Timings a profile predicts exactly read 100% within +-10%; three times as slow (another
    machine's), none, at a ratio of a third."""
    device = load_device("local")
    raw = {}
    for part, models in (("held_out", held_out_models()[:2]), ("glue", glue_models()[:3])):
        raw[part] = [
            {**m.setting(), "measured_s": [factor * t for t in m.predicted(device)]} for m in models
        ]
    got = bench.price(raw, device)
    assert {part: got[part]["n"] for part in got} == {"held_out": 2, "glue": 3}
    for part in got:
        for q in bench.QUANTITIES:
            assert got[part][q]["within_10"] == (1.0 if factor == 1.0 else 0.0)
            assert got[part][q]["median_ratio"] == pytest.approx(1 / factor)
