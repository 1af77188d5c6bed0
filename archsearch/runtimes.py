"""Deploy runtimes: run a module, or a whole candidate's prefill and decode step, in the runtime an
edge user ships in, for timing and for checking its numbers against PyTorch.

- `torch`: PyTorch eager under `torch.inference_mode` (what training uses).
- `onnxruntime`: the module goes through `torch.export` and `torch.onnx.export(dynamo=True)`
  once, and runs in an ONNX Runtime CPU session with a fixed number of threads.
- `executorch`: the module goes through `torch.export`, is lowered to XNNPACK
  (`to_edge_transform_and_lower` with the `XnnpackPartitioner`, what ExecuTorch's own LLM
  export uses on CPUs and phones; operators XNNPACK lacks stay on ExecuTorch's portable
  kernels) and runs as an ExecuTorch program in its runtime (the `executorch` extra). Its
  memory plan fixes the batch size, so `deploy` lowers one program pair per batch size (those
  it is given at once, others on first use); the context stays symbolic (up to `max_context`).

`prepare(runtime, module, inputs)` exports a module once for a runtime and returns a
zero-argument callable that runs `module(*inputs)` there (the cost model's kernel timings use
it). `deploy(model, runtime, ...)` does the same for a whole `LanguageModel`: its prefill
(tokens -> logits and the decode state) and its decode step with the state as explicit inputs
and outputs (tokens, the position, every layer's KV cache / latents / recurrent state -> logits
and the new state), exported with a dynamic batch size (ONNX Runtime), context and position so
one export decodes every step. Anything that does not export raises `ExportError`, whose text is
a one-line reason (the stage and the exporter's first line). `logit_error` runs a prompt and
several decode steps in PyTorch and in the runtime, carrying the state through the runtime, and
returns the largest |logit difference|.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree
from torch import nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from archsearch.errors import UserError
from archsearch.models import LanguageModel, State, gemm
from archsearch.models.rope import RoPE

__all__ = [
    "LOGIT_TOLERANCE",
    "RUNTIMES",
    "Deployed",
    "ExportError",
    "deploy",
    "logit_error",
    "prepare",
    "require",
]

RUNTIMES = ("torch", "onnxruntime", "executorch")
# what each deploy runtime needs beyond torch: the `runtimes` extra installs them
PACKAGES = {"onnxruntime": ("onnx", "onnxscript", "onnxruntime"), "executorch": ("executorch",)}
EXTRA = "pip install 'archsearch[runtimes]'"
# fp32 logits of the runtime vs PyTorch eager: a relative tolerance on max |logit| (kernels fuse
# and reorder sums differently, so the last bits differ; a wrong graph is off by O(1))
LOGIT_TOLERANCE = 1e-4
REASON_CHARS = 240
EXECUTORCH_MISSING = f"executorch is not installed: {EXTRA}"
OPSET = 18


# a module whose output holds a decoding `State` (a model's `prefill`) exports: its tensors are
# the graph's outputs, the position is fixed
torch.utils._pytree.register_pytree_node(
    State,
    lambda state: (state.layers, state.pos),
    lambda layers, pos: State(list(layers), pos),
    serialized_type_name="archsearch.models.State",
)


class ExportError(Exception):
    """A module that does not run in a runtime; str() is a one-line reason."""


def require(runtime: str, *, key: str) -> None:
    """A one-line `UserError` naming the extra to install where `runtime` needs packages this
    environment lacks."""
    import importlib.util

    missing = [p for p in PACKAGES.get(runtime, ()) if importlib.util.find_spec(p) is None]
    if missing:
        raise UserError(
            f"{runtime!r} needs {', '.join(missing)}, not installed here: {EXTRA}", key=key
        )


def _check_runtime(runtime: str) -> None:
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; one of {', '.join(RUNTIMES)}")


def _one_line(stage: str, exc: BaseException) -> str:
    """`stage at the model's line: ExcType: the exception's first non-empty line`, at most
    REASON_CHARS long (the line: the innermost frame of the model's code that raised; the
    exception: the innermost of its causes)."""
    where = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        path = Path(frame.filename)
        if "archsearch" in path.parts and path.name != "runtimes.py":
            where = f" at {'/'.join(path.parts[path.parts.index('archsearch') :])}:{frame.lineno}"
    while exc.__cause__ is not None:  # the innermost cause names the op or the guard
        exc = exc.__cause__
    plain = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    lines = [ln.strip() for ln in plain.splitlines() if ln.strip()]
    text = f"{stage}{where}: {type(exc).__name__}" + (f": {lines[0]}" if lines else "")
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 3] + "..."


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the exporters' progress prints and warnings for the duration, and keep the
    models' GEMMs on F.linear (the oneDNN op is a CPU-only PyTorch kernel that would branch on
    the batch size)."""
    onednn = gemm.ENABLED
    gemm.set_enabled(False)
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._export")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    import warnings

    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        gemm.set_enabled(onednn)
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _session(onnx_bytes: bytes, threads: int):
    try:
        import onnxruntime as ort
    except ImportError:
        raise ExportError(f"onnxruntime is not installed: {EXTRA}") from None

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    return ort.InferenceSession(onnx_bytes, opts, providers=["CPUExecutionProvider"])


