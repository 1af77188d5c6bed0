"""Learning-rate schedules as functions of training progress t in [0, 1].

Progress is the fraction of the budget spent (steps, tokens, FLOPs or wall time), so one schedule
serves every budget kind. All schedules warm up linearly from 0 to the peak over the first
`warmup` of training (a warmup of 0 starts at the peak).

- `cosine`: then cosine decay to `min_lr` at t = 1 (nanoGPT, GPT-3).
- `wsd`: warmup-stable-decay: hold the peak, then decay linearly to `min_lr` over the last
  `decay` of training.
- `wsdc`: warmup-stable-decay-constant ([PLM] section 4.2): as `wsd`, but the decay ends
  `constant` before the end and the last `constant` of training runs at `min_lr`. PLM's phases
  are warmup (1% of steps) and stable at 3e-4, decay to 3e-5, then a constant phase.
- `constant`: the peak after warmup.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from archsearch.errors import UserError

KINDS = ("cosine", "wsd", "wsdc", "constant")


@dataclass(frozen=True)
class Schedule:
    kind: str = "cosine"
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup: float = 0.02
    decay: float = 0.2
    constant: float = 0.1

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise UserError(
                f"unknown schedule {self.kind!r} (known: {', '.join(KINDS)})", key="schedule"
            )
        for key in ("warmup", "decay", "constant"):
            value = getattr(self, key)
            if not 0 <= value <= 1:
                raise UserError(f"must lie in [0, 1], got {value}", key=key)
        tail = self.decay + (self.constant if self.kind == "wsdc" else 0.0)
        if self.kind in ("wsd", "wsdc") and self.warmup + tail > 1:
            raise UserError(
                f"warmup ({self.warmup}) + decay ({self.decay})"
                + (f" + constant ({self.constant})" if self.kind == "wsdc" else "")
                + " exceed the whole budget",
                key="decay",
            )

    def __call__(self, t: float) -> float:
        """The learning rate at progress `t` (clamped to [0, 1])."""
        t = min(max(t, 0.0), 1.0)
        if t < self.warmup:
            return self.lr * t / self.warmup
        if self.kind == "constant":
            return self.lr
        if self.kind == "cosine":
            ratio = (t - self.warmup) / (1.0 - self.warmup) if self.warmup < 1 else 1.0
            return self.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (self.lr - self.min_lr)
        end = 1.0 - (self.constant if self.kind == "wsdc" else 0.0)
        start = end - self.decay
        if t < start:
            return self.lr
        if t >= end:
            return self.min_lr
        return self.lr + (t - start) / self.decay * (self.min_lr - self.lr)
