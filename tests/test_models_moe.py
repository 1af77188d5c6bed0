"""Mixture of experts: top-k routing without dropping tokens, shared experts, the Switch
load-balancing loss, and its weight in the language-model loss."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from archsearch.arch import FFN_KINDS, ArchConfig
from archsearch.models import build_model
from archsearch.models.moe import MoE


def moe_arch(n_experts=4, top_k=2, n_shared=1, kind="swiglu", coef=0.01) -> ArchConfig:
    return ArchConfig.from_dict(
        {
            "vocab_size": 30,
            "d_model": 16,
            "n_layers": 2,
            "attention": {"n_heads": 2},
            "ffn": {"kind": kind},
            "moe": {
                "n_experts": n_experts,
                "top_k": top_k,
                "n_shared": n_shared,
                "d_expert": 12,
                "aux_loss_coef": coef,
            },
        }
    ).resolved()


def dense_reference(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """Every token through every expert, weighted by its top-k softmax gates."""
    probs = torch.softmax(moe.router(x), dim=-1)
    w, e = probs.topk(moe.top_k, dim=-1)
    gates = torch.zeros_like(probs).scatter(-1, e, w)  # [N, E]
    outs = torch.stack([expert(x) for expert in moe.experts], dim=1)  # [N, E, d]
    y = (gates[..., None] * outs).sum(1)
    return y + sum(s(x) for s in moe.shared)


@settings(max_examples=25, deadline=None)
@given(
    n_experts=st.integers(1, 6),
    data=st.data(),
    n_shared=st.integers(0, 2),
    kind=st.sampled_from(FFN_KINDS),
    N=st.integers(1, 40),
)
def test_every_token_is_routed_to_its_top_k_experts(n_experts, data, n_shared, kind, N):
    top_k = data.draw(st.integers(1, n_experts))
    torch.manual_seed(N)
    moe = MoE(moe_arch(n_experts, top_k, n_shared, kind))
    x = torch.randn(N, 16)
    y = moe(x)
    assert sum(moe.last_counts) == N * top_k  # nothing dropped
    assert torch.allclose(y, dense_reference(moe, x), atol=1e-6)
    assert moe.aux_loss.item() > 0


def test_aux_loss_is_the_switch_loss():
    torch.manual_seed(0)
    moe = MoE(moe_arch(n_experts=4, top_k=1, n_shared=0))
    x = torch.randn(64, 16)
    moe(x)
    probs = torch.softmax(moe.router(x), dim=-1)
    f = F.one_hot(probs.argmax(-1), 4).float().mean(0)
    assert moe.aux_loss.item() == pytest.approx(4 * (f * probs.mean(0)).sum().item(), rel=1e-5)
    # all tokens on one expert with all the probability: the loss reaches n_experts
    with torch.no_grad():
        moe.router.weight.zero_()
        moe.router.weight[2, 0] = 100.0
    moe(torch.ones(8, 16))
    assert moe.aux_loss.item() == pytest.approx(4.0, rel=1e-4)


def test_language_model_adds_the_weighted_aux_loss():
    a = moe_arch(coef=0.5)
    torch.manual_seed(0)
    model = build_model(a)
    idx = torch.randint(0, 30, (2, 9))
    logits, loss = model(idx, idx)
    ce = F.cross_entropy(logits.reshape(-1, 30), idx.reshape(-1))
    aux = sum(b.ffn.aux_loss for b in model.blocks)
    assert model.aux_loss.item() == pytest.approx(aux.item())
    assert loss.item() == pytest.approx(ce.item() + 0.5 * aux.item(), rel=1e-6)
    loss.backward()
    assert model.blocks[0].ffn.router.weight.grad.abs().sum() > 0
