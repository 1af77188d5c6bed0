"""The one writer of the stored schema (`archsearch.study.schema`): the sweep and the test
studies go through it, so a trial is always written the same way.

Only Optuna's public API is used: the study's `ask`/`tell`, the trial's `set_user_attr` and
`set_constraint`, and the storage's public methods (`BaseStorage`) for what a `Trial` cannot
do (old-style constraints that optuna-dashboard 0.21 displays, and marking trials that a dead
driver left RUNNING).
"""

from __future__ import annotations

import warnings
from typing import Any

from archsearch.errors import UserError
from archsearch.study.reader import records
from archsearch.study.schema import Status, StudyMeta, TrialRecord, encode_attrs

__all__ = ["StudyWriter"]


class StudyWriter:
    """An open study and the storage it lives in."""

    def __init__(self, storage, study) -> None:
        self.storage = storage
        self.study = study
        self._study_id = storage.get_study_id_from_name(study.study_name)

    @classmethod
    def create_or_open(
        cls, storage, name: str, meta: StudyMeta, sampler=None
    ) -> tuple[StudyWriter, bool]:
        """Create the study, or reopen it and check it is the same sweep (same objectives and
        directions); returns (writer, whether it existed)."""
        import optuna

        try:
            study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        except KeyError:
            study = optuna.create_study(
                study_name=name, storage=storage, sampler=sampler, directions=meta.directions
            )
            study.set_user_attr("archsearch", meta.to_json())
            with warnings.catch_warnings():  # experimental since Optuna 3.2, stable in use
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                study.set_metric_names(meta.objectives)
            return cls(storage, study), False
        old = StudyMeta.from_study(study)
        old_objectives = old.objectives if old else None
        if (
            old_objectives != meta.objectives
            or [d.name.lower() for d in study.directions] != meta.directions
        ):
            raise UserError(
                f"study {name!r} exists with objectives {old_objectives}, not "
                f"{meta.objectives}: give another study_name= or run_dir=",
                key="study_name",
            )
        return cls(storage, study), True

    # -- writing --------------------------------------------------------------------------------

    def ask(self):
        return self.study.ask()

    def set_attrs(self, trial, attrs: dict[str, Any]) -> None:
        for key, value in encode_attrs(attrs).items():
            trial.set_user_attr(key, value)

    def set_constraints(self, trial, violations: dict[str, float]) -> None:
        """Constraint values (<= 0: satisfied), new style and old style."""
        if not violations:
            return
        for name, v in violations.items():
            trial.set_constraint(name, v)
        self.storage.set_trial_system_attr(
            self._id_of(trial.number), "constraints", list(violations.values())
        )

    def finish(
        self,
        trial,
        status: Status,
        reason: str = "",
        attrs: dict[str, Any] | None = None,
        values: list[float] | None = None,
        *,
        failed: bool = False,
    ) -> None:
        """Record how a trial ended. Its Optuna state follows from the status: COMPLETE for a
        trained trial (and a duplicate of one, with its values), FAIL for a failed or
        interrupted one (or any, with `failed=True`), PRUNED otherwise (stopped early, never
        trained)."""
        from optuna.trial import TrialState

        self.set_attrs(trial, {"status": status, "reason": reason, **(attrs or {})})
        if failed or status in (Status.FAILED, Status.INTERRUPTED):
            self.study.tell(trial, state=TrialState.FAIL)
        elif values is not None and status in (Status.TRAINED, Status.DUPLICATE):
            self.study.tell(trial, values)
        else:
            self.study.tell(trial, state=TrialState.PRUNED)

    def mark_interrupted(self) -> list[dict[str, Any]]:
        """Trials left RUNNING by a driver that died: FAIL them (status `interrupted`) and
        return their parameters, to run again."""
        from optuna.trial import TrialState

        again = []
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            storage_id = self._id_of(t.number)
            self.storage.set_trial_user_attr(storage_id, "status", Status.INTERRUPTED.value)
            self.storage.set_trial_user_attr(
                storage_id, "reason", "the sweep driver stopped while this trial ran"
            )
            self.storage.set_trial_state_values(storage_id, TrialState.FAIL)
            if t.params:
                again.append(dict(t.params))
        return again

    # -- reading ----------------------------------------------------------------------------------

    def records(self) -> list[TrialRecord]:
        return records(self.study)

    def _id_of(self, number: int) -> int:
        return self.storage.get_trial_id_from_study_id_trial_number(self._study_id, number)
