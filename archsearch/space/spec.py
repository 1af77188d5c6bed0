"""A search space file: a base architecture, the parameters that vary, and what to optimise.

```yaml
name: plm_edge
base: plm_1_8b                    # a preset name, a path, or an inline ArchConfig mapping
params:                           # Hydra sweep grammar (choice / range / interval / tag)
  n_layers: choice(28, 32, 36, 40)
  attention.kind: choice(mla, gqa)
  attention.kv_rank:              # a conditional parameter: only drawn when MLA is chosen
    values: choice(256, 512)
    when: {attention.kind: mla}
  vars.ffn_mult: choice(3, 4)     # a free variable, used only by derived values
derived:                          # OmegaConf interpolations, resolved per candidate
  ffn.d_ffn: ${mul:${d_model},${vars.ffn_mult}}
constraints: [...]                # see archsearch.metrics
objectives: [...]
train: {...}                      # sandbox-training settings for sweeps of this space
replicates: 3                     # seeds per architecture of the first two Pareto layers
```

Parameter names are key paths into `ArchConfig` (or `vars.NAME`). Each parameter is either a
sweep value or a mapping `{values: <sweep>, when: {key: value-or-list, ...}}`; a conditional
parameter is active when every listed key has one of the listed values. Parameters are drawn in
dependency order, so an Optuna define-by-run trial asks only for the active ones.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from archsearch import plugins, yamlio
from archsearch.arch import (
    CHOICES,
    MIXER_OF_LETTER,
    ArchConfig,
    is_known,
    known_names,
    load_arch,
    size_limit,
)
from archsearch.errors import UserError
from archsearch.metrics import Constraint, Objective, parse_constraints, parse_objectives
from archsearch.resources import check_name, conf_dir, resolve, shipped_names, spaces_dir
from archsearch.space.assign import apply_assignment, check_expression, resolve_derived
from archsearch.space.domains import Choice, Domain, Fixed, Interval, Range, parse_domain

# Checked by hand, not by an OmegaConf structured merge: that would take `name: 5` as "5", treat
# `params: null` as an error, name no key for `params: [...]`, and resolve `${oc.env:...}`.
SPACE_KEYS = {
    "name": "the space's name: the study's name and run folder (default: the file's stem)",
    "description": "one line shown by `space show`",
    "base": "the architecture every candidate starts from: a preset, a path or a mapping",
    "params": "key path -> sweep value, or {values: <sweep>, when: {key: value-or-list}}",
    "derived": "key path -> an interpolation over the base and the drawn values",
    "constraints": "bounds on metrics: {metric, max | min, margin, arguments}",
    "objectives": "metrics to minimise or maximise: {metric, direction, arguments}",
    "train": "sandbox-training settings of the sweep's trials (TrainConfig keys)",
    "replicates": "seeds per architecture of the first two Pareto layers (1: none)",
}
MAX_REPLICATES = 100
MEMO = 4096  # results a space keeps (`SearchSpace.remember`)


@dataclass(frozen=True)
class Param:
    """One varying parameter: a key path, its domain, and the condition for it to be active."""

    name: str
    domain: Domain
    when: tuple[tuple[str, tuple[Any, ...]], ...] = ()


@dataclass
class SearchSpace:
    """A parsed space file: the base architecture (as a dict), its parameters in dependency
    order, the derived values, and the constraints, objectives and training settings."""

    name: str
    source: str
    base: dict[str, Any]
    base_name: str
    params: list[Param]
    derived: dict[str, str] = field(default_factory=dict)
    constraints: list[Constraint] = field(default_factory=list)
    objectives: list[Objective] = field(default_factory=list)
    train: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    replicates: int = 1  # seeds per architecture of the first two Pareto layers (1: one)
    # what `remember` computed, by key (oldest first); never compared, copied or pickled
    _memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def remember(self, key: str, make: Callable[[], Any]) -> Any:
        """`make()`, computed once per `key` for this space and kept (the last `MEMO` keys):
        the sweep builds each candidate for its reference point, its sampler's pool and its
        trial (`candidates.build`). Only for results that are fixed by the space and the key
        and that no caller changes."""
        if key in self._memo:
            return self._memo[key]
        value = self._memo[key] = make()
        if len(self._memo) > MEMO:
            del self._memo[next(iter(self._memo))]
        return value

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_memo": {}}

    @property
    def controllers(self) -> set[str]:
        """The keys some parameter's condition depends on."""
        return {k for p in self.params for k, _ in p.when}

    def base_value(self, key: str) -> Any:
        """The base architecture's value at a key path (the ArchConfig default when unset)."""
        node: Any = self.base
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return _default_of(key)
            node = node[part]
        return node


