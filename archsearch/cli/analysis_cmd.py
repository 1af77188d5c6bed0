"""`archsearch pareto`, `export`, `dashboard` and `profile`: the analysis of a stored study."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archsearch.cli import output
from archsearch.cli.cost_cmd import MAX_REPEATS, MAX_TOKENS
from archsearch.errors import UserError
from archsearch.resources import check_name, check_writable_dir
from archsearch.units import human, json_safe

if TYPE_CHECKING:
    from archsearch.analysis.pareto import Pareto


def _open(cfg: Any):
    from archsearch.study import load

    if not cfg.study:
        raise UserError("name the study: study=<run dir, SQLite file or database URL>", key="study")
    return check_study_train(load(cfg.study, cfg.study_name))


def check_study_train(data):
    """`data`, once the training settings its metadata stores read as settings (damaged
    ones: one line naming the study's metadata and the key)."""
    from archsearch.trainers.config import TrainConfig

    train = data.meta.get("train")
    if train:
        TrainConfig.from_dict(train, source=f"study {data.name!r} metadata", prefix="train")
    return data


def study_device(name: str | None, data) -> str:
    """The name of the device asked for (a profile's name, or a profile file's, loaded and
    checked), else the one the sweep ran for."""
    from archsearch.latency import load_device

    return load_device(name or data.meta.get("device") or "rpi5").name


# ---- archsearch pareto --------------------------------------------------------------------------


def pareto_cmd(_sub: str | None, cfg: Any) -> int:
    from archsearch.analysis.pareto import analyse, choose_axes
    from archsearch.analysis.report import default_out_dir, write_outputs

    if not all(math.isfinite(v) for v in cfg.reference):
        raise UserError(f"give finite numbers, got {list(cfg.reference)}", key="reference")
    if cfg.out:
        check_writable_dir(cfg.out, key="out")
    data = _open(cfg)
    device = study_device(cfg.device, data)
    axes, is_default = choose_axes(data, device, cfg.x, cfg.y, cfg.z)
    p = analyse(data, device, axes, reference=list(cfg.reference) or None, is_default=is_default)
    files: dict[str, Path] = {}
    if cfg.plots:
        files = write_outputs(p, Path(cfg.out) if cfg.out else default_out_dir(p))
    if cfg.format == "json":
        output.print_json({**p.summary(), "files": {k: str(v) for k, v in files.items()}})
        return 0
    print_front(p, files)
    return 0


def print_front(p: Pareto, files: dict[str, Path]) -> None:
    """The front as a rich table, the facts under it, and where the files are."""
    from rich.markup import escape

    from archsearch.analysis.front_table import (
        SHOWN_ROWS,
        format_cell,
        front_columns,
        front_facts,
        shown_note,
    )

    con = output.console()
    cols = front_columns(p)
    rows = [
        [escape(format_cell(k, row.get(k))) for k, _ in cols] for row in p.front_rows(SHOWN_ROWS)
    ]
    con.print(
        output.table(
            f"Pareto front of {p.study.name} on {p.device} ({int(p.on_front.sum())} of "
            f"{len(p.trained)} fully trained)",
            [escape(t) for _, t in cols],
            rows,
        )
    )
    note = shown_note(p, SHOWN_ROWS)
    if note:
        con.print(escape(note))
    for k, v in front_facts(p):
        if k in (
            "trials",
            "unreadable",
            "reference point",
            "hypervolume",
            "constraints",
            "latency error",
            "seed noise",
            "predicted loss",
        ):
            con.print(escape(f"{k + ':':<17}{v}"))
    for k, path in files.items():
        con.print(escape(f"{k + ':':<17}{path}"))


# ---- archsearch insights ------------------------------------------------------------------------

MAX_RESAMPLES = 100_000


def insights_cmd(_sub: str | None, cfg: Any) -> int:
    from archsearch.analysis.insight_report import default_insights_dir, write_insights
    from archsearch.analysis.insights import insights
    from archsearch.latency import load_device

    if not 50 <= cfg.resamples <= MAX_RESAMPLES:
        raise UserError(f"must be 50 to {MAX_RESAMPLES:,}, got {cfg.resamples}", key="resamples")
    if not 0 <= cfg.importance_resamples <= MAX_RESAMPLES:
        raise UserError(
            f"must be 0 to {MAX_RESAMPLES:,}, got {cfg.importance_resamples}",
            key="importance_resamples",
        )
    if cfg.out:
        check_writable_dir(cfg.out, key="out")
    data = _open(cfg)
    if not data.meta:
        raise UserError(
            f"study {data.name!r} was not written by archsearch (it has no 'archsearch' study "
            "attribute): insights reads the searched parameters, statuses and costs a sweep "
            "stores",
            key="study",
        )
    data.require_trained()
    devices = _names(cfg.device) or [study_device(None, data)]
    fronts = _names(cfg.fronts) or (devices if cfg.device else _priced(data, devices[0]))
    for key, names in (("device", devices), ("fronts", fronts)):
        for name in names:
            load_device(name, key=key)
    ins = insights(
        data,
        devices,
        fronts=fronts,
        extra=[str(m) for m in cfg.metrics],
        resamples=cfg.resamples,
        importance_resamples=cfg.importance_resamples,
        seed=cfg.seed,
    )
    files: dict[str, Path] = {}
    if cfg.plots:
        files = write_insights(ins, Path(cfg.out) if cfg.out else default_insights_dir(ins))
    if cfg.format == "json":
        output.print_json({**ins.summary(), "files": {k: str(v) for k, v in files.items()}})
        return 0
    from rich.markup import escape

    con = output.console()
    con.print(f"[bold]What {escape(data.name)} learned[/bold]")
    for title, lines in ins.sections():
        con.print(f"\n[bold]{escape(title)}[/bold]")
        for line in lines:
            con.print(escape(f"- {line}"))
    shown = {k: v for k, v in files.items() if ":" not in k}
    if files:
        con.print()
        for k, path in shown.items():
            con.print(escape(f"{k + ':':<13}{path}"))
        con.print(escape(f"{'plots:':<13}{len(files) - len(shown)} files beside them"))
    return 0


def _names(given: str | None) -> list[str]:
    """`rpi5,jetson_orin_nx` -> the device names, in order, once each."""
    return list(dict.fromkeys(d.strip() for d in str(given or "").split(",") if d.strip()))


def _priced(data, first: str) -> list[str]:
    """The devices the study priced (the sweep's own first); profiles given by path left out."""
    stored = [d for d in data.meta.get("devices", []) if isinstance(d, str) and "/" not in d]
    return list(dict.fromkeys([first, *stored]))


# ---- archsearch export --------------------------------------------------------------------------


def export_cmd(_sub: str | None, cfg: Any) -> int:
    from archsearch.analysis.export import hf_config, write_files

    if cfg.trial is None:
        raise UserError("name the trial to export: trial=N (see `archsearch pareto`)", key="trial")
    data = _open(cfg)
    r = data.record(cfg.trial)
    arch = _exported_arch(data, r, cfg.name)
    out = Path(cfg.out) if cfg.out else (data.home or Path("runs")) / "export"
    if not cfg.out and out.is_symlink():
        raise UserError(
            f"{str(out)!r} is a symbolic link: an export never writes through a link "
            "(give out= the folder you mean)",
            key="out",
        )
    out = check_writable_dir(out, key="out")
    values = dict(zip(data.objectives, r.values)) if r.values is not None else {}
    preset = out / f"{arch.name}.yaml"
    files, recipe = _export_files(data, r, arch, preset, values)
    hf = hf_config(arch)
    hf_path = None
    if hf.config is not None:
        hf_path = out / arch.name / "config.json"
        files[hf_path] = json.dumps(hf.to_json(), indent=2) + "\n"
    write_files(out, files, overwrite=cfg.overwrite)
    summary = {
        "trial": r.number,
        "status": r.status,
        "fully_trained": r.fully_trained,
        "values": values,
        "arch_hash": arch.arch_hash,
        "summary": arch.summary(),
        "preset": str(preset),
        "recipe": str(recipe) if recipe else None,
        "hf_config": str(hf_path) if hf_path else None,
        "hf_model_type": hf.model_type,
        "hf_library": hf.library,
        "hf_exact": hf.exact,
        "hf_fields": [{"archsearch": a, "config": b, "value": v} for a, b, v in hf.fields],
        "hf_unmapped": {k: v for k, v in hf.unmapped},
    }
    if cfg.format == "json":
        output.print_json(summary)
    else:
        _print_export(output.console(), data.name, r, summary, hf)
    return 0


def _exported_arch(data, r, name: str | None):
    """The architecture trial `r` stored, resolved and named `name` (by default
    `<study>_trial<N>`)."""
    from archsearch.arch import ArchConfig

    if not isinstance(r.attrs.get("arch"), dict):
        raise UserError(
            f"trial {r.number} has no architecture ({r.status or r.state}: {r.reason or '-'})",
            key="trial",
        )
    name = check_name(name or f"{data.name}_trial{r.number}", what="preset", key="name")
    try:
        return ArchConfig.from_dict(r.attrs["arch"]).resolved().with_name(name)
    except UserError as err:
        raise UserError(
            f"trial {r.number}'s stored architecture does not read as one: {err}", key="trial"
        ) from None


def _export_files(data, r, arch, preset: Path, values: dict) -> tuple[dict[Path, str], Path | None]:
    """The preset of trial `r` (a header saying where it came from, then its YAML, checked to
    read back as the same architecture) and, where the study stored its training settings, its
    training recipe at the rate its learning-rate search chose: ({path: text}, recipe path)."""
    from archsearch import yamlio
    from archsearch.analysis.export import RECIPE_SUFFIX, recipe_path, recipe_text
    from archsearch.arch import ArchConfig

    header = [
        f"# Trial {r.number} of study {data.name!r} ({r.status or r.state}); arch hash "
        f"{r.attrs.get('arch_hash')}",
        *[f"#   {k} = {v:.6g}" for k, v in values.items()],
        f"# Train it as the sweep did: archsearch train arch={preset}",
        f"# (the recipe is {preset.stem}{RECIPE_SUFFIX}; add budget=... to train it longer)",
    ]
    files = {preset: "\n".join(header) + "\n" + arch.to_yaml()}
    back = ArchConfig.from_dict(yamlio.loads(files[preset], source=str(preset)))
    assert back.arch_hash == arch.arch_hash  # it reads back the same
    if data.meta.get("train") is None:
        return files, None
    from archsearch.trainers.lr_search import at_trained_rate, trained_rate

    rate = trained_rate(r.attrs.get("lr_search"))
    recipe = recipe_path(preset)
    files[recipe] = recipe_text(
        at_trained_rate(data.meta["train"], r.attrs.get("lr_search")),
        [
            f"# The training recipe of trial {r.number} of study {data.name!r}, as the sweep "
            "ran it.",
            *([f"# lr: the rate its learning-rate search chose ({rate:g})"] if rate else []),
            f"# archsearch train arch={preset} reads it; key=value on the command line wins.",
        ],
    )
    return files, recipe


def _print_export(con, study: str, r, summary: dict[str, Any], hf) -> None:
    """What `export` wrote, and how the architecture maps onto the Hugging Face config."""
    from rich.markup import escape

    preset, recipe = summary["preset"], summary["recipe"]
    con.print(f"[bold]trial {r.number}[/bold] of {study}: {summary['summary']} ({r.status})")
    if not r.fully_trained:
        con.print(f"[yellow]note: not a fully trained feasible trial ({r.reason or r.status})")
    con.print(f"preset:      {preset}  (archsearch train arch={preset})")
    if recipe:
        con.print(f"recipe:      {recipe}  (the trial's training settings; train reads them)")
    if summary["hf_config"] is None:
        con.print(f"config.json: not written: {hf.unmapped[0][1]}")
        return
    how = "exact" if hf.exact else "approximate: see the unmapped rows"
    con.print(f"config.json: {summary['hf_config']}  ({hf.model_type}, {hf.library}; {how})")
    rows = [[a, b, escape(json.dumps(v))] for a, b, v in hf.fields]
    rows += [[k, "[red]unmapped[/red]", escape(why)] for k, why in hf.unmapped]
    con.print(
        output.table("ArchConfig -> config.json", ["archsearch", "config.json", "value"], rows)
    )


# ---- archsearch dashboard -----------------------------------------------------------------------


def dashboard_cmd(_sub: str | None, cfg: Any) -> int:
    import signal

    from archsearch.analysis.dashboard import PAGE, make_app, optuna_study_path, serve
    from archsearch.study import redact

    if not 0 <= cfg.port <= 65535:
        raise UserError(f"must be 0 (any free port) to 65535, got {cfg.port}", key="port")
    data = _open(cfg)
    data.require_trained()
    storage = data.storage  # read-only: optuna-dashboard's pages cannot write through it
    app = make_app(storage, data.url, data.name, data.home)
    server = serve(app, cfg.host, cfg.port)
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in host else host
    base = f"http://{shown}:{port}"
    urls = {
        "optuna_dashboard": f"{base}{optuna_study_path(storage, data.name)}",
        "archsearch": f"{base}{PAGE}",
        "study": data.name,
        "storage": redact(data.url),
    }
    if cfg.format == "json":  # one line, flushed: scripts read it while the server runs
        output.print_json(urls, one_line=True)
    else:
        con = output.console()
        con.print(f"optuna-dashboard: {urls['optuna_dashboard']}")
        con.print(f"archsearch page:  {urls['archsearch']} (any device, colour by family)")
        if host not in ("127.0.0.1", "localhost", "::1"):
            con.print(f"[yellow]listening on {host}: reachable from other machines")
        con.print("Ctrl-C stops the server.")
        print(end="", flush=True)
    signal.signal(signal.SIGTERM, _stop)  # SIGTERM ends the server as Ctrl-C does
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _stop(*_: Any) -> None:
    raise KeyboardInterrupt


# ---- archsearch profile -------------------------------------------------------------------------


def profile_cmd(_sub: str | None, cfg: Any) -> int:
    from dataclasses import asdict

    from archsearch.analysis.profile import Settings, plot_all, profile, summary_rows
    from archsearch.arch import load_arch
    from archsearch.cli.progress import StepProgress
    from archsearch.latency import load_device
    from archsearch.metrics import parse_quantity

    names, devices = _check_profile_settings(cfg)
    max_params = parse_quantity(cfg.max_params, "count", source=None, key="max_params")
    archs = [load_arch(n) for n in names]
    devices = [load_device(d).name for d in devices]  # a profile file: by its name from here
    out = Path(cfg.out) if cfg.out else Path("runs") / "profile" / "-".join(a.name for a in archs)
    check_writable_dir(out, key="out")  # before anything is measured
    s = Settings(
        prompt=cfg.prompt,
        lengths=tuple(sorted(set(cfg.lengths))),
        batches=tuple(sorted(set(cfg.batches))),
        repeats=cfg.repeats,
        threads=cfg.threads,
        precision=cfg.precision,
        runtime=str(cfg.runtime),
    )
    with StepProgress("profile") as progress:
        results = profile(
            archs,
            devices,
            s,
            measure_max_params=max_params if cfg.measure else None,
            progress=progress,
        )
    files = plot_all(results, devices, s, out)
    rows = summary_rows(results, devices, s)
    files["json"] = out / "profile.json"
    files["json"].write_text(
        json.dumps(
            json_safe({"settings": asdict(s), "devices": devices, "results": results}),
            indent=2,
            allow_nan=False,
        )
        + "\n"
    )
    if cfg.format == "json":
        output.print_json({"summary": rows, "files": {k: str(v) for k, v in files.items()}})
        return 0
    from rich.markup import escape

    con = output.console()
    con.print(_profile_table(rows, devices, s))
    for k, path in files.items():
        con.print(escape(f"{k + ':':<22}{path}"))
    return 0


def _check_profile_settings(cfg: Any) -> tuple[list[str], list[str]]:
    """`profile`'s counts and sizes checked: (architecture names, device names or paths)."""
    names = [a.strip() for a in cfg.arch.split(",") if a.strip()]
    devices = [d.strip() for d in str(cfg.device).split(",") if d.strip()]
    if not names:
        raise UserError("name at least one architecture", key="arch")
    if not devices:
        raise UserError("name at least one device profile", key="device")
    for key in ("prompt", "repeats", "threads"):
        if getattr(cfg, key) <= 0:
            raise UserError(f"must be positive, got {getattr(cfg, key)}", key=key)
    for key in ("lengths", "batches"):
        values = list(getattr(cfg, key))
        if not values or min(values) <= 0:
            raise UserError(f"give positive numbers, got {values}", key=key)
        if max(values) > MAX_TOKENS:
            raise UserError(f"give numbers up to {MAX_TOKENS:,}, got {values}", key=key)
    if cfg.repeats > MAX_REPEATS:
        raise UserError(f"must be at most {MAX_REPEATS}, got {cfg.repeats}", key="repeats")
    return names, devices


def _profile_table(rows: list[dict], devices: list[str], s):
    """Each architecture's measured state, step time, throughput and memory beside what each
    device profile predicts (and, in a deploy runtime, its logits' distance from torch's)."""
    from rich.markup import escape

    B, n = s.batches[0], s.lengths[-1]
    cols = [
        "arch",
        "params",
        f"state @{n} (measured)",
        "cache fp32 (predicted)",
        "ms/step (measured)",
        *[f"ms/step {d}" for d in devices],
        f"tokens/s batch {s.batches[-1]}",
        "peak RSS",
    ]
    checked = s.runtime != "torch"
    if checked:
        cols.append("max |Δlogit| vs torch")
    table_rows = [
        [
            r["arch"],
            human(r["params"]),
            human(r["state_bytes"], "B") if "state_bytes" in r else r["not_measured"],
            human(r["predicted_cache_bytes_fp32"], "B"),
            f"{r['step_ms']:.3g}" if "step_ms" in r else "-",
            *[f"{r[f'predicted_step_ms[{d}]']:.3g}" for d in devices],
            f"{r['tokens_per_s_max_batch']:.4g}" if "tokens_per_s_max_batch" in r else "-",
            human(r["peak_rss_bytes"], "B") if "peak_rss_bytes" in r else "-",
            *([f"{r['max_abs_logit_diff']:.2g}" if "max_abs_logit_diff" in r else "-"] * checked),
        ]
        for r in rows
    ]
    title = f"after a {s.prompt}-token prompt, {n} generated tokens, batch {B}, measured in "
    return output.table(escape(title + s.runtime), [escape(c) for c in cols], table_rows)
