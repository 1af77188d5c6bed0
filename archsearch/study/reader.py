"""Open a stored study for analysis (`pareto`, `export`, `dashboard`, benchmarks): its records,
objectives and directions, and where outputs go. Nothing here writes.

`load` opens the storage read-only (`archsearch.study.storage.open_reader`) and reads the
trials in pages from the RDB tables without their per-step series
(`archsearch.study.tables`; 100,000 trials in seconds), else through Optuna's public API."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from archsearch.errors import UserError
from archsearch.study.schema import (
    META_KEY,
    SERIES_ATTRS,
    DamagedAttribute,
    StudyMeta,
    TrialRecord,
    read_meta,
)
from archsearch.study.storage import locate, open_reader, redact, study_names

__all__ = ["StudyData", "load", "records"]


@dataclass
class StudyData:
    """One study as the analysis commands see it."""

    url: str
    name: str
    meta: dict[str, Any]
    records: list[TrialRecord]
    objectives: list[str]
    directions: list[str]
    home: Path | None  # where outputs go: the run directory; None for a server URL
    study: Any = field(repr=False, default=None)
    storage: Any = field(repr=False, default=None)
    version: tuple | None = None  # `current_version()` when read
    # trials left out of `records` because what they store is damaged: number -> what
    unreadable: dict[int, str] = field(default_factory=dict)
    _curves: dict[int, Any] | None = field(default=None, repr=False, compare=False)

    def curves(self, numbers: list[int]) -> dict[int, Any]:
        """The stored loss curves (attribute `curve`) of these trials: from the records when
        they were read with their series, else read once from the storage with the whole
        study's series and kept for the next caller."""
        want = set(numbers)
        chosen = [r for r in self.records if r.number in want]
        if all("curve" in r.attrs for r in chosen):
            return {r.number: r.attrs["curve"] for r in chosen}
        if self._curves is None:
            full = load(self.url, self.name, series=True)
            self._curves = {r.number: r.attrs.get("curve") for r in full.records}
        return {n: self._curves.get(n) for n in want}

    def current_version(self) -> tuple | None:
        """A token that changes whenever a trial is added or ends (None: unknown): a reader
        that keeps this study can tell whether it is still current."""
        from archsearch.study.tables import study_version

        return study_version(self.storage, self.name) if self.storage is not None else None

    @property
    def trained(self) -> list[TrialRecord]:
        return [r for r in self.records if r.fully_trained]

    def record(self, number: int) -> TrialRecord:
        """Trial `number`; a one-line `UserError` when there is none, or when what it stores
        is damaged (saying what)."""
        if number in self.unreadable:
            raise UserError(
                f"trial {number} of study {self.name!r} is unreadable: {self.unreadable[number]}",
                key="trial",
            )
        for r in self.records:
            if r.number == number:
                return r
        last = max((r.number for r in self.records), default=-1)
        raise UserError(
            f"study {self.name!r} has no trial {number} (trials 0..{last})", key="trial"
        )

    def screen(
        self, use: Callable[[TrialRecord], object], among: Iterable[TrialRecord] | None = None
    ) -> None:
        """Run `use` on each record (of `among`, default all): a record whose stored attributes
        it finds damaged (`DamagedAttribute`) leaves `records` for `unreadable`."""
        bad: dict[int, str] = {}
        for r in list(self.records if among is None else among):
            try:
                use(r)
            except DamagedAttribute as err:
                bad[r.number] = err.problem
        if bad:
            self.records = [r for r in self.records if r.number not in bad]
            self.unreadable.update(bad)

    def unreadable_note(self) -> str:
        """'2 trials unreadable: 14, 31 (trial 14: its stored attribute ... )', or ''."""
        if not self.unreadable:
            return ""
        numbers = sorted(self.unreadable)
        n = len(numbers)
        first = numbers[0]
        return (
            f"{n} trial{'s' * (n != 1)} unreadable: {', '.join(map(str, numbers))} "
            f"(trial {first}: {self.unreadable[first]})"
        )

    def require_trained(self) -> None:
        if self.trained:
            return
        unreadable = f"; {self.unreadable_note()}" if self.unreadable else ""
        foreign = self.records and not any(r.status for r in self.records)
        if not self.meta and foreign and not unreadable:
            raise UserError(
                f"study {self.name!r} was not written by archsearch (it has no {META_KEY!r} "
                f"metadata and its trials no archsearch status: {_count_statuses(self.records)})",
                key="study",
            )
        raise UserError(
            f"study {self.name!r} has no fully trained feasible trial yet "
            f"({_count_statuses(self.records)}{unreadable})",
            key="study",
        )


