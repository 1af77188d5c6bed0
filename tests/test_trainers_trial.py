"""Sandbox trials end to end on tiny models: reproducibility, learning, FLOPs-matched budgets,
early stopping, resuming after preemption and failure handling (archsearch.trainers.trial)."""

from __future__ import annotations

import dataclasses
import json
import math
import signal
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import tiny_arch as tiny
from hypothesis import example, given, settings
from hypothesis import strategies as st

from archsearch.cost import train_flops_per_token
from archsearch.errors import UserError
from archsearch.metrics import PROBE_TASKS
from archsearch.trainers import probes
from archsearch.trainers import trial as T
from archsearch.trainers.trial import TrainConfig, run_trial, train_tokens


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("corpus-cache"))


def tiny_trial(cache_dir: str, **overrides) -> TrainConfig:
    """24 steps of 4 x 32 tokens with two evaluations: the trainer tests' trial."""
    return TrainConfig(
        budget="steps:24",
        batch_size=4,
        seq_len=32,
        lr=3e-3,
        eval_at=(0.5, 1.0),
        eval_batches=2,
        log_every=4,
        cache_dir=cache_dir,
        **overrides,
    )


@pytest.fixture
def cfg(cache) -> TrainConfig:
    return tiny_trial(cache)


@pytest.mark.slow
def test_same_seed_same_losses_other_seed_other_losses(cfg, tmp_path):
    a = run_trial(tiny(), cfg, run_dir=tmp_path / "a")
    b = run_trial(tiny(), cfg, run_dir=tmp_path / "b")
    assert a.status == b.status == "completed"
    assert a.curve == b.curve and len(a.curve) == 6
    assert [e["val_loss"] for e in a.evals] == [e["val_loss"] for e in b.evals]
    c = run_trial(tiny(), cfg.replace(seed=1), run_dir=tmp_path / "c")
    assert c.curve != a.curve


@pytest.mark.slow
def test_loss_decreases_on_the_embedded_corpus(cfg, tmp_path):
    r = run_trial(tiny(), cfg.replace(budget="steps:60", eval_at=(0.1, 1.0)), run_dir=tmp_path)
    first, last = r.evals
    assert last["val_loss"] < first["val_loss"] - 0.5
    assert r.curve[-1][2] < r.curve[0][2] - 0.5
    assert r.metrics["val_ppl"] == pytest.approx(math.exp(r.metrics["val_loss"]))
    assert r.metrics["val_bpb"] == pytest.approx(r.metrics["val_loss"] / math.log(2))  # bytes
    assert r.steps == 60 and r.tokens == 60 * 4 * 32 and r.fraction == 1.0
    assert r.tokens_per_s > 0 and r.wall_s >= r.train_s > 0 and r.peak_rss_bytes > 10**7
    assert r.n_params == sum(p.numel() for p in T._build(tiny(), 0).parameters())
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["metrics"] == r.metrics and not (tmp_path / "checkpoint.pt").exists()


@pytest.mark.slow
def test_loss_decreases_on_every_probe_task(cfg, tmp_path):
    probe_cfg = cfg.replace(
        objective="probe",
        probe_steps=40,
        probe_seq_len=32,
        probe_batch_size=16,
        probe_eval_size=32,
        log_every=10,
    )
    r = run_trial(tiny(), probe_cfg, run_dir=tmp_path)
    assert r.status == "completed" and list(r.probes) == list(PROBE_TASKS)
    for task, p in r.probes.items():
        assert p["curve"][-1][1] < p["curve"][0][1], task
        assert 0.0 <= r.metrics[f"probe_acc[{task}]"] <= 1.0
    assert r.metrics["probe_acc"] == pytest.approx(
        sum(p["acc"] for p in r.probes.values()) / len(PROBE_TASKS)
    )
    assert r.steps == 0 and "val_loss" not in r.metrics  # no LM run for objective=probe
    # probe models get an untied LM head (the tied one favours repeating the input token)
    untied = dataclasses.replace(tiny(), tie_embeddings=False)
    assert r.n_params == sum(p.numel() for p in T._build(untied, 0).parameters())
    tied = run_trial(
        tiny(),
        probe_cfg.replace(probe_untied_head=False, probe_tasks=("recall",)),
        run_dir=tmp_path / "tied",
    )
    assert tied.n_params == sum(p.numel() for p in T._build(tiny(), 0).parameters())


