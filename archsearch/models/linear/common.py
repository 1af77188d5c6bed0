"""Shared machinery of the linear sequence mixers ([Linear-MoE] eq. 5, Table 1).

Every family is an instance of the unified recurrence M_s = Θ_s ◇ M_{s-1} + k_s^T v_s with a
per-head state S of shape [dk, dv]. Two recurrences cover all of them:

- gated:  S_t = diag(exp(g_t)) S_{t-1} + k_t^T v_t,  o_t = q_t S_t   (or, `strict`, o_t = q_t
  S_{t-1}: the current token is left out, as RWKV6 needs). g_t is a log decay (<= 0): None (no
  decay), a scalar per head [B, H, T] (RetNet, Mamba2) or a vector per key channel
  [B, H, T, dk] (GLA, HGRN2, RWKV6).
- delta:  S_t = exp(g_t) (I - β_t k_t k_t^T) S_{t-1} + β_t k_t v_t^T,  o_t = q_t S_t
  (DeltaNet with g = None, Gated DeltaNet with a scalar g per head).

Each comes in three forms that compute the same function:
  `recurrent_*`: the REFERENCE, a Python loop over time of `step_*` (obviously right, O(T) steps);
  `chunk_*`: the TRAINING form, chunks of CHUNK = 64 tokens, intra-chunk parallel (matmuls on
    [64, 64] blocks), inter-chunk recurrent (a loop over T / 64 chunk states). Memory is
    O(T * 64) per head, never O(T^2);
  `step_*`: the one-token update used for decoding, constant state size.

Decays are handled in log space: within a chunk, b_t = sum_{s <= t} g_s and every factor that
is formed is exp of a non-positive number, except the per-channel intra-chunk products, which
are factored around a reference point at the start of each SUBCHUNK = 16 sub-block (the scheme
of the GLA paper's secondary chunking): there a key factor can reach exp(16 * |g|), so
per-channel log decays are clamped at LOG_DECAY_MIN = -4 per step (a decay factor of at least
0.018 per token; the clamp is applied identically in every form, so the forms stay exactly
equal). The delta rule uses the UT / WY transform of [DeltaNet]: within a chunk,
U = (I + A)^{-1} (diag(β) V - diag(β γ) K S_0) with A_ts = β_t (k_t . k_s) γ_t / γ_s (s < t),
solved by one unit lower-triangular solve with the [L, dv + dk] right-hand side [diag(β) V,
diag(β γ) K] (not a matmul: about L^2 (dv + dk) / 2 multiply-adds per chunk and head).

Matmuls per chunk and head (L = 64, n = T / L chunks; counted by a FLOP counter):
  gated, no / scalar decay:  q k^T [L, dk] x [dk, L];  A v [L, L] x [L, dv];
    q S [L, dk] x [dk, dv];  k^T v [dk, L] x [L, dv].
  gated, per-channel decay:  as above, but q k^T becomes L / 16 products [16, dk] x [dk, L].
  delta:  k k^T and q k^T [L, dk] x [dk, L]; K_c S [L, dk] x [dk, dv]; q S; P U [L, L] x [L, dv];
    k^T U [dk, L] x [L, dv]; plus the triangular solve.
  step (per head): gated q S [1, dk] x [dk, dv] and k^T v [dk, 1] x [1, dv];
    delta S^T k, k (.)^T, q S of the same sizes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from archsearch.arch import CHUNK
from archsearch.models.gemm import Linear
from archsearch.models.norm import RMSNorm

SUBCHUNK = 16
LOG_DECAY_MIN = -4.0


def _clamp(g: torch.Tensor | None, per_channel: bool) -> torch.Tensor | None:
    return g.clamp_min(LOG_DECAY_MIN) if g is not None and per_channel else g


def _pad_time(x: torch.Tensor | None, dim: int, pad: int) -> torch.Tensor | None:
    if x is None or pad == 0:
        return x
    shape = list(x.shape)
    shape[dim] = pad
    return torch.cat([x, x.new_zeros(shape)], dim=dim)


# ---- gated recurrence -------------------------------------------------------------------------


def step_gated(q, k, v, g, S, *, strict: bool = False):
    """One token: q, k [B, H, dk], v [B, H, dv], g None | [B, H] | [B, H, dk], S [B, H, dk, dv]."""
    if g is not None and g.dim() == 3:
        g = g.clamp_min(LOG_DECAY_MIN)
    q = q.unsqueeze(-2)
    if strict:
        o = torch.matmul(q, S)
    if g is not None:
        S = S * (g.exp()[..., None, None] if g.dim() == 2 else g.exp()[..., None])
    S = S + torch.matmul(k.unsqueeze(-1), v.unsqueeze(-2))
    if not strict:
        o = torch.matmul(q, S)
    return o.squeeze(-2), S


def recurrent_gated(q, k, v, g=None, *, strict: bool = False, state=None):
    """Reference: loop `step_gated` over time. q, k [B, H, T, dk], v [B, H, T, dv]."""
    B, H, T, dk = k.shape
    S = state if state is not None else k.new_zeros(B, H, dk, v.shape[-1])
    outs = []
    for t in range(T):
        o, S = step_gated(
            q[:, :, t], k[:, :, t], v[:, :, t], None if g is None else g[:, :, t], S, strict=strict
        )
        outs.append(o)
    return torch.stack(outs, dim=2), S


def chunk_gated(q, k, v, g=None, *, strict: bool = False, state=None, chunk_size: int = CHUNK):
    """Training form of the gated recurrence (same arguments as `recurrent_gated`)."""
    B, H, T, dk = k.shape
    dv = v.shape[-1]
    per_channel = g is not None and g.dim() == 4
    g = _clamp(g, per_channel)
    L = chunk_size
    pad = -T % L
    q, k, v = (_pad_time(t, 2, pad) for t in (q, k, v))
    g = _pad_time(g, 2, pad)
    N = (T + pad) // L
    q, k, v = q.view(B, H, N, L, dk), k.view(B, H, N, L, dk), v.view(B, H, N, L, dv)
    idx = torch.arange(L, device=q.device)
    mask = idx[:, None] > idx[None, :] if strict else idx[:, None] >= idx[None, :]

    if g is None:
        A = torch.matmul(q, k.transpose(-1, -2))
        q_in, k_st, decay = q, k, None
    elif not per_channel:
        b = g.view(B, H, N, L).cumsum(-1)
        bq = b - g.view(B, H, N, L) if strict else b
        D = (bq[..., :, None] - b[..., None, :]).masked_fill(~mask, float("-inf")).exp()
        A = torch.matmul(q, k.transpose(-1, -2)) * D
        q_in = q * bq.exp()[..., None]
        k_st = k * (b[..., -1:] - b).exp()[..., None]
        decay = b[..., -1].exp()[..., None, None]  # [B, H, N, 1, 1]
    else:
        g = g.view(B, H, N, L, dk)
        b = g.cumsum(-2)
        bq = b - g if strict else b
        A = _intra_per_channel(q, k, b, bq, g)
        q_in = q * bq.exp()
        k_st = k * (b[..., -1:, :] - b).exp()
        decay = b[..., -1, :].exp()[..., None]  # [B, H, N, dk, 1]

    o = torch.matmul(A.masked_fill(~mask, 0.0), v)
    kv = torch.matmul(k_st.transpose(-1, -2), v)  # [B, H, N, dk, dv]
    S = state if state is not None else k.new_zeros(B, H, dk, dv)
    starts = []
    for n in range(N):
        starts.append(S)
        S = (S * decay[:, :, n] if decay is not None else S) + kv[:, :, n]
    o = o + torch.matmul(q_in, torch.stack(starts, dim=2))
    return o.reshape(B, H, N * L, dv)[:, :, :T], S


def _intra_per_channel(q, k, b, bq, g):
    """Scores A_ts = sum_i q_ti k_si exp(bq_ti - b_si) within each chunk, for s <= end of the
    16-token sub-block of t (later keys are zeroed), factored around the log decay b_r at the
    start of t's sub-block so that every exponent is <= 16 * |LOG_DECAY_MIN|."""
    B, H, N, L, dk = q.shape
    ns, ls = L // SUBCHUNK, SUBCHUNK
    ref = (b - g)[..., ::ls, :]  # b just before each sub-block: [B, H, N, ns, dk]
    qa = q.view(B, H, N, ns, ls, dk) * (bq.view(B, H, N, ns, ls, dk) - ref[..., None, :]).exp()
    sub_end = (torch.arange(ns, device=q.device)[:, None] + 1) * ls
    later = torch.arange(L, device=q.device)[None, :] >= sub_end  # [ns, L]
    expo = (ref[..., :, None, :] - b[..., None, :, :]).masked_fill(later[..., None], float("-inf"))
    ka = k[..., None, :, :] * expo.exp()  # [B, H, N, ns, L, dk]
    return torch.matmul(qa, ka.transpose(-1, -2)).view(B, H, N, L, L)


