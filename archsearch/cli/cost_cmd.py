"""`archsearch cost`, `archsearch prune` and `archsearch calibrate`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from archsearch.cli import output
from archsearch.errors import UserError
from archsearch.space.metrics import PRECISIONS

CATEGORY_OF = (
    ("attn.", "attention"),
    ("mla.", "attention"),
    ("lin.", "linear"),
    ("mamba2.", "linear"),
    ("rwkv6.", "linear"),
    ("mcsd.", "mcsd"),
    ("ffn.", "ffn"),
    ("moe.", "moe"),
    ("block.", "norms+residual"),
    ("embedding", "embedding"),
    ("final.norm", "norms+residual"),
    ("lm_head", "lm head"),
)


def category(name: str) -> str:
    return next(cat for prefix, cat in CATEGORY_OF if name.startswith(prefix))


def _check_lengths(cfg: Any) -> None:
    if cfg.precision not in PRECISIONS:
        raise UserError(
            f"unknown precision {cfg.precision!r} (known: {', '.join(PRECISIONS)})", key="precision"
        )
    for key in ("prompt", "context", "generate", "batch"):
        if getattr(cfg, key) <= 0:
            raise UserError(
                f"must be a positive number of tokens, got {getattr(cfg, key)}", key=key
            )
    for n in cfg.seq_lens:
        if n <= 0:
            raise UserError(f"sequence lengths must be positive, got {n}", key="seq_lens")


# ---- archsearch cost ----------------------------------------------------------------------------


def arch_report(arch, device, cfg: Any) -> dict[str, Any]:
    from archsearch.cost import columns, model
    from archsearch.cost.counts import Phase, params, state_elements

    c = columns(arch)
    prec, B = cfg.precision, cfg.batch
    bits = model.cache_bits(prec)
    p = {k: float(v[0]) for k, v in params(c).items()}
    prefill = Phase("forward", T=cfg.prompt, B=B, causal="half")
    step = Phase("step", T=1, n0=cfg.context, B=B)
    last = 1.0 if device.prefill_logits == "last" else None
    t_prefill = dict(_by_category(model.op_seconds(c, prefill, device, prec, lm_head_tokens=last)))
    t_step = dict(_by_category(model.op_seconds(c, step, device, prec)))
    f_prefill = dict(_flops_by_category(c, prefill))
    f_step = dict(_flops_by_category(c, step))
    r = arch.resolved()
    layers = {
        "attention": r.pattern.count("N"),
        "linear": r.pattern.count("L"),
        "mcsd": r.pattern.count("M"),
        "ffn": r.n_layers if r.moe is None else 0,
        "moe": r.n_layers if r.moe is not None else 0,
    }
    rows = []
    for cat in (
        "attention",
        "linear",
        "mcsd",
        "ffn",
        "moe",
        "norms+residual",
        "embedding",
        "lm head",
    ):
        n = layers.get(cat, 0)
        if t_step.get(cat, 0.0) == 0 and t_prefill.get(cat, 0.0) == 0:
            continue
        rows.append(
            {
                "part": cat,
                "layers": n,
                "prefill_gflops": f_prefill.get(cat, 0.0) / 1e9,
                "decode_mflops": f_step.get(cat, 0.0) / 1e6,
                "ttft_ms": 1e3 * t_prefill.get(cat, 0.0),
                "decode_ms": 1e3 * t_step.get(cat, 0.0),
            }
        )
    ttft = 1e3 * float(model.ttft_s(c, device, cfg.prompt, prec, B)[0])
    dec = 1e3 * float(model.decode_s(c, device, cfg.context, prec, B)[0])
    e2e = 1e3 * float(model.e2e_s(c, device, cfg.prompt, cfg.generate, prec, B)[0])
    totals = {
        **p,
        "weight_bytes": float(model.weight_bytes(c, prec)[0]),
        **{
            f"cache_bytes_{b}bit": float(model.cache_bytes(c, cfg.context, b, B)[0])
            for b in (16, 8, 4)
        },
        "state_elements": float(state_elements(c, cfg.context, B)[0]),
        "memory_bytes": float(model.memory_bytes(c, cfg.context, prec, B)[0]),
        "prefill_flops": float(model.flops(c, prefill)[0]),
        "decode_flops_per_token": float(model.flops(c, step)[0]) / B,
        "train_flops_per_token": float(model.train_flops_per_token(c, cfg.prompt)[0]),
        "ttft_ms": ttft,
        "decode_ms": dec,
        "e2e_ms": e2e,
        "decode_tokens_per_s": 1e3 * B / dec,
        "prefill_tokens_per_s": 1e3 * cfg.prompt * B / ttft,
    }
    notes = []
    if cfg.context > r.max_seq_len or cfg.prompt + cfg.generate > r.max_seq_len:
        notes.append(f"beyond max_seq_len={r.max_seq_len}")
    return {
        "arch": arch.name,
        "summary": arch.summary(),
        "device": device.name,
        "precision": prec,
        "cache_bits": bits,
        "settings": {
            "prompt": cfg.prompt,
            "context": cfg.context,
            "generate": cfg.generate,
            "batch": B,
        },
        "breakdown": rows,
        "totals": totals,
        "notes": notes,
    }


def _by_category(items) -> list[tuple[str, float]]:
    out: dict[str, float] = {}
    for name, t in items:
        out[category(name)] = out.get(category(name), 0.0) + float(np.asarray(t).ravel()[0])
    return list(out.items())


def _flops_by_category(c, phase) -> list[tuple[str, float]]:
    from archsearch.cost.counts import model_ops

    out: dict[str, float] = {}
    for count, op in model_ops(c, phase):
        v = float(np.asarray(count * op.flops).ravel()[0])
        out[category(op.name)] = out.get(category(op.name), 0.0) + v
    return list(out.items())


def cost_cmd(_sub: str | None, cfg: Any) -> int:
    from archsearch.arch import load_arch
    from archsearch.cost.devices import load_device

    output.check_format(cfg.format)
    _check_lengths(cfg)
    names = [a.strip() for a in cfg.arch.split(",") if a.strip()]
    if not names:
        raise UserError("name at least one architecture", key="arch")
    archs = [load_arch(a) for a in names]
    device = load_device(cfg.device)
    reports = [arch_report(a, device, cfg) for a in archs]
    plot_path = None
    if cfg.seq_lens:
        plot_path = Path(
            cfg.plot
            or Path("runs") / "cost" / f"{'-'.join(a.name for a in archs)}-{device.name}.png"
        )
        curves = length_curves(archs, device, cfg)
        plot_lengths(curves, [a.name for a in archs], device, cfg, plot_path)
        for rep, curve in zip(reports, curves):
            rep["curves"] = curve
    if cfg.format == "json":
        output.print_json({"reports": reports, "plot": str(plot_path) if plot_path else None})
        return 0
    con = output.console()
    for rep in reports:
        s = rep["settings"]
        title = (
            f"{rep['arch']} ({rep['summary']}) on {rep['device']}, {rep['precision']}: "
            f"prompt {s['prompt']}, context {s['context']}, batch {s['batch']}"
        )
        rows = [
            [
                r["part"],
                r["layers"] or "-",
                f"{r['prefill_gflops']:.4g}",
                f"{r['decode_mflops']:.4g}",
                f"{r['ttft_ms']:.4g}",
                f"{r['decode_ms']:.4g}",
            ]
            for r in rep["breakdown"]
        ]
        con.print(
            output.table(
                title,
                [
                    "part",
                    "layers",
                    "prefill GFLOPs",
                    "decode MFLOPs/token",
                    "TTFT ms",
                    "decode ms/token",
                ],
                rows,
            )
        )
        t = rep["totals"]
        lines = [
            [
                "params",
                f"{output.human(t['params'])} (embedding {output.human(t['embedding_params'])}"
                f", non-embedding {output.human(t['non_embedding_params'])}, active "
                f"{output.human(t['active_params'])})",
            ],
            ["weights", output.human(t["weight_bytes"], "B") + f" at {rep['precision']}"],
            [
                "KV cache / state",
                f"{output.human(t['cache_bytes_16bit'], 'B')} (16-bit), "
                f"{output.human(t['cache_bytes_8bit'], 'B')} (8-bit), "
                f"{output.human(t['cache_bytes_4bit'], 'B')} (4-bit) at context {s['context']}",
            ],
            ["peak inference memory", output.human(t["memory_bytes"], "B")],
            [
                "FLOPs",
                f"prefill {output.human(t['prefill_flops'])}, decode "
                f"{output.human(t['decode_flops_per_token'])}/token, training "
                f"{output.human(t['train_flops_per_token'])}/token",
            ],
            [
                "time to first token",
                f"{t['ttft_ms']:.4g} ms ({t['prefill_tokens_per_s']:.4g} tokens/s)",
            ],
            ["decode", f"{t['decode_ms']:.4g} ms/token ({t['decode_tokens_per_s']:.4g} tokens/s)"],
            [f"end to end ({s['prompt']} + {s['generate']})", f"{t['e2e_ms']:.4g} ms"],
        ]
        for n in rep["notes"]:
            lines.append(["note", n])
        con.print(output.table("totals", ["", ""], lines))
    if plot_path:
        con.print(f"plot: {plot_path}")
    return 0


def length_curves(archs, device, cfg: Any) -> list[dict[str, list[float]]]:
    from archsearch.cost import columns, model

    out = []
    lens = np.array(sorted(cfg.seq_lens), dtype=np.float64)
    for a in archs:
        c = columns(a)
        bits = model.cache_bits(cfg.precision)
        cache = [float(model.cache_bytes(c, n, bits, cfg.batch)[0]) for n in lens]
        memory = [float(model.memory_bytes(c, n, cfg.precision, cfg.batch)[0]) for n in lens]
        decode = [
            1e3 * float(model.decode_s(c, device, n, cfg.precision, cfg.batch)[0]) for n in lens
        ]
        e2e = [
            1e3 * float(model.e2e_s(c, device, cfg.prompt, int(n), cfg.precision, cfg.batch)[0])
            for n in lens
        ]
        out.append(
            {
                "seq_lens": lens.tolist(),
                "cache_bytes": cache,
                "memory_bytes": memory,
                "decode_ms": decode,
                "e2e_ms": e2e,
            }
        )
    return out


def plot_lengths(curves, labels: list[str], device, cfg: Any, path: Path) -> None:
    """Memory and latency against sequence length (the seed MCSD Figs. 5-7 kind of picture)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for label, curve in zip(labels, curves):
        x = curve["seq_lens"]
        axes[0].plot(x, np.array(curve["cache_bytes"]) / 2**20, marker="o", label=label)
        axes[1].plot(x, curve["decode_ms"], marker="o", label=label)
        axes[2].plot(x, np.array(curve["e2e_ms"]) / 1e3, marker="o", label=label)
    titles = (
        "KV cache / recurrent state (MiB)",
        "decode latency at that context (ms/token)",
        f"prompt {cfg.prompt} + that many generated tokens (s)",
    )
    for ax, title in zip(axes, titles):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length (tokens)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"predicted on {device.name}, {cfg.precision}, batch {cfg.batch}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- archsearch prune ---------------------------------------------------------------------------


