"""Open a stored study for analysis: `study=` is a run directory (holding study.db), a path to an
SQLite file, or an SQLAlchemy URL (PostgreSQL on a cluster); `study_name=` picks one study when a
storage holds several.

Nothing here writes: a path that is not an existing Optuna database is refused before Optuna
could create its tables in it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from archsearch.errors import UserError
from archsearch.sweep.study import TrialRecord, open_storage, records, study_meta


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

    @property
    def trained(self) -> list[TrialRecord]:
        return [r for r in self.records if r.fully_trained]

    def record(self, number: int) -> TrialRecord:
        for r in self.records:
            if r.number == number:
                return r
        last = max((r.number for r in self.records), default=-1)
        raise UserError(
            f"study {self.name!r} has no trial {number} (trials 0..{last})", key="trial"
        )

    def require_trained(self) -> None:
        if not self.trained:
            by = _count_statuses(self.records)
            raise UserError(
                f"study {self.name!r} has no fully trained feasible trial yet ({by})",
                key="study",
            )


def _count_statuses(recs: list[TrialRecord]) -> str:
    if not recs:
        return "no trials"
    counts: dict[str, int] = {}
    for r in recs:
        counts[r.status or r.state.lower()] = counts.get(r.status or r.state.lower(), 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def storage_url(study: str) -> tuple[str, Path | None]:
    """(SQLAlchemy URL, home folder) of a run directory, an SQLite file or a URL."""
    if "://" in study:
        return study, None
    path = Path(study).expanduser()
    if path.is_dir():
        db = path / "study.db"
        if not db.is_file():
            raise UserError(f"the folder {study!r} holds no study.db", key="study")
        path = db
    elif not path.is_file():
        raise UserError(
            f"{study!r} is neither a run directory, an SQLite file nor a database URL",
            key="study",
        )
    _check_sqlite_study(path, study)
    path = path.resolve()
    # a run directory's study.db: outputs go in the run directory; another file: beside it
    home = path.parent if path.name == "study.db" else path.parent / f"{path.stem}_analysis"
    return f"sqlite:///{path}", home


def _check_sqlite_study(path: Path, shown: str) -> None:
    """Refuse a file that is not an Optuna SQLite database (without writing to it)."""
    with path.open("rb") as f:
        if f.read(16) != b"SQLite format 3\x00":
            raise UserError(f"{shown!r} is not an SQLite database", key="study")
    try:
        con = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)
        try:
            tables = {r[0] for r in con.execute("select name from sqlite_master")}
        finally:
            con.close()
    except sqlite3.Error as err:
        raise UserError(f"cannot read {shown!r}: {err}", key="study") from None
    if "studies" not in tables or "trials" not in tables:
        raise UserError(f"{shown!r} is an SQLite file but not an Optuna study", key="study")


def load(study: str, study_name: str | None = None) -> StudyData:
    """Open a study (see the module docstring); one-line `UserError`s for every bad input."""
    import optuna
    import sqlalchemy

    url, home = storage_url(study)
    try:
        storage = open_storage(url)
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
    except (sqlalchemy.exc.SQLAlchemyError, ModuleNotFoundError, ValueError) as err:
        first = str(getattr(err, "orig", err)).strip().splitlines()[0]
        raise UserError(f"cannot open the study storage: {first}", key="study") from None
    if not names:
        raise UserError("the storage holds no study", key="study")
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
    meta = study_meta(st)
    directions = [d.name.lower() for d in st.directions]
    objectives = list(meta.get("objectives") or st.metric_names or [])
    if len(objectives) != len(directions):
        objectives = [f"objective_{i}" for i in range(len(directions))]
    return StudyData(
        url=url,
        name=study_name,
        meta=meta,
        records=records(st),
        objectives=objectives,
        directions=directions,
        home=home,
        study=st,
    )
