"""One sandbox pretraining trial: build a candidate, train it for a budget, evaluate, report.

    result = run_trial(arch, TrainConfig(budget="flops:1e13"), run_dir="runs/t0")

The trial follows nanoGPT's `train.py`: random windows of the tokenized corpus, AdamW with decay
on matrices only, a learning-rate schedule over the budget (`archsearch.trainers.schedule`),
global-norm gradient clipping, a fixed number of torch threads, and a global batch of
`batch_size` sequences built from micro batches of `micro_batch_size` by gradient accumulation.
The trial runs on `train.device` (`archsearch.trainers.device`: model, optimizer state, batches
and evaluation on it, autocast to `precision`, fused AdamW, pinned asynchronous copies on CUDA);
with `compile` its model runs under `torch.compile` (inductor), and a model that does not compile
trains eagerly, the reason kept in `execution["compile_fallback"]`. Inside a `torch.distributed`
group (data-parallel workers, `archsearch.sweep.trainable`) every worker draws the same global
batch and trains on its share under DDP; rank 0 alone writes checkpoints and the result.

A budget in FLOPs gives every candidate the same training compute ([PLM] section
4.1 compares candidates by FLOPs): `tokens = flops / train_flops_per_token(arch, seq_len)`.

At each fraction of `eval_at` the trial measures the validation loss on fixed, evenly spread
windows, writes a checkpoint (model, optimizer, RNG and data-stream states, step, curves) and
calls `report(metrics)`; `True` stops the trial there (`stopped_early`). A trial whose run
directory holds a checkpoint resumes from it; one that holds a result returns it. A non-finite
loss or gradient norm ends the trial as `failed` with the reason.

With `objective: probe` (or `both`, after the LM run) a fresh model is trained on each synthetic
probe task (`archsearch.trainers.probes`) for `probe_steps` steps and scored by accuracy.

An allocation the device refuses ends the trial as `failed` with the allocator's figure
("out of memory on cuda:0: Tried to allocate 2.00 GiB ..."). Checkpoints hold CPU tensors and load
with `map_location="cpu"`, so a trial resumes on another device than the one it started on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from archsearch.arch import ArchConfig
from archsearch.cost import train_flops_per_token
from archsearch.errors import UserError
from archsearch.trainers import checkpoint, lr_search
from archsearch.trainers.config import Budget, LrSearch, TrainConfig, parse_budget, trial_key
from archsearch.trainers.data import Batches, Corpus, eval_windows, load_corpus
from archsearch.trainers.device import (
    Placement,
    autocast,
    grad_scaler,
    is_out_of_memory,
    out_of_memory_reason,
    resolve_device,
    to_cpu,
    to_device,
)
from archsearch.trainers.probes import CHECKS, IGNORE, Probe, resolved

__all__ = ["Placement", "TrainConfig", "TrialFailed", "TrialResult", "run_trial", "train_tokens"]

Report = Callable[[dict[str, Any]], bool | None]
Progress = Callable[[float, dict[str, Any]], None]


@dataclass
class TrialResult:
    """What a trial returns and saves as `result.json` in its run directory."""

    status: str  # completed | failed
    arch_name: str
    arch_hash: str
    budget: str
    failure_reason: str | None = None
    stopped_early: bool = False
    fraction: float = 0.0  # of the LM budget reached
    metrics: dict[str, float] = field(default_factory=dict)  # space metric labels -> values
    steps: int = 0
    tokens: int = 0
    flops: float = 0.0  # training FLOPs spent (LM run; eval excluded)
    flops_per_token: float = 0.0
    planned_steps: int | None = None  # None for time budgets
    n_params: int = 0
    tokens_per_s: float = 0.0
    wall_s: float = 0.0
    train_s: float = 0.0
    peak_rss_bytes: int = 0
    curve: list[list[float]] = field(default_factory=list)  # [step, tokens, train_loss]
    evals: list[dict[str, float]] = field(default_factory=list)
    probes: dict[str, dict[str, Any]] = field(default_factory=dict)
    resumed_from_step: int | None = None
    # lr_search: the rate search run before training (`lr_search.RateSearch.to_dict`)
    lr_search: dict[str, Any] | None = None
    # where it ran: device, workers, precision, compile, micro batches, peak device memory
    execution: dict[str, Any] = field(default_factory=dict)
    key: str = ""
    config: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialResult:
        return cls(**data)


class TrialFailed(Exception):
    """Raised inside the training loop; becomes `status="failed"` with this reason."""


# ---- budget -----------------------------------------------------------------------------------


def train_tokens(arch: ArchConfig, cfg: TrainConfig) -> int | None:
    """Training tokens the budget buys (whole steps of batch_size x seq_len); None for time."""
    budget = cfg.parsed_budget
    per_step = cfg.batch_size * cfg.seq_len
    if budget.kind == "time":
        return None
    if budget.kind == "steps":
        return int(budget.amount) * per_step
    tokens = budget.amount
    if budget.kind == "flops":
        tokens = budget.amount / train_flops_per_token(arch, cfg.seq_len)
    return int(tokens // per_step) * per_step


# ---- helpers ----------------------------------------------------------------------------------


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


FUSED_ADAMW_DEVICES = ("cpu", "cuda", "mps")  # torch's fused AdamW kernels (torch >= 2.4)


def make_optimizer(
    model: torch.nn.Module, cfg: TrainConfig, device: torch.device | None = None
) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices and embeddings (dim >= 2), not on norms and biases; the
    fused kernel on devices that have one (one kernel for all parameters instead of a loop)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    fused = (device or next(iter(params)).device).type in FUSED_ADAMW_DEVICES
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=fused)


def _world() -> tuple[int, int]:
    """(rank, world size) of this process's data-parallel group; (0, 1) outside one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _all_reduce(values: list[float], device: torch.device, op: str = "sum") -> list[float]:
    """Sum (or max) numbers over the data-parallel group; the numbers themselves outside one."""
    import torch.distributed as dist

    if _world()[1] == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return t.tolist()