# ---- ArchConfig key paths ---------------------------------------------------------------------


def _field_types() -> dict[str, Any]:
    """Every settable leaf path of an ArchConfig and its Python type."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(ArchConfig):
        tp = _strip_optional(typing.get_type_hints(ArchConfig)[f.name])
        if dataclasses.is_dataclass(tp):
            hints = typing.get_type_hints(tp)
            for sub in dataclasses.fields(tp):
                out[f"{f.name}.{sub.name}"] = _strip_optional(hints[sub.name])
        elif f.name != "name":
            out[f.name] = tp
    return out


def _strip_optional(tp: Any) -> Any:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if args and typing.get_origin(tp) is not None else tp


_FIELD_TYPES = _field_types()


def _default_of(key: str) -> Any:
    section, _, leaf = key.partition(".")
    if not leaf:
        f = {f.name: f for f in dataclasses.fields(ArchConfig)}.get(section)
        return None if f is None or f.default is dataclasses.MISSING else f.default
    tp = _strip_optional(typing.get_type_hints(ArchConfig).get(section))
    if not dataclasses.is_dataclass(tp):
        return None
    return getattr(tp(), leaf, None)


def _check_key(key: str, *, source: str, where: str) -> None:
    if key.startswith("vars."):
        if not key[5:].isidentifier():
            raise UserError(f"'{key}' is not a valid variable name", source=source, key=where)
        return
    if key not in _FIELD_TYPES:
        raise UserError(
            f"unknown architecture key {key!r} (e.g. n_layers, d_model, "
            "attention.n_heads, linear.family, ffn.d_ffn, moe.n_experts, "
            "layers.pattern, or vars.NAME)",
            source=source,
            key=where,
        )


def _check_value(key: str, value: Any, *, source: str, where: str) -> None:
    """A parameter value must fit the ArchConfig field's type and registered names."""
    if isinstance(value, str) and "${" in value:
        raise UserError(
            f"{value!r} holds an interpolation; only derived values may interpolate",
            source=source,
            key=where,
        )
    if key.startswith("vars.") or value is None:
        return
    tp = _FIELD_TYPES[key]
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
    }[tp]
    if not ok:
        raise UserError(
            f"value {value!r} is not {tp.__name__} as {key} requires", source=source, key=where
        )
    if tp is int and value > size_limit(key):
        raise UserError(
            f"{value} is above the limit {size_limit(key):,} for {key}", source=source, key=where
        )
    if key == "layers.pattern":
        wrong = sorted(set(value.upper()) - set(MIXER_OF_LETTER))
        if not value.strip() or wrong:
            raise UserError(
                f"unparseable layer pattern {value!r}: use the letters N (softmax attention), "
                "L (linear mixer) and M (MCSD), e.g. LLLN",
                source=source,
                key=where,
            )
    if key in CHOICES and not is_known(key, value):
        raise UserError(
            f"unknown value {value!r} for {key} (known: {', '.join(known_names(key))})",
            source=source,
            key=where,
        )


# ---- loading ----------------------------------------------------------------------------------


def open_space(*, search_space: str | None, space_file: str | None = None) -> SearchSpace:
    """The space a command names: `space_file=PATH` when given, else `search_space=NAME|PATH`
    (errors name the key that carried it)."""
    if space_file:
        return load_space(space_file, key="space_file")
    return load_space(search_space)


def load_space(name_or_path: str, *, key: str = "search_space") -> SearchSpace:
    """Load a shipped space by name (`search_spaces/NAME.yaml`) or a space file by path."""
    path = resolve(name_or_path, spaces_dir(), "search space", key)
    return parse_space_file(path)


def parse_space_file(path: Path) -> SearchSpace:
    """Parse a space file; its name defaults to the file's stem."""
    return parse_space(yamlio.load(path), source=str(path), default_name=path.stem)


