#!/usr/bin/env bash
# The latency figures that need a quiet machine, in one hour, in one go (run nothing else):
#
#   1. two calibrations by this code (A, B: the ablation's yardstick is their spread) and one by
#      the code before the latency room (`OLD`, today's predictor), each timed;
#   2. one held-out run of bench_latency_accuracy.py (48 architectures no calibration saw);
#   3. that run's timings priced on A, B and today's profile (side by side, same timings), and
#      on the shipped `local` (new and old form);
#   4. the machine's ceiling over the saved EPYC runs and this one (bench_latency_ceiling.py),
#      with A, B (this code) and today's (the old code) read on it;
#   5. the ablation of the kept terms from A's and B's raw timings (bench_latency_ablation.py);
#   6. (SECOND_PAIR=1) a second pair of calibrations, C and D, priced and ablated the same way;
#   7. this code's predictor on the code before's timings (bench_latency_same_timings.py), read on
#      this run and on the twelve;
#   8. this hour's calibrations alone and pooled (bench_latency_pooled.py), on the saved runs and
#      this one.
#
# Usage, from the repository root with .venv set up (make setup), on the 2-vCPU EPYC VM the saved
# ceiling runs were timed on:
#
#     bash benchmarks/latency_quiet_hour.sh [OUT_DIR]
#
# About an hour: 2 x ~5 min + ~15 min (the old calibration) + ~22 min (the held-out run) +
# minutes of pricing. Everything lands in OUT_DIR (default /tmp/latency-quiet-hour); the last
# step prints the figures for the benchmarks page.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/latency-quiet-hour}
OLD_COMMIT=${OLD_COMMIT:-484a97f}  # the code before the latency room (issue-54's branch point)
OLD=$OUT/archsearch-old
PY=$PWD/.venv/bin/python
AS=$PWD/.venv/bin/archsearch
R=benchmarks/results
mkdir -p "$OUT"
[ -d "$OLD" ] || git worktree add --detach "$OLD" "$OLD_COMMIT"
export ARCHSEARCH_DEVICE_DIR=$OUT/devices  # nothing lands in ~/.config
old() { PYTHONPATH=$OLD "$@"; }  # the old code, same venv (its package shadows the editable one)

timed() {  # timed NAME CMD...: run, and append "NAME seconds" to $OUT/seconds.txt
  local name=$1 start=$SECONDS; shift
  "$@"
  echo "$name $((SECONDS - start))" >> "$OUT/seconds.txt"
}

: > "$OUT/seconds.txt"
# 1. the calibrations: A and B by this code, today's by the old one
timed calibrate_a "$AS" calibrate threads=1 output="$OUT/new_a.yaml" format=json > "$OUT/new_a.json"
timed calibrate_b "$AS" calibrate threads=1 output="$OUT/new_b.yaml" format=json > "$OUT/new_b.json"
timed calibrate_today old "$AS" calibrate threads=1 output="$OUT/today.yaml" format=json \
  > "$OUT/today.json"

# 2. the held-out run (its timings do not depend on the profile it is priced on)
timed accuracy "$PY" benchmarks/bench_latency_accuracy.py --threads 1 --device "$OUT/new_a.yaml" \
  --out "$OUT/run_new_a.json"

# 3. the same timings on each profile
"$PY" benchmarks/bench_latency_accuracy.py --rescore "$OUT/run_new_a.json" --device "$OUT/new_b.yaml" \
  --out "$OUT/run_new_b.json"
"$PY" benchmarks/bench_latency_accuracy.py --rescore "$OUT/run_new_a.json" --device local \
  --out "$OUT/run_local_converted.json"
old "$PY" "$OLD/benchmarks/bench_latency_accuracy.py" --rescore "$OUT/run_new_a.json" \
  --device "$OUT/today.yaml" --out "$OUT/run_today.json"
