#!/usr/bin/env bash
# The figures only a CUDA GPU gives, in one run that ends inside ten minutes (bench_gpu.py says
# what each measures). Run from the repository root; results go to $OUT (default
# benchmarks/results/gpu_check/). flash-linear-attention is imported from wherever Python finds
# it (on a machine without it: pip install fla-core, or wheels on PYTHONPATH).
#
#     OUT=/tmp/gpu benchmarks/gpu_check.sh
#
# Without a CUDA device it says so in one line and exits 2, before anything is written.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 2)" 2>/dev/null; then
    echo "gpu_check: needs a CUDA GPU; $("$PY" -c 'import torch; print("torch", torch.__version__)' 2>&1 | tail -1) sees none"
    exit 2
fi
OUT=${OUT:-benchmarks/results/gpu_check}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >"$OUT/nvidia_smi.csv"
status=0
run() {  # a time limit of its own for each part: a part that hangs costs only its share
    local limit=$1; shift
    echo "== $* (at most ${limit} s)"
    timeout "$limit" "$PY" benchmarks/bench_gpu.py "$@" --out "$OUT" || status=$?
}
run 120 mfu --contenders trial-eager,plain-eager,hf-eager --tag _eager
run 150 fla
run 180 mfu --contenders trial-compiled,plain-compiled,hf-compiled --tag _compiled
exit $status
