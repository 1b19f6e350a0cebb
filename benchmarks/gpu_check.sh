#!/usr/bin/env bash
# One prepared command that proves every CUDA path of the pack and measures realistic workloads on one
# GPU, in at most 9 minutes on an H100/H200-class card (issue 14). The summary table is printed last;
# gpu_check.json, gpu_check.png, summary.txt and run.log land in $OUT.
#
#   bash benchmarks/gpu_check.sh                      # CUDA; OUT defaults to benchmarks/results/gpu_check
#   DEVICE=cpu bash benchmarks/gpu_check.sh           # the same script at tiny sizes on a CPU (a dry run)
#   GPU_CHECK_QUICK=1 DEVICE=cpu bash ...             # the dry run without bench's pick (tests/gpu/test_gpu_check.py)
#
# What it runs, in four phases (each under its own `timeout`, so the whole stays under 9 minutes):
#   1. tests: `pytest -m gpu` over tests/ -- every CUDA test (tests/gpu/test_cuda_only.py and the CUDA
#      tests of the other files), each skipping cleanly without CUDA;            <= GPU_CHECK_T_TESTS (120 s)
#   2. bench's pick: `python -m lightning_speedups bench --write-preset` on ResNet-50 and GPT-2 small
#      (benchmarks/gpu/{resnet50,gpt2}.yaml; tips T05 T06 T07 T24 and the fast preset, 2 repeats)
#                                                                                <= GPU_CHECK_T_BENCH (115 s) each
#   3. workloads: benchmarks/gpu/workloads.py -- ResNet-50 at 224x224 with uint8 images normalised on
#      the device, GPT-2 small (124M parameters, sequence 1024): baseline (fp32) vs fast vs bench's pick
#      (+ speedups.precision: fp8 on GPT-2): samples/s and its ratio, CUDA peak memory, data-wait share,
#      MFU from Lightning's measure_flops + ThroughputMonitor against the dense bf16 peak, passed
#      explicitly (PEAK_FLOPS overrides; a variant without an MFU fails the run)  <= GPU_CHECK_T_WORK (180 s)
#   3b. the doctor's verdict on benchmarks/planted/host_reads.py (a per-step .item() and a tensor `if`: on a GPU
#      the verdict must name host reads; $OUT/planted_host_reads.json)          <= GPU_CHECK_T_DOCTOR (60 s)
#   4. summary: benchmarks/gpu/summary.py -- JSON, PNG, the table; exit 1 when anything failed.
#
# On this workplace's device machine (tool `run`; it has PyTorch 2.11 and Lightning but not
# jsonargparse, which the pack's presets and bench need): carry the wheels. Here, once, in the repo root:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl jsonargparse==4.53.0 docstring-parser==0.18.0 typeshed-client==2.15.0
#   (for a real fp8 row add a torchao wheel built for torch 2.11; without it that row says why it skipped)
# then one call, run(command=..., carry=[".whl"], timeout_s=600):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit; PYTHONUNBUFFERED=1 bash benchmarks/gpu_check.sh
# ($OUT is set by the tool there; its files come back: gpu_check.json, gpu_check.png, summary.txt, run.log.)
set -uo pipefail
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cuda}
OUT=${OUT:-benchmarks/results/gpu_check}
PY=${PYTHON:-python3}
QUICK=${GPU_CHECK_QUICK:-0}
T_TESTS=${GPU_CHECK_T_TESTS:-120}
T_BENCH=${GPU_CHECK_T_BENCH:-115}
T_WORK=${GPU_CHECK_T_WORK:-180}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
LOG="$OUT/run.log"
: >"$LOG"
START=$SECONDS

if [ "$DEVICE" = cpu ]; then
  SIZE=tiny; STEPS=${STEPS:-3}; WARMUP=${WARMUP:-1}; SUFFIX=_tiny
  BENCH_SIZE=(--steps 2 --warmup 1 --repeats 1 --budget 60 --tips T24 --presets none --no-search)
  TEST_PATHS=(tests/gpu)  # on a CPU every gpu test skips: collect them only where they live
else
  SIZE=full; STEPS=${STEPS:-20}; WARMUP=${WARMUP:-5}; SUFFIX=
  # two repeats: with one, bench has no confidence interval and always keeps the baseline
  BENCH_SIZE=(--steps 12 --warmup 3 --repeats 2 --budget $((T_BENCH - 15)) --tips T05 T06 T07 T24 --presets fast)
  TEST_PATHS=(tests)
