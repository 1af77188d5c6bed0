"""Boosted regression trees as plain data: fitted with scikit-learn, evaluated with numpy.

Each kernel's learned correction (`archsearch.latency.predict`) is a gradient-boosted ensemble
of shallow trees, stored in a profile's fitted data as numbers (no pickle, nothing that
executes), so a profile fitted on one machine is read on another without scikit-learn:

    features: [names]        the inputs, in column order
    init: float              the ensemble's constant start (the mean target)
    rate: float              the learning rate (each tree's weight)
    depth: int               every tree is stored as a complete binary tree of this depth
    feature: str             per tree, its nodes in heap order (children of node i: 2i + 1 when
    threshold: str           x[feature] <= threshold, else 2i + 2) as numbers separated by
    value: str               spaces, the trees separated by `;`; a leaf has feature -1

Thresholds keep 9 significant digits (features are log2 sizes: none falls within 1e-9 of a
split between two measured ones), leaf values 6 (a relative change of 1e-6 in a time).

`predict` equals scikit-learn's `GradientBoostingRegressor.predict` on the same inputs (which
compares float32 copies of the inputs with float64 thresholds; so does `predict`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from archsearch.errors import UserError

__all__ = ["Ensemble", "fit", "parse"]


@dataclass(frozen=True)
class Ensemble:
    """A fitted ensemble; arrays are [trees, 2^(depth+1) - 1]."""

    features: tuple[str, ...]
    init: float
    rate: float
    depth: int
    feature: np.ndarray
    threshold: np.ndarray
    value: np.ndarray

    def leaves(self, X: np.ndarray) -> np.ndarray:
        """The node each row of X [n, features] ends at in each tree, [n, trees] (float32
        comparisons, as sklearn)."""
        x = np.asarray(X, dtype=np.float64).astype(np.float32).astype(np.float64)
        n, trees = x.shape[0], self.feature.shape[0]
        tree = np.arange(trees)[None, :]
        node = np.zeros((n, trees), dtype=np.int64)
        rows = np.arange(n)[:, None]
        for _ in range(self.depth):
            f = self.feature[tree, node]
            go_left = x[rows, np.maximum(f, 0)] <= self.threshold[tree, node]
            node = np.where(f < 0, node, 2 * node + np.where(go_left, 1, 2))
        return node

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The ensemble's output for rows X [n, features]."""
        node = self.leaves(X)
        if node.shape[0] == 0:
            return np.zeros(0)
        values = self.value[np.arange(node.shape[1])[None, :], node]
        # tree by tree, in sklearn's order of summation: a cumulative sum adds in sequence
        terms = np.column_stack([np.full(node.shape[0], self.init), self.rate * values])
        return np.cumsum(terms, axis=1)[:, -1]

    def to_dict(self) -> dict[str, Any]:
        return {
            "features": list(self.features),
            "init": float(self.init),
            "rate": float(self.rate),
            "depth": int(self.depth),
            "feature": _lines(self.feature, "d"),
            "threshold": _lines(self.threshold, ".9g"),
            "value": _lines(self.value, ".6g"),
        }


def fit(
    X: np.ndarray,
    y: np.ndarray,
    features: tuple[str, ...],
    *,
    trees: int = 50,
    depth: int = 2,
    rate: float = 0.1,
    min_leaf: int = 2,
) -> Ensemble:
    """Fit scikit-learn's gradient boosting (squared error) and convert it to an `Ensemble`."""
    from sklearn.ensemble import GradientBoostingRegressor

    model = GradientBoostingRegressor(
        n_estimators=trees,
        max_depth=depth,
        learning_rate=rate,
        min_samples_leaf=min_leaf,
        random_state=0,
    ).fit(np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64))
    return from_sklearn(model, features)


def from_sklearn(model: Any, features: tuple[str, ...]) -> Ensemble:
    """The `Ensemble` of a fitted `GradientBoostingRegressor` (its trees laid out in heap order)."""
    depth = int(model.max_depth)
    size = 2 ** (depth + 1) - 1
    trees = model.estimators_[:, 0]
    feature = np.full((len(trees), size), -1, dtype=np.int64)
    threshold = np.zeros((len(trees), size))
    value = np.zeros((len(trees), size))
    for t, estimator in enumerate(trees):
        tree = estimator.tree_
        stack = [(0, 0)]  # (sklearn node, heap position)
        while stack:
            node, pos = stack.pop()
            value[t, pos] = tree.value[node, 0, 0]
            if tree.children_left[node] >= 0:
                feature[t, pos] = tree.feature[node]
                threshold[t, pos] = tree.threshold[node]
                stack += [(tree.children_left[node], 2 * pos + 1)]
                stack += [(tree.children_right[node], 2 * pos + 2)]
    init = float(model.init_.predict(np.zeros((1, len(features))))[0])
    return Ensemble(
        tuple(features), init, float(model.learning_rate), depth, feature, threshold, value
    )


def _lines(array: np.ndarray, fmt: str) -> str:
    return "; ".join(" ".join(format(v, fmt) for v in row) for row in array.tolist())


def parse(raw: Any, *, source: str, key: str, features: tuple[str, ...]) -> Ensemble:
    """An `Ensemble` from its stored form, checked: one-line errors name the key path."""

    def bad(what: str, sub: str, got: Any) -> UserError:
        shown = repr(got) if len(repr(got)) <= 60 else repr(got)[:57] + "..."
        return UserError(f"{what}, got {shown}", source=source, key=f"{key}.{sub}".rstrip("."))

    known = ("features", "init", "rate", "depth", "feature", "threshold", "value")
    if not isinstance(raw, dict) or set(map(str, raw)) != set(known):
        raise bad(
            f"expected the keys {list(known)}", "", sorted(raw) if isinstance(raw, dict) else raw
        )
    if not isinstance(raw["features"], list) or tuple(raw["features"]) != tuple(features):
        raise bad(f"expected the features {list(features)}", "features", raw["features"])
    for k in ("init", "rate"):
        v = raw[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise bad("expected a finite number", k, v)
    depth = raw["depth"]
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= 6:
        raise bad("expected a whole number of levels in 1..6", "depth", depth)
    size, arrays = 2 ** (depth + 1) - 1, {}
    for k in ("feature", "threshold", "value"):
        what = f"expected trees separated by ';', each {size} finite numbers separated by spaces"
        try:
            arrays[k] = np.array([[float(v) for v in t.split()] for t in raw[k].split(";")])
        except (AttributeError, ValueError):
            raise bad(what, k, raw[k]) from None
        if arrays[k].ndim != 2 or arrays[k].shape[1] != size or not np.isfinite(arrays[k]).all():
            raise bad(what, k, raw[k])
    if not arrays["feature"].shape == arrays["threshold"].shape == arrays["value"].shape:
        raise bad("expected as many trees as `feature`", "value", raw["value"])
    feature = arrays["feature"]
    if np.any(feature != np.round(feature)) or np.any((feature < -1) | (feature >= len(features))):
        raise bad(f"expected feature indices in -1..{len(features) - 1}", "feature", raw["feature"])
    return Ensemble(
        tuple(features),
        float(raw["init"]),
        float(raw["rate"]),
        depth,
        feature.astype(np.int64),
        arrays["threshold"],
        arrays["value"],
    )
