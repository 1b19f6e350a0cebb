#!/usr/bin/env bash
# Capture what a user sees from `python -m lightning_speedups ...`, for one checkout, so that two commits
# can be compared with diff (a restructuring such as issue 38 must not change any of it).
#
#   tools/user_outputs.sh CHECKOUT OUT               # run every command, then normalize
#   tools/user_outputs.sh --normalize CHECKOUT OUT   # only redo the normalize step on OUT/raw
#   diff -ru OUT_A/norm OUT_B/norm                   # compare two checkouts
#
# e.g. git worktree add --detach /tmp/wt/before 4e02f65
#      tools/user_outputs.sh /tmp/wt/before /tmp/outputs_before
#      tools/user_outputs.sh "$PWD" /tmp/outputs_now
#      diff -ru /tmp/outputs_before/norm /tmp/outputs_now/norm
#
# CHECKOUT is the root of the checkout measured: it goes first on PYTHONPATH, so the package imports from
# there whatever the interpreter has installed. PYTHON picks the interpreter (default: python3 on PATH;
# torch, lightning and the pack's dependencies must be importable). About 2-3 minutes on 2 shared CPU cores.
#
# Every command runs in a fresh, empty folder of its own (a scratch folder under /tmp, removed at the
# end; KEEP_SCRATCH=1 keeps it), under `env -i` with a fixed environment: no LIGHTNING_SPEEDUPS preset,
# LIGHTNING_SPEEDUPS_CPU_BF16=0 (no bf16 probe of the CPU), the lint syntax cache off, PYTHONHASHSEED=0,
# one OpenMP thread, unbuffered stdout (stdout and stderr interleave as they were written), NO_COLOR=1,
# TERM=dumb, COLUMNS=120 and stdout not a terminal (rich then prints plain text at a fixed width), fits
# and the doctor with --seed_everything 0.
#
# OUT/raw/NAME.txt holds what a command printed (stdout and stderr together, in order), after a header
# line with the command and its folder, and a footer with its exit code; some commands add the files
# they wrote (a fit's lightning_logs listing and saved config.yaml, bench's partial JSON).
# OUT/norm/NAME.txt is the same text with what legitimately varies between two runs masked (see
# normalize() below). OUT/commands.txt lists the commands, OUT/runtime.txt the wall time.
#
# What is captured:
#   help, <cmd> --help              the top-level usage and each command's help
#   tips, presets                   the tip registry and the preset table
#   presets NAME                    there is no per-preset form: `presets fast` is refused (captured as such)
#   fit --config P.yaml             every packaged preset (lightning_speedups/configs/*.yaml) on the embedded
#                                   default, 3 training steps and 2 validation batches; and the README's
#                                   example (examples/: --config fast.yaml --config my_model.yaml)
#   fit --config fast.yaml --print_config
#   doctor                          the embedded default (docs/doctor.md's example) and examples/my_model.yaml
#                                   (the README's `doctor --config my.yaml`), text and --json
#   lint / lint --all --json        tests/lint/fixtures (the *.py.txt sources copied as *.py) and examples/
#   bench plan                      bench has no plan-only or dry-run flag. The plan is printed before the first
#                                   run, so each bench runs with --timeout 0.01: the baseline's first run is
#                                   stopped at once, bench exits 2 and writes bench-partial.json, which holds
#                                   the whole plan (every variant with its overrides, the tips and presets
#                                   skipped and why). On the embedded default, examples/my_model.yaml, and
#                                   in time-to-target mode (--target val_acc=0.9, whose plan names the order;
#                                   there --timeout is raised to 3 x --target-max-time + 300 s, so it is
#                                   --target-max-time 0.001 that stops the baseline's first run).
set -uo pipefail

NORMALIZE_ONLY=0
if [[ ${1:-} == --normalize ]]; then
  NORMALIZE_ONLY=1
  shift
