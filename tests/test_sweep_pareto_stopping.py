"""Pareto-aware early stopping (`early_stopping=pareto`, `archsearch/sweep/pareto_stopping.py`):
the decision on constructed fronts, and a real sweep replaying the recorded search_small
trials, where no trial of the true front may be stopped."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from pathlib import Path

import optuna
import pytest
from conftest import EXE
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from archsearch.metrics import MetricSpec
from archsearch.study import StudyMeta, open_storage, records
from archsearch.sweep.pareto_stopping import (
    RUNG_MARGIN,
    Dominator,
    dominator,
    non_dominated,
    optimistic_vector,
    stop_reason,
)

LOSS = MetricSpec.parse("val_loss")
DECODE = MetricSpec.parse("decode_ms[rpi5,context=1024,precision=fp16]")
PARAMS = MetricSpec.parse("params")
PROBE = MetricSpec.parse("probe_acc[recall]")

values = st.floats(0.0, 10.0, allow_nan=False)
directions_st = st.sampled_from(["minimize", "maximize"])


def dominates(a, b, directions) -> bool:
    """Plain Pareto dominance, written out here as the reference."""
    better = [(x < y) if d == "minimize" else (x > y) for x, y, d in zip(a, b, directions)]
    worse = [(x > y) if d == "minimize" else (x < y) for x, y, d in zip(a, b, directions)]
    return any(better) and not any(worse)


@st.composite
def fronts(draw):
    """Objectives (loss first, then one or two costs), directions, trained trials, and the
    running trial's true final vector, which no trained trial dominates."""
    specs = [LOSS, DECODE, PARAMS][: draw(st.integers(2, 3))]
    directions = [draw(directions_st) for _ in specs]
    n = draw(st.integers(0, 12))
    trained = [Dominator(i, tuple(draw(values) for _ in specs)) for i in range(n)]
    true = tuple(draw(values) for _ in specs)
    assume(not any(dominates(t.values, true, directions) for t in trained))
    return specs, directions, trained, true


@settings(max_examples=300, deadline=None)
@given(fronts(), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_never_stops_a_trial_whose_true_vector_is_non_dominated(case, std, slack):
    """The prediction may miss by anything up to 2 std in the optimistic direction (it erred
    pessimistic or was exact): the trial, truly on the front, is never stopped."""
    specs, directions, trained, true = case
    toward_worse = 1.0 if directions[0] == "minimize" else -1.0
    predicted = true[0] + toward_worse * slack * 2.0 * std  # optimistic bound still reaches true
    costs = {s.label: v for s, v in zip(specs[1:], true[1:])}
    vector = optimistic_vector(specs, directions, predicted, std, costs)
    # at slack 1 the optimistic loss, rebuilt from the prediction and its std, can round an ulp
    # worse than the true loss: the property holds for a vector at least as good as the truth
    assume(toward_worse * (vector[0] - true[0]) <= 0)
    assert dominator(vector, directions, trained) is None
    assert dominator(vector, directions, non_dominated(trained, directions)) is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(values, values), max_size=12),
    st.tuples(values, values),
    st.lists(directions_st, min_size=2, max_size=2),
)
def test_front_stands_for_every_trained_trial(points, vector, directions):
    """Dominated by some trained trial <=> dominated by a member of their front (the cached
    set); the one returned does dominate, and is the lowest-numbered such front member."""
    trained = [Dominator(i, p) for i, p in enumerate(points)]
    front = non_dominated(trained, directions)
    assert {t.number for t in front} == {
        t.number
        for t in trained
        if not any(dominates(o.values, t.values, directions) for o in trained)
    }
    by_all, by_front = dominator(vector, directions, trained), dominator(vector, directions, front)
    assert (by_all is None) == (by_front is None)
    if by_front is not None:
        assert dominates(by_front.values, vector, directions)
        assert by_front.number == min(
            t.number for t in front if dominates(t.values, vector, directions)
        )


def test_stops_when_the_optimistic_vector_is_dominated_and_not_within_the_margin():
    directions = ["minimize", "minimize"]
    front = [Dominator(12, (2.48, 1.9)), Dominator(3, (2.9, 0.8))]
    specs, costs = [LOSS, DECODE], {DECODE.label: 2.5}
    # slower than trial 12 and predicted worse by more than 2 std: dominated
    by = dominator(optimistic_vector(specs, directions, 2.61, 0.03, costs), directions, front)
    assert by is not None and by.number == 12
    # the same prediction with a wide band reaches below 2.48: kept
    vector = optimistic_vector(specs, directions, 2.61, 0.07, costs)
    assert vector[0] == 2.61 - 2 * 0.07
    assert dominator(vector, directions, front) is None
    # faster than every trained trial: kept whatever its loss (its latency puts it on the front)
    fast = optimistic_vector(specs, directions, 9.0, 0.0, {DECODE.label: 0.5})
    assert dominator(fast, directions, front) is None