def _build(arch: ArchConfig, seed: int) -> torch.nn.Module:
    from archsearch.models import build_model

    torch.manual_seed(seed)
    return build_model(arch)


@dataclass
class _Runner:
    """What one optimizer step needs besides the batch: the model as trained (DDP and/or
    compiled around `net`), the optimizer, the loss scaler, the device and the numerics."""

    net: torch.nn.Module  # the plain module: parameters, state dicts, evaluation
    model: torch.nn.Module  # what the training step calls
    opt: torch.optim.Optimizer
    device: torch.device
    precision: str
    grad_clip: float
    scaler: torch.amp.GradScaler = field(init=False)

    def __post_init__(self) -> None:
        self.scaler = grad_scaler(self.device, self.precision)


def _step(run: _Runner, lr: float, micro: list[tuple[np.ndarray, np.ndarray]], where: str) -> float:
    """One optimizer step over micro batches (gradients accumulated; under DDP synchronised on
    the last one only); returns the mean training loss over the whole global batch."""
    for group in run.opt.param_groups:
        group["lr"] = lr
    losses = []
    for i, (xs, ys) in enumerate(micro):
        x, y = to_device(xs, run.device), to_device(ys, run.device)
        no_sync = getattr(run.model, "no_sync", None)  # DDP: all-reduce on the last one only
        accumulate = no_sync() if no_sync and i < len(micro) - 1 else contextlib.nullcontext()
        with accumulate, autocast(run.device, run.precision):
            _, loss = run.model(x, y)  # mean CE over targets != IGNORE, plus any MoE aux loss
            losses.append(loss.detach().float())
            run.scaler.scale(loss / len(micro)).backward()
    value = _all_reduce([torch.stack(losses).mean().item()], run.device)[0] / _world()[1]
    if not math.isfinite(value):
        raise TrialFailed(f"{where}: training loss became {value} (lr {lr:.3g})")
    if run.grad_clip > 0:
        run.scaler.unscale_(run.opt)
        norm = torch.nn.utils.clip_grad_norm_(run.net.parameters(), run.grad_clip)
        if not torch.isfinite(norm) and not run.scaler.is_enabled():  # fp16: the scaler skips
            raise TrialFailed(f"{where}: gradient norm became {norm.item()} (lr {lr:.3g})")
    run.scaler.step(run.opt)
    run.scaler.update()
    run.opt.zero_grad(set_to_none=True)
    return value


@torch.no_grad()
def evaluate_lm(
    model, windows: np.ndarray, batch_size: int, cfg: TrainConfig, device: torch.device
) -> float:
    """Mean next-token cross-entropy (nats per token) over fixed validation windows; a
    data-parallel group splits the windows between its workers and sums."""
    rank, world = _world()
    model.eval()
    total, count = 0.0, 0
    mine = windows[rank::world]
    for i in range(0, len(mine), batch_size):
        rows = to_device(np.ascontiguousarray(mine[i : i + batch_size]), device)
        x, y = rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
        with autocast(device, cfg.precision):
            logits, _ = model(x)
        total += F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum").item()
        count += y.numel()
    model.train()
    total, count = _all_reduce([total, count], device)
    return total / count


