"""The search-space language: grammar, conditions, derived values, counting, sampling, Optuna."""

from __future__ import annotations

import copy
import math
import pickle
import random
from collections import Counter
from pathlib import Path

import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsearch.errors import UserError
from archsearch.resources import shipped_names, spaces_dir
from archsearch.space import (
    Choice,
    Fixed,
    Interval,
    assignments,
    build,
    candidates,
    count,
    load_space,
    parse_domain,
    parse_space,
    sample,
    spec,
    suggest,
)
from archsearch.space import assign as assign_module
from archsearch.space.assign import (
    DerivedError,
    apply_assignment,
    references,
    resolve_derived,
    set_path,
)
from archsearch.space.candidates import sample_assignment


def domain(text):
    return parse_domain(text, source="t.yaml", key="params.x")


def space(params, derived=None, base="tiny_gqa", **extra):
    raw = {"base": base, "params": params, **extra}
    if derived:
        raw["derived"] = derived
    return parse_space(raw, source="t.yaml")


# ---- grammar ------------------------------------------------------------------------------------


def test_choice_range_interval_and_tags_follow_hydra_semantics():
    assert domain("choice(1, 2, 3)") == Choice((1, 2, 3))
    assert domain("choice(gla, retnet)").values() == ["gla", "retnet"]
    assert domain("1, 2, 3") == Choice((1, 2, 3))  # Hydra's simple choice form
    assert domain("range(1, 10, step=3)").values() == [1, 4, 7]
    assert domain("range(4)").values() == [0, 1, 2, 3]
    assert domain("range(0.5, 2.0, 0.5)").values() == [0.5, 1.0, 1.5]
    iv = domain("interval(0.1, 1.0)")
    assert iv == Interval(0.1, 1.0) and not iv.finite and math.isinf(iv.size)
    log = domain("tag(log, interval(1e-4, 1e-2))")
    assert log.log and not log.integer and log.low == pytest.approx(1e-4)
    integer = domain("tag(int, interval(2, 5))")
    assert integer.finite and integer.values() == [2, 3, 4, 5]
    both = domain("tag(log, int, interval(1, 64))")
    assert both.log and both.integer and both.size == 64
    assert domain(7) == Fixed(7) and domain("LLLN") == Fixed("LLLN") and domain(True) == Fixed(True)


def test_domains_map_to_optuna_distributions():
    sp = space(
        {
            "n_layers": "choice(2, 4)",
            "d_model": "range(64, 257, step=64)",
            "norm_eps": "tag(log, interval(1e-6, 1e-4))",
            "attention.rope_theta": "interval(1000, 100000)",
            "ffn.d_ffn": "tag(int, interval(128, 512))",
        }
    )
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    trial = study.ask()
    values = suggest(sp, trial)
    d = trial.distributions
    assert isinstance(d["n_layers"], optuna.distributions.CategoricalDistribution)
    assert d["d_model"] == optuna.distributions.IntDistribution(64, 256, step=64)
    assert d["norm_eps"] == optuna.distributions.FloatDistribution(1e-6, 1e-4, log=True)
    assert d["attention.rope_theta"] == optuna.distributions.FloatDistribution(1000, 100000)
    assert d["ffn.d_ffn"] == optuna.distributions.IntDistribution(128, 512)
    assert values == trial.params


@settings(max_examples=50, deadline=None)
@given(
    start=st.integers(-50, 50),
    length=st.integers(1, 40),
    step=st.integers(1, 7),
)
def test_int_range_matches_python_range(start, length, step):
    stop = start + length
    d = domain(f"range({start}, {stop}, step={step})")
    assert d.values() == list(range(start, stop, step))
    assert d.size == len(range(start, stop, step))


@settings(max_examples=50, deadline=None)
@given(low=st.floats(1e-6, 10), factor=st.floats(1.01, 1e4), seed=st.integers(0, 10**6))
def test_interval_samples_stay_inside(low, factor, seed):
    import random

    high = low * factor
    for text in (f"interval({low!r}, {high!r})", f"tag(log, interval({low!r}, {high!r}))"):
        d = domain(text)
        rng = random.Random(seed)
        for _ in range(20):
            v = d.sample(rng)
            assert low <= v <= high * (1 + 1e-12)


# ---- conditions, derived values, building ----------------------------------------------------------


