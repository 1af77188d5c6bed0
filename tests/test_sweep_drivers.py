"""A sweep survives its candidates and its peers: a candidate that raises is recorded invalid
and never retried, two or four drivers on one study (SQLite or PostgreSQL, started together or
one after another) share the work without training an architecture twice or failing each
other's live trials, a one-objective space runs end to end, and the dashboard refuses writes
and foreign Host headers (real Ray, real SQLite, a private PostgreSQL server)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import optuna
import pytest
from conftest import EXE
from pgserver import private_postgres
from studies import records_so_far

from archsearch.analysis.dashboard import make_app, serve
from archsearch.study import open_storage, records
from archsearch.sweep.pricing import assess

pytestmark = pytest.mark.slow

POISONED = """name: poisoned
base: tiny_gqa
params:
  n_layers: choice(1, 2, 3, 4)
  d_model: choice(64, 128)
  vars.k: choice(0, 1, 2)
derived:
  attention.n_heads: ${floordiv:${d_model},${mul:16,${vars.k}}}
objectives:
  - {metric: val_loss, direction: minimize}
  - {metric: params, direction: minimize}
"""
ONE_OBJECTIVE = """name: single
base: tiny_gqa
params:
  n_layers: choice(1, 2, 3)
  d_model: choice(64, 128)
derived:
  attention.n_heads: ${div:${d_model},32}
objectives:
  - {metric: val_loss, direction: minimize}
