"""Enumerated settings are Enum fields: Hydra rejects a value outside the enumeration when it
composes the config, and the error is one line naming the key, the value and the known values."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from archsearch.cli import COMMANDS, main
from archsearch.cli.config import compose
from archsearch.cli.schemas import SCHEMAS
from archsearch.trainers.config import Choice


def enum_keys(schema: type, prefix: str = "") -> dict[str, type[Choice]]:
    """Every key typed as a `Choice`, nested sections included (`latency.mode`)."""
    out = {}
    for name, tp in typing.get_type_hints(schema).items():
        if isinstance(tp, type) and issubclass(tp, Choice):
            out[prefix + name] = tp
        elif dataclasses.is_dataclass(tp):
            out.update(enum_keys(tp, f"{prefix}{name}."))
    return out


CASES = [
    (name, key, enum)
    for name, cmd in COMMANDS.items()
    for key, enum in enum_keys(SCHEMAS[cmd.config]).items()
]
# words Hydra's override grammar reads as something other than a string
NOT_STRINGS = {"true", "false", "null", "nan", "inf"}


def test_every_enumerated_setting_is_an_enum():
    keys = {(name, key) for name, key, _ in CASES}
    assert {(name, "format") for name in COMMANDS} <= keys
    expected = {
        ("sweep", "sampler"),
        ("sweep", "early_stopping"),
        ("sweep", "latency.mode"),
        ("cost", "precision"),
        ("profile", "precision"),
        *(("train", k) for k in ("schedule", "tokenizer", "objective", "precision")),
    }
    assert expected <= keys


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


# capsys is read (and so emptied) on every example
@pytest.mark.slow
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    case=st.sampled_from(CASES),
    value=st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True),
)
def test_a_bad_enum_value_is_one_line_naming_the_key(case, value, capsys):
    name, key, enum = case
    known = [m.value for m in enum]
    assume(value not in known and value not in NOT_STRINGS)
    sub = list(COMMANDS[name].subcommands[:1])
    assert main([name, *sub, f"{key}={value}"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert f"error: {key}: unknown {key.replace('.', ' ')} {value!r}" in err, err
    assert f"(known: {', '.join(known)})" in err, err


def test_a_composition_reads_its_defaults_whatever_was_composed_before():
    """A command's schema is stored once per process and every composition reads a copy: one
    with an enumerated key set to another value leaves the defaults of the next unchanged."""
    first: dict[str, dict] = {}  # each command's defaults, composed before any other value
    for name, key, enum in CASES:  # the yaml sets some keys, the schema alone the others
        config = COMMANDS[name].config
        if config not in first:
            first[config] = OmegaConf.to_container(compose(config, []), enum_to_str=True)
        defaults = first[config]
        default = OmegaConf.select(OmegaConf.create(defaults), key)
        value = next(m.value for m in enum if m.value != default)
        changed = OmegaConf.to_container(compose(config, [f"{key}={value}"]), enum_to_str=True)
        assert OmegaConf.select(OmegaConf.create(changed), key) == value
        assert OmegaConf.to_container(compose(config, []), enum_to_str=True) == defaults
