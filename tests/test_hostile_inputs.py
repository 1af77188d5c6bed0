"""Hostile input: every path that reads a file or a command-line value keeps the contract.

The corpus below is tables of malformed inputs by class (encodings, type confusion, non-finite
numbers, sizes, YAML bombs, duplicate keys, interpolations, names, output directories, command
lines). Each case runs the real command in-process and must end with exit code 2 and one line on
stderr naming the file (for file cases) and the fragments listed, with nothing written under the
working directory or the stand-in study. Hypothesis then fuzzes the space parser with random YAML
trees and every command with random `key=value` strings: the outcome is success or exactly that
one line, never a traceback. Last, a crafted checkpoint cannot run code on `train resume=true`.
"""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archsearch.cli import COMMANDS, main
from archsearch.cli.schemas import SCHEMAS

SPACE = ("space", "show", "space_file={f}")
ARCH = ("cost", "arch={f}")
DEVICE = ("cost", "arch=tiny_gqa", "device={f}")
GOOD_ARCH = "vocab_size: 256\nd_model: 64\nn_layers: 2\nattention: {n_heads: 4}\n"
GOOD_DEVICE = (
    "memory_bandwidth: 1.0e+10\nmemory_capacity: 8.0e+9\n"
    "peak_flops: {fp32: 1.0e+11, fp16: 1.0e+11, int8: 2.0e+11}\n"
)


@dataclass(frozen=True)
class Case:
    """One malformed input: the command line (`{f}` is the written file, `{tmp}` the working
    directory, `{study}` a stand-in study), the file's content, and what the line must hold."""

    id: str
    argv: tuple[str, ...]
    text: str | bytes | None = None
    must: tuple[str, ...] = ()

    @property
    def names_file(self) -> bool:
        return self.text is not None and any(a.endswith("={f}") for a in self.argv)


def space(id: str, text: str | bytes, *must: str, argv=SPACE) -> Case:
    if isinstance(text, str) and "base:" not in text and not text.startswith(("-", "%")):
        text = "base: tiny_gqa\n" + text
    return Case(id, argv, text, must)


def sweep_space(id: str, text: str, *must: str) -> Case:
    """A space file given to `sweep` (which checks its `train:` settings before Ray starts)."""
    text = "base: tiny_gqa\nobjectives: [{metric: val_loss}]\n" + text
    return Case(id, ("sweep", "space_file={f}", "trials=1"), text, must)


def arch(id: str, text: str | bytes, *must: str) -> Case:
    return Case(id, ARCH, text, must)


def device(id: str, text: str | bytes, *must: str) -> Case:
    return Case(id, DEVICE, text, must)


def cli(id: str, *argv: str, must: tuple[str, ...] = (), text: str | None = None) -> Case:
    return Case(id, argv, text, must)


def billion_laughs(levels: int = 9) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


ENCODINGS = [
    space("space-latin1", "name: caf\xe9\nbase: tiny_gqa\n".encode("latin-1"), "UTF-8", "line 1"),
    space("space-utf16-bom", "base: tiny_gqa\n".encode("utf-16"), "UTF-16"),
    space("space-utf16-no-bom", "base: tiny_gqa\n".encode("utf-16-le"), "UTF-16"),
    space("space-utf32", "base: tiny_gqa\n".encode("utf-32"), "UTF-32"),
    space("space-binary", bytes(range(256)), "not UTF-8"),
    space("space-gzip", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + bytes(40), "not UTF-8"),
    space("space-bad-continuation", b"base: tiny_gqa\nparams:\n  n_l\xc3ayers: 2\n", "line 3"),
    space("space-control-char", "base: tiny_gqa\nname: a\x07b\n", "control character", "line 2"),
    arch("arch-latin1", ("# r\xe9sum\xe9\n" + GOOD_ARCH).encode("latin-1"), "UTF-8"),
    arch("arch-utf16-be", GOOD_ARCH.encode("utf-16-be"), "UTF-16"),
    arch("arch-png", b"\x89PNG\r\n\x1a\n" + bytes(64), "not UTF-8"),
    device("device-nul", (GOOD_DEVICE + "name: x\x00y\n").encode(), "control character"),
    device("device-utf16", GOOD_DEVICE.encode("utf-16"), "UTF-16"),
    device("device-latin1", ("description: \xb5s\n" + GOOD_DEVICE).encode("latin-1"), "UTF-8"),
]

