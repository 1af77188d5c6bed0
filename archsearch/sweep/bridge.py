"""The glue between Optuna (which suggests and stores) and Ray Tune (which runs and stops).

Ray's own `OptunaSearch` is not used, because it gets two things wrong for this job
(`../shared/STACK.md`): a trial that the scheduler stops early is stored as COMPLETE with its
under-trained values (and can land on the Pareto front), and with `TuneConfig(metric=...)` set
it silently turns a multi-objective search single-objective. Here:

- `ArchSearcher` (a Tune `Searcher`) asks Optuna for a trial, lets the space suggest every
  active parameter define-by-run, builds the candidate and prices it with the cost model
  *before* anything trains. Candidates that cannot be built, break a constraint, or repeat an
  architecture already trained (canonical hash) are told to the study at once and never reach
  Tune; only feasible new candidates become Tune trials.
- `StudyRecorder` (a Tune `Callback`) writes every intermediate result as an Optuna
  intermediate value and, when a trial ends, tells the study: COMPLETE only when the trial sent
  its final result after the whole budget; PRUNED when the scheduler stopped it; FAIL with the
  reason when it raised, ran out of memory, produced NaN, or its worker died.

The multi-objective values are the space's objectives in order: training metrics from the
trial, cost metrics (e.g. predicted decode latency on the device) from the cost model.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from archsearch.arch import ArchConfig
from archsearch.space import SearchSpace, build, suggest
from archsearch.space.metrics import MetricSpec
from archsearch.sweep.study import STATUS_TRAINED

SKIP_LIMIT = 500  # consecutive untrainable suggestions before the space counts as exhausted


@dataclass
class Launched:
    optuna_trial: Any
    arch: ArchConfig
    costs: dict[str, float]
    started: float
    measure_ref: Any = None
    intermediate: list[list[float]] = field(default_factory=list)


@dataclass
class SweepState:
    """Everything the searcher and the recorder share (both live in the driver process)."""

    study: Any
    space: SearchSpace
    device: str
    devices: list[str]
    train: dict[str, Any]
    run_dir: Path
    target: int  # trained trials wanted in the study
    trained: int = 0  # trained trials in the study (earlier runs included)
    launched: int = 0
    counts: Counter = field(default_factory=Counter)
    by_tune_id: dict[str, Launched] = field(default_factory=dict)
    done_by_hash: dict[str, int] = field(default_factory=dict)  # arch hash -> optuna number
    running_by_hash: dict[str, int] = field(default_factory=dict)
    pending_duplicates: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))
    exhausted: bool = False
    es_metric: str | None = None
    measure: Any = None  # callable(arch_dict) -> ObjectRef, for latency.mode=measured
    on_change: Any = None  # progress callback

    # -- objectives ---------------------------------------------------------------------------

    @property
    def objective_specs(self) -> list[MetricSpec]:
        return [o.spec.with_device(self.device) for o in self.space.objectives]

    @property
    def training_labels(self) -> list[str]:
        return [s.label for s in self.objective_specs if s.phase == "train"]

    def notify(self) -> None:
        if self.on_change is not None:
            self.on_change(self)


def _set_attrs(trial, attrs: dict[str, Any]) -> None:
    for key, value in attrs.items():
        if isinstance(value, (dict, list)):
            value = json.dumps(value, default=float)
        trial.set_user_attr(key, value)


def _set_constraints(state: SweepState, trial, violations: dict[str, float]) -> None:
    """New style (Optuna 5 `set_constraint`) and old style (the list optuna-dashboard shows)."""
    if not violations:
        return
    for name, v in violations.items():
        trial.set_constraint(name, v)
    state.study._storage.set_trial_system_attr(
        trial._trial_id, "constraints", list(violations.values())
    )


def price(
    space: SearchSpace, devices: list[str], arch: ArchConfig
) -> tuple[dict[str, float], dict[str, Any]]:
    """Cost-model numbers: the space's device-independent metrics, and every device-dependent
    one, with the default TTFT/decode/end-to-end latencies, for every device profile (so
    analysis can redraw the front for another device)."""
    from archsearch.cost import metric_value

    specs = [o.spec for o in space.objectives] + [c.spec for c in space.constraints]
    costs: dict[str, float] = {}
    device_costs: dict[str, dict[str, float]] = {d: {} for d in devices}
    for spec in specs:
        if spec.phase != "cost":
            continue
        if "device" in dict(spec.args):
            for dev in devices:
                s = MetricSpec(
                    spec.metric, tuple((k, dev if k == "device" else v) for k, v in spec.args)
                )
                device_costs[dev][s.label] = metric_value(arch, s)
        else:
            costs[spec.label] = metric_value(arch, spec)
    for metric in ("params", "non_embedding_params", "active_params"):
        costs.setdefault(metric, metric_value(arch, MetricSpec(metric)))
    for dev in devices:
        for metric in ("ttft_ms", "decode_ms", "e2e_ms"):
            from archsearch.space.metrics import METRICS

            args = tuple((k, dev if k == "device" else v) for k, v in METRICS[metric].args.items())
            s = MetricSpec(metric, args)
            device_costs[dev].setdefault(s.label, metric_value(arch, s))
    return costs, device_costs


def _value(label: str, costs: dict, device_costs: dict, device: str) -> float | None:
    if label in costs:
        return costs[label]
    return device_costs.get(device, {}).get(label)


class ArchSearcher:
    """Factory for the Tune searcher (Ray is imported lazily by the runner)."""

    @staticmethod
    def create(state: SweepState):
        from ray.tune.search import Searcher

        class _Searcher(Searcher):
            def suggest(self, trial_id: str):
                return next_candidate(state, trial_id)

            def on_trial_complete(self, trial_id, result=None, error=False):
                pass  # the StudyRecorder callback tells the study (it sees errors too)

        return _Searcher()


def next_candidate(state: SweepState, tune_id: str):
    """Ask Optuna until a candidate worth training comes up; None to wait; FINISHED at the end."""
    from ray.tune.search import Searcher

    if state.launched + state.trained >= state.target or state.exhausted:
        return Searcher.FINISHED
    skipped = 0
    while skipped < SKIP_LIMIT:
        trial = state.study.ask()
        cand = build(state.space, suggest(state.space, trial))
        if not cand.ok:
            _tell_untrained(state, trial, "invalid", f"{cand.reason}: {cand.message}")
            skipped += 1
            continue
        arch = cand.arch
        costs, device_costs = price(state.space, state.devices, arch)
        violations = {}
        reasons = []
        for c in state.space.constraints:
            spec = c.spec.with_device(state.device)
            value = _value(spec.label, costs, device_costs, state.device)
            violations[c.name] = c.violation(value)
            if violations[c.name] > 0:
                reasons.append(f"{c.describe()} but is {value:.4g}")
        base = {
            "summary": arch.summary(),
            "family": arch.family,
            "arch_hash": arch.arch_hash,
            "attention_share": arch.attention_share,
            "params": costs["params"],
            "active_params": costs["active_params"],
            "arch": arch.to_dict(),
            "costs": costs,
            "device_costs": device_costs,
        }
        _set_constraints(state, trial, violations)
        if reasons:
            _tell_untrained(state, trial, "infeasible", "; ".join(reasons), base)
            skipped += 1
            continue
        h = arch.arch_hash
        if h in state.done_by_hash:
            _copy_duplicate(state, trial, state.done_by_hash[h], base)
            skipped += 1
            continue
        if h in state.running_by_hash:
            _set_attrs(
                trial,
                {
                    **base,
                    "status": "duplicate",
                    "reason": f"same architecture as trial {state.running_by_hash[h]} (running)",
                },
            )
            state.pending_duplicates[h].append(trial)
            skipped += 1
            continue
        return _launch(state, tune_id, trial, arch, costs, base)
    state.exhausted = True
    state.notify()
    return Searcher.FINISHED


def _launch(state: SweepState, tune_id: str, trial, arch: ArchConfig, costs, base) -> dict:
    from archsearch.trainers.config import TrainConfig
    from archsearch.trainers.trial import trial_key

    cfg = TrainConfig.from_dict(state.train, prefix="train")
    trial_dir = state.run_dir / "trials" / f"{arch.arch_hash}-{trial_key(arch, cfg)[:8]}"
    _set_attrs(trial, {**base, "status": "running", "reason": "", "trial_dir": str(trial_dir)})
    launched = Launched(trial, arch, base["costs"], time.time())
    if state.measure is not None:
        launched.measure_ref = state.measure(arch.to_dict())
    state.by_tune_id[tune_id] = launched
    state.running_by_hash[arch.arch_hash] = trial.number
    state.launched += 1
    state.counts["launched"] += 1
    state.notify()
    return {
        "arch": arch.to_dict(),
        "train": cfg.to_dict(),
        "trial_dir": str(trial_dir),
        "metrics": state.training_labels,
        "optuna_number": trial.number,
    }


def _tell_untrained(
    state: SweepState, trial, status: str, reason: str, attrs: dict[str, Any] | None = None
) -> None:
    import optuna

    _set_attrs(trial, {**(attrs or {}), "status": status, "reason": reason})
    state.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    state.counts[status] += 1
    state.notify()


def _copy_duplicate(state: SweepState, trial, original: int, base: dict[str, Any]) -> None:
    """Tell a repeat of an architecture what its first trial got, without training it again."""
    import optuna

    first = state.study.get_trials(deepcopy=False)[original]
    attrs = {
        **base,
        "status": "duplicate",
        "reason": f"same architecture as trial {original}",
        "duplicate_of": original,
    }
    _set_attrs(trial, attrs)
    if first.state == optuna.trial.TrialState.COMPLETE:
        state.study.tell(trial, first.values)
    else:
        state.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    state.counts["duplicate"] += 1
    state.notify()


# ---- results ----------------------------------------------------------------------------------


class StudyRecorder:
    @staticmethod
    def create(state: SweepState):
        from ray.tune import Callback

        class _Recorder(Callback):
            def on_trial_result(self, iteration, trials, trial, result, **info):
                record_intermediate(state, trial.trial_id, result)

            def on_trial_complete(self, iteration, trials, trial, **info):
                record_end(state, trial.trial_id, trial.last_result or {}, error=None)

            def on_trial_error(self, iteration, trials, trial, **info):
                record_end(state, trial.trial_id, trial.last_result or {}, error=error_text(trial))

        return _Recorder()


def error_text(trial) -> str:
    """The last line of the trial's exception (Tune keeps the whole traceback in a file)."""
    try:
        err = trial.get_error()
    except Exception:
        err = None
    text = str(err) if err is not None else ""
    if not text and getattr(trial, "error_file", None):
        try:
            text = Path(trial.error_file).read_text()
        except OSError:
            text = ""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "error" in ln or "Killed" in ln or "died" in ln:
            return ln[:500]
    return (lines[-1] if lines else "the trial's worker failed")[:500]


