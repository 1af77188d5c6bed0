"""The law's prediction corrected across architectures by a study's confirmations
(`archsearch.trainers.transfer`): a known correction is recovered, few confirmations fall back
to the law's mean shift, an unseen mixer class is refused, mixer shares of hybrids, bad counts;
and `archsearch confirm`'s leave-one-out figure of the corrected prediction on a real sweep."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsearch.arch import ArchConfig, load_arch
from archsearch.trainers.transfer import (
    MIN_EXAMPLES,
    Example,
    Traits,
    UnseenMixer,
    fit_transfer,
    mixer_shares,
)

KINDS = ("attention/gqa", "attention/mla", "linear/gla", "linear/mamba2", "mcsd")


def traits(params: float, kind: str) -> Traits:
    shares = {kind: 1.0, kind.split("/")[0]: 1.0}
    return Traits(params, 6.0 * params, tuple(sorted(shares.items())))


def synthetic(rng, n: int, offsets: dict[str, float], size_slope: float, noise: float):
    """Examples whose log ratio confirmed/law is an offset per mixer kind plus a slope in ln
    parameters, with Gaussian noise."""
    out, kinds = [], sorted(offsets)
    for i in range(n):
        kind = kinds[i % len(kinds)]
        params = float(rng.uniform(1e5, 1e6))
        law = float(rng.uniform(1.1, 1.7))
        ratio = offsets[kind] + size_slope * math.log(params / 3e5) + rng.normal(0, noise)
        out.append(Example(traits(params, kind), law, law * math.exp(ratio)))
    return out


@settings(max_examples=15, deadline=None)
@given(
    offsets=st.lists(st.floats(-0.1, 0.1), min_size=5, max_size=5),
    slope=st.floats(-0.05, 0.05),
    seed=st.integers(0, 2**16),
)
def test_a_correction_by_mixer_and_size_is_recovered(offsets, slope, seed):
    rng = np.random.default_rng(seed)
    by_kind = dict(zip(KINDS, offsets))
    transfer = fit_transfer(synthetic(rng, 60, by_kind, slope, 0.005))
    errors, within = [], []
    for e in synthetic(rng, 40, by_kind, slope, 0.005):
        got = transfer.predict(e.traits, e.law)
        errors.append(abs(got.value / e.confirmed - 1))
        within.append(abs(got.value - e.confirmed) <= 2 * got.std)
        assert got.std > 0
    # the law alone misses by up to 10% + 5% x the size term; the correction by the noise. The
    # band covers about 95% of points: 13 or more of 40 outside it happen by chance in under one
    # draw in 10^7, while a std half what it should be (about 68% inside) fails about every
    # other draw.
    assert np.mean(errors) < 0.012 and np.mean(within) >= 0.7


def test_few_confirmations_shift_the_law_by_their_mean_ratio():
    rng = np.random.default_rng(0)
    examples = [
        Example(traits(float(rng.uniform(1e5, 1e6)), KINDS[i % 5]), law, law * 0.9)
        for i, law in enumerate(rng.uniform(1.1, 1.7, MIN_EXAMPLES + 1))
    ]
    got = fit_transfer(examples).predict(traits(4e5, "linear/gla"), 1.5)
    assert got.value == pytest.approx(1.35, rel=1e-3)
    with pytest.raises(ValueError, match="needs"):
        fit_transfer(examples[: MIN_EXAMPLES - 1])


def test_an_unseen_mixer_class_is_refused_an_unseen_kind_gets_its_class():
    rng = np.random.default_rng(1)
    seen = {"attention/gqa": 0.0, "linear/gla": 0.0, "linear/mamba2": 0.0}
    transfer = fit_transfer(synthetic(rng, 30, seen, 0.0, 0.01))
    with pytest.raises(UnseenMixer, match="mcsd"):
        transfer.predict(traits(3e5, "mcsd"), 1.4)
    got = transfer.predict(traits(3e5, "attention/mla"), 1.4)  # mla unseen, attention seen
    assert math.isfinite(got.value) and got.value == pytest.approx(1.4, rel=0.05)


def test_mixer_shares_name_class_and_kind_of_every_layer():
    base = load_arch("tiny_gqa").to_dict()
    hybrid = ArchConfig.from_dict(
        {
            **base,
            "n_layers": 4,
            "layers": {"mixer": "linear", "attention_share": 0.25},
            "linear": {"family": "mamba2", "n_heads": 2},
            "attention": {**base["attention"], "kind": "mla", "kv_rank": 16},
        }
    )
    assert mixer_shares(hybrid) == pytest.approx(
        {"linear": 0.75, "linear/mamba2": 0.75, "attention": 0.25, "attention/mla": 0.25}
    )
    got = Traits.of(hybrid.to_dict(), 1e5, 6e5)
    assert dict(got.mixers)["attention/mla"] == pytest.approx(0.25)


@pytest.mark.parametrize("bad", [None, 0, -3.0, float("nan"), float("inf"), "12", True])
def test_counts_must_be_positive_numbers(bad):
    arch = load_arch("tiny_gqa")
    with pytest.raises(ValueError, match="positive number"):
        Traits.of(arch, bad, 1e6)
    with pytest.raises(ValueError, match="positive number"):
        Traits.of(arch, 1e5, bad)


@pytest.mark.slow
def test_confirmations_correct_the_predicted_axis_and_report_their_error(tmp_path, capsys):
    """A real sweep (Ray Tune, SQLite, the synthetic trainable, whose loss at any budget is
    known) with most trials confirmed at 4x: `archsearch confirm` reports the corrected
    prediction leave-one-out over every confirmed trial whose mixer classes other
    confirmations show; on the axis `val_loss[tokens=4M]` a confirmed trial is its measured
    loss and every other trial the corrected prediction, near the truth, where the prior law
    alone misses by tens of percent."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from archsearch.analysis.confirm import confirmations
    from archsearch.analysis.front import Axis, predict_axes, value_of
    from archsearch.analysis.pareto import analyse
    from archsearch.cli import main
    from archsearch.study import load
    from archsearch.sweep.testing import synthetic_loss

    exe = str(Path(sys.executable).with_name("archsearch"))
    env = {**os.environ, "ARCHSEARCH_SYNTHETIC_SLEEP": "0.01"}
    run_dir = tmp_path / "run"
    common = ["trainable=archsearch.sweep.testing:synthetic", "format=json"]

    def archsearch(*args: str) -> str:
        """Run the command (its own Ray, the test's temp dir); its stdout."""
        res = subprocess.run(
            [exe, *args, *common],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env=env,
        )
        assert res.returncode == 0, res.stderr
        return res.stdout

    sweep = [f"run_dir={run_dir}", "trials=9", "seed=3", "early_stopping=none", "budget=tokens:1M"]
    archsearch("sweep", *sweep, "confirm.factor=4", "confirm.n=4")
    data = load(str(run_dir))
    (c,) = confirmations(data)
    by_number = {r.number: r for r in data.records}

    def classes(n):
        shares = mixer_shares(ArchConfig.from_dict(by_number[n].attrs["arch"]))
        return {m for m in shares if "/" not in m}

    confirmed = [t.trial for t in c.trials]
    expected = sum(
        classes(t) <= set().union(*(classes(u) for u in confirmed if u != t)) for t in confirmed
    )
    assert c.corrected == expected >= 1
    assert 0 <= c.corrected_mape_pct < 100 and 0 <= c.corrected_within_2sigma <= 1
    # stored: nothing trained (no Ray: in this process), the same figure
    capsys.readouterr()
    assert main(["confirm", f"study={run_dir}", "factor=4", "n=4", *common]) == 0
    out = json.loads(capsys.readouterr().out)["confirmation"]
    assert out["corrected_mape_pct"] == pytest.approx(c.corrected_mape_pct)
    assert "corrected across architectures" in out["facts"]["extrapolation"]

    label = "val_loss[tokens=4M]"
    decode = data.objectives[1]
    p = analyse(data, "rpi5", [Axis(decode), Axis(label)])
    assert "measured by confirmations at tokens:4M" in p.corrected[label]
    train = dict(data.meta["train"])
    others = [r for r in p.trained if r.number not in confirmed]
    assert others, "every trial was confirmed: nothing predicted"
    prior = load(str(run_dir))  # the law alone, as without confirmations
    prior_records = {r.number: r for r in prior.records}
    predict_axes(
        prior.records, [label], train, curves=lambda: prior.curves([r.number for r in others])
    )
    for r in p.trained:
        got = value_of(r, label, data.objectives)
        truth = synthetic_loss(r.attrs["arch"], {**train, "budget": "tokens:4M"})
        if r.number in confirmed:
            assert got == pytest.approx(truth)  # the confirmation measured it
            continue
        assert "corrected" in r.attrs["predicted"][label]["law"] or "alone" in p.corrected[label]
        assert abs(got / truth - 1) < 0.1
        law_alone = value_of(prior_records[r.number], label, prior.objectives)
        assert abs(law_alone / truth - 1) > 0.2
