"""Typed schemas of the commands' configs (their defaults live in `conf/<command>.yaml`).

Hydra validates every override against these: an unknown key or a value of the wrong type is
rejected before any work starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING


@dataclass
class SpaceConfig:
    search_space: str = MISSING
    space_file: str | None = MISSING
    n: int = MISSING
    seed: int = MISSING
    format: str = MISSING


SCHEMAS: dict[str, type] = {
    "space": SpaceConfig,
}
