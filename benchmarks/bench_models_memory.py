"""Peak memory of one training step (forward + backward) of each linear mixer at sequence
length 512, 1024, 2048 (and 4096): it must grow linearly (x2 per doubling), not quadratically (x4).

Method. torch's CPU allocator keeps no peak statistics and tracemalloc does not see tensor
memory, so every point runs in a FRESH subprocess: it builds a small language model of the
mixer (default d_model 256, 2 layers, vocabulary 256, batch 4, fp32), makes the batch, reads
its resident set size (RSS), runs one forward + backward, and reads the peak RSS
(getrusage ru_maxrss). The figure is peak - before: the memory the step itself needed
(activations saved for backward, gradients, temporaries). A fresh process per point keeps the
points independent (allocator caches and fragmentation do not carry over). As controls, MCSD
runs in its chunked training form and in its literal T x T matrix form (quadratic by design),
so the table shows what quadratic growth looks like under the same method.

    python benchmarks/bench_models_memory.py [--threads 2] [--lengths 512 1024 2048]

Prints a table and saves benchmarks/results/models_memory.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
from pathlib import Path

from archsearch.arch import LINEAR_FAMILIES

RESULTS = Path(__file__).resolve().parent / "results"

CHILD = r"""
import json, resource, sys, torch
from archsearch.arch import ArchConfig
from archsearch.models import build_model
name, T, B, d, layers, threads = sys.argv[1], *map(int, sys.argv[2:7])
torch.set_num_threads(threads)
torch.manual_seed(0)
mixer = {"mcsd": "mcsd", "mcsd_matrix_form": "mcsd"}.get(name, "linear")
arch = ArchConfig.from_dict({
    "vocab_size": 256, "d_model": d, "n_layers": layers, "max_seq_len": 4096,
    "layers": {"mixer": mixer}, "linear": {"family": name, "n_heads": d // 64},
    "mcsd": {"n_channels": 4}, "ffn": {"kind": "swiglu"},
} if mixer == "linear" else {
    "vocab_size": 256, "d_model": d, "n_layers": layers, "max_seq_len": 4096,
    "layers": {"mixer": "mcsd"}, "mcsd": {"n_channels": 4}, "ffn": {"kind": "geglu"},
})
model = build_model(arch)
if name == "mcsd_matrix_form":
    for b in model.blocks:
        b.mixer.forward = b.mixer.reference
idx = torch.randint(0, 256, (B, T + 1))
def rss_kb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024
before = rss_kb()
_, loss = model(idx[:, :-1], idx[:, 1:])
loss.backward()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"before_kb": before, "peak_kb": peak, "step_mb": (peak - before) / 1024}))
"""


def point(name: str, T: int, args) -> dict:
    cmd = [
        sys.executable,
        "-c",
        CHILD,
        name,
        str(T),
        str(args.batch),
        str(args.d_model),
        str(args.layers),
        str(args.threads),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    p.add_argument("--mixers", nargs="*", default=[*LINEAR_FAMILIES, "mcsd", "mcsd_matrix_form"])
    p.add_argument("--out", default=str(RESULTS / "models_memory.json"))
    args = p.parse_args()
    head = " ".join(f"{'MB@' + str(t):>9}" for t in args.lengths)
    print(f"{'mixer':>17} {head}  growth per doubling")
    results = {}
    for name in args.mixers:
        pts = [point(name, T, args) for T in args.lengths]
        mb = [pt["step_mb"] for pt in pts]
        growth = [b / a for a, b in itertools.pairwise(mb)]
        results[name] = {
            "step_mb": dict(zip(map(str, args.lengths), mb)),
            "growth": growth,
            "points": pts,
        }
        cells = " ".join(f"{m:9.1f}" for m in mb)
        print(f"{name:>17} {cells}  {' '.join(f'x{g:.2f}' for g in growth)}", flush=True)
    out = {
        "benchmark": "peak RSS of one training step (fwd + bwd) in a fresh process, fp32",
        "method": "peak ru_maxrss minus RSS before the step, one subprocess per point",
        "config": {k: v for k, v in vars(args).items() if k != "out"},
        "results": results,
    }
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print(f"saved {path}")


if __name__ == "__main__":
    main()
