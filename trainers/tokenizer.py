"""Tokenizers for sandbox trials: bytes (default), characters, a locally trained BPE, or a
user's `tokenizer.json`.

- `byte`: UTF-8 bytes, vocabulary 256; needs no training and fits every byte-level model.
- `char`: one token per distinct character of the corpus, in sorted order (nanoGPT's
  shakespeare_char convention: 65 characters for Tiny Shakespeare).
- `bpe`: a byte-level BPE trained with the `tokenizers` library on the training split only,
  saved as `tokenizer.json` next to the cached tokens.
- `file`: any Hugging Face `tokenizers` file (GPT-2's, Llama's, Qwen's `tokenizer.json`), named by
  the trial's `tokenizer_file`; its vocabulary size includes the added special tokens.

Every tokenizer encodes a whole text to a numpy array and reports a JSON-able `spec` that the
data cache stores beside the tokens and uses to rebuild the tokenizer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from archsearch.errors import UserError

KINDS = ("byte", "char", "bpe", "file")
MIN_BPE_VOCAB = 257  # the 256 byte symbols plus at least one merge


class ByteTokenizer:
    """UTF-8 bytes as tokens (vocabulary 256)."""

    kind = "byte"
    vocab_size = 256

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "vocab_size": self.vocab_size}


class CharTokenizer:
    """One token per character of a fixed alphabet (nanoGPT's shakespeare_char)."""

    kind = "char"

    def __init__(self, chars: str):
        self.chars = chars
        self.vocab_size = len(chars)
        self._index = {c: i for i, c in enumerate(chars)}

    @classmethod
    def train(cls, texts: Iterable[str]) -> CharTokenizer:
        alphabet: set[str] = set()
        for text in texts:
            alphabet.update(text)
        return cls("".join(sorted(alphabet)))

    def encode(self, text: str) -> np.ndarray:
        try:
            return np.fromiter((self._index[c] for c in text), dtype=np.int64, count=len(text))
        except KeyError as err:
            raise UserError(
                f"character {err.args[0]!r} is not in the {self.vocab_size}-character alphabet",
                key="tokenizer",
            ) from None

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.chars[int(i)] for i in ids)

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "vocab_size": self.vocab_size, "chars": self.chars}


class BPETokenizer:
    """A byte-level BPE (the `tokenizers` library), trained locally and stored as JSON."""

    kind = "bpe"

    def __init__(self, tok: Any):
        self._tok = tok
        self.vocab_size = tok.get_vocab_size()

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int) -> BPETokenizer:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        if vocab_size < MIN_BPE_VOCAB:
            raise UserError(
                f"a byte-level BPE needs at least {MIN_BPE_VOCAB} tokens, got {vocab_size}",
                key="bpe_vocab_size",
            )
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(texts, trainer=trainer)
        return cls(tok)

    @classmethod
    def load(cls, path: str | Path) -> BPETokenizer:
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_file(str(path)))

    def save(self, path: str | Path) -> None:
        self._tok.save(str(path))

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self._tok.encode(text).ids, dtype=np.int64)

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode([int(i) for i in ids])

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "vocab_size": self.vocab_size, "file": "tokenizer.json"}


class FileTokenizer(BPETokenizer):
    """A user's `tokenizer.json` (any model the `tokenizers` library reads), kept as a copy
    beside the cached tokens."""

    kind = "file"

    def __init__(self, path: str | Path):
        from tokenizers import Tokenizer

        self.path = Path(path)
        if not self.path.is_file():
            raise UserError(f"no tokenizer file {str(path)!r}", key="tokenizer_file")
        try:
            super().__init__(Tokenizer.from_file(str(path)))
        except Exception as err:  # the library raises its own exception types
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise UserError(
                f"cannot read tokenizer file {str(path)!r}: {first}", key="tokenizer_file"
            ) from None


Tokenizer = ByteTokenizer | CharTokenizer | BPETokenizer | FileTokenizer


def check_kind(kind: str, key: str = "tokenizer") -> str:
    if kind not in KINDS:
        raise UserError(f"unknown tokenizer {kind!r} (known: {', '.join(KINDS)})", key=key)
    return kind


def train_tokenizer(kind: str, texts: Sequence[str], *, bpe_vocab_size: int) -> Tokenizer:
    """A tokenizer of `kind` fitted to `texts` (the training split; all text for `char`)."""
    check_kind(kind)
    if kind == "byte":
        return ByteTokenizer()
    if kind == "char":
        return CharTokenizer.train(texts)
    if kind == "file":
        raise ValueError("a tokenizer file is read, not trained (FileTokenizer)")
    return BPETokenizer.train(texts, bpe_vocab_size)


def load_tokenizer(spec: dict[str, Any], folder: Path) -> Tokenizer:
    """Rebuild a tokenizer from the `spec` stored in a cache folder's metadata (its file is
    one of that folder: `archsearch.trainers.data.cache_is_whole` checked the name)."""
    if spec["kind"] == "byte":
        return ByteTokenizer()
    if spec["kind"] == "char":
        return CharTokenizer(spec["chars"])
    if spec["kind"] == "file":
        return FileTokenizer(folder / spec["file"])
    return BPETokenizer.load(folder / spec["file"])
