"""`archsearch.models.gemm.Linear`: the oneDNN GEMM path computes what F.linear computes, with
the same gradients and the same FLOP count, and falls back where it should."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from archsearch.models import gemm
from archsearch.models.gemm import Linear


@pytest.fixture
def onednn():
    before = gemm.ENABLED
    gemm.set_enabled(True)
    yield
    gemm.set_enabled(before)


def used_ops(fn) -> set[str]:
    with torch.profiler.profile() as prof:
        fn()
    return {e.key for e in prof.key_averages()}


@settings(max_examples=25, deadline=None)
@given(
    lead=st.lists(st.integers(1, 9), min_size=1, max_size=3),
    n_in=st.integers(1, 40),
    n_out=st.integers(1, 40),
    transposed=st.booleans(),
)
def test_matches_f_linear_with_gradients(lead, n_in, n_out, transposed):
    before = gemm.ENABLED
    gemm.set_enabled(True)
    try:
        check_against_f_linear(lead, n_in, n_out, transposed)
    finally:
        gemm.set_enabled(before)


def check_against_f_linear(lead, n_in, n_out, transposed):
    torch.manual_seed(0)
    layer = Linear(n_in, n_out)
    x = torch.randn(*lead, n_in) if not transposed else torch.randn(n_in, *lead).movedim(0, -1)
    x.requires_grad_(True)
    y = layer(x)
    y.backward(torch.ones_like(y))
    ref_x = x.detach().clone().requires_grad_(True)
    w = layer.weight.detach().clone().requires_grad_(True)
    ref = F.linear(ref_x, w)
    ref.backward(torch.ones_like(ref))
    tol = 1e-5 * n_in
    assert y.shape == ref.shape and torch.allclose(y, ref, atol=tol)
    assert torch.allclose(x.grad, ref_x.grad, atol=tol)
    assert torch.allclose(layer.weight.grad, w.grad, atol=tol * max(lead))


def test_uses_onednn_for_many_rows_and_falls_back_otherwise(onednn):
    layer = Linear(16, 8)
    many = torch.randn(gemm.MIN_ROWS, 16)
    assert "mkldnn::_linear_pointwise" in used_ops(lambda: layer(many))
    assert "mkldnn::_linear_pointwise" not in used_ops(lambda: layer(many[:1]))
    double = Linear(16, 8).double()
    assert "mkldnn::_linear_pointwise" not in used_ops(lambda: double(many.double()))
    gemm.set_enabled(False)
    assert "mkldnn::_linear_pointwise" not in used_ops(lambda: layer(many))


def test_flop_counter_counts_the_same_as_mm(onednn):
    layer = Linear(32, 48)
    x = torch.randn(4, 10, 32, requires_grad=True)
    counts = []
    for enabled in (True, False):
        gemm.set_enabled(enabled)
        with FlopCounterMode(display=False) as counter:
            layer(x).sum().backward()
        counts.append(counter.get_total_flops())
    assert counts[0] == counts[1] == 3 * 2 * 40 * 32 * 48


def test_no_bias_allowed():
    with pytest.raises(ValueError):
        Linear(4, 4, bias=True)


def test_moe_keeps_routed_experts_on_f_linear():
    from archsearch.arch import ArchConfig
    from archsearch.models.moe import MoE

    a = ArchConfig.from_dict(
        {
            "vocab_size": 8,
            "d_model": 16,
            "n_layers": 1,
            "attention": {"n_heads": 2},
            "moe": {"n_experts": 3, "top_k": 1, "n_shared": 1, "d_expert": 8},
        }
    ).resolved()
    moe = MoE(a)
    routed = [m for m in moe.experts.modules() if isinstance(m, Linear)]
    shared = [m for m in moe.shared.modules() if isinstance(m, Linear)]
    assert routed and not any(m.onednn for m in routed)
    assert shared and all(m.onednn for m in shared) and moe.router.onednn
