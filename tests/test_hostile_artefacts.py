"""Hostile artefacts: files and states a researcher meets that archsearch did not write, or that
were damaged after it wrote them.

The corpus below is tables of such artefacts by class: foreign and plain studies, studies of
other Optuna schemas, damaged studies, device profiles, corpora that lie, output paths, exports
over files a user edited or linked, requests to the dashboard, forged driver records, and a
`confirm` beside a running sweep. Each case builds its artefacts in its own folder, runs the
real command (in-process; the dashboard's requests through its WSGI app or a real server; the
records through the clean-up a sweep runs) and checks the contract: the exit code (or HTTP
status), one line on stderr for an error and no traceback ever, and every file the command
does not own byte-identical afterwards (nothing created, nothing removed).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import sqlite3
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from archsearch.cli import main

# ---- the stand-in study, and ways of changing a copy of it ----------------------------------

TRAINED = (0, 1, 2, 4, 6)  # tests.studies.make_study(n=8): trained trials; 3 infeasible, 8 dup


@pytest.fixture(scope="module")
def base_study(tmp_path_factory) -> Path:
    """An archsearch study (rollback journal, so that a byte comparison sees every change)."""
    from tests.studies import make_study

    folder = tmp_path_factory.mktemp("base")
    made = make_study(folder / "written.db", n=8)
    assert tuple(made["by_status"]["trained"]) == TRAINED
    path = folder / "study.db"
    src, dst = sqlite3.connect(folder / "written.db"), sqlite3.connect(path)
    try:
        src.backup(dst)
        dst.execute("PRAGMA journal_mode=DELETE")
    finally:
        src.close()
        dst.close()
    return path


def sql(db: Path, *statements: str, params: tuple = ()) -> None:
    con = sqlite3.connect(db)
    try:
        for s in statements:
            con.execute(s, params if "?" in s else ())
        con.commit()
    finally:
        con.close()


def trial_id(db: Path, number: int) -> int:
    con = sqlite3.connect(db)
    try:
        return con.execute("select trial_id from trials where number = ?", (number,)).fetchone()[0]
    finally:
        con.close()


def set_attr(db: Path, number: int, key: str, value_json: str) -> None:
    """Overwrite (or add) one stored user attribute of a trial, as raw JSON text."""
    tid = trial_id(db, number)
    sql(db, f"delete from trial_user_attributes where trial_id = {tid} and key = '{key}'")
    sql(
        db,
        "insert into trial_user_attributes (trial_id, key, value_json) values (?, ?, ?)",
        params=(tid, key, value_json),
    )


def stored_text(db: Path, number: int, key: str) -> str:
    con = sqlite3.connect(db)
    try:
        (raw,) = con.execute(
            "select value_json from trial_user_attributes where trial_id = ? and key = ?",
            (trial_id(db, number), key),
        ).fetchone()
    finally:
        con.close()
    return json.loads(raw)


def run_copy(base: Path, tmp: Path) -> Path:
    """A run directory holding a copy of the stand-in study."""
    (tmp / "run").mkdir()
    shutil.copy(base, tmp / "run" / "study.db")
    return tmp / "run" / "study.db"


def plain_optuna(path: Path, attrs: dict | None = None) -> None:
    """An Optuna study another tool wrote (default journal mode), its trials optionally
    carrying some of archsearch's attributes."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(f"sqlite:///{path}")
    study = optuna.create_study(
        study_name="plain", storage=storage, directions=["minimize", "minimize"]
    )
    for i in range(4):
        t = study.ask()
        x = t.suggest_float("x", 0, 1)
        for k, v in (attrs or {}).items():
            t.set_user_attr(k, v)
        study.tell(t, [x, 1 - x + i])
    storage.engine.dispose()


def foreign_sqlite(path: Path) -> None:
    """Another application's SQLite file that happens to have `studies` and `trials` tables."""
    con = sqlite3.connect(path)
    con.executescript(
        "create table studies (id integer primary key, title text);"
        "create table trials (id integer primary key, study integer, outcome text);"
        "insert into studies values (1, 'bees'); insert into trials values (1, 1, 'stung');"
    )
    con.close()


def schema_revision(db: Path, revision: str, library: str) -> None:
    sql(
        db,
        f"update alembic_version set version_num = '{revision}'",
        f"update version_info set library_version = '{library}'",
    )


# ---- device profiles, corpora ---------------------------------------------------------------

GOOD_DEVICE = (
    "memory_bandwidth: 1.0e+10\nmemory_capacity: 8.0e+9\n"
    "peak_flops: {fp32: 1.0e+11, fp16: 1.0e+11, int8: 2.0e+11}\n"
)
TINY_DEVICE = (
    "memory_bandwidth: 1.0e-300\nmemory_capacity: 8.0e+9\n"
    "peak_flops: {fp32: 1.0e-300, fp16: 1.0e-300, int8: 1.0e-300}\n"
)
TRAIN = (
    "train",
    "arch=tiny_gqa",
    "budget=steps:1",
    "batch_size=2",
    "seq_len=16",
    "eval_batches=1",
    "val_fraction=0.1",
    "run_dir={tmp}/trial",
    "cache_dir={tmp}/cache",
    "format=json",
)
TEXT = "To be, or not to be, that is the question:\n" * 40


def shards(
    tmp: Path,
    *,
    dtype: str = "uint16",
    written: str = "uint16",
    vocab: int = 256,
    top: int = 200,
    meta: dict | None = None,
    train: int | None = 400,
    val: int | None = 200,
) -> None:
    """A pre-tokenized corpus in `tmp/shards`: token ids 0..top-1 written as `written`, and a
    meta.json that says `dtype` and `vocab` (or `meta` as given)."""
    folder = tmp / "shards"
    folder.mkdir()
    for name, n in (("train.bin", train), ("val.bin", val)):
        if n is not None:
            (np.arange(n) % top).astype(written).tofile(folder / name)
    text = json.dumps(meta if meta is not None else {"dtype": dtype, "vocab_size": vocab})
    (folder / "meta.json").write_text(text)


def tokenizer_json(path: Path, vocab: int = 300) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))


