#!/bin/bash
# Every GPU check in one command, within a time limit (bench/gpu/README.md): the parity table
# (hapctl selftest), compute-sanitizer memcheck on a whole HAP request, run.sh (gpu_bench and
# transformers), serving.sh at 1, 8 and 32 streams, kernel_times.sh (each kernel's device time in
# an encode and two prefills, from Nsight Compute), then serving.sh at 8 and 32 with the
# prefill's passes batched (--prefill-batch-tokens 4096), and at 8 and 32 with the KV cache sent
# as rows instead of handed over through CUDA IPC. Each part gets what is left of the
# limit up to its own share, and one that runs out is stopped and marked so; summary.txt lists
# each part's exit status and seconds. The GPU's name, the driver and the date head device.txt.
#   bench/gpu/all.sh [--build DIR] [--out DIR] [--seconds N] [--checkpoint DIR]
# --build: a build tree, or a folder with the binaries under bin/ (hapctl, gpu_bench,
# streams_bench, hap-encoder, hap-prefill, hap-decode). --seconds: the whole run's limit
# (default 540). Results: --out (default bench/gpu/out).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=build OUT="$HERE/out" SECONDS_LIMIT=540 CHECKPOINT=/dev/shm/hap-llava-7b-shape
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2 ;;
    --out) OUT=$2 ;;
    --seconds) SECONDS_LIMIT=$2 ;;
    --checkpoint) CHECKPOINT=$2 ;;
    *) echo "all.sh: unknown flag $1" >&2; exit 2 ;;
  esac
  shift 2
done
mkdir -p "$OUT"
BUILD=$(cd "$BUILD" && pwd)
HAPCTL=$(find "$BUILD" -name hapctl -type f -perm -u+x ! -path '*/CMakeFiles/*' | head -1)
if [ -z "$HAPCTL" ]; then
  echo "all.sh: no hapctl under $BUILD" >&2
  exit 1
fi
END=$(( $(date +%s) + SECONDS_LIMIT ))
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  date -u '+%Y-%m-%d %H:%M UTC'
  git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || true
} > "$OUT/device.txt"

# part NAME SHARE COMMAND...: runs COMMAND with its output in NAME.txt, for at most SHARE
# seconds or what is left of the limit.
part() {
  local name=$1 share=$2
  shift 2
  local left=$(( END - $(date +%s) ))
  if [ "$left" -lt 10 ]; then
    echo "$name: not run (the time limit was reached)" | tee -a "$SUMMARY"
    return
  fi
  [ "$share" -lt "$left" ] && left=$share
  local start rc
  start=$(date +%s)
  timeout --kill-after=5 "$left" "$@" > "$OUT/$name.txt" 2>&1
  rc=$?
  local note=""
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && note=" (stopped at its ${left} s)"
  echo "$name: exit $rc in $(( $(date +%s) - start )) s$note" | tee -a "$SUMMARY"
}

part selftest 90 "$HAPCTL" selftest --device cuda
# A small checkpoint of the 7B layout: run.sh takes its layout, memcheck runs a request on it.
TEMPLATE="$OUT/template"
if [ ! -f "$TEMPLATE/config.json" ]; then
  part make_template 60 "$HAPCTL" make-tiny --out "$TEMPLATE" --layers 1 --vision-layers 1 \
    --dtype bf16 --image-size 336 --model-vocab 32064 --hidden 96 --intermediate 176 --heads 4 \
    --vision-hidden 64 --vision-heads 4
fi
part memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 3 "$HAPCTL" run \
  --device cuda --model "$TEMPLATE" --image "$ROOT/data/scenes-test/images/test_0000.jpg" \
  --prompt "What is in the picture?" --method hap --retain 32 --max-new-tokens 8
part run 240 "$HERE/run.sh" --build "$BUILD" --template "$TEMPLATE" --checkpoint "$CHECKPOINT" \
  --out "$OUT" --requests 10
part serving 180 "$HERE/serving.sh" --build "$BUILD" --checkpoint "$CHECKPOINT" --out "$OUT" \
  --streams 1,8,32
# Each kernel's device time in one encode, one unpruned and one HAP-32 prefill (Nsight Compute).
part kernels 100 "$HERE/kernel_times.sh" --build "$BUILD" --checkpoint "$CHECKPOINT" --out "$OUT"
# The prefill batching the requests that arrive together (about six 608-token prompts a pass).
part serving_batch 90 "$HERE/serving.sh" --build "$BUILD" --checkpoint "$CHECKPOINT" \
  --out "$OUT" --streams 8,32 --prefill-batch-tokens 4096
part serving_stream 90 "$HERE/serving.sh" --build "$BUILD" --checkpoint "$CHECKPOINT" \
  --out "$OUT" --streams 8,32 --kv-handover stream
cat "$SUMMARY"