def prune_cmd(_sub: str | None, cfg: Any) -> int:
    from archsearch.cli.space_cmd import open_space
    from archsearch.cost.devices import load_device
    from archsearch.cost.table import prune

    output.check_format(cfg.format)
    for key in ("limit", "show"):
        if getattr(cfg, key) < 0 or (key == "limit" and cfg.limit == 0):
            raise UserError(f"must be positive, got {getattr(cfg, key)}", key=key)
    space = open_space(cfg)
    device = load_device(cfg.device).name
    t0 = time.perf_counter()
    res = prune(space, device, limit=cfg.limit, seed=cfg.seed)
    elapsed = time.perf_counter() - t0
    survivors = res.survivors
    order = _rank(space, survivors, device)
    shown = [survivors[i] for i in order[: cfg.show]]
    data = {
        "space": space.name,
        "device": device,
        "assignments": res.assignments,
        "sampled": res.sampled,
        "invalid": dict(res.invalid),
        "duplicates": res.duplicates,
        "candidates": len(res.candidates),
        "survivors": len(survivors),
        "pruned_by_constraint": res.pruned_by,
        "seconds": round(elapsed, 3),
        "shown": [
            {"hash": c.arch.arch_hash, "summary": c.arch.summary(), "params": c.assignment}
            for c in shown
        ],
    }
    if cfg.format == "json":
        output.print_json(data)
        return 0
    con = output.console()
    how = "sampled" if res.sampled else "enumerated"
    con.print(
        f"[bold]{space.name}[/bold] on {device}: {res.assignments:,} assignments {how}, "
        f"{len(res.candidates):,} distinct valid candidates, "
        f"[bold]{len(survivors):,} survive[/bold] ({elapsed:.2f} s)"
    )
    rows = [[reason, n] for reason, n in res.invalid.most_common()]
    rows.append(["duplicate architecture", res.duplicates])
    rows += [[f"pruned by {name}", n] for name, n in res.pruned_by.items()]
    con.print(
        output.table(
            "rejected and pruned (a candidate can break several constraints)",
            ["reason", "count"],
            rows,
        )
    )
    if shown:
        cols = list(res.values)
        idx = {id(c): i for i, c in enumerate(res.candidates)}
        table_rows = [
            [
                c.arch.arch_hash,
                c.arch.summary(),
                *[_fmt_metric(n, res.values[n][idx[id(c)]]) for n in cols],
            ]
            for c in shown
        ]
        con.print(
            output.table(
                f"survivors (first {len(shown)} of {len(survivors)})",
                ["hash", "architecture", *cols],
                table_rows,
            )
        )
    return 0