def records(study) -> list[TrialRecord]:
    """Every trial of an open Optuna study, as records."""
    return [TrialRecord.from_frozen(t) for t in study.get_trials(deepcopy=False)]


def _read_records(storage, study, skip: tuple[str, ...]) -> list[TrialRecord]:
    """In pages from the tables where their schema is the one checked, else whole."""
    from archsearch.study.tables import read_records

    paged = read_records(storage, study.study_name, skip_attrs=skip)
    if paged is not None:
        return paged
    try:
        out = records(study)
    except ValueError as err:  # Optuna decodes every stored value at once: one is not JSON
        raise UserError(
            f"cannot read the trials of study {study.study_name!r}: a stored value is not "
            f"JSON ({err})",
            key="study",
        ) from None
    for r in out:
        for key in skip:
            r.attrs.pop(key, None)
    return out


def _count_statuses(recs: list[TrialRecord]) -> str:
    if not recs:
        return "no trials"
    counts: dict[str, int] = {}
    for r in recs:
        counts[r.status or r.state.lower()] = counts.get(r.status or r.state.lower(), 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def load(study: str, study_name: str | None = None, *, series: bool = False) -> StudyData:
    """Open a study (`study=`: run directory, SQLite file or URL); one-line `UserError`s for
    every bad input. The records leave out the per-step series (`SERIES_ATTRS`: loss curves,
    intermediate results) unless `series` is set."""
    import optuna
    import sqlalchemy

    url, home = locate(study)
    storage = open_reader(url)
    try:
        names = study_names(storage)
    except (sqlalchemy.exc.SQLAlchemyError, ModuleNotFoundError, ValueError) as err:
        first = str(getattr(err, "orig", err)).strip().splitlines()[0]
        raise UserError(f"cannot open the study storage: {first}", key="study") from None
    if not names:
        raise UserError(f"{redact(url)} holds no study", key="study")
    if study_name is None:
        if len(names) > 1:
            raise UserError(
                f"the storage holds several studies ({', '.join(names)}); "
                "name one with study_name=",
                key="study_name",
            )
        study_name = names[0]
    elif study_name not in names:
        raise UserError(
            f"no study {study_name!r} in the storage (it holds: {', '.join(names)})",
            key="study_name",
        )
    st = optuna.load_study(study_name=study_name, storage=storage)
    from archsearch.study.tables import study_version

    version = study_version(storage, study_name)  # before the trials: a later change shows
    meta = StudyMeta.from_study(st)  # damaged metadata: one line, before any trial is read
    directions = [d.name.lower() for d in st.directions]
    objectives = list((meta.objectives if meta else None) or st.metric_names or [])
    if len(objectives) != len(directions):
        objectives = [f"objective_{i}" for i in range(len(directions))]
    recs = _read_records(storage, st, () if series else SERIES_ATTRS)
    return StudyData(
        url=url,
        name=study_name,
        meta=read_meta(st),
        records=[r for r in recs if not r.damaged],
        unreadable={r.number: r.damaged for r in recs if r.damaged},
        objectives=objectives,
        directions=directions,
        home=home,
        study=st,
        storage=storage,
        version=version,
    )
