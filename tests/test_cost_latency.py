"""Device profiles, the roofline latency model, the vectorised table, and the cost / prune /
calibrate commands."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from archsearch.arch import (
    LINEAR_FAMILIES,
    ArchConfig,
    AttentionConfig,
    LayersConfig,
    LinearConfig,
    MCSDConfig,
    load_arch,
)
from archsearch.cli import main
from archsearch.cost import model
from archsearch.cost.counts import LAUNCHES
from archsearch.cost.ops import Columns, Phase
from archsearch.latency import columns, decode_s, e2e_s, metric_value, metric_values, ttft_s
from archsearch.latency.profile import all_devices, load_device
from archsearch.metrics import MetricSpec
from archsearch.models.registry import build_sequence_mixer

SEED_PLM_TABLE_12 = {  # PLM-1.8B: prefill 512 tokens/s, generate 128 tokens/s
    "nvidia_a10": {"fp16": (9129.39, 102.30), "q8": (8833.31, 157.35), "q4": (8266.53, 197.48)},
    "jetson_orin_nx": {"fp16": (987.22, 12.94), "q8": (989.01, 20.94), "q4": (910.61, 27.04)},
    "apple_m3": {"fp16": (716.94, 23.31), "q8": (707.76, 38.89), "q4": (680.78, 59.44)},
    "snapdragon_8gen3": {"fp16": (44.35, 10.34), "q8": (64.18, 13.78), "q4": (48.05, 18.74)},
    "rpi5": {"fp16": (26.29, 2.76), "q8": (29.04, 5.31), "q4": (23.57, 8.02)},
}


def spec(metric, **args):
    from archsearch.metrics import METRICS

    full = {**METRICS[metric].args, **args}
    return MetricSpec(metric, tuple(full.items()))


# ---- device profiles ----------------------------------------------------------------------------


def test_every_device_figure_has_a_source_and_sane_factors():
    names = {d.name for d in all_devices()}
    assert {
        "nvidia_a10",
        "jetson_orin_nx",
        "apple_m3",
        "snapdragon_8gen3",
        "rpi5",
        "local",
    } <= names
    for d in all_devices():
        for key in (
            "peak_flops.fp32",
            "peak_flops.fp16",
            "peak_flops.int8",
            "memory_bandwidth",
            "memory_capacity",
        ):
            assert d.sources.get(key), (d.name, key)
        assert d.memory_bandwidth > 0 and d.memory_capacity > 0
        for eff in d.efficiency.values():
            assert 0 < eff.compute <= 1 and 0 < eff.bandwidth <= 1 and eff.source


@pytest.mark.parametrize("device", sorted(SEED_PLM_TABLE_12))
def test_edge_profiles_reproduce_seed_plm_table_12(device):
    """The efficiencies, fitted to all eight models of the table (benchmarks/
    fit_edge_profiles.py), bring PLM-1.8B within 35% of every measured throughput."""
    dev = load_device(device)
    c = columns(load_arch("plm_1_8b"))
    for precision, (prefill_tps, generate_tps) in SEED_PLM_TABLE_12[device].items():
        ttft = ttft_s(c, dev, 512, precision)[0]
        decode = decode_s(c, dev, 512 + 63.5, precision)[0]
        assert 512 / ttft == pytest.approx(prefill_tps, rel=0.35), precision
        assert 1 / decode == pytest.approx(generate_tps, rel=0.35), precision


def test_bad_device_files_are_one_line_errors(tmp_path, capsys):
    bad = tmp_path / "dev.yaml"
    bad.write_text(
        "name: x\npeak_flops: {fp32: 1e12, fp16: 2e12}\nmemory_bandwidth: 1e9\n"
        "memory_capacity: 1e9\n"
    )
    assert main(["cost", f"device={bad}"]) == 2
    err = capsys.readouterr().err
    assert "peak_flops" in err and "int8" in err and err.count("\n") == 1


# ---- the latency model ----------------------------------------------------------------------------

BASE = dict(vocab_size=4096, d_model=512, n_layers=4, max_seq_len=65536)
ATTN = ArchConfig(**BASE, attention=AttentionConfig(n_heads=8, n_kv_heads=2))
GLA = ArchConfig(**BASE, layers=LayersConfig(mixer="linear"), linear=LinearConfig(family="gla"))
MCSD = ArchConfig(**BASE, layers=LayersConfig(mixer="mcsd"), mcsd=MCSDConfig(n_channels=8))


def test_decode_time_is_flat_for_recurrent_mixers_and_grows_for_attention():
    dev = load_device("rpi5")
    for arch in (GLA, MCSD):
        c = columns(arch)
        short, long = (decode_s(c, dev, n, "q8")[0] for n in (256, 32768))
        assert short == long
    c = columns(ATTN)
    times = [decode_s(c, dev, n, "q8")[0] for n in (256, 4096, 32768)]
    assert times[0] < times[1] < times[2]


def test_end_to_end_is_prefill_plus_generation():
    dev = load_device("jetson_orin_nx")
    c = columns(GLA)
    e2e = e2e_s(c, dev, 512, 128, "fp16")[0]
    assert e2e == pytest.approx(
        ttft_s(c, dev, 512, "fp16")[0] + 128 * decode_s(c, dev, 600, "fp16")[0]
    )


def test_quantised_weights_decode_faster_when_bandwidth_bound():
    c = columns(load_arch("llama_gqa_1b"))
    dev = load_device("nvidia_a10")
    fp16, q8, q4 = (decode_s(c, dev, 512, p)[0] for p in ("fp16", "q8", "q4"))
    assert fp16 > q8 > q4
    # weight bytes follow the Q8_0 / Q4_0 block layouts (8.5 and 4.5 bits per weight)
    wb = {p: model.weight_bytes(c, p)[0] for p in ("fp16", "q8", "q4")}
    assert wb["q8"] / wb["fp16"] == pytest.approx(8.5 / 16, rel=0.01)
    assert wb["q4"] / wb["fp16"] == pytest.approx(4.5 / 16, rel=0.01)


def test_latency_grows_with_depth_and_width():
    dev = load_device("snapdragon_8gen3")
    for metric in ("ttft_ms", "decode_ms"):
        s = spec(metric, device="snapdragon_8gen3")
        small = metric_value(ATTN, s)
        deeper = metric_value(ArchConfig(**{**BASE, "n_layers": 8}, attention=ATTN.attention), s)
        wider = metric_value(ArchConfig(**{**BASE, "d_model": 1024}, attention=ATTN.attention), s)
        assert small < deeper and small < wider
    assert dev.prefill_logits == "last"


def test_mla_trades_cache_for_compute_as_seed_plm_section_7_says():
    gqa = ArchConfig(**BASE, attention=AttentionConfig(n_heads=8, n_kv_heads=8))
    mla = ArchConfig(
        **BASE, attention=AttentionConfig(kind="mla", n_heads=8, kv_rank=128, rope_dim=32)
    )
    cg, cm = columns(gqa), columns(mla)
    assert model.cache_bytes(cm, 8192)[0] < model.cache_bytes(cg, 8192)[0] / 4
    step = Phase("step", T=1, n0=8192)
    from archsearch.cost.model import flops

    # per decoded token the absorbed MLA attention does more arithmetic than MHA over the cache
    assert flops(cm, step)[0] > flops(cg, step)[0]


class _Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_operator_counts_match_the_models(name):
    """The launch table behind the per-operator overhead stays within 25% of what the
    implementation dispatches (decode step, one chunk, four chunks)."""
    base = dict(vocab_size=50, d_model=64, n_layers=1, max_seq_len=4096)
    if name in ("gqa", "mla"):
        att = (
            AttentionConfig(n_heads=4, n_kv_heads=2)
            if name == "gqa"
            else AttentionConfig(kind="mla", n_heads=4, kv_rank=16, rope_dim=4)
        )
        arch = ArchConfig(**base, attention=att)
    elif name == "mcsd":
        arch = ArchConfig(**base, layers=LayersConfig(mixer="mcsd"), mcsd=MCSDConfig(4))
    else:
        arch = ArchConfig(
            **base, layers=LayersConfig(mixer="linear"), linear=LinearConfig(family=name, n_heads=2)
        )
    r = arch.resolved()
    mixer = build_sequence_mixer(r, r.pattern[0])
    step, first, per_chunk = LAUNCHES[name]
    with torch.no_grad():
        _, state = mixer.prefill(torch.randn(1, 300, 64), mixer.init_state(1), 0)
        counts = {}
        for key, fn in (
            ("step", lambda: mixer.step(torch.randn(1, 64), state, 300)),
            ("one", lambda: mixer.prefill(torch.randn(1, 64, 64), mixer.init_state(1), 0)),
            ("four", lambda: mixer.prefill(torch.randn(1, 256, 64), mixer.init_state(1), 0)),
        ):
            with _Count() as c:
                fn()
            counts[key] = c.n
    assert counts["step"] == pytest.approx(step, rel=0.25)
    assert counts["one"] == pytest.approx(first, rel=0.25)
    assert counts["four"] == pytest.approx(first + 3 * per_chunk, rel=0.25)


# ---- the vectorised table -------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["N", "L", "M", "LN"]),
            st.sampled_from(LINEAR_FAMILIES),
            st.sampled_from([64, 128, 256]),
            st.integers(1, 6),
            st.booleans(),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_the_table_gives_each_row_its_own_answer(rows):
    archs = []
    for pattern, family, d, depth, mla in rows:
        layers = len(pattern) * depth
        att = (
            AttentionConfig(kind="mla", n_heads=4, kv_rank=32)
            if mla
            else AttentionConfig(n_heads=4, n_kv_heads=2)
        )
        archs.append(
            ArchConfig(
                vocab_size=512,
                d_model=d,
                n_layers=layers,
                layers=LayersConfig(pattern=pattern),
                attention=att,
                linear=LinearConfig(family=family, n_heads=2),
                mcsd=MCSDConfig(n_channels=4),
            )
        )
    table = Columns.from_archs(archs)
    for s in (
        spec("params"),
        spec("cache_bytes", context=4096),
        spec("decode_ms", device="rpi5", precision="q4"),
        spec("ttft_ms", device="apple_m3"),
        spec("memory_bytes"),
        spec("train_flops_per_token"),
    ):
        together = metric_values(table, s)
        alone = [metric_value(a, s) for a in archs]
        np.testing.assert_allclose(together, alone, rtol=1e-12)


# ---- commands -----------------------------------------------------------------------------------------


def test_cost_command_reports_and_plots(tmp_path, capsys):
    plot = tmp_path / "lengths.png"
    code = main(
        [
            "cost",
            "arch=plm_1_8b,mcsd_1_6b",
            "device=rpi5",
            "precision=q4",
            "seq_lens=[512,4096]",
            f"plot={plot}",
            "format=json",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    plm, mcsd = data["reports"]
    assert plm["totals"]["params"] == pytest.approx(1.8255e9, rel=1e-3)
    assert plm["curves"]["cache_bytes"][1] == 8 * plm["curves"]["cache_bytes"][0]
    assert mcsd["curves"]["cache_bytes"][1] == mcsd["curves"]["cache_bytes"][0]
    parts = {r["part"] for r in plm["breakdown"]}
    assert {"attention", "ffn", "lm head"} <= parts
    assert sum(r["decode_ms"] for r in plm["breakdown"]) == pytest.approx(
        plm["totals"]["decode_ms"], rel=1e-9
    )
    assert plot.stat().st_size > 10_000


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["cost", "device=toaster"], "unknown device 'toaster'"),
        (["cost", "precision=q3"], "unknown precision 'q3'"),
        (["cost", "context=0"], "context"),
        (["cost", "seq_lens=[512,-1]"], "seq_lens"),
        (["cost", "arch=plm_1_8b,nope"], "unknown architecture preset 'nope'"),
        (["prune", "search_space=nope"], "unknown search space"),
        (["prune", "device=toaster"], "unknown device"),
        (["calibrate", "threads=0"], "threads"),
    ],
)
def test_cost_commands_reject_bad_input(argv, fragment, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_prune_counts_every_constraint(capsys):
    assert main(["prune", "search_space=plm_edge", "device=rpi5", "format=json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["assignments"] == 384 and not data["sampled"]
    from archsearch.space import assignments, build, load_space

    sp = load_space("plm_edge")
    archs = [build(sp, a).arch for a in assignments(sp)]
    feasible = 0
    for a in archs:
        ok = all(
            c.violation(metric_value(a, c.spec.on_device("rpi5", only_unset=True))) <= 0
            for c in sp.constraints
        )
        feasible += ok
    assert data["survivors"] == feasible
    for c in sp.constraints:
        expected = sum(
            c.violation(metric_value(a, c.spec.on_device("rpi5", only_unset=True))) > 0
            for a in archs
        )
        assert data["pruned_by_constraint"][c.name] == expected
