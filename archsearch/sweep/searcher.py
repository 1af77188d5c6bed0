"""The sweep's searcher: Optuna suggests, the space builds, the cost model prices, and only
feasible new architectures reach Ray Tune.

Ray's own `OptunaSearch` is not used, because it gets two things wrong for this job
(`../shared/STACK.md`): a trial that the scheduler stops early is stored as COMPLETE with its
under-trained values (and can land on the Pareto front), and with `TuneConfig(metric=...)` set
it silently turns a multi-objective search single-objective. Here every active parameter is
suggested define-by-run, and candidates that cannot be built, break a constraint, or repeat an
architecture already trained (canonical hash) are told to the study at once and never reach
Tune.
"""

from __future__ import annotations

import time

from archsearch.space import build, suggest
from archsearch.study import Status
from archsearch.sweep.pricing import Priced, price
from archsearch.sweep.state import Launched, SweepState

__all__ = ["create_searcher", "next_candidate"]

SKIP_LIMIT = 500  # consecutive untrainable suggestions before the space counts as exhausted


def create_searcher(state: SweepState):
    """The Tune `Searcher` of a sweep (Ray is imported only when a sweep runs)."""
    from ray.tune.search import Searcher

    class ArchSearcher(Searcher):
        def suggest(self, trial_id: str):
            return next_candidate(state, trial_id)

        def on_trial_complete(self, trial_id, result=None, error=False):
            pass  # the recorder callback tells the study (it sees errors too)

    return ArchSearcher()


def next_candidate(state: SweepState, tune_id: str):
    """Ask Optuna until a candidate worth training comes up; FINISHED at the end."""
    from ray.tune.search import Searcher

    if state.launched + state.trained >= state.target or state.exhausted:
        return Searcher.FINISHED
    writer = state.writer
    for _ in range(SKIP_LIMIT):
        trial = writer.ask()
        cand = build(state.space, suggest(state.space, trial))
        if not cand.ok:
            _tell_untrained(state, trial, Status.INVALID, f"{cand.reason}: {cand.message}")
            continue
        priced = price(state.space, state.devices, state.device, cand.arch)
        writer.set_constraints(trial, priced.violations)
        if not priced.feasible:
            _tell_untrained(
                state, trial, Status.INFEASIBLE, "; ".join(priced.reasons), priced.attrs()
            )
            continue
        h = cand.arch.arch_hash
        if h in state.done_by_hash:
            tell_duplicate(state, trial, state.done_by_hash[h], priced.attrs())
            continue
        if h in state.running_by_hash:
            reason = f"same architecture as trial {state.running_by_hash[h]} (running)"
            writer.set_attrs(
                trial, {**priced.attrs(), "status": Status.DUPLICATE, "reason": reason}
            )
            state.pending_duplicates[h].append(trial)
            continue
        return _launch(state, tune_id, trial, priced)
    state.exhausted = True
    state.notify()
    return Searcher.FINISHED


def _launch(state: SweepState, tune_id: str, trial, priced: Priced) -> dict:
    from archsearch.trainers.config import TrainConfig
    from archsearch.trainers.trial import trial_key

    arch = priced.arch
    cfg = TrainConfig.from_dict(state.train, prefix="train")
    trial_dir = state.run_dir / "trials" / f"{arch.arch_hash}-{trial_key(arch, cfg)[:8]}"
    state.writer.set_attrs(
        trial,
        {**priced.attrs(), "status": Status.RUNNING, "reason": "", "trial_dir": str(trial_dir)},
    )
    launched = Launched(trial, arch, priced.costs, time.time())
    if state.measure is not None:
        launched.measure_ref = state.measure(arch.to_dict())
    state.by_tune_id[tune_id] = launched
    state.running_by_hash[arch.arch_hash] = trial.number
    state.launched += 1
    state.counts["launched"] += 1
    state.notify()
    return {
        "arch": arch.to_dict(),
        "train": cfg.to_dict(),
        "trial_dir": str(trial_dir),
        "metrics": state.training_labels,
        "optuna_number": trial.number,
    }


def _tell_untrained(state: SweepState, trial, status: Status, reason: str, attrs=None) -> None:
    state.writer.finish(trial, status, reason, attrs)
    state.counts[status.value] += 1
    state.notify()


def tell_duplicate(state: SweepState, trial, original: int, attrs: dict) -> None:
    """Tell a repeat of an architecture what its first trial got, without training it again."""
    first = state.writer.study.get_trials(deepcopy=False)[original]
    values = list(first.values) if first.state.name == "COMPLETE" else None
    state.writer.finish(
        trial,
        Status.DUPLICATE,
        f"same architecture as trial {original}",
        {**attrs, "duplicate_of": original},
        values,
    )
    state.counts[Status.DUPLICATE.value] += 1
    state.notify()
