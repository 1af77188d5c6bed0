"""Analytic cost model (PROVISIONAL: replaced by exact per-module counts in issue 4).

`train_flops_per_token(arch, seq_len)`: forward + backward FLOPs per training token.
"""

from __future__ import annotations

from archsearch.arch import ArchConfig


def train_flops_per_token(arch: ArchConfig, seq_len: int) -> float:
    """Provisional: 6 x (dense-equivalent active params incl. LM head) + causal attention."""
    r = arch.resolved()
    d = r.d_model
    per_layer = 4 * d * d
    if r.moe is not None:
        per_layer += 3 * d * r.moe.d_expert * (r.moe.top_k + r.moe.n_shared)
    else:
        per_layer += 3 * d * r.ffn.d_ffn
    attn = 6 * r.n_attention_layers * seq_len * d  # causal-halved QK^T and AV, x3 for backward
    return 6.0 * (r.n_layers * per_layer + r.vocab_size * d) + attn
