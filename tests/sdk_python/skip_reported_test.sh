#!/bin/sh
# Configures the project afresh with the Python SDK's interpreter hidden and checks that
# sdk_python_test is still registered and that ctest reports it skipped, with the reason.
#   skip_reported_test.sh SOURCE_DIR WORK_DIR
set -eu
src=$1 work=$2
rm -rf "$work"
if ! cmake -S "$src" -B "$work" -DHAP_PYTHON=/nonexistent/python3 -DHAP_CUDA=OFF \
     -DHAP_BUILD_BENCH=OFF > "$work.configure.log" 2>&1; then
  cat "$work.configure.log"
  echo "configuring with HAP_PYTHON hidden failed" >&2
  exit 1
fi
cd "$work"
ctest -R '^sdk_python_test$' --output-junit "$work/junit.xml" > ctest.log 2>&1 || true
cat ctest.log
report=$(/usr/bin/python3 "$src/tools/ctest_skipped.py" "$work/junit.xml")
echo "$report"
if ! grep -q "sdk_python_test (Skipped)" ctest.log; then
  echo "ctest did not report sdk_python_test as skipped" >&2
  exit 1
fi
if ! echo "$report" | grep -q "sdk_python_test: SKIPPED: the Python SDK is not built: /nonexistent/python3 (HAP_PYTHON) not found"; then
  echo "the skip does not give its reason" >&2
  exit 1
fi
