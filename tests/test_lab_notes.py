"""Comments explain the code as it is, in the style of tests/test_layering.py: a scan of every
comment and docstring of the library (`archsearch/`, `trainers/`, `analysis/`) and every comment
of `conf/` and `search_spaces/` for what ages the day it is written:

- a run or calibration name (`epyc27c1`, `xeon28f`, `ps4`), a VM, a date, an issue number;
- a measured figure: a sentence that says something was measured (took, ran, timed, measured,
  benchmarked, ...) and quotes a duration, a rate, a ratio or a share;
- a pointer to the README, whose lab notes moved to the documentation and the benchmarks.

Measured figures live in `benchmarks/results/` and on the benchmarks page; history in git.
Everywhere (strings and data included), a work is cited by its bibliography key (`[PLM] eq. 6`),
never as "seed PLM", and every key cited is in docs/bibliography.md.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = [ROOT / "archsearch", ROOT / "trainers", ROOT / "analysis"]
DATA = [ROOT / "conf", ROOT / "search_spaces"]

RULES = {
    "a run name": re.compile(r"\b(?:epyc|xeon)\d{2}[a-z0-9]*\b|\b(?:ps[1-9]|ov[12])\b", re.I),
    "a VM": re.compile(r"\bVMs?\b"),
    "a date": re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"),
    "an issue number": re.compile(r"\bissues? #?\d+|\(#\d+|#\d+ (?:deliverable|item)", re.I),
    "the README": re.compile(r"\bREADME\b"),
}
MEASURED = re.compile(r"\b(?:measured|took|ran|runs? in|timed|benchmarked|calibrated)\b", re.I)
FIGURE = re.compile(  # a duration, a rate, a share or a ratio (`2x`; `2 x 3` is a product)
    r"\d(?:[\d.,]*\d)?(?:x\b|\s?(?:%|ms\b|us\b|µs\b|s\b|sec\b|min\b|minutes\b|h\b|hours\b|"
    r"GB/s\b|MB/s\b|GFLOP/s\b|tokens/s\b))"
)
SEED_CITATION = re.compile(r"\bseed (?:PLM|MCSD|Linear-MoE|lecture)\b", re.I)
CITATION = re.compile(
    r"\[([A-Z][\w-]*)\](?= (?:eqs?\.|Tables?|Figs?\.|§|section|Appendix|Table|\d))"
)


def sources() -> list[Path]:
    out = []
    for folder in LIBRARY:
        out += [p for p in folder.rglob("*.py") if not _linked(p, folder)]
    for folder in DATA:
        out += [p for p in folder.rglob("*.yaml")]
    return sorted(out)


def _linked(path: Path, folder: Path) -> bool:
    """Read through its own folder: archsearch/trainers etc. are symlinks to the top level."""
    return (folder / path.relative_to(folder).parts[0]).is_symlink()


def prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring line of a Python file, or every comment of a
    YAML file."""
    text = path.read_text()
    if path.suffix == ".yaml":
        return [
            (i, line.split("#", 1)[1])
            for i, line in enumerate(text.splitlines(), 1)
            if "#" in line and not re.search(r"'[^']*#[^']*'|\"[^\"]*#[^\"]*\"", line)
        ]
    out = [
        (tok.start[0], tok.string[1:])
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                lines = value.value.splitlines()
                out += [(value.lineno + i, line) for i, line in enumerate(lines)]
    return out


def sentences(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The prose joined into sentences (a comment's sentence often spans lines), each with the
    line it starts on."""
    out, current, start, last = [], [], 0, -2
    for number, line in sorted(lines):
        if number != last + 1 and current:
            out.append((start, " ".join(current)))
            current = []
        if not current:
            start = number
        for part in re.split(r"(?<=[.;:!?])\s+(?=[A-Z(`])", line.strip()):
            current.append(part)
            if re.search(r"[.;!?]$", part):
                out.append((start, " ".join(current)))
                current, start = [], number
        last = number
    if current:
        out.append((start, " ".join(current)))
    return out


def lab_notes(path: Path, root: Path = ROOT) -> list[str]:
    found = []
    where = path.relative_to(root)
    lines = prose(path)
    for number, line in lines:
        for what, rule in RULES.items():
            if rule.search(line):
                found.append(f"{where}:{number}: {what}: {line.strip()}")
    for number, sentence in sentences(lines):
        if MEASURED.search(sentence) and FIGURE.search(sentence):
            found.append(f"{where}:{number}: a measured figure: {sentence}")
    return found


SOURCES = sources()


def test_the_scan_reads_the_library_conf_and_spaces():
    names = {p.relative_to(ROOT).parts[0] for p in SOURCES}
    assert names == {"archsearch", "trainers", "analysis", "conf", "search_spaces"}
    assert len(SOURCES) > 100


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_comments_carry_no_lab_notes(path):
    found = lab_notes(path)
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("# calibrated as epyc27c1 on the EPYC VM", "a run name"),
        ("# on the Xeon VM the L3 is shared", "a VM"),
        ("# fixed on 2026-11-27", "a date"),
        ("# (issue 12) seed noise", "an issue number"),
        ("# see the README", "the README"),
        ("# a full calibration took 14 min 54 s on this machine.", "a measured figure"),
        ("# it ran 1.3-2x slower for its first calls.", "a measured figure"),
    ],
)
def test_the_scan_finds_each_kind_of_lab_note(tmp_path, text, what):
    path = tmp_path / "x.py"
    path.write_text(f"{text}\nx = 1\n")
    found = lab_notes(path, tmp_path)
    assert any(f": {what}: " in f for f in found), found


@pytest.mark.parametrize(
    "text",
    [
        "# the least of its samples over `SAMPLE_S` seconds",
        "# seconds = a x launches + b x bytes + c x FLOPs ([nn-Meter])",
        "# a matmul is 2 x m x k x n FLOPs",
        "# `tokens:2M`: training tokens",
    ],
)
def test_the_scan_lets_explanations_through(tmp_path, text):
    path = tmp_path / "x.py"
    path.write_text(f"{text}\nx = 1\n")
    assert lab_notes(path, tmp_path) == []


# ---- citations --------------------------------------------------------------------------------

CITED = [
    *(p for folder in LIBRARY for p in folder.rglob("*.py") if not _linked(p, folder)),
    *(p for folder in DATA for p in folder.rglob("*.yaml")),
    *(ROOT / "docs").rglob("*.md"),
    ROOT / "README.md",
    *(ROOT / "benchmarks").glob("*.py"),
    *(ROOT / "tests").glob("*.py"),
]


def bibliography() -> set[str]:
    text = (ROOT / "docs" / "bibliography.md").read_text()
    return set(re.findall(r"\*\*\[([^\]]+)\]\*\*", text))


@pytest.mark.parametrize("path", sorted(set(CITED)), ids=lambda p: str(p.relative_to(ROOT)))
def test_works_are_cited_by_their_bibliography_key(path):
    if path == Path(__file__):
        return
    text = path.read_text()
    assert not SEED_CITATION.findall(text), [
        line for line in text.splitlines() if SEED_CITATION.search(line)
    ]
    unknown = set(CITATION.findall(text)) - bibliography()
    assert not unknown, f"cited but not in docs/bibliography.md: {sorted(unknown)}"
