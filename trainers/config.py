"""`TrainConfig`: the typed, validated settings of one sandbox trial, and its budget syntax.

`TrainConfig` is an OmegaConf structured config, declared once: `archsearch train` uses it as
its Hydra schema (`archsearch.cli.schemas.TrainCmdConfig` adds the command's own keys), and a
search space's `train:` mapping becomes one through `TrainConfig.from_dict`, whose errors name
the key (`train.lr`). Each field's `help` metadata is what `archsearch train --help` prints.

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
import functools
import hashlib
import json
import math
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import TYPE_CHECKING, Any

from archsearch.errors import UserError
from archsearch.metrics import PROBE_TASKS
from archsearch.trainers import schedule, tokenizer

if TYPE_CHECKING:
    from archsearch.arch import ArchConfig

BUDGET_KINDS = ("tokens", "flops", "time", "steps")
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*$")
_COUNT = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
_TIME = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


class Choice(str, Enum):
    """A setting with a fixed set of string values: an Enum field, so Hydra rejects any other
    value when it composes a config. Members compare equal to, and print as, their values."""

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: Any, *, key: str) -> Choice:
        """The member named `value`; a `UserError` naming `key` and the known values if none."""
        try:
            return cls(value)
        except ValueError:
            raise UserError(unknown_choice(key, value, cls), key=key) from None

    @classmethod
    def of(cls, name: str, values: Iterable[str], *, module: str) -> type[Choice]:
        """A `Choice` enumeration of `values`, built from the list where they are defined
        (`module` is where it lives, so its members pickle)."""
        return cls(name, {v: v for v in values}, module=module, qualname=name)


def unknown_choice(key: str, value: Any, known: Iterable[Any]) -> str:
    """The one message for a value outside an enumeration: `unknown latency mode 'x' (known:
    predicted, measured)` for the key `latency.mode`."""
    return f"unknown {key.replace('.', ' ')} {value!r} (known: {', '.join(map(str, known))})"


ScheduleKind = Choice.of("ScheduleKind", schedule.KINDS, module=__name__)
TokenizerKind = Choice.of("TokenizerKind", tokenizer.KINDS, module=__name__)


class Precision(Choice):
    """Training numerics: fp32, or autocast to bf16 or fp16 (GPU only, with a loss scaler) on
    the trial's device."""

    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class Device(Choice):
    """Where a trial trains: the accelerator Ray assigned to it (else the CPU), or a given kind."""

    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"
    mps = "mps"


class LrSearch(Choice):
    """How a trial finds its peak learning rate: `off` trains at `lr`; `halving` searches
    `lr_grid` by successive halving within `lr_search_share` of the budget
    (`archsearch.trainers.lr_search`)."""

    off = "off"
    halving = "halving"


