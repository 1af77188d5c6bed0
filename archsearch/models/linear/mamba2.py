"""Mamba2 ([Mamba2], SSD; [Linear-MoE] Table 1): M_s = exp(-a b_s) M_{s-1} +
b_s k_s^T v_s, a scalar data-dependent decay per head.

Per head h (headdim P = value_dim, d_state N = key_dim shared by all heads, one group):
  [z, x, B, C, dt] = in_proj(u);  [x, B, C] = SiLU(causal depthwise conv([x, B, C]));
  Δ = softplus(dt + dt_bias);  A = -exp(A_log);
  S_t = exp(Δ_t A) S_{t-1} + (Δ_t B_t)^T x_t;  y_t = C_t S_t + D x_t;
  out = out_proj(RMSNorm(y * SiLU(z)))   (the gated RMSNorm over d_inner = H P).
In the unified notation: q = C, k = Δ B, v = x, log decay g = Δ A (see `common.gated`).
`expand` sets d_inner = expand * d_model = H * P. With `output_gate: false`, z is dropped and
the norm is a plain RMSNorm. `conv_size: 0` drops the convolution (SiLU only).
Init: A_log = log U(1, 16), dt_bias as in `deltanet.init_dt_bias`, D = 1.

Parameters: in_proj: d -> 2 d_inner + 2 N + H (without the gate: d_inner + 2 N + H);
conv: ShortConv(d_inner + 2 N, conv_size); A_log [H]; dt_bias [H]; D [H];
norm: RMSNorm(d_inner); o_proj (out_proj): d_inner -> d.
Matmuls: in_proj; the gated recurrence with a scalar decay per head, q and k of size N per head
(see `common`); o_proj.
Decode state: S [B, H, N, P] (+ conv [B, conv_size - 1, d_inner + 2 N]).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from archsearch.models.gemm import Linear
from archsearch.models.linear.common import LinearMixer, ShortConv, gated, heads, part
from archsearch.models.linear.deltanet import init_dt_bias
from archsearch.models.norm import RMSNorm


class Mamba2(LinearMixer):
    def __init__(self, arch):
        super().__init__(arch, output_block=False)
        lin = arch.linear
        H, N, P = self.n_heads, self.key_dim, self.value_dim
        self.d_inner = H * P
        self.gate = bool(lin.output_gate)
        self.in_proj = Linear(
            arch.d_model, (2 if self.gate else 1) * self.d_inner + 2 * N + H, bias=False
        )
        k = lin.conv_size
        self.conv = ShortConv(self.d_inner + 2 * N, k) if k else None
        self.A_log = nn.Parameter(torch.empty(H).uniform_(1, 16).log())
        self.dt_bias = nn.Parameter(init_dt_bias(H))
        self.D = nn.Parameter(torch.ones(H))
        self.norm = RMSNorm(self.d_inner, arch.norm_eps)
        self.o_proj = Linear(self.d_inner, arch.d_model, bias=False)

    def state_shapes(self):
        shapes = {"S": (self.n_heads, self.key_dim, self.value_dim)}
        if self.conv is not None:
            shapes["conv"] = (self.conv.kernel_size - 1, self.d_inner + 2 * self.key_dim)
        return shapes

    def _run(self, x, state, recurrent):
        H, N, di = self.n_heads, self.key_dim, self.d_inner
        Bsz, T, _ = x.shape
        new = {}
        parts = self.in_proj(x).split(([di] if self.gate else []) + [di + 2 * N, H], dim=-1)
        z = parts[0] if self.gate else None
        xbc, dt = parts[-2], parts[-1]
        if self.conv is not None:
            xbc, new["conv"] = self.conv(xbc, part(state, "conv"))
        else:
            xbc = F.silu(xbc)
        xs, Bm, Cm = xbc.split([di, N, N], dim=-1)
        dt = F.softplus(dt + self.dt_bias).transpose(1, 2)  # [B, H, T]
        v = heads(xs, H)  # [B, H, T, P]
        q = Cm[:, None].expand(Bsz, H, T, N)
        k = Bm[:, None] * dt[..., None]  # [B, H, T, N]
        g = -self.A_log.exp()[:, None] * dt
        y, new["S"] = gated(q, k, v, g, state=part(state, "S"), recurrent=recurrent)
        y = y + self.D[:, None, None] * v
        y = y.transpose(1, 2).reshape(Bsz, T, di)
        if z is not None:
            y = y * F.silu(z)
        return self.o_proj(self.norm(y)), new