def _read_derived(derived_raw: Any, names: set[str], source: str) -> dict[str, str]:
    """`derived`: key path -> an interpolation of the parameters (checked as an expression; a
    parameter's own key may not be derived too)."""
    if not isinstance(derived_raw, dict):
        raise UserError(
            "expected a mapping of key path -> interpolation", source=source, key="derived"
        )
    derived = {}
    for k, v in derived_raw.items():
        k = str(k)
        _check_key(k, source=source, where=f"derived.{k}")
        if k in names:
            raise UserError(
                "is both a parameter and a derived value", source=source, key=f"derived.{k}"
            )
        if not isinstance(v, str) or "${" not in v:
            raise UserError(
                f"expected an interpolation such as ${{div:${{d_model}},64}}, got {v!r}",
                source=source,
                key=f"derived.{k}",
            )
        try:
            check_expression(v)
        except ValueError as err:
            raise UserError(str(err), source=source, key=f"derived.{k}") from None
        derived[k] = v
    return derived


def parse_space(raw: Any, *, source: str, default_name: str = "space") -> SearchSpace:
    """Parse and check a space from plain data; errors name `source` and the key path."""
    if not isinstance(raw, dict):
        raise UserError("a search space must be a YAML mapping", source=source, key="(top level)")
    unknown = sorted(set(map(str, raw)) - set(SPACE_KEYS))
    if unknown:
        raise UserError(
            f"unknown key (known: {', '.join(SPACE_KEYS)})", source=source, key=unknown[0]
        )
    name = raw.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise UserError("must be a non-empty string", source=source, key="name")
    if "name" in raw:
        check_name(name, what="space", key="name", source=source)
    description = raw.get("description", "")
    if not isinstance(description, (str, type(None))):
        raise UserError(
            f"must be a string, got {type(description).__name__}", source=source, key="description"
        )

    base, base_name = _read_base(raw.get("base"), source)

    params_raw = raw.get("params") or {}
    if not isinstance(params_raw, dict):
        raise UserError("expected a mapping of key path -> sweep", source=source, key="params")
    params = [_read_param(str(k), v, source) for k, v in params_raw.items()]
    names = {p.name for p in params}

    derived = _read_derived(raw.get("derived") or {}, names, source)

    devices = (*shipped_names(conf_dir() / "device"), *plugins.names(plugins.DEVICES))
    constraints = parse_constraints(raw.get("constraints"), source=source, devices=devices)
    objectives = parse_objectives(raw.get("objectives"), source=source, devices=devices)
    train = raw.get("train") or {}
    if not isinstance(train, dict):
        raise UserError("expected a mapping of training settings", source=source, key="train")
    replicates = 1 if raw.get("replicates") is None else raw["replicates"]
    if type(replicates) is not int or not 1 <= replicates <= MAX_REPLICATES:
        raise UserError(
            f"must be a whole number of seeds from 1 (no replicates) to {MAX_REPLICATES}, "
            f"got {replicates!r}",
            source=source,
            key="replicates",
        )

    space = SearchSpace(
        name=name,
        source=source,
        base=base,
        base_name=base_name,
        params=_order(params, source),
        derived=derived,
        constraints=constraints,
        objectives=objectives,
        train=train,
        description=str(description or ""),
        replicates=replicates,
    )
    _check_conditions(space)
    _dry_run_derived(space)
    return space


def _read_base(raw: Any, source: str) -> tuple[dict[str, Any], str]:
    if raw is None:
        raise UserError(
            "missing: name an architecture preset (e.g. base: tiny_gqa) or give an "
            "inline ArchConfig mapping",
            source=source,
            key="base",
        )
    if isinstance(raw, str):
        try:
            arch = load_arch(raw, key="base")
        except UserError as err:
            raise UserError(
                err.detail,
                source=source,
                key=f"base ({err.source or raw})" if err.key not in (None, "base") else "base",
            ) from None
        return arch.to_dict(), arch.name
    if isinstance(raw, dict):
        arch = ArchConfig.from_dict(raw, source=f"{source}: base")
        return arch.to_dict(), arch.name or "inline"
    raise UserError(
        f"expected a preset name or a mapping, got {type(raw).__name__}", source=source, key="base"
    )


