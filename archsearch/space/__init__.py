"""The search-space language: YAML spaces in Hydra's sweep grammar, and their candidates."""

from archsearch.space.candidates import (
    Candidate,
    SampleResult,
    assignments,
    build,
    count,
    enumerate_candidates,
    sample,
    suggest,
)
from archsearch.space.domains import Choice, Domain, Fixed, Interval, Range, parse_domain
from archsearch.space.metrics import METRICS, Constraint, MetricSpec, Objective
from archsearch.space.spec import Param, SearchSpace, load_space, parse_space, parse_space_file

__all__ = [
    "METRICS",
    "Candidate",
    "Choice",
    "Constraint",
    "Domain",
    "Fixed",
    "Interval",
    "MetricSpec",
    "Objective",
    "Param",
    "Range",
    "SampleResult",
    "SearchSpace",
    "assignments",
    "build",
    "count",
    "enumerate_candidates",
    "load_space",
    "parse_domain",
    "parse_space",
    "parse_space_file",
    "sample",
    "suggest",
]
