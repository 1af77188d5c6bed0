"""Progress of a long command (`prune`, `calibrate`, `profile`) on stderr: a rich bar when stderr
is a terminal, else one line per step with the elapsed time and an ETA. Never on stdout, so
`format=json` output stays one JSON document. The library reports through a callback
`progress(done, total, step)` and prints nothing; the sweep has its own display
(`archsearch.sweep.progress`), built on trial events rather than counted steps."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from archsearch.units import fmt_duration

__all__ = ["StepProgress", "step_line"]


def step_line(what: str, done: int, total: int, step: str, elapsed_s: float) -> str:
    """'12:03:04 prune tiny: 132/528 assignments built (25%); 3.1 s elapsed, ETA 9.3 s'."""
    share = f" ({done / total:.0%})" if total else ""
    if done >= total:
        eta = "done"
    elif done <= 0:
        eta = "ETA unknown"
    else:
        eta = f"ETA {fmt_duration(elapsed_s / done * (total - done))}"
    return (
        f"{time.strftime('%H:%M:%S')} {what}: {done}/{total} {step}{share}; "
        f"{fmt_duration(elapsed_s)} elapsed, {eta}"
    )


class StepProgress:
    """`with StepProgress("prune tiny") as progress: prune(..., progress=progress)`.

    `live` None: a live bar when `stream` (default stderr) is a terminal, lines otherwise."""

    def __init__(self, what: str, *, stream: TextIO | None = None, live: bool | None = None):
        self.what = what
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.started = time.perf_counter()
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> StepProgress:
        self.started = time.perf_counter()
        if self.live:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(
                TextColumn(f"[bold]{self.what}[/bold]"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.description}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("", total=None)
        return self

    def __call__(self, done: int, total: int, step: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=total, description=step)
            return
        elapsed = time.perf_counter() - self.started
        print(step_line(self.what, done, total, step, elapsed), file=self.stream, flush=True)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
