"""Corpora at scale: pre-tokenized shards (memory-mapped, windows never crossing a shard), a
tokenizer named by a `tokenizer.json` path, a Hugging Face source read in streaming mode up to a
token cap (a small local dataset: no network), and a corpus a node builds once while concurrent
trials wait and reuse it."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archsearch.arch import load_arch
from archsearch.errors import UserError
from archsearch.trainers import TrainConfig
from archsearch.trainers import data as D
from archsearch.trainers.trial import run_trial

TEXT = "".join(
    f"doc line {i}: sandbox corpora at scale, shard after shard {i * 7}\n" for i in range(300)
)


def write_shards(folder: Path, sizes: list[int], val: list[int], dtype: str = "uint16") -> Path:
    """Shard k holds the tokens 1000*k + 0, 1, 2, ... (so a window tells which shard it is from)."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, lengths in (("train", sizes), ("val", val)):
        for k, n in enumerate(lengths):
            base = 1000 * k + (500 if split == "val" else 0)
            (np.arange(n) % 400 + base).astype(dtype).tofile(folder / f"{split}_{k:03d}.bin")
    (folder / "meta.json").write_text(json.dumps({"dtype": dtype, "vocab_size": 4096}))
    return folder


def test_shards_are_memory_mapped_in_place_and_read_as_one_split(tmp_path):
    folder = write_shards(tmp_path / "owt", [700, 300, 1200], [400, 250])
    c = D.load_corpus(f"shards:{folder}", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()  # nothing copied or built
    assert len(c.train) == 3 and all(isinstance(t, np.memmap) for t in c.train)
    assert c.meta["train_tokens"] == 2200 and c.meta["val_tokens"] == 650
    assert c.vocab_size == 4096 and c.val_bytes_per_token is None  # no tokenizer named
    batches = D.Batches(c.train, 16, 32, seed=0)
    seen = set()
    for _ in range(40):
        x, y = batches.next()
        shard = x[:, 0] // 1000
        assert ((x // 1000) == shard[:, None]).all()  # no window crosses a shard
        assert ((y[:, -1] // 1000) == shard).all()
        seen.update(shard.tolist())
    assert seen == {0, 1, 2}
    windows = D.eval_windows(c.val, 32, 10)
    assert {int(w[0]) // 1000 for w in windows} == {0, 1}  # spread over both val shards


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=5), seq=st.integers(1, 40))
def test_windows_start_uniformly_over_all_shards_and_stay_inside(sizes, seq):
    shards = tuple(np.arange(n, dtype=np.int64) + 10_000 * k for k, n in enumerate(sizes))
    fits = sum(max(0, n - seq - 1) for n in sizes)
    if fits < 1:
        with pytest.raises(UserError, match="seq_len"):
            D.Batches(shards, 4, seq, seed=0)
        return
    x, y = D.Batches(shards, 64, seq, seed=1).next()
    assert ((np.diff(x, axis=1) == 1).all()) and (y == x + 1).all()
    for row in x:
        k = int(row[0]) // 10_000
        assert row[-1] + 1 < 10_000 * k + sizes[k]  # the target stays inside the shard


def test_one_shard_reads_exactly_like_one_array():
    tokens = np.arange(5000, dtype=np.uint16)
    a, b = D.Batches(tokens, 8, 64, seed=5), D.Batches((tokens,), 8, 64, seed=5)
    for _ in range(5):
        assert (a.next()[0] == b.next()[0]).all()
    assert (D.eval_windows(tokens, 64, 7) == D.eval_windows((tokens,), 64, 7)).all()


@pytest.mark.parametrize(
    "meta, shard_bytes, fragment",
    [
        ({"dtype": "float32", "vocab_size": 10}, 8, "'dtype' must be one of uint16, uint32"),
        ({"dtype": "uint16", "vocab_size": "many"}, 8, "'vocab_size' must be a positive integer"),
        ({"dtype": "uint32", "vocab_size": 10}, 6, "not a whole number of uint32 tokens"),
        (None, 8, "no meta.json"),
    ],
)
def test_bad_shard_folders_are_one_line_errors(tmp_path, meta, shard_bytes, fragment):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "train_0.bin").write_bytes(b"\0" * shard_bytes)
    (folder / "val_0.bin").write_bytes(b"\0" * 8)
    if meta is not None:
        (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(UserError, match=fragment) as err:
        D.load_corpus(f"shards:{folder}")
    assert "\n" not in str(err.value) and str(err.value).startswith("data:")


def bpe_file(tmp_path: Path) -> Path:
    """A real `tokenizer.json` as GPT-2's or Llama's are shipped (a byte-level BPE)."""
    from archsearch.trainers.tokenizer import BPETokenizer

    path = tmp_path / "tok" / "tokenizer.json"
    path.parent.mkdir()
    BPETokenizer.train([TEXT], 300).save(path)
    return path


def test_a_tokenizer_file_encodes_the_corpus_and_is_kept_with_it(tmp_path):
    from tokenizers import Tokenizer

    path = bpe_file(tmp_path)
    src = tmp_path / "corpus.txt"
    src.write_text(TEXT)
    cache = tmp_path / "cache"
    c = D.load_corpus(str(src), tokenizer="file", tokenizer_file=str(path), cache_dir=cache)
    reference = Tokenizer.from_file(str(path))
    cut = int(len(TEXT) * 0.95)
    assert list(c.train) == reference.encode(TEXT[:cut]).ids
    assert c.meta["tokenizer"]["kind"] == "file" and (c.root / "tokenizer.json").is_file()
    assert c.vocab_size == reference.get_vocab_size()
    again = D.load_corpus(str(src), tokenizer="file", tokenizer_file=str(path), cache_dir=cache)
    assert again.root == c.root  # every trial of the node shares the cache
    with pytest.raises(UserError, match="tokenizer=file needs tokenizer_file"):
        D.load_corpus(str(src), tokenizer="file", cache_dir=cache)
    with pytest.raises(UserError, match="cannot read tokenizer file"):
        D.load_corpus(str(src), tokenizer="file", tokenizer_file=str(src), cache_dir=cache)
    with pytest.raises(UserError, match="go together"):
        TrainConfig(tokenizer_file=str(path))  # tokenizer left at byte


def test_a_streaming_source_stops_at_its_token_cap(tmp_path):
    folder = tmp_path / "local_ds"
    folder.mkdir()
    line = "streamed document number {i} with some words in it\n"
    with (folder / "train.jsonl").open("w") as f:
        for i in range(2000):
            f.write(json.dumps({"text": line.format(i=i)}) + "\n")
    with (folder / "validation.jsonl").open("w") as f:
        for i in range(200):
            f.write(json.dumps({"text": "held out " + line.format(i=i)}) + "\n")
    c = D.load_corpus(f"hf:{folder}", max_stream_tokens=5000, cache_dir=tmp_path / "cache")
    assert c.meta["split"] == "given"
    per_doc = len(line.format(i=1000).encode())
    # reading stopped at the first document that reached the cap (byte tokens): not 2000 docs
    assert 5000 <= c.meta["train_bytes"] <= 5000 + per_doc + 2 * (5000 // per_doc + 1)
    assert c.meta["documents"][0] < 120 and 0 < c.meta["documents"][1] < 20
    assert c.meta["val_bytes"] >= 250


def _load_and_count(args) -> str:
    cache, src, barrier, log = args
    original = D._build

    def counted(*a, **kw):
        with open(log, "a") as f:
            f.write("built\n")
        return original(*a, **kw)

    D._build = counted
    barrier.wait()
    return str(D.load_corpus(src, tokenizer="bpe", bpe_vocab_size=300, cache_dir=cache).root)


def test_a_node_builds_a_corpus_once_while_concurrent_trials_wait(tmp_path):
    src = tmp_path / "corpus.txt"
    src.write_text(TEXT * 5)
    log = tmp_path / "builds.log"
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Manager().Barrier(3)
    with ctx.Pool(3) as pool:
        roots = pool.map(_load_and_count, [(tmp_path / "cache", str(src), barrier, log)] * 3)
    assert len(set(roots)) == 1
    assert log.read_text().count("built") == 1


@pytest.mark.slow
def test_a_trial_trains_on_shards(tmp_path):
    folder = write_shards(tmp_path / "shards", [3000, 3000], [1500], dtype="uint16")
    meta = json.loads((folder / "meta.json").read_text())
    meta["vocab_size"] = 256
    (folder / "meta.json").write_text(json.dumps(meta))
    for p in folder.glob("*.bin"):  # tokens within the byte-level model's vocabulary
        (np.fromfile(p, dtype=np.uint16) % 256).astype(np.uint16).tofile(p)
    cfg = TrainConfig(
        data=(f"shards:{folder}",), budget="tokens:8K", batch_size=4, seq_len=32, eval_at=(1.0,)
    )
    r = run_trial(load_arch("tiny_gqa"), cfg, run_dir=tmp_path / "run")
    assert r.status == "completed" and np.isfinite(r.metrics["val_loss"])
    assert "val_bpb" not in r.metrics  # the shards name no tokenizer: bits per byte unknown
