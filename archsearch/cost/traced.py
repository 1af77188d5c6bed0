"""Costs by tracing: the counts of plugin mixers, which have no hand-written formulas.

A plugin sequence mixer (`linear.family: pkg.name`) or channel mixer (`ffn.kind: pkg.name`) is
built at each distinct shape of a candidate table and run once per phase under torch's
`FlopCounterMode` (`archsearch.models.tracing`, on the meta device: shapes only, no
arithmetic). What comes back is cached per shape signature (the mixer, the ArchConfig fields it
may read, the phase), so pricing a table of a million candidates traces each distinct mixer
shape once. From the trace:

- params: `sum(p.numel())` of the module; state elements: the tensors `prefill` leaves after
  `context` tokens (at batch 1, times the batch);
- FLOPs: what FlopCounterMode counts in the forward (the backward of a training step from the
  same counter); like the analytic counts, matmuls, convolutions and attention products only;
- latency inputs: the weights read, 2 x the elements the operators write (activation traffic),
  the state read and written, the operators dispatched; the cost model's per-op roofline
  (`model.op_seconds`) turns them into time on any device like every other op.

`traced_parts(arch)` says which parts of an architecture are counted this way (the cost report
and `archsearch cost` print it). `benchmarks/bench_traced_vs_analytic.py` measures this path
against the analytic formulas on every built-in mixer.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from archsearch.arch import FFN_KINDS, LINEAR_FAMILIES, ArchConfig, LayersConfig, LinearConfig
from archsearch.cost.ops import Columns, Op, Phase, plugin_name
from archsearch.errors import UserError

if TYPE_CHECKING:  # the models (torch) are imported only to trace a plugin
    from archsearch.models.tracing import Trace

__all__ = [
    "TracedCostError",
    "channel_ops",
    "channel_params",
    "mixer_ops",
    "mixer_params",
    "mixer_state",
    "mixer_vector_params",
    "traced_parts",
    "traces_run",
]

MIXER_FIELDS = ("lplug", "d", "lH", "dk", "ldv", "ex", "R", "K", "gate", "msl")
CHANNEL_FIELDS = ("fplug", "d", "F")


class TracedCostError(UserError):
    """A plugin mixer whose cost could not be traced at some shape."""


def _mixer_arch(key: tuple[float, ...]) -> ArchConfig:
    code, d, H, dk, dv, ex, R, K, gate, msl = key
    linear = LinearConfig(
        family=plugin_name(code),
        n_heads=int(H),
        key_dim=int(dk),
        value_dim=int(dv),
        expand=float(ex),
        gate_rank=int(R) or None,
        conv_size=int(K),
        output_gate=bool(gate),
    )
    return ArchConfig(
        vocab_size=1,
        d_model=int(d),
        n_layers=1,
        max_seq_len=int(msl),
        layers=LayersConfig(pattern="L"),
        linear=linear,
    ).resolved()


def _mixer_builder(key: tuple[float, ...]):
    from archsearch.models import sequence_mixer_class

    arch = _mixer_arch(key)
    cls = sequence_mixer_class(arch.linear.family)
    return lambda: cls(arch)


def _channel_builder(key: tuple[float, ...]):
    from archsearch.models import channel_mixer_class

    code, d, F = key
    cls = channel_mixer_class(plugin_name(code))
    return lambda: cls(int(d), int(F))


def _fail(what: str, where: str, err: Exception) -> TracedCostError:
    return TracedCostError(f"plugin {what!r}: tracing its cost failed at {where}: {err}")


@lru_cache(maxsize=65536)
def _mixer_trace(
    key: tuple[float, ...], kind: str, T: int, n0: int, backward: bool, B: int
) -> Trace:
    from archsearch.models.tracing import TracingError, trace

    try:
        return trace(_mixer_builder(key), kind, T, n0, B, int(key[1]), backward=backward)
    except TracingError as err:
        raise _fail(
            plugin_name(key[0]), f"{kind} T={T} n0={n0} d_model={int(key[1])}", err
        ) from err


@lru_cache(maxsize=65536)
def _channel_trace(key: tuple[float, ...], T: int, backward: bool, B: int) -> Trace:
    from archsearch.models.tracing import TracingError, trace

    try:
        return trace(_channel_builder(key), "channel", T, 0, B, int(key[1]), backward=backward)
    except TracingError as err:
        raise _fail(plugin_name(key[0]), f"T={T} d_model={int(key[1])}", err) from err


@lru_cache(maxsize=65536)
def _mixer_module_counts(key: tuple[float, ...]) -> tuple[float, float]:
    """(parameters, 1-D parameters) of a plugin mixer at a shape."""
    import torch

    try:
        with torch.device("meta"):
            module = _mixer_builder(key)()
    except Exception as err:
        raise _fail(plugin_name(key[0]), f"construction (d_model={int(key[1])})", err) from err
    ps = list(module.parameters())
    return float(sum(p.numel() for p in ps)), float(sum(p.numel() for p in ps if p.dim() <= 1))


@lru_cache(maxsize=65536)
def _mixer_state(key: tuple[float, ...], context: int) -> float:
    from archsearch.models.tracing import TracingError, state_elements

    try:
        return state_elements(_mixer_builder(key), context, 1, int(key[1]))
    except TracingError as err:
        raise _fail(plugin_name(key[0]), f"state after {context} tokens", err) from err


# ---- per table ------------------------------------------------------------------------------


def _keys(c: Columns, fields: tuple[str, ...], rows: np.ndarray):
    """(distinct keys, index of each selected row's key) of the rows selected by `rows`."""
    table = np.stack([getattr(c, f) for f in fields], axis=1)[rows]
    keys, inverse = np.unique(table, axis=0, return_inverse=True)
    return [tuple(float(v) for v in k) for k in keys], inverse.ravel()


def _per_row(c: Columns, fields: tuple[str, ...], fn) -> np.ndarray:
    """fn(key) -> tuple of numbers, spread over the rows that use a plugin (zeros elsewhere)."""
    rows = getattr(c, fields[0]) > 0
    if not np.any(rows):
        return np.zeros((1, c.n))
    keys, inverse = _keys(c, fields, rows)
    values = np.array([fn(k) for k in keys], dtype=np.float64).reshape(len(keys), -1)
    out = np.zeros((values.shape[1], c.n))
    out[:, rows] = values[inverse].T
    return out


def _as_int(x) -> int:
    return round(float(np.asarray(x).ravel()[0]))


def _batch_counts(traces: tuple[Trace, Trace], backward: bool, state: float) -> tuple:
    """Counts at batch 1 and 2 (work that does not scale with the batch, such as a filter
    computed once per call, shows as their difference), the operators and the state."""
    per_batch = [
        v
        for t in traces
        for v in (t.flops, t.backward_flops if backward else 2.0 * t.flops, t.written)
    ]
    return (*per_batch, traces[0].launches, state)


def _traced_op(name: str, values: np.ndarray, p: Phase, weights: np.ndarray) -> Op:
    """One op from per-row `_batch_counts`: each count is affine in the batch, a + b B."""
    f1, bw1, w1, f2, bw2, w2, launches, state = values

    def at_batch(one, two):
        return (2.0 * one - two) + p.B * (two - one)

    flops = at_batch(f1, f2)
    return Op(
        name,
        flops=flops,
        weights=weights,
        acts=2.0 * at_batch(w1, w2),
        state=p.B * state,
        rows=p.tokens,
        kind="matmul",
        backward_extra=at_batch(bw1, bw2) - 2.0 * flops,
        launches=launches,
    )


def mixer_ops(c: Columns, p: Phase) -> list[Op]:
    """The traced op of each row's plugin sequence mixer in a phase (one op per layer)."""
    T, n0 = _as_int(p.T), _as_int(p.n0)
    kind = "step" if p.kind == "step" else "forward"
    backward = kind == "forward" and n0 == 0

    def counts(key):
        T_ = T if kind == "forward" else 1
        traces = tuple(_mixer_trace(key, kind, T_, n0, backward, B) for B in (1, 2))
        state = _mixer_state(key, n0 + T_)
        return _batch_counts(traces, backward, 2.0 * state if kind == "step" else state)

    values = _per_row(c, MIXER_FIELDS, counts)
    if values.shape[0] == 1:
        return []
    return [_traced_op("traced.mixer", values, p, mixer_params(c))]


def mixer_params(c: Columns) -> np.ndarray:
    return _per_row(c, MIXER_FIELDS, lambda k: _mixer_module_counts(k)[:1])[0]


def mixer_vector_params(c: Columns) -> np.ndarray:
    """1-D parameters (norm weights, decays) of the plugin mixers: kept at 32 bits."""
    return _per_row(c, MIXER_FIELDS, lambda k: _mixer_module_counts(k)[1:])[0]


def mixer_state(c: Columns, context) -> np.ndarray:
    """Decode-state elements of one plugin-mixer layer after `context` tokens (batch 1)."""
    ctx = _as_int(context)
    return _per_row(c, MIXER_FIELDS, lambda k: (_mixer_state(k, ctx),))[0]


def channel_ops(c: Columns, p: Phase) -> list[Op]:
    """The traced op of each row's plugin channel mixer (per token, so any phase)."""
    tokens = 1 if p.kind == "step" else _as_int(p.T)
    backward = p.kind == "forward" and _as_int(p.n0) == 0

    def counts(key):
        traces = tuple(_channel_trace(key, tokens, backward, B) for B in (1, 2))
        return _batch_counts(traces, backward, 0.0)

    values = _per_row(c, CHANNEL_FIELDS, counts)
    if values.shape[0] == 1:
        return []
    return [_traced_op("traced.channel", values, p, channel_params(c))]


def channel_params(c: Columns) -> np.ndarray:
    def params(key):
        return (float(_channel_trace(key, 1, False, 1).params),)

    return _per_row(c, CHANNEL_FIELDS, params)[0]


def traced_parts(arch: ArchConfig) -> list[str]:
    """The parts of an architecture counted by tracing, e.g. ['sequence mixer hyena.conv']."""
    r = arch.resolved()
    parts = []
    if r.linear is not None and r.linear.family not in LINEAR_FAMILIES:
        parts.append(f"sequence mixer {r.linear.family}")
    if r.moe is None and r.ffn.kind not in FFN_KINDS:
        parts.append(f"channel mixer {r.ffn.kind}")
    return parts


def traces_run() -> int:
    """How many mixer phases this process has traced (the rest came from the cache)."""
    return _mixer_trace.cache_info().misses + _channel_trace.cache_info().misses
