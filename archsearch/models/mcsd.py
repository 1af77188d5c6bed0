"""The MCSD block ([MCSD] §2.2, and the recurrent inference of §2.3).

The input x [T, D] is split into C channels of Dc = D / C features. Per channel i:
  slope section (eqs. 1-6):  U = X W_U,i, V = X W_V,i;  V' = s_i V;  Θ_s = SiLU(V') ⊙ U, where
    s_i = softmax of the T x T matrix with entries -(t - s) β_i below the diagonal, -inf on and
    above it, and a first row [1, -inf, ...];  β_i = (2^(-8/C))^(i+1).
  decay section (eqs. 7-12):  F = X W_F,i, E = X W_E,i;  E' = de_i E;
    Θ_d = RMSNorm(E') ⊙ sigmoid(F), where de_i has entries α_i^(t - s) below the diagonal,
    zero (the -inf of eq. 9) on and above it, and a first row [1, 0, ...];  α_i = 1 - 2^(-5-i).
  Θ = Concat(Θ_s, Θ_d) (eq. 13), [T, C, 2 Dc] flattened to [T, 2D], then out = Θ W_O (2D -> D).

Readings chosen where the paper is ambiguous or inconsistent (each keeps the matrix form, the
chunked training form and the recurrent decoding form exactly equal):
- Current token. Both matrices are strictly lower triangular ("mask the current and subsequent
  information"), as eqs. 14 and 17 also sum j = 1..n-1 only. The special first row makes the
  first output use the current token itself (V'_0 = V_0, E'_0 = E_0); later rows never do.
  Decoding reproduces this: at position 0 the step uses V_0 and E_0, afterwards the state.
- Normalisation of the decay matrix. Eq. 9 says de_i is "normalised by the activation function
  ε by RMSNorm", which is undefined on a row holding -inf, while eq. 20 applies RMSNorm to the
  decayed feature S^decay. We apply RMSNorm to each token's E'_t over the Dc features of its
  channel (with a learned scale [C, Dc]); per-token normalisation commutes with the recurrence,
  so eqs. 17-19 (an unnormalised decayed sum) and eq. 9 stay exactly equal.
- Concatenation vs sum. Eq. 13 concatenates the sections, eq. 20 adds them. We concatenate and
  project 2D -> D by one W_O (the lead's presets); the sum of eq. 20 is the special case
  W_O = [I; I] followed by the next layer's projection, so nothing is lost.
- Per-channel projections: W_U, W_V, W_F, W_E are C x Dc x Dc as written under eqs. 1 and 7.
Recurrent inference (eqs. 16, 19), with n the number of tokens already seen:
  S^slope_{n+1} = (1 - 1/Σ_{j=0}^{n-1} e^{-jβ}) S^slope_n + (1/Σ_{j=0}^{n-1} e^{-jβ}) V_n,
  S^decay_{n+1} = α S^decay_n + α E_n;  both O(1): the state is 2 D numbers per sequence.
Training form: both sections are exclusive exponential moving averages with a fixed decay per
channel (e^{-β_i} and α_i), computed in chunks of CHUNK = 64 tokens, the linear mixers' chunk
(`archsearch.models.linear.common`): a fixed [C, 64, 64] decay matrix within a chunk, a
recurrence over chunk states between chunks; O(T * 64) memory, never O(T^2). The
slope sum is divided by its closed-form softmax denominator Σ_{j=1}^{t} e^{-jβ}.

Parameters: w_in [C, Dc, 4 Dc] (W_U, W_V, W_F, W_E per channel, fused); norm_weight [C, Dc];
o_proj: 2D -> D (bias-free). β and α are constants (buffers).
Matmuls per token: C x ([1, Dc] x [Dc, 4 Dc]) (= 4 D^2 / C multiply-adds); training only: the
decay matrices, per channel and chunk [64, 64] x [64, Dc] for each section, and the chunk-state
updates [Dc] per token; o_proj [2D] x [2D, D]. Decode: the same projections, O(D) updates.
Decode state: {"slope": [B, C, Dc], "decay": [B, C, Dc]}.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from archsearch.arch import CHUNK, ArchConfig
from archsearch.models.gemm import Linear


def slope_betas(C: int) -> torch.Tensor:
    """β_i = (2^(-8/C))^(i+1), eq. 2."""
    return (2.0 ** (-8.0 / C)) ** (torch.arange(C, dtype=torch.float64) + 1)


def decay_alphas(C: int) -> torch.Tensor:
    """α_i = 1 - 2^(-5-i), eq. 8."""
    return 1.0 - 2.0 ** (-5.0 - torch.arange(C, dtype=torch.float64))


def slope_denominator(beta: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Z_t = Σ_{j=1}^{t} e^{-jβ} for every channel (rows of `beta`) and position t: [C, T]."""
    beta, t = beta[:, None], t[None, :].to(beta.dtype)
    return torch.exp(-beta) * torch.expm1(-t * beta) / torch.expm1(-beta)


