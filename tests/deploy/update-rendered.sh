#!/usr/bin/env bash
# Rewrites helm/hap/examples/rendered/*.yaml after a chart change (the chart test fails while
# they are stale), then runs the chart test.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bash "$src/tests/deploy/deploy_test.sh" chart "$src" "$work" --update
