"""Hermetic tests: whatever a test (or a command it runs in-process, such as a sweep that
contains its private Ray with environment settings) changes in `os.environ` is undone after it,
so no later test, nor the servers it starts, inherits it; and none depends on the terminal it
runs in (`make test` runs them in two pytest-xdist workers, whose terminal is 80 columns)."""

from __future__ import annotations

import os

import pytest


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


@pytest.fixture(autouse=True)
def _own_user_devices(tmp_path_factory):
    """Each test has its own (empty) user device folder: profiles a test measures under a name
    stay with it, and none of the machine's own (`~/.config/archsearch/devices`) are seen."""
    os.environ["ARCHSEARCH_DEVICE_DIR"] = str(tmp_path_factory.mktemp("user-devices"))
