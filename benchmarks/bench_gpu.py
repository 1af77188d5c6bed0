"""What only a CUDA GPU can measure: the trainer's model FLOPs utilisation, the
flash-linear-attention kernels against archsearch's own chunked forms, and trials packed
several to one GPU.

    python benchmarks/bench_gpu.py mfu [--batch 32] [--seq 2048] [--steps 10] [--contenders
                                       trial-eager,plain-eager,...] [--tag _x] [--out DIR]
    python benchmarks/bench_gpu.py fla [--batch 8] [--seq 2048] [--out DIR]
    python benchmarks/bench_gpu.py pack [--trials 8] [--budget tokens:500K] [--out DIR]
    python benchmarks/bench_gpu.py mfu --smoke        # the same code on the CPU, tiny shapes

`mfu`: the `edge_125m` preset (a 114M Llama-style GQA model) trained in bf16 autocast at one
shape (batch x seq tokens per step, fused AdamW, gradient clipping, one loss read per step), by
three contenders, each eager and under torch.compile:

- `trial`: archsearch's `run_trial` (its data pipeline, pinned copies, schedule, bookkeeping);
- `plain`: the same model in a bare PyTorch loop over random tokens already on the GPU;
- `hf`: Hugging Face's `LlamaForCausalLM` with the same shapes (SDPA attention, tied head) in
  that bare loop.

Tokens/s is the median step over the timed steps (the first `WARMUP` steps, which hold the
compile, are left out and reported apart). MFU = 6 N tokens/s / peak, N the non-embedding
parameters; `flops_util` counts everything the step multiplies instead (archsearch's exact
training FLOPs per token: attention over visible pairs and the LM head). The peak is the bf16
matrix rate measured first, on this GPU (an 8192^3 product on random data).

`fla`: the chunked GLA (a per-channel decay), Gated DeltaNet (the delta rule with a scalar
decay) and Mamba2 (a scalar decay: fla's simple GLA) training steps, forward and backward in
bf16, at the same inputs through fla's Triton kernels and through archsearch's
`chunk_gated` / `chunk_delta`. Agreement is each side's error against archsearch's form in
fp32 (relative max-abs over the output and every input gradient); speed is the median of
CUDA-event-timed steps.

`pack`: a sweep of the `tiny` space on one GPU (a real Ray, `train.device=cuda`, no early
stopping), `--trials` trials at `gpus_per_trial=0.25` (four trials share the GPU) and then at
1 (one at a time): the wall time of each, and from each stored trial's execution its GPU and
its span, so the most trials that ran at once is read from the study, not assumed.

Each subcommand writes `bench_gpu_<name><tag>.json` under `--out` (default benchmarks/results/) as
each contender finishes, so a run stopped at its time limit keeps what it measured. Without a
CUDA device (and without `--smoke`) it says so in one line and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from archsearch.arch import ArchConfig, load_arch
from archsearch.cost.evaluate import train_flops_per_token
from archsearch.models import build_model
from archsearch.models.linear.common import chunk_delta, chunk_gated
from archsearch.trainers.trial import TrainConfig, run_trial

sys.path.insert(0, str(Path(__file__).parent))
from bench_models_vs_hf import llama_config

RESULTS = Path(__file__).resolve().parent / "results"
WARMUP = 4  # steps left out of the median: the compile, the allocator's first growth


# ---- the machine ------------------------------------------------------------------------------


def machine() -> dict:
    if not torch.cuda.is_available():
        return {"device": "cpu", "torch": torch.__version__}
    p = torch.cuda.get_device_properties(0)
    return {
        "device": p.name,
        "memory_mib": p.total_memory // 2**20,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
    }


def matmul_peak(n: int = 8192, reps: int = 10) -> float:
    """bf16 matrix FLOP/s of an n^3 product on random data, mean of `reps` after 3 warm-ups."""
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        a @ b
    end.record()
    torch.cuda.synchronize()
    return 2 * n**3 * reps / (start.elapsed_time(end) / 1e3)


def save(out: Path, name: str, data: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"bench_gpu_{name}.json").write_text(json.dumps(data, indent=1) + "\n")


# ---- mfu --------------------------------------------------------------------------------------


def edge_arch(smoke: bool) -> ArchConfig:
    if not smoke:
        return load_arch("edge_125m")
    d = load_arch("edge_125m").to_dict()
    d.update(d_model=64, n_layers=2, vocab_size=512)
    d["attention"] = {**d["attention"], "n_heads": 4, "n_kv_heads": 2, "head_dim": 16}
    d["ffn"] = {**d["ffn"], "d_ffn": 128}
    return ArchConfig.from_dict(d)


def non_embedding_params(model: torch.nn.Module) -> int:
    """Parameters less the token embedding (`parameters()` yields the tied head's once)."""
    emb = next(m for m in model.modules() if isinstance(m, torch.nn.Embedding))
    return sum(p.numel() for p in model.parameters()) - emb.weight.numel()


def step_times(train_step: Callable[[], float], steps: int, device: str) -> list[float]:
    """Wall seconds of each step; the step reads its loss (a host sync, as the trainer does)."""
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        train_step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return times


def plain_loop(
    model, vocab: int, batch: int, seq: int, device: str, hf: bool
) -> Callable[[], float]:
    """A bare training step: random tokens on the device, bf16 autocast, fused AdamW, clip."""
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=device == "cuda")
    x = torch.randint(0, vocab, (batch, seq + 1), device=device)
    inputs, targets = x[:, :-1].contiguous(), x[:, 1:].contiguous()

    def train_step() -> float:
        with torch.autocast(device, dtype=torch.bfloat16):
            if hf:  # labels are shifted inside the model: hand it the unshifted window
                loss = model(input_ids=x[:, :-1], labels=x[:, :-1]).loss
            else:
                _, loss = model(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    return train_step


def trial_steps(arch: ArchConfig, args, compiled: bool, device: str) -> list[float]:
    """`run_trial` for WARMUP + steps steps; each step's seconds from its progress callback."""
    cfg = TrainConfig(
        budget=f"steps:{WARMUP + args.steps}",
        batch_size=args.batch,
        seq_len=args.seq,
        precision="bf16",
        device=device,
        compile=compiled,
        log_every=1,
        eval_at=(1.0,),
        eval_batches=1,
        warmup=0.0,
        cache_dir=args.cache,
    )
    stamps: list[float] = []
    with tempfile.TemporaryDirectory() as run_dir:
        t0 = time.perf_counter()
        r = run_trial(
            arch, cfg, run_dir=run_dir, progress=lambda f, i: stamps.append(time.perf_counter())
        )
    if r.status != "completed":
        raise RuntimeError(f"trial {r.status}: {r.error}")
    if compiled and not r.execution.get("compiled"):
        raise RuntimeError(f"trial fell back to eager: {r.execution.get('compile_fallback')}")
    return [b - a for a, b in zip([t0, *stamps], stamps)]


def contender_times(name: str, arch: ArchConfig, args, device: str) -> list[float]:
    kind, mode = name.split("-")
    compiled = mode == "compiled"
    if kind == "trial":
        return trial_steps(arch, args, compiled, device)
    torch.manual_seed(0)
    if kind == "plain":
        model = build_model(arch).to(device)
    else:
        from transformers import LlamaForCausalLM

        model = LlamaForCausalLM(llama_config(arch)).to(device)
    model = torch.compile(model) if compiled else model
    step = plain_loop(model, arch.vocab_size, args.batch, args.seq, device, hf=kind == "hf")
    return step_times(step, WARMUP + args.steps, device)


def run_mfu(args) -> dict:
    device = "cpu" if args.smoke else "cuda"
    arch = edge_arch(args.smoke)
    n = non_embedding_params(build_model(arch))
    fpt = train_flops_per_token(arch, args.seq)
    peak = matmul_peak() if device == "cuda" else float("nan")
    tokens = args.batch * args.seq
    out = {
        "command": " ".join(["python benchmarks/bench_gpu.py", *sys.argv[1:]]),
        "machine": machine(),
        "arch": arch.name,
        "non_embedding_params": n,
        "train_flops_per_token": fpt,
        "tokens_per_step": tokens,
        "peak_bf16_flops": peak,
        "contenders": {},
    }
    for name in args.contenders.split(","):
        t0 = time.perf_counter()
        try:
            times = contender_times(name, arch, args, device)
        except Exception as err:  # one contender failing is a recorded figure
            out["contenders"][name] = {"error": f"{type(err).__name__}: {err}"[:600]}
        else:
            step = statistics.median(times[WARMUP:])
            rate = tokens / step
            out["contenders"][name] = {
                "first_steps_s": [round(t, 4) for t in times[:WARMUP]],
                "median_step_s": step,
                "tokens_per_s": rate,
                "mfu": 6 * n * rate / peak,
                "flops_util": fpt * rate / peak,
                "wall_s": time.perf_counter() - t0,
            }
        print(name, json.dumps(out["contenders"][name]), flush=True)
        save(args.out, f"mfu{args.tag}", out)
        if device == "cuda":
            torch.cuda.empty_cache()
    return out


# ---- fla --------------------------------------------------------------------------------------


def fla_inputs(kind: str, B: int, T: int, H: int, dk: int, dv: int) -> dict:
    """Inputs as each mixer forms them, fp32, layout [B, H, T, d] (archsearch's)."""
    g = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, device="cuda", generator=g)

    q, v = rand(B, H, T, dk), rand(B, H, T, dv)
    if kind == "gla":  # per-channel log decay, logsigmoid / 16 as GLA forms it
        k = rand(B, H, T, dk)
        return {"q": q * dk**-0.5, "k": k, "v": v, "g": F.logsigmoid(rand(B, H, T, dk)) / 16}
    if kind == "mamba2":  # scalar log decay per head, -softplus(dt) * A
        k = rand(B, H, T, dk) * dk**-0.5
        return {"q": q, "k": k, "v": v, "g": -F.softplus(rand(B, H, T) - 4) * 4}
    k = F.normalize(rand(B, H, T, dk), dim=-1)  # gated deltanet: unit keys, beta in (0, 1)
    return {
        "q": F.normalize(q, dim=-1),
        "k": k,
        "v": v,
        "beta": torch.sigmoid(rand(B, H, T)),
        "g": -F.softplus(rand(B, H, T) - 4) * 4,
    }


