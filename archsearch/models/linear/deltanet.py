"""DeltaNet and Gated DeltaNet: the delta rule ([FastWeights]; [DeltaNet], [GatedDeltaNet];
[Linear-MoE] Table 1).

  deltanet:        M_s = (I - β_s k_s^T k_s) M_{s-1} + β_s k_s^T v_s
  gated_deltanet:  M_s = a_s (I - β_s k_s^T k_s) M_{s-1} + β_s k_s^T v_s
  o_s = q_s M_s,  β_s = sigmoid(x_s W_β) per head,  q and k L2-normalised per head.

Table 1 writes Gated DeltaNet as a_s (I - k_s^T k_s) M_{s-1} + b_s k_s^T v_s; we follow the
Gated DeltaNet paper, which keeps β_s inside the transition (the same for β_s = 1). The scalar
decay per head is Mamba2's: log a_s = -exp(A_log) * softplus(x_s W_a + dt_bias).
Fixed choices: q, k and v pass the optional short causal convolution (`conv_size`, with SiLU)
or else a SiLU; queries are scaled by dk^-1/2 after the L2 norm; output block of `LinearMixer`.
Init: A_log = log U(1, 16), dt_bias = softplus^-1 of dt ~ log-uniform(1e-3, 1e-1).

Parameters: qkv: d -> 2 H dk + H dv (fused); conv: ShortConv(2 H dk + H dv, conv_size);
b_proj: d -> H; gated only: a_proj: d -> H, A_log [H], dt_bias [H]; output block
(o_norm, g_proj, o_proj).
Matmuls: qkv, b_proj (, a_proj); the delta rule (see `common`); output block.
Decode state: S [B, H, dk, dv] (+ conv [B, conv_size - 1, 2 H dk + H dv]).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from archsearch.models.gemm import Linear
from archsearch.models.linear.common import LinearMixer, ShortConv, delta, heads, part


def init_dt_bias(n: int, dt_min: float = 1e-3, dt_max: float = 0.1) -> torch.Tensor:
    """softplus^-1(dt) for dt log-uniform in [dt_min, dt_max] (Mamba2's initialisation)."""
    dt = torch.exp(torch.rand(n) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
    return dt + torch.log(-torch.expm1(-dt))


class DeltaNet(LinearMixer):
    gated = False

    def __init__(self, arch):
        super().__init__(arch)
        d, H, dk, dv = arch.d_model, self.n_heads, self.key_dim, self.value_dim
        width = H * (2 * dk + dv)
        self.qkv = Linear(d, width, bias=False)
        k = arch.linear.conv_size
        self.conv = ShortConv(width, k) if k else None
        self.b_proj = Linear(d, H, bias=False)
        if self.gated:
            self.a_proj = Linear(d, H, bias=False)
            self.A_log = nn.Parameter(torch.empty(H).uniform_(1, 16).log())
            self.dt_bias = nn.Parameter(init_dt_bias(H))

    def state_shapes(self):
        H, dk, dv = self.n_heads, self.key_dim, self.value_dim
        shapes = {"S": (H, dk, dv)}
        if self.conv is not None:
            shapes["conv"] = (self.conv.kernel_size - 1, H * (2 * dk + dv))
        return shapes

    def _run(self, x, state, recurrent):
        H, dk, dv = self.n_heads, self.key_dim, self.value_dim
        new = {}
        qkv = self.qkv(x)
        if self.conv is not None:
            qkv, new["conv"] = self.conv(qkv, part(state, "conv"))
        else:
            qkv = F.silu(qkv)
        q, k, v = qkv.split([H * dk, H * dk, H * dv], dim=-1)
        q = F.normalize(heads(q, H), dim=-1) * dk**-0.5
        k, v = F.normalize(heads(k, H), dim=-1), heads(v, H)
        beta = torch.sigmoid(self.b_proj(x)).transpose(1, 2)  # [B, H, T]
        g = None
        if self.gated:
            dt = F.softplus(self.a_proj(x) + self.dt_bias)
            g = (-self.A_log.exp() * dt).transpose(1, 2)  # [B, H, T]
        o, new["S"] = delta(q, k, v, beta, g, state=part(state, "S"), recurrent=recurrent)
        return self._output(o, x), new


class GatedDeltaNet(DeltaNet):
    gated = True