# ---- delta rule -------------------------------------------------------------------------------


def step_delta(q, k, v, beta, g, S):
    """One token: q, k [B, H, dk], v [B, H, dv], beta [B, H], g None | [B, H], S [B, H, dk, dv]."""
    if g is not None:
        S = S * g.exp()[..., None, None]
    kS = torch.matmul(k.unsqueeze(-2), S)  # [B, H, 1, dv] = (S^T k)^T
    u = beta[..., None, None] * (v.unsqueeze(-2) - kS)
    S = S + torch.matmul(k.unsqueeze(-1), u)
    return torch.matmul(q.unsqueeze(-2), S).squeeze(-2), S


def recurrent_delta(q, k, v, beta, g=None, *, state=None):
    """Reference: loop `step_delta` over time. q, k [B, H, T, dk], v [B, H, T, dv],
    beta [B, H, T]."""
    B, H, T, dk = k.shape
    S = state if state is not None else k.new_zeros(B, H, dk, v.shape[-1])
    outs = []
    for t in range(T):
        gt = None if g is None else g[:, :, t]
        o, S = step_delta(q[:, :, t], k[:, :, t], v[:, :, t], beta[:, :, t], gt, S)
        outs.append(o)
    return torch.stack(outs, dim=2), S


def chunk_delta(q, k, v, beta, g=None, *, state=None, chunk_size: int = CHUNK):
    """Training form of the (gated) delta rule via the UT transform (same arguments as
    `recurrent_delta`)."""
    B, H, T, dk = k.shape
    dv = v.shape[-1]
    L = chunk_size
    pad = -T % L
    q, k, v = (_pad_time(t, 2, pad) for t in (q, k, v))
    beta, g = _pad_time(beta, 2, pad), _pad_time(g, 2, pad)
    N = (T + pad) // L
    q, k, v = q.view(B, H, N, L, dk), k.view(B, H, N, L, dk), v.view(B, H, N, L, dv)
    beta = beta.view(B, H, N, L, 1)
    b = g.view(B, H, N, L).cumsum(-1) if g is not None else q.new_zeros(B, H, N, L)
    idx = torch.arange(L, device=q.device)
    incl = idx[:, None] >= idx[None, :]
    gamma = (b[..., :, None] - b[..., None, :]).masked_fill(~incl, float("-inf")).exp()
    kb = k * beta
    strict = idx[:, None] > idx[None, :]
    A = (torch.matmul(kb, k.transpose(-1, -2)) * gamma).masked_fill(~strict, 0.0)
    eye = torch.eye(L, device=q.device, dtype=q.dtype)
    rhs = torch.cat([v * beta, kb * b.exp()[..., None]], dim=-1)
    # in fp32 whatever autocast makes of the products: PyTorch has no bf16 or fp16 triangular
    # solve (CPU or CUDA), and the UT transform's inverse is where rounding would compound
    solved = torch.linalg.solve_triangular(
        (A + eye).float(), rhs.float(), upper=False, unitriangular=True
    )
    W, Kc = solved.to(rhs.dtype).split([dv, dk], dim=-1)
    P = torch.matmul(q, k.transpose(-1, -2)) * gamma
    q_in = q * b.exp()[..., None]
    k_st = k * (b[..., -1:] - b).exp()[..., None]
    decay = b[..., -1].exp()[..., None, None]
    S = state if state is not None else k.new_zeros(B, H, dk, dv)
    outs = []
    for n in range(N):
        U = W[:, :, n] - torch.matmul(Kc[:, :, n], S)
        outs.append(torch.matmul(q_in[:, :, n], S) + torch.matmul(P[:, :, n], U))
        S = S * decay[:, :, n] + torch.matmul(k_st[:, :, n].transpose(-1, -2), U)
    return torch.stack(outs, dim=2).reshape(B, H, N * L, dv)[:, :, :T], S


