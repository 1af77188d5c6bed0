"""`archsearch cost`, `archsearch prune` and `archsearch calibrate`."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np

from archsearch.cli import output
from archsearch.cli.progress import StepProgress
from archsearch.errors import UserError
from archsearch.resources import check_writable_dir
from archsearch.units import fmt_error, fmt_ms

MAX_TOKENS = 2**24  # a sequence length (as ArchConfig's max_seq_len)
MAX_PRUNE = 1_000_000  # candidates `prune` builds and prices
MAX_REPEATS = 1000  # timed repeats of one measurement


def _check_lengths(cfg: Any) -> None:
    for key in ("prompt", "context", "generate", "batch"):
        if getattr(cfg, key) <= 0:
            raise UserError(
                f"must be a positive number of tokens, got {getattr(cfg, key)}", key=key
            )
    for n in cfg.seq_lens:
        if not 0 < n <= MAX_TOKENS:
            raise UserError(
                f"sequence lengths must lie in [1, {MAX_TOKENS:,}], got {n}", key="seq_lens"
            )


# ---- archsearch cost ----------------------------------------------------------------------------


def cost_cmd(_sub: str | None, cfg: Any) -> int:
    from archsearch.arch import load_arch
    from archsearch.latency import load_device
    from archsearch.latency.breakdown import cost_report, length_curves

    _check_lengths(cfg)
    names = [a.strip() for a in cfg.arch.split(",") if a.strip()]
    if not names:
        raise UserError("name at least one architecture", key="arch")
    archs = [load_arch(a) for a in names]
    device = load_device(cfg.device)
    if cfg.seq_lens and cfg.plot:
        check_writable_dir(Path(cfg.plot).parent, key="plot")
    reports = [
        cost_report(
            a,
            device,
            precision=cfg.precision,
            prompt=cfg.prompt,
            context=cfg.context,
            generate=cfg.generate,
            batch=cfg.batch,
        )
        for a in archs
    ]
    plot_path = None
    if cfg.seq_lens:
        plot_path = Path(
            cfg.plot
            or Path("runs") / "cost" / f"{'-'.join(a.name for a in archs)}-{device.name}.png"
        )
        curves = [
            length_curves(
                a, device, cfg.seq_lens, precision=cfg.precision, prompt=cfg.prompt, batch=cfg.batch
            )
            for a in archs
        ]
        plot_lengths(curves, [a.name for a in archs], device, cfg, plot_path)
        for rep, curve in zip(reports, curves):
            rep["curves"] = curve
    if cfg.format == "json":
        output.print_json({"reports": reports, "plot": str(plot_path) if plot_path else None})
        return 0
    con = output.console()
    for rep in reports:
        _print_report(con, rep)
    if plot_path:
        con.print(f"plot: {plot_path}")
    return 0


def _print_report(con, rep: dict[str, Any]) -> None:
    """One architecture's cost report (`latency.breakdown.cost_report`) as two tables."""
    con.print(_parts_table(rep))
    con.print(_totals_table(rep))


_PART_COLUMNS = ["part", "layers", "prefill GFLOPs", "decode MFLOPs/token", "TTFT ms"]
_PART_COLUMNS += ["decode ms/token"]


def _parts_table(rep: dict[str, Any]):
    """Each part of the model: its layers, FLOPs, TTFT and decode time."""
    s = rep["settings"]
    title = (
        f"{rep['arch']} ({rep['summary']}) on {rep['device']}, {rep['precision']}: "
        f"prompt {s['prompt']}, context {s['context']}, batch {s['batch']}"
    )
    rows = [
        [r["part"], r["layers"] or "-"]
        + [f"{r[k]:.4g}" for k in ("prefill_gflops", "decode_mflops", "ttft_ms", "decode_ms")]
        for r in rep["breakdown"]
    ]
    return output.table(title, _PART_COLUMNS, rows)


