#!/usr/bin/env bash
# Builds the workload controllers that issue 38's tests run beside Phalanx, each from its own Go module, and copies
# their CRDs and webhook manifests out of the module, into $WORKLOADS_BIN_DIR/<name>-<version>/ (outside the repo):
#   <name>               the manager binary
#   crds/*.yaml          the module's CRD bases
#   webhook.yaml         the module's webhook manifests (registered by URL on loopback by the tests)
# Controllers (versions in hack/versions.sh): jobset (sigs.k8s.io/jobset, main package at the module root),
# lws (sigs.k8s.io/lws/cmd). Usage: hack/build-workloads.sh [name...] (default: all). What is already there is not
# rebuilt. Each has its own wrapper module (hack/workloads-bin/<name>, go.sum committed): their k8s.io versions
# differ, and one shared go.mod would lift them all to the highest (minimal version selection).
# Environment: UPDATE_GOSUM=1 copies a regenerated go.mod/go.sum back into hack/workloads-bin/<name>/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/versions.sh
source "$here/versions.sh"
command -v go >/dev/null || { echo "build-workloads: Go 1.26+ is required (go not found on PATH)" >&2; exit 1; }
command -v flock >/dev/null || { echo "build-workloads: flock (util-linux) is required" >&2; exit 1; }
export GOTOOLCHAIN=${GOTOOLCHAIN_OVERRIDE:-auto}
export GONOSUMDB=${GONOSUMDB:-k8s.io,sigs.k8s.io}
export GOFLAGS="${GOFLAGS:-} -mod=mod"
export CGO_ENABLED=0

# name -> "module version main-package crd-dir webhook-manifest" (paths inside the module).
spec() {
  case $1 in
    jobset) echo "sigs.k8s.io/jobset $JOBSET_VERSION sigs.k8s.io/jobset config/components/crd/bases config/components/webhook/manifests.yaml" ;;
    lws) echo "sigs.k8s.io/lws $LWS_VERSION sigs.k8s.io/lws/cmd config/crd/bases config/webhook/manifests.yaml" ;;
    *) echo "build-workloads: unknown controller '$1' (known: jobset lws)" >&2; return 1 ;;
  esac
}

build_one() {
  local name=$1 module version pkg crds webhook out d t kdir
  read -r module version pkg crds webhook < <(spec "$name")
  out=$WORKLOADS_BIN_DIR/$name-$version
  if [ -x "$out/$name" ] && [ -f "$out/webhook.yaml" ] && [ -n "$(ls "$out/crds" 2>/dev/null)" ]; then
    echo "[build-workloads] $name $version cached in $out"
    return 0
  fi
  mkdir -p "$out"
  exec 9>"$out/.build.lock"
  if ! flock -n 9; then echo "[build-workloads] another build holds $out/.build.lock; waiting"; flock 9; fi
  d=$(mktemp -d "${TMPDIR:-/tmp}/phalanx-$name-bin.XXXXXX")
  cp -r "$here/workloads-bin/$name/." "$d/"
  t=$SECONDS
  ( cd "$d"
    [ -f go.mod ] || go mod init "example.invalid/phalanx/${name}bin" >/dev/null 2>&1
    grep -q "$module $version" go.mod || go get -tool "$pkg@$version"
    if [ ! -x "$out/$name" ]; then
      echo "[build-workloads $(date +%H:%M:%S)] building $name $version (1-2 min with the k8s.io modules cached, 5-10 cold)"
      go build -trimpath -ldflags "-s -w" -o "$out/$name.tmp" "$pkg"
      mv "$out/$name.tmp" "$out/$name"
    fi
    kdir=$(go list -m -f '{{.Dir}}' "$module")
    mkdir -p "$out/crds"
    # Module-cache files are read-only; install gives the copies a normal mode so a later run can replace them.
    for f in "$kdir/$crds"/*.yaml; do install -m 0644 "$f" "$out/crds/"; done
    install -m 0644 "$kdir/$webhook" "$out/webhook.yaml" )
  if [ "${UPDATE_GOSUM:-0}" = 1 ]; then
    cp "$d/go.mod" "$d/go.sum" "$here/workloads-bin/$name/"
    echo "  updated hack/workloads-bin/$name/go.mod, go.sum"
  fi
  rm -rf "$d"
  exec 9>&-
  echo "[build-workloads] $name $version done in $(( SECONDS - t )) s: $out"
}

names=("$@")
[ ${#names[@]} -gt 0 ] || names=(jobset lws)
for n in "${names[@]}"; do spec "$n" >/dev/null; done
for n in "${names[@]}"; do build_one "$n"; done
