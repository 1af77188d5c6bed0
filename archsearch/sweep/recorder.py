"""The sweep's recorder: a Ray Tune callback that tells the study how each trial ended.

COMPLETE only when the trial sent its final result after the whole budget; PRUNED when the
early-stopping rule stopped it; FAIL with the reason when it raised, ran out of memory,
produced NaN, or its worker died. The objective values are the space's objectives in order:
training metrics from the trial, cost metrics (e.g. predicted decode latency on the device)
from the cost model, or measured latencies where the sweep measures them.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from archsearch.study import Status
from archsearch.sweep.measure import MEASURED
from archsearch.sweep.searcher import tell_duplicate
from archsearch.sweep.state import Launched, SweepState

__all__ = [
    "create_recorder",
    "ended_run",
    "error_text",
    "record_end",
    "record_intermediate",
    "record_measured",
    "result_attrs",
    "trial_ended",
]

BUDGET_KEYS = ("budget", "tokens", "flops", "steps", "fraction", "flops_per_token")
POLL_S = 1.0  # seconds between looks at the measurer while the sweep's end waits for it


def create_recorder(state: SweepState):
    """The Tune `Callback` of a sweep."""
    from ray.tune import Callback

    class StudyRecorder(Callback):
        def on_trial_result(self, iteration, trials, trial, result, **info):
            record_intermediate(state, trial.trial_id, result)

        def on_trial_complete(self, iteration, trials, trial, **info):
            trial_ended(state, trial.trial_id, trial.last_result or {}, error=None)

        def on_trial_error(self, iteration, trials, trial, **info):
            trial_ended(state, trial.trial_id, trial.last_result or {}, error=error_text(trial))

        def on_step_end(self, iteration, trials, **info):
            record_measured(state)

    return StudyRecorder()


def trial_ended(state: SweepState, tune_id: str, result: dict[str, Any], error: str | None) -> None:
    """Record a trial Tune has ended; or, while its latency is still being measured (a device
    may take minutes), keep it until `record_measured` finds the measurement in, so Tune goes
    on with the other trials meanwhile. The trial stays live in the study until then."""
    launched = state.by_tune_id.get(tune_id)
    if launched is not None and launched.measure_ref is not None:
        import ray

        ready, _ = ray.wait([launched.measure_ref], timeout=0)
        if not ready:
            state.awaiting_measurement[tune_id] = (result, error)
            return
    record_end(state, tune_id, result, error)


def record_measured(state: SweepState, wait: bool = False) -> None:
    """Record the ended trials whose latency measurement is in; with `wait`, all of them. Once
    the measurer is lost (its device left the cluster: `RemoteMeasurer.lost`), the trials still
    waiting fail with its reason, their measurements are cancelled and the sweep gives up."""
    if not state.awaiting_measurement:  # every step of Tune's loop calls this: nothing to do
        return
    import ray

    while state.awaiting_measurement:
        refs = {state.by_tune_id[t].measure_ref: t for t in state.awaiting_measurement}
        timeout = POLL_S if wait else 0
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        for ref in ready:
            tune_id = refs.pop(ref)
            result, error = state.awaiting_measurement.pop(tune_id)
            record_end(state, tune_id, result, error)
        lost = state.measure.lost() if refs and state.measure is not None else None
        if lost:
            for ref, tune_id in refs.items():
                ray.cancel(ref, force=True)
                state.by_tune_id[tune_id].measure_ref = None
                result, error = state.awaiting_measurement.pop(tune_id)
                record_end(state, tune_id, result, error or lost)
            state.gave_up, state.gave_up_reason = True, lost
        if not wait:
            return


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
    launched.latest = {
        k: float(v)
        for k, v in result.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    state.notify("evaluated", launched)


def ended_run(
    result: dict[str, Any], error: str | None, attrs: dict[str, Any]
) -> tuple[dict[str, Any] | None, str | None]:
    """How a Tune trial of the trainable ended: (its final result record when it completed,
    else None; why it failed, else None). The final record's attributes go into `attrs`. A
    trial that ended without its final result and without an error was stopped by the
    scheduler: (None, None). Shared by the sweep's recorder and the retraining runner."""
    if error is not None:
        return None, error
    if not result.get("final"):
        return None, None
    res = json.loads(result["result_json"])
    attrs.update(result_attrs(res))
    if res["status"] != "completed":
        return None, res.get("failure_reason") or "the trial failed"
    return res, None


