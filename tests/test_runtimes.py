"""Deploy runtimes (`archsearch.runtimes`): a candidate's prefill and decode step exported through
torch.export to ONNX Runtime and to ExecuTorch (XNNPACK), with the decode state carried through
the runtime; the runtime's logits equal PyTorch's; a candidate that does not export gets a
one-line reason; `archsearch profile runtime=...` end to end."""

from __future__ import annotations

import json
import sys

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archsearch.arch import ArchConfig
from archsearch.cli import main
from archsearch.models import build_model
from archsearch.runtimes import (
    EXECUTORCH_MISSING,
    LOGIT_TOLERANCE,
    ExportError,
    deploy,
    logit_error,
    prepare,
)

# the tests that share the module's exported programs run on one pytest-xdist worker
# (`make test`: `--dist loadgroup`)
SHARED = pytest.mark.xdist_group("runtimes_exported")


BASE = {
    "vocab_size": 64,
    "d_model": 32,
    "n_layers": 3,
    "max_seq_len": 64,
    "tie_embeddings": True,
    "attention": {"kind": "gqa", "n_heads": 2, "n_kv_heads": 1},
    "linear": {"family": "gla", "n_heads": 2},
    "mcsd": {"n_channels": 4},
    "ffn": {"kind": "swiglu", "d_ffn": 64},
}
# one export covers several families: GQA (a growing KV cache, RoPE at the symbolic position),
# GLA (a recurrent state, per-channel decay), MCSD (position-dependent normalisation); then MLA
# (latent cache) with Mamba2 (conv state and SSM state)
HYBRID = {**BASE, "name": "gqa_gla_mcsd", "layers": {"pattern": "NLM"}}
MLA_MAMBA = {
    **BASE,
    "name": "mla_mamba2",
    "n_layers": 2,
    "layers": {"pattern": "NL"},
    "attention": {"kind": "mla", "n_heads": 2, "kv_rank": 16, "head_dim": 8, "rope_dim": 4},
    "linear": {"family": "mamba2", "n_heads": 2},
}
MOE = {**BASE, "name": "tiny_moe", "n_layers": 1, "moe": {"n_experts": 4, "top_k": 2}}
DELTANET = {
    **BASE,
    "name": "tiny_deltanet",
    "n_layers": 1,
    "layers": {"mixer": "linear"},
    "linear": {"family": "deltanet", "n_heads": 2},
}
PROMPT, MAX_CONTEXT = 6, 24


def model_of(spec: dict):
    torch.manual_seed(0)
    return build_model(ArchConfig.from_dict(spec)).eval()


# ExecuTorch lowers a program pair per batch size (each a few seconds): the hybrid only; every
# family's table is benchmarks/bench_runtime_export.py's
@pytest.fixture(
    scope="module",
    params=[("onnxruntime", HYBRID), ("onnxruntime", MLA_MAMBA), ("executorch", HYBRID)],
    ids=lambda p: f"{p[0]}-{p[1]['name']}",
)
def exported(request):
    runtime, spec = request.param
    model = model_of(spec)
    return model, deploy(model, runtime, prompt=PROMPT, max_context=MAX_CONTEXT, threads=1)


@SHARED
@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@pytest.mark.slow
@given(data=st.data(), steps=st.integers(1, MAX_CONTEXT - PROMPT), seed=st.integers(0, 99))
def test_runtime_logits_equal_pytorch_over_prefill_and_decode(exported, data, steps, seed):
    model, run = exported
    # ExecuTorch: batch 1 (lowered by deploy) and 2 (lowered on first use) keep its time down
    batch = data.draw(st.integers(1, 3 if run.runtime == "onnxruntime" else 2), label="batch")
    idx = torch.randint(0, 64, (batch, PROMPT), generator=torch.Generator().manual_seed(seed))
    diff, scale = logit_error(model, run, idx, steps)
    assert scale > 0.1  # real logits, not zeros
    assert diff <= LOGIT_TOLERANCE * scale, (diff, scale)


