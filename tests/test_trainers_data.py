"""The data pipeline: tokenizers, sources, the validation split, the memory-mapped cache and the
batch stream (archsearch.trainers.data / tokenizer)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsearch.errors import UserError
from archsearch.trainers import data as D
from archsearch.trainers.tokenizer import BPETokenizer, ByteTokenizer, CharTokenizer

TEXT = "".join(
    f"line {i}: the quick brown fox jumps over the lazy dog {i * i}\n" for i in range(400)
)


@given(st.text(max_size=200))
def test_byte_tokenizer_round_trips_any_text(text):
    tok = ByteTokenizer()
    ids = tok.encode(text)
    assert ids.dtype == np.int64 and (ids < 256).all()
    assert len(ids) == len(text.encode("utf-8"))
    assert tok.decode(ids) == text


@given(st.text(min_size=1, max_size=200))
def test_char_tokenizer_round_trips_its_alphabet(text):
    tok = CharTokenizer.train([text])
    assert tok.vocab_size == len(set(text))
    assert list(tok.chars) == sorted(set(text))
    assert tok.decode(tok.encode(text)) == text


def test_char_tokenizer_rejects_unknown_characters():
    with pytest.raises(UserError, match="not in the 3-character alphabet"):
        CharTokenizer("abc").encode("abd")


def test_bpe_trains_to_the_requested_size_and_round_trips(tmp_path):
    tok = BPETokenizer.train([TEXT], 300)
    assert tok.vocab_size == 300
    ids = tok.encode(TEXT[:500])
    assert len(ids) < len(TEXT[:500].encode())  # merges compress
    assert tok.decode(ids) == TEXT[:500]
    tok.save(tmp_path / "t.json")
    again = BPETokenizer.load(tmp_path / "t.json")
    assert (again.encode(TEXT[:500]) == ids).all()
    with pytest.raises(UserError, match="at least 257"):
        BPETokenizer.train([TEXT], 100)


def test_text_file_corpus_split_cache_and_memmap(tmp_path):
    src = tmp_path / "corpus.txt"
    src.write_text(TEXT)
    cache = tmp_path / "cache"
    c = D.load_corpus(str(src), tokenizer="byte", val_fraction=0.1, cache_dir=cache)
    # one document: nanoGPT's split, the first 90% for training, the last 10% held out
    cut = int(len(TEXT) * 0.9)
    assert bytes(c.train).decode() == TEXT[:cut]
    assert bytes(c.val).decode() == TEXT[cut:]
    assert isinstance(c.train, np.memmap) and c.train.dtype == np.uint8
    assert c.meta["split"] == "tail" and c.meta["source"] == "corpus"
    assert c.val_bytes_per_token == 1.0
    # built once, then reused: the same folder, no rebuild
    (folder,) = [p for p in cache.iterdir() if not p.name.startswith(".")]
    stamp = (folder / "train.bin").stat().st_mtime_ns
    again = D.load_corpus(str(src), tokenizer="byte", val_fraction=0.1, cache_dir=cache)
    assert again.root == folder and (folder / "train.bin").stat().st_mtime_ns == stamp
    # another tokenizer is another cache entry
    chars = D.load_corpus(str(src), tokenizer="char", val_fraction=0.1, cache_dir=cache)
    assert chars.root != folder and chars.vocab_size == len(set(TEXT))
    assert chars.tokenizer.decode(chars.val) == TEXT[cut:]
    # a changed file is a new cache entry
    src.write_text(TEXT + "more\n")
    assert D.load_corpus(str(src), val_fraction=0.1, cache_dir=cache).root != folder


def test_many_files_are_split_by_document(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(20):
        (folder / f"doc{i:02d}.txt").write_text(f"document {i}\n" * 5)
    c = D.load_corpus(str(folder), val_fraction=0.2, cache_dir=tmp_path / "cache")
    assert c.meta["split"] == "document" and c.meta["documents"] == [16, 4]
    train, val = bytes(c.train).decode(), bytes(c.val).decode()
    held = {i for i in range(20) if f"document {i}\n" in val}
    assert len(held) == 4
    assert all(f"document {i}\n" not in train for i in held)  # whole documents, no leakage


def test_bpe_corpus_caches_its_tokenizer(tmp_path):
    src = tmp_path / "corpus.txt"
    src.write_text(TEXT)
    c = D.load_corpus(str(src), tokenizer="bpe", bpe_vocab_size=280, cache_dir=tmp_path / "c")
    assert (c.root / "tokenizer.json").is_file() and c.vocab_size == 280
    assert c.train.dtype == np.uint16 and c.meta["val_tokens"] < c.meta["val_bytes"]
    assert (
        c.tokenizer.decode(c.val)
        == bytes(D.load_corpus(str(src), cache_dir=tmp_path / "c").val).decode()
    )


def test_bad_sources_are_user_errors(tmp_path):
    with pytest.raises(UserError, match=r"data: data file .*nope.txt.* does not exist"):
        D.load_corpus(str(tmp_path / "nope.txt"), cache_dir=tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"holds no \.txt files"):
        D.load_corpus(str(tmp_path / "empty"), cache_dir=tmp_path)
    with pytest.raises(UserError, match="cannot be combined"):
        D.resolve_source(["stdlib", "x.txt"])
    with pytest.raises(UserError, match="hf:NAME"):
        D.resolve_source("hf:")


def test_huggingface_source_without_datasets_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import fails as if not installed
    with pytest.raises(UserError, match=r"needs the Hugging Face `datasets` package"):
        D.load_corpus("hf:wikitext:wikitext-2-raw-v1", cache_dir=tmp_path)


def test_huggingface_source_offline_is_a_clear_error(tmp_path, monkeypatch):
    class FakeDatasets:
        @staticmethod
        def load_dataset(*args, **kwargs):
            raise ConnectionError("Couldn't reach the Hub (offline)")

    monkeypatch.setitem(sys.modules, "datasets", FakeDatasets)
    with pytest.raises(UserError, match=r"cannot load Hugging Face dataset 'wikitext'.*offline"):
        D.load_corpus("hf:wikitext", cache_dir=tmp_path)


def test_huggingface_source_uses_its_validation_split(tmp_path, monkeypatch):
    rows = {"train": [{"text": "alpha beta\n"}] * 30, "validation": [{"text": "gamma\n"}] * 3}

    class FakeDatasets:
        @staticmethod
        def load_dataset(name, config, cache_dir, streaming):
            assert cache_dir.startswith(str(D.default_cache_dir()))  # never $HOME
            assert streaming  # nothing downloaded beyond what is read
            return rows

    monkeypatch.setitem(sys.modules, "datasets", FakeDatasets)
    c = D.load_corpus("hf:toy", cache_dir=tmp_path)
    assert c.meta["split"] == "given"
    assert bytes(c.val).decode() == "\n\n".join(["gamma\n"] * 3)


def test_embedded_stdlib_corpus_is_deterministic(tmp_path):
    a = D.load_corpus("stdlib", cache_dir=tmp_path / "a")
    b = D.load_corpus("stdlib", cache_dir=tmp_path / "b")
    assert a.meta["fingerprint"] == b.meta["fingerprint"]
    assert a.meta["python"] == b.meta["python"] == ".".join(map(str, sys.version_info[:3]))
    assert np.array_equal(a.val, b.val) and np.array_equal(a.train[:100_000], b.train[:100_000])
    assert a.meta["split"] == "document" and a.meta["documents"][1] > 0
    assert 1_000_000 < a.meta["train_tokens"] <= D.STDLIB_MAX_BYTES
    files = D.stdlib_files()
    assert files == sorted(files, key=lambda p: p.as_posix())
    assert not any("site-packages" in p.parts or "test" in p.parts for p in files)
    meta = json.loads((a.root / "meta.json").read_text())
    assert meta["tokenizer"] == {"kind": "byte", "vocab_size": 256}


def test_batches_are_seeded_shifted_and_resumable():
    tokens = np.arange(1000, dtype=np.uint16)
    a, b = D.Batches(tokens, 4, 16, seed=3), D.Batches(tokens, 4, 16, seed=3)
    x, y = a.next()
    assert x.shape == y.shape == (4, 16) and x.dtype == np.int64
    assert (y[:, :-1] == x[:, 1:]).all() and (y[:, 0] == x[:, 0] + 1).all()
    assert (b.next()[0] == x).all()
    state = a.state()
    expected = [a.next()[0] for _ in range(3)]
    c = D.Batches(tokens, 4, 16, seed=99)
    c.set_state(state)
    assert all((c.next()[0] == e).all() for e in expected)
    assert not (D.Batches(tokens, 4, 16, seed=4).next()[0] == x).all()
    with pytest.raises(UserError, match="seq_len"):
        D.Batches(tokens[:10], 4, 16, seed=0)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(20, 500), seq=st.integers(1, 19), windows=st.integers(1, 40))
def test_eval_windows_cover_the_split_evenly(n, seq, windows):
    tokens = np.arange(n, dtype=np.uint16)
    w = D.eval_windows(tokens, seq, windows)
    assert w.shape == (windows, seq + 1)
    assert (np.diff(w, axis=1) == 1).all()  # contiguous windows of the split
    assert w[0, 0] == 0 and (w[-1, -1] == n - 1 or windows == 1)
