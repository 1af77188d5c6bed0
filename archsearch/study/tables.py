"""Read a study's trials in pages straight from Optuna's RDB tables (read-only SELECTs).

Why: Optuna's public API reads a study whole. `Study.get_trials` (and `storage.get_all_trials`)
builds every `FrozenTrial` with every attribute, parameter and intermediate value in one
query, with no paging and no way to leave anything out: 100,000 trials of a sweep are
gigabytes of JSON (each trial's loss curve is most of it) and minutes. Analysis needs a few
attributes per trial, so this module reads the trials in pages of `PAGE` by their id with the
few user attributes every analysis reads (`EAGER_ATTRS`); any other attribute is read when first
used, for every trial of the study at once (one query per attribute, in pages), and each value
is decoded only when read (`StoredAttrs`). A front on a study's stored objectives never reads
the trials' architectures and cost tables; a table of its members reads their columns once.

Why it is safe: the tables are read only, with plain SELECTs, through the storage's own
engine (the sweep's `StudyWriter` stays the one writer), and only on the schema revision
checked here (`SCHEMA_REVISIONS`, the `alembic_version` table: `v3.2.0.a` is the revision of
Optuna 3.2 to 5.0). On any other revision, or any error reading the tables, `read_records`
returns None and the caller reads through the public API (the same records, slower).
The records equal `TrialRecord.from_frozen` of the public API's trials
(tests/test_study_tables.py).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from typing import Any

from archsearch.study.schema import StoredAttrs, TrialRecord

__all__ = [
    "EAGER_ATTRS",
    "PAGE",
    "SCHEMA_REVISIONS",
    "heartbeat_ages",
    "read_records",
    "schema_revision",
    "study_version",
]

SCHEMA_REVISIONS = frozenset({"v3.2.0.a"})  # Optuna 3.2 ... 5.0 (checked with 5.0.0)
PAGE = 5000  # trials per query
# user attributes read with the trials (the rest are read when first used)
EAGER_ATTRS = ("status", "reason", "arch_hash", "summary", "family", "attention_share")

_CONSTRAINTS = "constraints"  # Optuna's system attribute: the old list, and `constraints:<key>`


def schema_revision(engine) -> str | None:
    """The Optuna schema revision of the database (None when it has none)."""
    import sqlalchemy

    with engine.connect() as conn:
        row = conn.execute(sqlalchemy.text("SELECT version_num FROM alembic_version")).first()
    return None if row is None else str(row[0])


def study_version(storage, study_name: str) -> tuple | None:
    """What changes whenever a trial of the study is added or ends: (trials, ended trials,
    the last end time), in one query; None where the tables cannot be read (no caching then)."""
    import sqlalchemy

    engine = getattr(storage, "engine", None)
    if not isinstance(engine, sqlalchemy.engine.Engine):
        return None
    q = sqlalchemy.text(
        "SELECT COUNT(*), COUNT(t.datetime_complete), MAX(t.datetime_complete) FROM trials t "
        "JOIN studies s ON s.study_id = t.study_id WHERE s.study_name = :name"
    )
    try:
        if schema_revision(engine) not in SCHEMA_REVISIONS:
            return None
        with engine.connect() as conn:
            return tuple(conn.execute(q, {"name": study_name}).one())
    except sqlalchemy.exc.SQLAlchemyError:
        return None


def heartbeat_ages(storage, study_name: str) -> dict[int, float] | None:
    """Seconds since the last heartbeat of each RUNNING trial of the study that has one, by
    the database's own clock (Optuna's heartbeat is written with it); None where the tables
    cannot be read."""
    import datetime

    import sqlalchemy

    engine = getattr(storage, "engine", None)
    if not isinstance(engine, sqlalchemy.engine.Engine):
        return None
    now = "CURRENT_TIMESTAMP" if engine.dialect.name == "sqlite" else "LOCALTIMESTAMP"
    q = sqlalchemy.text(
        f"SELECT t.number, h.heartbeat, {now} FROM trials t "
        "JOIN studies s ON s.study_id = t.study_id "
        "JOIN trial_heartbeats h ON h.trial_id = t.trial_id "
        "WHERE s.study_name = :name AND t.state = 'RUNNING'"
    )

    def when(value) -> datetime.datetime:
        value = datetime.datetime.fromisoformat(value) if isinstance(value, str) else value
        return value.replace(tzinfo=None)

    try:
        if schema_revision(engine) not in SCHEMA_REVISIONS:
            return None
        with engine.connect() as conn:
            rows = conn.execute(q, {"name": study_name}).all()
    except (sqlalchemy.exc.SQLAlchemyError, ValueError):
        return None
    return {int(n): (when(at) - when(beat)).total_seconds() for n, beat, at in rows}


def read_records(
    storage, study_name: str, *, skip_attrs: Collection[str] = (), page: int = PAGE
) -> list[TrialRecord] | None:
    """Every trial of the study as records (by trial number), read in pages; the user
    attributes named in `skip_attrs` are not read. None when the storage is not an RDB
    storage of a checked schema revision: read through the public API then."""
    import sqlalchemy

    engine = getattr(storage, "engine", None)
    if not isinstance(engine, sqlalchemy.engine.Engine):
        return None
    try:
        if schema_revision(engine) not in SCHEMA_REVISIONS:
            return None
        out = [r for chunk in _pages(engine, study_name, set(skip_attrs), page) for r in chunk]
    except sqlalchemy.exc.SQLAlchemyError:
        return None
    return sorted(out, key=lambda r: r.number)


def _pages(engine, study_name: str, skip: set[str], page: int) -> Iterator[list[TrialRecord]]:
    queries = _queries()
    eager = {"eager": [k for k in EAGER_ATTRS if k not in skip]}
    with engine.connect() as conn:
        row = conn.execute(queries["study"], {"name": study_name}).first()
        if row is None:
            return
        study_id, after = row[0], -1
        columns = _Columns(engine, skip)
        while True:
            trials = _rows(
                conn, queries["trials"], {"study": study_id, "after": after, "page": page}
            )
            if not trials:
                return
            after = trials[-1][0]
            yield _page(conn, queries, trials, eager, columns)


def _queries() -> dict[str, Any]:
    """The paged reader's queries: the study's id, a page of its trials by id, then the page's
    values, eager user attributes, constraints and parameters by its span of trial ids."""
    from sqlalchemy import bindparam, text

    return {
        "study": text("SELECT study_id FROM studies WHERE study_name = :name"),
        "trials": text(
            "SELECT trial_id, number, state FROM trials WHERE study_id = :study "
            "AND trial_id > :after ORDER BY trial_id LIMIT :page"
        ),
        # ids in [lo, hi] may be other studies' trials of the storage: rows are matched by id
        "values": text(
            "SELECT trial_id, objective, value, value_type FROM trial_values "
            "WHERE trial_id BETWEEN :lo AND :hi"
        ),
        "user": text(
            "SELECT trial_id, key, value_json FROM trial_user_attributes "
            "WHERE trial_id BETWEEN :lo AND :hi AND key IN :eager"
        ).bindparams(bindparam("eager", expanding=True)),
        "system": text(
            "SELECT trial_id, key, value_json FROM trial_system_attributes "
            "WHERE trial_id BETWEEN :lo AND :hi AND (key = :old OR key LIKE :new)"
        ),
        "params": text(
            "SELECT trial_id, param_name, param_value, distribution_json FROM trial_params "
            "WHERE trial_id BETWEEN :lo AND :hi ORDER BY param_id"
        ),
    }


def _page(
    conn,
    queries: dict[str, Any],
    trials: list[tuple],
    eager: dict[str, list[str]],
    columns: _Columns,
) -> list[TrialRecord]:
    """The records of one page's `trials` (id, number, state, by id): their values, eager user
    attributes (JSON texts, decoded on use), constraints and parameters; a trial whose
    constraints or parameters cannot be decoded is read as damaged, with what. The page's span
    of ids is told to `columns`, whose lazy attribute reads look it up."""
    ids = {t[0] for t in trials}
    span = {"lo": trials[0][0], "hi": trials[-1][0]}
    columns.pages.append((span["lo"], span["hi"], ids))
    values: dict[int, dict[int, float]] = {}
    for tid, objective, value, kind in _rows(conn, queries["values"], span):
        if tid in ids:
            values.setdefault(tid, {})[objective] = _value(value, kind)
    user: dict[int, dict[str, str]] = {}  # JSON texts, decoded on use (`StoredAttrs`)
    for tid, key, raw in _rows(conn, queries["user"], {**span, **eager}):
        if tid in ids:
            user.setdefault(tid, {})[key] = raw
    damaged: dict[int, str] = {}  # what cannot be decoded, by trial id
    system: dict[int, dict[str, Any]] = {}
    like = {**span, "old": _CONSTRAINTS, "new": _CONSTRAINTS + ":%"}
    for tid, key, raw in _rows(conn, queries["system"], like):
        if tid in ids:
            try:
                system.setdefault(tid, {})[key] = json.loads(raw)
            except ValueError:
                damaged.setdefault(tid, f"its stored {key!r} is not JSON")
    params: dict[int, dict[str, Any]] = {}
    for tid, name, value, dist in _rows(conn, queries["params"], span):
        if tid in ids:
            try:
                params.setdefault(tid, {})[name] = _param(value, dist)
            except (ValueError, KeyError, TypeError):
                damaged.setdefault(tid, f"its parameter {name!r} is damaged")
    return [
        TrialRecord.from_stored(
            number,
            state,
            [v for _, v in sorted(values[tid].items())] if tid in values else None,
            StoredAttrs(user.get(tid, {}), columns.reader(tid), number=number),
            _constraints(system.get(tid, {})),
            params.get(tid, {}),
            damaged.get(tid, ""),
        )
        for tid, number, state in trials
    ]


class _Columns:
    """The study's user attributes outside `EAGER_ATTRS`, one key at a time: the first trial
    that asks for a key reads that key of every trial (one query per page of trials read),
    later ones find it here."""

    def __init__(self, engine, skip: set[str]) -> None:
        self.engine, self.skip = engine, skip
        self.pages: list[tuple[int, int, set[int]]] = []  # (first id, last id, the study's ids)
        self.columns: dict[str, dict[int, str]] = {}

    def reader(self, trial_id: int):
        """The `more` of one trial's `StoredAttrs`."""
        return lambda key: self.keys(trial_id) if key is None else self.value(trial_id, key)

    def value(self, trial_id: int, key: str) -> str | None:
        if key in self.skip:
            return None
        if key not in self.columns:
            self.columns[key] = self._column(key)
        return self.columns[key].get(trial_id)

    def keys(self, trial_id: int) -> list[str]:
        from sqlalchemy import text

        q = text("SELECT key FROM trial_user_attributes WHERE trial_id = :t ORDER BY key")
        with self.engine.connect() as conn:
            return [k for (k,) in conn.execute(q, {"t": trial_id}).all() if k not in self.skip]

    def _column(self, key: str) -> dict[int, str]:
        from sqlalchemy import text

        q = text(
            "SELECT trial_id, value_json FROM trial_user_attributes "
            "WHERE trial_id BETWEEN :lo AND :hi AND key = :key"
        )
        out: dict[int, str] = {}
        with self.engine.connect() as conn:
            for lo, hi, ids in self.pages:  # ids in [lo, hi] may be other studies' trials
                out.update(
                    r for r in _rows(conn, q, {"lo": lo, "hi": hi, "key": key}) if r[0] in ids
                )
        return out