@SHARED
@pytest.mark.slow
def test_the_state_lives_in_the_runtime_and_grows_with_the_context(exported):
    model, run = exported
    idx = torch.randint(0, 64, (2, PROMPT), generator=torch.Generator().manual_seed(1))
    logits, state = run.prefill(idx)
    assert logits.shape == (2, PROMPT, 64)
    with torch.inference_mode():
        _, ref_state = model.prefill(idx)
    token = logits[:, -1].argmax(-1)
    for _ in range(3):
        _, state = run.step(token, state)
        with torch.inference_mode():
            _, ref_state = model.step(token, ref_state)
    assert state.pos == ref_state.pos == PROMPT + 3
    for got, ref in zip(state.layers, ref_state.layers):
        assert got.keys() == ref.keys()
        for k in ref:  # same shapes (a KV cache of PROMPT + 3 positions) and values
            assert got[k].shape == ref[k].shape
            torch.testing.assert_close(got[k], ref[k], rtol=1e-4, atol=1e-5)
    # a wrong state changes the runtime's answer: the step really reads its state inputs
    wrong = type(state)([{k: v + 1 for k, v in layer.items()} for layer in state.layers], state.pos)
    assert not torch.allclose(run.step(token, wrong)[0], run.step(token, state)[0])


@pytest.mark.parametrize(
    ("runtime", "spec", "start"),
    [
        ("onnxruntime", MOE, "torch.export of the prefill failed at archsearch/models/moe.py:"),
        ("executorch", MOE, "torch.export of the prefill failed at archsearch/models/moe.py:"),
        (  # exports, but the triangular solve of its chunked form is no Core ATen operator
            "executorch",
            DELTANET,
            "ExecuTorch lowering of the prefill failed: SpecViolationError: Operator "
            "torch._ops.aten.linalg_solve_triangular.default is not in Core ATen opset",
        ),
    ],
    ids=["onnxruntime-moe", "executorch-moe", "executorch-deltanet"],
)
@pytest.mark.slow
def test_a_candidate_that_does_not_export_gets_a_one_line_reason(runtime, spec, start):
    model = model_of(spec)
    with pytest.raises(ExportError) as err:
        deploy(model, runtime, prompt=PROMPT, max_context=MAX_CONTEXT, threads=1)
    reason = str(err.value)
    assert "\n" not in reason and len(reason) <= 240
    assert reason.startswith(start), reason


class Step(torch.nn.Module):
    def __init__(self, mixer):
        super().__init__()
        self.mixer = mixer

    def forward(self, x, state, pos):
        return self.mixer.step(x, state, pos)


@pytest.mark.slow
def test_prepare_runs_a_kernel_in_each_runtime():
    torch.manual_seed(0)
    layer, x = torch.nn.Linear(16, 8), torch.randn(4, 16)
    with torch.no_grad():
        expected = layer(x)
    torch.testing.assert_close(prepare("torch", layer, (x,))(), expected)
    (got,) = prepare("onnxruntime", layer, (x,), threads=1)()
    torch.testing.assert_close(torch.from_numpy(got), expected, rtol=1e-5, atol=1e-6)
    # tensors inside a dict (a mixer's state) are graph inputs too; an int is fixed into the graph
    mixer = model_of(HYBRID).blocks[1].mixer  # GLA
    x, state = torch.randn(2, 32), mixer.init_state(2, None, torch.float32)
    with torch.inference_mode():
        y, _ = mixer.step(x, state, 5)
    got = prepare("onnxruntime", Step(mixer), (x, state, 5), threads=1)()
    torch.testing.assert_close(torch.from_numpy(got[0]), y, rtol=1e-5, atol=1e-6)
    got = prepare("executorch", Step(mixer), (x, state, 5), threads=1)()
    torch.testing.assert_close(got[0], y, rtol=1e-5, atol=1e-6)
    x = torch.randn(4, 16)
    (got,) = prepare("executorch", layer, (x,), threads=1)()
    torch.testing.assert_close(got, layer(x).detach(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="unknown runtime 'tflite'"):
        prepare("tflite", layer, (x,))


@pytest.mark.slow
def test_executorch_keeps_the_thread_pool_its_programs_were_loaded_on():
    layer, x = torch.nn.Linear(8, 8), torch.randn(2, 8)
    run = prepare("executorch", layer, (x,), threads=1)
    # a second size would replace the pool under the loaded program, which then hangs
    with pytest.raises(ValueError, match="runs on 1 threads in this process"):
        prepare("executorch", layer, (x,), threads=2)
    torch.testing.assert_close(run()[0], layer(x).detach(), rtol=1e-5, atol=1e-6)


FRESH_PROCESS = """
import torch
from archsearch.runtimes import ExportError, prepare

class Solve(torch.nn.Module):  # lowering refuses it: no Core ATen operator
    def forward(self, a, b):
        return torch.linalg.solve_triangular(a, b, upper=False)

a, b = torch.eye(3) + torch.tril(torch.rand(3, 3), -1), torch.rand(3, 2)
try:
    prepare("executorch", Solve(), (a, b), threads=1)
except ExportError as e:
    print("refused:", str(e).split(":")[0])
layer, x = torch.nn.Linear(4, 4), torch.randn(2, 4)
run = prepare("executorch", layer, (x,), threads=2)  # nothing was loaded on 1 thread
print("ran:", torch.allclose(run()[0], layer(x), atol=1e-5))
try:
    prepare("executorch", layer, (x,), threads=1)
except ValueError as e:
    print("kept:", e)
"""


@pytest.mark.slow
def test_the_thread_pool_is_fixed_by_the_first_program_loaded_not_by_a_failed_lowering():
    import subprocess

    res = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "refused: ExecuTorch lowering of the Solve failed",
        "ran: True",
        "kept: ExecuTorch runs on 2 threads in this process (its programs are loaded on that "
        "pool); 1 needs a new process",
    ]