def _export(module: nn.Module, inputs: tuple, what: str, dynamic_shapes: Any = None):
    """`torch.export` of `module(*inputs)`, traced without autograd (the inputs or a module's
    caches may be inference tensors); ExportError with the stage."""
    try:
        with _quiet(), torch.no_grad():
            return torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes, strict=False)
    except Exception as e:
        raise ExportError(_one_line(f"torch.export of the {what} failed", e)) from None


def _to_onnx(
    module: nn.Module,
    inputs: tuple,
    what: str,
    *,
    input_names: list[str] | None = None,
    dynamic_shapes: Any = None,
) -> bytes:
    """The ONNX model of `module(*inputs)` through torch.export; ExportError with the stage."""
    ep = _export(module, inputs, what, dynamic_shapes)
    try:
        with _quiet(), torch.no_grad():
            program = torch.onnx.export(
                ep, inputs, dynamo=True, input_names=input_names, opset_version=OPSET
            )
            return program.model_proto.SerializeToString()
    except Exception as e:
        raise ExportError(_one_line(f"ONNX conversion of the {what} failed", e)) from None


@contextlib.contextmanager
def _native_stderr_silenced() -> Iterator[None]:
    """Point file descriptor 2 at /dev/null for the duration: ExecuTorch's C++ runtime logs
    (CPU probing when a program loads, the thread pool) straight to it, around Python."""
    import sys

    with contextlib.suppress(AttributeError, ValueError, OSError):
        sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class _Program:
    """An ExecuTorch program of `module(*inputs)` lowered to XNNPACK and loaded in the
    runtime: called with the flat list of tensor inputs, returns the flat list of outputs. It
    holds the program's bytes for as long as it lives (the loaded program reads them in place;
    freed, it crashes the process)."""

    def __init__(self, module: nn.Module, inputs: tuple, what: str, dynamic_shapes: Any = None):
        ep = _export(module, inputs, what, dynamic_shapes)
        try:
            with _quiet(), _native_stderr_silenced():
                from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
                    XnnpackPartitioner,
                )
                from executorch.exir import to_edge_transform_and_lower
        except ImportError:
            raise ExportError(EXECUTORCH_MISSING) from None
        try:
            with _quiet(), _native_stderr_silenced(), torch.no_grad():
                edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
                self.buffer = edge.to_executorch().buffer
        except Exception as e:
            raise ExportError(_one_line(f"ExecuTorch lowering of the {what} failed", e)) from None
        from executorch.runtime import Runtime

        with _native_stderr_silenced():
            self.program = Runtime.get().load_program(self.buffer)
            self.method = self.program.load_method("forward")
        if not _pool_in_use:  # from now on the pool's size is fixed (`_executorch_threads`)
            from executorch.extension.pybindings.portable_lib import _threadpool_get_thread_count

            _pool_in_use.append(_threadpool_get_thread_count())

    def __call__(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        return list(self.method.execute(tensors))


_pool_in_use: list[int] = []  # the pool size the programs loaded in this process run on


def _executorch_threads(threads: int) -> None:
    """ExecuTorch's one process-wide thread pool (XNNPACK's) sized to `threads`, before a
    program is loaded. A loaded program keeps the pool it was loaded with and waits for ever on
    it once the pool is replaced, so after the first program the size is fixed: ValueError for
    another. The runtime offers no public setting in 1.5.1; `_unsafe_reset_threadpool` is the
    pybindings' own."""
    if _pool_in_use:
        if _pool_in_use[0] != threads:
            raise ValueError(
                f"ExecuTorch runs on {_pool_in_use[0]} threads in this process (its programs "
                f"are loaded on that pool); {threads} needs a new process"
            )
        return
    try:
        with _quiet(), _native_stderr_silenced():  # torchao's import and the runtime's logs
            from executorch.extension.pybindings.portable_lib import (
                _threadpool_get_thread_count,
                _unsafe_reset_threadpool,
            )
    except ImportError:
        raise ExportError(EXECUTORCH_MISSING) from None
    with _native_stderr_silenced():  # the first call probes the CPU, and logs it
        if _threadpool_get_thread_count() != threads:
            _unsafe_reset_threadpool(threads)


class _TensorArgs(nn.Module):
    """`module(*inputs)` called with only the tensors among `inputs` (in pytree order): the
    other leaves (ints, None, strings) are fixed, so every exported input is a tensor."""

    def __init__(self, module: nn.Module, inputs: tuple):
        super().__init__()
        self.module = module
        self.leaves, self.spec = tree_flatten(inputs)
        self.is_tensor = [isinstance(x, torch.Tensor) for x in self.leaves]

    def tensors(self) -> list[torch.Tensor]:
        return [x for x, t in zip(self.leaves, self.is_tensor) if t]

    def forward(self, *tensors: torch.Tensor) -> Any:
        given = iter(tensors)
        leaves = [next(given) if t else x for x, t in zip(self.leaves, self.is_tensor)]
        return self.module(*tree_unflatten(leaves, self.spec))


def _run_session(session, feeds: dict[str, Any]) -> list[torch.Tensor]:
    return [torch.from_numpy(a) for a in session.run(None, feeds)]


def _normal_tensor(x: Any) -> Any:
    """An inference-mode tensor as an ordinary one (the exporters trace through autograd)."""
    if isinstance(x, torch.Tensor) and x.is_inference():
        with torch.inference_mode(False):
            return x.clone()
    return x


# ---- one module -------------------------------------------------------------------------------


def prepare(
    runtime: str, module: nn.Module, inputs: tuple, *, threads: int | None = None
) -> Callable[[], Any]:
    """A zero-argument callable that runs `module(*inputs)` in `runtime` (exported once, here;
    tensors may sit in lists or dicts; other inputs are fixed into the graph;
    `threads` for ONNX Runtime, default torch's current number). Raises ExportError."""
    _check_runtime(runtime)
    module.eval()
    if runtime == "torch":

        def run_torch() -> Any:
            with torch.inference_mode():
                return module(*inputs)

        return run_torch
    from torch.utils._pytree import tree_leaves, tree_map

    inputs = tree_map(_normal_tensor, inputs)
    if runtime == "executorch":
        _executorch_threads(threads or torch.get_num_threads())
        wrapped = _TensorArgs(module, inputs)
        tensors = wrapped.tensors()
        program = _Program(wrapped, tuple(tensors), type(module).__name__)

        def run_executorch() -> Any:
            return program(tensors)

        return run_executorch
    # tensors (also inside lists and dicts, as a mixer's state) become the graph's inputs, in
    # pytree order; other values (ints, None) are fixed into the graph
    tensors = [t for t in tree_leaves(inputs) if isinstance(t, torch.Tensor)]
    names = [f"input_{i}" for i in range(len(tensors))]
    session = _session(
        _to_onnx(module, inputs, type(module).__name__, input_names=names),
        threads or torch.get_num_threads(),
    )
    declared = {i.name for i in session.get_inputs()}
    feeds = {n: t.detach().numpy() for n, t in zip(names, tensors) if n in declared}

    def run_ort() -> Any:
        return session.run(None, feeds)

    return run_ort


# ---- a whole candidate ------------------------------------------------------------------------


@dataclass
class Deployed:
    """A candidate in a runtime: `prefill(idx [B, T]) -> (logits [B, T, V], State)` and
    `step(token [B], State) -> (logits [B, V], State)`, as `LanguageModel` has them."""

    runtime: str
    prefill: Callable[[torch.Tensor], tuple[torch.Tensor, State]]
    step: Callable[[torch.Tensor, State], tuple[torch.Tensor, State]]


class _Prefill(nn.Module):
    """idx [B, T] -> (logits, every state tensor of every layer, in `keys` order)."""

    def __init__(self, model: LanguageModel, keys: list[tuple[str, ...]]):
        super().__init__()
        self.model, self.keys = model, keys

    def forward(self, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits, state = self.model.prefill(idx)
        return (logits, *_flatten(state, self.keys))


class _Step(nn.Module):
    """(token [B], positions [pos], *state tensors) -> (logits [B, V], *new state tensors): the
    position is the length of `positions`, so it stays symbolic in the export."""

    def __init__(self, model: LanguageModel, keys: list[tuple[str, ...]]):
        super().__init__()
        self.model, self.keys = model, keys

    def forward(self, token: torch.Tensor, positions: torch.Tensor, *flat: torch.Tensor):
        logits, state = self.model.step(token, _unflatten(flat, self.keys, positions.shape[0]))
        return (logits, *_flatten(state, self.keys))


def _flatten(state: State, keys: list[tuple[str, ...]]) -> list[torch.Tensor]:
    return [layer[k] for layer, names in zip(state.layers, keys) for k in names]


def _unflatten(flat, keys: list[tuple[str, ...]], pos) -> State:
    layers, i = [], 0
    for names in keys:
        layers.append({k: flat[i + j] for j, k in enumerate(names)})
        i += len(names)
    return State(layers, pos)


def _growing_dims(before: list[torch.Tensor], after: list[torch.Tensor]) -> list[set[int]]:
    """Per state tensor, the dims whose size changed over one decode step (a KV cache's
    context)."""
    return [
        {d for d, (a, b) in enumerate(zip(t0.shape, t1.shape)) if a != b}
        for t0, t1 in zip(before, after)
    ]


def deploy(
    model: LanguageModel,
    runtime: str,
    *,
    prompt: int,
    max_context: int,
    threads: int | None = None,
    batches: tuple[int, ...] = (1,),
) -> Deployed:
    """`model` in `runtime`: a prefill of `prompt` tokens (any batch size) and a decode step at
    any context up to `max_context` tokens. Raises ExportError with the reason. ExecuTorch
    lowers its programs for `batches` here and for other batch sizes on first use."""
    _check_runtime(runtime)
    model.eval()
    if runtime == "torch":
        return _deploy_torch(model)
    for m in model.modules():  # fill the rotary tables now, so the export does not grow them
        if isinstance(m, RoPE) and m.rope_dim:
            m.cos_sin(0, max_context + 2, model.wte.weight)
    threads = threads or torch.get_num_threads()
    if runtime == "executorch":
        _executorch_threads(threads)
        return _deploy_executorch(model, prompt, max_context, batches)
    return _deploy_onnxruntime(model, prompt, max_context, threads)


def _deploy_torch(model: LanguageModel) -> Deployed:
    """The model as it is, in eager PyTorch under `inference_mode`."""

    def prefill_torch(idx):
        with torch.inference_mode():
            return model.prefill(idx)

    def step_torch(token, state):
        with torch.inference_mode():
            return model.step(token, state)

    return Deployed("torch", prefill_torch, step_torch)


def _deploy_onnxruntime(
    model: LanguageModel, prompt: int, max_context: int, threads: int
) -> Deployed:
    """The prefill and the decode step exported to ONNX (`torch.export`, any batch size, the
    step at any context) and run in ONNX Runtime sessions of `threads` threads."""
    B = 2  # examples above 1: torch.export specialises sizes 0 and 1
    ex = _Examples(model, B, prompt, max_context)
    idx, keys, flat0, T0, pos = ex.idx, ex.keys, ex.flat0, ex.T0, ex.pos
    batch = torch.export.Dim("batch", min=1, max=1024)
    state_dims = tuple({0: batch, **dict.fromkeys(grow, ex.ctx)} for grow in ex.growing)
    names = [f"state_{i}" for i in range(len(flat0))]
    with torch.no_grad():
        prefill_session = _session(
            _to_onnx(
                _Prefill(model, keys),
                (idx,),
                "prefill",
                input_names=["idx"],
                dynamic_shapes=({0: batch},),
            ),
            threads,
        )
        step_session = _session(
            _to_onnx(
                _Step(model, keys),
                (torch.zeros(B, dtype=torch.long), torch.zeros(T0), *flat0),
                "decode step",
                input_names=["token", "positions", *names],
                dynamic_shapes=({0: batch}, {0: pos}, state_dims),
            ),
            threads,
        )
    step_inputs = {i.name for i in step_session.get_inputs()}

    def prefill_ort(idx: torch.Tensor) -> tuple[torch.Tensor, State]:
        if idx.shape[1] != prompt:
            raise ValueError(f"exported for a {prompt}-token prompt, got {idx.shape[1]}")
        logits, *flat = _run_session(prefill_session, {"idx": idx.numpy()})
        return logits, _unflatten(flat, keys, prompt)

    def step_ort(token: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        feeds = {n: t.numpy() for n, t in zip(names, _flatten(state, keys))}
        feeds["token"] = token.numpy()
        feeds["positions"] = _positions(state.pos)
        logits, *flat = _run_session(
            step_session, {k: v for k, v in feeds.items() if k in step_inputs}
        )
        return logits, _unflatten(flat, keys, state.pos + 1)

    return Deployed("onnxruntime", prefill_ort, step_ort)


class _Examples:
    """What `deploy` exports a model's prefill and decode step with at batch `B`: a prompt
    (`idx`), the decode state after `T0` tokens flattened in `keys` order (`flat0`), the
    dimensions of each state tensor that grow with the context (`growing`), and the context
    and position Dims up to `max_context`."""

    def __init__(self, model: LanguageModel, B: int, prompt: int, max_context: int):
        self.T0 = max(prompt, 2)  # above 1: torch.export specialises sizes 0 and 1
        g = torch.Generator().manual_seed(0)
        vocab = model.arch.vocab_size
        self.idx = torch.randint(0, vocab, (B, prompt), generator=g)
        with torch.no_grad():
            _, st0 = model.prefill(torch.randint(0, vocab, (B, self.T0), generator=g))
            _, st1 = model.step(torch.zeros(B, dtype=torch.long), st0)
        self.keys = [tuple(layer) for layer in st0.layers]
        self.flat0 = _flatten(st0, self.keys)
        self.growing = _growing_dims(self.flat0, _flatten(st1, self.keys))
        self.ctx = torch.export.Dim("context", min=1, max=max_context)
        self.pos = torch.export.Dim("position", min=1, max=max_context)


def _deploy_executorch(
    model: LanguageModel, prompt: int, max_context: int, batches: tuple[int, ...]
) -> Deployed:
    """`deploy` in ExecuTorch: its memory plan fixes every size but the bounded symbolic ones,
    and a batch size of 1 cannot stay symbolic, so each batch size gets its own prefill and
    decode-step programs (the context stays symbolic): `batches` lowered here, so an export
    failure is raised at once, any other the first time it runs."""
    programs: dict[int, tuple[_Program, _Program, list[tuple[str, ...]]]] = {}

    def lowered(B: int) -> tuple[_Program, _Program, list[tuple[str, ...]]]:
        if B not in programs:
            ex = _Examples(model, B, prompt, max_context)
            state_dims = tuple(dict.fromkeys(grow, ex.ctx) or None for grow in ex.growing)
            prefill = _Program(_Prefill(model, ex.keys), (ex.idx,), "prefill")
            step = _Program(
                _Step(model, ex.keys),
                (torch.zeros(B, dtype=torch.long), torch.zeros(ex.T0), *ex.flat0),
                "decode step",
                dynamic_shapes=(None, {0: ex.pos}, state_dims),
            )
            programs[B] = (prefill, step, ex.keys)
        return programs[B]

    for B in batches:
        lowered(B)

    def prefill_et(idx: torch.Tensor) -> tuple[torch.Tensor, State]:
        if idx.shape[1] != prompt:
            raise ValueError(f"exported for a {prompt}-token prompt, got {idx.shape[1]}")
        program, _, keys = lowered(idx.shape[0])
        logits, *flat = program([idx])
        return logits, _unflatten(flat, keys, prompt)

    def step_et(token: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        _, program, keys = lowered(token.shape[0])
        logits, *flat = program([token, torch.zeros(state.pos), *_flatten(state, keys)])
        return logits, _unflatten(flat, keys, state.pos + 1)

    return Deployed("executorch", prefill_et, step_et)


def _positions(pos: int):
    import numpy as np

    return np.zeros(pos, dtype=np.float32)


def logit_error(
    model: LanguageModel, deployed: Deployed, idx: torch.Tensor, steps: int
) -> tuple[float, float]:
    """(max |logit difference|, max |logit|) of `deployed` against the PyTorch model over a
    prefill of idx [B, T] and `steps` greedy decode steps, each side carrying its own state."""
    with torch.inference_mode():
        ref, ref_state = model.prefill(idx)
    got, state = deployed.prefill(idx)
    diff, scale = (got - ref).abs().max().item(), ref.abs().max().item()
    token = ref[:, -1].argmax(-1)
    for _ in range(steps):
        with torch.inference_mode():
            ref, ref_state = model.step(token, ref_state)
        got, state = deployed.step(token, state)
        diff = max(diff, (got - ref).abs().max().item())
        scale = max(scale, ref.abs().max().item())
        token = ref.argmax(-1)
    return diff, scale
