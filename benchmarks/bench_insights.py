"""How far `archsearch insights` can be trusted: interval coverage on studies with planted
effects, and which of Optuna's importance evaluators finds what was planted.

1. **Coverage.** `--studies` planted studies (`tests/studies.make_planted_study`: 48
   architectures, seed noise N(0, 0.02) on the loss, other seeds each), each analysed as the
   command does (`design`, `effects.main_effects`, `effects.interactions`, `--resamples`
   resamples): the share of studies whose 95% interval covers each planted size, and how often
   the null factor (`noise`, nothing planted) is called resolved. Nominal: 95% and 5%.
2. **Importance evaluators**, on the same studies' loss (each as a single-objective in-memory
   study, the inactive conditional parameter as a level "-", as `analysis.importance` builds
   it): Optuna's fANOVA, PED-ANOVA and mean decrease in impurity, each asked once per study.
   Planted: `quality` moves the loss most (0.10-0.18 nats/token), `width`, `linear.family` and
   `layers.mixer` less (0.02-0.06), `noise` and `speed` not at all. Scored: the share of
   studies whose top parameter is `quality`, and whose two last are `noise` and `speed`, and
   the seconds per evaluation.
3. **Time** of the whole analysis of one planted study (two objectives, two fronts).

    python benchmarks/bench_insights.py              # 40 studies (minutes)
    python benchmarks/bench_insights.py --studies 10
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the planted study's writer


def coverage(studies: int, resamples: int) -> dict:
    from studies import PLANTED, make_planted_study

    from archsearch.analysis.design import design, observe
    from archsearch.analysis.effects import interactions, main_effects
    from archsearch.study import load

    truth = {  # planted sizes as the additive model estimates them (see effects' docstring)
        ("val_loss", "width", "128"): PLANTED["width=128"],
        ("val_loss", "linear.family", "retnet"): PLANTED["linear.family=retnet"],
        ("val_loss", "quality", "high"): 0.10 + 0.08 * 32 / 48,
        ("val_loss", "layers.mixer", "linear"): 0.02 + 0.08 / 2,
        ("val_loss", "noise", "b"): 0.0,
        ("val_loss", "speed", "fast"): 0.0,
        ("latency", "speed", "fast"): -30.0,
        ("latency", "noise", "b"): 0.0,
    }
    hits: dict[str, list[bool]] = {}
    resolved_null: list[bool] = []
    widths: dict[str, list[float]] = {}
    seconds = []
    for seed in range(studies):
        with tempfile.TemporaryDirectory() as tmp:
            info = make_planted_study(Path(tmp) / "s.db", seed=seed, extras=False)
            d = design(load(info["url"]))
            t0 = time.perf_counter()
            for label in info["objectives"]:
                o = observe(d, label, "minimize")
                which = "val_loss" if label == "val_loss" else "latency"
                for e in main_effects(d, o, resamples=resamples, seed=seed):
                    key = (which, e.factor, str(e.level))
                    if key in truth and e.interval is not None:
                        name = "/".join(key)
                        hits.setdefault(name, []).append(
                            e.interval.low <= truth[key] <= e.interval.high
                        )
                        widths.setdefault(name, []).append(e.interval.half_width)
                        if key == ("val_loss", "noise", "b"):
                            resolved_null.append(e.resolved)
                if which == "val_loss":
                    for i in interactions(d, o, resamples=resamples, seed=seed):
                        if set(i.factors) == {"layers.mixer", "quality"}:
                            name = "val_loss/quality x layers.mixer"
                            planted = PLANTED["quality=high x layers.mixer=linear"]
                            hits.setdefault(name, []).append(
                                i.interval.low <= planted <= i.interval.high
                            )
                        elif "noise" in i.factors:
                            hits.setdefault("val_loss/any x noise (null)", []).append(not i.notable)
            seconds.append(time.perf_counter() - t0)
        print(f"study {seed}: analysed in {seconds[-1]:.1f} s", flush=True)
    return {
        "studies": studies,
        "resamples": resamples,
        "covered": {k: float(np.mean(v)) for k, v in hits.items()},
        "mean_half_width": {k: float(np.mean(v)) for k, v in widths.items()},
        "null_called_resolved": float(np.mean(resolved_null)),
        "seconds_per_study": float(np.mean(seconds)),
    }


def evaluators(studies: int) -> dict:
    import optuna
    from optuna.distributions import CategoricalDistribution
    from studies import make_planted_study

    from archsearch.analysis.design import design, observe
    from archsearch.analysis.importance import level_key
    from archsearch.study import load

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    made = {
        "fanova": lambda s: optuna.importance.FanovaImportanceEvaluator(seed=s),
        "ped_anova": lambda s: optuna.importance.PedAnovaImportanceEvaluator(),
        "mean_decrease_impurity": lambda s: (
            optuna.importance.MeanDecreaseImpurityImportanceEvaluator(seed=s)
        ),
    }
    top, bottom, seconds = ({k: [] for k in made} for _ in range(3))
    for seed in range(studies):
        with tempfile.TemporaryDirectory() as tmp:
            info = make_planted_study(Path(tmp) / "s.db", seed=100 + seed, extras=False)
            d = design(load(info["url"]))
        o = observe(d, "val_loss", "minimize")
        dists = {
            f.name: CategoricalDistribution(sorted({level_key(v) for v in f.values}))
            for f in d.factors
        }
        trials = [
            optuna.trial.create_trial(
                params={f.name: level_key(f.values[i]) for f in d.factors},
                distributions=dists,
                value=float(o.values[i]),
            )
            for i in range(len(d.trials))
        ]
        for name, make in made.items():
            study = optuna.create_study()
            study.add_trials(trials)
            t0 = time.perf_counter()
            got = optuna.importance.get_param_importances(study, evaluator=make(seed))
            seconds[name].append(time.perf_counter() - t0)
            order = sorted(got, key=lambda k: -got[k])
            top[name].append(order[0] == "quality")
            bottom[name].append(set(order[-2:]) == {"noise", "speed"})
    return {
        name: {
            "top_is_quality": float(np.mean(top[name])),
            "last_two_are_the_nulls": float(np.mean(bottom[name])),
            "seconds_per_evaluation": float(np.mean(seconds[name])),
        }
        for name in made
    }


def whole(resamples: int) -> dict:
    from studies import make_planted_study

    from archsearch.analysis.insights import insights
    from archsearch.study import load

    with tempfile.TemporaryDirectory() as tmp:
        info = make_planted_study(Path(tmp) / "s.db", seed=0)
        data = load(info["url"])
        t0 = time.perf_counter()
        insights(data, ["rpi5"], fronts=["rpi5", "jetson_orin_nx"], resamples=resamples)
        return {"seconds": time.perf_counter() - t0, "trials": 48, "objectives": 2, "fronts": 2}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--studies", type=int, default=40)
    ap.add_argument("--resamples", type=int, default=400)
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from bench_search_efficiency import provenance

    t0 = time.time()
    got = {
        "coverage": coverage(args.studies, args.resamples),
        "importance_evaluators": evaluators(args.studies),
        "whole_analysis": whole(args.resamples),
    }
    print(json.dumps(got, indent=1))
    out = HERE / "results" / "insights.json"
    out.write_text(json.dumps({**provenance(time.time() - t0), **got}, indent=1) + "\n")
    print(f"saved {out}")


if __name__ == "__main__":
    main()
