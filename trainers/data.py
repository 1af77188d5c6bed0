"""Corpora for sandbox trials, tokenized once and memory-mapped.

A source is named by a string (the `data` key of a trial):

- `stdlib` (default): the embedded corpus, the `.py` sources (code and docstrings) of the Python
  standard library under `sysconfig.get_paths()["stdlib"]`. Files are taken in sorted order,
  skipping test suites, bundled packages and site-packages, up to `STDLIB_MAX_BYTES`; the same
  Python build therefore gives the same bytes. The content hash and the Python version are
  recorded in the cache metadata.
- a path, or a list of paths: text files, or folders of `*.txt` files (one document per file).
- `hf:NAME` or `hf:NAME:CONFIG`: a Hugging Face dataset's `text` column, read in streaming mode
  up to `max_stream_tokens` tokens (needs the `datasets` package; NAME may be a local folder of
  `train.*` / `validation.*` files, or a hub name, which needs the network).
- `shards:FOLDER`: pre-tokenized shards, as nanoGPT's `prepare.py` and most pretraining pipelines
  write them: `train*.bin` and `val*.bin` token arrays (uint16 or uint32) and a `meta.json`
  holding at least `{"dtype": "uint16", "vocab_size": 50257}` (optionally `tokenizer`: a
  `tokenizer.json` beside the shards, and `val_bytes_per_token` for bits per byte). Nothing is
  copied: each shard is memory-mapped, and training windows never cross a shard boundary.

Tokenizers (`archsearch.trainers.tokenizer`): `byte`, `char`, a locally trained `bpe`, or
`file`: a Hugging Face `tokenizer.json` named by `tokenizer_file` (GPT-2, Llama, Qwen, ...),
copied into the cache so every trial of a node shares it.

Validation split: by document when there are enough documents (the `val_fraction` of documents
with the smallest SHA-256 of their name, so adding a file moves no other file between splits);
otherwise the last `val_fraction` of each document (nanoGPT's 90/10 split of one file).

The cache folder `<cache_dir>/<key>/` holds `train.bin`, `val.bin` (raw token arrays), the
tokenizer and `meta.json`; the key hashes the source's identity, the tokenizer and the split. A
folder is built under a temporary name and renamed into place, so concurrent trials never see a
half-written cache, and under a lock file, so a node builds a corpus once: concurrent trials
wait for the first builder and reuse its cache. Opening a built cache is a few memory maps.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import sysconfig
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from archsearch.errors import UserError
from archsearch.trainers.tokenizer import (
    BPETokenizer,
    FileTokenizer,
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
SHARDS = "shards:"
SHARD_DTYPES = ("uint16", "uint32")
DEFAULT_STREAM_TOKENS = 16_000_000
# a corpus' split: one token array, or shards read as one split
Tokens = np.ndarray | tuple[np.ndarray, ...]


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

    kind: str  # stdlib | files | hf | shards
    name: str
    identity: Any
    paths: tuple[Path, ...] = ()
    hf: tuple[str, str | None] | None = None

    def documents(
        self, max_tokens: int | None = None, tokenizer: Tokenizer | None = None
    ) -> tuple[list[Document], list[Document]]:
        """(documents, given validation documents); the latter only for HF validation splits.
        A streaming source stops after `max_tokens` tokens of `tokenizer` (bytes when it has to
        be trained on the text first)."""
        if self.kind == "hf":
            return _hf_documents(*self.hf, max_tokens=max_tokens, tokenizer=tokenizer)
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
    if len(items) == 1 and items[0].startswith(SHARDS):
        return _shards_source(items[0], key)
    if len(items) == 1 and items[0].startswith("hf:"):
        parts = items[0][3:].split(":")
        if not parts[0] or len(parts) > 2:
            raise UserError(f"expected hf:NAME or hf:NAME:CONFIG, got {items[0]!r}", key=key)
        name, config = parts[0], (parts[1] if len(parts) == 2 else None)
        return Source("hf", items[0], {"hf": [name, config]}, hf=(name, config))
    paths: list[Path] = []
    for item in items:
        if item == STDLIB or item.startswith(("hf:", SHARDS)):
            raise UserError(f"{item!r} cannot be combined with other sources", key=key)
        p = Path(item).expanduser()
        if p.is_dir():
            found = sorted(q for q in p.rglob("*.txt") if q.is_file())
            if not found:
                raise UserError(f"folder {item!r} holds no .txt files", key=key)
            if not any(q.stat().st_size for q in found):
                raise UserError(f"the .txt files of folder {item!r} are all empty", key=key)
            paths += found
        elif p.is_file():
            if not p.stat().st_size:
                raise UserError(f"data file {item!r} is empty", key=key)
            paths.append(p)
        else:
            raise UserError(f"data file {item!r} does not exist", key=key)
    for p in paths:
        _check_text(p, key)
    name = paths[0].stem if len(paths) == 1 else f"{paths[0].parent.name or 'files'}-{len(paths)}"
    return Source("files", name, {"files": _stat_id(paths)}, tuple(paths))


TEXT_PROBE = 64 * 1024  # bytes of each text file looked at for binary content


def _check_text(path: Path, key: str) -> None:
    """A text file, not binary data named as one: no NUL byte in its first `TEXT_PROBE`
    bytes (images, archives, token arrays and UTF-16 text all have them)."""
    with path.open("rb") as f:
        head = f.read(TEXT_PROBE)
    if b"\0" in head:
        raise UserError(
            f"data file {str(path)!r} is not text (binary: it holds NUL bytes)", key=key
        )


def _hf_documents(
    name: str, config: str | None, *, max_tokens: int | None, tokenizer: Tokenizer | None
) -> tuple[list[Document], list[Document]]:
    """The `text` column of the `train` (and `validation`, if any) split, streamed: nothing is
    downloaded beyond the documents read, and reading stops at `max_tokens`."""
    try:
        import datasets
    except ImportError:
        raise UserError(
            f"the data source 'hf:{name}' needs the Hugging Face `datasets` package "
            "(pip install 'archsearch[hf]')",
            key="data",
        ) from None
    try:
        ds = datasets.load_dataset(
            name, config, streaming=True, cache_dir=str(default_cache_dir() / "hf")
        )
    except Exception as err:  # offline, unknown name, bad config: all user-facing
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"cannot load Hugging Face dataset {name!r}: {first}", key="data") from None
    if "train" not in ds:
        raise UserError(f"dataset {name!r} has no 'train' split", key="data")

    def read(split: str, cap: int | None) -> list[Document]:
        docs, total = [], 0
        for i, row in enumerate(ds[split]):
            text = row.get("text") if isinstance(row, dict) else None
            if text is None:
                raise UserError(f"dataset {name!r} has no 'text' column", key="data")
            if text.strip():
                docs.append(Document(f"{split}/{i}", text))
                total += len(tokenizer.encode(text)) if tokenizer else len(text.encode())
            if cap and total >= cap:
                break
        return docs

    val_cap = max(1, max_tokens // 20) if max_tokens else None
    val = read("validation", val_cap) if "validation" in ds else []
    return read("train", max_tokens), val


def _shards_source(item: str, key: str) -> Source:
    """A folder of pre-tokenized shards, checked before any is used: its meta.json (dtype,
    vocabulary, a tokenizer named inside the folder), every split present, each shard a
    whole, non-zero number of tokens, and no token id beyond the vocabulary."""
    folder = Path(item[len(SHARDS) :]).expanduser()
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        raise UserError(f"{item!r}: no meta.json in {str(folder)!r}", key=key)
    try:
        meta = json.loads(meta_path.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise UserError(f"{str(meta_path)!r} is not JSON: {err}", key=key) from None
    if not isinstance(meta, dict) or meta.get("dtype") not in SHARD_DTYPES:
        raise UserError(
            f"{str(meta_path)!r}: 'dtype' must be one of {', '.join(SHARD_DTYPES)}", key=key
        )
    vocab = meta.get("vocab_size")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab <= 0:
        raise UserError(f"{str(meta_path)!r}: 'vocab_size' must be a positive integer", key=key)
    tokenizer = _named_inside(folder, meta_path, meta.get("tokenizer"), key)
    itemsize = np.dtype(meta["dtype"]).itemsize
    found = {}
    for split in ("train", "val"):
        files = sorted(p for p in folder.glob(f"{split}*.bin") if p.is_file())
        if not files:
            raise UserError(f"{item!r}: no {split}*.bin shard in {str(folder)!r}", key=key)
        for f in files:
            size = f.stat().st_size
            if size % itemsize:
                raise UserError(
                    f"shard {str(f)!r} is not a whole number of {meta['dtype']} tokens", key=key
                )
            if not size:
                raise UserError(f"shard {str(f)!r} holds no tokens", key=key)
        found[split] = files
    paths = (*found["train"], *found["val"])
    for f in paths:
        largest = largest_id(f, meta["dtype"])
        if largest >= vocab:
            raise UserError(
                f"shard {str(f)!r} holds token id {largest}, beyond the vocabulary of {vocab} "
                f"tokens that {str(meta_path)!r} states (is its dtype {meta['dtype']} right?)",
                key=key,
            )
    identity = {"shards": _stat_id(paths), "meta": meta}
    if tokenizer is not None:
        identity["tokenizer_file"] = str(tokenizer)
    return Source("shards", folder.name, identity, paths)


def _named_inside(folder: Path, meta_path: Path, named: Any, key: str) -> Path | None:
    """The file a metadata file names, which must be a file of its own folder (a name, not a
    path: data never makes archsearch read a file elsewhere); None when it names none."""
    if named is None:
        return None
    path = folder / str(named)
    if (
        not isinstance(named, str)
        or not named
        or Path(named).name != named
        or named in (".", "..")
        or path.resolve().parent != folder.resolve()
    ):
        raise UserError(
            f"{str(meta_path)!r}: 'tokenizer' must name a file inside its folder, got {named!r}",
            key=key,
        )
    if not path.is_file():
        raise UserError(f"{str(meta_path)!r}: its tokenizer file {named!r} is missing", key=key)
    return path


SCAN_TOKENS = 1 << 24  # tokens per chunk when a shard is scanned for its largest id


def largest_id(path: Path, dtype: str) -> int:
    """The largest token id of a shard (scanned in chunks of its memory map, once per shard
    file as it is now: keyed by its size and modification time)."""
    st = path.stat()
    return _largest_id(str(path.resolve()), dtype, st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=4096)
def _largest_id(path: str, dtype: str, _size: int, _mtime: int) -> int:
    tokens = np.memmap(path, dtype=dtype, mode="r")
    return max(int(tokens[i : i + SCAN_TOKENS].max()) for i in range(0, len(tokens), SCAN_TOKENS))


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
    """Tokenized train/validation splits, memory-mapped (from a cache folder, or the shards of
    a pre-tokenized corpus)."""

    root: Path
    meta: dict[str, Any]
    tokenizer: Tokenizer | None  # None: pre-tokenized shards that name no tokenizer
    train: Tokens
    val: Tokens

    @property
    def vocab_size(self) -> int:
        return int(self.meta.get("vocab_size") or self.tokenizer.vocab_size)

    @cached_property
    def val_bytes_per_token(self) -> float | None:
        """UTF-8 bytes per validation token: converts nats/token into bits per byte (None
        when the shards do not say and name no tokenizer to measure it with)."""
        if "val_bytes" in self.meta:
            return self.meta["val_bytes"] / max(1, self.meta["val_tokens"])
        if self.meta.get("val_bytes_per_token"):
            return float(self.meta["val_bytes_per_token"])
        if self.tokenizer is None:
            return None
        sample = np.asarray(_shards(self.val)[0][:BYTES_PER_TOKEN_SAMPLE], dtype=np.int64)
        return len(self.tokenizer.decode(sample).encode("utf-8")) / max(1, len(sample))


BYTES_PER_TOKEN_SAMPLE = 65536


def _dtype(vocab_size: int) -> np.dtype:
    return np.dtype(
        np.uint8 if vocab_size <= 256 else np.uint16 if vocab_size <= 2**16 else np.uint32
    )


def _file_digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def cache_key(
    source: Source,
    tokenizer: str,
    bpe_vocab_size: int | None,
    val_fraction: float,
    tokenizer_file: str | None = None,
    max_stream_tokens: int | None = None,
) -> str:
    blob = json.dumps(
        {
            "v": CACHE_VERSION,
            "source": source.identity,
            "tokenizer": tokenizer,
            "bpe_vocab_size": bpe_vocab_size if tokenizer == "bpe" else None,
            "val_fraction": val_fraction,
            **({"tokenizer_file": _file_digest(tokenizer_file)} if tokenizer == "file" else {}),
            **({"max_stream_tokens": max_stream_tokens} if source.kind == "hf" else {}),
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
    tokenizer_file: str | None = None,
    max_stream_tokens: int = DEFAULT_STREAM_TOKENS,
) -> Corpus:
    """Open the tokenized corpus for `data`, building the cache folder on first use (once per
    node: concurrent callers wait for the first builder). Everything is checked before the
    cache is touched (the source, a tokenizer file parsed); a cache folder that does not
    match its metadata is built again, never trusted (`cache_is_whole`); a build that fails
    leaves no lock file or folder behind."""
    check_kind(tokenizer)
    if tokenizer == "bpe" and not bpe_vocab_size:
        raise UserError("a BPE tokenizer needs a vocabulary size", key="bpe_vocab_size")
    if tokenizer == "file" and not tokenizer_file:
        raise UserError("tokenizer=file needs tokenizer_file=PATH/tokenizer.json", key="tokenizer")
    if tokenizer_file and not Path(tokenizer_file).is_file():
        raise UserError(f"no tokenizer file {tokenizer_file!r}", key="tokenizer_file")
    if not 0 < val_fraction < 1:
        raise UserError(f"must lie in (0, 1), got {val_fraction}", key="val_fraction")
    source = resolve_source(data)
    given = FileTokenizer(tokenizer_file) if tokenizer == "file" else None  # parsed before use
    if source.kind == "shards":
        return open_shards(source, given)
    cache_root = Path(cache_dir) if cache_dir else default_cache_dir()
    key = cache_key(
        source, tokenizer, bpe_vocab_size, val_fraction, tokenizer_file, max_stream_tokens
    )
    folder = cache_root / key
    if not cache_is_whole(folder):
        made_root = not cache_root.exists()
        cache_root.mkdir(parents=True, exist_ok=True)
        lock_path = cache_root / f".{key}.lock"
        with lock_path.open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one builder per node; the others wait here
            if not cache_is_whole(folder):
                try:
                    _build(
                        folder,
                        source,
                        tokenizer,
                        bpe_vocab_size or 0,
                        val_fraction,
                        given,
                        max_stream_tokens,
                    )
                except BaseException:
                    # nothing was built: leave nothing behind (a waiting peer builds it anew)
                    lock_path.unlink(missing_ok=True)
                    if made_root:
                        with contextlib.suppress(OSError):
                            cache_root.rmdir()
                    raise
    return open_corpus(folder)


def cache_is_whole(folder: Path) -> bool:
    """Whether a cache folder holds what its metadata says: readable metadata of this cache
    version, its token files of the sizes it states, and the tokenizer it names (a file of
    the folder itself). Anything else is built again."""
    try:
        meta = json.loads((folder / "meta.json").read_text())
        spec = meta["tokenizer"]
        itemsize = np.dtype(meta["dtype"]).itemsize
        if meta["version"] != CACHE_VERSION or meta["dtype"] not in ("uint8", "uint16", "uint32"):
            return False
        for split in ("train", "val"):
            tokens = meta[f"{split}_tokens"]
            if not isinstance(tokens, int) or (folder / f"{split}.bin").stat().st_size != (
                tokens * itemsize
            ):
                return False
        if spec["kind"] == "char":
            return isinstance(spec["chars"], str) and len(spec["chars"]) == spec["vocab_size"]
        if spec["kind"] in ("bpe", "file"):
            return spec["file"] == TOKENIZER_FILE and (folder / TOKENIZER_FILE).is_file()
        return spec["kind"] == "byte"
    except (OSError, ValueError, KeyError, TypeError):
        return False


TOKENIZER_FILE = "tokenizer.json"  # a cache folder's trained or copied tokenizer


def open_corpus(folder: Path) -> Corpus:
    """A built cache folder (`cache_is_whole`), memory-mapped."""
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


def open_shards(source: Source, given: Tokenizer | None) -> Corpus:
    """A pre-tokenized corpus (`_shards_source` checked it): every shard memory-mapped in
    place. Its tokenizer (`given` by tokenizer_file, else the one its meta.json names) must
    cover every token id of the shards."""
    folder = source.paths[0].parent
    meta = dict(source.identity["meta"])
    dtype = np.dtype(meta["dtype"])
    named = source.identity.get("tokenizer_file")
    tok = given or (FileTokenizer(named) if named else None)
    if tok is not None:
        largest = max(largest_id(p, meta["dtype"]) for p in source.paths)
        if largest >= tok.vocab_size:
            where = tok.path if isinstance(tok, FileTokenizer) else "the tokenizer"
            raise UserError(
                f"the shards in {str(folder)!r} hold token id {largest}, beyond the "
                f"{tok.vocab_size} tokens of {str(where)!r}",
                key="data",
            )

    def maps(split: str) -> tuple[np.ndarray, ...]:
        return tuple(
            np.memmap(p, dtype=dtype, mode="r") for p in source.paths if p.name.startswith(split)
        )

    train, val = maps("train"), maps("val")
    meta.update(
        source="shards:" + str(folder),
        source_kind="shards",
        train_tokens=sum(len(t) for t in train),
        val_tokens=sum(len(t) for t in val),
        shards=[len(train), len(val)],
    )
    return Corpus(folder, meta, tok, train, val)


def _build(
    folder: Path,
    source: Source,
    kind: str,
    bpe_vocab_size: int,
    val_fraction: float,
    given: Tokenizer | None,
    max_stream_tokens: int,
) -> None:
    docs, given_val = source.documents(max_stream_tokens, given)
    if not any(d.text.strip() for d in docs):
        named = ", ".join(str(p) for p in source.paths[:3]) or source.name
        raise UserError(f"the data {named!r} holds no text", key="data")
    train_docs, val_docs = (docs, given_val) if given_val else split_documents(docs, val_fraction)
    train_text = DOC_SEPARATOR.join(d.text for d in train_docs)
    val_text = DOC_SEPARATOR.join(d.text for d in val_docs)
    if not val_text:
        raise UserError(f"the data source {source.name!r} leaves no validation text", key="data")
    fit_on = [train_text, val_text] if kind == "char" else [train_text]
    tok = given or train_tokenizer(kind, fit_on, bpe_vocab_size=bpe_vocab_size)
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
        if isinstance(tok, BPETokenizer):  # trained here, or a user's file: kept with the tokens
            tok.save(tmp / TOKENIZER_FILE)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        if folder.exists():  # a cache that did not match its metadata: set aside, then gone
            stale = Path(tempfile.mkdtemp(prefix=f".{folder.name}-stale-", dir=folder.parent))
            os.rename(folder, stale / "old")
            shutil.rmtree(stale, ignore_errors=True)
        os.rename(tmp, folder)
    except OSError:
        if not cache_is_whole(folder):  # not a concurrent builder winning the race
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- batches ----------------------------------------------------------------------------------


def _shards(tokens: Tokens) -> tuple[np.ndarray, ...]:
    return tokens if isinstance(tokens, tuple) else (tokens,)


def _size_text(tokens: Tokens) -> str:
    shards = _shards(tokens)
    if len(shards) == 1:
        return f"{len(shards[0])} tokens"
    return f"{max(len(t) for t in shards)} tokens in its longest shard"


def _window_starts(tokens: Tokens, length: int) -> np.ndarray:
    """Cumulative count of the window starts each shard holds (a window of `length` tokens
    never crosses a shard): starts[i] .. starts[i+1] are shard i's."""
    counts = [max(0, len(t) - length + 1) for t in _shards(tokens)]
    return np.concatenate([[0], np.cumsum(counts)])


