#!/usr/bin/env bash
# Builds statically linked release binaries of the `phalanx` package for linux/<arch>, reproducibly: the image's
# binary (hack/image.sh) and the release archives (hack/release.sh) come from here, so both hold the same bytes.
#
#   hack/build-static.sh ARCH BIN...     ARCH: amd64 or arm64; BIN: phalanx, kubectl-phalanx
#
# Prints the directory that holds the binaries (<target>/<rust target>/release) on stdout; cargo's lines go to stderr.
#
# Target <arch>-unknown-linux-musl (static: the image holds nothing but the binary). The target's standard library
# is added with `rustup target add` when missing. ring's C and assembly need a C compiler for the target:
#   - the build machine's own architecture: musl-gcc when present, else the system's cc (as before);
#   - the other one (cross): gcc-<arch>-linux-gnu from the distribution (Debian/Ubuntu package
#     gcc-aarch64-linux-gnu or gcc-x86-64-linux-gnu; installed with apt-get when running as root), with rustc's own
#     rust-lld as the linker against the musl target's self-contained C runtime. No container engine, no zig.
#
# Reproducible: --locked, the checkout's, target dir's and cargo home's paths remapped, symbols stripped, no
# incremental compilation, and the C compiler's SOURCE_DATE_EPOCH pinned to the last change of Cargo.lock.
#
# Environment: CARGO_TARGET_DIR (cargo's usual meaning), CC (the native C compiler).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"
cd "$PHALANX_ROOT"

[ $# -ge 2 ] || phalanx::die "usage: hack/build-static.sh amd64|arm64 BIN..."
arch=$1; shift
case $arch in
  amd64) cpu=x86_64 ;;
  arm64) cpu=aarch64 ;;
  *) phalanx::die "unsupported architecture '$arch' (amd64 and arm64 are)" ;;
esac
rust_target=$cpu-unknown-linux-musl
target_var=$(echo "$rust_target" | tr '[:lower:]-' '[:upper:]_')
cc_var=CC_$(echo "$rust_target" | tr - _)
command -v cargo >/dev/null || phalanx::die "cargo not found: install Rust (https://rustup.rs)"
if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx "$rust_target"; then
  echo "  rustup target add $rust_target" >&2
  rustup target add "$rust_target" >&2
fi

if [ "$cpu" = "$(uname -m)" ]; then
  # cc-rs looks for musl-gcc for this target; plain gcc compiles ring's C and assembly for it as well.
  if ! command -v musl-gcc >/dev/null && ! command -v "$cpu-linux-musl-gcc" >/dev/null; then
    export "$cc_var=${CC:-cc}"
  fi
else
  cross_cc=$cpu-linux-gnu-gcc
  if ! command -v "$cross_cc" >/dev/null; then
    pkg=gcc-${cpu//_/-}-linux-gnu
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "  $cross_cc missing: apt-get install $pkg (the cross C compiler for ring)" >&2
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg"; } >&2 ||
        phalanx::die "apt-get install $pkg failed"
    else
      phalanx::die "$cross_cc not found: install the cross C compiler (Debian/Ubuntu: apt-get install $pkg)"
    fi
  fi
  export "$cc_var=$cross_cc"
  # rustc's bundled lld links against the musl target's self-contained crt and libc: no cross linker needed.
  export "CARGO_TARGET_${target_var}_LINKER=rust-lld"
fi

target_dir=${CARGO_TARGET_DIR:-$PHALANX_ROOT/target}
mkdir -p "$target_dir"
target_dir=$(cd "$target_dir" && pwd)
cargo_home=${CARGO_HOME:-$HOME/.cargo}
# Paths of this checkout, of the target dir and of cargo's registry are remapped so that the bytes do not depend on
# where they live (rustc applies the last matching prefix: the target dir, often inside the checkout, comes after it).
export RUSTFLAGS="--remap-path-prefix=$PHALANX_ROOT=/phalanx --remap-path-prefix=$target_dir=/target --remap-path-prefix=$cargo_home=/cargo -C strip=symbols"
# Incremental compilation may lay code out differently from one build to the next.
export CARGO_INCREMENTAL=0
# cc (ring's C code) passes SOURCE_DATE_EPOCH to the compiler and rebuilds when it changes: the compile gets the time
# of the last change of the dependencies (Cargo.lock), so a new commit does not rebuild them.
deps_epoch=$(git log -1 --format=%ct -- Cargo.lock)
bin_args=()
for b in "$@"; do bin_args+=(--bin "$b"); done
if ! SOURCE_DATE_EPOCH=$deps_epoch CARGO_TARGET_DIR=$target_dir cargo build --release --locked -p phalanx \
    "${bin_args[@]}" --target "$rust_target" 2>&1 | sed -u 's/^/  /' >&2; then
  phalanx::die "cargo build for $rust_target failed (output above)"
fi
out=$target_dir/$rust_target/release
# Nothing but the binary goes into the image, so it must need nothing: no interpreter, no shared library.
for b in "$@"; do
  f=$out/$b
  [ -x "$f" ] || phalanx::die "cargo built no $f"
  if readelf -lW "$f" | grep -q 'INTERP' || readelf -dW "$f" | grep -q '(NEEDED)'; then
    phalanx::die "$f is not statically linked: $(readelf -dW "$f" | grep '(NEEDED)' | tr -s ' ' | tr '\n' ';')"
  fi
  echo "  $f: linux/$arch, statically linked, $(stat -c %s "$f") bytes" >&2
done
echo "$out"
