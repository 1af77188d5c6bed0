"""How long the front and its hypervolume history take on large studies (2 and 3 objectives).

`hypervolume_history` keeps the front so far and recomputes the hypervolume only when a trial
joined it, at every trial (`max_points=n`) or, by default, at 200 trials spread over the study;
the baseline recomputes the hypervolume of every prefix of the trials (what a plain
implementation does). They run side by side on the same random points (uniform in the unit
cube, and near a curved trade-off surface, where a large share of the trials is on the front,
as multi-objective TPE produces); the figure is the median of `--repeats` runs (the baseline
runs once), and the histories must agree wherever both have a value.

    python benchmarks/bench_analysis_front.py [--sizes 500 1000] [--repeats 3]

Prints a table and saves benchmarks/results/analysis_front.json. The baseline runs only up to
`--baseline-max` trials (it is quadratic).

With `--studies 1000 10000 100000` it measures instead what a user waits for on stored studies
of that many trials, in SQLite and in PostgreSQL (a private server it starts and stops): the
time to open the study (`archsearch.study.load`, read in pages), the front
(`analysis.front.front`), the hypervolume history (2 and 3 objectives) and `analyse` as
`pareto` and the dashboard's front run it on the study read once, what `pareto` waits for
before writing its files (a fresh read, then `analyse`: `pareto_s`), the dashboard's whole
first answer (`front_payload`, with its plotly figure) and its next one for another device on
the study it has read (`dashboard_redraw_s`). The synthetic sweeps have three objectives
with values near a curved trade-off surface (a large front), trial attributes as the sweep
stores them (the `tiny` space's priced candidates, a loss curve) and the sweep's mix of
statuses; they are written
once through `StudyWriter.add_finished` and cached under `--cache` (SQLite files, and the
PostgreSQL server's data folder, kept between runs; the 100,000-trial PostgreSQL study is a
row-for-row copy of the SQLite one's tables: see `COPY_FROM_SQLITE`). Figures are medians of
`--repeats` runs. Saves benchmarks/results/analysis_study_size.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from archsearch.analysis.front import (
    Axis,
    hypervolume,
    hypervolume_history,
    non_dominated,
    reference_point,
)
from archsearch.study import TrialRecord

RESULTS = Path(__file__).resolve().parent / "results"
MACHINE = {
    "cpus": os.cpu_count(),
    "load_avg": os.getloadavg(),
    "note": "2 cores; the load average when the run started is beside; figures are medians "
    "of repeats",
}
OBJECTIVES = ["val_loss", "decode_ms[rpi5,context=1024,precision=fp16]", "params"]


def baseline_history(values: np.ndarray, axes: list[Axis], ref: np.ndarray) -> list[float]:
    return [hypervolume(values[: k + 1], axes, ref) for k in range(len(values))]


def points(kind: str, n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "uniform":
        return rng.random((n, d))
    # near the surface sum(x^2) = 1: most points are mutually non-dominated
    x = np.abs(rng.normal(size=(n, d)))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x + 0.02 * rng.random((n, d))


def timed(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[500, 1000])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--baseline-max", type=int, default=2000)
    p.add_argument("--every-trial-max", type=int, default=20000)
    p.add_argument("--studies", type=int, nargs="*", help="stored-study sizes instead")
    p.add_argument("--backends", nargs="+", default=["sqlite", "postgresql"])
    p.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "archsearch-bench-studies"))
    p.add_argument("--out", default=None)
    p.add_argument("--writers", type=int, default=1, help="processes writing a PostgreSQL study")
    args = p.parse_args()
    if args.studies:
        study_sizes(args)
        return
    args.out = args.out or str(RESULTS / "analysis_front.json")
    rng = np.random.default_rng(0)
    rows = []
    for kind in ("uniform", "tradeoff"):
        for d in (2, 3):
            for n in args.sizes:
                v = points(kind, n, d, rng)
                axes = [Axis(f"m{i}") for i in range(d)]
                recs = [
                    TrialRecord(i, "COMPLETE", "trained", "", list(v[i]), {"arch_hash": str(i)}, {})
                    for i in range(n)
                ]
                ref = reference_point(v, axes)
                labels = [a.label for a in axes]
                t_front, mask = timed(lambda v=v, axes=axes: non_dominated(v, axes), args.repeats)
                t_every, every = (
                    timed(
                        lambda recs=recs, axes=axes, labels=labels, ref=ref, n=n: (
                            hypervolume_history(recs, axes, labels, ref, max_points=n)
                        ),
                        args.repeats,
                    )
                    if n <= args.every_trial_max
                    else (float("nan"), [(0, 0.0)] * n)
                )
                t_default, default = timed(
                    lambda recs=recs, axes=axes, labels=labels, ref=ref: hypervolume_history(
                        recs, axes, labels, ref
                    ),
                    args.repeats,
                )
                if n <= args.baseline_max:
                    t_base, base = timed(
                        lambda v=v, axes=axes, ref=ref: baseline_history(v, axes, ref), 1
                    )
                    assert np.allclose([h for _, h in every], base), "the histories disagree"
                    assert np.allclose([h for _, h in default], [base[k] for k, _ in default])
                else:
                    t_base = float("nan")
                rows.append(
                    {
                        "points": kind,
                        "objectives": d,
                        "trials": n,
                        "front": int(mask.sum()),
                        "non_dominated_s": t_front,
                        "history_every_trial_s": t_every,
                        "history_200_points_s": t_default,
                        "baseline_history_s": t_base,
                        "speedup_every_trial": t_base / t_every,
                        "speedup_200_points": t_base / t_default,
                    }
                )
                r = rows[-1]
                print(
                    f"{kind:>8} d={d} n={n:>5} front {r['front']:>4}: front {t_front:6.3f} s; "
                    f"history: every trial {t_every:7.3f} s, 200 points {t_default:6.3f} s, "
                    f"baseline {t_base:7.3f} s ({r['speedup_every_trial']:.1f}x, "
                    f"{r['speedup_200_points']:.1f}x)"
                )
    result = {
        "benchmark": "Pareto front and hypervolume history",
        "machine": MACHINE,
        "rows": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"saved {out}")


# ---- stored studies -------------------------------------------------------------------------


def write_study(url: str, n: int, seed: int = 0, writers: int = 1) -> None:
    """A synthetic sweep of `n` trials (see the module docstring), through the one writer;
    `writers` processes write it at once, as concurrent sweep drivers do (PostgreSQL)."""
    if writers > 1:
        import multiprocessing

        write_study(url, 0, seed)  # creates the study and its meta
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(writers) as pool:
            pool.starmap(write_part, [(url, n, seed, k, writers) for k in range(writers)])
        return
    write_part(url, n, seed, 0, 1)


def write_part(url: str, n: int, seed: int, part: int, parts: int) -> None:
    """Trials part, part + parts, part + 2 parts, ... of `write_study`'s `n`."""
    import optuna

    from archsearch.cost.devices import device_names
    from archsearch.space import load_space, sample
    from archsearch.study import Status, StudyMeta, StudyWriter, open_storage
    from archsearch.sweep.pricing import price

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = load_space("tiny")
    devices = device_names()
    priced = [price(space, devices, "rpi5", c.arch) for c in sample(space, 40, seed).candidates]
    meta = StudyMeta(
        objectives=OBJECTIVES,
        directions=["minimize"] * 3,
        space="tiny",
        device="rpi5",
        devices=devices,
    )
    writer, _ = StudyWriter.create_or_open(open_storage(url), "bench", meta)
    rng = np.random.default_rng(seed)
    values = points("tradeoff", n, 3, rng) * np.array([2.0, 50.0, 1e6]) + [2.0, 5.0, 1e5]
    statuses = rng.random(n)
    curve = {
        "evals": [[k * 100, 3.0 - k * 0.1] for k in range(10)],
        "train": [[k * 10, k * 5120, 3.5 - k * 0.01] for k in range(200)],
    }
    for i in range(part, n, parts):
        pr = priced[i % len(priced)]
        attrs = {
            **pr.attrs(),
            "arch_hash": f"{i:012x}",
            "curve": curve,
            "train_metrics": {"tokens_per_s": 1e4, "wall_s": 60.0, "peak_rss_mib": 900.0},
            "budget": {"tokens": 1e6, "fraction": 1.0},
        }
        u = statuses[i]
        status = (
            Status.TRAINED
            if u < 0.85
            else Status.STOPPED_EARLY
            if u < 0.9
            else Status.FAILED
            if u < 0.95
            else Status.INFEASIBLE
        )
        violations = {"params": 1.0} if status == Status.INFEASIBLE else {}
        writer.add_finished(status, "", attrs, list(values[i]), violations)
        if part == 0 and (i + parts) // 10000 > i // 10000:
            print(f"  {i + 1} of {n} trials written", flush=True)


