"""The study on disk: Optuna's RDB storage through SQLAlchemy, and what each trial records.

One sweep is one Optuna study (multi-objective, one direction per objective of the space). Every
trial, trained or not, records enough to redraw any analysis without retraining:

user attributes (small ones first, so optuna-dashboard shows them):
  status        trained | stopped_early | failed | infeasible | invalid | duplicate | interrupted
  reason        why it was not trained, stopped, or failed (empty when trained)
  summary, family, arch_hash, attention_share, params, active_params
  arch          the full ArchConfig (a dict)
  costs         device-independent cost metrics {label: value}
  device_costs  {device: {label: value}} every device-dependent metric of the space's objectives
                and constraints, for every device profile
  budget        what was actually trained {tokens, flops, fraction, ...}
  curve         the loss curve (eval points, and a thinned train-loss curve)
  train_metrics tokens/s, wall time, peak RSS, ... of the sandbox trial
system attributes: constraints, old style (a list, which optuna-dashboard 0.21 displays) and
new style (`constraints:<name>`, Optuna 5's `Trial.set_constraint`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from archsearch.errors import UserError

STUDY_META_KEY = "archsearch"
STATUS_TRAINED = "trained"
# user attributes stored as JSON text (Optuna keeps attributes as JSON values already, but
# nested ones are written as text so optuna-dashboard shows them in one cell)
JSON_ATTRS = (
    "arch",
    "costs",
    "device_costs",
    "budget",
    "curve",
    "train_metrics",
    "measured_latency",
    "intermediate",
    "probes",
    "metrics",
)
STATUSES = (
    "trained",
    "stopped_early",
    "failed",
    "infeasible",
    "invalid",
    "duplicate",
    "interrupted",
)


def default_storage_url(run_dir: Path) -> str:
    return f"sqlite:///{(run_dir / 'study.db').resolve()}"


def check_storage_reachable(url: str) -> None:
    """Connect once without creating anything; a one-line UserError when it fails."""
    import sqlalchemy

    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///") :])
        if str(path) != ":memory:" and not path.parent.exists():
            raise UserError(
                f"the SQLite file's folder {str(path.parent)!r} does not exist", key="storage.url"
            )
        return
    try:
        engine = sqlalchemy.create_engine(url, connect_args=_connect_args(url))
        with engine.connect():
            pass
        engine.dispose()
    except sqlalchemy.exc.ArgumentError as err:
        raise UserError(f"not a database URL: {err}", key="storage.url") from None
    except ModuleNotFoundError as err:
        raise UserError(
            f"the database driver is not installed ({err.name}); for PostgreSQL "
            "install the 'cluster' extra (psycopg2)",
            key="storage.url",
        ) from None
    except sqlalchemy.exc.SQLAlchemyError as err:
        first = str(getattr(err, "orig", err)).strip().splitlines()[0]
        raise UserError(
            f"cannot reach the study storage {_redact(url)}: {first}", key="storage.url"
        ) from None


def _connect_args(url: str) -> dict[str, Any]:
    return {"connect_timeout": 5} if url.startswith("postgresql") else {}


def _redact(url: str) -> str:
    import re

    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)


def open_storage(url: str):
    """Optuna's RDB storage. SQLite files run in WAL mode with synchronous=NORMAL: a commit
    survives a killed process (as a sweep's resume needs) and costs about a millisecond
    instead of tens of milliseconds of fsyncs, and readers (the dashboard) never block the
    sweep."""
    import optuna

    engine_kwargs: dict[str, Any] = {"connect_args": _connect_args(url)}
    if url.startswith("sqlite"):
        engine_kwargs["connect_args"] = {"timeout": 60}
    storage = optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
    if url.startswith("sqlite"):
        from sqlalchemy import event

        event.listen(storage.engine, "connect", _sqlite_pragmas)
        storage.engine.dispose()  # connections opened while creating the tables: reopen
    return storage


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def study_meta(study) -> dict[str, Any]:
    raw = study.user_attrs.get(STUDY_META_KEY)
    return json.loads(raw) if isinstance(raw, str) else (raw or {})


def open_study(storage, name: str, meta: dict[str, Any], sampler):
    """Create the study, or load it and check it is the same sweep (same objectives)."""
    import optuna

    directions = meta["directions"]
    try:
        study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
    except KeyError:
        study = optuna.create_study(
            study_name=name, storage=storage, sampler=sampler, directions=directions
        )
        study.set_user_attr(STUDY_META_KEY, json.dumps(meta))
        study.set_metric_names(meta["objectives"])
        return study, False
    old = study_meta(study)
    if (
        old.get("objectives") != meta["objectives"]
        or [d.name.lower() for d in study.directions] != directions
    ):
        raise UserError(
            f"study {name!r} exists with objectives {old.get('objectives')}, not "
            f"{meta['objectives']}: give another study_name= or run_dir=",
            key="study_name",
        )
    return study, True


def find_study_name(storage) -> str:
    """The only study in a storage (analysis commands accept a storage with one study)."""
    import optuna

    names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
    if not names:
        raise UserError("the storage holds no study", key="study")
    if len(names) > 1:
        raise UserError(
            f"the storage holds several studies ({', '.join(names)}); name one with study_name=",
            key="study",
        )
    return names[0]


@dataclass
class TrialRecord:
    """One trial as analysis sees it."""

    number: int
    state: str  # Optuna's state name
    status: str
    reason: str
    values: list[float] | None
    attrs: dict[str, Any]
    constraints: dict[str, float]

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.constraints.values())

    @property
    def fully_trained(self) -> bool:
        return self.state == "COMPLETE" and self.status == STATUS_TRAINED and self.feasible


def records(study) -> list[TrialRecord]:
    out = []
    for t in study.get_trials(deepcopy=False):
        attrs = dict(t.user_attrs)
        for key in JSON_ATTRS:
            if isinstance(attrs.get(key), str):
                attrs[key] = json.loads(attrs[key])
        out.append(
            TrialRecord(
                number=t.number,
                state=t.state.name,
                status=str(attrs.get("status", "running" if t.state.name == "RUNNING" else "")),
                reason=str(attrs.get("reason", "")),
                values=list(t.values) if t.values is not None else None,
                attrs=attrs,
                constraints={k: v for k, v in t.constraints.items()}
                if hasattr(t, "constraints")
                else {},
            )
        )
    return out


def finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
