#!/usr/bin/env bash
# The parity table catches deliberately broken kernels: applies each mutation below to its source
# file, rebuilds only kernels_cuda_parity_test in BUILD_DIR, runs the decode attention cases and
# expects exactly the named ones to fail. The source file is always restored (and the test
# rebuilt from it) on exit. Not part of `make test`: it rebuilds a test binary once per mutation.
#   tests/kernels/broken_kernels.sh BUILD_DIR
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: tests/kernels/broken_kernels.sh BUILD_DIR (a configured build tree)" >&2
  exit 2
fi
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
test_bin=$build/tests/kernels/cuda/kernels_cuda_parity_test
kernel=kernels/cuda/decode_attention.cu
work=$(mktemp -d)
cp "$src/$kernel" "$work/original"

rebuild() { nice -n 15 cmake --build "$build" --target kernels_cuda_parity_test -j2 > "$work/build.log" 2>&1; }
restore() {
  cmp -s "$work/original" "$src/$kernel" || cp "$work/original" "$src/$kernel"
  rm -rf "$work"
}
trap restore EXIT

# name | perl substitution on the kernel source | case indices that must fail (no others may)
mutations=(
  "a lane's partial q.k taken for the whole row's (no warp sum)|s/WarpSum\(dot\) \* a\.scale/dot * a.scale/|81 82 83 84 85 86 87 88 89 90"
  "per-sequence span bound off by one|s/a\.span_begin\[seq \+ 1\] - first_span :/a.span_begin[seq + 1] - first_span - 1 :/|89 90"
  "slices combined without their softmax weights|s/o \+= part_o\[\(first \+ z\) \* hd \+ d\] \* expf\(m - mx\);/o += part_o[(first + z) * hd + d];/|82 83 85 86 87 88 89 90"
)

status=0
for m in "${mutations[@]}"; do
  IFS='|' read -r name edit want <<< "$m"
  cp "$work/original" "$src/$kernel"
  perl -0pi -e "$edit" "$src/$kernel"
  if cmp -s "$work/original" "$src/$kernel"; then
    echo "FAIL  $name: the mutation no longer applies to $kernel"
    status=1
    continue
  fi
  if ! rebuild; then
    echo "FAIL  $name: the mutated kernel does not build (see below)"
    tail -20 "$work/build.log"
    status=1
    continue
  fi
  # Each case in a process of its own: a broken kernel can crash the emulation, which must not
  # hide the cases after it.
  got="" crashed="" rc=0
  : > "$work/run.log"
  for t in $("$test_bin" --gtest_list_tests --gtest_filter='Table/ParityTest.*DecodeAttention*' |
             sed -n 's/^  MatchesTheCpuReference\/\([0-9]*_[^ ]*\).*/\1/p'); do
    set +e
    ("$test_bin" --gtest_filter="Table/ParityTest.MatchesTheCpuReference/$t") >> "$work/run.log" 2>&1
    case_rc=$?
    set -e
    if [ "$case_rc" -ne 0 ]; then
      rc=1
      got="$got ${t%%_*}"
      [ "$case_rc" -gt 128 ] && crashed="$crashed ${t%%_*}"
    fi
  done
  got=${got# }
  if [ "$rc" -ne 0 ] && [ "$got" = "$want" ]; then
    echo "ok    $name: cases $got fail, as expected${crashed:+ (crashed:$crashed)}"
    grep -m1 -A4 "Failure" "$work/run.log" | sed 's/^/        /' || true
  else
    echo "FAIL  $name: exit $rc, failed cases '$got', want '$want'"
    status=1
  fi
done

cp "$work/original" "$src/$kernel"
rebuild || { echo "the restored kernel does not build" >&2; status=1; }
exit $status
