"""Bring your own mixer (issue 16): plugins by name, costs by tracing, the conformance kit.

The example plugin package `examples/archsearch-hyena` (a Hyena-style long convolution, a ReGLU
channel mixer and a device profile) and the broken plugins of `tests/fixtures/badmix` are
installed with pip into a temporary target per test session and put on `sys.path` (and on the
subprocesses' PYTHONPATH) with their dist-info, so their entry points resolve without touching
the test environment.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import EXE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archsearch import plugins
from archsearch.arch import (
    LINEAR_FAMILIES,
    ArchConfig,
    AttentionConfig,
    InvalidArch,
    LayersConfig,
    LinearConfig,
    MCSDConfig,
)
from archsearch.cost import model as cm
from archsearch.cost.counts import block_modules, params, state_elements
from archsearch.cost.ops import Columns, Phase
from archsearch.cost.traced import TracedCostError
from archsearch.latency import decode_s, ttft_s
from archsearch.models import build_model, sequence_mixer_class, sequence_mixer_name
from archsearch.models.conformance import ContractViolation, assert_conforms, check_mixer
from archsearch.models.contract import SequenceMixer, satisfies
from archsearch.models.tracing import state_elements as traced_state
from archsearch.models.tracing import trace

ROOT = Path(__file__).resolve().parents[1]
PIP_INSTALL = (sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation")
PUBLISHED = json.loads((ROOT / "benchmarks/results/traced_vs_analytic.json").read_text())


def pip_install(src: Path, root: Path) -> Path:
    """`src` (a copy of it) installed with pip into its own target folder under `root`."""
    copy, site = root / src.name, root / f"{src.name}-site"
    shutil.copytree(src, copy)
    subprocess.run(
        [*PIP_INSTALL, "--target", str(site), str(copy)], check=True, capture_output=True
    )
    return site


@pytest.fixture(scope="session")
def plugin_sites(tmp_path_factory) -> tuple[Path, Path]:
    """(the example plugin's target, the broken plugins' target), each pip-installed."""
    root = tmp_path_factory.mktemp("plugins")
    return (
        pip_install(ROOT / "examples/archsearch-hyena", root),
        pip_install(ROOT / "tests/fixtures/badmix", root),
    )


@pytest.fixture
def example(plugin_sites, monkeypatch):
    """Only the example plugin visible to this process (and to `run`'s subprocesses)."""
    yield from _visible(monkeypatch, plugin_sites[:1])


@pytest.fixture
def installed(plugin_sites, monkeypatch):
    """The example and the broken plugins visible to this process and its subprocesses."""
    yield from _visible(monkeypatch, plugin_sites)


def _visible(monkeypatch, sites):
    for site in sites:
        monkeypatch.syspath_prepend(str(site))
    plugins.refresh()
    yield os.pathsep.join(map(str, sites))
    monkeypatch.undo()
    plugins.refresh()


def run(*args: str, site: str | None, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (site, env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [EXE, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=600
    )


def cli(capsys, *args: str) -> subprocess.CompletedProcess:
    """`archsearch ARGS` in this process (the installed plugins are on its sys.path)."""
    from archsearch.cli import main

    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return subprocess.CompletedProcess(["archsearch", *args], code, out.out, out.err)


def one_line_error(res: subprocess.CompletedProcess, *needles: str) -> str:
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def hyena_arch(d: int = 32, layers: int = 2, share: float = 0.5, ffn: str = "hyena.reglu"):
    return ArchConfig.from_dict(
        {
            "vocab_size": 64,
            "d_model": d,
            "n_layers": layers,
            "max_seq_len": 256,
            "layers": {"mixer": "linear", "attention_share": share},
            "attention": {"kind": "gqa", "n_heads": 2, "n_kv_heads": 1},
            "linear": {"family": "hyena.long_conv", "gate_rank": 8, "conv_size": 3},
            "ffn": {"kind": ffn, "d_ffn": 2 * d},
        }
    )


# ---- plugins by name ------------------------------------------------------------------------


@pytest.mark.slow
def test_discovery_reads_metadata_only_and_never_imports_torch(plugin_sites, tmp_path):
    (tmp_path / "space.yaml").write_text(SPACE)
    code = (
        "import sys; from archsearch import plugins; from archsearch.cli import main; "
        "print(plugins.names(plugins.MIXERS), plugins.names(plugins.CHANNEL_MIXERS), "
        "plugins.names(plugins.DEVICES)); "
        f"assert main(['space', 'show', 'space_file={tmp_path / 'space.yaml'}']) == 0; "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "assert 'archsearch_hyena' not in sys.modules, 'the plugin imported'"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, plugin_sites))}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    assert "hyena.long_conv" in res.stdout and "hyena.reglu" in res.stdout
    assert "hyena.pi5_slow" in res.stdout and "badmix.acausal" in res.stdout
    assert "16" in res.stdout  # the space's size, with the plugin names among its choices


@pytest.mark.slow
def test_an_unknown_name_in_a_space_lists_the_plugins(installed, tmp_path, capsys):
    (tmp_path / "space.yaml").write_text(SPACE.replace("choice(hyena.long_conv, gla)", "hyena.x"))
    res = cli(capsys, "space", "show", f"space_file={tmp_path / 'space.yaml'}")
    one_line_error(res, "space.yaml", "linear.family", "unknown value 'hyena.x'", "hyena.long_conv")


def test_a_registered_plugin_is_named_like_a_builtin(installed):
    arch = hyena_arch()
    assert arch.resolved().pattern == "LN"
    model = build_model(arch)
    assert type(model.blocks[0].mixer).__name__ == "HyenaLongConv"
    assert type(model.blocks[0].ffn).__name__ == "ReGLU"
    # the plugin's hash is stable and a built-in's is unchanged by the plugin machinery
    assert arch.arch_hash == hyena_arch().arch_hash
    builtin = ArchConfig.from_dict({**arch.to_dict(), "linear": {"family": "gla"}})
    assert builtin.linear.family == "gla" and builtin.arch_hash != arch.arch_hash


def test_an_unregistered_name_lists_the_installed_plugins(installed):
    data = hyena_arch().to_dict()
    data["linear"]["family"] = "hyena.nope"
    with pytest.raises(InvalidArch) as err:
        ArchConfig.from_dict(data, source="a.yaml")
    assert "unknown value 'hyena.nope'" in str(err.value)
    assert "gla" in str(err.value) and "hyena.long_conv" in str(err.value)


def test_without_the_package_the_name_is_unknown_on_the_command_line(tmp_path, capsys):
    arch = {
        "vocab_size": 64,
        "d_model": 32,
        "n_layers": 2,
        "layers": {"mixer": "linear"},
        "linear": {"family": "hyena.long_conv"},
    }
    (tmp_path / "a.yaml").write_text(json.dumps(arch))
    res = cli(capsys, "cost", f"arch={tmp_path / 'a.yaml'}")
    one_line_error(res, "a.yaml", "linear.family", "unknown value 'hyena.long_conv'", "gla")


def test_yaml_never_imports_a_python_path(installed):
    data = hyena_arch().to_dict()
    data["linear"]["family"] = "os:system"
    with pytest.raises(InvalidArch, match="unknown value 'os:system'"):
        ArchConfig.from_dict(data)


def test_a_registered_object_that_is_not_a_mixer_is_one_line(installed, tmp_path, capsys):
    data = hyena_arch().to_dict()
    data["linear"]["family"] = "badmix.not_a_mixer"
    (tmp_path / "a.yaml").write_text(json.dumps(data))
    res = cli(capsys, "cost", f"arch={tmp_path / 'a.yaml'}")
    one_line_error(res, "badmix.not_a_mixer", "is not a sequence mixer")
    res = cli(capsys, "cost", "arch=tiny_gqa", "device=hyena.nope")
    one_line_error(res, "device", "unknown device 'hyena.nope'", "rpi5", "hyena.pi5_slow")
    res = cli(capsys, "cost", "arch=tiny_gqa", "device=badmix.no_file")
    one_line_error(res, "device", "must register the path of a profile YAML")


def test_a_plugin_device_prices_like_a_shipped_one(installed):
    from archsearch.cost.devices import device_names
    from archsearch.latency import load_device

    assert "hyena.pi5_slow" in device_names()
    slow, rpi5 = load_device("hyena.pi5_slow"), load_device("rpi5")
    assert slow.memory_bandwidth == pytest.approx(rpi5.memory_bandwidth / 2, rel=1e-3)
    c = Columns.from_archs([hyena_arch(d=64)])
    # decoding one token is memory-bound: the slower memory makes it slower
    assert decode_s(c, slow, 512, "fp16")[0] > decode_s(c, rpi5, 512, "fp16")[0]


# ---- the contract ---------------------------------------------------------------------------

BASE = dict(vocab_size=50, d_model=32, n_layers=1, max_seq_len=256)
BUILTINS = {
    **{
        f: ArchConfig(**BASE, layers=LayersConfig(pattern="L"), linear=LinearConfig(family=f))
        for f in LINEAR_FAMILIES
    },
    "gqa": ArchConfig(**BASE, attention=AttentionConfig(kind="gqa", n_heads=4, n_kv_heads=2)),
    "gqa_window": ArchConfig(
        **BASE, attention=AttentionConfig(kind="gqa", n_heads=4, n_kv_heads=2, window=8)
    ),
    "mla": ArchConfig(**BASE, attention=AttentionConfig(kind="mla", n_heads=4, kv_rank=16)),
    "mcsd": ArchConfig(**BASE, layers=LayersConfig(pattern="M"), mcsd=MCSDConfig(n_channels=4)),
}


def builtin_class(arch: ArchConfig):
    r = arch.resolved()
    return sequence_mixer_class(sequence_mixer_name(r, r.pattern[0]))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_every_builtin_satisfies_the_contract_and_passes_the_kit(name):
    arch = BUILTINS[name].resolved()
    cls = builtin_class(arch)
    assert satisfies(cls)
    assert isinstance(cls(arch), SequenceMixer)
    checks = assert_conforms(cls, arch)
    assert [c.name for c in checks] == [
        "contract",
        "decode_equals_parallel",
        "causality",
        "state_growth",
        "gradients",
        "traced_costs",
    ]


def test_the_example_plugin_passes_the_kit_with_its_declared_formulas(installed):
    from archsearch_hyena.mixer import HyenaLongConv

    checks = {c.name: c for c in assert_conforms(HyenaLongConv, tokens=30)}
    assert "equal to the declared formulas" in checks["traced_costs"].detail
    assert "growing" in checks["state_growth"].detail


def test_the_kit_finds_what_a_broken_mixer_breaks(installed):
    from badmix import Acausal

    failed = {c.name for c in check_mixer(Acausal) if not c.ok}
    assert {"decode_equals_parallel", "causality"} <= failed
    with pytest.raises(ContractViolation, match="causality"):
        assert_conforms(Acausal)


def test_the_kit_checks_declared_formulas_against_tracing(installed):
    from archsearch_hyena.mixer import HyenaLongConv

    class WrongFormula(HyenaLongConv):
        @staticmethod
        def declared_costs(arch, kind, T, n0, B):
            got = HyenaLongConv.declared_costs(arch, kind, T, n0, B)
            return {**got, "flops": got["flops"] + 2}

    checks = {c.name: c for c in check_mixer(WrongFormula)}
    assert not checks["traced_costs"].ok
    assert "forward flops declared" in checks["traced_costs"].detail


def test_the_kit_rejects_a_class_without_the_declarations():
    class Bare(torch.nn.Module):
        def forward(self, x):
            return x

    (check,) = check_mixer(Bare)
    assert not check.ok and "init_state" in check.detail and "state_growth" in check.detail


def test_a_plugin_may_only_read_what_the_contract_lists(installed):
    from archsearch_hyena.mixer import HyenaLongConv

    class ReadsAttention(HyenaLongConv):
        reads = ("d_model", "attention.n_heads")

    (check,) = check_mixer(ReadsAttention)
    assert not check.ok and "attention.n_heads, which a plugin cannot read" in check.detail


def test_builtin_channel_mixers_satisfy_the_protocol():
    from archsearch.arch import FFN_KINDS
    from archsearch.models import channel_mixer_class
    from archsearch.models.contract import ChannelMixer

    x = torch.randn(2, 5, 16)
    for kind in FFN_KINDS:
        ffn = channel_mixer_class(kind)(16, 24)
        assert isinstance(ffn, ChannelMixer)
        assert ffn(x).shape == x.shape
        # position by position: the output at t depends on the input at t only
        y = ffn(torch.cat([x[:, :3], torch.randn(2, 2, 16)], dim=1))
        assert torch.allclose(y[:, :3], ffn(x)[:, :3])


def test_check_mixer_command(installed, tmp_path, capsys):
    ok = cli(capsys, "check-mixer", "hyena.long_conv", "format=json")
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert report["ok"] and len(report["checks"]) == 6
    # a class by import path: the user's explicit request on the command line
    res = cli(capsys, "check-mixer", "badmix:Acausal")
    one_line_error(res, "badmix:Acausal fails", "causality")
    res = cli(capsys, "check-mixer", "hyena.nope")
    one_line_error(res, "mixer", "unknown mixer 'hyena.nope'", "hyena.long_conv")
    res = cli(capsys, "check-mixer", "no_such_module:X")
    one_line_error(res, "cannot import 'no_such_module:X'")


# ---- costs by tracing -------------------------------------------------------------------------


def counted(fn) -> float:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        fn()
    return float(sum(fc.get_flop_counts()["Global"].values()))


@pytest.mark.slow
@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)  # the fixture only puts the installed plugins on sys.path: the same for every example
@given(
    d=st.sampled_from([16, 32, 48]),
    layers=st.sampled_from([1, 2, 4]),
    share=st.sampled_from([0.0, 0.5]),
    ffn=st.sampled_from(["hyena.reglu", "swiglu"]),
    T=st.integers(1, 40),
    n0=st.integers(1, 30),
)
def test_plugin_costs_equal_the_built_model(installed, d, layers, share, ffn, T, n0):
    arch = hyena_arch(d, layers, share, ffn)
    model = build_model(arch).eval()
    c = Columns.from_archs([arch])
    assert params(c)["params"][0] == sum(p.numel() for p in model.parameters())
    idx = torch.randint(0, 64, (2, T + n0))
    assert cm.flops(c, Phase("forward", T=T, B=2))[0] == counted(lambda: model(idx[:, :T]))
    with torch.no_grad():
        _, state = model.prefill(idx[:, :n0])
        assert model.state_nbytes(state) == 4 * state_elements(c, n0, 2)[0]
        after = Phase("forward", T=T, n0=n0, B=2)
        assert cm.flops(c, after)[0] == counted(lambda: model.prefill(idx[:, n0:], state))
        step = Phase("step", T=1, n0=n0, B=2)
        assert cm.flops(c, step)[0] == counted(lambda: model.step(idx[:, 0], state))


