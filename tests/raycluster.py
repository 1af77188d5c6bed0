"""A private two-node Ray cluster on this machine, for the tests: a head and a second node (one CPU
each) started by `ray start` on a free port with their own temp dir and HOME; the second node
advertises custom resources. Every process started is stopped, by its process group."""

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
from collections.abc import Iterator
from pathlib import Path

from pgserver import free_port

BIN = Path(sys.executable).parent


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


@contextlib.contextmanager
def private_ray_cluster(
    resources: dict[str, float],
    head_cpus: int = 1,
    edge_cpus: int = 1,
    ray_env: dict[str, str] | None = None,
) -> Iterator[dict]:
    """Yield {address, env (for processes that join it), nodes (node ids), edge (the id of the
    node that advertises `resources`), head (the head's id), leave (kills the second node)};
    the head has `head_cpus` CPUs (0: every task needing a CPU runs on the second node), the
    second `edge_cpus`; `ray_env`: Ray settings (`RAY_...` variables) for both."""
    temp = tempfile.mkdtemp(prefix="as-ray-")
    port = free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "HOME": temp}
    env.update(ray_env or {})
    head = _ray_start(
        [
            "--head",
            f"--port={port}",
            f"--num-cpus={head_cpus}",
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
            _ray_start(
                [
                    f"--address={address}",
                    f"--num-cpus={edge_cpus}",
                    f"--resources={json.dumps(resources)}",
                ],
                env,
            )
        )
        nodes = _wait_for_nodes(address, 2, env)
        first = next(iter(resources))
        edge = next(n["NodeID"] for n in nodes if first in n["Resources"])
        yield {
            "address": address,
            "env": env,
            "nodes": [n["NodeID"] for n in nodes],
            "edge": edge,
            "head": next(n["NodeID"] for n in nodes if n["NodeID"] != edge),
            "leave": lambda: _kill(procs[1]),
        }
    finally:
        for p in reversed(procs):
            _kill(p)
        shutil.rmtree(temp, ignore_errors=True)


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL a node: `ray start --block` and the daemons of its process group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