def cached_corpus(tmp: Path) -> Path:
    """The corpus cache a `train` on `tmp/corpus.txt` reads (built as train builds it)."""
    from archsearch.trainers.data import load_corpus

    (tmp / "corpus.txt").write_text(TEXT)
    corpus = load_corpus(
        [str(tmp / "corpus.txt")], tokenizer="byte", val_fraction=0.1, cache_dir=tmp / "cache"
    )
    return corpus.root


def export_first(tmp: Path) -> Path:
    """The stand-in study with trial 0 exported once (as a user would have)."""
    code = main(["export", f"study={tmp}/run", "trial=0", f"out={tmp}/exp", "format=json"])
    assert code == 0
    return tmp / "exp"


# ---- the corpus -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One artefact: `build(tmp, base)` makes the files the command meets (`base` is the
    stand-in study), `argv` runs it (`{tmp}` is that folder), and the command must exit with
    `code`; its one error line (or, exit 0, its stdout) holds every fragment of `must`. The
    command may write only under the globs of `owns` (relative to `tmp`)."""

    id: str
    build: Callable[[Path, Path], object]
    argv: tuple[str, ...]
    code: int = 2
    must: tuple[str, ...] = ()
    owns: tuple[str, ...] = ()


def case(id, build, *argv, code=2, must=(), owns=()) -> Case:
    return Case(id, build, tuple(argv), code, tuple(must), tuple(owns))


def copy_then(change: Callable[[Path], object]) -> Callable[[Path, Path], object]:
    return lambda tmp, base: change(run_copy(base, tmp))


def truncate_arch(db: Path, number: int = 2) -> None:
    text = stored_text(db, number, "arch")
    set_attr(db, number, "arch", json.dumps(text[: len(text) // 2]))


PARETO = ("pareto", "study={tmp}/run", "plots=false")

STUDIES = [
    case(
        "plain-optuna-pareto",
        lambda tmp, _: plain_optuna(tmp / "plain.db"),
        "pareto",
        "study={tmp}/plain.db",
        "plots=false",
        must=("not written by archsearch",),
    ),
    case(
        "plain-optuna-export",
        lambda tmp, _: plain_optuna(tmp / "plain.db"),
        "export",
        "study={tmp}/plain.db",
        "trial=0",
        must=("trial 0",),
    ),
    case(
        "plain-optuna-dashboard",
        lambda tmp, _: plain_optuna(tmp / "plain.db"),
        "dashboard",
        "study={tmp}/plain.db",
        "port=0",
        must=("not written by archsearch",),
    ),
    case(
        "plain-optuna-confirm",
        lambda tmp, _: plain_optuna(tmp / "plain.db"),
        "confirm",
        "study={tmp}/plain.db",
        must=("not written by archsearch",),
    ),
    case(
        "new-url-not-created",
        lambda tmp, _: None,
        "pareto",
        "study=sqlite:///{tmp}/new.db",
        must=("does not exist",),
    ),
    case(
        "foreign-app-tables",
        lambda tmp, _: foreign_sqlite(tmp / "other.db"),
        "pareto",
        "study={tmp}/other.db",
        must=("not an Optuna study",),
    ),
    case(
        "foreign-app-url",
        lambda tmp, _: foreign_sqlite(tmp / "other.db"),
        "pareto",
        "study=sqlite:///{tmp}/other.db",
        must=("not an Optuna study",),
    ),
    case(
        "foreign-app-sweep",
        lambda tmp, _: foreign_sqlite(tmp / "other.db"),
        "sweep",
        "trials=1",
        "run_dir={tmp}/sweep",
        "storage.url=sqlite:///{tmp}/other.db",
        must=("not an Optuna study",),
    ),
    case(
        "foreign-app-confirm",
        lambda tmp, _: foreign_sqlite(tmp / "other.db"),
        "confirm",
        "study=x",
        "storage.url=sqlite:///{tmp}/other.db",
        must=("not an Optuna study",),
    ),
    case(
        "empty-sqlite-file",
        lambda tmp, _: sqlite3.connect(tmp / "empty.db").execute("create table t (x)"),
        "pareto",
        "study={tmp}/empty.db",
        must=("not an Optuna study",),
    ),
    case(
        "zero-byte-file",
        lambda tmp, _: (tmp / "zero.db").write_bytes(b""),
        "pareto",
        "study={tmp}/zero.db",
        must=("not an SQLite database",),
    ),
    case(
        "text-as-study-db",
        lambda tmp, _: ((tmp / "run").mkdir(), (tmp / "run" / "study.db").write_text("notes\n")),
        "sweep",
        "trials=1",
        "run_dir={tmp}/run",
        must=("not an SQLite database",),
    ),
    case(
        "newer-optuna-schema-read",
        copy_then(lambda db: schema_revision(db, "v9.0.0.a", "9.1.0")),
        *PARETO,
        must=("9.1.0", "v9.0.0.a", "newer"),
    ),
    case(
        "newer-optuna-schema-sweep",
        copy_then(lambda db: schema_revision(db, "v9.0.0.a", "9.1.0")),
        "sweep",
        "trials=1",
        "run_dir={tmp}/run",
        must=("9.1.0", "newer"),
    ),
    case(
        "older-optuna-schema-read",
        copy_then(lambda db: schema_revision(db, "v3.0.0.d", "3.1.0")),
        *PARETO,
        must=("3.1.0", "optuna storage upgrade"),
    ),
    case(
        "no-version-rows",
        copy_then(lambda db: sql(db, "delete from alembic_version", "delete from version_info")),
        *PARETO,
        must=("not an Optuna study",),
    ),
]

DAMAGED = [
    case(
        "arch-not-json-skipped",
        copy_then(truncate_arch),
        *PARETO,
        code=0,
        must=("1 trial unreadable: 2",),
    ),
    case(
        "arch-not-json-export",
        copy_then(truncate_arch),
        "export",
        "study={tmp}/run",
        "trial=2",
        must=("trial 2", "'arch'", "not JSON"),
    ),
    case(
        "arch-outer-json-cut",
        copy_then(lambda db: set_attr(db, 2, "arch", '"{\\"vocab_size\\": 25')),
        *PARETO,
        code=0,
        must=("1 trial unreadable: 2",),
    ),
    case(
        "arch-wrong-type",
        copy_then(lambda db: set_attr(db, 4, "arch", json.dumps("[1, 2]"))),
        "export",
        "study={tmp}/run",
        "trial=4",
        must=("trial 4", "'arch'"),
    ),
    case(
        "arch-not-an-architecture",
        copy_then(lambda db: set_attr(db, 4, "arch", json.dumps('{"d_model": "wide"}'))),
        "export",
        "study={tmp}/run",
        "trial=4",
        must=("trial 4",),
    ),
    case(
        "device-costs-wrong-type",
        copy_then(lambda db: set_attr(db, 4, "device_costs", json.dumps("[1, 2]"))),
        *PARETO,
        "device=jetson_orin_nx",
        code=0,
        must=("1 trial unreadable: 4",),
    ),
    case(
        "device-cost-a-string",
        copy_then(
            lambda db: set_attr(
                db, 1, "device_costs", json.dumps(json.dumps({"jetson_orin_nx": {"x": "slow"}}))
            )
        ),
        *PARETO,
        "device=jetson_orin_nx",
        code=0,
        must=("1 trial unreadable: 1",),
    ),
    case(
        "costs-not-json",
        copy_then(lambda db: set_attr(db, 6, "costs", json.dumps("{params"))),
        *PARETO,
        code=0,
        must=("1 trial unreadable: 6",),
    ),
    case(
        "constraint-a-string",
        copy_then(
            lambda db: sql(
                db,
                "update trial_system_attributes set value_json = '\"high\"' "
                f"where trial_id = {trial_id(db, 1)} and key = 'constraints:params'",
            )
        ),
        *PARETO,
        code=0,
        must=("1 trial unreadable: 1",),
    ),
    case(
        "status-a-number",
        copy_then(lambda db: set_attr(db, 0, "status", "5")),
        *PARETO,
        code=0,
        must=("1 trial unreadable: 0",),
    ),
    case(
        "two-trials-damaged",
        copy_then(lambda db: (truncate_arch(db, 1), set_attr(db, 6, "summary", "[1]"))),
        *PARETO,
        code=0,
        must=("2 trials unreadable: 1, 6",),
    ),
    case(
        "params-distribution-damaged",
        copy_then(
            lambda db: sql(
                db,
                "insert into trial_params (trial_id, param_name, param_value, distribution_json) "
                f"values ({trial_id(db, 0)}, 'a_damaged_param', 2.0, '{{\"name\": ')",
            )
        ),
        *PARETO,
        code=0,
        must=("1 trial unreadable: 0",),
    ),
    case(
        "asked-about-unreadable-trial",
        copy_then(lambda db: set_attr(db, 0, "status", "5")),
        "export",
        "study={tmp}/run",
        "trial=0",
        must=("trial 0", "'status'"),
    ),
    case(
        "meta-not-json",
        copy_then(
            lambda db: sql(
                db,
                "update study_user_attributes set value_json = ? where key = 'archsearch'",
                params=(json.dumps("{not json"),),
            )
        ),
        *PARETO,
        must=("metadata", "not JSON"),
    ),
    case(
        "meta-wrong-types",
        copy_then(
            lambda db: sql(
                db,
                "update study_user_attributes set value_json = ? where key = 'archsearch'",
                params=(json.dumps(json.dumps({"objectives": "val_loss", "train": [1]})),),
            )
        ),
        *PARETO,
        must=("metadata", "objectives"),
    ),
    case(
        "meta-train-wrong",
        copy_then(
            lambda db: sql(
                db,
                "update study_user_attributes set value_json = ? where key = 'archsearch'",
                params=(json.dumps(json.dumps({"train": {"lr": "fast"}})),),
            )
        ),
        *PARETO,
        must=("metadata",),
    ),
    case(
        "archsearch-attrs-without-arch",
        lambda tmp, _: plain_optuna(tmp / "mixed.db", {"status": "trained", "summary": "x"}),
        "pareto",
        "study={tmp}/mixed.db",
        "out={tmp}/out",
        code=0,
        must=("report.md",),
        owns=("out", "out/**"),
    ),
    case(
        "arch-not-an-architecture-skipped",
        copy_then(lambda db: set_attr(db, 4, "arch", json.dumps('{"d_model": "wide"}'))),
        "pareto",
        "study={tmp}/run",
        "out={tmp}/out",
        code=0,
        must=("1 trial unreadable: 4", "not an architecture", "report.md"),
        owns=("out", "out/**"),
    ),
    case(
        "damaged-dashboard-front-still-served",
        copy_then(truncate_arch),
        "pareto",
        "study={tmp}/run",
        "plots=false",
        "format=json",
        code=0,
        must=('"unreadable"', "not JSON"),
    ),
]

PROFILES = [
    case(
        "own-device-prune",
        lambda tmp, _: (tmp / "my_device.yaml").write_text(GOOD_DEVICE),
        "prune",
        "search_space=tiny",
        "limit=20",
        "device={tmp}/my_device.yaml",
        "format=json",
        code=0,
        must=('"device": "my_device"',),
    ),
    case(
        "own-device-relative-prune",
        lambda tmp, _: (tmp / "my_device.yaml").write_text(GOOD_DEVICE),
        "prune",
        "search_space=tiny",
        "limit=20",
        "device=./my_device.yaml",
        "format=json",
        code=0,
        must=('"device": "my_device"',),
    ),
    case(
        "own-device-cost",
        lambda tmp, _: (tmp / "my_device.yaml").write_text(GOOD_DEVICE),
        "cost",
        "arch=tiny_gqa",
        "device={tmp}/my_device.yaml",
        "format=json",
        code=0,
        must=("my_device",),
    ),
    case(
        "own-device-pareto",
        lambda tmp, base: (
            run_copy(base, tmp),
            (tmp / "my_device.yaml").write_text(GOOD_DEVICE),
        ),
        *PARETO,
        "device={tmp}/my_device.yaml",
        "format=json",
        code=0,
        must=('"device": "my_device"',),
    ),
    case(
        "own-device-named-like-shipped",
        lambda tmp, _: (tmp / "rpi5.yaml").write_text(GOOD_DEVICE),
        "prune",
        "search_space=tiny",
        "limit=20",
        "device={tmp}/rpi5.yaml",
        must=("rpi5", "shipped"),
    ),
    case(
        "own-device-name-key-shipped",
        lambda tmp, _: (tmp / "mine.yaml").write_text(GOOD_DEVICE + "name: jetson_orin_nx\n"),
        "cost",
        "arch=tiny_gqa",
        "device={tmp}/mine.yaml",
        must=("jetson_orin_nx", "shipped"),
    ),
    case(
        "tiny-values-prune",
        lambda tmp, _: (tmp / "tiny_dev.yaml").write_text(TINY_DEVICE),
        "prune",
        "search_space=tiny",
        "limit=20",
        "device={tmp}/tiny_dev.yaml",
        must=("tiny_dev.yaml",),
    ),
    case(
        "tiny-values-cost",
        lambda tmp, _: (tmp / "tiny_dev.yaml").write_text(TINY_DEVICE),
        "cost",
        "arch=tiny_gqa",
        "device={tmp}/tiny_dev.yaml",
        must=("tiny_dev.yaml",),
    ),
    case(
        "device-path-a-folder",
        lambda tmp, _: (tmp / "dev.yaml").mkdir(),
        "cost",
        "arch=tiny_gqa",
        "device={tmp}/dev.yaml",
        must=("dev.yaml",),
    ),
]

CORPORA = [
    case(
        "shards-uint32-over-uint16",
        lambda tmp, _: shards(tmp, dtype="uint32"),
        *TRAIN,
        "data=[shards:{tmp}/shards]",
        must=("train.bin", "vocab"),
    ),
    case(
        "shards-vocab-below-ids",
        lambda tmp, _: shards(tmp, vocab=100),
        *TRAIN,
        "data=[shards:{tmp}/shards]",
        must=("199", "100", "meta.json"),
    ),
    case(
        "shards-vocab-above-model",
        lambda tmp, _: shards(tmp, vocab=50257),
        *TRAIN,
        "data=[shards:{tmp}/shards]",
        must=("50257", "vocab_size"),
    ),
    case(
        "shards-odd-size",
        lambda tmp, _: (shards(tmp), (tmp / "shards" / "val.bin").write_bytes(b"\x01\x02\x03")),
        *TRAIN,
        "data=[shards:{tmp}/shards]",
        must=("val.bin", "uint16"),
    ),
    case(
        "shards-empty",
        lambda tmp, _: shards(tmp, train=0),
        *TRAIN,
        "data=[shards:{tmp}/shards]",
        must=("train.bin", "no tokens"),
    ),
    case(
        "shards-missing-val",
        lambda tmp, _: shards(tmp, val=None),
        *TRAIN,
        "data=[shards:{tmp}/shards]",
        must=("val",),
    ),
    case(
        "shards-meta-names-absolute-tokenizer",
        lambda tmp, _: (
            tokenizer_json(tmp / "elsewhere.json"),
            shards(
                tmp,
                meta={
                    "dtype": "uint16",
                    "vocab_size": 256,
                    "tokenizer": str(tmp / "elsewhere.json"),
                },
            ),
        ),
        *TRAIN,
        "data=[shards:{tmp}/shards]",
        must=("meta.json", "tokenizer", "inside"),
    ),
    case(
        "shards-meta-names-parent-tokenizer",
        lambda tmp, _: (
            tokenizer_json(tmp / "elsewhere.json"),
            shards(
                tmp, meta={"dtype": "uint16", "vocab_size": 256, "tokenizer": "../elsewhere.json"}
            ),
        ),
        *TRAIN,
        "data=[shards:{tmp}/shards]",
        must=("meta.json", "inside"),
    ),
    case(
        "shards-tokenizer-malformed",
        lambda tmp, _: (
            shards(tmp, meta={"dtype": "uint16", "vocab_size": 256, "tokenizer": "tok.json"}),
            (tmp / "shards" / "tok.json").write_text('{"model": '),
        ),
        *TRAIN,
        "data=[shards:{tmp}/shards]",
        must=("tok.json",),
    ),
    case(
        "shards-tokenizer-smaller-than-ids",
        lambda tmp, _: (
            shards(tmp, meta={"dtype": "uint16", "vocab_size": 256, "tokenizer": "tok.json"}),
            tokenizer_json(tmp / "shards" / "tok.json", vocab=50),
        ),
        *TRAIN,
        "data=[shards:{tmp}/shards]",
        must=("tok.json", "199"),
    ),
    case(
        "shards-meta-not-json",
        lambda tmp, _: (shards(tmp), (tmp / "shards" / "meta.json").write_text("{")),
        *TRAIN,
        "data=[shards:{tmp}/shards]",
        must=("meta.json",),
    ),
    case(
        "text-empty",
        lambda tmp, _: (tmp / "empty.txt").write_text(""),
        *TRAIN,
        "data=[{tmp}/empty.txt]",
        must=("empty.txt",),
    ),
    case(
        "text-binary",
        lambda tmp, _: (tmp / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256))),
        *TRAIN,
        "data=[{tmp}/image.txt]",
        must=("image.txt", "binary"),
    ),
    case(
        "text-folder-of-empty",
        lambda tmp, _: ((tmp / "docs").mkdir(), (tmp / "docs" / "a.txt").write_text("  \n")),
        *TRAIN,
        "data=[{tmp}/docs]",
        must=("docs",),
    ),
    case(
        "tokenizer-file-malformed",
        lambda tmp, _: (
            (tmp / "corpus.txt").write_text(TEXT),
            (tmp / "tok.json").write_text("{not json"),
        ),
        *TRAIN,
        "data=[{tmp}/corpus.txt]",
        "tokenizer=file",
        "tokenizer_file={tmp}/tok.json",
        must=("tok.json",),
    ),
    case(
        "tokenizer-file-a-folder",
        lambda tmp, _: ((tmp / "corpus.txt").write_text(TEXT), (tmp / "tok.json").mkdir()),
        *TRAIN,
        "data=[{tmp}/corpus.txt]",
        "tokenizer=file",
        "tokenizer_file={tmp}/tok.json",
        must=("tok.json",),
    ),
    case(
        "tokenizer-file-larger-than-model",
        lambda tmp, _: ((tmp / "corpus.txt").write_text(TEXT), tokenizer_json(tmp / "tok.json")),
        *TRAIN,
        "data=[{tmp}/corpus.txt]",
        "tokenizer=file",
        "tokenizer_file={tmp}/tok.json",
        must=("300", "vocab_size"),
    ),
    case(
        "cache-meta-truncated",
        lambda tmp, _: (lambda root: (root / "meta.json").write_text('{"vers'))(cached_corpus(tmp)),
        *TRAIN,
        "data=[{tmp}/corpus.txt]",
        code=0,
        must=('"status": "completed"',),
        owns=("trial", "trial/**", "cache/**"),
    ),
    case(
        "cache-train-bin-deleted",
        lambda tmp, _: (lambda root: (root / "train.bin").unlink())(cached_corpus(tmp)),
        *TRAIN,
        "data=[{tmp}/corpus.txt]",
        code=0,
        must=('"status": "completed"',),
        owns=("trial", "trial/**", "cache/**"),
    ),
    case(
        "cache-train-bin-cut",
        lambda tmp, _: (lambda root: (root / "train.bin").write_bytes(b"ab"))(cached_corpus(tmp)),
        *TRAIN,
        "data=[{tmp}/corpus.txt]",
        code=0,
        must=('"status": "completed"',),
        owns=("trial", "trial/**", "cache/**"),
    ),
    case(
        "cache-meta-names-outside-tokenizer",
        lambda tmp, _: (
            lambda root: (root / "meta.json").write_text(
                json.dumps(
                    {
                        **json.loads((root / "meta.json").read_text()),
                        "tokenizer": {"kind": "bpe", "vocab_size": 300, "file": "/etc/hostname"},
                    }
                )
            )
        )(cached_corpus(tmp)),
        *TRAIN,
        "data=[{tmp}/corpus.txt]",
        code=0,
        must=('"status": "completed"',),
        owns=("trial", "trial/**", "cache/**"),
    ),
]

OUTPUTS = [
    case(
        "pareto-out-is-a-file",
        lambda tmp, base: (run_copy(base, tmp), (tmp / "out").write_text("x")),
        "pareto",
        "study={tmp}/run",
        "out={tmp}/out",
        must=("out", "not a folder"),
    ),
    case(
        "export-out-is-a-file",
        lambda tmp, base: (run_copy(base, tmp), (tmp / "out").write_text("x")),
        "export",
        "study={tmp}/run",
        "trial=0",
        "out={tmp}/out",
        must=("out", "not a folder"),
    ),
    case(
        "export-preset-path-a-folder",
        lambda tmp, base: (run_copy(base, tmp), (tmp / "exp" / "p.yaml").mkdir(parents=True)),
        "export",
        "study={tmp}/run",
        "trial=0",
        "name=p",
        "out={tmp}/exp",
        must=("p.yaml",),
    ),
    case(
        "export-config-folder-a-file",
        lambda tmp, base: (
            run_copy(base, tmp),
            (tmp / "exp").mkdir(),
            (tmp / "exp/p").write_text(""),
        ),
        "export",
        "study={tmp}/run",
        "trial=0",
        "name=p",
        "out={tmp}/exp",
        must=("p",),
    ),
    case(
        "train-run-dir-a-file",
        lambda tmp, _: (tmp / "trial").write_text("x"),
        *TRAIN,
        must=("run_dir",),
    ),
]


def edit(path_in_exp: str, text: str = "# my notes\n") -> Callable[[Path, Path], object]:
    def build(tmp: Path, base: Path) -> None:
        run_copy(base, tmp)
        exp = export_first(tmp)
        target = exp / path_in_exp
        target.write_text(target.read_text() + text)

    return build


def linked(tmp: Path, base: Path) -> None:
    run_copy(base, tmp)
    exp = export_first(tmp)
    (tmp / "outside.yaml").write_text("precious: true\n")
    preset = exp / "tiny_trial0.yaml"
    preset.unlink()
    preset.symlink_to(tmp / "outside.yaml")


EXPORT = ("export", "study={tmp}/run", "trial=0", "out={tmp}/exp")

EXPORTS = [
    case(
        "export-again-unchanged",
        lambda tmp, base: (run_copy(base, tmp), export_first(tmp)),
        *EXPORT,
        code=0,
        must=("tiny_trial0.yaml",),
    ),
    case(
        "export-over-edited-preset",
        edit("tiny_trial0.yaml"),
        *EXPORT,
        must=("tiny_trial0.yaml", "overwrite=true"),
    ),
    case(
        "export-over-edited-recipe",
        edit("tiny_trial0.train.yaml"),
        *EXPORT,
        must=("tiny_trial0.train.yaml", "overwrite=true"),
    ),
    case(
        "export-over-edited-config-json",
        edit("tiny_trial0/config.json", " "),
        *EXPORT,
        must=("config.json", "overwrite=true"),
    ),
    case(
        "export-overwrite-edited",
        edit("tiny_trial0.yaml"),
        *EXPORT,
        "overwrite=true",
        code=0,
        owns=("exp/**",),
    ),
    case("export-through-symlink", linked, *EXPORT, must=("tiny_trial0.yaml", "link")),
    case(
        "export-through-symlink-overwrite",
        linked,
        *EXPORT,
        "overwrite=true",
        must=("tiny_trial0.yaml", "link"),
    ),
    case(
        "export-config-folder-a-symlink",
        lambda tmp, base: (
            run_copy(base, tmp),
            (tmp / "exp").mkdir(),
            (tmp / "elsewhere").mkdir(),
            (tmp / "exp" / "tiny_trial0").symlink_to(tmp / "elsewhere"),
        ),
        *EXPORT,
        must=("tiny_trial0", "link"),
    ),
]


def sleeper() -> subprocess.Popen:
    return subprocess.Popen(["sleep", "60"])


def running_sweep(tmp: Path, base: Path) -> None:
    """The stand-in study with a trial RUNNING for a live driver on this host (a process
    that stands in for the sweep), and that driver's record of its Ray temp dir."""
    import optuna
    import psutil

    from archsearch.study import StudyWriter
    from archsearch.sweep.ray_runtime import RECORDS_DIR

    db = run_copy(base, tmp)
    proc = sleeper()
    RUNNING.append(proc)
    key = (
        f"{socket.gethostname()}:{proc.pid}:{round(psutil.Process(proc.pid).create_time(), 2):.2f}"
    )
    storage = optuna.storages.RDBStorage(f"sqlite:///{db}")
    writer = StudyWriter(storage, optuna.load_study(study_name="tiny", storage=storage), key)
    trial = writer.ask()
    writer.set_attrs(trial, {"status": "running"})
    storage.engine.dispose()
    ray_dir = tmp / "ray-of-the-sweep"
    ray_dir.mkdir()
    (ray_dir / "session.log").write_text("running\n")
    (tmp / "run" / RECORDS_DIR).mkdir()
    record = {"driver": key, "ray_temp_dir": str(ray_dir)}
    (tmp / "run" / RECORDS_DIR / f"{socket.gethostname()}-{proc.pid}.json").write_text(
        json.dumps(record)
    )


