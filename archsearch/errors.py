"""User-facing errors.

A `UserError` is bad input: a malformed file, an unknown name, an impossible value. The CLI prints
its message as one line and exits with code 2, without a traceback. Everything else is a bug.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user; `str(err)` is a complete one-line explanation."""

    exit_code = 2

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None):
        self.source = source
        self.key = key
        self.detail = " ".join(str(message).split())
        parts = [p for p in (source, key) if p]
        prefix = ": ".join(parts)
        super().__init__(f"{prefix}: {self.detail}" if prefix else self.detail)
