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

from archsearch.errors import UserError

__all__ = [
    "ATTR_KINDS",
    "CHECKED_FIRST",
    "JSON_ATTRS",
    "META_KEY",
    "META_KINDS",
    "SCHEMA_VERSION",
    "SERIES_ATTRS",
    "STALE_REASON",
    "DamagedAttribute",
    "Status",
    "StoredAttrs",
    "StudyMeta",
    "TrialRecord",
    "check_attr",
    "encode_attrs",
    "read_meta",
]

META_KEY = "archsearch"
SCHEMA_VERSION = 3
STALE_REASON = "its sweep driver stopped sending heartbeats while it ran"

# per-step series: the bulk of a stored trial; the analysis reads studies without them
SERIES_ATTRS = ("curve", "intermediate")

_TEXT_ATTRS = ("status", "reason", "summary", "family", "arch_hash", "driver")
_NUMBER_ATTRS = ("attention_share", "params", "active_params", "budget_factor")
_MAPPING_ATTRS = (
    "arch",
    "budget",
    "curve",
    "train_metrics",
    "measured_latency",
    "probes",
    "execution",
    "confirm_train",
    "predicted",
    "lr_search",
)
_VALUES_ATTRS = ("duplicate_values", "replicate_values", "confirm_values")

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


# ---- what each stored attribute must be ---------------------------------------------------------


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _numbers_or_null(v: Any) -> bool:
    return isinstance(v, dict) and all(x is None or _number(x) for x in v.values())


def _list_of_numbers(v: Any) -> bool:
    return isinstance(v, list) and all(x is None or _number(x) for x in v)


# attribute -> (what it must be, the check); an attribute not named here is not checked
ATTR_KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    **{k: ("a string", lambda v: isinstance(v, str)) for k in _TEXT_ATTRS},
    **{k: ("a number or null", lambda v: v is None or _number(v)) for k in _NUMBER_ATTRS},
    **{k: ("a trial number", _int) for k in ("duplicate_of", "replicate_of", "confirms")},
    "seed": ("an integer or null", lambda v: v is None or _int(v)),
    **{k: ("a mapping", lambda v: isinstance(v, dict)) for k in _MAPPING_ATTRS},
    **{k: ("a mapping of numbers", _numbers_or_null) for k in ("costs", "metrics")},
    "device_costs": (
        "a mapping of devices to mappings of numbers",
        lambda v: isinstance(v, dict) and all(_numbers_or_null(x) for x in v.values()),
    ),
    **{k: ("a list of numbers", _list_of_numbers) for k in _VALUES_ATTRS},
    "intermediate": ("a list", lambda v: isinstance(v, list)),
}


class DamagedAttribute(UserError):
    """A stored attribute of a trial that is not JSON, or not of its kind (`ATTR_KINDS`): one
    line naming the trial and the attribute. `number`, `attribute` and `what` say it again
    for the analysis, which skips such a trial and counts it."""

    def __init__(self, number: int, attribute: str, what: str) -> None:
        self.number, self.attribute, self.what = number, attribute, what
        super().__init__(f"trial {number}: {self.problem}", key="study")

    @property
    def problem(self) -> str:
        return f"its stored attribute {self.attribute!r} is {self.what}"


def check_attr(number: int, key: str, value: Any) -> Any:
    """`value` when it is of the attribute's kind, else `DamagedAttribute`."""
    kind = ATTR_KINDS.get(key)
    if kind is not None and not kind[1](value):
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise DamagedAttribute(number, key, f"not {kind[0]} ({shown})")
    return value


def decode_value(number: int, key: str, text: str) -> Any:
    """A stored attribute from its JSON text (the nested ones are JSON text inside it)."""
    try:
        if len(text) > 1 and text[0] == '"' == text[-1] and "\\" not in text:  # a plain string
            value: Any = text[1:-1]
        else:
            value = json.loads(text)
        if key in JSON_ATTRS and isinstance(value, str):
            value = json.loads(value)
    except ValueError as err:
        raise DamagedAttribute(number, key, f"not JSON ({err})") from None
    return check_attr(number, key, value)


def decode_given(number: int, key: str, value: Any) -> Any:
    """A stored attribute as Optuna's public API gives it (the nested ones as JSON text)."""
    if key in JSON_ATTRS and isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as err:
            raise DamagedAttribute(number, key, f"not JSON ({err})") from None
    return check_attr(number, key, value)