def test_conditional_parameters_are_active_only_when_their_condition_holds():
    sp = space(
        {
            "attention.kind": "choice(gqa, mla)",
            "attention.kv_rank": {"values": "choice(16, 32)", "when": {"attention.kind": "mla"}},
        }
    )
    all_ = list(assignments(sp))
    assert all_ == [
        {"attention.kind": "gqa"},
        {"attention.kind": "mla", "attention.kv_rank": 16},
        {"attention.kind": "mla", "attention.kv_rank": 32},
    ]
    assert count(sp) == 3
    # define-by-run: the Optuna trial only holds the active parameters
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen = Counter()
    for _ in range(30):
        trial = study.ask()
        params = suggest(sp, trial)
        seen[params["attention.kind"]] += 1
        assert ("attention.kv_rank" in trial.params) == (params["attention.kind"] == "mla")
        study.tell(trial, 0.0)
    assert seen["gqa"] and seen["mla"]


def test_condition_on_a_list_of_values_and_on_a_variable():
    sp = space(
        {
            "layers.mixer": "choice(attention, linear, mcsd)",
            "layers.attention_share": {
                "values": "choice(0.25, 0.5)",
                "when": {"layers.mixer": ["linear", "mcsd"]},
            },
            "vars.wide": "choice(false, true)",
            "ffn.d_ffn": {"values": "choice(1024, 2048)", "when": {"vars.wide": True}},
        }
    )
    # mixer: attention 1 + linear 2 + mcsd 2 = 5; wide: false 1 + true 2 = 3
    assert count(sp) == 15 == len(list(assignments(sp)))


def test_derived_values_resolve_per_candidate():
    sp = space(
        {"d_model": "choice(64, 96, 128)", "vars.head_size": "choice(16, 32)"},
        derived={
            "attention.n_heads": "${div:${d_model},${vars.head_size}}",
            "attention.n_kv_heads": "${attention.n_heads}",
            "ffn.d_ffn": "${round_to:${mul:${d_model},2.7},64}",
        },
    )
    cands = [build(sp, a) for a in assignments(sp)]
    ok = [c for c in cands if c.ok]
    bad = [c for c in cands if not c.ok]
    # 96 / 32 = 3 is fine, but 96 is divisible by 16 and 32, so every candidate builds
    assert len(ok) == 6 and not bad
    arch = next(
        c.arch for c in ok if c.assignment == {"d_model": 128, "vars.head_size": 32}
    ).resolved()
    assert arch.attention.n_heads == 4 and arch.attention.n_kv_heads == 4
    assert arch.attention.kind == "mha"  # n_kv_heads == n_heads
    assert arch.ffn.d_ffn == 64 * round(128 * 2.7 / 64)
    assert arch.attention.head_dim == 32  # defaulted from d_model / n_heads


def test_inexact_derived_division_is_a_named_rejection():
    sp = space({"d_model": "choice(64, 80)"}, derived={"attention.n_heads": "${div:${d_model},32}"})
    by_model = {c.assignment["d_model"]: c for c in map(lambda a: build(sp, a), assignments(sp))}
    assert by_model[64].ok
    assert by_model[80].reason == "derived_not_whole"
    assert "attention.n_heads" in by_model[80].message


def test_a_candidate_is_built_once_per_space_and_each_caller_gets_its_own(monkeypatch):
    sp = space({"d_model": "choice(64, 80)"}, derived={"attention.n_heads": "${div:${d_model},32}"})
    resolved = []
    real = candidates.resolve_derived
    monkeypatch.setattr(
        candidates, "resolve_derived", lambda t, d: resolved.append(1) or real(t, d)
    )
    first = build(sp, {"d_model": 64})
    first.assignment["d_model"] = 80  # a caller changing its copy changes no one else's
    again = build(sp, {"d_model": 64})
    assert len(resolved) == 1
    assert again.assignment == {"d_model": 64} and again.arch == first.arch and again.ok
    assert not build(sp, {"d_model": 80}).ok and not build(sp, {"d_model": 80}).ok
    assert len(resolved) == 2  # a rejection is kept too
    build(sp, {"d_model": 64.0})  # another assignment than 64: built on its own
    assert len(resolved) == 3
    copied = pickle.loads(pickle.dumps(sp))  # a space sent to a Ray worker carries no results
    assert copied == sp and build(copied, {"d_model": 64}) == again and len(resolved) == 4
    monkeypatch.setattr(spec, "MEMO", 2)  # a space keeps its last MEMO results
    resolved.clear()
    for d in (64, 80, 96, 96, 80):
        build(copied, {"d_model": d})
    assert len(resolved) == 2  # 64 was kept from before
    build(copied, {"d_model": 64})  # the oldest was dropped
    assert len(resolved) == 3


