"""Linear sequence mixers (`archsearch.models.linear`, [Linear-MoE] Table 1): every family's
ops, parameters and recurrent state.

The recurrences follow `archsearch.models.linear.common`: the chunked form (chunks of CHUNK
tokens, intra-chunk parallel) for `forward`, the one-step form for `step`; gated families share
`chunk_gated` / `step_gated`, the delta rule `chunk_delta` / `step_delta`. A table may mix
families: each op is zeroed on the rows of other families.
"""

from __future__ import annotations

import numpy as np

from archsearch.arch import CHUNK
from archsearch.cost.ops import FAMILY_CODE, Columns, Op, Phase, chunks, launches, linear_op, scaled

RWKV6_MIXES = 5  # ddlerp interpolations with the output gate (4 without)
# operators dispatched (decode step, one chunk, each further chunk; see `ops.launches`)
LINEAR_LAUNCHES = {
    "linear_attention": (54, 74, 4),
    "retnet": (62, 100, 6),
    "gla": (71, 125, 6),
    "deltanet": (87, 151, 36),
    "gated_deltanet": (102, 162, 36),
    "mamba2": (74, 113, 6),
    "hgrn2": (62, 116, 6),
    "rwkv6": (112, 168, 6),
}


def _gated_recurrence(name, lH, dk, dv, p: Phase) -> Op:
    """`common.chunk_gated` / `step_gated` (any decay): per chunk and head
    2 L^2 (dk + dv) + 4 L dk dv; per decoded token and head 4 dk dv."""
    B = p.B
    if p.kind == "step":
        return Op(
            name,
            flops=4.0 * B * lH * dk * dv,
            state=2.0 * B * lH * dk * dv,
            acts=B * lH * (2 * dk + 2 * dv),
            rows=B,
            kind="scan",
        )
    n = chunks(p.T)
    Lc = CHUNK
    flops = B * lH * n * (2.0 * Lc * Lc * (dk + dv) + 4.0 * Lc * dk * dv)
    # backward in training (zero initial state, final state unused): with a single chunk the
    # chunk-state products k^T v feed nothing and q S_0 multiplies a constant zero state
    bwd_extra = -(p.n0 == 0) * (n == 1) * B * lH * 6.0 * Lc * dk * dv
    return Op(
        name,
        flops=flops,
        acts=B * lH * n * Lc * (2 * dk + 2 * dv) + B * lH * n * Lc * Lc,
        state=B * lH * n * dk * dv,
        rows=Lc,
        kind="scan",
        backward_extra=bwd_extra,
    )


def _delta_recurrence(name, lH, dk, dv, p: Phase) -> Op:
    """`common.chunk_delta` / `step_delta`: per chunk and head 4 L^2 dk + 2 L^2 dv + 6 L dk dv
    (plus two triangular solves of L^2 (dv + dk) multiply-adds, not seen by a FLOP counter);
    per decoded token and head 6 dk dv."""
    B = p.B
    if p.kind == "step":
        return Op(
            name,
            flops=6.0 * B * lH * dk * dv,
            state=2.0 * B * lH * dk * dv,
            acts=B * lH * (2 * dk + 3 * dv),
            rows=B,
            kind="scan",
        )
    n = chunks(p.T)
    Lc = CHUNK
    flops = B * lH * n * (4.0 * Lc * Lc * dk + 2.0 * Lc * Lc * dv + 6.0 * Lc * dk * dv)
    # backward (training: no initial state, the final state unused by the loss): the solve's
    # gradient for its matrix is a matmul (2 L^2 (dv + dk) per chunk and head); the first
    # chunk's two products with the zero initial state need one gradient each, not two; the
    # last chunk's state update k^T U needs none
    bwd_extra = B * lH * (n * 2.0 * Lc * Lc * (dv + dk) - (p.n0 == 0) * 8.0 * Lc * dk * dv)
    return Op(
        name,
        flops=flops,
        extra_flops=B * lH * n * Lc * Lc * (dv + dk),
        backward_extra=bwd_extra,
        acts=B * lH * n * Lc * (3 * dk + 3 * dv) + 2 * B * lH * n * Lc * Lc,
        state=B * lH * n * dk * dv,
        rows=Lc,
        kind="scan",
    )


def _conv(name, channels, K, p: Phase) -> Op:
    """ShortConv: depthwise conv1d of width K: 2 K FLOPs per channel and token."""
    N = p.tokens
    return Op(
        name,
        flops=2.0 * N * channels * K,
        weights=channels * K,
        acts=2 * N * channels,
        state=np.where(p.kind == "step", 2.0 * p.B * (K - 1) * channels, 0.0),
        rows=N,
        kind="elementwise",
    )


