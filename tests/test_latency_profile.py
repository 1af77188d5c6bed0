"""A calibrated profile's learned predictor is data beside its YAML: `write_profile` puts it in
`<stem>.fitted.json` (one versioned format, `FORMAT`) and names that file, its format and its
hash in the YAML; `read_profile` reads it back, refuses data that is not the profile's own, and
refuses a profile of an earlier format in one line that says to recalibrate."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from archsearch import yamlio
from archsearch.cli import main
from archsearch.errors import UserError
from archsearch.latency import load_device
from archsearch.latency.profile import (
    FORMAT,
    fitted_path,
    parse_profile,
    predictor_dict,
    read_profile,
    write_profile,
)


@pytest.fixture
def copy_of_local(tmp_path):
    """The shipped `local` profile written anew under another name (header and data)."""
    raw = read_profile(load_device("local").path)
    path = tmp_path / "board.yaml"
    write_profile({**raw, "name": "board"}, path)
    return path


def _read(path) -> object:
    return parse_profile(read_profile(path), source=str(path), default_name="x")


def _error(path) -> UserError:
    with pytest.raises(UserError) as info:
        _read(path)
    return info.value


def test_the_shipped_local_keeps_its_predictor_beside_a_short_header():
    path = load_device("local").path
    header = yamlio.load(path)
    assert "predictor" not in header and header["fitted"]["format"] == FORMAT
    assert header["fitted"]["file"] == fitted_path(path).name == "local.fitted.json"
    assert len(Path(path).read_text().splitlines()) < 200
    learned = load_device("local").predictor
    assert len(learned.kernels) == 28 and set(learned.memory) == {"forward", "step"}


def test_a_written_profile_reads_back_to_the_same_device(copy_of_local):
    mine, shipped = _read(copy_of_local), load_device("local")
    assert mine.name == "board"
    same = dataclasses.replace(mine, name="local", path=shipped.path)
    assert predictor_dict(same.predictor) == predictor_dict(shipped.predictor)
    assert same.validation == shipped.validation
    assert json.loads(fitted_path(copy_of_local).read_text())["format"] == FORMAT


def test_a_profile_without_a_predictor_writes_no_data_file(copy_of_local):
    raw = read_profile(copy_of_local)
    raw.pop("predictor")
    write_profile(raw, copy_of_local)  # the same place: the old data file goes
    assert not fitted_path(copy_of_local).exists()
    assert "fitted" not in yamlio.load(copy_of_local)
    assert _read(copy_of_local).predictor is None


def test_data_that_is_not_the_profiles_own_is_refused_in_one_line(copy_of_local):
    data = fitted_path(copy_of_local)
    data.write_bytes(data.read_bytes().replace(b'"threads": ', b'"threads": 1'))
    err = _error(copy_of_local)
    assert err.key == "fitted.sha256" and "re-run `archsearch calibrate`" in str(err)
    data.unlink()  # a header copied without its data
    assert _error(copy_of_local).key == "fitted" and "cannot read" in str(_error(copy_of_local))


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"file": "../../etc/passwd"}, "fitted.file"),
        ({"file": "other.fitted.json"}, "fitted.file"),
        ({"extra": 1}, "fitted"),
    ],
)
def test_a_header_cannot_point_elsewhere(copy_of_local, change, key):
    raw = yamlio.load(copy_of_local)
    raw["fitted"] = {**raw["fitted"], **change}
    copy_of_local.write_text(yamlio.dumps(raw))
    assert _error(copy_of_local).key == key


@pytest.mark.parametrize(
    ("earlier", "key"),
    [
        ({"fitted": {"format": "archsearch.fitted/1"}}, "fitted.format"),  # an earlier data file
        ({"kernels": {"runtime": "torch"}}, "kernels"),  # the fit inline, before data files
        ({"matmul_table": {"weights": [1]}}, "matmul_table"),
    ],
)
def test_a_profile_of_an_earlier_format_says_to_recalibrate(
    copy_of_local, tmp_path, capsys, earlier, key
):
    raw = yamlio.load(copy_of_local)
    raw.update({k: {**raw.get(k, {}), **v} for k, v in earlier.items()})
    copy_of_local.write_text(yamlio.dumps(raw))
    err = _error(copy_of_local)
    assert err.key == key and "re-run `archsearch calibrate`" in str(err)
    assert main(["cost", "arch=tiny_gqa", f"device={copy_of_local}"]) == 2
    out = capsys.readouterr()
    assert out.err.count("\n") == 1 and "re-run `archsearch calibrate`" in out.err


def test_a_predictor_in_the_yaml_is_refused(copy_of_local):
    raw = yamlio.load(copy_of_local)
    raw["predictor"] = {"runtime": "torch"}
    copy_of_local.write_text(yamlio.dumps(raw))
    assert _error(copy_of_local).key == "predictor"


@pytest.mark.parametrize(
    ("path", "value", "key"),
    [
        (("threads",), 0, "predictor.threads"),
        (("memory", "step", "overlap"), 1.5, "predictor.memory.step"),
        (("memory", "step", "miss_s"), -1.0, "predictor.memory.step.miss_s"),
        (("kernels", "gemm", "base"), [1.0, 2.0], "predictor.kernels.gemm.base"),
        (("kernels", "gemm", "samples"), True, "predictor.kernels.gemm.samples"),
        (("kernels", "gemm", "trees", "depth"), 9, "predictor.kernels.gemm.trees.depth"),
        (("kernels", "no_such_kernel"), {}, "predictor.kernels.no_such_kernel"),
    ],
)
def test_a_bad_predictor_names_its_key(path, value, key):
    raw = read_profile(load_device("local").path)
    entry = raw["predictor"]
    for k in path[:-1]:
        entry = entry[k]
    entry[path[-1]] = value
    with pytest.raises(UserError) as info:
        parse_profile(raw, source="board.yaml", default_name="board")
    assert info.value.key == key and str(info.value).count("\n") == 0


def test_non_finite_numbers_in_the_data_are_refused(copy_of_local):
    data = fitted_path(copy_of_local)
    blob = data.read_bytes().replace(b'"threads": ', b'"threads": NaN, "x": ', 1)
    data.write_bytes(blob)
    raw = yamlio.load(copy_of_local)
    raw["fitted"]["sha256"] = hashlib.sha256(blob).hexdigest()
    copy_of_local.write_text(yamlio.dumps(raw))
    assert "not valid JSON" in str(_error(copy_of_local))
