"""Every key of a command as data: its path, type, default and help.

The type comes from the command's typed schema (`archsearch.cli.schemas`), the default from the
composed configuration, the help from the documented line of `conf/<command>.yaml` (comment
lines that follow a key continue its help) or else the schema field's `help` metadata
(`TrainConfig`'s settings). `archsearch <command> --help` prints the same keys; the command
reference of the documentation is generated from `command_keys`.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass
from enum import Enum
from typing import Any

from archsearch import DOCS_URL

__all__ = ["Key", "command_keys", "command_page", "type_name", "yaml_comments", "yaml_value"]

_KEY_LINE = re.compile(r"^(\s*)([A-Za-z_][A-Za-z0-9_-]*):(.*)$")


@dataclass(frozen=True)
class Key:
    """One setting of a command: `storage.url`, `str or null`, `null`, "SQLAlchemy URL ..."."""

    path: str
    type: str
    default: str  # as the YAML would spell it
    help: str


def command_page(name: str) -> str:
    """The address of a command's page in the documentation."""
    return f"{DOCS_URL}reference/commands/{name}/"


def command_keys(name: str) -> list[Key]:
    """Every key of command `name` (nested sections flattened to key paths), in schema order."""
    from omegaconf import OmegaConf

    from archsearch.cli import COMMANDS
    from archsearch.cli.config import compose
    from archsearch.cli.schemas import SCHEMAS
    from archsearch.resources import conf_dir

    config = COMMANDS[name].config
    defaults = OmegaConf.to_container(compose(config, []), enum_to_str=True)
    comments = yaml_comments((conf_dir() / f"{config}.yaml").read_text())
    return list(_walk(SCHEMAS[config], defaults, comments, ""))


def _walk(schema: type, defaults: dict, comments: dict[str, str], prefix: str):
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        path, tp = f"{prefix}{f.name}", hints[f.name]
        value = defaults.get(f.name)
        if dataclasses.is_dataclass(tp):
            yield from _walk(tp, value or {}, comments, f"{path}.")
            continue
        text = comments.get(path) or f.metadata.get("help", "")
        yield Key(path, type_name(tp), yaml_value(value), text)


def type_name(tp: Any) -> str:
    """A schema type in the words of a YAML user: `int`, `str or null`, `list of int`,
    `one of: table, json`, `mapping`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        name = " or ".join(type_name(a) for a in inner)
        return f"{name} or null" if len(inner) < len(args) else name
    if origin in (list, tuple):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict or tp is dict:
        return "mapping"
    if isinstance(tp, type) and issubclass(tp, Enum):
        return "one of: " + ", ".join(str(m.value) for m in tp)
    return getattr(tp, "__name__", str(tp))


def yaml_value(value: object) -> str:
    """A default as the YAML would spell it (`null`, `true`, `[a, b]`, an enum's value)."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(yaml_value(v) for v in value)}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {yaml_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def yaml_comments(text: str) -> dict[str, str]:
    """A command YAML's key paths -> their documented help: the comment on the key's line and
    the comment-only lines that follow it (the file's header comment and the defaults list
    belong to no key)."""
    out: dict[str, list[str]] = {}
    stack: list[tuple[int, str]] = []  # (indent, key) of the enclosing keys
    current: list[str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            if current is not None:
                current.append(stripped.lstrip("#").strip())
            continue
        match = _KEY_LINE.match(line)
        if match is None or match.group(2) == "defaults":
            current = None
            continue
        indent = len(match.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match.group(2)))
        _, _, comment = match.group(3).partition(" #")
        current = out.setdefault(".".join(k for _, k in stack), [])
        if comment.strip():
            current.append(comment.strip())
    return {path: " ".join(lines) for path, lines in out.items() if lines}
