"""Where studies live: Optuna's RDB storage (SQLite in a run directory, PostgreSQL on a cluster),
opened the same way by the sweep, the analysis commands, the benchmarks and the tests.

`study=` on the command line is a run directory (holding `study.db`), a path to an SQLite file,
or an SQLAlchemy URL. Reading never writes: a path that is not an existing Optuna database is
refused before Optuna could create its tables in it.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

from archsearch.errors import UserError

__all__ = [
    "check_storage_reachable",
    "default_storage_url",
    "locate",
    "open_storage",
    "redact",
    "study_names",
]


def default_storage_url(run_dir: Path) -> str:
    return f"sqlite:///{(run_dir / 'study.db').resolve()}"


def redact(url: str) -> str:
    """The URL without its password."""
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)


def _connect_args(url: str) -> dict[str, Any]:
    return {"connect_timeout": 5} if url.startswith("postgresql") else {}


def check_storage_reachable(url: str) -> None:
    """Connect once without creating anything; a one-line UserError when it fails."""
    import sqlalchemy

    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///") :])
        if str(path) != ":memory:" and not path.parent.exists():
            raise UserError(
                f"the SQLite file's folder {str(path.parent)!r} does not exist", key="storage.url"
            )
        return
    try:
        engine = sqlalchemy.create_engine(url, connect_args=_connect_args(url))
        with engine.connect():
            pass
        engine.dispose()
    except sqlalchemy.exc.ArgumentError as err:
        raise UserError(f"not a database URL: {err}", key="storage.url") from None
    except ModuleNotFoundError as err:
        raise UserError(
            f"the database driver is not installed ({err.name}); for PostgreSQL "
            "install the 'cluster' extra (psycopg2)",
            key="storage.url",
        ) from None
    except sqlalchemy.exc.SQLAlchemyError as err:
        first = str(getattr(err, "orig", err)).strip().splitlines()[0]
        raise UserError(
            f"cannot reach the study storage {redact(url)}: {first}", key="storage.url"
        ) from None


def open_storage(
    url: str, *, heartbeat_s: int | None = None, grace_s: int | None = None, on_stale=None
):
    """Optuna's RDB storage. SQLite files run in WAL mode with synchronous=NORMAL: a commit
    survives a killed process (as a sweep's resume needs) and costs about a millisecond
    instead of tens of milliseconds of fsyncs, and readers (the dashboard) never block the
    sweep. A sweep opens it with Optuna's heartbeat (`heartbeat_s`, `grace_s`; `on_stale` is
    called with each RUNNING trial that `optuna.storages.fail_stale_trials` fails). Two
    processes creating the tables of a new database at once: the loser retries once."""
    import optuna
    import sqlalchemy

    engine_kwargs: dict[str, Any] = {"connect_args": _connect_args(url)}
    if url.startswith("sqlite"):
        engine_kwargs["connect_args"] = {"timeout": 60}
    kwargs: dict[str, Any] = {"engine_kwargs": engine_kwargs}
    if heartbeat_s:
        kwargs.update(
            heartbeat_interval=heartbeat_s,
            grace_period=grace_s,
            heartbeat_stale_trial_callback=on_stale,
        )
    try:
        storage = optuna.storages.RDBStorage(url, **kwargs)
    except sqlalchemy.exc.SQLAlchemyError:  # the tables were being created by a peer
        import time

        time.sleep(0.5)
        storage = optuna.storages.RDBStorage(url, **kwargs)
    if url.startswith("sqlite"):
        from sqlalchemy import event

        event.listen(storage.engine, "connect", _sqlite_pragmas)
        storage.engine.dispose()  # connections opened while creating the tables: reopen
    return storage


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def study_names(storage) -> list[str]:
    """The names of the storage's studies (not their summaries: those read every trial)."""
    import optuna

    return list(optuna.get_all_study_names(storage))


def locate(study: str) -> tuple[str, Path | None]:
    """(SQLAlchemy URL, home folder for outputs) of a run directory, an SQLite file or a URL.
    A run directory's outputs go in it; another SQLite file's beside it; a server's nowhere
    by default (None)."""
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
