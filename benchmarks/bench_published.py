"""The sandbox held against tables trained at scale: does a sweep's verdict agree with papers?

Trains the sandbox stand-ins of the rows of three published tables (`published.py`:
[Linear-MoE] Table 5, [GatedDeltaNet] Table 3 with its recall Table 4, [DeltaNet] Table 2 with
its recall columns) as a sweep of the default space would (its recipe: 1M tokens, batch 16 x
128, byte tokens), on WikiText-2 (English text, as the tables' corpora are), at the space's
fixed learning rate and with fair trials (`lr_search: halving`), at several seeds; then reports
for each table:

- Kendall tau between the sandbox's ranking (validation loss, mean over seeds) and the
  published column, with the range of the per-seed taus as the seed-noise interval;
- each qualitative finding the paper's figures state (a hybrid above its pure model, a linear
  mixer against attention, ...) and whether the sandbox reproduces it: `yes` / `no` when the
  sandbox's mean difference is larger than twice its seed spread, else `unresolved`;
- with `--part probes`, the same for the probe suite against the tables' recall columns
  (`probe_stop: flat`, several seeds; a cell still in its learning transition is unresolved,
  never ranked).

Nothing here is tuned to the tables: the sandbox recipe is the default space's, and the tables
only score.

    python benchmarks/bench_published.py --part lm --mode fixed --seeds 0 1 2   # trains (cached)
    python benchmarks/bench_published.py --part lm --mode fair --seeds 0 1 2
    python benchmarks/bench_published.py --report                              # the figures
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import runs_cache

HERE = Path(__file__).parent
ROOT = HERE.parent
CACHE = HERE / "results" / "published_runs.jsonl"
OUT = HERE / "results" / "published.json"
WIKITEXT = ROOT.parent / "shared" / "data" / "wikitext-2"


def recipe(mode: str, seed: int, data: list[str]) -> dict:
    """The default space's training recipe on `data`: `fixed` (its rate), `fixed@R` (rate R)
    or `fair` (fair trials, `lr_search: halving`)."""
    from archsearch.space import load_space

    train = dict(load_space("tiny").train)
    train.update(data=data, seed=seed, threads=1)
    if mode == "fair":
        train["lr_search"] = "halving"
    elif mode.startswith("fixed@"):
        train["lr"] = float(mode.removeprefix("fixed@"))
    return train


def _train(job: tuple) -> dict:
    name, arch_dict, part, mode, seed, train = job
    import torch

    from archsearch.arch import ArchConfig
    from archsearch.trainers.config import TrainConfig
    from archsearch.trainers.trial import run_trial

    torch.set_num_threads(1)
    arch = ArchConfig.from_dict({"name": "published", **arch_dict})
    cfg = TrainConfig.from_dict(train)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        res = run_trial(arch, cfg, run_dir=tmp).to_dict()
    res.pop("curve", None)
    return {
        "arch_hash": arch.arch_hash,
        "row": name,
        "part": part,
        "mode": mode,
        "seed": seed,
        "wall_s": time.perf_counter() - t0,
        "result": res,
    }


def load() -> list[dict]:
    return runs_cache.load(CACHE)


def unique_rows(part: str = "lm") -> dict:
    """arch hash -> (a row's name, its sandbox arch dict): rows several tables share train once;
    the probes train the rows of the tables with a recall column."""
    from published import TABLES

    from archsearch.arch import ArchConfig

    out = {}
    for table in TABLES.values():
        if part == "probes" and not table.recall_column:
            continue
        for row in table.rows:
            h = ArchConfig.from_dict({"name": "published", **row.arch}).arch_hash
            out.setdefault(h, (row.name, row.arch))
    return out


def train_all(part: str, mode: str, seeds: list[int], workers: int, data: list[str]) -> None:
    from probe_suite import probe_recipe

    have = {(r["arch_hash"], r["part"], r["mode"], r["seed"]) for r in load()}
    jobs = []
    for seed in seeds if part == "lm" else [0]:  # a probe trial trains its own seeds
        train = recipe(mode, seed, data) if part == "lm" else probe_recipe(mode, seed)
        for h, (name, arch) in unique_rows(part).items():
            if (h, part, mode, seed) not in have:
                jobs.append((name, arch, part, mode, seed, train))

    def line(row: dict) -> str:
        m = row["result"]["metrics"]
        shown = m.get("val_loss", m.get("probe_acc", float("nan")))
        out = f"{part} {mode} seed {row['seed']} {row['row']}: {shown:.4f} in {row['wall_s']:.0f} s"
        if part == "probes":
            resolved = {t: p.get("resolved") for t, p in row["result"]["probes"].items()}
            out += f"\n    {row['row']}: resolved {resolved}"
        return out

    runs_cache.train_missing(
        jobs, _train, CACHE, workers=workers, cached=len(have), tasks_per_worker=4, line=line
    )


# ---- the figures ------------------------------------------------------------------------------


def seed_scores(run: dict, part: str) -> dict[int, float] | None:
    """Quality on the sandbox by seed, higher is better: minus the validation loss (nats per
    byte), or the mean accuracy of the recall probes at each of their seeds; None for a failed
    run or a probe task still in its transition (unresolved: it ranks nothing)."""
    res = run["result"]
    if res["status"] != "completed":
        return None
    if part == "lm":
        return {run["seed"]: -float(res["metrics"]["val_loss"])}
    from probe_suite import RECALL_TASKS

    probes = res.get("probes") or {}
    cells = [probes.get(t) for t in RECALL_TASKS]
    if any(c is None or not c.get("resolved", False) for c in cells):
        return None
    return {k: float(np.mean([c["accs"][k] for c in cells])) for k in range(len(cells[0]["accs"]))}


def kendall(x: list[float], y: list[float]) -> float:
    from scipy import stats

    return float(stats.kendalltau(x, y).statistic)


def table_figures(table, runs: list[dict], part: str, mode: str, column: str | None = None) -> dict:
    """Tau and findings of one table for one part and mode (see the module docstring), held
    against the part's own column of the table or against `column`."""
    from archsearch.arch import ArchConfig

    column = column or (table.lm_column if part == "lm" else table.recall_column)
    higher = table.columns[column]
    by_row: dict[str, dict[int, float]] = {}
    for row in table.rows:
        h = ArchConfig.from_dict({"name": "published", **row.arch}).arch_hash
        for r in runs:
            if r["arch_hash"] == h and r["part"] == part and r["mode"] == mode:
                got = seed_scores(r, part)
                if got is not None:
                    by_row.setdefault(row.name, {}).update(got)
    published = {row.name: row.figures[column] * (1 if higher else -1) for row in table.rows}
    ranked = [name for name in published if by_row.get(name)]
    unresolved = [name for name in published if not by_row.get(name)]
    out: dict = {"column": column, "rows": len(ranked), "unresolved_rows": unresolved}
    if len(ranked) < 3:
        return {**out, "kendall_tau": None}
    seeds = sorted(set.intersection(*(set(by_row[n]) for n in ranked)))
    mean = {n: float(np.mean(list(by_row[n].values()))) for n in ranked}
    out["kendall_tau"] = kendall([mean[n] for n in ranked], [published[n] for n in ranked])
    per_seed = [
        kendall([by_row[n][s] for n in ranked], [published[n] for n in ranked]) for s in seeds
    ]
    out["kendall_tau_per_seed"] = per_seed
    out["seeds"] = seeds
    out["sandbox"] = {n: {"mean": mean[n], "by_seed": by_row[n]} for n in ranked}
    out["findings"] = [finding(table, c, a, b, by_row) for c, a, b in table.findings if c == column]
    verdicts = [f["sandbox"] for f in out["findings"]]
    out["findings_summary"] = (
        f"{verdicts.count('yes')} reproduced, {verdicts.count('no')} contradicted, "
        f"{verdicts.count('unresolved')} unresolved of {len(verdicts)}"
    )
    return out


def finding(table, column: str, a: str, b: str, by_row: dict) -> dict:
    """Whether the sandbox orders rows `a` and `b` as the published `column` does."""
    figures = {row.name: row.figures for row in table.rows}
    higher = table.columns[column]
    a_better = (figures[a][column] > figures[b][column]) == higher
    better, worse = (a, b) if a_better else (b, a)
    pair = f"{figures[better][column]:g} vs {figures[worse][column]:g}"
    text = f"{better} above {worse} ({column}: {pair})"
    if not by_row.get(better) or not by_row.get(worse):
        return {"finding": text, "sandbox": "unresolved", "why": "a row has no resolved score"}
    seeds = sorted(set(by_row[better]) & set(by_row[worse]))
    diffs = [by_row[better][s] - by_row[worse][s] for s in seeds]
    mean = float(np.mean(diffs))
    spread = float(np.std(diffs, ddof=1)) if len(diffs) > 1 else math.inf
    verdict = "unresolved"
    if abs(mean) > 2 * spread / math.sqrt(len(diffs)):
        verdict = "yes" if mean > 0 else "no"
    return {
        "finding": text,
        "sandbox": verdict,
        "difference": mean,
        "spread": spread,
        "n": len(diffs),
    }


def report() -> dict:
    from published import TABLES

    runs = load()
    out: dict = {}
    for key, table in TABLES.items():
        modes = sorted({r["mode"] for r in runs})
        for part, mode in itertools.product(("lm", "probes"), modes):
            if part == "probes" and not table.recall_column:
                continue
            got = table_figures(table, runs, part, mode)
            if got.get("kendall_tau") is None and not got["rows"]:
                continue
            out.setdefault(key, {"table": table.key, "setting": table.setting})[
                f"{part}/{mode}"
            ] = got
            tau = got.get("kendall_tau")
            seeds = got.get("kendall_tau_per_seed") or []
            span = f" (per seed {min(seeds):+.2f} .. {max(seeds):+.2f})" if seeds else ""
            print(
                f"{table.key} {part} {mode}: rows {got['rows']}, Kendall tau "
                f"{'n/a' if tau is None else f'{tau:+.2f}'}{span}"
            )
            for f in got.get("findings", []):
                print(f"    {f['sandbox']:>10}  {f['finding']}")
        if table.recall_column and "fixed" in modes:
            out[key]["agreement/fixed"] = agreement(table, runs)
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    return out


def agreement(table, runs: list[dict]) -> dict:
    """Which of the sandbox's two verdicts, LM loss or the recall probes' accuracy (both at
    the space's rate), agrees better with each of the table's two columns: Kendall tau of
    every pairing, with its range over seeds."""
    out = {}
    for part, column in itertools.product(("lm", "probes"), (table.lm_column, table.recall_column)):
        got = table_figures(table, runs, part, "fixed", column)
        seeds = got.get("kendall_tau_per_seed") or []
        out[f"{part} ~ {column}"] = {
            "kendall_tau": got.get("kendall_tau"),
            "per_seed": [min(seeds), max(seeds)] if seeds else None,
            "rows": got["rows"],
        }
        tau = got.get("kendall_tau")
        span = f" (per seed {min(seeds):+.2f} .. {max(seeds):+.2f})" if seeds else ""
        shown = "n/a" if tau is None else f"{tau:+.2f}"
        print(f"{table.key} agreement: sandbox {part} against {column}: {shown}{span}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=("lm", "probes"))
    ap.add_argument("--mode", help="fixed (the space's rate), fixed@RATE or fair")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument(
        "--data", nargs="+", default=[str(WIKITEXT / "valid.txt"), str(WIKITEXT / "test.txt")]
    )
    ap.add_argument("--report", action="store_true")
    args = ap.parse_args()
    if args.part:
        train_all(args.part, args.mode or "fixed", args.seeds, args.workers, args.data)
    if args.report or not args.part:
        report()


if __name__ == "__main__":
    main()