@pytest.mark.parametrize("name", shipped_names(spaces_dir()))
def test_derived_values_equal_omegaconfs_over_the_whole_tree(name):
    """`resolve_derived` hands OmegaConf only the keys the expressions read; on every shipped
    space's sampled assignments it gives what OmegaConf gives on the whole tree."""
    from omegaconf import OmegaConf

    sp = load_space(name)
    rng = random.Random(0)
    for _ in range(40):
        tree = apply_assignment(sp.base, sample_assignment(sp, rng))
        whole = copy.deepcopy(tree)
        for key, expr in sp.derived.items():
            set_path(whole, key, expr)
        conf = OmegaConf.create(whole)
        expected = {}
        for key in sp.derived:
            try:
                expected[key] = OmegaConf.select(conf, key, throw_on_missing=True)
            except Exception:
                expected[key] = "rejected"
        try:
            got = resolve_derived(tree, sp.derived)
        except DerivedError:
            assert "rejected" in expected.values()
            continue
        for key, value in expected.items():
            set_path(whole, key, value)
        assert got == whole  # the derived values set, nothing else changed


def _resolved_or_rejected(tree: dict, derived: dict[str, str], strict: bool) -> str:
    try:
        return repr(resolve_derived(copy.deepcopy(tree), derived, strict=strict))
    except (DerivedError, UserError) as err:
        return f"{type(err).__name__} {getattr(err, 'reason', '')}: {err}"


DERIVED = {
    "attention.n_heads": "${div:${d_model},${vars.head}}",
    "ffn.d_ffn": "${mul:${d_model},3}",
    "vars.extra": "${add:${d_model},${vars.add}}",  # a string added: a broken expression
}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([64, 96, 64.0, 7, True]),
            st.sampled_from([16, 32, 0]),
            st.sampled_from([1, "x"]),
        ),
        min_size=1,
        max_size=10,
    ),
    st.booleans(),
)
def test_a_resolution_kept_by_what_it_read_equals_a_fresh_one(draws, strict):
    """Derived values are kept by the values their expressions read: a candidate that read
    what another read gets the same values, or the same first failure in the expressions'
    order (a rejection, skipped when not strict, or a broken expression); 64, 64.0 and True
    are different values."""
    for d_model, head, add in draws:
        tree = {"d_model": d_model, "vars": {"head": head, "add": add}, "unread": [head]}
        kept = _resolved_or_rejected(tree, DERIVED, strict)
        assign_module._resolved.clear()  # private: no caller but a test forgets what it kept
        assert kept == _resolved_or_rejected(tree, DERIVED, strict)


def test_the_first_failing_derived_value_decides_and_kept_values_are_copies():
    tree = {"d_model": 7, "vars": {"head": 2, "add": "x"}}
    with pytest.raises(DerivedError, match=r"derived\.attention\.n_heads: 7 is not divisible"):
        resolve_derived(copy.deepcopy(tree), DERIVED)
    with pytest.raises(UserError, match=r"derived\.vars\.extra: cannot resolve"):
        resolve_derived(copy.deepcopy(tree), DERIVED, strict=False)
    copied = {"vars.copy": "${vars.xs}"}  # a list value: each caller gets its own
    first = resolve_derived({"vars": {"xs": [1, 2]}}, copied)
    first["vars"]["copy"].append(3)
    assert list(resolve_derived({"vars": {"xs": [1, 2]}}, copied)["vars"]["copy"]) == [1, 2]


@pytest.mark.parametrize(
    ("expr", "reads"),
    [
        ("${div:${d_model},${vars.head_size}}", ("vars.head_size", "d_model")),
        ("${round_to:${mul:${d_model},2.7},64}", ("d_model",)),
        ("${max:1,2}", ()),
        ("${.n_heads}", None),  # relative: the whole tree is resolved
        ("${vars.${vars.k}}", None),  # a key built from another
        ("${vars.xs[0]}", None),
    ],
)
def test_the_keys_an_expression_reads(expr, reads):
    assert references(expr) == reads


