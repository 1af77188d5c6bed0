"""Shared fixtures and helpers (the command line's path `EXE`, a tiny architecture, a tiny
sweep), and hermetic tests: whatever a test (or a command it runs in-process, such as a sweep that
contains its private Ray with environment settings) changes in `os.environ` is undone after it,
so no later test, nor the servers it starts, inherits it; and none depends on the terminal it
runs in (`make test` runs them in two pytest-xdist workers, whose terminal is 80 columns)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from archsearch.arch import ArchConfig


@pytest.fixture(autouse=True)
def _restore_environment():
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(autouse=True)
def _fixed_terminal_width():
    """The commands' tables are as wide as the terminal (`archsearch.cli.output.console`, at
    least 100 columns), and rich folds what does not fit: every test, and every command it
    runs, sees a 160-column terminal, whatever the one running the suite is."""
    os.environ["COLUMNS"] = "160"


@pytest.fixture(scope="session")
def _matplotlib_font_list():
    """matplotlib lists the machine's fonts on its first import on a machine, by running
    `fc-list`, and keeps the list in its user cache: importing it here, once per worker and
    before any guard is in place, makes a fresh machine run the fast lane as a warm one does."""
    import matplotlib.font_manager  # noqa: F401


@pytest.fixture(autouse=True)
def _fast_tests_start_no_process(request, monkeypatch, _matplotlib_font_list):
    """The fast lane (`make test-fast`: tests not marked slow) holds unit and property tests,
    in this process: a test that starts a process through `subprocess` (the command line, an
    interpreter, a server, a script) fails here until it is marked slow."""
    if request.node.get_closest_marker("slow") is not None:
        return

    def refuse(self, args, *rest, **kw):
        one = isinstance(args, (str, bytes, os.PathLike))
        shown = str(args) if one else " ".join(map(str, args))
        raise AssertionError(f"a fast test started a process ({shown[:80]}): mark it slow")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


@pytest.fixture(autouse=True)
def _own_user_devices(tmp_path_factory):
    """Each test has its own (empty) user device folder: profiles a test measures under a name
    stay with it, and none of the machine's own (`~/.config/archsearch/devices`) are seen."""
    os.environ["ARCHSEARCH_DEVICE_DIR"] = str(tmp_path_factory.mktemp("user-devices"))


# ---- shared helpers: the command line, a tiny architecture, a tiny sweep -----------------------

EXE = str(Path(sys.executable).with_name("archsearch"))  # the command line under test
SYNTHETIC = "trainable=archsearch.sweep.testing:synthetic"  # a trial of no training: seconds


def sweep(
    tmp_path: Path,
    *args: str,
    sleep: str = "0.02",
    env: dict | None = None,
    timeout: int = 300,
    name: str = "run",
    **kw,
) -> subprocess.CompletedProcess:
    """`archsearch sweep run_dir=<tmp_path/name> ARGS` in its own process, the synthetic
    trainable (where ARGS name it) taking `sleep` seconds per report."""
    cmd = [EXE, "sweep", f"run_dir={tmp_path / name}", *args]
    full = {**os.environ, "ARCHSEARCH_SYNTHETIC_SLEEP": sleep, **(env or {})}
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=full, **kw
    )


def tiny_arch(mixer: str = "attention", d: int = 32, vocab: int = 256, **fields) -> ArchConfig:
    """A two-layer model of width `d` (attention: MHA of 2 heads; linear: linear attention)."""
    return ArchConfig.from_dict(
        {
            "name": f"tiny-{mixer}-{d}",
            "vocab_size": vocab,
            "d_model": d,
            "n_layers": 2,
            "max_seq_len": 64,
            "layers": {"mixer": mixer},
            "attention": {"kind": "mha", "n_heads": 2},
            "linear": {"family": "linear_attention", "n_heads": 2},
            "ffn": {"kind": "swiglu", "d_ffn": 2 * d},
            **fields,
        }
    )


@pytest.fixture
def tiny():
    """`tiny_arch`, for a test to build its tiny architecture with."""
    return tiny_arch
