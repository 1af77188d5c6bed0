"""Exact hypervolume of a set of points, all axes minimised, up to a reference point.

Written here rather than taken from Optuna, whose hypervolume module is private and may change
in any release. Fronts have two or three axes:
- 2-D: sort by the first axis and sum the rectangles of the staircase, O(n log n);
- 3-D: sweep the third axis; between consecutive levels the volume is the slab's height times
  the 2-D hypervolume of the points below it (the 2-D front is kept sorted as points arrive),
  O(n^2) at worst and O(n log n) when the front stays small;
- more axes: the same slicing, recursively (HSO, While et al. 2006), for small sets.

`prefix_hypervolumes` gives the hypervolume after each of a list of trials (a study's history)
without recomputing each prefix: in 2-D the staircase and its area are updated as each point
arrives (O(log n) per point, amortised); in 3-D the front so far is carried from one requested
prefix to the next and the sweep runs once per requested prefix over that front and the points
added since, dropping the points it finds dominated.
"""

from __future__ import annotations

import bisect

import numpy as np

__all__ = ["hypervolume", "prefix_hypervolumes"]


def hypervolume(points: np.ndarray, reference: np.ndarray) -> float:
    """Volume dominated by `points` ([n, d], minimised) and bounded by `reference` ([d]).
    Points that do not beat the reference on every axis add nothing."""
    pts = np.asarray(points, dtype=float).reshape(-1, len(reference))
    ref = np.asarray(reference, dtype=float)
    pts = pts[np.all(pts < ref, axis=1)]
    if len(pts) == 0:
        return 0.0
    d = pts.shape[1]
    if d == 1:
        return float(ref[0] - pts[:, 0].min())
    if d == 2:
        return _hv2(pts, ref)
    if d == 3:
        return _hv3(pts, ref)
    return _slice(pts, ref)


def _hv2(pts: np.ndarray, ref: np.ndarray) -> float:
    order = np.lexsort((pts[:, 1], pts[:, 0]))
    total, best_y = 0.0, ref[1]
    xs, ys = pts[order, 0], pts[order, 1]
    for i in range(len(xs)):
        if ys[i] < best_y:
            total += (ref[0] - xs[i]) * (best_y - ys[i])
            best_y = ys[i]
    return float(total)


def _hv3(pts: np.ndarray, ref: np.ndarray) -> float:
    return _sweep3(pts, ref)[0]


def _sweep3(pts: np.ndarray, ref: np.ndarray) -> tuple[float, np.ndarray]:
    """(hypervolume of `pts` [n, 3], all below `ref`; the points that add to it, in order of
    their third value: the others are weakly dominated by one of them)."""
    pts = pts[np.argsort(pts[:, 2], kind="stable")]
    rows = pts.tolist()
    ref_list = [float(r) for r in ref]
    xs: list[float] = []  # the 2-D front of the points seen so far: x ascending, y descending
    ys: list[float] = []
    keep = np.zeros(len(rows), dtype=bool)
    area = 0.0  # its 2-D hypervolume up to (ref[0], ref[1])
    total = 0.0
    for i, (x, y, z) in enumerate(rows):
        new_area = _insert(xs, ys, x, y, area, ref_list)
        if new_area is not None:
            keep[i] = True
            area = new_area
        z_next = rows[i + 1][2] if i + 1 < len(rows) else ref_list[2]
        total += area * (z_next - z)
    return float(total), pts[keep]


def prefix_hypervolumes(points: np.ndarray, reference: np.ndarray, at: list[int]) -> list[float]:
    """The hypervolume of `points[: k + 1]` ([n, d] in arrival order, minimised; rows with a
    NaN add nothing) for each k of `at` (ascending)."""
    pts = np.asarray(points, dtype=float).reshape(-1, len(reference))
    ref = np.asarray(reference, dtype=float)
    counts = np.asarray(at, dtype=int) + 1  # how many points each requested prefix holds
    inside = np.flatnonzero(np.all(pts < ref, axis=1))  # NaN compares False: dropped
    ends = np.searchsorted(inside, counts)  # the inside points of each prefix: inside[:end]
    d = pts.shape[1]
    if d == 2:
        return _prefix2(pts[inside], ref, ends)
    if d == 3:
        return _prefix3(pts[inside], ref, ends)
    return [hypervolume(pts[inside[:end]], ref) for end in ends]


def _prefix2(pts: np.ndarray, ref: np.ndarray, ends: np.ndarray) -> list[float]:
    rows = pts.tolist()
    ref_list = [float(r) for r in ref]
    xs: list[float] = []
    ys: list[float] = []
    area, done, out = 0.0, 0, []
    for end in ends.tolist():
        for x, y in rows[done:end]:
            new_area = _insert(xs, ys, x, y, area, ref_list)
            if new_area is not None:
                area = new_area
        done = max(done, end)
        out.append(float(area))
    return out


def _prefix3(pts: np.ndarray, ref: np.ndarray, ends: np.ndarray) -> list[float]:
    front = np.zeros((0, 3))  # carries every point of the prefix that adds to its volume
    hv, done, out = 0.0, 0, []
    for end in ends.tolist():
        if end > done:
            hv, front = _sweep3(np.vstack([front, pts[done:end]]), ref)
            done = end
        out.append(hv)
    return out


def _insert(xs: list[float], ys: list[float], x: float, y: float, area: float, ref) -> float | None:
    """Add (x, y) to the 2-D front (x ascending, y descending); return the front's new area,
    or None when (x, y) is weakly dominated and nothing changed. Only the strip from x to the
    first point it does not dominate changes."""
    k = bisect.bisect_right(xs, x)
    if k > 0 and ys[k - 1] <= y:  # weakly dominated by a point at or left of x
        return None
    start = k - 1 if k > 0 and xs[k - 1] == x else k
    end = k
    while end < len(xs) and ys[end] >= y:  # the run of points it dominates
        end += 1
    right = xs[end] if end < len(xs) else ref[0]
    height = ys[start - 1] if start > 0 else ref[1]  # the staircase just left of x
    before, left = 0.0, x
    for rx, ry in zip(xs[start:end], ys[start:end]):
        rx = max(rx, x)
        before += (rx - left) * (ref[1] - height)
        left, height = rx, ry
    before += (right - left) * (ref[1] - height)
    del xs[start:end], ys[start:end]
    xs.insert(start, x)
    ys.insert(start, y)
    return area - before + (right - x) * (ref[1] - y)


def _slice(pts: np.ndarray, ref: np.ndarray) -> float:
    pts = pts[np.argsort(pts[:, -1], kind="stable")]
    total = 0.0
    for i in range(len(pts)):
        z_next = pts[i + 1, -1] if i + 1 < len(pts) else ref[-1]
        if z_next > pts[i, -1]:
            total += hypervolume(pts[: i + 1, :-1], ref[:-1]) * (z_next - pts[i, -1])
    return float(total)
