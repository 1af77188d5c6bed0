"""The generated reference of the documentation: an MkDocs hook that writes its pages at build
time from the code they describe, so that they cannot drift from it.

- `reference/commands/*.md`: every command's keys, types, defaults and help
  (`archsearch.cli.keys.command_keys`, the typed schemas `--help` prints) and its examples;
- `reference/space-language.md`: the keys of a space file, the sweep grammar (each example
  parsed by the space loader), the resolvers of derived values and every `ArchConfig` key path;
- `reference/metrics.md`: the metric vocabulary (`archsearch.metrics.METRICS`) and its labels;
- `reference/study-schema.md`: the stored schema (`archsearch.study.schema`);
- `reference/device-profile.md`: the device profile format (`archsearch.cost.devices`) with a
  shipped profile as its example;
- the figures of `benchmarks/results/` (`benchmarks/results/index.yaml`: each result's command,
  machine, date and headline figures read from the result itself), in place of a
  `<!-- results: ANCHOR ... -->` marker (`<!-- results -->`: all of them) on any page. Every
  file in `benchmarks/results/` must be named there, and every figure's path must resolve.

The Python API pages (`reference/api/*.md`) are rendered by mkdocstrings from the docstrings.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from collections.abc import Callable
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
_MARKER = re.compile(r"<!-- results(?::([^>]*))? -->")

# the comment on a field's or member's line: `name: type = default  # comment`, `NAME = v  # c`
_TRAILING = re.compile(r"^\s+([A-Za-z_]\w*)\s*(?::[^=#]*)?(?:=[^#]*)?#\s?(.*)$")
_LEADING = re.compile(r"^\s+#\s?(.*)$")
_MEMBER = re.compile(r"^\s+([A-Za-z_]\w*)\s*(?::|=)")


def on_files(files: Files, config) -> Files:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for uri, make in pages().items():
        files.append(File.generated(config, uri, content=make()))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    if "<!-- results" not in markdown:
        return markdown
    entries = results_index()

    def figures(match: re.Match) -> str:
        wanted = (match.group(1) or "").split()
        chosen = [e for e in entries if not wanted or e["anchor"] in wanted]
        missing = set(wanted) - {e["anchor"] for e in chosen}
        if missing:
            raise PluginError(f"{page.file.src_uri}: no result named {sorted(missing)}")
        return "\n\n".join(result_section(e, heading=not wanted) for e in chosen)

    return _MARKER.sub(figures, markdown)


def pages() -> dict[str, Callable[[], str]]:
    from archsearch.cli import COMMANDS

    out: dict[str, Callable[[], str]] = {"reference/commands/index.md": commands_index}
    for name in COMMANDS:
        out[f"reference/commands/{name}.md"] = lambda name=name: command_page(name)
    out["reference/space-language.md"] = space_language
    out["reference/metrics.md"] = metrics
    out["reference/study-schema.md"] = study_schema
    out["reference/device-profile.md"] = device_profile
    return out


# ---- helpers ----------------------------------------------------------------------------------


def cell(text: object) -> str:
    """Text for a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def code(text: object) -> str:
    return f"`{text}`" if str(text) else ""


def table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def comments(cls: type) -> dict[str, str]:
    """A class's fields or members -> the comment on their line, else the comment lines just
    above them (how this code base documents a field)."""
    out, above = {}, []
    for line in inspect.getsource(cls).splitlines()[1:]:
        if m := _LEADING.match(line):
            above.append(m.group(1).strip())
            continue
        trailing = _TRAILING.match(line)
        member = _MEMBER.match(line)
        if trailing or member:
            name = (trailing or member).group(1)
            text = trailing.group(2).strip() if trailing else ""
            out[name] = " ".join([*above, text]).strip()
        above = []
    return out


