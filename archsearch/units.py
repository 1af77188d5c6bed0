"""Numbers as people read them ('1.23M', '256 KiB', '0.1303'): plain text with no terminal
styling, shared by the report files, the dashboard and the command line."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["fmt_value", "human"]


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


def human(n: float | None, unit: str = "") -> str:
    """1234567 -> '1.23M'; bytes use binary prefixes."""
    if n is None:
        return "-"
    if unit == "B":
        for prefix, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if abs(n) >= scale:
                return f"{n / scale:.3g} {prefix}"
        return f"{n:.0f} B"
    if unit.strip() == "ms":
        return f"{n:.4g}{unit}"
    for prefix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{prefix}{unit}"
    return f"{n:.3g}{unit}"
