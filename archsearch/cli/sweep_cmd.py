"""`archsearch sweep`: run a search and print where its results are."""

from __future__ import annotations

from typing import Any

from archsearch.cli import output


def run(_sub: str | None, cfg: Any) -> int:
    from archsearch.sweep.runner import run_sweep

    output.check_format(cfg.format)
    summary = run_sweep(cfg)
    from archsearch.analysis.report import sweep_epilogue

    sweep_epilogue(summary, fmt=cfg.format)
    return 0
