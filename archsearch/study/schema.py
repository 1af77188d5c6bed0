"""The stored schema as code: what a study and each of its trials record.

One sweep is one Optuna study (one direction per objective of the space). Every trial, trained
or not, records enough to redraw any analysis without retraining.

Study user attribute `archsearch` (JSON text, `StudyMeta`): the space, the run's device, the
objective labels and directions, the constraints, the training settings and the device profiles
priced.

Trial user attributes (small ones first, so optuna-dashboard shows them):
  status        a `Status`
  reason        why it was not trained, stopped, or failed (empty when trained)
  summary, family, arch_hash, attention_share, params, active_params
  arch          the full ArchConfig (a dict)
  costs         device-independent cost metrics {label: value}
  device_costs  {device: {label: value}}: every device-dependent metric of the space's objectives
                and constraints, and the default latencies, for every device profile
  budget        what was actually trained {tokens, flops, fraction, ...}
  curve         the loss curve (eval points, and a thinned train-loss curve)
  train_metrics tokens/s, wall time, peak RSS, ... of the sandbox trial
  predicted     {label: {value, std, law, from_tokens}}: a training objective predicted at another
                budget (`val_loss[tokens=100M]`) from the trial's curve, with its 1-sigma error
  execution     where it trained: device, the GPU ids Ray assigned, workers and their devices,
                precision, micro batch, compile outcome, peak device memory
  lr_search     the trial's learning-rate search (`train.lr_search`): the grid, each short run
                (rate, round, budget, validation loss), the rate chosen, and the tokens, FLOPs
                and seconds it spent besides the trial's own training
  duplicate_of, duplicate_values  a duplicate (the same architecture as an earlier trial, not
                trained again): the earlier trial and its objective values. Stored PRUNED, so
                optuna-dashboard's Pareto view shows each architecture once (studies written
                before schema 2 stored duplicates COMPLETE with the copied values; both read
                the same: only `trained` trials are candidates of a front).
  replicate_of, seed, replicate_values  a replicate (schema 3): the architecture of trained
                trial `replicate_of` trained again at the same budget with another `seed`; its
                objective values (the study's objectives, in order) in `replicate_values`.
                Stored PRUNED and never a point of its own: the analysis gathers a trained
                trial's replicates into the mean and spread of its training objectives.
  confirms, budget_factor, seed, confirm_values, confirm_train  a confirmation (schema 3):
                the architecture of trained trial `confirms` trained at `budget_factor` x the
                sandbox budget (or on another corpus) with the training settings
                `confirm_train`; its objective values in `confirm_values`. Stored PRUNED,
                linked to its sandbox trial, read by `archsearch confirm` and the report.
Trial constraints: new style (`Trial.set_constraint`, system attributes `constraints:<name>`)
and old style (system attribute `constraints`, a list, which optuna-dashboard 0.21 displays);
a value <= 0 is satisfied.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

__all__ = [
    "JSON_ATTRS",
    "META_KEY",
    "SCHEMA_VERSION",
    "SERIES_ATTRS",
    "STALE_REASON",
    "Status",
    "StoredAttrs",
    "StudyMeta",
    "TrialRecord",
    "encode_attrs",
]

META_KEY = "archsearch"
SCHEMA_VERSION = 3
STALE_REASON = "its sweep driver stopped sending heartbeats while it ran"

# per-step series: the bulk of a stored trial; the analysis reads studies without them
SERIES_ATTRS = ("curve", "intermediate")

# nested user attributes, stored as JSON text so optuna-dashboard shows each in one cell
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
    "duplicate_values",
    "execution",
    "replicate_values",
    "confirm_values",
    "confirm_train",
    "predicted",
    "lr_search",
)


class Status(str, Enum):
    """What happened to a trial (its Optuna state says less: PRUNED covers several)."""

    TRAINED = "trained"  # COMPLETE: trained on the whole budget
    STOPPED_EARLY = "stopped_early"  # PRUNED by the early-stopping rule
    FAILED = "failed"  # FAIL: raised, out of memory, non-finite loss, worker died
    INFEASIBLE = "infeasible"  # PRUNED before training: breaks a constraint
    INVALID = "invalid"  # PRUNED before training: the candidate cannot be built
    DUPLICATE = "duplicate"  # the same architecture as an earlier trial, not trained again
    INTERRUPTED = "interrupted"  # FAIL: the driver stopped while it ran
    REPLICATE = "replicate"  # PRUNED: a trained architecture trained again with another seed
    CONFIRMATION = "confirmation"  # PRUNED: a trained architecture trained at a larger budget
    RUNNING = "running"

    def __str__(self) -> str:
        return self.value

    @property
    def spent_compute(self) -> bool:
        """Whether the trial spent training compute on a candidate of the search (replicates
        and confirmations re-train one already searched). Only TRAINED counts towards
        `trials=`; the others are reported beside it."""
        return self in (Status.TRAINED, Status.STOPPED_EARLY, Status.FAILED)

    @property
    def retrained(self) -> bool:
        """A replicate or a confirmation: a trained trial's architecture trained again."""
        return self in (Status.REPLICATE, Status.CONFIRMATION)


def encode_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """User attributes as stored: nested values as JSON text, statuses as their names."""
    out = {}
    for key, value in attrs.items():
        if isinstance(value, (dict, list)):
            value = json.dumps(value, default=float)
        elif isinstance(value, Status):
            value = value.value
        out[key] = value
    return out


def decode_attrs(attrs: Mapping[str, Any]) -> MutableMapping[str, Any]:
    """User attributes as the analysis reads them (nested values decoded); `StoredAttrs`
    stay lazy."""
    if isinstance(attrs, StoredAttrs):
        return attrs
    out = dict(attrs)
    for key in JSON_ATTRS:
        if isinstance(out.get(key), str):
            out[key] = json.loads(out[key])
    return out


