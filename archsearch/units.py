"""Numbers as people read them ('1.23M', '256 KiB', '0.1303'): plain text with no terminal
styling, shared by the report files, the dashboard and the command line."""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "fmt_duration",
    "fmt_error",
    "fmt_ms",
    "fmt_value",
    "human",
    "json_safe",
    "scale_for",
    "spans_decades",
]

SI = (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3))


def fmt_value(v: Any) -> str:
    """A table cell: '-' for None, 'true'/'false', floats to 4 significant digits."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        if math.isinf(v):
            return "inf"
        return f"{v:.4g}"
    return str(v)


def fmt_duration(seconds: float | None) -> str:
    """A duration in the unit that reads best: '850 ms', '41.2 s', '3 min 05 s', '2 h 07 min'."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    shown = float(f"{seconds:.3g}")  # the unit follows the value as printed (999.996 ms: 1 s)
    if abs(shown) < 1:
        return f"{seconds * 1e3:.3g} ms"
    if abs(shown) < 60:
        return f"{seconds:.3g} s"
    total = round(seconds)
    if total < 3600:
        return f"{total // 60} min {total % 60:02d} s"
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min"


def fmt_ms(ms: float | None) -> str:
    """Milliseconds as a duration ('19.9 s', not '1.988e+04 ms')."""
    return "-" if ms is None else fmt_duration(ms / 1e3)


def fmt_error(rel: float | None) -> str:
    """A relative error as a band: 0.142 -> '+-14%' ('+-?' when unknown)."""
    if rel is None or not math.isfinite(rel):
        return "+-?"
    return f"+-{100 * rel:.0f}%" if rel >= 0.01 else f"+-{100 * rel:.1g}%"


def human(n: float | None, unit: str = "") -> str:
    """1234567 -> '1.23M'; bytes use binary prefixes ('256 KiB'), FLOPs SI ones ('708 GFLOP'),
    'ms' and 's' durations ('19.9 s')."""
    if n is None:
        return "-"
    if unit == "B":
        for prefix, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if abs(n) >= scale:
                return f"{n / scale:.3g} {prefix}"
        return f"{n:.0f} B"
    if unit in ("ms", "s"):
        return fmt_duration(n / 1e3 if unit == "ms" else n)
    if unit.startswith("FLOP"):
        for prefix, scale in SI:
            if abs(n) >= scale:
                return f"{n / scale:.3g} {prefix}{unit}"
        return f"{n:.3g} {unit}"
    for prefix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{prefix}{unit}"
    return f"{n:.3g}{unit}"


PREFIXES = {  # a kind of quantity -> (divisor, unit shown) from the smallest up
    "bytes": ((1.0, "B"), (2.0**10, "KiB"), (2.0**20, "MiB"), (2.0**30, "GiB"), (2.0**40, "TiB")),
    "flops": ((1.0, "FLOP"), (1e3, "KFLOP"), (1e6, "MFLOP"), (1e9, "GFLOP"), (1e12, "TFLOP")),
    "count": ((1.0, ""), (1e3, "K"), (1e6, "M"), (1e9, "B"), (1e12, "T")),
}
DECADES = 1.5  # values spanning more than this many powers of ten are shown on a log scale


def scale_for(kind: str, values: Any) -> tuple[float, str]:
    """(divisor, unit) to show `values` of a kind of quantity ('bytes', 'flops', 'count'): the
    largest prefix the largest finite magnitude reaches ('KiB' for 512 KiB, 'GFLOP' for 7e11),
    or, for values spanning decades (a log axis), the one their geometric middle reaches (0.1
    to 3000 MiB, not 0.0001 to 3 GiB); other kinds are shown as they are, (1.0, '')."""
    if kind not in PREFIXES:
        return 1.0, ""
    finite = [abs(float(v)) for v in _flat(values) if math.isfinite(float(v))]
    size = max(finite, default=0.0)
    if spans_decades(finite):
        size = math.sqrt(size * min(finite))
    steps = PREFIXES[kind]
    return next(((d, u) for d, u in reversed(steps) if size >= d), steps[0])


def spans_decades(values: Any, decades: float = DECADES) -> bool:
    """True when the finite values are all positive and the largest is more than `decades`
    powers of ten above the smallest: then a log scale shows them (a linear one squashes the
    small ones against zero)."""
    finite = [float(v) for v in _flat(values) if math.isfinite(float(v))]
    if not finite or min(finite) <= 0:
        return False
    return math.log10(max(finite) / min(finite)) > decades


def _flat(values: Any) -> list[Any]:
    if hasattr(values, "ravel"):  # a numpy array of any shape
        return values.ravel().tolist()
    return list(values)


def json_safe(value: Any) -> Any:
    """`value` as strict JSON data: NaN and infinities become null (JSON has neither), numpy
    scalars and arrays plain numbers and lists, tuples lists, mapping keys strings, anything
    else its `str`. Write with `json.dumps(json_safe(v), allow_nan=False)`."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v) for v in value]
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return json_safe(value.tolist())
    if hasattr(value, "value") and isinstance(value.value, str):  # an Enum member
        return value.value
    return str(value)
