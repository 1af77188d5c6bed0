"""Calibration: what a `TimingPlan` times (a quick then a full calibration in one process each
time their own grids), the fits recover known machines (memory probe, kernels, memory terms),
leaving a term out fits without it, the raw timings refit to the same predictor, timing
measures the steady call, and `archsearch calibrate budget=quick` writes a profile that prices."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys

import numpy as np
import pytest
from benchmark_scripts import load as load_benchmark
from conftest import tiny_arch
from hypothesis import given, settings
from hypothesis import strategies as st

from archsearch.arch import LINEAR_FAMILIES, ArchConfig, AttentionConfig, LayersConfig, LinearConfig
from archsearch.cli import main
from archsearch.cost.counts import params as count_params
from archsearch.latency import columns, decode_s, load_device, ttft_s
from archsearch.latency.calibrate import PLANS, calibrate, plan, refit, roofline, timing
from archsearch.latency.calibrate import fit as fit_module
from archsearch.latency.calibrate.fit import fit_kernel, fit_memory, fit_memory_terms, fit_passes
from archsearch.latency.calibrate.models import glue_models, held_out_models, reference_models
from archsearch.latency.calibrate.sample import DECODE_DRAWN, Sampler, budget, kernel_rows
from archsearch.latency.kernels import KERNELS, gemm_work
from archsearch.latency.predict import Memory, Passes
from archsearch.latency.profile import predictor_dict
from archsearch.models import build_model
from archsearch.models.lm import RESIDUAL_PROJECTIONS

MIB = 2.0**20
PROBE = Memory(5.5e-11, 10 * MIB, 16 * MIB)  # as measured on a 32 MiB-L3 VM


class FakeMachine:
    """Every timing of a calibration replaced by a made-up one (no clock), each recorded: the
    kernel shapes, the whole models, the memory sizes and the matmul grid timed."""

    def __init__(self, monkeypatch):
        self.shapes, self.models, self.memory, self.matmuls, self.passes = [], [], [], [], []
        monkeypatch.setattr(timing, "time_shape", self.time_shape)
        monkeypatch.setattr(timing, "time_model", self.time_model)
        monkeypatch.setattr(timing, "memory_seconds", self.memory_seconds)
        monkeypatch.setattr(timing, "pass_seconds", self.pass_seconds)
        monkeypatch.setattr(roofline, "measure", self.measure)
        monkeypatch.setattr(roofline, "time_model", self.time_model)

    def time_shape(self, shape, p):
        self.shapes.append(shape)
        x, w, _ = kernel_rows(shape)
        return float(w @ [1e-7, 2e-11, 1e-11, 3e-6]) * (1.2 if x[0] > 4 else 1.0)

    def time_model(self, m, p, builds=1):
        self.models.append((m, p, builds))
        work = m.arch.d_model * m.arch.n_layers * m.batch
        return 1e-8 * work * m.prompt + 1e-4, 2e-8 * work + 5e-5

    def memory_seconds(self, n, p):
        self.memory.append(n)
        return 1e-6 + 2e-11 * n + float(PROBE.byte_stalls(n))

    def pass_seconds(self, p):
        """A layer's time from the cache grows with its rows; from memory it adds its weights'
        stalls, twice on two rows (`PASSES`)."""
        self.passes.append((p.pass_sizes, p.pass_rows))
        cache = [[1e-11 * rows * n for n in p.pass_sizes] for rows in p.pass_rows]
        memory = [
            [
                t + PASSES.get(rows, 1.0) * float(PROBE.byte_stalls(64 * n))
                for t, n in zip(line, p.pass_sizes)
            ]
            for rows, line in zip(p.pass_rows, cache)
        ]
        return {
            "bytes": list(p.pass_sizes),
            "rows": list(p.pass_rows),
            "memory_s": memory,
            "cache_s": cache,
        }

    def measure(self, p):
        self.matmuls.append((p.matmul_rows, p.matmul_weights))
        rates = [
            {"m": m, "k": k, "n": n, "flops_per_s": 1e11 * m / (m + 8)}
            for k, n in p.matmul_weights
            for m in p.matmul_rows
        ]
        return {
            "float32": rates,
            "bfloat16": rates,
            "llc": 16 * MIB,
            "read": 2e10,
            "copy": 2e10,
            "gemv": 1.5e10,
            "cache": 5e10,
            "attention_step": [1e9] * 4,
        }


@pytest.mark.slow
def test_a_quick_then_a_full_calibration_in_one_process_time_the_full_grid(monkeypatch):
    """A quick calibration leaves nothing behind: the full one after it in the same process
    times the full plan's matmul grid, memory sizes, every kernel (about its budget of shapes
    each), every glue model in its builds and every held-out model in its builds; and its raw
    timings refit to the very predictor it wrote."""
    machine = FakeMachine(monkeypatch)
    calibrate(PLANS["quick"])
    quick = PLANS["quick"]
    assert machine.matmuls == [(quick.matmul_rows, quick.matmul_weights)]
    assert {s.kernel for s in machine.shapes} == set(quick.kernels)
    for record in (machine.shapes, machine.models, machine.memory, machine.matmuls):
        record.clear()
    machine.passes.clear()
    full = plan("full", samples=8)
    out = calibrate(full)
    assert machine.matmuls == [(PLANS["full"].matmul_rows, PLANS["full"].matmul_weights)]
    assert machine.memory == list(PLANS["full"].memory_sizes)
    assert machine.passes == [(PLANS["full"].pass_sizes, PLANS["full"].pass_rows)]
    for kernel in KERNELS:
        timed = {s for s in machine.shapes if s.kernel == kernel}
        most = budget(kernel, full.samples)
        assert most // 2 <= len(timed) <= most + most // 8 + 1, kernel
    fp32 = [(m, b) for m, p, b in machine.models if p.precision == "fp32"]
    glue, held = glue_models(), held_out_models()
    assert [m for m, _ in fp32] == glue + held
    assert [b for _, b in fp32] == [full.glue_builds] * len(glue) + [full.held_out_builds] * len(
        held
    )
    bf16 = [p for m, p, _ in machine.models if p.precision == "fp16"]
    references = len(reference_models())
    assert len(bf16) == references + 2 * len(held)
    # the half precision's factors fitted to the least of `repeats` samples back to back, its
    # check the least of `check_repeats` over the span
    assert {(p.repeats, p.span) for p in bf16[:references]} == {(full.repeats, 0.0)}
    assert {(p.repeats, p.span) for p in bf16[references:]} == {(full.check_repeats, full.span)}
    assert full.check_repeats < full.repeats
    predictor, validation = refit(json.loads(json.dumps(out["raw"])))
    mine, written = predictor_dict(predictor), out["profile"]["predictor"]
    assert {k: v for k, v in mine.items() if k != "date"} == {
        k: v for k, v in written.items() if k != "date"
    }
    assert validation["decode"][0]["n"] == len(held) + len(glue)


@settings(max_examples=25, deadline=None)
@given(st.floats(4.0, 24.0), st.floats(1.2, 4.0), st.floats(1e-11, 1e-10))
def test_the_memory_probe_fit_recovers_a_known_cache_and_stall_per_byte(lo, ratio, byte_s):
    """Probe times made from a known cache (`lo` .. `lo` x `ratio` MiB) and stall per byte,
    over a cache-rate stream and a call overhead, are fitted back within 1% wherever the cache
    holds all or none of the weight, though the capacities fall on no grid, and the stall per
    byte within 1%."""
    true = Memory(byte_s, lo * MIB, lo * ratio * MIB)
    sizes = np.array(PLANS["full"].memory_sizes, dtype=np.float64)
    seconds = 2e-6 + 1.2e-11 * sizes + true.byte_stalls(sizes)
    got = fit_memory(sizes, seconds)
    fitted = 2e-6 + 1.2e-11 * sizes + got.byte_stalls(sizes)
    outside = (sizes <= true.lo) | (sizes >= true.hi)
    np.testing.assert_allclose(fitted[outside], seconds[outside], rtol=0.01)
    assert got.stall_s == pytest.approx(byte_s, rel=0.01)
    assert got.missing(2 * lo * ratio * MIB) == 1.0 and got.missing(lo * MIB / 2) == 0.0
    assert fit_memory(sizes, 2e-6 + 1.2e-11 * sizes) is None  # no cache in the times: none


def sampled(kernel: str, measure, samples: int, seed: int, probe=None):
    """A kernel's adaptive sampling, every pass in a row: (its fit, the shapes timed)."""
    sampler = Sampler(kernel, measure, samples, random.Random(seed), probe)
    for _ in range(sampler.passes):
        sampler.step()
    return sampler.result(), sampler.shapes