def test_a_relative_derived_value_resolves_against_its_own_section():
    sp = space(
        {"attention.n_heads": "choice(2, 4)"},
        derived={"attention.n_kv_heads": "${.n_heads}", "ffn.d_ffn": "${mul:${d_model},3}"},
    )
    by_heads = {
        c.assignment["attention.n_heads"]: c.arch
        for c in map(lambda a: build(sp, a), assignments(sp))
    }
    assert by_heads[4].attention.n_kv_heads == 4 and by_heads[2].attention.n_kv_heads == 2
    assert by_heads[2].ffn.d_ffn == 3 * by_heads[2].d_model


def test_unbuildable_candidates_are_rejected_with_counted_reasons():
    sp = space(
        {
            "attention.n_heads": "choice(3, 4)",
            "attention.n_kv_heads": "choice(1, 2, 4)",
            "moe.n_experts": "choice(2, 4)",
            "moe.top_k": "choice(1, 4)",
        }
    )
    cands = [build(sp, a) for a in assignments(sp)]
    reasons = Counter(c.reason for c in cands if not c.ok)
    # 3 heads do not divide d_model=128 (all 12 with n_heads=3); with 4 heads, kv=1,2,4 all
    # divide; top_k=4 > n_experts=2 rejects 3 of the remaining 12
    assert reasons == {"heads_not_dividing_d_model": 12, "top_k_above_n_experts": 3}
    assert sum(c.ok for c in cands) == 9


def test_hybrid_spec_parameters_build_the_expected_patterns():
    sp = space(
        {
            "n_layers": 8,
            "layers.mixer": "linear",
            "layers.attention_share": "choice(0.0, 0.25)",
            "layers.placement": "choice(interleaved, bottom, top, sandwich)",
            "linear.family": "choice(gla, mamba2)",
        }
    )
    patterns = {build(sp, a).arch.pattern for a in assignments(sp)}
    assert patterns == {"LLLLLLLL", "LLLNLLLN", "NNLLLLLL", "LLLLLLNN", "NLLLLLLN"}
    explicit = space({"n_layers": "choice(8, 12)", "layers.pattern": "choice(LLLN, LN)"})
    got = sorted(build(explicit, a).arch.pattern for a in assignments(explicit))
    assert got == sorted(["LLLNLLLN", "LLLNLLLNLLLN", "LNLNLNLN", "LNLNLNLNLNLN"])


def test_equivalent_candidates_share_a_hash_and_sampling_dedups_them():
    # with no linear layers, the linear family does not change the architecture
    sp = space({"linear.family": "choice(gla, retnet, mamba2)", "n_layers": "choice(2, 4)"})
    hashes = {build(sp, a).arch.arch_hash for a in assignments(sp)}
    assert count(sp) == 6 and len(hashes) == 2
    result = sample(sp, 5, seed=0)
    assert len(result.candidates) == 2 and result.exhausted and result.duplicates > 0


# ---- shipped spaces ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # n_layers 2 x d_model 2 x (attention 1 + linear 4 families x 2 shares + mcsd 2 shares)
        # x attention.kind (gqa 1 + mla 2 kv ranks) x ffn.kind 2 x ffn_mult 2
        ("tiny", 2 * 2 * (1 + 4 * 2 + 2) * (1 + 2) * 2 * 2),
        # layers 4 x width 4 x head size 2 x kv rank 2 x (no q compression 1 + 2 q ranks) x mult 2
        ("plm_edge", 4 * 4 * 2 * 2 * (1 + 2) * 2),
        # 8 families x (share 0: 1 + share .25/.5 x 4 placements) x (dense 1 + 3 expert counts x
        # 3 top-k x 2 shared) x 2 expert widths
        ("hybrid_linear_moe", 8 * (1 + 2 * 4) * (1 + 3 * 3 * 2) * 2),
        # 3 depths x (mcsd 5 channel counts + attention 1 + linear 4 families)
        ("mcsd", 3 * (5 + 1 + 4)),
        # depth 4 x width 4 x (attention 1 + linear 4 families x 3 shares + mcsd 3 shares)
        # x attention.kind (gqa 1 + mla 2 kv ranks) x ffn_mult 2
        ("edge_125m", 4 * 4 * (1 + 4 * 3 + 3) * (1 + 2) * 2),
    ],
)
def test_shipped_space_sizes_match_hand_counts(name, expected):
    sp = load_space(name)
    assert count(sp) == expected
    assert sum(1 for _ in assignments(sp)) == expected
    assert sp.objectives and sp.constraints


