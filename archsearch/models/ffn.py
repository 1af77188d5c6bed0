"""Channel mixers (feed-forward networks), all bias-free.

Gated ([GLU]): y = W_down(act(x W_gate) * (x W_up)).
  - `swiglu`: act = SiLU;  `geglu`: act = GELU (exact erf form; [MCSD]'s gated MLP).
  Parameters: gate (d -> d_ffn), up (d -> d_ffn), down (d_ffn -> d).
  Matmuls per token: d x d_ffn (gate), d x d_ffn (up), d_ffn x d (down).
  (Gate and up are two matmuls, not one fused d x 2 d_ffn: on CPU the fused output's two
  strided halves make the elementwise activation slower than the fusion saves.)
Non-gated: y = W_down(act(x W_up)).
  - `relu2`: act = max(0, x)^2 ([PLM] eq. 3);  `gelu`: act = GELU.
  Parameters: up (d -> d_ffn), down (d_ffn -> d). Matmuls per token: d x d_ffn, d_ffn x d.
Decode is the same computation on one token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from archsearch.models.gemm import Linear


class GatedFFN(nn.Module):
    """Gated FFN; subclasses set `act`."""

    gated = True

    def __init__(self, d_model: int, d_ffn: int):
        super().__init__()
        self.d_ffn = d_ffn
        self.gate = Linear(d_model, d_ffn, bias=False)
        self.up = Linear(d_model, d_ffn, bias=False)
        self.down = Linear(d_ffn, d_model, bias=False)

    def act(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.gate(x)) * self.up(x))


class SwiGLU(GatedFFN):
    def act(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)


class GeGLU(GatedFFN):
    def act(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


class PlainFFN(nn.Module):
    """Non-gated FFN; subclasses set `act`."""

    gated = False

    def __init__(self, d_model: int, d_ffn: int):
        super().__init__()
        self.d_ffn = d_ffn
        self.up = Linear(d_model, d_ffn, bias=False)
        self.down = Linear(d_ffn, d_model, bias=False)

    def act(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class ReLU2(PlainFFN):
    """Squared ReLU, [PLM] eq. 3: ReLU^2(x) = max(0, x)^2."""

    def act(self, x: torch.Tensor) -> torch.Tensor:
        return torch.square(F.relu(x))


class GELU(PlainFFN):
    def act(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


FFNS: dict[str, type[nn.Module]] = {"swiglu": SwiGLU, "geglu": GeGLU, "relu2": ReLU2, "gelu": GELU}
