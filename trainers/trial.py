"""One sandbox pretraining trial: build a candidate, train it for a budget, evaluate, report.

    result = run_trial(arch, TrainConfig(budget="flops:1e13"), run_dir="runs/t0")

The trial follows nanoGPT's `train.py`: random windows of the tokenized corpus, AdamW with decay
on matrices only, a learning-rate schedule over the budget (`archsearch.trainers.schedule`),
global-norm gradient clipping, optional bf16 autocast on CPU, and a fixed number of torch
threads. A budget in FLOPs gives every candidate the same training compute (seed PLM section
4.1 compares candidates by FLOPs): `tokens = flops / train_flops_per_token(arch, seq_len)`.

At each fraction of `eval_at` the trial measures the validation loss on fixed, evenly spread
windows, writes a checkpoint (model, optimizer, RNG and data-stream states, step, curves) and
calls `report(metrics)`; `True` stops the trial there (`stopped_early`). A trial whose run
directory holds a checkpoint resumes from it; one that holds a result returns it. A non-finite
loss or gradient norm ends the trial as `failed` with the reason.

With `objective: probe` (or `both`, after the LM run) a fresh model is trained on each synthetic
probe task (`archsearch.trainers.probes`) for `probe_steps` steps and scored by accuracy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
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
from archsearch.trainers import checkpoint
from archsearch.trainers.config import Budget, TrainConfig, parse_budget
from archsearch.trainers.data import Batches, Corpus, eval_windows, load_corpus
from archsearch.trainers.probes import IGNORE, Probe

__all__ = ["TrainConfig", "TrialFailed", "TrialResult", "run_trial", "train_tokens"]

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


def trial_key(arch: ArchConfig, cfg: TrainConfig) -> str:
    """Identifies what a run directory holds: the architecture and the settings that shape
    training (not where the cache lives or whether the checkpoint is kept)."""
    settings = {k: v for k, v in cfg.to_dict().items() if k not in ("cache_dir", "keep_checkpoint")}
    blob = json.dumps({"arch": arch.to_dict(), "train": settings}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


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


def _autocast(cfg: TrainConfig):
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.precision == "bf16")


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices and embeddings (dim >= 2), not on norms and biases."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))


def _build(arch: ArchConfig, seed: int) -> torch.nn.Module:
    from archsearch.models import build_model

    torch.manual_seed(seed)
    return build_model(arch)


def _step(model, opt, cfg: TrainConfig, lr: float, x, y, where: str) -> float:
    for group in opt.param_groups:
        group["lr"] = lr
    with _autocast(cfg):
        _, loss = model(x, y)  # mean CE over targets != IGNORE, plus any MoE auxiliary loss
    value = loss.item()
    if not math.isfinite(value):
        raise TrialFailed(f"{where}: training loss became {value} (lr {lr:.3g})")
    loss.backward()
    if cfg.grad_clip > 0:
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        if not torch.isfinite(norm):
            raise TrialFailed(f"{where}: gradient norm became {norm.item()} (lr {lr:.3g})")
    opt.step()
    opt.zero_grad(set_to_none=True)
    return value


@torch.no_grad()
def evaluate_lm(model, windows: np.ndarray, batch_size: int, cfg: TrainConfig) -> float:
    """Mean next-token cross-entropy (nats per token) over fixed validation windows."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(windows), batch_size):
        rows = torch.from_numpy(windows[i : i + batch_size])
        x, y = rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
        with _autocast(cfg):
            logits, _ = model(x)
        total += F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum").item()
        count += y.numel()
    model.train()
    return total / count