def ema_exclusive(x: torch.Tensor, log_decay: torch.Tensor, h0: torch.Tensor | None = None):
    """y_t = λ^t h0 + Σ_{s<t} λ^{t-s} x_s per channel, chunked. x [B, C, T, Dc], log λ [C]."""
    B, C, T, Dc = x.shape
    L = min(CHUNK, T)
    pad = -T % L
    if pad:
        x = torch.cat([x, x.new_zeros(B, C, pad, Dc)], dim=2)
    N = (T + pad) // L
    idx = torch.arange(L, device=x.device, dtype=x.dtype)
    lam = log_decay.to(x.dtype)[:, None, None]
    diff = idx[:, None] - idx[None, :]
    W = torch.exp(lam * diff.clamp_min(0)) * (diff > 0)  # [C, L, L], strictly lower
    xc = x.view(B, C, N, L, Dc)
    y = torch.matmul(W[:, None], xc)  # intra-chunk
    into = torch.exp(lam * idx[:, None])  # λ^τ: how the chunk-start state reaches position τ
    last = torch.exp(lam * (L - idx[:, None]))  # λ^(L-σ): how x_σ reaches the next chunk
    h = h0 if h0 is not None else x.new_zeros(B, C, Dc)
    carry = (xc * last[:, None]).sum(3)  # [B, C, N, Dc]
    step = torch.exp(lam[:, :, 0] * L)  # [C, 1]
    starts = []
    for n in range(N):
        starts.append(h)
        h = h * step + carry[:, :, n]
    y = y + into[:, None] * torch.stack(starts, dim=2)[:, :, :, None]
    return y.reshape(B, C, N * L, Dc)[:, :, :T]


