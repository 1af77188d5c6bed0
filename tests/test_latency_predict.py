"""The learned predictor as a calibrated profile carries it: the numpy trees equal
scikit-learn's, the predictor round-trips through its data form, a latency is the sum of its
kernels and the memory stalls of its working set (numpy only: no torch), a table prices each
row as alone, and every prediction carries its error."""

from __future__ import annotations

import copy
import dataclasses
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.ensemble import GradientBoostingRegressor

from archsearch.arch import ArchConfig, AttentionConfig, LayersConfig, LinearConfig, MoEConfig
from archsearch.cost import model
from archsearch.cost.counts import state_elements
from archsearch.cost.ffn import experts_touched
from archsearch.cost.ops import Columns, Phase
from archsearch.latency import columns, decode_s, load_device, phase_seconds, prediction, ttft_s
from archsearch.latency.kernels import KERNELS, PHASES
from archsearch.latency.predict import (
    HIDES_FROM,
    KernelFit,
    Memory,
    Passes,
    Predictor,
    seconds_by_part,
)
from archsearch.latency.profile import parse_predictor, predictor_dict
from archsearch.latency.trees import fit, from_sklearn
from archsearch.models import build_model

RNG = np.random.default_rng(0)
TRAIN_X = RNG.uniform(0, 10, (60, 3))
TRAIN_Y = np.sin(TRAIN_X[:, 0]) + 0.3 * TRAIN_X[:, 1] * (TRAIN_X[:, 2] > 5)
SKLEARN = GradientBoostingRegressor(
    n_estimators=30, max_depth=3, learning_rate=0.2, min_samples_leaf=2, random_state=0
).fit(TRAIN_X, TRAIN_Y)
ENSEMBLE = from_sklearn(SKLEARN, ("a", "b", "c"))
THRESHOLDS = sorted({float(t) for t in ENSEMBLE.threshold.ravel() if t != 0})
ATTN = ArchConfig(
    vocab_size=1000, d_model=256, n_layers=3, attention=AttentionConfig(n_heads=4, n_kv_heads=2)
)
MIB = 2.0**20


def value():
    """Any finite input, and the trees' own thresholds (where float32 rounding decides)."""
    return st.one_of(st.floats(-1e6, 1e6, allow_nan=False, width=64), st.sampled_from(THRESHOLDS))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(value(), value(), value()), min_size=1, max_size=40))
def test_numpy_trees_equal_sklearn(rows):
    X = np.array(rows, dtype=np.float64)
    np.testing.assert_array_equal(ENSEMBLE.predict(X), SKLEARN.predict(X))  # summed as sklearn sums


def synthetic(overlap: float = 0.5) -> Predictor:
    """A small fitted predictor (no timing): GEMMs and GQA's step with trees, a GQA prefill on
    its roofline alone; every other kernel analytic; a cache of 16-128 MiB."""
    rng = np.random.default_rng(1)
    kernels = {}
    for name, base in (
        ("gemm", (0.0, 5e-11, 6e-12, 1e-6)),
        ("gqa.step", (2e-6, 4e-11, 1e-11, 5e-6)),
    ):
        X = rng.uniform(0, 10, (30, len(KERNELS[name])))
        kernels[name] = KernelFit(
            base, fit(X, 0.5 * np.tanh(X[:, 0] - 5), KERNELS[name], trees=10), 30
        )
    kernels["gqa.forward"] = KernelFit((1e-6, 3e-11, 2e-11, 4e-6), None, 12)
    memory = {
        "forward": Memory(1e-11, 16 * MIB, 128 * MIB),
        "step": Memory(2e-11, 16 * MIB, 128 * MIB, miss_s=1e-5, overlap=overlap),
    }
    return Predictor("torch", "2.13.0+cpu", 1, "2025-01-01", "test cpu", 0.5, kernels, memory)


def device(predictor: Predictor | None = None):
    return load_device("nvidia_a10").with_predictor(predictor or synthetic())


def test_a_predictor_round_trips_through_its_data_form():
    p = synthetic()
    back = parse_predictor(predictor_dict(p), "mem")
    assert predictor_dict(back) == predictor_dict(p)
    assert back.kernels["gqa.forward"].trees is None and back.memory == p.memory
    X = RNG.uniform(0, 10, (50, len(KERNELS["gqa.step"])))
    W = RNG.uniform(1, 1e6, (50, 4))
    got, want = back.kernels["gqa.step"].seconds(W, X), p.kernels["gqa.step"].seconds(W, X)
    np.testing.assert_allclose(got, want, rtol=1e-5)  # leaf values keep 6 significant digits


