"""Fair trials: does giving each candidate its own learning rate make the sandbox rank like a
larger budget does, and at what compute?

Reads the ground truth of `fair_truth.py` (every candidate of `search_small` trained at a grid of
peak rates at the sandbox budget, 160K tokens, and at 10x; the search's short runs) and of
`loss_truth.py` (the same candidates at the space's fixed 3e-3), and prints and saves
(`benchmarks/results/fair_trials.json`), side by side:

- the 10x truth: each candidate's best loss over the rates 2e-3, 3e-3 and 6e-3 at 10x the budget
  (a fair truth; on the candidates trained at every one of them, said how many);
- for each way of choosing a candidate's rate at the sandbox budget, Kendall tau and Spearman
  between its sandbox losses and the 10x truth, and its compute per candidate in sandbox runs
  (today's sandbox = 1.0):
  - `fixed R`: every candidate at one rate (the space's 3e-3 is today's sandbox);
  - `halving S`: the product's `lr_search: halving` over 1e-3..8e-3 within share S of the
    budget, replayed exactly from the cached short runs (a search's short runs are whole
    sandbox runs at the trial's seed, so the replay is the search);
  - `oracle`: the best rate of the grid at the sandbox budget itself (every rate trained: the
    most a per-candidate rate can give at this budget, at 5x the compute);
  - `class oracle`: one rate per mixer family and width, the best of the grid for the class's
    mean loss (what a per-class search would find with unlimited compute);
- the sandbox's own seed noise at the fixed rate (Kendall tau between seeds), the ceiling of any
  ranking made from one seed's losses.

    python benchmarks/fair_truth.py --plan sandbox          # the ground truth (cached)
    python benchmarks/fair_truth.py --plan short
    python benchmarks/fair_truth.py --plan ten_x --limit 20
    python benchmarks/bench_fair_trials.py                  # the figures (seconds)
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats

HERE = Path(__file__).parent
OUT = HERE / "results" / "fair_trials.json"
SANDBOX, TEN_X = "tokens:160K", "tokens:1.6M"
SEARCH_GRID = (1e-3, 2e-3, 4e-3, 8e-3)  # the product's default lr_grid
SANDBOX_STEPS = 160_000 // (16 * 128)  # search_small's budget in steps
TRUTH_GRID = (2e-3, 3e-3, 6e-3)  # at 10x, every candidate of the truth; 1.2e-2 where 6e-3 won


def losses() -> dict:
    """(budget, seed, lr) -> {arch_hash: val_loss}, from both ground-truth caches."""
    import fair_truth
    import loss_truth

    out: dict = defaultdict(dict)
    for row in fair_truth.load():
        m = row["result"]["metrics"]
        value = m.get("val_loss", math.inf) if row["result"]["status"] == "completed" else math.inf
        out[(row["budget"], row["seed"], row["lr"])][row["arch_hash"]] = float(value)
    for row in loss_truth.seed0_from_search_truth() + loss_truth.load():
        if row["space"] == "search_small":
            value = float(row["result"]["metrics"]["val_loss"])
            out[(row["budget"], row["seed"], 3e-3)][row["arch_hash"]] = value
    return out


def replay_halving(runs: dict, h: str, share: float) -> tuple[float, float] | None:
    """The rate `lr_search: halving` chooses for candidate `h` within `share` of the sandbox
    budget, and the search's compute in sandbox runs; None when a short run is not cached."""
    from archsearch.trainers import lr_search

    plan = lr_search.plan_search(SEARCH_GRID, SANDBOX_STEPS, share, "steps")

    def train(lr, budget, round_):
        got = runs.get((budget, 0, lr), {}).get(h)
        if got is None:
            raise KeyError(budget)
        return lr_search.SearchRun(lr, round_, budget, got)

    try:
        search = lr_search.run_search(plan, train, share=share)
    except KeyError:
        return None
    return search.chosen, plan.total / SANDBOX_STEPS


def taus(pred: dict[str, float], truth: dict[str, float]) -> dict:
    common = sorted(set(pred) & set(truth))
    x, y = [pred[h] for h in common], [truth[h] for h in common]
    return {
        "n": len(common),
        "kendall_tau": float(stats.kendalltau(x, y).statistic),
        "spearman": float(stats.spearmanr(x, y).statistic),
    }