def own_form(kind: str) -> Callable:
    if kind == "gated_deltanet":
        return lambda q, k, v, beta, g: chunk_delta(q, k, v, beta, g)[0]
    return lambda q, k, v, g: chunk_gated(q, k, v, g)[0]


def fla_form(kind: str) -> Callable:
    """fla's kernel on archsearch's layout: [B, H, T, d] <-> fla's [B, T, H, d], scale 1."""
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    from fla.ops.gla import chunk_gla
    from fla.ops.simple_gla import chunk_simple_gla

    def t(x):
        return x.transpose(1, 2)

    if kind == "gla":
        return lambda q, k, v, g: t(chunk_gla(t(q), t(k), t(v), t(g), scale=1.0)[0])
    if kind == "mamba2":
        return lambda q, k, v, g: t(chunk_simple_gla(t(q), t(k), t(v), t(g), scale=1.0)[0])
    return lambda q, k, v, beta, g: t(
        chunk_gated_delta_rule(t(q), t(k), t(v), t(g), t(beta), scale=1.0)[0]
    )


def run_step(fn: Callable, inputs: dict, low: bool, grad_out: torch.Tensor) -> list:
    """Forward and backward, in fp32 or (`low`) as the trainer runs a mixer: q, k, v in bf16
    under bf16 autocast, decays and betas in fp32. The output and input gradients, in fp32."""
    xs = {
        k: v.detach().to(torch.bfloat16 if low and k in ("q", "k", "v") else v.dtype)
        for k, v in inputs.items()
    }
    for x in xs.values():
        x.requires_grad_()
    with torch.autocast(inputs["q"].device.type, dtype=torch.bfloat16, enabled=low):
        o = fn(**xs)
    o.backward(grad_out.to(o.dtype))
    return [o.detach().float()] + [xs[k].grad.float() for k in inputs]