RUNNING: list[subprocess.Popen] = []

CONCURRENT = [
    case(
        "confirm-beside-running-sweep",
        running_sweep,
        "confirm",
        "study={tmp}/run",
        "ray.address=127.0.0.1:1",
        must=("running",),
    ),
    case(
        "confirm-beside-running-sweep-by-name",
        running_sweep,
        "confirm",
        "study=tiny",
        "run_dir={tmp}/run",
        "ray.address=127.0.0.1:1",
        must=("running",),
    ),
]

CORPUS = {
    "study": STUDIES,
    "damaged": DAMAGED,
    "profile": PROFILES,
    "corpus": CORPORA,
    "output": OUTPUTS,
    "export": EXPORTS,
    "concurrent": CONCURRENT,
}
# a concurrent case's live driver is a process (`sleeper`): those cases are in the slow lane
CASES = [
    pytest.param(c, id=f"{kind}-{c.id}", marks=pytest.mark.slow if kind == "concurrent" else ())
    for kind, cases in CORPUS.items()
    for c in cases
]


# ---- running a command case -----------------------------------------------------------------


def snapshot(root: Path) -> dict[str, str]:
    """Every path under `root`: a file by its bytes' digest, a link by its target, a folder."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def not_owned(snap: dict[str, str], owns: tuple[str, ...]) -> dict[str, str]:
    from fnmatch import fnmatch

    return {k: v for k, v in snap.items() if not any(fnmatch(k, g) for g in owns)}


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """The case's own folder, as the working directory."""
    work = tmp_path / "case"
    work.mkdir()
    monkeypatch.chdir(work)
    yield work
    while RUNNING:
        proc = RUNNING.pop()
        proc.kill()
        proc.wait()


