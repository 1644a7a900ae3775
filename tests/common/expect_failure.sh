#!/bin/sh
# Runs a command that must fail: passes when it exits 1-125 (not killed by a signal) and its
# output (stdout and stderr) contains PATTERN (grep -E); prints the output either way.
#   expect_failure.sh PATTERN COMMAND [ARG...]
if [ $# -lt 2 ]; then
  echo "usage: expect_failure.sh PATTERN COMMAND [ARG...]" >&2
  exit 2
fi
pattern=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -eq 0 ]; then
  echo "expect_failure: '$1' exited 0; it must fail" >&2
  exit 1
fi
if [ "$rc" -gt 125 ]; then
  echo "expect_failure: '$1' exited $rc (a crash or a signal, not a reported failure)" >&2
  exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$pattern"; then
  echo "expect_failure: '$1' exited $rc but its output lacks /$pattern/" >&2
  exit 1
fi
echo "expect_failure: '$1' exited $rc as expected"
