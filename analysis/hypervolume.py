"""Exact hypervolume and the non-dominated filter, all axes minimised, through `moocore`.

moocore ([moocore]) implements the literature's best exact algorithms in C: the
hypervolume in 3-D by HV3D+ (Guerreiro and Fonseca 2018, O(n log n)), in 4-D by HV4D+ and
beyond by WFG-style slicing; non-dominance in O(n log n) for two and three axes. A 100,000-point
3-D front takes tens of milliseconds where a Python sweep took seconds.

What is ours: the conventions (a point that does not beat the reference adds nothing; a row with
a NaN or an infinity is never on a front and dominates nothing; identical points are all kept)
and `prefix_hypervolumes`, a study's history: the front so far is carried from one requested
prefix to the next (filtered with the trials added since), and the hypervolume is computed once
per requested prefix over that front only.
"""

from __future__ import annotations

import moocore
import numpy as np

__all__ = ["hypervolume", "non_dominated_minimised", "prefix_hypervolumes"]


def hypervolume(points: np.ndarray, reference: np.ndarray) -> float:
    """Volume dominated by `points` ([n, d], minimised) and bounded by `reference` ([d]).
    Points that do not beat the reference on every axis add nothing."""
    ref = np.asarray(reference, dtype=float)
    pts = np.asarray(points, dtype=float).reshape(-1, len(ref))
    pts = pts[np.all(pts < ref, axis=1)]  # NaN compares False: dropped
    if len(pts) == 0:
        return 0.0
    if len(ref) == 1:
        return float(ref[0] - pts[:, 0].min())
    return float(moocore.hypervolume(pts, ref=ref))


def non_dominated_minimised(points: np.ndarray) -> np.ndarray:
    """Mask of the rows of `points` ([n, d], minimised) that no other row dominates; rows with
    a NaN or an infinity are never on the front, identical rows are all kept."""
    pts = np.asarray(points, dtype=float)
    mask = np.zeros(len(pts), dtype=bool)
    finite = np.flatnonzero(np.isfinite(pts).all(axis=1)) if len(pts) else np.zeros(0, int)
    if len(finite):
        mask[finite] = moocore.is_nondominated(pts[finite], keep_weakly=True)
    return mask


def prefix_hypervolumes(points: np.ndarray, reference: np.ndarray, at: list[int]) -> list[float]:
    """The hypervolume of `points[: k + 1]` ([n, d] in arrival order, minimised; rows with a
    NaN add nothing) for each k of `at` (ascending)."""
    ref = np.asarray(reference, dtype=float)
    pts = np.asarray(points, dtype=float).reshape(-1, len(ref))
    counts = np.asarray(at, dtype=int) + 1  # how many points each requested prefix holds
    below = np.all(pts < ref, axis=1)  # NaN compares False: dropped
    inside = pts[below]  # in arrival order
    ends = np.searchsorted(np.flatnonzero(below), counts)  # each prefix's points: inside[:end]
    front = np.zeros((0, len(ref)))  # every point of the prefix so far that no other dominates
    hv, done, out = 0.0, 0, []
    for end in ends.tolist():
        if end > done:
            front = np.vstack([front, inside[done:end]])
            front = front[non_dominated_minimised(front)]
            hv = hypervolume(front, ref)
            done = end
        out.append(hv)
    return out