def fields_table(cls: type, *, skip: tuple[str, ...] = ()) -> str:
    """A dataclass's fields: name, type, default and what its comment says."""
    from archsearch.cli.keys import type_name, yaml_value

    hints, notes, rows = typing.get_type_hints(cls), comments(cls), []
    for f in dataclasses.fields(cls):
        if f.name in skip or f.name.startswith("_"):
            continue
        if f.default is not dataclasses.MISSING:
            default = code(yaml_value(f.default))
        elif f.default_factory is not dataclasses.MISSING:
            default = code(yaml_value(f.default_factory()))
        else:
            default = "required"
        rows.append([code(f.name), type_name(hints[f.name]), default, notes.get(f.name, "")])
    return table(["key", "type", "default", "meaning"], rows)


def doc(obj: object) -> str:
    return inspect.getdoc(obj) or ""


# ---- commands ---------------------------------------------------------------------------------


def commands_index() -> str:
    from archsearch.cli import COMMANDS, _usage

    rows = [[f"[`{name}`]({name}.md)", cmd.summary] for name, cmd in COMMANDS.items()]
    return "\n\n".join(
        [
            "# Commands",
            "Every command takes `key=value` settings: Hydra overrides, checked against the "
            "command's typed schema before anything runs. `format=json` prints one JSON document "
            "on stdout and nothing else. Bad input is one line naming the file, key path and "
            "value, exit status 2, and nothing written. These pages are generated from the same "
            "schemas and documented defaults that `archsearch <command> --help` prints.",
            table(["command", "what it does"], rows),
            "```text\n" + _usage() + "\n```",
        ]
    )


def command_page(name: str) -> str:
    from archsearch.cli import COMMANDS
    from archsearch.cli.keys import command_keys

    cmd = COMMANDS[name]
    subs = f" {{{'|'.join(cmd.subcommands)}}}" if cmd.subcommands else ""
    positional = f" [{cmd.positional}]" if cmd.positional else ""
    rows = [[code(k.path), k.type, code(k.default), k.help] for k in command_keys(name)]
    parts = [
        f"# archsearch {name}",
        cmd.summary[0].upper() + cmd.summary[1:] + ".",
        f"```text\narchsearch {name}{subs}{positional} [key=value ...]\n```",
        f"Defaults come from `conf/{cmd.config}.yaml` and the command's typed schema; "
        f"`archsearch {name} --help` lists the same keys.",
        "## Keys",
        table(["key", "type", "default", "what it sets"], rows),
    ]
    if cmd.examples:
        parts += ["## Examples", "```bash\n" + "\n".join(cmd.examples) + "\n```"]
    return "\n\n".join(parts) + "\n"


# ---- the space language -------------------------------------------------------------------------

GRAMMAR = (
    "4",
    "gla",
    "true",
    "choice(2, 4, 8)",
    "2, 4, 8",
    "range(64, 257, step=64)",
    "range(0.25, 1.0, step=0.25)",
    "interval(0.1, 1.0)",
    "tag(log, interval(1e-4, 1e-2))",
    "tag(int, interval(2, 16))",
)


def _domain_row(text: str) -> list[str]:
    """An example of the grammar, parsed by the space loader and asked of a real Optuna trial."""
    import optuna

    from archsearch.cli.keys import yaml_value
    from archsearch.space.domains import Fixed, parse_domain

    domain = parse_domain(text, key="example", source="example")
    if isinstance(domain, Fixed):
        value = code(yaml_value(domain.value))
        return [code(text), f"the fixed value {value}", "none: not a parameter"]
    means = f"one of {', '.join(map(str, domain.values()))}" if domain.finite else "a number in"
    if not domain.finite:
        means += f" [{domain.low}, {domain.high}]"
    trial = optuna.create_study().ask()
    domain.suggest(trial, "x")
    dist = trial.distributions["x"]
    kind = type(dist).__name__.removesuffix("Distribution").lower()
    extras = [f"step {dist.step}"] if getattr(dist, "step", None) else []
    extras += ["log"] if getattr(dist, "log", False) else []
    return [code(text), means, ", ".join([kind, *extras])]


