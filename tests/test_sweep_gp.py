"""`sampler=gp`: Optuna's GPSampler on a view of the study that holds every trial tried. The
sampler alone (Optuna, the `tiny` space priced as the sweep prices it, a synthetic loss): what
a sweep tells PRUNED is never proposed again, the GP's proposals follow the completed trials,
and conditional parameters are drawn as the `tpe` path draws them."""

from __future__ import annotations

import json

import optuna
import pytest
from optuna.trial import TrialState

from archsearch.space import load_space, suggest
from archsearch.sweep.gp import GPSearch, tried_view
from archsearch.sweep.pricing import assess
from archsearch.sweep.runner import make_sampler, resolve_sampler
from archsearch.sweep.settings import LatencyMode, Sampler
from archsearch.sweep.testing import synthetic_loss

optuna.logging.set_verbosity(optuna.logging.WARNING)


def ask(study, space):
    """One ask as the sweep's searcher makes it: suggest, price, store the constraints."""
    trial = study.ask()
    params = suggest(space, trial)
    got = assess(space, [], "rpi5", params)
    for key, v in (got.priced.violations if got.priced else {}).items():
        trial.set_constraint(key, v)
    return trial, params, got


def key(params: dict) -> str:
    return json.dumps(params, sort_keys=True)


def test_gp_never_proposes_again_what_the_study_pruned():
    """After the startup trials, every proposal is told PRUNED (as an infeasible or repeated
    candidate is): with nothing new completed, Optuna's GP alone would propose the same point
    again; here each proposal differs from every one before it."""
    space = load_space("tiny")
    sampler = make_sampler(Sampler.gp, seed=1, n_trials=12, space=space, device="rpi5")
    assert isinstance(sampler, GPSearch)
    study = optuna.create_study(directions=["minimize"] * 2, sampler=sampler)
    done = 0
    while done < 4:  # the startup trials (n_trials // 3), completed with their costs
        trial, params, got = ask(study, space)
        if got.status is not None:
            study.tell(trial, state=TrialState.PRUNED)
            continue
        arch = got.priced.arch.to_dict()
        study.tell(
            trial, [synthetic_loss(arch), got.priced.value(space.objectives[1].spec, "rpi5")]
        )
        done += 1
    relative = set(sampler.infer_relative_search_space(study, study.trials[-1]))
    assert relative, "the GP models no parameter: the test no longer exercises it"
    proposed = []
    for _ in range(5):
        trial, params, _ = ask(study, space)
        proposed.append(key({k: v for k, v in params.items() if k in relative}))
        study.tell(trial, state=TrialState.PRUNED)
    assert len(set(proposed)) == len(proposed), proposed


def test_the_view_holds_completed_trials_and_every_other_tried_assignment_once():
    study = optuna.create_study(directions=["minimize", "minimize"])
    dist = optuna.distributions.CategoricalDistribution(["a", "b", "c"])
    for value, state in (
        ("a", TrialState.COMPLETE),
        ("b", TrialState.PRUNED),
        ("b", TrialState.FAIL),
    ):
        t = optuna.trial.create_trial(
            params={"x": value},
            distributions={"x": dist},
            values=[1.0, 2.0] if state == TrialState.COMPLETE else None,
            state=state,
            constraints={"params": -1.0} if state == TrialState.COMPLETE else None,
        )
        study.add_trial(t)
    asking = study.ask()
    view, standing = tried_view(study, asking.number)
    trials = view.get_trials(deepcopy=False)
    assert [(t.state, t.params) for t in trials] == [
        (TrialState.COMPLETE, {"x": "a"}),
        (TrialState.RUNNING, {"x": "b"}),  # pruned and failed alike, once
        (TrialState.RUNNING, {}),  # the trial being asked for
    ]
    assert trials[0].values == [1.0, 2.0] and trials[0].constraints == {"params": -1.0}
    assert standing.number == trials[-1].number
    assert len(study.trials) == 4  # the study itself is untouched


@pytest.mark.parametrize("latency", [LatencyMode.predicted, LatencyMode.measured])
def test_auto_stays_where_the_benchmark_puts_it(latency):
    """`auto` picks `ehvi` where it applies (benchmarks/results/search_efficiency_one_at_a_time
    *.json: ahead of `gp` at a quarter of the compute in the mean and the lowest seed on every
    recording of both spaces), else `tpe` (`gp` was not ahead of it in every real sweep, and
    costs seconds per suggestion: docs/benchmarks/samplers.md); `gp` is chosen by name."""
    space = load_space("tiny")
    want = Sampler.ehvi if latency == LatencyMode.predicted else Sampler.tpe
    assert resolve_sampler(Sampler.auto, space, latency) == want
    assert resolve_sampler(Sampler.gp, space, latency) == Sampler.gp
