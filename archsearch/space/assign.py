"""Applying an assignment: parameter values set into the base architecture tree, then the
derived values resolved by OmegaConf interpolation with the space language's arithmetic
resolvers (`div`, `mul`, `round_to`, ...).

The space loader uses this once per file (a dry run that turns a broken expression into a load
error) and `candidates.build` once per candidate.
"""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Callable
from typing import Any

from archsearch.errors import UserError


class DerivedError(ValueError):
    """A derived value that cannot be computed for this candidate (e.g. inexact division)."""

    def __init__(self, reason: str, message: str):
        self.reason = reason
        super().__init__(message)


def set_path(tree: dict, key: str, value: Any) -> None:
    """tree["a"]["b"] = value for key "a.b", creating (or replacing null) sections on the way."""
    node = tree
    *parents, leaf = key.split(".")
    for part in parents:
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
    node[leaf] = value


def apply_assignment(base: dict, assignment: dict[str, Any]) -> dict:
    """A copy of the base architecture with the assigned values set and an empty `vars`
    section for the free variables."""
    tree = copy.deepcopy(base)
    tree["vars"] = {}
    for key, value in assignment.items():
        set_path(tree, key, value)
    return tree


# ---- derived values ---------------------------------------------------------------------------


def _div(a: Any, b: Any) -> int:
    if b == 0:
        raise DerivedError("derived_division_by_zero", f"{a} / 0")
    if isinstance(a, int) and isinstance(b, int):
        if a % b:
            raise DerivedError("derived_not_whole", f"{a} is not divisible by {b}")
        return a // b
    return a / b


def _round_to(x: Any, multiple: Any) -> int:
    """Nearest multiple of `multiple` (at least one multiple)."""
    return max(int(multiple), int(multiple) * round(x / multiple))


# the space language's resolvers: name -> (function, what it computes)
RESOLVERS: dict[str, tuple[Callable[..., Any], str]] = {
    "div": (_div, "a / b; an inexact division of integers rejects the candidate"),
    "floordiv": (lambda a, b: a // b, "a // b, rounded down"),
    "mul": (lambda a, b: a * b, "a * b"),
    "add": (lambda a, b: a + b, "a + b"),
    "sub": (lambda a, b: a - b, "a - b"),
    "min": (lambda *xs: min(xs), "the least of its arguments"),
    "max": (lambda *xs: max(xs), "the largest of its arguments"),
    "int": (lambda x: int(x), "x rounded towards zero"),
    "round_to": (_round_to, "x rounded to the nearest multiple of `multiple` (at least one)"),
}


def _per_candidate(name: str, fn):
    """`fn` with arithmetic failures (`x // 0`, overflow) turned into a `DerivedError`: they
    reject the candidate whose values caused them, not the space."""

    def resolver(*args: Any) -> Any:
        try:
            return fn(*args)
        except ArithmeticError as err:
            failure = f"{name}{args}: {err}"
        raise DerivedError("derived_arithmetic_error", failure)  # raised alone: the root cause

    return resolver


@functools.lru_cache(maxsize=4096)
def _nodes(expr: str) -> tuple[Any, ...]:
    """Every node of `expr`'s OmegaConf parse tree (`ValueError` if it does not parse)."""
    from omegaconf import grammar_parser
    from omegaconf.errors import GrammarParseError

    try:
        stack = [grammar_parser.parse(expr, parser_rule="configValue")]
    except GrammarParseError as err:
        raise ValueError(f"cannot parse {expr!r}: {str(err).splitlines()[0]}") from None
    out = []
    while stack:
        out.append(node := stack.pop())
        stack.extend(node.getChildren() if hasattr(node, "getChildren") else ())
    return tuple(out)


def check_expression(expr: str) -> None:
    """Raise `ValueError` unless `expr` calls only the space language's resolvers (`div`,
    `mul`, ...): OmegaConf's own (`oc.env`, `oc.decode`, `oc.create`, ...) and any other
    registered resolver are not reachable from a space file."""
    from omegaconf.grammar.gen.OmegaConfGrammarParser import OmegaConfGrammarParser

    for node in _nodes(expr):
        if isinstance(node, OmegaConfGrammarParser.ResolverNameContext):
            name = node.getText()
            if name not in RESOLVERS:
                raise ValueError(
                    f"{expr!r} calls the resolver {name!r}, which is not part of the space "
                    f"language (known: {', '.join(RESOLVERS)})"
                )


def references(expr: str) -> tuple[str, ...] | None:
    """The absolute key paths a checked expression reads (`${d_model}`, `${vars.mult}`); None
    when one is relative (`${.x}`), indexed (`${a[0]}`) or built from another (`${a.${b}}`)."""
    from omegaconf.grammar.gen.OmegaConfGrammarParser import OmegaConfGrammarParser

    out = []
    for node in _nodes(expr):
        if isinstance(node, OmegaConfGrammarParser.InterpolationNodeContext):
            path = node.getText()[2:-1]
            if path.startswith(".") or "[" in path or "$" in path:
                return None
            out.append(path)
    return tuple(out)


def _read_by(tree: dict, derived: dict[str, str]) -> dict | None:
    """The part of `tree` its derived values read: their own keys and the paths their
    expressions name (sharing `tree`'s values); None when an expression's references are not
    plain paths or one is not in `tree` (then all of `tree` is resolved, as OmegaConf would)."""
    paths = set(derived)
    for expr in derived.values():
        refs = references(expr)
        if refs is None:
            return None
        paths.update(refs)
    part: dict = {}
    for path in sorted(paths, key=lambda p: p.count(".")):  # a section before its keys
        node: Any = tree
        for name in path.split("."):
            if not isinstance(node, dict) or name not in node:
                return None
            node = node[name]
        set_path(part, path, node)
    return part


def _register_resolvers() -> None:
    """Register the arithmetic resolvers with OmegaConf (idempotent)."""
    from omegaconf import OmegaConf

    for name, (fn, _) in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, _per_candidate(name, fn))