def space_language() -> str:
    import importlib

    from archsearch.arch import ArchConfig
    from archsearch.space import spec
    from archsearch.space.assign import RESOLVERS

    keys = [[code(k), v] for k, v in spec.SPACE_KEYS.items()]
    resolvers = [[code(f"${{{n}:{_arguments(fn)}}}"), text] for n, (fn, text) in RESOLVERS.items()]
    example, conditions = doc(spec).split("```yaml\n", 1)[1].split("```", 1)
    parts = [
        "# The search-space language",
        "A space file is YAML read by the safe loader. This page is generated from the space "
        "loader (`archsearch.space`) and `ArchConfig` (`archsearch.arch`); the tutorial "
        "[Your own space](../tutorials/own-space.md) builds one step by step.",
        f"```yaml\n{example}```",
        "## Top-level keys",
        table(["key", "what it holds"], keys),
        "## Shipped spaces",
        "Named by their stem (`search_space=tiny`); your own by path (`space_file=./mine.yaml`).",
        _shipped_spaces(),
        "## Values: Hydra's sweep grammar",
        "Parameter values are parsed by Hydra's override parser, so a user of Hydra's Optuna "
        "sweeper reads them as written. Each row is parsed by the space loader, and its "
        "distribution asked of an Optuna trial, as this page is built:",
        table(["written", "means", "Optuna distribution"], [_domain_row(t) for t in GRAMMAR]),
        "## Conditions",
        conditions.strip(),
        "## Derived values",
        "`derived:` maps key paths to OmegaConf interpolations resolved per candidate "
        "(`${d_model}`, `${vars.NAME}`) with these resolvers and no other: `${oc.env:...}` and "
        "every other resolver are refused when the file is read. A candidate whose derived "
        "value cannot be computed is rejected with a named reason, and counted.",
        table(["resolver", "computes"], resolvers),
        "## Constraints and objectives",
        "Each names a metric of the [metric vocabulary](metrics.md) with its arguments: "
        "`{metric: params, max: 20M}`, `{metric: decode_ms, max: 40, device: rpi5, margin: "
        "error}`, `{metric: val_loss, direction: minimize}`.",
        "## Architecture key paths",
        "A parameter or a derived value is a key path into `ArchConfig`, or a free variable "
        "`vars.NAME` that only derived values read.",
        doc(importlib.import_module("archsearch.arch")).split("\n\n", 1)[1],
        "### Top level",
        _arch_table(ArchConfig, ""),
    ]
    hints = typing.get_type_hints(ArchConfig)
    for f in dataclasses.fields(ArchConfig):
        section = [a for a in (hints[f.name], *typing.get_args(hints[f.name])) if _is_section(a)]
        if section:
            parts += [f"### `{f.name}`", doc(section[0]), _arch_table(section[0], f.name)]
    return "\n\n".join(parts) + "\n"


def _shipped_spaces() -> str:
    from archsearch.resources import shipped_names, spaces_dir
    from archsearch.space import count, load_space

    rows = []
    for name in shipped_names(spaces_dir()):
        space = load_space(name)
        rows.append([code(name), space.description, f"{count(space):,}"])
    return table(["space", "what varies", "assignments"], rows)


