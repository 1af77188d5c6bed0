"""The default run as a newcomer meets it: a clean clone, `make setup`, then `make run`.

Clones this checkout's HEAD into a temporary folder, times `make setup` (the virtual
environment: the CPU build of PyTorch and the project, from the package index) and `make run`
(the `tiny` space until 20 candidates are fully trained, two at a time on a local Ray) apart,
and saves both wall times with the sweep's closing summary, the machine and its load average
before and after. Uncommitted changes are not part of the clone: commit first.

    python benchmarks/bench_default_run.py                  # results/default_run.json
    python benchmarks/bench_default_run.py --update-docs    # and docs/assets/front.png

Run it on a quiet machine and alone: the sweep trains on every core.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parent
OUT = HERE / "results" / "default_run.json"


def timed(cmd: list[str], cwd: Path, log: Path) -> float:
    """Run `cmd` in `cwd` with its output to `log`; its wall time in seconds (a failure
    raises with the log's tail)."""
    start = time.perf_counter()
    with log.open("w") as f:
        rc = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - start
    if rc != 0:
        tail = "\n".join(log.read_text().splitlines()[-30:])
        raise SystemExit(f"{' '.join(cmd)} failed with exit status {rc}:\n{tail}")
    return wall


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    with open("/proc/cpuinfo") as f:
        names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
    name = names[0] if names else cpu
    return f"{os.cpu_count()} vCPU ({name}), Python {platform.python_version()}"


def summary(log: Path) -> dict:
    """The sweep's closing lines: trained counts and its own wall time."""
    text = log.read_text()
    study = re.search(r"^study tiny: .*$", text, re.M)
    front = re.search(r"Pareto front of tiny on (\S+) \((\d+) of (\d+) fully trained\)", text)
    return {
        "study_line": study.group(0) if study else None,
        "front_device": front.group(1) if front else None,
        "front_size": int(front.group(2)) if front else None,
        "fully_trained": int(front.group(3)) if front else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update-docs", action="store_true", help="copy the front's PNG")
    parser.add_argument("--keep", type=Path, help="clone here and keep it (default: a temp dir)")
    args = parser.parse_args()
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="archsearch-default-run-") as tmp:
        clone = args.keep or Path(tmp) / "archsearch"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        load_before = os.getloadavg()
        setup_s = timed(["make", "setup"], clone, Path(tmp) / "setup.log")
        run_log = Path(tmp) / "run.log"
        run_s = timed(["make", "run"], clone, run_log)
        load_after = os.getloadavg()
        result = {
            "command": "python benchmarks/bench_default_run.py",
            "commit": head,
            "machine": machine(),
            "date": date.today().isoformat(),
            "setup_s": round(setup_s, 1),
            "run_s": round(run_s, 1),
            "run_min": round(run_s / 60, 1),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in load_after],
            **summary(run_log),
            "log_tail": run_log.read_text().splitlines()[-45:],
        }
        if args.update_docs:
            front = clone / "runs" / "tiny" / "pareto" / "rpi5" / "front.png"
            shutil.copyfile(front, ROOT / "docs" / "assets" / "front.png")
            result["front_png"] = "docs/assets/front.png"
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