def test_objectives_the_prediction_does_not_cover_give_no_bound():
    directions = ["minimize", "minimize", "maximize"]
    specs = [MetricSpec.parse("val_ppl"), DECODE, PROBE]
    vector = optimistic_vector(specs, directions, 2.0, 0.1, {DECODE.label: None})
    assert math.isclose(vector[0], math.exp(2.0 - 0.2))  # perplexity of the optimistic loss
    assert vector[1] == -math.inf  # a latency not known yet (measured later)
    assert vector[2] == math.inf  # a probe accuracy: could be the best
    everything_better = [Dominator(0, (1.0, 0.0, 1.0))]
    assert dominator(vector, directions, everything_better) is None
    # a maximised loss objective is mirrored: the optimistic value is value + 2 std
    up = optimistic_vector([LOSS, DECODE], ["maximize", "minimize"], 2.0, 0.1, {DECODE.label: 1})
    assert up[0] == 2.0 + 0.2
    # a loss predicted at another budget is not this run's final loss: no bound either
    at_10x = optimistic_vector([MetricSpec.parse("val_loss[tokens=1.6M]")], ["minimize"], 2, 0, {})
    assert at_10x == [-math.inf]


def test_reason_names_the_prediction_and_the_dominating_trial():
    text = stop_reason(0.5, 2.6134, 0.031, [LOSS.label, DECODE.label], Dominator(12, (2.48, 1.9)))
    assert text == (
        "stopped by Pareto-aware early stopping at 50% of the budget: predicted val_loss 2.61 "
        "+- 0.031 nats/token, dominated by trial 12 (val_loss 2.48 nats/token, "
        "decode_ms[rpi5,context=1024,precision=fp16] 1.9 ms)"
    )


# ---- a real sweep replaying the recorded search_small trials ------------------------------------

REPO = Path(__file__).resolve().parents[1]
SMALL = REPO / "benchmarks" / "spaces" / "search_small.yaml"
TRUTH = REPO / "benchmarks" / "results" / "search_truth.json"
RUNG_REASON = re.compile(
    r"stopped by Pareto-aware early stopping at (\d+)% of the budget: val_loss (\S+) "
    r"nats/token there, more than 4% above trial (\d+)'s at the same point \((\S+)\)"
)
REASON = re.compile(
    r"stopped by Pareto-aware early stopping at (\d+)% of the budget: predicted val_loss "
    r"(\S+) \+- (\S+) nats/token, dominated by trial (\d+) \(val_loss (\S+) nats/token, "
)


def true_front(space_file: Path, truth: dict) -> set[str]:
    """Arch hashes of the feasible candidates on the true front (recorded loss, predicted
    decode latency), from every candidate of the space."""
    points = feasible_points(space_file, truth)
    return {
        h
        for h, p in points.items()
        if not any(dominates(q, p, ["minimize", "minimize"]) for q in points.values())
    }