def run_command(c: Case, tmp: Path, capsys) -> tuple[int, str, str]:
    argv = [a.replace("{tmp}", str(tmp)) for a in c.argv]
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("c", CASES)
def test_artefact_keeps_the_contract(c, in_tmp, base_study, capsys):
    c.build(in_tmp, base_study)
    before = snapshot(in_tmp)
    code, out, err = run_command(c, in_tmp, capsys)
    after = snapshot(in_tmp)
    assert not_owned(after, c.owns) == not_owned(before, c.owns), "a file it did not own changed"
    assert "Traceback" not in err, err
    assert code == c.code, (code, err[-2000:])
    if c.code == 2:
        lines = err.strip().splitlines()
        assert out == "" and len(lines) == 1, err
        assert lines[0].startswith("archsearch: error: "), err
        text = lines[0]
    else:
        text = " ".join(out.split())
    for fragment in c.must:
        assert fragment in text, (fragment, text[:3000])


# ---- the dashboard: requests ----------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """A request to the dashboard of the stand-in study: its target, Host header (`{port}` is
    the server's) and the status it must get; `secret` must not appear in the answer."""

    id: str
    target: str
    status: int
    host: str = "127.0.0.1:{port}"
    method: str = "GET"
    secret: str = "LEAKED_KEY_7"