# Writing a trial through Optuna's API to PostgreSQL costs ~0.25 s on this 2-core machine under
# load (an ORM round trip per attribute): 100,000 trials would take hours. From this size the
# PostgreSQL study is a copy of the SQLite study's Optuna tables, row for row (the same trials,
# written once through `StudyWriter`); smaller ones are written through `StudyWriter` itself.
COPY_FROM_SQLITE = 100_000


def copy_tables(source: str, target: str, chunk: int = 20_000) -> None:
    """Copy every row of Optuna's tables from the database `source` into a new Optuna schema
    at `target` (created by Optuna itself), and move its id sequences past the copied ids."""
    import optuna
    import sqlalchemy

    optuna.storages.RDBStorage(target)  # creates the schema at Optuna's current revision
    src, dst = sqlalchemy.create_engine(source), sqlalchemy.create_engine(target)
    meta = sqlalchemy.MetaData()
    meta.reflect(dst)
    skip = {"alembic_version", "version_info"}
    with src.connect() as s, dst.begin() as d:
        for table in meta.sorted_tables:
            if table.name in skip:
                continue
            rows = s.execute(sqlalchemy.text(f"SELECT * FROM {table.name}")).mappings()
            while batch := rows.fetchmany(chunk):
                d.execute(table.insert(), [dict(r) for r in batch])
            for column in table.primary_key.columns:  # serial ids continue after the copy
                seq = f"pg_get_serial_sequence('{table.name}', '{column.name}')"
                top = f"COALESCE((SELECT MAX({column.name}) FROM {table.name}), 0) + 1"
                d.execute(sqlalchemy.text(f"SELECT setval({seq}, {top}, false)"))
    src.dispose()
    dst.dispose()


