"""Ground truth for the loss-axis benchmarks (`bench_loss_axis.py`): real sandbox trials of
every candidate of `benchmarks/spaces/search_small.yaml` at several seeds and budgets, and of a
seeded sample of the default `tiny` space at two seeds.

Each trial is the sandbox trainer itself (`run_trial`, one thread, the space's recipe with only
the budget and the seed changed: the learning-rate schedule spans the whole budget, as a
confirmation run's does). Results are cached one per line in
`benchmarks/results/loss_axis_truth.jsonl` (`{"space", "budget", "seed", "arch_hash", "result"}`)
as they finish, so an interrupted run resumes where it stopped.

    python benchmarks/loss_truth.py --workers 2            # everything (about 45 min on 2 cores)
    python benchmarks/loss_truth.py --only search_small:tokens:1.6M:0
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

import runs_cache

HERE = Path(__file__).parent
SEARCH_SMALL = HERE / "spaces" / "search_small.yaml"
CACHE = HERE / "results" / "loss_axis_truth.jsonl"
TINY_SAMPLE = 12  # candidates of the tiny space trained at two seeds

# (space, budget, seed) in the order they are worth having
PLAN = [
    ("search_small", "tokens:1.6M", 0),  # 10x: confirmation and extrapolation ground truth
    ("search_small", "tokens:160K", 1),  # seed noise at the sandbox budget
    ("search_small", "tokens:160K", 2),
    ("tiny", "tokens:1M", 0),  # the default space at its own budget
    ("tiny", "tokens:1M", 1),
    ("search_small", "tokens:640K", 0),  # 4x: seed noise against budget
    ("search_small", "tokens:640K", 1),
    ("search_small", "tokens:1.6M", 1),  # 10x: seed noise at the larger budget
]


def space_of(name: str):
    from archsearch.space import load_space, parse_space_file

    return parse_space_file(SEARCH_SMALL) if name == "search_small" else load_space(name)


def candidates(name: str) -> dict:
    """arch_hash -> ArchConfig: every feasible candidate of search_small (40), a seeded sample
    of `TINY_SAMPLE` feasible candidates of tiny."""
    from archsearch.space import assignments, build
    from archsearch.space.candidates import sample_assignment
    from archsearch.sweep.pricing import assess

    space = space_of(name)
    if name == "search_small":
        source = list(assignments(space))
    else:
        rng = random.Random(0)
        source = [sample_assignment(space, rng) for _ in range(400)]
    out: dict = {}
    for a in source:
        if name == "search_small":
            arch = build(space, a).arch
        else:
            got = assess(space, [], "rpi5", a)
            if got.status is not None:
                continue
            arch = got.priced.arch
        out.setdefault(arch.arch_hash, arch)
        if name != "search_small" and len(out) == TINY_SAMPLE:
            break
    return out


def _train(job):
    space_name, budget, seed, arch_dict, train = job
    import torch

    from archsearch.arch import ArchConfig
    from archsearch.trainers.config import TrainConfig
    from archsearch.trainers.trial import run_trial

    torch.set_num_threads(1)
    arch = ArchConfig.from_dict(arch_dict)
    cfg = TrainConfig.from_dict({**train, "budget": budget, "seed": seed})
    with tempfile.TemporaryDirectory() as tmp:
        res = run_trial(arch, cfg, run_dir=tmp)
    row = {"space": space_name, "budget": budget, "seed": seed, "arch_hash": arch.arch_hash}
    return {**row, "result": res.to_dict()}


def load(cache: Path = CACHE) -> list[dict]:
    return runs_cache.load(cache)


def seed0_from_search_truth() -> list[dict]:
    """search_small at 160K tokens, seed 0: the search-efficiency benchmark's ground truth."""
    truth = json.loads((HERE / "results" / "search_truth.json").read_text())
    return [
        {"space": "search_small", "budget": "tokens:160K", "seed": 0, "arch_hash": h, "result": r}
        for h, r in truth.items()
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", default=None, help="SPACE:BUDGET:SEED")
    ap.add_argument("--limit", type=int, default=None, help="the first N candidates (by hash)")
    args = ap.parse_args()
    plan = PLAN
    if args.only:
        space, kind, amount, seed = args.only.split(":")
        plan = [(space, f"{kind}:{amount}", int(seed))]
    have = {(r["space"], r["budget"], r["seed"], r["arch_hash"]) for r in load()}
    jobs = []
    for space_name, budget, seed in plan:
        train = space_of(space_name).train
        chosen = sorted(candidates(space_name).items())[: args.limit]
        for h, arch in chosen:
            if (space_name, budget, seed, h) not in have:
                jobs.append((space_name, budget, seed, arch.to_dict(), train))
    runs_cache.train_missing(
        jobs,
        _train,
        CACHE,
        workers=args.workers,
        cached=len(have),
        tasks_per_worker=8,
        line=lambda row: (
            f"{row['space']} {row['budget']} seed {row['seed']} {row['arch_hash']}: "
            + runs_cache.outcome(row)
        ),
    )


if __name__ == "__main__":
    main()
