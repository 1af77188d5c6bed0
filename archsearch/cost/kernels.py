"""The kernel catalogue of the learned latency predictor, and its fitted form in a device profile.

A kernel is the unit whose time on a device is a function of its shape alone, as the models
run it (nn-Meter's "kernel": the fused unit a runtime dispatches as one):

- `gemm`: one linear layer, x [m, k] @ W [n, k]^T (`archsearch.models.gemm`);
- `norm`, `residual`, `embedding`: a norm, a residual add, the token lookup over N tokens;
- `ffn`, `moe`: a whole channel mixer over N tokens (its GEMMs, activation, MoE routing and
  dispatch);
- `<mixer>.forward` and `<mixer>.step` for every sequence mixer (`gqa`, `mla`, each linear
  family, `mcsd`): the real module's chunked / parallel forward over T tokens of B sequences,
  and its recurrent / cached step at a context.

Each kernel's time is predicted as its analytic time (`archsearch.cost.kernel_latency`: its
GEMMs at the predicted `gemm` times, its other ops at the roofline of the profile's peaks, its
operators at the measured dispatch overhead) times exp(a learned correction) of its shape
features (log2 of the sizes). The correction is a gradient-boosted ensemble of shallow trees
(`archsearch.cost.trees`), fitted by `archsearch calibrate` (`archsearch.cost.kernel_fit`).
Why that model: the analytic part carries the scaling to shapes never measured (a tree is
constant beyond its last split, so the correction stays within what was measured and never
extrapolates on its own), while boosting learns the piecewise, interacting effects the roofline
misses (cache levels, small-matrix kernels, per-family overheads) from a few dozen timings per
kernel, where a table would need a full grid over six or more shape dimensions.

The profile stores the fit under `kernels` as plain data (`Kernels.to_dict`): the runtime it
was timed in, torch version, threads, date, CPU, the dispatch overhead per operator, the
model-level terms (`glue`, by phase: a scale of the kernels' sum and seconds per weight byte,
for what timing a kernel alone misses (its weights stay cached between calls; in a model the
other layers evict them), and seconds per model and per layer) and one ensemble per kernel.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from archsearch.arch import LINEAR_FAMILIES
from archsearch.cost.ops import Columns, Phase
from archsearch.cost.trees import Ensemble, parse
from archsearch.errors import UserError

__all__ = [
    "KERNELS",
    "PHASES",
    "Kernels",
    "features",
    "gemm_features",
    "mixer_kernels",
    "parse_kernels",
]

PHASES = ("forward", "step")
SEQUENCE_MIXERS = ("gqa", "mla", *LINEAR_FAMILIES, "mcsd")


def _log2(x) -> np.ndarray:
    return np.log2(np.maximum(np.asarray(x, dtype=np.float64), 1.0))


def _tokens(c: Columns, p: Phase) -> dict[str, np.ndarray]:
    return {"log2_N": _log2(np.full(c.n, p.tokens))}


def _context(c: Columns, p: Phase) -> np.ndarray:
    """Keys an attention step attends to (the window caps them)."""
    m = np.full(c.n, p.n0 + 1.0)
    return np.where(c.W > 0, np.minimum(m, c.W), m)


def _phase(c: Columns, p: Phase, attends: bool) -> dict[str, np.ndarray]:
    batch = {"log2_B": _log2(np.full(c.n, p.B))}
    if p.kind == "forward":
        return {"log2_T": _log2(np.full(c.n, p.T)), **batch}
    return {"log2_ctx": _log2(_context(c, p)), **batch} if attends else batch


def _gqa(c: Columns, p: Phase) -> dict[str, np.ndarray]:
    shape = {"log2_d": _log2(c.d), "log2_H": _log2(c.H), "log2_G": _log2(c.G)}
    return {**shape, "log2_dh": _log2(c.dh), **_phase(c, p, attends=True)}


def _mla(c: Columns, p: Phase) -> dict[str, np.ndarray]:
    shape = {
        "log2_d": _log2(c.d),
        "log2_H": _log2(c.H),
        "log2_dh": _log2(c.dh),
        "log2_dv": _log2(c.dv),
        "log2_dc": _log2(c.dc),
        "log2_1+dq": _log2(1 + c.dq),
        "log2_1+dr": _log2(1 + c.dr),
    }
    return {**shape, **_phase(c, p, attends=True)}


def _linear(c: Columns, p: Phase) -> dict[str, np.ndarray]:
    shape = {
        "log2_d": _log2(c.d),
        "log2_H": _log2(c.lH),
        "log2_dk": _log2(c.dk),
        "log2_dv": _log2(c.ldv),
        "gate": c.gate,
        "log2_1+R": _log2(1 + c.R),
        "log2_1+K": _log2(1 + c.K),
    }
    return {**shape, **_phase(c, p, attends=False)}


def _mcsd(c: Columns, p: Phase) -> dict[str, np.ndarray]:
    return {"log2_d": _log2(c.d), "log2_C": _log2(c.C), **_phase(c, p, attends=False)}


def _ffn(c: Columns, p: Phase) -> dict[str, np.ndarray]:
    return {**_tokens(c, p), "log2_d": _log2(c.d), "log2_F": _log2(c.F), "gated": c.gated}


def _moe(c: Columns, p: Phase) -> dict[str, np.ndarray]:
    return {
        **_tokens(c, p),
        "log2_d": _log2(c.d),
        "log2_Fe": _log2(c.Fe),
        "log2_E": _log2(c.E),
        "topk": c.topk,
        "log2_1+S": _log2(1 + c.S),
    }


def _width(c: Columns, p: Phase) -> dict[str, np.ndarray]:
    return {**_tokens(c, p), "log2_d": _log2(c.d)}


FeatureFn = Callable[[Columns, Phase], dict[str, np.ndarray]]
_MIXER_FEATURES: dict[str, FeatureFn] = {"gqa": _gqa, "mla": _mla, "mcsd": _mcsd}
_MIXER_FEATURES.update({f: _linear for f in LINEAR_FAMILIES})
_FEATURES: dict[str, FeatureFn] = {
    "norm": _width,
    "residual": _width,
    "embedding": _width,
    "ffn": _ffn,
    "moe": _moe,
}
_FEATURES.update({f"{m}.{phase}": fn for m, fn in _MIXER_FEATURES.items() for phase in PHASES})
GEMM_FEATURES = ("log2_m", "log2_k", "log2_n")


def _names(fn: FeatureFn, kernel: str) -> tuple[str, ...]:
    probe = Columns(**{k: np.ones(1) for k in Columns.__dataclass_fields__})
    phase = Phase(kernel.rpartition(".")[2] if "." in kernel else "forward", T=1.0)
    return tuple(fn(probe, phase))


# kernel name -> its feature names, in column order
KERNELS: dict[str, tuple[str, ...]] = {
    "gemm": GEMM_FEATURES,
    **{k: _names(fn, k) for k, fn in _FEATURES.items()},
}


def mixer_kernels(mixer: str) -> tuple[str, str]:
    return f"{mixer}.forward", f"{mixer}.step"


def features(kernel: str, c: Columns, p: Phase) -> np.ndarray:
    """The feature rows [c.n, len(KERNELS[kernel])] of a (non-GEMM) kernel."""
    cols = _FEATURES[kernel](c, p)
    return np.column_stack(
        [np.broadcast_to(np.asarray(v, dtype=np.float64), (c.n,)) for v in cols.values()]
    )


def gemm_features(m, k, n) -> np.ndarray:
    return np.column_stack([_log2(m), _log2(k), _log2(n)])


# ---- the fitted form ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Kernels:
    """A fitted kernel-level predictor (see the module docstring)."""

    runtime: str
    torch: str
    threads: int
    date: str
    cpu: str
    dispatch_s: float  # seconds per dispatched operator
    # phase -> (scale of the kernels' sum, seconds per model, per layer, per fp32 weight byte)
    glue: dict[str, tuple[float, float, float, float]]
    predictors: dict[str, Ensemble] = field(default_factory=dict)
    samples: dict[str, int] = field(default_factory=dict)  # timings each predictor was fitted to
    fresh_error: dict[str, float] = field(default_factory=dict)  # MAPE on its last fresh shapes

    def correction(self, kernel: str, X: np.ndarray) -> np.ndarray:
        """exp(learned log ratio) of measured to analytic time per row (1 without a predictor).

        Rows with equal features are evaluated once (tables of candidates repeat shapes)."""
        ens = self.predictors.get(kernel)
        if ens is None or len(X) == 0:
            return np.ones(len(X))
        key = X @ _HASH[: X.shape[1]]
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        unique = X[first]
        if not np.array_equal(unique[inverse], X):  # a hash collision: evaluate every row
            unique, inverse = X, np.arange(len(X))
        return np.exp(ens.predict(unique))[inverse]

    def to_dict(self) -> dict[str, Any]:
        return {
            "runtime": self.runtime,
            "torch": self.torch,
            "threads": self.threads,
            "date": self.date,
            "cpu": self.cpu,
            "dispatch_s": float(f"{self.dispatch_s:.4g}"),
            "glue": {
                phase: {
                    "scale": float(f"{s:.4g}"),
                    "model_s": float(f"{a:.4g}"),
                    "layer_s": float(f"{b:.4g}"),
                    "byte_s": float(f"{w:.4g}"),
                }
                for phase, (s, a, b, w) in self.glue.items()
            },
            "predictors": {
                name: {
                    "samples": self.samples.get(name, 0),
                    "fresh_error": round(self.fresh_error.get(name, 0.0), 4),
                    "model": ens.to_dict(),
                }
                for name, ens in self.predictors.items()
            },
        }


_HASH = np.random.default_rng(20240613).uniform(1.0, 2.0, 16) * np.pi


def parse_kernels(raw: Any, *, source: str, key: str = "kernels") -> Kernels | None:
    """The `kernels` section of a profile, checked: one-line errors name the key path."""
    if raw is None:
        return None

    def fail(what: str, sub: str) -> UserError:
        return UserError(what, source=source, key=f"{key}.{sub}" if sub else key)

    if not isinstance(raw, dict):
        raise fail(f"expected a mapping, got {type(raw).__name__}", "")
    known = {"runtime", "torch", "threads", "date", "cpu", "dispatch_s", "glue", "predictors"}
    extra = sorted(set(map(str, raw)) - known)
    if extra:
        raise fail(f"unknown key (known: {', '.join(sorted(known))})", extra[0])
    for k in sorted(known):
        if k not in raw:
            raise fail("missing required key", k)
    for k in ("runtime", "torch", "date", "cpu"):
        if not isinstance(raw[k], str) or not raw[k].strip():
            raise fail(f"expected a non-empty string, got {raw[k]!r}", k)
    threads = raw["threads"]
    if isinstance(threads, bool) or not isinstance(threads, int) or threads <= 0:
        raise fail(f"expected a positive integer, got {threads!r}", "threads")
    dispatch = _seconds(raw["dispatch_s"], fail, "dispatch_s")
    glue_raw = raw["glue"]
    parts = ("scale", "model_s", "layer_s", "byte_s")
    if not isinstance(glue_raw, dict) or set(map(str, glue_raw)) != set(PHASES):
        raise fail(f"expected {{forward: {{{', '.join(parts)}}}, step: {{...}}}}", "glue")
    glue = {}
    for phase in PHASES:
        entry = glue_raw[phase]
        if not isinstance(entry, dict) or set(map(str, entry)) != set(parts):
            raise fail(f"expected {{{', '.join(parts)}}}, got {entry!r}"[:160], f"glue.{phase}")
        glue[phase] = tuple(_seconds(entry[k], fail, f"glue.{phase}.{k}") for k in parts)
    preds_raw = raw["predictors"]
    if not isinstance(preds_raw, dict):
        raise fail("expected a mapping of kernel -> {samples, fresh_error, model}", "predictors")
    predictors, samples, fresh = {}, {}, {}
    for name, entry in preds_raw.items():
        sub = f"predictors.{name}"
        if name not in KERNELS:
            raise fail(f"unknown kernel (known: {', '.join(KERNELS)})", sub)
        if not isinstance(entry, dict) or set(map(str, entry)) != {
            "samples",
            "fresh_error",
            "model",
        }:
            raise fail("expected {samples, fresh_error, model}", sub)
        n = entry["samples"]
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise fail(f"expected a positive integer, got {n!r}", f"{sub}.samples")
        samples[name] = n
        fresh[name] = _seconds(entry["fresh_error"], fail, f"{sub}.fresh_error")
        predictors[name] = parse(
            entry["model"], source=source, key=f"{key}.{sub}.model", features=KERNELS[name]
        )
    return Kernels(
        runtime=raw["runtime"],
        torch=raw["torch"],
        threads=threads,
        date=raw["date"],
        cpu=raw["cpu"],
        dispatch_s=dispatch,
        glue=glue,
        predictors=predictors,
        samples=samples,
        fresh_error=fresh,
    )


def _seconds(v: Any, fail, sub: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise fail(f"expected a finite number >= 0, got {v!r}", sub)
    return float(v)