def record_intermediate(state: SweepState, tune_id: str, result: dict[str, Any]) -> None:
    """Keep the early-stopping metric at each eval point (stored with the trial at its end:
    Optuna has no intermediate values for multi-objective studies)."""
    launched = state.by_tune_id.get(tune_id)
    if launched is None or result.get("final"):
        return
    metric = state.es_metric
    value = result.get(metric) if metric else None
    if value is not None and math.isfinite(value):
        launched.intermediate.append([float(result.get("fraction", 0.0)), float(value)])


def record_end(state: SweepState, tune_id: str, result: dict[str, Any], error: str | None) -> None:
    import optuna

    launched = state.by_tune_id.pop(tune_id, None)
    if launched is None:  # already told (Tune may report an error after completion)
        return
    trial = launched.optuna_trial
    h = launched.arch.arch_hash
    state.running_by_hash.pop(h, None)
    state.launched -= 1
    state.trained += 1
    attrs: dict[str, Any] = {
        "node": result.get("node", ""),
        "orchestration_s": round(time.time() - launched.started, 3),
    }
    measured = None
    if launched.measure_ref is not None:
        import ray

        try:
            measured = ray.get(launched.measure_ref)
            attrs["measured_latency"] = measured
        except Exception as err:  # the measurement node failed
            error = error or f"latency measurement failed: {err}"
    values = None
    if error is None and result.get("final"):
        res = json.loads(result["result_json"])
        attrs.update(_result_attrs(res))
        if res["status"] != "completed":
            status, reason = "failed", res.get("failure_reason") or "the trial failed"
        else:
            values, missing = _objective_values(state, res["metrics"], launched, measured)
            status, reason = (STATUS_TRAINED, "") if values else ("failed", missing)
    elif error is None:
        status = "stopped_early"
        reason = (
            f"stopped by the early-stopping rule at {result.get('fraction', 0):.0%} of "
            f"the budget ({state.es_metric}={result.get(state.es_metric, float('nan')):.4g})"
        )
        attrs["budget"] = {
            "fraction": result.get("fraction", 0.0),
            "tokens": result.get("tokens"),
            "flops": result.get("flops"),
        }
    else:
        status, reason = "failed", error
    _set_attrs(trial, {**attrs, "status": status, "reason": reason})
    if status == STATUS_TRAINED:
        state.study.tell(trial, values)
        state.done_by_hash[h] = trial.number
    elif status == "stopped_early":
        state.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        state.done_by_hash[h] = trial.number
    else:
        state.study.tell(trial, state=optuna.trial.TrialState.FAIL)
        state.done_by_hash[h] = trial.number
    state.counts[status] += 1
    for dup in state.pending_duplicates.pop(h, []):
        _copy_duplicate(state, dup, trial.number, {})
        state.counts["duplicate"] -= 1  # counted when it was first seen
    state.notify()


