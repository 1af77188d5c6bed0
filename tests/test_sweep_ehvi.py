"""The `ehvi` sampler: its expected hypervolume improvement is exact, and in a study it picks only
new feasible candidates, is seeded, and reaches the front sooner than random sampling."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from archsearch.analysis.hypervolume import hypervolume
from archsearch.errors import UserError
from archsearch.space import parse_space, suggest
from archsearch.sweep.ehvi import N_STARTUP, EHVISampler, expected_improvement
from archsearch.sweep.pricing import assess
from archsearch.sweep.testing import synthetic_loss

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE = """
name: ehvi_test
base: tiny_gqa
params:
  n_layers: choice(2, 3, 4)
  d_model: choice(64, 96, 128)
  layers.mixer: choice(attention, linear, mcsd)
  linear.family:
    values: choice(gla, mamba2, retnet)
    when: {layers.mixer: linear}
  ffn.kind: choice(swiglu, relu2)
derived:
  attention.n_heads: ${div:${d_model},32}
  linear.n_heads: ${div:${d_model},32}
  mcsd.n_channels: ${div:${d_model},16}
  ffn.d_ffn: ${mul:${d_model},3}
constraints:
  - {metric: params, max: 700K}
objectives:
  - {metric: val_loss, direction: minimize}
  - {metric: decode_ms, direction: minimize, device: rpi5, context: 1024, precision: fp16}
