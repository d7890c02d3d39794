#!/usr/bin/env bash
# `make image`: the Phalanx container image, built without a container engine. It is the image the Containerfile
# describes (one statically linked `phalanx` binary in /usr/local/bin, user 65532:65532, ENTRYPOINT ["phalanx"],
# CMD ["run"], OCI labels), written as one archive that `docker load`, `podman load` and `crane push` accept:
#
#   target/image/phalanx-<version>-linux-<arch>.tar   the archive: an OCI image layout (oci-layout, index.json,
#                                                      blobs/sha256/...) plus the manifest.json of `docker save`
#   target/image/oci/                                  the same layout unpacked (`crane push` keeps its digest)
#   target/image/digest                                the manifest digest (sha256:...)
#
# Reproducible: the archive's bytes depend only on the commit (and the toolchain). Every timestamp is
# SOURCE_DATE_EPOCH (the commit time unless set), tar entries are sorted with owner 0:0, gzip stores no name or
# time, the JSON documents are written in one fixed form, and the binary is built with --locked and with the
# checkout's and cargo's paths remapped. Building twice from one commit gives the same digest
# (crates/phalanx/tests/image.rs checks the packaging; the README gives the two-build check).
#
# The binary is built for <cpu>-unknown-linux-musl by hack/build-static.sh (static, so the image holds nothing but
# it): the build machine's architecture by default, or the other one with IMAGE_ARCH (cross-compiled; that script
# says what it needs). hack/release.sh builds both and joins them in one multi-platform index.
#
# Environment: IMAGE_REPOSITORY (default: the chart's image.repository), IMAGE_TAG (default: the version),
# IMAGE_ARCH (amd64 or arm64; default the build machine's), IMAGE_OUT (default <target>/image), SOURCE_DATE_EPOCH,
# CARGO_TARGET_DIR (cargo's usual meaning), IMAGE_SKIP_BUILD=1 (package the binary already built).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"
cd "$PHALANX_ROOT"

total=6; step=0
progress() { step=$((step+1)); echo "[image $step/$total $(date +%H:%M:%S)] $*"; }
for b in git tar gzip jq sha256sum readelf; do command -v "$b" >/dev/null || phalanx::die "'$b' is required but not on PATH"; done

# --- 1. what is built: version, commit, timestamps, names ---------------------------------------------------
toml_value() { sed -n "/^\[$1\]/,/^\[/s/^$2 = \"\(.*\)\"/\1/p" "$3" | head -1; }
VERSION=$(toml_value workspace.package version Cargo.toml)
SOURCE_URL=$(toml_value workspace.package repository Cargo.toml)
LICENSE=$(toml_value workspace.package license Cargo.toml)
if [ -z "$VERSION" ] || [ -z "$SOURCE_URL" ] || [ -z "$LICENSE" ]; then
  phalanx::die "version, repository or license missing in Cargo.toml [workspace.package]"
fi
chart_repo=$(sed -n 's/^  repository: *//p' charts/phalanx/values.yaml | head -1)
REPOSITORY=${IMAGE_REPOSITORY:-$chart_repo}
TAG=${IMAGE_TAG:-$VERSION}
REF=$REPOSITORY:$TAG
REVISION=$(git rev-parse HEAD)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  phalanx::log "warning: uncommitted changes; the image is not the one commit $REVISION gives"
  REVISION=$REVISION-dirty
fi
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct HEAD)}
CREATED=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
case ${IMAGE_ARCH:-$(uname -m)} in
  x86_64 | amd64) ARCH=amd64 CPU=x86_64 ;;
  aarch64 | arm64) ARCH=arm64 CPU=aarch64 ;;
  *) phalanx::die "unsupported architecture ${IMAGE_ARCH:-$(uname -m)} (amd64 and arm64 are)" ;;
esac
RUST_TARGET=$CPU-unknown-linux-musl
TARGET_DIR=${CARGO_TARGET_DIR:-$PHALANX_ROOT/target}
mkdir -p "$TARGET_DIR"
TARGET_DIR=$(cd "$TARGET_DIR" && pwd)
BIN=$TARGET_DIR/$RUST_TARGET/release/phalanx
OUT=${IMAGE_OUT:-$TARGET_DIR/image}
ARCHIVE=$OUT/phalanx-$VERSION-linux-$ARCH.tar
progress "$REF for linux/$ARCH from $REVISION (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH, $CREATED)"

# --- 2. crane: validates the archive (step 6) ---------------------------------------------------------------
progress "crane (hack/build-crane.sh)"
CRANE=$("$here/build-crane.sh")

# --- 3. the binary -------------------------------------------------------------------------------------------
if [ "${IMAGE_SKIP_BUILD:-0}" = 1 ]; then
  progress "phalanx binary: IMAGE_SKIP_BUILD=1, packaging $BIN as built"
  [ -x "$BIN" ] || phalanx::die "IMAGE_SKIP_BUILD=1 but $BIN does not exist; run 'make image' once"
else
  progress "phalanx binary for $RUST_TARGET (hack/build-static.sh; cargo build --release --locked, 10-20 min cold)"
  "$here/build-static.sh" "$ARCH" phalanx >/dev/null
fi
# Nothing but the binary goes into the image, so it must need nothing: no interpreter, no shared library.
if readelf -lW "$BIN" | grep -q 'INTERP' || readelf -dW "$BIN" | grep -q '(NEEDED)'; then
  phalanx::die "$BIN is not statically linked: $(readelf -dW "$BIN" | grep '(NEEDED)' | tr -s ' ' | tr '\n' ';')"
fi
echo "  $BIN: statically linked, $(stat -c %s "$BIN") bytes"