TYPE_CONFUSION = [
    space("name-list", "name: [a, b]\n", "name", "string"),
    space("name-number", "name: 5\n", "name", "string"),
    space("name-null", "name: null\n", "name", "string"),
    space("base-list", "base: [tiny_gqa]\n", "base", "list"),
    space("params-list", "params: [n_layers, 2]\n", "params", "mapping"),
    space("param-list-value", "params: {n_layers: [2, 4]}\n", "params.n_layers", "choice"),
    space("param-values-list", "params: {n_layers: {values: [2, 4]}}\n", "params.n_layers"),
    space("when-list", "params: {n_layers: {values: 'choice(2)', when: [a]}}\n", "when"),
    space("derived-list", "derived: [a]\n", "derived", "mapping"),
    space("derived-number", "derived: {attention.n_heads: 4}\n", "derived.attention.n_heads"),
    space("constraints-mapping", "constraints: {metric: params}\n", "constraints", "list"),
    space("metric-list", "constraints: [{metric: [params], max: 1M}]\n", "constraints[0].metric"),
    space("metric-mapping", "constraints: [{metric: {a: 1}, max: 1M}]\n", "constraints[0].metric"),
    space("bound-list", "constraints: [{metric: params, max: [1]}]\n", "constraints[0].max"),
    space(
        "mixed-argument-keys",
        "constraints: [{metric: params, max: 1M, 5: 2, x: 1}]\n",
        "constraints[0]",
    ),
    space(
        "direction-mapping",
        "objectives: [{metric: val_loss, direction: {a: b}}]\n",
        "objectives[0].direction",
    ),
    space("description-mapping", "description: {a: 1}\n", "description", "string"),
    space("train-list", "train: [1]\n", "train", "mapping"),
    sweep_space("train-lr-list", "train: {lr: [0.1]}\n", "train.lr"),
    space("bool-key", "on: 1\n", "True", "string"),
    space("binary-tag", "params: {n_layers: !!binary aGVsbG8=}\n", "binary", "line 2"),
    space("set-tag", "params: {n_layers: !!set {2, 4}}\n", "set", "line 2"),
    space("python-tag", "params: {n_layers: !!python/tuple [2, 4]}\n", "python/tuple"),
    arch("arch-width-list", GOOD_ARCH.replace("d_model: 64", "d_model: [64]"), "d_model"),
    arch("arch-section-list", GOOD_ARCH.replace("{n_heads: 4}", "[gqa]"), "attention", "list"),
    arch("arch-pattern-list", GOOD_ARCH + "layers: {pattern: [L, N]}\n", "layers.pattern"),
    arch("arch-int-string", GOOD_ARCH.replace("vocab_size: 256", "vocab_size: '256'"), "vocab"),
    arch("arch-bool-string", GOOD_ARCH + "tie_embeddings: 'yes'\n", "tie_embeddings"),
    arch("arch-name-mapping", GOOD_ARCH + "name: {a: 1}\n", "name", "string"),
    device("device-efficiency-list", GOOD_DEVICE + "efficiency: [1, 2]\n", "efficiency"),
    device("device-sources-list", GOOD_DEVICE + "sources: [a]\n", "sources", "mapping"),
    device("device-name-list", GOOD_DEVICE + "name: [x]\n", "name", "string"),
    device("device-kind-mapping", GOOD_DEVICE + "kind: {a: b}\n", "kind"),
    device("device-description-list", GOOD_DEVICE + "description: [a]\n", "description"),
    device("device-mixed-keys", GOOD_DEVICE + "5: 1\nx: 2\n", "key 5 is not a string"),
    device("device-peaks-list", GOOD_DEVICE.replace("peak_flops:", "old:") + "peak_flops: [1]\n"),
    device(
        "device-efficiency-value-list",
        GOOD_DEVICE + "efficiency: {fp32: {compute: [0.5]}}\n",
        "efficiency.fp32.compute",
    ),
]

