"""Printing: rich tables for people, JSON for scripts (`format=json`). Number formatting is
`archsearch.units`; `human` and `fmt_value` are re-exported here for the commands that still
call them as `output.human` / `output.fmt_value`."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, TextIO

from archsearch.units import fmt_value, human, json_safe

__all__ = ["console", "fmt_value", "human", "json_stdout", "print_json", "table"]

# where `print_json` writes while `json_stdout` holds stdout for the document alone
_document: ContextVar[TextIO | None] = ContextVar("archsearch_json_document", default=None)


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


@contextlib.contextmanager
def json_stdout(on: bool = True) -> Iterator[None]:
    """With `format=json`, stdout carries the command's JSON and nothing else: while the
    command runs, whatever else is printed to stdout goes to stderr (Ray's driver relays
    cluster events such as "(raylet) node marked dead" to stdout from its own threads; a
    library may print). `print_json` still writes to the real stdout."""
    if not on:
        yield
        return
    token = _document.set(sys.stdout)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _document.reset(token)


def print_json(data: Any, *, one_line: bool = False) -> None:
    """Strict JSON: NaN and infinities print as null, never as a bare NaN or Infinity.
    `one_line`: a single flushed line, for a script reading while the command still runs."""
    out = _document.get() or sys.stdout
    json.dump(json_safe(data), out, indent=None if one_line else 2, allow_nan=False)
    out.write("\n")
    out.flush()