"""


def _cmd(run_dir: Path, space: Path, *args: str) -> list[str]:
    return [
        EXE,
        "sweep",
        f"space_file={space}",
        f"run_dir={run_dir}",
        "format=json",
        "trainable=archsearch.sweep.testing:synthetic",
        "early_stopping=none",
        "ray.num_cpus=1",
        *args,
    ]


def _env(sleep: float = 0.02) -> dict[str, str]:
    return {**os.environ, "ARCHSEARCH_SYNTHETIC_SLEEP": str(sleep)}


def _records(run_dir: Path, name: str, url: str | None = None):
    storage = open_storage(url or f"sqlite:///{run_dir / 'study.db'}")
    return records(optuna.load_study(study_name=name, storage=storage))


def _space(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


def test_a_candidate_that_raises_is_invalid_and_never_retried(tmp_path):
    from archsearch.space import open_space

    space_file = _space(tmp_path, POISONED)
    space = open_space(search_space=None, space_file=str(space_file))
    got = assess(space, [], "rpi5", {"n_layers": 2, "d_model": 64, "vars.k": 0})
    assert got.status is not None and "derived_arithmetic_error" in got.reason
    raising = assess(space, [], "rpi5", lambda: 1 / 0)  # any exception, not only arithmetic
    assert raising.status.value == "invalid" and "ZeroDivisionError" in raising.reason

    run_dir = tmp_path / "run"
    for _ in range(2):  # a rerun resumes the same study without tripping on the poison
        res = subprocess.run(  # TPE proposes the poison; ehvi (the default) prices it out first
            _cmd(run_dir, space_file, "trials=8", "seed=1", "sampler=tpe"),
            capture_output=True,
            text=True,
            timeout=300,
            env=_env(),
        )
        assert res.returncode == 0, res.stderr
    recs = _records(run_dir, "poisoned")
    poisoned = [r for r in recs if r.params.get("vars.k") == 0]
    assert poisoned, "no candidate divided by zero: the test space no longer exercises it"
    for r in poisoned:
        assert r.status == "invalid" and "derived_arithmetic_error" in r.reason
        assert r.state == "PRUNED"
    assert not [r for r in recs if r.state == "RUNNING"]
    assert len([r for r in recs if r.status == "trained"]) == 8


def _wait_trained(run_dir: Path, url: str | None, n: int, procs: list) -> None:
    """Wait until the study holds `n` trained trials (or a driver has ended)."""
    deadline = time.time() + 300
    while time.time() < deadline and all(p.poll() is None for p in procs):
        if sum(r.status == "trained" for r in records_so_far(run_dir, "poisoned", url)) >= n:
            return
        time.sleep(0.2)


# a pairwise covering set of (drivers, start, storage): every pair of values meets once, in
# four sweeps instead of eight (each costs a Ray per driver on a two-core machine)
@pytest.mark.parametrize(
    ("drivers", "start", "backend"),
    [
        (2, "simultaneous", "sqlite"),
        (2, "staggered", "postgresql"),
        (4, "staggered", "sqlite"),
        (4, "simultaneous", "postgresql"),
    ],
)
def test_drivers_share_one_study(tmp_path, drivers, start, backend):
    space_file = _space(tmp_path, POISONED)
    run_dir = tmp_path / "run"
    target = 10
    # staggered: trials long enough (about 2 s) that the sweep outlasts a joiner's Ray start
    env = _env(0.5 if start == "staggered" else 0.02)
    server = private_postgres() if backend == "postgresql" else contextlib.nullcontext()
    with server as url:
        storage = [f"storage.url={url}"] if url else []
        procs, logs = [], []
        for k in range(drivers):
            if start == "staggered" and k:  # driver k joins once k trials are trained
                _wait_trained(run_dir, url, k, procs)
            cmd = _cmd(run_dir, space_file, f"trials={target}", f"seed={k}", "concurrency=1")
            logs.append((tmp_path / f"driver{k}.out", tmp_path / f"driver{k}.err"))
            with logs[-1][0].open("w") as out, logs[-1][1].open("w") as err:
                procs.append(subprocess.Popen([*cmd, *storage], stdout=out, stderr=err, env=env))
        for p, (_out, err) in zip(procs, logs):
            assert p.wait(timeout=400) == 0, err.read_text()
            assert "Traceback" not in err.read_text(), err.read_text()
        recs = _records(run_dir, "poisoned", url)
    trained = [r for r in recs if r.status == "trained"]
    # the target counts every driver's trials; each may have one trial in flight past it
    assert target <= len(trained) <= target + drivers - 1
    spent = Counter(r.attrs["arch_hash"] for r in recs if r.status in ("trained", "failed"))
    assert max(spent.values()) == 1, spent  # no architecture trained twice
    assert not [r for r in recs if r.status == "interrupted"]  # no live trial failed by a peer
    assert not [r for r in recs if r.state == "RUNNING"]
    assert len({r.attrs["driver"] for r in trained}) >= 2  # the work was shared
    summaries = [json.loads(out.read_text()) for out, _err in logs]
    assert all(s["trained_in_study"] >= target for s in summaries)  # each saw the others' work


def test_a_one_objective_space_runs_end_to_end(tmp_path):
    space_file = _space(tmp_path, ONE_OBJECTIVE)
    run_dir = tmp_path / "run"
    res = subprocess.run(
        _cmd(run_dir, space_file, "trials=3"), capture_output=True, text=True, env=_env()
    )
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    losses = {r.number: r.values[0] for r in _records(run_dir, "single") if r.status == "trained"}
    best = min(losses, key=losses.get)
    assert [row["trial"] for row in summary["front"]] == [best]
    for name in ("front.png", "front.html", "report.md"):
        assert (run_dir / "pareto" / "rpi5" / name).stat().st_size > 0
    device_file = Path(__file__).parents[1] / "conf" / "device" / "rpi5.yaml"
    res = subprocess.run(
        [EXE, "pareto", f"study={run_dir}", f"device={device_file.resolve()}", "format=json"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert [row["trial"] for row in json.loads(res.stdout)["front"]] == [best]


def _request(url: str, method: str = "GET", host: str | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, method=method, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_the_dashboard_is_read_only_and_local(tmp_path):
    import threading

    from studies import make_study

    make_study(tmp_path / "study.db")
    url = f"sqlite:///{tmp_path / 'study.db'}"
    storage = open_storage(url)
    name = "tiny"
    before = [
        (t.number, t.state, t.values)
        for t in optuna.load_study(study_name=name, storage=storage).trials
    ]
    server = serve(make_app(storage, url, name), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert _request(f"{base}/api/studies")[0] == 200
        assert _request(f"{base}/archsearch")[0] == 200
        for method, path in (
            ("DELETE", "/api/studies/1"),
            ("POST", "/api/studies"),
            ("PUT", "/api/studies/1/note"),
            ("PATCH", "/api/studies/1"),
        ):
            assert _request(f"{base}{path}", method)[0] == 405, (method, path)
        assert _request(f"{base}/api/studies", host="evil.example:80")[0] == 403
        status, body = _request(f"{base}/archsearch/api/front?device=/etc/passwd")
        assert status == 400 and b"unknown device" in body and b"root:" not in body
        assert _request(f"{base}/archsearch/api/front?device=rpi5")[0] == 200
        status, body = _request(f"{base}/archsearch/api/insights?device=/etc/passwd")
        assert status == 400 and b"unknown device" in body and b"root:" not in body
    finally:
        server.shutdown()
        server.server_close()
    after = [
        (t.number, t.state, t.values)
        for t in optuna.load_study(study_name=name, storage=storage).trials
    ]
    assert after == before and optuna.get_all_study_summaries(storage)
