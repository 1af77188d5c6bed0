"""Training runs a benchmark keeps as lines of a JSONL file: it trains only the runs its file
lacks, in spawned workers, and appends each run as it ends, so a benchmark stopped half-way
keeps what it trained and the next one goes on from there."""

from __future__ import annotations

import json
import multiprocessing as mp
from collections.abc import Callable
from pathlib import Path


def load(cache: Path) -> list[dict]:
    """Every run the file holds (none where it does not exist)."""
    if not cache.exists():
        return []
    return [json.loads(line) for line in cache.read_text().splitlines() if line.strip()]


def outcome(row: dict) -> str:
    """A trained run's validation loss and wall time, as its line ends."""
    loss = row["result"]["metrics"].get("val_loss", float("nan"))
    return f"val_loss {loss:.4f} in {row['result']['wall_s']:.0f} s"


def train_missing(
    jobs: list,
    train: Callable[[object], dict],
    cache: Path,
    *,
    workers: int,
    cached: int,
    tasks_per_worker: int,
    line: Callable[[dict], str],
) -> None:
    """`train` each job in `workers` spawned processes (each replaced after `tasks_per_worker`
    runs, so that what a run leaves allocated does not pile up), appending each run to `cache`
    as it ends and printing `line(run)` after its count."""
    print(f"{len(jobs)} runs to train ({cached} cached)", flush=True)
    cache.parent.mkdir(parents=True, exist_ok=True)
    with mp.get_context("spawn").Pool(workers, maxtasksperchild=tasks_per_worker) as pool:
        for i, row in enumerate(pool.imap_unordered(train, jobs), 1):
            with cache.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{i}/{len(jobs)} {line(row)}", flush=True)
