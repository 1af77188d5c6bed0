"""Atomic files in a trial's run directory: the checkpoint and the saved result.

A file is written to a temporary name in the same folder and renamed over the target
(`os.replace` is atomic on POSIX), so a trial killed mid-write leaves the previous checkpoint
intact and never a truncated one.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

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
    _atomic(Path(run_dir) / CHECKPOINT, lambda f: torch.save(state, f))


def load_checkpoint(run_dir: Path) -> dict[str, Any] | None:
    path = Path(run_dir) / CHECKPOINT
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=False)


def save_json(path: Path, data: Any) -> None:
    _atomic(Path(path), lambda f: f.write(json.dumps(data, indent=1).encode()))