class StoredAttrs(MutableMapping[str, Any]):
    """A trial's user attributes straight from the storage's JSON, decoded on first use.

    Reading a 100,000-trial study decodes only what the analysis touches: a front on stored
    objectives reads `status`, `reason` and `arch_hash`, not each trial's cost tables and
    architecture. The attributes not in `raw` are fetched through `more` (key -> JSON text or
    None, and None -> every key the trial has), which reads the whole study's column of that
    key at once (`archsearch.study.tables`). Equal to the decoded dict (`==`), and a mapping
    wherever one is expected."""

    __slots__ = ("_decoded", "_keys", "_more", "_raw")

    def __init__(self, raw: dict[str, str], more: Callable[[str | None], Any] | None = None):
        self._raw = raw  # key -> the value's JSON text as the storage holds it
        self._more = more
        self._keys: list[str] | None = None if more else list(raw)
        self._decoded: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        try:
            return self._decoded[key]
        except KeyError:
            pass
        text = self._raw.get(key)
        if text is None and self._more is not None and (self._keys is None or key in self._keys):
            text = self._more(key)
            if text is not None:
                self._raw[key] = text
        if text is None:
            raise KeyError(key)
        if len(text) > 1 and text[0] == '"' == text[-1] and "\\" not in text:  # a plain string
            value = text[1:-1]
        else:
            value = json.loads(text)
        if key in JSON_ATTRS and isinstance(value, str):
            value = json.loads(value)
        self._decoded[key] = value
        return value

    def _all_keys(self) -> list[str]:
        if self._keys is None:
            self._keys = list(self._more(None)) if self._more else list(self._raw)
        return self._keys

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in self:
            self._all_keys().append(key)
        self._decoded[key] = value

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        self._all_keys().remove(key)
        self._raw.pop(key, None)
        self._decoded.pop(key, None)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._all_keys()))

    def __len__(self) -> int:
        return len(self._all_keys())

    def __contains__(self, key: object) -> bool:
        if key in self._raw or key in self._decoded:
            return True
        try:
            self[key]  # type: ignore[index]
        except KeyError:
            return False
        return True

    def __repr__(self) -> str:
        return repr(dict(self))


@dataclass
class StudyMeta:
    """The study's own record of the sweep that wrote it (study user attribute `archsearch`)."""

    objectives: list[str]  # objective labels on the run's device
    directions: list[str]  # minimize | maximize, one per objective
    space: str = ""
    space_source: str | None = None
    device: str = ""
    constraints: list[str] = field(default_factory=list)  # `Constraint.describe()` texts
    train: dict[str, Any] = field(default_factory=dict)
    devices: list[str] = field(default_factory=list)  # device profiles priced for every trial
    # the hypervolume's reference point, one value per objective, fixed when the study is
    # created (None in studies written before schema 2) and where it came from
    reference: list[float] | None = None
    reference_source: str = ""
    version: int = SCHEMA_VERSION

    @classmethod
    def for_space(
        cls, space, device: str, devices: list[str], train: dict[str, Any] | None = None
    ) -> StudyMeta:
        """The meta of a sweep of `space` (a parsed `SearchSpace`) on `device`."""
        return cls(
            space=space.name,
            space_source=space.source,
            device=device,
            objectives=[o.spec.on_device(device, only_unset=True).label for o in space.objectives],
            directions=[o.direction for o in space.objectives],
            constraints=[c.describe() for c in space.constraints],
            train=dict(train or {}),
            devices=list(devices),
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_study(cls, study) -> StudyMeta | None:
        """The meta of an Optuna study; None for a study archsearch did not write."""
        raw = study.user_attrs.get(META_KEY)
        data = json.loads(raw) if isinstance(raw, str) else raw
        if not isinstance(data, dict):
            return None
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known.setdefault("objectives", [])
        known.setdefault("directions", [d.name.lower() for d in study.directions])
        return cls(**known)


@dataclass
class TrialRecord:
    """One stored trial as the sweep and the analysis read it."""

    number: int
    state: str  # Optuna's state name
    status: str  # a `Status` value ("" for a trial archsearch did not write)
    reason: str
    values: list[float] | None
    attrs: MutableMapping[str, Any]  # a dict, or `StoredAttrs` read lazily from the tables
    constraints: dict[str, float]
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.constraints.values())

    @property
    def fully_trained(self) -> bool:
        return self.state == "COMPLETE" and self.status == Status.TRAINED and self.feasible

    @classmethod
    def from_frozen(cls, t) -> TrialRecord:
        return cls.from_stored(
            t.number,
            t.state.name,
            t.values,
            t.user_attrs,
            dict(getattr(t, "constraints", None) or {}),
            dict(t.params),
        )

    @classmethod
    def from_stored(
        cls,
        number: int,
        state: str,
        values: list[float] | None,
        user_attrs: Mapping[str, Any],
        constraints: dict[str, float],
        params: dict[str, Any],
    ) -> TrialRecord:
        """A record from a trial's stored parts (user attributes as Optuna gives them, nested
        ones as JSON text; or `StoredAttrs`, kept lazy)."""
        attrs = decode_attrs(user_attrs)
        running = state == "RUNNING"
        status = str(attrs.get("status", Status.RUNNING.value if running else ""))
        reason = str(attrs.get("reason", ""))
        if state == "FAIL" and status == Status.RUNNING.value:
            # failed by Optuna's `fail_stale_trials`: its driver's heartbeat stopped
            status, reason = Status.INTERRUPTED.value, STALE_REASON
        return cls(
            number=number,
            state=state,
            status=status,
            reason=reason,
            values=list(values) if values is not None else None,
            attrs=attrs,
            constraints=constraints,
            params=params,
        )
