"""Hermetic tests: whatever a test (or a command it runs in-process, such as a sweep that
contains its private Ray with environment settings) changes in `os.environ` is undone after it,
so no later test, nor the servers it starts, inherits it."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _restore_environment():
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
