"""What every family's cost formulas are written in: the candidate table, a phase, an operation.

`Columns` is a table of candidates, one row per (resolved) architecture and one numpy array per
field, so a million candidates cost a few hundred vector operations; a single architecture is
a table of one row. A module's forward is described as a list of `Op`s (its matmuls,
convolutions, scans and elementwise traffic) for one of two `Phase`s:

- `forward`: T new tokens per sequence after n0 cached ones (training when n0 = 0, prefill
  otherwise), the parallel / chunked forms of `archsearch.models`;
- `step`: one decoded token at context n (n tokens already cached), the recurrent forms.

Matmul FLOPs are 2 x m x k x n (a multiply-add is 2 FLOPs), as torch's `FlopCounterMode`
counts them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, fields

import numpy as np

from archsearch.arch import CHUNK, FFN_KINDS, GATED_FFNS, LINEAR_FAMILIES, ArchConfig

FAMILY_CODE = {f: i for i, f in enumerate(LINEAR_FAMILIES)}
# plugin mixers (`archsearch.plugins`) in tables: name -> code (1, 2, ...), assigned on first use
PLUGIN_CODE: dict[str, int] = {}


def plugin_code(name: str) -> int:
    """The table code of a plugin mixer's name (0 is reserved for "no plugin")."""
    return PLUGIN_CODE.setdefault(name, len(PLUGIN_CODE) + 1)


def plugin_name(code: float) -> str:
    return next(name for name, c in PLUGIN_CODE.items() if c == int(code))


# the parts of a model a cost breakdown reports (`Op.category`), in report order
CATEGORIES = (
    "attention",
    "linear",
    "mcsd",
    "ffn",
    "moe",
    "norms+residual",
    "embedding",
    "lm head",
)


# ---- the candidate table ------------------------------------------------------------------------


@dataclass
class Columns:
    """One row per (resolved) architecture; absent sections are zeros."""

    V: np.ndarray
    d: np.ndarray
    L: np.ndarray  # layers
    tie: np.ndarray
    nN: np.ndarray  # softmax-attention layers
    nL: np.ndarray  # linear-mixer layers
    nM: np.ndarray  # MCSD layers
    mla: np.ndarray
    H: np.ndarray
    G: np.ndarray  # KV heads (GQA)
    dh: np.ndarray  # q/k head size (MLA: non-rotary part)
    dv: np.ndarray  # value head size (MLA) / dh (GQA)
    dc: np.ndarray  # MLA kv rank
    dq: np.ndarray  # MLA q rank (0: none)
    dr: np.ndarray  # rotary dims (MLA: decoupled RoPE key)
    W: np.ndarray  # sliding window (0: none)
    fam: np.ndarray  # linear family code (-1: none)
    lH: np.ndarray
    dk: np.ndarray
    ldv: np.ndarray
    gate: np.ndarray  # linear output gate
    normalize: np.ndarray
    R: np.ndarray  # gate rank
    K: np.ndarray  # short-conv size (0: none)
    C: np.ndarray  # MCSD channels
    gated: np.ndarray  # gated FFN
    F: np.ndarray  # FFN width (dense)
    E: np.ndarray  # experts (0: dense)
    topk: np.ndarray
    S: np.ndarray  # shared experts
    Fe: np.ndarray  # expert width
    lplug: np.ndarray  # plugin sequence mixer (`plugin_code`; 0: a built-in family)
    fplug: np.ndarray  # plugin channel mixer (0: a built-in FFN)
    ex: np.ndarray  # linear expand (read by plugin mixers)
    msl: np.ndarray  # max_seq_len (read by plugin mixers)

    @property
    def n(self) -> int:
        return len(self.d)

    @classmethod
    def from_archs(cls, archs: list[ArchConfig]) -> Columns:
        rows = [_row(a.resolved()) for a in archs]
        names = [f.name for f in fields(cls)]
        return cls(**{k: np.array([r[k] for r in rows], dtype=np.float64) for k in names})

    def signature(self) -> np.ndarray:
        """Rows with the same signature use the same modules (see `counts.model_ops`)."""
        return (
            self.fam
            + 1
            + 10 * self.mla
            + 20 * (self.E > 0)
            + 40 * (self.nN > 0)
            + 80 * (self.nL > 0)
            + 160 * (self.nM > 0)
            + 320 * self.lplug
            + 320 * 4096 * self.fplug
        )

    def groups(self) -> list[tuple[np.ndarray, Columns]]:
        """(row indices, sub-table) per signature; computed once per table."""
        cached = self.__dict__.get("_groups")
        if cached is None:
            keys = self.signature().astype(np.int32)
            order = np.argsort(keys, kind="stable")
            bounds = np.flatnonzero(np.diff(keys[order])) + 1
            if len(bounds) == 0:
                cached = [(np.arange(self.n), self)]
            else:  # permute every column once; each group is then a slice (a view)
                names = [f.name for f in fields(self)]
                permuted = {k: getattr(self, k)[order] for k in names}
                edges = [0, *bounds.tolist(), self.n]
                cached = [
                    (order[a:b], Columns(**{k: v[a:b] for k, v in permuted.items()}))
                    for a, b in itertools.pairwise(edges)
                ]
            self.__dict__["_groups"] = cached
        return cached


