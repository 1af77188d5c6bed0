"""Synthetic probe tasks in the manner of [MAD] and [Zoology]'s multi-query associative recall
(MQAR).

Each task draws token sequences on the fly from a seeded generator and marks the positions that
matter; a model is trained with next-token cross-entropy on those positions only and scored by
its accuracy there. Every task is written for a decoder-only LM: a sequence of `seq_len + 1`
tokens gives inputs `seq[:-1]` and targets `seq[1:]`, with `IGNORE` where nothing is scored.
With `V = vocab_size` (64 by default, so any model with a vocabulary of at least 64 can run them):

- `recall` (MAD's in-context recall in Zoology's multi-query layout, MQAR): `seq_len / 4`
  key-value pairs `k v k v ...` with distinct keys from the first half of the vocabulary and
  values from the second (a fresh map per sequence), then queries: the keys again in random
  order, each followed by its value, which is scored.
- `noisy_recall`: as `recall`, with 20% of the pair slots (anywhere in the sequence) filled by
  pairs of a separate noise vocabulary (the last V/4 tokens), which the model must ignore.
- `fuzzy_recall`: keys and values are motifs of 1 to 3 tokens (MAD's `k_motif_size` and
  `v_motif_size`); each sequence has 8 key motifs with their value motifs, drawn in random
  order; the value motifs of repeated keys are scored.
- `selective_copy`: `seq_len / 8` content tokens scattered among blank tokens, then a copy
  marker, then the content tokens in order, which are scored.
- `compression`: MAD compresses a random sequence into one token and decodes it with a separate
  MLP; the decoder-only form used here reads the reconstruction out of the model itself: a
  random sequence of about `seq_len / 2` tokens, a marker, then the same sequence again
  (scored). A recurrent model must hold the whole prefix in its state.
- `memorization`: triples `a b v` from one fixed map of 2-token keys to values, shared by every
  sequence and every trial (MAD's fixed `kv_map` with a key motif of 2, giving (V/2)^2 = 1024
  facts at V = 64): nothing can be recalled in context, the facts must be stored in the
  weights. Every value is scored.

Recall-type tasks separate mixers with exact retrieval (softmax attention, hybrids) from pure
linear ones whose fixed-size state blurs many associations ([Linear-MoE] section 3.3 on why
hybrids add attention layers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from archsearch.errors import UserError
from archsearch.metrics import PROBE_TASKS

IGNORE = -1  # target value of unscored positions (cross-entropy ignore_index)
# a probe's held-out accuracy is checked CHECKS times over its training; it has flattened when
# it rose by at most FLAT over the last quarter of those checks, and the seeds of a task agree
# when their final accuracies lie within AGREE of each other
CHECKS = 8
FLAT = 0.02
AGREE = 0.2
EVAL_SEED = 20240229  # evaluation sets and the memorization map do not depend on the trial seed
NOISE_FRACTION = 0.2
MAX_MOTIF = 3
FUZZY_KEYS = 8
MIN_VOCAB = 16

Generator = Callable[[np.random.Generator, int, int, int], tuple[np.ndarray, np.ndarray]]


def _recall(rng: np.random.Generator, b: int, n: int, v: int, noise: float = 0.0):
    """MQAR: distinct keys with their values, then queries (the keys again, each followed by
    its value, which is scored); with `noise`, noise pairs inserted at random slots."""
    n_noise = v // 4 if noise else 0
    half = (v - n_noise) // 2
    slots = (n + 1) // 2
    n_junk = round(noise * slots)
    n_kv = min(half, max(1, (slots - n_junk) // 2))
    n_q = slots - n_junk - n_kv
    seq = np.empty((b, 2 * slots), dtype=np.int64)
    mask = np.zeros((b, 2 * slots), dtype=bool)
    for row in range(b):
        keys = rng.permutation(half)[:n_kv]
        values = rng.integers(half, 2 * half, n_kv)
        asked = np.concatenate([rng.permutation(n_kv), rng.integers(0, n_kv, n_q)])[:n_q]
        kind = np.repeat([0, 1], [n_kv, n_q])  # 0 context pair, 1 query, 2 noise
        kind = np.insert(kind, np.sort(rng.integers(0, len(kind) + 1, n_junk)), 2)
        k = np.empty(slots, dtype=np.int64)
        val = np.empty(slots, dtype=np.int64)
        k[kind == 0], val[kind == 0] = keys, values
        k[kind == 1], val[kind == 1] = keys[asked], values[asked]
        junk = rng.integers(2 * half, 2 * half + n_noise, (2, n_junk))
        k[kind == 2], val[kind == 2] = junk[0], junk[1]
        seq[row, 0::2], seq[row, 1::2] = k, val
        mask[row, 1::2] = kind == 1
    return seq[:, :n], mask[:, :n]


def _noisy_recall(rng: np.random.Generator, b: int, n: int, v: int):
    return _recall(rng, b, n, v, noise=NOISE_FRACTION)


def _fuzzy_recall(rng: np.random.Generator, b: int, n: int, v: int):
    """Multi-token keys and values; the value motifs of repeated keys are scored."""
    pad = v - 1
    half = (v - 1) // 2
    seq = np.full((b, n), pad, dtype=np.int64)
    mask = np.zeros((b, n), dtype=bool)
    for row in range(b):
        keys: list[tuple[int, ...]] = []
        while len(keys) < FUZZY_KEYS:
            key = tuple(rng.integers(0, half, rng.integers(1, MAX_MOTIF + 1)).tolist())
            if key not in keys:
                keys.append(key)
        values = [
            rng.integers(half, 2 * half, rng.integers(1, MAX_MOTIF + 1)).tolist() for _ in keys
        ]
        tokens: list[int] = []
        scored: list[bool] = []
        seen = set()
        while len(tokens) < n:
            i = int(rng.integers(len(keys)))
            tokens += [*keys[i], *values[i]]
            scored += [False] * len(keys[i]) + [i in seen] * len(values[i])
            seen.add(i)
        seq[row], mask[row] = tokens[:n], scored[:n]
    return seq, mask


def _selective_copy(rng: np.random.Generator, b: int, n: int, v: int):
    """Content tokens among blanks, a copy marker, then the content tokens in order."""
    blank, marker = v - 2, v - 1
    n_copy = max(1, n // 8)
    region = n - 1 - n_copy
    where = np.sort(np.argsort(rng.random((b, region)), axis=1)[:, :n_copy], axis=1)
    content = rng.integers(0, v - 2, (b, n_copy))
    head = np.full((b, region), blank, dtype=np.int64)
    np.put_along_axis(head, where, content, axis=1)
    seq = np.concatenate([head, np.full((b, 1), marker), content], axis=1)
    mask = np.zeros((b, n), dtype=bool)
    mask[:, region + 1 :] = True
    return seq, mask


def _compression(rng: np.random.Generator, b: int, n: int, v: int):
    """A random sequence, a marker, and the sequence again (scored)."""
    marker = v - 1
    m = (n - 1) // 2
    tokens = rng.integers(0, v - 1, (b, m))
    seq = np.full((b, n), marker, dtype=np.int64)
    seq[:, :m], seq[:, m + 1 : 2 * m + 1] = tokens, tokens
    mask = np.zeros((b, n), dtype=bool)
    mask[:, m + 1 : 2 * m + 1] = True
    return seq, mask


def memorization_map(v: int) -> np.ndarray:
    """The fixed map of `memorization`: a 2-token key (a, b), both from the first half of the
    vocabulary, to one value from the second half; `table[a, b]` ((V/2)^2 facts)."""
    half = v // 2
    return np.random.default_rng(EVAL_SEED).integers(half, 2 * half, (half, half))


def _memorization(rng: np.random.Generator, b: int, n: int, v: int):
    """Triples `a b value` from one fixed map; every value is scored."""
    table = memorization_map(v)
    m = -(-n // 3)
    keys = rng.integers(0, v // 2, (b, m, 2))
    seq = np.empty((b, m, 3), dtype=np.int64)
    seq[..., :2], seq[..., 2] = keys, table[keys[..., 0], keys[..., 1]]
    mask = np.zeros((b, m, 3), dtype=bool)
    mask[..., 2] = True
    return seq.reshape(b, -1)[:, :n], mask.reshape(b, -1)[:, :n]


GENERATORS: dict[str, Generator] = {
    "recall": _recall,
    "noisy_recall": _noisy_recall,
    "fuzzy_recall": _fuzzy_recall,
    "selective_copy": _selective_copy,
    "compression": _compression,
    "memorization": _memorization,
}
assert tuple(GENERATORS) == PROBE_TASKS


@dataclass(frozen=True)
class Probe:
    """One probe task at a vocabulary size and sequence length."""

    task: str
    vocab_size: int = 64
    seq_len: int = 128

    def __post_init__(self) -> None:
        if self.task not in GENERATORS:
            raise UserError(
                f"unknown probe task {self.task!r} (known: {', '.join(PROBE_TASKS)})",
                key="probe_tasks",
            )
        if self.vocab_size < MIN_VOCAB:
            raise UserError(
                f"must be at least {MIN_VOCAB}, got {self.vocab_size}", key="probe_vocab"
            )
        if self.seq_len < 16:
            raise UserError(f"must be at least 16, got {self.seq_len}", key="probe_seq_len")

    def batch(self, rng: np.random.Generator, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        """(inputs, targets), int64 (batch_size, seq_len); unscored targets are `IGNORE`."""
        seq, mask = GENERATORS[self.task](rng, batch_size, self.seq_len + 1, self.vocab_size)
        targets = np.where(mask[:, 1:], seq[:, 1:], IGNORE)
        return seq[:, :-1].copy(), targets

    def eval_set(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """`n` held-out sequences, the same for every trial (seeded by the task, not the trial)."""
        rng = np.random.default_rng([EVAL_SEED, PROBE_TASKS.index(self.task), 1])
        return self.batch(rng, n)

    def train_rng(self, seed: int) -> np.random.Generator:
        """The training stream of a trial: disjoint from the evaluation stream."""
        return np.random.default_rng([seed, PROBE_TASKS.index(self.task), 0])


def flattened(acc_curve: list[list[float]]) -> bool:
    """Whether a probe's held-out accuracy (`[step, accuracy]` checks, in order) has stopped
    rising: it rose by at most `FLAT` from the first of its last quarter of checks."""
    tail = [acc for _, acc in acc_curve[-max(2, len(acc_curve) // 4 + 1) :]]
    return max(tail) - tail[0] <= FLAT


def resolved(acc_curves: list[list[list[float]]]) -> bool:
    """Whether a probe task trained at several seeds has left its learning transition: every
    seed's accuracy has flattened and the seeds' final accuracies agree within `AGREE`. Recall
    tasks learn in a phase transition (accuracy sits on a plateau, then "clicks"); a task whose
    seeds are still rising, or of which some have clicked and others not, measures where in
    the transition the budget ended, not the mixer, and ranks nothing."""
    finals = [curve[-1][1] for curve in acc_curves]
    return all(flattened(c) for c in acc_curves) and max(finals) - min(finals) <= AGREE
