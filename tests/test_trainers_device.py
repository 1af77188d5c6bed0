"""Device-agnostic trials on this CPU machine (archsearch.trainers.device): cpu and auto,
bf16 autocast, fp16 and cuda refused before anything runs, gradient accumulation, checkpoints
that hold CPU tensors and resume under other execution settings, out of memory recorded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import tiny_arch as tiny
from test_trainers_trial import tiny_trial

from archsearch.arch import LINEAR_FAMILIES, ArchConfig
from archsearch.errors import UserError
from archsearch.trainers import trial as T
from archsearch.trainers.device import Placement
from archsearch.trainers.trial import TrainConfig, run_trial

# Gradient accumulation and data parallelism change only the order of fp32 sums (the mean of two
# half-batch means instead of one mean): about 1 ulp (6e-8) per reduction, measured 3e-8
# relative on the final loss after 24 steps. 1e-5 leaves a 300x margin, while a wrong split
# (a worker training on the other's rows, summing instead of averaging) moves it by > 1e-2.
REL = 1e-5


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("corpus-cache"))


@pytest.fixture
def cfg(cache) -> TrainConfig:
    return tiny_trial(cache, keep_checkpoint=True)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="auto is the CPU only where no GPU is")
def test_cpu_and_auto_train_the_same_on_the_cpu(cfg, tmp_path):
    cpu = run_trial(tiny(), cfg.replace(device="cpu"), run_dir=tmp_path / "cpu")
    auto = run_trial(tiny(), cfg, run_dir=tmp_path / "auto")
    assert cpu.curve == auto.curve and cpu.metrics == auto.metrics
    ex = auto.execution
    assert ex["device"] == "cpu" and ex["workers"] == 1 and ex["gpu_ids"] is None
    assert ex["fused_adamw"] and ex["worker_devices"][0].endswith(":cpu")
    # inside Ray with a GPU assigned but no CUDA here: auto stays on the CPU, and says so
    ray = run_trial(tiny(), cfg, run_dir=tmp_path / "ray", placement=Placement(gpu_ids=("0",)))
    assert ray.execution["device"] == "cpu" and ray.execution["gpu_ids"] == ["0"]
    assert ray.curve == cpu.curve


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_auto_trains_on_the_gpu_where_there_is_one_and_learns_as_the_cpu_does(cfg, tmp_path):
    cpu = run_trial(tiny(), cfg.replace(device="cpu"), run_dir=tmp_path / "cpu")
    auto = run_trial(tiny(), cfg.replace(precision="bf16"), run_dir=tmp_path / "auto")
    assert auto.status == "completed" and auto.execution["device"].startswith("cuda")
    assert auto.execution["precision"] == "bf16"
    assert abs(auto.metrics["val_loss"] - cpu.metrics["val_loss"]) < 0.05


@pytest.mark.slow
def test_bf16_autocasts_the_matmuls_on_the_cpu(cfg, tmp_path, monkeypatch):
    seen: set[torch.dtype] = set()
    build = T._build

    def watched(arch, seed):
        model = build(arch, seed)
        model.lm_head.register_forward_hook(lambda m, a, out: seen.add(out.dtype))
        return model

    monkeypatch.setattr(T, "_build", watched)
    fp32 = run_trial(tiny(), cfg, run_dir=tmp_path / "fp32")
    assert seen == {torch.float32}
    seen.clear()
    bf16 = run_trial(tiny(), cfg.replace(precision="bf16"), run_dir=tmp_path / "bf16")
    assert seen == {torch.bfloat16} and bf16.execution["precision"] == "bf16"
    assert bf16.curve != fp32.curve  # other numerics, same learning
    assert abs(bf16.metrics["val_loss"] - fp32.metrics["val_loss"]) < 0.1


# every mixer under autocast: the sequence mixers and MoE, one each at width 64
FAMILIES = {
    "gqa": {"attention": {"kind": "gqa", "n_heads": 4, "n_kv_heads": 2}},
    "mla": {"attention": {"kind": "mla", "n_heads": 4, "kv_rank": 16}},
    **{f: {"layers": {"mixer": "linear"}, "linear": {"family": f}} for f in LINEAR_FAMILIES},
    "mcsd": {"layers": {"mixer": "mcsd"}, "mcsd": {"n_channels": 4}},
    "hybrid_moe": {
        "n_layers": 4,
        "layers": {"pattern": "LLLN"},
        "linear": {"family": "gla"},
        "moe": {"n_experts": 4, "top_k": 2, "n_shared": 1},
    },
}
# a trial's validation loss in bf16 (or fp16) against fp32 after the same 24 seeded steps:
# 0.001-0.03 apart on this machine, while a trial that does not learn stays near ln(256) = 5.5,
# over 1 above where these end
TRAINED = 0.1


def family(name: str) -> ArchConfig:
    data = {
        "name": f"autocast-{name}",
        "vocab_size": 256,
        "d_model": 64,
        "n_layers": 2,
        "max_seq_len": 64,
        "attention": {"kind": "gqa", "n_heads": 4, "n_kv_heads": 2},
        "linear": {"n_heads": 2},
        "ffn": {"kind": "swiglu", "d_ffn": 128},
    }
    for section, values in FAMILIES[name].items():
        data[section] = {**data.get(section, {}), **values} if isinstance(values, dict) else values
    return ArchConfig.from_dict(data)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_trains_under_bf16_autocast_on_the_cpu(name, cfg, tmp_path):
    """DeltaNet's triangular solve and MoE's scatter of expert outputs once failed in bf16."""
    fp32 = run_trial(family(name), cfg.replace(device="cpu"), run_dir=tmp_path / "fp32")
    bf16 = run_trial(
        family(name), cfg.replace(device="cpu", precision="bf16"), run_dir=tmp_path / "bf16"
    )
    assert bf16.status == fp32.status == "completed" and bf16.curve != fp32.curve
    assert abs(bf16.metrics["val_loss"] - fp32.metrics["val_loss"]) < TRAINED


def test_fp16_and_missing_devices_are_refused_before_anything_runs(cfg, tmp_path):
    cases = [(cfg.replace(precision="fp16", device="cpu"), "precision: fp16 needs a GPU")]
    if not torch.cuda.is_available():  # auto is the CPU
        cases.append((cfg.replace(precision="fp16"), "precision: fp16 needs a GPU"))
        cases.append((cfg.replace(device="cuda"), "device: cuda requested but"))
    if not torch.backends.mps.is_available():
        cases.append((cfg.replace(device="mps"), "device: mps requested but"))
    for i, (bad, message) in enumerate(cases):
        with pytest.raises(UserError) as err:
            run_trial(tiny(), bad, run_dir=tmp_path / str(i))
        assert str(err.value).startswith(message), str(err.value)
        assert not (tmp_path / str(i)).exists()


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
@pytest.mark.parametrize(
    ("setting", "fragment"),
    [("device=cuda", "device: cuda requested but"), ("precision=fp16", "fp16 needs a GPU")],
)
def test_the_train_command_refuses_in_one_line(tmp_path, setting, fragment):
    (tmp_path / "arch.yaml").write_text(json.dumps(tiny().to_dict()))
    exe = Path(sys.executable).with_name("archsearch")
    res = subprocess.run(
        [
            str(exe),
            "train",
            "arch=arch.yaml",
            "budget=steps:2",
            f"run_dir={tmp_path / 'run'}",
            setting,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], res.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_micro_batches_accumulate_to_the_global_batch(cfg, tmp_path):
    whole = run_trial(tiny(), cfg, run_dir=tmp_path / "whole")
    micro = run_trial(tiny(), cfg.replace(micro_batch_size=1), run_dir=tmp_path / "micro")
    assert micro.execution["accumulation_steps"] == 4 and micro.tokens == whole.tokens
    for a, b in zip(whole.curve, micro.curve):
        assert a[:2] == b[:2] and b[2] == pytest.approx(a[2], rel=REL)
    assert micro.metrics["val_loss"] == pytest.approx(whole.metrics["val_loss"], rel=REL)
    with pytest.raises(UserError, match="micro_batch_size: must divide batch_size 4"):
        cfg.replace(micro_batch_size=3)


class Preempted(Exception):
    pass


def _tensors(state):
    if isinstance(state, torch.Tensor):
        yield state
    elif isinstance(state, dict):
        for v in state.values():
            yield from _tensors(v)
    elif isinstance(state, (list, tuple)):
        for v in state:
            yield from _tensors(v)


@pytest.mark.slow
def test_checkpoints_hold_cpu_tensors_and_resume_under_other_execution_settings(cfg, tmp_path):
    reference = run_trial(tiny(), cfg.replace(device="cpu"), run_dir=tmp_path / "ref")

    def preempt(metrics):
        if metrics["fraction"] == 0.5:
            raise Preempted

    with pytest.raises(Preempted):
        run_trial(tiny(), cfg.replace(device="cpu"), run_dir=tmp_path / "run", report=preempt)
    state = torch.load(tmp_path / "run" / "checkpoint.pt", map_location="cpu", weights_only=False)
    tensors = list(_tensors({"model": state["model"], "optimizer": state["optimizer"]}))
    assert len(tensors) > 10 and {t.device.type for t in tensors} == {"cpu"}
    # another device setting and micro batch resume the same trial (they are not in its key)
    other = cfg.replace(device="auto", micro_batch_size=2)
    resumed = run_trial(tiny(), other, run_dir=tmp_path / "run")
    assert resumed.resumed_from_step == 12 and resumed.steps == 24
    assert resumed.execution["micro_batch_size"] == 2
    assert resumed.curve[:3] == reference.curve[:3]  # before the checkpoint: as trained
    final, expected = resumed.metrics["val_loss"], reference.metrics["val_loss"]
    assert final == pytest.approx(expected, rel=REL)
    with pytest.raises(UserError, match="another architecture or training config"):
        run_trial(
            tiny(), cfg.replace(precision="bf16", budget="steps:30"), run_dir=tmp_path / "run"
        )


@pytest.mark.slow
def test_an_allocation_the_device_refuses_fails_the_trial_with_the_figure(
    cfg, tmp_path, monkeypatch
):
    build = T._build

    def greedy(arch, seed):
        model = build(arch, seed)
        calls = {"n": 0}

        def hook(module, args, output):
            calls["n"] += 1
            if calls["n"] == 3:
                torch.empty(2**50, dtype=torch.uint8)  # 1 PiB: the allocator refuses
            return output

        model.lm_head.register_forward_hook(hook)
        return model

    monkeypatch.setattr(T, "_build", greedy)
    r = run_trial(tiny(), cfg.replace(device="cpu"), run_dir=tmp_path)  # the CPU's allocator
    assert r.status == "failed" and r.steps == 2
    assert r.failure_reason.startswith("out of memory on cpu: ")
    assert str(2**50) in r.failure_reason  # the figure it needed
    assert json.loads((tmp_path / "result.json").read_text())["failure_reason"] == r.failure_reason
