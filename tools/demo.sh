#!/usr/bin/env bash
# `make demo`: answers a question about an example image with the default model, in process,
# unpruned and with HAP at 5.6% of the visual tokens, printing answers, pruning stats and
# timings. Until the trained default model (models/scenes-llava) is committed, the demo runs the
# same pipeline on a random-weight checkpoint of the same shape and says so: its answers are
# then meaningless text, but every stage, the pruning and the stats are the real ones.
set -euo pipefail
HAPCTL=${1:-build/tools/hapctl/hapctl}
cd "$(dirname "$0")/.."
IMAGE=data/scenes-test/images/test_0000.jpg
QUESTION=$(head -n 1 data/scenes-test/questions.jsonl | sed -n 's/.*"question": "\([^"]*\)".*/\1/p')
EXPECTED=$(head -n 1 data/scenes-test/questions.jsonl | sed -n 's/.*"answer": "\([^"]*\)".*/\1/p')
MODEL_ARGS=()
if [ ! -f models/scenes-llava/config.json ] && [ -z "${HAP_MODEL_DIR:-}" ]; then
  STANDIN=build/demo-models/random-168px-32l
  echo "== the trained default model (models/scenes-llava) is not in this tree yet;"
  echo "== using a random-weight stand-in of the same shape: $STANDIN"
  if [ ! -f "$STANDIN/config.json" ]; then
    "$HAPCTL" make-tiny --out "$STANDIN" --layers 32 --hidden 96 --heads 4 --image-size 168 \
      --vision-layers 4 --vision-hidden 96 --dtype bf16 --seed 7
  fi
  MODEL_ARGS=(--model "$STANDIN")
fi

echo "== image: $IMAGE"
echo "== question: $QUESTION (reference answer: $EXPECTED)"
echo "== unpruned:"
"$HAPCTL" run "${MODEL_ARGS[@]}" --image "$IMAGE" --prompt "$QUESTION" --max-new-tokens 8
echo "== HAP, 5.6% of the visual tokens:"
"$HAPCTL" run "${MODEL_ARGS[@]}" --image "$IMAGE" --prompt "$QUESTION" --max-new-tokens 8 \
  --method hap --retain 5.6%
