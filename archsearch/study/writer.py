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

__all__ = ["INTERRUPTED_REASON", "StudyWriter"]

INTERRUPTED_REASON = "the sweep driver stopped while this trial ran"


class StudyWriter:
    """An open study and the storage it lives in."""

    def __init__(self, storage, study, driver: str = "") -> None:
        self.storage = storage
        self.study = study
        self.driver = driver  # who writes (host:pid:start), stamped on every trial it asks
        self._study_id = storage.get_study_id_from_name(study.study_name)

    @classmethod
    def create_or_open(
        cls, storage, name: str, meta: StudyMeta, sampler=None, driver: str = ""
    ) -> tuple[StudyWriter, bool]:
        """Create the study, or reopen it and check it is the same sweep (same objectives and
        directions); returns (writer, whether it existed). Two drivers starting at the same
        instant both succeed: one creates, the other opens (`load_if_exists`), and a study
        whose creator has not written its meta yet gets the same meta from both."""
        import optuna

        try:
            study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
            existed = True
        except KeyError:
            study = optuna.create_study(
                study_name=name,
                storage=storage,
                sampler=sampler,
                directions=meta.directions,
                load_if_exists=True,
            )
            existed = False
        old = StudyMeta.from_study(study)
        if old is None and not study.get_trials(deepcopy=False):  # new (here or by a peer)
            study.set_user_attr("archsearch", meta.to_json())
            with warnings.catch_warnings():  # experimental since Optuna 3.2, stable in use
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                study.set_metric_names(meta.objectives)
            old = StudyMeta.from_study(study)
        if not existed:
            return cls(storage, study, driver), False
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
        return cls(storage, study, driver), True

    # -- writing --------------------------------------------------------------------------------

    def ask(self):
        """A new trial, stamped with this writer's driver and its first heartbeat."""
        with warnings.catch_warnings():  # the heartbeat is kept by the driver (sweep/drivers.py)
            warnings.filterwarnings("ignore", "Heartbeat of storage is supposed", UserWarning)
            trial = self.study.ask()
        if self.driver:
            trial.set_user_attr("driver", self.driver)
        self.beat([trial.number])
        return trial

    def beat(self, numbers: list[int]) -> None:
        """Record a heartbeat for these trials (a storage opened with a heartbeat interval;
        Optuna's `fail_stale_trials` fails RUNNING trials whose heartbeat is too old)."""
        interval = getattr(self.storage, "get_heartbeat_interval", None)
        if interval is not None and interval():
            for number in numbers:
                self.storage.record_heartbeat(self.trial_id(number))

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
            self.trial_id(trial.number), "constraints", list(violations.values())
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
        trained trial, FAIL for a failed or interrupted one (or any, with `failed=True`),
        PRUNED otherwise (stopped early, never trained, a duplicate, a replicate or a
        confirmation: their `values` go to the attribute `duplicate_values`,
        `replicate_values` or `confirm_values`, so no architecture is a point twice in
        optuna-dashboard)."""
        from optuna.trial import TrialState

        state, attrs = _ending(status, reason, attrs, values, failed)
        self.set_attrs(trial, attrs)
        if state == TrialState.COMPLETE:
            self.study.tell(trial, values)
        else:
            self.study.tell(trial, state=state)

    def add_finished(
        self,
        status: Status,
        reason: str = "",
        attrs: dict[str, Any] | None = None,
        values: list[float] | None = None,
        violations: dict[str, float] | None = None,
        params: dict[str, Any] | None = None,
        distributions: dict[str, Any] | None = None,
    ) -> None:
        """Write a trial that has already ended, as `ask`, `set_constraints` and `finish`
        would, in one storage transaction (Optuna's `add_trial` of a `create_trial`): for
        studies written in bulk, such as the study-size benchmark's synthetic sweeps. Its
        searched parameters, if given, come with their Optuna `distributions`."""
        from optuna.trial import TrialState, create_trial

        state, attrs = _ending(status, reason, attrs, values, False)
        self.study.add_trial(
            create_trial(
                state=state,
                values=[float(v) for v in values] if state == TrialState.COMPLETE else None,
                params=params,
                distributions=distributions,
                user_attrs=encode_attrs(attrs),
                system_attrs={"constraints": list(violations.values())} if violations else None,
                constraints=dict(violations) if violations else None,
            )
        )

    def mark_interrupted(self, dead) -> list[dict[str, Any]]:
        """RUNNING trials for which `dead(frozen_trial)` holds (their driver died): FAIL them
        (status `interrupted`) and return the parameters of those that had been launched, to
        run again. A trial that never got as far (it failed while being built or priced, or
        its driver died first) is not returned: a poisoned candidate is never run again. A
        trial another driver marks at the same time is skipped."""
        from optuna.exceptions import UpdateFinishedTrialError
        from optuna.trial import TrialState

        again = []
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if not dead(t):
                continue
            storage_id = self.trial_id(t.number)
            try:
                self.storage.set_trial_user_attr(storage_id, "status", Status.INTERRUPTED.value)
                self.storage.set_trial_user_attr(storage_id, "reason", INTERRUPTED_REASON)
                if not self.storage.set_trial_state_values(storage_id, TrialState.FAIL):
                    continue
            except UpdateFinishedTrialError:
                continue
            if t.user_attrs.get("status") == Status.RUNNING.value and t.params:
                again.append(dict(t.params))
        return again

    # -- reading ----------------------------------------------------------------------------------

    def records(self) -> list[TrialRecord]:
        return records(self.study)

    def trial_id(self, number: int) -> int:
        """The storage's id of trial `number` (its public API; a `Trial` keeps it private)."""
        return self.storage.get_trial_id_from_study_id_trial_number(self._study_id, number)


def _ending(
    status: Status,
    reason: str,
    attrs: dict[str, Any] | None,
    values: list[float] | None,
    failed: bool,
):
    """(Optuna state, user attributes) of a trial that ended with `status` (see `finish`)."""
    from optuna.trial import TrialState

    attrs = {"status": status, "reason": reason, **(attrs or {})}
    kept_as = {
        Status.DUPLICATE: "duplicate_values",
        Status.REPLICATE: "replicate_values",
        Status.CONFIRMATION: "confirm_values",
    }
    if status in kept_as and values is not None:
        attrs[kept_as[status]] = list(values)
    if failed or status in (Status.FAILED, Status.INTERRUPTED):
        return TrialState.FAIL, attrs
    if values is not None and status == Status.TRAINED:
        return TrialState.COMPLETE, attrs
    return TrialState.PRUNED, attrs