NON_FINITE = [
    space("param-nan", "params: {norm_eps: .nan}\n", "params.norm_eps", "finite"),
    space("choice-nan", "params: {attention.rope_theta: 'choice(1e4, nan)'}\n", "finite"),
    space("choice-minus-inf", "params: {layers.attention_share: 'choice(0.5, -inf)'}\n", "finite"),
    space("interval-inf", "params: {norm_eps: 'interval(1e-6, inf)'}\n", "params.norm_eps"),
    space("range-inf", "params: {vars.x: 'range(0, inf)'}\n", "params.vars.x", "finite"),
    space("vars-nan", "params: {vars.x: .nan}\n", "params.vars.x", "finite"),
    space("max-inf", "constraints: [{metric: params, max: .inf}]\n", "constraints[0].max"),
    space("min-nan", "constraints: [{metric: params, min: .nan}]\n", "constraints[0].min"),
    space("max-overflow", "constraints: [{metric: cache_bytes, max: 1e999}]\n", "finite"),
    space("max-string-overflow", "constraints: [{metric: params, max: '1e999M'}]\n", "finite"),
    space(
        "inline-base-nan",
        "base: {vocab_size: 256, d_model: 64, n_layers: 2, norm_eps: .nan,"
        " attention: {n_heads: 4}}\n",
        "norm_eps",
    ),
    sweep_space("train-lr-nan", "train: {lr: .nan}\n", "train.lr"),
    sweep_space("train-warmup-inf", "train: {warmup: .inf}\n", "train.warmup"),
    sweep_space("train-lr-string-inf", "train: {lr: 'inf'}\n", "train.lr"),
    arch("arch-eps-nan", GOOD_ARCH + "norm_eps: .nan\n", "norm_eps", "finite"),
    arch("arch-theta-inf", GOOD_ARCH.replace("{n_heads: 4}", "{n_heads: 4, rope_theta: .inf}")),
    arch(
        "arch-expand-nan",
        GOOD_ARCH + "layers: {pattern: L}\nlinear: {expand: .nan}\n",
        "linear.expand",
    ),
    arch("arch-aux-nan", GOOD_ARCH + "moe: {aux_loss_coef: .nan}\n", "moe.aux_loss_coef"),
    arch("arch-share-nan", GOOD_ARCH + "layers: {attention_share: .nan}\n", "attention_share"),
    device("device-bandwidth-nan", GOOD_DEVICE.replace("1.0e+10", ".nan"), "memory_bandwidth"),
    device("device-peak-inf", GOOD_DEVICE.replace("fp32: 1.0e+11", "fp32: .inf"), "fp32"),
    device("device-eff-nan", GOOD_DEVICE + "efficiency: {fp32: {compute: .nan}}\n", "compute"),
    device("device-cache-inf", GOOD_DEVICE + "cache_capacity: .inf\n", "cache_capacity"),
    cli("reference-nan", "pareto", "study={study}", "reference=[nan,1]", must=("reference",)),
    cli("reference-inf", "pareto", "study={study}", "reference=[inf,inf]", must=("reference",)),
    cli("train-lr-nan-cli", "train", "arch=tiny_gqa", "lr=nan", must=("lr",)),
    cli("budget-overflow", "train", "arch=tiny_gqa", "budget=tokens:1e999", must=("budget",)),
    cli("seq-lens-nan", "cost", "arch=tiny_gqa", "seq_lens=[nan]", must=("seq_lens",)),
    cli("max-params-inf", "profile", "arch=tiny_gqa", "max_params=1e999", must=("max_params",)),
    cli("sweep-train-nan", "sweep", "train.lr=nan", must=("train.lr",)),
    cli("sample-n-nan", "space", "sample", "n=nan", must=("n",)),
]

SIZES = [
    space("range-huge", "params: {n_layers: 'range(1, 1000000000000)'}\n", "params.n_layers"),
    space("interval-huge", "params: {n_layers: 'tag(int, interval(1, 1e12))'}\n", "n_layers"),
    space("float-range-huge", "params: {vars.x: 'range(0.0, 1e9, 1e-3)'}\n", "params.vars.x"),
    space("choice-deep", "params: {n_layers: 'choice(2, 100000000)'}\n", "params.n_layers"),
    space("choice-wide", "params: {d_model: 'choice(64, 1000000000000)'}\n", "params.d_model"),
    space(
        "inline-base-deep",
        "base: {vocab_size: 256, d_model: 64, n_layers: 1000000000, attention: {n_heads: 4}}\n",
        "n_layers",
    ),
    arch("arch-deep", GOOD_ARCH.replace("n_layers: 2", "n_layers: 100000000"), "n_layers"),
    arch("arch-wide", GOOD_ARCH.replace("d_model: 64", "d_model: 1000000000000"), "d_model"),
    arch("arch-float-wide", GOOD_ARCH.replace("d_model: 64", "d_model: 1e300"), "d_model"),
    arch("arch-long-context", GOOD_ARCH + "max_seq_len: 1000000000000000\n", "max_seq_len"),
    arch("arch-heads", GOOD_ARCH.replace("n_heads: 4", "n_heads: 1000000000000"), "n_heads"),
    arch("arch-vocab", GOOD_ARCH.replace("vocab_size: 256", "vocab_size: 10000000000"), "vocab"),
    space("huge-file", "base: tiny_gqa\n" + "#" * 79 + "\n" + ("# " + "x" * 77 + "\n") * 70_000),
    device("huge-device-file", GOOD_DEVICE + ("#" * 99 + "\n") * 60_000, "MiB"),
    cli("sample-huge-n", "space", "sample", "n=100000000", must=("n",)),
    cli("prune-huge-limit", "prune", "limit=1000000000000", must=("limit",)),
    cli("calibrate-huge-repeats", "calibrate", "repeats=1000000000", must=("repeats",)),
    cli(
        "profile-huge-lengths", "profile", "arch=tiny_gqa", "lengths=[100000000]", must=("lengths",)
    ),
    cli(
        "profile-huge-repeats", "profile", "arch=tiny_gqa", "repeats=1000000000", must=("repeats",)
    ),
    cli("cost-huge-seq-len", "cost", "arch=tiny_gqa", "seq_lens=[1000000000000000]", must=("seq",)),
]