def test_a_latency_is_the_sum_of_its_kernels_and_stalls_and_differs_from_the_roofline():
    dev = device()
    roofline = dev.with_predictor(None)
    c = columns(ATTN)
    for phase in (Phase("forward", T=64, causal="half"), Phase("step", T=1, n0=100)):
        parts = seconds_by_part(c, phase, dev, "fp32", lm_head_tokens=1.0)
        names = {op.name for op, _ in parts}
        assert names >= {f"gqa.{phase.kind}", "ffn", "norm", "residual", "embedding", "lm_head"}
        assert "memory stalls" in names
        got = phase_seconds(c, phase, dev, "fp32", lm_head_tokens=1.0)
        np.testing.assert_allclose(got, sum(t for _, t in parts), rtol=1e-12)
        assert got[0] != pytest.approx(phase_seconds(c, phase, roofline, "fp32")[0])
    # other precisions keep the roofline
    assert decode_s(c, dev, 100, "q4")[0] == decode_s(c, roofline, 100, "q4")[0]
    assert set(PHASES) == set(dev.predictor.memory)


@pytest.mark.slow
def test_predict_imports_no_torch():
    code = "import sys, archsearch.latency.predict, archsearch.latency.profile; "
    code += "import archsearch.latency; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


TABLE_ARCHS = [
    ATTN,
    ArchConfig(vocab_size=512, d_model=128, n_layers=2, attention=AttentionConfig(kind="mla")),
    ArchConfig(
        vocab_size=512,
        d_model=192,
        n_layers=3,
        layers=LayersConfig(mixer="linear"),
        linear=LinearConfig(family="gla"),
    ),
    ArchConfig(
        vocab_size=700,
        d_model=1024,
        n_layers=4,
        attention=AttentionConfig(n_heads=8, n_kv_heads=1),
        moe=MoEConfig(n_experts=4, top_k=2, d_expert=512),
    ),
]


@settings(max_examples=15, deadline=None)
@given(
    st.lists(st.integers(0, len(TABLE_ARCHS) - 1), min_size=1, max_size=12),
    st.sampled_from([1, 2, 8]),
)
def test_a_table_prices_each_row_as_alone(picks, batch):
    """Mixed families, repeated rows, a batched step's overlap: the table's prices equal each
    row's own, in both phases (a prefill of 2 tokens: GEMMs of a few rows)."""
    dev = device()
    archs = [TABLE_ARCHS[i] for i in picks]
    table = Columns.from_archs(archs)
    for price in (
        lambda c: ttft_s(c, dev, 2, "fp32", batch),
        lambda c: decode_s(c, dev, 512, "fp32", batch),
    ):
        np.testing.assert_allclose(price(table), [price(columns(a))[0] for a in archs], rtol=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    st.floats(2**18, 2**28),
    st.floats(1.5, 64.0),
    st.lists(st.floats(1.0, 2**33), min_size=2, max_size=10),
    st.floats(0.0, 1e-4),
)
def test_memory_stalls_grow_with_the_working_set(lo, ratio, sizes, miss_s):
    """None below the lower capacity, every byte above the upper, monotone between; the
    per-layer miss only where something misses."""
    memory = Memory(1e-10, lo, lo * ratio, miss_s)
    sizes = np.sort(np.array(sizes))
    stalls, missing = memory.stalls(sizes, 12), memory.missing(sizes)
    assert np.all(np.diff(stalls) >= 0) and np.all((missing >= 0) & (missing <= 1))
    assert np.all(missing[sizes <= lo] == 0) and np.all(missing[sizes >= lo * ratio] == 1)
    assert np.all(stalls[sizes <= lo] == 0)


