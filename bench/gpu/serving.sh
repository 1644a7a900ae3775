#!/bin/bash
# The three services on this GPU under concurrent streams (bench/gpu/README.md): streams_bench
# starts hap-encoder, hap-prefill and hap-decode with --device cuda on the 7B-shape checkpoint
# (run.sh writes it) and sends 1, 8, 32 and 64 streams of 32-token answers, unpruned and with HAP
# at 11.1%, while nvidia-smi samples each process's GPU memory twice a second; the peaks land
# beside the table.
#   bench/gpu/serving.sh [--build DIR] [--checkpoint DIR] [--out DIR] [--streams 1,8,32,64]
#                        [--rounds N] [--prefill-gpu-memory F] [--decode-gpu-memory F]
#                        [--prefill-batch-tokens N] [--kv-handover auto|stream]
#                        [--decode-graphs on|off]
# --prefill-batch-tokens N: hap-prefill runs the requests that arrive together as batched passes
# of up to N prompt tokens (docs/design.md, "Batched prefill"); the results then go to
# serving_batch<N>.txt and serving_batch<N>_memory.txt, beside the unbatched run's.
# --kv-handover stream: the KV caches go to hap-decode as rows rather than through CUDA IPC (the
# default, auto); --decode-graphs off: decode steps op by op. Each adds _<flag><value> to the
# result files' names.
# Results: --out (default bench/gpu/out) serving.txt and serving_memory.txt.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=build CHECKPOINT=/dev/shm/hap-llava-7b-shape OUT="$HERE/out" STREAMS=1,8,32,64 ROUNDS=1
PREFILL_GPU_MEMORY="" DECODE_GPU_MEMORY="" BATCH_TOKENS="" HANDOVER="" GRAPHS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2 ;;
    --checkpoint) CHECKPOINT=$2 ;;
    --out) OUT=$2 ;;
    --streams) STREAMS=$2 ;;
    --rounds) ROUNDS=$2 ;;
    --prefill-gpu-memory) PREFILL_GPU_MEMORY=$2 ;;
    --decode-gpu-memory) DECODE_GPU_MEMORY=$2 ;;
    --prefill-batch-tokens) BATCH_TOKENS=$2 ;;
    --kv-handover) HANDOVER=$2 ;;
    --decode-graphs) GRAPHS=$2 ;;
    *) echo "serving.sh: unknown flag $1" >&2; exit 2 ;;
  esac
  shift 2
done
if [ ! -f "$CHECKPOINT/config.json" ]; then
  echo "serving.sh: no checkpoint at $CHECKPOINT (bench/gpu/run.sh writes it)" >&2
  exit 1
fi
STREAMS_BENCH=$(find "$BUILD" -name streams_bench -type f -perm -u+x | head -1)
if [ -z "$STREAMS_BENCH" ] || [ ! -x "$BUILD/bin/hap-decode" ]; then
  echo "serving.sh: no streams_bench or services under $BUILD" >&2
  exit 1
fi
mkdir -p "$OUT"
NAME=serving
[ -n "$BATCH_TOKENS" ] && NAME="serving_batch$BATCH_TOKENS"
[ -n "$HANDOVER" ] && NAME="${NAME}_handover$HANDOVER"
[ -n "$GRAPHS" ] && NAME="${NAME}_graphs$GRAPHS"
SAMPLES="$OUT/${NAME}_memory_samples.csv"
: > "$SAMPLES"
if command -v nvidia-smi > /dev/null; then
  (while sleep 0.5; do
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits \
      >> "$SAMPLES" 2> /dev/null || true
  done) &
  SAMPLER=$!
  trap 'kill $SAMPLER 2> /dev/null || true' EXIT
fi
ARGS=(--model "$CHECKPOINT" --device cuda --kv-dtype bf16 --streams "$STREAMS" --rounds "$ROUNDS"
      --max-new-tokens 32 --bin-dir "$BUILD/bin")
[ -n "$PREFILL_GPU_MEMORY" ] && ARGS+=(--prefill-gpu-memory "$PREFILL_GPU_MEMORY")
[ -n "$DECODE_GPU_MEMORY" ] && ARGS+=(--decode-gpu-memory "$DECODE_GPU_MEMORY")
[ -n "$BATCH_TOKENS" ] && ARGS+=(--prefill-batch-tokens "$BATCH_TOKENS")
[ -n "$HANDOVER" ] && ARGS+=(--kv-handover "$HANDOVER")
[ -n "$GRAPHS" ] && ARGS+=(--decode-graphs "$GRAPHS")
"$STREAMS_BENCH" "${ARGS[@]}" | tee "$OUT/$NAME.txt"
# The peak memory of each service (by process name) over the run.
{
  echo "| service | peak GPU memory MiB |"
  echo "|---|---|"
  awk -F', *' '{ name = $2; sub(".*/", "", name); if ($3 + 0 > peak[name]) peak[name] = $3 + 0 }
               END { for (n in peak) printf "| %s | %d |\n", n, peak[n] }' "$SAMPLES" | sort
} | tee "$OUT/${NAME}_memory.txt"
