#!/usr/bin/env bash
# `make image-reproducible`: two builds of HEAD give one digest per platform (linux/amd64 and linux/arm64, as a release
# has them; IMAGE_REPRO_ARCHES=amd64 for one). The first is `make image` in this checkout (cached
# when up to date); the second builds a fresh clone of HEAD at another path with a target directory of its own
# (nothing shared but the toolchain, cargo's registry and crane), so neither the checkout's path nor a cached
# artifact can make them agree by accident. Slow: each of the clone's builds is a cold release build (10-20 min on 2 cores).
# Prints both digests and exits 1 if they differ. Needs a clean working tree (uncommitted changes are not in HEAD).
#
# Environment: IMAGE_REPRO_ARCHES (default "amd64 arm64"), IMAGE_REPRO_DIR (default <target>/image-repro), IMAGE_REPRO_KEEP=1 keeps the clone's build.
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

read -r -a arches <<<"${IMAGE_REPRO_ARCHES:-amd64 arm64}"
host=$(case $(uname -m) in x86_64) echo amd64 ;; aarch64) echo arm64 ;; esac)
# out_of DIR ARCH: where hack/image.sh writes ARCH's image (the default place for the build machine's own).
out_of() { if [ "$2" = "$host" ]; then echo "$1/image"; else echo "$1/image-linux-$2"; fi; }
declare -A first
for a in "${arches[@]}"; do
  phalanx::log "build 1 of 2, linux/$a: this checkout ($PHALANX_ROOT)"
  IMAGE_ARCH=$a IMAGE_OUT=$(out_of "$target" "$a") "$here/image.sh" | sed -u "s/^/  [build 1 $a] /"
  first[$a]=$(cat "$(out_of "$target" "$a")/digest")
done

src=$dir/phalanx
phalanx::log "build 2 of 2: a fresh clone of $head in $src"
rm -rf "$dir"; mkdir -p "$dir"
git clone --quiet --no-hardlinks "$PHALANX_ROOT" "$src"
git -C "$src" checkout --quiet --detach "$head"
failed=0
for a in "${arches[@]}"; do
  t=$SECONDS
  ( cd "$src" && env -u CARGO_TARGET_DIR IMAGE_ARCH="$a" IMAGE_OUT="$(out_of "$src/target" "$a")" hack/image.sh ) |
    sed -u "s/^/  [build 2 $a] /"
  second=$(cat "$(out_of "$src/target" "$a")/digest")
  phalanx::log "build 2 of linux/$a took $(( SECONDS - t )) s"
  echo "[image-reproducible] linux/$a build 1 ($PHALANX_ROOT): ${first[$a]}"
  echo "[image-reproducible] linux/$a build 2 ($src): $second"
  if [ "${first[$a]}" != "$second" ]; then
    echo "[image-reproducible] linux/$a: the digests differ: compare $(out_of "$target" "$a")/oci with $(out_of "$src/target" "$a")/oci" >&2
    failed=1
  fi
done
[ "${IMAGE_REPRO_KEEP:-0}" = 1 ] || rm -rf "$src/target/release" "$src/target/"*-unknown-linux-musl
[ "$failed" = 0 ] || exit 1
echo "[image-reproducible] one digest per platform (${arches[*]}) from two builds of $head"
