"""The suite's CPU benchmark (benchmarks/bench_suite_cpu.py): the kind each process is filed
under, and the CPU time it reads for a process that ends while it runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from benchmark_scripts import load as load_benchmark

bench = load_benchmark("bench_suite_cpu")


@pytest.mark.parametrize(
    ("cmdline", "comm", "kind"),
    [
        (
            "/v/bin/python /v/lib/python3.11/site-packages/ray/_private/workers/default_worker.py "
            "--node-ip-address=127.0.0.1 --raylet-name=/tmp/raylet",
            "python",
            "Ray workers",
        ),
        ("ray::ImplicitFunc.train ", "ray::ImplicitFun", "Ray workers"),
        ("/v/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet --x", "raylet", None),
        ("/v/lib/python3.11/site-packages/ray/core/src/ray/gcs/gcs_server --x", "gcs_server", None),
        ("/v/bin/python -u /v/lib/.../ray/dashboard/dashboard.py --minimal", "python", "daemon"),
        ("/v/bin/python -u /v/lib/.../ray/_private/log_monitor.py --x", "python", "daemon"),
        ("/v/bin/python /v/bin/archsearch sweep run_dir=/tmp/r trials=3", "python", "sweep"),
        ("/v/bin/python /v/bin/archsearch", "python", "archsearch"),
        ("/usr/lib/postgresql/15/bin/postgres -D /tmp/as-pg-1/data", "postgres", "PostgreSQL"),
        ("postgres: postgres postgres 127.0.0.1(5) idle ", "postgres", "PostgreSQL"),
        ("/usr/lib/chromium/chromium --headless", "chromium", "Chromium"),
        ("/v/bin/python -m pytest -q -n 2", "python", "pytest workers"),
        ('/v/bin/python -c "import sys;exec(eval(sys.stdin.readline()))"', "python", "pytest"),
        ("/v/bin/python -c print(1)", "python3.11", "other Python"),
        ("[kworker/0:1]", "kworker/0:1", "other"),
    ],
)
def test_each_process_is_filed_under_its_kind(cmdline, comm, kind):
    expected = {
        None: "Ray raylet and GCS",
        "daemon": "Ray's other daemons",
        "sweep": "archsearch sweep",
        "pytest": "pytest workers",
    }.get(kind, kind)
    assert bench.kind(cmdline, comm) == expected


@pytest.mark.slow
def test_the_sampler_reads_the_cpu_time_of_a_process_that_ended_while_it_ran():
    """A child that spins for 0.6 s of CPU and exits is read under its kind with most of that
    time (at most one period lost); a process alive at the start (this test's) counts only
    what it spent since, not the seconds it had spent before."""
    spent_before = time.process_time()
    sampler = bench.Sampler()
    sampler.start()
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"
    subprocess.run([sys.executable, "-c", spin], check=True)
    sampler.done.set()
    sampler.join()
    seconds, count = sampler.by_kind()
    assert seconds["other Python"] >= 0.6 - bench.PERIOD - 0.05, seconds
    assert count["other Python"] >= 1
    (mine,) = [e[1] for (pid, _), e in sampler.seen.items() if pid == os.getpid()]
    assert mine < 0.5 < spent_before  # it waited on the child (and sampled) meanwhile
