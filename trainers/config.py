"""`TrainConfig`: the typed, validated settings of one sandbox trial, and its budget syntax.

A search space's `train:` mapping and the `archsearch train` command both become a
`TrainConfig` through `TrainConfig.from_dict`, whose errors name the key (`train.lr`).

Budgets (`budget:`) say how much training every candidate gets:

- `tokens:2M`: training tokens (suffixes K, M, B/G, T; `2e6` works too);
- `flops:1e13`: training FLOPs, the fair comparison between architectures of different cost:
  each gets `flops / train_flops_per_token(arch, seq_len)` tokens (`archsearch.cost`);
- `time:60s`: wall-clock training time (`s`, `m`, `h`; a bare number is seconds). Progress and
  the schedule follow the clock, so time budgets are not bit-reproducible;
- `steps:2000`: optimizer steps of `batch_size x seq_len` tokens.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass, fields
from typing import Any

from archsearch.errors import UserError
from archsearch.space.metrics import PROBE_TASKS
from archsearch.trainers import schedule, tokenizer

BUDGET_KINDS = ("tokens", "flops", "time", "steps")
OBJECTIVES = ("lm", "probe", "both")
PRECISIONS = ("fp32", "bf16")
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*$")
_COUNT = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
_TIME = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class Budget:
    kind: str  # tokens | flops | time | steps
    amount: float  # tokens, FLOPs, seconds or steps

    def __str__(self) -> str:
        if self.kind == "time":
            return f"time:{self.amount:g}s"
        for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
            if self.amount >= scale:
                return f"{self.kind}:{self.amount / scale:.4g}{suffix}"
        return f"{self.kind}:{self.amount:g}"


def parse_budget(text: Any, *, key: str = "budget", source: str | None = None) -> Budget:
    """`tokens:2M`, `flops:1e13`, `time:90s` / `time:5m`, `steps:2000`."""

    def bad(msg: str) -> UserError:
        return UserError(
            f"{msg}; expected tokens:N, flops:N, time:N[s|m|h] or steps:N "
            "(e.g. tokens:2M, flops:1e13, time:60s)",
            key=key,
            source=source,
        )

    if not isinstance(text, str) or ":" not in text:
        raise bad(f"bad budget {text!r}")
    kind, _, amount = text.partition(":")
    kind = kind.strip()
    if kind not in BUDGET_KINDS:
        raise bad(f"unknown budget kind {kind!r}")
    m = _NUMBER.match(amount)
    table = _TIME if kind == "time" else _COUNT
    if not m or m.group(2) not in table:
        raise bad(f"bad amount {amount!r} in {text!r}")
    value = float(m.group(1)) * table[m.group(2)]
    if not value > 0 or not math.isfinite(value):
        raise bad(f"the budget must be positive, got {text!r}")
    if kind == "steps" and not value.is_integer():
        raise bad(f"steps must be a whole number, got {text!r}")
    return Budget(kind, value)


@dataclass(frozen=True)
class TrainConfig:
    """Settings of one sandbox trial. Defaults suit the `tiny` space's byte-level models."""

    budget: str = "tokens:1M"  # see the module docstring
    batch_size: int = 16
    seq_len: int = 128
    # optimizer: AdamW, decoupled weight decay on matrices (nanoGPT's grouping)
    lr: float = 1e-3
    min_lr: float | None = None  # default lr / 10
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0  # max global grad norm; 0 disables
    # schedule over the budget's progress (archsearch.trainers.schedule)
    schedule: str = "cosine"  # cosine | wsd | wsdc | constant
    warmup: float = 0.02
    decay: float = 0.2
    constant: float = 0.1
    # numerics and reproducibility
    precision: str = "fp32"  # fp32 | bf16 (CPU autocast)
    threads: int = 1  # torch threads for this trial
    seed: int = 0
    # data (archsearch.trainers.data)
    data: tuple[str, ...] = ("stdlib",)
    tokenizer: str = "byte"  # byte | char | bpe
    bpe_vocab_size: int | None = None  # default: the architecture's vocab_size
    val_fraction: float = 0.05
    cache_dir: str | None = None  # default: <system temp>/archsearch-data
    # evaluation and reporting
    eval_at: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
    eval_batches: int = 8  # validation windows = eval_batches x batch_size
    log_every: int = 10
    # objective: LM loss on the corpus, synthetic probes, or both
    objective: str = "lm"  # lm | probe | both
    probe_tasks: tuple[str, ...] = PROBE_TASKS
    probe_steps: int = 300
    probe_batch_size: int = 32
    probe_seq_len: int = 128
    probe_vocab: int = 64
    probe_eval_size: int = 256
    probe_untied_head: bool = True  # probe models get an untied LM head (see trial.py)
    keep_checkpoint: bool = False

    def __post_init__(self) -> None:
        self.validate()

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Any, *, source: str | None = None, prefix: str = "") -> TrainConfig:
        """Build from plain data (a space's `train:` mapping); errors name `prefix.key`."""

        def key_of(name: str) -> str:
            return f"{prefix}.{name}" if prefix else name

        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise UserError(
                f"expected a mapping of training settings, got {type(data).__name__}",
                source=source,
                key=prefix or None,
            )
        hints = typing.get_type_hints(cls)
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(map(str, data)) - set(known))
        if unknown:
            raise UserError(
                f"unknown training setting (known: {', '.join(known)})",
                source=source,
                key=key_of(unknown[0]),
            )
        kwargs = {
            name: _coerce(hints[name], value, source=source, key=key_of(name))
            for name, value in data.items()
        }
        try:
            return cls(**kwargs)
        except UserError as err:
            key = key_of(err.key) if err.key else prefix or None
            raise UserError(err.detail, source=source, key=key) from None

    def to_dict(self) -> dict[str, Any]:
        return {
            k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()
        }

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    # -- derived --------------------------------------------------------------------------------

    @property
    def parsed_budget(self) -> Budget:
        return parse_budget(self.budget)

    @property
    def lr_schedule(self) -> schedule.Schedule:
        return schedule.Schedule(
            self.schedule,
            self.lr,
            self.lr / 10 if self.min_lr is None else self.min_lr,
            self.warmup,
            self.decay,
            self.constant,
        )

    @property
    def trains_lm(self) -> bool:
        return self.objective in ("lm", "both")

    @property
    def runs_probes(self) -> bool:
        return self.objective in ("probe", "both")

    # -- validation -----------------------------------------------------------------------------

    def validate(self) -> None:
        """Raise a `UserError` naming the first bad key."""
        parse_budget(self.budget)
        for key in ("batch_size", "seq_len", "threads", "eval_batches", "log_every"):
            _positive(self, key)
        for key in ("probe_steps", "probe_batch_size", "probe_seq_len", "probe_eval_size"):
            _positive(self, key)
        for key in ("lr", "beta1", "beta2", "weight_decay", "grad_clip"):
            value = getattr(self, key)
            if not math.isfinite(value) or value < 0:
                raise UserError(f"must be a finite number >= 0, got {value}", key=key)
        if self.lr == 0:
            raise UserError("must be positive, got 0", key="lr")
        for key in ("beta1", "beta2"):
            if getattr(self, key) >= 1:
                raise UserError(f"must lie in [0, 1), got {getattr(self, key)}", key=key)
        if self.min_lr is not None and not 0 <= self.min_lr <= self.lr:
            raise UserError(f"must lie in [0, lr={self.lr}], got {self.min_lr}", key="min_lr")
        _choice(self, "precision", PRECISIONS)
        _choice(self, "objective", OBJECTIVES)
        tokenizer.check_kind(self.tokenizer)
        self.lr_schedule  # noqa: B018 - validates schedule, warmup, decay, constant
        if self.bpe_vocab_size is not None and self.bpe_vocab_size < tokenizer.MIN_BPE_VOCAB:
            raise UserError(
                f"must be at least {tokenizer.MIN_BPE_VOCAB}, got {self.bpe_vocab_size}",
                key="bpe_vocab_size",
            )
        if not 0 < self.val_fraction < 1:
            raise UserError(f"must lie in (0, 1), got {self.val_fraction}", key="val_fraction")
        if not self.data:
            raise UserError("name at least one data source", key="data")
        if not self.eval_at or any(not 0 < f <= 1 for f in self.eval_at):
            raise UserError(
                f"must be a non-empty list of fractions in (0, 1], got {list(self.eval_at)}",
                key="eval_at",
            )
        if not self.probe_tasks and self.runs_probes:
            raise UserError("name at least one probe task", key="probe_tasks")
        for task in self.probe_tasks:
            if task not in PROBE_TASKS:
                raise UserError(
                    f"unknown probe task {task!r} (known: {', '.join(PROBE_TASKS)})",
                    key="probe_tasks",
                )
        if self.probe_vocab < 16:
            raise UserError(f"must be at least 16, got {self.probe_vocab}", key="probe_vocab")


def _positive(cfg: TrainConfig, key: str) -> None:
    value = getattr(cfg, key)
    if value <= 0:
        raise UserError(f"must be positive, got {value}", key=key)


def _choice(cfg: TrainConfig, key: str, allowed: tuple[str, ...]) -> None:
    value = getattr(cfg, key)
    if value not in allowed:
        raise UserError(f"unknown value {value!r} (known: {', '.join(allowed)})", key=key)


def _coerce(tp: Any, value: Any, *, source: str | None, key: str) -> Any:
    """Check one value against a field type (str, int, float, bool, optional, tuple of)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        inner = next(a for a in typing.get_args(tp) if a is not type(None))
        return _coerce(inner, value, source=source, key=key)
    if origin is tuple:
        inner = typing.get_args(tp)[0]
        items = [value] if isinstance(value, (str, int, float)) else value
        if not isinstance(items, (list, tuple)):
            raise UserError(f"expected a list, got {type(value).__name__}", source=source, key=key)
        return tuple(_coerce(inner, v, source=source, key=key) for v in items)
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
    }[tp]
    if tp is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if not ok:
        names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
        raise UserError(
            f"expected {names[tp]}, got {type(value).__name__} {value!r}", source=source, key=key
        )
    return float(value) if tp is float else value