# ---- small shared layers ----------------------------------------------------------------------


class ShortConv(nn.Module):
    """Causal depthwise convolution of width K over time, followed by SiLU.

    Parameters: weight [C, 1, K] (no bias). Work: C * K multiply-adds per token (a convolution,
    counted as such). Decode state: the last K - 1 inputs, [B, K - 1, C].
    """

    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.kernel_size = kernel_size
        self.weight = nn.Parameter(torch.empty(channels, 1, kernel_size))
        nn.init.normal_(self.weight, std=kernel_size**-0.5)

    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None):
        """x [B, T, C], state [B, K-1, C] or None (zeros) -> (y [B, T, C], new state)."""
        B, T, C = x.shape
        if state is None:
            state = x.new_zeros(B, self.kernel_size - 1, C)
        xp = torch.cat([state, x], dim=1)
        y = F.conv1d(xp.transpose(1, 2), self.weight, groups=C).transpose(1, 2)
        return F.silu(y), xp[:, T:].clone()


def token_shift(x: torch.Tensor, last: torch.Tensor | None = None):
    """x [B, T, d] -> (x shifted one step right, with `last` [B, 1, d] (or zeros) in front;
    the new `last`)."""
    if last is None:
        last = x.new_zeros(x.shape[0], 1, x.shape[2])
    return torch.cat([last, x[:, :-1]], dim=1), x[:, -1:].clone()


