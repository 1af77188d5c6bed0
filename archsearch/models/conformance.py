"""The conformance kit: the checks every built-in sequence mixer passes, for any mixer class.

    from archsearch.models.conformance import assert_conforms
    def test_my_mixer():
        assert_conforms(MyMixer)          # raises ContractViolation, one line per failed check

`check_mixer(cls, arch)` runs, in fp32 on the CPU:

- `contract`: the class declares forward, init_state, prefill, step, `state_growth` and
  `reads` (`archsearch.models.contract`);
- `decode_equals_parallel`: prefill of a prompt then one `step` per token, and one `prefill`
  of the whole sequence, give the outputs of `forward` within 1e-4 (relative to the output's
  scale);
- `causality`: changing the inputs from position t on leaves the outputs before t unchanged;
- `state_growth`: the decode state's size is the same empty and after n and 2n tokens
  ("constant"), or larger than empty and never shrinking ("growing": a KV cache, also one
  capped by a window), as the class declares;
- `gradients`: after the backward of a regression loss every parameter gradient is finite
  and some are non-zero, and one gradient step lowers the loss;
- `traced_costs`: the module can be counted by tracing (`archsearch.models.tracing`: what
  prices a plugin), and when the class declares formulas (`declared_costs`), its params,
  FLOPs and state elements equal the traced ones; fvcore's count is reported beside them.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch

from archsearch.arch import LINEAR_FAMILIES, ArchConfig, LayersConfig, LinearConfig
from archsearch.errors import UserError
from archsearch.models.contract import PLUGIN_READS, STATE_GROWTH, satisfies, unreadable
from archsearch.models.tracing import TracingError, fvcore_flops, state_elements, trace

__all__ = ["CHECKS", "Check", "ContractViolation", "assert_conforms", "check_mixer", "plugin_arch"]

CHECKS = (
    "contract",
    "decode_equals_parallel",
    "causality",
    "state_growth",
    "gradients",
    "traced_costs",
)
TOLERANCE = 1e-4


class ContractViolation(UserError):
    """A mixer that fails a check of the kit; the message names every failed check."""


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def plugin_arch(d_model: int = 32, max_seq_len: int = 128) -> ArchConfig:
    """The small architecture a plugin sequence mixer is checked at (an `L` layer)."""
    return ArchConfig(
        vocab_size=64,
        d_model=d_model,
        n_layers=1,
        max_seq_len=max_seq_len,
        layers=LayersConfig(pattern="L"),
        linear=LinearConfig(family="plugin.under_test", n_heads=2, gate_rank=8, conv_size=4),
    ).resolved()


def _nbytes(state) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


def _scale_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / max(1.0, float(b.abs().max())))


def _decode(m, x: torch.Tensor, prompt: int) -> tuple[float, float]:
    with torch.no_grad():
        y = m(x)
        state = m.init_state(x.shape[0], x.device, x.dtype)
        y_pre, state = m.prefill(x[:, :prompt], state, 0)
        outs = [y_pre]
        for t in range(prompt, x.shape[1]):
            y_t, state = m.step(x[:, t], state, t)
            outs.append(y_t[:, None])
        stepped = torch.cat(outs, dim=1)
        whole, _ = m.prefill(x, m.init_state(x.shape[0], x.device, x.dtype), 0)
    return _scale_err(stepped, y), _scale_err(whole, y)


def _check_decode(m, x) -> Check:
    err_step, err_prefill = _decode(m, x, prompt=x.shape[1] // 3)
    worst = max(err_step, err_prefill)
    return Check(
        "decode_equals_parallel",
        worst <= TOLERANCE,
        f"prefill+step vs forward {err_step:.1e}, prefill vs forward {err_prefill:.1e} "
        f"(tolerance {TOLERANCE:g})",
    )


def _check_causality(m, x) -> Check:
    t0 = x.shape[1] // 2
    x2 = x.clone()
    x2[:, t0:] = torch.randn_like(x2[:, t0:]) * 3
    with torch.no_grad():
        err = _scale_err(m(x2)[:, :t0], m(x)[:, :t0])
    return Check("causality", err <= TOLERANCE, f"outputs before t={t0} moved by {err:.1e}")


def _check_state(m, cls, x) -> Check:
    declared = getattr(cls, "state_growth", None)
    n = x.shape[1] // 2
    with torch.no_grad():
        s0 = m.init_state(x.shape[0], x.device, x.dtype)
        _, s1 = m.prefill(x[:, :n], m.init_state(x.shape[0], x.device, x.dtype), 0)
        _, s2 = m.prefill(x, m.init_state(x.shape[0], x.device, x.dtype), 0)
    b0, b1, b2 = _nbytes(s0), _nbytes(s1), _nbytes(s2)
    ok = {"constant": b0 == b1 == b2, "growing": b0 < b1 <= b2}.get(declared, False)
    return Check(
        "state_growth",
        ok,
        f"declared {declared!r}; {b0} bytes empty, {b1} after {n} tokens, {b2} after {x.shape[1]}",
    )


def _check_gradients(m, x) -> Check:
    m = copy.deepcopy(m).train()
    target = torch.randn_like(x)

    def loss_fn():
        return torch.nn.functional.mse_loss(m(x), target)

    loss = loss_fn()
    m.zero_grad()
    loss.backward()
    grads = [p.grad for p in m.parameters() if p.requires_grad]
    if not grads or any(g is None for g in grads):
        return Check("gradients", False, "a parameter receives no gradient")
    if not all(bool(torch.isfinite(g).all()) for g in grads):
        return Check("gradients", False, "a gradient is not finite")
    norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
    if norm == 0:
        return Check("gradients", False, "every gradient is zero")
    before = [p.detach().clone() for p in m.parameters()]
    with torch.no_grad():
        for lr in (1e-2, 1e-3, 1e-4):
            for p, b, g in zip(m.parameters(), before, grads):
                p.copy_(b - lr * g / norm)
            after = float(loss_fn())
            if after < float(loss):
                return Check("gradients", True, f"loss {float(loss):.4f} -> {after:.4f} (lr {lr})")
    return Check("gradients", False, f"no step lowered the loss {float(loss):.4f}")


def _check_costs(cls, arch: ArchConfig, B: int, T: int) -> Check:
    d = arch.d_model
    n0 = T // 2

    def build():
        return cls(arch)

    try:
        forward = trace(build, "forward", T, 0, B, d)
        step = trace(build, "step", 1, n0, B, d)
        state = state_elements(build, n0 + 1, B, d)
    except TracingError as err:
        return Check("traced_costs", False, f"tracing failed: {err}")
    try:
        fv = fvcore_flops(cls(arch), "forward", T, 0, B, d)
        second = f"; fvcore {fv:.0f} FLOPs"
    except Exception as err:
        second = f"; fvcore could not count it ({type(err).__name__})"
    detail = f"forward {forward.flops:.0f} FLOPs, step {step.flops:.0f}, params {forward.params}"
    declared = getattr(cls, "declared_costs", None)
    if declared is None:
        return Check("traced_costs", True, detail + second + " (no declared formulas)")
    wrong = []
    for kind, tr, t, start in (("forward", forward, T, 0), ("step", step, 1, n0)):
        want = declared(arch, kind, t, start, B)
        got = {"params": tr.params, "flops": tr.flops}
        if kind == "step":
            got["state_elements"] = state
        for key, value in got.items():
            if key in want and not math.isclose(float(want[key]), value, rel_tol=1e-9):
                wrong.append(f"{kind} {key} declared {float(want[key]):.0f}, traced {value:.0f}")
    if wrong:
        return Check("traced_costs", False, "; ".join(wrong))
    return Check("traced_costs", True, detail + second + " (equal to the declared formulas)")


def check_mixer(
    cls: type, arch: ArchConfig | None = None, *, batch: int = 2, tokens: int = 24, seed: int = 0
) -> list[Check]:
    """Run every check of the kit on a sequence-mixer class built as `cls(arch)` (default: a
    small `L` layer, `plugin_arch()`); a check that cannot run fails with its reason."""
    arch = (arch or plugin_arch()).resolved()
    if not satisfies(cls):
        missing = [
            m
            for m in ("forward", "init_state", "prefill", "step")
            if not callable(getattr(cls, m, None))
        ]
        if getattr(cls, "state_growth", None) not in STATE_GROWTH:
            missing.append("state_growth ('constant' or 'growing')")
        if not isinstance(getattr(cls, "reads", None), tuple):
            missing.append("reads (a tuple of ArchConfig key paths)")
        return [Check("contract", False, f"missing {', '.join(missing)}")]
    if arch.linear is not None and arch.linear.family not in LINEAR_FAMILIES and unreadable(cls):
        readable = ", ".join(PLUGIN_READS)
        return [
            Check(
                "contract",
                False,
                f"reads {', '.join(unreadable(cls))}, which a plugin cannot read "
                f"(readable: {readable})",
            )
        ]
    checks = [Check("contract", True, f"state {cls.state_growth}; reads {', '.join(cls.reads)}")]
    torch.manual_seed(seed)
    try:
        m = cls(arch).float().eval()
    except Exception as err:
        return [*checks, Check("construction", False, f"{type(err).__name__}: {err}")]
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, tokens, arch.d_model, generator=gen)
    runs = (
        lambda: _check_decode(m, x),
        lambda: _check_causality(m, x),
        lambda: _check_state(m, cls, x),
        lambda: _check_gradients(m, x),
        lambda: _check_costs(cls, arch, batch, tokens),
    )
    for name, run in zip(CHECKS[1:], runs):
        try:
            checks.append(run())
        except Exception as err:
            detail = " ".join(str(err).split())[:200]
            checks.append(Check(name, False, f"raised {type(err).__name__}: {detail}"))
    return checks


def assert_conforms(cls: type, arch: ArchConfig | None = None, **kwargs) -> list[Check]:
    """`check_mixer`, raising `ContractViolation` (one line) when a check fails."""
    checks = check_mixer(cls, arch, **kwargs)
    failed = [c for c in checks if not c.ok]
    if failed:
        name = getattr(cls, "__qualname__", str(cls))
        raise ContractViolation(
            f"mixer {name} fails " + "; ".join(f"{c.name}: {c.detail}" for c in failed)
        )
    return checks
