"""The chunked training forms equal the plain references: the gated and delta recurrences of
`archsearch.models.linear.common`, every linear family, and MCSD's literal T x T form."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from archsearch.arch import LINEAR_FAMILIES, ArchConfig
from archsearch.models.linear import LINEAR_MIXERS
from archsearch.models.linear.common import (
    LOG_DECAY_MIN,
    chunk_delta,
    chunk_gated,
    recurrent_delta,
    recurrent_gated,
)
from archsearch.models.mcsd import MCSD, decay_alphas, slope_betas

TOL = 1e-4


def close(a: torch.Tensor, b: torch.Tensor, tol: float = TOL) -> bool:
    """Max abs difference relative to the magnitude of b (at least 1)."""
    return (a - b).abs().max().item() <= tol * max(1.0, b.abs().max().item())


def inputs(seed, B, H, T, dk, dv, decay):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(B, H, T, dk, generator=g), torch.randn(B, H, T, dk, generator=g)
    v = torch.randn(B, H, T, dv, generator=g)
    s0 = torch.randn(B, H, dk, dv, generator=g)
    if decay == "none":
        lg = None
    elif decay == "scalar":
        lg = -torch.rand(B, H, T, generator=g) * 2
    else:
        lg = -torch.rand(B, H, T, dk, generator=g) * 3
    return q, k, v, lg, s0


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    T=st.integers(1, 150),
    dk=st.integers(1, 9),
    dv=st.integers(1, 9),
    decay=st.sampled_from(["none", "scalar", "channel"]),
    strict=st.booleans(),
    with_state=st.booleans(),
)
def test_chunked_gated_recurrence_equals_reference(seed, T, dk, dv, decay, strict, with_state):
    q, k, v, g, s0 = inputs(seed, 2, 2, T, dk, dv, decay)
    s0 = s0 if with_state else None
    o_ref, s_ref = recurrent_gated(q, k, v, g, strict=strict, state=s0)
    o, s = chunk_gated(q, k, v, g, strict=strict, state=s0)
    assert o.shape == o_ref.shape and s.shape == s_ref.shape
    assert close(o, o_ref) and close(s, s_ref)


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    T=st.integers(1, 150),
    dk=st.integers(1, 9),
    dv=st.integers(1, 9),
    gated=st.booleans(),
    with_state=st.booleans(),
)
def test_chunked_delta_rule_equals_reference(seed, T, dk, dv, gated, with_state):
    q, k, v, g, s0 = inputs(seed, 2, 2, T, dk, dv, "scalar" if gated else "none")
    k = F.normalize(k, dim=-1)
    beta = torch.rand(2, 2, T, generator=torch.Generator().manual_seed(seed + 1))
    s0 = s0 if with_state else None
    o_ref, s_ref = recurrent_delta(q, k, v, beta, g, state=s0)
    o, s = chunk_delta(q, k, v, beta, g, state=s0)
    assert close(o, o_ref) and close(s, s_ref)


def test_delta_rule_is_the_table_1_update():
    """One step of the delta rule, written out: M = (I - β k^T k) M + β k^T v, o = q M."""
    q, k, v, _, s0 = inputs(3, 1, 1, 1, 4, 3, "none")
    k = F.normalize(k, dim=-1)
    beta = torch.tensor([[[0.7]]])
    o, s = recurrent_delta(q, k, v, beta, None, state=s0)
    kk, vv, M = k[0, 0, 0][None], v[0, 0, 0][None], s0[0, 0]
    M1 = (torch.eye(4) - 0.7 * kk.T @ kk) @ M + 0.7 * kk.T @ vv
    assert torch.allclose(s[0, 0], M1, atol=1e-6)
    assert torch.allclose(o[0, 0, 0], q[0, 0, 0] @ M1, atol=1e-6)


def test_strong_per_channel_decay_is_clamped_and_stays_finite():
    """Decays far below LOG_DECAY_MIN (which would overflow the sub-chunk factorisation) are
    clamped identically in both forms."""
    q, k, v, _, _ = inputs(0, 1, 2, 130, 4, 3, "none")
    g = torch.full((1, 2, 130, 4), -60.0, requires_grad=True)
    o, _ = chunk_gated(q, k, v, g)
    o_ref, _ = recurrent_gated(q, k, v, g.detach())
    assert torch.isfinite(o).all() and close(o, o_ref)
    o.sum().backward()
    assert torch.isfinite(g.grad).all()
    # with the clamp, the state keeps exp(LOG_DECAY_MIN) of the previous token
    _, s1 = recurrent_gated(q[:, :, :1], k[:, :, :1], v[:, :, :1], g[:, :, :1].detach())
    _, s2 = recurrent_gated(q[:, :, :2], k[:, :, :2], v[:, :, :2], g[:, :, :2].detach())
    kv2 = k[:, :, 1, :, None] * v[:, :, 1, None, :]
    assert torch.allclose(s2 - kv2, s1 * torch.exp(torch.tensor(LOG_DECAY_MIN)), atol=1e-6)


def linear_arch(family: str, **linear) -> ArchConfig:
    spec = {"family": family, "n_heads": 2, "key_dim": 8, "gate_rank": 4, **linear}
    return ArchConfig.from_dict(
        {
            "vocab_size": 40,
            "d_model": 32,
            "n_layers": 1,
            "layers": {"mixer": "linear"},
            "linear": spec,
        }
    ).resolved()


VARIANTS = [(f, {}) for f in LINEAR_FAMILIES] + [
    ("linear_attention", {"feature_map": "elu", "normalize": True}),
    ("linear_attention", {"feature_map": "relu", "output_gate": False}),
    ("deltanet", {"conv_size": 0}),
    ("mamba2", {"conv_size": 0, "output_gate": False}),
    ("rwkv6", {"output_gate": False}),
]


@pytest.mark.parametrize(("family", "extra"), VARIANTS, ids=lambda v: str(v))
def test_each_family_chunked_equals_reference_and_continues_from_a_state(family, extra):
    torch.manual_seed(0)
    mixer = LINEAR_MIXERS[family](linear_arch(family, **extra))
    x = torch.randn(2, 100, 32)
    y_ref, s_ref = mixer.reference(x)
    y, s = mixer.prefill(x, None, 0)
    assert close(y, y_ref) and close(mixer(x), y_ref)
    assert s.keys() == s_ref.keys() == mixer.state_shapes().keys()
    for key in s:
        assert s[key].shape[1:] == mixer.state_shapes()[key]
        assert close(s[key], s_ref[key])
    # prefill in two pieces (chunked, from a state) = one piece
    y1, s1 = mixer.prefill(x[:, :37], mixer.init_state(2), 0)
    y2, s2 = mixer.prefill(x[:, 37:], s1, 37)
    assert close(torch.cat([y1, y2], dim=1), y_ref)
    assert all(close(s2[key], s_ref[key]) for key in s_ref)


def test_mcsd_constants_are_the_papers():
    assert torch.allclose(slope_betas(4), torch.tensor([2**-2, 2**-4, 2**-6, 2**-8]).double())
    assert torch.allclose(decay_alphas(3), torch.tensor([1 - 2**-5, 1 - 2**-6, 1 - 2**-7]).double())


def mcsd(C=4, d=32) -> MCSD:
    torch.manual_seed(0)
    a = ArchConfig.from_dict(
        {
            "vocab_size": 40,
            "d_model": d,
            "n_layers": 1,
            "layers": {"mixer": "mcsd"},
            "mcsd": {"n_channels": C},
        }
    )
    m = MCSD(a.resolved())
    with torch.no_grad():  # a non-trivial norm scale, so the test sees it
        m.norm_weight.uniform_(0.5, 1.5)
    return m


def test_mcsd_slope_matrix_rows():
    """Eq. 3: the first row picks the current token; row t weights earlier tokens s < t by
    softmax(-(t - s) β), never the current one."""
    m = mcsd(C=2)
    W_s, W_d = m.matrices(5)
    beta = slope_betas(2)
    assert W_s[:, 0, 0].tolist() == [1.0, 1.0] and W_d[:, 0, 0].tolist() == [1.0, 1.0]
    w = torch.exp(-beta[1] * torch.tensor([3.0, 2.0, 1.0]).double())
    assert torch.allclose(W_s[1, 3, :3], w / w.sum())
    assert (W_s.triu(1) == 0).all() and (W_s.diagonal(dim1=-2, dim2=-1)[:, 1:] == 0).all()
    assert torch.allclose(W_s.sum(-1), torch.ones(2, 5).double())
    alpha = decay_alphas(2)[0]
    assert torch.allclose(W_d[0, 4, :4], alpha ** torch.tensor([4.0, 3.0, 2.0, 1.0]).double())


@pytest.mark.parametrize("T", [1, 2, 63, 64, 65, 200])
def test_mcsd_chunked_equals_literal_matrix_form(T):
    m = mcsd()
    x = torch.randn(2, T, 32)
    assert close(m(x), m.reference(x))


def test_mcsd_recurrence_equals_matrix_form_token_by_token():
    m = mcsd(C=8, d=64)
    x = torch.randn(2, 90, 64)
    ref = m.reference(x)
    state, outs = m.init_state(2), []
    for t in range(90):
        y, state = m.step(x[:, t], state, t)
        outs.append(y)
    assert close(torch.stack(outs, dim=1), ref)
    # and a prefill that stops mid-chunk hands over the same state
    _, s = m.prefill(x[:, :50], m.init_state(2), 0)
    y, _ = m.prefill(x[:, 50:], s, 50)
    assert close(y, ref[:, 50:])


def largest_saved_tensor(fn, *args) -> int:
    """The largest number of elements of a tensor autograd saves while running fn(*args)."""
    sizes = []

    def pack(t):
        sizes.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args)
    return max(sizes)


@pytest.mark.slow
def test_training_forms_keep_linear_memory():
    """The largest tensor autograd keeps grows 4x from T = 512 to 2048 (linear), never 16x."""

    def growth(fn) -> float:
        small, large = (largest_saved_tensor(fn, torch.randn(1, T, 32)) for T in (512, 2048))
        return large / small

    for family in LINEAR_FAMILIES:
        mixer = LINEAR_MIXERS[family](linear_arch(family))
        assert growth(mixer) <= 4.0, family
    m = mcsd()
    assert growth(m) <= 4.0
    # the check does see quadratic tensors: the literal matrix form keeps C x T x T
    assert growth(m.reference) >= 15.0