@torch.no_grad()
def evaluate_probe(
    model, probe: Probe, cfg: TrainConfig, device: torch.device
) -> tuple[float, float]:
    """(accuracy, loss) on the scored positions of the probe's fixed evaluation set."""
    model.eval()
    xs, ys = probe.eval_set(cfg.probe_eval_size)
    correct, scored, loss = 0, 0, 0.0
    for i in range(0, len(xs), cfg.probe_batch_size):
        x = to_device(xs[i : i + cfg.probe_batch_size], device)
        y = to_device(ys[i : i + cfg.probe_batch_size], device)
        with autocast(device, cfg.precision):
            logits, _ = model(x)
        keep = y != IGNORE
        logits = logits.float()[keep]
        correct += int((logits.argmax(-1) == y[keep]).sum())
        scored += int(keep.sum())
        loss += F.cross_entropy(logits, y[keep], reduction="sum").item()
    model.train()
    return correct / max(1, scored), loss / max(1, scored)


# ---- the trial --------------------------------------------------------------------------------


def run_trial(
    arch: ArchConfig,
    cfg: TrainConfig,
    *,
    run_dir: str | Path,
    report: Report | None = None,
    resume: bool = True,
    progress: Progress | None = None,
    placement: Placement | None = None,
) -> TrialResult:
    """Train `arch` under `cfg`, checkpointing into `run_dir`; see the module docstring.

    `report(metrics)` is called at each eval point with `fraction`, `step`, `tokens`, `flops`,
    `val_loss`, `val_ppl`, `train_loss` (LM) or the probe accuracy (probe-only trials); a true
    return value stops the trial. `progress(fraction, info)` is called every `log_every` steps.
    `placement` is what Ray assigned (`train.device: auto` follows it); a device the machine
    lacks, or fp16 on the CPU, raises a `UserError` before anything is read or trained.
    """
    device = resolve_device(cfg.device, cfg.precision, placement or Placement())
    rank, _ = _world()
    run_dir = Path(run_dir)
    key = trial_key(arch, cfg)
    saved = run_dir / checkpoint.RESULT
    if resume and saved.is_file():
        try:
            result = TrialResult.from_dict(json.loads(saved.read_text()))
        except (ValueError, TypeError, KeyError) as err:  # a damaged or foreign result file
            raise UserError(
                f"cannot read the finished trial's result ({type(err).__name__}: {err}); "
                "remove it to train again",
                source=str(saved),
            ) from None
        _check_key(result.key, key, run_dir)
        return result
    state = checkpoint.load_checkpoint(run_dir) if resume else None
    if state is not None:
        _check_key(state["key"], key, run_dir)
    lm_left = cfg.trains_lm and (state is None or state["result"].get("fraction", 0.0) < 1.0)
    corpus = open_corpus_for(arch, cfg) if lm_left else None  # checked before anything is written
    run_dir.mkdir(parents=True, exist_ok=True)
    search = None
    if cfg.lr_search != LrSearch.off:
        search = _rate_search(arch, cfg, run_dir, placement, progress, resume)
        if search.chosen is None:
            return _search_failed(arch, cfg, key, search, run_dir)
    with torch_threads(cfg.threads):
        trained = cfg if search is None else cfg.replace(lr=search.chosen)
        trial = _Trial(arch, trained, run_dir, key, report, progress)
        trial.corpus = corpus
        trial.device, trial.placement = device, placement or Placement()
        result = trial.run(state)
    if search is not None:
        result.config = cfg.to_dict()
        result.lr_search = search.to_dict()
        result.wall_s += search.wall_s
    if rank == 0:
        checkpoint.save_json(saved, result.to_dict())
        if not cfg.keep_checkpoint:
            (run_dir / checkpoint.CHECKPOINT).unlink(missing_ok=True)
    return result


SEARCH_FILE = "lr_search.json"  # a finished rate search, in the trial's run directory
SEARCH_DIR = "lr_search"  # its short runs while it runs


