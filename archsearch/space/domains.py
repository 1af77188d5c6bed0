"""Parameter domains written in Hydra's sweep grammar.

A value in a space file is parsed with Hydra's own override parser, exactly as Hydra's Optuna
sweeper reads `hydra.sweeper.params`, and mapped to Optuna the same way:

- `choice(a, b, c)` -> categorical over the listed values;
- `range(start, stop, step=s)` -> the values start, start+s, ... below stop (Python's range, also
  for floats), suggested as an int/float with that step;
- `interval(low, high)` -> a float in [low, high]; `tag(log, interval(...))` samples in log
  space; `tag(int, interval(...))` makes it an integer in [low, high];
- anything else is a fixed value.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from archsearch.errors import UserError

MAX_VALUES = 100_000  # values of one enumerable domain (a range or an integer interval)


class Domain:
    """The set of values one parameter may take."""

    finite: bool = True

    def values(self) -> list[Any]:
        raise NotImplementedError

    @property
    def size(self) -> int | float:
        return len(self.values()) if self.finite else math.inf

    def sample(self, rng: random.Random) -> Any:
        return rng.choice(self.values())

    def suggest(self, trial: Any, name: str) -> Any:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class Fixed(Domain):
    value: Any

    def values(self) -> list[Any]:
        return [self.value]

    def suggest(self, trial: Any, name: str) -> Any:
        return self.value

    def describe(self) -> str:
        return repr(self.value)


@dataclass(frozen=True)
class Choice(Domain):
    options: tuple[Any, ...]

    def values(self) -> list[Any]:
        return list(self.options)

    def suggest(self, trial: Any, name: str) -> Any:
        return trial.suggest_categorical(name, list(self.options))

    def describe(self) -> str:
        return f"choice({', '.join(map(str, self.options))})"


@dataclass(frozen=True)
class Range(Domain):
    start: int | float
    stop: int | float
    step: int | float

    @property
    def is_int(self) -> bool:
        return all(isinstance(v, int) for v in (self.start, self.stop, self.step))

    def values(self) -> list[Any]:
        if self.is_int:
            return list(range(self.start, self.stop, self.step))
        n = math.ceil((self.stop - self.start) / self.step - 1e-9)
        return [round(self.start + i * self.step, 12) for i in range(max(n, 0))]

    def suggest(self, trial: Any, name: str) -> Any:
        vals = self.values()
        if self.is_int:
            return trial.suggest_int(name, vals[0], vals[-1], step=self.step)
        return trial.suggest_float(name, vals[0], vals[-1], step=self.step)

    def describe(self) -> str:
        return f"range({self.start}, {self.stop}, step={self.step})"


@dataclass(frozen=True)
class Interval(Domain):
    low: float
    high: float
    log: bool = False
    integer: bool = False

    @property
    def finite(self) -> bool:  # type: ignore[override]
        return self.integer

    def values(self) -> list[Any]:
        if not self.integer:
            raise ValueError("a continuous interval has no finite list of values")
        return list(range(int(self.low), int(self.high) + 1))

    def sample(self, rng: random.Random) -> Any:
        if self.integer:
            if self.log:
                lo, hi = math.log(self.low), math.log(self.high + 1)
                return min(int(math.exp(rng.uniform(lo, hi))), int(self.high))
            return rng.randint(int(self.low), int(self.high))
        if self.log:
            return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        return rng.uniform(self.low, self.high)

    def suggest(self, trial: Any, name: str) -> Any:
        if self.integer:
            return trial.suggest_int(name, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(name, self.low, self.high, log=self.log)

    def describe(self) -> str:
        inner = f"interval({self.low}, {self.high})"
        tags = [t for t, on in (("int", self.integer), ("log", self.log)) if on]
        return f"tag({', '.join(tags)}, {inner})" if tags else inner


_PARSER = None


def _parser():
    global _PARSER
    if _PARSER is None:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        _PARSER = OverridesParser.create()
    return _PARSER


def _finite(values: Any, text: str, *, source: str | None, key: str) -> None:
    """NaN and infinities are no parameter values (nor bounds)."""
    for v in values:
        if isinstance(v, float) and not math.isfinite(v):
            raise UserError(f"{v} in {text!r} is not a finite number", source=source, key=key)


def _enumerable(n: float, text: str, *, source: str | None, key: str) -> None:
    if n > MAX_VALUES:
        raise UserError(
            f"{text!r} has {n:,.0f} values, more than {MAX_VALUES:,}; use fewer, or an "
            "interval() for a continuous parameter",
            source=source,
            key=key,
        )


def parse_domain(raw: Any, *, source: str | None, key: str) -> Domain:
    """Parse one YAML value of a `params` entry into a `Domain` (errors name file and key)."""
    if isinstance(raw, (bool, int, float)) or raw is None:
        _finite([raw], str(raw), source=source, key=key)
        return Fixed(raw)
    if not isinstance(raw, str):
        raise UserError(
            f"expected a value or a sweep such as choice(...), range(...), interval(...), got "
            f"{type(raw).__name__} {raw!r}",
            source=source,
            key=key,
        )
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
    from hydra.errors import HydraException

    text = raw.strip()
    try:
        parsed = _parser().parse_override(f"value={text}").value()
    except HydraException as err:
        msg = " ".join(str(err).split())
        if "empty choice" in msg:
            msg = "empty choice() is not legal"
        raise UserError(f"cannot parse {text!r}: {msg}", source=source, key=key) from None
    if isinstance(parsed, ChoiceSweep):
        return _choice(parsed, text, source=source, key=key)
    if isinstance(parsed, RangeSweep):
        return _range(parsed, text, source=source, key=key)
    if isinstance(parsed, IntervalSweep):
        return _interval(parsed, text, source=source, key=key)
    if isinstance(parsed, (list, dict)):
        raise UserError(
            f"lists and mappings are not parameter values; use choice(...) for "
            f"alternatives, got {text!r}",
            source=source,
            key=key,
        )
    _finite([parsed], text, source=source, key=key)
    return Fixed(parsed)


def _choice(parsed, text: str, *, source: str | None, key: str) -> Choice:
    """`choice(a, b, ...)`: plain, finite, distinct values, no tags."""
    bad_tags = set(parsed.tags)
    if bad_tags:
        raise UserError(
            f"tags {sorted(bad_tags)} are not supported on choice()", source=source, key=key
        )
    options = tuple(parsed.list)
    if not options:
        raise UserError("empty choice() is not legal", source=source, key=key)
    for opt in options:
        if isinstance(opt, (list, dict)) or hasattr(opt, "list"):
            raise UserError(
                f"choice() options must be plain values, got {opt!r}", source=source, key=key
            )
    _finite(options, text, source=source, key=key)
    if len(set(map(repr, options))) != len(options):
        raise UserError(f"choice() lists a value twice in {text!r}", source=source, key=key)
    return Choice(options)


def _range(parsed, text: str, *, source: str | None, key: str) -> Range:
    """`range(start, stop, step)`: a positive step over a non-empty, enumerable range."""
    if parsed.tags:
        raise UserError(
            f"tags {sorted(parsed.tags)} are not supported on range()", source=source, key=key
        )
    start, stop, step = parsed.start, parsed.stop, parsed.step
    _finite((start, stop, step), text, source=source, key=key)
    if step == 0 or (step > 0 and start >= stop) or (step < 0 and start <= stop):
        raise UserError(
            f"{text!r} is empty (start {start}, stop {stop}, step {step})",
            source=source,
            key=key,
        )
    if step < 0:
        raise UserError(f"{text!r}: use a positive step", source=source, key=key)
    _enumerable((stop - start) / step, text, source=source, key=key)
    return Range(start, stop, step)


def _interval(parsed, text: str, *, source: str | None, key: str) -> Interval:
    """`interval(low, high)`, tagged `log` and/or `int`: finite bounds in order (positive
    for log, whole and enumerable for int)."""
    unknown = set(parsed.tags) - {"log", "int"}
    if unknown:
        raise UserError(
            f"unknown tags {sorted(unknown)} on interval() (known: log, int)",
            source=source,
            key=key,
        )
    low, high = float(parsed.start), float(parsed.end)
    _finite((low, high), text, source=source, key=key)
    if low > high:
        raise UserError(f"low {low:g} is above high {high:g} in {text!r}", source=source, key=key)
    log, integer = "log" in parsed.tags, "int" in parsed.tags
    if log and low <= 0:
        raise UserError(
            f"a log interval needs a positive low bound, got {low:g}", source=source, key=key
        )
    if integer and not (low.is_integer() and high.is_integer()):
        raise UserError(
            f"an int interval needs whole bounds, got {low:g}, {high:g}", source=source, key=key
        )
    if integer:
        _enumerable(high - low + 1, text, source=source, key=key)
    return Interval(low, high, log=log, integer=integer)