def rel_err(got: list, want: list) -> float:
    return max(
        ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item() for a, b in zip(got, want)
    )


def cuda_ms(fn: Callable[[], object], reps: int) -> float:
    """Median milliseconds of `fn` by CUDA events."""
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def compare_kind(kind: str, args) -> dict:
    B, T, H = args.batch, args.seq, args.heads
    dk, dv = (128, 64) if kind == "mamba2" else (args.head_dim, args.head_dim)
    inputs = fla_inputs(kind, B, T, H, dk, dv)
    grad_out = torch.randn(
        B, H, T, dv, device="cuda", generator=torch.Generator("cuda").manual_seed(1)
    )
    own, fla = own_form(kind), fla_form(kind)
    truth = run_step(own, inputs, False, grad_out)
    t0 = time.perf_counter()
    fla_bf16 = run_step(fla, inputs, True, grad_out)  # the first call compiles/tunes
    torch.cuda.synchronize()
    first_s = time.perf_counter() - t0
    own_bf16 = run_step(own, inputs, True, grad_out)
    row = {
        "shape": {"B": B, "T": T, "H": H, "dk": dk, "dv": dv},
        "fla_first_call_s": first_s,
        "own_bf16_err": rel_err(own_bf16, truth),
        "fla_bf16_err": rel_err(fla_bf16, truth),
        "fla_fp32_err": rel_err(run_step(fla, inputs, False, grad_out), truth),
    }
    for name, fn in (("own", own), ("fla", fla)):
        row[f"{name}_ms"] = cuda_ms(lambda fn=fn: run_step(fn, inputs, True, grad_out), args.reps)
    row["speedup"] = row["own_ms"] / row["fla_ms"]
    return row