@pytest.mark.slow
def test_flops_budgets_give_each_architecture_the_same_compute(cfg, tmp_path):
    small, big = tiny(d=32), tiny(d=64)
    budget = 2e9
    cfg = cfg.replace(budget=f"flops:{budget:g}")
    results = [run_trial(a, cfg, run_dir=tmp_path / a.name) for a in (small, big)]
    per_step = cfg.batch_size * cfg.seq_len
    for arch, r in zip((small, big), results):
        fpt = train_flops_per_token(arch, cfg.seq_len)
        assert r.flops == pytest.approx(r.tokens * fpt) and r.flops_per_token == fpt
        assert budget - per_step * fpt < r.flops <= budget  # the same FLOPs, to one step
    assert results[0].tokens > 1.5 * results[1].tokens  # the cheaper model sees more tokens


@settings(max_examples=40, deadline=None)
@given(flops=st.floats(1e8, 1e15), batch=st.integers(1, 32), seq=st.integers(8, 64))
@example(flops=499999999999756.0, batch=1, seq=14)  # one more step lands 500 FLOPs past it
def test_flops_budget_arithmetic(flops, batch, seq):
    """Whole steps within the budget, and one more step past it (to float rounding, which
    loosens each bound: it once tightened the upper one and failed a correct budget)."""
    arch = tiny()
    cfg = TrainConfig(budget=f"flops:{flops!r}", batch_size=batch, seq_len=seq)
    tokens = train_tokens(arch, cfg)
    fpt = train_flops_per_token(arch, seq)
    assert tokens % (batch * seq) == 0
    assert tokens * fpt <= flops * (1 + 1e-12)
    assert (tokens + batch * seq) * fpt > flops * (1 - 1e-12)


class Preempted(Exception):
    pass


@pytest.mark.slow
def test_resume_continues_from_the_checkpoint(cfg, tmp_path):
    cfg = cfg.replace(eval_at=(0.25, 0.5, 0.75, 1.0))
    reference = run_trial(tiny(), cfg, run_dir=tmp_path / "ref")

    def preempt(metrics):
        if metrics["fraction"] == 0.5:
            raise Preempted

    with pytest.raises(Preempted):
        run_trial(tiny(), cfg, run_dir=tmp_path / "run", report=preempt)
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert state["result"]["steps"] == 12 and not (tmp_path / "run" / "result.json").exists()

    seen = []
    resumed = run_trial(tiny(), cfg, run_dir=tmp_path / "run", report=seen.append)
    assert resumed.resumed_from_step == 12
    assert [m["fraction"] for m in seen] == [0.75, 1.0]  # only the points after the checkpoint
    assert resumed.curve == reference.curve  # bit-identical continuation, not a restart
    assert resumed.evals[-1]["val_loss"] == reference.evals[-1]["val_loss"]
    assert resumed.steps == reference.steps == 24


