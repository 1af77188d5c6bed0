"""Sweeps on an existing two-node Ray cluster with the study on a private PostgreSQL server, and
hardware in the loop on a node that advertises a custom resource. Every server a test starts,
it stops."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import optuna
import pytest
from pgserver import private_postgres
from raycluster import BIN, private_ray_cluster
from studies import records_so_far

from archsearch.study import records

pytestmark = pytest.mark.slow


# the tests that share the module's cluster run on one pytest-xdist worker
# (`make test`: `--dist loadgroup`)
SHARED = pytest.mark.xdist_group("sweep_cluster")


@pytest.fixture
def postgres():
    """A private PostgreSQL server (tests/pgserver.py), stopped after the test."""
    with private_postgres() as url:
        yield url


@pytest.fixture(scope="module")
def ray_cluster():
    """A head and a second node on this machine, one CPU each; the second node advertises the
    custom resource `edge` (tests/raycluster.py). The module's tests that take it share it:
    each sweep is a driver of its own that connects and exits, leaving the cluster as it was
    (the tests that kill a node or need another shape start their own)."""
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


@SHARED
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


@SHARED
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


def test_a_sweep_whose_measuring_device_leaves_fails_the_trials_it_owes_and_gives_up(tmp_path):
    """The device (the second node, which only measures) is killed once a trial has been
    measured on it: the trials whose measurements it owed fail with the reason once it has been
    gone `latency.wait_s`, their tasks are cancelled, and the sweep gives up instead of waiting
    for good (as it did)."""
    fast_death = {  # the head declares a silent node dead within about 2 s, not 30
        "RAY_health_check_period_ms": "500",
        "RAY_health_check_timeout_ms": "500",
        "RAY_health_check_failure_threshold": "3",
    }
    with private_ray_cluster({"edge": 1}, edge_cpus=0, ray_env=fast_death) as cluster:
        env = {**cluster["env"], "ARCHSEARCH_SYNTHETIC_SLEEP": "1.0"}
        run = tmp_path / "run"
        cmd = [
            *(str(BIN / "archsearch"), "sweep", f"run_dir={run}", "format=json"),
            *(f"ray.address={cluster['address']}", "trials=6", "concurrency=1"),
            *("trainable=archsearch.sweep.testing:synthetic", "early_stopping=none"),
            *("latency.mode=measured", "latency.resource=edge", "latency.repeats=2"),
            "latency.wait_s=2",
        ]
        out, err = tmp_path / "out", tmp_path / "err"
        with out.open("w") as stdout, err.open("w") as stderr:
            proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, env=env, cwd=tmp_path)
            try:
                deadline = time.time() + 240
                while time.time() < deadline and proc.poll() is None and not _trained(run):
                    time.sleep(0.5)
                assert _trained(run), err.read_text()
                cluster["leave"]()
                left = time.time()
                assert proc.wait(timeout=180) == 1, err.read_text()  # 1: gave up
            finally:
                proc.kill()
    assert out.read_text().startswith("{"), (out.read_text()[:3000], err.read_text()[-3000:])
    summary = json.loads(out.read_text())
    assert summary["outcome"] == "gave_up"
    assert "'edge'" in summary["gave_up_reason"] and "latency.wait_s" in summary["gave_up_reason"]
    assert time.time() - left < 120  # what it waited: the death, the wait, a trial at most
    recs = records(optuna.load_study(study_name="tiny", storage=f"sqlite:///{run / 'study.db'}"))
    lost = [r for r in recs if r.status == "failed"]
    assert lost and all(r.reason == summary["gave_up_reason"] for r in lost)
    assert not [r for r in recs if r.state == "RUNNING"]  # none left live in the study
    assert all("measured_latency" in r.attrs for r in recs if r.status == "trained")


def _trained(run: Path) -> bool:
    """Whether the sweep's study holds a trained trial yet."""
    return any(r.status == "trained" for r in records_so_far(run, "tiny"))


@SHARED
def test_an_unknown_resource_is_a_one_line_error(tmp_path, ray_cluster):
    res = _sweep(tmp_path, ray_cluster, "trials=1", "latency.mode=measured", "latency.resource=tpu")
    assert res.returncode == 2
    assert "no node of the Ray cluster advertises the resource 'tpu'" in res.stderr
    assert res.stderr.count("\n") == 1
    assert not (tmp_path / "run" / "study.db").exists()
