"""`Linear`: a bias-free `nn.Linear` whose GEMMs run on oneDNN on CPU.

PyTorch runs fp32 `nn.Linear` on MKL. On AMD CPUs MKL takes an AVX2 code path, while oneDNN, which
ships inside PyTorch (it serves bf16 and inductor), has AVX-512 kernels, so on an AMD CPU with
AVX-512 its fp32 GEMM is the faster one for the training shapes here
(`benchmarks/bench_models_vs_hf.py` compares the two); on one without, both run AVX2 kernels.
`Linear`
keeps the `nn.Linear` parameter (`weight` [out, in]) and runs the forward GEMM and both backward
GEMMs (grad input = grad @ W, grad weight = grad^T @ x) through `torch.ops.mkldnn._linear_pointwise`
on ordinary dense tensors, in full fp32 (no reduced precision: results agree with MKL to fp32
rounding). It falls back to `F.linear` when the input has fewer than MIN_ROWS rows (decode steps,
where MKL is as fast), is not a float32 CPU tensor, when oneDNN is unavailable, under
`torch.compile` (inductor cannot lower the op on weight views, and chooses its own CPU GEMMs), or
under CPU autocast (which casts `F.linear` to bf16 but not this op); `ARCHSEARCH_ONEDNN=0` in the
environment turns it off. oneDNN builds and caches one kernel per GEMM shape (about 0.1 ms each), so
layers whose row count changes on every call (the routed MoE experts) stay on F.linear.

FLOP counting: a formula for the op is registered with `torch.utils.flop_counter`, so
FlopCounterMode counts every GEMM as 2 * rows * in * out, exactly as it counts `mm`.
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils import flop_counter

MIN_ROWS = 8

_OP = getattr(getattr(torch.ops, "mkldnn", None), "_linear_pointwise", None)


def _available() -> bool:
    if os.environ.get("ARCHSEARCH_ONEDNN", "1") == "0" or _OP is None:
        return False
    try:
        return torch.backends.mkldnn.is_available()
    except Exception:  # pragma: no cover - builds without the backend module
        return False


ENABLED = _available()


def set_enabled(enabled: bool) -> None:
    """Turn the oneDNN path on or off for this process (benchmarks compare both)."""
    global ENABLED
    ENABLED = bool(enabled) and _OP is not None


def _gemm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [..., k] @ w[n, k]^T on oneDNN (w may be a strided view)."""
    return _OP(x, w, None, "none", [], "")


class _OneDNNLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return _gemm(x, weight)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:
            grad_x = _gemm(grad, weight.t())  # [..., out] @ [out, in]
        if ctx.needs_input_grad[1]:
            g = grad.reshape(-1, grad.shape[-1])
            grad_w = _gemm(g.t(), x.reshape(-1, x.shape[-1]).t())  # [out, rows] @ [rows, in]
        return grad_x, grad_w


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x @ weight^T, on oneDNN when it pays off (see the module docstring)."""
    if (
        ENABLED
        and x.device.type == "cpu"
        and x.dtype == torch.float32
        and weight.dtype == torch.float32
        and x.numel() >= MIN_ROWS * x.shape[-1]
        and not torch.compiler.is_compiling()  # inductor picks its own CPU GEMMs
        and not torch.is_autocast_enabled("cpu")  # autocast casts F.linear to bf16, not this op
    ):
        return _OneDNNLinear.apply(x, weight)
    return F.linear(x, weight)


class Linear(nn.Linear):
    """Bias-free linear map `in_features -> out_features` (parameter `weight` [out, in]).

    `onednn = False` keeps a layer on F.linear: for layers whose number of rows changes from
    call to call (MoE experts), since oneDNN builds (and caches) a kernel per new shape.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = False):
        if bias:
            raise ValueError("archsearch models have no biases")
        super().__init__(in_features, out_features, bias=False)
        self.onednn = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight) if self.onednn else F.linear(x, self.weight)


if _OP is not None and _OP not in flop_counter.flop_registry:

    @flop_counter.register_flop_formula(_OP)
    def _linear_pointwise_flops(x_shape, w_shape, *args, out_shape=None, **kwargs) -> int:
        return 2 * math.prod(x_shape[:-1]) * x_shape[-1] * w_shape[0]
