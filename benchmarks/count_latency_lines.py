"""How large is the latency room? Lines of the learned predictor, its calibration and its profile
format, before the room was made (`--before`, a commit) and now.

Two counts per file: every line (`wc -l`), and the lines of code (no blank line, comment or
docstring). Before: the six modules of `archsearch/cost/` that held it. Now: the modules of
`archsearch/latency/` that hold it (prediction, calibration, profile format), and apart from
them the ones that moved there from `cost/` (the latency metrics, the cost report, pruning).

    python benchmarks/count_latency_lines.py --before 484a97f
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import subprocess
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEFORE = [
    f"archsearch/cost/{m}.py"
    for m in ("kernel_fit", "kernel_timing", "kernels", "calibrate", "kernel_latency", "trees")
]
NOW = [
    *(f"archsearch/latency/{m}.py" for m in ("kernels", "predict", "trees", "profile")),
    *(
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "archsearch/latency/calibrate").glob("*.py"))
    ),
]
MOVED = [f"archsearch/latency/{m}.py" for m in ("__init__", "evaluate", "breakdown", "prune")]


def counts(text: str) -> dict[str, int]:
    """Every line, and the lines that hold code (not blank, a comment or a docstring)."""
    docstrings = set()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        value = first.value if isinstance(first, ast.Expr) else None
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            docstrings.update(range(first.lineno, first.end_lineno + 1))
    code = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type not in (
            tokenize.COMMENT,
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            code.update(range(tok.start[0], tok.end[0] + 1))
    return {"lines": text.count("\n"), "code": len(code - docstrings)}


def at(commit: str | None, path: str) -> str:
    if commit is None:
        return (ROOT / path).read_text()
    return subprocess.run(
        ["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def table(commit: str | None, paths: list[str]) -> dict:
    files = {p: counts(at(commit, p)) for p in paths}
    return {"files": files, **{k: sum(f[k] for f in files.values()) for k in ("lines", "code")}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="the commit before the latency room")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "latency_lines.json"))
    args = ap.parse_args()
    result = {
        "before_commit": args.before,
        "before": table(args.before, BEFORE),
        "now": table(None, NOW),
        "moved_from_cost": table(None, MOVED),
    }
    for k in ("lines", "code"):
        result[f"{k}_share"] = result["now"][k] / result["before"][k]
    for name in ("before", "now", "moved_from_cost"):
        t = result[name]
        print(f"{name:16s} {t['lines']:5d} lines, {t['code']:5d} of code")
    shares = f"{result['lines_share']:.2f} of the lines, {result['code_share']:.2f} of the code"
    print(f"now / before: {shares}")
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
