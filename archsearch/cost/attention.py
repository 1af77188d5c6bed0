"""Softmax attention: MHA/GQA/MQA (`archsearch.models.attention`) and MLA
(`archsearch.models.mla`), their ops, parameters and KV cache.

Scores are counted over the full T x n block as the MATH SDPA backend computes them
(`causal="full"`), or over the causally visible pairs only (`causal="half"`, the work of a
causal kernel, [PLM] Appendix D's convention); a sliding window caps both.
"""

from __future__ import annotations

import numpy as np

from archsearch.cost.ops import Columns, Op, Phase, launches, linear_op, visible_pairs

# operators dispatched (decode step, one chunk, each further chunk; see `ops.launches`)
ATTENTION_LAUNCHES = {"gqa": (43, 37, 0), "mla": (69, 50, 0)}


def attention_ops(c: Columns, p: Phase) -> list[Op]:
    """MHA/GQA/MQA (archsearch.models.attention) for rows with mla == 0."""
    H, G, dh, d, W = c.H, c.G, c.dh, c.d, c.W
    B, N = p.B, p.tokens
    qkv = linear_op("attn.qkv", N, d, (H + 2 * G) * dh)
    o = linear_op("attn.o_proj", N, H * dh, d)
    if p.kind == "step":
        m = np.where(W > 0, np.minimum(p.n0 + 1, W), p.n0 + 1)
        pairs_full = pairs_half = B * m
        cache_read = B * 2 * G * dh * m
    else:
        n0 = np.where(W > 0, np.minimum(p.n0, W), p.n0)
        pairs_full = B * p.T * (n0 + p.T)
        pairs_half = B * visible_pairs(p.T, n0, W)
        cache_read = B * 2 * G * dh * (n0 + p.T)
    pairs = pairs_half if p.causal == "half" else pairs_full
    sdpa = Op(
        "attn.sdpa",
        flops=4.0 * H * dh * pairs,
        acts=2.0 * N * H * dh,
        state=cache_read,
        rows=N,
        kind="attention",
    )
    rope = Op(
        "attn.rope",
        acts=3.0 * N * (H + G) * dh,
        kind="elementwise",
        launches=launches(ATTENTION_LAUNCHES["gqa"], p),
    )
    return [qkv, rope, sdpa, o]


def mla_ops(c: Columns, p: Phase) -> list[Op]:
    """MLA (archsearch.models.mla): plain form for `forward`, weight-absorbed for `step`."""
    H, dn, dv, dc, dq, dr, d, W = c.H, c.dh, c.dv, c.dc, c.dq, c.dr, c.d, c.W
    B, N = p.B, p.tokens
    has_q = (dq > 0).astype(np.float64)
    q_out = H * (dn + dr)
    ops = [
        Op(
            "mla.q_proj",
            flops=(1 - has_q) * 2.0 * N * d * q_out,
            weights=(1 - has_q) * d * q_out,
            acts=(1 - has_q) * N * (d + q_out),
            rows=N,
        ),
        Op(
            "mla.q_a+q_b",
            flops=has_q * 2.0 * N * (d * dq + dq * q_out),
            weights=has_q * (d * dq + dq * q_out),
            acts=has_q * N * (d + 2 * dq + q_out),
            rows=N,
        ),
        linear_op("mla.kv_a", N, d, dc + dr),
    ]
    if p.kind == "step":
        m = np.where(W > 0, np.minimum(p.n0 + 1, W), p.n0 + 1)
        ops += [
            Op(
                "mla.absorb_q",
                flops=2.0 * B * H * dn * dc,
                weights=H * dn * dc,
                acts=B * H * (dn + dc),
                rows=B,
            ),
            Op(
                "mla.scores+values",
                flops=2.0 * B * H * m * (dc + dr) + 2.0 * B * H * m * dc,
                state=B * m * (dc + dr),
                acts=B * H * (2 * dc + dr),
                rows=B,
                kind="attention",
            ),
            Op(
                "mla.absorb_o",
                flops=2.0 * B * H * dc * dv,
                weights=H * dc * dv,
                acts=B * H * (dc + dv),
                rows=B,
            ),
        ]
    else:
        n0 = np.where(W > 0, np.minimum(p.n0, W), p.n0)
        n = n0 + p.T
        pairs = B * (visible_pairs(p.T, n0, W) if p.causal == "half" else p.T * n)
        ops += [
            linear_op("mla.kv_b", B * n, dc, H * (dn + dv)),
            Op(
                "mla.sdpa",
                flops=2.0 * H * pairs * (dn + dr) + 2.0 * H * pairs * dv,
                acts=N * H * (dn + dr + dv),
                state=B * n * (dc + dr),
                rows=N,
                kind="attention",
            ),
        ]
    ops += [
        linear_op("mla.o_proj", N, H * dv, d),
        Op(
            "mla.norms+rope",
            acts=N * (2 * dc + 3 * (H + 1) * dr),
            kind="elementwise",
            launches=launches(ATTENTION_LAUNCHES["mla"], p),
        ),
    ]
    return ops


def attention_params(c: Columns) -> np.ndarray:
    """Parameters of one attention layer (GQA or MLA, by row)."""
    gqa = c.d * (c.H + 2 * c.G) * c.dh + c.H * c.dh * c.d
    q_out = c.H * (c.dh + c.dr)
    q = np.where(c.dq > 0, c.d * c.dq + c.dq + c.dq * q_out, c.d * q_out)
    mla = q + c.d * (c.dc + c.dr) + c.dc + c.dc * c.H * (c.dh + c.dv) + c.H * c.dv * c.d
    return np.where(c.mla > 0, mla, gqa)


def attention_state(c: Columns, context) -> np.ndarray:
    """KV cache elements of one attention layer after `context` tokens (capped by a window):
    2 G dh per token for GQA, dc + dr for MLA's latent and RoPE key ([PLM] eqs. 6-7)."""
    ctx = np.asarray(context, dtype=np.float64)
    m = np.where(c.W > 0, np.minimum(ctx, c.W), ctx)
    gqa = 2 * c.G * c.dh * m
    mla = (c.dc + c.dr) * m
    return np.where(c.mla > 0, mla, gqa)
