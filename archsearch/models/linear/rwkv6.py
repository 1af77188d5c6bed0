"""RWKV6 "Finch" time mixing ([RWKV6]; [Linear-MoE] Table 1):
M_s = diag(w_s) M_{s-1} + k_s^T v_s with a data-dependent decay per key channel, read before
the update with a bonus u for the current token: o_s = r_s (M_{s-1} + diag(u) k_s^T v_s).

Token shift with data-dependent interpolation (ddlerp), for x_s and the previous x_{s-1}:
  δ = x_{s-1} - x_s;  m = tanh((x_s + δ μ_x) W_1) W_2^{(c)} for c in (w, k, v, r, g);
  x_c = x_s + δ (μ_c + m_c);  r = x_r W_r, k = x_k W_k, v = x_v W_v, g = SiLU(x_g W_g);
  log w_s = -exp(w_0 + tanh(x_w W_d1) W_d2)  (clamped at `common.LOG_DECAY_MIN`);
  out = o_proj(RMSNorm_per_head(o) * g).
Fixed choices: the low rank of both the ddlerp (W_1, W_2) and the decay (W_d1, W_d2) maps is
`gate_rank`; RWKV6's GroupNorm is the per-head RMSNorm of the shared output block and the gate
g its `output_gate` (fed with x_g); no extra scale on r. Init: μ = 0.5, w_0 from -6 to -1 over
the channels (RWKV6's decay_speed ramp), u = 0.5.

Parameters (n = 5 interpolations with the output gate, 4 without): mu_x [d]; mu [n, d];
maa_a: d -> n R; maa_b [n, R, d]; w0 [H dk];
decay_a: d -> R; decay_b: R -> H dk; u [H, dk]; r_proj, k_proj: d -> H dk; v_proj: d -> H dv;
output block (o_norm, g_proj: d -> H dv, o_proj).
Matmuls: maa_a [T, d] x [d, n R]; maa_b: n x ([T, R] x [R, d]); decay_a; decay_b; r, k, v
(and g) projections; the strict gated recurrence with per-channel decay (see `common`); o_proj.
The bonus r (u ⊙ k) v is elementwise (H (2 dk + dv) per token).
Decode state: S [B, H, dk, dv], shift [B, 1, d] (the previous token's input).
"""

from __future__ import annotations

import torch
from torch import nn

from archsearch.models.gemm import Linear
from archsearch.models.linear.common import LinearMixer, gated, heads, part, token_shift


class RWKV6(LinearMixer):
    def __init__(self, arch):
        super().__init__(arch)
        d, H, dk, dv = arch.d_model, self.n_heads, self.key_dim, self.value_dim
        R = arch.linear.gate_rank
        self.rank, self.n_mix = R, 5 if self.g_proj is not None else 4
        self.mu_x = nn.Parameter(torch.full((d,), 0.5))
        self.mu = nn.Parameter(torch.full((self.n_mix, d), 0.5))
        self.maa_a = Linear(d, self.n_mix * R, bias=False)
        self.maa_b = nn.Parameter(torch.empty(self.n_mix, R, d).uniform_(-0.01, 0.01))
        ramp = torch.linspace(0, 1, H * dk) ** 0.7
        self.w0 = nn.Parameter(-6.0 + 5.0 * ramp)
        self.decay_a = Linear(d, R, bias=False)
        self.decay_b = Linear(R, H * dk, bias=False)
        self.u = nn.Parameter(torch.full((H, dk), 0.5))
        self.r_proj = Linear(d, H * dk, bias=False)
        self.k_proj = Linear(d, H * dk, bias=False)
        self.v_proj = Linear(d, H * dv, bias=False)

    def state_shapes(self):
        return {"S": (self.n_heads, self.key_dim, self.value_dim), "shift": (1, self.d_model)}

    def _run(self, x, state, recurrent):
        H, n = self.n_heads, self.n_mix
        B, T, d = x.shape
        prev, shift = token_shift(x, part(state, "shift"))
        dx = prev - x
        m = torch.tanh(self.maa_a(x + dx * self.mu_x)).view(B * T, n, self.rank).transpose(0, 1)
        m = torch.matmul(m, self.maa_b).view(n, B, T, d)  # [n, B, T, d]
        xw, xk, xv, xr, *xg = (x + dx * (self.mu[:, None, None] + m)).unbind(0)
        r = heads(self.r_proj(xr), H)
        k = heads(self.k_proj(xk), H)
        v = heads(self.v_proj(xv), H)
        g = -torch.exp(self.w0 + self.decay_b(torch.tanh(self.decay_a(xw))))
        o, S = gated(r, k, v, heads(g, H), strict=True, state=part(state, "S"), recurrent=recurrent)
        bonus = (r * self.u[:, None] * k).sum(-1, keepdim=True)  # [B, H, T, 1]
        o = o + bonus * v
        return self._output(o, xg[0] if xg else None), {"S": S, "shift": shift}