BOMBS = [
    space("billion-laughs", billion_laughs(), "aliases"),
    arch("billion-laughs-arch", GOOD_ARCH + billion_laughs(), "aliases"),
    space("recursive-alias", "params: &a {vars.x: *a}\n", "alias"),
    space("recursive-list", "derived: &d [*d]\n", "alias"),
    space("deep-lists", "params: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper"),
    device("deep-mappings", GOOD_DEVICE + "sources: " + "{a: " * 200 + "1" + "}" * 200 + "\n"),
    space(
        "merge-bomb",
        billion_laughs(6) + "params: {<<: [" + ", ".join(["*a5"] * 8) + "]}\n",
        "aliases",
    ),
]

DUPLICATES = [
    space("dup-top", "name: a\nbase: tiny_gqa\nname: b\n", "duplicate key 'name'", "1", "3"),
    space("dup-param", "params:\n  n_layers: 2\n  n_layers: 4\n", "'n_layers'", "lines 3 and 4"),
    space("dup-flow", "{base: tiny_gqa, base: baby_gpt}\n", "duplicate key 'base'"),
    space("dup-bound", "constraints: [{metric: params, max: 1M, max: 2M}]\n", "'max'"),
    space("dup-when", "params: {vars.x: {values: 'choice(1)', values: 'choice(2)'}}\n", "values"),
    arch("dup-width", GOOD_ARCH + "d_model: 128\n", "duplicate key 'd_model'", "lines 2 and 5"),
    arch("dup-nested", GOOD_ARCH.replace("{n_heads: 4}", "{n_heads: 4, n_heads: 8}"), "n_heads"),
    device("dup-bandwidth", GOOD_DEVICE + "memory_bandwidth: 2.0e+10\n", "memory_bandwidth"),
    device(
        "dup-efficiency",
        GOOD_DEVICE + "efficiency:\n  fp32:\n    compute: 0.5\n    compute: 0.6\n",
        "'compute'",
    ),
]

INTERPOLATIONS = [
    space("oc-env", "derived: {attention.n_heads: '${oc.env:SHLVL}'}\n", "oc.env", "derived"),
    space("oc-decode", "derived: {attention.n_heads: \"${oc.decode:'4'}\"}\n", "oc.decode"),
    space("oc-create", "derived: {attention.n_heads: '${oc.create:{a: 1}}'}\n", "oc.create"),
    space("oc-select", "derived: {attention.n_heads: '${oc.select:d_model}'}\n", "oc.select"),
    space("oc-nested", "derived: {attention.n_heads: '${div:${oc.env:X,64},16}'}\n", "oc.env"),
    space("oc-dict", "derived: {attention.n_heads: '${oc.dict.keys:attention}'}\n", "oc.dict"),
    space("hydra-resolver", "derived: {attention.n_heads: '${hydra:runtime.cwd}'}\n", "hydra"),
    space("oc-spaced", "derived: {attention.n_heads: '${ oc.env :SHLVL}'}\n", "oc.env"),
    sweep_space("train-env", "train: {cache_dir: '${oc.env:HOME}'}\n", "train.cache_dir", "${"),
    sweep_space("train-list-env", "train: {data: ['${oc.env:HOME}']}\n", "train.data"),
    space(
        "vars-env",
        "params: {vars.x: '${oc.env:HOME}'}\nderived: {ffn.d_ffn: '${vars.x}'}\n",
        "params.vars.x",
    ),
    space("choice-env", "params: {vars.x: \"choice('${oc.env:HOME}', a)\"}\n", "params.vars.x"),
    space(
        "base-name-env",
        "base: {name: '${oc.env:HOME}', vocab_size: 256, d_model: 64, n_layers: 2,"
        " attention: {n_heads: 4}}\nderived: {ffn.d_ffn: '${mul:${d_model},4}'}\n",
        "name",
    ),
]

