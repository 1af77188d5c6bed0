"""Rotary position embedding ([RoPE]) on the first `rope_dim` dims of each head.

The rotated dims are split in halves (the GPT-NeoX / Llama "rotate_half" layout): for pair
(x_i, x_{i + r/2}) at position p, angle p * theta^(-2i / r). No parameters, no matmuls (the
angles come from an outer product of positions and inverse frequencies: O(T * r / 2) work).
"""

from __future__ import annotations

import torch
from torch import nn


class RoPE(nn.Module):
    """Rotate the first `rope_dim` features of `x[..., T, dh]` by positions `start..start+T-1`."""

    def __init__(self, rope_dim: int, theta: float = 10000.0):
        super().__init__()
        self.rope_dim = rope_dim
        inv_freq = theta ** (-torch.arange(0, rope_dim, 2, dtype=torch.float64) / rope_dim)
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)
        self._cache: tuple[int, torch.Tensor, torch.Tensor] | None = None

    def cos_sin(self, start: int, length: int, like: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """cos and sin of shape (length, rope_dim) for positions start..start+length-1."""
        end = start + length
        if self._cache is None or self._cache[0] < end or self._cache[1].device != like.device:
            n = max(end, 2 * (self._cache[0] if self._cache else 0), 256)
            pos = torch.arange(n, device=like.device, dtype=torch.float32)
            freqs = torch.outer(pos, self.inv_freq.to(like.device))
            emb = torch.cat([freqs, freqs], dim=-1)
            self._cache = (n, emb.cos(), emb.sin())
        _, cos, sin = self._cache
        return cos[start:end].to(like.dtype), sin[start:end].to(like.dtype)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        r = self.rope_dim
        if r == 0:
            return x
        cos, sin = self.cos_sin(start, x.shape[-2], x)
        xr = x[..., :r] if r < x.shape[-1] else x
        x1, x2 = xr[..., : r // 2], xr[..., r // 2 :]
        rotated = xr * cos + torch.cat([-x2, x1], dim=-1) * sin
        return rotated if r == x.shape[-1] else torch.cat([rotated, x[..., r:]], dim=-1)
