"""Compose a command's configuration with Hydra.

Each command has a primary config `conf/<name>.yaml` (the documented defaults, or for `train`
only those `TrainConfig` does not declare) whose defaults list starts with a typed schema (a
dataclass registered in Hydra's ConfigStore), so Hydra checks every `key=value` override for
unknown keys, wrong types and values outside an enumeration. We use Hydra's compose API rather
than `@hydra.main`: a command must not change the working directory or write Hydra's output
folders, and every Hydra error must become a one-line `UserError`.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from typing import Any

from archsearch.errors import UserError

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*")  # n, ray.address


def _register_schema(name: str) -> None:
    """Store command `name`'s schema in Hydra's ConfigStore, once per process: its config's
    defaults list names only its own, and a load from the store is a deep copy, so no
    composition changes what a later one reads (an in-process caller, a test, composes many)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from archsearch.cli import schemas

    cs = ConfigStore.instance()
    if f"{name}_schema.yaml" in cs.list(""):
        return
    node = OmegaConf.structured(schemas.SCHEMAS[name])
    # a frozen dataclass (TrainConfig) makes a read-only node; the yaml and the overrides must
    # still be merged onto it (the instance `to_schema` builds stays frozen)
    OmegaConf.set_readonly(node, None)
    cs.store(name=f"{name}_schema", node=node)


def _list_keys(schema: type) -> set[str]:
    """Top-level keys typed as lists (or tuples): `key=a,b,c` on the command line means a list
    there."""
    out = set()
    for name, tp in typing.get_type_hints(schema).items():
        union = typing.get_origin(tp) in (typing.Union, types.UnionType)
        inner = [a for a in typing.get_args(tp) if a is not type(None)] if union else [tp]
        if any(typing.get_origin(a) in (list, tuple) for a in inner):
            out.add(name)
    return out


def _dict_keys(schema: type) -> set[str]:
    """Top-level keys typed as free mappings (the `train` settings of a sweep): their sub-keys
    are checked by the code that reads them (naming `train.KEY`), not by the schema."""
    return {
        name for name, tp in typing.get_type_hints(schema).items() if typing.get_origin(tp) is dict
    }


def _rewrite_lists(
    overrides: list[str], list_keys: set[str], group_keys: set[str], dict_keys: set[str]
) -> tuple[list[str], dict[str, Any]]:
    """Prepare `key=value` overrides for Hydra.

    `key=a,b,c` becomes a list for list-typed keys. Keys named like a folder of the config tree
    (`arch=` beside conf/arch/, `device=` beside conf/device/) would be read by Hydra as a config
    group choice, and sub-keys of free mappings (`train.lr=`) are not in the schema: both are
    returned apart, parsed, and set after composing; there `a,b,c` is the string "a,b,c"."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    out, later = [], {}
    for text in overrides:
        try:
            ov = parser.parse_override(text)
        except HydraException as err:
            raise UserError(_one_line(err), key=text) from None
        value = ov.value()
        key = ov.key_or_group
        simple = isinstance(value, ChoiceSweep) and value.simple_form
        if key in group_keys or ("." in key and key.split(".", 1)[0] in dict_keys):
            later[key] = ",".join(map(str, value.list)) if simple else value
            continue
        if key in list_keys and simple:
            text = f"{key}=[{','.join(map(str, value.list))}]"
        elif key in list_keys and isinstance(value, (str, int, float)):
            text = f"{key}=[{value}]"
        out.append(text)
    return out, later


def compose(name: str, overrides: list[str]) -> Any:
    """Compose `conf/<name>.yaml` with `key=value` overrides; returns a DictConfig."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from archsearch.cli import schemas
    from archsearch.resources import conf_dir

    for text in overrides:
        if "=" not in text:
            raise UserError(f"expected key=value, got {text!r} (see --help)")
        if text.startswith(("+", "~")):
            raise UserError(
                f"{text!r}: keys cannot be added or removed; set a known key "
                "with key=value (see --help)"
            )
        key, value = text.split("=", 1)
        if not _KEY.fullmatch(key):
            raise UserError(
                f"expected key=value with a key such as n or ray.address, got {text!r} (see --help)"
            )
        if "${" in value:  # OmegaConf would resolve it: read an environment variable, say
            raise UserError(
                f"{value!r} holds an interpolation; values on the command line are taken literally",
                key=key,
            )
    _register_schema(name)
    schema = schemas.SCHEMAS[name]
    groups = {p.name for p in conf_dir().iterdir() if p.is_dir()}
    fields = {f.name for f in dataclasses.fields(schema)}
    overrides, later = _rewrite_lists(
        overrides, _list_keys(schema), groups & fields, _dict_keys(schema)
    )
    try:
        with initialize_config_dir(
            config_dir=str(conf_dir()), version_base="1.3", job_name=f"archsearch_{name}"
        ):
            cfg = hydra_compose(config_name=name, overrides=overrides)
        for key, value in later.items():
            OmegaConf.update(cfg, key, value, merge=False, force_add="." in key)
        return cfg
    except (HydraException, OmegaConfBaseException) as err:
        raise UserError(_one_line(err)) from None


def _one_line(err: BaseException) -> str:
    """Hydra's messages span lines and mention internals; keep what a user needs:
    `key 'n': Value 'abc' of type 'str' could not be converted to Integer`, or for a value
    outside an enumeration `format: unknown format 'xml' (known: table, json)`."""
    from omegaconf.nodes import EnumNode

    from archsearch.trainers.config import unknown_choice

    cause = err.__cause__ if err.__cause__ is not None else err
    node = getattr(cause, "child_node", None)
    if isinstance(node, EnumNode) and getattr(cause, "full_key", None):
        key = str(cause.full_key)
        return f"{key}: {unknown_choice(key, cause.value, node.enum_type)}"
    if str(cause) in ("", "None"):  # e.g. an ANTLR parse error: the message is on err
        cause = err
    lines = [ln.strip() for ln in str(cause).splitlines() if ln.strip()]
    key = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("full_key:")), None)
    text = " ".join(ln for ln in lines if not ln.startswith(("full_key:", "object_type")))
    if text.startswith("Key '") and " not in " in text:
        return f"unknown key {key or text.split(chr(39))[1]!r} for this command (see --help)"
    return f"key {key!r}: {text}" if key else text


def to_schema(name: str, cfg: Any) -> Any:
    """The composed config as the command's schema dataclass instance."""
    from omegaconf import OmegaConf

    from archsearch.cli import schemas

    obj = OmegaConf.to_object(cfg)
    assert dataclasses.is_dataclass(obj) and isinstance(obj, schemas.SCHEMAS[name])
    return obj