@torch.no_grad()
def evaluate_probe(model, probe: Probe, cfg: TrainConfig) -> tuple[float, float]:
    """(accuracy, loss) on the scored positions of the probe's fixed evaluation set."""
    model.eval()
    xs, ys = probe.eval_set(cfg.probe_eval_size)
    correct, scored, loss = 0, 0, 0.0
    for i in range(0, len(xs), cfg.probe_batch_size):
        x = torch.from_numpy(xs[i : i + cfg.probe_batch_size])
        y = torch.from_numpy(ys[i : i + cfg.probe_batch_size])
        with _autocast(cfg):
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
) -> TrialResult:
    """Train `arch` under `cfg`, checkpointing into `run_dir`; see the module docstring.

    `report(metrics)` is called at each eval point with `fraction`, `step`, `tokens`, `flops`,
    `val_loss`, `val_ppl`, `train_loss` (LM) or the probe accuracy (probe-only trials); a true
    return value stops the trial. `progress(fraction, info)` is called every `log_every` steps.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    key = trial_key(arch, cfg)
    saved = run_dir / checkpoint.RESULT
    if resume and saved.is_file():
        result = TrialResult.from_dict(json.loads(saved.read_text()))
        _check_key(result.key, key, run_dir)
        return result
    state = checkpoint.load_checkpoint(run_dir) if resume else None
    if state is not None:
        _check_key(state["key"], key, run_dir)
    with torch_threads(cfg.threads):
        result = _Trial(arch, cfg, run_dir, key, report, progress).run(state)
    checkpoint.save_json(saved, result.to_dict())
    if not cfg.keep_checkpoint:
        (run_dir / checkpoint.CHECKPOINT).unlink(missing_ok=True)
    return result


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
        self.model: torch.nn.Module | None = None
        self.opt = None
        self.batches: Batches | None = None
        self.prior_wall = 0.0

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
            state["model"] = self.model.state_dict()
            state["optimizer"] = self.opt.state_dict()
            state["data_rng"] = self.batches.state()
        checkpoint.save_checkpoint(self.run_dir, state)

    def _sample_rss(self) -> None:
        self.result.peak_rss_bytes = max(self.result.peak_rss_bytes, _rss())

    def _check_fits(self, vocab: int, seq_len: int, what: str, keys: tuple[str, str]) -> None:
        """The data must fit the model: `keys` name the vocabulary and length settings."""
        a = self.arch
        if vocab > a.vocab_size:
            raise UserError(
                f"{what} has {vocab} tokens but the architecture's vocab_size is {a.vocab_size}",
                key=keys[0],
            )
        if seq_len > a.max_seq_len:
            raise UserError(
                f"{seq_len} exceeds the architecture's max_seq_len {a.max_seq_len}", key=keys[1]
            )

    # -- run ------------------------------------------------------------------------------------

    def run(self, state: dict[str, Any] | None) -> TrialResult:
        r = self.result
        cfg = self.cfg
        if state is not None:
            restored = TrialResult.from_dict(state["result"])
            r.__dict__.update({k: v for k, v in restored.__dict__.items() if k != "config"})
            r.resumed_from_step = r.steps
            self.prior_wall = state["wall_s"]
        try:
            stop = False
            if cfg.trains_lm and r.fraction < 1.0:
                stop = self._run_lm(state if state and state["phase"] == "lm" else None)
            if cfg.runs_probes and not stop:
                self._run_probes()
        except TrialFailed as err:
            r.status, r.failure_reason = "failed", str(err)
        r.wall_s = self.prior_wall + time.perf_counter() - self.started
        r.tokens_per_s = r.tokens / r.train_s if r.train_s > 0 else 0.0
        self._sample_rss()
        return r

    # -- language modelling ---------------------------------------------------------------------

    def _run_lm(self, state: dict[str, Any] | None) -> bool:
        """Train on the corpus; True when `report` asked to stop."""
        cfg, r = self.cfg, self.result
        corpus: Corpus = load_corpus(
            cfg.data,
            tokenizer=cfg.tokenizer,
            bpe_vocab_size=cfg.bpe_vocab_size or self.arch.vocab_size,
            val_fraction=cfg.val_fraction,
            cache_dir=cfg.cache_dir,
        )
        self._check_fits(
            corpus.vocab_size,
            cfg.seq_len,
            f"the {cfg.tokenizer} tokenizer",
            ("tokenizer", "seq_len"),
        )
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
        self.model = _build(self.arch, cfg.seed)
        self.opt = make_optimizer(self.model, cfg)
        self.batches = Batches(corpus.train, cfg.batch_size, cfg.seq_len, cfg.seed)
        r.n_params = sum(p.numel() for p in self.model.parameters())
        if state is not None:
            self.model.load_state_dict(state["model"])
            self.opt.load_state_dict(state["optimizer"])
            self.batches.set_state(state["data_rng"])
            torch.set_rng_state(state["torch_rng"])
        schedule = cfg.lr_schedule
        points = sorted({*cfg.eval_at, 1.0})
        passed = sum(p <= r.fraction for p in points)
        window_losses: list[float] = []
        self.model.train()
        while True:
            progress = (r.steps + 1) / total if total else r.train_s / self.budget.amount
            lr = schedule(progress)
            x, y = (torch.from_numpy(a) for a in self.batches.next())
            t0 = time.perf_counter()
            loss = _step(self.model, self.opt, cfg, lr, x, y, f"step {r.steps}")
            r.train_s += time.perf_counter() - t0
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

    def _eval_point(self, fraction: float, windows: np.ndarray, corpus: Corpus) -> bool:
        cfg, r = self.cfg, self.result
        val = evaluate_lm(self.model, windows, cfg.batch_size, cfg)
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
            "val_bpb": val / math.log(2) / corpus.val_bytes_per_token,
            "train_loss": r.curve[-1][2] if r.curve else float("nan"),
            "elapsed_s": self.prior_wall + time.perf_counter() - self.started,
        }
        r.evals.append(point)
        r.metrics.update({k: point[k] for k in ("val_loss", "val_ppl", "val_bpb")})
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
            self._check_fits(probe.vocab_size, probe.seq_len, f"probe task {task!r}", keys)
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
        """Train a fresh model on one probe task. With `probe_untied_head` (the default) the
        candidate gets an untied LM head: a small model whose head is its embedding scores the
        input token itself highly, which on recall tasks (the query key is the input, the value
        the answer) stalls every mixer at the same plateau and hides what the probes measure,
        the sequence mixers' recall."""
        cfg = self.cfg
        arch = self.arch
        if cfg.probe_untied_head and arch.tie_embeddings:
            arch = dataclasses.replace(arch, tie_embeddings=False)
        model = _build(arch, cfg.seed)
        self.result.n_params = sum(p.numel() for p in model.parameters())
        opt = make_optimizer(model, cfg)
        rng = probe.train_rng(cfg.seed)
        schedule = cfg.lr_schedule
        curve, window = [], []
        t_start = time.perf_counter()
        model.train()
        for step in range(cfg.probe_steps):
            x, y = probe.batch(rng, cfg.probe_batch_size)
            while not (y != IGNORE).any():  # a short recall batch may repeat no key at all
                x, y = probe.batch(rng, cfg.probe_batch_size)
            x, y = torch.from_numpy(x), torch.from_numpy(y)
            lr = schedule((step + 1) / cfg.probe_steps)
            window.append(_step(model, opt, cfg, lr, x, y, f"probe {probe.task} step {step}"))
            if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.probe_steps:
                curve.append([step + 1, float(np.mean(window))])
                window.clear()
                if self.progress:
                    done = (index + (step + 1) / cfg.probe_steps) / len(cfg.probe_tasks)
                    info = {"phase": f"probe {probe.task}", "step": step + 1, "loss": curve[-1][1]}
                    info["steps"] = cfg.probe_steps
                    self.progress(done, info)
        acc, loss = evaluate_probe(model, probe, cfg)
        self._sample_rss()
        return {
            "acc": acc,
            "loss": loss,
            "steps": cfg.probe_steps,
            "train_s": time.perf_counter() - t_start,
            "curve": curve,
        }
