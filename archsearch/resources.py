"""Where the shipped YAML lives, and how a name or a path becomes a file.

The Hydra config tree (`conf/`) and the ready-made search spaces (`search_spaces/`) are installed
as the data packages `archsearch.conf` and `archsearch.search_spaces`. A user names a shipped
file by its stem (`plm_edge`) or any file by path (`./my_space.yaml`).
"""

from __future__ import annotations

import os
import re
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


def looks_like_path(name: str) -> bool:
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
    if looks_like_path(name):
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


# ---- names and output folders -------------------------------------------------------------------

MAX_NAME = 100
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


def check_name(value: object, *, what: str, key: str, source: str | None = None) -> str:
    """A name that becomes a file or folder name (a space, study, architecture or device):
    letters, digits and `_ . + -`, starting with a letter or digit, at most `MAX_NAME`
    characters, so that `runs/<name>` never leaves `runs/`. Raises a `UserError` naming `key`."""
    if not isinstance(value, str) or not _NAME.fullmatch(value) or len(value) > MAX_NAME:
        raise UserError(
            f"{value!r} is not a valid {what} name: use letters, digits, '_', '.', '+' and '-', "
            f"starting with a letter or digit, at most {MAX_NAME} characters",
            source=source,
            key=key,
        )
    return value


def check_writable_dir(path: str | Path, *, key: str) -> Path:
    """A folder that exists and is writable, or can be created: checked before any work starts,
    creating nothing. Raises a `UserError` naming `key`."""
    target = Path(path).expanduser().absolute()
    probe = target
    while not probe.exists() and probe != probe.parent:
        if probe.is_symlink():  # a dangling link
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        where = "is" if probe == target else f"lies under {str(probe)!r}, which is"
        raise UserError(f"{str(target)!r} {where} not a folder", key=key)
    if not probe.exists():
        raise UserError(f"{str(target)!r} cannot be created (a broken link on its way)", key=key)
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"{str(target)!r} is not writable ({str(probe)!r} refuses)", key=key)
    return target
