"""The cost-metric registry covers exactly the cost metrics of the vocabulary, each evaluator
takes the metric's arguments, and `archsearch cost`'s breakdown adds up to its totals."""

from __future__ import annotations

import inspect

import pytest

from archsearch.arch import load_arch
from archsearch.cost import EVALUATORS, evaluator
from archsearch.cost.counts import model_ops
from archsearch.cost.ops import CATEGORIES, Phase
from archsearch.latency import columns, load_device, metric_value
from archsearch.latency.breakdown import cost_report
from archsearch.metrics import METRICS, MetricSpec


def test_every_cost_metric_has_exactly_one_evaluator():
    cost_metrics = {name for name, mdef in METRICS.items() if mdef.phase == "cost"}
    assert set(EVALUATORS) == cost_metrics


@pytest.mark.parametrize("name", sorted(EVALUATORS))
def test_each_evaluator_takes_its_metrics_arguments(name):
    params = list(inspect.signature(EVALUATORS[name]).parameters)
    assert params[1:] == list(METRICS[name].args)


def test_the_registry_refuses_strangers_and_duplicates():
    with pytest.raises(ValueError, match="not a cost metric"):
        evaluator("val_loss")(lambda c: c)
    with pytest.raises(ValueError, match="takes"):
        evaluator("weight_bytes")(lambda c, bits: c)
    with pytest.raises(ValueError, match="two evaluators"):
        evaluator("params")(lambda c: c)


def test_a_device_metric_needs_a_device():
    arch = load_arch("tiny_gqa")
    with pytest.raises(ValueError, match="no device given"):
        metric_value(arch, MetricSpec.parse("decode_ms"))


@pytest.mark.parametrize("name", ["plm_1_8b", "linear_moe_a0_3b_2b_hybrid", "mcsd_1_6b"])
def test_the_breakdown_adds_up_and_every_op_has_a_category(name):
    arch = load_arch(name)
    rep = cost_report(
        arch, load_device("rpi5"), precision="q4", prompt=512, context=2048, generate=128, batch=1
    )
    parts = [r["part"] for r in rep["breakdown"]]
    assert parts == [c for c in CATEGORIES if c in parts]
    t = rep["totals"]
    assert sum(r["ttft_ms"] for r in rep["breakdown"]) == pytest.approx(t["ttft_ms"], rel=1e-9)
    assert sum(r["decode_ms"] for r in rep["breakdown"]) == pytest.approx(t["decode_ms"], rel=1e-9)
    assert 1e9 * sum(r["prefill_gflops"] for r in rep["breakdown"]) == pytest.approx(
        t["prefill_flops"], rel=1e-9
    )
    layers = {r["part"]: r["layers"] for r in rep["breakdown"]}
    r = arch.resolved()
    assert layers.get("attention", 0) == r.pattern.count("N")
    assert layers.get("linear", 0) == r.pattern.count("L")
    assert layers.get("mcsd", 0) == r.pattern.count("M")
    assert layers.get("moe" if r.moe else "ffn") == r.n_layers
    for _, op in model_ops(columns(arch), Phase("forward", T=64)):
        assert op.category in CATEGORIES