def _totals_table(rep: dict[str, Any]):
    """The model's params, weights, cache, memory, FLOPs and latencies with their error."""
    s, t, err, h = rep["settings"], rep["totals"], rep["latency_error"], output.human
    lines = [
        [
            "params",
            f"{h(t['params'])} (embedding {h(t['embedding_params'])}, non-embedding "
            f"{h(t['non_embedding_params'])}, active {h(t['active_params'])})",
        ],
        ["weights", h(t["weight_bytes"], "B") + f" at {rep['precision']}"],
        [
            "KV cache / state",
            f"{h(t['cache_bytes_16bit'], 'B')} (16-bit), {h(t['cache_bytes_8bit'], 'B')} "
            f"(8-bit), {h(t['cache_bytes_4bit'], 'B')} (4-bit) at context {s['context']}",
        ],
        ["peak inference memory", h(t["memory_bytes"], "B")],
        [
            "FLOPs",
            f"prefill {h(t['prefill_flops'], 'FLOP')}, decode "
            f"{h(t['decode_flops_per_token'], 'FLOP')}/token, training "
            f"{h(t['train_flops_per_token'], 'FLOP')}/token",
        ],
        [
            "time to first token",
            f"{fmt_ms(t['ttft_ms'])} {fmt_error(err['ttft_ms'])} "
            f"({h(t['prefill_tokens_per_s'])} tokens/s)",
        ],
        [
            "decode",
            f"{fmt_ms(t['decode_ms'])}/token {fmt_error(err['decode_ms'])} "
            f"({h(t['decode_tokens_per_s'])} tokens/s)",
        ],
        [
            f"end to end ({s['prompt']} + {s['generate']})",
            f"{fmt_ms(t['e2e_ms'])} {fmt_error(err['e2e_ms'])}",
        ],
        ["latency error", rep["latency_provenance"]],
    ]
    lines += [["note", n] for n in rep["notes"]]
    return output.table("totals", ["", ""], lines)


