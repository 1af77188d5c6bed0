"""Exact analytic counts of a whole model, vectorised over a table of candidates.

A block is a sequence mixer (`attention`, `linear`, `mcsd`: each family's formulas live in the
module of that name) and a channel mixer (`ffn`: dense FFN or MoE), with two norms and two
residual adds; the model adds the embedding, a final norm and the LM head. `model_ops` lists
every op of the model with its multiplicity per row and its breakdown category.

The formulas mirror `archsearch.models` operation by operation (each module's docstring there
lists the same matmuls), so they agree EXACTLY with what torch's `FlopCounterMode` counts
(tests/test_cost_counts.py): matmul FLOPs are 2 x m x k x n (a multiply-add is 2 FLOPs; `macs`
halves them), attention scores are counted over the full T x n block as the MATH SDPA backend
computes them (`causal="full"`), or over the causally visible pairs only (`causal="half"`, the
work of a causal kernel, [PLM] Appendix D's convention). Parameters equal
`sum(p.numel())` and state/cache elements equal the tensors the decode path holds.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from archsearch.cost import traced
from archsearch.cost.attention import (
    ATTENTION_LAUNCHES,
    attention_ops,
    attention_params,
    attention_state,
    mla_ops,
)
from archsearch.cost.evaluate import evaluator
from archsearch.cost.ffn import channel_params, dense_ffn_ops, moe_ops
from archsearch.cost.linear import LINEAR_LAUNCHES, linear_mixer_ops, linear_params, linear_state
from archsearch.cost.mcsd import MCSD_LAUNCHES, mcsd_ops, mcsd_params, mcsd_state
from archsearch.cost.ops import CATEGORIES, Columns, Op, Phase, linear_op

# operators each sequence mixer dispatches (see `ops.launches`), by the name the models use
LAUNCHES = {**ATTENTION_LAUNCHES, **LINEAR_LAUNCHES, **MCSD_LAUNCHES}
BLOCK_LAUNCHES = 4  # two norms, two residual adds
MODEL_LAUNCHES = 8  # embedding, final norm, LM head, state bookkeeping


def block_modules(c: Columns) -> list[tuple[str, np.ndarray, Callable[[Columns, Phase], list[Op]]]]:
    """(category, layers per row, ops) of every module a block can hold."""
    dense = (c.E == 0).astype(np.float64)
    plugin_mixer, plugin_ffn = (c.lplug > 0).astype(np.float64), (c.fplug > 0).astype(np.float64)
    return [
        ("attention", c.nN * (1 - c.mla), attention_ops),
        ("attention", c.nN * c.mla, mla_ops),
        ("linear", c.nL * (1 - plugin_mixer), linear_mixer_ops),
        ("linear", c.nL * plugin_mixer, traced.mixer_ops),
        ("mcsd", c.nM, mcsd_ops),
        ("ffn", c.L * dense * (1 - plugin_ffn), dense_ffn_ops),
        ("ffn", c.L * dense * plugin_ffn, traced.channel_ops),
        ("moe", c.L * (1 - dense), moe_ops),
    ]


def model_ops(c: Columns, p: Phase, *, lm_head: bool = True) -> list[tuple[np.ndarray, Op]]:
    """Every op of the model with its multiplicity per row: [(count, op)], each op tagged with
    its category. Modules that no row of the table uses are left out (so tables of one kind
    of model are cheap)."""
    out: list[tuple[np.ndarray, Op]] = []
    N = p.tokens
    ones = np.ones_like(c.d)
    for category, count, module_ops in block_modules(c):
        if np.any(count):
            out += [(count, _tagged(op, category)) for op in module_ops(c, p)]
    block = "norms+residual"
    norms = Op("block.norms", acts=2 * 2.0 * N * c.d, kind="elementwise")  # two per block
    out.append((c.L, _tagged(norms, block)))
    residual = Op("block.residual", acts=6.0 * N * c.d, kind="elementwise", launches=BLOCK_LAUNCHES)
    out.append((c.L, _tagged(residual, block)))
    embedding = Op(
        "embedding",
        weights=N * c.d,
        acts=N * c.d,
        kind="elementwise",
        backward=0.0,
        launches=MODEL_LAUNCHES,
    )
    out.append((ones, _tagged(embedding, "embedding")))
    out.append((ones, _tagged(Op("final.norm", acts=2.0 * N * c.d, kind="elementwise"), block)))
    if lm_head:
        out.append((ones, _tagged(linear_op("lm_head", N, c.d, c.V), "lm head")))
    return out


def _tagged(op: Op, category: str) -> Op:
    assert category in CATEGORIES, category
    op.category = category
    return op


# ---- parameters and state -----------------------------------------------------------------------


def params(c: Columns) -> dict[str, np.ndarray]:
    """Total, embedding, non-embedding and active parameters (tied weights counted once);
    computed once per table."""
    cached = c.__dict__.get("_params")
    if cached is None:
        cached = c.__dict__["_params"] = _params(c)
    return cached


def _params(c: Columns) -> dict[str, np.ndarray]:
    ch_total, ch_active = channel_params(c)
    if np.any(c.fplug):
        ch_total = np.where(c.fplug > 0, traced.channel_params(c), ch_total)
        ch_active = np.where(c.fplug > 0, ch_total, ch_active)
    linear = linear_params(c)
    if np.any(c.lplug):
        linear = np.where(c.lplug > 0, traced.mixer_params(c), linear)
    mixers = c.nN * attention_params(c) + c.nL * linear + c.nM * mcsd_params(c)
    blocks = mixers + c.L * (2 * c.d) + c.d  # block norms + final norm
    embedding = c.V * c.d * (2 - c.tie)
    total = blocks + c.L * ch_total + embedding
    active = blocks + c.L * ch_active + embedding
    return {
        "params": total,
        "embedding_params": embedding,
        "non_embedding_params": total - embedding,
        "active_params": active,
        "active_non_embedding_params": active - embedding,
    }


@evaluator("params")
def total_params(c: Columns) -> np.ndarray:
    return params(c)["params"]


@evaluator("non_embedding_params")
def non_embedding_params(c: Columns) -> np.ndarray:
    return params(c)["non_embedding_params"]


@evaluator("active_params")
def active_params(c: Columns) -> np.ndarray:
    return params(c)["active_params"]


def state_elements(c: Columns, context, batch=1.0) -> np.ndarray:
    """Elements of the decode state after `context` tokens: KV caches grow with the context
    (capped by a window), recurrent and MCSD states do not ([PLM] eqs. 6-7); a plugin
    mixer's state is traced (`traced.mixer_state`)."""
    kv = batch * c.nN * attention_state(c, context)
    return kv + recurrent_state_elements(c, context, batch)


def recurrent_state_elements(c: Columns, context, batch=1.0) -> np.ndarray:
    """Elements of the decode state that a step rewrites whole: the linear mixers' recurrent
    states (a plugin's traced) and MCSD's; a KV cache only gains the new token's row."""
    linear = linear_state(c)
    if np.any(c.lplug):
        linear = np.where(c.lplug > 0, traced.mixer_state(c, context), linear)
    return batch * (c.nL * linear + c.nM * mcsd_state(c))