# ---- the base of every linear mixer -----------------------------------------------------------


def heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[B, T, H * e] -> [B, H, T, e]."""
    B, T, _ = x.shape
    return x.view(B, T, n_heads, -1).transpose(1, 2)


class LinearMixer(nn.Module):
    """A linear sequence mixer: H heads with keys of dk and values of dv (from the resolved
    `LinearConfig`), and the output block shared by most families:
      o_norm: RMSNorm(dv) applied per head (weight [dv] shared by the heads),
      g_proj: d -> H * dv, the SiLU output gate (only when `output_gate`),
      o_proj: H * dv -> d.
    Subclasses implement `_run(x, state, recurrent)` for x [B, T, d] and `state_shapes()`; the
    training form (`forward`), the reference (`reference`), `prefill` and the decode `step`
    are the same code run with the chunked or the recurrent engine.
    """

    state_growth = "constant"
    reads = (
        "d_model",
        "norm_eps",
        "linear.n_heads",
        "linear.key_dim",
        "linear.value_dim",
        "linear.expand",
        "linear.feature_map",
        "linear.normalize",
        "linear.gate_rank",
        "linear.conv_size",
        "linear.output_gate",
    )

    def __init__(self, arch, *, output_block: bool = True):
        super().__init__()
        lin = arch.linear
        self.d_model, self.n_heads = arch.d_model, lin.n_heads
        self.key_dim, self.value_dim = lin.key_dim, lin.value_dim
        self.eps = arch.norm_eps
        if output_block:
            H, dv = self.n_heads, self.value_dim
            self.o_norm = RMSNorm(dv, arch.norm_eps)
            self.g_proj = Linear(arch.d_model, H * dv, bias=False) if lin.output_gate else None
            self.o_proj = Linear(H * dv, arch.d_model, bias=False)

    def _output(self, o: torch.Tensor, gate_in: torch.Tensor) -> torch.Tensor:
        """o [B, H, T, dv] -> [B, T, d] through o_norm, the optional gate and o_proj."""
        B, H, T, dv = o.shape
        o = self.o_norm(o).transpose(1, 2).reshape(B, T, H * dv)
        if self.g_proj is not None:
            o = o * F.silu(self.g_proj(gate_in))
        return self.o_proj(o)

    def _run(self, x: torch.Tensor, state: dict | None, recurrent: bool):
        raise NotImplementedError

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        """Per-sequence shapes of the decode state tensors (the batch dimension comes first)."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Training (chunked) form: x [B, T, d] -> [B, T, d]."""
        return self._run(x, None, False)[0]

    def reference(self, x: torch.Tensor, state: dict | None = None):
        """The plain recurrent form (a loop over time): (y, final state)."""
        return self._run(x, state, True)

    def init_state(self, batch_size: int, device=None, dtype=None) -> dict[str, torch.Tensor]:
        return {
            name: torch.zeros((batch_size, *shape), device=device, dtype=dtype)
            for name, shape in self.state_shapes().items()
        }

    def prefill(self, x: torch.Tensor, state: dict, pos: int):
        return self._run(x, state, False)

    def step(self, x: torch.Tensor, state: dict, pos: int):
        y, state = self._run(x[:, None], state, True)
        return y[:, 0], state


def gated(q, k, v, g=None, *, strict=False, state=None, recurrent=False):
    """Dispatch to the reference loop or the chunked form of the gated recurrence."""
    if recurrent:
        return recurrent_gated(q, k, v, g, strict=strict, state=state)
    return chunk_gated(q, k, v, g, strict=strict, state=state)


def delta(q, k, v, beta, g=None, *, state=None, recurrent=False):
    """Dispatch to the reference loop or the chunked form of the delta rule."""
    if recurrent:
        return recurrent_delta(q, k, v, beta, g, state=state)
    return chunk_delta(q, k, v, beta, g, state=state)


def part(state: dict | None, key: str) -> torch.Tensor | None:
    """One tensor of a decode state, or None for a fresh (zero) state."""
    return None if state is None else state[key]
