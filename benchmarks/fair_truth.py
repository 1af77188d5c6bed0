"""Ground truth for the fair-trials benchmark (`bench_fair_trials.py`): real sandbox trials of
every candidate of `benchmarks/spaces/search_small.yaml` over a grid of peak learning rates, at
the sandbox budget and at ten times it, at several seeds.

Each trial is the sandbox trainer itself (`run_trial`, one thread, the space's recipe with only
the budget, the seed and the peak rate changed; `min_lr` follows the rate). Results are cached one
per line in `benchmarks/results/fair_truth.jsonl` (`{"space", "budget", "seed", "lr",
"arch_hash", "result"}`, the result without its loss curve) as they finish, so an interrupted run
resumes where it stopped.

    python benchmarks/fair_truth.py --plan sandbox          # every rate at 160K tokens, seed 0
    python benchmarks/fair_truth.py --plan ten_x --workers 2
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import runs_cache

HERE = Path(__file__).parent
CACHE = HERE / "results" / "fair_truth.jsonl"
SANDBOX, TEN_X = "tokens:160K", "tokens:1.6M"
# log-spaced by 2x around the shipped spaces' 3e-3; MAD-Lab's reference grid is three rates
GRID = (1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2)
SEARCH_GRID = (1e-3, 2e-3, 4e-3, 8e-3)  # the product's default lr_grid

PLANS = {
    "sandbox": [("search_small", SANDBOX, 0, lr) for lr in GRID],
    "sandbox_low": [("search_small", SANDBOX, 0, lr) for lr in (2.5e-4, 5e-4)],
    "sandbox_seeds": [("search_small", SANDBOX, s, 1e-3) for s in (1, 2)],
    "ten_x": [("search_small", TEN_X, 0, lr) for lr in (2e-3, 6e-3)],  # with 3e-3: loss_truth
    # where 6e-3 is the best of the 10x grid, the grid goes on up
    "ten_x_high": [("search_small", TEN_X, 0, 1.2e-2)],
    # the short runs of `lr_search: halving` over SEARCH_GRID within a share of the sandbox
    # budget (78 steps): shares 0.15, 0.5 and 1 train 1 + 2, 4 + 8 and 9 + 18 steps
    "short": [
        ("search_small", f"steps:{n}", 0, lr) for n in (1, 2, 4, 8, 9, 18) for lr in SEARCH_GRID
    ],
}


def _train(job):
    space_name, budget, seed, lr, arch_dict, train = job
    import torch

    from archsearch.arch import ArchConfig
    from archsearch.trainers.config import TrainConfig
    from archsearch.trainers.trial import run_trial

    torch.set_num_threads(1)
    arch = ArchConfig.from_dict(arch_dict)
    cfg = TrainConfig.from_dict({**train, "budget": budget, "seed": seed, "lr": lr})
    with tempfile.TemporaryDirectory() as tmp:
        res = run_trial(arch, cfg, run_dir=tmp).to_dict()
    res.pop("curve", None)
    row = {"space": space_name, "budget": budget, "seed": seed, "lr": lr}
    return {**row, "arch_hash": arch.arch_hash, "result": res}


def load(cache: Path = CACHE) -> list[dict]:
    return runs_cache.load(cache)


def candidates() -> dict:
    import loss_truth

    return loss_truth.candidates("search_small")


def main() -> None:
    import loss_truth

    ap = argparse.ArgumentParser()
    ap.add_argument("--plan", choices=sorted(PLANS), required=True)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--only", default=None, help="comma-separated arch hashes")
    ap.add_argument("--limit", type=int, default=None, help="the first N candidates by hash")
    args = ap.parse_args()
    have = {(r["space"], r["budget"], r["seed"], r["lr"], r["arch_hash"]) for r in load()}
    train = loss_truth.space_of("search_small").train
    chosen = sorted(candidates().items())[: args.limit]
    if args.only:
        keep = set(args.only.split(","))
        chosen = [(h, a) for h, a in chosen if h in keep]
    jobs = [
        (space, budget, seed, lr, arch.to_dict(), train)
        for space, budget, seed, lr in PLANS[args.plan]
        for h, arch in chosen
        if (space, budget, seed, lr, h) not in have
    ]
    runs_cache.train_missing(
        jobs,
        _train,
        CACHE,
        workers=args.workers,
        cached=len(have),
        tasks_per_worker=16,
        line=lambda row: (
            f"{row['budget']} seed {row['seed']} lr {row['lr']:g} {row['arch_hash']}: "
            + runs_cache.outcome(row)
        ),
    )


if __name__ == "__main__":
    main()