def main() -> None:
    import fair_truth
    import loss_truth

    archs = loss_truth.candidates("search_small")
    runs = losses()
    rates = (2.5e-4, 5e-4, 1e-3, 2e-3, 3e-3, 4e-3, 8e-3, 1.6e-2)
    sandbox = {lr: runs[(SANDBOX, 0, lr)] for lr in rates if (SANDBOX, 0, lr) in runs}
    ten_x = {lr: got for (b, s, lr), got in runs.items() if b == TEN_X and s == 0}
    # the fair 10x truth: the best of the rates trained at 10x, on the candidates that have
    # the whole base grid; where its highest rate was the best, the grid goes on up
    grid10 = [lr for lr in TRUTH_GRID if lr in ten_x]
    have10 = set.intersection(*(set(ten_x[lr]) for lr in grid10)) if grid10 else set()
    rates_of = {h: [lr for lr in sorted(ten_x) if h in ten_x[lr]] for h in have10}
    truth = {h: min(ten_x[lr][h] for lr in rates_of[h]) for h in have10}
    best10 = {h: min(rates_of[h], key=lambda lr: ten_x[lr][h]) for h in have10}
    edge = [h for h in have10 if best10[h] == max(rates_of[h])]
    out: dict = {
        "space": "search_small",
        "sandbox_budget": SANDBOX,
        "truth": {
            "budget": TEN_X,
            "rates": grid10,
            "rates_above": sorted(set(ten_x) - set(grid10)),
            "candidates": len(truth),
            "best_rate_counts": {
                f"{lr:g}": list(best10.values()).count(lr) for lr in sorted(set(best10.values()))
            },
            "best_at_the_highest_rate_trained": len(edge),
        },
        "strategies": {},
    }
    full = [lr for lr in sandbox if len(sandbox[lr]) == len(archs)]

    fixed10 = runs.get((TEN_X, 0, 3e-3), {})  # every candidate at 10x, at the space's rate

    def add(name: str, pred: dict[str, float], compute: float, **extra) -> None:
        row = {**taus(pred, truth), "compute": compute, **extra}
        row["vs_10x_at_3e-3"] = taus(pred, fixed10)
        out["strategies"][name] = row
        print(
            f"{name:<30} tau {row['kendall_tau']:+.3f}  spearman {row['spearman']:+.3f}  "
            f"n {row['n']:>2}  compute {compute:.2f}x  | vs 10x at 3e-3: tau "
            f"{row['vs_10x_at_3e-3']['kendall_tau']:+.3f} (n {row['vs_10x_at_3e-3']['n']})",
            flush=True,
        )

    for lr in full:
        add(f"fixed {lr:g}", sandbox[lr], 1.0)
    oracle_grid = [lr for lr in full if lr in fair_truth.GRID]
    if oracle_grid:
        chosen = {h: min(oracle_grid, key=lambda lr: sandbox[lr][h]) for h in archs}
        pred = {h: sandbox[chosen[h]][h] for h in archs}
        counts = {f"{lr:g}": list(chosen.values()).count(lr) for lr in oracle_grid}
        add("oracle (best of grid)", pred, float(len(oracle_grid)), rates=counts)
        classes: dict = defaultdict(list)
        for h, a in archs.items():
            classes[(a.family, a.d_model)].append(h)
        pred = {}
        for members in classes.values():
            best = min(oracle_grid, key=lambda lr: np.mean([sandbox[lr][h] for h in members]))
            pred.update({h: sandbox[best][h] for h in members})
        add("class oracle (family x width)", pred, 1.0, classes=len(classes))
    for share in (0.15, 0.5, 1.0):
        picked = {h: replay_halving(runs, h, share) for h in archs}
        if any(p is None for p in picked.values()):
            continue
        pred = {h: sandbox[p[0]][h] for h, p in picked.items() if p[0] in sandbox}
        compute = 1.0 + float(np.mean([p[1] for p in picked.values()]))
        counts = {f"{lr:g}": sum(p[0] == lr for p in picked.values()) for lr in SEARCH_GRID}
        add(f"halving within {share:.0%}", pred, compute, rates=counts)
    for lr in (3e-3, 1e-3):
        noise = seed_noise(runs, lr)
        if noise:
            out.setdefault("seed_noise", {})[f"fixed {lr:g}"] = noise
            print(f"seed noise at {lr:g}: Kendall tau between seeds {noise['kendall_tau']:.3f}")
    OUT.write_text(json.dumps(out, indent=1) + "\n")


def seed_noise(runs: dict, lr: float) -> dict | None:
    """Kendall tau between every pair of seeds at the sandbox budget and rate `lr`."""
    seeds = [runs.get((SANDBOX, s, lr), {}) for s in (0, 1, 2)]
    pairs = [
        (a, b) for i, a in enumerate(seeds) for b in seeds[i + 1 :] if len(set(a) & set(b)) > 2
    ]
    if not pairs:
        return None
    got = [taus(a, b)["kendall_tau"] for a, b in pairs]
    return {"kendall_tau": float(np.mean(got)), "pairs": got}


if __name__ == "__main__":
    main()
