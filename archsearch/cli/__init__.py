"""The `archsearch` command line.

    archsearch <command> [<subcommand>] [key=value ...] [--help]

Every command composes its configuration with Hydra from `conf/<command>.yaml`; `key=value`
arguments are Hydra overrides. A command's module is imported only when it runs, so the light
commands (`space`) never import torch or ray.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NoReturn

from archsearch.errors import CtrlC, UserError


@dataclass(frozen=True)
class Command:
    summary: str
    config: str  # conf/<config>.yaml
    handler: str  # "module:function", called with (subcommand, cfg)
    subcommands: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    positional: str | None = None  # the key a bare first argument sets (check-mixer's mixer)
    # "module:function" returning key=value settings applied before the command line's own
    # (called with them): `train` on an exported trial takes the trial's training recipe
    presets: str = ""


COMMANDS: dict[str, Command] = {
    "space": Command(
        "show a search space, or sample candidate architectures from it",
        "space",
        "archsearch.cli.space_cmd:run",
        ("show", "sample"),
        (
            "archsearch space show search_space=plm_edge",
            "archsearch space sample search_space=hybrid_linear_moe n=50 seed=0",
            "archsearch space sample space_file=./my_space.yaml format=json",
        ),
    ),
    "train": Command(
        "train one architecture in a sandbox trial (budget in tokens, FLOPs, time or steps)",
        "train",
        "archsearch.cli.train_cmd:run",
        (),
        (
            "archsearch train arch=tiny_gqa budget=tokens:2M",
            "archsearch train arch=./my_arch.yaml budget=flops:1e13 schedule=wsdc precision=bf16",
            "archsearch train arch=baby_gpt data=input.txt tokenizer=char seq_len=64 "
            "budget=steps:2000",
            "archsearch train arch=tiny_gqa objective=probe probe_tasks=recall,selective_copy",
            "archsearch train arch=runs/tiny/export/tiny_trial7.yaml  # as the sweep trained it",
        ),
        presets="archsearch.cli.train_cmd:recipe_settings",
    ),
    "sweep": Command(
        "run a search: cost-prune candidates, train the rest as Ray Tune trials, store the study",
        "sweep",
        "archsearch.cli.sweep_cmd:run",
        examples=(
            "archsearch sweep",
            "archsearch sweep search_space=tiny device=rpi5 trials=24 budget=tokens:500K",
            "archsearch sweep search_space=hybrid_linear_moe ray.address=auto "
            "storage.url=postgresql+psycopg2://user@db/archsearch",
            "archsearch sweep latency.mode=measured latency.resource=rpi5",
            "archsearch sweep latency.mode=measured latency.runtime=executorch",
        ),
    ),
    "prune": Command(
        "apply a space's cost constraints to every candidate before anything trains "
        "(margin: error bounds a latency's band)",
        "prune",
        "archsearch.cli.cost_cmd:prune_cmd",
        examples=("archsearch prune search_space=plm_edge device=rpi5",),
    ),
    "cost": Command(
        "params, FLOPs, memory and predicted latency (with the device profile's +-error) of "
        "architectures on a device",
        "cost",
        "archsearch.cli.cost_cmd:cost_cmd",
        examples=(
            "archsearch cost arch=plm_1_8b device=rpi5 precision=q4",
            "archsearch cost arch=llama_gqa_1b,mcsd_1_6b,plm_1_8b seq_lens=[512,2048,8192,32768]",
        ),
    ),
    "calibrate": Command(
        "measure this machine, or a device of a Ray cluster, into a device profile",
        "calibrate",
        "archsearch.cli.cost_cmd:calibrate_cmd",
        examples=(
            "archsearch calibrate threads=2",
            "archsearch calibrate name=my_laptop  # then: archsearch cost device=my_laptop",
            "archsearch calibrate device_resource=rpi5 name=rpi5_measured ray.address=HEAD:6379",
        ),
    ),
    "pareto": Command(
        "the Pareto front of a stored study on any device: table, PNG/HTML plots, reports",
        "pareto",
        "archsearch.cli.analysis_cmd:pareto_cmd",
        examples=(
            "archsearch pareto study=runs/tiny device=rpi5",
            "archsearch pareto study=runs/tiny device=jetson_orin_nx x=cache_bytes y=val_loss",
            "archsearch pareto study=runs/tiny x=decode_ms@context:4096 y=val_loss z=params",
            "archsearch pareto study=postgresql+psycopg2://user@db/archsearch study_name=tiny",
        ),
    ),
    "insights": Command(
        "what a study learned: each parameter's importance and effects on every objective, "
        "with intervals; the front by factor per device; which front neighbour is faster",
        "insights",
        "archsearch.cli.analysis_cmd:insights_cmd",
        examples=(
            "archsearch insights study=runs/tiny",
            "archsearch insights study=runs/tiny device=rpi5,jetson_orin_nx",
            "archsearch insights study=runs/tiny metrics=[val_loss@tokens:10M,memory_bytes]",
            "archsearch insights study=runs/tiny format=json plots=false",
        ),
    ),
    "confirm": Command(
        "retrain a study's front and n trials spread over its ranking at factor x the budget; "
        "rank correlations, front kept, extrapolation error",
        "confirm",
        "archsearch.cli.confirm_cmd:run",
        examples=(
            "archsearch confirm study=runs/tiny factor=8 n=4",
            "archsearch confirm study=tiny factor=4 n=2 data=./other_corpus.txt",
            "archsearch confirm study=tiny storage.url=postgresql+psycopg2://user@db/archsearch "
            "run_dir=/shared/tiny ray.address=auto",
        ),
    ),
    "export": Command(
        "write a trial's architecture as an ArchConfig preset and a Hugging Face config.json",
        "export",
        "archsearch.cli.analysis_cmd:export_cmd",
        examples=("archsearch export study=runs/tiny trial=3",),
    ),
    "dashboard": Command(
        "serve optuna-dashboard on a study, with the archsearch front page (any device)",
        "dashboard",
        "archsearch.cli.analysis_cmd:dashboard_cmd",
        examples=(
            "archsearch dashboard study=runs/tiny",
            "archsearch dashboard study=runs/tiny host=0.0.0.0 port=8081",
        ),
    ),
    "profile": Command(
        "measured and predicted memory, latency and throughput vs sequence length and batch",
        "profile",
        "archsearch.cli.analysis_cmd:profile_cmd",
        examples=(
            "archsearch profile arch=tiny_gqa,./my_mcsd.yaml device=rpi5",
            "archsearch profile arch=plm_1_8b,mcsd_1_6b measure=false lengths=[1024,4096,16384]",
        ),
    ),
    "check-mixer": Command(
        "run the conformance kit on a sequence mixer: decode = parallel, causality, state, "
        "gradients, traced costs",
        "check_mixer",
        "archsearch.cli.plugin_cmd:check_mixer_cmd",
        examples=(
            "archsearch check-mixer my_pkg.mixers:MyMixer",
            "archsearch check-mixer hyena.long_conv d_model=64 tokens=40",
        ),
        positional="mixer",
    ),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [
        "usage: archsearch <command> [<subcommand>] [key=value ...] [--help]",
        "",
        "archsearch: declarative, measured architecture search for efficient language models.",
        "",
        "commands:",
    ]
    for name, cmd in COMMANDS.items():
        subs = f" {{{'|'.join(cmd.subcommands)}}}" if cmd.subcommands else ""
        lines.append(f"  {(name + subs).ljust(width + 20)} {cmd.summary}")
    lines += ["", "Run `archsearch <command> --help` for a command's keys and their defaults."]
    return "\n".join(lines)


def _command_help(name: str, cmd: Command) -> str:
    """Every key with its default: the yaml's documented lines where `conf/<config>.yaml` sets
    the key, else the schema's default and `help` metadata (`TrainConfig`'s settings)."""
    import dataclasses

    from archsearch.cli.keys import command_page, yaml_value
    from archsearch.cli.schemas import SCHEMAS
    from archsearch.resources import conf_dir

    subs = f" {{{'|'.join(cmd.subcommands)}}}" if cmd.subcommands else ""
    documented = _yaml_blocks((conf_dir() / f"{cmd.config}.yaml").read_text())
    keys, sources = [], [f"conf/{cmd.config}.yaml"]
    for f in dataclasses.fields(SCHEMAS[cmd.config]):
        if f.name in documented:
            keys += documented[f.name]
            continue
        line = f"{f.name}: {yaml_value(f.default)}"
        pad = " " * max(2, 23 - len(line))
        keys.append(f"{line}{pad}# {f.metadata['help']}" if "help" in f.metadata else line)
        owner = _declared_in(SCHEMAS[cmd.config], f.name)
        if owner not in sources:
            sources.append(owner)
    lines = [
        f"usage: archsearch {name}{subs} [key=value ...]",
        "",
        cmd.summary,
        "",
        f"keys (defaults from {' and '.join(sources)}; override with key=value):",
    ]
    lines += [f"  {ln}" for ln in keys]
    if cmd.examples:
        lines += ["", "examples:"] + [f"  {ex}" for ex in cmd.examples]
    lines += ["", f"docs: {command_page(name)}"]
    return "\n".join(lines)


def _yaml_blocks(text: str) -> dict[str, list[str]]:
    """A command yaml's top-level keys -> their lines as written (nested keys and comment
    continuation lines included), leaving out the header comment and the defaults list."""
    blocks: dict[str, list[str]] = {}
    current = None
    for ln in text.splitlines():
        if not ln.strip() or ln.startswith(("#", "defaults", "  - ")):
            continue
        if not ln[0].isspace():
            current = blocks.setdefault(ln.split(":", 1)[0], [])
        if current is not None:
            current.append(ln)
    return blocks


def _declared_in(schema: type, key: str) -> str:
    """The dataclass that declares `key` (the first in `schema`'s bases to have it)."""
    owner = next(c for c in reversed(schema.__mro__) if key in getattr(c, "__annotations__", {}))
    return f"{owner.__qualname__} ({owner.__module__})"


def _contain_caches() -> None:
    """Libraries' caches go under the system temp dir unless the user chose a place: nothing
    is written into the home directory by surprise (matplotlib's font cache; Ray's token is
    `archsearch.sweep.ray_runtime.contain_ray`'s concern)."""
    import os
    import tempfile

    os.environ.setdefault(
        "MPLCONFIGDIR", os.path.join(tempfile.gettempdir(), "archsearch-matplotlib")
    )


@contextlib.contextmanager
def _warnings_after() -> Iterator[None]:
    """Warnings libraries raise while a command runs are held back: a command that ends in a
    `UserError` prints its one line and nothing before it (a profile's figures can make numpy
    warn before the check that refuses them); any other ending shows them then, as Python
    would have."""
    import warnings

    held: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as held:
            yield
    except UserError:
        raise
    except BaseException:
        _show(held)
        raise
    _show(held)


def _show(held: list) -> None:
    import warnings

    for w in held:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _contain_caches()
    ctrl_c = CtrlC()
    try:
        with ctrl_c, _warnings_after():
            return _main(argv)
    except UserError as err:
        print(f"archsearch: error: {err}", file=sys.stderr)
        return err.exit_code
    except BrokenPipeError:  # e.g. `archsearch ... format=json | head`
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (KeyboardInterrupt, Exception) as err:  # Ctrl-C: say what stopped, exit 128 + SIGINT
        if not ctrl_c.interrupted(err):
            raise
        what = (isinstance(err, KeyboardInterrupt) and str(err)) or (
            f"`archsearch {' '.join(argv[:1])}` before it finished"
        )
        print(f"archsearch: interrupted: {what}", file=sys.stderr)
        return 130


def entry() -> NoReturn:
    """The `archsearch` program: `main`, then exit without a last garbage collection. Over
    the many objects a command's imports leave (torch, Ray, Optuna, plotly), the interpreter's
    collection at exit can take seconds after a sweep's output is all written. `gc.freeze()`
    leaves them to the operating system: by then the study and files are closed, and atexit
    handlers still run."""
    import gc

    code = main()
    gc.freeze()
    sys.exit(code)


def _main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        from archsearch import __version__

        print(f"archsearch {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        raise UserError(f"unknown command {name!r} (known: {', '.join(COMMANDS)})")
    cmd = COMMANDS[name]
    if any(a in ("-h", "--help") for a in rest):
        print(_command_help(name, cmd))
        return 0
    sub = None
    if cmd.subcommands:
        if not rest or "=" in rest[0]:
            raise UserError(f"'{name}' needs a subcommand: {' or '.join(cmd.subcommands)}")
        sub, rest = rest[0], rest[1:]
        if sub not in cmd.subcommands:
            raise UserError(
                f"unknown subcommand {name} {sub!r} (known: {', '.join(cmd.subcommands)})"
            )
    if cmd.positional and rest and "=" not in rest[0] and not rest[0].startswith("-"):
        rest = [f"{cmd.positional}={rest[0]}", *rest[1:]]
    flags = [a for a in rest if a.startswith("-")]
    if flags:
        raise UserError(f"unknown option {flags[0]!r}; settings are given as key=value")
    from archsearch.cli.config import compose, to_schema

    if cmd.presets:
        module, func = cmd.presets.split(":")
        rest = [*getattr(importlib.import_module(module), func)(rest), *rest]
    cfg = to_schema(cmd.config, compose(cmd.config, rest))
    module, func = cmd.handler.split(":")
    handler = getattr(importlib.import_module(module), func)
    from archsearch.cli.output import json_stdout

    with json_stdout(getattr(cfg, "format", None) == "json"):
        return int(handler(sub, cfg) or 0)


if __name__ == "__main__":  # pragma: no cover
    entry()
