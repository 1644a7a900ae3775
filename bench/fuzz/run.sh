#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz one after another and prints a table of executions,
# coverage (libFuzzer's cov: at the end) and crashes per target. Each target fuzzes a scratch
# copy of its committed corpus (tests/fuzz/corpus/<target>/), so the committed seeds never grow;
# a crash input is kept under the work dir and the script exits 1.
#
#   bench/fuzz/run.sh [--runs N | --time S] [--jobs J] [--build DIR] [--work DIR] [TARGET ...]
#
# --runs N   executions per target (default 1000000: the benchmark)
# --time S   seconds per target instead (`make fuzz` and `make test` run 20 s each)
# --jobs J   targets fuzzed at once (default 1; each libFuzzer process uses one core)
# --build    the HAP_FUZZ build dir (default build-fuzz; `make fuzz` configures and builds it)
# --work     where corpora copies, logs and crash inputs go (default: a new dir under /tmp,
#            removed again when no target crashed)
# TARGET     a subset of the targets (default: every binary in <build>/fuzz)
set -uo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$root/build-fuzz"
runs=1000000
time_s=""
work=""
jobs=1
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; time_s=""; shift 2 ;;
    --time) time_s="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --build) build="$(cd "$2" && pwd)"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done

bin="$build/fuzz"
if [ ! -d "$bin" ]; then
  echo "run.sh: no fuzz targets in $bin (build with: make fuzz-build)" >&2
  exit 2
fi
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$bin"/*_fuzz; do [ -x "$f" ] && targets+=("$(basename "$f")"); done
fi
own_work=0
if [ -z "$work" ]; then
  work="$(mktemp -d /tmp/hap-fuzz.XXXXXX)"
  own_work=1
fi
mkdir -p "$work"

# The dictionary each target mutates with (tests/fuzz/dict/).
dict_for() {
  case "$1" in
    safetensors_fuzz|safetensors_index_fuzz|config_fuzz|preprocessor_config_fuzz|chat_request_fuzz)
      echo "$root/tests/fuzz/dict/json.dict" ;;
    chat_template_fuzz) echo "$root/tests/fuzz/dict/jinja.dict" ;;
    trace_context_fuzz) echo "$root/tests/fuzz/dict/trace_context.dict" ;;
  esac
}

if [ -n "$time_s" ]; then budget=(-max_total_time="$time_s"); else budget=(-runs="$runs"); fi
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# One target: fuzz it, then write its table row to $work/<target>.row (and <target>.failed on a
# crash or a non-zero exit; background jobs' exit codes are not relied on).
fuzz_one() {
  local t="$1" exe="$bin/$1" dir="$work/$1"
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/crashes"
  [ -d "$root/tests/fuzz/corpus/$t" ] && cp "$root/tests/fuzz/corpus/$t"/* "$dir/corpus/" 2>/dev/null
  local args=(-rss_limit_mb=2048 -timeout=30 -print_final_stats=1 -artifact_prefix="$dir/crashes/")
  local d
  d="$(dict_for "$t")"
  [ -n "$d" ] && args+=(-dict="$d")
  local start rc secs execs speed status cov ft corp crashes note
  start=$(date +%s)
  "$exe" "${args[@]}" "${budget[@]}" "$dir/corpus" > "$dir/log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -1)
  # The last status line: "#N  DONE  cov: C ft: F corp: K/..." (or the line before a crash).
  status=$(grep -E '^#[0-9]+' "$dir/log" | grep 'cov:' | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<< "$status")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<< "$status")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<< "$status")
  crashes=$(find "$dir/crashes" -type f | wc -l)
  note="$crashes"
  local bad=0
  if [ "$rc" -ne 0 ] || [ "$crashes" -gt 0 ]; then
    bad=1
    note="$crashes (exit $rc; $dir/log)"
  fi
  printf '%-26s %10s %8s %7s %7s %6s %8s  %s\n' "$t" "${execs:-?}" "${speed:-?}" "${cov:-?}" \
    "${ft:-?}" "${corp:-?}" "$secs" "$note" > "$work/$t.row"
  [ "$bad" -eq 0 ] || touch "$work/$t.failed"
}

printf '%-26s %10s %8s %7s %7s %6s %8s  %s\n' target execs exec/s cov ft corpus seconds crashes
failed=0
rm -f "$work"/*.row "$work"/*.failed
for t in "${targets[@]}"; do
  if [ ! -x "$bin/$t" ]; then
    echo "run.sh: $bin/$t is missing" >&2
    failed=1
    continue
  fi
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  fuzz_one "$t" &
done
wait
for t in "${targets[@]}"; do
  [ -f "$work/$t.row" ] && cat "$work/$t.row"
  [ -f "$work/$t.failed" ] && failed=1
done
# A failure explains itself where the run is read (CI keeps only this output): the end of the
# target's log, from its sanitizer or libFuzzer report on, and each crash input in base64
# (`base64 -d > input; <target> input` replays it).
for t in "${targets[@]}"; do
  [ -f "$work/$t.failed" ] || continue
  log="$work/$t/log"
  echo
  echo "=== $t: the end of its log"
  start=$(grep -n -m1 -E '^==[0-9]+==|^[^ ]+:[0-9]+: check failed|ERROR: libFuzzer|runtime error:' \
    "$log" | cut -d: -f1)
  if [ -n "$start" ]; then tail -n +"$start" "$log" | head -80; else tail -40 "$log"; fi
  for input in "$work/$t/crashes"/*; do
    [ -f "$input" ] || continue
    echo "=== $t: $(basename "$input") ($(stat -c %s "$input") bytes), base64:"
    head -c 16384 "$input" | base64 -w 100
  done
done
if [ "$failed" -eq 0 ] && [ "$own_work" -eq 1 ]; then
  rm -rf "$work"  # nothing to look at; --work keeps it
else
  echo "logs, corpora and crash inputs: $work"
fi
exit $failed