def plot_lengths(curves, labels: list[str], device, cfg: Any, path: Path) -> None:
    """Memory and latency against sequence length (the [MCSD] Figs. 5-7 kind of picture),
    saved as a PNG (`length_figure`)."""
    fig = length_figure(curves, labels, device, cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def length_figure(curves, labels: list[str], device, cfg: Any):
    """The matplotlib Figure of `plot_lengths`: each panel in the unit its largest value
    reaches (KiB/MiB/GiB), on a log scale where its values span decades."""
    from matplotlib.figure import Figure

    from archsearch.analysis.plots import log_scale
    from archsearch.units import scale_for, spans_decades

    fig = Figure(figsize=(15, 4.4))
    axes = fig.subplots(1, 3)
    cache = [np.array(c["cache_bytes"], dtype=float) for c in curves]
    scale, unit = scale_for("bytes", np.concatenate(cache))
    panels = (
        ([c / scale for c in cache], f"KV cache / recurrent state ({unit})"),
        ([np.array(c["decode_ms"], dtype=float) for c in curves], "decode latency (ms/token)"),
        (
            [np.array(c["e2e_ms"], dtype=float) / 1e3 for c in curves],
            f"prompt {cfg.prompt} + generated tokens (s)",
        ),
    )
    for ax, (ys, ylabel) in zip(axes, panels):
        for label, curve, y in zip(labels, curves, ys):
            ax.plot(curve["seq_lens"], y, marker="o", label=label)
        log_scale(ax, "x", base=2)
        if spans_decades(np.concatenate(ys)):
            log_scale(ax, "y")
        ax.set_xlabel("sequence length (tokens)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"predicted on {device.name}, {cfg.precision}, batch {cfg.batch}")
    fig.tight_layout()
    return fig


# ---- archsearch prune ---------------------------------------------------------------------------


def prune_cmd(_sub: str | None, cfg: Any) -> int:
    from archsearch.latency import load_device
    from archsearch.latency.prune import prune, rank
    from archsearch.space import open_space

    for key in ("limit", "show"):
        if getattr(cfg, key) < 0 or (key == "limit" and cfg.limit == 0):
            raise UserError(f"must be positive, got {getattr(cfg, key)}", key=key)
    if cfg.limit > MAX_PRUNE:
        raise UserError(f"must be at most {MAX_PRUNE:,}, got {cfg.limit}", key="limit")
    space = open_space(search_space=cfg.search_space, space_file=cfg.space_file)
    device = load_device(cfg.device).name
    t0 = time.perf_counter()
    with StepProgress(f"prune {space.name}") as progress:
        res = prune(space, device, limit=cfg.limit, seed=cfg.seed, progress=progress)
    elapsed = time.perf_counter() - t0
    order = rank(space, res.survivors, device)
    at = {id(c): i for i, c in enumerate(res.candidates)}  # a survivor's row in `res`'s arrays
    shown = [(c, at[id(c)]) for c in (res.survivors[i] for i in order[: cfg.show])]
    data = _prune_summary(space.name, device, res, shown, elapsed)
    if cfg.format == "json":
        output.print_json(data)
    else:
        _print_pruned(output.console(), res, shown, data)
    return 0


def _prune_summary(space: str, device: str, res, shown: list, elapsed: float) -> dict[str, Any]:
    """What `prune` found (`latency.prune.prune`'s result), as the JSON it prints: the counts,
    what each constraint pruned, the latency error and margins, and the candidates `shown`
    (each with its row in `res`'s arrays)."""
    from archsearch.cost.devices import describe_error
    from archsearch.latency import load_device

    return {
        "space": space,
        "device": device,
        "assignments": res.assignments,
        "sampled": res.sampled,
        "invalid": dict(res.invalid),
        "duplicates": res.duplicates,
        "candidates": len(res.candidates),
        "survivors": len(res.survivors),
        "pruned_by_constraint": res.pruned_by,
        # [least, most] over the candidates of each latency constraint's relative error, and
        # of what each bound was widened by (margin: error)
        "latency_error": {n: _span(e) for n, e in res.errors.items()},
        "margin": {n: _span(m) for n, m in res.margins.items()},
        "latency_provenance": describe_error(load_device(device)),
        "seconds": round(elapsed, 3),
        "shown": [
            {
                "hash": c.arch.arch_hash,
                "summary": c.arch.summary(),
                "params": c.assignment,
                "latency_error": {
                    n: None if e is None else float(e[i]) for n, e in res.errors.items()
                },
            }
            for c, i in shown
        ],
    }


def _print_pruned(con, res, shown: list, data: dict[str, Any]) -> None:
    """`prune`'s result as tables: what was rejected and pruned, and the candidates `shown`."""
    how = "sampled" if res.sampled else "enumerated"
    con.print(
        f"[bold]{data['space']}[/bold] on {data['device']}: {res.assignments:,} assignments "
        f"{how}, {len(res.candidates):,} distinct valid candidates, "
        f"[bold]{len(res.survivors):,} survive[/bold] ({data['seconds']:.2f} s)"
    )
    rows = [[reason, n] for reason, n in res.invalid.most_common()]
    rows.append(["duplicate architecture", res.duplicates])
    for name, n in res.pruned_by.items():
        margin = res.margins[name]
        widened = f" x (1 + {_percent_span(margin)}): margin: error" if np.any(margin) else ""
        rows.append([f"pruned by {name}{widened}", n])
    title = "rejected and pruned (a candidate can break several constraints)"
    con.print(output.table(title, ["reason", "count"], rows))
    if shown:
        cols = list(res.values)

        def cell(n: str, i: int) -> str:
            error = None if res.errors[n] is None else res.errors[n][i]
            return _fmt_metric(n, res.values[n][i], error)

        table_rows = [
            [c.arch.arch_hash, c.arch.summary(), *[cell(n, i) for n in cols]] for c, i in shown
        ]
        title = f"survivors (first {len(shown)} of {len(res.survivors)})"
        con.print(output.table(title, ["hash", "architecture", *cols], table_rows))
    if any(e is not None for e in res.errors.values()) or any(
        name.startswith(("ttft", "decode", "e2e")) for name in res.errors
    ):
        con.print(f"latency error: {data['latency_provenance']}")


def _span(values: np.ndarray | None) -> list[float] | None:
    """[least, most] of per-candidate figures (None: none, or no candidate)."""
    if values is None or len(values) == 0:
        return None
    return [float(np.min(values)), float(np.max(values))]


def _percent_span(values: np.ndarray) -> str:
    """'14%', or '10-40% by working set' where candidates' errors differ."""
    lo, hi = _span(values) or [0.0, 0.0]
    if round(100 * lo) == round(100 * hi):
        return f"{100 * hi:.0f}%"
    return f"{100 * lo:.0f}-{100 * hi:.0f}% by working set"


def _fmt_metric(name: str, v: float, error: float | None = None) -> str:
    if "bytes" in name:
        return output.human(v, "B")
    if name.startswith(("ttft", "decode", "e2e")):
        return f"{fmt_ms(v)} {fmt_error(error)}"
    if "flops" in name:
        return output.human(v, "FLOP")
    return output.human(v)


# ---- archsearch calibrate -----------------------------------------------------------------------


def calibrate_cmd(_sub: str | None, cfg: Any) -> int:
    from archsearch.cost.devices import processor
    from archsearch.latency.calibrate import calibrate, plan, pooled
    from archsearch.latency.calibrate.pool import read_earlier, same_machine
    from archsearch.latency.profile import parse_profile, write_profile
    from archsearch.runtimes import require

    if cfg.threads <= 0 or cfg.repeats <= 0:
        raise UserError("threads and repeats must be positive", key="threads")
    if cfg.repeats > MAX_REPEATS:
        raise UserError(f"must be at most {MAX_REPEATS}, got {cfg.repeats}", key="repeats")
    require(str(cfg.runtime), key="runtime")
    name, path = _profile_destination(cfg)  # before minutes of measuring
    how = plan(str(cfg.budget), threads=cfg.threads, repeats=cfg.repeats, runtime=str(cfg.runtime))
    earlier, machine = read_earlier(str(cfg.pool), how) if cfg.pool else (None, {})
    if earlier:  # other shapes than the calibrations pooled before
        how = dataclasses.replace(how, seed=earlier.get("pooled", 1))
        if not cfg.device_resource:
            same_machine(machine, processor(), cfg.pool)
    if cfg.device_resource:
        result = _calibrate_on_node(cfg, how, earlier)
        if earlier:  # the node's CPU is known once it has run
            same_machine(machine, result["node"], cfg.pool)
    else:
        from archsearch.sweep.device_calibration import node_record

        with StepProgress("calibrate") as progress:
            result = calibrate(how, progress=progress)
        result["node"] = node_record(how.runtime)
        result = pooled(result, earlier, how) if earlier else result
    prof = result["profile"]
    node = result["node"]
    prof["name"] = name
    prof["measured_on"] = node
    if cfg.device_resource:
        node["ray_resource"] = cfg.device_resource
        where = f"{node['hostname']} (Ray resource {cfg.device_resource!r})"
        prof["description"] = f"{where}, measured: {node['cpu']}"
    dev = parse_profile(prof, source=str(path), default_name=name)  # a bad one is never written
    write_profile(prof, path)
    if cfg.format == "json":
        output.print_json({"path": str(path), **result})
        return 0
    title = f"{name} profile ({cfg.threads} threads, measured on {node['hostname']})"
    con = output.console()
    con.print(output.table(title, ["", ""], _profile_rows(prof, dev, how.name)))
    con.print(f"written: {path} (use it: device={path if cfg.output else name})")
    return 0


def _profile_rows(prof: dict[str, Any], dev, budget: str) -> list[list[Any]]:
    """A calibrated profile in rows: its peaks and bandwidth, the half precision's factors, its
    learned predictor and each held-out check of its error."""
    from archsearch.cost.devices import describe_bands

    rows = [
        ["peak fp32", f"{prof['peak_flops']['fp32'] / 1e9:.4g} GFLOP/s"],
        ["peak bf16", f"{prof['peak_flops']['fp16'] / 1e9:.4g} GFLOP/s"],
        ["memory bandwidth", f"{prof['memory_bandwidth'] / 1e9:.4g} GB/s"],
        ["matmul half-efficiency rows (bf16)", prof["efficiency"]["fp16"]["half_rows"]],
        ["overhead per operator", f"{prof['efficiency']['fp16']['op_overhead_s'] * 1e6:.3g} µs"],
    ]
    learned = dev.predictor
    if learned is not None:
        timings = sum(f.samples for f in learned.kernels.values())
        rows.append(
            [
                "kernel predictor",
                f"{len(learned.kernels)} kernels, {timings} timings in {learned.runtime} "
                f"(budget={budget}); whole models sampled over {learned.sample_s:g} s",
            ]
        )
    for quantity, checks in dev.validation.items():
        for v in checks:
            bands = v.by_working_set
            rows.append(
                [
                    f"held-out {quantity} error at {'/'.join(v.precisions)}",
                    f"MAPE {100 * v.mape:.1f}%, within +-10% {100 * v.within_10:.0f}% of {v.n} "
                    f"predictions, +-{100 * v.error:.0f}% ({v.statistic})"
                    + (f"; by working set: {describe_bands(bands)}" if bands else ""),
                ]
            )
    return rows


def _profile_destination(cfg: Any) -> tuple[str, Path]:
    """The profile's name and file: `output` where given (the profile named after the file
    unless `name` says otherwise), `local` in the shipped folder by default, else NAME.yaml in
    the user device folder. A shipped or plugin profile's name is refused anywhere but its own
    file: a name means one profile wherever a command reads it."""
    from archsearch.cost.devices import devices_dir, reserved_device_names, user_devices_dir
    from archsearch.resources import check_name

    named = cfg.name or cfg.device_resource
    name = named or (Path(cfg.output).stem if cfg.output else "local")
    check_name(name, what="device", key="name" if cfg.name else "device_resource")
    own = (devices_dir() / f"{name}.yaml").resolve()
    if cfg.output and name in reserved_device_names() and Path(cfg.output).resolve() != own:
        raise UserError(
            f"{name!r} is a shipped or plugin device profile's name; give the measured one a "
            f"name of its own (name=..., or another file name), e.g. name={name}_measured",
            key="name" if named else "output",
        )
    if cfg.output:
        path, key = Path(cfg.output), "output"
    elif name == "local" and not cfg.device_resource:
        path, key = devices_dir() / "local.yaml", "output"
    elif name in reserved_device_names():
        raise UserError(
            f"{name!r} is a shipped or plugin device profile; save the measured one under a name "
            f"of its own, e.g. name={name}_measured",
            key="name",
        )
    else:
        path, key = user_devices_dir() / f"{name}.yaml", "name"
    if path.is_dir():
        raise UserError(f"{str(path)!r} is a folder; give a .yaml file", key=key)
    check_writable_dir(path.parent, key=key)
    return name, path


def _calibrate_on_node(cfg: Any, how: Any, earlier: dict | None) -> dict[str, Any]:
    """Calibrate the Ray node that advertises `cfg.device_resource` (a Ray task), pooling
    `earlier`'s raw timings in there."""
    import math

    from archsearch.sweep.ray_runtime import contain_ray, ray_session

    if not (math.isfinite(cfg.wait_s) and cfg.wait_s >= 0):
        raise UserError(
            f"must be 0 or a positive number of seconds, got {cfg.wait_s}", key="wait_s"
        )
    address = cfg.ray.address or "auto"
    contain_ray(cfg.ray.verbose, address)  # before `ray` is imported
    from archsearch.sweep.device_calibration import calibrate_on_node

    with (
        ray_session(address, None, cfg.ray.verbose),
        StepProgress(f"calibrate {cfg.device_resource}") as progress,
    ):
        return calibrate_on_node(
            cfg.device_resource, how, wait_s=cfg.wait_s, progress=progress, earlier=earlier
        )
