"""`benchmarks/bench_moe_experts.py`: it moves only the routed experts between the two GEMM paths,
and both paths compute the same layer (so the benchmark compares times of one computation)."""

from __future__ import annotations

import math

import torch
from benchmark_scripts import load

from archsearch.models.gemm import Linear
from archsearch.models.moe import MoE

bench = load("bench_moe_experts")


def test_route_on_moves_the_routed_experts_only_and_both_paths_agree():
    torch.manual_seed(0)
    layer = MoE(bench.arch(64, 4, 2, 1.0)).eval()
    layer.shared.append(type(layer.experts[0])(64, 64))  # a shared expert stays as it is
    x = torch.randn(40, 64)
    outputs = {}
    for onednn in (False, True):
        bench.route_on(layer, onednn)
        routed = [m for m in layer.experts.modules() if isinstance(m, Linear)]
        assert routed and all(m.onednn is onednn for m in routed)
        assert layer.router.onednn and all(
            m.onednn for m in layer.shared.modules() if isinstance(m, Linear)
        )
        with torch.inference_mode():
            outputs[onednn] = layer(x)
    torch.testing.assert_close(outputs[True], outputs[False], rtol=1e-4, atol=1e-5)


def test_each_timing_is_a_positive_time_on_both_paths():
    ms = bench.forward_ms(64, 4, 2, 32, 1.0, rounds=1, calls=2)
    assert set(ms) == {"f_linear", "onednn"}
    assert all(0 < v < math.inf for v in ms.values())