SECRET_YAML = "LEAKED_KEY_7: 1\n"

REQUESTS = [
    Request("front-ok", "/archsearch/api/front", 200),
    Request("optuna-dashboard-studies", "/api/studies", 200),
    Request("optuna-dashboard-study", "/api/studies/1?after=0", 200),
    Request("axis-device-path", "/archsearch/api/front?x=decode_ms@{secret}", 400),
    Request("axis-device-key-path", "/archsearch/api/front?x=decode_ms@device:{secret}", 400),
    Request("axis-y-device-path", "/archsearch/api/front?y=ttft_ms[{secret}]", 400),
    Request(
        "axis-z-device-path", "/archsearch/api/front?x=params&y=val_loss&z=e2e_ms@{secret}", 400
    ),
    Request("axis-device-parent", "/archsearch/api/front?x=decode_ms@../../{secret}", 400),
    Request("device-path", "/archsearch/api/front?device={secret}", 400),
    Request("host-userinfo-after", "/archsearch", 400, host="127.0.0.1:{port}@evil.example"),
    Request("host-userinfo-before", "/archsearch", 400, host="evil@127.0.0.1:{port}"),
    Request("host-two-in-one", "/archsearch", 400, host="127.0.0.1:{port},evil.example"),
    Request("host-port-not-a-number", "/archsearch", 400, host="127.0.0.1:8x"),
    Request("host-foreign", "/archsearch", 403, host="evil.example:{port}"),
    Request("host-foreign-bracket", "/archsearch", 403, host="[::ffff:1.2.3.4]:{port}"),
    Request("post-refused", "/archsearch/api/front", 405, method="POST"),
]