# --- 4. the layer: /usr/local/bin/phalanx ---------------------------------------------------------------------
progress "layer: /usr/local/bin/phalanx (sorted entries, mtime $CREATED, owner 0:0)"
work=$(mktemp -d "${TMPDIR:-/tmp}/phalanx-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
# reproducible_tar OUT DIR PATHS...: a ustar archive of PATHS inside DIR whose bytes depend only on their content.
reproducible_tar() {
  local out=$1 dir=$2; shift 2
  tar --create --file "$out" --directory "$dir" --format=ustar --sort=name --mtime="@$SOURCE_DATE_EPOCH" \
    --owner=0 --group=0 --numeric-owner --no-recursion "$@"
}
root=$work/rootfs
mkdir -p "$root/usr/local/bin"
install -m 0755 "$BIN" "$root/usr/local/bin/phalanx"
chmod 0755 "$root/usr" "$root/usr/local" "$root/usr/local/bin"
reproducible_tar "$work/layer.tar" "$root" usr usr/local usr/local/bin usr/local/bin/phalanx
diff_id=sha256:$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
gzip -n -9 "$work/layer.tar"
echo "  $(stat -c %s "$work/layer.tar.gz") bytes compressed"

# --- 5. config, manifest, index (OCI image spec v1.1) and docker's manifest.json ----------------------------
progress "image config, manifest and index"
rm -rf "$OUT/oci"
blobs=$OUT/oci/blobs/sha256
mkdir -p "$blobs"
# blob FILE: moves FILE into the layout under its digest; prints "DIGEST SIZE".
blob() {
  local h s; h=$(sha256sum "$1" | cut -d' ' -f1); s=$(stat -c %s "$1")
  mv "$1" "$blobs/$h"; echo "sha256:$h $s"
}
read -r layer_digest layer_size < <(blob "$work/layer.tar.gz")
# The labels are the Containerfile's (the image test compares them), plus revision and created.
jq -cnS --arg created "$CREATED" --arg arch "$ARCH" --arg diff "$diff_id" --arg src "$SOURCE_URL" \
  --arg ver "$VERSION" --arg lic "$LICENSE" --arg rev "$REVISION" '{
    created: $created, architecture: $arch, os: "linux",
    config: {
      User: "65532:65532", Env: ["PATH=/usr/local/bin"], Entrypoint: ["phalanx"], Cmd: ["run"],
      Labels: {
        "org.opencontainers.image.title": "phalanx",
        "org.opencontainers.image.description": "Phalanx: gang scheduling for Kubernetes",
        "org.opencontainers.image.source": $src, "org.opencontainers.image.version": $ver,
        "org.opencontainers.image.licenses": $lic, "org.opencontainers.image.revision": $rev,
        "org.opencontainers.image.created": $created
      }
    },
    rootfs: {type: "layers", diff_ids: [$diff]},
    history: [{created: $created, created_by: "COPY phalanx /usr/local/bin/phalanx (hack/image.sh)"}]
  }' | tr -d '\n' >"$work/config.json"
read -r config_digest config_size < <(blob "$work/config.json")
jq -cnS --arg cd "$config_digest" --argjson cs "$config_size" --arg ld "$layer_digest" --argjson ls "$layer_size" '{
    schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $cd, size: $cs},
    layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: $ld, size: $ls}]
  }' | tr -d '\n' >"$work/manifest.json"
read -r manifest_digest manifest_size < <(blob "$work/manifest.json")
# The names: io.containerd.image.name for docker's containerd store and containerd, ref.name (the full reference,
# as `crane pull --annotate-ref` writes it) for podman; docker's classic store reads RepoTags of manifest.json.
jq -cnS --arg md "$manifest_digest" --argjson ms "$manifest_size" --arg arch "$ARCH" --arg ref "$REF" '{
    schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
    manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $md, size: $ms,
      platform: {architecture: $arch, os: "linux"},
      annotations: {"io.containerd.image.name": $ref, "org.opencontainers.image.ref.name": $ref}}]
  }' >"$OUT/oci/index.json"
printf '{"imageLayoutVersion":"1.0.0"}\n' >"$OUT/oci/oci-layout"
jq -cn --arg c "blobs/sha256/${config_digest#sha256:}" --arg l "blobs/sha256/${layer_digest#sha256:}" \
  --arg ref "$REF" '[{Config: $c, RepoTags: [$ref], Layers: [$l]}]' >"$OUT/oci/manifest.json"
find "$OUT/oci" -exec chmod go-w,a+r {} +

# --- 6. the archive, checked by crane -------------------------------------------------------------------------
progress "archive $ARCHIVE"
# (--sort=name orders what tar finds in directories; the entries named here are sorted first.)
mapfile -t entries < <(printf '%s\n' blobs blobs/sha256 "blobs/sha256/${config_digest#sha256:}" \
  "blobs/sha256/${layer_digest#sha256:}" "blobs/sha256/${manifest_digest#sha256:}" index.json manifest.json oci-layout |
  LC_ALL=C sort)
reproducible_tar "$ARCHIVE.tmp" "$OUT/oci" "${entries[@]}"
mv "$ARCHIVE.tmp" "$ARCHIVE"
"$CRANE" validate --tarball "$ARCHIVE" | sed -u 's/^/  crane validate: /'
echo "$manifest_digest" >"$OUT/digest"
echo "  $REF"
echo "  digest $manifest_digest, archive $(stat -c %s "$ARCHIVE") bytes"
echo "[image] load it with: docker load -i $ARCHIVE   (or podman load -i; push: crane push $OUT/oci <registry>/phalanx:$TAG)"