def feasible_points(space_file: Path, truth: dict) -> dict[str, tuple[float, float]]:
    """Arch hash -> (recorded loss, predicted decode latency) of every feasible candidate."""
    from archsearch.latency import metric_value
    from archsearch.space import assignments, build, parse_space_file

    space = parse_space_file(space_file)
    latency = space.objectives[1].spec
    points = {}
    for a in assignments(space):
        arch = build(space, a).arch
        if all(c.violation(metric_value(arch, c.spec)) <= 0 for c in space.constraints):
            points[arch.arch_hash] = (
                truth[arch.arch_hash]["metrics"]["val_loss"],
                metric_value(arch, latency),
            )
    return points


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["tpe", "auto"])
def test_replayed_sweep_never_stops_a_trial_of_the_true_front(tmp_path, sampler):
    """search_small replayed from its recorded trials (every candidate trained once, seeded):
    Pareto-aware stopping stops trials, none of them on the true front, each with a reason
    naming its prediction and a trained trial that dominates it; under TPE and under the
    default sampler (`ehvi` here), which tries every feasible candidate once, trains the
    whole true front and then stops asking."""
    run_dir = tmp_path / "run"
    res = subprocess.run(
        [
            EXE,
            "sweep",
            f"space_file={SMALL}",
            f"run_dir={run_dir}",
            "trials=12",
            "seed=0",
            "concurrency=1",  # one at a time: the seeded sampler sees the same history each run
            "ray.num_cpus=2",
            "early_stopping=pareto",
            f"sampler={sampler}",
            "trainable=archsearch.sweep.testing:replay",
            "format=json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "ARCHSEARCH_REPLAY_CACHE": str(TRUTH)},
    )
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout)
    truth = json.loads(TRUTH.read_text())
    front = true_front(SMALL, truth)
    study = optuna.load_study(
        study_name="search_small", storage=open_storage(f"sqlite:///{run_dir / 'study.db'}")
    )
    latency = StudyMeta.from_study(study).objectives[1]
    recs = {r.number: r for r in records(study)}
    stopped = [r for r in recs.values() if r.status == "stopped_early"]
    trained = [r for r in recs.values() if r.status == "trained"]
    assert stopped, "nothing was stopped: the test exercises nothing"
    assert front.isdisjoint(r.attrs["arch_hash"] for r in stopped)
    if sampler == "tpe":
        assert len(trained) == 12
    else:  # every feasible candidate tried once (nothing else asked), the true front trained
        assert summary["sampler"] == "ehvi" and summary["outcome"] in ("done", "exhausted")
        assert front <= {r.attrs["arch_hash"] for r in trained}
        hashes = [r.attrs["arch_hash"] for r in recs.values()]
        assert len(hashes) == len(set(hashes)) == len(trained) + len(stopped)
        if summary["outcome"] == "exhausted":
            assert len(hashes) == len(feasible_points(SMALL, truth))
    for r in stopped:
        assert r.state == "PRUNED" and r.values is None
        rung = RUNG_REASON.match(r.reason)
        if rung:  # a no-worse trial was more than 2% lower at the same eval point
            fraction = float(rung[1]) / 100
            assert fraction == pytest.approx(r.attrs["budget"]["fraction"])
            by = truth[recs[int(rung[3])].attrs["arch_hash"]]
            at = {e["fraction"]: e["val_loss"] for e in by["evals"]}
            assert at[fraction] == pytest.approx(float(rung[4]), rel=1e-2)
            assert float(rung[4]) < float(rung[2]) * (1 - RUNG_MARGIN) + 0.01
            assert (
                recs[int(rung[3])].attrs["device_costs"]["rpi5"][latency]
                <= (r.attrs["device_costs"]["rpi5"][latency])
            )
            continue
        m = REASON.match(r.reason)  # its predicted final loss is dominated by the front
        assert m, r.reason
        assert int(m[1]) == round(100 * r.attrs["budget"]["fraction"]) < 100
        by = recs[int(m[4])]
        assert by.fully_trained and math.isclose(by.values[0], float(m[5]), rel_tol=1e-2)
        # it dominates the optimistic vector: no slower, and better than prediction - 2 std
        assert by.values[1] <= r.attrs["device_costs"]["rpi5"][latency]
        assert by.values[0] < float(m[2]) - 2 * float(m[3]) + 0.01  # the reason's rounding


def test_a_trial_whose_curve_cannot_be_fitted_goes_on(tmp_path):
    """predict_final raises ValueError (a time budget has no step count before it runs; no
    finite point): the rule lets the trial go on instead of judging it."""
    from archsearch.sweep.pareto_stopping import ParetoRule
    from archsearch.sweep.state import SweepState

    def rule(train: dict) -> ParetoRule:
        state = SweepState(None, None, "rpi5", [], train, tmp_path, target=1)  # type: ignore[arg-type]
        return ParetoRule(state)

    point = {"step": 20.0, "fraction": 0.25, "val_loss": 2.9}
    assert rule({"budget": "time:60s"}).judge(None, [point], 0.25) is None  # type: ignore[arg-type]
    nan = {**point, "val_loss": math.nan}
    assert rule({"budget": "tokens:160K"}).judge(None, [nan], 0.25) is None  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    arrivals=st.lists(st.tuples(st.floats(1.0, 4.0), st.floats(0.1, 10.0)), min_size=2, max_size=8)
)
def test_the_same_rung_test_stops_only_what_a_no_slower_trial_clearly_beats(
    arrivals, tmp_path_factory
):
    """Trials reach the 25% eval point in order with (loss there, decode ms): each is stopped
    exactly when an earlier arrival is no slower and more than RUNG_MARGIN lower in loss."""
    from types import SimpleNamespace

    from archsearch.sweep.pareto_stopping import ParetoRule
    from archsearch.sweep.state import SweepState

    space = SimpleNamespace(
        objectives=[
            SimpleNamespace(spec=LOSS, direction="minimize"),
            SimpleNamespace(spec=DECODE, direction="minimize"),
        ]
    )
    state = SweepState(None, space, "rpi5", [], {}, tmp_path_factory.mktemp("r"), target=1)  # type: ignore[arg-type]
    rule = ParetoRule(state)
    for i, (loss, ms) in enumerate(arrivals):
        launched = SimpleNamespace(
            optuna_trial=SimpleNamespace(number=i), costs={DECODE.label: ms}, measure_ref=None
        )
        reason = rule.judge_rung(launched, loss, 0.25)  # type: ignore[arg-type]
        beaten = [
            j
            for j, (l2, ms2) in enumerate(arrivals[:i])
            if ms2 <= ms and l2 < loss * (1 - RUNG_MARGIN)
        ]
        assert (reason is not None) == bool(beaten)
        if reason:
            assert f"trial {beaten[0]}'s at the same point" in reason
