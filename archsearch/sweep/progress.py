"""A live progress line for a sweep: trained trials against the target, and what was skipped."""

from __future__ import annotations

from typing import Any


class SweepProgress:
    def __init__(self, state: Any, *, enabled: bool = True):
        self.state = state
        self.enabled = enabled
        self.progress = None
        self.task = None

    def __enter__(self) -> SweepProgress:
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self.progress = Progress(
                TextColumn("[bold]sweep {task.fields[name]}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.description}"),
                transient=False,
            )
            self.progress.start()
            self.task = self.progress.add_task(
                self._text(),
                total=self.state.target,
                completed=self.state.trained,
                name=self.state.space.name,
            )
        return self

    def _text(self) -> str:
        c = self.state.counts
        parts = [f"running {self.state.launched}"]
        for key, label in (
            ("trained", "trained"),
            ("stopped_early", "stopped early"),
            ("failed", "failed"),
            ("infeasible", "pruned by cost"),
            ("invalid", "invalid"),
            ("duplicate", "duplicates"),
        ):
            if c.get(key):
                parts.append(f"{label} {c[key]}")
        return " · ".join(parts)

    def update(self, state: Any) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=state.trained, description=self._text())

    def __exit__(self, *exc) -> None:
        if self.progress is not None:
            self.update(self.state)
            self.progress.stop()
