"""RetNet retention ([RetNet]; [Linear-MoE] Table 1): M_s = γ_h M_{s-1} + k_s^T v_s,
o_s = q_s M_s, with a fixed decay per head γ_h = 1 - 2^(-5-h), h = 0..H-1.

Fixed choices: queries scaled by dk^-1/2; RetNet's xPos rotation of q and k is left out (it is
not part of the unified recurrence of Table 1); its GroupNorm is the per-head RMSNorm and its
swish gate the `output_gate` of the shared output block.

Parameters: qkv: d -> 2 H dk + H dv (fused), plus the output block (o_norm, g_proj, o_proj).
The decay is a constant buffer (log γ_h per head), not a parameter.
Matmuls: qkv; the gated recurrence with a scalar decay per head (see `common`); output block.
Decode state: S [B, H, dk, dv].
"""

from __future__ import annotations

import torch

from archsearch.models.gemm import Linear
from archsearch.models.linear.common import LinearMixer, gated, heads, part


def retnet_decays(n_heads: int) -> torch.Tensor:
    """γ_h = 1 - 2^(-5-h)."""
    return 1.0 - 2.0 ** (-5.0 - torch.arange(n_heads, dtype=torch.float64))


class RetNet(LinearMixer):
    def __init__(self, arch):
        super().__init__(arch)
        H, dk, dv = self.n_heads, self.key_dim, self.value_dim
        self.qkv = Linear(arch.d_model, H * (2 * dk + dv), bias=False)
        self.register_buffer("log_decay", retnet_decays(H).log().float(), persistent=False)

    def state_shapes(self):
        return {"S": (self.n_heads, self.key_dim, self.value_dim)}

    def _run(self, x, state, recurrent):
        H, dk, dv = self.n_heads, self.key_dim, self.value_dim
        B, T, _ = x.shape
        q, k, v = self.qkv(x).split([H * dk, H * dk, H * dv], dim=-1)
        q, k, v = heads(q, H) * dk**-0.5, heads(k, H), heads(v, H)
        g = self.log_decay.to(x.dtype)[None, :, None].expand(B, H, T)
        o, S = gated(q, k, v, g, state=part(state, "S"), recurrent=recurrent)
        return self._output(o, x), {"S": S}