def gemm(fit, m, k, n) -> np.ndarray:
    from archsearch.latency.kernels import gemm_features

    return fit.seconds(gemm_work(m, k, n), gemm_features(m, k, n))


def test_a_fit_recovers_a_known_function():
    """GEMM timings a known factor off the learned roofline's work (slow below 16 rows, fast
    for wide outputs) are recovered on shapes the fit never saw. A design of some ninety random
    shapes can miss a corner of the grid, so the figures are over five designs (seeds): the
    typical design's worst shape within 15%, and the mean error within 6%."""
    true = np.array([0.0, 2e-11, 8e-12, 3e-6])

    def factor(v) -> float:
        return (3.0 if v["m"] < 16 else 1.2) * (0.6 if v["n"] >= 2048 else 1.0)

    def measure(shape) -> float:
        v = shape.values()
        return factor(v) * float(gemm_work(v["m"], v["k"], v["n"])[0] @ true)

    m, nn = (
        np.array([1, 4, 8, 32, 128, 512, 2, 64]),
        np.array([64, 4096, 256, 16384, 128, 8192, 1024, 512]),
    )
    k = np.full(len(m), 384)
    want = [factor({"m": a, "n": b}) for a, b in zip(m, nn)] * (gemm_work(m, k, nn) @ true)
    errors = []
    for seed in range(5):
        fit, shapes = sampled("gemm", measure, 96, seed)
        assert len(shapes) >= 80 and fit.samples == len(shapes) and min(fit.base) >= 0
        errors.append(np.abs(gemm(fit, m, k, nn) / want - 1))  # a 3x step, unseen shapes
    assert np.median(np.max(errors, axis=1)) <= 0.15 and np.mean(errors) <= 0.06


