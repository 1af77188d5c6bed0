"""Printing: rich tables for people, JSON for scripts (`format=json`)."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from archsearch.errors import UserError

FORMATS = ("table", "json")


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise UserError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})", key="format")
    return fmt


def console():
    from rich.console import Console

    return Console(soft_wrap=False, width=max(100, _terminal_width()))


def _terminal_width() -> int:
    import shutil

    return shutil.get_terminal_size((160, 40)).columns


def table(
    title: str | None, columns: list[str], rows: list[list[Any]], *, caption: str | None = None
):
    from rich.table import Table

    t = Table(title=title, caption=caption, show_lines=False, header_style="bold")
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*[fmt_value(v) for v in r])
    return t


def fmt_value(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        if math.isinf(v):
            return "inf"
        return f"{v:.4g}"
    return str(v)


def human(n: float, unit: str = "") -> str:
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


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=_jsonable)
    sys.stdout.write("\n")


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    if hasattr(v, "tolist"):
        return v.tolist()
    return str(v)
