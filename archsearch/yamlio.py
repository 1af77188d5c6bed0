"""YAML reading and writing shared by every file archsearch reads.

A safe loader (YAML never instantiates Python objects) that also reads `1e9` and `30e6` as
numbers, as OmegaConf and YAML 1.2 do (PyYAML's YAML 1.1 resolver needs `1.0e+9`). It reads only
what a configuration file holds, and rejects the rest with one-line `UserError`s naming the file,
the line and the column:

- UTF-8 text (a byte-order mark is allowed) of at most `MAX_BYTES`; UTF-16/32, other encodings,
  binary files and control characters are refused;
- mappings with string keys, each key once (a duplicate names both lines), sequences, strings,
  integers, finite floats, booleans and null: no NaN or infinity, no `!!binary`, `!!set`,
  `!!timestamp` (a date stays a string) or other tags;
- at most `MAX_DEPTH` levels of nesting and `MAX_NODES` values once aliases are expanded (the
  "billion laughs"), and no alias inside the node it names.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, ClassVar

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from archsearch.errors import UserError

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_NODES", "dumps", "load", "loads"]

MAX_BYTES = 4 * 2**20  # a configuration file, not a data set
MAX_DEPTH = 64  # nesting levels
MAX_NODES = 100_000  # values, aliases expanded

_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f\ud800-\udfff\ufffe\uffff]")
_DROPPED_TAGS = ("binary", "omap", "pairs", "set", "timestamp")


class _Refused(yaml.YAMLError):
    """A document the loader refuses: `problem` at `problem_mark`, in the value at key path
    `key` when known."""

    def __init__(self, problem: str, mark: Any, key: str | None = None):
        self.problem, self.problem_mark, self.key = problem, mark, key
        super().__init__(problem)


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 floats, limits on depth and alias expansion, string keys only,
    no duplicate keys and no tags beyond the core schema."""

    yaml_implicit_resolvers: ClassVar[dict] = {
        first: [(tag, rx) for tag, rx in resolvers if not tag.endswith(":timestamp")]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    yaml_constructors: ClassVar[dict] = {
        tag: fn
        for tag, fn in yaml.SafeLoader.yaml_constructors.items()
        if tag is None or tag.rsplit(":", 1)[-1] not in _DROPPED_TAGS
    }

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0
        self._paths: dict[int, str] = {}  # id(node) -> its key path, for messages

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(
                    f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_document(self, node: Node) -> Any:
        self._paths = _check_expansion(node)
        return super().construct_document(node)

    def construct_mapping(self, node: Node, deep: bool = False) -> dict:
        if isinstance(node, MappingNode):
            lines: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                where = self._paths.get(id(node))
                if not isinstance(key, str):
                    raise _Refused(
                        f"key {key!r} is not a string (quote it: '{key_node.value}')",
                        key_node.start_mark,
                        where,
                    )
                if key in lines:
                    raise _Refused(
                        f"duplicate key {key!r} at lines {lines[key]} and {line}",
                        None,
                        _join(where, key),
                    )
                lines[key] = line
        return super().construct_mapping(node, deep)

    def construct_yaml_float(self, node: Node) -> float:
        value = super().construct_yaml_float(node)
        if not math.isfinite(value):
            raise _Refused(
                f"{node.value!r} is not a finite number", node.start_mark, self._paths.get(id(node))
            )
        return value


_Loader.add_constructor("tag:yaml.org,2002:float", _Loader.construct_yaml_float)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)
        |[-+]?(?:[0-9][0-9_]*)\.[0-9_]*
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _check_expansion(root: Node) -> dict[int, str]:
    """Refuse a node graph whose aliases expand past `MAX_NODES` values or loop back into the
    node they name (iterative: aliases may chain deeper than Python's recursion limit).
    Returns the key path of every node (`params.n_layers`, `constraints[0].max`)."""
    size: dict[int, int] = {}
    paths: dict[int, str] = {id(root): ""}
    open_nodes: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        children = _children(node)
        if not done:
            for child, path in _child_paths(node, paths[id(node)]):
                paths.setdefault(id(child), path)
        if done:
            open_nodes.discard(id(node))
            size[id(node)] = 1 + sum(size[id(c)] for c in children)
            if size[id(node)] > MAX_NODES:
                raise _Refused(f"aliases expand to more than {MAX_NODES:,} values", node.start_mark)
            continue
        if id(node) in size:
            continue
        open_nodes.add(id(node))
        stack.append((node, True))
        for child in children:
            if id(child) in open_nodes:
                raise _Refused("an alias refers to the node that contains it", child.start_mark)
            if id(child) not in size:
                stack.append((child, False))
    return paths


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _child_paths(node: Node, path: str) -> list[tuple[Node, str]]:
    if isinstance(node, SequenceNode):
        return [(child, f"{path}[{i}]") for i, child in enumerate(node.value)]
    if isinstance(node, MappingNode):
        return [pair for k, v in node.value for pair in ((k, path), (v, _join(path, str(k.value))))]
    return []


def _join(path: str | None, key: str) -> str:
    return f"{path}.{key}" if path else key


def _decode(data: bytes, source: str | None) -> str:
    """UTF-8 text (with or without a byte-order mark), or a `UserError` saying what it is."""

    def refuse(what: str) -> UserError:
        return UserError(f"{what}; save the file as UTF-8 text", source=source)

    if data.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        raise refuse("this is UTF-32 text")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise refuse("this is UTF-16 text")
    head = data[:64]
    nuls = sorted((head[0::2].count(0), head[1::2].count(0)))  # UTF-16 of ASCII: [0, most]
    if len(head) >= 4 and nuls[0] == 0 and nuls[1] * 4 >= len(head):
        raise refuse("this looks like UTF-16 text (a NUL in every other byte)")
    lanes = [head[i::4] for i in range(4)]  # UTF-32 of ASCII: one lane of text, three of NULs
    if len(head) >= 8 and sorted(lane.count(0) == len(lane) for lane in lanes) == [0, 1, 1, 1]:
        raise refuse("this looks like UTF-32 text (three NULs in every four bytes)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise refuse(
            f"not UTF-8 text: byte 0x{data[err.start]:02x} at line {line}, column {column}"
        ) from None


def loads(text: str, *, source: str | None = None) -> Any:
    bad = _CONTROL.search(text)
    if bad:
        line = text.count("\n", 0, bad.start()) + 1
        column = bad.start() - (text.rfind("\n", 0, bad.start()) + 1) + 1
        raise UserError(
            f"control character U+{ord(bad.group()):04X} at line {line}, column {column}",
            source=source,
        )
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "syntax error"
        key = getattr(err, "key", None) or None
        raise UserError(f"malformed YAML: {problem}{where}", source=source, key=key) from None


def load(path: str | Path) -> Any:
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as err:
        raise UserError(f"cannot read file: {err.strerror}", source=str(path)) from None
    if len(data) > MAX_BYTES:
        raise UserError(
            f"larger than {MAX_BYTES // 2**20} MiB: not a configuration file", source=str(path)
        )
    return loads(_decode(data, str(path)), source=str(path))


def dumps(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
