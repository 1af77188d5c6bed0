"""The analytic counts agree exactly with the real modules: parameters with sum(p.numel()),
FLOPs with torch's FlopCounterMode (MATH SDPA backend) in every phase, state bytes with the
tensors the decode path holds; and the published numbers of [PLM], [MCSD] and [Linear-MoE] are reproduced."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from archsearch.arch import (
    FFN_KINDS,
    LINEAR_FAMILIES,
    ArchConfig,
    AttentionConfig,
    FFNConfig,
    LayersConfig,
    LinearConfig,
    MCSDConfig,
    MoEConfig,
    load_arch,
)
from archsearch.cost import model as cm
from archsearch.cost.counts import model_ops, params, recurrent_state_elements, state_elements
from archsearch.cost.ops import Columns, Phase
from archsearch.models import build_model


def counted(fn) -> int:
    """FLOPs torch counts, except grouped-convolution backward, which FlopCounterMode
    over-counts (its conv_backward formula ignores `groups`); that term is checked apart."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        fn()
    return sum(
        v for k, v in fc.get_flop_counts()["Global"].items() if "convolution_backward" not in str(k)
    )


def predicted_conv_backward(c: Columns, phase: Phase) -> float:
    return sum(
        float((n * op.flops * op.backward)[0])
        for n, op in model_ops(c, phase)
        if op.name.endswith("conv")
    )


def check_exact(arch: ArchConfig, T: int = 70, n0: int = 40, B: int = 2) -> None:
    torch.manual_seed(0)
    model = build_model(arch)
    c = Columns.from_archs([arch])
    idx = torch.randint(0, arch.vocab_size, (B, T))
    assert params(c)["params"][0] == sum(p.numel() for p in model.parameters())
    assert params(c)["active_params"][0] == model.num_active_params()
    assert params(c)["non_embedding_params"][0] == model.num_params(exclude_embedding=True)

    fwd = Phase("forward", T=T, B=B)
    assert counted(lambda: model(idx)) == cm.flops(c, fwd)[0]

    def train_step():
        logits, _ = model(idx)
        logits.sum().backward()

    assert counted(train_step) == cm.flops(c, fwd, backward=True)[0] - predicted_conv_backward(
        c, fwd
    )
    with torch.no_grad():
        _, state = model.prefill(idx[:, :n0])
        assert model.state_nbytes(state) == 4 * state_elements(c, n0, B)[0]
        after = Phase("forward", T=T - n0, n0=n0, B=B)
        assert counted(lambda: model.prefill(idx[:, n0:], state)) == cm.flops(c, after)[0]
        step = Phase("step", T=1, n0=n0, B=B)
        assert counted(lambda: model.step(idx[:, 0], state)) == cm.flops(c, step)[0]


BASE = dict(vocab_size=50, d_model=32, n_layers=2, max_seq_len=256)
GQA = AttentionConfig(kind="gqa", n_heads=4, n_kv_heads=2)

