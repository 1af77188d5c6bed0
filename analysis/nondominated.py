"""Which points no other point dominates (every axis minimised), fast enough for a study of
100,000 trials.

Identical points do not dominate each other (all are kept); a row with a NaN or an infinity is
never on the front and dominates nothing. The points are made unique and sorted
lexicographically first (a point can only be dominated by one before it), then:
- 2-D: a point is on the front iff its second value is below every one before it (a running
  minimum), O(n log n), vectorised;
- 3-D: the sweep of Kung, Luccio and Preparata (1975): the 2-D front of the last two values of
  the points seen so far is kept as a sorted staircase; a point is dominated iff the stair
  just left of it is at or below it, O(n log n);
- more axes: each point against the front found so far (vectorised block nested loops), O(n f).
"""

from __future__ import annotations

import bisect

import numpy as np

__all__ = ["non_dominated_minimised"]


def non_dominated_minimised(points: np.ndarray) -> np.ndarray:
    """Mask of the rows of `points` ([n, d], minimised) that no other row dominates."""
    pts = np.asarray(points, dtype=float)
    n = len(pts)
    mask = np.zeros(n, dtype=bool)
    finite = np.flatnonzero(np.isfinite(pts).all(axis=1)) if n else np.zeros(0, dtype=int)
    if len(finite) == 0:
        return mask
    # + 0.0 turns -0.0 into 0.0, so equal values are identical rows
    unique, inverse = np.unique(pts[finite] + 0.0, axis=0, return_inverse=True)
    d = unique.shape[1]
    if d == 1:
        keep = np.zeros(len(unique), dtype=bool)
        keep[0] = True
    elif d == 2:
        keep = _front2(unique)
    elif d == 3:
        keep = _front3(unique)
    else:
        keep = _front_any(unique)
    mask[finite] = keep[inverse.reshape(-1)]
    return mask


def _front2(unique: np.ndarray) -> np.ndarray:
    y = unique[:, 1]
    best_before = np.concatenate([[np.inf], np.minimum.accumulate(y)[:-1]])
    return y < best_before


def _front3(unique: np.ndarray) -> np.ndarray:
    keep = np.zeros(len(unique), dtype=bool)
    ys: list[float] = []  # the staircase of (y, z): y strictly ascending, z strictly descending
    zs: list[float] = []
    for i, (_, y, z) in enumerate(unique.tolist()):
        k = bisect.bisect_right(ys, y)
        if k > 0 and zs[k - 1] <= z:
            continue
        keep[i] = True
        start = k - 1 if k > 0 and ys[k - 1] == y else k
        end = k
        while end < len(zs) and zs[end] >= z:
            end += 1
        ys[start:end] = [y]
        zs[start:end] = [z]
    return keep


def _front_any(unique: np.ndarray) -> np.ndarray:
    keep = np.zeros(len(unique), dtype=bool)
    front = np.zeros((0, unique.shape[1]))
    for i, p in enumerate(unique):
        if not (front <= p).all(axis=1).any():
            keep[i] = True
            front = np.vstack([front, p])
    return keep