def test_the_learned_roofline_extrapolates_beyond_the_timed_shapes():
    """Timings exactly linear in the work terms are recovered far beyond the grid (where the
    trees are constant): the roofline's coefficients carry the scaling."""
    true = np.array([0.0, 2e-11, 8e-12, 3e-6])

    def measure(shape) -> float:
        v = shape.values()
        return float(gemm_work(v["m"], v["k"], v["n"])[0] @ true)

    fit, _ = sampled("gemm", measure, 64, 1)
    m, k, n = (
        np.array([4096, 1, 8192]),
        np.array([8192, 6144, 4096]),
        np.array([32768, 65536, 8192]),
    )
    np.testing.assert_allclose(gemm(fit, m, k, n), gemm_work(m, k, n) @ true, rtol=0.05)


def test_a_kernel_fit_leaves_out_the_stalls_it_met_alone():
    """GEMM timings linear in the work terms while the weight fits the cache, plus the probe's
    stalls once it does not, fit to the cache-resident time everywhere: a model adds its
    working set's stalls once, not twice."""
    true = np.array([0.0, 1.2e-11, 8e-12, 3e-6])

    def measure(shape) -> float:
        v = shape.values()
        cached = float(gemm_work(v["m"], v["k"], v["n"])[0] @ true)
        return cached + float(PROBE.byte_stalls(4.0 * v["k"] * v["n"]))

    fit, _ = sampled("gemm", measure, 64, 2, PROBE)
    m, k, n = (
        np.array([1, 1, 64, 4]),
        np.array([4096, 8192, 3072, 6144]),
        np.array([8192, 16384, 8192, 32768]),
    )
    np.testing.assert_allclose(gemm(fit, m, k, n), gemm_work(m, k, n) @ true, rtol=0.05)


PASSES = {1: 1.0, 2: 2.0, 4: 1.0, 8: 1.0}  # a BLAS that streams the weights per row at 2 rows


def models_of(n: int, seed: int):
    """n models of 2-12 layers, 2-192 MiB: kernels' sums, layers, working sets, three weight
    GEMMs each whose compute beyond one row grows with a batch of 1-8 (and that stream their
    weights twice on two sequences: `PASSES`)."""
    rng = np.random.default_rng(seed)
    layers = rng.choice([2.0, 4.0, 8.0, 12.0], n)
    working = np.geomspace(2, 192, n) * MIB
    batch = rng.choice([1, 2, 4, 8], n)
    kernels = np.stack([1e-3 + 2e-11 * working + 5e-5 * layers] * 2, axis=1)
    gemms = []
    for b, ws in zip(batch, working):
        extra = (b - 1) * rng.uniform(0.5, 2.0) * 1e-12 * ws * np.array([4.0, 3.0, 2.0])
        weights = ws * np.array([0.4, 0.3, 0.2])
        gemms.append((extra, weights, weights * PASSES[b]))
    return kernels, layers, np.stack([working, working], axis=1), gemms


