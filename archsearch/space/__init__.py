"""The search-space language: YAML space files in Hydra's sweep grammar (with conditional
parameters and derived values), and the candidate architectures drawn from them.

Modules, lowest first (each imports only those above it):
- `domains`: one parameter's values (`choice`, `range`, `interval`, fixed), parsed by Hydra;
- `assign`: an assignment set into the base architecture, derived values resolved;
- `spec`: the space file: loading, checking, `SearchSpace`;
- `candidates`: enumerating, counting, sampling and Optuna's define-by-run over a space.
"""

from archsearch.space.candidates import (
    Candidate,
    SampleResult,
    assignments,
    build,
    count,
    draws,
    sample,
    sample_assignment,
    suggest,
)
from archsearch.space.domains import Choice, Domain, Fixed, Interval, Range, parse_domain
from archsearch.space.spec import (
    Param,
    SearchSpace,
    load_space,
    open_space,
    parse_space,
    parse_space_file,
)

__all__ = [
    "Candidate",
    "Choice",
    "Domain",
    "Fixed",
    "Interval",
    "Param",
    "Range",
    "SampleResult",
    "SearchSpace",
    "assignments",
    "build",
    "count",
    "draws",
    "load_space",
    "open_space",
    "parse_domain",
    "parse_space",
    "parse_space_file",
    "sample",
    "sample_assignment",
    "suggest",
]
