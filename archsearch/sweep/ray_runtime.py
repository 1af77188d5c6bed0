"""The Ray runtime of a sweep: a private local Ray, or an existing cluster reached by address.

A private local Ray listens on the loopback interface only (Ray's single-machine mode: the
node's address is 127.0.0.1 and every Ray server binds there), so it runs without Ray's token
authentication; its files live in a temp dir of its own, removed at the end. On a cluster
(`ray.address`) Ray's own authentication setting stands (`RAY_AUTH_MODE`, `~/.ray/auth_token`).

A driver records its local Ray in the run directory (`drivers/<host>-<pid>.json`: the driver
and the temp dir) and marks the temp dir as its own (`CREATOR`). A driver killed before it
could clean up (SIGKILL, the OOM killer) leaves that record, its temp dir and Ray's agent
processes behind; the next sweep in the run directory finds the records of dead drivers of
this host, ends the Ray processes of their temp dirs (`session_processes`: Ray programs whose
command line or open files lie there), and removes the dirs and records. A record is data (a
run folder copied from a colleague, or crafted): it is honoured only for a folder of the
system temp dir that is certainly what its driver made (name, owner and mark); any other
record is left alone and reported.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from archsearch.errors import UserError
from archsearch.sweep.drivers import Driver

__all__ = [
    "CREATOR",
    "RAY_TEMP_PREFIX",
    "RECORDS_DIR",
    "Reaped",
    "ResourceWatch",
    "check_address",
    "contain_ray",
    "ray_session",
    "ray_temp_dir",
    "reap_leftovers",
    "resource_nodes",
    "session_processes",
    "tuner",
]

RAY_TEMP_PREFIX = "archsearch-ray-"  # a local Ray's temp dir: <system temp dir>/archsearch-ray-*
RECORDS_DIR = "drivers"  # run_dir/drivers/<host>-<pid>.json: a driver's local Ray
CREATOR = ".archsearch-driver"  # in a local Ray's temp dir: the key of the driver that made it


def contain_ray(verbose: bool, address: str | None = None) -> None:
    """Keep Ray's files and tokens out of the home directory and its logs quiet. Without an
    `address` (a private local Ray) Ray runs on the loopback interface only, without token
    authentication; on a cluster Ray's own authentication setting stands. Called before `ray`
    is imported (Ray reads its single-machine switch at import)."""
    if not address:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # node address 127.0.0.1
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # no ~/.ray/auth_token either
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    # Ctrl-C raises KeyboardInterrupt in the driver (Tune's own handler would end the run
    # quietly and return as if it had finished)
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
    if not verbose:
        for name in ("ray", "ray.tune", "ray.train", "ray.air", "ray.data"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)


def resource_nodes(resource: str) -> list[dict[str, Any]]:
    """The live nodes of the connected Ray cluster that advertise the custom `resource`."""
    import ray

    return [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get(resource)]


@dataclass
class ResourceWatch:
    """How long the connected cluster has gone without a live node that advertises `resource`
    (a device that left): `gone_for()` is 0.0 while one is there, and the wait starts over when
    one comes back. The nodes are looked up at most every `every_s` seconds."""

    resource: str
    every_s: float = 0.0
    _gone_since: float | None = None
    _looked: float = float("-inf")

    def gone_for(self) -> float:
        now = time.monotonic()
        if now - self._looked >= self.every_s:
            self._looked = now
            if resource_nodes(self.resource):
                self._gone_since = None
            elif self._gone_since is None:
                self._gone_since = now
        return 0.0 if self._gone_since is None else now - self._gone_since


def ray_temp_dir(driver: str) -> str:
    """Ray's session files under the system temp dir (AF_UNIX socket paths must stay short),
    in a folder that says which driver made it (`CREATOR`: the driver's key), so that only
    that driver's leftovers are ever removed for it."""
    path = tempfile.mkdtemp(prefix=RAY_TEMP_PREFIX)
    Path(path, CREATOR).write_text(driver)
    return path


def session_processes(temp_dir: str | Path) -> list[Any]:
    """This user's Ray processes of the session in `temp_dir`: Ray's programs (a command line
    that runs something from a `ray` folder, or a process titled `ray::...`: Ray's agents and
    workers rename themselves) whose command line or an open file (a log) lies in `temp_dir`.
    Anything else, such as a pager on one of its logs, is not Ray's."""
    import psutil

    root = str(Path(temp_dir).absolute())

    def names(text: str) -> bool:  # `text` is the dir or a path inside it, or ends in one
        return text.endswith(root) or root + os.sep in text

    found = []
    for proc in psutil.process_iter(["cmdline", "uids", "name"]):
        try:
            cmdline = proc.info["cmdline"] or []
            if proc.pid == os.getpid() or proc.info["uids"].real != os.getuid():
                continue
            ray_program = proc.info["name"].startswith("ray::") or any(
                f"{os.sep}ray{os.sep}" in arg or arg.startswith("ray::") for arg in cmdline
            )
            if ray_program and (
                any(names(arg) for arg in cmdline) or any(names(f.path) for f in proc.open_files())
            ):
                found.append(proc)
        except (psutil.Error, AttributeError):  # gone meanwhile, or not ours to read
            continue
    return found


def _write_record(run_dir: Path, me: Driver, temp_dir: str) -> Path:
    path = run_dir / RECORDS_DIR / f"{me.host}-{me.pid}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps({"driver": me.key, "ray_temp_dir": temp_dir}))
    partial.replace(path)
    return path


@dataclass
class Reaped:
    """What `reap_leftovers` did: the temp dirs it removed, and the records it left alone
    ('<record>: why')."""

    removed: list[str]
    refused: list[str]


def _leftover_dir(record: dict[str, Any], driver: Driver) -> tuple[Path | None, str]:
    """The temp dir a dead driver's record names, when it is certainly what that driver
    made: a folder (not a link) directly under the system temp dir, named `RAY_TEMP_PREFIX*`,
    owned by this user, holding the driver's `CREATOR` mark. A record is data, copied with a
    run folder or crafted: anything else is (None, why)."""
    named = record.get("ray_temp_dir")
    if not isinstance(named, str) or not named:
        return None, "it names no temp dir"
    temp = Path(named)
    root = Path(tempfile.gettempdir()).resolve()
    if not temp.is_absolute() or temp.parent.resolve() != root or ".." in temp.parts:
        return None, f"{named!r} is not a folder of the system temp dir {str(root)!r}"
    if not temp.name.startswith(RAY_TEMP_PREFIX):
        return None, f"{named!r} is not named {RAY_TEMP_PREFIX}*"
    if not temp.exists() and not temp.is_symlink():
        return None, f"{named!r} no longer exists"
    if temp.is_symlink() or not temp.is_dir():
        return None, f"{named!r} is not a folder (a link or a file)"
    if temp.stat().st_uid != os.getuid():
        return None, f"{named!r} belongs to another user"
    mark = temp / CREATOR
    try:
        made_by = mark.read_text() if mark.is_file() and not mark.is_symlink() else None
    except OSError:
        made_by = None
    if made_by != driver.key:
        return None, f"{named!r} was not made by the driver {driver.key} the record names"
    return temp, ""


def reap_leftovers(run_dir: Path) -> Reaped:
    """End the Ray processes and remove the temp dirs that drivers of this run directory left
    when they died on this host (found by their records), where each dir is certainly the one
    its driver made (`_leftover_dir`); returns what was removed, and the records left alone
    with why. A live driver's record, and another host's, are left alone (and not reported)."""
    import psutil

    removed, refused = [], []
    for path in sorted((run_dir / RECORDS_DIR).glob("*.json")):
        try:
            record = json.loads(path.read_text())
            driver = Driver.parse(record["driver"])
        except (OSError, ValueError, KeyError, TypeError):  # records are written whole
            refused.append(f"{path}: not a driver record")
            continue
        if driver is None:
            refused.append(f"{path}: it names no driver")
            continue
        if not driver.dead_here():
            continue
        temp, why = _leftover_dir(record, driver)
        if temp is None:
            refused.append(f"{path}: {why}")
            continue
        procs = session_processes(temp)
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _gone, alive = psutil.wait_procs(procs, timeout=3)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        shutil.rmtree(temp, ignore_errors=True)
        removed.append(str(temp))
        path.unlink(missing_ok=True)
    return Reaped(removed, refused)


def _check_loopback(ray) -> None:
    """A local Ray's node address is the loopback one, or Ray was imported before
    `contain_ray` could keep it there."""
    node_ip = ray.util.get_node_ip_address()
    if not ipaddress.ip_address(node_ip).is_loopback:
        ray.shutdown()
        raise RuntimeError(
            f"the local Ray took the address {node_ip}, not 127.0.0.1: `ray` was imported "
            "before `contain_ray` (import it only after calling `contain_ray`)"
        )


def check_address(address: str) -> None:
    if address in ("auto", "local") or address.startswith("ray://"):
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=3):
            pass
    except (OSError, ValueError):
        raise UserError(f"cannot reach a Ray cluster at {address!r}", key="ray.address") from None