class MCSD(nn.Module):
    """Multi-channel slope and decay block."""

    state_growth = "constant"
    reads = ("d_model", "norm_eps", "mcsd.n_channels")

    def __init__(self, arch: ArchConfig):
        super().__init__()
        d, C = arch.d_model, arch.mcsd.n_channels
        self.C, self.Dc, self.eps = C, d // C, arch.norm_eps
        # fan-in init per channel (as the LM's Linear layers)
        self.w_in = nn.Parameter(torch.empty(C, self.Dc, 4 * self.Dc).normal_(std=self.Dc**-0.5))
        self.norm_weight = nn.Parameter(torch.ones(C, self.Dc))
        self.o_proj = Linear(2 * d, d, bias=False)
        self.register_buffer("log_slope", -slope_betas(C).float(), persistent=False)
        self.register_buffer("log_alpha", decay_alphas(C).log().float(), persistent=False)

    # -- shared pieces --------------------------------------------------------------------------

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """x [B, T, D] -> U, V, F, E each [B, C, T, Dc] (eqs. 1 and 7)."""
        B, T, _ = x.shape
        h = torch.einsum("btcd,cde->bcte", x.view(B, T, self.C, self.Dc), self.w_in)
        return h.split(self.Dc, dim=-1)

    def _combine(self, U, V1, F_, E1) -> torch.Tensor:
        """Eqs. 6, 12, 13 and W_O: [B, C, T, Dc] each -> [B, T, D]."""
        theta_s = F.silu(V1) * U
        theta_d = F.rms_norm(E1, (self.Dc,), None, self.eps) * self.norm_weight[:, None]
        theta_d = theta_d * torch.sigmoid(F_)
        B, C, T, Dc = U.shape
        theta = torch.cat([theta_s, theta_d], dim=-1).permute(0, 2, 1, 3).reshape(B, T, 2 * C * Dc)
        return self.o_proj(theta)

    def _denominator(self, start: int, T: int, device) -> torch.Tensor:
        t = torch.arange(start, start + T, device=device)
        return slope_denominator(slope_betas(self.C).to(device), t)  # [C, T], in float64

    # -- training (chunked) and the literal matrix form -------------------------------------------

    def _run(self, x: torch.Tensor, state: dict | None, pos: int):
        U, V, F_, E = self._project(x)
        T = x.shape[1]
        h_slope = h_decay = None
        if state is not None:  # the slope state is normalised (eq. 16): undo with Z_pos
            z0 = self._denominator(pos, 1, x.device).to(x.dtype)[None, :, :]  # [1, C, 1]
            h_slope, h_decay = state["slope"] * z0, state["decay"]
        A = ema_exclusive(V, self.log_slope, h_slope)
        z = self._denominator(pos, T + 1, x.device)
        V1 = A / z[:, :T, None].clamp_min(1e-30).to(x.dtype)
        D = ema_exclusive(E, self.log_alpha, h_decay)
        # the states after the last token, S_T = λ (S_{T-1} + x_{T-1}) (the slope one normalised)
        A_T = torch.exp(self.log_slope)[:, None] * (A[:, :, -1] + V[:, :, -1])
        S_slope = A_T / z[:, T, None].to(x.dtype)
        S_decay = torch.exp(self.log_alpha)[:, None] * (D[:, :, -1] + E[:, :, -1])
        E1 = D
        if pos == 0:  # the special first row of eqs. 3 and 9
            V1 = torch.cat([V[:, :, :1], V1[:, :, 1:]], dim=2)
            E1 = torch.cat([E[:, :, :1], D[:, :, 1:]], dim=2)
        return self._combine(U, V1, F_, E1), {"slope": S_slope, "decay": S_decay}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Training form: x [B, T, D] -> [B, T, D]."""
        return self._run(x, None, 0)[0]

    def matrices(self, T: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """The literal T x T matrices: W_s (eqs. 3-4, softmax-normalised) and W_d (eqs. 9-10)."""
        t = torch.arange(T, device=device, dtype=torch.float64)
        diff = t[:, None] - t[None, :]
        below = diff > 0
        beta = slope_betas(self.C).to(device)[:, None, None]
        logits = torch.where(below, -diff * beta, float("-inf"))
        logits[:, 0, 0] = 1.0
        W_s = torch.softmax(logits, dim=-1)
        alpha = decay_alphas(self.C).to(device)[:, None, None]
        W_d = torch.where(below, alpha ** diff.clamp_min(0), 0.0)
        W_d[:, 0, 0] = 1.0
        return W_s, W_d

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """Eqs. 1-13 with the literal T x T matrices (O(T^2); for tests)."""
        U, V, F_, E = self._project(x)
        W_s, W_d = (m.to(x.dtype) for m in self.matrices(x.shape[1], x.device))
        return self._combine(U, torch.matmul(W_s, V), F_, torch.matmul(W_d, E))

    # -- decoding (eqs. 14-21) --------------------------------------------------------------------

    def init_state(self, batch_size: int, device=None, dtype=None) -> dict[str, torch.Tensor]:
        shape = (batch_size, self.C, self.Dc)
        return {
            "slope": torch.zeros(shape, device=device, dtype=dtype),
            "decay": torch.zeros(shape, device=device, dtype=dtype),
        }

    def prefill(self, x: torch.Tensor, state: dict, pos: int):
        return self._run(x, state, pos)

    def step(self, x: torch.Tensor, state: dict, pos: int):
        """One token x [B, D] at position `pos` (= n tokens seen) with the O(1) state."""
        U, V, F_, E = (t[:, :, 0] for t in self._project(x[:, None]))  # [B, C, Dc]
        S_slope, S_decay = state["slope"], state["decay"]
        V1, E1 = (V, E) if pos == 0 else (S_slope, S_decay)
        y = self._combine(U[:, :, None], V1[:, :, None], F_[:, :, None], E1[:, :, None])[:, 0]
        c = 1.0 / (1.0 + self._denominator(pos, 1, x.device)[:, 0])  # eq. 16 coefficient
        c = c.to(x.dtype)[:, None]
        new = {
            "slope": (1 - c) * S_slope + c * V,
            "decay": torch.exp(self.log_alpha)[:, None] * (S_decay + E),
        }
        return y, new
