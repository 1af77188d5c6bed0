"""Where the shipped YAML lives, and how a name or a path becomes a file.

The Hydra config tree (`conf/`) and the ready-made search spaces (`search_spaces/`) are installed
as the data packages `archsearch.conf` and `archsearch.search_spaces`. A user names a shipped
file by its stem (`plm_edge`) or any file by path (`./my_space.yaml`).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

from archsearch.errors import UserError


@cache
def conf_dir() -> Path:
    """The Hydra config tree (`conf/`)."""
    return Path(str(resources.files("archsearch.conf")))


@cache
def spaces_dir() -> Path:
    """The ready-made search spaces (`search_spaces/`)."""
    return Path(str(resources.files("archsearch.search_spaces")))


def shipped_names(folder: Path) -> list[str]:
    """Stems of the YAML files in a folder, sorted."""
    return sorted(p.stem for p in folder.glob("*.yaml"))


def _looks_like_path(name: str) -> bool:
    """A YAML file name or anything with a directory separator, rather than a shipped name."""
    return name.endswith((".yaml", ".yml")) or "/" in name or "\\" in name


def resolve(name: str, folder: Path, what: str, key: str) -> Path:
    """Turn a shipped name or a file path into an existing file, or raise a `UserError`.

    `what` names the kind of thing for the message ("search space", "architecture preset"),
    `key` the command-line key that carried it.
    """
    if not isinstance(name, str) or not name:
        raise UserError(
            f"expected the name of a {what} or a path to a YAML file, got {name!r}", key=key
        )
    if _looks_like_path(name):
        path = Path(name).expanduser()
        if not path.is_file():
            raise UserError(f"{what} file {name!r} does not exist", key=key)
        return path
    path = folder / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(shipped_names(folder)) or "none"
        raise UserError(
            f"unknown {what} {name!r} (known: {known}; or give a path to a .yaml file)", key=key
        )
    return path
