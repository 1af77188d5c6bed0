"""The model registries, the presets' sizes, and the structural rules of `archsearch.models`."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from archsearch import arch as arch_mod
from archsearch.arch import ArchConfig, load_arch
from archsearch.models import (
    CHANNEL_MIXERS,
    SEQUENCE_MIXERS,
    build_model,
    sequence_mixer_name,
)
from archsearch.models.attention import Attention
from archsearch.models.linear import GLA, Mamba2
from archsearch.models.mcsd import MCSD
from archsearch.models.mla import MLA
from archsearch.models.moe import MoE
from archsearch.models.norm import LayerNorm, RMSNorm


def tiny(**overrides) -> ArchConfig:
    data = {"vocab_size": 40, "d_model": 32, "n_layers": 2, "max_seq_len": 128}
    data.update(overrides)
    return ArchConfig.from_dict(data)


def test_registry_keys_are_the_declared_names():
    declared = {"attention", "mla", *arch_mod.LINEAR_FAMILIES, "mcsd"}
    assert set(SEQUENCE_MIXERS) == declared
    assert set(CHANNEL_MIXERS) == {*arch_mod.FFN_KINDS, "moe"}
    # every attention kind maps to a registered mixer
    for kind in arch_mod.ATTENTION_KINDS:
        a = tiny(attention={"kind": kind, "n_heads": 4, "kv_rank": 16}).resolved()
        assert sequence_mixer_name(a, "N") in SEQUENCE_MIXERS


def test_layer_pattern_picks_each_layers_mixer():
    a = tiny(
        n_layers=4,
        layers={"pattern": "LMNL"},
        attention={"kind": "mla", "n_heads": 2, "kv_rank": 8},
        linear={"family": "mamba2", "n_heads": 2, "key_dim": 8},
        mcsd={"n_channels": 4},
        norm="layernorm",
    )
    model = build_model(a)
    kinds = [type(b.mixer) for b in model.blocks]
    assert kinds == [Mamba2, MCSD, MLA, Mamba2]
    assert all(isinstance(b.norm1, LayerNorm) for b in model.blocks)
    b = build_model(
        tiny(
            layers={"mixer": "linear", "attention_share": 0.5},
            n_layers=4,
            attention={"n_heads": 4},
            linear={"family": "gla", "n_heads": 2},
        )
    )
    assert [type(x.mixer) for x in b.blocks] == [GLA, Attention, GLA, Attention]
    assert isinstance(b.norm_f, RMSNorm)


def test_no_biases_anywhere_and_tied_head():
    a = tiny(
        n_layers=3,
        layers={"pattern": "LNM"},
        attention={"kind": "gqa", "n_heads": 4, "n_kv_heads": 2},
        linear={"family": "rwkv6", "n_heads": 2},
        mcsd={"n_channels": 4},
        moe={"n_experts": 4, "top_k": 2, "n_shared": 1, "d_expert": 16},
    )
    model = build_model(a)
    assert not [n for n, _ in model.named_parameters() if "bias" in n.split(".")[-1]]
    assert all(m.bias is None for m in model.modules() if isinstance(m, nn.Linear))
    assert model.lm_head.weight is model.wte.weight
    n = sum(p.numel() for p in model.parameters())
    assert model.num_params() == n
    assert model.num_params(exclude_embedding=True) == n - 40 * 32
    untied = build_model(tiny(tie_embeddings=False, attention={"n_heads": 4}))
    assert untied.lm_head.weight is not untied.wte.weight
    total = sum(p.numel() for p in untied.parameters())
    assert untied.num_params(exclude_embedding=True) == total - 2 * 40 * 32


def test_active_params_count_only_routed_and_shared_experts():
    a = tiny(
        attention={"n_heads": 4},
        moe={"n_experts": 6, "top_k": 2, "n_shared": 1, "d_expert": 24},
        ffn={"kind": "swiglu"},
    )
    model = build_model(a)
    moe = model.blocks[0].ffn
    assert isinstance(moe, MoE)
    expert = 3 * 32 * 24  # gated FFN: gate and up 32 x 24, down 24 x 32
    assert moe.active_params() == 32 * 6 + 3 * expert
    inactive = 2 * (6 - 2) * expert  # two layers, four idle experts each
    assert model.num_active_params() == model.num_params() - inactive


def test_init_scales_with_fan_in_and_depth():
    a = tiny(d_model=128, n_layers=8, attention={"n_heads": 4}, ffn={"kind": "relu2", "d_ffn": 512})
    torch.manual_seed(0)
    model = build_model(a)
    block = model.blocks[3]
    depth = math.sqrt(2 * 8)
    assert block.mixer.o_proj.weight.std().item() == pytest.approx(128**-0.5 / depth, rel=0.05)
    assert block.ffn.down.weight.std().item() == pytest.approx(512**-0.5 / depth, rel=0.05)
    assert block.mixer.qkv.weight.std().item() == pytest.approx(128**-0.5, rel=0.05)
    # tied: the embedding is the LM head, scaled like one; untied: unit embedding
    assert model.lm_head.weight is model.wte.weight
    assert model.wte.weight.std().item() == pytest.approx(128**-0.5, rel=0.05)
    untied = build_model(
        tiny(d_model=128, n_layers=2, tie_embeddings=False, attention={"n_heads": 4})
    )
    assert untied.wte.weight.std().item() == pytest.approx(1.0, rel=0.05)
    assert untied.lm_head.weight.std().item() == pytest.approx(128**-0.5, rel=0.05)


# Sizes the presets' comments state (conf/arch/*.yaml), counted on the meta device.
PRESET_SIZES = {
    # name: (total, non-embedding, active non-embedding, tolerance), in billions
    "plm_1_8b": (1.83, 1.51, 1.51, 0.01),
    "llama_gqa_1b": (1.24, None, None, 0.01),
    "mcsd_1_6b": (1.6, None, None, 0.01),
    "mcsd_3b": (3.0, None, None, 0.01),
    "linear_moe_a0_3b_2b": (None, 2.2, 0.32, 0.04),
    "linear_moe_a1b_7b": (None, 6.7, 1.07, 0.02),
    # the other models of [PLM] Table 12 (sizes the presets' comments check)
    "glm_edge_1_5b": (1.59, None, None, 0.01),
    "glm_edge_4b": (4.33, None, None, 0.01),
    "nemotron_4b": (4.19, None, None, 0.01),
    "minicpm3_4b": (4.07, None, None, 0.01),
    "minicpm_2b": (2.72, None, None, 0.01),
    "fox_1_6b": (1.67, None, None, 0.01),
    "index_1_9b": (2.17, 1.91, None, 0.01),
}


@pytest.mark.parametrize("name", sorted(PRESET_SIZES))
def test_preset_sizes_match_their_descriptions(name):
    with torch.device("meta"):
        model = build_model(load_arch(name))
    total, non_emb, active, tol = PRESET_SIZES[name]
    got = (model.num_params(), model.num_params(True), model.num_active_params(True))
    for want, value in zip((total, non_emb, active), got):
        if want is not None:
            assert value / 1e9 == pytest.approx(want, rel=tol)
