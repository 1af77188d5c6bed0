"""A sweep's local Ray stays private: every Ray process of the session listens on the loopback
interface only and runs without writing a token to the home directory; Ray's own authentication
setting stands for a cluster; a driver killed with SIGKILL leaves its temp dir and Ray's agents,
and the next sweep in the same run directory ends them and removes the dir, touching nothing
that is not its predecessor's (real Ray, real SQLite; each test its own temp dir)."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import psutil
import pytest
from conftest import EXE

from archsearch.study import open_storage, records
from archsearch.sweep.drivers import Driver
from archsearch.sweep.ray_runtime import (
    CREATOR,
    RAY_TEMP_PREFIX,
    RECORDS_DIR,
    reap_leftovers,
    session_processes,
)

SPACE = """name: private
base: tiny_gqa
params:
  n_layers: choice(1, 2, 3, 4)
  d_model: choice(64, 128)
derived:
  attention.n_heads: ${div:${d_model},32}
objectives:
  - {metric: val_loss, direction: minimize}
  - {metric: params, direction: minimize}
"""


@pytest.fixture
def temp():
    """This test's own system temp dir (short: Ray's socket paths), and its Ray processes
    ended whatever the test's outcome."""
    root = Path(tempfile.mkdtemp(prefix="as-"))
    yield root
    for leftover in root.glob(f"{RAY_TEMP_PREFIX}*"):
        for proc in session_processes(leftover):
            with contextlib.suppress(psutil.Error):
                proc.kill()
    shutil.rmtree(root, ignore_errors=True)


def _sweep(tmp_path: Path, temp: Path, *args: str, sleep: float) -> dict[str, object]:
    """Popen's arguments for a sweep of the test space: its own HOME and temp dir, no RAY_*."""
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    cmd = [
        EXE,
        "sweep",
        f"space_file={space}",
        f"run_dir={tmp_path / 'run'}",
        "format=json",
        "trainable=archsearch.sweep.testing:synthetic",
        "early_stopping=none",
        "ray.num_cpus=1",
        "concurrency=1",
        *args,
    ]
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RAY_")},
        "HOME": str(home),
        "TMPDIR": str(temp),
        "ARCHSEARCH_SYNTHETIC_SLEEP": str(sleep),
    }
    return {"args": cmd, "env": env, "cwd": tmp_path}


def _record(run_dir: Path, pid: int) -> dict | None:
    for path in (run_dir / RECORDS_DIR).glob(f"*-{pid}.json"):
        with contextlib.suppress(OSError, ValueError):
            return json.loads(path.read_text())
    return None


def _trial_running(run_dir: Path) -> bool:
    """Whether a trial is running and carries its driver (written just after the trial is
    created: a driver killed between the two leaves a trial no run can attribute, which the
    next run takes back only once it is older than GRACE_S)."""
    if not (run_dir / "study.db").exists():
        return False
    with contextlib.suppress(Exception):  # the study may not exist yet
        storage = open_storage(f"sqlite:///{run_dir / 'study.db'}")
        study = optuna.load_study(study_name="private", storage=storage)
        return any(r.status == "running" and r.attrs.get("driver") for r in records(study))
    return False


def _wait_for_a_trial(proc: subprocess.Popen, run_dir: Path) -> dict:
    """The driver's record, once one of its trials is training."""
    deadline = time.time() + 180
    while time.time() < deadline and proc.poll() is None:
        record = _record(run_dir, proc.pid)
        if record and _trial_running(run_dir):
            return record
        time.sleep(0.2)
    raise AssertionError(f"no trial started (driver exit status {proc.poll()})")


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or bool(getattr(ip, "ipv4_mapped", None) and ip.ipv4_mapped.is_loopback)


