"""Basic linear attention (BLA; [LinearAttention]; [Linear-MoE] eqs. 3-4, Table 1):
M_s = M_{s-1} + φ(k_s)^T v_s,  o_s = φ(q_s) M_s  [/ φ(q_s) z_s,  z_s = z_{s-1} + φ(k_s)^T].

`feature_map` φ: identity, elu (elu(x) + 1) or relu, applied to queries and keys; queries are
scaled by dk^-1/2 (the scale cancels when `normalize`). With `normalize` the denominator
φ(q_s) z_s is computed by running the same recurrence on an extra all-ones value column (the
state gains one column holding z) and is clamped below at 1e-6 (with the identity map it can
change sign; use elu or relu for a meaningful normalised form).

Parameters: qkv: d -> 2 H dk + H dv (W_Q, W_K, W_V fused), plus the output block of
`LinearMixer` (o_norm, optional g_proj, o_proj).
Matmuls: qkv [T, d] x [d, 2 H dk + H dv]; the gated recurrence with no decay (see
`common`) with dv' = dv (+ 1 when normalized); the output block.
Decode state: S [B, H, dk, dv'].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from archsearch.models.gemm import Linear
from archsearch.models.linear.common import LinearMixer, gated, heads, part

FEATURE_MAPS = {
    "identity": lambda x: x,
    "elu": lambda x: F.elu(x) + 1.0,
    "relu": F.relu,
}


class LinearAttention(LinearMixer):
    def __init__(self, arch):
        super().__init__(arch)
        lin = arch.linear
        H, dk, dv = self.n_heads, self.key_dim, self.value_dim
        self.feature_map = FEATURE_MAPS[lin.feature_map]
        self.normalize = bool(lin.normalize)
        self.qkv = Linear(arch.d_model, H * (2 * dk + dv), bias=False)

    def state_shapes(self):
        return {"S": (self.n_heads, self.key_dim, self.value_dim + int(self.normalize))}

    def _run(self, x, state, recurrent):
        H, dk, dv = self.n_heads, self.key_dim, self.value_dim
        q, k, v = self.qkv(x).split([H * dk, H * dk, H * dv], dim=-1)
        q = self.feature_map(heads(q, H)) * dk**-0.5
        k, v = self.feature_map(heads(k, H)), heads(v, H)
        if self.normalize:
            v = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)
        o, S = gated(q, k, v, state=part(state, "S"), recurrent=recurrent)
        if self.normalize:
            o = o[..., :dv] / o[..., dv:].clamp_min(1e-6)
        return self._output(o, x), {"S": S}
