"""Accuracy of the latency predictor on this CPU: predicted vs measured TTFT and decode ms/token
on architectures calibration never saw.

Over 48 architectures spanning every mixer family (MHA, GQA, MQA, MLA with and without query
compression, the eight linear families, MCSD, a hybrid, MoE), the real PyTorch models are timed
here (`archsearch.latency.calibrate.timing.time_model`, `--instances` fresh builds of each, the
least of a build's samples over `SAMPLE_S` after `WARMUP_S` of warm-up calls, the least over
builds, at a fixed thread count, through `archsearch.runtimes.prepare`): the prefill of a
prompt (time to first token) and one decode step after a context, at one of four settings
each. None of these models, and none of their (width, depth, vocabulary, prompt, context,
batch) combinations, is timed by `archsearch calibrate` (`archsearch.latency.calibrate`: kernels
on grids of widths 64-768, prompts 16-512, contexts 16-2048, batches 1-8; its glue and
held-out models at other sizes); rows outside the calibration set's ranges (width > 768,
prompt > 512, context > 2048 or batch > 8) are marked `outside` and summarised apart.

How far a measurement itself holds (`retest`): the set is timed in two passes, half of each
architecture's builds in each, minutes apart (the figure of a row is the least over all its
builds); the share of architectures whose two passes agree within +-10% is reported with the
MAPE between them. No predictor can agree with a single measurement more often than two
measurements agree with each other, and on a shared VM two measurements minutes apart agree
less often than two taken back to back (this benchmark's first version timed every build of
an architecture in a row: its halves agreed within +-10% for 77-96% of the decode steps).
Beside it, the share of the pairs that one prediction can be within +-10% of at once (`attainable`:
max / min <= 1.1 / 0.9): on the others any fixed predictor misses one of the two timings, so it
bounds how often a profile can hold within +-10% for a timing taken at either moment. The same
is given for the calibration models' start and end timings (`drift`, below).

The same quantities are predicted by the cost model on the device profile (`local` by
default: run `archsearch calibrate` first, with the same threads).

Printed and saved (benchmarks/results/latency_accuracy.json), for TTFT and decode: the share
within +-5/10/20%, MAPE, Kendall's tau, and the bias (mean signed relative error) per family.

Whether the error the user is shown holds (`stated`): each prediction carries its profile's
held-out error (`archsearch.latency.predict.latency_errors`: the upper bound of the 90th percentile
of |error|, or that percentile on a profile without bounds, in the band of its working set
where the profile gives bands, else its one figure); the share of the held-out architectures
inside their own +- (a 90th percentile promises 90%, its bound at least that) and the median
+- are printed beside the share inside the profile's one figure. Across calibrations and runs:
`bench_error_bound.py`; how close any predictor can come across saved runs (the median of the
other runs' timings, beside the profiles): `bench_latency_ceiling.py`.

`--precision fp16` checks the roofline's half precision instead (a measured profile's kernel
predictor prices fp32 only): every model timed in bf16 (`calibrate.timing.DTYPES`), predicted at
fp16, saved to results/latency_accuracy_fp16.json; architectures torch cannot run in bf16 on a
CPU (gated DeltaNet, DeltaNet: no bf16 `triangular_solve`) are listed and left out.

`--settings PROMPT,CONTEXT,BATCH ...` times the architectures at other settings (assigned in
the same rotation) than the four above: `--per-kind 2 --settings 192,384,2 192,384,4` is the
batched run `bench_latency_batch.py` reads.

`--rescore results.json` prices a saved run's timings again on `--device` (no timing: seconds)
and prints its figures, to read one set of measurements against several profiles; with
`--out` it saves them (the predictions and figures replaced, `rescored` naming the profile).

How fast the machine is now against during calibration (`drift`): a shared VM's speed wanders
by 10% and more over minutes. The models calibration fitted its model-level terms to
(`calibrate.models.glue_models`, where the profile's predictions equal calibration's timings up to
the fit) are timed again before and after the held-out set; the median of measured /
predicted, per phase, is that drift; the share of them whose start and end timings agree
within +-10% is printed beside it (the same reading of the machine as `retest`, over the
whole run). The held-out figures are also given at that drift (`at_drift`: the predictions
times the drift, against the same measurements), which takes the machine's change of speed
since calibration out of the predictor's error; the figures as measured come first.

How the machine changes during the run (`sentinels`): a VM's share of a shared last-level cache
changes with its neighbours, and the models whose working set lies in that range slow down by
20-50% while small ones do not (measured on this project's Xeon VM: the glue models of 59-180
MiB ran at 1.0 x their prediction before a run and 1.1-1.5 x after it, those below 16 MiB at
0.9-1.1 x both times). Three glue models (decode working sets nearest 16, 64 and 160 MiB) are
timed again, one build each, before every held-out architecture of the first pass, and their
measured / predicted is kept per row and its range printed: on a quiet machine it stays near 1.
It is a monitor, not a correction: scaling each prediction by the sentinels at that moment
(interpolated at the architecture's working set, a median over three neighbouring rows) gave 88%
/ 58% within +-10% (TTFT / decode) where the raw figures were 85% / 56% in one run, and 71% /
56% against 83% / 69% in the next: one build of a sentinel is as noisy as the change it would
remove.

    archsearch calibrate threads=1 && python benchmarks/bench_latency_accuracy.py --threads 1
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import kendalltau

from archsearch.arch import (
    LINEAR_FAMILIES,
    ArchConfig,
    AttentionConfig,
    FFNConfig,
    LayersConfig,
    LinearConfig,
    MCSDConfig,
    MoEConfig,
)
from archsearch.cost.devices import latency_error
from archsearch.latency import columns, decode_s, latency_errors, load_device, ttft_s
from archsearch.latency.calibrate.models import WholeModel, glue_models
from archsearch.latency.calibrate.plan import SAMPLE_S, TimingPlan
from archsearch.latency.calibrate.timing import time_model

# (prompt, context, batch): the first inside the calibration ranges, the others outside
SETTINGS = ((256, 512, 1), (768, 1536, 1), (128, 4096, 1), (192, 384, 8))
# (width, depth): widths 128-1024, depths 2-12
SIZES = ((128, 12), (256, 6), (384, 3), (512, 2), (640, 4), (768, 2), (1024, 2), (896, 3))
CALIBRATED = {"width": 768, "prompt": 512, "context": 2048, "batch": 8}


def kinds(d: int) -> dict[str, dict]:
    heads = max(1, d // 64)
    out = {
        "mha": dict(attention=AttentionConfig(kind="mha", n_heads=heads)),
        "gqa": dict(attention=AttentionConfig(n_heads=heads, n_kv_heads=2)),
        "mqa": dict(attention=AttentionConfig(kind="mqa", n_heads=heads)),
        "mla": dict(
            attention=AttentionConfig(kind="mla", n_heads=heads, kv_rank=d // 4, rope_dim=32)
        ),
        "mla_q": dict(
            attention=AttentionConfig(
                kind="mla", n_heads=heads, kv_rank=d // 4, q_rank=d // 2, rope_dim=32
            )
        ),
        "mcsd": dict(layers=LayersConfig(mixer="mcsd"), mcsd=MCSDConfig(n_channels=8)),
        "hybrid_gla": dict(
            layers=LayersConfig(pattern="LN"),
            linear=LinearConfig(family="gla"),
            attention=AttentionConfig(n_heads=heads, n_kv_heads=2),
        ),
        "moe": dict(
            attention=AttentionConfig(n_heads=heads, n_kv_heads=2),
            moe=MoEConfig(n_experts=8, top_k=2, d_expert=d),
        ),
    }
    for fam in LINEAR_FAMILIES:
        out[fam] = dict(layers=LayersConfig(mixer="linear"), linear=LinearConfig(family=fam))
    return out


def cases(
    per_kind: int, settings: tuple[tuple[int, int, int], ...] = SETTINGS
) -> list[tuple[str, ArchConfig, tuple[int, int, int]]]:
    """(family, architecture, setting): every kind at `per_kind` sizes and settings, assigned
    in a fixed rotation, so that the set spans widths 128-1024, depths 2-12 and every setting."""
    out = []
    for i, name in enumerate(kinds(64)):
        for j in range(per_kind):
            d, layers = SIZES[(i + 3 * j) % len(SIZES)]
            setting = settings[(i + j) % len(settings)]
            arch = ArchConfig(
                vocab_size=8192 + 1000 * j,
                d_model=d,
                n_layers=layers,
                max_seq_len=8192,
                ffn=FFNConfig(kind="swiglu"),
                name=f"{name}-{layers}x{d}",
                **kinds(d)[name],
            )
            out.append((name, arch, setting))
    return out


def outside(arch: ArchConfig, setting: tuple[int, int, int]) -> bool:
    prompt, context, batch = setting
    return (
        arch.d_model > CALIBRATED["width"]
        or prompt > CALIBRATED["prompt"]
        or context > CALIBRATED["context"]
        or batch > CALIBRATED["batch"]
    )


def summary(rows: list[dict], q: str, drift: float | None = None) -> dict:
    """The figures of `rows` for `q` (ttft or decode); with `drift` (measured / predicted of
    the calibration models now, `drift`), also the share within +-10% and the MAPE of the
    predictions scaled by it (`at_drift`): the predictor's error on the held-out set with the
    machine's change of speed since calibration taken out."""
    meas = np.array([r[f"{q}_ms"] for r in rows])
    pred = np.array([r[f"{q}_pred_ms"] for r in rows])
    err = pred / meas - 1
    timed = [r for r in rows if len(r[f"{q}_builds_ms"]) > 1]
    builds = [r[f"{q}_builds_ms"] for r in timed]
    half = [r.get("first_pass_builds", len(b) // 2) for r, b in zip(timed, builds)]
    retest = np.array([min(b[:h]) / min(b[h:]) - 1 for b, h in zip(builds, half)])
    out = {
        "n": len(rows),
        "retest_within_10": float(np.mean(np.abs(retest) <= 0.10)) if len(retest) else None,
        "retest_mape_percent": float(100 * np.mean(np.abs(retest))) if len(retest) else None,
        "retest_attainable_within_10": attainable(retest + 1) if len(retest) else None,
        **figures(meas, pred),
    }
    stated = np.array([r.get(f"{q}_error", np.nan) for r in rows], dtype=np.float64)
    if np.isfinite(stated).all():
        one = rows[0][f"{q}_profile_error"]
        out["stated"] = {
            "within_own": float(np.mean(np.abs(err) <= stated)),
            "median_own_percent": float(100 * np.median(stated)),
            "within_profile": float(np.mean(np.abs(err) <= one)),
            "profile_percent": float(100 * one),
        }
    if drift is not None:
        moved = pred * drift / meas - 1
        out["at_drift"] = {
            "drift": drift,
            "within_10": float(np.mean(np.abs(moved) <= 0.10)),
            "mape_percent": float(100 * np.mean(np.abs(moved))),
        }
    out["bias_percent_by_family"] = bias_by_family(err, [r["family"] for r in rows])
    return out


def bias_by_family(err: np.ndarray, families: list[str]) -> dict[str, float]:
    """The mean signed relative error (%) of each family's predictions."""
    return {
        f: float(100 * np.mean([e for e, g in zip(err, families) if g == f]))
        for f in sorted(set(families))
    }


def figures(measured: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """The share of predictions within +-5/10/20% of their measurements, the MAPE and
    Kendall's tau (1 for a single row)."""
    err = predicted / measured - 1
    return {
        "within_5": float(np.mean(np.abs(err) <= 0.05)),
        "within_10": float(np.mean(np.abs(err) <= 0.10)),
        "within_20": float(np.mean(np.abs(err) <= 0.20)),
        "mape_percent": float(100 * np.mean(np.abs(err))),
        "kendall_tau": float(kendalltau(measured, predicted).statistic) if len(err) > 1 else 1.0,
    }


def attainable(ratios: np.ndarray) -> float:
    """The share of pairs of timings of one model (their `ratios`, either way round) that one
    prediction can sit within +-10% of at once: a prediction p is within +-10% of a and b iff
    0.9 max(a, b) <= p <= 1.1 min(a, b), i.e. max / min <= 1.1 / 0.9. On the rest, any fixed
    predictor misses one of the two timings, so over models timed at two moments no predictor
    exceeds this share within +-10% of a timing taken at either."""
    spread = np.maximum(ratios, 1 / ratios)
    return float(np.mean(spread <= 1.1 / 0.9 + 1e-12))


SENTINEL_MIB = (16, 64, 160)  # decode working sets of the sentinels (nearest glue models)


def sentinels() -> list[WholeModel]:
    """The glue models whose decode working sets lie nearest SENTINEL_MIB: small, in the
    shared cache's range, beyond it."""
    models = glue_models()
    ws = np.array([m.working_sets()[1] for m in models])
    return [models[int(np.argmin(np.abs(np.log(ws / (mib * 2**20)))))] for mib in SENTINEL_MIB]


def measured_over_predicted(
    dev,
    runtime: str,
    repeats: int,
    models: list[WholeModel],
    instances: int = 3,
    precision: str = "fp32",
) -> list[tuple[float, float]]:
    """(measured / predicted TTFT, decode) of each model now at `precision`, the least over
    `instances` builds: `drift` times every glue model, the sentinels one build each (nan for
    a model torch cannot run at that precision)."""
    out = []
    for m in models:
        try:
            how = TimingPlan("benchmark", runtime=runtime, repeats=repeats, precision=precision)
            ttft, decode = time_model(m, how, instances)
        except RuntimeError:  # no kernel for one of its ops in that dtype
            out.append((float("nan"), float("nan")))
            continue
        p_ttft, p_decode = m.predicted(dev, precision)
        out.append((ttft / p_ttft, decode / p_decode))
    return out


def parse_setting(text: str) -> tuple[int, int, int]:
    """`--settings`' PROMPT,CONTEXT,BATCH: three positive integers."""
    values = text.split(",")
    if len(values) != 3 or not all(v.strip().isdigit() and int(v) > 0 for v in values):
        raise argparse.ArgumentTypeError(
            f"expected PROMPT,CONTEXT,BATCH (positive integers), got {text!r}"
        )
    prompt, context, batch = (int(v) for v in values)
    return prompt, context, batch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--instances", type=int, default=4, help="builds per architecture")
    ap.add_argument("--device", default="local")
    ap.add_argument("--runtime", default="torch")
    ap.add_argument(
        "--precision",
        default="fp32",
        help="fp32 (the kernel predictor) or fp16 (the roofline; timed in bf16)",
    )
    ap.add_argument("--per-kind", type=int, default=3, help="architectures per kind")
    ap.add_argument(
        "--settings",
        nargs="+",
        type=parse_setting,
        metavar="PROMPT,CONTEXT,BATCH",
        help="the settings the architectures are timed at, in rotation (default: SETTINGS)",
    )
    ap.add_argument("--out", help="default: results/latency_accuracy[_PRECISION].json")
    ap.add_argument("--rescore", help="a saved result: price its timings on --device, print")
    args = ap.parse_args()
    if args.rescore:
        rescore(args.rescore, args.device, args.out)
        return
    torch.set_num_threads(args.threads)
    dev = load_device(args.device)
    sampled = dev.predictor.sample_s if dev.predictor is not None else None
    if sampled is not None and sampled != SAMPLE_S:
        print(
            f"note: {args.device} was fitted to whole models sampled over {sampled:g} s "
            f"(0: back to back), timed here over {SAMPLE_S:g} s (`calibrate.plan.SAMPLE_S`)"
        )
    t0 = time.perf_counter()
    at = args.precision
    before = measured_over_predicted(dev, args.runtime, args.repeats, glue_models(), 3, at)
    watch = sentinels()
    watch_ws = np.array([m.working_sets() for m in watch])
    settings = tuple(args.settings) if args.settings else SETTINGS
    todo = cases(args.per_kind, settings)
    passes = min(2, args.instances)
    first = -(-args.instances // passes)  # builds in the first pass
    builds: list[list[tuple[float, float]]] = [[] for _ in todo]
    watched = []
    for k in range(passes):
        for i, (_, arch, (prompt, context, batch)) in enumerate(todo):
            if k == 0:
                watched.append(measured_over_predicted(dev, args.runtime, 3, watch, 1, at))
            try:
                how = TimingPlan(
                    "benchmark", runtime=args.runtime, repeats=args.repeats, precision=at
                )
                case = WholeModel(arch, prompt, context, batch)
                builds[i] += [
                    time_model(case, how)
                    for _ in range(first if k == 0 else args.instances - first)
                ]
            except RuntimeError as e:  # torch has no kernel for one of its ops at `at`
                if k == 0:
                    print(f"{arch.name}: not run at {at} ({str(e).splitlines()[0][:80]})")
            if k < passes - 1:
                print(f"pass {k + 1}/{passes}: {i + 1}/{len(todo)} {arch.name}", flush=True)
    rows = []
    for (family, arch, setting), now, timed in zip(todo, watched, builds):
        if not timed:
            continue
        prompt, context, batch = setting
        ttft, decode = min(b[0] for b in timed), min(b[1] for b in timed)
        row = {
            "family": family,
            "arch": arch.name,
            "summary": arch.summary(),
            "prompt": prompt,
            "context": context,
            "batch": batch,
            "outside": outside(arch, setting),
            "ttft_ms": 1e3 * ttft,
            "ttft_builds_ms": [1e3 * b[0] for b in timed],
            "decode_builds_ms": [1e3 * b[1] for b in timed],
            "first_pass_builds": first,
            "decode_ms": 1e3 * decode,
            "sentinels": [list(r) for r in now],
        }
        predict(row, arch, dev, at)
        p_ttft, p_decode = row["ttft_pred_ms"] / 1e3, row["decode_pred_ms"] / 1e3
        rows.append(row)
        print(
            f"{arch.name:24s} P{prompt:<4d} C{context:<5d} B{batch} "
            f"{'out' if row['outside'] else 'in ':3s}  TTFT {row['ttft_ms']:8.2f} ms "
            f"(pred {row['ttft_pred_ms']:8.2f}, {p_ttft / ttft - 1:+6.1%})   decode "
            f"{row['decode_ms']:7.3f} ms (pred {row['decode_pred_ms']:7.3f}, "
            f"{p_decode / decode - 1:+6.1%})",
            flush=True,
        )
    after = measured_over_predicted(dev, args.runtime, args.repeats, glue_models(), 3, at)
    ratios = np.array(before + after)
    speed = {
        "ttft": float(np.nanmedian(ratios[:, 0])),
        "decode": float(np.nanmedian(ratios[:, 1])),
    }
    moved = np.array(after) / np.array(before) - 1  # [model, phase]
    moved = moved[np.isfinite(moved).all(axis=1)]
    agree = {q: float(np.mean(np.abs(moved[:, i]) <= 0.10)) for i, q in enumerate(speed)}
    reachable = {q: attainable(moved[:, i] + 1) for i, q in enumerate(speed)}
    seen = np.array([r["sentinels"] for r in rows])  # [row, sentinel, phase]
    result = {
        "drift": {
            "measured_over_predicted": speed,
            "start_end_within_10": agree,
            "start_end_attainable_within_10": reachable,
            "before": [list(r) for r in before],
            "after": [list(r) for r in after],
        },
        "sentinels": {
            "models": [m.arch.summary() for m in watch],
            "working_sets_mib": (watch_ws / 2**20).round(1).tolist(),
            "range": {
                q: [
                    np.nanmin(seen[:, :, i], axis=0).tolist(),
                    np.nanmax(seen[:, :, i], axis=0).tolist(),
                ]
                for i, q in enumerate(("ttft", "decode"))
            },
        },
        "threads": args.threads,
        "device": args.device,
        "profile": dev.path,
        "kernel_predictor": dev.predictor is not None,
        "runtime": args.runtime,
        "sample_s": {"here": SAMPLE_S, "profile": sampled},
        "precision": at,
        "settings": [list(s) for s in settings],
        "torch": str(torch.__version__),
        "seconds": round(time.perf_counter() - t0, 1),
        "summary": {},
        "rows": rows,
    }
    print(
        f"drift: the calibration models run at {speed['ttft']:.3f} x (TTFT) and "
        f"{speed['decode']:.3f} x (decode) their predicted times now (median of before and "
        f"after); their start and end timings agree within +-10% for {agree['ttft']:.0%} "
        f"(TTFT) and {agree['decode']:.0%} (decode); one fixed prediction could be within "
        f"+-10% of both for {reachable['ttft']:.0%} (TTFT) and {reachable['decode']:.0%} (decode)"
    )
    for i, q in enumerate(("ttft", "decode")):
        spans = ", ".join(
            f"{mib:.0f} MiB {lo:.2f}-{hi:.2f}"
            for mib, lo, hi in zip(
                watch_ws[:, i] / 2**20,
                np.nanmin(seen[:, :, i], axis=0),
                np.nanmax(seen[:, :, i], axis=0),
            )
        )
        print(f"sentinels, {q} measured / predicted over the run (working set: range): {spans}")
    result["summary"] = report(rows, speed)
    suffix = "" if at == "fp32" else f"_{at}"
    out = Path(args.out or Path(__file__).parent / "results" / f"latency_accuracy{suffix}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"saved {out}")


def predict(row: dict, arch: ArchConfig, dev, precision: str = "fp32") -> None:
    """Fill `row` (a held-out architecture at its setting) with its predictions on `dev` at
    `precision` and the errors they carry (`latency_errors`; the profile's one figure
    beside them)."""
    c = columns(arch)
    settings = dict(prompt=row["prompt"], context=row["context"], batch=row["batch"])
    ttft = ttft_s(c, dev, row["prompt"], precision, row["batch"])
    row["ttft_pred_ms"] = 1e3 * float(ttft[0])
    decode = decode_s(c, dev, row["context"], precision, row["batch"])
    row["decode_pred_ms"] = 1e3 * float(decode[0])
    for q in ("ttft", "decode"):
        errors = latency_errors(c, dev, f"{q}_ms", precision, **settings)
        if errors is not None:
            row[f"{q}_error"] = float(errors[0])
            row[f"{q}_profile_error"] = latency_error(dev, f"{q}_ms", precision)


def report(rows: list[dict], speed: dict[str, float | None]) -> dict:
    """Print and return the figures of `rows` per quantity (`summary`)."""
    out = {}
    for q in ("ttft", "decode"):
        s = summary(rows, q, speed[q])
        s["outside_calibration"] = summary([r for r in rows if r["outside"]], q, speed[q])
        out[q] = s
        worst = max(s["bias_percent_by_family"].items(), key=lambda kv: abs(kv[1]))
        print(
            f"{q}: within +-5/10/20% {s['within_5']:.0%}/{s['within_10']:.0%}/"
            f"{s['within_20']:.0%}, MAPE {s['mape_percent']:.1f}%, Kendall tau "
            f"{s['kendall_tau']:.3f} over {s['n']} architectures "
            f"({s['outside_calibration']['n']} outside the calibration ranges: within +-10% "
            f"{s['outside_calibration']['within_10']:.0%}); largest family bias "
            f"{worst[0]} {worst[1]:+.1f}%"
        )
        if s["retest_within_10"] is not None:
            print(
                f"  retest (the two passes, the least of each): within +-10% "
                f"{s['retest_within_10']:.0%}, MAPE {s['retest_mape_percent']:.1f}%; one "
                f"prediction within +-10% of both passes possible for "
                f"{s['retest_attainable_within_10']:.0%}"
            )
        if "at_drift" in s:
            at = s["at_drift"]
            print(
                f"  at the machine's speed now (predictions x drift {at['drift']:.3f}): within "
                f"+-10% {at['within_10']:.0%}, MAPE {at['mape_percent']:.1f}%"
            )
        if "stated" in s:
            st = s["stated"]
            print(
                f"  inside their stated +- (by working set, median +-"
                f"{st['median_own_percent']:.0f}%): {st['within_own']:.0%}; inside the "
                f"profile's one +-{st['profile_percent']:.0f}%: {st['within_profile']:.0%}"
            )
        print(
            "  bias by family (%): "
            + ", ".join(f"{f} {b:+.1f}" for f, b in s["bias_percent_by_family"].items())
        )
    return out


def rescore(path: str, device: str, out: str | None = None) -> None:
    """A saved run's timings priced again on `device`: its figures, printed (and, with `out`,
    saved there with the predictions and figures replaced and `rescored` saying on what)."""
    saved = json.loads(Path(path).read_text())
    dev = load_device(device)
    archs = {arch.summary(): arch for _, arch, _ in cases(3)}
    rows = saved["rows"]
    for row in rows:
        predict(row, archs[row["summary"]], dev, saved.get("precision", "fp32"))
    print(f"{path}: {len(rows)} architectures timed on {saved['device']}'s run, priced on {device}")
    saved["summary"] = report(rows, {"ttft": None, "decode": None})
    if out:
        when = time.strftime("%Y-%m-%d")
        saved["rescored"] = {"device": device, "profile": dev.path, "date": when}
        Path(out).write_text(json.dumps(saved, indent=2))
        print(f"saved {out}")


if __name__ == "__main__":
    main()
