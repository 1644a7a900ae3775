#!/bin/bash
# The GPU benchmark in one command (bench/gpu/README.md): a LLaVA-1.5-7B-shape checkpoint with
# random BF16 weights, gpu_bench on it, then transformers on the same checkpoint and GPU.
#   bench/gpu/run.sh [--build DIR] [--checkpoint DIR] [--template DIR] [--out DIR] [--requests N]
# --checkpoint is where the 7B-shape checkpoint is written (kept for a rerun; about 14 GB,
# default /dev/shm/hap-llava-7b-shape). --template is a small make-tiny checkpoint to take the
# layout from (made with the build's hapctl when not given). Results land in --out (default
# bench/gpu/out): gpu_bench.txt, gpu_bench.json, compare.txt, compare.json.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=build CHECKPOINT=/dev/shm/hap-llava-7b-shape TEMPLATE="" OUT="$HERE/out" REQUESTS=20
PYTHON=${PYTHON:-python3}
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2 ;;
    --checkpoint) CHECKPOINT=$2 ;;
    --template) TEMPLATE=$2 ;;
    --out) OUT=$2 ;;
    --requests) REQUESTS=$2 ;;
    *) echo "run.sh: unknown flag $1" >&2; exit 2 ;;
  esac
  shift 2
done
mkdir -p "$OUT"
if [ ! -f "$CHECKPOINT/config.json" ]; then
  if [ -z "$TEMPLATE" ]; then
    TEMPLATE=$(mktemp -d)
    "$BUILD/tools/hapctl/hapctl" make-tiny --out "$TEMPLATE" --layers 1 --vision-layers 1 \
      --dtype bf16 --image-size 336 --model-vocab 32064 --hidden 96 --intermediate 176 \
      --heads 4 --vision-hidden 64 --vision-heads 4
  fi
  "$PYTHON" "$HERE/make_7b_checkpoint.py" "$TEMPLATE" "$CHECKPOINT"
fi
GPU_BENCH=$(find "$BUILD" -name gpu_bench -type f -perm -u+x | head -1)
if [ -z "$GPU_BENCH" ]; then
  echo "run.sh: no gpu_bench under $BUILD (configure with -DHAP_CUDA=ON)" >&2
  exit 1
fi
"$GPU_BENCH" --model "$CHECKPOINT" --requests "$REQUESTS" --kv-dtype bf16 --json "$OUT/gpu_bench.json" \
  | tee "$OUT/gpu_bench.txt"
"$PYTHON" "$HERE/transformers_prefill.py" --model "$CHECKPOINT" --ours "$OUT/gpu_bench.json" \
  --requests "$REQUESTS" --json "$OUT/compare.json" | tee "$OUT/compare.txt"