@contextlib.contextmanager
def ray_session(
    address: str | None,
    num_cpus: int | None,
    verbose: bool,
    num_gpus: float | None = None,
    run_dir: Path | None = None,
    left_alone: list[str] | None = None,
):
    """Start a private local Ray (recorded under `run_dir`, whose dead drivers' leftovers are
    removed first: the records left alone, with why, are added to `left_alone`), or connect
    to the cluster at `address`; shut it down at the end."""
    import ray

    if ray.is_initialized():  # e.g. the caller manages Ray
        yield
        return
    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": verbose,
        "logging_level": logging.INFO if verbose else logging.ERROR,
    }
    # settings for our own code (ARCHSEARCH_*) reach the workers of an existing cluster too
    env_vars = {k: v for k, v in os.environ.items() if k.startswith("ARCHSEARCH_")}
    if env_vars:
        kwargs["runtime_env"] = {"env_vars": env_vars}
    temp_dir, record, made_run_dir = None, None, False
    if run_dir is not None:
        reaped = reap_leftovers(run_dir)
        if left_alone is not None:
            left_alone += reaped.refused
    try:
        if address:
            check_address(address)
            ray.init(address=address, **kwargs)
        else:
            temp_dir = ray_temp_dir(Driver.this().key)
            if run_dir is not None:
                made_run_dir = not run_dir.exists()
                record = _write_record(run_dir, Driver.this(), temp_dir)
            if num_gpus is not None:  # declared GPUs (Ray detects real ones by itself)
                kwargs["num_gpus"] = num_gpus
            ray.init(num_cpus=num_cpus or os.cpu_count(), _temp_dir=temp_dir, **kwargs)
            _check_loopback(ray)
    except ConnectionError as err:
        raise UserError(
            f"cannot reach a Ray cluster at {address!r}: {str(err).splitlines()[0]}",
            key="ray.address",
        ) from None
    finally:
        if temp_dir and not ray.is_initialized():  # Ray did not start: nothing to keep
            _remove(temp_dir, record, made_run_dir)
    try:
        yield
    finally:
        ray.shutdown()
        if temp_dir:  # Ray leaves its session files behind
            _remove(temp_dir, record, made_run_dir)


