#!/usr/bin/env bash
# Runs one deploy check for ctest. A check whose tool is absent exits 77, which ctest reports as
# skipped, and says which tool and how to get it (tools/install-deps.sh installs them all).
# Usage: deploy_test.sh go-unit|chart|kustomize SOURCE_DIR WORK_DIR [--update]
set -euo pipefail
what=$1 src=$2 work=$3
shift 3
here=$src/tests/deploy
mkdir -p "$work"

skip() { echo "SKIPPED: $* (tools/install-deps.sh installs it)"; exit 77; }

# Debian's Go and the sprig / yaml.v3 sources, in GOPATH mode (no module downloads).
export GOPATH=/usr/share/gocode GO111MODULE=off GOCACHE=$work/go-cache GOFLAGS= GOENV=off
need_go() {
  command -v go > /dev/null || skip "go is not installed (Debian package golang-go)"
  [ -d "$GOPATH/src/github.com/Masterminds/sprig" ] ||
    skip "sprig is not installed (Debian package golang-github-masterminds-sprig-dev)"
  [ -d "$GOPATH/src/gopkg.in/yaml.v3" ] || skip "yaml.v3 is not installed (Debian package golang-gopkg-yaml.v3-dev)"
}
need_node() {
  command -v node > /dev/null || skip "node is not installed (Debian/NodeSource package nodejs)"
  [ -d "$here/node_modules/kubernetes-models" ] && [ -d "$here/node_modules/ajv" ] ||
    skip "the npm packages of tests/deploy are not installed (npm ci in tests/deploy)"
}
renderer() {
  need_go
  (cd "$src" && go build -o "$work/helm-render" ./tools/helm-render)
}

case $what in
  go-unit)
    need_go
    cd "$src"
    go vet ./tools/helm-render
    go test -count=1 ./tools/helm-render
    ;;
  chart)
    need_node
    renderer
    cd "$here"
    node chart_test.js --render "$work/helm-render" --chart "$src/helm/hap" --cases "$here/cases" \
      --source "$src" --work "$work/chart" "$@"
    ;;
  kustomize)
    need_node
    command -v kubectl > /dev/null || skip "kubectl is not installed (Debian package kubernetes-client)"
    cd "$here"
    node kustomize_test.js --kubectl "$(command -v kubectl)" --k8s "$src/deploy/k8s" \
      --chart-rendered "$src/helm/hap/examples/rendered/default.yaml"
    ;;
  *)
    echo "usage: deploy_test.sh go-unit|chart|kustomize SOURCE_DIR WORK_DIR" >&2
    exit 2
    ;;
esac
