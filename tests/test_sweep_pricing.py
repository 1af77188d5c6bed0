"""Pricing many candidates at once (`price_all`, `assess_all`: one cost table, each metric
evaluated once over it) gives exactly what pricing them one by one gives, for any mix of
mixers, of invalid candidates, of constraints with and without an error margin; and a candidate
whose pricing raises stays that candidate's failure when it is priced with others."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from archsearch.space import assignments, parse_space
from archsearch.study import Status
from archsearch.sweep.pricing import assess, assess_all, price, price_all

SPACE = """
name: pricing_test
base: tiny_gqa
params:
  n_layers: choice(2, 4)
  d_model: choice(64, 128)
  layers.mixer: choice(attention, linear, mcsd)
  linear.family:
    values: choice(gla, mamba2, deltanet)
    when: {layers.mixer: linear}
  vars.k: choice(0, 1, 2)
derived:
  attention.n_heads: ${floordiv:${d_model},${mul:32,${vars.k}}}
  linear.n_heads: ${div:${d_model},32}
  mcsd.n_channels: ${div:${d_model},16}
constraints:
  - {metric: params, max: 600K}
  - {metric: decode_ms, max: 0.3, device: rpi5, context: 1024, precision: q4, margin: error}
objectives:
  - {metric: val_loss, direction: minimize}
  - {metric: ttft_ms, direction: minimize, device: jetson_orin_nx, prompt: 256}
"""


@pytest.fixture(scope="module")
def space():
    return parse_space(yaml.safe_load(SPACE), source="pricing_test.yaml")


@pytest.fixture(scope="module")
def every(space):
    return list(assignments(space))


def test_the_space_holds_every_kind_of_outcome(space, every):
    # the property below means something only if the space mixes these
    got = [assess(space, [], "rpi5", a) for a in every]
    assert {g.status for g in got} == {None, Status.INVALID, Status.INFEASIBLE}
    assert any("decode_ms" in g.reason for g in got if g.status == Status.INFEASIBLE)
    assert {g.priced.arch.layers.mixer for g in got if g.priced is not None} == {
        "attention",
        "linear",
        "mcsd",
    }


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_priced_together_is_priced_one_by_one(space, every, data):
    chosen = data.draw(st.lists(st.sampled_from(every), min_size=1, max_size=40))
    devices = data.draw(st.sampled_from([[], ["snapdragon_8gen3"]]))
    together = assess_all(space, devices, "rpi5", chosen)
    alone = [assess(space, devices, "rpi5", a) for a in chosen]
    assert [(g.status, g.reason, g.kinds) for g in together] == [
        (g.status, g.reason, g.kinds) for g in alone
    ]
    for t, a in zip(together, alone):
        if a.priced is not None:
            assert t.priced.arch == a.priced.arch
            assert t.priced.costs == a.priced.costs
            assert t.priced.device_costs == a.priced.device_costs
            assert t.priced.violations == a.priced.violations
    archs = [g.priced.arch for g in alone if g.priced is not None]
    assert [p.costs for p in price_all(space, devices, "rpi5", archs)] == [
        price(space, devices, "rpi5", arch).costs for arch in archs
    ]


def test_a_candidate_whose_pricing_raises_is_invalid_and_the_others_are_priced(
    space, every, monkeypatch
):
    import archsearch.latency as latency

    real = latency.metric_values

    def refusing_wide(c, spec):  # a formula that cannot handle one kind of candidate
        if (c.d == 128).any():
            raise ZeroDivisionError("a wide model")
        return real(c, spec)

    monkeypatch.setattr(latency, "metric_values", refusing_wide)
    got = assess_all(space, [], "rpi5", every)
    for a, g in zip(every, got):
        if g.status == Status.INVALID and g.priced is None and "pricing" in g.reason:
            assert a["d_model"] == 128
            assert g.reason == "pricing the candidate raised ZeroDivisionError: a wide model"
        elif a["d_model"] == 64:
            assert g == assess(space, [], "rpi5", a)
    assert any("pricing" in g.reason for g in got)
    assert any(g.status is None for g in got)