@settings(max_examples=40, deadline=None)
@given(
    st.floats(2**20, 2**29),
    st.lists(st.tuples(st.floats(0.0, 1e-2), st.floats(0.0, 1.0)), min_size=1, max_size=8),
    st.floats(0.0, 1.0),
)
def test_compute_hides_at_most_the_stalls_of_each_gemms_own_weights(nbytes, gemms, overlap):
    """What weight GEMMs hide is never negative, never more than `overlap` x the byte stalls
    of their weights, nothing with no extra compute, and grows with the overlap."""
    memory = Memory(2e-11, 1.6e7, 1.3e8, 0.0, overlap)
    extra = np.array([e for e, _ in gemms])
    weights = nbytes * np.array([f for _, f in gemms]) / len(gemms)
    hidden = float(memory.hidden(nbytes, extra, weights))
    byte_stalls = float(memory.byte_stalls(nbytes))
    assert 0.0 <= hidden <= overlap * byte_stalls * weights.sum() / nbytes * (1 + 1e-9)
    assert hidden <= overlap * extra.sum() * (1 + 1e-9)
    assert memory.hidden(nbytes, 0 * extra, weights) == 0.0
    more = dataclasses.replace(memory, overlap=min(1.0, overlap + 0.25))
    assert float(more.hidden(nbytes, extra, weights)) >= hidden


def test_a_batched_decode_step_hides_stalls_behind_its_gemms_and_a_single_one_does_not():
    """With `overlap`, a decode step beyond the cache on 8 sequences takes less than its
    kernels and stalls, by at most its weight GEMMs' extra compute; on one sequence, and on
    fewer than `HIDES_FROM`, its GEMMs hide nothing and its price is unchanged."""
    wide = ArchConfig(
        vocab_size=4096, d_model=1024, n_layers=4, attention=AttentionConfig(n_heads=8)
    )
    none, hiding = device(synthetic(overlap=0.0)), device(synthetic(overlap=1.0))
    c = columns(wide)
    for batch in (1, 4, HIDES_FROM):
        p = Phase("step", T=1, n0=256, B=batch)
        assert model.working_set(c, p)[0] > none.predictor.memory["step"].hi
        plain, hid = (phase_seconds(c, p, d, "fp32")[0] for d in (none, hiding))
        extra, nbytes, streamed = none.predictor.weight_gemms(c, p, none, p.tokens)
        assert extra.shape == nbytes.shape and extra.shape[1] == 1 and np.all(streamed == nbytes)
        if batch < HIDES_FROM:
            assert np.all(extra == 0) and hid == pytest.approx(plain, rel=1e-12)
        else:
            assert plain - extra.sum() - 1e-12 <= hid < plain


TWICE = Passes((1, 2, 4, 8), (MIB, 16 * MIB), ((1, 1), (1.2, 2.0), (1.0, 1.5), (1, 1)))


@settings(max_examples=60, deadline=None)
@given(st.floats(1.0, 16.0), st.floats(2.0**10, 2.0**32))
def test_passes_are_the_table_at_its_points_and_between_them_elsewhere(rows, nbytes):
    """Linear in rows and log bytes, held at the grid's ends: within the table's range, one
    pass on one row, the table itself at its points."""
    got = float(TWICE.at(rows, nbytes))
    assert 1.0 - 1e-12 <= got <= 2.0 + 1e-12 and float(TWICE.at(1.0, nbytes)) == 1.0
    assert float(TWICE.at(2, 16 * MIB)) == 2.0 and float(TWICE.at(2, MIB)) == pytest.approx(1.2)
    assert float(TWICE.at(3, 16 * MIB)) == pytest.approx(1.75)  # halfway from 2 to 4 rows
    assert float(TWICE.at(2, 4 * MIB)) == pytest.approx(1.6)  # halfway in log bytes


def test_weights_streamed_again_pay_their_stalls_again():
    """A decode step whose weights stream twice on two sequences pays their stalls once more
    (the stalls per byte of its working set x its GEMMs' weight bytes); on one sequence, and on
    four where they stream once, its price is unchanged."""
    wide = ArchConfig(
        vocab_size=4096, d_model=1024, n_layers=4, attention=AttentionConfig(n_heads=8)
    )
    once = synthetic(overlap=0.0)
    step = dataclasses.replace(once.memory["step"], passes=TWICE)
    twice = dataclasses.replace(once, memory={**once.memory, "step": step})
    c = columns(wide)
    for batch, again in ((1, 0.0), (2, 1.0), (4, 0.5)):
        p = Phase("step", T=1, n0=256, B=batch)
        plain, more = (phase_seconds(c, p, device(x), "fp32")[0] for x in (once, twice))
        _, weights, streamed = twice.weight_gemms(c, p, device(twice), p.tokens, TWICE)
        per_byte = float(step.per_byte(model.working_set(c, p))[0])
        assert more - plain == pytest.approx(per_byte * (streamed - weights).sum(), rel=1e-9)
        assert (more - plain > 0) == (again > 0)


