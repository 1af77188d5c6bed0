"""Measured latency (`latency.mode=measured`, `archsearch.sweep.measure`): the real model timed in
the runtime `latency.runtime` names; a candidate that does not run there has no latency (its
trial fails with the one-line reason, never a predicted value in its place); a trial whose
measurement takes longer than the heartbeat's grace stays live while the sweep waits for it;
`latency.runtime` with predicted latency must match the runtime the profile was calibrated in."""

from __future__ import annotations

import json
import time

import pytest
import torch
from test_sweep import study_of, sweep

from archsearch.cli import main
from archsearch.space import load_space, sample
from archsearch.study import Status, StudyMeta, StudyWriter, open_storage, records
from archsearch.sweep.drivers import live_trials
from archsearch.sweep.measure import measure_latency
from archsearch.sweep.recorder import record_end, record_measured, trial_ended
from archsearch.sweep.state import Launched, SweepState

TINY = {
    "vocab_size": 64,
    "d_model": 32,
    "n_layers": 1,
    "max_seq_len": 64,
    "attention": {"kind": "gqa", "n_heads": 2, "n_kv_heads": 1},
    "ffn": {"kind": "swiglu", "d_ffn": 64},
}
SETTINGS = {"prompt": 8, "context": 16, "generate": 4}


@pytest.mark.slow
def test_a_model_is_timed_in_executorch_or_says_why_not():
    caller = torch.get_num_threads()
    torch.set_num_threads(2)
    try:  # timed at one thread, the caller's thread count given back
        got = measure_latency(TINY, SETTINGS, repeats=2, runtime="executorch")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(caller)
    assert got["runtime"] == "executorch" and got["node"] == "local"
    assert got["ttft_ms"] > 0 and got["decode_ms"] > 0
    assert got["e2e_ms"] == pytest.approx(got["ttft_ms"] + 4 * got["decode_ms"])
    moe = {**TINY, "moe": {"n_experts": 4, "top_k": 2}}
    got = measure_latency(moe, SETTINGS, repeats=2, runtime="executorch")
    assert set(got) == {"runtime", "not_measured", "node"}
    assert got["not_measured"].startswith("does not run in executorch: torch.export of the")
    assert "\n" not in got["not_measured"]


def _state(tmp_path) -> tuple[SweepState, Launched]:
    space = load_space("tiny")
    meta = StudyMeta.for_space(space, "rpi5", ["rpi5"])
    url = f"sqlite:///{tmp_path / 'study.db'}"
    writer, _ = StudyWriter.create_or_open(
        open_storage(url, heartbeat_s=5, grace_s=30), "tiny", meta, driver="host:1:0.00"
    )
    state = SweepState(
        writer=writer,
        space=space,
        device="rpi5",
        devices=["rpi5"],
        train={},
        run_dir=tmp_path,
        target=1,
    )
    arch = sample(space, 1, 0).candidates[0].arch
    launched = Launched(writer.ask(), arch, {}, time.time(), measure_ref="the Ray task")
    state.by_tune_id["t1"] = launched
    return state, launched


def _final(loss: float) -> dict:
    result = {"status": "completed", "metrics": {"val_loss": loss}, "evals": [], "curve": []}
    return {"final": True, "result_json": json.dumps(result)}


@pytest.mark.slow
def test_a_trial_stays_live_while_its_latency_is_measured_and_fails_without_one(
    tmp_path, monkeypatch
):
    import ray

    state, launched = _state(tmp_path)
    seen = []

    def slow_measurement(ref):  # a remote device timing the model
        seen.append((ref, live_trials(state)))
        return {"runtime": "executorch", "not_measured": "does not run in executorch: x"}

    monkeypatch.setattr(ray, "get", slow_measurement)
    record_end(state, "t1", _final(2.5), None)
    # the heartbeat beats for the trial while the sweep waits (else it is failed as stale and
    # run again, for ever, when a measurement outlasts the grace)
    assert seen == [("the Ray task", [launched.optuna_trial.number])]
    assert state.by_tune_id == {} and live_trials(state) == []
    (rec,) = records(state.writer.study)
    assert rec.status == Status.FAILED.value
    assert rec.reason.endswith(": does not run in executorch: x")
    assert rec.reason.startswith("objective decode_ms")  # not priced by the cost model instead
    assert rec.attrs["measured_latency"]["runtime"] == "executorch"
    assert rec.attrs["metrics"] == {"val_loss": 2.5}  # what training measured is kept


@pytest.mark.slow
def test_a_measured_latency_is_the_trials_objective(tmp_path, monkeypatch):
    import ray

    state, _ = _state(tmp_path)
    times = {"runtime": "onnxruntime", "ttft_ms": 3.0, "decode_ms": 0.25, "e2e_ms": 4.0}
    monkeypatch.setattr(ray, "get", lambda ref: times)
    record_end(state, "t1", _final(2.5), None)
    (rec,) = records(state.writer.study)
    assert rec.status == Status.TRAINED.value
    assert rec.values == [2.5, 0.25]


