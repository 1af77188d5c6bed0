"""YAML reading and writing shared by every file archsearch reads.

A safe loader (YAML never instantiates Python objects) that also reads `1e9` and `30e6` as
numbers, as OmegaConf and YAML 1.2 do (PyYAML's YAML 1.1 resolver needs `1.0e+9`). Errors become
one-line `UserError`s naming the file, the line and the column.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from archsearch.errors import UserError


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 floats."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)
        |[-+]?(?:[0-9][0-9_]*)\.[0-9_]*
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def loads(text: str, *, source: str | None = None) -> Any:
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "syntax error"
        raise UserError(f"malformed YAML: {problem}{where}", source=source) from None


def load(path: str | Path) -> Any:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise UserError(f"cannot read file: {err.strerror}", source=str(path)) from None
    return loads(text, source=str(path))


def dumps(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
