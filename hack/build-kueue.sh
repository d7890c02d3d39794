#!/usr/bin/env bash
# Builds Kueue's manager (sigs.k8s.io/kueue/cmd/kueue) from its Go module and copies its CRDs and webhook
# manifests out of the module, into $KUEUE_BIN_DIR (outside the repo, keyed by KUEUE_VERSION; see versions.sh):
#   $KUEUE_BIN_DIR/kueue          the manager binary
#   $KUEUE_BIN_DIR/crds/*.yaml    config/components/crd/bases of the module
#   $KUEUE_BIN_DIR/webhook.yaml   config/components/webhook/manifests.yaml of the module
# What is already there is not rebuilt. Opt-in (the Kueue test is `make test-kueue`): a cold build takes about
# 10 minutes on 2 cores. Kueue's go.mod has no replace directives, but a wrapper module (hack/kueue-bin, go.sum
# committed) pins what is built, as hack/build-bins.sh does for the control plane.
# Environment: UPDATE_GOSUM=1 copies a regenerated go.mod/go.sum back into hack/kueue-bin/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/versions.sh
source "$here/versions.sh"
out=$KUEUE_BIN_DIR
if [ -x "$out/kueue" ] && [ -f "$out/webhook.yaml" ] && [ -n "$(ls "$out/crds" 2>/dev/null)" ]; then
  echo "[build-kueue] kueue $KUEUE_VERSION cached in $out"
  exit 0
fi
command -v go >/dev/null || { echo "build-kueue: Go 1.26+ is required (go not found on PATH)" >&2; exit 1; }
command -v flock >/dev/null || { echo "build-kueue: flock (util-linux) is required" >&2; exit 1; }
mkdir -p "$out"
exec 9>"$out/.build.lock"
if ! flock -n 9; then echo "[build-kueue] another build holds $out/.build.lock; waiting"; flock 9; fi
export GOTOOLCHAIN=${GOTOOLCHAIN_OVERRIDE:-auto}
export GONOSUMDB=${GONOSUMDB:-k8s.io,sigs.k8s.io}
export GOFLAGS="${GOFLAGS:-} -mod=mod"
export CGO_ENABLED=0
d=$(mktemp -d "${TMPDIR:-/tmp}/phalanx-kueue-bin.XXXXXX")
trap 'rm -rf "$d"' EXIT
cp -r "$here/kueue-bin/." "$d/"
t=$SECONDS
( cd "$d"
  grep -q "sigs.k8s.io/kueue $KUEUE_VERSION" go.mod 2>/dev/null || go get -tool "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
  if [ ! -x "$out/kueue" ]; then
    echo "[build-kueue $(date +%H:%M:%S)] building kueue $KUEUE_VERSION (about 10 min cold on 2 cores)"
    go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" \
      -o "$out/kueue.tmp" sigs.k8s.io/kueue/cmd/kueue
    mv "$out/kueue.tmp" "$out/kueue"
  fi
  kdir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
  mkdir -p "$out/crds"
  # Module-cache files are read-only; install gives the copies a normal mode so a later run can replace them.
  for f in "$kdir"/config/components/crd/bases/*.yaml; do install -m 0644 "$f" "$out/crds/"; done
  install -m 0644 "$kdir/config/components/webhook/manifests.yaml" "$out/webhook.yaml" )
if [ "${UPDATE_GOSUM:-0}" = 1 ]; then cp "$d/go.mod" "$d/go.sum" "$here/kueue-bin/"; echo "  updated hack/kueue-bin/go.mod, go.sum"; fi
echo "[build-kueue] done in $(( SECONDS - t )) s: $out"
