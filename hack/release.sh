#!/usr/bin/env bash
# `make release REGISTRY=... [VERSION=...]`: one release of Phalanx, made by one command that anybody with push rights
# to REGISTRY runs (the tag workflow, .github/workflows/release.yml, runs exactly this). It
#   1. checks the version: Cargo.toml's [workspace.package] version is the binary's, the image tag and the chart's
#      appVersion and version; CHANGELOG.md has its entry; VERSION, when given, must be it;
#   2. builds the static binaries `phalanx` and `kubectl-phalanx` for linux/amd64 and linux/arm64
#      (hack/build-static.sh: the other architecture is cross-compiled, no container engine);
#   3. packages one image per platform (hack/image.sh) and joins them in one multi-platform OCI index;
#   4. packages the chart with the image's repository and index digest as its defaults (helm package);
#   5. writes per-platform archives of the two binaries, the SBOM (CycloneDX, from Cargo.lock, by cargo-cyclonedx),
#      the krew plugin manifest and sha256sums.txt;
#   6. pushes the image index ($REGISTRY/phalanx:VERSION, crane) and the chart (oci://$REGISTRY/charts, helm push),
#      and checks that the registry serves the digests it computed. --dry-run stops before this step.
#
#   hack/release.sh --registry ghcr.io/<owner> [--version X.Y.Z] [--dry-run] [--plain-http]
#
# Output: <target>/dist/<version>/ holds everything a GitHub release attaches (the archives, sha256sums.txt, the
# SBOM, the chart archive, the krew manifest plugins/phalanx.yaml) and release.env (the references and digests, for
# scripts and tests). The images are reproducible (one digest per platform from one commit, as `make image`).
#
# Options and environment:
#   --registry REG / REGISTRY         where the image (REG/phalanx) and the chart (oci://REG/charts) go
#   --version V / VERSION             must equal Cargo.toml's version (a guard against releasing the wrong tree)
#   --dry-run                         build and package everything, push nothing
#   --plain-http / RELEASE_PLAIN_HTTP=1   the registry speaks HTTP (a loopback test registry)
#   RELEASE_ARCHES                    default "amd64 arm64"
#   RELEASE_DOWNLOAD_URL              base of the archives' URLs in the krew manifest, default
#                                     <repository>/releases/download/v<version> (Cargo.toml's repository)
#   REGISTRY_USERNAME, REGISTRY_PASSWORD   when both are set: `crane auth login` and `helm registry login` first
#   CARGO_TARGET_DIR                  cargo's usual meaning
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"
# shellcheck source=hack/versions.sh
source "$here/versions.sh"
cd "$PHALANX_ROOT"

registry=${REGISTRY:-}
want_version=${VERSION:-}
dry_run=0
plain_http=${RELEASE_PLAIN_HTTP:-0}
while [ $# -gt 0 ]; do
  case $1 in
    --registry) registry=${2:?--registry needs a value}; shift 2 ;;
    --registry=*) registry=${1#*=}; shift ;;
    --version) want_version=${2:?--version needs a value}; shift 2 ;;
    --version=*) want_version=${1#*=}; shift ;;
    --dry-run) dry_run=1; shift ;;
    --plain-http) plain_http=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) phalanx::die "unknown argument '$1' (--help)" ;;
  esac
