"""Pooled calibrations: an earlier calibration's raw timings, read as data a user did not write
(every hostile value one line naming the file and key, nothing else raised), joined to this
calibration's (the union of the shapes, the least time of what both timed) and refitted; and
`archsearch calibrate pool=FILE` end to end."""

from __future__ import annotations

import copy
import json

import pytest
from benchmark_scripts import load as load_benchmark
from hypothesis import given, settings
from hypothesis import strategies as st
from test_latency_calibrate import FakeMachine

from archsearch.cli import main
from archsearch.cost import devices
from archsearch.cost.devices import cpu_name
from archsearch.errors import UserError
from archsearch.latency import load_device
from archsearch.latency.calibrate import PLANS, assemble, calibrate, plan, pooled, refit
from archsearch.latency.calibrate.pool import join, read_earlier
from archsearch.latency.profile import predictor_dict

QUICK = PLANS["quick"]


@pytest.fixture(scope="module")
def output():
    """A quick calibration on a made-up machine, as `archsearch calibrate format=json` prints it."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        FakeMachine(monkeypatch)
        result = calibrate(QUICK)
    return json.loads(json.dumps({**result, "node": {"cpu": cpu_name()}}))


def _write(tmp_path, data) -> str:
    path = tmp_path / "earlier.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_an_earlier_calibration_reads_back_as_its_raw_timings_and_processor(output, tmp_path):
    raw, machine = read_earlier(_write(tmp_path, output), QUICK)
    assert raw == output["raw"] and machine == {"cpu": cpu_name()}
    node = {"cpu": cpu_name(), "isa": "avx2", "cpu_id": "family 25 model 1", "hostname": "vm"}
    _, machine = read_earlier(_write(tmp_path, {**output, "node": node}), QUICK)
    assert machine == {k: node[k] for k in ("cpu", "isa", "cpu_id")}
    with pytest.raises(UserError) as err:
        read_earlier(_write(tmp_path, {**output, "node": {**node, "isa": 512}}), QUICK)
    assert err.value.key == "node.isa"


@pytest.mark.parametrize("edit", ["another check", "no check"])
def test_an_earlier_calibration_pools_whatever_its_half_precision_check(output, tmp_path, edit):
    """Only the fp32 timings are pooled, each calibration keeps its own half-precision check:
    an earlier one that checked it at other repeats (or before the plan named them) pools."""
    earlier = copy.deepcopy(output)
    if edit == "another check":
        earlier["raw"]["plan"]["check_repeats"] += 3
    else:
        del earlier["raw"]["plan"]["check_repeats"]
    raw, _ = read_earlier(_write(tmp_path, earlier), QUICK)
    assert raw == earlier["raw"]


def _edits(output: dict):
    """(name, edit of the output, the key its error names)."""
    gemm = "raw.kernels.gemm[0]"
    return [
        ("another budget", lambda d: d["raw"]["plan"].update(name="fast"), "raw.plan"),
        ("another thread count", lambda d: d["raw"]["plan"].update(threads=2), "raw.plan"),
        ("no node", lambda d: d.pop("node"), "raw"),
        (
            "a negative probe time",
            lambda d: d["raw"]["memory"]["seconds"].__setitem__(0, -1.0),
            "raw.memory.seconds",
        ),
        (
            "another probe size",
            lambda d: d["raw"]["memory"]["bytes"].__setitem__(0, 7),
            "raw.memory",
        ),
        (
            "a kernel this plan does not time",
            lambda d: d["raw"]["kernels"].update(moe=[]),
            "raw.kernels",
        ),
        ("a shape off its grid", lambda d: d["raw"]["kernels"]["gemm"][0].update(m=3), f"{gemm}.m"),
        ("a knob too many", lambda d: d["raw"]["kernels"]["gemm"][0].update(x=1), gemm),
        (
            "a timing of zero",
            lambda d: d["raw"]["kernels"]["gemm"][0].update(seconds=0),
            f"{gemm}.seconds",
        ),
        (
            "a model this plan does not time",
            lambda d: d["raw"]["glue"][0].update(prompt=7),
            "raw.glue[0]",
        ),
        (
            "one time of a model",
            lambda d: d["raw"]["held_out"][0].update(measured_s=[1.0]),
            "raw.held_out[0].measured_s",
        ),
        ("a count of true", lambda d: d["raw"].update(pooled=True), "raw.pooled"),
        (
            "the passes at other rows",
            lambda d: d["raw"]["passes"]["rows"].__setitem__(1, 3),
            "raw.passes",
        ),
        (
            "a passes timing of zero",
            lambda d: d["raw"]["passes"]["memory_s"][1].__setitem__(0, 0),
            "raw.passes.memory_s[1]",
        ),
    ]


@pytest.mark.parametrize("case", range(14))
def test_a_hostile_earlier_calibration_is_one_line_naming_its_key(output, tmp_path, case):
    name, edit, key = _edits(output)[case]
    data = copy.deepcopy(output)
    edit(data)
    path = _write(tmp_path, data)
    with pytest.raises(UserError) as err:
        read_earlier(path, QUICK)
    assert err.value.source == path and err.value.key == key, name
    assert "\n" not in str(err.value)


def _json():
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
        max_leaves=8,
    )


@settings(max_examples=60, deadline=None)
@given(where=st.integers(0, 10**6), value=_json())
def test_any_value_anywhere_is_read_or_refused_in_one_line(output, tmp_path_factory, where, value):
    """Any JSON value put in place of any value of a valid output: read back, or refused as a
    `UserError` (never another exception)."""
    data = copy.deepcopy(output)
    slots = []

    def walk(node):
        for k in node if isinstance(node, dict) else range(len(node)):
            slots.append((node, k))
            if isinstance(node[k], (dict, list)):
                walk(node[k])

    walk(data)
    parent, key = slots[where % len(slots)]
    parent[key] = value
    path = _write(tmp_path_factory.mktemp("hostile"), data)
    try:
        read_earlier(path, QUICK)
    except UserError as err:
        assert err.source == path and "\n" not in str(err)


@pytest.mark.parametrize("text", ["", "{", '{"raw": NaN}', "[1, 2]", '"raw"'])
def test_a_file_that_is_not_a_calibrations_json_is_refused(tmp_path, text):
    with pytest.raises(UserError):
        read_earlier(_write(tmp_path, text), QUICK)


def test_joined_timings_are_the_union_of_the_shapes_each_at_its_least_time(output):
    raw = output["raw"]
    earlier = copy.deepcopy(raw)
    gemm = earlier["kernels"]["gemm"]
    gemm[0]["seconds"] /= 2  # faster in the earlier calibration: its time is kept
    gemm[1]["seconds"] *= 2  # slower: this one's is kept
    gemm.append({**gemm[0], "m": 2048, "seconds": 1.0})  # a shape only the earlier timed
    earlier["glue"][0]["measured_s"] = [1e-9, 1e3]
    earlier["memory"]["seconds"][0] /= 2
    earlier["passes"]["cache_s"][1][0] /= 2
    before = copy.deepcopy(raw)
    joined = join(raw, earlier)
    assert raw == before  # neither input is changed
    mine = joined["kernels"]["gemm"]
    assert mine[0]["seconds"] == gemm[0]["seconds"] and mine[1] == raw["kernels"]["gemm"][1]
    assert mine[-1] == gemm[-1] and len(mine) == len(raw["kernels"]["gemm"]) + 1
    assert joined["glue"][0]["measured_s"] == [1e-9, raw["glue"][0]["measured_s"][1]]
    assert joined["memory"]["seconds"][0] == earlier["memory"]["seconds"][0]
    assert joined["passes"]["cache_s"] == [
        raw["passes"]["cache_s"][0],
        earlier["passes"]["cache_s"][1],
    ]
    assert joined["pooled"] == 2 and join(joined, raw)["pooled"] == 3
    assert {k: v for k, v in join(raw, raw).items() if k != "pooled"} == raw
    assert join(raw, earlier, both=max)["kernels"]["gemm"][0] == raw["kernels"]["gemm"][0]


def test_a_pooled_result_is_the_predictor_refitted_to_the_joined_timings(output):
    result = pooled(output, output["raw"], QUICK)
    predictor, validation = refit(result["raw"])
    assert result["profile"] == assemble(result["raw"], QUICK, predictor, validation)
    assert "the timings of 2 calibrations pooled" in result["profile"]["sources"]["predictor"]
    assert result["profile"]["peak_flops"] == output["profile"]["peak_flops"]


def test_a_calibration_pooled_with_earlier_ones_draws_other_shapes(monkeypatch):
    """Seed N (`TimingPlan.seed`, a calibration pooled with N earlier ones): most of its kernel
    shapes are ones seed 0 did not draw, on the same grids and budgets."""
    drawn = []
    for seed in (0, 1):
        machine = FakeMachine(monkeypatch)
        kernels = ("gemm", "gqa.forward", "moe")
        calibrate(
            plan("fast", seed=seed, kernels=kernels, glue_models=0, held_out=0, references=99)
        )
        drawn.append({(s.kernel, s.index) for s in machine.shapes})
    assert len(drawn[0]) == pytest.approx(len(drawn[1]), rel=0.1)
    assert len(drawn[0] & drawn[1]) < 0.5 * len(drawn[0])


@pytest.mark.slow
def test_calibrate_pool_refits_to_both_calibrations_timings(tmp_path, capsys):
    """`pool=` an earlier output of this machine: the profile written is fitted to both
    calibrations' timings; a file of another budget is refused before anything is timed."""
    first = ["calibrate", "repeats=1", "budget=quick", "format=json"]
    with pytest.MonkeyPatch.context() as made_up:  # only the pooled calibration needs a clock
        FakeMachine(made_up)
        assert main([*first, f"output={tmp_path / 'one.yaml'}"]) == 0
    earlier = tmp_path / "one.json"
    earlier.write_text(capsys.readouterr().out)
    assert main([*first, f"output={tmp_path / 'two.yaml'}", f"pool={earlier}"]) == 0
    raw = json.loads(capsys.readouterr().out)["raw"]
    assert raw["pooled"] == 2 and raw["plan"]["seed"] == 1  # other shapes than the first's
    device = load_device(str(tmp_path / "two.yaml"))
    assert predictor_dict(device.predictor)["kernels"] == predictor_dict(refit(raw)[0])["kernels"]
    assert (
        main(["calibrate", "budget=fast", f"output={tmp_path / 'x.yaml'}", f"pool={earlier}"]) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{earlier}: raw.plan: timed under another plan" in err[0]
    assert not (tmp_path / "x.yaml").exists()


def test_the_pooled_benchmark_reads_how_many_shapes_two_calibrations_share(output):
    bench = load_benchmark("bench_latency_pooled")
    raw = output["raw"]
    other = copy.deepcopy(raw)
    for e in other["kernels"]["gemm"]:
        e["seconds"] *= 3  # the same shapes at other times
    assert bench.overlap([raw, other]) == 1.0
    other["kernels"] = {"gemm": [{**e, "m": 4096} for e in raw["kernels"]["gemm"]]}
    assert bench.overlap([raw, other]) == 0.0


HERE = "model name : AMD EPYC\ncpu family : 25\nmodel : 1\nflags : fpu avx avx2\n"
HERE_NODE = {"cpu": "AMD EPYC", "isa": "avx2", "cpu_id": "family 25 model 1"}


@pytest.mark.parametrize(
    ("here", "node", "key", "says"),
    [
        (HERE, {"cpu": "another CPU"}, "cpu", "timed on 'another CPU', not on this"),
        (HERE, {"isa": "avx512"}, "isa", "timed on 'avx512', not on this calibration's 'avx2'"),
        (HERE, {"cpu_id": "family 26 model 2"}, "cpu_id", "timed on 'family 26 model 2'"),
        (HERE, {"isa": None}, "isa", "does not state the processor's isa ('avx2' here)"),
        ("model name : AMD EPYC\n", {}, "isa", "not on this calibration's 'unstated'"),
    ],
)
def test_an_earlier_calibration_of_another_cpu_is_refused_before_anything_is_timed(
    output, tmp_path, capsys, monkeypatch, here, node, key, says
):
    """Another processor's name, or the same name with another vector extension or id (two
    generations of one virtual machine's "AMD EPYC"), is another machine; so is one that does
    not say which, where this machine does, and one that does where this machine cannot."""
    monkeypatch.setattr(devices, "_cpuinfo", lambda: here)
    stated = {k: v for k, v in {**HERE_NODE, **node}.items() if v is not None}
    earlier = _write(tmp_path, {**output, "node": stated})
    timed = []
    monkeypatch.setattr("archsearch.latency.calibrate.calibrate", lambda *a, **k: timed.append(a))
    out = tmp_path / "mine.yaml"
    args = ["calibrate", "budget=quick", "repeats=1", f"output={out}", f"pool={earlier}"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{earlier}: node.{key}: " in err[0] and says in err[0]
    assert timed == [] and not out.exists()
