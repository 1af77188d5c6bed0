#!/usr/bin/env bash
# The figures only a CUDA GPU gives (bench_gpu.py says what each measures), each part under a
# time limit of its own, so that all four end inside ten minutes and a part that hangs costs
# only its share. Run from anywhere; results go to $OUT (default benchmarks/results/gpu_check/).
#
#     OUT=/tmp/gpu benchmarks/gpu_check.sh [PART ...]    # parts: mfu fla pack compiled (all)
#
# On a machine that lacks the project's dependencies, `benchmarks/gpu_site.sh` packs them into
# .whl/site.tar.xz beforehand; where that archive is, it is unpacked and put on the path first.
# Without a CUDA device it says so in one line and exits 2, before anything is written.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(mfu fla pack compiled)
for p in "${parts[@]}"; do
    case $p in mfu | fla | pack | compiled) ;; *) echo "gpu_check: unknown part $p (mfu fla pack compiled)"; exit 2 ;; esac
done
if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 2)" 2>/dev/null; then
    echo "gpu_check: needs a CUDA GPU; $("$PY" -c 'import torch; print("torch", torch.__version__)' 2>&1 | tail -1) sees none"
    exit 2
fi
OUT=${OUT:-benchmarks/results/gpu_check}
mkdir -p "$OUT"
if [ -f .whl/site.tar.xz ]; then
    site=$(mktemp -d)
    tar -C "$site" -xJf .whl/site.tar.xz
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >"$OUT/nvidia_smi.csv"
status=0
run() {
    local limit=$1; shift
    echo "== $* (at most ${limit} s)"
    timeout "$limit" "$PY" benchmarks/bench_gpu.py "$@" --out "$OUT" || status=$?
}
for p in "${parts[@]}"; do
    case $p in
        mfu) run 100 mfu --contenders trial-eager,plain-eager,hf-eager --tag _eager ;;
        fla) run 150 fla ;;
        pack) run 170 pack --pack-timeout 80 ;;
        compiled) run 170 mfu --contenders trial-compiled,plain-compiled,hf-compiled --tag _compiled ;;
    esac
done
exit $status