def linear_mixer_ops(c: Columns, p: Phase) -> list[Op]:
    """Every linear family (archsearch.models.linear); each row uses its own family's ops."""
    d, H, dk, dv, R, K = c.d, c.lH, c.dk, c.ldv, c.R, c.K
    N = p.tokens
    fam = c.fam
    is_ = {f: (fam == i).astype(np.float64) for f, i in FAMILY_CODE.items()}
    out_block = 1 - is_["mamba2"]
    gate = c.gate
    dv_rec = dv + is_["linear_attention"] * c.normalize  # BLA's extra all-ones value column
    qkv_out = H * (2 * dk + dv)
    std_qkv = (
        is_["linear_attention"]
        + is_["retnet"]
        + is_["gla"]
        + is_["deltanet"]
        + is_["gated_deltanet"]
        + is_["hgrn2"]
    )
    delta_rows = is_["deltanet"] + is_["gated_deltanet"]
    # mamba2: in_proj d -> (1 + gate) d_inner + 2 N + H; conv over d_inner + 2 N
    d_inner = H * dv
    m_in = (1 + gate) * d_inner + 2 * dk + H
    n_mix = np.where(gate > 0, RWKV6_MIXES, RWKV6_MIXES - 1)
    rw = is_["rwkv6"]
    gated_rows = 1 - delta_rows
    rec_g = _gated_recurrence("lin.recurrence", H, dk, dv_rec, p)
    rec_d = _delta_recurrence("lin.delta_rule", H, dk, dv, p)
    ops = [
        scaled(linear_op("lin.qkv", N, d, qkv_out), std_qkv),
        scaled(_conv("lin.conv", qkv_out, K, p), delta_rows * (K > 0)),
        scaled(linear_op("lin.b_proj", N, d, H), delta_rows),
        scaled(linear_op("lin.a_proj", N, d, H), is_["gated_deltanet"]),
        scaled(linear_op("lin.gk_a", N, d, R), is_["gla"]),
        scaled(linear_op("lin.gk_b", N, R, H * dk), is_["gla"]),
        scaled(linear_op("mamba2.in_proj", N, d, m_in), is_["mamba2"]),
        scaled(_conv("mamba2.conv", d_inner + 2 * dk, K, p), is_["mamba2"] * (K > 0)),
        scaled(linear_op("mamba2.o_proj", N, d_inner, d), is_["mamba2"]),
        scaled(linear_op("rwkv6.maa_a", N, d, n_mix * R), rw),
        scaled(linear_op("rwkv6.maa_b", N, R, d, count=n_mix), rw),
        scaled(linear_op("rwkv6.decay_a", N, d, R), rw),
        scaled(linear_op("rwkv6.decay_b", N, R, H * dk), rw),
        scaled(linear_op("rwkv6.rk_proj", N, d, H * dk, count=2), rw),
        scaled(linear_op("rwkv6.v_proj", N, d, H * dv), rw),
        scaled(rec_g, gated_rows),
        scaled(rec_d, delta_rows),
        scaled(linear_op("lin.g_proj", N, d, H * dv), out_block * gate),
        scaled(linear_op("lin.o_proj", N, H * dv, d), out_block),
        Op(
            "lin.elementwise",
            acts=6.0 * N * (2 * H * dk + 2 * H * dv),
            kind="elementwise",
            state=np.where(p.kind == "step", 2.0 * p.B * d * rw, 0.0),
            launches=np.select(
                [fam == i for i in FAMILY_CODE.values()],
                [np.full_like(d, launches(LINEAR_LAUNCHES[f], p)) for f in FAMILY_CODE],
                0.0,
            ),
        ),
    ]
    return [op for op in ops if op is not None]


def linear_params(c: Columns) -> np.ndarray:
    """Parameters of one linear-mixer layer, by each row's family."""
    d, H, dk, dv, R, K, gate = c.d, c.lH, c.dk, c.ldv, c.R, c.K, c.gate
    out_block = dv + gate * d * H * dv + H * dv * d  # o_norm, g_proj, o_proj
    qkv = d * H * (2 * dk + dv)
    conv = K * H * (2 * dk + dv)
    d_inner = H * dv
    n_mix = np.where(gate > 0, RWKV6_MIXES, RWKV6_MIXES - 1)
    per_family = {
        "linear_attention": qkv + out_block,
        "retnet": qkv + out_block,
        "gla": qkv + d * R + R * H * dk + out_block,
        "deltanet": qkv + conv + d * H + out_block,
        "gated_deltanet": qkv + conv + d * H + d * H + 2 * H + out_block,
        "mamba2": d * ((1 + gate) * d_inner + 2 * dk + H)
        + K * (d_inner + 2 * dk)
        + 3 * H
        + d_inner
        + d_inner * d,
        "hgrn2": qkv + out_block,
        "rwkv6": d
        + n_mix * d
        + d * n_mix * R
        + n_mix * R * d
        + H * dk
        + d * R
        + R * H * dk
        + H * dk
        + 2 * d * H * dk
        + d * H * dv
        + out_block,
    }
    return np.select([c.fam == FAMILY_CODE[f] for f in per_family], list(per_family.values()), 0.0)


def linear_state(c: Columns) -> np.ndarray:
    """Decode state elements of one linear-mixer layer, constant in the context: the matrix
    state H dk dv (BLA: one more value column), plus the short convolution's last K - 1 inputs
    (delta rule, Mamba2) or RWKV-6's previous token."""
    H, dk, dv, K = c.lH, c.dk, c.ldv, c.K
    fam = c.fam
    S = H * dk * (dv + (fam == FAMILY_CODE["linear_attention"]) * c.normalize)
    conv_delta = (K > 0) * (K - 1) * H * (2 * dk + dv)
    conv_mamba = (K > 0) * (K - 1) * (H * dv + 2 * dk)
    extra = np.select(
        [
            (fam == FAMILY_CODE["deltanet"]) | (fam == FAMILY_CODE["gated_deltanet"]),
            fam == FAMILY_CODE["mamba2"],
            fam == FAMILY_CODE["rwkv6"],
        ],
        [conv_delta, conv_mamba, c.d],
        0.0,
    )
    return S + extra
