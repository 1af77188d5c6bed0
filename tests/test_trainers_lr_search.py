"""Fair trials (archsearch.trainers.lr_search and `lr_search: halving` in `run_trial`): the plan
keeps to its share of the budget, successive halving finds a planted preference, the search's
compute is counted, and a resumed trial never searches again."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsearch.arch import ArchConfig
from archsearch.errors import UserError
from archsearch.trainers import lr_search
from archsearch.trainers import trial as trial_module
from archsearch.trainers.config import LrSearch, TrainConfig
from archsearch.trainers.trial import SEARCH_DIR, SEARCH_FILE, run_trial, train_tokens

# log-spaced rates, 10^(k/10) for distinct k: no two so close that their scores tie
GRIDS = st.lists(st.integers(-50, 0), min_size=1, max_size=9, unique=True).map(
    lambda ks: tuple(10 ** (k / 10) for k in ks)
)


@given(grid=GRIDS, budget=st.integers(1, 100_000), share=st.floats(0.01, 1.0))
@settings(max_examples=200, deadline=None)
def test_plan_keeps_to_its_share_and_halves(grid, budget, share):
    plan = lr_search.plan_search(grid, budget, share, "steps")
    k = len(grid)
    assert len(plan.amounts) == (math.ceil(math.log2(k)) if k > 1 else 0)
    if plan.amounts:
        assert plan.survivors(0) == k and plan.survivors(len(plan.amounts)) == 1
        assert all(b == 2 * a for a, b in zip(plan.amounts, plan.amounts[1:]))
        assert all(float(a).is_integer() and a >= 1 for a in plan.amounts)
        if plan.amounts[0] > 1:  # not raised to the one-step floor: within the share
            assert plan.total <= share * budget + 1e-9
            # and the largest such plan: one more step per run would overspend
            bigger = lr_search.SearchPlan(
                plan.grid,
                "steps",
                tuple((plan.amounts[0] + 1) * 2**i for i in range(len(plan.amounts))),
            )
            assert bigger.total > share * budget


@given(grid=GRIDS, best=st.integers(0, 8), seconds=st.floats(1.0, 1e4))
@settings(max_examples=200, deadline=None)
def test_halving_finds_a_planted_preference(grid, best, seconds):
    """Scores are a bowl in log(rate) around one rate of the grid: the search chooses it,
    trains every rate in round 0 and one fewer half each round, and records every run."""
    target = sorted(grid)[best % len(grid)]
    plan = lr_search.plan_search(grid, seconds, 0.15, "time")
    calls = []

    def train(lr, budget, round_):
        calls.append((lr, round_))
        return lr_search.SearchRun(lr, round_, budget, (math.log(lr) - math.log(target)) ** 2)

    got = lr_search.run_search(plan, train, share=0.15)
    assert got.chosen == target
    assert len(got.runs) == len(calls) == sum(plan.survivors(i) for i in range(len(plan.amounts)))
    assert sorted(lr for lr, r in calls if r == 0) == (sorted(grid) if len(grid) > 1 else [])


def test_a_diverging_rate_loses_and_all_diverging_chooses_none():
    plan = lr_search.plan_search((1e-3, 1e-2, 1e-1, 1.0), 1000, 0.2, "steps")

    def train(lr, budget, round_):  # the higher the better, but >= 0.1 diverges
        score = math.inf if lr >= 0.1 else -lr
        return lr_search.SearchRun(lr, round_, budget, score, reason="diverged" * (lr >= 0.1))

    assert lr_search.run_search(plan, train, share=0.2).chosen == 1e-2
    never = lr_search.run_search(
        plan, lambda lr, b, r: lr_search.SearchRun(lr, r, b, math.inf), share=0.2
    )
    assert never.chosen is None and len(never.runs) == 4  # no second round without survivors


def test_settings_are_checked_with_the_key_named():
    with pytest.raises(UserError, match="lr_grid") as err:
        TrainConfig.from_dict({"lr_grid": [1e-3, -1.0]}, prefix="train")
    assert err.value.key == "train.lr_grid"
    with pytest.raises(UserError) as err:
        TrainConfig.from_dict({"lr_search": "grid"}, prefix="train")
    assert err.value.key == "train.lr_search" and "halving" in str(err.value)
    with pytest.raises(UserError) as err:
        TrainConfig.from_dict({"lr_search_share": 0}, prefix="train")
    assert err.value.key == "train.lr_search_share"
    with pytest.raises(UserError) as err:
        TrainConfig.from_dict(
            {"lr_search": "halving", "lr_grid": [1e-3, 1e-2], "min_lr": 5e-3}, prefix="train"
        )
    assert err.value.key == "train.min_lr"
    with pytest.raises(UserError, match="twice"):
        TrainConfig.from_dict({"lr_grid": [1e-3, 1e-3]})


# ---- in a real trial --------------------------------------------------------------------------


def tiny_arch() -> ArchConfig:
    return ArchConfig.from_dict(
        {
            "name": "tiny-lr",
            "vocab_size": 256,
            "d_model": 32,
            "n_layers": 2,
            "max_seq_len": 64,
            "layers": {"mixer": "attention"},
            "attention": {"kind": "mha", "n_heads": 2},
            "ffn": {"kind": "swiglu", "d_ffn": 64},
        }
    )


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("corpus-cache"))


def searched(cache_dir: str, **overrides) -> TrainConfig:
    """A 200-step trial whose search spends half of it over three rates: one that learns
    nothing (1e-6), one that learns (3e-3) and one far too high (30)."""
    settings = {
        "budget": "steps:200",
        "batch_size": 4,
        "seq_len": 32,
        "eval_at": (1.0,),
        "eval_batches": 2,
        "log_every": 8,
        "cache_dir": cache_dir,
        "lr_search": LrSearch.halving,
        "lr_grid": (1e-6, 3e-3, 30.0),
        "lr_search_share": 0.5,
    }
    return TrainConfig(**{**settings, **overrides})


@pytest.mark.slow
def test_a_trial_finds_the_rate_that_trains_counts_its_search_and_never_repeats_it(
    tmp_path, cache, monkeypatch
):
    arch, cfg = tiny_arch(), searched(cache)
    result = run_trial(arch, cfg, run_dir=tmp_path)
    assert result.status == "completed"
    search = result.lr_search
    assert search["chosen"] == 3e-3
    # 3 rates x 14 steps, then the better 2 x 28 steps: 98 steps, within half of 200;
    # counted in tokens and FLOPs, apart from the trial's own
    per_step = cfg.batch_size * cfg.seq_len
    assert [r["budget"] for r in search["runs"]] == ["steps:14"] * 3 + ["steps:28"] * 2
    assert search["tokens"] == 98 * per_step <= cfg.lr_search_share * train_tokens(arch, cfg)
    assert search["flops"] == pytest.approx(search["tokens"] * result.flops_per_token)
    assert result.tokens == train_tokens(arch, cfg)  # the trial itself trains its whole budget
    assert [r["lr"] for r in search["runs"] if r["round"] == 1] == [3e-3, 1e-6]
    first = {r["lr"]: r["score"] for r in search["runs"] if r["round"] == 0}
    assert first[3e-3] < first[1e-6] < first[30.0]
    # the trial trained at the chosen rate: the same losses as a fixed-rate trial at 3e-3
    fixed = run_trial(
        arch, cfg.replace(lr=3e-3, lr_search=LrSearch.off), run_dir=tmp_path / "fixed"
    )
    assert result.metrics["val_loss"] == pytest.approx(fixed.metrics["val_loss"], rel=1e-6)
    assert result.config["lr_search"] == "halving"  # the settings asked for, not the rate used
    assert (tmp_path / SEARCH_FILE).is_file() and not (tmp_path / SEARCH_DIR).exists()

    # killed after its search: the resumed trial reads it back instead of searching again
    (tmp_path / "result.json").unlink()
    monkeypatch.setattr(lr_search, "run_search", lambda *a, **k: pytest.fail("searched again"))
    again = run_trial(arch, cfg, run_dir=tmp_path)
    assert again.lr_search == search
    assert again.metrics["val_loss"] == pytest.approx(result.metrics["val_loss"], rel=1e-6)


@pytest.mark.slow
def test_a_search_killed_midway_resumes_after_its_finished_runs(tmp_path, cache, monkeypatch):
    arch, cfg = tiny_arch(), searched(cache)
    from archsearch.trainers import trial as T

    real = T.run_trial
    short_runs = []

    def killed_in_second_short_run(arch_, cfg_, **kw):
        if cfg_.lr_search == LrSearch.off:
            short_runs.append(cfg_.lr)
            if len(short_runs) == 2:
                raise KeyboardInterrupt
        return real(arch_, cfg_, **kw)

    monkeypatch.setattr(T, "run_trial", killed_in_second_short_run)
    with pytest.raises(KeyboardInterrupt):
        real(arch, cfg, run_dir=tmp_path)
    finished = list((tmp_path / SEARCH_DIR).glob("*/result.json"))
    assert len(finished) == 1  # the first rate's run
    first = json.loads(finished[0].read_text())
    assert first["config"]["lr"] == 1e-6
    monkeypatch.setattr(T, "run_trial", real)
    result = real(arch, cfg, run_dir=tmp_path)
    assert result.lr_search["chosen"] == 3e-3
    assert result.lr_search["runs"][0]["score"] == first["metrics"]["val_loss"]


@pytest.mark.slow
def test_every_rate_failing_fails_the_trial_with_the_search_kept(tmp_path, cache):
    cfg = searched(cache, lr_grid=(1e8, 1e10))
    result = run_trial(tiny_arch(), cfg, run_dir=tmp_path)
    assert result.status == "failed"
    assert "every rate of lr_grid failed" in result.failure_reason
    assert result.lr_search["chosen"] is None and len(result.lr_search["runs"]) == 2


@pytest.mark.slow
def test_a_probe_only_search_keeps_to_its_share_of_the_probe_steps(tmp_path, cache, monkeypatch):
    """A probe trains `probe_steps` whatever the LM budget: the search shortens the probes
    themselves, so its probe steps stay within the share of the trial's. (A short run's probe
    steps are not in any result it leaves, so a spy on the private probe trainer counts them.)"""
    trained = []
    real = trial_module._Trial._train_probe

    def spy(self, probe, index):
        trained.append(self.cfg.probe_steps)
        return real(self, probe, index)

    monkeypatch.setattr(trial_module._Trial, "_train_probe", spy)
    cfg = searched(
        cache,
        objective="probe",
        probe_tasks=("recall",),
        probe_steps=80,
        probe_seeds=1,
        probe_seq_len=16,
        probe_vocab=16,
        probe_eval_size=32,
        lr_grid=(1e-6, 3e-3, 30.0),
    )
    result = run_trial(tiny_arch(), cfg, run_dir=tmp_path)
    assert result.status == "completed"
    runs = result.lr_search["runs"]
    assert [r["budget"] for r in runs] == ["steps:5"] * 3 + ["steps:10"] * 2
    assert trained[:-1] == [5] * 3 + [10] * 2 and trained[-1] == 80  # then the whole probe
    assert sum(trained[:-1]) <= cfg.lr_search_share * cfg.probe_steps