def _read_param(name: str, raw: Any, source: str) -> Param:
    where = f"params.{name}"
    _check_key(name, source=source, where=where)
    when: tuple = ()
    if isinstance(raw, dict):
        unknown = sorted(set(raw) - {"values", "when"})
        if unknown:
            raise UserError(
                f"unknown key {unknown[0]!r} (a conditional parameter has 'values' and 'when')",
                source=source,
                key=where,
            )
        if "values" not in raw:
            raise UserError("missing 'values'", source=source, key=where)
        when = _read_when(raw.get("when"), source, f"{where}.when")
        raw = raw["values"]
        where = f"{where}.values"
    domain = parse_domain(raw, source=source, key=where)
    if isinstance(domain, (Fixed, Choice, Range)):
        for v in domain.values():
            _check_value(name, v, source=source, where=where)
    elif isinstance(domain, Interval) and not name.startswith("vars."):
        tp = _FIELD_TYPES[name]
        if tp not in (int, float) or (tp is int and not domain.integer):
            need = "tag(int, interval(...))" if tp is int else "choice(...)"
            raise UserError(f"{name} is {tp.__name__}; use {need}", source=source, key=where)
        if tp is int and domain.high > size_limit(name):
            raise UserError(
                f"{domain.high:g} is above the limit {size_limit(name):,} for {name}",
                source=source,
                key=where,
            )
    return Param(name, domain, when)


def _read_when(raw: Any, source: str, where: str) -> tuple:
    if not isinstance(raw, dict) or not raw:
        raise UserError("expected a mapping {key: value or [values]}", source=source, key=where)
    out = []
    for k, v in raw.items():
        k = str(k)
        _check_key(k, source=source, where=f"{where}.{k}")
        values = tuple(v) if isinstance(v, list) else (v,)
        if not values:
            raise UserError("empty list of values", source=source, key=f"{where}.{k}")
        for value in values:
            _check_value(k, value, source=source, where=f"{where}.{k}")
        out.append((k, values))
    return tuple(sorted(out))


def _order(params: list[Param], source: str) -> list[Param]:
    """Controllers before the parameters they control (stable otherwise); reject cycles."""
    by_name = {p.name: p for p in params}
    ordered: list[Param] = []
    state: dict[str, str] = {}

    def visit(p: Param, chain: list[str]) -> None:
        if state.get(p.name) == "done":
            return
        if state.get(p.name) == "active":
            cycle = " -> ".join([*chain[chain.index(p.name) :], p.name])
            raise UserError(
                f"conditions form a cycle: {cycle}", source=source, key=f"params.{p.name}.when"
            )
        state[p.name] = "active"
        for k, _ in p.when:
            if k in by_name:
                visit(by_name[k], [*chain, p.name])
        state[p.name] = "done"
        ordered.append(p)

    for p in params:
        visit(p, [])
    return ordered


def _check_conditions(space: SearchSpace) -> None:
    names = {p.name: p for p in space.params}
    for p in space.params:
        for k, allowed in p.when:
            if k == p.name:
                raise UserError(
                    "a parameter cannot depend on itself",
                    source=space.source,
                    key=f"params.{p.name}.when",
                )
            ctrl = names.get(k)
            possible = ctrl.domain.values() if ctrl and ctrl.domain.finite else None
            if ctrl is None:
                possible = [space.base_value(k)]
            if possible is not None and not any(v in allowed for v in possible):
                raise UserError(
                    f"can never be active: {k} is never one of {list(allowed)}",
                    source=space.source,
                    key=f"params.{p.name}.when",
                )


def _dry_run_derived(space: SearchSpace) -> None:
    """Resolve the derived values once with the first value of every domain, so that a typo in
    an interpolation is a load-time error rather than a rejection of every candidate."""
    if not space.derived:
        return
    assignment = {}
    for p in space.params:
        d = p.domain
        assignment[p.name] = (
            d.values()[0] if d.finite else (d.low if isinstance(d, Interval) else None)
        )
    tree = apply_assignment(space.base, assignment)
    try:
        resolve_derived(tree, space.derived, strict=False)
    except UserError as err:
        raise UserError(err.detail, source=space.source, key=err.key) from None