NAMES = [
    space("space-parent", "name: ../../x\n", "name", "'../../x'"),
    space("space-slash", "name: a/b\n", "name"),
    space("space-dotdot", "name: '..'\n", "name"),
    space("space-absolute", "name: /tmp/x\n", "name"),
    space("space-backslash", "name: 'a\\b'\n", "name"),
    space("space-newline", 'name: "x\\ny"\n', "name"),
    space("space-long", f"name: {'x' * 300}\n", "name"),
    space("space-hidden", "name: .hidden\n", "name"),
    arch("arch-parent", GOOD_ARCH + "name: ../../evil\n", "name"),
    device("device-parent", GOOD_DEVICE + "name: ../../d\n", "name"),
    cli("study-parent", "sweep", "study_name=../../x", must=("study_name",)),
    cli("study-absolute", "sweep", "study_name=/tmp/x", must=("study_name",)),
    cli("export-parent", "export", "study={study}", "trial=0", "name=../../x", must=("name",)),
]

OUTPUT_DIRS = [
    cli("sweep-under-file", "sweep", "trials=1", "run_dir={f}/sub", text="x", must=("run_dir",)),
    cli("sweep-is-file", "sweep", "trials=1", "run_dir={f}", text="x", must=("run_dir",)),
    cli("sweep-dev-null", "sweep", "trials=1", "run_dir=/dev/null", must=("run_dir",)),
    cli("train-under-file", "train", "arch=tiny_gqa", "run_dir={f}/s", text="x", must=("run_dir",)),
    cli("train-is-file", "train", "arch=tiny_gqa", "run_dir={f}", text="x", must=("run_dir",)),
    cli("pareto-under-file", "pareto", "study={study}", "out={f}/s", text="x", must=("out",)),
    cli("insights-under-file", "insights", "study={study}", "out={f}/s", text="x", must=("out",)),
    cli(
        "export-under-file",
        "export",
        "study={study}",
        "trial=0",
        "out={f}/s",
        text="x",
        must=("out",),
    ),
    cli(
        "cost-plot-under-file",
        "cost",
        "arch=tiny_gqa",
        "seq_lens=[512]",
        "plot={f}/p.png",
        text="x",
        must=("plot",),
    ),
    cli(
        "calibrate-under-file",
        "calibrate",
        "budget=quick",
        "output={f}/x.yaml",
        text="x",
        must=("output",),
    ),
    cli(
        "profile-under-file",
        "profile",
        "arch=tiny_gqa",
        "measure=false",
        "out={f}/s",
        text="x",
        must=("out",),
    ),
]

OVERRIDES = [
    cli("space-list", "space", "show", "search_space=[tiny,plm_edge]", must=("search_space",)),
    cli("sample-n-list", "space", "sample", "n=[1]", must=("n",)),
    cli("space-dir", "space", "show", "space_file={tmp}", must=("space_file",)),
    cli("train-arch-mapping", "train", "arch={a:1}", must=("arch",)),
    cli("train-batch-overflow", "train", "arch=tiny_gqa", "batch_size=1e999", must=("batch_size",)),
    cli("sweep-trials-list", "sweep", "trials=[1]", must=("trials",)),
    cli("sweep-cpus-inf", "sweep", "ray.num_cpus=inf", must=("num_cpus",)),
    cli("sweep-wait-negative", "sweep", "latency.wait_s=-1", must=("latency.wait_s",)),
    cli("sweep-wait-nan", "sweep", "latency.wait_s=nan", must=("latency.wait_s",)),
    cli("prune-device-list", "prune", "device=[rpi5]", must=("device",)),
    cli("cost-context-overflow", "cost", "arch=tiny_gqa", "context=1e999", must=("context",)),
    cli("calibrate-threads-mapping", "calibrate", "threads={a:1}", must=("threads",)),
    cli("calibrate-unknown-budget", "calibrate", "budget=huge", must=("budget",)),
    cli("pareto-axis-list", "pareto", "study={study}", "x=[val_loss]", must=("x",)),
    cli("export-trial-list", "export", "study={study}", "trial=[0]", must=("trial",)),
    cli(
        "insights-resamples-nan", "insights", "study={study}", "resamples=nan", must=("resamples",)
    ),
    cli("insights-device-path", "insights", "study={study}", "device=[../x]", must=("device",)),
    cli("dashboard-port", "dashboard", "study={study}", "port=99999999", must=("port",)),
    cli("profile-lengths-words", "profile", "arch=tiny_gqa", "lengths=[a]", must=("lengths",)),
    cli("cost-arch-empty", "cost", "arch=,,", must=("arch",)),
    cli("check-mixer-tokens-nan", "check-mixer", "tokens=nan", must=("tokens",)),
    cli("confirm-factor-nan", "confirm", "study={study}", "factor=nan", must=("factor",)),
]

