"""Several sweep drivers on one study: they cooperate through the storage, as Optuna's
distributed optimisation does through one RDB.

- Every trial a driver asks is stamped with the driver (`host:pid:start time`) and kept alive
  by Optuna's heartbeat: a driver thread records a heartbeat for each of its RUNNING trials
  every `HEARTBEAT_S` while Ray trains them (Optuna beats only inside `Study.optimize`, which
  a sweep does not use). A RUNNING trial is marked interrupted only when its driver is dead:
  at once when that driver ran on this host and its process is gone, otherwise when its
  heartbeat is older than `GRACE_S` (`optuna.storages.fail_stale_trials`). A live driver's
  trial is never touched. Interrupted trials that had been launched are enqueued again.
- Before a driver trains an architecture it claims it in the study and checks the claims of
  the others (`claim`): of two trials of one architecture, the lower-numbered claim trains and
  the other waits as its duplicate, so no architecture is trained twice. A driver reads the
  others' finished and running trials from the storage (`sync`), so the target counts every
  driver's trials.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from archsearch.study import Status
from archsearch.sweep.state import SweepState

__all__ = [
    "GRACE_S",
    "HEARTBEAT_S",
    "Driver",
    "Heartbeat",
    "claim",
    "drivers_alive",
    "reap_dead",
    "requeue_stale",
    "sync",
]

HEARTBEAT_S = 5  # seconds between a driver's heartbeats for its running trials
GRACE_S = 30  # a trial whose heartbeat is older than this has lost its driver
CHOOSING_WAIT_S = 10.0  # longest wait for a peer's trial that is being built and priced
SYNC_EVERY_S = 1.0  # how often the searcher re-reads the study between candidates


@dataclass(frozen=True)
class Driver:
    """One sweep process: host name, pid and process start time (pids are reused)."""

    host: str
    pid: int
    started: float

    @classmethod
    def this(cls) -> Driver:
        import psutil

        return cls(socket.gethostname(), os.getpid(), round(psutil.Process().create_time(), 2))

    @property
    def key(self) -> str:
        return f"{self.host}:{self.pid}:{self.started:.2f}"

    @classmethod
    def parse(cls, key: Any) -> Driver | None:
        try:
            host, pid, started = str(key).rsplit(":", 2)
            return cls(host, int(pid), float(started))
        except ValueError:
            return None

    def dead_here(self) -> bool:
        """Whether this driver ran on this host and its process is gone."""
        import psutil

        if self.host != socket.gethostname():
            return False
        try:
            return round(psutil.Process(self.pid).create_time(), 2) != self.started
        except psutil.Error:
            return True


def drivers_alive(records, heartbeat_ages: dict[int, float] | None) -> dict[int, str]:
    """The RUNNING trials of a study whose driver is alive: trial number -> the driver. A
    driver of this host is alive while its process is; another host's while the trial's
    heartbeat (`heartbeat_ages`: seconds, by trial number) is younger than `GRACE_S`."""
    out = {}
    for r in records:
        if r.state != "RUNNING":
            continue
        key = r.attrs.get("driver")
        driver = Driver.parse(key) if key else None
        if driver is not None and driver.host == socket.gethostname():
            alive = not driver.dead_here()
        else:
            age = (heartbeat_ages or {}).get(r.number)
            alive = age is not None and age < GRACE_S
        if alive:
            out[r.number] = str(key or "a driver without a name")
    return out


def requeue_stale(study, trial) -> None:
    """Optuna's callback for a trial that `fail_stale_trials` failed: run it again when it had
    been launched (a candidate that never got that far is not retried)."""
    if trial.user_attrs.get("status") == Status.RUNNING.value and trial.params:
        study.enqueue_trial(dict(trial.params), skip_if_exists=False)


def reap_dead(writer, me: Driver) -> list[dict[str, Any]]:
    """Mark interrupted the RUNNING trials whose driver died on this host, or that carry no
    driver and started longer than `GRACE_S` ago (written by an older version), and fail the
    stale ones of other hosts; returns the parameters to run again."""
    import optuna

    def dead(t) -> bool:
        driver = Driver.parse(t.user_attrs.get("driver"))
        if driver is None:
            start = t.datetime_start.timestamp() if t.datetime_start else 0.0
            return time.time() - start > GRACE_S
        return driver != me and driver.dead_here()

    again = writer.mark_interrupted(dead)
    optuna.storages.fail_stale_trials(writer.study)
    return again


class Heartbeat(threading.Thread):
    """Beats for the driver's RUNNING trials every `HEARTBEAT_S` and fails other drivers'
    stale trials, until stopped."""

    def __init__(self, state: SweepState, interval: float = HEARTBEAT_S) -> None:
        super().__init__(name="archsearch-heartbeat", daemon=True)
        self.state = state
        self.interval = interval
        self.stopped = threading.Event()

    def run(self) -> None:
        import optuna

        while not self.stopped.wait(self.interval):
            try:
                self.state.writer.beat(live_trials(self.state))
                optuna.storages.fail_stale_trials(self.state.writer.study)
            except Exception:  # a storage hiccup: the next beat tries again
                continue

    def __enter__(self) -> Heartbeat:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stopped.set()
        self.join()


def live_trials(state: SweepState) -> list[int]:
    """Numbers of the driver's RUNNING trials: in Tune, and duplicates waiting on another."""
    numbers = [la.optuna_trial.number for la in list(state.by_tune_id.values())]
    for waiting in list(state.pending_duplicates.values()):
        numbers += [t.number for t in list(waiting)]
    return numbers