class StoredAttrs(MutableMapping[str, Any]):
    """A trial's user attributes straight from the storage, decoded and checked on first use.

    Reading a 100,000-trial study decodes only what the analysis touches: a front on stored
    objectives reads `status`, `reason` and `arch_hash`, not each trial's cost tables and
    architecture. `raw` holds JSON texts as the tables store them, `given` values as Optuna's
    public API returns them; the attributes in neither are fetched through `more` (key ->
    JSON text or None, and None -> every key the trial has), which reads the whole study's
    column of that key at once (`archsearch.study.tables`). A value that is not JSON, or not
    of its attribute's kind (`ATTR_KINDS`), raises `DamagedAttribute` when read. Equal to the
    decoded dict (`==`), and a mapping wherever one is expected."""

    __slots__ = ("_decoded", "_given", "_keys", "_more", "_raw", "number")

    def __init__(
        self,
        raw: dict[str, str],
        more: Callable[[str | None], Any] | None = None,
        *,
        number: int = -1,
        given: Mapping[str, Any] | None = None,
    ):
        self._raw = raw  # key -> the value's JSON text as the storage holds it
        self._given = dict(given or {})  # key -> the value as Optuna's public API gave it
        self._more = more
        self._keys: list[str] | None = None if more else [*raw, *self._given]
        self._decoded: dict[str, Any] = {}
        self.number = number

    def __getitem__(self, key: str) -> Any:
        try:
            return self._decoded[key]
        except KeyError:
            pass
        if key in self._given:
            value = decode_given(self.number, key, self._given[key])
            self._decoded[key] = value
            return value
        text = self._raw.get(key)
        if text is None and self._more is not None and (self._keys is None or key in self._keys):
            text = self._more(key)
            if text is not None:
                self._raw[key] = text
        if text is None:
            raise KeyError(key)
        value = decode_value(self.number, key, text)
        self._decoded[key] = value
        return value

    def _all_keys(self) -> list[str]:
        if self._keys is None:
            self._keys = list(self._more(None)) if self._more else [*self._raw, *self._given]
        return self._keys

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in self._all_keys():
            self._all_keys().append(key)
        self._given.pop(key, None)
        self._decoded[key] = value

    def __delitem__(self, key: str) -> None:
        if key not in self._all_keys() and key not in self._decoded:
            raise KeyError(key)
        if key in self._all_keys():
            self._all_keys().remove(key)
        for held in (self._raw, self._given, self._decoded):
            held.pop(key, None)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._all_keys()))

    def __len__(self) -> int:
        return len(self._all_keys())

    def __contains__(self, key: object) -> bool:
        if key in self._raw or key in self._given or key in self._decoded:
            return True
        if self._keys is not None:
            return key in self._keys
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
        """The meta of an Optuna study; None for a study archsearch did not write. Damaged
        metadata (not JSON, or a key of the wrong kind) is a one-line `UserError`."""
        data = read_meta(study)
        if not data:
            return None
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known.setdefault("objectives", [])
        known.setdefault("directions", [d.name.lower() for d in study.directions])
        return cls(**known)


def _texts(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


# study metadata key -> (what it must be, the check)
META_KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "objectives": ("a list of metric labels", _texts),
    "directions": (
        "a list of minimize/maximize",
        lambda v: _texts(v) and set(v) <= {"minimize", "maximize"},
    ),
    "space": ("a string", lambda v: isinstance(v, str)),
    "space_source": ("a string or null", lambda v: v is None or isinstance(v, str)),
    "device": ("a string", lambda v: isinstance(v, str)),
    "constraints": ("a list of strings", _texts),
    "train": ("a mapping of training settings", lambda v: isinstance(v, dict)),
    "devices": ("a list of device names", _texts),
    "reference": ("a list of numbers or null", lambda v: v is None or _list_of_numbers(v)),
    "reference_source": ("a string", lambda v: isinstance(v, str)),
    "version": ("an integer", _int),
}


def read_meta(study) -> dict[str, Any]:
    """The study's metadata as stored (study user attribute `archsearch`; empty for a study
    archsearch did not write), each known key checked (`META_KINDS`): a one-line `UserError`
    naming the study and the key when it is damaged."""
    raw = study.user_attrs.get(META_KEY)
    if raw is None:
        return {}
    where = f"study {study.study_name!r}: its metadata (study attribute {META_KEY!r})"
    try:
        data = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as err:
        raise UserError(f"{where} is not JSON ({err})", key="study") from None
    if not isinstance(data, dict):
        raise UserError(f"{where} is not a mapping", key="study")
    for key, (what, ok) in META_KINDS.items():
        if key in data and not ok(data[key]):
            shown = repr(data[key])
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            raise UserError(f"{where} is damaged: {key!r} is not {what} ({shown})", key="study")
    return data


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
    # what is damaged in what was stored ("" when nothing): such a trial is left out of the
    # analysis and named (`archsearch.study.StudyData.unreadable`)
    damaged: str = field(default="", compare=False)

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
        constraints: dict[str, Any],
        params: dict[str, Any],
        damaged: str = "",
    ) -> TrialRecord:
        """A record from a trial's stored parts (user attributes as Optuna gives them, nested
        ones as JSON text; or `StoredAttrs`, kept lazy). The attributes every reader uses
        (`CHECKED_FIRST`) and the constraint values are checked here: a damaged one leaves
        the record `damaged`, saying what, instead of failing the whole read."""
        attrs = (
            user_attrs
            if isinstance(user_attrs, StoredAttrs)
            else StoredAttrs({}, number=number, given=user_attrs)
        )
        running = state == "RUNNING"
        status, reason = Status.RUNNING.value if running else "", ""
        try:
            for key in CHECKED_FIRST:
                attrs.get(key)
            status = str(attrs.get("status", status))
            reason = str(attrs.get("reason", ""))
        except DamagedAttribute as err:
            damaged = damaged or err.problem
        bad = sorted(k for k, v in constraints.items() if not _number(v))
        if bad and not damaged:
            damaged = f"its constraint {bad[0]!r} is not a number ({constraints[bad[0]]!r})"
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
            constraints={} if bad else constraints,
            params=params,
            damaged=damaged,
        )


# the small attributes every reader of a trial uses, checked when its record is made
CHECKED_FIRST = ("status", "reason", "summary", "family", "arch_hash", "attention_share")
