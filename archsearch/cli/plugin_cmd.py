"""`archsearch check-mixer`: the conformance kit (`archsearch.models.conformance`) on a mixer."""

from __future__ import annotations

import importlib
from typing import Any

from archsearch.cli import output
from archsearch.errors import UserError


def _resolve(spec: str) -> tuple[type, Any]:
    """(class, architecture to check it at) of `module:Class`, a plugin name or a built-in."""
    from archsearch.arch import ArchConfig, AttentionConfig, LayersConfig, MCSDConfig
    from archsearch.models import sequence_mixer_class

    if ":" in spec:  # an import path typed on the command line: the user's explicit request
        module_name, _, attr = spec.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except Exception as err:
            raise UserError(
                f"cannot import {spec!r}: {type(err).__name__}: {err}", key="mixer"
            ) from err
        if not isinstance(obj, type):
            raise UserError(f"{spec!r} is not a class", key="mixer")
        return obj, None
    attention = {"attention": AttentionConfig(kind="gqa", n_heads=4, n_kv_heads=2)}
    attention["mla"] = AttentionConfig(kind="mla", n_heads=4, kv_rank=16)
    if spec in attention:
        return sequence_mixer_class(spec), ArchConfig(
            vocab_size=64, d_model=32, n_layers=1, attention=attention[spec]
        )
    if spec == "mcsd":
        return sequence_mixer_class(spec), ArchConfig(
            vocab_size=64,
            d_model=32,
            n_layers=1,
            layers=LayersConfig(pattern="M"),
            mcsd=MCSDConfig(n_channels=4),
        )
    from archsearch.arch import LINEAR_FAMILIES, known_names
    from archsearch.plugins import MIXERS, is_plugin

    if spec in LINEAR_FAMILIES or is_plugin(MIXERS, spec):
        return sequence_mixer_class(spec), None
    known = ", ".join(["attention", "mla", "mcsd", *known_names("linear.family")])
    raise UserError(
        f"unknown mixer {spec!r}: give module:Class or a registered name (known: {known})",
        key="mixer",
    )


def check_mixer_cmd(_sub: str | None, cfg: Any) -> int:
    from dataclasses import replace

    from archsearch.models.conformance import ContractViolation, check_mixer, plugin_arch

    if not cfg.mixer:
        raise UserError("name the mixer: module:Class or a registered name", key="mixer")
    for key in ("d_model", "tokens", "batch"):
        if getattr(cfg, key) <= 0:
            raise UserError(f"must be positive, got {getattr(cfg, key)}", key=key)
    if cfg.tokens < 4:
        raise UserError(f"needs at least 4 tokens, got {cfg.tokens}", key="tokens")
    cls, arch = _resolve(cfg.mixer)
    if arch is None:
        arch = plugin_arch(cfg.d_model)
        if ":" not in cfg.mixer:
            arch = replace(arch, linear=replace(arch.linear, family=cfg.mixer)).resolved()
    checks = check_mixer(cls, arch, batch=cfg.batch, tokens=cfg.tokens)
    if cfg.format == "json":
        output.print_json(
            {
                "mixer": cfg.mixer,
                "checks": [c.__dict__ for c in checks],
                "ok": all(c.ok for c in checks),
            }
        )
    else:
        rows = [[c.name, "ok" if c.ok else "FAILED", c.detail] for c in checks]
        output.console().print(output.table(f"check-mixer {cfg.mixer}", ["check", "", ""], rows))
    failed = [c for c in checks if not c.ok]
    if failed:
        raise ContractViolation(
            f"{cfg.mixer} fails " + "; ".join(f"{c.name}: {c.detail}" for c in failed),
            key="mixer",
        )
    return 0
