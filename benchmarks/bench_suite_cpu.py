"""Where the test suite's time goes: CPU-seconds by kind of process while a command runs.

On two cores the whole suite keeps both busy nearly all the time, so its wall time is about its
CPU time over two, and what shortens it is less CPU work. This names the processes that spend
it: the pytest workers (the tests that run in-process), the `archsearch` commands they start
(sweep drivers above all), the Ray workers (trials and calibration tasks), Ray's raylet and GCS,
Ray's other daemons, PostgreSQL, Chromium.

It reads every process's CPU time (psutil, from /proc) every `PERIOD` seconds. A process that ends
between two reads loses at most its last period, so the kinds add up to a little less than the
machine's busy time over the run (/proc/stat), printed beside them. Each process is filed under
its command line when seen a second time (seen first between its fork and its exec, it shows its
parent's; a Ray worker starts as `default_worker.py`).

    python benchmarks/bench_suite_cpu.py                 # `make test` in this checkout
    python benchmarks/bench_suite_cpu.py --cwd /tmp/clone -- make test
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import psutil

OUT = Path(__file__).parent / "results" / "suite_cpu.json"
PERIOD = 0.2  # seconds between two reads of /proc
RAY_DAEMONS = ("dashboard", "runtime_env", "log_monitor", "monitor.py", "ray start")


def kind(cmdline: str, comm: str) -> str:
    """The kind of process a command line names."""
    if cmdline.startswith("ray::") or "default_worker.py" in cmdline:
        return "Ray workers"
    if "raylet" in cmdline or "gcs_server" in cmdline:
        return "Ray raylet and GCS"
    if any(name in cmdline for name in RAY_DAEMONS):
        return "Ray's other daemons"
    if "bin/archsearch" in cmdline:
        words = cmdline.split("bin/archsearch", 1)[1].split()
        return f"archsearch {words[0] if words else ''}".strip()
    if "postgres" in cmdline or comm.startswith(("postgres", "initdb", "pg_ctl")):
        return "PostgreSQL"
    if "chrom" in cmdline:
        return "Chromium"
    if "pytest" in cmdline or "execnet" in cmdline or "exec(eval(sys.stdin" in cmdline:
        return "pytest workers"
    if "python" in comm or "python" in cmdline.split(" ", 1)[0]:
        return "other Python"
    return "other"


def processes() -> dict[tuple[int, float], tuple[psutil.Process, float]]:
    """(pid, start time) -> (the process, its CPU-seconds) of every process now."""
    out = {}
    for proc in psutil.process_iter(["create_time", "cpu_times"]):
        times = proc.info["cpu_times"]
        if times is not None:  # None: not ours to read
            out[(proc.pid, proc.info["create_time"])] = (proc, times.user + times.system)
    return out


def busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU-seconds of the machine since boot (guest time is already in user)."""
    t = psutil.cpu_times()
    total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
    return total - t.idle - getattr(t, "iowait", 0.0), total


class Sampler(threading.Thread):
    """Reads /proc every PERIOD until stopped; keeps each process's kind and latest CPU time."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.before = {key: cpu for key, (_, cpu) in processes().items()}
        self.seen: dict[tuple[int, float], list] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for key, (proc, cpu) in processes().items():
                entry = self.seen.setdefault(key, ["other", 0.0, 0])
                if entry[2] < 2:  # first seen between fork and exec, it shows its parent's
                    try:
                        entry[0] = kind(" ".join(proc.cmdline()), proc.name())
                    except psutil.Error:  # ended since
                        continue
                    entry[2] += 1
                entry[1] = cpu - self.before.get(key, 0.0)
            self.done.wait(PERIOD)

    def by_kind(self) -> tuple[Counter, Counter]:
        seconds, count = Counter(), Counter()
        for name, cpu, _ in self.seen.values():
            if cpu > 0:
                seconds[name] += cpu
                count[name] += 1
        return seconds, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cwd", default=".", help="where the command runs (a checkout)")
    parser.add_argument("command", nargs="*", default=["make", "test"])
    args = parser.parse_args()
    load = os.getloadavg()
    sampler = Sampler()
    busy0, total0 = busy_seconds()
    start = time.time()
    sampler.start()
    proc = subprocess.Popen(
        args.command, cwd=args.cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    last = ""
    for line in proc.stdout:  # shown as it comes; its last line kept (pytest's summary)
        sys.stdout.write(line)
        last = line.strip() or last
    proc.wait()
    wall = time.time() - start
    sampler.done.set()
    sampler.join()
    busy1, total1 = busy_seconds()
    seconds, count = sampler.by_kind()
    result = {
        "command": " ".join(args.command),
        "returncode": proc.returncode,
        "last_line": last,
        "wall_s": round(wall, 1),
        "machine_busy_cpu_s": round(busy1 - busy0, 1),
        "machine_idle_share": round(1 - (busy1 - busy0) / (total1 - total0), 3),
        "sampled_cpu_s": round(sum(seconds.values()), 1),
        "by_kind": {
            name: {"cpu_s": round(s, 1), "processes": count[name]}
            for name, s in seconds.most_common()
        },
        "load_average_before": load,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
    }
    print(f"{result['command']}: {result['last_line']} (rc {proc.returncode})")
    print(
        f"wall {wall:.0f} s; machine busy {result['machine_busy_cpu_s']:.0f} CPU-s, "
        f"idle {result['machine_idle_share']:.1%}; sampled {result['sampled_cpu_s']:.0f} CPU-s"
    )
    for name, v in result["by_kind"].items():
        print(f"{v['cpu_s']:8.1f} CPU-s {v['processes']:5d} processes  {name}")
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {OUT}")
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
