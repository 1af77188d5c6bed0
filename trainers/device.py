"""Where a trial runs and with which numerics: its device, autocast, gradient scaling, the
optimizer's fused kernel, host-to-device copies, out-of-memory errors, and checkpoints that load
on any device.

    device = resolve_device(cfg, Placement(gpu_ids=ray.get_gpu_ids()))
    with autocast(device, cfg.precision): ...

`train.device: auto` takes the accelerator Ray assigned to the trial (`Placement.gpu_ids`), and
outside Ray the machine's CUDA or MPS device; otherwise the CPU. A trial inside Ray that was
assigned no accelerator runs on the CPU even where the node has one, so it never takes a GPU
another trial holds. `fp16` needs a GPU (its gradients need a loss scaler and CPUs have no fast
fp16 arithmetic): on the CPU it is refused, not emulated; `bf16` autocasts on every device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from archsearch.errors import UserError
from archsearch.trainers.config import check_cpu_precision

__all__ = [
    "Placement",
    "autocast",
    "grad_scaler",
    "is_out_of_memory",
    "out_of_memory_reason",
    "resolve_device",
    "to_cpu",
    "to_device",
]


@dataclass(frozen=True)
class Placement:
    """What the scheduler gave this trial's process: the accelerator ids Ray assigned (None
    outside Ray) and, in a data-parallel group, the CUDA index of this worker's own GPU."""

    gpu_ids: tuple[str, ...] | None = None
    cuda_index: int | None = None


def _cuda_text() -> str:
    built = torch.version.cuda
    why = "no CUDA device is visible" if built else "PyTorch was built without CUDA"
    return f"{why} (torch {torch.__version__})"


def resolve_device(device: str, precision: str, placement: Placement) -> torch.device:
    """The trial's device for `train.device`, `train.precision` and the placement; a
    `UserError` naming the key when the machine cannot run them."""
    device, precision = str(device), str(precision)
    cuda = torch.cuda.is_available()
    mps = torch.backends.mps.is_available()
    index = placement.cuda_index or 0
    if device == "cuda" and not cuda:
        raise UserError(f"cuda requested but {_cuda_text()}", key="device")
    if device == "mps" and not mps:
        raise UserError("mps requested but this machine has no MPS device", key="device")
    if device == "auto":
        if placement.gpu_ids is not None:  # inside Ray: only what Ray assigned
            device = "cuda" if placement.gpu_ids and cuda else "cpu"
        else:
            device = "cuda" if cuda else "mps" if mps else "cpu"
    chosen = torch.device(f"cuda:{index}" if device == "cuda" else device)
    if chosen.type == "cpu":
        check_cpu_precision(precision)
    if precision == "bf16" and chosen.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise UserError(
            f"bf16 is not supported by {torch.cuda.get_device_name(index)}", key="precision"
        )
    return chosen


def autocast(device: torch.device, precision: str):
    """Mixed precision on the trial's device; fp32 runs as is."""
    precision = str(precision)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler:
    """A dynamic loss scaler for fp16; a disabled one (a no-op) otherwise."""
    return torch.amp.GradScaler(device.type, enabled=str(precision) == "fp16")


def to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A host batch on the device: pinned and copied asynchronously on CUDA."""
    tensor = torch.from_numpy(array)
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def to_cpu(state: Any) -> Any:
    """A copy of a (nested) state with every tensor on the CPU: checkpoints load on any device."""
    if isinstance(state, torch.Tensor):
        return state.detach().cpu()
    if isinstance(state, dict):
        return {k: to_cpu(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(to_cpu(v) for v in state)
    return state


def is_out_of_memory(err: BaseException) -> bool:
    """An allocation the device refused: CUDA's OutOfMemoryError, or the CPU allocator's."""
    if isinstance(err, torch.OutOfMemoryError):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and (
        "can't allocate memory" in text or "out of memory" in text
    )


def out_of_memory_reason(err: BaseException, device: torch.device) -> str:
    """`out of memory on cuda:0: Tried to allocate 2.00 GiB ...`: the allocator's figure."""
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return f"out of memory on {device}: {first}"[:500]