@settings(max_examples=25, deadline=None)
@given(
    st.floats(0.5, 2.0),
    st.floats(0.0, 2e-4),
    st.sampled_from([0.0, 0.3, 0.7, 1.0]),
    st.integers(0, 2**16),
)
def test_the_memory_terms_fit_recovers_the_stalls_the_per_layer_miss_and_the_overlap(
    w, miss_s, overlap, seed
):
    """Whole models timed as their kernels + a known per-missed-byte cost, per-layer miss and
    overlap (decode step, with its weights' passes) are fitted back; a prefill keeps neither
    miss nor overlap, nor passes."""
    kernels, layers, working, gemms = models_of(72, seed)
    step = Memory(w * PROBE.stall_s, PROBE.lo, PROBE.hi, miss_s, overlap)
    forward = Memory(w * PROBE.stall_s, PROBE.lo, PROBE.hi)
    batched = np.array([step.batched(ws, *g) for ws, g in zip(working[:, 1], gemms)])
    measured = np.stack(
        [
            kernels[:, 0] + forward.stalls(working[:, 0], layers),
            kernels[:, 1] + step.stalls(working[:, 1], layers) + batched,
        ],
        axis=1,
    )
    truth = {"forward": forward, "step": step}
    got = fit_memory_terms(measured, kernels, layers, working, gemms, PROBE)
    assert got["forward"].miss_s == 0.0 and got["forward"].overlap == 0.0
    assert got["step"].overlap == pytest.approx(overlap)
    for phase, true in truth.items():
        assert got[phase].stall_s == pytest.approx(true.stall_s, rel=0.02)
    assert got["step"].miss_s == pytest.approx(miss_s, abs=0.02 * 2e-4)


def test_the_passes_are_each_sizes_stalls_over_one_rows_at_least_one():
    """Stalls (from memory less from the cache) at each row count over one row's, per layer
    size; a size whose stalls are lost in its time streams once; none without timings."""
    timed = {
        "bytes": [MIB, 16 * MIB],
        "rows": [1, 2, 4],
        "cache_s": [[1e-5, 1e-4], [2e-5, 2e-4], [4e-5, 3e-4]],
        "memory_s": [[1.01e-5, 5e-4], [2.02e-5, 1e-3], [4.1e-5, 6e-4]],
    }
    got = fit_passes(timed)
    assert got.rows == (1, 2, 4) and got.nbytes == (MIB, 16 * MIB)
    assert [line[0] for line in got.table] == [1.0, 1.0, 1.0]  # 1e-7 s of 1.01e-5: no stall
    assert [line[1] for line in got.table] == [1.0, 2.0, 1.0]  # 4, 8, 3 x 1e-4 s of stalls
    assert fit_passes(None) is None


def test_a_calibration_fits_its_passes_and_the_ablation_may_leave_them_out(monkeypatch):
    """The passes probe's timings become the decode step's `passes`; `without=("passes",)`
    leaves them out; a deploy runtime does not time them (each copy an export)."""
    FakeMachine(monkeypatch)
    probed = dict(memory_mib=PLANS["full"].memory_mib)  # the quick probe finds no cache level
    raw = calibrate(plan("quick", **probed))["raw"]
    predictor, _ = refit(raw)
    assert predictor.memory["step"].passes == fit_passes(raw["passes"])
    assert predictor.memory["step"].passes.at(2, 4 * MIB) == pytest.approx(2.0)
    assert refit(raw, without=("passes",))[0].memory["step"].passes is None
    assert predictor.memory["forward"].passes is None
    monkeypatch.setattr(timing, "pass_seconds", lambda p: pytest.fail("timed in a deploy runtime"))
    deployed = calibrate(plan("quick", runtime="onnxruntime", **probed))["raw"]
    assert deployed["passes"] is None and refit(deployed)[0].memory["step"].passes is None


def test_the_fit_and_the_predictor_add_the_same_memory_terms(monkeypatch):
    """What the glue fit reckons memory terms add to a model (`fit.added`, from `model_terms`)
    is what a predictor with those terms adds to its kernels, on one sequence and on several
    (stalls, per-layer miss, passes and overlap): the fit fits the model the predictor prices."""
    FakeMachine(monkeypatch)
    raw = calibrate(plan("quick", memory_mib=PLANS["full"].memory_mib))["raw"]
    bare = dataclasses.replace(refit(raw)[0], memory=dict.fromkeys(("forward", "step")))
    passes = Passes((1, 2, 4), (MIB, 16 * MIB), ((1, 1), (1.5, 2.0), (1, 1.2)))
    memory = {
        "forward": Memory(2 * PROBE.stall_s, PROBE.lo, PROBE.hi),
        "step": Memory(PROBE.stall_s, PROBE.lo, PROBE.hi, 3e-5, 0.6, passes),
    }
    device = roofline.device(raw["roofline"], PLANS["quick"])
    priced = device.with_predictor(dataclasses.replace(bare, memory=memory))
    models = glue_models()[::3]  # one sequence, two and eight
    assert {m.batch for m in models} == {1, 2, 8}
    kernels, layers, working, gemms = fit_module.model_terms(
        models, device.with_predictor(bare), passes
    )
    for i, phase in enumerate(("forward", "step")):
        added = fit_module.added(memory[phase], working[:, i], layers, gemms, i == 1)
        got = [m.predicted(priced)[i] for m in models]
        np.testing.assert_allclose(got, kernels[:, i] + added, rtol=1e-9)