class Objective(Choice):
    """What a trial is scored on: LM validation loss, synthetic probe accuracy, or both."""

    lm = "lm"
    probe = "probe"
    both = "both"


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

    budget: str = field(
        default="tokens:1M",
        metadata={"help": "tokens:N | flops:N | time:N[s|m|h] | steps:N (e.g. tokens:2M)"},
    )
    batch_size: int = field(
        default=16, metadata={"help": "sequences per optimizer step (global: all workers)"}
    )
    micro_batch_size: int | None = field(
        default=None,
        metadata={
            "help": "sequences per forward/backward on one worker; the rest by gradient "
            "accumulation (default: batch_size / workers)"
        },
    )
    seq_len: int = field(
        default=128,
        metadata={"help": "tokens per sequence (at most the architecture's max_seq_len)"},
    )
    # optimizer: AdamW, decoupled weight decay on matrices (nanoGPT's grouping)
    lr: float = field(
        default=1e-3,
        metadata={
            "help": "peak learning rate (AdamW); with lr_search, the rate searched replaces it"
        },
    )
    min_lr: float | None = field(
        default=None, metadata={"help": "final learning rate; default lr / 10"}
    )
    # fair trials: each candidate at the rate it trains best at (archsearch.trainers.lr_search)
    lr_search: LrSearch = field(
        default=LrSearch.off,
        metadata={
            "help": "off (train at lr) | halving (successive halving over lr_grid first, "
            "within lr_search_share of the budget; the trial trains at the rate chosen). "
            "Scored on the validation loss, or on the probes' loss for objective=probe; "
            "with objective=both the probes train at the rate the LM chose"
        },
    )
    lr_grid: tuple[float, ...] = field(
        default=(1e-3, 2e-3, 4e-3, 8e-3),
        metadata={"help": "lr_search: the peak learning rates searched (log-spaced)"},
    )
    lr_search_share: float = field(
        default=0.15,
        metadata={"help": "lr_search: the share of the trial's training budget the search spends"},
    )
    weight_decay: float = field(default=0.1, metadata={"help": "on matrices and embeddings only"})
    beta1: float = field(default=0.9, metadata={"help": "AdamW beta1"})
    beta2: float = field(default=0.95, metadata={"help": "AdamW beta2"})
    grad_clip: float = field(default=1.0, metadata={"help": "max global gradient norm; 0 disables"})
    # schedule over the budget's progress (archsearch.trainers.schedule)
    schedule: ScheduleKind = field(
        default=ScheduleKind.cosine,
        metadata={"help": "cosine | wsd | wsdc (warmup-stable-decay-constant, PLM 4.2) | constant"},
    )
    warmup: float = field(
        default=0.02, metadata={"help": "fraction of the budget spent warming up"}
    )
    decay: float = field(
        default=0.2, metadata={"help": "wsd/wsdc: fraction of the budget spent decaying to min_lr"}
    )
    constant: float = field(default=0.1, metadata={"help": "wsdc: final fraction held at min_lr"})
    # numerics and reproducibility
    precision: Precision = field(
        default=Precision.fp32,
        metadata={"help": "fp32 | bf16 | fp16 (autocast on the trial's device; fp16: GPU only)"},
    )
    device: Device = field(
        default=Device.auto,
        metadata={"help": "auto (the accelerator Ray assigned, else CPU) | cpu | cuda | mps"},
    )
    compile: bool = field(
        default=False,
        metadata={"help": "torch.compile the model's training step (eager if it fails)"},
    )
    threads: int = field(default=1, metadata={"help": "torch threads for this trial"})
    seed: int = field(default=0, metadata={"help": "same seed, same machine: same losses"})
    # data (archsearch.trainers.data)
    data: tuple[str, ...] = field(
        default=("stdlib",),
        metadata={
            "help": "stdlib (embedded corpus), text file(s)/folders, hf:NAME[:CONFIG] "
            "(streamed), or shards:FOLDER (pre-tokenized train*.bin/val*.bin + meta.json)"
        },
    )
    tokenizer: TokenizerKind = field(
        default=TokenizerKind.byte,
        metadata={
            "help": "byte (256) | char (the corpus' characters) | bpe (trained locally) | "
            "file (tokenizer_file)"
        },
    )
    tokenizer_file: str | None = field(
        default=None,
        metadata={"help": "tokenizer=file: a Hugging Face tokenizer.json (GPT-2, Llama, Qwen)"},
    )
    max_stream_tokens: int = field(
        default=16_000_000,
        metadata={"help": "hf: sources: tokens read from the stream (train; validation 1/20)"},
    )
    bpe_vocab_size: int | None = field(
        default=None,
        metadata={"help": "bpe: vocabulary size; default the architecture's vocab_size"},
    )
    val_fraction: float = field(
        default=0.05, metadata={"help": "held-out share: whole documents, or each one's tail"}
    )
    cache_dir: str | None = field(
        default=None,
        metadata={"help": "tokenized-corpus cache; default <system temp>/archsearch-data"},
    )
    # evaluation and reporting
    eval_at: tuple[float, ...] = field(
        default=(0.25, 0.5, 0.75, 1.0),
        metadata={"help": "budget fractions with a validation loss and a checkpoint"},
    )
    eval_batches: int = field(
        default=8,
        metadata={"help": "validation windows = eval_batches x batch_size, spread over the split"},
    )
    log_every: int = field(default=10, metadata={"help": "steps between loss-curve points"})
    # objective: LM loss on the corpus, synthetic probes, or both
    objective: Objective = field(
        default=Objective.lm,
        metadata={"help": "lm (validation loss) | probe (synthetic probe accuracy) | both"},
    )
    probe_tasks: tuple[str, ...] = field(
        default=PROBE_TASKS, metadata={"help": "synthetic tasks of objective=probe|both"}
    )
    probe_steps: int = field(
        default=300, metadata={"help": "training steps per probe task (a fresh model each)"}
    )
    probe_seeds: int = field(
        default=1,
        metadata={
            "help": "fresh models per probe task (seeds seed..seed+N-1): accuracy is their "
            "mean, with the spread"
        },
    )
    probe_batch_size: int = field(default=32, metadata={"help": "probe sequences per step"})
    probe_seq_len: int = field(default=128, metadata={"help": "tokens per probe sequence"})
    probe_vocab: int = field(
        default=64, metadata={"help": "probe tokens (at most the architecture's vocab_size)"}
    )
    probe_eval_size: int = field(
        default=256, metadata={"help": "held-out probe sequences scored for accuracy"}
    )
    probe_untied_head: bool = field(
        default=True,
        metadata={"help": "probes train an untied LM head (a tied one masks the mixers' recall)"},
    )
    keep_checkpoint: bool = field(
        default=False,
        metadata={"help": "keep checkpoint.pt (final weights) after the trial completes"},
    )

    def __post_init__(self) -> None:
        # OmegaConf and callers hand lists and plain strings: hold tuples and enum members
        for name, kind in _field_kinds(type(self)).items():
            value = getattr(self, name)
            if kind is tuple and not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
            elif isinstance(kind, type) and issubclass(kind, Choice):
                object.__setattr__(self, name, kind.parse(value, key=name))
        self.validate()

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Any, *, source: str | None = None, prefix: str = "") -> TrainConfig:
        """Build from plain data (a space's `train:` mapping); errors name `prefix.key`.

        OmegaConf merges `data` onto the structured config and converts the values; before
        that, a scalar stands for a one-item list and a whole float for an integer, and a
        boolean must be a boolean (OmegaConf would read `yes` as true)."""
        from omegaconf import OmegaConf
        from omegaconf.errors import ConfigKeyError, ValidationError

        def fail(message: str, name: str | None = None) -> UserError:
            key = ".".join(p for p in (prefix, name) if p) or None
            return UserError(message, source=source, key=key)

        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise fail(f"expected a mapping of training settings, got {type(data).__name__}")
        kinds = _field_kinds(cls)
        plain = {}
        for name, value in data.items():
            kind = kinds.get(name)
            items = value if isinstance(value, (list, tuple)) else [value]
            if any(isinstance(v, str) and "${" in v for v in items):
                # OmegaConf would resolve it (`${oc.env:...}` reads the environment)
                raise fail(f"{value!r} holds an interpolation; give the value itself", str(name))
            if kind is tuple and isinstance(value, (str, int, float)):
                value = [value]
            elif kind is tuple and not isinstance(value, (list, tuple)):
                raise fail(f"expected a list, got {type(value).__name__}", name)
            elif kind is int and isinstance(value, float) and value.is_integer():
                value = int(value)
            elif kind is bool and not isinstance(value, bool):
                raise fail(_expected(bool, value), name)
            plain[name] = value
        try:
            return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), plain))
        except ConfigKeyError as err:
            known = ", ".join(f.name for f in fields(cls))
            raise fail(f"unknown training setting (known: {known})", str(err.key)) from None
        except ValidationError as err:
            name = re.split(r"[.\[]", str(err.full_key))[0]
            value = plain[name] if str(err.full_key) == name else err.value  # not OmegaConf's copy
            kind = kinds[name]
            if isinstance(kind, type) and issubclass(kind, Choice):
                message = unknown_choice(name, value, kind)
            else:
                message = _expected(_element_type(cls, name), value)
            raise fail(message, name) from None
        except UserError as err:  # from __post_init__: a domain check
            raise fail(err.detail, err.key) from None

    def to_dict(self) -> dict[str, Any]:
        """Plain data (lists and strings), the inverse of `from_dict`."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(TrainConfig)}

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    # -- derived --------------------------------------------------------------------------------

    @property
    def parsed_budget(self) -> Budget:
        return parse_budget(self.budget)

    @property
    def lr_schedule(self) -> schedule.Schedule:
        return schedule.Schedule(
            self.schedule.value,
            self.lr,
            self.lr / 10 if self.min_lr is None else self.min_lr,
            self.warmup,
            self.decay,
            self.constant,
        )

    @property
    def trains_lm(self) -> bool:
        return self.objective in (Objective.lm, Objective.both)

    @property
    def runs_probes(self) -> bool:
        return self.objective in (Objective.probe, Objective.both)

    # -- validation -----------------------------------------------------------------------------

    def validate(self) -> None:
        """Raise a `UserError` naming the first bad key (the ranges types cannot express)."""
        parse_budget(self.budget)
        for key in ("batch_size", "seq_len", "threads", "eval_batches", "log_every"):
            _positive(self, key)
        for key in (
            "probe_steps",
            "probe_seeds",
            "probe_batch_size",
            "probe_seq_len",
            "probe_eval_size",
        ):
            _positive(self, key)
        if self.micro_batch_size is not None:
            _positive(self, "micro_batch_size")
            if self.batch_size % self.micro_batch_size:
                raise UserError(
                    f"must divide batch_size {self.batch_size}, got {self.micro_batch_size}",
                    key="micro_batch_size",
                )
        self._check_rates()
        self.lr_schedule  # noqa: B018 - validates warmup, decay, constant
        self._check_data()
        self._check_probes()

    def _check_rates(self) -> None:
        """The optimiser's numbers, the rate's floor and the learning-rate search's grid."""
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
        if not self.lr_grid or any(not (math.isfinite(r) and r > 0) for r in self.lr_grid):
            raise UserError(
                f"must be a non-empty list of positive rates, got {list(self.lr_grid)}",
                key="lr_grid",
            )
        if len(set(self.lr_grid)) != len(self.lr_grid):
            raise UserError(f"lists a rate twice: {list(self.lr_grid)}", key="lr_grid")
        searched = self.lr_search != LrSearch.off
        if searched and self.min_lr is not None and self.min_lr > min(self.lr_grid):
            raise UserError(
                f"must be at most the lowest rate of lr_grid ({min(self.lr_grid):g}), "
                f"got {self.min_lr}",
                key="min_lr",
            )
        if not 0 < self.lr_search_share <= 1:
            raise UserError(
                f"must lie in (0, 1], got {self.lr_search_share}", key="lr_search_share"
            )

    def _check_data(self) -> None:
        """The tokenizer, the corpus and its split, and when the trial is evaluated."""
        if self.bpe_vocab_size is not None and self.bpe_vocab_size < tokenizer.MIN_BPE_VOCAB:
            raise UserError(
                f"must be at least {tokenizer.MIN_BPE_VOCAB}, got {self.bpe_vocab_size}",
                key="bpe_vocab_size",
            )
        if not 0 < self.val_fraction < 1:
            raise UserError(f"must lie in (0, 1), got {self.val_fraction}", key="val_fraction")
        if not self.data:
            raise UserError("name at least one data source", key="data")
        _positive(self, "max_stream_tokens")
        if (self.tokenizer == "file") != (self.tokenizer_file is not None):
            raise UserError(
                "tokenizer=file and tokenizer_file=PATH go together", key="tokenizer_file"
            )
        if not self.eval_at or any(not 0 < f <= 1 for f in self.eval_at):
            raise UserError(
                f"must be a non-empty list of fractions in (0, 1], got {list(self.eval_at)}",
                key="eval_at",
            )

    def _check_probes(self) -> None:
        """The probe tasks (where the trial runs them) and their vocabulary."""
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


