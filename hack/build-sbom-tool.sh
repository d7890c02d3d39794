#!/usr/bin/env bash
# Installs cargo-cyclonedx (crates.io, CYCLONEDX_VERSION in versions.sh) into $CYCLONEDX_BIN_DIR with
# `cargo install --locked`, outside the repo and keyed by version; hack/release.sh runs it to write the release's
# SBOM. What is already there is not rebuilt; a cold install compiles for about two minutes on 2 cores.
# Prints the path of the binary on stdout; progress goes to stderr.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/versions.sh
source "$here/versions.sh"
out=$CYCLONEDX_BIN_DIR
bin=$out/bin/cargo-cyclonedx
if [ -x "$bin" ]; then
  echo "[build-sbom-tool] cargo-cyclonedx $CYCLONEDX_VERSION cached in $out" >&2
  echo "$bin"
  exit 0
fi
command -v cargo >/dev/null || { echo "build-sbom-tool: cargo not found: install Rust (https://rustup.rs)" >&2; exit 1; }
command -v flock >/dev/null || { echo "build-sbom-tool: flock (util-linux) is required" >&2; exit 1; }
mkdir -p "$out"
exec 9>"$out/.build.lock"
if ! flock -n 9; then echo "[build-sbom-tool] another install holds $out/.build.lock; waiting" >&2; flock 9; fi
if [ ! -x "$bin" ]; then
  echo "[build-sbom-tool $(date +%H:%M:%S)] cargo install cargo-cyclonedx $CYCLONEDX_VERSION (about two minutes cold)" >&2
  # Its own target dir: the project's CARGO_TARGET_DIR must not receive a tool's build.
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/phalanx-cyclonedx.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  CARGO_TARGET_DIR=$tmp cargo install --locked --quiet --version "$CYCLONEDX_VERSION" --root "$out" cargo-cyclonedx >&2
fi
[ -x "$bin" ] || { echo "build-sbom-tool: cargo install left no $bin" >&2; exit 1; }
echo "$bin"
