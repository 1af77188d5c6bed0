"""Device profiles: the hardware figures the latency model needs, as data (`conf/device/*.yaml`).

A profile holds peak compute by precision class (FLOP/s; a multiply-add is 2 FLOPs), memory
bandwidth and capacity, a source line for every figure, and the efficiency factors of the
latency model (`archsearch.cost.model`): the fraction of peak compute a large matmul reaches,
the row count at which matmuls reach half of that, the fraction of peak bandwidth a streaming
read reaches, and a fixed overhead per operator. `archsearch calibrate` measures them for this
machine and writes the `local` profile.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from archsearch import plugins, yamlio
from archsearch.errors import UserError
from archsearch.resources import check_name

COMPUTE_CLASSES = ("fp32", "fp16", "int8")
# which compute class executes the matmuls of a weight precision
COMPUTE_CLASS_OF = {"fp32": "fp32", "bf16": "fp16", "fp16": "fp16", "q8": "int8", "q4": "int8"}


@dataclass(frozen=True)
class Efficiency:
    """Latency-model factors (fractions of peak; seconds)."""

    compute: float = 0.5  # fraction of peak FLOP/s a large matmul reaches
    half_rows: float = 8.0  # rows (tokens) at which a matmul reaches half that efficiency
    bandwidth: float = 0.7  # fraction of peak bandwidth a streaming read reaches
    op_overhead_s: float = 5e-6  # fixed time per operator (dispatch, launch, sync)
    vector: float = 1.0  # throughput of non-matmul kernels (scans, softmax, norms) vs roofline
    source: str = "default"


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    description: str
    kind: str  # cpu | gpu
    peak_flops: dict[str, float]
    memory_bandwidth: float  # bytes/s
    memory_capacity: float  # bytes
    efficiency: dict[str, Efficiency] = field(default_factory=dict)  # by compute class
    sources: dict[str, str] = field(default_factory=dict)
    prefill_logits: str = "last"  # last (llama.cpp) | all (archsearch.models' prefill)
    # measured profiles (`archsearch calibrate`): matmul FLOP/s by weight size and row count,
    # and the last-level cache that holds the weights of a model small enough to fit in it
    matmul_table: dict | None = None  # {"weights": [k*n...], "rows": [m...], "rate": [[...]]}
    cache_capacity: float = 0.0  # bytes (0: no cache level modelled)
    cache_bandwidth: float = 0.0  # bytes/s
    path: str = ""

    def peak(self, precision: str) -> float:
        return self.peak_flops[COMPUTE_CLASS_OF[precision]]

    def eff(self, precision: str) -> Efficiency:
        """The efficiencies of a precision's compute class (fp32 falls back to fp16's)."""
        cls = COMPUTE_CLASS_OF[precision]
        for key in (cls, "fp16", "default"):
            if key in self.efficiency:
                return self.efficiency[key]
        return Efficiency()


def _number(raw: Any, *, source: str, key: str, zero_ok: bool = False) -> float:
    if (
        isinstance(raw, bool)
        or not isinstance(raw, (int, float))
        or not math.isfinite(raw)
        or raw < 0
        or (raw == 0 and not zero_ok)
    ):
        what = "a number >= 0" if zero_ok else "a positive number"
        raise UserError(f"expected {what}, got {raw!r}", source=source, key=key)
    return float(raw)


def parse_device(raw: Any, *, source: str, default_name: str) -> DeviceProfile:
    if not isinstance(raw, dict):
        raise UserError("a device profile must be a mapping", source=source, key="(top level)")
    known = {
        "name",
        "description",
        "kind",
        "peak_flops",
        "memory_bandwidth",
        "memory_capacity",
        "efficiency",
        "sources",
        "prefill_logits",
        "matmul_table",
        "cache_capacity",
        "cache_bandwidth",
    }
    unknown = sorted(set(map(str, raw)) - known)
    if unknown:
        raise UserError(
            f"unknown key (known: {', '.join(sorted(known))})", source=source, key=unknown[0]
        )
    for key in ("peak_flops", "memory_bandwidth", "memory_capacity"):
        if key not in raw:
            raise UserError("missing required key", source=source, key=key)
    peaks = raw["peak_flops"]
    if not isinstance(peaks, dict):
        raise UserError(
            "expected a mapping of fp32/fp16/int8 -> FLOP/s", source=source, key="peak_flops"
        )
    missing = [c for c in COMPUTE_CLASSES if c not in peaks]
    if missing:
        raise UserError(f"missing compute class {missing[0]!r}", source=source, key="peak_flops")
    peak_flops = {
        c: _number(peaks[c], source=source, key=f"peak_flops.{c}") for c in COMPUTE_CLASSES
    }
    for key in ("efficiency", "sources"):
        if not isinstance(raw.get(key) or {}, dict):
            raise UserError(f"expected a mapping, got {raw[key]!r}", source=source, key=key)
    texts = {}
    for key, default in (("name", default_name), ("description", ""), ("kind", "cpu")):
        texts[key] = raw.get(key, default)
        if not isinstance(texts[key], str):
            raise UserError(f"expected a string, got {texts[key]!r}", source=source, key=key)
    if texts["kind"] not in ("cpu", "gpu"):
        raise UserError(f"must be cpu or gpu, got {texts['kind']!r}", source=source, key="kind")
    check_name(texts["name"], what="device", key="name", source=source)
    efficiency = {}
    for cls, entry in (raw.get("efficiency") or {}).items():
        if cls not in (*COMPUTE_CLASSES, "default") or not isinstance(entry, dict):
            raise UserError(
                "expected fp32/fp16/int8/default -> {compute, half_rows, "
                "bandwidth, op_overhead_s, source}",
                source=source,
                key=f"efficiency.{cls}",
            )
        allowed = {"compute", "half_rows", "bandwidth", "op_overhead_s", "vector", "source"}
        bad = sorted(set(map(str, entry)) - allowed)
        if bad:
            raise UserError(
                f"unknown key (known: {', '.join(sorted(allowed))})",
                source=source,
                key=f"efficiency.{cls}.{bad[0]}",
            )
        values = {
            k: _number(v, source=source, key=f"efficiency.{cls}.{k}", zero_ok=k == "op_overhead_s")
            for k, v in entry.items()
            if k != "source"
        }
        efficiency[cls] = Efficiency(**values, source=str(entry.get("source", "")))
    sources = {str(k): str(v) for k, v in (raw.get("sources") or {}).items()}
    return DeviceProfile(
        name=texts["name"],
        description=texts["description"],
        kind=texts["kind"],
        peak_flops=peak_flops,
        memory_bandwidth=_number(raw["memory_bandwidth"], source=source, key="memory_bandwidth"),
        memory_capacity=_number(raw["memory_capacity"], source=source, key="memory_capacity"),
        efficiency=efficiency,
        sources=sources,
        prefill_logits=_prefill_logits(raw.get("prefill_logits", "last"), source),
        matmul_table=_matmul_table(raw.get("matmul_table"), source),
        cache_capacity=_number(
            raw.get("cache_capacity", 0), source=source, key="cache_capacity", zero_ok=True
        ),
        cache_bandwidth=_number(
            raw.get("cache_bandwidth", 0), source=source, key="cache_bandwidth", zero_ok=True
        ),
        path=source,
    )


def _matmul_table(raw: Any, source: str) -> dict | None:
    if raw is None:
        return None
    try:
        weights = [float(w) for w in raw["weights"]]
        rows = [float(m) for m in raw["rows"]]
        rate = [[float(r) for r in line] for line in raw["rate"]]
        ok = (
            len(rate) == len(weights)
            and all(len(line) == len(rows) for line in rate)
            and all(r > 0 for line in rate for r in line)
            and weights == sorted(weights)
            and rows == sorted(rows)
        )
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise UserError(
            "expected {weights: [sorted k*n], rows: [sorted m], rate: "
            "[[FLOP/s per row count] per weight size]}",
            source=source,
            key="matmul_table",
        )
    return {"weights": weights, "rows": rows, "rate": rate}


def _prefill_logits(value: Any, source: str) -> str:
    if value not in ("last", "all"):
        raise UserError(
            f"must be 'last' or 'all', got {value!r}", source=source, key="prefill_logits"
        )
    return value


def devices_dir() -> Path:
    from archsearch.resources import conf_dir

    return conf_dir() / "device"


def device_names() -> list[str]:
    """The shipped profiles, then those installed packages register (`archsearch.plugins`)."""
    from archsearch.resources import shipped_names

    return shipped_names(devices_dir()) + list(plugins.names(plugins.DEVICES))


@cache
def _load(path: str) -> DeviceProfile:
    return parse_device(yamlio.load(path), source=path, default_name=Path(path).stem)


def load_device(name_or_path: str, *, key: str = "device") -> DeviceProfile:
    """A shipped profile by name (`rpi5`), a plugin's by its registered name (`pkg.board`:
    the entry point gives the path of its YAML), or any profile YAML by path."""
    from archsearch.resources import resolve

    if plugins.is_plugin(plugins.DEVICES, name_or_path):
        target = plugins.load(plugins.DEVICES, name_or_path)
        if not isinstance(target, (str, os.PathLike)) or not Path(target).is_file():
            raise plugins.PluginError(
                f"device plugin {name_or_path!r} must register the path of a profile YAML, "
                f"got {target!r}",
                key=key,
            )
        return _load(str(Path(target).resolve()))
    try:
        path = resolve(name_or_path, devices_dir(), "device", key)
    except UserError as err:
        if not err.detail.startswith("unknown device") or not plugins.names(plugins.DEVICES):
            raise
        raise UserError(
            f"unknown device {name_or_path!r} (known: {', '.join(device_names())}; or give a "
            "path to a .yaml file)",
            key=key,
        ) from None
    return _load(str(path.resolve()))


def all_devices() -> list[DeviceProfile]:
    """Every shipped profile and every plugin profile that loads: a broken plugin package
    must not make every candidate unpriceable (naming it, `device=pkg.name`, gives its error)."""
    out = []
    for name in device_names():
        try:
            out.append(load_device(name))
        except UserError:
            if not plugins.is_plugin(plugins.DEVICES, name):
                raise
    return out