def _rate_search(
    arch: ArchConfig,
    cfg: TrainConfig,
    run_dir: Path,
    placement: Placement | None,
    progress: Progress | None,
    resume: bool,
) -> lr_search.RateSearch:
    """The trial's rate search (`archsearch.trainers.lr_search`): read back when it finished
    before (a resumed trial does not search again), else run, each short run in its own
    folder under `run_dir/lr_search/` (a killed search resumes after its finished runs)."""
    saved = run_dir / SEARCH_FILE
    if resume and saved.is_file():
        try:
            return lr_search.RateSearch.from_dict(json.loads(saved.read_text()))
        except (ValueError, TypeError, KeyError) as err:
            raise UserError(
                f"cannot read the trial's finished rate search ({type(err).__name__}: {err}); "
                "remove it to search again",
                source=str(saved),
            ) from None
    plan = _search_plan(arch, cfg)
    n_runs = sum(plan.survivors(i) for i in range(len(plan.amounts)))

    def train(lr: float, budget: str, round_: int) -> lr_search.SearchRun:
        short = cfg.replace(
            lr=lr, lr_search=LrSearch.off, budget=budget, eval_at=(1.0,), keep_checkpoint=False
        )
        if not cfg.trains_lm:  # a probe trains probe_steps whatever the budget: shorten them
            short = short.replace(probe_steps=int(budget.removeprefix("steps:")))
        where = run_dir / SEARCH_DIR / f"lr{lr:g}-{budget.replace(':', '')}"
        done = len(list((run_dir / SEARCH_DIR).glob(f"*/{checkpoint.RESULT}")))

        def tell(fraction: float, info: dict[str, Any]) -> None:
            if progress:
                progress(fraction, {**info, "phase": f"lr search {done + 1}/{n_runs} (lr {lr:g})"})

        got = run_trial(
            arch, short, run_dir=where, resume=resume, progress=tell, placement=placement
        )
        score = got.metrics.get("val_loss") if cfg.trains_lm else _probe_loss(got)
        ok = got.status == "completed" and score is not None and math.isfinite(score)
        return lr_search.SearchRun(
            lr=lr,
            round=round_,
            budget=budget,
            score=float(score) if ok else math.inf,
            tokens=got.tokens,
            flops=got.flops,
            wall_s=got.wall_s,
            reason="" if ok else (got.failure_reason or "no finite validation loss"),
        )

    search = lr_search.run_search(plan, train, share=cfg.lr_search_share)
    if _world()[0] == 0:
        checkpoint.save_json(saved, search.to_dict())
        shutil.rmtree(run_dir / SEARCH_DIR, ignore_errors=True)
    return search


def _search_plan(arch: ArchConfig, cfg: TrainConfig) -> lr_search.SearchPlan:
    """The rate search's plan within `lr_search_share` of what the trial trains: its LM
    budget in optimizer steps (or seconds for a time budget), or for a probe-only trial the
    steps of each probe training (`probe_steps`), which no LM budget bounds."""
    share = cfg.lr_search_share
    if not cfg.trains_lm:
        return lr_search.plan_search(cfg.lr_grid, cfg.probe_steps, share, "steps")
    tokens = train_tokens(arch, cfg)
    if tokens is None:
        return lr_search.plan_search(cfg.lr_grid, cfg.parsed_budget.amount, share, "time")
    return lr_search.plan_search(
        cfg.lr_grid, tokens // (cfg.batch_size * cfg.seq_len), share, "steps"
    )


def _probe_loss(result: TrialResult) -> float | None:
    """A probe-only run's score: its mean held-out probe loss (nats per scored token)."""
    losses = [p["loss"] for p in result.probes.values()]
    return float(np.mean(losses)) if losses else None


def _search_failed(
    arch: ArchConfig, cfg: TrainConfig, key: str, search: lr_search.RateSearch, run_dir: Path
) -> TrialResult:
    """A trial whose every searched rate diverged: failed, with the search kept."""
    reasons = "; ".join(f"lr {r.lr:g}: {r.reason}" for r in search.runs[: len(search.grid)])
    result = TrialResult(
        status="failed",
        arch_name=arch.name,
        arch_hash=arch.arch_hash,
        budget=cfg.budget,
        failure_reason=f"every rate of lr_grid failed in the rate search ({reasons})",
        key=key,
        config=cfg.to_dict(),
        lr_search=search.to_dict(),
        wall_s=search.wall_s,
    )
    if _world()[0] == 0:
        checkpoint.save_json(run_dir / checkpoint.RESULT, result.to_dict())
    return result


KEYS = ("tokenizer", "seq_len")  # the settings a corpus that does not fit the model names


