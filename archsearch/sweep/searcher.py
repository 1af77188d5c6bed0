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
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from archsearch.space import suggest
from archsearch.study import Status
from archsearch.sweep.drivers import claim, sync
from archsearch.sweep.pricing import Priced, assess
from archsearch.sweep.state import Launched, SweepState

if TYPE_CHECKING:
    from archsearch.arch import ArchConfig
    from archsearch.trainers.config import TrainConfig

__all__ = ["create_searcher", "next_candidate", "settle_duplicates", "trial_dir"]

SKIP_LIMIT = 500  # consecutive untrainable suggestions before the space counts as exhausted


def create_searcher(state: SweepState, before_suggest: Callable[[], None] | None = None):
    """The Tune `Searcher` of a sweep (Ray is imported only when a sweep runs);
    `before_suggest` runs first at every suggestion."""
    from ray.tune.search import Searcher

    class ArchSearcher(Searcher):
        def suggest(self, trial_id: str):
            if before_suggest is not None:
                before_suggest()
            return next_candidate(state, trial_id)

        def on_trial_complete(self, trial_id, result=None, error=False):
            pass  # the recorder callback tells the study (it sees errors too)

    return ArchSearcher()


def next_candidate(state: SweepState, tune_id: str):
    """Ask Optuna until a candidate worth training comes up; None while the trials in flight
    may still reach the target (one stopped early or failed makes room for another); FINISHED
    when the study holds `target` fully trained trials, the space is exhausted, or too many
    trials failed."""
    from ray.tune.search import Searcher

    # other drivers' trials of the study count too; read afresh before a launch, or a driver
    # whose view is a second old trains past the target while its peers finish trials
    room = state.launched + state.running_elsewhere + state.trained < state.target
    sync(state, force=room)
    settle_duplicates(state)
    if state.done:
        return Searcher.FINISHED
    if state.launched + state.running_elsewhere + state.trained >= state.target:
        return None
    from archsearch.sweep.ehvi import EHVISampler  # here: it imports Optuna

    writer = state.writer
    sampler = writer.study.sampler
    if isinstance(sampler, EHVISampler) and sampler.exhausted(writer.study):
        state.exhausted = True  # every feasible candidate was tried: nothing new to ask
        state.notify()
        return Searcher.FINISHED
    for _ in range(SKIP_LIMIT):
        trial = writer.ask()
        suggested = partial(suggest, state.space, trial)
        got = assess(state.space, state.devices, state.device, suggested)
        priced = got.priced
        if priced is not None:
            writer.set_constraints(trial, priced.violations)
        if got.status is not None:
            attrs = priced.attrs() if priced is not None else None
            _tell_untrained(state, trial, got.status, got.reason, attrs)
            continue
        h = priced.arch.arch_hash
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
        config = _launch(state, tune_id, trial, priced)
        if config is not None:
            return config
    state.exhausted = True
    state.notify()
    return Searcher.FINISHED


def trial_dir(run_dir: Path, arch: ArchConfig, cfg: TrainConfig) -> Path:
    """A trial's run directory in a sweep's: one per architecture and training settings
    (`trial_key`), so a rerun or a confirmation of the same finds its checkpoint."""
    from archsearch.trainers.config import trial_key

    return run_dir / "trials" / f"{arch.arch_hash}-{trial_key(arch, cfg)[:8]}"


def _launch(state: SweepState, tune_id: str, trial, priced: Priced) -> dict | None:
    """Claim the architecture and hand the trial to Tune; None when another driver's trial
    holds it (this one then waits as its duplicate)."""
    from archsearch.trainers.config import TrainConfig

    arch = priced.arch
    cfg = TrainConfig.from_dict(state.train, prefix="train")
    folder = trial_dir(state.run_dir, arch, cfg)
    state.writer.set_attrs(
        trial,
        {**priced.attrs(), "status": Status.RUNNING, "reason": "", "trial_dir": str(folder)},
    )
    holder = claim(state, trial, arch.arch_hash)
    if holder is not None:
        reason = f"same architecture as trial {holder} (another driver's)"
        state.writer.set_attrs(trial, {"status": Status.DUPLICATE, "reason": reason})
        state.pending_duplicates[arch.arch_hash].append(trial)
        state.synced_at = 0.0  # re-read the study at the next suggestion
        return None
    launched = Launched(trial, arch, priced.costs, time.time())
    if state.measure is not None:
        launched.measure_ref = state.measure(arch.to_dict())
    state.by_tune_id[tune_id] = launched
    state.running_by_hash[arch.arch_hash] = trial.number
    state.launched += 1
    state.counts["launched"] += 1
    state.notify("started", launched)
    return {
        "arch": arch.to_dict(),
        "train": cfg.to_dict(),
        "trial_dir": str(folder),
        "metrics": state.training_labels,
        "optuna_number": trial.number,
        "placement": state.placement,
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


def settle_duplicates(state: SweepState) -> None:
    """Tell the duplicates waiting on another driver's trial, once it has finished."""
    for h in [h for h in state.pending_duplicates if h in state.done_by_hash]:
        if h not in state.running_by_hash:
            for dup in state.pending_duplicates.pop(h):
                tell_duplicate(state, dup, state.done_by_hash[h], {})
                state.counts[Status.DUPLICATE.value] -= 1  # counted when it was first seen
