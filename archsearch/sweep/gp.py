"""`sampler=gp`: Optuna's Gaussian-process sampler (`optuna.samplers.GPSampler`: log-EHVI over
every objective, constrained where the trials store constraints), told what a sweep never
trains.

Optuna's GP models the trials that completed. A sweep prices every suggestion before training
it, and tells one that breaks a constraint, cannot be built or repeats an architecture at once,
PRUNED: the GP never sees it, and its constraint model sees only feasible trials (a constraint
is learned from completed trials' `Trial.set_constraint` values). With nothing new to fit, the
GP's next proposal is the same one, again and again (an infeasible candidate over a parameter
limit, say), until the sweep gives up after `searcher.SKIP_LIMIT` such suggestions and ends
"exhausted" (measured: `bench_search_efficiency.py --samplers gp_optuna`).

So the GP answers each suggestion on a view of the study kept in memory (never stored): the
completed trials with their values and constraints, and every trial that did not complete
(pruned, failed, running) as a running one. Optuna's GP takes running trials as pending points
of its batch acquisition (qLogEHVI): a candidate already tried, or in flight, is worth nothing
more, and the next proposal moves on. The view is rebuilt from the study at every suggestion,
so it holds for every driver of a shared study and across reruns.

A pending point needs a value for every parameter the GP models, and a trial stores only the
parameters active for it: the GP may model `layers.attention_share` (every completed trial so
far had a linear mixer or MCSD) and propose it with `layers.mixer=attention`, for which it is
inactive. A proposal of this sampler keeps the GP's whole point (by trial number, in memory);
another driver's trial gets the first value of each parameter it lacks. Either way the point
stands for the trial's architecture: an inactive parameter does not change it.

Conditional parameters: the GP models the parameters every completed trial has (Optuna's
intersection search space); one active under some choices only is drawn by TPE, as
archsearch's `tpe` sampler is configured, from the trials where it was active
(`independent_sampler`).
"""

from __future__ import annotations

import json
from typing import Any

import optuna
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState, create_trial

__all__ = ["GPSearch"]


class GPSearch(BaseSampler):
    """Optuna's `GPSampler` on a view of the study in which nothing tried is proposed again
    (see the module docstring)."""

    def __init__(self, seed: int, n_startup_trials: int, independent_sampler: BaseSampler) -> None:
        self.gp = optuna.samplers.GPSampler(
            seed=seed,
            independent_sampler=independent_sampler,
            n_startup_trials=n_startup_trials,
            warn_independent_sampling=False,
        )
        self.proposed: dict[int, dict[str, Any]] = {}  # trial number -> the GP's whole point

    def infer_relative_search_space(self, study, trial: FrozenTrial) -> dict:
        return self.gp.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial: FrozenTrial, search_space: dict) -> dict[str, Any]:
        if not search_space:
            return {}
        view, asking = tried_view(study, trial.number, search_space, self.proposed)
        point = self.gp.sample_relative(view, asking, search_space)
        self.proposed[trial.number] = dict(point)
        return point

    def sample_independent(self, study, trial, param_name, param_distribution) -> Any:
        return self.gp.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study, trial: FrozenTrial) -> None:
        self.gp.before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:
        self.gp.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.gp.reseed_rng()


def tried_view(
    study,
    asking: int,
    search_space: dict | None = None,
    proposed: dict[int, dict[str, Any]] | None = None,
) -> tuple[optuna.Study, FrozenTrial]:
    """An in-memory copy of `study` for the GP: its completed trials as they are, every other
    trial with parameters as a running one (each distinct point once; a parameter of
    `search_space` it lacks from `proposed`, else the distribution's first value), and a
    running trial standing for trial `asking`, which is returned with it."""
    view = optuna.create_study(
        directions=study.directions,
        sampler=optuna.samplers.RandomSampler(),
        storage=optuna.storages.InMemoryStorage(),
    )
    pending: set[str] = set()
    for t in study.get_trials(deepcopy=False):
        if t.number == asking:
            continue
        if t.state == TrialState.COMPLETE:
            view.add_trial(
                create_trial(
                    params=t.params,
                    distributions=t.distributions,
                    values=t.values,
                    constraints=dict(t.constraints) if t.constraints else None,
                )
            )
        elif t.params:
            params, dists = dict(t.params), dict(t.distributions)
            for name, dist in (search_space or {}).items():
                if name not in params:
                    given = (proposed or {}).get(t.number, {})
                    params[name] = given[name] if name in given else _first(dist)
                    dists[name] = dist
            key = json.dumps(params, sort_keys=True, default=str)
            if key not in pending:
                pending.add(key)
                view.add_trial(
                    create_trial(state=TrialState.RUNNING, params=params, distributions=dists)
                )
    view.add_trial(create_trial(state=TrialState.RUNNING))
    return view, view.get_trials(deepcopy=False)[-1]


def _first(dist) -> Any:
    """A distribution's first value: its first choice, else its low end."""
    return dist.choices[0] if hasattr(dist, "choices") else dist.low