fi
if [[ $# -ne 2 ]]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
CHECKOUT=$(cd "$1" && pwd) || exit 2
mkdir -p "$2" || exit 2
OUT=$(cd "$2" && pwd)
PY=${PYTHON:-python3}
PY=$(command -v "$PY") || { echo "no interpreter: $PY" >&2; exit 2; }
PY_PREFIX=$("$PY" -c 'import sys; print(sys.prefix)')

# ---------------------------------------------------------------------------------------------- capture

SCRATCH=
run() {
  # run NAME SETUP ARGS...: SETUP is '' (empty folder), 'examples' (a copy of examples/, the cwd) or
  # 'lint' (fixtures/ and examples/ copies); prints into OUT/raw/NAME.txt
  local name=$1 setup=$2
  shift 2
  local dir="$SCRATCH/$name"
  mkdir -p "$dir"
  local cwd=$dir
  case $setup in
    examples)
      cp -r "$CHECKOUT/examples" "$dir/examples"
      cwd=$dir/examples
      ;;
    lint)
      cp -r "$CHECKOUT/examples" "$dir/examples"
      cp -r "$CHECKOUT/tests/lint/fixtures" "$dir/fixtures"
      find "$dir/fixtures" -name '*.py.txt' | while read -r f; do mv "$f" "${f%.txt}"; done
      ;;
  esac
  echo "python -m lightning_speedups $*" >>"$OUT/commands.txt"
  local file="$OUT/raw/$name.txt" rc
  {
    echo "\$ python -m lightning_speedups $*    (in $cwd)"
    (cd "$cwd" && env -i PATH=/usr/bin:/bin HOME="$HOME" LANG=C.UTF-8 LC_ALL=C.UTF-8 \
      PYTHONPATH="$CHECKOUT" PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
      OMP_NUM_THREADS=1 NO_COLOR=1 TERM=dumb COLUMNS=120 LINES=50 \
      LIGHTNING_SPEEDUPS_CPU_BF16=0 LIGHTNING_SPEEDUPS_LINT_CACHE=0 \
      XDG_CACHE_HOME="$dir/.cache" MPLCONFIGDIR="$dir/.cache/mpl" \
      timeout 300 "$PY" -m lightning_speedups "$@" 2>&1)
    rc=$?
    echo "[exit $rc]"
    if [[ -d $cwd/lightning_logs ]]; then
      echo "--- files written (lightning_logs/)"
      (cd "$cwd" && find lightning_logs | sort)
      for f in "$cwd"/lightning_logs/version_*/config.yaml; do
        [[ -f $f ]] && { echo "--- ${f#"$cwd"/}"; cat "$f"; }
      done
    fi
    if [[ -f $cwd/bench-partial.json ]]; then
      echo "--- bench-partial.json"
      cat "$cwd/bench-partial.json"
      echo
    fi
  } >"$file" 2>&1
  printf '%-28s exit %s\n' "$name" "$(sed -n 's/^\[exit \([0-9]*\)\]$/\1/p' "$file")"
}

