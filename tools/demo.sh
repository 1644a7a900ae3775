#!/usr/bin/env bash
# `make demo`: answers a question about the example image with the default model, in process,
# unpruned and with HAP at 5.6% of the visual tokens, printing answers, pruning stats and timings.
set -euo pipefail
HAPCTL=${1:-build/tools/hapctl/hapctl}
cd "$(dirname "$0")/.."
IMAGE=examples/scene1.png
QUESTION=$(sed -n 's/^question: //p' examples/scene1.txt 2>/dev/null || true)
QUESTION=${QUESTION:-"What color is the circle?"}

echo "== image: $IMAGE"
echo "== question: $QUESTION"
echo "== unpruned:"
"$HAPCTL" run --image "$IMAGE" --prompt "$QUESTION" --max-new-tokens 8