def _holds(t) -> bool:
    """Whether a stored trial holds its architecture: running or spent compute on it."""
    status = t.user_attrs.get("status")
    held = {s.value for s in Status if s.spent_compute}
    if t.state.name == "RUNNING":  # its driver may be recording how it ended, status first
        return status == Status.RUNNING.value or status in held
    return status in held


def sync(state: SweepState, *, force: bool = False) -> None:
    """Re-read the study: fully trained trials and architectures taken by any driver, and the
    trials other drivers are running."""
    now = time.time()
    if not force and now - state.synced_at < SYNC_EVERY_S:
        return
    state.synced_at = now
    me = state.writer.driver
    trained, elsewhere = 0, 0
    for t in state.writer.study.get_trials(deepcopy=False):
        status, h = t.user_attrs.get("status"), t.user_attrs.get("arch_hash")
        if t.state.name == "RUNNING":
            elsewhere += status == Status.RUNNING.value and t.user_attrs.get("driver") != me
            continue
        trained += status == Status.TRAINED.value
        if h and _holds(t):
            state.done_by_hash.setdefault(h, t.number)
    state.trained = max(state.trained, trained)
    state.running_elsewhere = elsewhere


def claim(state: SweepState, trial, arch_hash: str) -> int | None:
    """After `trial` stored its architecture with status running: the number of a
    lower-numbered trial (any driver's) that holds the same architecture, or None when this
    trial may train it. Waits first while a lower-numbered trial of another driver is still
    being built and priced (it may be about to claim the same architecture), as in Lamport's
    bakery: of any two claims, the later reader sees the other, so exactly one trains."""
    from optuna.trial import TrialState

    deadline = time.time() + CHOOSING_WAIT_S
    while True:
        lower = [
            t for t in state.writer.study.get_trials(deepcopy=False) if t.number < trial.number
        ]
        choosing = [
            t
            for t in lower
            if t.state == TrialState.RUNNING
            and "status" not in t.user_attrs
            and t.user_attrs.get("driver") != state.writer.driver
        ]
        if not choosing or time.time() > deadline:
            break
        time.sleep(0.05)
    holders = [t.number for t in lower if t.user_attrs.get("arch_hash") == arch_hash and _holds(t)]
    return min(holders) if holders else None
