"""HGRN2 ([HGRN2]; [Linear-MoE] Table 1): M_s = diag(a_s) M_{s-1} + (1 - a_s)^T v_s,
o_s = q_s M_s, with a forget gate a_s = sigmoid(x_s W_f) per key channel and its complement
1 - a_s as the key (state expansion of the gated linear RNN).

Fixed choices: q = SiLU(x W_q) (no extra scale); no lower bound on the forget gate (HGRN2's
per-layer lower bound, which is zero for the first layer, is left out); output block of
`LinearMixer` (per-head RMSNorm, SiLU output gate when `output_gate`).

Parameters: qfi: d -> 2 H dk + H dv (W_q, W_f and the input W_i fused); output block
(o_norm, g_proj, o_proj).
Matmuls: qfi; the gated recurrence with per-channel decay (see `common`); output block.
Decode state: S [B, H, dk, dv].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from archsearch.models.gemm import Linear
from archsearch.models.linear.common import LinearMixer, gated, heads, part


class HGRN2(LinearMixer):
    def __init__(self, arch):
        super().__init__(arch)
        H, dk, dv = self.n_heads, self.key_dim, self.value_dim
        self.qfi = Linear(arch.d_model, H * (2 * dk + dv), bias=False)

    def state_shapes(self):
        return {"S": (self.n_heads, self.key_dim, self.value_dim)}

    def _run(self, x, state, recurrent):
        H, dk, dv = self.n_heads, self.key_dim, self.value_dim
        q, f, i = self.qfi(x).split([H * dk, H * dk, H * dv], dim=-1)
        q, f, v = F.silu(heads(q, H)), heads(f, H), heads(i, H)
        g, k = F.logsigmoid(f), torch.sigmoid(-f)  # log a_s and 1 - a_s
        o, S = gated(q, k, v, g, state=part(state, "S"), recurrent=recurrent)
        return self._output(o, x), {"S": S}
