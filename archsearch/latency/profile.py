"""Device profile files: the one reader and writer, and the one format of a fitted predictor.

A profile is YAML (`cost.devices.parse_device` checks what a person reads: figures, sources,
provenance, validation). A calibrated profile's learned predictor (`predict.Predictor`) is data
beside it, in `<stem>.fitted.json`, which the YAML names by file, format and hash:

    fitted: {file: local.fitted.json, format: archsearch.fitted/2, sha256: <hex>}

The data file is `{"format": "archsearch.fitted/2", "predictor": {...}}` (`FORMAT`). A profile
of an earlier format (its fit in the YAML, or an earlier data file) is refused in one line that
says to recalibrate. The data file is fixed by the profile's own name (a profile cannot make
archsearch read another file) and must hash to the YAML's `sha256` (data of another
calibration, or a profile copied without its data, is an error rather than other latencies).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from functools import cache
from pathlib import Path
from typing import Any

from archsearch import yamlio
from archsearch.cost import devices
from archsearch.cost.devices import LOCAL, DeviceProfile, parse_device
from archsearch.errors import UserError
from archsearch.latency.kernels import KERNELS, PHASES
from archsearch.latency.predict import WORK, KernelFit, Memory, Passes, Predictor
from archsearch.latency.trees import parse as parse_trees

__all__ = ["FORMAT", "all_devices", "fitted_path", "load_device", "parse_profile"]
__all__ += ["predictor_dict", "read_profile", "strict_json", "write_profile"]

FORMAT = "archsearch.fitted/2"
MAX_FITTED_BYTES = 64 * 2**20
RECALIBRATE = "re-run `archsearch calibrate` to measure this device again"
MEMORY = ("stall_s", "lo", "hi", "miss_s", "overlap")
TEXTS = ("runtime", "torch", "date", "cpu")


def fitted_path(path: str | Path) -> Path:
    """`local.yaml` -> `local.fitted.json` in the same folder."""
    return Path(path).with_suffix(".fitted.json")


def read_profile(path: str | Path) -> dict[str, Any]:
    """A profile as plain data: its YAML, with the `predictor` of the data file its `fitted:`
    entry names in place of that entry."""
    raw, data = yamlio.load(path), fitted_path(path)

    def fail(what: str, key: str = "fitted") -> UserError:
        return UserError(what, source=str(path), key=key)

    if not isinstance(raw, dict):
        return raw
    earlier = sorted({"kernels", "matmul_table"} & set(raw))
    if earlier:
        raise fail(f"a profile of an earlier archsearch: {RECALIBRATE}", earlier[0])
    if "predictor" in raw:
        raise fail(f"belongs in {data.name}, which `fitted:` names", "predictor")
    if "fitted" not in raw:
        return raw
    entry = raw.pop("fitted")
    if not isinstance(entry, dict) or set(map(str, entry)) != {"file", "format", "sha256"}:
        raise fail(f"expected {{file: {data.name}, format: {FORMAT}, sha256: <hex>}}")
    if entry["format"] != FORMAT:
        raise fail(f"format {entry['format']!r}, not {FORMAT!r}: {RECALIBRATE}", "fitted.format")
    if entry["file"] != data.name:
        raise fail(f"expected {data.name}, got {entry['file']!r}", "fitted.file")
    try:
        blob = data.read_bytes()
    except OSError as err:
        raise fail(f"cannot read {data}: {err.strerror}") from None
    if len(blob) > MAX_FITTED_BYTES or hashlib.sha256(blob).hexdigest() != entry["sha256"]:
        what = f"{data.name} is not the data this profile was written with"
        raise fail(f"{what}: {RECALIBRATE}", "fitted.sha256")
    try:
        fitted = strict_json(blob)
    except (ValueError, RecursionError) as err:
        raise fail(f"{data.name} is not valid JSON: {err}") from None
    if not isinstance(fitted, dict) or set(fitted) != {"format", "predictor"}:
        raise fail(f"{data.name}: expected {{format, predictor}}")
    if fitted["format"] != FORMAT:
        raise fail(f"{data.name} is not {FORMAT} data: {RECALIBRATE}")
    return {**raw, "predictor": fitted["predictor"]}


def strict_json(blob: bytes) -> Any:
    """`blob` as JSON, refusing the NaN and Infinity Python's `json` accepts (ValueError)."""
    return json.loads(blob, parse_constant=_no_constant)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def write_profile(profile: dict[str, Any], path: Path) -> None:
    """Write a profile: its `predictor` to `fitted_path(path)` (`FORMAT`), the rest as YAML
    naming that data by file, format and hash. Each file is written whole and then moved into
    place, the data before the YAML that names it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {k: v for k, v in profile.items() if k != "predictor"}
    data = fitted_path(path)
    if profile.get("predictor") is not None:
        blob = json.dumps({"format": FORMAT, "predictor": profile["predictor"]}, allow_nan=False)
        _replace(data, blob.encode())
        digest = hashlib.sha256(blob.encode()).hexdigest()
        header["fitted"] = {"file": data.name, "format": FORMAT, "sha256": digest}
    where = profile.get("measured_on", {}).get("hostname", "this machine")
    comment = (
        f"# The `{profile.get('name', LOCAL)}` device profile: {where}, measured by `archsearch "
        "calibrate`.\n# Re-run `archsearch calibrate` to refresh it"
        + (f"; its fitted predictor is data, in {data.name}.\n" if "fitted" in header else ".\n")
    )
    _replace(path, (comment + yamlio.dumps(header)).encode())
    if "fitted" not in header:
        data.unlink(missing_ok=True)


def _replace(path: Path, blob: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(blob)
    os.replace(tmp, path)


def parse_profile(raw: Any, *, source: str, default_name: str) -> DeviceProfile:
    """A profile's plain data (`read_profile`'s, or what calibrate built) as a
    `DeviceProfile`, checked: one-line errors name the key path."""
    if not isinstance(raw, dict) or "predictor" not in raw:
        return parse_device(raw, source=source, default_name=default_name)
    header = {k: v for k, v in raw.items() if k != "predictor"}
    device = parse_device(header, source=source, default_name=default_name, learned=True)
    return device.with_predictor(parse_predictor(raw["predictor"], source))


def parse_predictor(raw: Any, source: str) -> Predictor:
    """The `predictor` mapping (`predictor_dict`'s form), checked."""

    def fail(what: str, key: str) -> UserError:
        return UserError(what, source=source, key=f"predictor.{key}".rstrip("."))

    _keys(raw, {*TEXTS, "threads", "sample_s", "kernels", "memory"}, fail, "")
    for k in TEXTS:
        if not isinstance(raw[k], str) or not raw[k].strip():
            raise fail(f"expected a non-empty string, got {raw[k]!r}", k)
    threads = raw["threads"]
    if isinstance(threads, bool) or not isinstance(threads, int) or threads <= 0:
        raise fail(f"expected a positive integer, got {threads!r}", "threads")
    _keys(raw["memory"], set(PHASES), fail, "memory")
    memory = {}
    for phase, entry in raw["memory"].items():
        if entry is not None:
            at, passes = f"memory.{phase}", entry.get("passes") if isinstance(entry, dict) else None
            _keys(entry, set(MEMORY) | ({"passes"} if passes is not None else set()), fail, at)
            numbers = (_number(entry[k], fail, f"{at}.{k}") for k in MEMORY)
            entry = Memory(*numbers, passes=None if passes is None else _passes(passes, fail, at))
            if entry.overlap > 1:
                raise fail(f"expected a share from 0 to 1, got {entry.overlap}", at)
        memory[phase] = entry
    if not isinstance(raw["kernels"], dict):
        raise fail("expected a mapping of kernel -> {base, trees, samples}", "kernels")
    kernels = {}
    for name, entry in raw["kernels"].items():
        key = f"kernels.{name}"
        if name not in KERNELS:
            raise fail(f"unknown kernel (known: {', '.join(KERNELS)})", key)
        _keys(entry, {"base", "trees", "samples"}, fail, key)
        if not isinstance(entry["base"], list) or len(entry["base"]) != len(WORK):
            raise fail(f"expected [{', '.join(WORK)}], got {entry['base']!r}"[:160], f"{key}.base")
        base = tuple(_number(v, fail, f"{key}.base[{i}]") for i, v in enumerate(entry["base"]))
        n = entry["samples"]
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise fail(f"expected a positive integer, got {n!r}", f"{key}.samples")
        trees, at = entry["trees"], f"predictor.{key}.trees"
        if trees is not None:
            trees = parse_trees(trees, source=source, key=at, features=KERNELS[name])
        kernels[name] = KernelFit(base, trees, n)
    texts = {k: raw[k] for k in TEXTS}
    sample_s = _number(raw["sample_s"], fail, "sample_s")
    return Predictor(**texts, threads=threads, sample_s=sample_s, kernels=kernels, memory=memory)


def predictor_dict(p: Predictor) -> dict[str, Any]:
    """The `predictor` mapping of a profile's data file (`parse_predictor` reads it back)."""
    short = lambda v: float(f"{v:.6g}")  # noqa: E731
    memory = {
        phase: None if m is None else {k: short(getattr(m, k)) for k in MEMORY} | _whole(m)
        for phase, m in p.memory.items()
    }
    kernels = {
        name: {
            "base": [short(v) for v in fit.base],
            "samples": fit.samples,
            "trees": None if fit.trees is None else fit.trees.to_dict(),
        }
        for name, fit in p.kernels.items()
    }
    head = {k: getattr(p, k) for k in (*TEXTS, "threads", "sample_s")}
    return {**head, "memory": memory, "kernels": kernels}


def _whole(m: Memory) -> dict[str, Any]:
    """What a memory entry keeps unrounded to six digits: its capacities in whole bytes, and
    its passes (where it has them) as measured."""
    out: dict[str, Any] = {"lo": float(round(m.lo)), "hi": float(round(m.hi))}
    if m.passes is not None:
        rows, nbytes, table = m.passes.rows, m.passes.nbytes, m.passes.table
        out["passes"] = {"rows": list(rows), "bytes": list(nbytes), "table": list(map(list, table))}
    return out


def _passes(raw: Any, fail, at: str) -> Passes:
    """A `Passes` mapping {rows, bytes, table}: rows from 1 and bytes rising, a table of at
    least one pass [rows][bytes] whose first row is one pass."""
    at = f"{at}.passes"
    _keys(raw, {"rows", "bytes", "table"}, fail, at)
    axes = {}
    for k in ("rows", "bytes"):
        values = raw[k] if isinstance(raw[k], list) else []
        axes[k] = [_number(v, fail, f"{at}.{k}[{i}]") for i, v in enumerate(values)]
        if not axes[k] or any(b <= a for a, b in zip(axes[k], axes[k][1:])) or axes[k][0] <= 0:
            raise fail(f"expected rising positive numbers, got {raw[k]!r}"[:160], f"{at}.{k}")
    table = raw["table"]
    shape = (len(axes["rows"]), len(axes["bytes"]))
    if (
        not isinstance(table, list)
        or [len(r) if isinstance(r, list) else -1 for r in table] != [shape[1]] * shape[0]
    ):
        raise fail(f"expected {shape[0]} rows of {shape[1]} numbers", f"{at}.table")
    cells = [[_number(v, fail, f"{at}.table") for v in line] for line in table]
    if axes["rows"][0] != 1 or any(v < 1 for line in cells for v in line) or set(cells[0]) != {1}:
        raise fail("expected passes of at least 1 from one row, of exactly 1", f"{at}.table")
    return Passes(tuple(axes["rows"]), tuple(axes["bytes"]), tuple(map(tuple, cells)))


def _keys(raw: Any, keys: set[str], fail, at: str) -> None:
    if not isinstance(raw, dict) or set(map(str, raw)) != keys:
        got = sorted(map(str, raw)) if isinstance(raw, dict) else type(raw).__name__
        raise fail(f"expected the keys {sorted(keys)}, got {got}"[:200], at)


def _number(v: Any, fail, key: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise fail(f"expected a finite number >= 0, got {v!r}", key)
    return float(v)


@cache
def _load(path: str) -> DeviceProfile:
    return parse_profile(read_profile(path), source=path, default_name=Path(path).stem)


# profiles this process loaded from a path the user gave, by their names: the cost model,
# pricing and the analysis name devices by name, so a profile given as `device=./mine.yaml`
# is found under its name (`mine`, or its `name:`) wherever the command names it afterwards
_FROM_FILES: dict[str, str] = {}


def load_device(name_or_path: str, *, key: str = "device") -> DeviceProfile:
    """A profile by name or path (`cost.devices.profile_path`), read and checked once. A
    profile loaded from a path is known by its name for the rest of the process; a name
    another profile has is refused."""
    from archsearch.resources import looks_like_path

    if looks_like_path(name_or_path):
        return _from_file(str(devices.profile_path(name_or_path, key=key)), key)
    if name_or_path in _FROM_FILES and name_or_path not in devices.device_names():
        return _load(_FROM_FILES[name_or_path])
    return _load(str(devices.profile_path(name_or_path, key=key)))


def _from_file(path: str, key: str) -> DeviceProfile:
    """The profile in the YAML file at `path`, registered under its name for this process.
    Its name may not be a shipped, plugin or user profile's (unless it is that profile's own
    file): a name means one profile everywhere a command uses it."""
    device = _load(path)
    if device.name in devices.device_names() and _path_of(device.name) != path:
        kind = "shipped" if device.name in devices.reserved_device_names() else "user"
        raise UserError(
            f"the profile in {path!r} is named {device.name!r}, the name of a {kind} profile: "
            "give it another name (its name: key, or the file's name)",
            key=key,
        )
    _FROM_FILES[device.name] = path
    return device


def _path_of(name: str) -> str | None:
    """The file of the shipped, plugin or user profile called `name` (None: it does not load)."""
    try:
        return str(devices.profile_path(name))
    except UserError:
        return None


def all_devices() -> list[DeviceProfile]:
    """Every shipped profile, and every plugin and user profile that loads: a broken plugin
    package or user file must not make every candidate unpriceable (naming it gives its
    error)."""
    from archsearch.resources import shipped_names

    out, shipped = [], set(shipped_names(devices.devices_dir()))
    for name in devices.device_names():
        try:
            out.append(load_device(name))
        except UserError:
            if name in shipped:
                raise
    return out
