#!/usr/bin/env bash
# Generates the wrapper module that builds the Kubernetes binaries of one version:
#   hack/gen-k8s-mod.sh DIR [VERSION]      (VERSION default: $K8S_VERSION of hack/versions.sh)
# writes DIR/go.mod and DIR/go.sum from scratch: every staging module k8s.io/X that upstream's go.mod replaces with
# ./staging/src/k8s.io/X is replaced by the published k8s.io/X at the matching v0.minor.patch, and the module requires
# k8s.io/kubernetes@VERSION and its commands as tools. Starting from an empty module matters: the versions of the
# other dependencies are then the ones that Kubernetes version asks for (minimal version selection never lowers a
# version already required, so a module generated for 1.37 cannot build 1.34). hack/build-bins.sh keeps one such
# module per minor version in hack/k8s-bins/<v1.minor>/ (commit them) and calls this for a version it has none of.
# Needs Go and the module proxy; builds nothing. 1.38 needs Go >= 1.27: phalanx::k8s_go_env pins the toolchain
# hack/versions.sh names for that version (K8S_GOTOOLCHAIN), so the generated go.mod says `go 1.27.0`.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"
dir=${1:?usage: hack/gen-k8s-mod.sh DIR [VERSION]}
if [ -n "${2:-}" ]; then K8S_VERSION=$2; fi
# shellcheck source=hack/versions.sh
source "$here/versions.sh"
phalanx::k8s_go_env
mkdir -p "$dir"
cd "$dir"
printf 'module example.invalid/phalanx/k8sbins\n\ngo 1.26.0\n' >go.mod
rm -f go.sum
phalanx::log "k8s.io/kubernetes@$K8S_VERSION: staging replaces (at $K8S_STAGING_VERSION) from its go.mod"
kmod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
[ -f "$kmod" ] || phalanx::die "no go.mod for k8s.io/kubernetes@$K8S_VERSION from the module proxy"
n=0
while read -r m; do go mod edit -replace="$m=$m@$K8S_STAGING_VERSION"; n=$((n+1)); done < <(
  grep -E '^[[:space:]]*k8s\.io/[A-Za-z0-9._-]+ => \./staging/' "$kmod" | awk '{print $1}' | sort -u)
[ "$n" -gt 0 ] || phalanx::die "no staging replaces found in $kmod"
go mod edit -require="k8s.io/kubernetes@$K8S_VERSION"
go get "k8s.io/kubernetes@$K8S_VERSION"
for c in "${PHALANX_K8S_BINS[@]}"; do go get -tool "k8s.io/kubernetes/cmd/$c@$K8S_VERSION"; done
phalanx::log "wrote $dir/go.mod ($n staging replaces) and go.sum for Kubernetes $K8S_VERSION"
