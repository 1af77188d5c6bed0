"""User-facing errors, and Ctrl-C.

A `UserError` is bad input: a malformed file, an unknown name, an impossible value. The CLI prints
its message as one line and exits with code 2, without a traceback. Ctrl-C exits 130 saying what it
stopped (`CtrlC` remembers it was pressed). Everything else is a bug.
"""

from __future__ import annotations

import signal
import threading


class UserError(Exception):
    """Bad input from the user; `str(err)` is a complete one-line explanation."""

    exit_code = 2

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None):
        self.source = source
        self.key = key
        self.detail = " ".join(str(message).split())
        parts = [_printable(p) for p in (source, key) if p]
        prefix = ": ".join(parts)
        super().__init__(f"{prefix}: {self.detail}" if prefix else self.detail)


def _printable(text: str) -> str:
    """`text` with control characters written as escapes (a key typed as `threads=<newline>`
    reads `threads=\\n`), so the message stays one line and still names what was typed."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


class CtrlC:
    """While active, remembers whether Ctrl-C (SIGINT) was pressed; `pressed` then says so.

    Python raises `KeyboardInterrupt` at whatever line the main thread runs when the signal
    comes. A library cleaning up in a `finally` may fail on its half-built state and raise its
    own error instead (OmegaConf, building a config, raises `AttributeError`): with `pressed`
    that error still reads as the interrupt it was; and where it came during a garbage
    collection, Python printed and dropped the `KeyboardInterrupt` raised in a weakref callback
    or `__del__`, and only `pressed` remembers it: leaving the block without an exception
    after Ctrl-C raises `KeyboardInterrupt` there. The previous handler still runs (it raises
    `KeyboardInterrupt`); a process that ignores SIGINT, or a thread other than the main one,
    is left as it is. Nests."""

    def __init__(self) -> None:
        self.pressed = False
        self._previous = None

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)
            if callable(previous):
                self._previous = previous
                signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
        if exc_type is None and self.pressed:  # a collection swallowed its KeyboardInterrupt
            raise KeyboardInterrupt

    def _handle(self, signum, frame) -> None:
        self.pressed = True
        self._previous(signum, frame)

    def interrupted(self, err: BaseException) -> bool:
        """Whether `err` is Ctrl-C, as itself or as the error a library turned it into."""
        return isinstance(err, KeyboardInterrupt) or self.pressed