def test_a_trial_ended_before_its_measurement_is_recorded_once_it_is_in(tmp_path, monkeypatch):
    """Tune says a trial ended before it frees the trial's CPUs; the recorder does not wait
    there (a device may take minutes) but keeps the trial live and records it when the
    measurement is in."""
    import ray

    state, launched = _state(tmp_path)
    times = {"runtime": "torch", "ttft_ms": 3.0, "decode_ms": 0.25, "e2e_ms": 4.0}
    done: list[str] = []
    monkeypatch.setattr(
        ray, "wait", lambda refs, **kw: ([r for r in refs if done], [r for r in refs if not done])
    )
    monkeypatch.setattr(ray, "get", lambda ref: times)
    trial_ended(state, "t1", _final(2.5), None)
    record_measured(state)  # nothing in yet
    assert live_trials(state) == [launched.optuna_trial.number]
    assert [r.status for r in records(state.writer.study)] == ["running"]
    done.append("the Ray task")
    record_measured(state)
    assert state.awaiting_measurement == {} and live_trials(state) == []
    (rec,) = records(state.writer.study)
    assert rec.status == Status.TRAINED.value and rec.values == [2.5, 0.25]


@pytest.mark.slow
def test_a_sweep_measures_on_one_cpu_that_its_trial_holds(tmp_path):
    """A local Ray of one CPU: every trial holds it while its latency waits to be measured
    (a measurement that needed a CPU of Ray's waited for ever on its own trial)."""
    res = sweep(
        tmp_path,
        "trials=2",
        "concurrency=1",
        "ray.num_cpus=1",
        "trainable=archsearch.sweep.testing:synthetic",
        "early_stopping=none",
        "latency.mode=measured",
        "latency.repeats=2",
        timeout=240,  # about 30 s; the deadlock it guards against never ended
    )
    assert res.returncode == 0, res.stderr
    recs = records(study_of(tmp_path / "run"))
    trained = [r for r in recs if r.status == "trained"]
    assert len(trained) == 2 and not [r for r in recs if r.state == "RUNNING"]
    for r in trained:
        measured = r.attrs["measured_latency"]
        assert measured["decode_ms"] > 0 and r.values[1] == pytest.approx(measured["decode_ms"])


def test_predicted_latency_in_a_runtime_the_profile_was_not_calibrated_in_is_refused(
    tmp_path, capsys
):
    code = main(["sweep", "latency.runtime=executorch", f"run_dir={tmp_path / 'run'}", "trials=1"])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1, err
    assert "latency.runtime: 'executorch': device 'rpi5' has no kernel timings" in err
    assert not (tmp_path / "run").exists()


def test_a_measurement_owed_by_a_device_that_left_fails_its_trial_and_the_sweep_gives_up(
    tmp_path, monkeypatch
):
    """While a node advertises the resource, or for `wait_s` after the last one left, a trial
    waits for its measurement; then it fails with the reason, its task is cancelled and the
    sweep gives up (the end of a sweep waited for it for ever). No Ray: its calls are faked."""
    import ray

    from archsearch.sweep import measure, ray_runtime

    state, launched = _state(tmp_path)
    nodes = [{"Alive": True, "Resources": {"edge": 1.0, "CPU": 1.0}}]
    clock = {"now": 0.0}
    cancelled = []
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    monkeypatch.setattr(ray, "wait", lambda refs, **kw: ([], list(refs)))  # never in
    monkeypatch.setattr(ray, "cancel", lambda ref, force: cancelled.append(ref))
    monkeypatch.setattr(ray_runtime.time, "monotonic", lambda: clock["now"])
    state.measure = measure.RemoteMeasurer(lambda arch: "a task", "edge", wait_s=30.0)
    trial_ended(state, "t1", _final(2.5), None)
    record_measured(state)
    nodes.clear()  # the device left
    for now in (1.0, 2.0, 31.0):  # gone, but within the wait (a device may come back)
        clock["now"] = now
        record_measured(state)
        assert live_trials(state) == [launched.optuna_trial.number] and not state.gave_up
    clock["now"] = 32.5
    record_measured(state, wait=True)  # returns: the end of a sweep no longer waits for ever
    (rec,) = records(state.writer.study)
    assert rec.status == Status.FAILED.value and rec.reason.startswith("latency measurement lost")
    assert "'edge'" in rec.reason and "30 s" in rec.reason
    assert state.gave_up and state.gave_up_reason == rec.reason and state.done
    assert cancelled == ["the Ray task"] and state.awaiting_measurement == {}
    assert live_trials(state) == []


def test_a_device_back_within_the_wait_is_not_lost(monkeypatch):
    import ray

    from archsearch.sweep import measure, ray_runtime

    nodes: list = []
    clock = {"now": 0.0}
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    monkeypatch.setattr(ray_runtime.time, "monotonic", lambda: clock["now"])
    measurer = measure.RemoteMeasurer(lambda arch: None, "edge", wait_s=10.0)
    assert measurer.lost() is None  # gone since 0
    clock["now"] = 9.0
    nodes.append({"Alive": True, "Resources": {"edge": 1.0}})  # back
    assert measurer.lost() is None
    nodes.clear()
    clock["now"] = 15.0  # gone again since 15: the wait starts over
    assert measurer.lost() is None
    clock["now"] = 24.0
    assert measurer.lost() is None
    clock["now"] = 25.5
    assert measurer.lost() is not None
    assert measure.RemoteMeasurer(lambda arch: None).lost() is None  # the sweep's own actor
