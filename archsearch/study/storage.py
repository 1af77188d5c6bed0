"""Where studies live: Optuna's RDB storage (SQLite in a run directory, PostgreSQL on a cluster),
opened the same way by the sweep, the analysis commands, the benchmarks and the tests.

`study=` on the command line is a run directory (holding `study.db`), a path to an SQLite file,
or an SQLAlchemy URL. Reading never writes: what a database holds is looked at first through a
read-only connection (`check_study_storage`), and a study is read through a read-only one
(`open_reader`: SQLite's `mode=ro`, PostgreSQL's read-only transactions), so no table is
created, no journal mode switched, no schema migrated. Writing (`open_storage`) refuses a
database that holds anything but nothing yet or an Optuna study of the installed schema.
"""

from __future__ import annotations

import os
import re
import sqlite3
from functools import cache
from pathlib import Path
from typing import Any

from archsearch.errors import UserError

__all__ = [
    "OPTUNA_TABLES",
    "check_storage_reachable",
    "check_study_storage",
    "default_storage_url",
    "installed_schema",
    "locate",
    "open_reader",
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

    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///") :])
        if str(path) != ":memory:" and not path.parent.exists():
            raise UserError(
                f"the SQLite file's folder {str(path.parent)!r} does not exist", key="storage.url"
            )
        return
    cannot = f"cannot reach the study storage {redact(url)}"
    _through_server(url, _connect_args(url), lambda _con: None, cannot, key="storage.url")


def _through_server(url: str, connect_args: dict[str, Any], read, cannot: str, *, key: str):
    """`read(DB-API connection)` on one connection to the database server at `url`, closed
    after; a one-line `UserError` for a malformed URL, a missing driver or a failed
    connection (`cannot: <the server's first line>`)."""
    import sqlalchemy

    try:
        engine = sqlalchemy.create_engine(url, connect_args=connect_args)
        try:
            with engine.connect() as conn:
                return read(conn.connection.dbapi_connection)
        finally:
            engine.dispose()
    except sqlalchemy.exc.ArgumentError as err:
        raise UserError(f"not a database URL: {err}", key=key) from None
    except ModuleNotFoundError as err:
        raise UserError(
            f"the database driver is not installed ({err.name}); for PostgreSQL "
            "install the 'cluster' extra (psycopg2)",
            key=key,
        ) from None
    except sqlalchemy.exc.SQLAlchemyError as err:
        first = str(getattr(err, "orig", err)).strip().splitlines()[0]
        raise UserError(f"{cannot}: {first}", key=key) from None


def open_storage(
    url: str, *, heartbeat_s: int | None = None, grace_s: int | None = None, on_stale=None
):
    """Optuna's RDB storage, to write (the sweep, `confirm`, the tests' stand-in studies).
    The database must hold nothing yet or a study of this Optuna's schema
    (`check_study_storage`); anything else is refused before Optuna could create its tables
    in it or migrate it. SQLite files run in WAL mode with synchronous=NORMAL: a commit
    survives a killed process (as a sweep's resume needs) and costs about a millisecond
    instead of tens of milliseconds of fsyncs, and readers (the dashboard) never block the
    sweep. A sweep opens it with Optuna's heartbeat (`heartbeat_s`, `grace_s`; `on_stale` is
    called with each RUNNING trial that `optuna.storages.fail_stale_trials` fails). Two
    processes creating the tables of a new database at once: the loser retries once."""
    import optuna
    import sqlalchemy

    check_study_storage(url, creating=True, key="storage.url")
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


def open_reader(url: str):
    """Optuna's RDB storage of an existing study, read-only: no table is created, no schema
    checked by writing, nothing migrated (`check_study_storage` first). An SQLite file is
    opened with the URI `mode=ro` (SQLite refuses every write, the journal mode included; a
    file already in WAL mode keeps its `-wal`/`-shm` index beside it, as every reader of it
    does), PostgreSQL in read-only transactions (`default_transaction_read_only`)."""
    import optuna

    check_study_storage(url, creating=False)
    engine_kwargs: dict[str, Any] = {}
    if _sqlite_path(url) is not None:
        engine_kwargs["creator"] = _read_only_sqlite(_sqlite_path(url))
    elif url.startswith("postgresql"):
        engine_kwargs["connect_args"] = {**_connect_args(url), "options": _PG_READ_ONLY}
    return optuna.storages.RDBStorage(
        url, engine_kwargs=engine_kwargs, skip_compatibility_check=True, skip_table_creation=True
    )


_PG_READ_ONLY = "-c default_transaction_read_only=on"


def _sqlite_path(url: str) -> Path | None:
    """The file of an SQLite URL (None for another database, or an in-memory one)."""
    if not url.startswith("sqlite"):
        return None
    from sqlalchemy.engine import make_url

    database = make_url(url).database
    return Path(database) if database and database != ":memory:" else None


def _read_only_sqlite(path: Path):
    """A connection factory for `path` opened read-only (`mode=ro`). Where its folder cannot
    be written, a database in WAL mode cannot be read that way (SQLite would create its
    `-shm` index) and nothing can be writing it either: it is then opened `immutable`.

    The file is only ever opened through SQLite: a process that opens and closes a database
    file by other means drops every POSIX lock SQLite holds on it, and another connection
    of the same process (a sweep's writer, a test's open study) would then lose writes."""
    from urllib.parse import quote

    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    if (
        not os.access(path.parent, os.W_OK)
        and not path.with_name(path.name + "-shm").exists()
        and not _readable(uri)
    ):
        uri += "&immutable=1"

    def connect():
        return sqlite3.connect(uri, uri=True, timeout=60, check_same_thread=False)

    return connect


def _readable(uri: str) -> bool:
    """Whether SQLite can read the schema of the database at `uri` as it is opened."""
    try:
        con = sqlite3.connect(uri, uri=True, timeout=60)
        try:
            con.execute("select count(*) from sqlite_master").fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        return False
    return True


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
    path = path.resolve()
    home = path.parent if path.name == "study.db" else path.parent / f"{path.stem}_analysis"
    return f"sqlite:///{path}", home


# ---- what a database holds, looked at without writing --------------------------------------

# Optuna's RDB tables (schema v3.2.0.a and the revisions before it)
OPTUNA_TABLES = frozenset(
    {
        "alembic_version",
        "version_info",
        "studies",
        "study_directions",
        "study_user_attributes",
        "study_system_attributes",
        "trials",
        "trial_params",
        "trial_values",
        "trial_intermediate_values",
        "trial_user_attributes",
        "trial_system_attributes",
        "trial_heartbeats",
    }
)
# columns every Optuna schema has: a table of another application that shares a name differs
OPTUNA_COLUMNS = {
    "studies": {"study_id", "study_name"},
    "trials": {"trial_id", "number", "study_id", "state"},
}


def check_study_storage(url: str, *, creating: bool, key: str = "study") -> bool:
    """Look at what the database at `url` holds, writing nothing and creating nothing: True
    when it holds Optuna's schema of the installed revision; False when it holds nothing yet
    (or Optuna's tables being created by a sweep starting beside), which only a writer
    (`creating`) accepts. A one-line `UserError` for anything else: a file that is not an
    SQLite database, another application's tables, an Optuna schema newer than the installed
    Optuna's (naming both versions) or older (which `optuna storage upgrade` migrates)."""
    try:
        return _check_study_storage(url, creating)
    except UserError as err:
        raise UserError(err.detail, key=key) from None


def _check_study_storage(url: str, creating: bool) -> bool:
    shown = redact(url)
    tables, columns, versions = _look(url, shown, creating)
    if tables is None:  # no such file
        if creating:
            return False
        raise UserError(f"{shown} does not exist", key="study")
    foreign = sorted(
        t
        for t in tables
        if t not in OPTUNA_TABLES or not OPTUNA_COLUMNS.get(t, set()) <= columns[t]
    )
    if foreign and (_sqlite_path(url) is not None or tables & OPTUNA_TABLES):
        raise UserError(
            f"{shown} is not an Optuna study: it holds other tables ({', '.join(foreign[:5])})",
            key="study",
        )
    if versions is None:
        if creating:
            return False
        what = "holds no Optuna study" if not tables & OPTUNA_TABLES else "is not an Optuna study"
        raise UserError(f"{shown} {what} (no schema version is recorded in it)", key="study")
    revision, library = versions
    _check_revision(revision, library, shown)
    return True


def _look(url: str, shown: str, creating: bool):
    """(table names, their columns, (schema revision, Optuna version) or None) of the
    database, read-only; None for the tables when an SQLite file does not exist."""
    path = _sqlite_path(url)
    if path is not None:
        if not path.exists():
            return None, {}, None
        if path.is_dir():
            raise UserError(f"{shown} is a folder, not an SQLite database", key="study")
        if path.stat().st_size == 0:  # SQLite's empty database, which a writer may fill
            if creating:
                return set(), {}, None
            raise UserError(f"{shown} is not an SQLite database (an empty file)", key="study")
        try:
            con = _read_only_sqlite(path)()
            try:
                return _contents(con)
            finally:
                con.close()
        except sqlite3.DatabaseError as err:
            if "not a database" in str(err):
                raise UserError(f"{shown} is not an SQLite database", key="study") from None
            raise UserError(f"cannot read {shown}: {err}", key="study") from None
    connect_args = _connect_args(url)
    if url.startswith("postgresql"):
        connect_args["options"] = _PG_READ_ONLY
    cannot = f"cannot open the study storage {shown}"
    return _through_server(url, connect_args, _contents, cannot, key="study")


def _contents(con) -> tuple[set[str], dict[str, set[str]], tuple[str, str] | None]:
    """Through a DB-API connection: the tables, the columns of those Optuna names, and the
    schema revision with the Optuna version that set it up (None where either is missing)."""
    cur = con.cursor()
    if isinstance(con, sqlite3.Connection):
        cur.execute("select name from sqlite_master where type = 'table'")
        tables = {r[0] for r in cur.fetchall() if not r[0].startswith("sqlite_")}
    else:
        cur.execute(
            "select table_name from information_schema.tables where table_schema = current_schema()"
        )
        tables = {r[0] for r in cur.fetchall()}
    columns: dict[str, set[str]] = {}
    for t in sorted(tables & set(OPTUNA_COLUMNS)):
        cur.execute(f"select * from {t} where 1 = 0")
        columns[t] = {d[0] for d in cur.description}
    columns.update({t: set() for t in tables - set(columns)})
    versions = None
    if {"alembic_version", "version_info"} <= tables:
        cur.execute("select version_num from alembic_version")
        revision = cur.fetchone()
        cur.execute("select library_version from version_info")
        library = cur.fetchone()
        if revision and library:
            versions = (str(revision[0]), str(library[0]))
    if not isinstance(con, sqlite3.Connection):
        con.rollback()
    return tables, columns, versions


@cache
def installed_schema() -> tuple[str, tuple[str, ...]]:
    """(the installed Optuna's schema revision, every revision it knows), from Optuna's own
    storage of an in-memory database."""
    import optuna

    probe = optuna.storages.RDBStorage("sqlite:///:memory:")
    try:
        return probe.get_head_version(), tuple(probe.get_all_versions())
    finally:
        probe.engine.dispose()


def _check_revision(revision: str, library: str, shown: str) -> None:
    from importlib.metadata import version

    head, known = installed_schema()
    installed = version("optuna")
    if revision == head:
        return
    if revision not in known:
        raise UserError(
            f"{shown} was written by Optuna {library} (schema revision {revision}), newer than "
            f"the installed Optuna {installed} (schema {head}): upgrade optuna "
            "(pip install -U optuna) to use it",
            key="study",
        )
    raise UserError(
        f"{shown} was written by Optuna {library} (schema revision {revision}), older than "
        f"the installed Optuna {installed} reads (schema {head}): migrate it with "
        f"`optuna storage upgrade --storage {shown}` (this rewrites it: copy it first)",
        key="study",
    )
