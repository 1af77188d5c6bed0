"""Corpora for sandbox trials, tokenized once and memory-mapped.

A source is named by a string (the `data` key of a trial):

- `stdlib` (default): the embedded corpus, the `.py` sources (code and docstrings) of the Python
  standard library under `sysconfig.get_paths()["stdlib"]`. Files are taken in sorted order,
  skipping test suites, bundled packages and site-packages, up to `STDLIB_MAX_BYTES`; the same
  Python build therefore gives the same bytes. The content hash and the Python version are
  recorded in the cache metadata.
- a path, or a list of paths: text files, or folders of `*.txt` files (one document per file).
- `hf:NAME` or `hf:NAME:CONFIG`: a Hugging Face dataset's `text` column (optional: needs the
  `datasets` package and, the first time, the network).

Validation split: by document when there are enough documents (the `val_fraction` of documents
with the smallest SHA-256 of their name, so adding a file moves no other file between splits);
otherwise the last `val_fraction` of each document (nanoGPT's 90/10 split of one file).

The cache folder `<cache_dir>/<key>/` holds `train.bin`, `val.bin` (raw token arrays), the
tokenizer and `meta.json`; the key hashes the source's identity, the tokenizer and the split. A
folder is built under a temporary name and renamed into place, so concurrent trials never see a
half-written cache. Opening a built cache is a few memory maps.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sysconfig
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from archsearch.errors import UserError
from archsearch.trainers.tokenizer import (
    BPETokenizer,
    Tokenizer,
    check_kind,
    load_tokenizer,
    train_tokenizer,
)

STDLIB = "stdlib"
STDLIB_MAX_BYTES = 16 * 2**20
STDLIB_SKIP = frozenset(
    {
        "test",
        "tests",
        "idlelib",
        "lib2to3",
        "turtledemo",
        "ensurepip",
        "site-packages",
        "dist-packages",
        "__pycache__",
        "tkinter",
        "pydoc_data",
    }
)
DOC_SEPARATOR = "\n\n"
CACHE_VERSION = 1


def default_cache_dir() -> Path:
    """`<system temp>/archsearch-data`: shared by the trials of a machine, never in $HOME."""
    return Path(tempfile.gettempdir()) / "archsearch-data"


# ---- sources ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Document:
    name: str
    text: str


def stdlib_files(root: str | Path | None = None) -> list[Path]:
    """The embedded corpus' files: sorted `.py` sources of the standard library, capped."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    found = []
    for folder, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in STDLIB_SKIP]
        found += [Path(folder, n) for n in names if n.endswith(".py")]
    out, total = [], 0
    for p in sorted(found, key=lambda p: p.relative_to(root).as_posix()):
        size = p.stat().st_size
        if total + size > STDLIB_MAX_BYTES:
            break
        out.append(p)
        total += size
    return out