old "$PY" "$OLD/benchmarks/bench_latency_accuracy.py" --rescore "$OUT/run_new_a.json" \
  --device local --out "$OUT/run_local_shipped.json"

# 4. the ceiling: each architecture's median time in the other runs, over the saved EPYC runs
# and this one; the profiles read on the same twelve runs
RUNS=(
  $R/latency_accuracy_epyc_2026-11-27_{epyc27v,edge,decode_rows,lm_head,lm_head_again}.json
  $R/latency_accuracy_epyc_2026-11-27_batch8_glue{,_again}.json $R/latency_accuracy.json
  $R/latency_accuracy_epyc_2026-11-28_steady_allocator{,_again,_third}.json
  "$OUT/run_new_a.json"
)
"$PY" benchmarks/bench_latency_ceiling.py --runs "${RUNS[@]}" \
  --device "$OUT/new_a.yaml" "$OUT/new_b.yaml" local --out "$OUT/ceiling_new.json"
old "$PY" "$OLD/benchmarks/bench_latency_ceiling.py" --runs "${RUNS[@]}" \
  --device "$OUT/today.yaml" local --out "$OUT/ceiling_today.json"

# 5. the ablation of the kept terms, from A's and B's raw timings, on this hour's run
"$PY" benchmarks/bench_latency_ablation.py --calibration "A=$OUT/new_a.json" "B=$OUT/new_b.json" \
  --runs "$OUT/run_new_a.json" --out "$OUT/ablation_fresh.json"

# 6. (SECOND_PAIR=1) a second pair of calibrations, C and D, priced on the same held-out timings
# and ablated: a second estimate of the spread between two calibrations of one hour
if [ "${SECOND_PAIR:-0}" = 1 ]; then
  : > "$OUT/seconds2.txt"
  for x in c d; do
    start=$SECONDS
    "$AS" calibrate threads=1 output="$OUT/new_$x.yaml" format=json > "$OUT/new_$x.json"
    echo "calibrate_$x $((SECONDS - start))" >> "$OUT/seconds2.txt"
    "$PY" benchmarks/bench_latency_accuracy.py --rescore "$OUT/run_new_a.json" \
      --device "$OUT/new_$x.yaml" --out "$OUT/run_new_$x.json"
  done
  "$PY" benchmarks/bench_latency_ablation.py --calibration "C=$OUT/new_c.json" \
    "D=$OUT/new_d.json" --runs "$OUT/run_new_a.json" --out "$OUT/ablation_cd.json"
fi

# 7. the predictor or the plan: this code's predictor refitted on the code before's timings, side
# by side with the code before's on them, on this hour's run and (its profile saved) on the twelve
"$PY" benchmarks/bench_latency_same_timings.py --before "$OUT/today.json" --this "$OUT/new_a.json" \
  --before-scored "$OUT/run_today.json" --pool "$OUT"/new_?.json --runs "$OUT/run_new_a.json" \
  --draws 16 \
  --save-profile "$OUT/same_timings.yaml"
"$PY" benchmarks/bench_latency_ceiling.py --runs "${RUNS[@]}" \
  --device "$OUT/same_timings.yaml" "$OUT/new_a.yaml" --out $R/latency_ceiling_same_timings.json
cp "$OUT/ceiling_today.json" $R/latency_ceiling_code_before.json

# 8. pooled calibrations: this hour's, alone and pooled in pairs (and triples with the second
# pair), refitted from their raw timings
CALS=("A=$OUT/new_a.json" "B=$OUT/new_b.json")
[ "${SECOND_PAIR:-0}" = 1 ] && CALS+=("C=$OUT/new_c.json" "D=$OUT/new_d.json")
"$PY" benchmarks/bench_latency_pooled.py --calibration "${CALS[@]}" --runs "${RUNS[@]}" \
  --sizes 2 3 --every 1 1 --out "$OUT/pooled.json"

"$PY" benchmarks/latency_quiet_hour_summary.py "$OUT"  # prints; saves results/latency_quiet_hour.json