def _arguments(fn: Callable) -> str:
    """`a,b` for fn(a, b); `a,b,...` for fn(*xs)."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return "a,b,..."
    return ",".join(p.name for p in params)


def _is_section(tp: object) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _arch_table(cls: type, prefix: str) -> str:
    from archsearch.arch import CHOICES
    from archsearch.cli.keys import type_name, yaml_value

    hints, rows = typing.get_type_hints(cls), []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if any(_is_section(a) for a in (tp, *typing.get_args(tp))):
            continue
        path = f"{prefix}.{f.name}" if prefix else f.name
        default = "required" if f.default is dataclasses.MISSING else code(yaml_value(f.default))
        rows.append([code(path), type_name(tp), default, ", ".join(CHOICES.get(path, ()))])
    return table(["key path", "type", "default", "built-in values"], rows)


# ---- metrics ----------------------------------------------------------------------------------


def metrics() -> str:
    from archsearch import metrics as m

    rows = []
    for name, d in m.METRICS.items():
        args = ", ".join(
            f"`{a}`" + (f" = {v}" if v is not None else " (the run's)" if a == "device" else "")
            for a, v in d.args.items()
        )
        rows.append([code(name), d.phase, d.unit, args, d.direction, d.help])
    examples = [
        "decode_ms@rpi5@context:2048@precision:q4",
        "cache_bytes@bits:8",
        "val_loss@tokens:100M",
        "probe_acc@recall",
    ]
    labels = [[code(e), code(m.MetricSpec.parse(e).label)] for e in examples]
    return (
        "\n\n".join(
            [
                "# Metrics",
                "The metric vocabulary: what a space constrains or optimises, a study stores and "
                "an axis shows. Generated from `archsearch.metrics`.",
                doc(m).split("\n\n", 1)[1],
                table(
                    ["metric", "phase", "unit", "arguments and defaults", "direction", "what"], rows
                ),
                "`cost` metrics are known before training (the cost model prices them); `train` "
                "metrics come from the sandbox trial.",
                "## Argument values",
                table(
                    ["argument", "values"],
                    [
                        ["`precision`", ", ".join(m.PRECISIONS)],
                        ["`bits` (cache)", ", ".join(map(str, m.CACHE_BITS))],
                        ["`task` (probe)", ", ".join(m.PROBE_TASKS)],
                        [f"`margin` (on {', '.join(m.MARGIN_METRICS)})", ", ".join(m.MARGINS)],
                    ],
                ),
                "## Labels",
                "On the command line a metric's arguments follow `@` (`key:value`, or a device or "
                "task alone); a study stores its label. Each row is parsed and printed by "
                "`MetricSpec` as this page is built:",
                table(["on the command line", "stored label"], labels),
            ]
        )
        + "\n"
    )


# ---- the stored study -------------------------------------------------------------------------


def study_schema() -> str:
    from archsearch.study import schema

    notes = comments(schema.Status)
    statuses = [
        [code(s.value), "yes" if s.spent_compute else "", notes.get(s.name, "")]
        for s in schema.Status
    ]
    return (
        "\n\n".join(
            [
                "# The stored study",
                f"Schema version {schema.SCHEMA_VERSION}. Generated from "
                "`archsearch.study.schema`, the schema as code: `StudyWriter` is its one writer, "
                "`load`/`records` its reader.",
                "```text\n" + doc(schema) + "\n```",
                "## Trial statuses",
                table(["status", "spent search compute", "meaning"], statuses),
                f"## The study's record (user attribute `{schema.META_KEY}`)",
                fields_table(schema.StudyMeta),
                "## Attributes stored as JSON text",
                ", ".join(code(a) for a in schema.JSON_ATTRS)
                + ". The per-step series "
                + ", ".join(code(a) for a in schema.SERIES_ATTRS)
                + " are the bulk of a stored trial; the analysis reads studies without them.",
            ]
        )
        + "\n"
    )


# ---- device profiles --------------------------------------------------------------------------


def device_profile() -> str:
    from archsearch.cost import devices
    from archsearch.latency import predict, profile
    from archsearch.resources import conf_dir

    example = (conf_dir() / "device" / "rpi5.yaml").read_text()
    return (
        "\n\n".join(
            [
                "# Device profiles",
                "Generated from `archsearch.cost.devices`, which reads every profile.",
                doc(devices),
                "## Keys of a profile",
                fields_table(devices.DeviceProfile, skip=("path", "predictor")),
                "## `efficiency.<fp32|fp16|int8|default>`",
                doc(devices.Efficiency),
                fields_table(devices.Efficiency),
                "## `provenance`",
                doc(devices.Provenance),
                fields_table(devices.Provenance),
                "## `validation.<ttft|decode>` (one check or a list)",
                doc(devices.Validation),
                fields_table(devices.Validation),
                "### `by_working_set`",
                doc(devices.WorkingSetBands),
                fields_table(devices.WorkingSetBands),
                "## The fitted predictor beside a profile",
                doc(profile),
                "### `predictor.memory.<forward|step>`",
                doc(predict.Memory),
                fields_table(predict.Memory),
                "### `predictor.kernels.<kernel>`",
                doc(predict.KernelFit),
                fields_table(predict.KernelFit),
                "## Example: `conf/device/rpi5.yaml`",
                "```yaml\n" + example + "```",
            ]
        )
        + "\n"
    )


# ---- benchmark results ------------------------------------------------------------------------


def results_index() -> list[dict]:
    """`benchmarks/results/index.yaml`, checked against the folder: every file named, every
    named file present, every figure's path resolved."""
    import json

    from archsearch import yamlio

    entries = yamlio.load(RESULTS / "index.yaml")
    named = {"index.yaml"}
    for e in entries:
        e.setdefault("anchor", Path(e["file"]).stem.replace("_", "-"))
        named.update([e["file"], *e.get("inputs", ())])
        data = json.loads((RESULTS / e["file"]).read_text())
        e["values"] = [_figure(data, f, e["file"]) for f in e["figures"]]
    unnamed = sorted({p.name for p in RESULTS.iterdir()} - named)
    absent = sorted(n for n in named if not (RESULTS / n).is_file())
    if unnamed or absent:
        raise PluginError(
            f"benchmarks/results/index.yaml: files not named there {unnamed}, named but absent "
            f"{absent}"
        )
    return entries


