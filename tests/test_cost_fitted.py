"""A device profile's fitted arrays are data beside its settings: `write_profile` puts them in
`<stem>.fitted.json` and names that file, its format and its hash in the YAML; `read_profile`
reads them back, and refuses data that is not the profile's own."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from archsearch import yamlio
from archsearch.cost import devices
from archsearch.cost.devices import (
    FITTED_FORMAT,
    fitted_path,
    load_device,
    parse_device,
    read_profile,
    write_profile,
)
from archsearch.errors import UserError


@pytest.fixture
def copy_of_local(tmp_path):
    """The shipped `local` profile written anew under another name (header and data)."""
    raw = read_profile(load_device("local").path)
    path = tmp_path / "board.yaml"
    write_profile({**raw, "name": "board"}, path)
    return path


def test_the_shipped_local_keeps_its_fitted_arrays_beside_a_short_header():
    path = load_device("local").path
    header = yamlio.load(path)
    assert not set(devices.FITTED_KEYS) & set(header)
    assert header["fitted"]["file"] == fitted_path(path).name == "local.fitted.json"
    assert len(Path(path).read_text().splitlines()) < 200
    assert load_device("local").kernels is not None and load_device("local").matmul_table


def test_a_written_profile_reads_back_to_the_same_device(copy_of_local):
    mine = devices._load(str(copy_of_local))
    shipped = load_device("local")
    assert mine.name == "board"
    same = dataclasses.replace(mine, name="local", path=shipped.path)
    assert same.kernels.to_dict() == shipped.kernels.to_dict()
    assert same.matmul_table == shipped.matmul_table and same.validation == shipped.validation
    assert json.loads(fitted_path(copy_of_local).read_text())["format"] == FITTED_FORMAT


def test_a_profile_without_fitted_arrays_writes_no_data_file(tmp_path, copy_of_local):
    raw = read_profile(copy_of_local)
    for key in devices.FITTED_KEYS:
        raw.pop(key)
    write_profile(raw, copy_of_local)  # the same place: the old data file goes
    assert not fitted_path(copy_of_local).exists()
    assert "fitted" not in yamlio.load(copy_of_local)
    assert parse_device(read_profile(copy_of_local), source="x", default_name="x").kernels is None


def _error(path) -> UserError:
    with pytest.raises(UserError) as info:
        read_profile(path)
    return info.value


def test_data_that_is_not_the_profiles_own_is_refused_in_one_line(copy_of_local):
    data = fitted_path(copy_of_local)
    data.write_bytes(data.read_bytes().replace(b'"dispatch_s": ', b'"dispatch_s": 1'))
    err = _error(copy_of_local)
    assert err.key == "fitted.sha256" and "re-run `archsearch calibrate`" in str(err)
    data.unlink()  # a header copied without its data
    assert _error(copy_of_local).key == "fitted" and "cannot read" in str(_error(copy_of_local))


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"file": "../../etc/passwd"}, "fitted.file"),
        ({"file": "other.fitted.json"}, "fitted.file"),
        ({"format": "archsearch.fitted/0"}, "fitted.format"),
        ({"extra": 1}, "fitted"),
    ],
)
def test_a_header_cannot_point_elsewhere_or_at_another_format(copy_of_local, change, key):
    raw = yamlio.load(copy_of_local)
    raw["fitted"] = {**raw["fitted"], **change}
    copy_of_local.write_text(yamlio.dumps(raw))
    assert _error(copy_of_local).key == key


def test_arrays_in_both_places_are_refused(copy_of_local):
    raw = yamlio.load(copy_of_local)
    raw["matmul_table"] = read_profile(copy_of_local)["matmul_table"]
    copy_of_local.write_text(yamlio.dumps(raw))
    assert _error(copy_of_local).key == "matmul_table"


def test_non_finite_numbers_in_the_data_are_refused(copy_of_local):
    data = fitted_path(copy_of_local)
    blob = data.read_bytes().replace(b'"dispatch_s": ', b'"dispatch_s": NaN, "x": ', 1)
    data.write_bytes(blob)
    raw = yamlio.load(copy_of_local)
    raw["fitted"]["sha256"] = hashlib.sha256(blob).hexdigest()
    copy_of_local.write_text(yamlio.dumps(raw))
    assert "not valid JSON" in str(_error(copy_of_local))
