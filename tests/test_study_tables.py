"""The paged reader of Optuna's tables (`archsearch.study.tables`) gives the same records as
Optuna's public API, on SQLite and PostgreSQL, for any page size; studies sharing a storage stay
apart; the per-step series are left out when asked; and an unchecked schema or a storage that
is not an RDB falls back to the public API."""

from __future__ import annotations

import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pgserver import private_postgres

from archsearch.study import Status, StudyMeta, StudyWriter, load, open_storage, records, tables

optuna.logging.set_verbosity(optuna.logging.WARNING)
META = StudyMeta(objectives=["val_loss", "params"], directions=["minimize", "minimize"])

trial_specs = st.lists(
    st.tuples(
        st.sampled_from([Status.TRAINED, Status.FAILED, Status.INFEASIBLE, Status.DUPLICATE]),
        st.lists(
            st.floats(allow_nan=False, width=32) | st.sampled_from([float("inf"), -0.0]),
            min_size=2,
            max_size=2,
        ),
        st.dictionaries(st.sampled_from(["params", "memory"]), st.integers(-5, 5), max_size=2),
        st.booleans(),  # with a loss curve
    ),
    max_size=12,
)


def write(url: str, name: str, specs) -> StudyWriter:
    writer, _ = StudyWriter.create_or_open(open_storage(url), name, META)
    for i, (status, values, violations, curve) in enumerate(specs):
        attrs = {"arch_hash": f"h{i % 3}", "costs": {"params": float(i)}, "summary": "x"}
        if curve:
            attrs["curve"] = {"evals": [[1, 2.5]], "train": [[1, 3.0], [2, 2.9]]}
        if i % 2:  # through ask/tell, with a parameter
            trial = writer.ask()
            trial.suggest_int("d_model", 8, 64, step=8)
            trial.suggest_categorical("mixer", ["gla", "mamba2"])
            writer.set_constraints(trial, violations)
            writer.finish(trial, status, "why", attrs, values)
        else:
            writer.add_finished(status, "why", attrs, values, violations)
    return writer


def public(writer: StudyWriter) -> list:
    return records(writer.study)


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(trial_specs, trial_specs, st.integers(1, 7))
def test_pages_equal_the_public_api_on_sqlite(tmp_path_factory, specs, other, page):
    url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'study.db'}"
    a = write(url, "a", specs)
    write(url, "b", other)  # interleaved ids: another study in the same storage
    a.ask()  # one trial still running
    paged = tables.read_records(open_storage(url), "a", page=page)
    assert paged == public(a)
    for r in tables.read_records(open_storage(url), "a", skip_attrs=("curve",), page=page):
        assert "curve" not in r.attrs


@pytest.mark.slow
def test_pages_equal_the_public_api_on_postgresql():
    specs = [
        (Status.TRAINED, [1.0, float("inf")], {}, True),
        (Status.INFEASIBLE, [2.0, 3.0], {"params": 4}, False),
        (Status.FAILED, [0.5, 1.0], {"params": -1, "memory": 2}, True),
    ] * 3
    with private_postgres() as url:
        a = write(url, "a", specs)
        write(url, "b", specs[:4])
        paged = tables.read_records(open_storage(url), "a", page=2)
        assert paged == public(a)
        assert [r.number for r in paged] == list(range(len(specs)))
        data = load(url, "a")
        assert all("curve" not in r.attrs for r in data.records)
        assert [r.number for r in data.records] == list(range(len(specs)))


def test_other_schemas_and_storages_fall_back_to_the_public_api(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    specs = [(Status.TRAINED, [1.0, 2.0], {}, True), (Status.FAILED, [0.0, 0.0], {}, False)]
    writer = write(url, "a", specs)
    assert tables.schema_revision(open_storage(url).engine) in tables.SCHEMA_REVISIONS
    assert tables.read_records(optuna.storages.InMemoryStorage(), "a") is None
    paged = load(url, "a").records
    monkeypatch.setattr(tables, "SCHEMA_REVISIONS", frozenset())
    assert tables.read_records(open_storage(url), "a") is None
    whole = load(url, "a").records  # through the public API, series left out the same way
    assert whole == paged
    assert [r for r in public(writer) if "curve" in r.attrs]
    assert load(url, "a", series=True).records == public(writer)


@pytest.mark.parametrize("page", [1, 1000])
def test_writer_add_finished_writes_what_finish_writes(tmp_path, page):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    writer, _ = StudyWriter.create_or_open(open_storage(url), "a", META)
    for status, values in [(Status.TRAINED, [1.0, 2.0]), (Status.DUPLICATE, [1.0, 2.0])]:
        writer.finish(writer.ask(), status, "r", {"x": {"y": 1}}, values)
        writer.add_finished(status, "r", {"x": {"y": 1}}, values)
    writer.set_constraints(t := writer.ask(), {"params": 3.0})
    writer.finish(t, Status.INFEASIBLE, "r")
    writer.add_finished(Status.INFEASIBLE, "r", violations={"params": 3.0})
    recs = tables.read_records(open_storage(url), "a", page=page)
    for asked, added in zip(recs[::2], recs[1::2]):
        assert (asked.state, asked.status, asked.values, asked.attrs, asked.constraints) == (
            added.state,
            added.status,
            added.values,
            added.attrs,
            added.constraints,
        )
    assert [r.state for r in recs] == ["COMPLETE"] * 2 + ["PRUNED"] * 4


def test_attributes_are_read_a_column_at_a_time_when_first_used(tmp_path):
    """A front on the stored objectives reads only the eager attributes; the first trial that
    reads another attribute reads that column for the whole study, in one query per page."""
    import sqlalchemy

    url = f"sqlite:///{tmp_path / 'study.db'}"
    specs = [(Status.TRAINED, [float(i), float(-i)], {}, False) for i in range(7)]
    write(url, "a", specs)
    data = load(url, "a")
    statements: list[str] = []

    def record(conn, cursor, statement, *args):
        statements.append(statement)

    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "before_cursor_execute", record)
    try:
        check_column_reads(data, statements)
    finally:
        sqlalchemy.event.remove(sqlalchemy.engine.Engine, "before_cursor_execute", record)


def check_column_reads(data, statements: list[str]) -> None:
    from archsearch.analysis.front import Axis, front

    axes = [Axis("val_loss"), Axis("params")]
    cands, _, _ = front(data.records, axes, data.objectives)
    assert len(cands) == 3 and not statements  # three architectures (h0, h1, h2)
    assert [r.attrs["costs"] for r in data.records] == [{"params": float(i)} for i in range(7)]
    assert len(statements) == 1 and "AND key = ?" in statements[0]  # one page of 7 trials
    assert "curve" not in data.records[0].attrs and len(statements) == 1  # never read
    assert sorted(data.records[0].attrs) == ["arch_hash", "costs", "reason", "status", "summary"]