def _figure(data: object, fig: dict, file: str) -> str:
    parts = [p.replace("\\.", ".") for p in re.split(r"(?<!\\)\.", fig["path"])]
    values, every = [data], False  # after a `*`, an item without the key is left out
    for part in parts:
        step = []
        for v in values:
            if part == "*" and isinstance(v, dict):
                step += [x for k, x in v.items() if k not in fig.get("exclude", ())]
            elif part == "*" and isinstance(v, list):
                step += v
            elif isinstance(v, dict) and part in v:
                step.append(v[part])
            elif isinstance(v, list) and part.isdigit() and int(part) < len(v):
                step.append(v[int(part)])
        values, every = step, every or part == "*"
        if not values or (len(values) < len(step) and not every):
            break
    if not values:
        raise PluginError(f"benchmarks/results/{file}: no {fig['path']!r}")
    agg = fig.get("agg")
    if agg is None and len(values) == 1 and not isinstance(values[0], list):
        return fig["format"].format(values[0])
    flat = [x for v in values for x in (v if isinstance(v, list) else [v])]
    if agg == "range":
        return f"{fig['format'].format(min(flat))} - {fig['format'].format(max(flat))}"
    reduce = {"max": max, "min": min, "mean": lambda xs: sum(xs) / len(xs)}
    if agg == "count":
        return fig["format"].format(len(flat))
    if agg == "count_true":
        return fig["format"].format(sum(1 for x in flat if x is True))
    if agg not in reduce:
        raise PluginError(f"benchmarks/results/{file}: {fig['path']!r} needs an agg")
    return fig["format"].format(reduce[agg](flat))


def result_section(entry: dict, *, heading: bool = True) -> str:
    rows = [[f["label"], v] for f, v in zip(entry["figures"], entry["values"])]
    parts = [f"### {entry['title']} {{#{entry['anchor']}}}"] if heading else []
    parts += [
        table(["figure", "value"], rows),
        f"`{entry['command']}`  \n"
        f"Machine: {entry['machine']}. Date: {entry['date']}. "
        f"Result: `benchmarks/results/{entry['file']}`.",
    ]
    return "\n\n".join(parts)
