"""Atomic files in a trial's run directory: the checkpoint and the saved result.

A file is written to a temporary name in the same folder and renamed over the target
(`os.replace` is atomic on POSIX), so a trial killed mid-write leaves the previous checkpoint
intact and never a truncated one.
"""

from __future__ import annotations

import json
import os
import pickle
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from archsearch.errors import UserError
from archsearch.units import json_safe

CHECKPOINT = "checkpoint.pt"
RESULT = "result.json"


def _atomic(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_checkpoint(run_dir: Path, state: dict[str, Any]) -> None:
    """Save tensors and plain data only (what `load_checkpoint` reads back)."""
    plain = _plain(state)
    _atomic(Path(run_dir) / CHECKPOINT, lambda f: torch.save(plain, f))


def _plain(value: Any) -> Any:
    """Containers rebuilt with plain `str`s (e.g. `torch.__version__` is a `TorchVersion`, a
    class the safe loader refuses); tensors and numbers kept as they are."""
    if isinstance(value, str):
        return str(value)
    if type(value) in (dict, OrderedDict):
        return type(value)((k, _plain(v)) for k, v in value.items())
    if type(value) in (list, tuple):
        return type(value)(_plain(v) for v in value)
    return value


def load_checkpoint(run_dir: Path) -> dict[str, Any] | None:
    """The saved state, or None when there is none. A checkpoint is tensors and plain data
    (`weights_only=True`: no pickled object can run code); anything else is a `UserError`."""
    path = Path(run_dir) / CHECKPOINT
    if not path.is_file():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        reason = "it holds Python objects beyond tensors and plain data"
    except Exception as err:  # any unreadable file: zip, EOF or torch errors
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
    else:
        reason = None
    if reason is not None:
        raise UserError(
            f"not a checkpoint of tensors and plain data ({reason}); delete it or use a "
            "fresh run_dir",
            source=str(path),
            key="resume",
        )
    if not isinstance(state, dict) or not isinstance(state.get("key"), str):
        raise UserError(
            "not an archsearch checkpoint (no trial key); delete it or use a fresh run_dir",
            source=str(path),
        )
    return state


def save_json(path: Path, data: Any) -> None:
    text = json.dumps(json_safe(data), indent=1, allow_nan=False)  # NaN: null
    _atomic(Path(path), lambda f: f.write(text.encode()))
