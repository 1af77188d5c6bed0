"""The figures of `latency_quiet_hour.sh` for the benchmarks page, from its output folder:
calibration times, the held-out run's accuracy on every profile (side by side, the same
timings), each profile's share of the machine's ceiling, and the ablation of the kept terms
from two fresh calibrations (and from a second pair, C and D, where the folder has one: the
quiet-hour script's optional last step). Prints them and saves `results/latency_quiet_hour.json`.

    python benchmarks/latency_quiet_hour_summary.py /tmp/latency-quiet-hour
"""

from __future__ import annotations

import json
import os
import platform
import sys
from datetime import date
from pathlib import Path

OUT = Path(__file__).parent / "results" / "latency_quiet_hour.json"
PROFILES = {
    "run_new_a": "calibration A (this code)",
    "run_new_b": "calibration B (this code, the same hour)",
    "run_new_c": "calibration C (this code, the same hour)",
    "run_new_d": "calibration D (this code, the same hour)",
    "run_today": "a calibration by the code before the latency room",
    "run_local_converted": "the shipped local, this code",
    "run_local_shipped": "the shipped local, the code before",
}
QUANTITIES = ("ttft", "decode")


def held_out(folder: Path) -> dict:
    out = {}
    for name, what in PROFILES.items():
        if not (folder / f"{name}.json").is_file():  # the second pair is optional
            continue
        s = json.loads((folder / f"{name}.json").read_text())["summary"]
        out[name] = {"profile": what} | {
            q: {k: s[q][k] for k in ("within_10", "kendall_tau")} for q in QUANTITIES
        }
    return out


def ceiling_shares(folder: Path) -> dict:
    """Each profile's within-+-10% over the ceiling's: the mean over the runs, and this run's."""
    out = {}
    for file, code in (("ceiling_new", "this code"), ("ceiling_today", "the code before")):
        c = json.loads((folder / f"{file}.json").read_text())
        for name, d in c["devices"].items():
            row = {"code": code}
            for q in QUANTITIES:
                ceil = c["ceiling"][q]
                row[q] = {
                    "ceiling_within_10": ceil["mean"]["within_10"],
                    "share_mean_over_runs": d[q]["mean"]["within_10"] / ceil["mean"]["within_10"],
                    "share_this_run": d[q]["per_run"][-1]["within_10"]
                    / ceil["per_run"][-1]["within_10"],
                }
            out[f"{Path(name).stem} ({code})"] = row
    return out


def main(folder: Path) -> dict:
    lines = (folder / "seconds.txt").read_text().splitlines()
    if (folder / "seconds2.txt").is_file():
        lines += (folder / "seconds2.txt").read_text().splitlines()
    seconds = dict(line.split() for line in lines if len(line.split()) == 2)
    ablation = json.loads((folder / "ablation_fresh.json").read_text())
    result = {
        "command": "bash benchmarks/latency_quiet_hour.sh",
        "machine": f"{os.cpu_count()} vCPU ({platform.machine()}), 1 thread",
        "date": date.today().isoformat(),
        "calibration_s": {k: int(v) for k, v in seconds.items()},
        "held_out": held_out(folder),
        "ceiling": ceiling_shares(folder),
        "ablation": {"spread": ablation["spread"], "table": ablation["table"]},
    }
    if (folder / "ablation_cd.json").is_file():
        second = json.loads((folder / "ablation_cd.json").read_text())
        result["ablation_second_pair"] = {"spread": second["spread"], "table": second["table"]}
    print(json.dumps(result, indent=1))
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/latency-quiet-hour"))