@pytest.mark.parametrize("term", ["trees", "stalls", "miss", "overlap"])
def test_leaving_a_term_out_fits_without_it(term):
    """`without` (the ablation's switch) leaves exactly that term out of the fit."""
    kernels, layers, working, gemms = models_of(24, 0)
    measured = kernels * 1.3 + 1e-3
    got = fit_memory_terms(measured, kernels, layers, working, gemms, PROBE, without=(term,))
    if term == "stalls":
        assert got == {"forward": None, "step": None}
    else:
        assert got["step"] is not None
        assert (got["step"].miss_s == 0.0) == (term == "miss") or term != "miss"
        assert term != "overlap" or got["step"].overlap == 0.0
    rng = np.random.default_rng(0)
    X, W = rng.uniform(0, 10, (20, 3)), rng.uniform(1, 1e6, (20, 4))
    fit = fit_kernel("gemm", X, W, np.zeros(20), W @ [1e-7, 1e-11, 1e-11, 1e-6], None, (term,))
    assert (fit.trees is None) == (term == "trees")


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_the_ffn_is_drawn_at_a_decode_steps_rows_every_other_time(seed):
    """Half of the FFN's shapes run on as many rows as a decode step has sequences, the other
    half span the grid; its budget is twice a norm's."""
    drawn = []
    sampler = Sampler("ffn", lambda s: drawn.append(s) or 1e-5, 16, random.Random(seed), None)
    sampler.step()
    rows = [s.values()[DECODE_DRAWN["ffn"]] for s in drawn]
    assert len(set(drawn)) == len(drawn) == sampler.per_round
    assert all(r in timing.BATCHES for r in rows[1::2])
    assert budget("ffn", 64) == 2 * budget("norm", 64)


@pytest.mark.parametrize("m", [1024, 2048])
@pytest.mark.parametrize("n", [8192, 16384])
def test_calibration_may_time_the_lm_head_of_a_batched_prefill(m, n):
    """A GEMM of a batched prefill's every token by a vocabulary of 8-16k is on the grid and
    cheap enough to time, so that its price is learned rather than extrapolated."""
    grid = timing.GRIDS["gemm"]
    index = (("m", grid["m"].index(m)), ("k", grid["k"].index(768)), ("n", grid["n"].index(n)))
    assert timing.affordable(timing.Shape("gemm", index))


@pytest.mark.parametrize("width", range(len(timing.GRIDS["mamba2.forward"]["d"])))
def test_the_mixer_grids_reach_mamba2s_own_head_count_at_every_width(width):
    """Mamba2 sets d / 32 heads by default: the grid times that many at every width."""
    grid = timing.GRIDS["mamba2.forward"]
    mixer = {"layers": LayersConfig(mixer="linear"), "linear": LinearConfig(family="mamba2")}
    own = ArchConfig(vocab_size=64, d_model=grid["d"][width], n_layers=1, max_seq_len=64, **mixer)
    timed = set()
    for h in range(len(grid["H"])):
        index = {knob: 0 for knob in grid} | {"d": width, "H": h}
        timed.add(
            int(timing.shape_rows(timing.Shape("mamba2.forward", tuple(index.items())))[1].lH[0])
        )
    assert own.resolved().linear.n_heads in timed


def test_every_model_calibration_times_builds():
    """The glue, held-out and reference models are fixed in code: each must build (on the meta
    device: no weights allocated) with the parameters the cost model counts."""
    import torch

    archs = [m.arch for m in glue_models() + held_out_models() + reference_models()]
    with torch.device("meta"):
        params = [sum(p.numel() for p in build_model(a).parameters()) for a in archs]
    assert params == [int(count_params(columns(a))["params"][0]) for a in archs]


