"""Channel mixers: the dense FFN (`archsearch.models.ffn`) and MoE (`archsearch.models.moe`),
their ops and parameters."""

from __future__ import annotations

import numpy as np

from archsearch.cost.ops import Columns, Op, Phase, linear_op

FFN_LAUNCHES = {"gated": 12, "plain": 10}  # operators dispatched per FFN
MOE_LAUNCHES = (16, 10)  # fixed, per routed expert used (shared experts count as FFNs)
ROUTED = "moe.routed"  # the routed experts' ops' name (their weights are counted once apart)


def _ffn_ops(c: Columns, p: Phase, width, tokens=None, count=1.0, name="ffn") -> list[Op]:
    """Gated: w_in d -> 2F, down F -> d; non-gated: w_in d -> F, down F -> d."""
    N = p.tokens if tokens is None else tokens
    w_in = (1 + c.gated) * width
    return [
        linear_op(f"{name}.w_in", N, c.d, w_in, count=count),
        Op(
            f"{name}.act",
            acts=N * (w_in + width) * count,
            kind="elementwise",
            launches=np.where(c.gated > 0, FFN_LAUNCHES["gated"], FFN_LAUNCHES["plain"]) * count,
        ),
        linear_op(f"{name}.down", N, width, c.d, count=count),
    ]


def dense_ffn_ops(c: Columns, p: Phase) -> list[Op]:
    """The dense FFN of width F."""
    return _ffn_ops(c, p, c.F)


def moe_ops(c: Columns, p: Phase) -> list[Op]:
    """Router, the N k routed (token, expert) pairs through their experts, shared experts.
    Weights read: the experts the N tokens touch (`experts_touched`), plus the shared ones."""
    N = p.tokens
    routed = _ffn_ops(c, p, c.Fe, tokens=N * c.topk, name=ROUTED)
    touched = experts_touched(c, N)
    per_expert = expert_params(c)
    routed[0].weights = routed[0].weights * 0  # weights counted once below
    routed[2].weights = routed[2].weights * 0
    ops = [
        linear_op("moe.router", N, c.d, c.E),
        *routed,
        Op("moe.expert_weights", weights=touched * per_expert, kind="elementwise"),
        *_ffn_ops(c, p, c.Fe, tokens=N, count=c.S, name="moe.shared"),
        Op(
            "moe.dispatch",
            acts=4.0 * N * c.topk * c.d,
            kind="elementwise",
            launches=MOE_LAUNCHES[0] + MOE_LAUNCHES[1] * touched,
        ),
    ]
    routed[1].launches = 0.0  # the routed experts' launches are counted in moe.dispatch
    return ops


def experts_touched(c: Columns, tokens) -> np.ndarray:
    """Routed experts that `tokens` tokens reach, each routed to top-k of E distinct experts,
    expected under uniform routing (what load balancing aims at): E (1 - (1 - k/E)^N). It is k
    for one token (a decode step at batch 1), E for a long prompt, and 7.2 of 8 experts, not
    min(E, N k) = 8, for a top-2 decode step at batch 8. 0 where there is no MoE."""
    E = np.asarray(c.E, dtype=np.float64)
    miss = 1.0 - np.divide(c.topk, E, out=np.zeros_like(E), where=E > 0)
    return E * (1.0 - miss ** np.asarray(tokens, dtype=np.float64))


def expert_params(c: Columns) -> np.ndarray:
    """Parameters of one routed expert."""
    return _ffn_params(c, c.Fe)


def _ffn_params(c: Columns, width) -> np.ndarray:
    return (2 + c.gated) * c.d * width


def channel_params(c: Columns) -> tuple[np.ndarray, np.ndarray]:
    """(total, active) parameters of one layer's FFN or MoE."""
    dense = _ffn_params(c, c.F)
    expert = _ffn_params(c, c.Fe)
    total = np.where(c.E > 0, c.d * c.E + (c.E + c.S) * expert, dense)
    active = np.where(c.E > 0, c.d * c.E + (c.topk + c.S) * expert, dense)
    return total, active