def run_fla(args) -> dict:
    import fla

    out = {
        "command": " ".join(["python benchmarks/bench_gpu.py", *sys.argv[1:]]),
        "machine": machine(),
        "fla": getattr(fla, "__version__", "?"),
        "kernels": {},
    }
    for kind in ("gla", "gated_deltanet", "mamba2"):
        try:
            out["kernels"][kind] = compare_kind(kind, args)
        except Exception as err:  # one kernel failing is a recorded figure
            out["kernels"][kind] = {"error": f"{type(err).__name__}: {err}"[:600]}
        print(kind, json.dumps(out["kernels"][kind]), flush=True)
        save(args.out, "fla", out)
    return out


# ---- pack -------------------------------------------------------------------------------------


def sweep_once(run_dir: Path, share: float, args) -> dict:
    """One sweep at `gpus_per_trial=share`: its wall seconds and its trials' executions."""
    from archsearch.study import open_storage, records

    cmd = [sys.executable, "-m", "archsearch.cli", "sweep", f"run_dir={run_dir}", "format=json"]
    cmd += [f"trials={args.trials}", f"concurrency={args.trials}", f"ray.num_cpus={args.trials}"]
    cmd += ["ray.num_gpus=1", f"gpus_per_trial={share}", "early_stopping=none"]
    cmd += [f"train.budget={args.budget}"]
    # smoke: Ray's one GPU is a resource only, the trials synthetic (what the packing test runs)
    cmd += ["trainable=archsearch.sweep.testing:synthetic"] if args.smoke else ["train.device=cuda"]
    t0 = time.perf_counter()
    # a session of its own: at the time limit the driver and its Ray go together, and the GPU
    # is free for what runs next
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _, err = proc.communicate(timeout=args.pack_timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"wall_s": time.perf_counter() - t0, "error": f"over {args.pack_timeout} s"}
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"wall_s": wall, "error": err[-1500:]}
    import optuna

    study = optuna.load_study(
        study_name="tiny", storage=open_storage(f"sqlite:///{run_dir / 'study.db'}")
    )
    trained = [r for r in records(study) if r.status == "trained"]
    spans = [(r.attrs["execution"]["started"], r.attrs["execution"]["ended"]) for r in trained]
    return {
        "wall_s": wall,
        "trained": len(trained),
        "most_at_once": max((sum(s <= t < e for s, e in spans) for t, _ in spans), default=0),
        "trial_s": sorted(e - s for s, e in spans),
        "executions": [
            {k: r.attrs["execution"].get(k) for k in ("device", "gpu_ids", "cuda_visible_devices")}
            for r in trained
        ],
    }


