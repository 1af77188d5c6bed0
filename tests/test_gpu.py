"""On a CUDA GPU: every sequence mixer computes what it computes on the CPU, decodes as it
runs in parallel, and trains (bf16 autocast, fp16 with its loss scaler, torch.compile) to the
loss it reaches on the CPU in fp32. The whole module needs a GPU and says so where none is;
`test_trainers_device` holds the CPU side of the same trainer."""

from __future__ import annotations

import pytest
import torch
from test_models_decode import CONFIGS, V, decode_logits, max_diff, tokens
from test_trainers_device import FAMILIES, TRAINED, family
from test_trainers_trial import tiny_trial

from archsearch.models import build_model
from archsearch.trainers.trial import TrainConfig, run_trial

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")

# fp32 on both sides, TF32 off: CUDA sums in another order than the CPU (blocked GEMMs, the
# chunked scans' cumulative sums), a few ulp per op that 2 layers and a 48-way head keep below
# 1e-5 of logits of about 1; a mixer that computes something else (a wrong decay, a dropped
# state term, a kernel reading the wrong device's copy) moves them by > 1e-2.
CPU_GPU = 2e-4


@pytest.fixture(autouse=True)
def _exact_fp32():
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize("name", sorted(CONFIGS))
@torch.no_grad()
def test_every_mixer_on_the_gpu_equals_the_cpu_and_decodes_as_it_runs_in_parallel(name):
    torch.manual_seed(0)
    cpu = build_model(CONFIGS[name]).eval()
    gpu = build_model(CONFIGS[name]).eval().cuda()
    gpu.load_state_dict(cpu.state_dict())
    idx = tokens(2, 75)
    want, _ = cpu(idx)
    got, _ = gpu(idx.cuda())
    assert got.device.type == "cuda" and got.shape == (2, 75, V)
    assert max_diff(got.cpu(), want) <= CPU_GPU
    stepped = decode_logits(gpu, idx.cuda(), 41)  # prefill 41 tokens, then one at a time
    assert stepped.device.type == "cuda"
    assert max_diff(stepped.cpu(), want) <= CPU_GPU


@pytest.fixture(scope="module")
def cfg(tmp_path_factory) -> TrainConfig:
    return tiny_trial(str(tmp_path_factory.mktemp("corpus-cache")))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_trains_on_the_gpu_in_bf16_as_on_the_cpu(name, cfg, tmp_path):
    cpu = run_trial(family(name), cfg.replace(device="cpu"), run_dir=tmp_path / "cpu")
    gpu = run_trial(family(name), cfg.replace(precision="bf16"), run_dir=tmp_path / "gpu")
    assert gpu.status == cpu.status == "completed"
    ex = gpu.execution
    assert ex["device"].startswith("cuda") and ex["precision"] == "bf16" and ex["fused_adamw"]
    assert gpu.curve != cpu.curve  # other numerics (a trial that never left the CPU would match)
    assert abs(gpu.metrics["val_loss"] - cpu.metrics["val_loss"]) < TRAINED


@pytest.mark.slow
def test_fp16_trains_on_the_gpu_with_a_loss_scaler(cfg, tmp_path):
    bf16 = run_trial(family("gqa"), cfg.replace(precision="bf16"), run_dir=tmp_path / "bf16")
    fp16 = run_trial(family("gqa"), cfg.replace(precision="fp16"), run_dir=tmp_path / "fp16")
    assert fp16.status == "completed" and fp16.execution["precision"] == "fp16"
    assert abs(fp16.metrics["val_loss"] - bf16.metrics["val_loss"]) < TRAINED


@pytest.mark.slow
def test_a_compiled_trial_on_the_gpu_learns_as_the_eager_one(cfg, tmp_path):
    eager = run_trial(family("gla"), cfg, run_dir=tmp_path / "eager")
    compiled = run_trial(family("gla"), cfg.replace(compile=True), run_dir=tmp_path / "compiled")
    assert compiled.execution["compiled"] is True, compiled.execution.get("compile_fallback")
    assert compiled.execution["device"].startswith("cuda")
    assert abs(compiled.metrics["val_loss"] - eager.metrics["val_loss"]) < 0.02
