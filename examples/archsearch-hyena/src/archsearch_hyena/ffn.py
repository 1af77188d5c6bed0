"""ReGLU channel mixer ([GLU]): built by archsearch
as `ReGLU(d_model, d_ffn)`; down(relu(x W_g) * (x W_u)). Parameters 3 d F; FLOPs 6 d F per
token (three matmuls), which archsearch counts by tracing."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ReGLU(nn.Module):
    def __init__(self, d_model: int, d_ffn: int):
        super().__init__()
        self.w_in = nn.Linear(d_model, 2 * d_ffn, bias=False)
        self.down = nn.Linear(d_ffn, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w_in(x).chunk(2, dim=-1)
        return self.down(F.relu(gate) * up)