def _result_attrs(res: dict[str, Any]) -> dict[str, Any]:
    evals = res.get("evals", [])
    curve = res.get("curve", [])
    stride = max(1, len(curve) // 200)
    return {
        "budget": {
            "budget": res.get("budget"),
            "tokens": res.get("tokens"),
            "flops": res.get("flops"),
            "steps": res.get("steps"),
            "fraction": res.get("fraction"),
            "flops_per_token": res.get("flops_per_token"),
        },
        "curve": {"evals": evals, "train": curve[::stride]},
        "train_metrics": {
            k: res.get(k)
            for k in (
                "tokens_per_s",
                "wall_s",
                "train_s",
                "peak_rss_bytes",
                "n_params",
                "resumed_from_step",
            )
        },
        "probes": res.get("probes", {}),
        "metrics": res.get("metrics", {}),
    }


def _objective_values(
    state: SweepState,
    metrics: dict[str, float],
    launched: Launched,
    measured: dict[str, float] | None,
) -> tuple[list[float] | None, str]:
    values = []
    for spec in state.objective_specs:
        if spec.phase == "train":
            v = metrics.get(spec.label)
        elif measured is not None and spec.metric in measured:
            v = measured[spec.metric]
        else:
            v = launched.costs.get(spec.label)
            if v is None:
                from archsearch.cost import metric_value

                v = metric_value(launched.arch, spec)
        if v is None or not math.isfinite(v):
            return None, f"the trial produced no finite value for objective {spec.label}"
        values.append(float(v))
    return values, ""