def _windows(tokens: Tokens, starts: np.ndarray, length: int, positions: np.ndarray) -> np.ndarray:
    """Windows of `length` tokens at global start `positions` (rows of int64)."""
    shards = _shards(tokens)
    which = np.searchsorted(starts, positions, side="right") - 1
    return np.stack(
        [shards[k][p - starts[k] : p - starts[k] + length] for k, p in zip(which, positions)]
    ).astype(np.int64)


class Batches:
    """Random training windows (nanoGPT's `get_batch`), from a seeded, checkpointable stream."""

    def __init__(self, tokens: Tokens, batch_size: int, seq_len: int, seed: int):
        # nanoGPT draws starts in [0, len - T - 1): one window start fewer than fit
        self.starts = _window_starts(tokens, seq_len + 2)
        if self.starts[-1] < 1:
            raise UserError(
                f"the training split has {_size_text(tokens)}, fewer than seq_len + 2 = "
                f"{seq_len + 2}",
                key="seq_len",
            )
        self.tokens, self.batch_size, self.seq_len = tokens, batch_size, seq_len
        self.rng = np.random.default_rng(seed)

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        """(inputs, targets), each (batch_size, seq_len) int64; targets are inputs shifted by 1.
        Starts are uniform over every shard's windows."""
        T = self.seq_len
        positions = self.rng.integers(0, self.starts[-1], size=self.batch_size)
        rows = _windows(self.tokens, self.starts, T + 1, positions)
        return np.ascontiguousarray(rows[:, :-1]), np.ascontiguousarray(rows[:, 1:])

    def state(self) -> dict[str, Any]:
        return self.rng.bit_generator.state

    def set_state(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state


def eval_windows(tokens: Tokens, seq_len: int, n: int) -> np.ndarray:
    """`n` windows of `seq_len + 1` tokens spread evenly over a split (over all its shards):
    the same for every architecture and every eval point, so validation losses compare without
    sampling noise."""
    starts = _window_starts(tokens, seq_len + 1)
    if starts[-1] < 1:
        raise UserError(
            f"the validation split has {_size_text(tokens)}, fewer than seq_len + 1 = "
            f"{seq_len + 1}",
            key="seq_len",
        )
    positions = np.linspace(0, starts[-1] - 1, num=n).round().astype(np.int64)
    return _windows(tokens, starts, seq_len + 1, positions)
