"""Fit the five edge profiles to every model of [PLM] Table 12, with leave-one-out error.

[PLM] Table 12 (../shared/seeds/003_*.txt, "Inference latency of LLMs on various hardware
and quantization Levels") measures eight models on five devices in FP16, Q8 and Q4: prefill
throughput over a 512-token prompt and generation throughput over 128 tokens (llama.cpp). The
models are the presets `glm_edge_4b`, `nemotron_4b`, `minicpm3_4b`, `minicpm_2b`,
`glm_edge_1_5b`, `plm_1_8b`, `fox_1_6b`, `index_1_9b` (conf/arch/*.yaml: shapes from the
models' published configs, each cited there; [PLM] Tables 9 and 11 give layers, width,
heads, attention, activation and size).

For each device and compute class (fp16; int8 for q8 and q4) `archsearch.cost.fit` fits the
compute and bandwidth efficiencies to all models by least squares on log times, then refits
once per model without it (leave-one-out) and reports, per device and precision, the MAPE and
the share within +-10% of TTFT and decode on the held-out model. A figure is an outlier when the
fit of the other figures misses it by more than OUTLIER_FACTOR (e.g. MiniCPM3-4B's 0.02
tokens/s on the BCM2712): outliers are listed, left out of the fits and of the error figures.

Prints the figures and the YAML to paste into conf/device/*.yaml (`efficiency`, `validation`),
and saves everything to benchmarks/results/edge_fit.json.

    python benchmarks/fit_edge_profiles.py
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from archsearch.arch import load_arch
from archsearch.cost.devices import COMPUTE_CLASS_OF
from archsearch.cost.fit import Throughput, fit_efficiency, leave_one_out, predict, validation
from archsearch.latency import load_device

SOURCE = "[PLM] Table 12 (prefill 512 / generate 128 tokens/s, llama.cpp)"
# preset -> the model's name in the seed
MODELS = {
    "glm_edge_4b": "GLM-Edge-4B",
    "nemotron_4b": "Nemotron-4B",
    "minicpm3_4b": "MiniCPM3-4B",
    "minicpm_2b": "MiniCPM-2.7B",
    "glm_edge_1_5b": "GLM-Edge-1.5B",
    "plm_1_8b": "PLM-1.8B",
    "fox_1_6b": "Fox-1.6B",
    "index_1_9b": "Index-1.9B",
}
DEVICES = ("nvidia_a10", "jetson_orin_nx", "apple_m3", "snapdragon_8gen3", "rpi5")
# [PLM] Table 12: {precision: {"prefill"/"generate": {preset: tokens/s per device, in
# DEVICES order: A10, Orin NX, M3, Snapdragon 8 Gen 3, BCM2712}}}
TABLE_12 = {
    "fp16": {
        "prefill": {
            "glm_edge_4b": (4335.31, 421.43, 292.84, 12.15, 10.12),
            "nemotron_4b": (6543.59, 605.89, 365.06, 20.06, 16.82),
            "minicpm3_4b": (3139.28, 331.36, 129.27, 12.87, 4.73),
            "minicpm_2b": (6003.20, 641.36, 488.45, 22.09, 17.36),
            "glm_edge_1_5b": (10074.07, 1217.45, 905.82, 45.33, 27.01),
            "plm_1_8b": (9129.39, 987.22, 716.94, 44.35, 26.29),
            "fox_1_6b": (11616.08, 1351.74, 1032.83, 56.29, 37.80),
            "index_1_9b": (8074.48, 488.89, 237.80, 3.62, 23.44),
        },
        "generate": {
            "glm_edge_4b": (52.25, 6.75, 10.44, 3.34, 0.74),
            "nemotron_4b": (63.96, 8.19, 9.01, 4.02, 1.49),
            "minicpm3_4b": (44.17, 5.79, 6.37, 3.16, 0.02),
            "minicpm_2b": (72.56, 9.11, 16.31, 4.81, 1.83),
            "glm_edge_1_5b": (131.71, 17.41, 29.57, 11.31, 3.12),
            "plm_1_8b": (102.30, 12.94, 23.31, 10.34, 2.76),
            "fox_1_6b": (117.69, 14.90, 25.81, 9.07, 2.96),
            "index_1_9b": (97.36, 12.23, 2.22, 2.35, 2.40),
        },
    },
    "q8": {
        "prefill": {
            "glm_edge_4b": (3770.60, 458.50, 281.71, 18.77, 11.37),
            "nemotron_4b": (6430.92, 728.69, 403.62, 28.25, 17.20),
            "minicpm3_4b": (3107.81, 349.60, 268.59, 17.51, 10.89),
            "minicpm_2b": (5279.70, 654.74, 463.40, 29.40, 17.96),
            "glm_edge_1_5b": (9030.11, 1156.42, 861.27, 68.36, 30.82),
            "plm_1_8b": (8833.31, 989.01, 707.76, 64.18, 29.04),
            "fox_1_6b": (11250.68, 1385.81, 828.30, 58.33, 35.34),
            "index_1_9b": (7869.27, 956.54, 581.14, 43.90, 19.93),
        },
        "generate": {
            "glm_edge_4b": (83.11, 11.79, 19.45, 5.85, 1.18),
            "nemotron_4b": (110.29, 14.35, 22.93, 7.79, 2.97),
            "minicpm3_4b": (67.19, 8.61, 17.76, 5.41, 2.38),
            "minicpm_2b": (108.06, 14.09, 27.05, 9.06, 3.47),
            "glm_edge_1_5b": (191.80, 27.43, 50.40, 17.08, 6.19),
            "plm_1_8b": (157.35, 20.94, 38.89, 13.78, 5.31),
            "fox_1_6b": (180.39, 23.50, 62.00, 15.80, 6.00),
            "index_1_9b": (152.79, 20.23, 34.46, 13.30, 3.90),
        },
    },
    "q4": {
        "prefill": {
            "glm_edge_4b": (3748.14, 435.25, 293.26, 16.33, 9.187),
            "nemotron_4b": (6156.83, 671.07, 376.61, 26.98, 14.03),
            "minicpm3_4b": (2985.06, 332.56, 252.20, 17.08, 9.21),
            "minicpm_2b": (5291.98, 614.94, 445.00, 24.56, 14.88),
            "glm_edge_1_5b": (8929.26, 1062.21, 826.42, 61.93, 23.61),
            "plm_1_8b": (8266.53, 910.61, 680.78, 48.05, 23.57),
            "fox_1_6b": (10483.37, 1284.18, 789.35, 58.19, 31.42),
            "index_1_9b": (7443.99, 858.28, 532.56, 40.06, 19.61),
        },
        "generate": {
            "glm_edge_4b": (118.08, 16.63, 31.12, 7.40, 1.98),
            "nemotron_4b": (145.60, 18.34, 34.61, 10.54, 4.54),
            "minicpm3_4b": (85.33, 12.00, 26.67, 5.46, 3.92),
            "minicpm_2b": (145.41, 19.37, 40.84, 11.38, 5.61),
            "glm_edge_1_5b": (255.52, 37.88, 77.98, 24.96, 4.54),
            "plm_1_8b": (197.48, 27.04, 59.44, 18.74, 8.02),
            "fox_1_6b": (226.85, 30.20, 63.66, 17.67, 8.77),
            "index_1_9b": (201.02, 26.93, 56.05, 14.66, 7.65),
        },
    },
}
# fixed overhead per operator: llama.cpp dispatches about a fifth of the operators that eager
# PyTorch does (our LAUNCHES), at a few microseconds per graph node (GPU launch, CPU sync)
OVERHEAD = {"gpu": 1e-6, "cpu": 0.5e-6}
# a figure the fit of the device's other figures misses by more than this factor is an outlier
OUTLIER_FACTOR = 2.5
METHOD = (
    "leave-one-model-out over the 8 models of [PLM] Table 12 (fp16, q8, q4), outliers "
    "excluded (benchmarks/fit_edge_profiles.py)"
)


def throughputs(device: str) -> list[Throughput]:
    i = DEVICES.index(device)
    return [
        Throughput(
            MODELS[preset],
            load_arch(preset),
            precision,
            TABLE_12[precision]["prefill"][preset][i],
            TABLE_12[precision]["generate"][preset][i],
        )
        for precision in TABLE_12
        for preset in MODELS
    ]


def outliers(device, rows: list[Throughput], overhead: float) -> list[dict]:
    """Figures the fit of the other models of their compute class misses by > OUTLIER_FACTOR."""
    out = []
    by_class = {}
    for r in rows:
        by_class.setdefault(COMPUTE_CLASS_OF[r.precision], []).append(r)
    for cls_rows in by_class.values():
        for held in dict.fromkeys(r.model for r in cls_rows):
            eff = fit_efficiency(
                device, [r for r in cls_rows if r.model != held], overhead_s=overhead
            )
            for r in cls_rows:
                if r.model != held:
                    continue
                ttft, decode = predict(device, r, eff)
                for quantity, pred, meas in (
                    ("prefill", ttft, r.ttft_s),
                    ("generate", decode, r.decode_s),
                ):
                    if abs(math.log(pred / meas)) > math.log(OUTLIER_FACTOR):
                        out.append(
                            {
                                "model": r.model,
                                "precision": r.precision,
                                "quantity": quantity,
                                "measured_tok_s": (
                                    r.prefill_tok_s if quantity == "prefill" else r.generate_tok_s
                                ),
                                "predicted_over_measured_time": round(pred / meas, 3),
                            }
                        )
    return out


def without(rows: list[Throughput], bad: list[dict]) -> list[Throughput]:
    """Rows with an outlier figure dropped (a row is one model at one precision: both of its
    figures go, since the fit weighs them together)."""
    skip = {(b["model"], b["precision"]) for b in bad}
    return [r for r in rows if (r.model, r.precision) not in skip]


def fit_device(name: str) -> dict:
    device = load_device(name)
    overhead = OVERHEAD[device.kind]
    rows = throughputs(name)
    bad = outliers(device, rows, overhead)
    kept = without(rows, bad)
    out = {"outliers": bad, "classes": {}, "errors": []}
    for cls, precisions in (("fp16", ("fp16",)), ("int8", ("q8", "q4"))):
        cls_rows = [r for r in kept if r.precision in precisions]
        eff = fit_efficiency(device, cls_rows, overhead_s=overhead)
        errors = leave_one_out(device, cls_rows, overhead_s=overhead)
        out["errors"] += errors
        out["classes"][cls] = {
            "compute": eff.compute,
            "bandwidth": eff.bandwidth,
            "op_overhead_s": overhead,
            "models": len({r.model for r in cls_rows}),
        }
    out["per_precision"] = {
        p: {
            q: validation([e for e in out["errors"] if e["precision"] == p], q, METHOD)
            for q in ("ttft", "decode")
        }
        for p in TABLE_12
    }
    out["validation"] = {q: validation(out["errors"], q, METHOD) for q in ("ttft", "decode")}
    return out


def main() -> None:
    results = {name: fit_device(name) for name in DEVICES}
    for name, res in results.items():
        print(f"\n{name}")
        for cls, r in res["classes"].items():
            print(
                f"  {cls}: compute efficiency {r['compute']:.4f}, bandwidth efficiency "
                f"{r['bandwidth']:.4f} ({r['models']} models)"
            )
        print("  leave-one-model-out error (MAPE, share within +-10%, n):")
        for p, figs in res["per_precision"].items():
            t, d = figs["ttft"], figs["decode"]
            print(
                f"    {p:5s} TTFT {100 * t['mape']:5.1f}% {100 * t['within_10']:5.1f}% n={t['n']}"
                f" | decode {100 * d['mape']:5.1f}% {100 * d['within_10']:5.1f}% n={d['n']}"
            )
        for q, v in res["validation"].items():
            print(
                f"    all   {q:6s} MAPE {100 * v['mape']:.1f}%, within +-10% "
                f"{100 * v['within_10']:.1f}%, 90th pct |error| {100 * v['p90']:.1f}%"
            )
        for o in res["outliers"]:
            print(
                f"  outlier: {o['model']} {o['precision']} {o['quantity']} "
                f"{o['measured_tok_s']} tokens/s (predicted/measured time "
                f"{o['predicted_over_measured_time']})"
            )
        print("  yaml:\nefficiency:")
        for cls, r in res["classes"].items():
            print(
                f"  {cls}: {{compute: {r['compute']}, half_rows: 1.0, bandwidth: "
                f"{r['bandwidth']}, op_overhead_s: {r['op_overhead_s']}, source: "
                f'"least-squares fit on log times to {r["models"]} models of {SOURCE} '
                f'(benchmarks/fit_edge_profiles.py)"}}'
            )
        print("validation:")
        for q, v in res["validation"].items():
            figs = ", ".join(f"{k}: {v[k]}" for k in ("mape", "within_10", "p90", "n"))
            held = ", ".join(f"{p}: {e}" for p, e in v["held_out"].items())
            print(
                f'  {q}: {{{figs}, method: "{v["method"]}", precisions: '
                f"[{', '.join(v['precisions'])}], held_out: {{{held}}}}}"
            )
    path = Path(__file__).parent / "results" / "edge_fit.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(results, indent=2, default=_plain))
    print(f"\nsaved {path}")


def _plain(o):
    if dataclasses.is_dataclass(o):
        return dataclasses.asdict(o)
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(type(o))


if __name__ == "__main__":
    main()
