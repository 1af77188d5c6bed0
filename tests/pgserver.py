"""A private PostgreSQL server in a temp dir, for the tests and the study-size benchmark
(initdb refuses root: it runs as the `postgres` user then). Every server started is stopped."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    assert versions, "PostgreSQL server binaries are missing (.ci/run installs them)"
    return str(versions[-1] / name)


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextlib.contextmanager
def private_postgres(keep: Path | None = None) -> Iterator[str]:
    """Start a server; yield its SQLAlchemy URL; stop it and remove its files. With `keep`,
    the server's files live in that folder and stay for the next start (the benchmark's
    cached studies)."""
    root = Path(keep) if keep is not None else Path(tempfile.mkdtemp(prefix="as-pg-"))
    root.mkdir(parents=True, exist_ok=True)
    data = root / "data"
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    run = {"check": True, "capture_output": True}
    if not (data / "PG_VERSION").exists():
        subprocess.run(
            _as_postgres([_pg_bin("initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]),
            **run,
        )
    log = root / "log"
    for attempt in range(3):
        # a free port can be taken before the server binds it (another test's server, an
        # outgoing connection's ephemeral port): then, and only then, start on another
        port, seen = free_port(), log.stat().st_size if log.exists() else 0
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1"
        start = [_pg_bin("pg_ctl"), "-D", str(data), "-o", options, "-l", str(log)]
        try:
            subprocess.run(_as_postgres([*start, "-w", "start"]), **run)
            break
        except subprocess.CalledProcessError:
            said = log.read_bytes()[seen:].decode(errors="replace") if log.exists() else ""
            if attempt == 2 or "could not bind" not in said:
                raise
    try:
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/postgres"
    finally:
        stop = [_pg_bin("pg_ctl"), "-D", str(data), "-m", "fast", "stop"]
        subprocess.run(_as_postgres(stop), capture_output=True)
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
