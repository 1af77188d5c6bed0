"""`archsearch space show|sample`: inspect a search space and draw candidates from it."""

from __future__ import annotations

import math
from typing import Any

from archsearch.cli import output
from archsearch.errors import UserError
from archsearch.space import Fixed, SearchSpace, count, open_space, sample

MAX_SAMPLE = 10_000  # candidates one `space sample` draws


def run(sub: str, cfg: Any) -> int:
    space = open_space(search_space=cfg.search_space, space_file=cfg.space_file)
    if sub == "show":
        return show(space, cfg.format)
    return sample_cmd(space, cfg.n, cfg.seed, cfg.format)


def describe(space: SearchSpace) -> dict[str, Any]:
    size = count(space)
    return {
        "name": space.name,
        "source": space.source,
        "description": space.description,
        "base": space.base_name,
        "size": "inf" if math.isinf(size) else size,
        "params": [
            {
                "name": p.name,
                "domain": p.domain.describe(),
                "values": p.domain.values() if p.domain.finite else None,
                "when": {k: list(v) for k, v in p.when},
            }
            for p in space.params
        ],
        "derived": dict(space.derived),
        "constraints": [
            {
                "metric": c.spec.metric,
                "args": dict(c.spec.args),
                "max": c.max,
                "min": c.min,
                "label": c.name,
                "bound": _bound(c),
            }
            for c in space.constraints
        ],
        "objectives": [
            {
                "metric": o.spec.metric,
                "args": dict(o.spec.args),
                "direction": o.direction,
                "label": o.name,
            }
            for o in space.objectives
        ],
    }


def show(space: SearchSpace, fmt: str) -> int:
    info = describe(space)
    if fmt == "json":
        output.print_json(info)
        return 0
    con = output.console()
    con.print(f"[bold]{space.name}[/bold]  ({space.source})")
    if space.description:
        con.print(space.description)
    con.print(f"base architecture: {space.base_name}")
    rows = [
        [
            p["name"],
            p["domain"],
            " and ".join(f"{k} in {v}" for k, v in p["when"].items()) or "always",
        ]
        for p in info["params"]
    ]
    con.print(output.table("parameters", ["parameter", "domain", "active when"], rows))
    if space.derived:
        con.print(
            output.table(
                "derived values", ["key", "expression"], [[k, v] for k, v in space.derived.items()]
            )
        )
    if space.constraints:
        con.print(
            output.table(
                "constraints",
                ["metric", "bound"],
                [[c["label"], c["bound"]] for c in info["constraints"]],
            )
        )
    if space.objectives:
        con.print(
            output.table(
                "objectives",
                ["objective", "direction"],
                [[o["label"], o["direction"]] for o in info["objectives"]],
            )
        )
    size = info["size"]
    con.print(
        f"size: {size if size == 'inf' else f'{size:,}'} assignments"
        + (" (continuous parameters)" if size == "inf" else "")
    )
    return 0


def sample_cmd(space: SearchSpace, n: int, seed: int, fmt: str) -> int:
    if n <= 0:
        raise UserError(f"must be positive, got {n}", key="n")
    if n > MAX_SAMPLE:
        raise UserError(f"must be at most {MAX_SAMPLE:,}, got {n}", key="n")
    result = sample(space, n, seed)
    records = [
        {
            "hash": c.arch.arch_hash,
            "summary": c.arch.summary(),
            "params": c.assignment,
            "arch": c.arch.to_dict(),
        }
        for c in result.candidates
    ]
    if fmt == "json":
        output.print_json(
            {
                "space": space.name,
                "seed": seed,
                "requested": n,
                "draws": result.draws,
                "candidates": records,
                "rejections": dict(result.rejections),
                "rejection_examples": result.examples,
                "duplicates": result.duplicates,
                "exhausted": result.exhausted,
            }
        )
        return 0
    _print_sample(space, seed, records, result)
    return 0


def _print_sample(space: SearchSpace, seed: int, records: list[dict], result: Any) -> None:
    """The drawn candidates, one row each with the varied parameters' values, and what was
    rejected while drawing."""
    con = output.console()
    varied = [p.name for p in space.params if not isinstance(p.domain, Fixed)]
    short = _short_names(varied)
    rows = [
        [
            i,
            r["hash"],
            r["summary"],
            " ".join(
                f"{short[k]}={output.fmt_value(r['params'][k])}" for k in varied if k in r["params"]
            ),
        ]
        for i, r in enumerate(records)
    ]
    con.print(
        output.table(
            f"{len(records)} candidates from {space.name} (seed {seed})",
            ["#", "hash", "architecture", "parameter values"],
            rows,
        )
    )
    rej = [[reason, k, result.examples[reason]] for reason, k in result.rejections.most_common()]
    rej.append(["duplicate (same canonical hash)", result.duplicates, ""])
    con.print(
        output.table(
            f"rejected while drawing ({result.draws} draws)", ["reason", "count", "example"], rej
        )
    )
    if result.exhausted:
        con.print(
            f"[yellow]only {len(records)} distinct valid candidates found in "
            f"{result.draws} draws[/yellow]"
        )


def _bound(c: Any) -> str:
    unit = {"bytes": "B", "count": "", "ms": " ms", "flops": "FLOP"}.get(c.spec.definition.unit, "")
    parts = []
    if c.min is not None:
        parts.append(f">= {output.human(c.min, unit)}")
    if c.max is not None:
        parts.append(f"<= {output.human(c.max, unit)}")
    return " and ".join(parts)


def _short_names(names: list[str]) -> dict[str, str]:
    """The last path component, or the full path where two parameters share it."""
    leaves = [n.rsplit(".", 1)[-1] for n in names]
    return {n: leaf if leaves.count(leaf) == 1 else n for n, leaf in zip(names, leaves)}