def _remove(temp_dir: str, record: Path | None, made_run_dir: bool) -> None:
    """Remove a local Ray's temp dir and its record (and the run directory when the session
    created it and nothing else was written there)."""
    shutil.rmtree(temp_dir, ignore_errors=True)
    if record is not None:
        record.unlink(missing_ok=True)
        for folder in (record.parent, record.parent.parent) if made_run_dir else (record.parent,):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty


def tuner(
    trainable: Any,
    resources: Any,
    *,
    name: str,
    run_dir: Path,
    search_alg: Any,
    num_samples: int,
    concurrency: int,
    reuse_actors: bool,
    verbose: bool,
    callbacks: list[Any],
    scheduler: Any = None,
):
    """The Tune run of a sweep or a retraining: trials named by their id, a failed trial never
    retried (it is recorded as failed), Ray's logs to files under `run_dir/ray`."""
    from ray import tune

    return tune.Tuner(
        tune.with_resources(trainable, resources),
        tune_config=tune.TuneConfig(
            search_alg=search_alg,
            scheduler=scheduler,
            num_samples=num_samples,
            max_concurrent_trials=concurrency,
            reuse_actors=reuse_actors,
            trial_dirname_creator=lambda t: f"trial_{t.trial_id}",
            trial_name_creator=lambda t: f"trial_{t.trial_id}",
        ),
        run_config=tune.RunConfig(
            name=f"{name}-{time.strftime('%Y%m%d-%H%M%S')}",
            storage_path=str(run_dir / "ray"),
            verbose=1 if verbose else 0,
            callbacks=callbacks,
            failure_config=tune.FailureConfig(max_failures=0),
            log_to_file=True,
        ),
    )