done
registry=${registry%/}
[ -n "$registry" ] || phalanx::die "no registry: make release REGISTRY=ghcr.io/<owner> (or --registry)"
read -r -a arches <<<"${RELEASE_ARCHES:-amd64 arm64}"
total=$((6 + ${#arches[@]})); step=0
progress() { step=$((step+1)); echo "[release $step/$total $(date +%H:%M:%S)] $*"; }
for b in git tar gzip jq sha256sum readelf; do command -v "$b" >/dev/null || phalanx::die "'$b' is required but not on PATH"; done

# --- 1. one version ------------------------------------------------------------------------------------------
toml_value() { sed -n "/^\[$1\]/,/^\[/s/^$2 = \"\(.*\)\"/\1/p" "$3" | head -1; }
chart_value() { sed -n "s/^$1: *\"\{0,1\}\([^\"]*\)\"\{0,1\} *$/\1/p" charts/phalanx/Chart.yaml | head -1; }
version=$(toml_value workspace.package version Cargo.toml)
repo_url=$(toml_value workspace.package repository Cargo.toml)
[ -n "$version" ] || phalanx::die "no version in Cargo.toml [workspace.package]"
if [ -n "$want_version" ] && [ "${want_version#v}" != "$version" ]; then
  phalanx::die "VERSION=$want_version but Cargo.toml says $version: bump [workspace.package] version (and the chart, CHANGELOG.md) first"
fi
[ "$(chart_value appVersion)" = "$version" ] ||
  phalanx::die "charts/phalanx/Chart.yaml appVersion is '$(chart_value appVersion)', Cargo.toml's version $version"
[ "$(chart_value version)" = "$version" ] ||
  phalanx::die "charts/phalanx/Chart.yaml version is '$(chart_value version)', Cargo.toml's version $version"
grep -q "^## \[$version\]" CHANGELOG.md || phalanx::die "CHANGELOG.md has no entry '## [$version]'"
grep -q "org.opencontainers.image.version=\"$version\"" Containerfile ||
  phalanx::die "Containerfile's org.opencontainers.image.version label is not $version"
revision=$(git rev-parse HEAD)
[ -z "$(git status --porcelain --untracked-files=no)" ] ||
  phalanx::log "warning: uncommitted changes: the release is not the one commit $revision gives"
git tag --points-at HEAD | grep -qx "v$version" ||
  phalanx::log "warning: HEAD is not tagged v$version (the tag workflow releases tags; tag it: git tag v$version)"
image_repo=$registry/phalanx
chart_repo=oci://$registry/charts
target_dir=${CARGO_TARGET_DIR:-$PHALANX_ROOT/target}
mkdir -p "$target_dir"
target_dir=$(cd "$target_dir" && pwd)
out=$target_dir/dist/$version
rm -rf "$out"; mkdir -p "$out/plugins"
progress "Phalanx $version ($revision) for ${arches[*]} -> $image_repo:$version, $chart_repo/phalanx:$version$([ $dry_run = 1 ] && echo ' (dry run: nothing is pushed)')"

# --- 2. tools -------------------------------------------------------------------------------------------------
progress "tools: crane, helm, cargo-cyclonedx"
crane=$("$here/build-crane.sh")
helm=$(command -v helm || true)
[ -n "$helm" ] || helm=$PHALANX_BIN_DIR/helm
[ -x "$helm" ] || phalanx::die "helm not found on PATH nor in $PHALANX_BIN_DIR: make bins builds it ($HELM_VERSION)"
cyclonedx=$("$here/build-sbom-tool.sh")
http_flag=()
[ "$plain_http" = 1 ] && http_flag=(--plain-http)
crane_flags=()
[ "$plain_http" = 1 ] && crane_flags=(--insecure)
if [ -n "${REGISTRY_USERNAME:-}" ] && [ -n "${REGISTRY_PASSWORD:-}" ]; then
  host=${registry%%/*}
  echo "  logging in to $host as $REGISTRY_USERNAME"
  "$crane" auth login "$host" -u "$REGISTRY_USERNAME" --password-stdin <<<"$REGISTRY_PASSWORD" >/dev/null
  "$helm" registry login "$host" -u "$REGISTRY_USERNAME" --password-stdin <<<"$REGISTRY_PASSWORD" >/dev/null
fi

# --- 3. binaries and one image per platform -------------------------------------------------------------------
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct HEAD)}
# reproducible_tar OUT DIR PATHS...: a ustar archive of PATHS inside DIR whose bytes depend only on their content.
reproducible_tar() {
  local o=$1 d=$2; shift 2
  tar --create --file "$o" --directory "$d" --format=ustar --sort=name --mtime="@$SOURCE_DATE_EPOCH" \
    --owner=0 --group=0 --numeric-owner "$@"
}
declare -A manifest_of
for arch in "${arches[@]}"; do
  progress "linux/$arch: phalanx and kubectl-phalanx (hack/build-static.sh), image (hack/image.sh)"
  bin_dir=$("$here/build-static.sh" "$arch" phalanx kubectl-phalanx)
  IMAGE_ARCH=$arch IMAGE_SKIP_BUILD=1 IMAGE_OUT=$out/image-linux-$arch IMAGE_REPOSITORY=$image_repo IMAGE_TAG=$version \
    "$here/image.sh" | sed -u 's/^/  /'
  manifest_of[$arch]=$(cat "$out/image-linux-$arch/digest")
  # The archive a user (or krew) downloads: both binaries, the licence and the README, at the archive's top level.
  stage=$(mktemp -d "${TMPDIR:-/tmp}/phalanx-release.XXXXXX")
  install -m 0755 "$bin_dir/phalanx" "$bin_dir/kubectl-phalanx" "$stage/"
  install -m 0644 LICENSE README.md "$stage/"
  reproducible_tar "$out/phalanx-$version-linux-$arch.tar" "$stage" LICENSE README.md kubectl-phalanx phalanx
  gzip -n -9 -f "$out/phalanx-$version-linux-$arch.tar"
  rm -rf "$stage"
done

# --- 4. the multi-platform index ------------------------------------------------------------------------------
progress "image index: ${arches[*]}"
layout=$out/oci
mkdir -p "$layout/blobs/sha256"
entries='[]'
for arch in "${arches[@]}"; do
  cp -f "$out/image-linux-$arch/oci/blobs/sha256/"* "$layout/blobs/sha256/"
  m=${manifest_of[$arch]}
  size=$(stat -c %s "$layout/blobs/sha256/${m#sha256:}")
  entries=$(jq -cS --arg d "$m" --argjson s "$size" --arg a "$arch" \
    '. + [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $d, size: $s, platform: {architecture: $a, os: "linux"}}]' <<<"$entries")
done
jq -cnS --argjson m "$entries" --arg src "$repo_url" --arg ver "$version" --arg rev "$revision" \
  '{schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json", manifests: $m,
    annotations: {"org.opencontainers.image.source": $src, "org.opencontainers.image.version": $ver,
                  "org.opencontainers.image.revision": $rev}}' | tr -d '\n' >"$out/index.tmp"
index_digest=sha256:$(sha256sum "$out/index.tmp" | cut -d' ' -f1)
index_size=$(stat -c %s "$out/index.tmp")
mv "$out/index.tmp" "$layout/blobs/sha256/${index_digest#sha256:}"
jq -cnS --arg d "$index_digest" --argjson s "$index_size" --arg ref "$image_repo:$version" \
  '{schemaVersion: 2, manifests: [{mediaType: "application/vnd.oci.image.index.v1+json", digest: $d, size: $s,
    annotations: {"org.opencontainers.image.ref.name": $ref}}]}' >"$layout/index.json"
printf '{"imageLayoutVersion":"1.0.0"}\n' >"$layout/oci-layout"
echo "  $image_repo:$version@$index_digest"
for arch in "${arches[@]}"; do echo "    linux/$arch ${manifest_of[$arch]}"; done

# --- 5. chart, SBOM, krew manifest, checksums -----------------------------------------------------------------
progress "chart $version (image $image_repo@$index_digest), SBOM, krew manifest, sha256sums.txt"
chart_dir=$(mktemp -d "${TMPDIR:-/tmp}/phalanx-chart.XXXXXX")
cp -r charts/phalanx "$chart_dir/"
# The released chart installs the released image by default: its repository, and the index digest pinned.
sed -i "s#^  repository: .*#  repository: $image_repo#; s#^  digest: .*#  digest: \"$index_digest\"#" \
  "$chart_dir/phalanx/values.yaml"
grep -q "^  digest: \"$index_digest\"" "$chart_dir/phalanx/values.yaml" || phalanx::die "values.yaml has no image.digest"
"$helm" lint "$chart_dir/phalanx" >/dev/null || phalanx::die "helm lint of the release's chart failed"
"$helm" package "$chart_dir/phalanx" --version "$version" --app-version "$version" -d "$out" | sed 's/^/  /'
rm -rf "$chart_dir"
# CycloneDX JSON of the `phalanx` package (both binaries) from Cargo.lock, for the image and the archives alike.
sbom_dir=$(mktemp -d "${TMPDIR:-/tmp}/phalanx-sbom.XXXXXX")
cp -r Cargo.toml Cargo.lock crates tests "$sbom_dir/"
(cd "$sbom_dir" && "$cyclonedx" cyclonedx --manifest-path crates/phalanx/Cargo.toml --format json --spec-version 1.5 \
  --target x86_64-unknown-linux-musl --override-filename sbom >/dev/null) ||
  phalanx::die "cargo cyclonedx failed"
jq -S . "$sbom_dir/crates/phalanx/sbom.json" >"$out/phalanx-$version.cdx.json"
rm -rf "$sbom_dir"
echo "  $(jq '.components | length' "$out/phalanx-$version.cdx.json") components in phalanx-$version.cdx.json"
download=${RELEASE_DOWNLOAD_URL:-$repo_url/releases/download/v$version}
{
  cat <<EOF
# The krew plugin manifest of kubectl-phalanx $version, written by hack/release.sh (do not edit by hand).
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: phalanx
spec:
  version: v$version
  homepage: $repo_url
  shortDescription: Explain and simulate Phalanx gang scheduling
  description: |
    kubectl phalanx explains why a PodGroup is pending (which member, which node, which filter) and simulates
    where a gang would be placed, from the cluster's own objects. It talks to the API server only; Phalanx itself is
    installed with its Helm chart.
  platforms:
EOF
  for arch in "${arches[@]}"; do
    f=phalanx-$version-linux-$arch.tar.gz
    cat <<EOF
  - selector:
      matchLabels: {os: linux, arch: $arch}
    uri: $download/$f
    sha256: $(sha256sum "$out/$f" | cut -d' ' -f1)
    files:
    - {from: kubectl-phalanx, to: .}
    - {from: LICENSE, to: .}
    bin: kubectl-phalanx
EOF
  done
} >"$out/plugins/phalanx.yaml"
(cd "$out" && sha256sum -- phalanx-"$version"-linux-*.tar.gz "phalanx-$version.tgz" "phalanx-$version.cdx.json" \
  plugins/phalanx.yaml >sha256sums.txt)
sed 's/^/  /' "$out/sha256sums.txt"
cat >"$out/release.env" <<EOF
VERSION=$version
REVISION=$revision
IMAGE=$image_repo:$version@$index_digest
IMAGE_INDEX_DIGEST=$index_digest
$(for arch in "${arches[@]}"; do echo "IMAGE_DIGEST_${arch^^}=${manifest_of[$arch]}"; done)
CHART=$chart_repo/phalanx
CHART_VERSION=$version
EOF

# --- 6. push ----------------------------------------------------------------------------------------------------
if [ "$dry_run" = 1 ]; then
  progress "dry run: would push $image_repo:$version ($index_digest) and $chart_repo/phalanx:$version"
else
  progress "push $image_repo:$version and $chart_repo/phalanx:$version"
  "$crane" push "${crane_flags[@]}" "$layout" "$image_repo:$version" 2>&1 | sed 's/^/  crane: /'
  served=$("$crane" digest "${crane_flags[@]}" "$image_repo:$version")
  [ "$served" = "$index_digest" ] || phalanx::die "the registry serves $served for $image_repo:$version, not $index_digest"
  for arch in "${arches[@]}"; do
    got=$("$crane" digest "${crane_flags[@]}" --platform "linux/$arch" "$image_repo:$version")
    [ "$got" = "${manifest_of[$arch]}" ] || phalanx::die "linux/$arch resolves to $got, not ${manifest_of[$arch]}"
  done
  "$helm" push "${http_flag[@]}" "$out/phalanx-$version.tgz" "$chart_repo" 2>&1 | sed 's/^/  helm: /'
fi

# --- 7. summary ---------------------------------------------------------------------------------------------------
progress "done: $out"
echo "  image  $image_repo:$version@$index_digest"
echo "  chart  helm install phalanx $chart_repo/phalanx --version $version -n phalanx-system --create-namespace"
echo "  files  $(cd "$out" && ls -- *.tar.gz *.tgz *.cdx.json sha256sums.txt plugins/phalanx.yaml | tr '\n' ' ')"