fi
[ "$QUICK" = 1 ] && TEST_PATHS=(tests/gpu)
say() { echo "$* [$((SECONDS - START)) s]" | tee -a "$LOG"; }

say "== gpu_check: DEVICE=$DEVICE SIZE=$SIZE OUT=$OUT (versions: first lines of phase 3 and of the summary)"
if [ "$QUICK" = 1 ]; then  # bench's flags checked in the background while the tests run (one import less to wait for)
  $PY -m lightning_speedups bench --help >"$WORK/bench_help.txt" 2>&1 &
  HELP_PID=$!
fi

# -- 1. every CUDA test
say "== 1. pytest -m gpu ${TEST_PATHS[*]}"
timeout "$T_TESTS" $PY -m pytest -q -m gpu -p no:randomly -o addopts="-ra -p no:cacheprovider" \
  --junitxml="$WORK/pytest.xml" "${TEST_PATHS[@]}" 2>&1 | tee -a "$LOG" | tail -25
RC_TESTS=${PIPESTATUS[0]}
[ "$RC_TESTS" = 5 ] && RC_TESTS=0  # nothing collected is not a failure of this script

# -- 2. bench's pick for each workload
PICKS=()
PHASES=()
if [ "$QUICK" = 1 ]; then
  # the dry run in the test suite: check that bench still takes every flag used below, without timing
  say "== 2. bench: flags only (GPU_CHECK_QUICK=1)"
  wait "$HELP_PID"
  help=$(cat "$WORK/bench_help.txt")
  rc=0
  for flag in --config --device --steps --warmup --repeats --budget --tips --presets --no-search --no-extras \
              --no-noise-pair --no-progress --compile-cache --timeout --json --write-preset; do
    grep -q -- "$flag" <<<"$help" || { say "bench has no $flag"; rc=1; }
  done
  PHASES+=("bench=$([ $rc = 0 ] && echo skipped || echo $rc)")
else
  for w in resnet50 gpt2; do
    say "== 2. bench's pick for $w"
    timeout "$T_BENCH" $PY -m lightning_speedups bench --config "benchmarks/gpu/$w$SUFFIX.yaml" --device "$DEVICE" \
      "${BENCH_SIZE[@]}" --no-extras --no-noise-pair --no-progress --compile-cache shared --timeout "$T_BENCH" \
      --json "$WORK/bench_$w.json" --write-preset "$WORK/${w}_pick.yaml" >>"$LOG" 2>&1
    rc=$?
    PHASES+=("bench_$w=$rc")
    if [ "$rc" = 0 ] && [ -f "$WORK/${w}_pick.yaml" ]; then PICKS+=(--pick "$w=$WORK/${w}_pick.yaml"); fi
    grep -E "^pick:" "$LOG" | tail -1
  done
fi

# -- 3. the workloads
say "== 3. workloads ($SIZE): baseline vs fast vs pick (+ fp8)"
timeout "$T_WORK" $PY -m benchmarks.gpu.workloads --device "$DEVICE" --size "$SIZE" --steps "$STEPS" \
  --warmup "$WARMUP" --fp8 --out "$WORK" "${PICKS[@]}" >>"$LOG" 2>&1
RC_WORK=$?

# -- 3b. the doctor's verdict on the planted host-read script (issue 36: host reads stall a GPU, not a CPU)
if [ "$QUICK" != 1 ]; then
  say "== 3b. doctor on benchmarks/planted/host_reads.py"
  out_abs=$(cd "$OUT" && pwd)
  (cd benchmarks/planted && timeout "${GPU_CHECK_T_DOCTOR:-60}" $PY -m lightning_speedups doctor --steps 20 \
    --json "$out_abs/planted_host_reads.json" -- $PY host_reads.py) >>"$LOG" 2>&1
  PHASES+=("doctor_host_reads=$?")
  grep -m1 -E "^(VERDICT|verdict|Verdict)" "$LOG" || true
fi

# -- 4. the summary, printed last
$PY -m benchmarks.gpu.summary --work "$WORK" --out "$OUT" --elapsed $((SECONDS - START)) \
  --phase "tests=$RC_TESTS" --phase "workloads=$RC_WORK" "${PHASES[@]/#/--phase=}" 2>&1 | tee -a "$LOG"
exit "${PIPESTATUS[0]}"