@pytest.mark.parametrize("kernel", sorted(set(KERNELS) - {"gemm", "residual"}))
def test_a_kernel_is_timed_on_the_module_its_model_runs(kernel):
    """Calibration builds only the module a kernel runs: the same class with the same
    parameters as the one-layer model's, drawn by the same init (random where the model's are,
    constant where they are, as widely), and it runs."""
    import torch

    from archsearch.latency.calibrate.sample import valid
    from archsearch.runtimes import prepare

    shape = next(
        s for s in (timing.random_shape(kernel, random.Random(i)) for i in range(200)) if valid(s)
    )
    arch = timing.arch_of(kernel, shape.values()).resolved()
    built = build_model(arch)
    block = built.blocks[0]
    expected = {"embedding": built.wte, "norm": block.norm1, "ffn": block.ffn, "moe": block.ffn}
    expected = expected.get(kernel, block.mixer)
    module, inputs = timing.target(shape)
    timed = module.module if kernel.endswith((".forward", ".step")) else module
    assert type(timed) is type(expected)
    names = [(n, p.shape) for n, p in expected.named_parameters()]
    assert [(n, p.shape) for n, p in timed.named_parameters()] == names
    drawn = {n: p.numel() > 1 and bool(p.std() > 0) for n, p in expected.named_parameters()}
    assert {n: p.numel() > 1 and bool(p.std() > 0) for n, p in timed.named_parameters()} == drawn
    model_params = dict(expected.named_parameters())
    for name, p in timed.named_parameters():
        if drawn[name] and p.numel() >= 1024:
            depth = 2**0.5 if name.endswith(RESIDUAL_PROJECTIONS) else 1.0
            ratio = float(p.detach().std() / model_params[name].detach().std()) / depth
            assert 0.8 < ratio < 1.25, (name, ratio)
    with torch.inference_mode():
        prepare("torch", module, inputs)()


def _timed_on_a_simulated_clock(cost, repeats: int, **kwargs) -> tuple[float, int]:
    """`seconds_per_call` of a call that takes `cost(now, calls made)` seconds of a simulated
    clock started at 0: (the timing, the calls made)."""
    clock = {"now": 0.0, "calls": 0}

    def call():
        clock["now"] += cost(clock["now"], clock["calls"])
        clock["calls"] += 1

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(timing.time, "perf_counter", lambda: clock["now"])
        return timing.seconds_per_call(call, repeats, 0.0, **kwargs), clock["calls"]


@settings(max_examples=40, deadline=None)
@given(
    cold_calls=st.integers(1, 20),
    steady_s=st.floats(1e-4, 0.02),
    slowdown=st.floats(1.2, 3.0),
    repeats=st.integers(1, 6),
)
def test_a_warm_up_times_the_steady_call_not_the_cold_ones(cold_calls, steady_s, slowdown, repeats):
    """A call `slowdown` x slower for its first `cold_calls` calls (a decode step right after
    its prefill): after the plan's warm-up the timing is the steady call; without it, and with
    fewer samples than cold calls, a cold one."""
    warmup = PLANS["full"].warmup

    def cost(now, calls):
        return steady_s * (slowdown if calls < cold_calls else 1.0)

    if cold_calls * steady_s * slowdown <= warmup:
        assert _timed_on_a_simulated_clock(cost, repeats, warmup=warmup)[0] == pytest.approx(
            steady_s
        )
    if repeats < cold_calls:
        assert _timed_on_a_simulated_clock(cost, repeats)[0] == pytest.approx(steady_s * slowdown)


@settings(max_examples=40, deadline=None)
@given(
    busy_s=st.floats(0.01, 0.5),
    steady_s=st.floats(1e-4, 0.02),
    slowdown=st.floats(1.2, 3.0),
    repeats=st.integers(1, 6),
)
def test_a_sampling_span_outlasts_a_busy_moment(busy_s, steady_s, slowdown, repeats):
    """A call slower while the machine is busy (its first `busy_s` seconds): samples spanning
    past that moment find the steady call; `repeats` back-to-back samples inside it do not."""

    def cost(now, calls):
        return steady_s * (slowdown if now < busy_s else 1.0)

    span = busy_s + 2 * steady_s * slowdown
    timed, calls = _timed_on_a_simulated_clock(cost, repeats, span=span)
    assert timed == pytest.approx(steady_s)
    assert repeats < calls <= 1 + max(repeats, span / steady_s + 1)
    if (repeats + 1) * steady_s * slowdown < busy_s:
        timed, calls = _timed_on_a_simulated_clock(cost, repeats)
        assert timed == pytest.approx(steady_s * slowdown) and calls == repeats + 1


