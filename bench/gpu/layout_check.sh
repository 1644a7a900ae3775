#!/bin/bash
# The short version of bench/gpu/run.sh that needs no GPU (ctest bench_gpu_layout): the 7B-shape
# checkpoint writer at one decoder and one vision layer, loaded and run by hapctl on the CPU, and
# the transformers script's report where transformers cannot be imported.
#   bench/gpu/layout_check.sh HAPCTL WORK_DIR
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
HAPCTL=$1 WORK=$2
PYTHON=${PYTHON:-/usr/bin/python3}
rm -rf "$WORK" && mkdir -p "$WORK"
"$HAPCTL" make-tiny --out "$WORK/template" --layers 1 --vision-layers 1 --dtype bf16 \
  --image-size 336 --model-vocab 32064 --hidden 96 --intermediate 176 --heads 4 \
  --vision-hidden 64 --vision-heads 4 > /dev/null
"$PYTHON" "$HERE/make_7b_checkpoint.py" "$WORK/template" "$WORK/ckpt" --text-layers 1 \
  --vision-layers 2
grep -q '"hidden_size": 4096' "$WORK/ckpt/config.json"
"$HAPCTL" run --model "$WORK/ckpt" --image "$HERE/../../data/scenes-test/images/test_0000.jpg" \
  --prompt "What is it?" --max-new-tokens 1 > "$WORK/run.txt"
grep -q "prefill .* (5[0-9][0-9] tokens" "$WORK/run.txt"
cat > "$WORK/ours.json" <<'JSON'
{"gpu": "none", "cuda_driver": "-", "date": "-", "requests": [
 {"config": "none", "encode_ms": 10, "prefill_ms": 20, "first_token_ms": 30, "prompt_tokens": 600},
 {"config": "hap 32", "encode_ms": 10, "prefill_ms": 5, "first_token_ms": 15}]}
JSON
"$PYTHON" "$HERE/transformers_prefill.py" --model "$WORK/ckpt" --ours "$WORK/ours.json" \
  --json "$WORK/compare.json" > "$WORK/compare.txt"
grep -q "| prefill, hap 32 | 5.00 |" "$WORK/compare.txt"
echo "layout ok: $(grep -c . "$WORK/ckpt/model.safetensors.index.json") index lines; $(head -1 "$WORK/compare.txt")"
rm -rf "$WORK/ckpt"  # 1 GB
