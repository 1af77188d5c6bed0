"""Multi-head latent attention (MLA): [PLM] section 2 and Appendix D (DeepSeek-V2 style).

Shapes: d = d_model, H = n_heads, dn = head_dim (non-rotary q/k size, "d_nope"), dr = rope_dim
(decoupled rotary key shared by all heads), dv = v_head_dim, dc = kv_rank, dq = q_rank.

Parameters (bias-free):
  queries, no compression (PLM, q_rank None):  q_proj: d -> H * (dn + dr)
  queries, compressed (q_rank set):  q_a: d -> dq, q_norm: RMSNorm(dq), q_b: dq -> H * (dn + dr)
  kv_a:    d -> dc + dr   (W_DKV and W_KR fused: the latent c_kv and the shared RoPE key k_R)
  kv_norm: RMSNorm(dc)    (on the latent)
  kv_b:    dc -> H * (dn + dv)   (per head: W_UK rows [h*(dn+dv), h*(dn+dv)+dn), then W_UV)
  o_proj:  H * dv -> d
Equations (Appendix D, eqs. 8-17): c = norm(W_DKV h), k_C = W_UK c, k_R = RoPE(W_KR h),
  k_i = [k_C,i; k_R], q_i = [W_Q,i h; RoPE(W_QR,i h)], v_i = W_UV,i c,
  o_i = softmax(q_i k_i^T / sqrt(dn + dr)) v_i, u = W_O [o_1; ...; o_H].
Training forward (the plain, up-projecting form) over T tokens:
  matmuls q (d x H(dn+dr), or d x dq then dq x H(dn+dr)), kv_a (d x (dc+dr)), kv_b
  (dc x H(dn+dv)), SDPA over H heads ([T, dn+dr] scores, values of dv), o_proj (H dv x d).
  The values are zero-padded to dn + dr (where dv is less) and the output's extra columns,
  zeros, dropped: torch's fused CPU attention needs one head size for q, k and v, and without
  it SDPA falls back to its math form, which writes the [T, n] scores out and is several
  times slower. Only where the fused kernel is enabled: the cost model prices the ideal kernel, and
  its counts are checked under the math backend, which runs the values unpadded.
Decode step at context n (the weight-absorbed form, W_UK folded into the query and W_UV into
  the output; `step_reference` keeps the plain form):
  q matmuls and kv_a as above on one token; absorb: per head q_C [dn] x W_UK [dn, dc];
  scores: [H, dc] x [dc, m] (latent part) + [H, dr] x [dr, m] (RoPE part); probs [H, m] x
  latents [m, dc]; per head [dc] x W_UV^T [dc, dv]; o_proj.  (m = min(n + 1, window))
Cache: {"c": [B, m, dc] normalised latents, "k_rope": [B, m, dr] rotated RoPE keys}: exactly
  (dc + dr) * m elements per layer ([PLM] eq. 7), never the up-projected K and V.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from archsearch.arch import ArchConfig
from archsearch.models.attention import band_mask
from archsearch.models.gemm import Linear
from archsearch.models.norm import RMSNorm
from archsearch.models.rope import RoPE

Cache = dict[str, torch.Tensor]


class MLA(nn.Module):
    """Multi-head latent attention with decoupled RoPE and an optional query compression."""

    state_growth = "growing"
    reads = ("d_model", "norm_eps", "max_seq_len", "attention")

    def __init__(self, arch: ArchConfig):
        super().__init__()
        a = arch.attention
        d, H = arch.d_model, a.n_heads
        self.n_heads, self.dn, self.dr, self.dv = H, a.head_dim, a.rope_dim, a.v_head_dim
        self.dc, self.q_rank, self.window = a.kv_rank, a.q_rank, a.window
        q_out = H * (self.dn + self.dr)
        if a.q_rank is None:
            self.q_proj = Linear(d, q_out, bias=False)
        else:
            self.q_a = Linear(d, a.q_rank, bias=False)
            self.q_norm = RMSNorm(a.q_rank, arch.norm_eps)
            self.q_b = Linear(a.q_rank, q_out, bias=False)
        self.kv_a = Linear(d, self.dc + self.dr, bias=False)
        self.kv_norm = RMSNorm(self.dc, arch.norm_eps)
        self.kv_b = Linear(self.dc, H * (self.dn + self.dv), bias=False)
        self.o_proj = Linear(H * self.dv, d, bias=False)
        self.rope = RoPE(self.dr, a.rope_theta)
        self.scale = 1.0 / math.sqrt(self.dn + self.dr)

    # -- shared pieces --------------------------------------------------------------------------

    def _queries(self, x: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, T, d] -> q_nope [B, H, T, dn], rotated q_rope [B, H, T, dr]."""
        B, T, _ = x.shape
        q = self.q_proj(x) if self.q_rank is None else self.q_b(self.q_norm(self.q_a(x)))
        q = q.view(B, T, self.n_heads, self.dn + self.dr).transpose(1, 2)
        q_nope, q_rope = q.split([self.dn, self.dr], dim=-1)
        return q_nope, self.rope(q_rope, start)

    def _latents(self, x: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, T, d] -> normalised latent c [B, T, dc], rotated shared key k_rope [B, T, dr]."""
        c, k_rope = self.kv_a(x).split([self.dc, self.dr], dim=-1)
        return self.kv_norm(c), self.rope(k_rope, start)

    def _up(self, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Plain up-projection: c [B, n, dc] -> k_nope [B, H, n, dn], v [B, H, n, dv]."""
        B, n, _ = c.shape
        kv = self.kv_b(c).view(B, n, self.n_heads, self.dn + self.dv).transpose(1, 2)
        return kv.split([self.dn, self.dv], dim=-1)

    def _plain(self, x, c, k_rope, start, mask) -> torch.Tensor:
        """The up-projecting form for queries x [B, T, d] over latents c [B, n, dc]."""
        q_nope, q_rope = self._queries(x, start)
        k_nope, v = self._up(c)
        B, H, n = c.shape[0], self.n_heads, c.shape[1]
        q = torch.cat([q_nope, q_rope], dim=-1)
        k = torch.cat([k_nope, k_rope[:, None].expand(B, H, n, self.dr)], dim=-1)
        T = x.shape[1]
        # one head size for SDPA's fused kernel, where it may run (the flag is not CUDA's alone)
        pad = self.dn + self.dr - self.dv if torch.backends.cuda.flash_sdp_enabled() else 0
        if pad > 0:
            v = F.pad(v, (0, pad))
        if mask is None:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=bool(T > 1), scale=self.scale)
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)
        if pad > 0:
            o = o[..., : self.dv]
        return self.o_proj(o.transpose(1, 2).reshape(B, T, H * self.dv))

    def _mask(self, T: int, n: int, device) -> torch.Tensor | None:
        if n > T or (self.window is not None and self.window < n):
            return band_mask(T, n, self.window, device)
        return None

    def _keep(self, t: torch.Tensor) -> torch.Tensor:
        if self.window is not None and t.shape[1] > self.window:
            return t[:, -self.window :].clone()
        return t

    # -- training -------------------------------------------------------------------------------

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Training form: x [B, T, d] -> [B, T, d]."""
        c, k_rope = self._latents(x, 0)
        return self._plain(x, c, k_rope, 0, self._mask(x.shape[1], x.shape[1], x.device))

    # -- decoding -------------------------------------------------------------------------------

    def init_state(self, batch_size: int, device=None, dtype=None) -> Cache:
        return {
            "c": torch.zeros(batch_size, 0, self.dc, device=device, dtype=dtype),
            "k_rope": torch.zeros(batch_size, 0, self.dr, device=device, dtype=dtype),
        }

    def prefill(self, x: torch.Tensor, state: Cache, pos: int) -> tuple[torch.Tensor, Cache]:
        c, k_rope = self._latents(x, pos)
        c = torch.cat([state["c"], c], dim=1)
        k_rope = torch.cat([state["k_rope"], k_rope], dim=1)
        y = self._plain(x, c, k_rope, pos, self._mask(x.shape[1], c.shape[1], x.device))
        return y, {"c": self._keep(c), "k_rope": self._keep(k_rope)}

    def _append(self, x: torch.Tensor, state: Cache, pos: int) -> Cache:
        c, k_rope = self._latents(x[:, None], pos)
        return {
            "c": self._keep(torch.cat([state["c"], c], dim=1)),
            "k_rope": self._keep(torch.cat([state["k_rope"], k_rope], dim=1)),
        }

    def step(self, x: torch.Tensor, state: Cache, pos: int) -> tuple[torch.Tensor, Cache]:
        """One token x [B, d] in the weight-absorbed form: attention runs in the latent space."""
        new = self._append(x, state, pos)
        c, k_rope = new["c"], new["k_rope"]  # [B, m, dc], [B, m, dr]
        q_nope, q_rope = self._queries(x[:, None], pos)  # [B, H, 1, dn], [B, H, 1, dr]
        H, dn, dv = self.n_heads, self.dn, self.dv
        w = self.kv_b.weight.view(H, dn + dv, self.dc)
        w_uk, w_uv = w[:, :dn], w[:, dn:]  # [H, dn, dc], [H, dv, dc]
        # heads are the rows of each product: every weight and the cache are read once (a
        # broadcast matmul over heads or batch would copy the cache per head, the weights per row)
        q_lat = torch.bmm(q_nope[:, :, 0].transpose(0, 1), w_uk).transpose(0, 1)  # [B, H, dc]
        scores = torch.bmm(q_rope[:, :, 0], k_rope.transpose(1, 2))  # [B, H, m]
        scores = torch.baddbmm(scores, q_lat, c.transpose(1, 2))  # + the latent part
        probs = torch.softmax(scores * self.scale, dim=-1)
        o_lat = torch.bmm(probs, c)  # [B, H, dc]
        o = torch.bmm(o_lat.transpose(0, 1), w_uv.transpose(1, 2))  # [H, B, dv]: W_UV folded in
        y = self.o_proj(o.transpose(0, 1).reshape(x.shape[0], H * dv))
        return y, new

    def step_reference(self, x: torch.Tensor, state: Cache, pos: int) -> tuple[torch.Tensor, Cache]:
        """One token in the plain form: up-project every cached latent to K and V (reference)."""
        new = self._append(x, state, pos)
        y = self._plain(x[:, None], new["c"], new["k_rope"], pos, None)
        return y[:, 0], new
