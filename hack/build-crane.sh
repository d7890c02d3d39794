#!/usr/bin/env bash
# Builds crane (github.com/google/go-containerregistry/cmd/crane) from its Go module into $CRANE_BIN_DIR (outside
# the repo, keyed by CRANE_VERSION; see versions.sh). hack/image.sh uses it to validate the image archive, and
# `crane push` is one way to publish it (README, "Install on your cluster"). What is already there is not rebuilt
# (a cached run needs no Go toolchain); a cold build takes about a minute. The wrapper module hack/crane-bin pins
# crane and its dependencies with a committed go.sum, as hack/build-bins.sh does for the control plane.
# Prints the path of the binary on stdout; progress goes to stderr.
# Environment: UPDATE_GOSUM=1 copies a regenerated go.mod/go.sum back into hack/crane-bin/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/versions.sh
source "$here/versions.sh"
out=$CRANE_BIN_DIR
if [ -x "$out/crane" ]; then
  echo "[build-crane] crane $CRANE_VERSION cached in $out" >&2
  echo "$out/crane"
  exit 0
fi
command -v go >/dev/null || { echo "build-crane: Go 1.26+ is required (go not found on PATH)" >&2; exit 1; }
command -v flock >/dev/null || { echo "build-crane: flock (util-linux) is required" >&2; exit 1; }
mkdir -p "$out"
exec 9>"$out/.build.lock"
if ! flock -n 9; then echo "[build-crane] another build holds $out/.build.lock; waiting" >&2; flock 9; fi
export GOTOOLCHAIN=${GOTOOLCHAIN_OVERRIDE:-auto}
# The checksum database may be unreachable; go.sum is committed, so module hashes are still verified against it.
export GONOSUMDB=${GONOSUMDB:-github.com/google/go-containerregistry}
export GOFLAGS="${GOFLAGS:-} -mod=mod"
export CGO_ENABLED=0
d=$(mktemp -d "${TMPDIR:-/tmp}/phalanx-crane-bin.XXXXXX")
trap 'rm -rf "$d"' EXIT
cp -r "$here/crane-bin/." "$d/"
t=$SECONDS
( cd "$d"
  mod=github.com/google/go-containerregistry
  grep -q "$mod $CRANE_VERSION" go.mod 2>/dev/null || go get -tool "$mod/cmd/crane@$CRANE_VERSION"
  if [ ! -x "$out/crane" ]; then
    echo "[build-crane $(date +%H:%M:%S)] building crane $CRANE_VERSION (about a minute cold)" >&2
    go build -trimpath -ldflags "-s -w -X $mod/cmd/crane/cmd.Version=$CRANE_VERSION" -o "$out/crane.tmp" "$mod/cmd/crane"
    mv "$out/crane.tmp" "$out/crane"
  fi ) >&2
if [ "${UPDATE_GOSUM:-0}" = 1 ]; then cp "$d/go.mod" "$d/go.sum" "$here/crane-bin/"; echo "  updated hack/crane-bin/go.mod, go.sum" >&2; fi
echo "[build-crane] done in $(( SECONDS - t )) s: $out/crane" >&2
echo "$out/crane"
