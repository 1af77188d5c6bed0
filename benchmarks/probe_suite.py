"""The probe recipe of `bench_published.py --part probes`: the recall probes the published
recall columns are held against, trained as `objective: probe` trials.

MQAR recall (`archsearch.trainers.probes`) at sequence 32 over a vocabulary of 32 (8 key-value
pairs, then 8 queries), three seeds, at the default space's rate. A 4 x 64 attention model
"clicks" on MQAR within about a thousand steps at this rate (its held-out accuracy jumps from
chance to one and stays there); `PROBE_STEPS` gives it that and half again. A row whose seeds
still rise at the end, or disagree, is unresolved (`probes.resolved`) and ranks nothing.
"""

from __future__ import annotations

RECALL_TASKS = ("recall",)
PROBE_STEPS = 1500
PROBE_SEEDS = 3


def probe_recipe(mode: str, seed: int) -> dict:
    """The probe trial's settings; `seed` is the first of the task's `PROBE_SEEDS` seeds."""
    out = {
        "objective": "probe",
        "probe_tasks": list(RECALL_TASKS),
        "probe_steps": PROBE_STEPS,
        "probe_seeds": PROBE_SEEDS,
        "probe_seq_len": 32,
        "probe_vocab": 32,
        "probe_batch_size": 32,
        "probe_eval_size": 256,
        "lr": 1e-3,
        "seed": seed,
        "threads": 1,
    }
    if mode == "fair":
        out["lr_search"] = "halving"
    elif mode.startswith("fixed@"):
        out["lr"] = float(mode.removeprefix("fixed@"))
    return out
