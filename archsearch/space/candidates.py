"""Candidates: concrete architectures drawn from a search space.

An assignment gives a value to every active parameter. Applying it to the base architecture,
resolving the derived values and validating the result gives either an `ArchConfig` or a
rejection with a named reason (`heads_not_dividing_d_model`, `top_k_above_n_experts`, ...).
Rejections are counted, never silently dropped.

The same traversal serves four uses: exact enumeration of a finite space, its size, seeded
random sampling, and Optuna's define-by-run `trial.suggest_*` (the sweep calls `suggest`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from archsearch.arch import ArchConfig, InvalidArch
from archsearch.errors import UserError
from archsearch.space.assign import DerivedError, apply_assignment, resolve_derived
from archsearch.space.spec import Param, SearchSpace


@dataclass(frozen=True)
class Candidate:
    """An assignment and what it builds: an architecture, or a rejection reason."""

    assignment: dict[str, Any]
    arch: ArchConfig | None = None
    reason: str | None = None
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.arch is not None


def build(space: SearchSpace, assignment: dict[str, Any]) -> Candidate:
    """Apply an assignment to the base architecture and validate it (once per assignment and
    space: `SearchSpace.remember`; 1 and 1.0, or True and 1, are different assignments)."""
    try:
        key = json.dumps(assignment, sort_keys=True, allow_nan=True)
    except (TypeError, ValueError):  # a value JSON cannot write: built, not kept
        return _build(space, assignment)
    cand = space.remember(key, lambda: _build(space, assignment))
    return dataclasses.replace(cand, assignment=dict(assignment))


def _build(space: SearchSpace, assignment: dict[str, Any]) -> Candidate:
    tree = apply_assignment(space.base, assignment)
    try:
        tree = resolve_derived(tree, space.derived)
    except DerivedError as err:
        return Candidate(dict(assignment), reason=err.reason, message=str(err))
    tree.pop("vars", None)
    tree["name"] = ""
    try:
        arch = ArchConfig.from_dict(tree)
    except InvalidArch as err:
        return Candidate(dict(assignment), reason=err.reason, message=str(err))
    except UserError as err:  # a derived value of the wrong type
        return Candidate(dict(assignment), reason="invalid_value", message=str(err))
    return Candidate(dict(assignment), arch=arch.with_name(arch.arch_hash))


def _is_active(space: SearchSpace, param: Param, current: dict[str, Any]) -> bool:
    """Whether every condition of `param` holds for the values drawn so far (or the base)."""
    names = {p.name for p in space.params}
    for key, allowed in param.when:
        if key in names:
            if key not in current or current[key] not in allowed:
                return False
        elif space.base_value(key) not in allowed:
            return False
    return True


def assignments(space: SearchSpace) -> Iterator[dict[str, Any]]:
    """Every assignment of a finite space, in a fixed order."""
    params = space.params

    def walk(i: int, current: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if i == len(params):
            yield dict(current)
            return
        p = params[i]
        if not _is_active(space, p, current):
            yield from walk(i + 1, current)
            return
        if not p.domain.finite:
            raise UserError(
                f"{p.name} is continuous ({p.domain.describe()}); the space cannot "
                "be enumerated, sample it instead",
                source=space.source,
                key=f"params.{p.name}",
            )
        for v in p.domain.values():
            current[p.name] = v
            yield from walk(i + 1, current)
        current.pop(p.name, None)

    yield from walk(0, {})


def count(space: SearchSpace) -> int | float:
    """The number of assignments (math.inf when an active parameter is continuous).

    Only parameters that control others are expanded; the rest multiply, so spaces with
    millions of assignments are counted instantly."""
    params = space.params
    controllers = space.controllers

    def walk(i: int, current: dict[str, Any]) -> int | float:
        if i == len(params):
            return 1
        p = params[i]
        if not _is_active(space, p, current):
            return walk(i + 1, current)
        if p.name not in controllers:
            return p.domain.size * walk(i + 1, current)
        total = 0
        for v in p.domain.values():
            current[p.name] = v
            total += walk(i + 1, current)
        current.pop(p.name, None)
        return total

    n = walk(0, {})
    return n if math.isinf(n) else int(n)


def draws(space: SearchSpace, limit: int, seed: int = 0) -> Iterator[dict[str, Any]]:
    """Every assignment of a space of at most `limit` (in `assignments`' order), else `limit`
    random ones drawn with `seed` (a continuous space is always drawn): what a command looks
    at of a space too large to enumerate."""
    if count(space) <= limit:
        yield from assignments(space)
        return
    rng = random.Random(seed)
    for _ in range(limit):
        yield sample_assignment(space, rng)


def sample_assignment(space: SearchSpace, rng: random.Random) -> dict[str, Any]:
    """One random assignment: every active parameter drawn from its domain."""
    current: dict[str, Any] = {}
    for p in space.params:
        if _is_active(space, p, current):
            current[p.name] = p.domain.sample(rng)
    return current


def suggest(space: SearchSpace, trial: Any) -> dict[str, Any]:
    """Define-by-run: ask an Optuna trial for every active parameter, in dependency order."""
    current: dict[str, Any] = {}
    for p in space.params:
        if _is_active(space, p, current):
            current[p.name] = p.domain.suggest(trial, p.name)
    return current


@dataclass
class SampleResult:
    """Distinct valid candidates, and what was rejected or duplicated while drawing them."""

    candidates: list[Candidate]
    rejections: Counter = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    duplicates: int = 0
    draws: int = 0
    exhausted: bool = False


def sample(
    space: SearchSpace, n: int, seed: int = 0, *, max_draws: int | None = None
) -> SampleResult:
    """Draw until `n` distinct valid candidates (by canonical hash) or `max_draws` draws.

    Seeded: the same space, n and seed give the same candidates."""
    rng = random.Random(seed)
    result = SampleResult([])
    seen: set[str] = set()
    limit = max_draws if max_draws is not None else max(100, 50 * n)
    size = count(space)
    while len(result.candidates) < n and result.draws < limit:
        result.draws += 1
        cand = build(space, sample_assignment(space, rng))
        if not cand.ok:
            result.rejections[cand.reason] += 1
            result.examples.setdefault(cand.reason, cand.message or "")
            continue
        if cand.arch.arch_hash in seen:
            result.duplicates += 1
            if not math.isinf(size) and result.duplicates > 20 * size:
                break
            continue
        seen.add(cand.arch.arch_hash)
        result.candidates.append(cand)
    result.exhausted = len(result.candidates) < n
    return result