@pytest.mark.parametrize(
    ("part", "value", "key"),
    [
        ("rows", [2, 1], "rows"),
        ("bytes", [], "bytes"),
        ("table", [[1.0, 1.0]], "table"),
        ("table", [[1, 1], [0.5, 2], [1, 1], [1, 1]], "table"),
        ("table", [[1.1, 1], [1, 2], [1, 1], [1, 1]], "table"),
        ("table", [[1, 1], [1, "2"], [1, 1], [1, 1]], "table"),
    ],
)
def test_a_bad_passes_table_names_its_key(part, value, key):
    """A profile's passes: rows from one and bytes rising, [rows][bytes] numbers of at least
    one pass, one pass on one row; anything else is one line naming the key."""
    from archsearch.errors import UserError

    once = synthetic()
    step = dataclasses.replace(once.memory["step"], passes=TWICE)
    raw = predictor_dict(dataclasses.replace(once, memory={**once.memory, "step": step}))
    back = parse_predictor(copy.deepcopy(raw), "mem")
    assert back.memory["step"].passes == TWICE and predictor_dict(back) == raw
    raw["memory"]["step"]["passes"][part] = value
    with pytest.raises(UserError) as info:
        parse_predictor(raw, "mem")
    assert info.value.key == f"predictor.memory.step.passes.{key}"
    assert "\n" not in str(info.value)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 16), st.integers(1, 4), st.integers(1, 64))
def test_experts_touched_is_the_expected_count_under_uniform_routing(experts, k, tokens):
    """k for one token, never more than min(E, N k), and the mean of a simulated router that
    sends each token to k distinct experts drawn uniformly."""
    k = min(k, experts)
    arch = ArchConfig(
        vocab_size=64,
        d_model=32,
        n_layers=1,
        attention=AttentionConfig(n_heads=2),
        moe=MoEConfig(n_experts=experts, top_k=k, d_expert=16),
    )
    touched = float(experts_touched(columns(arch), tokens)[0])
    assert k - 1e-9 <= touched <= min(experts, tokens * k) + 1e-9
    assert float(experts_touched(columns(arch), 1)[0]) == pytest.approx(k)
    draws = np.random.default_rng(0).random((2000, tokens, experts)).argsort(axis=-1)[..., :k]
    simulated = [len(np.unique(d)) for d in draws]
    assert touched == pytest.approx(np.mean(simulated), abs=4 * np.std(simulated) / 44 + 0.02)


def test_a_batched_moe_decode_step_reads_the_experts_its_tokens_touch():
    """The working set of a step at batch 8 holds every expert its 8 tokens reach (7.2 of 8
    at top-2), not the top-2 of one token: the memory stalls of a batched MoE step see them."""
    arch = ArchConfig(
        vocab_size=256,
        d_model=64,
        n_layers=1,
        attention=AttentionConfig(n_heads=2, n_kv_heads=2),
        moe=MoEConfig(n_experts=8, top_k=2, d_expert=64),
    )
    c = columns(arch)
    expert = sum(p.numel() for p in build_model(arch).blocks[0].ffn.experts[0].parameters())
    one, eight = (model.working_set(c, Phase("step", T=1, n0=16, B=b))[0] for b in (1, 8))
    state = 4.0 * (state_elements(c, 16, 8) - state_elements(c, 16, 1))[0]
    touched = 8 * (1 - (6 / 8) ** 8)
    assert eight - one - state == pytest.approx(4.0 * (touched - 2) * expert, rel=1e-9)


def test_a_prediction_carries_its_error_at_the_precisions_its_profile_checked():
    dev = load_device("local")
    c = Columns.from_archs([ATTN, TABLE_ARCHS[3]])
    got = prediction(c, dev, prompt=128, context=512)
    assert np.all(got.ttft_s > 0) and np.all(got.decode_s > 0)
    assert got.decode_error is not None and len(set(got.decode_error)) == 2  # two bands
    assert prediction(c, dev, prompt=128, context=512, precision="q8").decode_error is None
    half = prediction(c, dev, prompt=128, context=512, precision="fp16")
    assert np.all(half.ttft_error == dev.check("ttft", "fp16").error)