def test_the_cost_report_says_what_is_traced(installed, tmp_path, capsys):
    (tmp_path / "h.yaml").write_text(json.dumps(hyena_arch().to_dict()))
    res = cli(capsys, "cost", f"arch={tmp_path / 'h.yaml'}", "device=hyena.pi5_slow", "format=json")
    assert res.returncode == 0, res.stderr
    (report,) = json.loads(res.stdout)["reports"]
    assert report["traced"] == ["sequence mixer hyena.long_conv", "channel mixer hyena.reglu"]
    assert any(n.startswith("traced (") for n in report["notes"])
    res = cli(capsys, "cost", "arch=tiny_gqa", "format=json")
    assert json.loads(res.stdout)["reports"][0]["traced"] == []
    # the growing state of the long convolution: 2 B per element at 16 bits, at the context
    t = report["totals"]
    c = Columns.from_archs([hyena_arch()])
    assert t["cache_bytes_16bit"] == 2 * state_elements(c, 2048)[0]
    assert state_elements(c, 4096)[0] > state_elements(c, 2048)[0]


def test_tracing_is_cached_per_shape_across_a_table(installed):
    from archsearch.cost import traced

    archs = [hyena_arch(d, n, s) for d in (16, 32) for n in (2, 4) for s in (0.0, 0.5)]
    c = Columns.from_archs(archs * 50)
    before = traced.traces_run()
    metric = decode_s(c, load_device_named("rpi5"), 777, "q8")
    misses = traced.traces_run() - before
    assert misses <= 8  # 2 widths x batch 1, 2 x mixer, FFN: 400 rows priced from 8 traces
    assert np.all(metric > 0) and metric[:8].tolist() == metric[8:16].tolist()