CASES = {
    "mha": ArchConfig(**BASE, attention=AttentionConfig(kind="mha", n_heads=2)),
    "gqa": ArchConfig(**BASE, attention=GQA),
    "mqa_partial_rope": ArchConfig(
        **BASE, attention=AttentionConfig(kind="mqa", n_heads=4, rope_dim=4)
    ),
    "gqa_window": ArchConfig(**BASE, attention=AttentionConfig(n_heads=4, n_kv_heads=2, window=16)),
    "mla": ArchConfig(
        **BASE, attention=AttentionConfig(kind="mla", n_heads=4, kv_rank=16, rope_dim=4)
    ),
    "mla_q_rank": ArchConfig(
        **BASE,
        attention=AttentionConfig(
            kind="mla", n_heads=4, kv_rank=16, q_rank=24, rope_dim=4, v_head_dim=12
        ),
    ),
    **{
        fam: ArchConfig(
            **BASE, layers=LayersConfig(mixer="linear"), linear=LinearConfig(family=fam, n_heads=2)
        )
        for fam in LINEAR_FAMILIES
    },
    "bla_normalized": ArchConfig(
        **BASE,
        layers=LayersConfig(mixer="linear"),
        linear=LinearConfig(
            family="linear_attention", n_heads=2, normalize=True, feature_map="elu"
        ),
    ),
    "gla_no_gate": ArchConfig(
        **BASE,
        layers=LayersConfig(mixer="linear"),
        linear=LinearConfig(family="gla", n_heads=2, output_gate=False, gate_rank=4),
    ),
    "mamba2_no_conv_no_gate": ArchConfig(
        **BASE,
        layers=LayersConfig(mixer="linear"),
        linear=LinearConfig(family="mamba2", conv_size=0, output_gate=False, key_dim=8),
    ),
    "rwkv6_no_gate": ArchConfig(
        **BASE,
        layers=LayersConfig(mixer="linear"),
        linear=LinearConfig(family="rwkv6", n_heads=2, output_gate=False),
    ),
    "mcsd": ArchConfig(**BASE, layers=LayersConfig(mixer="mcsd"), mcsd=MCSDConfig(n_channels=4)),
    **{
        f"ffn_{k}": ArchConfig(**BASE, attention=GQA, ffn=FFNConfig(kind=k, d_ffn=48))
        for k in FFN_KINDS
    },
    "moe_shared": ArchConfig(
        **BASE, attention=GQA, moe=MoEConfig(n_experts=4, top_k=2, n_shared=1, d_expert=24)
    ),
    "hybrid_lln_moe": ArchConfig(
        **{**BASE, "n_layers": 3},
        layers=LayersConfig(pattern="LLN"),
        attention=AttentionConfig(kind="mla", n_heads=2, kv_rank=8),
        linear=LinearConfig(family="gated_deltanet", n_heads=2),
        ffn=FFNConfig(kind="relu2"),
        moe=MoEConfig(n_experts=3, top_k=3, d_expert=16),
    ),
    "hybrid_mcsd_attention": ArchConfig(
        **BASE,
        layers=LayersConfig(pattern="MN"),
        attention=GQA,
        mcsd=MCSDConfig(n_channels=2),
        tie_embeddings=False,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_counts_are_exact_for_every_module(name):
    check_exact(CASES[name])


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    family=st.sampled_from(LINEAR_FAMILIES),
    pattern=st.sampled_from(["N", "L", "M", "LN", "NLM"]),
    mla=st.booleans(),
    heads=st.sampled_from([1, 2, 4]),
    ffn=st.sampled_from(FFN_KINDS),
    experts=st.sampled_from([0, 2, 3]),
    T=st.integers(5, 140),
    window=st.sampled_from([None, 8]),
)
def test_counts_are_exact_on_random_configs(family, pattern, mla, heads, ffn, experts, T, window):
    att = (
        AttentionConfig(kind="mla", n_heads=heads, kv_rank=12, rope_dim=4, window=window)
        if mla
        else AttentionConfig(n_heads=heads, n_kv_heads=1, window=window)
    )
    arch = ArchConfig(
        vocab_size=40,
        d_model=16,
        n_layers=len(pattern),
        max_seq_len=512,
        layers=LayersConfig(pattern=pattern),
        attention=att,
        linear=LinearConfig(family=family, n_heads=1 if family == "mamba2" else heads),
        mcsd=MCSDConfig(n_channels=2),
        ffn=FFNConfig(kind=ffn, d_ffn=24),
        moe=MoEConfig(n_experts=experts, top_k=min(2, max(experts, 1)), d_expert=12)
        if experts
        else None,
    )
    check_exact(arch, T=T, n0=max(1, T // 3), B=1)


def test_grouped_conv_backward_is_twice_its_forward():
    """The analytic convolution backward (2 x forward) is the true work; torch's counter
    ignores groups here, so this checks it with a dense-equivalent count."""
    x = torch.randn(2, 6, 30, requires_grad=True)
    w = torch.randn(6, 1, 4, requires_grad=True)
    with FlopCounterMode(display=False) as fc:
        torch.nn.functional.conv1d(x, w, groups=6)
    fwd = fc.get_total_flops()
    assert fwd == 2 * 2 * 6 * 27 * 4  # 2 x outputs x kernel
    c = Columns.from_archs([CASES["deltanet"]])
    p = Phase("forward", T=30, B=2)
    conv = next(op for _, op in model_ops(c, p) if op.name == "lin.conv")
    assert conv.backward == 2.0


# ---- conventions ------------------------------------------------------------------------------


def test_causal_half_counts_only_visible_pairs_and_macs_halve_flops():
    c = Columns.from_archs([CASES["gqa"]])
    T = 64
    full = cm.flops(c, Phase("forward", T=T))[0]
    half = cm.flops(c, Phase("forward", T=T, causal="half"))[0]
    H, dh, layers = 4, 8, 2
    assert full - half == layers * 4 * H * dh * (T * T - T * (T + 1) / 2)
    assert cm.flops(c, Phase("forward", T=T), unit="macs")[0] == full / 2
    no_head = cm.flops(c, Phase("forward", T=T), lm_head=False)[0]
    assert full - no_head == 2 * T * 32 * 50
    w = Columns.from_archs([CASES["gqa_window"]])
    # with a window of 16, query t sees min(t + 1, 16) keys
    visible = sum(min(t + 1, 16) for t in range(T))
    full_w = cm.flops(w, Phase("forward", T=T))[0]
    half_w = cm.flops(w, Phase("forward", T=T, causal="half"))[0]
    assert full_w - half_w == layers * 4 * H * dh * (T * T - visible)


def test_train_flops_per_token_is_about_six_times_params_for_a_dense_model():
    arch = load_arch("llama_gqa_1b")
    c = Columns.from_archs([arch])
    per_token = cm.train_flops_per_token(c, 2048)[0]
    n = params(c)["params"][0]  # tied: the embedding is the LM head
    attention = 16 * 6 * 32 * 64 * (2048 + 1) / 2 * 2  # causal QK and AV, fwd + bwd
    assert per_token == pytest.approx(6 * n + attention, rel=1e-3)


# ---- the seeds ----------------------------------------------------------------------------------


def test_plm_1_8b_sizes_match_seed_plm_section_2():
    p = params(Columns.from_archs([load_arch("plm_1_8b")]))
    assert p["params"][0] == pytest.approx(1.83e9, rel=0.005)
    assert p["embedding_params"][0] == pytest.approx(0.31e9, rel=0.01)
    assert p["non_embedding_params"][0] == pytest.approx(1.51e9, rel=0.01)


def test_kv_cache_bytes_follow_seed_plm_eqs_6_and_7():
    N, bits = 4096, 16
    plm = Columns.from_archs([load_arch("plm_1_8b")])
    # eq. 7: n_layers x (d_rope + d_c) x bytes x N
    assert cm.cache_bytes(plm, N, bits)[0] == 32 * (64 + 512) * 2 * N
    llama = Columns.from_archs([load_arch("llama_gqa_1b")])
    # eq. 6: n_layers x 2 x n_kv_heads x d_h x bytes x N
    assert cm.cache_bytes(llama, N, bits)[0] == 16 * 2 * 8 * 64 * 2 * N
    # MLA's cache is the smaller one per layer (576 vs 1024 elements per token)
    assert cm.cache_bytes(plm, N, 8)[0] / 32 < cm.cache_bytes(llama, N, 8)[0] / 16


@pytest.mark.parametrize(
    ("preset", "total", "active"),
    [
        # [Linear-MoE] Table 2 names count non-embedding parameters
        ("linear_moe_a0_3b_2b", 2.0e9, 0.3e9),
        ("linear_moe_a0_3b_2b_hybrid", 2.0e9, 0.3e9),
        ("linear_moe_a1b_7b", 7.0e9, 1.0e9),
        ("linear_moe_a1b_7b_hybrid", 7.0e9, 1.0e9),
    ],
)
def test_linear_moe_total_and_activated_params_match_seed_table_2(preset, total, active):
    p = params(Columns.from_archs([load_arch(preset)]))
    assert p["non_embedding_params"][0] == pytest.approx(total, rel=0.1)
    assert p["active_non_embedding_params"][0] == pytest.approx(active, rel=0.1)


@pytest.mark.parametrize(("preset", "size"), [("mcsd_1_6b", 1.6e9), ("mcsd_3b", 3.0e9)])
def test_mcsd_presets_match_seed_mcsd_table_1(preset, size):
    assert params(Columns.from_archs([load_arch(preset)]))["params"][0] == pytest.approx(
        size, rel=0.01
    )


def test_recurrent_state_does_not_grow_and_kv_cache_does():
    for name in ("gla", "mamba2", "rwkv6", "mcsd", "deltanet"):
        c = Columns.from_archs([CASES[name]])
        assert state_elements(c, 256)[0] == state_elements(c, 65536)[0] > 0
    for name in ("gqa", "mla"):
        c = Columns.from_archs([CASES[name]])
        assert state_elements(c, 512)[0] == 2 * state_elements(c, 256)[0]
    w = Columns.from_archs([CASES["gqa_window"]])
    assert state_elements(w, 16)[0] == state_elements(w, 4096)[0]


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(sorted(CASES)), B=st.integers(1, 3), n0=st.integers(1, 12))
def test_a_step_rewrites_its_recurrent_state_and_adds_a_row_to_its_kv_cache(name, B, n0):
    """The state a decode step rewrites whole (`recurrent_state_elements`) is what the real
    model's step keeps at its shape (recurrent, conv and MCSD states); the KV caches grow by
    the new token's row (n0 is within every case's window). The step's working set reads the
    whole state and writes the rewritten part back; a prefill's reads it once."""
    arch = CASES[name]
    torch.manual_seed(0)
    model = build_model(arch)
    c = Columns.from_archs([arch])
    idx = torch.randint(0, arch.vocab_size, (B, n0 + 1))
    with torch.no_grad():
        _, before = model.prefill(idx[:, :n0])
        shapes = [{k: t.shape for k, t in layer.items()} for layer in before.layers]
        _, after = model.step(idx[:, n0], before)
    kept = sum(
        t.numel()
        for layer, was in zip(after.layers, shapes)
        for k, t in layer.items()
        if t.shape == was[k]
    )
    assert recurrent_state_elements(c, n0, B)[0] == kept
    weights = params(c)["active_params"][0]
    state = state_elements(c, n0, B)[0]
    prefill = cm.working_set(c, Phase("forward", T=n0, B=B))[0]
    step = cm.working_set(c, Phase("step", T=1, n0=n0, B=B))[0]
    if not arch.is_moe:  # a batched MoE phase also reads the experts its tokens touch
        assert prefill == pytest.approx(4 * (weights + state), rel=1e-12)
        assert step == pytest.approx(4 * (weights + state + kept), rel=1e-12)