_FAULTS_PER_CALL = """
import resource, sys, torch
from archsearch.latency.calibrate.timing import steady_allocator
if sys.argv[1] == "steady":
    assert steady_allocator()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):  # glibc reuses the freed chunk after a few calls, not at the first
    torch.ones(2**24)  # a 64 MiB temporary, freed at once
f0 = faults()
for _ in range(10):
    torch.ones(2**24)
print((faults() - f0) / 10)
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc: Linux only")
def test_a_steady_allocator_stops_a_freed_temporary_faulting_in_on_every_call():
    """A 64 MiB temporary made and freed again and again is page-faulted in anew on every call
    by glibc's default malloc; once `steady_allocator` has run (as every timing runs it), its
    pages are reused from a few calls on (a timing's warm-up): far fewer faults, in a fresh
    process each."""

    def faults_per_call(mode: str) -> float:
        cmd = [sys.executable, "-c", _FAULTS_PER_CALL, mode]
        return float(
            subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()[-1]
        )

    default, steady = faults_per_call("default"), faults_per_call("steady")
    assert default > 10 and steady <= default / 10


def test_a_whole_model_is_sampled_over_the_span_in_both_phases(monkeypatch):
    """`time_model` samples the prefill and the decode step each over the plan's span after its
    warm-up, and the timings are of one call, not of the span."""
    from archsearch.latency.calibrate.models import WholeModel

    calls = []
    real = timing.seconds_per_call

    def spy(fn, repeats, min_time, **kwargs):
        calls.append(kwargs)
        return real(fn, repeats, min_time, **kwargs)

    monkeypatch.setattr(timing, "seconds_per_call", spy)
    arch = ArchConfig(
        vocab_size=256, d_model=64, n_layers=1, max_seq_len=64, attention=AttentionConfig(n_heads=2)
    )
    how = plan("quick", repeats=2, warmup=0.05, span=0.1)
    ttft, decode = timing.time_model(WholeModel(arch, 8, 16), how)
    assert calls == [{"warmup": 0.05, "span": 0.1}] * 2
    assert 0 < decode < 0.1 and 0 < ttft < 0.1


HALF_STATE_MIXERS = {
    **{
        f: {"layers": {"mixer": "linear"}, "linear": {"family": f, "n_heads": 2}}
        for f in LINEAR_FAMILIES
    },
    "gqa": {"attention": {"kind": "gqa", "n_heads": 2, "n_kv_heads": 1}},
    "mla": {
        "attention": {"kind": "mla", "n_heads": 2, "kv_rank": 16, "head_dim": 8, "rope_dim": 4}
    },
    "mcsd": {"layers": {"mixer": "mcsd"}, "mcsd": {"n_channels": 4}},
}


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(sorted(HALF_STATE_MIXERS)), st.integers(1, 2), st.integers(1, 24))
def test_a_half_precision_state_built_in_fp32_is_the_models_own(mixer, batch, context):
    """`timing.state_after` with the model in fp32 gives a bf16 model the state its own prefill
    gives: the same keys, shapes, dtypes and position, values within bf16's rounding; and the
    bf16 step runs on it."""
    import copy

    import torch

    torch.manual_seed(0)
    fp32 = build_model(tiny_arch(**HALF_STATE_MIXERS[mixer])).eval()
    built = copy.deepcopy(fp32).to(torch.bfloat16)
    tokens = torch.randint(0, 256, (batch, context))
    own, cast = timing.state_after(built, tokens), timing.state_after(built, tokens, fp32)
    assert cast.pos == own.pos == context
    for mine, theirs in zip(cast.layers, own.layers):
        assert mine.keys() == theirs.keys()
        for k, t in theirs.items():
            assert (mine[k].shape, mine[k].dtype) == (t.shape, t.dtype)
            scale = t.float().abs().max().item() + 1e-3
            torch.testing.assert_close(mine[k].float(), t.float(), rtol=0.1, atol=0.1 * scale)
    with torch.inference_mode():
        logits, _ = built.step(tokens[:, -1], cast)
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()


@pytest.mark.slow
def test_calibrate_quick_writes_a_profile_the_latency_model_prices_with(tmp_path, capsys):
    out = tmp_path / "mine.yaml"
    args = ["calibrate", "threads=1", "repeats=1", "budget=quick", f"output={out}", "format=json"]
    assert main(args) == 0
    printed = capsys.readouterr()
    raw = json.loads(printed.out)["raw"]
    dev = load_device(str(out))  # named after its file
    assert dev.name == "mine" and dev.prefill_logits == "all" and dev.provenance.kind == "measured"
    assert (tmp_path / "mine.fitted.json").is_file() and dev.predictor is not None
    assert dev.peak("fp32") > 1e8 and dev.memory_bandwidth > 1e8
    # progress: every step counted, the last one done; one kernel's pass or one model a step
    steps = [line for line in printed.err.splitlines() if " calibrate: " in line]
    total = int(steps[0].split("/")[1].split()[0])
    assert [int(s.split(": ")[1].split("/")[0]) for s in steps] == list(range(1, total + 1))
    assert steps[-1].endswith("done")
    quick = PLANS["quick"]
    first = [s.split(", ")[1].split(")")[0] for s in steps if "kernels: pass 1 " in s]
    assert first == list(quick.kernels)
    # the check pools the held-out models (two in a smoke run; too few glue models to leave out)
    for q in ("ttft", "decode"):
        assert dev.check(q, "fp32").n == len(raw["held_out"]) == 2
        assert dev.check(q, "fp16") is dev.check(q, "bf16") and dev.check(q, "q8") is None
    # every timing a kernel's fit saw is kept, and refits to the same predictor
    assert {k: len(v) for k, v in raw["kernels"].items() if v} == {
        k: f.samples for k, f in dev.predictor.kernels.items()
    }
    again = predictor_dict(refit(raw)[0])
    assert again["kernels"] == predictor_dict(dev.predictor)["kernels"]
    roofline_only = dataclasses.replace(dev, predictor=None)
    c = columns(
        ArchConfig(vocab_size=1000, d_model=256, n_layers=3, attention=AttentionConfig(n_heads=4))
    )
    assert ttft_s(c, dev, 128, "fp32")[0] != ttft_s(c, roofline_only, 128, "fp32")[0]
    assert decode_s(c, dev, 128, "fp16")[0] == decode_s(c, roofline_only, 128, "fp16")[0]


def test_a_calibration_may_not_take_a_shipped_profiles_name(tmp_path, capsys):
    """A name means one profile wherever a command reads it: an output file named like a
    shipped profile is refused in one line before anything is timed or written."""
    out = tmp_path / "rpi5.yaml"
    assert main(["calibrate", "budget=quick", f"output={out}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'rpi5' is a shipped or plugin device profile's name" in err[0]
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_the_code_befores_timings_in_this_codes_form_refit_to_the_same_predictor(monkeypatch):
    """`bench_latency_same_timings.before_as_raw` reads a calibration in the code before's raw
    form (kernel timings nested under `kernels`, the probe and whole models as lists, held-out
    models as `validation`): what it keeps refits to the predictor of the timings it came from,
    and a kernel shape off this code's grid is dropped rather than refitted wrongly."""
    bench = load_benchmark("bench_latency_same_timings")
    FakeMachine(monkeypatch)
    this = json.loads(json.dumps(calibrate(PLANS["quick"])))
    raw = this["raw"]
    off_grid = {**raw["kernels"]["gemm"][0], "m": 3}  # 3 rows: no point of this grid
    whole = lambda e: {**e, "predicted_s": [1.0, 1.0]}  # noqa: E731  the code before kept more
    before = {
        "raw": {
            "kernels": {
                "kernels": {
                    k: v + ([off_grid] if k == "gemm" else []) for k, v in raw["kernels"].items()
                },
                "memory": [{"bytes": b, "seconds": s} for b, s in zip(*raw["memory"].values())],
                "glue": [whole(e) for e in raw["glue"]],
                "validation": [whole(e) for e in raw["held_out"]],
            }
        }
    }
    converted = bench.before_as_raw(before, this)
    assert converted["kernels"] == raw["kernels"]
    assert (converted["memory"], converted["glue"]) == (raw["memory"], raw["glue"])
    assert converted["held_out"] == raw["held_out"]
    mine, theirs = (predictor_dict(refit(r)[0]) for r in (converted, raw))
    assert {k: v for k, v in mine.items() if k != "date"} == {
        k: v for k, v in theirs.items() if k != "date"
    }


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), kernel=st.sampled_from(["gqa.forward", "moe", "gemm"]))
def test_the_random_half_covers_every_value_of_every_knob(seed, kernel):
    """The random half of a kernel's shapes is stratified (`least_taken`): every value of every
    knob's grid is drawn, none more than about twice its fair share (independent draws leave a
    width or a batch out about one time in five)."""
    samples = 96 if kernel == "gemm" else 48
    sampler = Sampler(kernel, lambda s: 1e-4, samples, random.Random(seed), None)
    for _ in range(sampler.initial):
        sampler.step()
    for knob, values in timing.GRIDS[kernel].items():
        counts = np.bincount([dict(s.index)[knob] for s in sampler.shapes], minlength=len(values))
        fair = len(sampler.shapes) / len(values)
        assert counts.min() >= 1 and counts.max() <= 2 * fair + 1, (knob, counts)
