#!/usr/bin/env bash
# Installs the Debian packages HAP serve needs to build, test and train. Idempotent and
# non-interactive: packages already present are skipped, so a second run costs a dpkg query.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev nlohmann-json3-dev
  sentencepiece libsentencepiece-dev
  libjpeg-dev libpng-dev
  libcpp-httplib-dev
  # tests/fuzz (make fuzz): clang with libFuzzer and the sanitizer runtimes
  clang-14 libclang-rt-14-dev
  python3 python3-torch python3-numpy python3-sentencepiece python3-grpcio python3-protobuf python3-pil
  # sdk/python: setup.py build / pip install from the source tree
  python3-setuptools
  # tests/deploy: tools/helm-render (Go text/template + sprig, built in GOPATH mode)
  golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev
)

# Tools that may already be on the machine from another source (the machine image brings Node.js
# with npm and kubectl from their vendors' repositories): install Debian's only when the command
# is missing, since Debian's npm would conflict with a vendor nodejs that bundles npm. Debian's
# kubectl is kubernetes-client 1.20; its kustomize builds deploy/k8s (see the overlays' notes).
for tool in node:nodejs npm:npm kubectl:kubernetes-client; do
  if ! command -v "${tool%%:*}" > /dev/null; then
    PACKAGES+=("${tool#*:}")
  fi
done

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
  else
    SUDO=
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The npm packages of the JavaScript tests (tests/deploy: Kubernetes schemas, js-yaml, ajv;
# tests/openai: the official openai client; tests/text/hf_reference: Hugging Face's
# tokenizers.js and @huggingface/jinja; tests/image/hf_reference: transformers.js's image
# processors, install scripts off by its .npmrc), exactly as locked; skipped while node_modules
# is at least as new as the lock file.
root="$(cd "$(dirname "$0")/.." && pwd)"
for dir in "$root/tests/deploy" "$root/tests/openai" "$root/tests/text/hf_reference" \
           "$root/tests/image/hf_reference"; do
  if [ -f "$dir/package-lock.json" ] &&
     { [ ! -f "$dir/node_modules/.package-lock.json" ] ||
       [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; }; then
    echo "install-deps: npm ci in ${dir#"$root"/}" >&2
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  fi
done