"""


@pytest.fixture(scope="module")
def space():
    return parse_space(yaml.safe_load(SPACE), source="ehvi_test.yaml")


def _improvement(front: np.ndarray, point: np.ndarray, ref: np.ndarray) -> float:
    both = np.vstack([front, point[None, :]]) if len(front) else point[None, :]
    before = hypervolume(front, ref) if len(front) else 0.0
    return hypervolume(both, ref) - before


fronts = st.integers(0, 2).flatmap(  # known objectives: none (a loss alone), one, two
    lambda m: st.tuples(
        st.just(m),
        st.lists(st.tuples(*[st.floats(0, 1)] * (m + 1)), min_size=0, max_size=6),
        st.tuples(*[st.floats(0, 1)] * m),
        st.floats(0, 1),
        st.floats(0.01, 0.3),
    )
)


@settings(max_examples=25, deadline=None)
@given(fronts)
def test_expected_improvement_equals_the_mean_improvement_over_the_loss(case):
    """The closed form against the expectation integrated numerically over the loss (the
    improvement of each value by moocore's exact hypervolume; loss first, then the known
    objectives; the reference at 1.05 on every axis)."""
    m, points, known, mu, sd = case
    pts = np.array(points, float).reshape(-1, m + 1)
    ref = np.full(m + 1, 1.05)
    got = expected_improvement(
        np.array([known]), np.array([mu]), np.array([sd]), pts[:, 1:], pts[:, 0], ref[1:], 1.05
    )[0]
    ys = np.linspace(mu - 6 * sd, mu + 6 * sd, 481)
    gain = [_improvement(pts, np.array([y, *known]), ref) for y in ys]
    expected = np.trapezoid(np.array(gain) * norm.pdf(ys, mu, sd), ys)
    assert got == pytest.approx(expected, rel=2e-3, abs=1e-6)
    # with no uncertainty it is the improvement itself
    exact = expected_improvement(
        np.array([known]), np.array([mu]), np.array([1e-12]), pts[:, 1:], pts[:, 0], ref[1:], 1.05
    )[0]
    assert exact == pytest.approx(_improvement(pts, np.array([mu, *known]), ref), abs=1e-9)


# as on search_small, one family learns far faster than the rest at this budget
FAMILY_OFFSET = {"mamba2": -0.3, "gla": 0.0, "retnet": 0.1, "mcsd": 0.05}


def _truth(space) -> dict[str, tuple[float, float]]:
    """(loss, decode ms) of every feasible candidate, by arch hash: the synthetic trainable's
    loss (falls with size, plus a pseudo-random 0-0.1 per architecture) and a family offset."""
    from archsearch.space import assignments

    out = {}
    for a in assignments(space):
        got = assess(space, [], "rpi5", a)
        if got.status is None:
            arch = got.priced.arch
            family = arch.linear.family if arch.layers.mixer == "linear" else arch.layers.mixer
            out[arch.arch_hash] = (
                synthetic_loss(arch.to_dict()) + FAMILY_OFFSET.get(family, 0.15),
                got.priced.value(space.objectives[1].spec, "rpi5"),
            )
    return out


def _search(space, sampler, truth, n: int) -> list[str]:
    """Ask `sampler` for candidates until n feasible new ones trained; their hashes in order.
    Infeasible or repeated asks are told PRUNED, as the sweep does."""
    study = optuna.create_study(directions=["minimize"] * len(space.objectives), sampler=sampler)
    picked: list[str] = []
    for _ in range(500):
        if len(picked) == n:
            break
        trial = study.ask()
        got = assess(space, [], "rpi5", suggest(space, trial))
        h = got.priced.arch.arch_hash if got.status is None else None
        if h is None or h in picked:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            continue
        study.tell(trial, list(truth[h])[: len(space.objectives)])
        picked.append(h)
    return picked


def _share(picked, truth) -> float:
    pts = np.array(list(truth.values()))
    ref = pts.max(axis=0) + 0.1 * (pts.max(axis=0) - pts.min(axis=0))  # as the benchmark's
    return hypervolume(np.array([truth[h] for h in picked]), ref) / hypervolume(pts, ref)


def test_the_sampler_picks_new_feasible_candidates_seeded_and_finds_the_front_sooner(space):
    truth = _truth(space)
    n = len(truth) // 4  # a quarter of the feasible candidates
    ehvi = [_search(space, EHVISampler(space, "rpi5", seed), truth, n) for seed in range(4)]
    for picked in ehvi:
        assert len(set(picked)) == len(picked) == n  # never an infeasible or repeated ask
    assert _search(space, EHVISampler(space, "rpi5", 0), truth, n) == ehvi[0]  # seeded
    assert ehvi[1][:N_STARTUP] != ehvi[0][:N_STARTUP]  # the seed draws the start
    random = [
        _search(space, optuna.samplers.RandomSampler(seed=seed), truth, n) for seed in range(4)
    ]
    got = np.mean([_share(p, truth) for p in ehvi])
    baseline = np.mean([_share(p, truth) for p in random])
    assert got >= 0.95 and got > baseline + 0.1, (got, baseline)


def test_the_sampler_runs_until_the_pool_is_exhausted(space):
    truth = _truth(space)
    picked = _search(space, EHVISampler(space, "rpi5", 1), truth, len(truth))
    assert sorted(picked) == sorted(truth)  # every feasible candidate once, then nothing new


def test_a_loss_alone_is_searched_by_expected_improvement(space):
    """No known objective: the improvement is the loss's expected improvement over the best."""
    alone = parse_space(
        {**yaml.safe_load(SPACE), "objectives": [{"metric": "val_loss"}]},
        source="alone.yaml",
    )
    truth = _truth(space)
    picked = _search(alone, EHVISampler(alone, "rpi5", 0), truth, len(truth) // 4)
    assert len(set(picked)) == len(picked) == len(truth) // 4
    best = sorted(v[0] for v in truth.values())
    assert min(truth[h][0] for h in picked) <= best[2]  # among the three best losses


def test_a_space_with_two_trained_objectives_is_refused(space):
    two = parse_space(
        {
            "base": "tiny_gqa",
            "params": {"n_layers": "choice(2, 4)"},
            "objectives": [{"metric": "val_loss"}, {"metric": "probe_acc", "task": "recall"}],
        },
        source="two.yaml",
    )
    with pytest.raises(UserError, match="exactly one objective that training measures"):
        EHVISampler(two, "rpi5", 0)


def test_auto_is_ehvi_where_it_applies_and_tpe_elsewhere():
    from archsearch.space import load_space
    from archsearch.sweep.runner import resolve_sampler
    from archsearch.sweep.settings import LatencyMode, Sampler

    tiny, two = load_space("tiny"), load_space("hybrid_linear_moe")  # loss; loss + probe
    assert resolve_sampler(Sampler.auto, tiny, LatencyMode.predicted) == Sampler.ehvi
    assert resolve_sampler(Sampler.auto, two, LatencyMode.predicted) == Sampler.tpe
    # a measured latency is not known before training: nothing for ehvi to stand on
    assert resolve_sampler(Sampler.auto, tiny, LatencyMode.measured) == Sampler.tpe
    for name in (Sampler.tpe, Sampler.nsga2, Sampler.random, Sampler.ehvi):
        assert resolve_sampler(name, tiny, LatencyMode.measured) == name
