"""MCSD (`archsearch.models.mcsd`, [MCSD] section 2.2): ops, parameters and decode state."""

from __future__ import annotations

import numpy as np

from archsearch.arch import CHUNK
from archsearch.cost.ops import Columns, Op, Phase, launches, linear_op

# operators dispatched (decode step, one chunk, each further chunk; see `ops.launches`)
MCSD_LAUNCHES = {"mcsd": (71, 179, 7)}


def _channel_width(c: Columns) -> np.ndarray:
    """Dc = D / C features per channel (0 on rows without MCSD)."""
    return np.divide(c.d, c.C, out=np.zeros_like(c.d), where=c.C > 0)


def mcsd_ops(c: Columns, p: Phase) -> list[Op]:
    """MCSD (archsearch.models.mcsd): per-channel projections, two chunked exclusive EMAs
    (intra-chunk [L, L] x [L, Dc] with a constant decay matrix, L = min(CHUNK, T)), W_O."""
    d, C = c.d, c.C
    Dc = _channel_width(c)
    B, N = p.B, p.tokens
    ops = [Op("mcsd.w_in", flops=8.0 * N * d * Dc, weights=4 * d * Dc, acts=N * 5 * d, rows=N)]
    if p.kind == "forward":
        Lc = np.minimum(CHUNK, p.T)
        n = np.ceil(p.T / Lc)
        ops.append(
            Op(
                "mcsd.ema",
                flops=2 * 2.0 * B * C * n * Lc * Lc * Dc,
                backward=1.0,
                acts=2 * 3.0 * B * n * Lc * d,
                rows=Lc,
                kind="scan",
            )
        )
    else:
        ops.append(Op("mcsd.ema", state=2 * 2.0 * B * d, acts=4.0 * B * d, kind="scan"))
    ops += [
        Op(
            "mcsd.gates+norm",
            acts=10.0 * N * d,
            kind="elementwise",
            launches=launches(MCSD_LAUNCHES["mcsd"], p),
        ),
        linear_op("mcsd.o_proj", N, 2 * d, d),
    ]
    return ops


def mcsd_params(c: Columns) -> np.ndarray:
    """Parameters of one MCSD layer: w_in C x Dc x 4 Dc, norm_weight, o_proj 2D -> D."""
    return 4 * c.d * _channel_width(c) + c.d + 2 * c.d * c.d


def mcsd_state(c: Columns) -> np.ndarray:
    """Decode state elements of one MCSD layer: the slope and decay sums, D each (eqs. 16, 19)."""
    return 2 * c.d
