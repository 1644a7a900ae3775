#!/bin/bash
# The device time of every kernel of one encode, one unpruned prefill and one HAP prefill, from
# Nsight Compute: each kernel's own duration (gpu__time_duration), with no events between them,
# summed by kernel, and the pruning kernels' sum. Under ncu the kernels run one at a time, so the
# window's wall time there means nothing; set the device sum beside gpu_bench's time of the same
# stage (gpu_bench.txt), and the difference is what the GPU spent waiting for the host and
# between launches. gpu_bench --profile-window runs the warm-up requests outside the window (ncu
# --profile-from-start off records only what runs between cudaProfilerStart and Stop).
#   bench/gpu/kernel_times.sh [--build DIR] [--checkpoint DIR] [--out DIR] [--windows encode,none,32]
# Needs ncu (Nsight Compute) and the checkpoint run.sh writes. Results: kernels_<window>.txt (the
# table) and kernels_<window>.csv (ncu's rows) under --out (default bench/gpu/out).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=build OUT="$HERE/out" CHECKPOINT=/dev/shm/hap-llava-7b-shape WINDOWS=encode,none,32
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD=$2 ;;
    --out) OUT=$2 ;;
    --checkpoint) CHECKPOINT=$2 ;;
    --windows) WINDOWS=$2 ;;
    *) echo "kernel_times.sh: unknown flag $1" >&2; exit 2 ;;
  esac
  shift 2
done
mkdir -p "$OUT"
GPU_BENCH=$(find "$BUILD" -name gpu_bench -type f -perm -u+x | head -1)
if [ -z "$GPU_BENCH" ]; then
  echo "kernel_times.sh: no gpu_bench under $BUILD (configure with -DHAP_CUDA=ON)" >&2
  exit 1
fi
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null |
  head -1 || true)
if [ -z "$NCU" ]; then
  echo "kernel_times.sh: no ncu (Nsight Compute) on this machine" >&2
  exit 1
fi
if [ ! -f "$CHECKPOINT/config.json" ]; then
  echo "kernel_times.sh: no checkpoint at $CHECKPOINT (bench/gpu/run.sh writes it)" >&2
  exit 1
fi
status=0
for w in ${WINDOWS//,/ }; do
  "$NCU" --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \
    --print-units base "$GPU_BENCH" --model "$CHECKPOINT" --kv-dtype bf16 --warmup 2 \
    --profile-window "$w" > "$OUT/kernels_$w.csv" 2> "$OUT/kernels_$w.log"
  rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "kernel_times.sh: window $w: ncu exited $rc (see kernels_$w.log)" >&2
    status=1
    continue
  fi
  python3 "$HERE/kernel_times.py" "$OUT/kernels_$w.csv" | tee "$OUT/kernels_$w.txt"
done
exit $status