def test_counting_a_huge_space_is_instant():
    sp = space(
        {
            "n_layers": "range(1, 65)",
            "d_model": "range(64, 4097, step=64)",
            "ffn.d_ffn": "range(64, 16385, step=64)",
            "attention.n_heads": "choice(1, 2, 4, 8, 16, 32)",
            "attention.kind": "choice(gqa, mla)",
            "attention.kv_rank": {
                "values": "range(16, 1025, step=16)",
                "when": {"attention.kind": "mla"},
            },
        }
    )
    assert count(sp) == 64 * 64 * 256 * 6 * (1 + 64)


def test_continuous_spaces_count_as_infinite_and_refuse_enumeration():
    sp = space({"attention.rope_theta": "interval(1e3, 1e6)"})
    assert math.isinf(count(sp))
    with pytest.raises(UserError, match="continuous"):
        list(assignments(sp))
    assert len(sample(sp, 5, seed=1).candidates) == 5


@settings(max_examples=20, deadline=None)
@given(limit=st.integers(1, 700), seed=st.integers(0, 5))
def test_draws_enumerate_a_space_within_the_limit_and_sample_a_larger_one(limit, seed):
    sp = load_space("tiny")  # 528 assignments
    got = list(candidates.draws(sp, limit, seed))
    if count(sp) <= limit:
        assert got == list(assignments(sp))
    else:
        rng = random.Random(seed)
        assert got == [candidates.sample_assignment(sp, rng) for _ in range(limit)]
        assert got == list(candidates.draws(sp, limit, seed))  # seeded


def test_a_continuous_space_is_always_drawn():
    sp = space({"attention.rope_theta": "interval(1e3, 1e6)"})
    got = list(candidates.draws(sp, 3))
    assert len(got) == 3 and len({a["attention.rope_theta"] for a in got}) == 3


def test_sampling_is_reproducible_and_seed_dependent():
    sp = load_space("tiny")
    a = sample(sp, 10, seed=7)
    b = sample(sp, 10, seed=7)
    c = sample(sp, 10, seed=8)
    ha = [x.arch.arch_hash for x in a.candidates]
    assert ha == [x.arch.arch_hash for x in b.candidates]
    assert ha != [x.arch.arch_hash for x in c.candidates]
    assert len(set(ha)) == 10


def test_every_enumerated_tiny_candidate_builds():
    sp = load_space("tiny")
    cands = [build(sp, a) for a in assignments(sp)]
    assert all(c.ok for c in cands), Counter(c.reason for c in cands if not c.ok)
    # the MLA kv_rank parameter only appears with MLA
    for c in cands:
        assert ("attention.kv_rank" in c.assignment) == (c.assignment["attention.kind"] == "mla")


def test_the_tutorials_worked_example_is_what_the_tutorial_says(tmp_path):
    """docs/tutorials/own-space.md: its space's size and the one rejection it explains."""
    import re

    readme = (Path(__file__).parents[1] / "docs" / "tutorials" / "own-space.md").read_text()
    block = re.search(r"```yaml\n(# my_space.yaml.*?)```", readme, re.S).group(1)
    path = tmp_path / "my_space.yaml"
    path.write_text(block)
    from archsearch.space import parse_space_file

    sp = parse_space_file(path)
    assert count(sp) == 540
    assert "540 assignments" in readme
    reasons = {c.reason for c in map(lambda a: build(sp, a), assignments(sp)) if not c.ok}
    assert reasons == {"kv_heads_not_dividing_heads"}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tiny", "plm_edge", "hybrid_linear_moe", "mcsd", "edge_125m"])
def test_shipped_spaces_train_blocks_are_valid_trial_settings(name):
    from archsearch.trainers import TrainConfig

    sp = load_space(name)
    cfg = TrainConfig.from_dict(sp.train, source=sp.source, prefix="train")
    if name == "edge_125m":  # the cluster recipe: FLOPs-matched, [PLM] Table 17's optimiser
        assert cfg.parsed_budget.kind == "flops" and cfg.seq_len == 4096
        assert (cfg.lr, cfg.min_lr, cfg.weight_decay, cfg.beta2) == (5e-4, 5e-6, 0.1, 0.95)
        assert cfg.data[0].startswith("shards:")