CORPUS = {
    "encoding": ENCODINGS,
    "type": TYPE_CONFUSION,
    "non-finite": NON_FINITE,
    "size": SIZES,
    "bomb": BOMBS,
    "duplicate": DUPLICATES,
    "interpolation": INTERPOLATIONS,
    "name": NAMES,
    "output-dir": OUTPUT_DIRS,
    "override": OVERRIDES,
}
CASES = [pytest.param(c, id=f"{kind}-{c.id}") for kind, cases in CORPUS.items() for c in cases]


def test_the_corpus_is_large_and_covers_every_command():
    assert len(CASES) >= 100
    ids = [p.values[0].id for p in CASES]
    assert len(ids) == len(set(ids))
    used = {p.values[0].argv[0] for p in CASES}
    assert used == set(COMMANDS)


# ---- running a case -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> Path:
    from tests.studies import make_study

    home = tmp_path_factory.mktemp("study")
    make_study(home / "study.db", n=8)
    return home


SQLITE_FILES = (".db", ".db-wal", ".db-shm")


def snapshot(*roots: Path) -> dict[str, tuple[int, int] | str]:
    """Every file with its size and mtime; an SQLite study by its trials instead (reading it
    lets SQLite checkpoint its write-ahead log, which moves the file's bytes but not its data)."""
    out: dict[str, tuple[int, int] | str] = {}
    for root in roots:
        for p in sorted(root.rglob("*")):
            if p.name.endswith(SQLITE_FILES[1:]):
                continue
            out[str(p)] = (
                _trials(p) if p.name.endswith(".db") else (p.stat().st_size, p.stat().st_mtime_ns)
            )
    return out


def _trials(db: Path) -> str:
    import sqlite3

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "select t.number, t.state, a.key, a.value_json from trials t "
            "left join trial_user_attributes a on a.trial_id = t.trial_id order by 1, 3"
        ).fetchall()
    finally:
        con.close()
    return repr(rows)


def write_input(case: Case, tmp: Path) -> Path:
    """The case's file (when it has one) at `tmp/input.yaml`."""
    path = tmp / "input.yaml"
    if isinstance(case.text, bytes):
        path.write_bytes(case.text)
    elif case.text is not None:
        path.write_text(case.text)
    return path


def run_case(case: Case, path: Path, tmp: Path, study: Path, capsys) -> tuple[int, str, str]:
    places = {"{f}": str(path), "{tmp}": str(tmp), "{study}": str(study)}
    argv = []
    for arg in case.argv:
        for place, value in places.items():
            arg = arg.replace(place, value)
        argv.append(arg)
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("case", CASES)
def test_malformed_input_is_one_line_exit_2_nothing_written(
    case, tmp_path, study_dir, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    path = write_input(case, tmp_path)
    before = snapshot(tmp_path, study_dir)
    code, out, err = run_case(case, path, tmp_path, study_dir, capsys)
    assert snapshot(tmp_path, study_dir) == before
    assert (code, out) == (2, ""), err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("archsearch: error: "), err
    if case.names_file:
        assert str(path) in lines[0], lines[0]
    for fragment in case.must:
        assert fragment in lines[0], (fragment, lines[0])


def test_well_formed_yaml_edges_still_load(tmp_path, capsys):
    """What the loader refuses is narrow: a UTF-8 byte-order mark, merge keys (a later key
    overrides a merged one), a date-like name and quoted non-string keys all load."""
    text = "name: '2024-01-01'\nbase: tiny_gqa\n_d: &d {n_layers: 2}\n"
    path = tmp_path / "edges.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + text.replace("_d: &d {n_layers: 2}\n", "").encode())
    assert main(["space", "show", f"space_file={path}", "format=json"]) == 0
    assert '"name": "2024-01-01"' in capsys.readouterr().out
    from archsearch import yamlio

    merged = yamlio.loads("a: &a {x: 1, y: 2}\nb: {<<: *a, y: 3, '5': z}\n", source="t")
    assert merged["b"] == {"x": 1, "y": 3, "5": "z"}


# ---- fuzzing the space parser ---------------------------------------------------------------

WORDS = st.sampled_from(
    [
        "tiny_gqa",
        "choice(2, 4)",
        "choice(gqa, mla)",
        "range(1, 9)",
        "range(64, 257, step=64)",
        "interval(0.1, 1)",
        "tag(log, interval(1e-4, 1e-2))",
        "tag(int, interval(1, 8))",
        "${div:${d_model},2}",
        "${mul:${vars.x},2}",
        "${oc.env:HOME}",
        "params",
        "val_loss",
        "decode_ms",
        "rpi5",
        "20M",
        "nan",
        "-inf",
        "../x",
        "LLN",
        "minimize",
    ]
)
KEYS = st.sampled_from(
    [
        "name",
        "base",
        "params",
        "derived",
        "constraints",
        "objectives",
        "train",
        "n_layers",
        "d_model",
        "attention.kind",
        "attention.kv_rank",
        "layers.pattern",
        "vars.x",
        "values",
        "when",
        "metric",
        "max",
        "min",
        "direction",
        "device",
        "context",
        "lr",
        "budget",
    ]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=12),
    WORDS,
)
TREES = st.recursive(
    SCALARS,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(KEYS | st.text(max_size=6), kids),
    max_leaves=20,
)
SPACE_DOCS = st.fixed_dictionaries(
    {"base": st.sampled_from(["tiny_gqa", "baby_gpt"]) | TREES},
    optional={k: TREES for k in ("name", "params", "derived", "constraints", "objectives")},
)


