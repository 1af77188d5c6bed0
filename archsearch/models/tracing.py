"""Counting a module by running it: FLOPs, operators, activation traffic and state, per shape.

`trace(module, kind, T, n0, B)` runs one phase of a sequence mixer (or a channel mixer's
forward) under torch's `FlopCounterMode` (SDPA on its MATH backend, so attention is counted as
the score and value products) and a dispatch mode that counts the operators dispatched and the
elements they write. Modules are run on the `meta` device first (shapes only: no arithmetic,
so a 2048-token prefill of a wide mixer costs milliseconds); a module that cannot run on meta
(data-dependent shapes, `.item()`) is run for real on the CPU.

`fvcore_flops` is the second opinion: fvcore's `FlopCountAnalysis` (a JIT trace, multiply-adds)
with handlers for the operators it lacks (`scaled_dot_product_attention`) or undercounts
(`matmul` with broadcast batch dimensions), without the norms it counts but torch's counter does
not, reported in FLOPs (2 x MACs).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from archsearch.models import gemm

__all__ = ["Trace", "TracingError", "fvcore_flops", "state_elements", "trace"]


class TracingError(Exception):
    """A module that could not be run at a shape (on meta nor on the CPU)."""


@dataclass(frozen=True)
class Trace:
    """What one phase of one module costs, for a batch of B sequences."""

    flops: float  # forward FLOPs as FlopCounterMode counts them
    backward_flops: float  # FLOPs of the backward of a sum of the outputs (0 unless asked)
    launches: int  # aten operators dispatched by the forward
    written: float  # elements the forward's operators write (activation traffic / 2)
    params: int  # parameter elements of the module
    device: str  # where it ran: "meta" or "cpu"


class _OpCounter(TorchDispatchMode):
    """Operators dispatched, elements written, and the FLOPs of convolution backwards counted
    with their `groups` (FlopCounterMode's formula ignores them: a depthwise convolution's
    backward would count C times over)."""

    def __init__(self) -> None:
        super().__init__()
        self.launches = 0
        self.written = 0
        self.conv_backward = 0.0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.launches += 1
        self.written += sum(t.numel() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
        if func is torch.ops.aten.convolution_backward.default:
            grad_out, weight, mask = args[0], args[2], args[10]
            macs = grad_out.numel() * math.prod(weight.shape[1:])  # weight: C_in / groups x kernel
            self.conv_backward += 2.0 * macs * (int(mask[0]) + int(mask[1]))
        return out


def _flops(fc: FlopCounterMode, *, conv_backward: bool = True) -> float:
    counts = fc.get_flop_counts().get("Global", {})
    return float(
        sum(v for k, v in counts.items() if conv_backward or "convolution_backward" not in str(k))
    )


def _state_after(module: nn.Module, x: torch.Tensor, n0: int) -> Any:
    state = module.init_state(x.shape[0], x.device, x.dtype)
    if n0 > 0:
        _, state = module.prefill(x[:, :n0], state, 0)
    return state


def _run_phase(
    module: nn.Module, kind: str, T: int, n0: int, B: int, d: int, device: str, backward: bool
) -> Trace:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(B, max(T, 1) + n0, d, generator=gen).to(device)
    if backward:
        x.requires_grad_(True)
    if kind == "channel":
        run: Callable[[], Any] = lambda: module(x[:, :T])  # noqa: E731
    elif kind == "forward":
        if n0 == 0:
            run = lambda: module(x[:, :T])  # noqa: E731
        else:
            with torch.no_grad():
                state = _state_after(module, x.detach(), n0)
            run = lambda: module.prefill(x[:, n0 : n0 + T], state, n0)[0]  # noqa: E731
    elif kind == "step":
        with torch.no_grad():
            state = _state_after(module, x.detach(), n0)
        run = lambda: module.step(x[:, n0], state, n0)[0]  # noqa: E731
    else:
        raise ValueError(kind)
    counter = _OpCounter()
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc, counter:
        y = run()
    bwd = 0.0
    if backward:
        grads = _OpCounter()
        with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fb, grads:
            y.sum().backward()
        bwd = _flops(fb, conv_backward=False) + grads.conv_backward
    return Trace(
        flops=_flops(fc),
        backward_flops=bwd,
        launches=counter.launches,
        written=float(counter.written),
        params=sum(p.numel() for p in module.parameters()),
        device=device,
    )


def trace(
    build: Callable[[], nn.Module],
    kind: str,
    T: int,
    n0: int,
    B: int,
    d: int,
    *,
    backward: bool = False,
) -> Trace:
    """Count one phase of the module `build()` makes (input width `d`): `forward` (T tokens
    after n0 cached; the training form when n0 = 0), `step` (one token at context n0) or
    `channel` (a channel mixer on T tokens). Raises `TracingError` when it cannot run."""
    errors = []
    for device in ("meta", "cpu"):
        try:
            with torch.device(device):
                module = build()
            module.train(backward)
            with torch.enable_grad() if backward else torch.no_grad():
                return _run_phase(module, kind, T, n0, B, d, device, backward)
        except Exception as err:
            errors.append(f"{device}: {type(err).__name__}: {' '.join(str(err).split())[:200]}")
    raise TracingError("; ".join(errors))


def state_elements(build: Callable[[], nn.Module], context: int, B: int, d: int) -> float:
    """Elements of the decode state a sequence mixer holds after `context` tokens."""
    errors = []
    for device in ("meta", "cpu"):
        try:
            with torch.device(device):
                module = build()
            with torch.no_grad():
                x = torch.zeros(B, max(context, 1), d, device=device)
                state = _state_after(module, x, context)
            return float(
                sum(t.numel() for t in tree_flatten(state)[0] if isinstance(t, torch.Tensor))
            )
        except Exception as err:
            errors.append(f"{device}: {type(err).__name__}: {' '.join(str(err).split())[:200]}")
    raise TracingError("; ".join(errors))


# ---- fvcore ----------------------------------------------------------------------------------

# fvcore counts these but torch's FlopCounterMode does not: left out so the two agree
_FVCORE_SKIPPED = (
    "aten::batch_norm",
    "aten::group_norm",
    "aten::layer_norm",
    "aten::instance_norm",
    "aten::upsample_nearest2d",
    "aten::upsample_bilinear2d",
    "aten::adaptive_avg_pool2d",
    "aten::grid_sampler",
)


def _sdpa_macs(inputs: list, outputs: list) -> float:
    """fvcore handler for aten::scaled_dot_product_attention: Q K^T and P V over the full
    score block (multiply-adds), as the MATH backend computes it."""
    q, k, v = (inp.type().sizes() for inp in inputs[:3])
    batch = math.prod(q[:-2])
    return float(batch * q[-2] * k[-2] * (q[-1] + v[-1]))


def _matmul_macs(inputs: list, outputs: list) -> float:
    """fvcore handler for aten::matmul with broadcast batch dimensions (fvcore's own counts
    the first operand's batch only): every output element takes k multiply-adds."""
    k = inputs[0].type().sizes()[-1]
    return float(math.prod(outputs[0].type().sizes()) * k)


class _Phase(nn.Module):
    def __init__(self, module: nn.Module, kind: str, state: Any, n0: int):
        super().__init__()
        self.module, self.kind, self.state, self.n0 = module, kind, state, n0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "step":
            return self.module.step(x, self.state, self.n0)[0]
        if self.kind == "forward" and self.n0 > 0:
            return self.module.prefill(x, self.state, self.n0)[0]
        return self.module(x)


def fvcore_flops(module: nn.Module, kind: str, T: int, n0: int, B: int, d: int) -> float:
    """FLOPs (2 x multiply-adds) of one phase as fvcore's FlopCountAnalysis counts them, on the
    CPU at the given shape (a JIT trace: small shapes only)."""
    from fvcore.nn import FlopCountAnalysis

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(B, max(T, 1) + n0, d, generator=gen)
    with torch.no_grad():
        state = _state_after(module, x, n0) if kind == "step" or n0 > 0 else None
        inp = x[:, n0] if kind == "step" else x[:, n0 : n0 + T]
        analysis = FlopCountAnalysis(_Phase(module, kind, state, n0), (inp,))
        analysis.set_op_handle("aten::scaled_dot_product_attention", _sdpa_macs)
        analysis.set_op_handle("aten::matmul", _matmul_macs)
        for name in _FVCORE_SKIPPED:
            analysis.set_op_handle(name, None)
        analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
        analysis.tracer_warnings("none")
        enabled = gemm.ENABLED  # the JIT trace sees plain aten::linear, which fvcore counts
        gemm.set_enabled(False)
        try:
            with sdpa_kernel(SDPBackend.MATH):
                return 2.0 * float(analysis.total())
        finally:
            gemm.set_enabled(enabled)
