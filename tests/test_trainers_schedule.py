"""Learning-rate schedules, the budget syntax and `TrainConfig` validation."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from archsearch.errors import UserError
from archsearch.trainers.config import TrainConfig, parse_budget
from archsearch.trainers.schedule import Schedule

fractions = st.floats(0.0, 1.0)


@given(kind=st.sampled_from(["cosine", "wsd", "wsdc", "constant"]), t=fractions)
def test_every_schedule_stays_between_min_and_peak_after_warmup(kind, t):
    s = Schedule(kind, lr=1e-3, min_lr=1e-5, warmup=0.1, decay=0.3, constant=0.2)
    lr = s(t)
    assert 0.0 <= lr <= 1e-3 + 1e-15
    if t >= 0.1:
        assert lr >= 1e-5 - 1e-15


@given(t1=fractions, t2=fractions)
def test_warmup_rises_linearly_then_cosine_falls_monotonically(t1, t2):
    s = Schedule("cosine", lr=2.0, min_lr=0.5, warmup=0.2)
    lo, hi = sorted((t1, t2))
    if hi <= 0.2:
        assert s(lo) <= s(hi)
        assert s(hi) == pytest.approx(2.0 * hi / 0.2)
    if lo >= 0.2:
        assert s(lo) >= s(hi)
    assert s(1.0) == pytest.approx(0.5) and s(0.2) == pytest.approx(2.0)
    assert s(0.6) == pytest.approx(0.5 + 0.5 * 1.5)  # halfway through the decay: the mean


def test_wsd_holds_the_peak_then_decays_to_min():
    s = Schedule("wsd", lr=1.0, min_lr=0.1, warmup=0.1, decay=0.2)
    assert [s(t) for t in (0.1, 0.5, 0.8)] == [1.0, 1.0, 1.0]
    assert s(0.9) == pytest.approx(0.55) and s(1.0) == pytest.approx(0.1)


def test_wsdc_ends_with_a_constant_phase_at_min_lr():
    """[PLM] section 4.2: warmup, stable at the peak, decay, then constant."""
    s = Schedule("wsdc", lr=3e-4, min_lr=3e-5, warmup=0.01, decay=0.2, constant=0.1)
    assert s(0.005) == pytest.approx(1.5e-4)
    assert s(0.5) == s(0.69) == 3e-4
    assert s(0.8) == pytest.approx((3e-4 + 3e-5) / 2)
    assert s(0.9) == s(0.95) == s(1.0) == pytest.approx(3e-5)


def test_schedule_rejects_impossible_phases():
    with pytest.raises(UserError, match=r"decay: .*exceed the whole budget"):
        Schedule("wsdc", warmup=0.1, decay=0.8, constant=0.2)
    with pytest.raises(UserError, match="schedule: unknown schedule 'linear'"):
        Schedule("linear")


@pytest.mark.parametrize(
    ("text", "kind", "amount"),
    [
        ("tokens:2M", "tokens", 2e6),
        ("tokens:1.5k", "tokens", 1500),
        ("flops:1e13", "flops", 1e13),
        ("flops:3.2T", "flops", 3.2e12),
        ("time:60s", "time", 60),
        ("time:5m", "time", 300),
        ("time:90", "time", 90),
        ("steps:2000", "steps", 2000),
    ],
)
def test_budget_syntax(text, kind, amount):
    b = parse_budget(text)
    assert (b.kind, b.amount) == (kind, pytest.approx(amount))
    assert parse_budget(str(b)) == b  # the printed form parses back


@pytest.mark.parametrize(
    "text", ["2M", "tokens:", "tokenz:2M", "tokens:2X", "time:-1s", "steps:1.5"]
)
def test_bad_budgets_name_the_key(text):
    with pytest.raises(UserError, match=r"^train\.budget: .*expected tokens:N"):
        TrainConfig.from_dict({"budget": text}, prefix="train")


@pytest.mark.parametrize(
    ("settings", "key", "message"),
    [
        ({"learning_rate": 1e-3}, "train.learning_rate", "unknown training setting"),
        ({"lr": "fast"}, "train.lr", "expected a number"),
        ({"batch_size": 0}, "train.batch_size", "must be positive"),
        ({"batch_size": 1.5}, "train.batch_size", "expected an integer"),
        (
            {"precision": "fp8"},
            "train.precision",
            r"unknown precision 'fp8' \(known: fp32, bf16, fp16\)",
        ),
        ({"objective": "acc"}, "train.objective", "unknown objective 'acc'"),
        ({"probe_tasks": ["recall", "sorting"]}, "train.probe_tasks", "unknown probe task"),
        ({"eval_at": [0.5, 1.5]}, "train.eval_at", "fractions in"),
        ({"min_lr": 1.0}, "train.min_lr", "must lie in"),
        ({"tokenizer": "wordpiece"}, "train.tokenizer", "unknown tokenizer"),
        ({"schedule": "wsd", "warmup": 0.5, "decay": 0.6}, "train.decay", "exceed"),
        ({"keep_checkpoint": "yes"}, "train.keep_checkpoint", "expected a boolean"),
    ],
)
def test_bad_settings_are_user_errors_naming_the_key(settings, key, message):
    with pytest.raises(UserError, match=message) as err:
        TrainConfig.from_dict(settings, source="space.yaml", prefix="train")
    assert err.value.key == key and str(err.value).startswith(f"space.yaml: {key}: ")


def test_from_dict_coerces_plain_data():
    cfg = TrainConfig.from_dict({"data": "a.txt", "lr": 1, "batch_size": 8.0, "eval_at": 0.5})
    assert cfg.data == ("a.txt",) and cfg.lr == 1.0 and isinstance(cfg.lr, float)
    assert cfg.batch_size == 8 and cfg.eval_at == (0.5,)
    assert TrainConfig.from_dict(None) == TrainConfig()
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.lr_schedule.min_lr == pytest.approx(0.1) and math.isclose(cfg.lr_schedule.lr, 1.0)