def assert_user_error_or_fine(call) -> None:
    """`call()` returns, or raises a `UserError` whose text is one line."""
    from archsearch.errors import UserError

    try:
        call()
    except UserError as err:
        assert "\n" not in str(err) and str(err).strip(), repr(str(err))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=SPACE_DOCS)
def test_fuzz_space_trees_parse_or_fail_in_one_line(doc, tmp_path_factory):
    from archsearch.space import count, load_space, sample

    path = tmp_path_factory.mktemp("fuzz") / "space.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))

    def use() -> None:
        space = load_space(str(path))
        count(space)
        sample(space, 2, seed=0, max_draws=4)

    assert_user_error_or_fine(use)


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_fuzz_raw_bytes_load_or_fail_in_one_line(data, tmp_path_factory):
    from archsearch import yamlio

    path = tmp_path_factory.mktemp("fuzz") / "raw.yaml"
    path.write_bytes(data)
    assert_user_error_or_fine(lambda: yamlio.load(path))


# ---- fuzzing the command line ---------------------------------------------------------------

HEAVY = ("sweep", "train", "calibrate", "dashboard", "profile", "prune", "pareto", "export")
VALUES = st.one_of(
    st.sampled_from(
        [
            "nan",
            "inf",
            "-inf",
            "1e999",
            "[]",
            "[1,2]",
            "[nan]",
            "{a:1}",
            "''",
            "null",
            "true",
            "${oc.env:HOME}",
            "../../x",
            "tiny_gqa",
            "rpi5",
            "choice(1,2)",
            "tokens:1e999",
            "'a b'",
            "\\",
            "0",
            "-1",
            "99999999999999999999",
        ]
    ),
    st.integers().map(str),
    st.floats().map(repr),
    st.text(max_size=10),
)


def schema_keys(schema: type, prefix: str = "") -> list[str]:
    out = []
    for f in dataclasses.fields(schema):
        tp = f.type if isinstance(f.type, type) else None
        if tp is not None and dataclasses.is_dataclass(tp):
            out += schema_keys(tp, f"{prefix}{f.name}.")
        else:
            out.append(prefix + f.name)
    return out


def composed_only(_sub, _cfg) -> int:
    """Stands in for a command that would train, serve or measure: the fuzzer checks that
    every override string is parsed and typed (or refused in one line) on its way there."""
    return 0


@pytest.fixture
def heavy_commands_composed_only(monkeypatch):
    for name in HEAVY:
        stub = dataclasses.replace(COMMANDS[name], handler=f"{__name__}:composed_only")
        monkeypatch.setitem(COMMANDS, name, stub)


@pytest.mark.parametrize(
    "override",
    [
        "calibrate runtime=${oc.env:AS_SECRET}",  # an enum: a traceback once
        "calibrate threads=${oc.env:AS_SECRET}",
        "calibrate name=${oc.env:AS_SECRET}",  # a string: read silently once
        "sweep run_dir=/tmp/${oc.env:AS_SECRET}/run",
        "sweep ray.address=[${oc.env:AS_SECRET}]",
    ],
)
def test_an_interpolation_on_the_command_line_is_refused_not_resolved(
    override, heavy_commands_composed_only, monkeypatch, capsys
):
    """OmegaConf would resolve `${oc.env:...}` in an override: read the environment because
    the input asked it to. Values on the command line are literal: one line, exit 2."""
    monkeypatch.setenv("AS_SECRET", "leaked")
    command, text = override.split(" ", 1)
    code = main([command, text])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1, err
    key = text.split("=", 1)[0]
    assert err.startswith(f"archsearch: error: {key}: ") and "holds an interpolation" in err
    assert "leaked" not in err


