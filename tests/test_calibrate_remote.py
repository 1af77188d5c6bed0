"""Calibrating a remote device through Ray (`archsearch calibrate device_resource=NAME`): the
calibration runs as a Ray task on the second node of a private two-node cluster, the one that
advertises the resource, and its profile is stored under a name that `cost`, `prune` and the
sweep then find in the user device folder; and how named profiles are looked up."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from raycluster import BIN, private_ray_cluster

from archsearch import yamlio
from archsearch.arch import load_arch
from archsearch.cli import main
from archsearch.cost.devices import device_names, reserved_device_names, user_devices_dir
from archsearch.latency import load_device
from archsearch.latency.breakdown import cost_report
from archsearch.latency.calibrate import plan

# the tests that share the module's cluster run on one pytest-xdist worker
# (`make test`: `--dist loadgroup`)
SHARED = pytest.mark.xdist_group("remote_cluster")


@pytest.fixture(scope="module")
def cluster():
    """A head and a second node (one CPU each); the second advertises the resource `edge`."""
    with private_ray_cluster({"edge": 1}) as running:
        yield running


def _archsearch(cluster: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**cluster["env"], "ARCHSEARCH_DEVICE_DIR": os.environ["ARCHSEARCH_DEVICE_DIR"]}
    return subprocess.run(
        [str(BIN / "archsearch"), *args], capture_output=True, text=True, env=env, timeout=timeout
    )


@SHARED
@pytest.mark.slow
def test_calibration_runs_on_the_node_with_the_resource_and_cost_uses_it(cluster, capsys, tmp_path):
    args = [
        "device_resource=edge",
        "budget=quick",
        "repeats=1",
        f"ray.address={cluster['address']}",
    ]
    res = _archsearch(cluster, "calibrate", *args, "name=edge_box", "format=json")
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout)
    # it ran on the second node, the one that advertises `edge`, not on the head
    assert result["node"]["ray_node"] == cluster["edge"] != cluster["head"]
    # progress relayed from the node, as the other long commands print it
    steps = [line for line in res.stderr.splitlines() if " calibrate edge: " in line]
    total = int(steps[0].split("/")[1].split()[0])
    assert [int(s.split(": ")[1].split("/")[0]) for s in steps] == list(range(1, total + 1))
    assert steps[-1].endswith("done")

    path = user_devices_dir() / "edge_box.yaml"
    assert Path(result["path"]) == path and path.is_file()
    dev = load_device("edge_box")
    assert dev.name == "edge_box" and dev.path == str(path.resolve())
    assert dev.measured_on["ray_node"] == cluster["edge"]
    assert dev.measured_on["ray_resource"] == "edge"
    assert dev.measured_on["hostname"] == socket.gethostname()
    assert dev.measured_on["torch"] == result["node"]["torch"] and dev.measured_on["cpu"]
    assert "edge_box" in device_names()  # a sweep stores every trial's costs on it too

    # `device=edge_box` prices with the stored profile
    lengths = {"precision": "fp32", "prompt": 128, "context": 256, "generate": 16, "batch": 1}
    capsys.readouterr()
    settings = [f"{k}={v}" for k, v in lengths.items()]
    assert main(["cost", "arch=tiny_gqa", "device=edge_box", *settings, "format=json"]) == 0
    report = json.loads(capsys.readouterr().out)["reports"][0]
    expected = cost_report(load_arch("tiny_gqa"), dev, **lengths)
    assert report["device"] == "edge_box"
    for key in ("ttft_ms", "decode_ms"):
        assert report["totals"][key] == pytest.approx(expected["totals"][key], rel=1e-9)
    assert main(["prune", "search_space=tiny", "device=edge_box", "limit=8", "format=json"]) == 0
    assert json.loads(capsys.readouterr().out)["device"] == "edge_box"

    # a second calibration of the node pools the first's timings in, there
    (tmp_path / "first.json").write_text(res.stdout)
    pool = f"pool={tmp_path / 'first.json'}"
    again = _archsearch(cluster, "calibrate", *args, "name=edge_box_2", pool, "format=json")
    assert again.returncode == 0, again.stderr
    pooled = json.loads(again.stdout)
    assert pooled["node"]["ray_node"] == cluster["edge"]
    assert pooled["raw"]["pooled"] == 2 and pooled["raw"]["plan"]["seed"] == 1
    assert "2 calibrations pooled" in load_device("edge_box_2").sources["predictor"]


@SHARED
@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (
            ["device_resource=tpu", "name=tpu_box", "wait_s=1"],
            ["no node of the Ray cluster advertises the resource 'tpu'", "edge", "CPU"],
        ),
        (
            ["device_resource=edge", "name=edge_box", "threads=2"],
            ["have at most 1 CPUs; threads=2 needs 2"],
        ),
    ],
)
def test_a_cluster_that_cannot_run_it_is_a_one_line_error(cluster, args, fragments):
    res = _archsearch(cluster, "calibrate", *args, f"ray.address={cluster['address']}")
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("archsearch: error: ")
    for fragment in fragments:
        assert fragment in res.stderr, res.stderr
    assert list(user_devices_dir().iterdir()) == []  # nothing written


@SHARED
@pytest.mark.slow
def test_a_task_that_fails_on_the_node_is_a_one_line_error(cluster):
    """calibrate's own error, raised on the node, comes back as one line (exit 1)."""
    code = f"""
import sys
from archsearch.sweep.ray_runtime import contain_ray, ray_session
contain_ray(False, {cluster["address"]!r})
from archsearch.sweep.device_calibration import RemoteCalibrationError, calibrate_on_node
from archsearch.latency.calibrate import plan
with ray_session({cluster["address"]!r}, None, False):
    try:
        calibrate_on_node("edge", plan("quick", samples="no_such_setting"))
    except RemoteCalibrationError as err:
        print(err.exit_code, err)
"""
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=cluster["env"]
    )
    assert res.returncode == 0, res.stderr
    out = res.stdout.strip()
    assert out.count("\n") == 0, out
    assert out.startswith("1 device_resource: the calibration on the node with 'edge' failed: ")
    assert "TypeError" in out