def _rows(conn, query, params: dict[str, Any]) -> list[tuple]:
    """Every row of a query as the database driver returns it: SQLAlchemy's `Row` objects cost
    twice the query itself on 100,000 trials, and these plain columns need no conversion."""
    result = conn.execute(query, params)
    try:
        return result.cursor.fetchall()
    finally:
        result.close()


def _value(value: float | None, kind: str) -> float:
    """A stored objective value (infinities are stored as a NULL and their sign)."""
    if kind == "INF_POS":
        return float("inf")
    if kind == "INF_NEG":
        return float("-inf")
    return float(value)


_DISTRIBUTIONS: dict[str, Any] = {}


def _param(value: float, distribution_json: str) -> Any:
    from optuna.distributions import json_to_distribution

    dist = _DISTRIBUTIONS.get(distribution_json)
    if dist is None:
        dist = _DISTRIBUTIONS[distribution_json] = json_to_distribution(distribution_json)
    return dist.to_external_repr(value)


def _constraints(system: dict[str, Any]) -> dict[str, float]:
    """Constraint values as `FrozenTrial.constraints` gives them: the old list by position,
    then the new keys."""
    old = system.get(_CONSTRAINTS) or []
    out = {str(i): c for i, c in enumerate(old if isinstance(old, list) else [old])}
    prefix = _CONSTRAINTS + ":"
    out.update({k[len(prefix) :]: v for k, v in system.items() if k.startswith(prefix)})
    return out