def check_cpu_precision(precision: Any) -> None:
    """Refuse fp16 for a trial on the CPU: its gradients need a loss scaler and CPUs have no
    fast fp16 arithmetic, so it is refused, not emulated."""
    if str(precision) == "fp16":
        raise UserError(
            "fp16 needs a GPU (cuda or mps) and this trial runs on the CPU; use bf16 or fp32",
            key="precision",
        )


# settings that say where and how a trial runs, not what it trains: a checkpoint resumes under
# other values (another device, micro batch or compile setting)
EXECUTION_SETTINGS = ("cache_dir", "keep_checkpoint", "device", "compile", "micro_batch_size")


def trial_key(arch: ArchConfig, cfg: TrainConfig) -> str:
    """Identifies what a run directory holds: the architecture and the settings that shape
    training (not where it runs, where the cache lives or whether the checkpoint is kept)."""
    settings = {k: v for k, v in cfg.to_dict().items() if k not in EXECUTION_SETTINGS}
    blob = json.dumps({"arch": arch.to_dict(), "train": settings}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _positive(cfg: TrainConfig, key: str) -> None:
    value = getattr(cfg, key)
    if value <= 0:
        raise UserError(f"must be positive, got {value}", key=key)


@functools.cache
def _field_kinds(cls: type) -> dict[str, Any]:
    """Each field's type without `| None`, and `tuple` for the list-valued ones."""
    out = {}
    for name, tp in typing.get_type_hints(cls).items():
        if typing.get_origin(tp) in (typing.Union, types.UnionType):
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
        out[name] = tuple if typing.get_origin(tp) is tuple else tp
    return out


def _element_type(cls: type, name: str) -> Any:
    """A field's scalar type: a list field's item type."""
    tp = _field_kinds(cls)[name]
    if tp is tuple:
        return typing.get_args(typing.get_type_hints(cls)[name])[0]
    return tp


def _expected(tp: Any, value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    return f"expected {names.get(tp, tp.__name__)}, got {type(value).__name__} {value!r}"


def _plain(value: Any) -> Any:
    if isinstance(value, Choice):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value
