#!/usr/bin/env bash
# The reference benchmarks recorded in benchmarks/RESULTS.md: `bench` on the CNN and on the
# transformer workload, CPU, one torch thread, each within a 9.5-minute budget.
#
#   bash benchmarks/run_reference.sh            # from anywhere; writes benchmarks/results/
#
# Why --threads 1: on the 2-core machine these were recorded on, other processes shared the cores;
# with torch's default of 2 OpenMP threads a busy core turns every parallel region into a spin-wait
# (a DigitsCNN step measured 12 ms with 1 thread and 780 ms with 2 under that load). One thread per
# run gives figures that mean something there; on a machine of your own, leave --threads out.
# Why --compile-cache shared: a cold inductor compile took 80-90 s per run there; with a shared cache
# only the first run of each compiled graph pays it (the JSON keeps every run's warm-up).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
COMMON=(--threads 1 --steps 20 --warmup 3 --repeats 3 --compile-cache shared --budget 570)

for workload in cnn transformer; do
  $PY -m lightning_speedups bench --config "benchmarks/$workload.yaml" "${COMMON[@]}" \
      --json "$OUT/$workload.json" --markdown "$OUT/$workload.md" --plot "$OUT/$workload.png" \
      --write-preset "$OUT/${workload}_fastest.yaml" | tee "$OUT/$workload.txt"
done
