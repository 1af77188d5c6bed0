"""The mixer contract: what a sequence mixer or a channel mixer provides (docs/MIXERS.md).

Every built-in mixer satisfies it (tests/test_plugins_contract.py), and a plugin registered in
the entry-point group `archsearch.mixers` / `archsearch.channel_mixers` must too
(`archsearch check-mixer pkg.module:Class` and `archsearch.models.conformance.check_mixer`
run the checks).
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

import torch

__all__ = [
    "PLUGIN_READS",
    "STATE_GROWTH",
    "ChannelMixer",
    "SequenceMixer",
    "State",
    "satisfies",
    "unreadable",
]

State = dict[str, torch.Tensor]
STATE_GROWTH = ("constant", "growing")
# the ArchConfig fields a plugin sequence mixer may read (besides the built-ins' own sections)
PLUGIN_READS = (
    "d_model",
    "norm_eps",
    "max_seq_len",
    "linear.n_heads",
    "linear.key_dim",
    "linear.value_dim",
    "linear.expand",
    "linear.gate_rank",
    "linear.conv_size",
    "linear.output_gate",
)


@runtime_checkable
class SequenceMixer(Protocol):
    """A sequence mixer, built as `cls(arch)` from the resolved ArchConfig.

    - `forward(x)`: the parallel (training) form, x [B, T, d] -> [B, T, d], causal;
    - `init_state(batch_size, device, dtype)`: the empty decode state, a dict of tensors whose
      first dimension is the batch;
    - `prefill(x, state, pos)`: T tokens after `pos` already seen -> (y [B, T, d], new state);
    - `step(x, state, pos)`: one token x [B, d] -> (y [B, d], new state); prefill then steps
      compute what `forward` computes on the whole sequence;
    - `state_growth`: "constant" (a recurrent state) or "growing" (a cache that grows with the
      context, as a KV cache does);
    - `reads`: the ArchConfig fields it reads (key paths, e.g. "linear.n_heads").

    Optional: `declared_costs(arch, kind, T, n0, B)` returning any of {"params", "flops",
    "state_elements"} for a phase (`kind` "forward": T tokens after n0; "step": one token at
    context n0); the conformance kit checks them against tracing.
    """

    state_growth: ClassVar[str]
    reads: ClassVar[tuple[str, ...]]

    def forward(self, x: torch.Tensor) -> torch.Tensor: ...

    def init_state(self, batch_size: int, device: Any = None, dtype: Any = None) -> State: ...

    def prefill(self, x: torch.Tensor, state: State, pos: int) -> tuple[torch.Tensor, State]: ...

    def step(self, x: torch.Tensor, state: State, pos: int) -> tuple[torch.Tensor, State]: ...


@runtime_checkable
class ChannelMixer(Protocol):
    """A channel mixer (FFN), built as `cls(d_model, d_ffn)`: `forward(x)` maps [B, T, d] to
    [B, T, d] token by token (no mixing across positions)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor: ...


def satisfies(cls: type) -> bool:
    """Whether a sequence-mixer class declares every member of the contract."""
    members = ("forward", "init_state", "prefill", "step")
    return (
        all(callable(getattr(cls, m, None)) for m in members)
        and getattr(cls, "state_growth", None) in STATE_GROWTH
        and isinstance(getattr(cls, "reads", None), tuple)
    )


def unreadable(cls: type) -> list[str]:
    """The fields a plugin sequence mixer declares in `reads` that a plugin may not read."""
    return [r for r in getattr(cls, "reads", ()) if r not in PLUGIN_READS]