def record_end(state: SweepState, tune_id: str, result: dict[str, Any], error: str | None) -> None:
    launched = state.by_tune_id.get(tune_id)
    if launched is None:  # already told (Tune may report an error after completion)
        state.stop_reasons.pop(tune_id, None)
        return
    measured, measure_error = None, None
    if launched.measure_ref is not None:  # in by now (`trial_ended`), or waited for here
        import ray

        try:
            measured = ray.get(launched.measure_ref)
        except Exception as err:  # the measurement node failed
            measure_error = f"latency measurement failed: {err}"
    state.by_tune_id.pop(tune_id)
    stop_reason = state.stop_reasons.pop(tune_id, None)  # set by a rule that explains itself
    error = error or measure_error
    trial = launched.optuna_trial
    h = launched.arch.arch_hash
    state.running_by_hash.pop(h, None)
    state.launched -= 1
    state.trial_walls.append(time.time() - launched.started)
    attrs: dict[str, Any] = {
        "node": result.get("node", ""),
        "orchestration_s": round(time.time() - launched.started, 3),
    }
    if measured is not None:
        attrs["measured_latency"] = measured
    values = None
    res, failure = ended_run(result, error, attrs)
    if res is not None:
        values, missing = _objective_values(state, res, launched, measured, attrs)
        status, reason = (Status.TRAINED, "") if values else (Status.FAILED, missing)
    elif failure is None:  # ended before its final result, by no error: stopped early
        status = Status.STOPPED_EARLY
        reason = stop_reason or (
            f"stopped by the early-stopping rule at {result.get('fraction', 0):.0%} of "
            f"the budget ({state.es_metric}={result.get(state.es_metric, float('nan')):.4g})"
        )
        attrs["budget"] = {
            "fraction": result.get("fraction", 0.0),
            "tokens": result.get("tokens"),
            "flops": result.get("flops"),
        }
    else:
        status, reason = Status.FAILED, failure
    state.writer.finish(trial, status, reason, attrs, values)
    state.done_by_hash[h] = trial.number
    state.counts[status.value] += 1
    if status == Status.TRAINED:
        state.trained += 1
    elif status == Status.FAILED:
        state.failed += 1
        if state.max_failures and state.failed >= state.max_failures:
            state.gave_up = True
    launched.latest.update(_final_numbers(attrs))
    launched.latest["reason"] = reason  # type: ignore[assignment]
    for dup in state.pending_duplicates.pop(h, []):
        tell_duplicate(state, dup, trial.number, {})
    event = {Status.TRAINED: "finished", Status.STOPPED_EARLY: "stopped"}.get(status, "failed")
    state.notify(event, launched)


def _final_numbers(attrs: dict[str, Any]) -> dict[str, float]:
    """What the progress line shows of an ended trial: its loss and tokens/s."""
    metrics = attrs.get("metrics") or {}
    out = {k: metrics[k] for k in ("val_loss", "val_bpb") if k in metrics}
    tps = (attrs.get("train_metrics") or {}).get("tokens_per_s")
    if tps:
        out["tokens_per_s"] = tps
    return out


def result_attrs(res: dict[str, Any]) -> dict[str, Any]:
    evals = res.get("evals", [])
    curve = res.get("curve", [])
    stride = max(1, len(curve) // 200)
    return {
        "budget": {
            k: res.get(k)
            for k in ("budget", "tokens", "flops", "steps", "fraction", "flops_per_token")
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
        "execution": res.get("execution", {}),
        **({"lr_search": res["lr_search"]} if res.get("lr_search") else {}),
    }


def _objective_values(
    state: SweepState,
    res: dict[str, Any],
    launched: Launched,
    measured: dict[str, float] | None,
    attrs: dict[str, Any],
) -> tuple[list[float] | None, str]:
    values = []
    for spec in state.objective_specs:
        if spec.phase == "train":
            try:
                v = training_value(spec, res, attrs)
            except ValueError as err:
                return None, f"objective {spec.label}: {err}"
        elif measured is not None and spec.metric in MEASURED:
            if "not_measured" in measured:  # never priced instead: measured, or no value
                return None, f"objective {spec.label}: {measured['not_measured']}"
            v = measured[spec.metric]
        else:
            v = launched.costs.get(spec.label)
            if v is None:
                from archsearch.latency import metric_value

                v = metric_value(launched.arch, spec)
        if v is None or not math.isfinite(v):
            return None, f"the trial produced no finite value for objective {spec.label}"
        values.append(float(v))
    return values, ""


def training_value(spec, res: dict[str, Any], attrs: dict[str, Any]) -> float | None:
    """A training objective of a finished trial result: measured (`res["metrics"]`), or, for a
    loss predicted at another budget (`val_loss[tokens=100M]`), extrapolated from the trial's
    eval points (`archsearch.trainers.extrapolate`), the prediction and its error kept in
    `attrs["predicted"][label]`. ValueError when the curve cannot be fitted."""
    if spec.predicted_at is None:
        return res.get("metrics", {}).get(spec.label)
    from archsearch.trainers.extrapolate import predict_loss

    params = res.get("n_params") or attrs.get("params")
    got = predict_loss(
        {"evals": res.get("evals") or []}, res["config"], spec.predicted_at, params=params
    )
    attrs.setdefault("predicted", {})[spec.label] = {
        "value": got.value,
        "std": got.std,
        "law": got.law,
        "from_tokens": res.get("tokens"),
    }
    return got.value
