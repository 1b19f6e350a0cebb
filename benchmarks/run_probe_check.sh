#!/usr/bin/env bash
# Issue 21: fast before the start-up probe (a worktree of the commit before it) and after, each side by side
# with its own baseline in one bench run, and bench's best of the relevant tips and presets, on three models
# that are not the reference workloads (benchmarks/probe_models.py). Run one at a time on a quiet machine.
#
#   git worktree add /tmp/before c7a43f4 && cp benchmarks/probe_models.py benchmarks/probe_*.yaml /tmp/before/benchmarks/
#   bash benchmarks/run_probe_check.sh            # writes benchmarks/results/probe_<model>_{before,after}.*
set -euo pipefail
cd "$(dirname "$0")/.."
HERE=$PWD
BEFORE=${BEFORE:-/tmp/before}
OUT=benchmarks/results
COMMON=(--repeats 4 --steps 40 --warmup 3 --threads 1 --no-progress --no-search --no-extras)
for m in ${MODELS:-cnn vit mlp}; do
  # T05 (precision: half, bf16 on this CPU without bf16 units) ran 0.05x-0.3x in a first run: left out
  echo "== $m after: baseline, fast, cnn, transformer, tips T06 T16 T24"
  python -m lightning_speedups bench --config benchmarks/probe_$m.yaml --presets fast cnn transformer \
    --tips T06 T16 T24 "${COMMON[@]}" --json $OUT/probe_${m}_after.json --markdown $OUT/probe_${m}_after.md \
    > $OUT/probe_${m}_after.txt 2>&1 || echo "bench failed: see $OUT/probe_${m}_after.txt"
  echo "== $m before: baseline, fast (the commit before the probe)"
  (cd "$BEFORE" && PYTHONPATH="$BEFORE" python -m lightning_speedups bench --config benchmarks/probe_$m.yaml \
    --presets fast --tips none "${COMMON[@]}" --json "$HERE/$OUT/probe_${m}_before.json" \
    --markdown "$HERE/$OUT/probe_${m}_before.md" > "$HERE/$OUT/probe_${m}_before.txt" 2>&1) \
    || echo "bench failed: see $OUT/probe_${m}_before.txt"
done
# fast alone between the baseline and its A/A twin, more repeats: a drift of the machine within a repeat
# cancels in the ratio to the two baselines' geometric mean (benchmarks/probe_ratios.py)
for m in ${MODELS:-cnn vit mlp}; do
  echo "== $m fast: baseline, fast, A/A, 6 repeats"
  python -m lightning_speedups bench --config benchmarks/probe_$m.yaml --presets fast --tips none \
    --repeats 6 --steps 40 --warmup 3 --threads 1 --no-progress --no-search --no-extras \
    --json $OUT/probe_${m}_fast.json --markdown $OUT/probe_${m}_fast.md > $OUT/probe_${m}_fast.txt 2>&1 \
    || echo "bench failed: see $OUT/probe_${m}_fast.txt"
done