@pytest.mark.slow
def test_resume_after_the_process_is_killed(cfg, tmp_path):
    reference = run_trial(tiny(), cfg, run_dir=tmp_path / "ref")
    script = textwrap.dedent(
        f"""
        import json, os, signal, sys
        from archsearch.arch import ArchConfig
        from archsearch.trainers.trial import TrainConfig, run_trial
        arch = ArchConfig.from_dict(json.loads({json.dumps(json.dumps(tiny().to_dict()))}))
        cfg = TrainConfig.from_dict(json.loads({json.dumps(json.dumps(cfg.to_dict()))}))
        def kill(metrics):
            os.kill(os.getpid(), signal.SIGKILL)  # preempted right after the first checkpoint
        run_trial(arch, cfg, run_dir=sys.argv[1], report=kill)
        """
    )
    run_dir = tmp_path / "killed"
    proc = subprocess.run([sys.executable, "-c", script, str(run_dir)], capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    assert (run_dir / "checkpoint.pt").exists() and not (run_dir / "result.json").exists()
    resumed = run_trial(tiny(), cfg, run_dir=run_dir)
    assert resumed.resumed_from_step == 12
    assert resumed.curve == reference.curve
    assert [e["val_loss"] for e in resumed.evals] == [e["val_loss"] for e in reference.evals]


@pytest.mark.slow
def test_report_true_stops_early_and_the_result_is_kept(cfg, tmp_path):
    r = run_trial(tiny(), cfg, run_dir=tmp_path, report=lambda m: m["fraction"] >= 0.5)
    assert r.status == "completed" and r.stopped_early and r.fraction == 0.5
    assert r.steps == 12 and len(r.evals) == 1 and r.metrics["val_loss"] == r.evals[0]["val_loss"]
    again = run_trial(tiny(), cfg, run_dir=tmp_path, report=lambda m: pytest.fail("retrained"))
    assert again == r  # a finished trial's saved result comes back as it was
    with pytest.raises(UserError, match=r"run_dir: .* another architecture or training config"):
        run_trial(tiny(d=64), cfg, run_dir=tmp_path)
    fresh = run_trial(tiny(), cfg, run_dir=tmp_path, resume=False)
    assert fresh.steps == 24 and not fresh.stopped_early


@pytest.mark.slow
def test_a_huge_learning_rate_fails_with_a_reason(cfg, tmp_path):
    r = run_trial(tiny(), cfg.replace(lr=1e6, grad_clip=0.0, warmup=0.0), run_dir=tmp_path)
    assert r.status == "failed"
    assert re_search(r"step \d+: (training loss|gradient norm) became (nan|inf)", r.failure_reason)
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "failed"


@pytest.mark.slow
def test_an_injected_nan_fails_the_trial(cfg, tmp_path, monkeypatch):
    build = T._build

    def poisoned(arch, seed):
        model = build(arch, seed)
        calls = {"n": 0}

        def hook(module, args, output):
            calls["n"] += 1
            return output * float("nan") if calls["n"] == 7 else output

        model.lm_head.register_forward_hook(hook)
        return model

    monkeypatch.setattr(T, "_build", poisoned)
    r = run_trial(tiny(), cfg, run_dir=tmp_path)
    lr = cfg.lr_schedule(7 / 24)  # the 7th step (index 6) is the first to see the NaN
    assert (r.status, r.failure_reason) == (
        "failed",
        f"step 6: training loss became nan (lr {lr:.3g})",
    )
    assert r.steps == 6


@pytest.mark.slow
def test_time_budget_follows_the_clock(cfg, tmp_path):
    r = run_trial(tiny(), cfg.replace(budget="time:1.5s"), run_dir=tmp_path)
    assert r.status == "completed" and r.planned_steps is None
    assert 1.5 <= r.train_s < 3.0 and r.steps > 5
    assert [e["fraction"] for e in r.evals] == [0.5, 1.0]


@pytest.mark.slow
def test_schedule_and_precision_are_applied(cfg, tmp_path):
    infos = []
    wsdc = cfg.replace(schedule="wsdc", warmup=0.1, decay=0.3, constant=0.2, precision="bf16")
    r = run_trial(tiny(), wsdc, run_dir=tmp_path, progress=lambda f, i: infos.append((f, i)))
    assert r.status == "completed" and math.isfinite(r.metrics["val_loss"])
    sched = wsdc.lr_schedule
    assert [i["lr"] for _, i in infos] == [sched(i["step"] / 24) for _, i in infos]
    assert [f for f, _ in infos] == [i["step"] / 24 for _, i in infos]
    assert infos[-1][1]["lr"] == pytest.approx(3e-4)  # the constant phase at min_lr


@pytest.mark.slow
def test_settings_that_do_not_fit_the_architecture(cfg, tmp_path):
    with pytest.raises(UserError, match="tokenizer: the byte tokenizer has 256 tokens"):
        run_trial(tiny(vocab=65), cfg, run_dir=tmp_path / "a")
    with pytest.raises(UserError, match="seq_len: 128 exceeds the architecture's max_seq_len"):
        run_trial(tiny(), cfg.replace(seq_len=128), run_dir=tmp_path / "b")
    r = run_trial(tiny(), cfg.replace(budget="tokens:10"), run_dir=tmp_path / "c")
    assert r.status == "failed" and "less than one step" in r.failure_reason


def re_search(pattern: str, text: str | None) -> bool:
    import re

    return bool(text and re.search(pattern, text))


@pytest.mark.slow
def test_a_probe_task_at_several_seeds_reports_their_mean_spread_and_whether_it_resolved(
    cfg, tmp_path
):
    probe_cfg = cfg.replace(
        objective="probe",
        probe_tasks=("recall",),
        probe_steps=32,
        probe_seeds=2,
        probe_seq_len=32,
        probe_batch_size=16,
        probe_eval_size=32,
    )
    r = run_trial(tiny(), probe_cfg, run_dir=tmp_path)
    got = r.probes["recall"]
    assert len(got["accs"]) == 2 and got["acc"] == pytest.approx(sum(got["accs"]) / 2)
    assert got["acc_std"] == pytest.approx(abs(got["accs"][0] - got["accs"][1]) / math.sqrt(2))
    assert [len(c) for c in got["acc_curves"]] == [8, 8]  # checked as it trained
    assert all(c[-1] == [32, a] for c, a in zip(got["acc_curves"], got["accs"]))
    assert got["resolved"] == probes.resolved(got["acc_curves"])
    # seed 0 of two is the run of one seed: the same model, data and accuracy
    one = run_trial(tiny(), probe_cfg.replace(probe_seeds=1), run_dir=tmp_path / "one")
    assert one.probes["recall"]["accs"] == got["accs"][:1]