capture() {
  rm -rf "$OUT/raw" "$OUT/norm" "$OUT/commands.txt"
  mkdir -p "$OUT/raw"
  SCRATCH=$(mktemp -d /tmp/outputs_scratch.XXXXXX)
  local t0=$SECONDS
  local short=(--seed_everything 0 --trainer.max_steps 3 --trainer.limit_val_batches 2)
  local nobench=(--timeout 0.01 --no-progress)

  run help '' --help
  run tips '' tips
  run tips_help '' tips --help
  run presets '' presets
  run presets_help '' presets --help
  run presets_name '' presets fast
  run fit_help '' fit --help
  run fit_print_config_fast '' fit --config fast.yaml --print_config
  local preset
  for preset in "$CHECKOUT"/lightning_speedups/configs/*.yaml; do
    preset=$(basename "$preset" .yaml)
    run "fit_$preset" '' fit --config "$preset.yaml" "${short[@]}"
  done
  run fit_example examples fit --config fast.yaml --config my_model.yaml "${short[@]}"
  run doctor_help '' doctor --help
  run doctor_default '' doctor --seed_everything 0
  run doctor_example examples doctor --config my_model.yaml --seed_everything 0
  run doctor_example_json examples doctor --config my_model.yaml --seed_everything 0 --json
  run lint_help '' lint --help
  run lint_default lint lint fixtures examples
  run lint_all_json lint lint --all --json fixtures examples
  run bench_help '' bench --help
  run bench_plan_default '' bench "${nobench[@]}"
  run bench_plan_example examples bench --config my_model.yaml "${nobench[@]}"
  run bench_plan_target '' bench --target val_acc=0.9 --target-max-time 0.001 --no-progress

  echo "capture: $((SECONDS - t0)) s ($CHECKOUT, $(git -C "$CHECKOUT" rev-parse --short HEAD 2>/dev/null))" \
    | tee "$OUT/runtime.txt"
  if [[ ${KEEP_SCRATCH:-0} == 1 ]]; then echo "scratch kept: $SCRATCH"; else rm -rf "$SCRATCH"; fi
}

# -------------------------------------------------------------------------------------------- normalize
# What varies between two runs of the same code on the same machine, masked with sed, rule by rule:
#   paths       the checkout, the scratch folder and the interpreter's prefix -> <CHECKOUT>, <CWD>, <PY>;
#               tempfile folders (bench's /tmp/lightning_speedups_bench_*, /tmp/tmp*) -> <TMP>
#   dates       2026-12-05 11:27:50 (UTC) -> <DATE>; TensorBoard's events.out.tfevents.<time>.<host>.<pid>.<n>
#   durations   a number with a time unit (12 ms, 1.0 s, 97.61it/s, 3.2s/it, 2 min) -> <N> unit; clocks 0:00:01
#               -> <HMS>; "N% of step time" (the doctor's data-wait share) -> <P>%
#   JSON        "date", "pid", "load_average" and every "*_s" figure (seconds: build_s, train_s, run_s, ...)
#               -> <N>; a run's "log" path is under <TMP>
#   tracebacks  the line numbers of the pack's own frames (File "<CHECKOUT>/...", line N -> line <L>): a
#               restructuring moves code; the file and function names stay, so a move to another file shows
#   logs        lightning_logs/version_N -> version_<N> (each fit runs in a new folder: always 0 today)
#   pids        "pid 1234" / "pid=1234" -> pid <PID>
#   machine     "N GiB of this machine's memory" (the doctor's T11 line: the total, so captures from two
#               machines compare)
# Not masked, and known to move under load: the doctor's data-wait share decides T02 at 30% (a finding
# above it); on a busy 2-core machine it read 11-22% here. A T02 finding in one run only is load, not code.
#   load        the DataWaitMonitor's "input-bound: N% of step time waited for data ... (threshold 30%)"
#               warning line is deleted: the fits of `fast` time the data wait, and over 3 steps a loaded
#               machine crosses 30% in one run and not the next (seen in two runs of one commit)
normalize() {
  rm -rf "$OUT/norm"
  mkdir -p "$OUT/norm"
  local f
  for f in "$OUT"/raw/*.txt; do
    sed -E \
      -e "s#$CHECKOUT#<CHECKOUT>#g" \
      -e "s#/tmp/outputs_scratch\.[A-Za-z0-9]+/[A-Za-z0-9_]+#<CWD>#g" \
      -e "s#$PY_PREFIX#<PY>#g" \
      -e 's#/tmp/lightning_speedups_bench_[A-Za-z0-9_]+#<TMP>#g' \
      -e 's#/tmp/tmp[A-Za-z0-9_]+#<TMP>#g' \
      -e 's#[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?( UTC)?#<DATE>#g' \
      -e 's#events\.out\.tfevents\.[0-9]+\.[^ ]+#events.out.tfevents.<TS>#g' \
      -e 's#version_[0-9]+#version_<N>#g' \
      -e 's#\b[0-9]+:[0-9]{2}:[0-9]{2}\b#<HMS>#g' \
      -e 's#\b[0-9]+(\.[0-9]+)? ?(ms|s|it/s|s/it|min)\b#<N> \2#g' \
      -e 's#\b[0-9]+(\.[0-9]+)?% of step\b#<P>% of step#g' \
      -e 's#\b[0-9]+(\.[0-9]+)? GiB of this machine#<N> GiB of this machine#g' \
      -e 's#\b(pid[ =:]*)[0-9]+#\1<PID>#gI' \
      -e 's#("(date|[a-z_]*_s|seconds|data_wait|pid)": )("[^"]*"|[-0-9.e]+)#\1<N>#g' \
      -e 's#(File "<CHECKOUT>/[^"]+", line )[0-9]+#\1<L>#g' \
      -e '/"load_average": \[/,/\]/{/^ *[-0-9.e]+,?$/d}' \
      -e '/DataWaitMonitor: input-bound: /d' \
      "$f" >"$OUT/norm/$(basename "$f")"
  done
  echo "normalized: $OUT/norm ($(ls "$OUT/norm" | wc -l) files)"
}

if [[ $NORMALIZE_ONLY == 0 ]]; then
  capture
fi
normalize
