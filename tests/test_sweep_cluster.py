"""Sweeps on an existing two-node Ray cluster with the study on a private PostgreSQL server, and
hardware in the loop on a node that advertises a custom resource. Every server a test starts,
it stops."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import pytest
from pgserver import free_port, private_postgres

from archsearch.study import records

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


@pytest.fixture
def postgres():
    """A private PostgreSQL server (tests/pgserver.py), stopped after the test."""
    with private_postgres() as url:
        yield url


def _ray_start(args: list[str], env: dict) -> subprocess.Popen:
    # `--block` keeps `ray start` in the foreground with its daemons in its process group, so
    # the test stops exactly the processes it started (never `ray stop`, which stops all).
    return subprocess.Popen(
        [str(BIN / "ray"), "start", "--block", "--disable-usage-stats", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _wait_for_nodes(address: str, n: int, env: dict, timeout: float = 90) -> list[dict]:
    code = (
        f"import json, ray; ray.init(address={address!r}, logging_level='ERROR'); "
        "print(json.dumps([x for x in ray.nodes() if x['Alive']]))"
    )
    deadline = time.time() + timeout
    while time.time() < deadline:
        res = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
        )
        if res.returncode == 0:
            nodes = json.loads(res.stdout.strip().splitlines()[-1])
            if len(nodes) >= n:
                return nodes
        time.sleep(1)
    raise AssertionError(f"the Ray cluster did not reach {n} nodes")


@pytest.fixture
def ray_cluster():
    """A head and a second node on this machine, one CPU each; the second node advertises the
    custom resource `edge`."""
    temp = tempfile.mkdtemp(prefix="as-ray-")
    port = free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "HOME": temp}
    head = _ray_start(
        [
            "--head",
            f"--port={port}",
            "--num-cpus=1",
            f"--temp-dir={temp}",
            "--include-dashboard=false",
        ],
        env,
    )
    address = f"127.0.0.1:{port}"
    procs = [head]
    try:
        _wait_for_nodes(address, 1, env)
        procs.append(
            _ray_start([f"--address={address}", "--num-cpus=1", '--resources={"edge": 1}'], env)
        )
        nodes = _wait_for_nodes(address, 2, env)
        edge = next(n["NodeID"] for n in nodes if "edge" in n["Resources"])
        yield {"address": address, "env": env, "nodes": [n["NodeID"] for n in nodes], "edge": edge}
    finally:
        for p in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        shutil.rmtree(temp, ignore_errors=True)


def _sweep(tmp_path: Path, cluster: dict, *args: str) -> subprocess.CompletedProcess:
    env = {**cluster["env"], "ARCHSEARCH_SYNTHETIC_SLEEP": "0.5"}
    cmd = [
        str(BIN / "archsearch"),
        "sweep",
        f"run_dir={tmp_path / 'run'}",
        "format=json",
        f"ray.address={cluster['address']}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)


def test_cluster_sweep_runs_on_both_nodes_and_lands_in_postgresql(tmp_path, postgres, ray_cluster):
    res = _sweep(
        tmp_path,
        ray_cluster,
        f"storage.url={postgres}",
        "trials=6",
        "concurrency=2",
        "trainable=archsearch.sweep.testing:synthetic",
        "early_stopping=none",
    )
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["storage"] == postgres
    study = optuna.load_study(study_name="tiny", storage=postgres)
    recs = records(study)
    trained = [r for r in recs if r.status == "trained"]
    assert len(trained) == 6
    assert {r.attrs["node"] for r in trained} == set(ray_cluster["nodes"])  # both nodes worked
    assert not (tmp_path / "run" / "study.db").exists()  # nothing went to SQLite


def test_measured_latency_runs_on_the_node_with_the_resource(tmp_path, ray_cluster):
    res = _sweep(
        tmp_path,
        ray_cluster,
        "trials=3",
        "concurrency=1",
        "trainable=archsearch.sweep.testing:synthetic",
        "early_stopping=none",
        "latency.mode=measured",
        "latency.resource=edge",
        "latency.repeats=2",
    )
    assert res.returncode == 0, res.stderr
    study = optuna.load_study(
        study_name="tiny", storage=f"sqlite:///{tmp_path / 'run' / 'study.db'}"
    )
    trained = [r for r in records(study) if r.status == "trained"]
    assert len(trained) == 3
    for r in trained:
        measured = r.attrs["measured_latency"]
        assert measured["node"] == ray_cluster["edge"]
        assert measured["decode_ms"] > 0 and measured["ttft_ms"] > 0
        assert r.values[1] == pytest.approx(measured["decode_ms"])  # the latency objective


def test_an_unknown_resource_is_a_one_line_error(tmp_path, ray_cluster):
    res = _sweep(tmp_path, ray_cluster, "trials=1", "latency.mode=measured", "latency.resource=tpu")
    assert res.returncode == 2
    assert "no node of the Ray cluster advertises the resource 'tpu'" in res.stderr
    assert res.stderr.count("\n") == 1
    assert not (tmp_path / "run" / "study.db").exists()
