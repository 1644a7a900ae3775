#!/usr/bin/env bash
# `cmake --install` into a staging prefix, then the pipeline runs from that prefix alone:
# `hapctl up` starts the installed services (found beside hapctl) on the default model under
# <prefix>/share/hap/models, and `hapctl generate` gets an answer from them. Then the Docker
# images are checked against the same layout (they install with cmake --install too).
# Usage: install_smoke_test.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
src=$1 build=$2 work=$3

fail() { echo "FAIL: $*" >&2; exit 1; }
passed=0
ok() { echo "ok - $*"; passed=$((passed + 1)); }

rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" > "$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }

# The layout tools/hapctl/model_dir.cc, sdk/local_pipeline.cc, the Dockerfiles and the chart rely on.
for f in bin/hapctl bin/hap-encoder bin/hap-prefill bin/hap-decode \
         share/hap/tokenizer/corpus.txt share/hap/samples/scene.jpg share/hap/models; do
  [ -e "$prefix/$f" ] || fail "cmake --install did not install $f"
done
ok "cmake --install lays out bin/{hapctl,hap-encoder,hap-prefill,hap-decode} and share/hap/{models,tokenizer,samples}"

model=$prefix/share/hap/models/scenes-llava
[ -f "$model/config.json" ] || fail "cmake --install did not install the default model at $model"

# Run from a directory outside the tree, with nothing pointing back at the build.
cd "$work"
unset HAP_MODEL_DIR HAP_BIN_DIR
out=$work/up.out err=$work/up.err
: > "$out"
"$prefix/bin/hapctl" up --quiet > "$out" 2> "$err" &
up_pid=$!
cleanup() { kill -INT "$up_pid" 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 1 120); do
  grep -q "ready" "$out" && break
  kill -0 "$up_pid" 2>/dev/null || { cat "$err"; fail "hapctl up exited before it was ready"; }
  sleep 0.5
done
grep -q "ready" "$out" || { cat "$err"; fail "hapctl up was not ready within 60 s"; }
addr=$(head -n 1 "$out")
ok "installed hapctl up is ready at $addr"

# The three children are the installed binaries, on the installed default model.
# Processes may end while /proc is read (other tests run beside this one): cat goes on past a
# stat file that vanished, where mawk given the files would stop at it and list only some.
# The command name, in parentheses, may hold spaces: it becomes one field before splitting.
children() {
  cat /proc/[0-9]*/stat 2> /dev/null | sed 's/ (.*) / comm /' |
    awk -v parent="$1" '$4 == parent {print $1}'
}
for child in $(children "$up_pid"); do
  exe=$(readlink "/proc/$child/exe")
  case "$exe" in "$prefix"/bin/hap-*) ;; *) fail "hapctl up started $exe, not an installed service";; esac
  tr '\0' ' ' < "/proc/$child/cmdline" | grep -q -- "--model $model " ||
    fail "$exe was not given the installed default model $model"
done
[ "$(children "$up_pid" | wc -l)" -eq 3 ] || fail "hapctl up should run three services"
ok "the services are the prefix's binaries, on <prefix>/share/hap/models/scenes-llava"

# The sample is data/scenes-test/images/test_0000.jpg; the default model answers its first
# question ("green") correctly.
json=$("$prefix/bin/hapctl" generate --server "$addr" --image "$prefix/share/hap/samples/scene.jpg" \
         --prompt "Which color does the triangle have?" --method none --max-new-tokens 8 --json) ||
  { cat "$err"; fail "hapctl generate"; }
echo "$json" | grep -q '"finish_reason":"eos"' || fail "unexpected generate result: $json"
echo "$json" | grep -q '"text":"green"' || fail "expected the answer green: $json"
ok "installed hapctl generate gets the right answer from the installed pipeline"

kill -INT "$up_pid"
trap - EXIT
wait "$up_pid" || fail "hapctl up did not stop cleanly on SIGINT"
ok "hapctl up stops cleanly"

# --- The Docker images follow the same install (docker itself cannot run here) -------------
for df in "$src/deploy/docker/cpu.Dockerfile" "$src/deploy/docker/cuda.Dockerfile"; do
  name=$(basename "$df")
  [ "$(grep -c '^FROM ' "$df")" -ge 2 ] || fail "$name: not multi-stage"
  while read -r _ image _; do
    case "$image" in
      *:latest | *:*\$*) fail "$name: base image $image is not pinned";;
      *:*) ;;
      *) fail "$name: base image $image has no tag";;
    esac
  done < <(grep '^FROM ' "$df")
  grep -q 'cmake --install .* --prefix /opt/hap' "$df" || fail "$name: does not cmake --install into /opt/hap"
  grep -q 'COPY --from=build /opt/hap /opt/hap' "$df" || fail "$name: does not copy the installed prefix"
  grep -q '^ENV PATH=/opt/hap/bin:' "$df" || fail "$name: /opt/hap/bin is not on PATH"
  user=$(grep '^USER ' "$df" | tail -n 1 | awk '{print $2}')
  [ "$user" = "10001:10001" ] || fail "$name: the final stage runs as '$user', not 10001:10001 (the chart's runAsUser)"
done
# The chart runs these commands and sends this sample from inside the image.
grep -q 'image: /opt/hap/share/hap/samples/scene.jpg' "$src/helm/hap/values.yaml" ||
  fail "helm/hap/values.yaml test.image is not the installed sample"
grep -q 'command: \["hap-{{ $component }}"\]' "$src/helm/hap/templates/deployment.yaml" ||
  fail "the chart does not run the installed hap-<service> binaries"
ok "both Dockerfiles: multi-stage, pinned bases, cmake --install to /opt/hap, non-root 10001, as the chart expects"

# The runtime stage installs the packages the installed binaries link against.
if command -v dpkg-query > /dev/null; then
  pkgs=$(bash "$src/deploy/docker/runtime-packages.sh" "$prefix/bin")
  for want in libgrpc++1.51 libabsl20220623 libsentencepiece0; do
    echo "$pkgs" | grep -qx "$want" || fail "runtime-packages.sh misses $want (got: $pkgs)"
  done
  ok "runtime-packages.sh finds the shared-library packages: $(echo "$pkgs" | tr '\n' ' ')"
fi

echo "$passed passed, 0 failed"
