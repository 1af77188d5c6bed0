"""The probe recipe of `bench_published.py --part probes`: the recall probes the published
recall columns are held against, trained as `objective: probe` trials.

MQAR recall and its noisy variant (`archsearch.trainers.probes`) at sequence 64 over a vocabulary
of 64 (16 key-value pairs, then 16 queries), three seeds per task; `probe_steps` is a budget
measured to be past the recall transition for the benchmark's 8 x 64 models (the pure linear
and the attention model's held-out accuracy curves flatten before it: `--measure` prints them).
A task whose seeds still rise at the end, or disagree, is unresolved (`probes.resolved`).
"""

from __future__ import annotations

RECALL_TASKS = ("recall", "noisy_recall")
PROBE_STEPS = 1500
PROBE_SEEDS = 3


def probe_recipe(mode: str, seed: int) -> dict:
    """The probe trial's settings; `seed` is the first of the task's `PROBE_SEEDS` seeds."""
    out = {
        "objective": "probe",
        "probe_tasks": list(RECALL_TASKS),
        "probe_steps": PROBE_STEPS,
        "probe_seeds": PROBE_SEEDS,
        "probe_seq_len": 64,
        "probe_vocab": 64,
        "probe_batch_size": 32,
        "probe_eval_size": 256,
        "lr": 3e-3,
        "seed": seed,
        "threads": 1,
    }
    if mode == "fair":
        out["lr_search"] = "halving"
    elif mode.startswith("fixed@"):
        out["lr"] = float(mode.removeprefix("fixed@"))
    return out