@pytest.fixture(scope="module")
def dashboard(base_study, tmp_path_factory):
    """The dashboard's server on a copy of the stand-in study (a real socket, port 0)."""
    import threading

    from archsearch.analysis.dashboard import make_app, serve
    from archsearch.study import load

    home = tmp_path_factory.mktemp("dash")
    shutil.copy(base_study, home / "study.db")
    data = load(str(home))
    server = serve(make_app(data.storage, data.url, data.name, data.home), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield home, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def http(port: int, raw: str) -> tuple[int, str]:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(raw.encode())
        chunks = []
        while True:
            got = s.recv(65536)
            if not got:
                break
            chunks.append(got)
    text = b"".join(chunks).decode("utf-8", errors="replace")
    return int(text.split(" ", 2)[1]), text


@pytest.mark.parametrize("r", [pytest.param(r, id=f"dashboard-{r.id}") for r in REQUESTS])
def test_dashboard_request_keeps_the_contract(r, dashboard, tmp_path, monkeypatch):
    from archsearch import yamlio

    home, port = dashboard
    secret = tmp_path / "secret.yaml"
    secret.write_text(SECRET_YAML)
    read = []
    real_load = yamlio.load
    monkeypatch.setattr(
        yamlio, "load", lambda p, *a, **k: (read.append(str(p)), real_load(p, *a, **k))[1]
    )
    before = snapshot(home)
    target = r.target.replace("{secret}", str(secret))
    host = r.host.replace("{port}", str(port))
    status, text = http(
        port, f"{r.method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    assert status == r.status, text[:2000]
    assert r.secret not in text
    assert str(secret) not in read, "the dashboard read a file a request named"
    assert snapshot(home) == before


def test_dashboard_two_host_headers_are_refused(dashboard):
    _, port = dashboard
    raw = (
        f"GET /archsearch HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nHost: evil.example\r\n"
        "Connection: close\r\n\r\n"
    )
    status, _ = http(port, raw)
    assert status == 400


def test_a_damaged_trial_is_named_in_the_dashboards_caption(base_study, tmp_path):
    from archsearch.analysis.dashboard import front_payload

    db = run_copy(base_study, tmp_path)
    truncate_arch(db)
    before = snapshot(tmp_path)
    info = json.loads(front_payload(f"sqlite:///{db}", "tiny", db.parent, {}))["info"]
    assert "1 trial unreadable: 2" in info["caption"]
    assert 2 not in info["front_trials"]
    assert snapshot(tmp_path) == before


# ---- forged driver records ------------------------------------------------------------------


def dead_driver(pid: int | None = None) -> str:
    """The key of a driver of this host whose process is gone (a pid with another start)."""
    return f"{socket.gethostname()}:{pid or os.getpid()}:1.00"


def write_record(run_dir: Path, driver: str, temp_dir: str | Path, name: str = "") -> Path:
    from archsearch.sweep.ray_runtime import RECORDS_DIR

    folder = run_dir / RECORDS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (name or f"rec-{abs(hash((driver, str(temp_dir))))}.json")
    path.write_text(json.dumps({"driver": driver, "ray_temp_dir": str(temp_dir)}))
    return path


def victim(where: Path) -> Path:
    where.mkdir(parents=True)
    (where / "thesis.tex").write_text("years of work\n")
    return where


def forged_outside(tmp: Path, systmp: Path):
    return victim(tmp / "home" / "archsearch-ray-notes"), dead_driver()


def forged_no_marker(tmp: Path, systmp: Path):
    return victim(systmp / "archsearch-ray-notes"), dead_driver()


def forged_wrong_marker(tmp: Path, systmp: Path):
    from archsearch.sweep.ray_runtime import ray_temp_dir

    made = Path(ray_temp_dir(dead_driver(4242)))  # a dead driver's, named for another one
    (made / "thesis.tex").write_text("years of work\n")
    return made, dead_driver(4243)


def forged_symlink(tmp: Path, systmp: Path):
    target = victim(tmp / "home" / "work")
    link = systmp / "archsearch-ray-link"
    link.symlink_to(target)
    return link, dead_driver()


def forged_dotdot(tmp: Path, systmp: Path):
    victim(tmp / "home" / "work")
    return systmp / "archsearch-ray-x" / ".." / ".." / "home" / "work", dead_driver()


def forged_live(tmp: Path, systmp: Path):
    from archsearch.sweep.drivers import Driver
    from archsearch.sweep.ray_runtime import ray_temp_dir

    key = Driver.this().key
    made = Path(ray_temp_dir(key))
    (made / "session.log").write_text("live\n")
    return made, key


FORGED = {
    "outside-temp-dir": forged_outside,
    "no-creator-mark": forged_no_marker,
    "another-drivers-dir": forged_wrong_marker,
    "symlink-in-temp-dir": forged_symlink,
    "dotdot-out-of-temp-dir": forged_dotdot,
}


@pytest.fixture
def system_temp(tmp_path, monkeypatch):
    import tempfile

    systmp = tmp_path / "systmp"
    systmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(systmp))
    return systmp


@pytest.mark.parametrize("kind", sorted(FORGED), ids=[f"record-{k}" for k in sorted(FORGED)])
def test_a_forged_record_deletes_nothing_and_is_reported(kind, tmp_path, system_temp):
    from archsearch.sweep.ray_runtime import reap_leftovers

    named, driver = FORGED[kind](tmp_path, system_temp)
    run_dir = tmp_path / "run"
    record = write_record(run_dir, driver, named)
    before = snapshot(tmp_path)
    reaped = reap_leftovers(run_dir)
    assert snapshot(tmp_path) == before
    assert reaped.removed == []
    assert [str(record)] == [r.split(": ", 1)[0] for r in reaped.refused], reaped.refused


def test_a_malformed_record_is_left_and_reported(tmp_path, system_temp):
    from archsearch.sweep.ray_runtime import RECORDS_DIR, reap_leftovers

    folder = tmp_path / "run" / RECORDS_DIR
    folder.mkdir(parents=True)
    (folder / "x.json").write_text('{"driver": ')
    before = snapshot(tmp_path)
    reaped = reap_leftovers(tmp_path / "run")
    assert snapshot(tmp_path) == before
    assert reaped.removed == [] and len(reaped.refused) == 1


def test_a_live_drivers_record_is_left_alone(tmp_path, system_temp):
    from archsearch.sweep.ray_runtime import reap_leftovers

    named, driver = forged_live(tmp_path, system_temp)
    write_record(tmp_path / "run", driver, named)
    before = snapshot(tmp_path)
    reaped = reap_leftovers(tmp_path / "run")
    assert snapshot(tmp_path) == before and reaped.removed == [] and reaped.refused == []


def test_a_dead_drivers_own_leftovers_are_removed(tmp_path, system_temp):
    """The control: what a killed driver really left (its temp dir, made and marked by it)
    goes, with its record."""
    from archsearch.sweep.ray_runtime import ray_temp_dir, reap_leftovers

    driver = dead_driver(4242)
    made = Path(ray_temp_dir(driver))
    (made / "session.log").write_text("left\n")
    record = write_record(tmp_path / "run", driver, made)
    reaped = reap_leftovers(tmp_path / "run")
    assert reaped.removed == [str(made)] and reaped.refused == []
    assert not made.exists() and not record.exists()


def test_the_corpus_is_large():
    records = len(FORGED) + 3
    total = len(CASES) + len(REQUESTS) + 2 + records
    assert total >= 80, total


# ---- warnings never precede the one line ----------------------------------------------------


def _warns_then(fail: bool):
    def handler(_sub, _cfg) -> int:
        import warnings

        import numpy as np

        with np.errstate(over="warn"):
            np.float64(1e300) * np.float64(1e300)  # numpy's RuntimeWarning, as a library's
        warnings.warn("a library's own notice", UserWarning, stacklevel=1)
        if fail:
            from archsearch.errors import UserError

            raise UserError("the figure is refused", key="device")
        return 0

    return handler


@pytest.mark.parametrize("fail", [True, False], ids=["error", "success"])
def test_library_warnings_never_precede_the_one_error_line(fail, monkeypatch, capsys):
    import dataclasses
    import warnings

    from archsearch.cli import COMMANDS

    monkeypatch.setattr("tests.test_hostile_artefacts.stand_in", _warns_then(fail), raising=False)
    stub = dataclasses.replace(COMMANDS["cost"], handler="tests.test_hostile_artefacts:stand_in")
    monkeypatch.setitem(COMMANDS, "cost", stub)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        code = main(["cost", "arch=tiny_gqa"])
    err = capsys.readouterr().err
    if fail:
        assert code == 2 and err == "archsearch: error: device: the figure is refused\n"
        assert shown == []
    else:  # a command that succeeds still shows them, after it ran
        assert code == 0
        assert {w.category for w in shown} == {RuntimeWarning, UserWarning}


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_a_driver_elsewhere_counts_as_running_while_its_heartbeat_is_fresh(tmp_path):
    """A sweep driver of another host is alive for `confirm` while Optuna's heartbeat of its
    trial (the database's clock) is younger than the grace period, and not after."""
    import optuna

    from archsearch.study import StudyMeta, StudyWriter, load, open_storage
    from archsearch.study.tables import heartbeat_ages
    from archsearch.sweep.drivers import GRACE_S, drivers_alive

    url = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(url, heartbeat_s=5, grace_s=GRACE_S)
    meta = StudyMeta(objectives=["val_loss"], directions=["minimize"])
    writer, _ = StudyWriter.create_or_open(storage, "s", meta, driver="far.example:7:1.00")
    trial = writer.ask()  # stamped with the driver, and its first heartbeat
    writer.set_attrs(trial, {"status": "running"})
    data = load(url, "s")
    ages = heartbeat_ages(data.storage, "s")
    assert set(ages) == {trial.number} and 0 <= ages[trial.number] < GRACE_S
    assert drivers_alive(data.records, ages) == {trial.number: "far.example:7:1.00"}
    assert drivers_alive(data.records, {trial.number: GRACE_S + 1}) == {}


@pytest.mark.slow
def test_postgresql_is_looked_at_and_read_in_read_only_transactions(capsys):
    """On a server: a database without a study is refused and left without tables; a study
    is read in read-only transactions (a write through the reader fails); one of a newer
    Optuna schema is refused naming both versions."""
    import optuna
    import sqlalchemy

    from archsearch.study import StudyMeta, StudyWriter, load, open_storage
    from tests.pgserver import private_postgres

    def tables(url: str) -> set[str]:
        engine = sqlalchemy.create_engine(url)
        try:
            return set(sqlalchemy.inspect(engine).get_table_names())
        finally:
            engine.dispose()

    with private_postgres() as url:
        assert main(["pareto", f"study={url}"]) == 2
        err = capsys.readouterr().err
        assert tables(url) == set()  # nothing was created
        assert err.count("\n") == 1 and "holds no Optuna study" in err, err

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        meta = StudyMeta(objectives=["val_loss"], directions=["minimize"])
        writer, _ = StudyWriter.create_or_open(open_storage(url), "s", meta)
        writer.finish(writer.ask(), "trained", "", {"arch": {"d_model": 64}}, [1.0])
        data = load(url, "s")
        with data.storage.engine.connect() as conn:
            assert conn.execute(sqlalchemy.text("SHOW transaction_read_only")).scalar() == "on"
        with pytest.raises(optuna.exceptions.StorageInternalError) as refused:
            data.study.set_user_attr("x", 1)
        assert "read-only transaction" in str(refused.value.__cause__)

        engine = sqlalchemy.create_engine(url)
        with engine.begin() as conn:
            conn.execute(sqlalchemy.text("UPDATE alembic_version SET version_num = 'v9.0.0.a'"))
            conn.execute(sqlalchemy.text("UPDATE version_info SET library_version = '9.1.0'"))
        engine.dispose()
        assert main(["pareto", f"study={url}", "study_name=s"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "9.1.0" in err and "v9.0.0.a" in err, err