def load_device_named(name: str):
    from archsearch.latency import load_device

    return load_device(name)


def test_a_plugin_whose_tracing_fails_is_one_line(installed, tmp_path, capsys):
    data = hyena_arch().to_dict()
    data["linear"]["family"] = "badmix.short_filter"
    (tmp_path / "s.yaml").write_text(json.dumps(data))
    # it passes the kit at 24 tokens, but a 512-token prompt cannot be traced
    from badmix import ShortFilter

    assert_conforms(ShortFilter)
    res = cli(capsys, "cost", f"arch={tmp_path / 's.yaml'}", "prompt=512")
    one_line_error(res, "badmix.short_filter", "tracing its cost failed", "T=512")
    with pytest.raises(TracedCostError):
        ttft_s(
            Columns.from_archs([ArchConfig.from_dict(data)]), load_device_named("rpi5"), 512, "fp16"
        )


BUILTIN_PUBLISHED = {
    name: errs for name, errs in PUBLISHED["errors"].items() if not name.startswith("ffn:")
}


@settings(max_examples=12, deadline=None)
@given(
    name=st.sampled_from(sorted(BUILTINS)),
    d=st.sampled_from([32, 64]),
    T=st.integers(1, 90),
    n0=st.integers(0, 60),
)
def test_traced_counts_equal_the_analytic_ones_within_the_published_error(name, d, T, n0):
    arch = ArchConfig.from_dict({**BUILTINS[name].to_dict(), "d_model": d}).resolved()
    cls = builtin_class(arch)
    c = Columns.from_archs([arch])
    published = BUILTIN_PUBLISHED[name if name in BUILTIN_PUBLISHED else "gqa"]

    def analytic(p: Phase) -> float:
        return sum(
            float(np.asarray(op.flops).ravel()[0])
            for cat, count, ops in block_modules(c)
            if cat in ("attention", "linear", "mcsd") and count[0] > 0
            for op in ops(c, p)
        )

    def within(traced: float, want: float, key: str) -> bool:
        return math.isclose(traced, want, rel_tol=published[key] + 1e-12, abs_tol=1e-9)

    fwd = trace(lambda: cls(arch), "forward", T, n0, 2, d)
    phase = Phase("forward", T=T, n0=n0, B=2)
    assert within(fwd.flops, analytic(phase), "forward_flops" if n0 == 0 else "prefill_flops")
    step = trace(lambda: cls(arch), "step", 1, n0, 2, d)
    assert within(step.flops, analytic(Phase("step", T=1, n0=n0, B=2)), "step_flops")
    got = traced_state(lambda: cls(arch), n0, 2, d)
    assert within(got, float(state_elements(c, n0, 2)[0]), "state_elements")


