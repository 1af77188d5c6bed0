"""The test suite in lanes: `make test` runs every test, `make test-fast` those not marked
`slow` (unit and property tests). The fast lane must still cover every package of the layer
table: each has a test module that imports it and holds a test not marked slow."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_layering import LAYERS

TESTS = Path(__file__).resolve().parent


def fast_tests(tree: ast.Module, source: str) -> list[str]:
    """The module's test functions not marked slow (by itself or by `pytestmark`)."""
    if "pytestmark = pytest.mark.slow" in source:
        return []
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and node.name.startswith("test_")
        and not any("mark.slow" in ast.unparse(d) for d in node.decorator_list)
    ]


def imported_units(tree: ast.Module) -> set[str]:
    """The archsearch packages (layer units) a module imports, anywhere in it."""
    out = set()
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        out |= {n.split(".")[1] for n in names if n.startswith("archsearch.")}
    return out


COVERED: dict[str, list[str]] = {}
for path in sorted(TESTS.glob("test_*.py")):
    source = path.read_text()
    tree = ast.parse(source)
    if fast_tests(tree, source):
        for unit in imported_units(tree):
            COVERED.setdefault(unit, []).append(path.name)


@pytest.mark.parametrize("unit", sorted(u for layer in LAYERS for u in layer))
def test_the_fast_lane_covers_every_package(unit):
    assert COVERED.get(unit), f"no test module with a fast test imports archsearch.{unit}"


def test_the_makefile_runs_both_lanes():
    makefile = (TESTS.parent / "Makefile").read_text()
    # two workers; the tests that share a module's cluster or programs on one (`xdist_group`)
    workers = "-m pytest -q -n 2 --dist loadgroup"
    assert f'{workers} -m "not slow"\n' in makefile and "\ntest-fast:" in makefile
    assert f"$(PY) {workers}\n" in makefile


def test_a_fast_test_that_starts_a_process_fails_saying_to_mark_it_slow():
    with pytest.raises(
        AssertionError, match=re.escape("a fast test started a process (true): mark it slow")
    ):
        subprocess.run(["true"], check=True)


@pytest.mark.slow
def test_a_slow_test_may_start_one():
    assert subprocess.run(["true"], check=False).returncode == 0


def pytest_passes_in(folder: Path, *args: str) -> None:
    """pytest run on the test modules written into `folder`, in its own process, passes."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    res = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


GROUPED = """
import os

import pytest


def record(name):
    with open(os.path.join(os.environ["LANES_OUT"], name), "w") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"])


@pytest.mark.xdist_group("shared")
@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
    record(f"grouped-{i}")


@pytest.mark.parametrize("i", range(6))
def test_free(i):
    record(f"free-{i}")
"""


@pytest.mark.slow
def test_the_tests_of_one_xdist_group_run_on_one_worker(tmp_path, monkeypatch):
    # `make test` relies on it to start a module's cluster or exported programs once; a pytest
    # that drops the group marks (9.2 with pytest-xdist 3.8) spreads them over both workers
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("LANES_OUT", str(out))
    pytest_passes_in(tmp_path, "-n", "2", "--dist", "loadgroup")
    workers = {p.name: p.read_text() for p in out.iterdir()}
    assert len(workers) == 12
    assert len({w for name, w in workers.items() if name.startswith("grouped")}) == 1, workers


PLOTS = """
def test_draws():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.plot([0, 1], [1, 0])
"""


@pytest.mark.slow
def test_a_fast_test_that_plots_passes_on_a_machine_with_no_font_cache(tmp_path, monkeypatch):
    # matplotlib runs `fc-list` the first time it is imported on a machine; the suite's
    # guard against processes in fast tests must not turn that into a failure of the first
    # plotting test of a fresh checkout
    (tmp_path / "conftest.py").write_text((TESTS / "conftest.py").read_text())
    (tmp_path / "test_plots.py").write_text(PLOTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n")
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))  # matplotlib's cache, empty
    pytest_passes_in(tmp_path, "-m", "not slow")
    assert list((tmp_path / "mpl").glob("fontlist-*.json"))
