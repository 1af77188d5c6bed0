"""Fit the edge devices' latency-model efficiencies to seed PLM Table 12.

Seed PLM Table 12 measures PLM-1.8B (our preset `plm_1_8b`) on the five edge devices in fp16,
q8 and q4: prefill throughput for a 512-token prompt and generation throughput over 128 tokens.
For each device and compute class (fp16; int8 for q8/q4) this script fits the two efficiencies
of `archsearch.cost.devices.Efficiency`, the fraction of peak compute a large matmul reaches and
the fraction of peak bandwidth a weight stream reaches, by least squares on log latencies
(prefill -> mostly compute, generation -> mostly bandwidth), with efficiencies kept in
[0.005, 1]. It prints the fit, its residuals and the YAML to paste into conf/device/*.yaml,
and saves everything to benchmarks/results/edge_fit.json.

    python benchmarks/fit_edge_profiles.py
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from archsearch.arch import load_arch
from archsearch.cost import columns, model
from archsearch.cost.devices import Efficiency, load_device

# seed PLM Table 12, PLM-1.8B: (prefill 512 tokens/s, generate 128 tokens/s)
TABLE_12 = {
    "nvidia_a10": {"fp16": (9129.39, 102.30), "q8": (8833.31, 157.35), "q4": (8266.53, 197.48)},
    "jetson_orin_nx": {"fp16": (987.22, 12.94), "q8": (989.01, 20.94), "q4": (910.61, 27.04)},
    "apple_m3": {"fp16": (716.94, 23.31), "q8": (707.76, 38.89), "q4": (680.78, 59.44)},
    "snapdragon_8gen3": {"fp16": (44.35, 10.34), "q8": (64.18, 13.78), "q4": (48.05, 18.74)},
    "rpi5": {"fp16": (26.29, 2.76), "q8": (29.04, 5.31), "q4": (23.57, 8.02)},
}
PROMPT, GENERATE = 512, 128
# fixed overhead per operator: llama.cpp dispatches about a fifth of the operators that eager
# PyTorch does (our LAUNCHES), at a few microseconds per graph node (GPU launch, CPU sync)
OVERHEAD = {"gpu": 1e-6, "cpu": 0.5e-6}


def predict(device, arch_cols, precision: str, eff: Efficiency) -> tuple[float, float]:
    dev = dataclasses.replace(device, efficiency={"fp32": eff, "fp16": eff, "int8": eff})
    ttft = float(model.ttft_s(arch_cols, dev, PROMPT, precision)[0])
    decode = float(model.decode_s(arch_cols, dev, PROMPT + (GENERATE - 1) / 2, precision)[0])
    return ttft, decode


def fit(device_name: str) -> dict:
    device = load_device(device_name)
    cols = columns(load_arch("plm_1_8b"))
    out = {}
    for cls, precisions in (("fp16", ("fp16",)), ("int8", ("q8", "q4"))):
        measured = [
            (p, PROMPT / TABLE_12[device_name][p][0], 1 / TABLE_12[device_name][p][1])
            for p in precisions
        ]

        def residuals(x, measured=measured):
            eff = Efficiency(
                compute=float(np.exp(x[0])),
                half_rows=1.0,
                bandwidth=float(np.exp(x[1])),
                op_overhead_s=OVERHEAD[device.kind],
            )
            r = []
            for p, ttft, dec in measured:
                pt, pd = predict(device, cols, p, eff)
                r += [np.log(pt / ttft), np.log(pd / dec)]
            return r

        sol = least_squares(
            residuals, x0=[np.log(0.3), np.log(0.6)], bounds=([np.log(0.005)] * 2, [0.0, 0.0])
        )
        compute, bandwidth = (float(np.exp(v)) for v in sol.x)
        eff = Efficiency(
            compute=compute, half_rows=1.0, bandwidth=bandwidth, op_overhead_s=OVERHEAD[device.kind]
        )
        rows = []
        for p, ttft, dec in measured:
            pt, pd = predict(device, cols, p, eff)
            rows.append(
                {
                    "precision": p,
                    "prefill_tok_s": PROMPT / ttft,
                    "prefill_pred": PROMPT / pt,
                    "generate_tok_s": 1 / dec,
                    "generate_pred": 1 / pd,
                }
            )
        out[cls] = {"compute": round(compute, 4), "bandwidth": round(bandwidth, 4), "rows": rows}
    return out


def main() -> None:
    results = {name: fit(name) for name in TABLE_12}
    for name, res in results.items():
        print(f"\n{name}")
        for cls, r in res.items():
            print(
                f"  {cls}: compute efficiency {r['compute']:.3f}, bandwidth efficiency "
                f"{r['bandwidth']:.3f}"
            )
            for row in r["rows"]:
                print(
                    f"    {row['precision']}: prefill {row['prefill_tok_s']:8.2f} tok/s "
                    f"(fit {row['prefill_pred']:8.2f}), generate {row['generate_tok_s']:6.2f} "
                    f"tok/s (fit {row['generate_pred']:6.2f})"
                )
        print("  yaml:")
        print("efficiency:")
        for cls, r in res.items():
            kind = load_device(name).kind
            print(
                f"  {cls}: {{compute: {r['compute']}, half_rows: 1.0, bandwidth: "
                f'{r["bandwidth"]}, op_overhead_s: {OVERHEAD[kind]}, source: "fitted to '
                f'PLM-1.8B in seed PLM Table 12 by benchmarks/fit_edge_profiles.py"}}'
            )
    path = Path(__file__).parent / "results" / "edge_fit.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(results, indent=2))
    print(f"\nsaved {path}")


if __name__ == "__main__":
    main()