def test_the_published_errors_cover_every_builtin():
    names = set(PUBLISHED["errors"])
    assert set(LINEAR_FAMILIES) | {"mha", "gqa", "mqa", "mla", "mcsd"} <= names
    for errs in PUBLISHED["errors"].values():
        assert {"params", "forward_flops", "backward_flops"} <= set(errs)


# ---- the whole pipeline -------------------------------------------------------------------

SPACE = """\
name: hyena_demo
base: tiny_gqa
params:
  n_layers: 2
  d_model: choice(32, 64)
  layers.mixer: linear
  linear.family: choice(hyena.long_conv, gla)
  layers.attention_share: choice(0.0, 0.5)
  ffn.kind: choice(hyena.reglu, swiglu)
derived:
  attention.n_heads: ${div:${d_model},16}
  linear.n_heads: ${div:${d_model},16}
  ffn.d_ffn: ${mul:${d_model},2}
constraints:
  - {metric: params, max: 200K}
  - {metric: cache_bytes, max: 4MiB, context: 1024, bits: 16}
objectives:
  - {metric: val_loss, direction: minimize}
  - {metric: decode_ms, direction: minimize, device: hyena.pi5_slow, context: 512, precision: q8}
train:
  budget: steps:3
  batch_size: 2
  seq_len: 32
  eval_batches: 1
"""