def _row(r: ArchConfig) -> dict[str, float]:
    a, lin, m = r.attention, r.linear, r.moe
    row = dict(
        V=r.vocab_size,
        d=r.d_model,
        L=r.n_layers,
        tie=int(r.tie_embeddings),
        nN=r.pattern.count("N"),
        nL=r.pattern.count("L"),
        nM=r.pattern.count("M"),
        mla=0,
        H=0,
        G=0,
        dh=0,
        dv=0,
        dc=0,
        dq=0,
        dr=0,
        W=0,
        fam=-1,
        lH=0,
        dk=0,
        ldv=0,
        gate=0,
        normalize=0,
        R=0,
        K=0,
        C=0,
        gated=int(r.ffn.kind in GATED_FFNS),
        F=r.ffn.d_ffn or 0,
        E=0,
        topk=0,
        S=0,
        Fe=0,
        lplug=0,
        fplug=0 if r.ffn.kind in FFN_KINDS else plugin_code(r.ffn.kind),
        ex=0,
        msl=r.max_seq_len,
    )
    if a is not None:
        mla = a.kind == "mla"
        row.update(
            mla=int(mla),
            H=a.n_heads,
            G=0 if mla else a.n_kv_heads,
            dh=a.head_dim,
            dv=a.v_head_dim if mla else a.head_dim,
            dc=a.kv_rank or 0,
            dq=a.q_rank or 0,
            dr=a.rope_dim,
            W=a.window or 0,
        )
    if lin is not None:
        plugin = lin.family not in FAMILY_CODE
        row.update(
            fam=-1 if plugin else FAMILY_CODE[lin.family],
            lplug=plugin_code(lin.family) if plugin else 0,
            ex=lin.expand,
            lH=lin.n_heads,
            dk=lin.key_dim,
            ldv=lin.value_dim,
            gate=int(lin.output_gate),
            normalize=int(bool(lin.normalize)),
            R=lin.gate_rank or 0,
            K=lin.conv_size or 0,
        )
        if lin.family == "mamba2":  # d_inner = H * P; expand is folded into value_dim
            row["ldv"] = lin.value_dim
    if r.mcsd is not None:
        row["C"] = r.mcsd.n_channels
    if m is not None:
        row.update(E=m.n_experts, topk=m.top_k, S=m.n_shared, Fe=m.d_expert, F=0)
    return row


# ---- phases and operations ----------------------------------------------------------------------