RESOLVED_KEPT = 4096  # resolutions kept by what they read (a space's candidates share few)
_resolved: dict[str, dict[str, Any]] = {}
_resolved_lock = threading.Lock()


def resolve_derived(tree: dict, derived: dict[str, str], *, strict: bool = True) -> dict:
    """Fill the derived values of `tree` (an architecture dict plus `vars`) by OmegaConf
    interpolation. Raises, for the first derived key in order that fails, `DerivedError` for a
    candidate-specific failure (not `strict`: that key is left out) and `UserError` (naming
    `derived.KEY`) for a broken expression."""
    if not derived:
        return tree
    for key, expr in derived.items():
        try:
            check_expression(expr)
        except ValueError as err:
            raise UserError(str(err), key=f"derived.{key}") from None
        set_path(tree, key, expr)
    # OmegaConf builds a node per value it is given and parses each expression twice (at
    # `create` and `select`; OmegaConf 2.3 keeps no parse): only what the expressions read is
    # given, and a resolution is kept by what it read, which a space's candidates share (the
    # values of a few parameters decide every derived value). `repr` tells 1, 1.0 and True apart.
    part = _read_by(tree, derived)
    if part is None:
        outcome = _resolve(tree, derived)
    else:
        memo = repr((part, derived))
        with _resolved_lock:
            outcome = _resolved.get(memo)
        if outcome is None:
            outcome = _resolve(part, derived)
            with _resolved_lock:
                if len(_resolved) >= RESOLVED_KEPT:
                    del _resolved[next(iter(_resolved))]
                _resolved[memo] = outcome
    for value in outcome.values():  # new errors each time: a kept one would collect tracebacks
        if isinstance(value, UserError):
            raise UserError(value.detail, key=value.key)
        if isinstance(value, DerivedError) and strict:
            raise DerivedError(value.reason, str(value))
    for key, value in outcome.items():
        if not isinstance(value, DerivedError):
            set_path(tree, key, copy.deepcopy(value))
    return tree


def _resolve(tree: dict, derived: dict[str, str]) -> dict[str, Any]:
    """Each derived key's value in `tree` (whose derived keys hold their expressions), or what
    stops it: the `DerivedError` that rejects the candidate, or the `UserError` of a broken
    expression."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    _register_resolvers()
    conf = OmegaConf.create(tree)
    out: dict[str, Any] = {}
    for key in derived:
        try:
            out[key] = OmegaConf.select(conf, key, throw_on_missing=True)
        except OmegaConfBaseException as err:
            cause = _root_cause(err)
            if isinstance(cause, DerivedError):
                out[key] = DerivedError(cause.reason, f"derived.{key}: {cause}")
            else:
                msg = " ".join(str(err).split("\n")[0].split())
                out[key] = UserError(
                    f"cannot resolve {derived[key]!r}: {msg}", key=f"derived.{key}"
                )
        except DerivedError as err:
            out[key] = DerivedError(err.reason, f"derived.{key}: {err}")
    return out


def _root_cause(err: BaseException) -> BaseException:
    seen = set()
    while id(err) not in seen and (err.__cause__ or err.__context__) is not None:
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return err
