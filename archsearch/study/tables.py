"""Read a study's trials in pages straight from Optuna's RDB tables (read-only SELECTs).

Why: Optuna's public API reads a study whole. `Study.get_trials` (and `storage.get_all_trials`)
builds every `FrozenTrial` with every attribute, parameter and intermediate value in one
query, with no paging and no way to leave anything out: 100,000 trials of a sweep are
gigabytes of JSON (each trial's loss curve is most of it) and minutes. Analysis needs a few
attributes per trial, so this module reads the trials in pages of `PAGE` by their id and only
the user attributes asked for.

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

from archsearch.study.schema import TrialRecord

__all__ = ["PAGE", "SCHEMA_REVISIONS", "read_records", "schema_revision"]

SCHEMA_REVISIONS = frozenset({"v3.2.0.a"})  # Optuna 3.2 ... 5.0 (checked with 5.0.0)
PAGE = 5000  # trials per query

_CONSTRAINTS = "constraints"  # Optuna's system attribute: the old list, and `constraints:<key>`


def schema_revision(engine) -> str | None:
    """The Optuna schema revision of the database (None when it has none)."""
    import sqlalchemy

    with engine.connect() as conn:
        row = conn.execute(sqlalchemy.text("SELECT version_num FROM alembic_version")).first()
    return None if row is None else str(row[0])


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
    from sqlalchemy import bindparam, text

    trials_q = text(
        "SELECT trial_id, number, state FROM trials WHERE study_id = :study "
        "AND trial_id > :after ORDER BY trial_id LIMIT :page"
    )
    # trial ids in [lo, hi] may belong to other studies of the storage: rows are matched by id
    values_q = text(
        "SELECT trial_id, objective, value, value_type FROM trial_values "
        "WHERE trial_id BETWEEN :lo AND :hi"
    )
    user_q = text(
        "SELECT trial_id, key, value_json FROM trial_user_attributes "
        "WHERE trial_id BETWEEN :lo AND :hi" + (" AND key NOT IN :skip" if skip else "")
    )
    skip_param = {"skip": sorted(skip)} if skip else {}
    if skip:
        user_q = user_q.bindparams(bindparam("skip", expanding=True))
    system_q = text(
        "SELECT trial_id, key, value_json FROM trial_system_attributes "
        "WHERE trial_id BETWEEN :lo AND :hi AND (key = :old OR key LIKE :new)"
    )
    params_q = text(
        "SELECT trial_id, param_name, param_value, distribution_json FROM trial_params "
        "WHERE trial_id BETWEEN :lo AND :hi ORDER BY param_id"
    )
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT study_id FROM studies WHERE study_name = :name"), {"name": study_name}
        ).first()
        if row is None:
            return
        study_id, after = row[0], -1
        while True:
            trials = conn.execute(trials_q, {"study": study_id, "after": after, "page": page}).all()
            if not trials:
                return
            ids = {t[0]: t for t in trials}
            span = {"lo": trials[0][0], "hi": trials[-1][0]}
            after = trials[-1][0]
            values: dict[int, dict[int, float]] = {}
            for tid, objective, value, kind in conn.execute(values_q, span):
                if tid in ids:
                    values.setdefault(tid, {})[objective] = _value(value, kind)
            user: dict[int, dict[str, Any]] = {}
            for tid, key, raw in conn.execute(user_q, {**span, **skip_param}):
                if tid in ids:
                    user.setdefault(tid, {})[key] = json.loads(raw)
            system: dict[int, dict[str, Any]] = {}
            for tid, key, raw in conn.execute(
                system_q, {**span, "old": _CONSTRAINTS, "new": _CONSTRAINTS + ":%"}
            ):
                if tid in ids:
                    system.setdefault(tid, {})[key] = json.loads(raw)
            params: dict[int, dict[str, Any]] = {}
            for tid, name, value, dist in conn.execute(params_q, span):
                if tid in ids:
                    params.setdefault(tid, {})[name] = _param(value, dist)
            yield [
                TrialRecord.from_stored(
                    number,
                    state,
                    [v for _, v in sorted(values[tid].items())] if tid in values else None,
                    user.get(tid, {}),
                    _constraints(system.get(tid, {})),
                    params.get(tid, {}),
                )
                for tid, number, state in trials
            ]


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
    out = {str(i): c for i, c in enumerate(system.get(_CONSTRAINTS) or [])}
    prefix = _CONSTRAINTS + ":"
    out.update({k[len(prefix) :]: v for k, v in system.items() if k.startswith(prefix)})
    return out
