"""Printing: rich tables for people, JSON for scripts (`format=json`). Number formatting is
`archsearch.units`; `human` and `fmt_value` are re-exported here for the commands that still
call them as `output.human` / `output.fmt_value`."""

from __future__ import annotations

import json
import sys
from typing import Any

from archsearch.units import fmt_value, human, json_safe

__all__ = ["console", "fmt_value", "human", "print_json", "table"]


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
    """Strict JSON: NaN and infinities print as null, never as a bare NaN or Infinity."""
    json.dump(json_safe(data), sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")