def _read(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


def _stat_id(paths: Sequence[Path], root: Path | None = None) -> list[list[Any]]:
    """A cheap identity for cache keys: (name, size, mtime) of each file."""
    out = []
    for p in paths:
        st = p.stat()
        out.append([str(p.relative_to(root) if root else p.resolve()), st.st_size, st.st_mtime_ns])
    return out


@dataclass(frozen=True)
class Source:
    """Where the text comes from: `identity` keys the cache, `documents()` reads it."""

    kind: str  # stdlib | files | hf
    name: str
    identity: Any
    paths: tuple[Path, ...] = ()
    hf: tuple[str, str | None] | None = None

    def documents(self, max_bytes: int | None = None) -> tuple[list[Document], list[Document]]:
        """(documents, given validation documents); the latter only for HF validation splits."""
        if self.kind == "hf":
            return _hf_documents(*self.hf, max_bytes=max_bytes)
        root = Path(sysconfig.get_paths()["stdlib"]) if self.kind == STDLIB else None
        docs = [
            Document(str(p.relative_to(root)) if root else str(p), _read(p)) for p in self.paths
        ]
        return docs, []


def resolve_source(data: str | Sequence[str], *, key: str = "data") -> Source:
    """Parse a `data` value into a `Source`; a missing file is a `UserError` naming `key`."""
    items = [data] if isinstance(data, str) else list(data)
    if not items:
        raise UserError("no data source given", key=key)
    if items == [STDLIB]:
        root = Path(sysconfig.get_paths()["stdlib"])
        files = stdlib_files(root)
        identity = {"python": platform.python_version(), "files": _stat_id(files, root)}
        return Source(STDLIB, STDLIB, identity, tuple(files))
    if len(items) == 1 and items[0].startswith("hf:"):
        parts = items[0][3:].split(":")
        if not parts[0] or len(parts) > 2:
            raise UserError(f"expected hf:NAME or hf:NAME:CONFIG, got {items[0]!r}", key=key)
        name, config = parts[0], (parts[1] if len(parts) == 2 else None)
        return Source("hf", items[0], {"hf": [name, config]}, hf=(name, config))
    paths: list[Path] = []
    for item in items:
        if item == STDLIB or item.startswith("hf:"):
            raise UserError(f"{item!r} cannot be combined with other sources", key=key)
        p = Path(item).expanduser()
        if p.is_dir():
            found = sorted(q for q in p.rglob("*.txt") if q.is_file())
            if not found:
                raise UserError(f"folder {item!r} holds no .txt files", key=key)
            paths += found
        elif p.is_file():
            paths.append(p)
        else:
            raise UserError(f"data file {item!r} does not exist", key=key)
    name = paths[0].stem if len(paths) == 1 else f"{paths[0].parent.name or 'files'}-{len(paths)}"
    return Source("files", name, {"files": _stat_id(paths)}, tuple(paths))


def _hf_documents(
    name: str, config: str | None, *, max_bytes: int | None
) -> tuple[list[Document], list[Document]]:
    try:
        import datasets
    except ImportError:
        raise UserError(
            f"the data source 'hf:{name}' needs the Hugging Face `datasets` package "
            "(pip install 'archsearch[hf]')",
            key="data",
        ) from None
    cache = default_cache_dir() / "hf"
    try:
        ds = datasets.load_dataset(name, config, cache_dir=str(cache))
    except Exception as err:  # offline, unknown name, bad config: all user-facing
        raise UserError(f"cannot load Hugging Face dataset {name!r}: {err}", key="data") from None

    def read(split: str) -> list[Document]:
        docs, total = [], 0
        for i, row in enumerate(ds[split]):
            text = row.get("text") if isinstance(row, dict) else None
            if text is None:
                raise UserError(f"dataset {name!r} has no 'text' column", key="data")
            if text.strip():
                docs.append(Document(f"{split}/{i}", text))
                total += len(text)
            if max_bytes and total >= max_bytes:
                break
        return docs

    if "train" not in ds:
        raise UserError(f"dataset {name!r} has no 'train' split", key="data")
    val = "validation" if "validation" in ds else None
    return read("train"), (read(val) if val else [])


# ---- splitting --------------------------------------------------------------------------------


def split_documents(
    docs: Sequence[Document], val_fraction: float
) -> tuple[list[Document], list[Document]]:
    """Hold out whole documents when there are enough of them, else each document's tail."""
    n_val = round(len(docs) * val_fraction)
    if len(docs) >= 2 and n_val >= 1:
        ranked = sorted(docs, key=lambda d: hashlib.sha256(d.name.encode()).hexdigest())
        held = {d.name for d in ranked[:n_val]}
        return [d for d in docs if d.name not in held], [d for d in docs if d.name in held]
    train, val = [], []
    for d in docs:
        cut = int(len(d.text) * (1 - val_fraction))  # nanoGPT: first 90% train
        train.append(Document(d.name, d.text[:cut]))
        val.append(Document(d.name, d.text[cut:]))
    return train, val


# ---- the cached, tokenized corpus -------------------------------------------------------------


@dataclass
class Corpus:
    """Tokenized train/validation splits, memory-mapped from a cache folder."""

    root: Path
    meta: dict[str, Any]
    tokenizer: Tokenizer
    train: np.ndarray
    val: np.ndarray

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def val_bytes_per_token(self) -> float:
        """UTF-8 bytes per validation token: converts nats/token into bits per byte."""
        return self.meta["val_bytes"] / max(1, self.meta["val_tokens"])


def _dtype(vocab_size: int) -> np.dtype:
    return np.dtype(
        np.uint8 if vocab_size <= 256 else np.uint16 if vocab_size <= 2**16 else np.uint32
    )


def cache_key(
    source: Source, tokenizer: str, bpe_vocab_size: int | None, val_fraction: float
) -> str:
    blob = json.dumps(
        {
            "v": CACHE_VERSION,
            "source": source.identity,
            "tokenizer": tokenizer,
            "bpe_vocab_size": bpe_vocab_size if tokenizer == "bpe" else None,
            "val_fraction": val_fraction,
        },
        sort_keys=True,
    )
    return f"{source.kind}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


def load_corpus(
    data: str | Sequence[str] = STDLIB,
    *,
    tokenizer: str = "byte",
    bpe_vocab_size: int | None = None,
    val_fraction: float = 0.05,
    cache_dir: str | Path | None = None,
) -> Corpus:
    """Open the tokenized corpus for `data`, building the cache folder on first use."""
    check_kind(tokenizer)
    if tokenizer == "bpe" and not bpe_vocab_size:
        raise UserError("a BPE tokenizer needs a vocabulary size", key="bpe_vocab_size")
    if not 0 < val_fraction < 1:
        raise UserError(f"must lie in (0, 1), got {val_fraction}", key="val_fraction")
    source = resolve_source(data)
    cache_root = Path(cache_dir) if cache_dir else default_cache_dir()
    folder = cache_root / cache_key(source, tokenizer, bpe_vocab_size, val_fraction)
    if not (folder / "meta.json").is_file():
        _build(folder, source, tokenizer, bpe_vocab_size or 0, val_fraction)
    return open_corpus(folder)


def open_corpus(folder: Path) -> Corpus:
    meta = json.loads((folder / "meta.json").read_text())
    dtype = np.dtype(meta["dtype"])
    tok = load_tokenizer(meta["tokenizer"], folder)
    return Corpus(
        folder,
        meta,
        tok,
        np.memmap(folder / "train.bin", dtype=dtype, mode="r"),
        np.memmap(folder / "val.bin", dtype=dtype, mode="r"),
    )


def _build(
    folder: Path, source: Source, kind: str, bpe_vocab_size: int, val_fraction: float
) -> None:
    docs, given_val = source.documents(STDLIB_MAX_BYTES if source.kind == "hf" else None)
    if not any(d.text for d in docs):
        raise UserError(f"the data source {source.name!r} holds no text", key="data")
    train_docs, val_docs = (docs, given_val) if given_val else split_documents(docs, val_fraction)
    train_text = DOC_SEPARATOR.join(d.text for d in train_docs)
    val_text = DOC_SEPARATOR.join(d.text for d in val_docs)
    if not val_text:
        raise UserError(f"the data source {source.name!r} leaves no validation text", key="data")
    fit_on = [train_text, val_text] if kind == "char" else [train_text]
    tok = train_tokenizer(kind, fit_on, bpe_vocab_size=bpe_vocab_size)
    train_ids, val_ids = tok.encode(train_text), tok.encode(val_text)
    dtype = _dtype(tok.vocab_size)
    content = hashlib.sha256()
    for d in docs + given_val:
        content.update(d.name.encode() + b"\0" + d.text.encode("utf-8", errors="replace"))
    meta = {
        "version": CACHE_VERSION,
        "source": source.name,
        "source_kind": source.kind,
        "fingerprint": content.hexdigest(),
        "python": platform.python_version(),
        "tokenizer": tok.spec(),
        "dtype": dtype.name,
        "val_fraction": val_fraction,
        "split": "given" if given_val else "document" if len(val_docs) < len(docs) else "tail",
        "documents": [len(train_docs), len(val_docs)],
        "train_tokens": int(train_ids.size),
        "val_tokens": int(val_ids.size),
        "train_bytes": len(train_text.encode("utf-8", errors="replace")),
        "val_bytes": len(val_text.encode("utf-8", errors="replace")),
    }
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        train_ids.astype(dtype).tofile(tmp / "train.bin")
        val_ids.astype(dtype).tofile(tmp / "val.bin")
        if isinstance(tok, BPETokenizer):
            tok.save(tmp / "tokenizer.json")
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        os.rename(tmp, folder)
    except OSError:
        if not (folder / "meta.json").is_file():  # not a concurrent builder winning the race
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- batches ----------------------------------------------------------------------------------


class Batches:
    """Random training windows (nanoGPT's `get_batch`), from a seeded, checkpointable stream."""

    def __init__(self, tokens: np.ndarray, batch_size: int, seq_len: int, seed: int):
        if len(tokens) < seq_len + 2:
            raise UserError(
                f"the training split has {len(tokens)} tokens, fewer than seq_len + 2 = "
                f"{seq_len + 2}",
                key="seq_len",
            )
        self.tokens, self.batch_size, self.seq_len = tokens, batch_size, seq_len
        self.rng = np.random.default_rng(seed)

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        """(inputs, targets), each (batch_size, seq_len) int64; targets are inputs shifted by 1."""
        T = self.seq_len
        starts = self.rng.integers(0, len(self.tokens) - T - 1, size=self.batch_size)
        rows = np.stack([self.tokens[s : s + T + 1] for s in starts]).astype(np.int64)
        return np.ascontiguousarray(rows[:, :-1]), np.ascontiguousarray(rows[:, 1:])

    def state(self) -> dict[str, Any]:
        return self.rng.bit_generator.state

    def set_state(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state


def eval_windows(tokens: np.ndarray, seq_len: int, n: int) -> np.ndarray:
    """`n` windows of `seq_len + 1` tokens spread evenly over a split: the same for every
    architecture and every eval point, so validation losses compare without sampling noise."""
    if len(tokens) < seq_len + 1:
        raise UserError(
            f"the validation split has {len(tokens)} tokens, fewer than seq_len + 1 = "
            f"{seq_len + 1}",
            key="seq_len",
        )
    starts = np.linspace(0, len(tokens) - seq_len - 1, num=n).round().astype(np.int64)
    return np.stack([tokens[s : s + seq_len + 1] for s in starts]).astype(np.int64)