@pytest.mark.parametrize("name", ["rpi5", "local"])
def test_a_shipped_name_is_refused_before_anything_is_measured(name, capsys):
    assert main(["calibrate", f"name={name}", "device_resource=edge"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{name!r} is a shipped or plugin device profile" in err
    assert f"name={name}_measured" in err
    assert list(user_devices_dir().iterdir()) == []


NAMES = st.sampled_from(["rpi5", "local", "apple_m3"]) | st.from_regex(
    r"[a-z][a-z0-9_]{0,20}", fullmatch=True
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=NAMES, peak=st.floats(1e8, 1e13))
def test_a_user_profile_is_found_by_name_and_never_shadows_a_shipped_one(
    name, peak, tmp_path_factory
):
    folder = tmp_path_factory.mktemp("user-devices")  # a new file each time (profiles are cached)
    os.environ["ARCHSEARCH_DEVICE_DIR"] = str(folder)
    profile = {
        "name": name,
        "peak_flops": {"fp32": peak, "fp16": peak, "int8": peak},
        "memory_bandwidth": 1e10,
        "memory_capacity": 8e9,
        "measured_on": {"hostname": "box", "cpus": 4},
    }
    (folder / f"{name}.yaml").write_text(yamlio.dumps(profile))
    dev = load_device(name)
    assert device_names().count(name) == 1
    if name in reserved_device_names():  # the shipped profile stands
        assert dev.path != str((folder / f"{name}.yaml").resolve())
    else:
        assert dev.peak("fp32") == peak and dev.measured_on == {"hostname": "box", "cpus": "4"}


def test_a_device_that_leaves_mid_calibration_ends_it_with_a_one_line_error(monkeypatch):
    """The task is cancelled and the driver stops waiting once no node has advertised the
    resource for `wait_s` seconds, the same rule as a sweep's measurer; a device back within
    the wait restarts it. Ray's calls are faked: the clock only moves as Ray is polled."""
    import ray
    import ray.util.queue

    from archsearch.sweep import device_calibration, ray_runtime

    clock = {"now": 0.0}
    edge = {"Alive": True, "Resources": {"edge": 1.0, "CPU": 1.0}}
    # present, gone 4 s, back, then gone for good from t=10 on
    present = lambda t: t < 2.0 or 6.0 <= t < 10.0  # noqa: E731
    cancelled, killed = [], []

    def wait(refs, timeout):
        clock["now"] += timeout
        return [], list(refs)

    class Task:
        def options(self, **kw):
            assert kw["resources"] == {"edge": 1.0} and kw["num_cpus"] == 1
            return self

        def remote(self, settings, queue, earlier=None):
            return "the calibration task"

    class FakeQueue:
        actor = "queue actor"

        def __init__(self, **kw):
            pass

        def empty(self):
            return True

    monkeypatch.setattr(ray_runtime.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(ray, "nodes", lambda: [edge] if present(clock["now"]) else [])
    monkeypatch.setattr(ray, "wait", wait)
    monkeypatch.setattr(ray, "remote", lambda fn: Task())
    monkeypatch.setattr(ray, "cancel", lambda ref, force: cancelled.append(ref))
    monkeypatch.setattr(ray, "kill", killed.append)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 1.0, "node:1.2.3.4": 1.0})
    monkeypatch.setattr(ray.util.queue, "Queue", FakeQueue)
    with pytest.raises(device_calibration.RemoteCalibrationError) as err:
        device_calibration.calibrate_on_node("edge", plan("quick"), wait_s=5.0)
    assert clock["now"] > 15.0  # 5 s after it left for good, not at the first 4 s gap
    assert clock["now"] <= 15.0 + 2 * device_calibration.POLL_S
    text = str(err.value)
    assert text.count("\n") == 0 and "'edge' left the cluster" in text and "has: CPU)" in text
    assert cancelled == ["the calibration task"] and killed == ["queue actor"]
