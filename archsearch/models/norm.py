"""Normalisation layers: RMSNorm (Zhang & Sennrich, 2019) and bias-free LayerNorm.

Parameters: `weight` of shape (dim,) for both; no biases anywhere in the models.
Neither performs a matmul.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight, over the last dimension."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


class LayerNorm(nn.Module):
    """LayerNorm with a learned scale and no bias."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, None, self.eps)


NORMS: dict[str, type[nn.Module]] = {"rmsnorm": RMSNorm, "layernorm": LayerNorm}


def make_norm(kind: str, dim: int, eps: float) -> nn.Module:
    """The block norm named by `ArchConfig.norm`."""
    return NORMS[kind](dim, eps)