def cached_study(backend: str, n: int, cache: Path, pg_url: str | None, writers: int) -> str:
    """The URL of the synthetic study of `n` trials, written on first use."""
    import optuna

    if backend == "sqlite":
        path = cache / f"study_{n}.db"
        url = f"sqlite:///{path}"
        done = cache / f"study_{n}.done"
    else:
        url = f"{pg_url.rsplit('/', 1)[0]}/bench_{n}"
        done = cache / f"postgresql_{n}.done"
    if done.exists():
        return url
    if backend == "postgresql":
        import sqlalchemy

        engine = sqlalchemy.create_engine(pg_url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text(f"DROP DATABASE IF EXISTS bench_{n}"))
            conn.execute(sqlalchemy.text(f"CREATE DATABASE bench_{n}"))
        engine.dispose()
    elif path.exists():
        path.unlink()
    t0 = time.perf_counter()
    copy_from = cache / f"study_{n}.db"
    if backend == "postgresql" and n >= COPY_FROM_SQLITE and (cache / f"study_{n}.done").exists():
        copy_tables(f"sqlite:///{copy_from}", url)
        how = f"copied {n} trials from {copy_from} to {backend}"
    else:
        write_study(url, n, writers=writers if backend == "postgresql" else 1)
        how = f"wrote {n} trials to {backend}"
    print(f"  {how} in {time.perf_counter() - t0:.0f} s", flush=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    done.touch()
    return url


def measure_study(url: str, repeats: int) -> dict:
    from archsearch.analysis.dashboard import Answers, front_payload
    from archsearch.analysis.front import Axis, front, hypervolume_history, reference_point
    from archsearch.analysis.pareto import analyse
    from archsearch.study import load

    t_open, data = timed(lambda: load(url, "bench"), repeats)
    axes3 = [Axis(label) for label in OBJECTIVES]
    row = {"trials": len(data.records), "open_s": t_open}
    for d in (2, 3):
        axes = axes3[:d]
        t_front, (cands, values, mask) = timed(
            lambda axes=axes: front(data.records, axes, data.objectives), repeats
        )
        ref = reference_point(values, axes)
        t_hist, _ = timed(
            lambda axes=axes, ref=ref: hypervolume_history(
                data.records, axes, data.objectives, ref
            ),
            repeats,
        )
        t_analyse, _ = timed(lambda axes=axes: analyse(data, "rpi5", axes), repeats)
        # what `pareto` waits for before it writes its files: a fresh read, then everything
        t_pareto, _ = timed(lambda axes=axes: analyse(load(url, "bench"), "rpi5", axes), repeats)
        row[f"{d}d"] = {
            "fully_trained": len(cands),
            "front": int(mask.sum()),
            "front_s": t_front,
            "history_s": t_hist,
            "analyse_s": t_analyse,
            "pareto_s": t_pareto,
        }
    t_dash, _ = timed(lambda: front_payload(url, "bench", None, {}), repeats)
    row["dashboard_front_payload_s"] = t_dash
    # the page's next question (another device) on the study it has already read
    answers = Answers(url, "bench", None)
    answers.front({})
    t0 = time.perf_counter()
    answers.front({"device": "jetson_orin_nx"})
    row["dashboard_redraw_s"] = time.perf_counter() - t0
    return row


def study_sizes(args) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from pgserver import private_postgres

    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    rows = []
    for backend in args.backends:
        server = (
            private_postgres(keep=cache / "postgresql")
            if backend == "postgresql"
            else contextlib.nullcontext()
        )
        with server as pg_url:
            for n in args.studies:
                url = cached_study(backend, n, cache, pg_url, args.writers)
                row = {"backend": backend, **measure_study(url, args.repeats)}
                rows.append(row)
                print(
                    f"{backend:>10} {n:>6} trials: open {row['open_s']:6.2f} s; "
                    + "; ".join(
                        f"{d} front of {row[d]['front']:>5}: front {row[d]['front_s']:5.2f} s, "
                        f"history {row[d]['history_s']:5.2f} s, all {row[d]['analyse_s']:5.2f} s"
                        for d in ("2d", "3d")
                    )
                    + f"; pareto (read + all, 3-D) {row['3d']['pareto_s']:5.2f} s"
                    + f"; dashboard front {row['dashboard_front_payload_s']:6.2f} s, "
                    f"redraw {row['dashboard_redraw_s']:5.2f} s"
                )
    out = Path(args.out or RESULTS / "analysis_study_size.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "benchmark": "pareto and the dashboard's front on stored studies",
        "machine": MACHINE,
        "repeats": args.repeats,
        "rows": rows,
    }
    out.write_text(json.dumps(result, indent=2))
    print(f"saved {out}")


if __name__ == "__main__":
    main()