@pytest.mark.slow
def test_a_local_ray_listens_on_loopback_only_without_a_token(tmp_path, temp):
    run = _sweep(tmp_path, temp, "trials=1", sleep=1.0)
    proc = subprocess.Popen(**run, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        record = _wait_for_a_trial(proc, tmp_path / "run")
        ray_temp = Path(record["ray_temp_dir"])
        assert ray_temp.parent == temp and Driver.parse(record["driver"]).pid == proc.pid
        session = {p.pid: p for p in session_processes(ray_temp)}
        for p in psutil.Process(proc.pid).children(recursive=True):
            session.setdefault(p.pid, p)
        session[proc.pid] = psutil.Process(proc.pid)
        listening = {}
        for p in session.values():
            with contextlib.suppress(psutil.NoSuchProcess):
                for conn in p.net_connections(kind="inet"):
                    if conn.status == psutil.CONN_LISTEN:
                        listening[(p.pid, p.name(), conn.laddr.port)] = conn.laddr.ip
        names = {name for _pid, name, _port in listening}
        assert {"gcs_server", "raylet"} <= names, listening  # the servers were seen
        assert any(name.startswith("ray::") for name in names), listening  # a worker too
        assert all(_loopback(ip) for ip in listening.values()), listening
    finally:
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert json.loads(out)["trained_in_study"] == 1
    assert list(temp.glob(f"{RAY_TEMP_PREFIX}*")) == []
    assert not (tmp_path / "run" / RECORDS_DIR).exists()
    assert list((tmp_path / "home").iterdir()) == []  # no ~/.ray/auth_token


@pytest.mark.slow
def test_the_next_run_cleans_up_after_a_driver_killed_with_sigkill(tmp_path, temp):
    run = _sweep(tmp_path, temp, "trials=4", sleep=1.0)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(**run, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        record = _wait_for_a_trial(proc, run_dir)
    finally:
        proc.send_signal(signal.SIGKILL)  # the driver alone, as the OOM killer does
        proc.wait()
    ray_temp = Path(record["ray_temp_dir"])
    assert ray_temp.is_dir()  # what the killed driver left: its temp dir...
    leftovers = session_processes(ray_temp)  # ...and Ray's agents, still running a while
    assert leftovers
    assert _record(run_dir, proc.pid) == record

    rerun = {**run, "env": {**run["env"], "ARCHSEARCH_SYNTHETIC_SLEEP": "0.02"}}
    res = subprocess.run(**rerun, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert not ray_temp.exists()
    _gone, alive = psutil.wait_procs(leftovers, timeout=1)
    assert not alive and session_processes(ray_temp) == []
    assert list(temp.glob(f"{RAY_TEMP_PREFIX}*")) == []  # nor the rerun's own
    assert not (run_dir / RECORDS_DIR).exists()
    storage = open_storage(f"sqlite:///{run_dir / 'study.db'}")
    recs = records(optuna.load_study(study_name="private", storage=storage))
    assert len([r for r in recs if r.status == "trained"]) == 4
    assert [r for r in recs if r.status == "interrupted"]  # the killed driver's trial
    assert not [r for r in recs if r.state == "RUNNING"]


def _hold_open(path: Path, program: Path) -> subprocess.Popen:
    """A process of `program` that keeps a file of `path` open, as Ray's agents their logs."""
    path.mkdir(parents=True, exist_ok=True)
    log = path / f"{program.stem}.log"
    program.parent.mkdir(parents=True, exist_ok=True)
    program.write_text("import sys, time\nf = open(sys.argv[1], 'w')\ntime.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, str(program), str(log)])
    deadline = time.time() + 30
    while not log.exists() and time.time() < deadline:
        time.sleep(0.05)
    return proc


def _dead_driver() -> Driver:
    """A driver of this host whose process has ended."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    started = round(psutil.Process(proc.pid).create_time(), 2)
    proc.wait()
    return Driver(socket.gethostname(), proc.pid, started)


def _write_record(run_dir: Path, driver: Driver, temp_dir: Path, name: str) -> Path:
    path = run_dir / RECORDS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"driver": driver.key, "ray_temp_dir": str(temp_dir)}))
    return path


@pytest.mark.slow
def test_the_reaper_ends_only_what_a_dead_driver_recorded(tmp_path, temp, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # the system temp dir, as a sweep's
    run_dir = tmp_path / "run"
    dead, live = _dead_driver(), Driver.this()
    elsewhere = Driver("another-host.example", live.pid, live.started)
    cases = {  # name: (driver, temp dir, whether the reaper may remove it)
        "dead": (dead, temp / f"{RAY_TEMP_PREFIX}dead", True),
        "live": (live, temp / f"{RAY_TEMP_PREFIX}live", False),
        "elsewhere": (elsewhere, temp / f"{RAY_TEMP_PREFIX}else", False),
        "foreign": (dead, tmp_path / "precious", False),  # not a Ray temp dir of ours
        "climbing": (dead, temp / "sub" / ".." / f"{RAY_TEMP_PREFIX}climb", False),
        "unmarked": (dead, temp / f"{RAY_TEMP_PREFIX}unmarked", False),  # not made by it
    }
    agent = tmp_path / "ray" / "agent.py"  # a Ray program: it runs from a `ray` folder
    holders, paths = {}, {}
    try:
        for name, (driver, folder, _removable) in cases.items():
            holders[name] = _hold_open(folder, agent)
            if name != "unmarked":
                (folder / CREATOR).write_text(driver.key)  # as `ray_temp_dir` marks its dir
            paths[name] = _write_record(run_dir, driver, folder, name)
        holders["pager"] = _hold_open(cases["dead"][1], tmp_path / "pager.py")  # reads a log
        (run_dir / RECORDS_DIR / "garbage.json").write_text("{not json")
        reaped = reap_leftovers(run_dir)
        assert reaped.removed == [str(cases["dead"][1])]
        left_alone = {Path(r.split(": ", 1)[0]).stem for r in reaped.refused}
        assert left_alone == {"foreign", "climbing", "unmarked", "garbage"}  # and reported
        assert holders["pager"].poll() is None  # not a Ray program: left alone
        for name, (_driver, folder, removable) in cases.items():
            assert folder.exists() != removable, name
            if removable:  # its process was ended
                assert holders[name].wait(timeout=10) is not None, name
            else:
                assert holders[name].poll() is None, name
            assert paths[name].exists() == (not removable), name  # only the reaped one goes
        assert (run_dir / RECORDS_DIR / "garbage.json").exists()
    finally:
        for holder in holders.values():
            holder.kill()
            holder.wait()


@pytest.mark.parametrize(
    ("address", "auth"), [(None, "disabled"), ("127.0.0.1:6379", None), ("ray://h:10001", None)]
)
@pytest.mark.slow
def test_authentication_is_off_only_for_the_private_local_ray(address, auth):
    code = (
        "import os; from archsearch.sweep.ray_runtime import contain_ray; "
        f"contain_ray(False, {address!r}); "
        "print(os.environ.get('RAY_AUTH_MODE'), os.environ.get('RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER'))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    assert out == ([str(auth), "0"] if address is None else ["None", "None"])
