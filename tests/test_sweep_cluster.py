"""Sweeps on an existing two-node Ray cluster with the study on a private PostgreSQL server, and
hardware in the loop on a node that advertises a custom resource. Every server a test starts,
it stops."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import optuna
import pytest
from pgserver import private_postgres
from raycluster import BIN, private_ray_cluster

from archsearch.study import records

pytestmark = pytest.mark.slow


@pytest.fixture
def postgres():
    """A private PostgreSQL server (tests/pgserver.py), stopped after the test."""
    with private_postgres() as url:
        yield url


@pytest.fixture
def ray_cluster():
    """A head and a second node on this machine, one CPU each; the second node advertises the
    custom resource `edge` (tests/raycluster.py)."""
    with private_ray_cluster({"edge": 1}) as cluster:
        yield cluster


def _sweep(
    tmp_path: Path, cluster: dict, *args: str, timeout: float = 600
) -> subprocess.CompletedProcess:
    env = {**cluster["env"], "ARCHSEARCH_SYNTHETIC_SLEEP": "0.5"}
    cmd = [
        str(BIN / "archsearch"),
        "sweep",
        f"run_dir={tmp_path / 'run'}",
        "format=json",
        f"ray.address={cluster['address']}",
        *args,
    ]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp_path
    )


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


def _measured_sweep(tmp_path: Path, cluster: dict, trials: int, *args: str, timeout: float = 600):
    """A sweep of `trials` synthetic trials, one at a time, each one's latency measured on the
    node that advertises `edge`; its fully trained records, after checking it succeeded."""
    res = _sweep(
        tmp_path,
        cluster,
        f"trials={trials}",
        "concurrency=1",
        "trainable=archsearch.sweep.testing:synthetic",
        "early_stopping=none",
        "latency.mode=measured",
        "latency.resource=edge",
        "latency.repeats=2",
        *args,
        timeout=timeout,
    )
    assert res.returncode == 0, res.stderr
    study = optuna.load_study(
        study_name="tiny", storage=f"sqlite:///{tmp_path / 'run' / 'study.db'}"
    )
    trained = [r for r in records(study) if r.status == "trained"]
    assert len(trained) == trials
    for r in trained:  # the latency objective is the measurement
        assert r.values[1] == pytest.approx(r.attrs["measured_latency"]["decode_ms"])
    return trained


def test_measured_latency_runs_on_the_node_with_the_resource(tmp_path, ray_cluster):
    # exported and timed in the deploy runtime, there
    trained = _measured_sweep(tmp_path, ray_cluster, 3, "latency.runtime=onnxruntime")
    for r in trained:
        measured = r.attrs["measured_latency"]
        assert measured["node"] == ray_cluster["edge"]
        assert measured["runtime"] == "onnxruntime"
        assert measured["decode_ms"] > 0 and measured["ttft_ms"] > 0


def test_trials_training_on_the_measuring_node_do_not_deadlock_their_measurement(tmp_path):
    """The head has no CPU, so every trial trains on the one node that measures, and each
    trial's measurement queues for the CPU its own trial holds. Tune tells the recorder a trial
    ended before it frees the trial's worker: a recorder that waited there hung for good."""
    with private_ray_cluster({"edge": 1}, head_cpus=0) as cluster:
        # it takes about 35 s; the deadlock it guards against never ends
        trained = _measured_sweep(tmp_path, cluster, 2, timeout=240)
        for r in trained:
            assert r.attrs["node"] == r.attrs["measured_latency"]["node"] == cluster["edge"]


def test_an_unknown_resource_is_a_one_line_error(tmp_path, ray_cluster):
    res = _sweep(tmp_path, ray_cluster, "trials=1", "latency.mode=measured", "latency.resource=tpu")
    assert res.returncode == 2
    assert "no node of the Ray cluster advertises the resource 'tpu'" in res.stderr
    assert res.stderr.count("\n") == 1
    assert not (tmp_path / "run" / "study.db").exists()
