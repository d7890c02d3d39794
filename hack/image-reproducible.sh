#!/usr/bin/env bash
# `make image-reproducible`: two builds of HEAD give one digest. The first is `make image` in this checkout (cached
# when up to date); the second builds a fresh clone of HEAD at another path with a target directory of its own
# (nothing shared but the toolchain, cargo's registry and crane), so neither the checkout's path nor a cached
# artifact can make them agree by accident. Slow: the clone's build is a cold release build (10-20 min on 2 cores).
# Prints both digests and exits 1 if they differ. Needs a clean working tree (uncommitted changes are not in HEAD).
#
# Environment: IMAGE_REPRO_DIR (default <target>/image-repro), IMAGE_REPRO_KEEP=1 keeps the clone's build.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"
cd "$PHALANX_ROOT"
[ -z "$(git status --porcelain --untracked-files=no)" ] ||
  phalanx::die "uncommitted changes: commit them first (both builds must be of one commit)"
target=${CARGO_TARGET_DIR:-$PHALANX_ROOT/target}
dir=${IMAGE_REPRO_DIR:-$target/image-repro}
head=$(git rev-parse HEAD)

phalanx::log "build 1 of 2: this checkout ($PHALANX_ROOT)"
"$here/image.sh" | sed -u 's/^/  [build 1] /'
first=$(cat "$target/image/digest")

src=$dir/phalanx
phalanx::log "build 2 of 2: a fresh clone of $head in $src"
rm -rf "$dir"; mkdir -p "$dir"
git clone --quiet --no-hardlinks "$PHALANX_ROOT" "$src"
git -C "$src" checkout --quiet --detach "$head"
t=$SECONDS
( cd "$src" && env -u CARGO_TARGET_DIR hack/image.sh ) | sed -u 's/^/  [build 2] /'
second=$(cat "$src/target/image/digest")
phalanx::log "build 2 took $(( SECONDS - t )) s"
[ "${IMAGE_REPRO_KEEP:-0}" = 1 ] || rm -rf "$src/target/release" "$src/target/$(uname -m)-unknown-linux-musl"

echo "[image-reproducible] build 1 ($PHALANX_ROOT): $first"
echo "[image-reproducible] build 2 ($src): $second"
if [ "$first" != "$second" ]; then
  echo "[image-reproducible] the digests differ: compare $target/image/oci with $src/target/image/oci" >&2
  exit 1
fi
echo "[image-reproducible] one digest from two builds of $head"
