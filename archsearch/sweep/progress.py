"""What a running sweep shows: in a terminal a live bar (trained trials against the target,
with an ETA) and one bar per trial in flight; elsewhere (a log file, a pipe) one line per
trial event (started, evaluated, finished, stopped, failed) with the architecture, the loss,
tokens/s, the elapsed time and the sweep's ETA."""

from __future__ import annotations

import math
import statistics
import sys
import time
from typing import Any, TextIO

from archsearch.units import fmt_duration, human

__all__ = ["SweepProgress", "eta_s", "event_line"]

HEADLINE = {
    "started": "started",
    "evaluated": "evaluated",
    "finished": "trained",
    "stopped": "stopped early",
    "failed": "failed",
}


def eta_s(state: Any, concurrency: int, now: float | None = None) -> float | None:
    """Seconds until the study holds `state.target` trained trials, from the wall time of the
    trials that ended in this run (or the pace of those in flight) and the share of them that
    ended trained; None before anything can be estimated."""
    now = time.time() if now is None else now
    need = max(0, state.target - state.trained)
    if need == 0:
        return 0.0
    if state.trial_walls:
        per_trial = statistics.median(state.trial_walls)
    else:
        paces = [
            (now - t.started) / t.latest["fraction"]
            for t in state.by_tune_id.values()
            if t.latest.get("fraction", 0) > 0
        ]
        if not paces:
            return None
        per_trial = statistics.median(paces)
    ended = len(state.trial_walls)
    trained_share = state.counts.get("trained", 0) / ended if ended else 1.0
    trials_needed = need / max(trained_share, 0.2)
    in_flight = sum(min(now - t.started, per_trial) for t in state.by_tune_id.values())
    return max(0.0, (trials_needed * per_trial - in_flight) / max(1, concurrency))


def _loss_text(numbers: dict[str, Any]) -> str:
    if "val_loss" not in numbers:
        return ""
    text = f"val_loss {numbers['val_loss']:.4g} nats/token"
    if "val_bpb" in numbers:
        text += f" ({numbers['val_bpb']:.4g} bits/byte)"
    return text


def event_line(state: Any, event: str, launched: Any, concurrency: int) -> str:
    """One log line for a trial event."""
    now = time.time()
    number = launched.optuna_trial.number
    numbers = launched.latest
    head = f"trial {number} {HEADLINE.get(event, event)}"
    parts: list[str] = []
    if event == "started":
        parts.append(f"{launched.arch.summary()} ({human(launched.costs.get('params'))} params)")
    else:
        if event in ("evaluated", "stopped") and "fraction" in numbers:
            head += f" at {numbers['fraction']:.0%} of the budget"
        parts.append(_loss_text(numbers))
        if numbers.get("tokens_per_s"):
            parts.append(f"{human(numbers['tokens_per_s'])} tokens/s")
        elif numbers.get("tokens"):
            seconds = numbers.get("elapsed_s") or now - launched.started
            parts.append(f"{human(numbers['tokens'] / seconds)} tokens/s")
        parts.append(f"{fmt_duration(now - launched.started)} in the trial")
        if event == "failed" and numbers.get("reason"):
            parts.append(str(numbers["reason"]))
    eta = eta_s(state, concurrency, now)
    sweep = (
        f"sweep: {state.trained} of {state.target} trained, {state.launched} running, "
        f"{fmt_duration(now - state.started)} elapsed, ETA "
        + ("unknown" if eta is None else fmt_duration(eta))
    )
    return (
        f"{time.strftime('%H:%M:%S')} {head}: " + "; ".join(p for p in parts if p) + f" | {sweep}"
    )


class SweepProgress:
    """`with SweepProgress(state, concurrency, live=...) as p: state.on_change = p.update`.

    `live` None: a live display when `stream` is a terminal, log lines otherwise."""

    def __init__(
        self,
        state: Any,
        concurrency: int,
        *,
        stream: TextIO | None = None,
        live: bool | None = None,
    ):
        self.state = state
        self.concurrency = concurrency
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self.progress = None
        self.task = None
        self.trial_tasks: dict[int, Any] = {}

    def __enter__(self) -> SweepProgress:
        if self.live:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn

            self.progress = Progress(
                TextColumn("{task.fields[name]}"),
                BarColumn(),
                TextColumn("{task.fields[count]}"),
                TextColumn("{task.description}"),
                console=Console(file=self.stream),
                transient=False,
            )
            self.progress.start()
            self.task = self.progress.add_task(
                "",
                total=self.state.target,
                completed=self.state.trained,
                name=f"[bold]sweep {self.state.space.name}[/bold] trained",
                count="",
            )
            self._refresh_headline()
        return self

    def _counts_text(self) -> str:
        c = self.state.counts
        parts = [f"running {self.state.launched}"]
        for key, label in (
            ("stopped_early", "stopped early"),
            ("failed", "failed"),
            ("infeasible", "pruned by cost"),
            ("invalid", "invalid"),
            ("duplicate", "duplicates"),
        ):
            if c.get(key):
                parts.append(f"{label} {c[key]}")
        return " · ".join(parts)

    def _refresh_headline(self) -> None:
        eta = eta_s(self.state, self.concurrency)
        elapsed = fmt_duration(time.time() - self.state.started)
        eta_text = "ETA unknown" if eta is None else f"ETA {fmt_duration(eta)}"
        self.progress.update(
            self.task,
            completed=self.state.trained,
            count=f"{self.state.trained}/{self.state.target}",
            description=f"{self._counts_text()} · {elapsed} elapsed · {eta_text}",
        )

    def update(self, state: Any, event: str = "", launched: Any = None) -> None:
        if launched is None or not event:
            if self.progress is not None:
                self._refresh_headline()
            return
        if self.progress is None:
            print(event_line(state, event, launched, self.concurrency), file=self.stream)
            self.stream.flush()
            return
        number = launched.optuna_trial.number
        if event == "started":
            self.trial_tasks[number] = self.progress.add_task(
                launched.arch.summary(), total=1.0, name=f"  trial {number}", count="0%"
            )
        elif event == "evaluated" and number in self.trial_tasks:
            fraction = launched.latest.get("fraction", 0.0)
            fraction = fraction if math.isfinite(fraction) else 0.0
            loss = _loss_text(launched.latest)
            self.progress.update(
                self.trial_tasks[number],
                completed=fraction,
                count=f"{fraction:.0%}",
                description=f"{launched.arch.summary()} · {loss}",
            )
        else:
            task = self.trial_tasks.pop(number, None)
            if task is not None:
                self.progress.remove_task(task)
            self.progress.console.print(event_line(state, event, launched, self.concurrency))
        self._refresh_headline()

    def __exit__(self, *exc) -> None:
        if self.progress is not None:
            self._refresh_headline()
            self.progress.stop()
