"""Plugins by name: mixers and device profiles that installed packages register.

A package registers objects under Python entry-point groups (in its `pyproject.toml`):

    [project.entry-points."archsearch.mixers"]            # sequence mixers (`linear.family`)
    "my_pkg.hyena" = "my_pkg.hyena:Hyena"
    [project.entry-points."archsearch.channel_mixers"]    # channel mixers (`ffn.kind`)
    "my_pkg.glu" = "my_pkg.ffn:MyGLU"
    [project.entry-points."archsearch.devices"]           # device profiles (`device=`)
    "my_pkg.board" = "my_pkg:BOARD_YAML"                  # a path to a profile YAML

A plugin's name must contain a dot (`package.name`), so it can never shadow a built-in name.
Discovery reads only the installed distributions' metadata (no plugin is imported, torch is
not imported) and is cached; a plugin's object is imported when something is built or priced
from it. YAML names a plugin exactly like a built-in and never imports arbitrary Python: only
names registered by installed packages resolve.
"""

from __future__ import annotations

from functools import cache
from importlib import metadata
from typing import Any

from archsearch.errors import UserError

MIXERS = "archsearch.mixers"
CHANNEL_MIXERS = "archsearch.channel_mixers"
DEVICES = "archsearch.devices"
GROUPS = (MIXERS, CHANNEL_MIXERS, DEVICES)

# the ArchConfig field whose value names a plugin of each group
FIELD_GROUP = {"linear.family": MIXERS, "ffn.kind": CHANNEL_MIXERS}

__all__ = [
    "CHANNEL_MIXERS",
    "DEVICES",
    "FIELD_GROUP",
    "GROUPS",
    "MIXERS",
    "PluginError",
    "is_plugin",
    "load",
    "names",
    "refresh",
]


class PluginError(UserError):
    """A registered plugin that cannot be loaded or does not do what its group requires."""


@cache
def _entry_points(group: str) -> dict[str, metadata.EntryPoint]:
    found = {}
    for ep in metadata.entry_points(group=group):
        if "." in ep.name and ep.name not in found:
            found[ep.name] = ep
    return found


def names(group: str) -> tuple[str, ...]:
    """The plugin names installed for a group, sorted (metadata only: nothing is imported)."""
    return tuple(sorted(_entry_points(group)))


def is_plugin(group: str, name: Any) -> bool:
    return isinstance(name, str) and name in _entry_points(group)


@cache
def load(group: str, name: str) -> Any:
    """The object a plugin registers (imported on first use, then cached)."""
    ep = _entry_points(group).get(name)
    if ep is None:
        known = ", ".join(names(group)) or "none installed"
        raise PluginError(f"no plugin {name!r} in entry-point group {group} (known: {known})")
    try:
        return ep.load()
    except Exception as err:
        raise PluginError(
            f"plugin {name!r} ({ep.value}) could not be imported: {type(err).__name__}: {err}"
        ) from err


def refresh() -> None:
    """Forget what was discovered (after installing a package into a running process)."""
    _entry_points.cache_clear()
    load.cache_clear()
