"""Synthetic probe tasks: shapes, what is scored, and that the scored answers are right."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsearch.errors import UserError
from archsearch.metrics import PROBE_TASKS
from archsearch.trainers.probes import (
    AGREE,
    IGNORE,
    Probe,
    flattened,
    memorization_map,
    resolved,
)

sizes = dict(vocab=st.sampled_from([16, 32, 64, 100]), seq=st.integers(16, 96))


@settings(max_examples=25, deadline=None)
@given(task=st.sampled_from(PROBE_TASKS), seed=st.integers(0, 2**16), **sizes)
def test_every_task_yields_shifted_in_vocab_sequences_with_scored_targets(task, seed, vocab, seq):
    probe = Probe(task, vocab, seq)
    x, y = probe.batch(np.random.default_rng(seed), 8)
    assert x.shape == y.shape == (8, seq) and x.dtype == y.dtype == np.int64
    assert x.min() >= 0 and x.max() < vocab
    scored = y != IGNORE
    assert scored.any() and (y[scored] < vocab).all() and (y[scored] >= 0).all()
    # targets are the next input token wherever they are scored (teacher forcing)
    assert (y[:, :-1][scored[:, :-1]] == x[:, 1:][scored[:, :-1]]).all()


def test_the_same_seed_gives_the_same_batch_and_eval_sets_are_fixed():
    for task in PROBE_TASKS:
        p = Probe(task, 64, 48)
        a, b = p.batch(p.train_rng(1), 4), p.batch(p.train_rng(1), 4)
        assert (a[0] == b[0]).all() and (a[1] == b[1]).all()
        assert not (p.batch(p.train_rng(2), 4)[0] == a[0]).all()
        assert (p.eval_set(16)[0] == Probe(task, 64, 48).eval_set(16)[0]).all()
        assert not (p.eval_set(4)[0] == a[0]).all()  # evaluation data is not training data


def _pairs(row):
    return list(zip(row[0::2], row[1::2]))


def test_recall_scores_exactly_the_values_of_keys_seen_before():
    x, y = Probe("recall", 64, 127).batch(np.random.default_rng(0), 16)
    for row, tgt in zip(x, y):
        seen: dict[int, int] = {}
        for i in range(0, len(row) - 1, 2):
            k, v = int(row[i]), int(row[i + 1])
            assert k < 32 <= v  # keys and values come from the two vocabulary halves
            if k in seen:
                assert tgt[i] == v and seen[k] == v  # one map per sequence
            else:
                assert tgt[i] == IGNORE
            seen[k] = v


def test_noisy_recall_scores_no_noise_and_keeps_noise_apart():
    x, y = Probe("noisy_recall", 64, 128).batch(np.random.default_rng(1), 16)
    noise = x >= 48  # the last V/4 tokens
    assert noise.any()
    assert (y[:, :-1][noise[:, 1:]] == IGNORE).all()  # a noise token is never a target


def test_fuzzy_recall_values_follow_their_multi_token_keys():
    x, y = Probe("fuzzy_recall", 64, 128).batch(np.random.default_rng(2), 8)
    half = 31  # keys < 31 <= values < 62
    for row, tgt in zip(x, y):
        runs = []  # (is_key, first position, tokens) of maximal key / value runs
        for pos, t in enumerate(row.tolist()):
            is_key = t < half
            if runs and runs[-1][0] == is_key:
                runs[-1][2].append(t)
            else:
                runs.append((is_key, pos, [t]))
        assert runs[0][0] and any(len(r[2]) > 1 for r in runs if r[0])  # multi-token keys
        table: dict[tuple, list] = {}
        for (_, _, key), (_, start, value) in zip(runs[0:-2:2], runs[1:-1:2]):
            repeated = tuple(key) in table
            assert table.setdefault(tuple(key), value) == value  # one map per sequence
            for j, t in enumerate(value):
                assert tgt[start + j - 1] == (t if repeated else IGNORE)


def test_selective_copy_targets_are_the_content_tokens_in_order():
    p = Probe("selective_copy", 32, 64)
    x, y = p.batch(np.random.default_rng(3), 8)
    blank, marker = 30, 31
    for row, tgt in zip(x, y):
        m = int(np.flatnonzero(row == marker)[0])
        content = [int(t) for t in row[:m] if t != blank]
        assert len(content) == 8  # seq_len / 8
        assert [int(t) for t in tgt[m : m + len(content)]] == content
        assert (tgt[:m] == IGNORE).all()


def test_compression_reproduces_the_prefix_after_the_marker():
    x, y = Probe("compression", 64, 64).batch(np.random.default_rng(4), 8)
    for row, tgt in zip(x, y):
        prefix = row[:32]
        assert row[32] == 63
        assert (tgt[32 : 32 + 32] == prefix[: len(tgt) - 32]).all()
        assert (tgt[:32] == IGNORE).all()


def test_memorization_uses_one_fixed_map_for_every_trial():
    table = memorization_map(64)
    assert table.shape == (32, 32) and (table >= 32).all()
    for seed in (0, 1):
        p = Probe("memorization", 64, 60)
        x, y = p.batch(p.train_rng(seed), 4)
        for row, tgt in zip(x, y):
            for i in range(0, 57, 3):
                assert tgt[i + 1] == table[row[i], row[i + 1]]
                assert tgt[i] == IGNORE


def test_bad_probe_settings():
    with pytest.raises(UserError, match="probe_tasks: unknown probe task 'sorting'"):
        Probe("sorting")
    with pytest.raises(UserError, match="probe_vocab: must be at least 16"):
        Probe("recall", vocab_size=8)


# ---- resolved: out of the learning transition --------------------------------------------------


@given(st.lists(st.floats(0.0, 0.9), min_size=1, max_size=11))
def test_a_curve_still_rising_at_its_end_is_not_flattened_and_one_level_at_its_end_is(accs):
    """Held-out accuracy checks: ending on a rise (to 1.0 from at most 0.9) is not flat;
    the same curve held at 1.0 for its last quarter is."""
    rising = [*accs, 1.0]
    assert not flattened([[i + 1, a] for i, a in enumerate(rising)])
    held = [*accs, *[1.0] * (len(accs) + 2)]
    assert flattened([[i + 1, a] for i, a in enumerate(held)])


def test_resolved_needs_every_seed_flat_and_the_seeds_to_agree():
    flat_high = [[i, 0.95] for i in range(1, 9)]
    flat_low = [[i, 0.12] for i in range(1, 9)]
    rising = [[i, 0.1 * i] for i in range(1, 9)]
    assert resolved([flat_high, flat_high]) and resolved([flat_low])
    assert not resolved([rising])  # still in its transition
    assert not resolved([flat_high, flat_low])  # one seed clicked, the other not
    assert resolved([flat_high, [[i, 0.95 - AGREE + 0.01] for i in range(1, 9)]])
