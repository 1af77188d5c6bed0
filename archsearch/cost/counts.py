"""Exact analytic counts of every module in the zoo, vectorised over a table of candidates.

Each module's forward is described as a list of `Op`s (its matmuls, convolutions, scans and
elementwise traffic) for one of two phases:

- `forward`: T new tokens per sequence after n0 cached ones (training when n0 = 0, prefill
  otherwise), the parallel / chunked forms of `archsearch.models`;
- `step`: one decoded token at context n (n tokens already cached), the recurrent forms.

The formulas mirror `archsearch.models` operation by operation (each module's docstring there
lists the same matmuls), so they agree EXACTLY with what torch's `FlopCounterMode` counts
(tests/test_cost_counts.py): matmul FLOPs are 2 x m x k x n (a multiply-add is 2 FLOPs; `macs`
halves them), attention scores are counted over the full T x n block as the MATH SDPA backend
computes them (`causal="full"`), or over the causally visible pairs only (`causal="half"`, the
work of a causal kernel, seed PLM Appendix D's convention). Parameters equal
`sum(p.numel())` and state/cache elements equal the tensors the decode path holds.

Every quantity is a numpy array over the rows of a `Columns` table (one row per candidate), so
a million candidates cost a few hundred vector operations; a single architecture is a table of
one row.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, fields

import numpy as np

from archsearch.arch import FFN_KINDS, GATED_FFNS, LINEAR_FAMILIES, ArchConfig

CHUNK = 64  # archsearch.models.linear.common.CHUNK and archsearch.models.mcsd.CHUNK
FAMILY_CODE = {f: i for i, f in enumerate(LINEAR_FAMILIES)}
RWKV6_MIXES = 5  # ddlerp interpolations with the output gate (4 without)


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

    @property
    def n(self) -> int:
        return len(self.d)

    @classmethod
    def from_archs(cls, archs: list[ArchConfig]) -> Columns:
        rows = [_row(a.resolved()) for a in archs]
        names = [f.name for f in fields(cls)]
        return cls(**{k: np.array([r[k] for r in rows], dtype=np.float64) for k in names})

    def signature(self) -> np.ndarray:
        """Rows with the same signature use the same modules (see `model_ops`)."""
        return (
            self.fam
            + 1
            + 10 * self.mla
            + 20 * (self.E > 0)
            + 40 * (self.nN > 0)
            + 80 * (self.nL > 0)
            + 160 * (self.nM > 0)
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

    def take(self, mask: np.ndarray) -> Columns:
        return Columns(**{f.name: getattr(self, f.name)[mask] for f in fields(self)})


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
        row.update(
            fam=FAMILY_CODE[lin.family],
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
    assert r.ffn.kind in FFN_KINDS
    return row


# ---- operations ---------------------------------------------------------------------------------


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


# Operators that `archsearch.models` dispatches per module in eager PyTorch (counted with a
# TorchDispatchMode; tests/test_cost_latency.py recounts them): (decode step, prefill of one
# chunk, each further chunk of 64 tokens). They only scale the latency model's fixed overhead
# per operator, which matters on a CPU running eager PyTorch and little elsewhere.
LAUNCHES = {
    "gqa": (43, 37, 0),
    "mla": (93, 81, 0),
    "linear_attention": (54, 74, 4),
    "retnet": (62, 100, 6),
    "gla": (71, 125, 6),
    "deltanet": (87, 151, 36),
    "gated_deltanet": (102, 162, 36),
    "mamba2": (74, 113, 6),
    "hgrn2": (62, 116, 6),
    "rwkv6": (112, 168, 6),
    "mcsd": (71, 179, 7),
}
FFN_LAUNCHES = {"gated": 12, "plain": 10}
MOE_LAUNCHES = (16, 10)  # fixed, per routed expert used (shared experts count as FFNs)
BLOCK_LAUNCHES = 4  # two norms, two residual adds
MODEL_LAUNCHES = 8  # embedding, final norm, LM head, state bookkeeping


def launches(name: str, p: Phase) -> float | np.ndarray:
    step, first, per_chunk = LAUNCHES[name]
    if p.kind == "step":
        return float(step)
    return first + per_chunk * (_chunks(p.T) - 1)


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


def linear_op(name: str, tokens, k, n, *, count=1.0) -> Op:
    """A bias-free nn.Linear k -> n on `tokens` rows (count copies)."""
    return Op(
        name,
        flops=2.0 * tokens * k * n * count,
        weights=k * n * count,
        acts=tokens * (k + n) * count,
        rows=tokens,
        kn=k * n,
    )


def _chunks(T) -> np.ndarray:
    return np.ceil(np.asarray(T, dtype=np.float64) / CHUNK)


def _visible_pairs(T, n0, W) -> np.ndarray:
    """Σ_{t=0}^{T-1} min(n0 + t + 1, W) (W = 0: no window): causally visible (query, key) pairs."""
    T, n0, W = (np.asarray(x, dtype=np.float64) for x in (T, n0, W))
    full = T * n0 + T * (T + 1) / 2
    # with a window: terms grow from n0 + 1 and saturate at W
    a = n0 + 1
    grow = np.clip(W - a + 1, 0, T)  # terms strictly before saturation (values a .. W)
    windowed = grow * (2 * a + grow - 1) / 2 + (T - grow) * W
    return np.where(W > 0, windowed, full)


# ---- modules ------------------------------------------------------------------------------------


def norm_ops(name: str, c: Columns, p: Phase, dim, count=1.0) -> list[Op]:
    return [Op(name, acts=2.0 * p.tokens * dim * count, kind="elementwise")]


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
        pairs_half = B * _visible_pairs(p.T, n0, W)
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
        "attn.rope", acts=3.0 * N * (H + G) * dh, kind="elementwise", launches=launches("gqa", p)
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
        pairs = B * (_visible_pairs(p.T, n0, W) if p.causal == "half" else p.T * n)
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
            launches=launches("mla", p),
        ),
    ]
    return ops


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
    n = _chunks(p.T)
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
    n = _chunks(p.T)
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
        _scale(linear_op("lin.qkv", N, d, qkv_out), std_qkv),
        _scale(_conv("lin.conv", qkv_out, K, p), delta_rows * (K > 0)),
        _scale(linear_op("lin.b_proj", N, d, H), delta_rows),
        _scale(linear_op("lin.a_proj", N, d, H), is_["gated_deltanet"]),
        _scale(linear_op("lin.gk_a", N, d, R), is_["gla"]),
        _scale(linear_op("lin.gk_b", N, R, H * dk), is_["gla"]),
        _scale(linear_op("mamba2.in_proj", N, d, m_in), is_["mamba2"]),
        _scale(_conv("mamba2.conv", d_inner + 2 * dk, K, p), is_["mamba2"] * (K > 0)),
        _scale(linear_op("mamba2.o_proj", N, d_inner, d), is_["mamba2"]),
        _scale(linear_op("rwkv6.maa_a", N, d, n_mix * R), rw),
        _scale(linear_op("rwkv6.maa_b", N, R, d, count=n_mix), rw),
        _scale(linear_op("rwkv6.decay_a", N, d, R), rw),
        _scale(linear_op("rwkv6.decay_b", N, R, H * dk), rw),
        _scale(linear_op("rwkv6.rk_proj", N, d, H * dk, count=2), rw),
        _scale(linear_op("rwkv6.v_proj", N, d, H * dv), rw),
        _scale(rec_g, gated_rows),
        _scale(rec_d, delta_rows),
        _scale(linear_op("lin.g_proj", N, d, H * dv), out_block * gate),
        _scale(linear_op("lin.o_proj", N, H * dv, d), out_block),
        Op(
            "lin.elementwise",
            acts=6.0 * N * (2 * H * dk + 2 * H * dv),
            kind="elementwise",
            state=np.where(p.kind == "step", 2.0 * p.B * d * rw, 0.0),
            launches=np.select(
                [fam == i for i in FAMILY_CODE.values()],
                [np.full_like(d, launches(f, p)) for f in FAMILY_CODE],
                0.0,
            ),
        ),
    ]
    return [op for op in ops if op is not None]


def mcsd_ops(c: Columns, p: Phase) -> list[Op]:
    """MCSD (archsearch.models.mcsd): per-channel projections, two chunked exclusive EMAs
    (intra-chunk [L, L] x [L, Dc] with a constant decay matrix, L = min(64, T)), W_O."""
    d, C = c.d, c.C
    Dc = np.divide(d, C, out=np.zeros_like(d), where=C > 0)
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
        Op("mcsd.gates+norm", acts=10.0 * N * d, kind="elementwise", launches=launches("mcsd", p)),
        linear_op("mcsd.o_proj", N, 2 * d, d),
    ]
    return ops


def ffn_ops(c: Columns, p: Phase, width, tokens=None, count=1.0, name="ffn") -> list[Op]:
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


def moe_ops(c: Columns, p: Phase) -> list[Op]:
    """Router, the N k routed (token, expert) pairs through their experts, shared experts.
    Weights read: all experts touched by N k assignments (at most E), plus the shared ones."""
    N = p.tokens
    routed = ffn_ops(c, p, c.Fe, tokens=N * c.topk, name="moe.routed")
    touched = np.minimum(c.E, N * c.topk)
    per_expert = (2 + c.gated) * c.d * c.Fe
    routed[0].weights = routed[0].weights * 0  # weights counted once below
    routed[2].weights = routed[2].weights * 0
    ops = [
        linear_op("moe.router", N, c.d, c.E),
        *routed,
        Op("moe.expert_weights", weights=touched * per_expert, kind="elementwise"),
        *ffn_ops(c, p, c.Fe, tokens=N, count=c.S, name="moe.shared"),
        Op(
            "moe.dispatch",
            acts=4.0 * N * c.topk * c.d,
            kind="elementwise",
            launches=MOE_LAUNCHES[0] + MOE_LAUNCHES[1] * touched,
        ),
    ]
    routed[1].launches = 0.0  # the routed experts' launches are counted in moe.dispatch
    return ops


def _scale(op: Op, factor) -> Op | None:
    """The op on the rows where factor is 1 (0 elsewhere); None when it applies to no row."""
    if not np.any(factor):
        return None
    for f in ("flops", "weights", "acts", "state", "extra_flops", "backward_extra"):
        setattr(op, f, getattr(op, f) * factor)
    return op


@dataclass
class LayerOps:
    """The ops of each kind of layer, and how many layers of that kind each row has."""

    parts: list[tuple[str, np.ndarray, list[Op]]] = field(default_factory=list)


def model_ops(c: Columns, p: Phase, *, lm_head: bool = True) -> list[tuple[np.ndarray, Op]]:
    """Every op of the model with its multiplicity per row: [(count, op)]. Modules that no row
    of the table uses are left out (so tables of one kind of model are cheap)."""
    out: list[tuple[np.ndarray, Op]] = []
    N = p.tokens
    ones = np.ones_like(c.d)
    dense = (c.E == 0).astype(np.float64)
    modules = (
        (c.nN * (1 - c.mla), attention_ops),
        (c.nN * c.mla, mla_ops),
        (c.nL, linear_mixer_ops),
        (c.nM, mcsd_ops),
        (c.L * dense, lambda c, p: ffn_ops(c, p, c.F)),
        (c.L * (1 - dense), moe_ops),
    )
    for count, ops in modules:
        if np.any(count):
            out += [(count, op) for op in ops(c, p)]
    out += [(c.L, op) for op in norm_ops("block.norms", c, p, c.d, count=2.0)]
    out.append(
        (c.L, Op("block.residual", acts=6.0 * N * c.d, kind="elementwise", launches=BLOCK_LAUNCHES))
    )
    out.append(
        (
            ones,
            Op(
                "embedding",
                weights=N * c.d,
                acts=N * c.d,
                kind="elementwise",
                backward=0.0,
                launches=MODEL_LAUNCHES,
            ),
        )
    )
    out += [(ones, op) for op in norm_ops("final.norm", c, p, c.d)]
    if lm_head:
        out.append((ones, linear_op("lm_head", N, c.d, c.V)))
    return out


# ---- parameters and state -----------------------------------------------------------------------


def _ffn_params(c: Columns, width) -> np.ndarray:
    return (2 + c.gated) * c.d * width


def attention_params(c: Columns) -> np.ndarray:
    gqa = c.d * (c.H + 2 * c.G) * c.dh + c.H * c.dh * c.d
    q_out = c.H * (c.dh + c.dr)
    q = np.where(c.dq > 0, c.d * c.dq + c.dq + c.dq * q_out, c.d * q_out)
    mla = q + c.d * (c.dc + c.dr) + c.dc + c.dc * c.H * (c.dh + c.dv) + c.H * c.dv * c.d
    return np.where(c.mla > 0, mla, gqa)


def linear_params(c: Columns) -> np.ndarray:
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


def mcsd_params(c: Columns) -> np.ndarray:
    Dc = np.divide(c.d, c.C, out=np.zeros_like(c.d), where=c.C > 0)
    return 4 * c.d * Dc + c.d + 2 * c.d * c.d


def channel_params(c: Columns) -> tuple[np.ndarray, np.ndarray]:
    """(total, active) parameters of one layer's FFN or MoE."""
    dense = _ffn_params(c, c.F)
    expert = _ffn_params(c, c.Fe)
    total = np.where(c.E > 0, c.d * c.E + (c.E + c.S) * expert, dense)
    active = np.where(c.E > 0, c.d * c.E + (c.topk + c.S) * expert, dense)
    return total, active


def params(c: Columns) -> dict[str, np.ndarray]:
    """Total, embedding, non-embedding and active parameters (tied weights counted once);
    computed once per table."""
    cached = c.__dict__.get("_params")
    if cached is None:
        cached = c.__dict__["_params"] = _params(c)
    return cached


def _params(c: Columns) -> dict[str, np.ndarray]:
    ch_total, ch_active = channel_params(c)
    mixers = c.nN * attention_params(c) + c.nL * linear_params(c) + c.nM * mcsd_params(c)
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


def state_elements(c: Columns, context, batch=1.0) -> np.ndarray:
    """Elements of the decode state after `context` tokens: KV caches grow with the context
    (capped by a window), recurrent and MCSD states do not (seed PLM eqs. 6-7)."""
    ctx = np.asarray(context, dtype=np.float64)
    m = np.where(c.W > 0, np.minimum(ctx, c.W), ctx)
    gqa = 2 * c.G * c.dh * m
    mla = (c.dc + c.dr) * m
    attn = np.where(c.mla > 0, mla, gqa)
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
    linear = S + extra
    mcsd = 2 * c.d
    return batch * (c.nN * attn + c.nL * linear + c.nM * mcsd)
