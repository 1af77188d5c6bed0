"""Softmax attention: MHA, GQA and MQA (through `n_kv_heads`), RoPE, optional sliding window.

Shapes: d = d_model, H = n_heads, G = n_kv_heads (H for MHA, 1 for MQA), dh = head_dim,
r = rope_dim rotary dims per head (the first r of each q/k head, rotate-half layout).

Parameters (bias-free):
  qkv:    d -> (H + 2G) * dh   (W_Q, W_K, W_V fused into one matmul; rows in that order)
  o_proj: H * dh -> d
Training forward over T tokens (batch B):
  matmuls qkv [B*T, d] x [d, (H + 2G) dh]; SDPA with H query heads over G shared KV heads
  (scores [B, H, T, T] = Q K^T / sqrt(dh), then probs x V), causal (`is_causal`) or, with a
  `window` W, an explicit band mask (0 <= t - s < W); o_proj [B*T, H dh] x [H dh, d].
Decode step at context n (n tokens already cached):
  qkv [B, d] x [d, (H + 2G) dh]; scores [B, H, 1, m] and probs x V over the m = min(n + 1, W)
  cached positions; o_proj [B, H dh] x [H dh, d].
Cache: {"k", "v"}, each [B, G, m, dh]: exactly the rotated keys and the values of the KV heads,
  2 * G * dh * m elements per layer; with a window it holds at most W positions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from archsearch.arch import ArchConfig
from archsearch.models.gemm import Linear
from archsearch.models.rope import RoPE

Cache = dict[str, torch.Tensor]


def band_mask(t_q: int, t_k: int, window: int | None, device: torch.device) -> torch.Tensor:
    """Boolean [t_q, t_k] mask (True = attend) for queries at the last t_q of t_k positions:
    causal, and within the last `window` positions when a window is set."""
    q_pos = torch.arange(t_k - t_q, t_k, device=device)[:, None]
    k_pos = torch.arange(t_k, device=device)[None, :]
    mask = k_pos <= q_pos
    if window is not None:
        mask &= q_pos - k_pos < window
    return mask


class Attention(nn.Module):
    """Multi-head attention with grouped KV heads (MHA/GQA/MQA), RoPE and an optional window."""

    state_growth = "growing"
    reads = ("d_model", "max_seq_len", "attention")

    def __init__(self, arch: ArchConfig):
        super().__init__()
        a = arch.attention
        self.n_heads, self.n_kv_heads, self.head_dim = a.n_heads, a.n_kv_heads, a.head_dim
        self.window = a.window
        self.qkv = Linear(arch.d_model, (a.n_heads + 2 * a.n_kv_heads) * a.head_dim, bias=False)
        self.o_proj = Linear(a.n_heads * a.head_dim, arch.d_model, bias=False)
        self.rope = RoPE(a.rope_dim, a.rope_theta)

    def _qkv(self, x: torch.Tensor, start: int) -> tuple[torch.Tensor, ...]:
        """x [B, T, d] -> q [B, H, T, dh], k and v [B, G, T, dh], rotated from `start`."""
        B, T, _ = x.shape
        H, G, dh = self.n_heads, self.n_kv_heads, self.head_dim
        q, k, v = self.qkv(x).view(B, T, H + 2 * G, dh).transpose(1, 2).split([H, G, G], dim=1)
        return self.rope(q, start), self.rope(k, start), v

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask) -> torch.Tensor:
        gqa = self.n_kv_heads != self.n_heads
        if mask is None:
            causal = bool(q.shape[-2] > 1)  # a plain bool under a JIT trace too (fvcore)
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)

    def _out(self, o: torch.Tensor) -> torch.Tensor:
        B, _, T, _ = o.shape
        return self.o_proj(o.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Training form: x [B, T, d] -> [B, T, d]."""
        q, k, v = self._qkv(x, 0)
        T = x.shape[1]
        mask = None
        if self.window is not None and self.window < T:
            mask = band_mask(T, T, self.window, x.device)
        return self._out(self._attend(q, k, v, mask))

    # -- decoding -------------------------------------------------------------------------------

    def init_state(self, batch_size: int, device=None, dtype=None) -> Cache:
        shape = (batch_size, self.n_kv_heads, 0, self.head_dim)
        return {
            "k": torch.zeros(shape, device=device, dtype=dtype),
            "v": torch.zeros(shape, device=device, dtype=dtype),
        }

    def _keep(self, t: torch.Tensor) -> torch.Tensor:
        """The cache keeps at most `window` positions (a fresh tensor, not a view)."""
        if self.window is not None and t.shape[2] > self.window:
            return t[:, :, -self.window :].clone()
        return t

    def prefill(self, x: torch.Tensor, state: Cache, pos: int) -> tuple[torch.Tensor, Cache]:
        """Process x [B, T, d] after `pos` cached tokens; return the output and the new cache."""
        q, k, v = self._qkv(x, pos)
        k = torch.cat([state["k"], k], dim=2)
        v = torch.cat([state["v"], v], dim=2)
        T, n = x.shape[1], k.shape[2]
        mask = None
        if n > T or (self.window is not None and self.window < n):
            mask = band_mask(T, n, self.window, x.device)
        y = self._out(self._attend(q, k, v, mask))
        return y, {"k": self._keep(k), "v": self._keep(v)}

    def step(self, x: torch.Tensor, state: Cache, pos: int) -> tuple[torch.Tensor, Cache]:
        """One token x [B, d] at position `pos` -> y [B, d] and the grown (or slid) cache."""
        q, k, v = self._qkv(x[:, None], pos)
        k = self._keep(torch.cat([state["k"], k], dim=2))
        v = self._keep(torch.cat([state["v"], v], dim=2))
        y = self._out(self._attend(q, k, v, None))
        return y[:, 0], {"k": k, "v": v}
