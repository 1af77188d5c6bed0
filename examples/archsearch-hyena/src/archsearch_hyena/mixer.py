"""A Hyena-style long-convolution sequence mixer ([Hyena]), order 1.

For x [B, T, d], with W = round(linear.expand * d) channels:

    a, b, v = split(x W_in)                       W_in: d -> 3 W
    a, b, v = short_conv(a, b, v)                 causal depthwise, width linear.conv_size
    u = a * v
    z_t = sum_{s <= t} h_{t-s} * u_s + D * u_t   per channel, a filter as long as the sequence
    y = (b * z) W_out                             W_out: W -> d

The long filter h is implicit ([Hyena] §3.3): h_t = MLP(pos(t)) * exp(-alpha t), the MLP
Linear(F, R) -> sin -> Linear(R, W) over F = 2 x 8 sinusoidal features of the lag t, with
R = linear.gate_rank, and a fixed decay alpha per channel; its parameters do not depend on the
sequence length. ArchConfig fields read: d_model, linear.expand, linear.gate_rank,
linear.conv_size (`reads`).

Parallel form (`forward`, `prefill`): the long convolution as a depthwise `conv1d` whose kernel
spans the sequence (O(T^2 W), what a FLOP counter sees; an FFT would make it O(T log T W)).
Recurrent form (`step`): the state holds every past u (it grows with the context, as a KV cache
does: `state_growth = "growing"`) and the short convolution's last K - 1 inputs; a step is the
dot product of the reversed filter with that history.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

N_FREQS = 8


class HyenaLongConv(nn.Module):
    state_growth = "growing"
    reads = ("d_model", "linear.expand", "linear.gate_rank", "linear.conv_size")

    def __init__(self, arch):
        super().__init__()
        lin = arch.linear
        d = arch.d_model
        self.width = W = round(lin.expand * d)
        self.kernel_size = K = max(lin.conv_size or 0, 1)
        R = lin.gate_rank or 16
        self.w_in = nn.Linear(d, 3 * W, bias=False)
        self.short = nn.Parameter(torch.randn(3 * W, 1, K) * K**-0.5)
        self.filter_in = nn.Linear(2 * N_FREQS, R, bias=False)
        self.filter_out = nn.Linear(R, W, bias=False)
        self.skip = nn.Parameter(torch.ones(W))
        self.w_out = nn.Linear(W, d, bias=False)
        freqs = torch.exp(-math.log(1e4) * torch.arange(N_FREQS) / N_FREQS)
        self.register_buffer("freqs", freqs, persistent=False)
        decay = torch.exp(torch.linspace(math.log(1e-3), math.log(0.3), W))
        self.register_buffer("decay", decay, persistent=False)

    # -- pieces ---------------------------------------------------------------------------------

    def filter(self, length: int) -> torch.Tensor:
        """h [W, length]: the implicit filter at lags 0 .. length - 1."""
        t = torch.arange(length, device=self.freqs.device, dtype=self.freqs.dtype)
        angles = t[:, None] * self.freqs[None, :]
        feats = torch.cat([angles.sin(), angles.cos()], dim=-1)  # [length, 2 F]
        h = self.filter_out(torch.sin(self.filter_in(feats)))  # [length, W]
        return (h * torch.exp(-self.decay[None, :] * t[:, None])).t()

    def _short_conv(self, x: torch.Tensor, past: torch.Tensor):
        """Causal depthwise conv of x [B, T, 3W] after `past` [B, K-1, 3W]."""
        T = x.shape[1]
        xp = torch.cat([past, x], dim=1)
        y = F.conv1d(xp.transpose(1, 2), self.short, groups=xp.shape[-1]).transpose(1, 2)
        return y, xp[:, T:].clone()  # a copy: the state must not keep the whole buffer alive

    def _gates(self, x: torch.Tensor, past: torch.Tensor):
        abv, past = self._short_conv(self.w_in(x), past)
        a, b, v = abv.split(self.width, dim=-1)
        return a * v, b, past

    def _long_conv(self, history: torch.Tensor, T: int) -> torch.Tensor:
        """z for the last T positions of history u [B, n, W] (causal, lag 0 included)."""
        n = history.shape[1]
        h = self.filter(n)  # [W, n]
        padded = F.pad(history.transpose(1, 2), (n - 1, 0))
        z = F.conv1d(padded, h.flip(-1)[:, None, :], groups=self.width)  # [B, W, n]
        return z.transpose(1, 2)[:, n - T :] + self.skip * history[:, n - T :]

    # -- the contract ---------------------------------------------------------------------------

    def init_state(self, batch_size: int, device=None, dtype=None) -> dict[str, torch.Tensor]:
        return {
            "u": torch.zeros(batch_size, 0, self.width, device=device, dtype=dtype),
            "conv": torch.zeros(
                batch_size, self.kernel_size - 1, 3 * self.width, device=device, dtype=dtype
            ),
        }

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        u, b, _ = self._gates(x, x.new_zeros(B, self.kernel_size - 1, 3 * self.width))
        return self.w_out(b * self._long_conv(u, T))

    def prefill(self, x: torch.Tensor, state: dict, pos: int):
        u, b, conv = self._gates(x, state["conv"])
        history = torch.cat([state["u"], u], dim=1)
        y = self.w_out(b * self._long_conv(history, x.shape[1]))
        return y, {"u": history, "conv": conv}

    def step(self, x: torch.Tensor, state: dict, pos: int):
        u, b, conv = self._gates(x[:, None], state["conv"])
        history = torch.cat([state["u"], u], dim=1)  # [B, n + 1, W]
        h = self.filter(history.shape[1]).flip(-1)  # lag n .. 0 against positions 0 .. n
        z = torch.einsum("bnw,wn->bw", history, h) + self.skip * u[:, 0]
        return self.w_out(b[:, 0] * z), {"u": history, "conv": conv}

    # -- optional: declared formulas, checked against tracing by `archsearch check-mixer` ------

    @staticmethod
    def declared_costs(arch, kind: str, T: int, n0: int, B: int) -> dict[str, float]:
        lin = arch.linear
        d, W = arch.d_model, round(lin.expand * arch.d_model)
        K, R = max(lin.conv_size or 0, 1), lin.gate_rank or 16
        params = 3 * d * W + 3 * W * K + 2 * N_FREQS * R + R * W + W + W * d
        if kind == "step":
            n = n0 + 1
            flops = B * (2 * d * 3 * W + 2 * 3 * W * K + 2 * n * W + 2 * W * d)
            flops += 2 * n * (2 * N_FREQS * R + R * W)
        else:
            n = n0 + T
            flops = B * (2 * T * d * 3 * W + 2 * T * 3 * W * K + 2 * n * n * W + 2 * T * W * d)
            flops += 2 * n * (2 * N_FREQS * R + R * W)
        return {"params": params, "flops": flops, "state_elements": B * (n * W + (K - 1) * 3 * W)}