@dataclass
class Phase:
    """`forward`: T tokens after n0 cached (training: n0 = 0); `step`: one token at context n0."""

    kind: str
    T: float
    n0: float = 0.0
    B: float = 1.0
    causal: str = "full"  # full | half: attention score pairs counted

    @property
    def tokens(self) -> float:
        return self.B * (1.0 if self.kind == "step" else self.T)


@dataclass
class Op:
    """One operation of a forward: its FLOPs and the memory it touches (elements)."""

    name: str
    flops: np.ndarray | float = 0.0  # as torch's FlopCounterMode counts them (0: not counted)
    weights: np.ndarray | float = 0.0  # weight elements read
    acts: np.ndarray | float = 0.0  # activation elements read and written
    state: np.ndarray | float = 0.0  # cache/state elements read and written
    rows: np.ndarray | float = 1.0  # matmul rows (for the compute efficiency of small matmuls)
    kind: str = "matmul"  # matmul | attention | scan | elementwise | solve
    backward: float = 2.0  # backward FLOPs / forward FLOPs (1: one operand is a constant)
    backward_extra: np.ndarray | float = 0.0  # backward FLOPs beyond backward x flops
    extra_flops: np.ndarray | float = 0.0  # work a FLOP counter does not see (solves)
    launches: np.ndarray | float = 0.0  # operators dispatched (for the per-operator overhead)
    kn: np.ndarray | float = 0.0  # weight elements of one matmul (k x n), for measured rates
    k: np.ndarray | float = 0.0  # its input width (with kn: the GEMM's shape, for kernel timings)
    category: str = ""  # the part of the model it belongs to (one of CATEGORIES)


def linear_op(name: str, tokens, k, n, *, count=1.0) -> Op:
    """A bias-free nn.Linear k -> n on `tokens` rows (count copies)."""
    return Op(
        name,
        flops=2.0 * tokens * k * n * count,
        weights=k * n * count,
        acts=tokens * (k + n) * count,
        rows=tokens,
        kn=k * n,
        k=k,
    )


def scaled(op: Op, factor) -> Op | None:
    """The op on the rows where factor is 1 (0 elsewhere); None when it applies to no row."""
    if not np.any(factor):
        return None
    for f in ("flops", "weights", "acts", "state", "extra_flops", "backward_extra"):
        setattr(op, f, getattr(op, f) * factor)
    return op


def chunks(T) -> np.ndarray:
    """Chunks of CHUNK tokens in the chunked (training / prefill) form of T tokens."""
    return np.ceil(np.asarray(T, dtype=np.float64) / CHUNK)


def visible_pairs(T, n0, W) -> np.ndarray:
    """Σ_{t=0}^{T-1} min(n0 + t + 1, W) (W = 0: no window): causally visible (query, key) pairs."""
    T, n0, W = (np.asarray(x, dtype=np.float64) for x in (T, n0, W))
    full = T * n0 + T * (T + 1) / 2
    # with a window: terms grow from n0 + 1 and saturate at W
    a = n0 + 1
    grow = np.clip(W - a + 1, 0, T)  # terms strictly before saturation (values a .. W)
    windowed = grow * (2 * a + grow - 1) / 2 + (T - grow) * W
    return np.where(W > 0, windowed, full)


def launches(counts: tuple[int, int, int], p: Phase) -> float | np.ndarray:
    """Operators a sequence mixer dispatches in a phase, from its counts (decode step, prefill
    of one chunk, each further chunk of CHUNK tokens).

    The counts are what `archsearch.models` dispatches per module in eager PyTorch (counted
    with a TorchDispatchMode; tests/test_cost_latency.py recounts them, `counts.LAUNCHES`).
    They only scale the latency model's fixed overhead per operator, which matters on a CPU
    running eager PyTorch and little elsewhere."""
    step, first, per_chunk = counts
    if p.kind == "step":
        return float(step)
    return first + per_chunk * (chunks(p.T) - 1)