def _rank(space, survivors, device) -> list[int]:
    """Survivors ordered by the space's first cost objective (else as enumerated)."""
    from archsearch.cost import metric_values
    from archsearch.cost.counts import Columns

    cost_obj = [o for o in space.objectives if o.spec.phase == "cost"]
    if not survivors or not cost_obj:
        return list(range(len(survivors)))
    values = metric_values(
        Columns.from_archs([c.arch for c in survivors]), cost_obj[0].spec.with_device(device)
    )
    order = np.argsort(values if cost_obj[0].direction == "minimize" else -values, kind="stable")
    return [int(i) for i in order]


def _fmt_metric(name: str, v: float) -> str:
    if "bytes" in name:
        return output.human(v, "B")
    if name.startswith(("ttft", "decode", "e2e")):
        return f"{v:.4g} ms"
    return output.human(v)


# ---- archsearch calibrate -----------------------------------------------------------------------


def calibrate_cmd(_sub: str | None, cfg: Any) -> int:
    from archsearch.cost.calibrate import calibrate, write_profile
    from archsearch.cost.devices import devices_dir

    output.check_format(cfg.format)
    if cfg.threads <= 0 or cfg.repeats <= 0:
        raise UserError("threads and repeats must be positive", key="threads")
    path = Path(cfg.output) if cfg.output else devices_dir() / "local.yaml"
    if path.exists() and path.is_dir():
        raise UserError(f"{str(path)!r} is a folder; give a .yaml file", key="output")
    result = calibrate(cfg.threads, cfg.repeats, cfg.quick)
    write_profile(result["profile"], path)
    if cfg.format == "json":
        output.print_json({"path": str(path), **result})
        return 0
    prof = result["profile"]
    con = output.console()
    rows = [
        ["peak fp32", f"{prof['peak_flops']['fp32'] / 1e9:.4g} GFLOP/s"],
        ["peak bf16", f"{prof['peak_flops']['fp16'] / 1e9:.4g} GFLOP/s"],
        ["memory bandwidth", f"{prof['memory_bandwidth'] / 1e9:.4g} GB/s"],
        ["matmul half-efficiency rows (fp32)", prof["efficiency"]["fp32"]["half_rows"]],
        ["overhead per operator", f"{prof['efficiency']['fp32']['op_overhead_s'] * 1e6:.3g} µs"],
    ]
    con.print(output.table(f"local profile ({cfg.threads} threads)", ["", ""], rows))
    con.print(f"written: {path}")
    return 0
