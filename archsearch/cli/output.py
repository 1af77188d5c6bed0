"""Printing: rich tables for people, JSON for scripts (`format=json`). Number formatting is
`archsearch.units`; `human` and `fmt_value` are re-exported here for the commands that still
call them as `output.human` / `output.fmt_value`."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from archsearch.errors import UserError
from archsearch.units import fmt_value, human

__all__ = ["FORMATS", "check_format", "console", "fmt_value", "human", "print_json", "table"]

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


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=_jsonable)
    sys.stdout.write("\n")


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    if hasattr(v, "tolist"):
        return v.tolist()
    return str(v)
