#!/usr/bin/env bash
# Prints the path of the `phalanx` binary the image holds, unpacked from the image's own layer (the file a container
# of the image runs, not a fresh build), after `make image` (hack/image.sh, run first; its lines go to stderr).
#
#   bin=$(hack/image-binary.sh)      -> <target>/image/rootfs/usr/local/bin/phalanx
#
# Used by hack/chart-stand-in.sh and by the chart's end-to-end test (tests/tests/chart_cluster.rs).
# Environment: CARGO_TARGET_DIR (cargo's usual meaning), and what hack/image.sh reads.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"
cd "$PHALANX_ROOT"
command -v jq >/dev/null || phalanx::die "'jq' is required but not on PATH"
"$here/image.sh" >&2
out=${CARGO_TARGET_DIR:-$PHALANX_ROOT/target}/image
layout=$out/oci
# index.json -> the one manifest -> its one layer (hack/image.sh writes exactly these).
manifest=$(jq -r '.manifests[0].digest' "$layout/index.json")
layer=$(jq -r '.layers[0].digest' "$layout/blobs/sha256/${manifest#sha256:}")
rootfs=$out/rootfs
rm -rf "$rootfs.tmp" && mkdir -p "$rootfs.tmp"
gzip -dc "$layout/blobs/sha256/${layer#sha256:}" | tar -x -C "$rootfs.tmp"
rm -rf "$rootfs" && mv "$rootfs.tmp" "$rootfs"
bin=$rootfs/usr/local/bin/phalanx
[ -x "$bin" ] || phalanx::die "the image's layer holds no executable /usr/local/bin/phalanx"
echo "$bin"
