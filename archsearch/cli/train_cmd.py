"""`archsearch train`: one sandbox pretraining trial, with a progress bar and a loss curve."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from archsearch.cli import output
from archsearch.cli.schemas import TrainCmdConfig
from archsearch.resources import check_writable_dir


def run(sub: str | None, cfg: TrainCmdConfig) -> int:
    from archsearch.arch import load_arch

    arch = load_arch(cfg.arch)
    train = cfg.trial_config()
    run_dir = Path(cfg.run_dir or f"runs/train/{arch.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    check_writable_dir(run_dir, key="run_dir")
    with _removed_if_left_empty(run_dir):
        return _train(cfg, arch, train, run_dir)


@contextlib.contextmanager
def _removed_if_left_empty(run_dir: Path) -> Iterator[None]:
    """A run directory this command made is removed again, with the folders made for it, when
    the command fails before writing anything into it."""
    made = [p for p in (run_dir, *run_dir.parents) if not p.exists()]
    try:
        yield
    except BaseException:
        for folder in made:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty
        raise


def _train(cfg: TrainCmdConfig, arch, train, run_dir: Path) -> int:
    from archsearch.trainers.curves import write_curves
    from archsearch.trainers.trial import run_trial

    if cfg.format == "json":
        result = run_trial(arch, train, run_dir=run_dir, resume=cfg.resume)
        files = write_curves(result, run_dir)
        output.print_json({**result.to_dict(), "run_dir": str(run_dir), "files": files})
        return 0 if result.status == "completed" else 1
    con = output.console()
    con.print(f"[bold]{arch.name}[/bold]: {arch.summary()}")
    con.print(f"budget {train.parsed_budget}, run directory {run_dir}")
    if recipe_settings([f"arch={cfg.arch}"]):
        from archsearch.analysis.export import recipe_path

        con.print(f"training recipe: {recipe_path(Path(cfg.arch))} (key=value overrides it)")
    with _Bar(con) as bar:
        result = run_trial(arch, train, run_dir=run_dir, resume=cfg.resume, progress=bar.update)
    files = write_curves(result, run_dir)
    _summary(con, result)
    con.print("loss curve: " + ", ".join(str(p) for p in files.values()))
    con.print(f"result: {run_dir / 'result.json'}")
    return 0 if result.status == "completed" else 1


def recipe_settings(args: list[str]) -> list[str]:
    """The training recipe beside an exported preset (`arch=PATH`, `PATH.train.yaml` next to
    it) as key=value settings, so `archsearch train` trains an exported trial as its sweep did;
    the command line's own settings come after them and win."""
    from archsearch import yamlio
    from archsearch.analysis.export import recipe_path
    from archsearch.trainers.config import TrainConfig

    arch = next((a.split("=", 1)[1] for a in args if a.startswith("arch=")), "")
    if not arch.endswith((".yaml", ".yml")) or not recipe_path(Path(arch)).is_file():
        return []
    path = recipe_path(Path(arch))
    data = yamlio.load(path) or {}
    settings = TrainConfig.from_dict(data, source=str(path)).to_dict()
    return [f"{key}={_hydra_value(value)}" for key, value in settings.items()]


def _hydra_value(value: Any) -> str:
    """A value in Hydra's override grammar (strings quoted, lists in brackets)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


class _Bar:
    """A rich progress bar, one task per phase (the LM run, then each probe task)."""

    def __init__(self, con):
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            TextColumn("{task.description:<22}"),
            BarColumn(),
            TextColumn("{task.percentage:>5.1f}%"),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=con,
            transient=False,
        )
        self.tasks: dict[str, int] = {}

    def __enter__(self) -> _Bar:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def update(self, fraction: float, info: dict[str, Any]) -> None:
        phase = info.get("phase", "lm")
        if phase not in self.tasks:
            self.tasks[phase] = self.progress.add_task(phase, total=1.0, info="")
        text = f"step {info['step']}  loss {info['loss']:.4f}"
        if phase.startswith("probe"):
            fraction = info["step"] / max(1, info.get("steps", info["step"]))
        self.progress.update(self.tasks[phase], completed=min(fraction, 1.0), info=text)


def _summary(con, r) -> None:
    from rich.markup import escape

    rows = [
        ["status", r.status + (f" ({r.failure_reason})" if r.failure_reason else "")],
        ["stopped early", f"at {r.fraction:.2f} of the budget" if r.stopped_early else "no"],
        ["steps / tokens", f"{r.steps:,} / {output.human(r.tokens)}"],
        ["training FLOPs", output.human(r.flops, "FLOP")],
        ["parameters", output.human(r.n_params)],
        ["tokens/s", output.human(r.tokens_per_s)],
        ["wall time", f"{r.wall_s:.1f} s (training {r.train_s:.1f} s)"],
        ["peak RSS", output.human(r.peak_rss_bytes, "B")],
    ]
    rows += [
        [escape(k), output.fmt_value(v)] for k, v in r.metrics.items()
    ]  # `[task]` is no markup
    if r.lr_search:
        s = r.lr_search
        chosen = f"{s['chosen']:g}" if s.get("chosen") else "none (every rate failed)"
        grid = ", ".join(f"{lr:g}" for lr in s["grid"])
        share = f", {s['tokens'] / r.tokens:.0%} of the trial's tokens" if r.tokens else ""
        rows.append(["learning rate", f"{chosen}, searched over {grid}"])
        rows.append(
            [
                "rate search",
                f"{len(s['runs'])} short runs, {output.human(s['tokens'])} tokens{share}",
            ]
        )
    if r.resumed_from_step is not None:
        rows.append(["resumed from step", r.resumed_from_step])
    con.print(output.table("trial", ["", "value"], rows))
