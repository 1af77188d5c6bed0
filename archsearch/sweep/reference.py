"""The hypervolume's reference point of a sweep, fixed when its study is created.

Per objective, in this order: the value stated with `reference=` on the sweep command; for a
cost objective, the bound of a constraint on the same metric, else the worst value over the
space's feasible candidates (all of them, or a fixed seeded sample of a large space) moved 10%
further out; for `val_loss` the loss of a uniform prediction over the vocabulary (ln V
nats/token), for `val_ppl` V, for `probe_acc` 0. Later trials and reruns never move it, so the
hypervolumes of two runs of the same space compare.
"""

from __future__ import annotations

import math

from archsearch.errors import UserError
from archsearch.space import SearchSpace
from archsearch.sweep.pricing import Priced, price_all

__all__ = ["study_reference"]

PROBES = 256  # candidates priced for the worst cost of a larger space (a seeded sample)
MARGIN = 0.1  # the worst cost moved this share further out, so the extreme points count


def study_reference(
    space: SearchSpace, device: str, stated: list[float] | None
) -> tuple[list[float], str]:
    """(the reference point, one value per objective; where it came from)."""
    specs = [o.spec.on_device(device, only_unset=True) for o in space.objectives]
    if stated:
        if len(stated) != len(specs):
            raise UserError(
                f"give one value per objective ({len(specs)}), got {len(stated)}",
                key="reference",
            )
        return [float(v) for v in stated], "stated (reference=)"
    bounds = {c.spec.on_device(device, only_unset=True).label: c for c in space.constraints}
    worst: dict[int, float] = {}
    ref: list[float | None] = []
    for i, (spec, objective) in enumerate(zip(specs, space.objectives)):
        bound = bounds.get(spec.label)
        limit = bound and (bound.max if objective.direction == "minimize" else bound.min)
        if limit is not None:
            ref.append(float(limit))
        elif spec.metric in ("val_loss", "val_ppl", "probe_acc"):
            vocab = _vocab_size(space)
            ref.append({"val_loss": math.log(vocab), "val_ppl": float(vocab)}.get(spec.metric, 0.0))
        else:
            ref.append(None)
            worst[i] = -math.inf if objective.direction == "minimize" else math.inf
    if worst:
        from archsearch.latency import metric_value

        for priced in _feasible(space, device):
            for i in worst:
                v = priced.value(specs[i], device)
                v = metric_value(priced.arch, specs[i]) if v is None else v
                pick = max if space.objectives[i].direction == "minimize" else min
                worst[i] = pick(worst[i], v)
        for i, v in worst.items():
            sign = 1 if space.objectives[i].direction == "minimize" else -1
            ref[i] = v * (1 + sign * MARGIN) if math.isfinite(v) else None
    if any(v is None for v in ref):
        return [], ""
    return [float(v) for v in ref], "the space (vocabulary, constraints, worst feasible cost)"


def _vocab_size(space: SearchSpace) -> int:
    from archsearch.space import sample

    sizes = [c.arch.vocab_size for c in sample(space, 8, 0).candidates]
    return max(sizes) if sizes else 256


def _feasible(space: SearchSpace, device: str) -> list[Priced]:
    from archsearch.space import build, draws

    archs = [cand.arch for cand in (build(space, a) for a in draws(space, PROBES)) if cand.ok]
    return [priced for priced in price_all(space, [], device, archs) if priced.feasible]
