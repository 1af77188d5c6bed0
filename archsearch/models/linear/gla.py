"""Gated linear attention ([GLA]; [Linear-MoE] Table 1):
M_s = diag(a_s) M_{s-1} + k_s^T v_s, o_s = q_s M_s, with a data-dependent decay per key channel
a_s = sigmoid(x_s W_a1 W_a2)^(1/16) (log a_s = logsigmoid(.) / 16, the GLA paper's gate
normaliser), W_a1 W_a2 a low-rank map of rank `gate_rank`.

Fixed choices: queries scaled by dk^-1/2; gate normaliser 16; the output block of
`LinearMixer` (per-head RMSNorm, SiLU output gate when `output_gate`).

Parameters: qkv: d -> 2 H dk + H dv (fused); gk_a: d -> gate_rank; gk_b: gate_rank -> H dk;
plus the output block (o_norm, g_proj, o_proj).
Matmuls: qkv; gk_a; gk_b; the gated recurrence with per-channel decay (see `common`); output.
Decode state: S [B, H, dk, dv].
"""

from __future__ import annotations

import torch.nn.functional as F

from archsearch.models.gemm import Linear
from archsearch.models.linear.common import LinearMixer, gated, heads, part

GATE_NORMALIZER = 16.0


class GLA(LinearMixer):
    def __init__(self, arch):
        super().__init__(arch)
        H, dk, dv = self.n_heads, self.key_dim, self.value_dim
        r = arch.linear.gate_rank
        self.qkv = Linear(arch.d_model, H * (2 * dk + dv), bias=False)
        self.gk_a = Linear(arch.d_model, r, bias=False)
        self.gk_b = Linear(r, H * dk, bias=False)

    def state_shapes(self):
        return {"S": (self.n_heads, self.key_dim, self.value_dim)}

    def _run(self, x, state, recurrent):
        H, dk, dv = self.n_heads, self.key_dim, self.value_dim
        q, k, v = self.qkv(x).split([H * dk, H * dk, H * dv], dim=-1)
        q, k, v = heads(q, H) * dk**-0.5, heads(k, H), heads(v, H)
        g = heads(F.logsigmoid(self.gk_b(self.gk_a(x))) / GATE_NORMALIZER, H)
        o, S = gated(q, k, v, g, state=part(state, "S"), recurrent=recurrent)
        return self._output(o, x), {"S": S}