def open_corpus_for(arch: ArchConfig, cfg: TrainConfig) -> Corpus:
    """The trial's corpus, opened (built once per node) and checked against the model: its
    vocabulary fits the architecture's, and both splits hold a window of `seq_len`. One-line
    `UserError`s, before the trial writes anything (a vocabulary known before the corpus is
    tokenized is checked before it is)."""
    known = {"byte": 256, "bpe": cfg.bpe_vocab_size or arch.vocab_size}.get(str(cfg.tokenizer))
    if str(cfg.tokenizer) == "file" and cfg.tokenizer_file:
        from archsearch.trainers.tokenizer import FileTokenizer

        known = FileTokenizer(cfg.tokenizer_file).vocab_size
    if known is not None:
        check_fits(arch, known, cfg.seq_len, f"the {cfg.tokenizer} tokenizer", KEYS)
    corpus = load_corpus(
        cfg.data,
        tokenizer=cfg.tokenizer,
        bpe_vocab_size=cfg.bpe_vocab_size or arch.vocab_size,
        val_fraction=cfg.val_fraction,
        cache_dir=cfg.cache_dir,
        tokenizer_file=cfg.tokenizer_file,
        max_stream_tokens=cfg.max_stream_tokens,
    )
    shards = corpus.meta.get("source_kind") == "shards"
    what = f"the corpus {corpus.meta['source']}" if shards else f"the {cfg.tokenizer} tokenizer"
    check_fits(arch, corpus.vocab_size, cfg.seq_len, what, KEYS)
    eval_windows(corpus.val, cfg.seq_len, 1)
    Batches(corpus.train, cfg.batch_size, cfg.seq_len, cfg.seed)
    return corpus


def check_fits(
    arch: ArchConfig, vocab: int, seq_len: int, what: str, keys: tuple[str, str]
) -> None:
    """The data must fit the model: `keys` name the vocabulary and length settings."""
    if vocab > arch.vocab_size:
        raise UserError(
            f"{what} has {vocab} tokens but the architecture's vocab_size is {arch.vocab_size}",
            key=keys[0],
        )
    if seq_len > arch.max_seq_len:
        raise UserError(
            f"{seq_len} exceeds the architecture's max_seq_len {arch.max_seq_len}", key=keys[1]
        )


def _check_key(found: str, expected: str, run_dir: Path) -> None:
    if found != expected:
        raise UserError(
            f"{run_dir} holds a trial of another architecture or training config; "
            "use a fresh run_dir or resume=False",
            key="run_dir",
        )