@pytest.mark.slow
def test_the_example_plugin_goes_through_the_whole_pipeline(example, tmp_path):
    (tmp_path / "space.yaml").write_text(SPACE)
    show = run(
        "space", "show", "space_file=./space.yaml", "format=json", site=example, cwd=tmp_path
    )
    assert show.returncode == 0, show.stderr
    assert json.loads(show.stdout)["size"] == 16

    prune = run(
        "prune",
        "space_file=./space.yaml",
        "device=hyena.pi5_slow",
        "format=json",
        site=example,
        cwd=tmp_path,
    )
    assert prune.returncode == 0, prune.stderr
    pruned = json.loads(prune.stdout)
    assert pruned["survivors"] > 0

    sweep = run(
        "sweep",
        "space_file=./space.yaml",
        "run_dir=run",
        "trials=3",
        "concurrency=1",
        "seed=0",
        "format=json",
        site=example,
        cwd=tmp_path,
    )
    assert sweep.returncode == 0, sweep.stderr
    from archsearch.study import load

    recs = load(str(tmp_path / "run")).records
    trained = [r for r in recs if r.status == "trained"]
    assert len(trained) == 3, ([(r.status, r.reason) for r in recs], sweep.stderr[-3000:])
    archs = {r.number: ArchConfig.from_dict(r.attrs["arch"]) for r in trained}
    # every trained trial was priced on the plugin device, whatever its mixer
    assert all(r.values is not None and len(r.values) == 2 for r in trained)

    pareto = run(
        "pareto", "study=run", "device=hyena.pi5_slow", "format=json", site=example, cwd=tmp_path
    )
    assert pareto.returncode == 0, pareto.stderr

    plugin = [n for n, a in archs.items() if a.linear and a.linear.family == "hyena.long_conv"]
    number = plugin[0] if plugin else trained[0].number
    export = run(
        "export", "study=run", f"trial={number}", "format=json", site=example, cwd=tmp_path
    )
    assert export.returncode == 0, export.stderr
    exported = json.loads(export.stdout)
    preset = ArchConfig.from_yaml(tmp_path / exported["preset"])
    assert exported["arch_hash"] == preset.arch_hash == archs[number].arch_hash
    if plugin:
        assert exported["hf_config"] is None and "linear.family" in exported["hf_unmapped"]