def run_pack(args) -> dict:
    out = {
        "command": " ".join(["python benchmarks/bench_gpu.py", *sys.argv[1:]]),
        "machine": machine(),
        "sweeps": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for share in (0.25, 1.0):
            out["sweeps"][str(share)] = row = sweep_once(Path(tmp) / f"run{share}", share, args)
            print(f"gpus_per_trial={share}", json.dumps(row), flush=True)
            save(args.out, "pack", out)
    return out


# ---- command line -----------------------------------------------------------------------------


CONTENDERS = tuple(f"{k}-{m}" for m in ("eager", "compiled") for k in ("trial", "plain", "hf"))


def contenders(text: str) -> str:
    """`--contenders`: a comma-separated list of `CONTENDERS` (argparse's error otherwise)."""
    unknown = [c for c in text.split(",") if c not in CONTENDERS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {unknown[0]!r} (known: {', '.join(CONTENDERS)})")
    return text


def tag(text: str) -> str:
    """`--tag`: letters, digits, '_', '.' and '-' only (it names a file under --out)."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]*", text):
        raise argparse.ArgumentTypeError(f"{text!r}: letters, digits, '_', '.' and '-' only")
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("mfu", "fla", "pack"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=10, help="mfu: timed steps after the warm-up")
    ap.add_argument(
        "--contenders",
        type=contenders,
        default=",".join(CONTENDERS),
        help="mfu: KIND-MODE,... of trial|plain|hf and eager|compiled (default: all six)",
    )
    ap.add_argument(
        "--tag", type=tag, default="", help="mfu: a suffix of the JSON file's name ([A-Za-z0-9_.-])"
    )
    ap.add_argument("--heads", type=int, default=16, help="fla: heads")
    ap.add_argument("--head-dim", type=int, default=64, help="fla: key and value size per head")
    ap.add_argument("--reps", type=int, default=10, help="fla: timed steps")
    ap.add_argument("--trials", type=int, default=8, help="pack: trials per sweep")
    ap.add_argument("--budget", default="tokens:500K", help="pack: each trial's train.budget")
    ap.add_argument("--pack-timeout", type=int, default=240, help="pack: seconds per sweep")
    ap.add_argument(
        "--smoke", action="store_true", help="mfu, pack: on the CPU (tiny shapes; synthetic trials)"
    )
    args = ap.parse_args(argv)
    if not torch.cuda.is_available() and not args.smoke:
        print(f"bench_gpu {args.what}: needs a CUDA GPU; torch {torch.__version__} sees none")
        return 2
    args.batch = args.batch or (32 if args.what == "mfu" else 8)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-corpus-") as args.cache:
        {"mfu": run_mfu, "fla": run_fla, "pack": run_pack}[args.what](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