def test_without_executorch_installed_the_reason_says_how_to_install_it(monkeypatch):
    for name in ("executorch.exir", "executorch.extension.pybindings.portable_lib"):
        monkeypatch.setitem(sys.modules, name, None)  # an import of it raises ImportError
    with pytest.raises(ExportError, match=r"^executorch is not installed: pip install") as err:
        prepare("executorch", torch.nn.Linear(4, 4), (torch.randn(2, 4),), threads=1)
    assert str(err.value) == EXECUTORCH_MISSING


@pytest.mark.slow
@pytest.mark.parametrize(("runtime", "batches"), [("onnxruntime", [1, 2]), ("executorch", [2])])
def test_profile_in_a_deploy_runtime_end_to_end(runtime, batches, tmp_path, capsys):
    paths = []
    for spec in (
        {**BASE, "name": "tiny_gqa", "n_layers": 1, "layers": {"mixer": "attention"}},
        MOE,
    ):
        paths.append(tmp_path / f"{spec['name']}.yaml")
        paths[-1].write_text(yaml.safe_dump(spec))
    out = tmp_path / "profile"
    code = main(
        [
            "profile",
            f"arch={paths[0]},{paths[1]}",
            f"runtime={runtime}",
            "threads=1",
            "prompt=4",
            "lengths=[2,4]",
            f"batches=[{','.join(map(str, batches))}]",
            "repeats=1",
            f"out={out}",
            "format=json",
        ]
    )
    stdout, err = capsys.readouterr()
    assert code == 0, err
    assert "Traceback" not in err + stdout
    gqa, moe = json.loads(stdout)["summary"]
    assert gqa["step_ms"] > 0 and gqa["max_abs_logit_diff"] < 1e-3
    assert moe["not_measured"].startswith(f"does not run in {runtime}: torch.export of the prefill")
    measured = json.loads((out / "profile.json").read_text())["results"][0]["measured"]
    assert measured["runtime"] == runtime
    assert measured["logit_check"]["steps"] == 4
    assert measured["batches"]["2"]["points"][-1]["state_bytes"] > 0
    assert list(measured["batches"]) == [str(b) for b in batches]


@pytest.mark.parametrize(("command", "key"), [("profile", "out"), ("calibrate", "output")])
def test_an_unknown_runtime_is_one_line_and_exit_2(command, key, tmp_path, capsys):
    code = main([command, "runtime=tflite", f"{key}={tmp_path / 'x'}"])
    _out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1, err
    assert "runtime: unknown runtime 'tflite' (known: torch, onnxruntime, executorch)" in err
    assert not any(tmp_path.iterdir())


def test_the_command_line_and_the_sweep_offer_every_runtime():
    from archsearch.cli.schemas import Runtime
    from archsearch.runtimes import RUNTIMES
    from archsearch.sweep.settings import LatencySection

    assert tuple(r.value for r in Runtime) == RUNTIMES
    assert type(LatencySection().runtime) is Runtime


@pytest.mark.parametrize(
    "argv",
    [
        ["calibrate", "runtime=onnxruntime"],
        ["sweep", "latency.mode=measured", "latency.runtime=onnxruntime", "trials=1"],
        ["sweep", "latency.mode=measured", "latency.runtime=executorch", "trials=1"],
    ],
)
def test_a_runtime_whose_packages_are_missing_names_the_extra(argv, tmp_path, capsys, monkeypatch):
    """The deploy runtimes are an extra (`archsearch[runtimes]`): without their packages,
    asking for one is one line that names the extra, exit 2, nothing written."""
    import importlib.util

    real = importlib.util.find_spec
    missing = {"onnx", "onnxscript", "onnxruntime", "executorch"}
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n in missing else real(n, *a)
    )
    key = "output" if argv[0] == "calibrate" else "run_dir"
    assert main([*argv, f"{key}={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'archsearch[runtimes]'" in err, err
    assert "runtime" in err and not any(tmp_path.iterdir())
