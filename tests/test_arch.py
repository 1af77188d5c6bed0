"""ArchConfig: validation, layer layouts, YAML round trips and the canonical hash."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsearch.arch import (
    ArchConfig,
    AttentionConfig,
    InvalidArch,
    LayersConfig,
    LinearConfig,
    MCSDConfig,
    MoEConfig,
    attention_positions,
    load_arch,
)
from archsearch.errors import UserError
from archsearch.resources import conf_dir, shipped_names

SEED_PRESETS = {
    "plm_1_8b",
    "mcsd_1_6b",
    "mcsd_3b",
    "linear_moe_a0_3b_2b",
    "linear_moe_a0_3b_2b_hybrid",
    "linear_moe_a1b_7b",
    "linear_moe_a1b_7b_hybrid",
    "llama_gqa_1b",
}


def tiny(**kw) -> ArchConfig:
    base = dict(
        vocab_size=256,
        d_model=64,
        n_layers=4,
        attention=AttentionConfig(kind="gqa", n_heads=4, n_kv_heads=2),
        linear=LinearConfig(family="gla", n_heads=2),
        mcsd=MCSDConfig(n_channels=4),
    )
    base.update(kw)
    return ArchConfig(**base)


def test_seed_presets_exist_and_load():
    presets = shipped_names(conf_dir() / "arch")
    assert set(presets) >= SEED_PRESETS
    for name in presets:
        arch = load_arch(name)
        assert arch.name == name
        arch.validate()


@pytest.mark.parametrize("name", [*sorted(SEED_PRESETS), "tiny_gqa", "baby_gpt"])
def test_presets_round_trip_through_yaml(name, tmp_path):
    arch = load_arch(name)
    path = tmp_path / "a.yaml"
    path.write_text(arch.to_yaml())
    again = ArchConfig.from_yaml(path)
    assert again == arch
    assert again.arch_hash == arch.arch_hash
    # the resolved form also round-trips and keeps the hash
    resolved = arch.resolved()
    path.write_text(resolved.to_yaml())
    assert ArchConfig.from_yaml(path).arch_hash == arch.arch_hash


def test_preset_hashes_are_stable_across_releases():
    # Studies deduplicate trials by this hash; changing the canonical form silently would make
    # a resumed sweep retrain everything. Update these only with a migration note.
    assert load_arch("plm_1_8b").arch_hash == "9bf36970c370"
    assert load_arch("tiny_gqa").arch_hash == "3792a9a8483a"


def test_seed_layouts():
    assert load_arch("linear_moe_a0_3b_2b_hybrid").pattern == "LLLNLLLNLLLN"
    assert load_arch("linear_moe_a1b_7b_hybrid").pattern == "LLLN" * 4
    assert load_arch("plm_1_8b").pattern == "N" * 32
    assert load_arch("mcsd_3b").pattern == "M" * 20
    plm = load_arch("plm_1_8b").resolved().attention
    assert (plm.kind, plm.kv_rank, plm.rope_dim, plm.q_rank) == ("mla", 512, 64, None)


@pytest.mark.parametrize(
    ("placement", "share", "n", "expected"),
    [
        ("interleaved", 0.25, 12, "LLLNLLLNLLLN"),
        ("interleaved", 0.5, 4, "LNLN"),
        ("interleaved", 1 / 3, 6, "LLNLLN"),
        ("bottom", 0.25, 8, "NNLLLLLL"),
        ("top", 0.25, 8, "LLLLLLNN"),
        ("sandwich", 0.25, 8, "NLLLLLLN"),
        ("sandwich", 0.375, 8, "NLLLLLNN"),
        ("interleaved", 0.0, 4, "LLLL"),
        ("interleaved", 0.1, 4, "LLLN"),  # a positive share keeps at least one attention layer
        ("top", 1.0, 3, "NNN"),
    ],
)
def test_share_layouts(placement, share, n, expected):
    arch = tiny(
        n_layers=n,
        layers=LayersConfig(mixer="linear", attention_share=share, placement=placement),
    )
    assert arch.pattern == expected


def test_pattern_is_tiled_and_hashes_like_its_share_spelling():
    by_pattern = tiny(n_layers=8, layers=LayersConfig(pattern="lllN"))
    by_share = tiny(n_layers=8, layers=LayersConfig(mixer="linear", attention_share=0.25))
    by_full = tiny(n_layers=8, layers=LayersConfig(pattern="LLLNLLLN"))
    assert by_pattern.pattern == "LLLNLLLN"
    assert by_pattern.arch_hash == by_share.arch_hash == by_full.arch_hash


def test_two_spellings_of_one_architecture_hash_the_same():
    # MHA written as gqa with n_kv_heads == n_heads, head_dim defaulted vs explicit,
    # unused sections present or absent, a window no shorter than max_seq_len, the name.
    a = ArchConfig(
        vocab_size=100,
        d_model=64,
        n_layers=2,
        max_seq_len=128,
        name="a",
        attention=AttentionConfig(kind="mha", n_heads=4),
    )
    b = ArchConfig(
        vocab_size=100,
        d_model=64,
        n_layers=2,
        max_seq_len=128,
        name="b",
        attention=AttentionConfig(kind="gqa", n_heads=4, n_kv_heads=4, head_dim=16, window=128),
        linear=LinearConfig(family="rwkv6"),
        moe=MoEConfig(n_experts=0),
    )
    assert a.arch_hash == b.arch_hash
    assert a.resolved().attention.kind == "mha"
    c = dataclasses.replace(b, attention=dataclasses.replace(b.attention, n_kv_heads=2))
    assert c.arch_hash != a.arch_hash


def test_irrelevant_fields_do_not_change_the_hash_but_relevant_ones_do():
    mla = AttentionConfig(kind="mla", n_heads=4, kv_rank=32)
    gqa = AttentionConfig(kind="gqa", n_heads=4, n_kv_heads=2)
    # kv_rank only matters for MLA
    assert (
        tiny(attention=gqa).arch_hash
        == tiny(attention=dataclasses.replace(gqa, kv_rank=99)).arch_hash
    )
    assert (
        tiny(attention=mla).arch_hash
        != tiny(attention=dataclasses.replace(mla, kv_rank=16)).arch_hash
    )
    # the linear family matters only when there are linear layers
    lin = tiny(layers=LayersConfig(mixer="linear"))
    assert (
        lin.arch_hash
        != tiny(layers=LayersConfig(mixer="linear"), linear=LinearConfig(family="retnet")).arch_hash
    )
    assert tiny().arch_hash == tiny(linear=LinearConfig(family="retnet")).arch_hash


@pytest.mark.parametrize(
    ("change", "reason", "key"),
    [
        (dict(attention=AttentionConfig(n_heads=5)), "heads_not_dividing_d_model", "n_heads"),
        (
            dict(attention=AttentionConfig(n_heads=4, n_kv_heads=3)),
            "kv_heads_not_dividing_heads",
            "n_kv_heads",
        ),
        (
            dict(attention=AttentionConfig(kind="mla", n_heads=4, kv_rank=64)),
            "kv_rank_not_below_d_model",
            "kv_rank",
        ),
        (dict(attention=AttentionConfig(kind="mla", n_heads=4)), "kv_rank_missing", "kv_rank"),
        (
            dict(attention=AttentionConfig(kind="mqa", n_heads=4, n_kv_heads=2)),
            "kind_kv_heads_mismatch",
            "n_kv_heads",
        ),
        (dict(moe=MoEConfig(n_experts=4, top_k=8)), "top_k_above_n_experts", "top_k"),
        (dict(layers=LayersConfig(pattern="LLN")), "pattern_not_fitting_depth", "pattern"),
        (dict(layers=LayersConfig(pattern="LXN")), "bad_pattern", "pattern"),
        (
            dict(layers=LayersConfig(mixer="mcsd"), mcsd=MCSDConfig(n_channels=3)),
            "channels_not_dividing_d_model",
            "n_channels",
        ),
        (
            dict(layers=LayersConfig(mixer="linear"), linear=None),
            "missing_section",
            "linear",
        ),
        (
            dict(layers=LayersConfig(mixer="linear", attention_share=1.5)),
            "bad_share",
            "attention_share",
        ),
        (dict(d_model=0), "non_positive", "d_model"),
        (dict(norm="batchnorm"), "unknown_name", "norm"),
    ],
)
def test_invalid_architectures_name_their_reason(change, reason, key):
    with pytest.raises(InvalidArch) as err:
        tiny(**change).validate()
    assert err.value.reason == reason
    assert key in str(err.value)


@pytest.mark.parametrize(
    ("data", "key", "fragment"),
    [
        ({"vocab_size": 10, "d_model": 8}, "n_layers", "missing required key"),
        ({"vocab_size": 10, "d_model": 8, "n_layers": "two"}, "n_layers", "expected an integer"),
        ({"vocab_size": 10, "d_model": 8, "n_layers": 2, "colour": 1}, "colour", "unknown key"),
        (
            {"vocab_size": 10, "d_model": 8, "n_layers": 2, "attention": {"n_hedas": 2}},
            "attention.n_hedas",
            "unknown key",
        ),
        (
            {"vocab_size": 10, "d_model": 8, "n_layers": 2, "tie_embeddings": "yes"},
            "tie_embeddings",
            "expected a boolean",
        ),
        (
            {"vocab_size": 10, "d_model": 8, "n_layers": 2, "attention": [1, 2]},
            "attention",
            "expected a mapping",
        ),
    ],
)
def test_typed_loading_errors_name_the_key(data, key, fragment):
    with pytest.raises(UserError) as err:
        ArchConfig.from_dict(data, source="x.yaml")
    msg = str(err.value)
    assert msg.startswith("x.yaml: ") and key in msg and fragment in msg
    assert "\n" not in msg


def test_attention_positions_count_and_bounds():
    for n in range(1, 25):
        for k in range(0, n + 1):
            for placement in ("interleaved", "bottom", "top", "sandwich"):
                pos = attention_positions(n, k, placement)
                assert len(pos) == len(set(pos)) == k
                assert all(0 <= p < n for p in pos)


@settings(max_examples=60, deadline=None)
@given(
    n_layers=st.integers(1, 16),
    share=st.sampled_from([0.0, 0.125, 0.25, 0.5, 0.75, 1.0]),
    placement=st.sampled_from(["interleaved", "bottom", "top", "sandwich"]),
    family=st.sampled_from(["gla", "retnet", "mamba2", "rwkv6"]),
    heads=st.sampled_from([1, 2, 4, 8]),
)
def test_resolved_form_is_a_fixed_point(n_layers, share, placement, family, heads):
    arch = tiny(
        n_layers=n_layers,
        layers=LayersConfig(mixer="linear", attention_share=share, placement=placement),
        linear=LinearConfig(family=family, n_heads=heads),
        attention=AttentionConfig(n_heads=heads),
    )
    arch.validate()
    r = arch.resolved()
    r.validate()
    assert r.resolved() == r
    assert r.arch_hash == arch.arch_hash
    assert len(r.pattern) == n_layers
    assert r.pattern.count("N") == arch.n_attention_layers
    assert (r.attention is None) == ("N" not in r.pattern)
    assert (r.linear is None) == ("L" not in r.pattern)
