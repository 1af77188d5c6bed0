"""How far a sandbox loss holds: seed noise, larger budgets and extrapolation (issue 12).

Reads the ground truth of `benchmarks/loss_truth.py` (real sandbox trials: every candidate of
`benchmarks/spaces/search_small.yaml` at 160K tokens with seeds 0-2, at 640K with seeds 0-1, at
1.6M = 10x with seeds 0-1; 12 candidates of the default `tiny` space at its 1M tokens with two
seeds) and prints and saves (`benchmarks/results/loss_axis.json`):

- Kendall tau between seeds at each budget (seed noise), the pooled seed standard deviation,
  and the budget at which the seed tau reaches 0.9 (log-linear between measured budgets);
- Kendall tau and Spearman between the sandbox loss and the 10x loss, and how many sandbox
  Pareto-front members (val_loss vs Pi 5 decode latency) stay on the 10x front;
- the extrapolation error of the 10x loss predicted from the 1x curves
  (`archsearch.trainers.extrapolate`): with the law's shape fitted on the 1x curves plus the
  10x runs of the architectures a `confirm factor=10 n=4` would train (the sandbox front and
  four spread over the ranking), predicting the others; and leave-one-out over all 40;
- the error of a run's end predicted from its eval points so far (Pareto-aware early stopping's
  prediction), per share of the run seen.

    python benchmarks/loss_truth.py          # the ground truth (cached; ~45 min on 2 quiet cores)
    python benchmarks/bench_loss_axis.py     # the figures (seconds)
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
from scipy import stats

HERE = Path(__file__).parent
OUT = HERE / "results" / "loss_axis.json"
SANDBOX, TEN_X = "tokens:160K", "tokens:1.6M"


def table() -> dict:
    """(space, budget, seed) -> {arch_hash: result}."""
    import loss_truth

    out: dict = {}
    for row in loss_truth.seed0_from_search_truth() + loss_truth.load():
        key = (row["space"], row["budget"], row["seed"])
        out.setdefault(key, {})[row["arch_hash"]] = row["result"]
    return out


def loss(result: dict) -> float:
    return float(result["metrics"]["val_loss"])


def seed_figures(runs: dict, space: str, budget: str) -> dict | None:
    """Kendall tau between every pair of seeds at one budget (over the architectures both
    trained), and the pooled standard deviation over seeds."""
    min_archs = 3  # a seed counts once it trained this many architectures
    seeds = sorted(
        seed
        for (sp, b, seed), got in runs.items()
        if sp == space and b == budget and len(got) >= min_archs
    )
    if len(seeds) < 2:
        return None
    taus = []
    for a, b in itertools.combinations(seeds, 2):
        common = sorted(set(runs[(space, budget, a)]) & set(runs[(space, budget, b)]))
        if len(common) < min_archs:
            continue
        x = [loss(runs[(space, budget, a)][h]) for h in common]
        y = [loss(runs[(space, budget, b)][h]) for h in common]
        taus.append(float(stats.kendalltau(x, y).statistic))
    archs = set.union(*(set(runs[(space, budget, s)]) for s in seeds))
    spreads = []  # each architecture's sample variance over the seeds it has, with its dof
    for h in archs:
        got = [loss(runs[(space, budget, s)][h]) for s in seeds if h in runs[(space, budget, s)]]
        if len(got) >= 2:
            spreads.append((np.var(got, ddof=1), len(got) - 1))
    pooled = float(np.sqrt(sum(v * d for v, d in spreads) / sum(d for _, d in spreads)))
    return {
        "budget": budget,
        "seeds": seeds,
        "architectures": len(spreads),  # trained with two seeds or more
        "kendall_tau_between_seeds": float(np.mean(taus)),
        "pairs": taus,
        "pooled_seed_std_nats": pooled,
    }


def tau_09_budget(points: list[tuple[float, float]]) -> str:
    """The budget (tokens) where the seed tau reaches 0.9, log-linear between measured ones."""
    points = sorted(points)
    for (b0, t0), (b1, t1) in itertools.pairwise(points):
        if t0 < 0.9 <= t1:
            f = (0.9 - t0) / (t1 - t0)
            return f"{math.exp(math.log(b0) + f * (math.log(b1) - math.log(b0))):.3g} tokens"
    if points and points[0][1] >= 0.9:
        return f"<= {points[0][0]:.3g} tokens"
    return f"not reached by {points[-1][0]:.3g} tokens (the largest measured)" if points else "-"


def objectives(space, arch) -> tuple[float, bool]:
    """(Pi 5 decode latency in ms as the space's second objective, feasible)."""
    from archsearch.latency import metric_value

    latency = metric_value(arch, space.objectives[1].spec.on_device("rpi5", only_unset=True))
    feasible = all(
        c.violation(metric_value(arch, c.spec.on_device("rpi5", only_unset=True))) <= 0
        for c in space.constraints
    )
    return latency, feasible


def front(points: np.ndarray) -> np.ndarray:
    from archsearch.analysis.hypervolume import non_dominated_minimised

    return non_dominated_minimised(points)


def confirm_choice(hashes: list[str], sandbox: dict, on_front: set[str], n: int = 4) -> list[str]:
    """What `archsearch confirm n=4` trains: the front, and n others spread over the ranking."""
    rest = sorted((h for h in hashes if h not in on_front), key=lambda h: loss(sandbox[h]))
    picks = {round(i * (len(rest) - 1) / (n - 1)) for i in range(n)} if len(rest) >= n else set()
    return sorted(on_front) + [rest[i] for i in sorted(picks)]


def extrapolation(sandbox: dict, big: dict, confirmed: list[str], archs: dict) -> dict:
    """The 10x loss predicted from the 1x curves: by the law alone and by the law corrected
    across architectures by the confirmations (`archsearch.trainers.transfer`), for the
    architectures a `confirm n=4` leaves unconfirmed and leave-one-out over all."""
    from archsearch.trainers.extrapolate import Run, fit_shape, predict_loss
    from archsearch.trainers.transfer import Example, Traits, fit_transfer

    def run(h, res):
        return Run.of(h, res["evals"], res["config"], res["n_params"])

    base = [run(h, r) for h, r in sandbox.items()]
    traits = {
        h: Traits.of(archs[h], r["n_params"], r["flops_per_token"]) for h, r in sandbox.items()
    }

    def predict(h, shape):
        r = sandbox[h]
        return predict_loss(
            {"evals": r["evals"]}, r["config"], TEN_X, shape=shape, params=r["n_params"]
        )

    def transfer(shape, known):
        """The law with `shape` corrected by the confirmations `known`."""
        examples = [Example(traits[k], predict(k, shape).value, loss(big[k])) for k in known]
        return fit_transfer(examples)

    def figures(pairs):
        errs = np.array([p.value / loss(big[h]) - 1 for h, p in pairs])
        within = [abs(p.value - loss(big[h])) <= 2 * p.std for h, p in pairs]
        return {
            "n": len(pairs),
            "mape_pct": float(np.mean(np.abs(errs)) * 100),
            "bias_pct": float(np.mean(errs) * 100),
            "max_abs_pct": float(np.max(np.abs(errs)) * 100),
            "within_2sigma": float(np.mean(within)),
            "kendall_tau_predicted_vs_10x": float(
                stats.kendalltau([p.value for _, p in pairs], [loss(big[h]) for h, _ in pairs])[0]
            ),
        }

    known = [h for h in confirmed if h in big]
    shape = fit_shape(base + [run(h, big[h]) for h in known])
    unconfirmed = [h for h in big if h not in confirmed]
    held = [(h, predict(h, shape)) for h in unconfirmed]
    by_confirmed = transfer(shape, known)
    held_corrected = [
        (h, by_confirmed.predict(traits[h], predict(h, shape).value)) for h in unconfirmed
    ]
    loo, loo_corrected = [], []
    for h in big:
        others = [k for k in big if k != h]
        shape_h = fit_shape(base + [run(k, big[k]) for k in others])
        loo.append((h, predict(h, shape_h)))
        loo_corrected.append(
            (h, transfer(shape_h, others).predict(traits[h], predict(h, shape_h).value))
        )
    naive = np.array([loss(sandbox[h]) for h in big])
    ratio = [loss(big[h]) / loss(sandbox[h]) for h in known]
    ratio_errs = [abs(loss(sandbox[h]) * np.mean(ratio) / loss(big[h]) - 1) for h in unconfirmed]
    return {
        "law": "Tissue et al. 2024 LR-annealing law; shape shared by the study (with a floor "
        "linear in ln parameters), amplitude per trial",
        "shape_from_confirmed": {
            "alpha": shape.alpha,
            "floor": shape.floor,
            "anneal": shape.anneal,
            "size_slope": shape.size_slope,
            "confirmed": len(known),
        },
        "held_out_after_confirm_n4": figures(held),
        "leave_one_out_all": figures(loo),
        "corrected": "the law corrected across architectures by the confirmations "
        "(archsearch.trainers.transfer: BayesianRidge of ln(confirmed / law) on ln law, "
        "ln params, ln FLOPs per token, mixer shares)",
        "corrected_held_out_after_confirm_n4": figures(held_corrected),
        "corrected_leave_one_out_all": figures(loo_corrected),
        "baseline_mean_ratio_of_confirmed_mape_pct": float(np.mean(ratio_errs) * 100),
        "sandbox_loss_as_is_mape_pct": float(
            np.mean(np.abs(naive / np.array([loss(big[h]) for h in big]) - 1)) * 100
        ),
    }


def within_run(runs: dict) -> dict:
    """How well a run's end is predicted from its eval points so far (what Pareto-aware early
    stopping asks, `predict_final` with its default prior): per share seen, the RMS and bias
    of the relative error and the share of runs that end below the optimistic bound
    (prediction - 2 std, where the rule's doubt ends), on the runs the prior was fitted on
    (seed 0 at 160K and 1.6M) and on others (seed 1 at 160K, seed 0 at 640K)."""
    from archsearch.trainers.extrapolate import MIN_FRACTION, PRIOR_WITHIN_RUN, Run, predict_final

    out: dict = {"prior_within_run": [list(row) for row in PRIOR_WITHIN_RUN.within_run]}
    for budget, seed in ((SANDBOX, 0), (TEN_X, 0), (SANDBOX, 1), ("tokens:640K", 0)):
        by_share: dict[float, list[tuple[float, float]]] = {}
        for res in runs.get(("search_small", budget, seed), {}).values():
            evals, final = res["evals"], loss(res)
            total = Run.of("r", evals, res["config"]).total
            for i in range(1, len(evals)):
                share = round(evals[i - 1]["step"] / total, 2)
                if share < MIN_FRACTION:  # predict_final refuses: its error was never measured
                    continue
                p = predict_final(evals[:i], res["config"], params=res["n_params"])
                by_share.setdefault(share, []).append((p.value / final - 1, p.value - final, p.std))
        rows = {}
        for share, got in sorted(by_share.items()):
            rel = np.array([g[0] for g in got])
            rows[f"{share:.2f}"] = {
                "n": len(got),
                "rms_pct": float(np.sqrt(np.mean(rel**2)) * 100),
                "bias_pct": float(np.mean(rel) * 100),
                "ends_below_prediction_minus_2_std": float(np.mean([d > 2 * s for _, d, s in got])),
            }
        out[f"{budget} seed {seed}"] = rows
        print(
            f"end of a run predicted within it, {budget} seed {seed}: "
            + "; ".join(
                f"from {k}: RMS {v['rms_pct']:.1f}%, bias {v['bias_pct']:+.1f}%, "
                f"{v['ends_below_prediction_minus_2_std']:.0%} end below prediction - 2 std"
                for k, v in rows.items()
            )
        )
    return out


def main() -> None:
    from archsearch.space import assignments, build, parse_space_file

    runs = table()
    space = parse_space_file(HERE / "spaces" / "search_small.yaml")
    archs = {}
    for a in assignments(space):
        arch = build(space, a).arch
        archs[arch.arch_hash] = arch
    out: dict = {"search_small": {}, "tiny": {}}
    noise = []
    for budget in (SANDBOX, "tokens:640K", TEN_X):
        got = seed_figures(runs, "search_small", budget)
        if got:
            noise.append(got)
            print(
                f"search_small {budget}: Kendall tau between seeds "
                f"{got['kendall_tau_between_seeds']:.3f}"
                f" ({len(got['seeds'])} seeds, {got['architectures']} archs), pooled seed std "
                f"{got['pooled_seed_std_nats']:.4f} nats/token"
            )
    out["search_small"]["seed_noise"] = noise
    from archsearch.trainers.config import parse_budget

    points = [(parse_budget(n["budget"]).amount, n["kendall_tau_between_seeds"]) for n in noise]
    out["search_small"]["tau_0.9_budget"] = tau_09_budget(points)
    print(f"search_small: seed tau reaches 0.9 at {out['search_small']['tau_0.9_budget']}")
    sandbox = runs[("search_small", SANDBOX, 0)]
    big = runs.get(("search_small", TEN_X, 0), {})
    common = sorted(set(sandbox) & set(big))
    if len(common) >= 3:
        x = [loss(sandbox[h]) for h in common]
        y = [loss(big[h]) for h in common]
        lat = {h: objectives(space, archs[h]) for h in sandbox}
        feas = [h for h in sandbox if lat[h][1]]
        pts1 = np.array([[loss(sandbox[h]), lat[h][0]] for h in feas])
        on1 = {h for h, m in zip(feas, front(pts1)) if m}
        feas10 = [h for h in feas if h in big]
        pts10 = np.array([[loss(big[h]), lat[h][0]] for h in feas10])
        on10 = {h for h, m in zip(feas10, front(pts10)) if m}
        ranking = {
            "architectures": len(common),
            "kendall_tau_sandbox_vs_10x": float(stats.kendalltau(x, y).statistic),
            "spearman_sandbox_vs_10x": float(stats.spearmanr(x, y).statistic),
            "sandbox_front": len(on1),
            "sandbox_front_kept_on_10x_front": len(on1 & on10),
            "sandbox_front_measured_at_10x": len(on1 & set(feas10)),
        }
        out["search_small"]["sandbox_vs_10x"] = ranking
        print(
            f"search_small sandbox vs 10x ({len(common)} archs): Kendall tau "
            f"{ranking['kendall_tau_sandbox_vs_10x']:.3f}, Spearman "
            f"{ranking['spearman_sandbox_vs_10x']:.3f}; sandbox front kept on the 10x front: "
            f"{len(on1 & on10)} of {len(on1)}"
        )
        confirmed = confirm_choice(feas, sandbox, on1)
        ex = extrapolation(
            {h: sandbox[h] for h in sandbox}, {h: big[h] for h in common}, confirmed, archs
        )
        out["search_small"]["extrapolation"] = ex
        for name in (
            "held_out_after_confirm_n4",
            "leave_one_out_all",
            "corrected_held_out_after_confirm_n4",
            "corrected_leave_one_out_all",
        ):
            f = ex[name]
            print(
                f"extrapolation 1x -> 10x, {name} ({f['n']} archs): MAPE {f['mape_pct']:.2f}%, "
                f"bias {f['bias_pct']:+.2f}%, max {f['max_abs_pct']:.1f}%, "
                f"{f['within_2sigma']:.0%} within +-2 sigma, tau(pred, 10x) "
                f"{f['kendall_tau_predicted_vs_10x']:.3f}"
            )
        print(
            f"  baselines: mean 10x/1x ratio of the confirmed: MAPE "
            f"{ex['baseline_mean_ratio_of_confirmed_mape_pct']:.2f}%; the sandbox loss as is: "
            f"{ex['sandbox_loss_as_is_mape_pct']:.1f}%"
        )
    out["search_small"]["within_run"] = within_run(runs)
    tiny = seed_figures(runs, "tiny", "tokens:1M")
    if tiny:
        out["tiny"]["seed_noise"] = [tiny]
        print(
            f"tiny tokens:1M: Kendall tau between seeds {tiny['kendall_tau_between_seeds']:.3f} "
            f"({tiny['architectures']} archs), pooled seed std "
            f"{tiny['pooled_seed_std_nats']:.4f} nats/token"
        )
    OUT.write_text(json.dumps(out, indent=1))
    print(f"saved {OUT}")


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(HERE))
    main()