class _Trial:
    """The state of one trial between checkpoints."""

    def __init__(self, arch, cfg: TrainConfig, run_dir: Path, key: str, report, progress):
        self.arch, self.cfg, self.run_dir, self.key = arch, cfg, run_dir, key
        self.report, self.progress = report, progress
        self.budget: Budget = parse_budget(cfg.budget)
        self.started = time.perf_counter()
        self.fpt = train_flops_per_token(arch, cfg.seq_len)
        self.result = TrialResult(
            status="completed",
            arch_name=arch.name,
            arch_hash=arch.arch_hash,
            budget=str(self.budget),
            flops_per_token=self.fpt,
            key=key,
            config=cfg.to_dict(),
        )
        self.device = torch.device("cpu")
        self.placement = Placement()
        self.runner: _Runner | None = None
        self.batches: Batches | None = None
        self.prior_wall = 0.0
        self.compiling = False  # until the first compiled step succeeds
        self.corpus: Corpus | None = None  # opened and checked before the run directory

    # -- bookkeeping ----------------------------------------------------------------------------

    def _checkpoint(self, phase: str) -> None:
        r = self.result
        state = {
            "key": self.key,
            "phase": phase,
            "result": r.to_dict(),
            "wall_s": self.prior_wall + time.perf_counter() - self.started,
        }
        if phase == "lm":
            state["torch_rng"] = torch.get_rng_state()
            state["model"] = to_cpu(self.runner.net.state_dict())
            state["optimizer"] = to_cpu(self.runner.opt.state_dict())
            state["data_rng"] = self.batches.state()
        if _world()[0] == 0:  # the workers of a data-parallel group hold the same state
            checkpoint.save_checkpoint(self.run_dir, state)

    def _sample_rss(self) -> None:
        self.result.peak_rss_bytes = max(self.result.peak_rss_bytes, _rss())
        if self.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(self.device)
            ex = self.result.execution
            ex["peak_device_bytes"] = max(ex.get("peak_device_bytes", 0), int(peak))

    def _execution(self) -> dict[str, Any]:
        """Where and how this trial runs: recorded with its result."""
        import platform

        world = _world()[1]
        here = f"{platform.node()}:{self.device}"
        devices = [here]
        if world > 1:
            import torch.distributed as dist

            devices = [None] * world
            dist.all_gather_object(devices, here)
        cfg = self.cfg
        micro = cfg.micro_batch_size or cfg.batch_size // world
        return {
            "device": str(self.device),
            "gpu_ids": None if self.placement.gpu_ids is None else list(self.placement.gpu_ids),
            "workers": world,
            "worker_devices": devices,
            "precision": str(cfg.precision),
            "micro_batch_size": micro,
            "accumulation_steps": cfg.batch_size // world // micro,
            "compile": bool(cfg.compile),
            "fused_adamw": self.device.type in FUSED_ADAMW_DEVICES,
            "torch": torch.__version__,
        }

    # -- run ------------------------------------------------------------------------------------

    def run(self, state: dict[str, Any] | None) -> TrialResult:
        r = self.result
        cfg = self.cfg
        if state is not None:
            restored = TrialResult.from_dict(state["result"])
            r.__dict__.update({k: v for k, v in restored.__dict__.items() if k != "config"})
            r.resumed_from_step = r.steps
            self.prior_wall = state["wall_s"]
            before = r.execution.get("device")
        r.execution = self._execution()
        if state is not None and before and before != str(self.device):
            r.execution["resumed_from_device"] = before
        try:
            stop = False
            if cfg.trains_lm and r.fraction < 1.0:
                stop = self._run_lm(state if state and state["phase"] == "lm" else None)
            if cfg.runs_probes and not stop:
                self._run_probes()
        except TrialFailed as err:
            r.status, r.failure_reason = "failed", str(err)
        except Exception as err:
            if not is_out_of_memory(err):
                raise
            reason = out_of_memory_reason(err, self.device)
            if _world()[1] > 1:  # the other workers wait in a collective: end the group
                raise RuntimeError(reason) from None
            r.status, r.failure_reason = "failed", reason
        r.wall_s = self.prior_wall + time.perf_counter() - self.started
        r.tokens_per_s = r.tokens / r.train_s if r.train_s > 0 else 0.0
        self._sample_rss()
        return r

    # -- language modelling ---------------------------------------------------------------------

    def _run_lm(self, state: dict[str, Any] | None) -> bool:
        """Train on the corpus; True when `report` asked to stop."""
        cfg, r = self.cfg, self.result
        corpus = self.corpus or open_corpus_for(self.arch, cfg)
        windows = eval_windows(corpus.val, cfg.seq_len, cfg.eval_batches * cfg.batch_size)
        tokens = train_tokens(self.arch, cfg)
        per_step = cfg.batch_size * cfg.seq_len
        total = None if tokens is None else tokens // per_step
        r.planned_steps = total
        if total == 0:
            raise TrialFailed(
                f"the budget {self.budget} buys less than one step of {per_step} tokens "
                f"({per_step * self.fpt:.3g} FLOPs) for this architecture"
            )
        net = _build(self.arch, cfg.seed).to(self.device)
        opt = make_optimizer(net, cfg, self.device)
        self.batches = Batches(corpus.train, cfg.batch_size, cfg.seq_len, cfg.seed)
        r.n_params = sum(p.numel() for p in net.parameters())
        if state is not None:
            net.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])  # moves the state to the parameters' device
            self.batches.set_state(state["data_rng"])
            torch.set_rng_state(state["torch_rng"])
        self.runner = _Runner(
            net,
            self._wrap(net, self.cfg.compile),
            opt,
            self.device,
            str(cfg.precision),
            cfg.grad_clip,
        )
        rank, world = _world()
        share = cfg.batch_size // world
        micro = cfg.micro_batch_size or share
        if cfg.batch_size % world or share % micro:
            raise UserError(
                f"batch_size {cfg.batch_size} must split into {world} worker share(s) of whole "
                f"micro batches of {micro}",
                key="micro_batch_size",
            )
        schedule = cfg.lr_schedule
        points = sorted({*cfg.eval_at, 1.0})
        passed = sum(p <= r.fraction for p in points)
        window_losses: list[float] = []
        net.train()
        while True:
            progress = (r.steps + 1) / total if total else r.train_s / self.budget.amount
            lr = schedule(progress)
            x, y = self.batches.next()  # the global batch; this worker trains on its share
            x, y = x[rank * share : (rank + 1) * share], y[rank * share : (rank + 1) * share]
            parts = [(x[i : i + micro], y[i : i + micro]) for i in range(0, share, micro)]
            t0 = time.perf_counter()
            loss = self._train_step(lr, parts, f"step {r.steps}")
            r.train_s += time.perf_counter() - t0
            if not total and world > 1:  # time budgets: the workers stop at the same step
                r.train_s = _all_reduce([r.train_s], self.device, "max")[0]
            r.steps += 1
            r.tokens += per_step
            r.flops = r.tokens * self.fpt
            window_losses.append(loss)
            done = r.steps / total if total else min(1.0, r.train_s / self.budget.amount)
            if r.steps % cfg.log_every == 0 or done >= 1.0:
                r.curve.append([r.steps, r.tokens, float(np.mean(window_losses))])
                window_losses.clear()
                self._sample_rss()
                if self.progress:
                    info = {"phase": "lm", "step": r.steps, "loss": r.curve[-1][2], "lr": lr}
                    self.progress(done, info)
            reached = passed
            while reached < len(points) and (
                r.steps >= math.ceil(points[reached] * total - 1e-9)
                if total
                else done >= points[reached]
            ):
                reached += 1
            if reached > passed:
                passed = reached
                fraction = points[reached - 1]
                if self._eval_point(fraction, windows, corpus):
                    r.stopped_early = fraction < 1.0
                    return True
            if done >= 1.0:
                return False

    def _wrap(self, net: torch.nn.Module, compile_: bool) -> torch.nn.Module:
        """The module the training step calls: DDP in a data-parallel group, then compiled."""
        model = net
        if _world()[1] > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            model = DistributedDataParallel(net, device_ids=ids)
        if compile_:
            self.compiling = True
            model = torch.compile(model)
        return model

    def _train_step(self, lr: float, parts: list, where: str) -> float:
        """One step; the first compiled step falls back to eager when compiling fails."""
        if not self.compiling:
            return _step(self.runner, lr, parts, where)
        try:
            loss = _step(self.runner, lr, parts, where)
        except (TrialFailed, KeyboardInterrupt):
            raise
        except Exception as err:
            if is_out_of_memory(err):
                raise
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            self.result.execution["compile_fallback"] = f"{type(err).__name__}: {first}"[:500]
            self.result.execution["compiled"] = False
            self.runner.model = self._wrap(self.runner.net, compile_=False)
            self.runner.opt.zero_grad(set_to_none=True)
            loss = _step(self.runner, lr, parts, where)  # the same batch, eagerly
        else:
            self.result.execution["compiled"] = True
        self.compiling = False
        return loss

    def _eval_point(self, fraction: float, windows: np.ndarray, corpus: Corpus) -> bool:
        cfg, r = self.cfg, self.result
        val = evaluate_lm(self.runner.net, windows, cfg.batch_size, cfg, self.device)
        if not math.isfinite(val):
            raise TrialFailed(f"step {r.steps}: validation loss became {val}")
        r.fraction = fraction
        point = {
            "fraction": fraction,
            "step": r.steps,
            "tokens": r.tokens,
            "flops": r.flops,
            "val_loss": val,
            "val_ppl": math.exp(min(val, 50.0)),
            "train_loss": r.curve[-1][2] if r.curve else float("nan"),
            "elapsed_s": self.prior_wall + time.perf_counter() - self.started,
        }
        if corpus.val_bytes_per_token:  # bits per byte: known unless shards name no tokenizer
            point["val_bpb"] = val / math.log(2) / corpus.val_bytes_per_token
        r.evals.append(point)
        r.metrics.update({k: point[k] for k in ("val_loss", "val_ppl", "val_bpb") if k in point})
        self._sample_rss()
        self._checkpoint("lm")
        return bool(self.report and self.report(dict(point)))

    # -- probes ---------------------------------------------------------------------------------

    def _run_probes(self) -> None:
        cfg, r = self.cfg, self.result
        tasks = [t for t in cfg.probe_tasks if t not in r.probes]
        for task in tasks:
            probe = Probe(task, cfg.probe_vocab, cfg.probe_seq_len)
            keys = ("probe_vocab", "probe_seq_len")
            check_fits(self.arch, probe.vocab_size, probe.seq_len, f"probe task {task!r}", keys)
            r.probes[task] = self._train_probe(probe, cfg.probe_tasks.index(task))
            r.metrics[f"probe_acc[{task}]"] = r.probes[task]["acc"]
            r.metrics.pop("probe_acc", None)  # the mean over the tasks so far, listed last
            r.metrics["probe_acc"] = float(np.mean([p["acc"] for p in r.probes.values()]))
            self._checkpoint("probe")
            if not cfg.trains_lm and self.report:
                done = len(r.probes) / len(cfg.probe_tasks)
                metrics = {"fraction": done, "task": task, **r.probes[task]}
                metrics.pop("curve")
                if self.report(metrics) and done < 1.0:
                    r.stopped_early, r.fraction = True, done
                    return
        if not cfg.trains_lm:
            r.fraction = 1.0

    def _train_probe(self, probe: Probe, index: int) -> dict[str, Any]:
        """Train fresh models on one probe task, one per seed of `probe_seeds`, and score each
        by held-out accuracy, checked `probes.CHECKS` times as it trains: the task's accuracy is
        their mean, with the spread over seeds, and `resolved` says whether the task has left
        its learning transition (`probes.resolved`)."""
        cfg = self.cfg
        runs = [
            self._train_probe_seed(probe, index, cfg.seed + k, k) for k in range(cfg.probe_seeds)
        ]
        accs = [run["acc"] for run in runs]
        return {
            "acc": float(np.mean(accs)),
            "acc_std": float(np.std(accs, ddof=1)) if len(accs) > 1 else 0.0,
            "accs": accs,
            "resolved": resolved([run["acc_curve"] for run in runs]),
            "loss": float(np.mean([run["loss"] for run in runs])),
            "steps": cfg.probe_steps,
            "train_s": sum(run["train_s"] for run in runs),
            "curve": runs[0]["curve"],
            "acc_curves": [run["acc_curve"] for run in runs],
        }

    def _train_probe_seed(self, probe: Probe, index: int, seed: int, k: int) -> dict[str, Any]:
        """One fresh model on one probe task. With `probe_untied_head` (the default) the
        candidate gets an untied LM head: a small model whose head is its embedding scores the
        input token itself highly, which on recall tasks (the query key is the input, the value
        the answer) stalls every mixer at the same plateau and hides what the probes measure,
        the sequence mixers' recall."""
        cfg = self.cfg
        arch = self.arch
        if cfg.probe_untied_head and arch.tie_embeddings:
            arch = dataclasses.replace(arch, tie_embeddings=False)
        model = _build(arch, seed).to(self.device)
        self.result.n_params = sum(p.numel() for p in model.parameters())
        run = _Runner(
            model,
            model,
            make_optimizer(model, cfg, self.device),
            self.device,
            str(cfg.precision),
            cfg.grad_clip,
        )
        rng = probe.train_rng(seed)
        schedule = cfg.lr_schedule
        curve, window, acc_curve = [], [], []
        check_every = max(1, cfg.probe_steps // CHECKS)
        t_start = time.perf_counter()
        model.train()
        for step in range(cfg.probe_steps):
            x, y = probe.batch(rng, cfg.probe_batch_size)
            while not (y != IGNORE).any():  # a short recall batch may repeat no key at all
                x, y = probe.batch(rng, cfg.probe_batch_size)
            lr = schedule((step + 1) / cfg.probe_steps)
            window.append(_step(run, lr, [(x, y)], f"probe {probe.task} step {step}"))
            if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.probe_steps:
                curve.append([step + 1, float(np.mean(window))])
                window.clear()
                if self.progress:
                    part = (k + (step + 1) / cfg.probe_steps) / cfg.probe_seeds
                    done = (index + part) / len(cfg.probe_tasks)
                    info = {"phase": f"probe {probe.task}", "step": step + 1, "loss": curve[-1][1]}
                    info["steps"] = cfg.probe_steps
                    self.progress(done, info)
            if (step + 1) % check_every == 0 and step + 1 < cfg.probe_steps:
                acc_curve.append([step + 1, evaluate_probe(model, probe, cfg, self.device)[0]])
        acc, loss = evaluate_probe(model, probe, cfg, self.device)
        acc_curve.append([cfg.probe_steps, acc])
        self._sample_rss()
        return {
            "acc": acc,
            "loss": loss,
            "train_s": time.perf_counter() - t_start,
            "curve": curve,
            "acc_curve": acc_curve,
        }