@pytest.mark.slow
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    command=st.sampled_from(sorted(COMMANDS)),
    overrides=st.lists(
        st.tuples(st.sampled_from(["known", "random"]), st.text(max_size=8), VALUES), max_size=3
    ),
    data=st.data(),
)
def test_fuzz_overrides_succeed_or_fail_in_one_line(
    command, overrides, data, heavy_commands_composed_only, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    cmd = COMMANDS[command]
    keys = schema_keys(SCHEMAS[cmd.config])
    argv = [command, *cmd.subcommands[:1]]
    if command in ("cost", "profile"):
        argv.append("arch=tiny_gqa")
    for kind, word, value in overrides:
        key = data.draw(st.sampled_from(keys)) if kind == "known" else word
        argv.append(f"{key}={value}")
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    assert code in (0, 2), (argv, code, err)
    if code == 2:
        assert out == "" and err.count("\n") == 1 and err.startswith("archsearch: error: "), (
            argv,
            err,
        )


# ---- strict JSON ------------------------------------------------------------------------------


def _no_constants(name: str):
    raise AssertionError(f"bare {name} in JSON output")


@settings(max_examples=60, deadline=None)
@given(
    data=st.recursive(
        st.floats() | st.integers() | st.text(max_size=4),
        lambda k: st.lists(k, max_size=3) | st.dictionaries(st.text(max_size=4), k, max_size=3),
        max_leaves=12,
    )
)
def test_json_output_never_holds_a_bare_nan(data):
    import contextlib
    import io
    import json

    from archsearch.cli.output import print_json
    from archsearch.units import json_safe

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_json(data)
    printed = json.loads(out.getvalue(), parse_constant=_no_constants)
    assert printed == json.loads(json.dumps(json_safe(data)))


def test_saved_results_map_non_finite_numbers_to_null(tmp_path):
    import json

    import numpy as np

    from archsearch.trainers.checkpoint import save_json

    save_json(tmp_path / "r.json", {"val_loss": float("nan"), "x": [np.float32("inf"), 1.5]})
    text = (tmp_path / "r.json").read_text()
    assert json.loads(text, parse_constant=_no_constants) == {"val_loss": None, "x": [None, 1.5]}


# ---- no code runs from data ---------------------------------------------------------------------


class _Payload:
    """Unpickling this calls `Path.write_text(marker, "ran")`: code run by loading data."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "ran"))


@pytest.mark.parametrize("fmt", ["torch", "pickle"])
def test_a_crafted_checkpoint_cannot_run_code_on_resume(fmt, tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.chdir(tmp_path)
    run_dir, marker = tmp_path / "run", tmp_path / "ran.txt"
    run_dir.mkdir()
    crafted = run_dir / "checkpoint.pt"
    state = {"key": "x", "model": _Payload(marker)}
    if fmt == "torch":
        torch.save(state, crafted)
    else:
        crafted.write_bytes(pickle.dumps(state))
    before = snapshot(tmp_path)
    argv = ["train", "arch=tiny_gqa", f"run_dir={run_dir}", "resume=true", "format=json"]
    assert main([*argv, "budget=steps:1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert str(crafted) in err and "tensors and plain data" in err
    assert not marker.exists() and snapshot(tmp_path) == before
    # the file is a real exploit: an unrestricted unpickler runs its payload
    if fmt == "torch":
        torch.load(crafted, weights_only=False)
    else:
        pickle.loads(crafted.read_bytes())
    assert marker.read_text() == "ran"


@pytest.mark.slow
def test_a_real_checkpoint_still_resumes(tmp_path):
    """weights_only=True reads back everything a trial checkpoints (model, optimizer, RNG and
    data-stream states)."""
    from archsearch.arch import load_arch
    from archsearch.trainers.checkpoint import load_checkpoint
    from archsearch.trainers.config import TrainConfig
    from archsearch.trainers.trial import run_trial

    cfg = TrainConfig(
        budget="steps:2",
        batch_size=2,
        seq_len=16,
        eval_at=(0.5, 1.0),
        eval_batches=1,
        keep_checkpoint=True,
    )
    run_trial(load_arch("tiny_gqa"), cfg, run_dir=tmp_path)
    state = load_checkpoint(tmp_path)
    assert state is not None and {"model", "optimizer", "data_rng", "torch_rng"} <= set(state)
