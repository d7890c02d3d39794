#!/usr/bin/env bash
# Builds the control-plane binaries Phalanx tests against, from Go modules only:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok, helm
# plus kwok's stage definitions (kwok-stages/*.yaml, taken from kwok's module).
# They land in $PHALANX_BIN_DIR (outside the repo, keyed by version, see versions.sh); what is already there is
# not rebuilt, so a run with a full cache is a no-op that needs no Go toolchain.
# Why wrapper modules: k8s.io/kubernetes and etcd's server module carry replace directives, so
# `go install pkg@version` refuses them (see docs/testing.md).
#
# Environment: UPDATE_GOSUM=1 copies regenerated go.mod/go.sum back into hack/*/ (commit them);
# GOTOOLCHAIN_OVERRIDE=goX.Y.Z pins the Go toolchain (default auto: fetched from the module proxy if needed).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/versions.sh
source "$here/versions.sh"

out=$PHALANX_BIN_DIR
step=0; total=4
t_all=$SECONDS
progress() { step=$((step+1)); echo "[build-bins $step/$total $(date +%H:%M:%S)] $*"; }
took() { echo "  $(date +%H:%M:%S) $1 took $(( SECONDS - $2 )) s"; }
have() { for b in "$@"; do [ -x "$out/$b" ] || return 1; done; }
k8s_bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
kwok_stages=(node/fast/node-initialize pod/fast/pod-ready pod/fast/pod-delete pod/fast/pod-complete)
have_stages() { for s in "${kwok_stages[@]}"; do [ -f "$out/kwok-stages/$(basename "$s").yaml" ] || return 1; done; }

if have etcd "${k8s_bins[@]}" kwok helm && have_stages; then
  echo "[build-bins] all binaries cached in $out"
  exit 0
fi

command -v go >/dev/null || { echo "build-bins: Go 1.26+ is required to build the missing binaries (go not found on PATH)" >&2; exit 1; }
command -v flock >/dev/null || { echo "build-bins: flock (util-linux) is required" >&2; exit 1; }
mkdir -p "$out"
# One build at a time per cache: parallel test binaries or developers wait instead of racing on the same files.
exec 9>"$out/.build-bins.lock"
if ! flock -n 9; then
  echo "[build-bins] another build holds $out/.build-bins.lock; waiting for it"
  flock 9
fi

export GOTOOLCHAIN=${GOTOOLCHAIN_OVERRIDE:-auto}
# The checksum database may be unreachable; go.sum is committed, so module hashes are still verified against it.
export GONOSUMDB=${GONOSUMDB:-k8s.io,sigs.k8s.io,go.etcd.io,helm.sh}
export GOFLAGS="${GOFLAGS:-} -mod=mod"
export CGO_ENABLED=0

# Each step builds in a scratch copy of its wrapper module so that a clean clone is never dirtied;
# `UPDATE_GOSUM=1` copies a regenerated go.mod/go.sum back.
scratch_dirs=()
trap 'rm -rf "${scratch_dirs[@]}"' EXIT
scratch() {
  local dst; dst=$(mktemp -d "${TMPDIR:-/tmp}/phalanx-$1.XXXXXX")
  cp -r "$here/$1/." "$dst/"
  scratch_dirs+=("$dst")
  echo "$dst"
}
sync_back() { if [ "${UPDATE_GOSUM:-0}" = 1 ]; then cp "$1/go.mod" "$1/go.sum" "$here/$2/"; echo "  updated hack/$2/go.mod, go.sum"; fi; }
# gobuild OUT PKG [LDFLAGS]: build into OUT.tmp and rename, so an interrupted build never leaves a broken binary.
gobuild() { go build -trimpath -ldflags "${3:--s -w}" -o "$1.tmp" "$2" && mv "$1.tmp" "$1"; }

# 1. etcd: its own wrapper module so etcd's grpc/otel pins cannot move the apiserver's.
if have etcd; then progress "etcd $ETCD_VERSION cached"; else
  progress "etcd $ETCD_VERSION: building (1-4 min cold)"; t=$SECONDS
  d=$(scratch etcd-bin)
  ( cd "$d"
    if ! grep -q "go.etcd.io/etcd/server/v3 $ETCD_VERSION" go.mod 2>/dev/null; then
      go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION"; fi
    gobuild "$out/etcd" go.etcd.io/etcd/server/v3 )
  sync_back "$d" etcd-bin; took etcd $t
fi

# 2. Kubernetes: a wrapper module requiring k8s.io/kubernetes, with every staging replace generated from
#    upstream's own go.mod (never by hand).
if have "${k8s_bins[@]}"; then progress "kubernetes $K8S_VERSION cached"; else
  progress "kubernetes $K8S_VERSION: building ${k8s_bins[*]} (15-30 min cold, 3-5 GB RAM)"; t=$SECONDS
  d=$(scratch k8s-bins)
  ( cd "$d"
    if ! grep -q "k8s.io/kubernetes $K8S_VERSION" go.mod 2>/dev/null; then
      echo "  generating staging replaces from k8s.io/kubernetes@$K8S_VERSION go.mod"
      kmod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')
      grep -E '^[[:space:]]*k8s\.io/[A-Za-z0-9._-]+ => \./staging/' "$kmod" | awk '{print $1}' | sort -u |
        while read -r m; do go mod edit -replace="$m=$m@$K8S_STAGING_VERSION"; done
      go mod edit -require="k8s.io/kubernetes@$K8S_VERSION"
      go get "k8s.io/kubernetes@$K8S_VERSION"
      for c in "${k8s_bins[@]}"; do go get -tool "k8s.io/kubernetes/cmd/$c@$K8S_VERSION"; done
    fi
    minor=$(echo "$K8S_VERSION" | cut -d. -f2)
    ld="-s -w"; date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=$date"
    done
    for c in "${k8s_bins[@]}"; do
      if [ -x "$out/$c" ]; then echo "  $c cached"; continue; fi
      echo "  $(date +%H:%M:%S) building $c"
      gobuild "$out/$c" "k8s.io/kubernetes/cmd/$c" "$ld"
    done )
  sync_back "$d" k8s-bins; took kubernetes $t
fi

# 3. kwok and helm: plain modules without replaces, pinned in one tools wrapper with a committed go.sum.
#    kwok's stage definitions ship in its module; the cluster needs node-initialize, pod-ready and pod-delete
#    (pod-complete is copied for tests that want Job pods to finish).
if have kwok helm && have_stages; then progress "kwok $KWOK_VERSION, helm $HELM_VERSION cached"; else
  progress "kwok $KWOK_VERSION and helm $HELM_VERSION: building (3-6 min cold)"; t=$SECONDS
  d=$(scratch tools-bin)
  ( cd "$d"
    grep -q "sigs.k8s.io/kwok $KWOK_VERSION" go.mod 2>/dev/null || go get -tool "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
    hmod="helm.sh/helm/$(echo "$HELM_VERSION" | cut -d. -f1)"
    grep -q "$hmod $HELM_VERSION" go.mod 2>/dev/null || go get -tool "$hmod/cmd/helm@$HELM_VERSION"
    have kwok || gobuild "$out/kwok" sigs.k8s.io/kwok/cmd/kwok
    have helm || gobuild "$out/helm" "$hmod/cmd/helm" "-s -w -X $hmod/internal/version.version=$HELM_VERSION"
    kdir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
    mkdir -p "$out/kwok-stages"
    for s in "${kwok_stages[@]}"; do
      # Module-cache files are read-only; install gives the copies a normal mode so a later run can replace them.
      install -m 0644 "$kdir/kustomize/stage/$s.yaml" "$out/kwok-stages/"
    done )
  sync_back "$d" tools-bin; took "kwok and helm" $t
fi

progress "verifying"
"$out/kube-apiserver" --version
"$out/etcd" --version | head -1
"$out/kwok" --version 2>/dev/null | head -1 || true
"$out/helm" version --short
echo "[build-bins] done in $(( SECONDS - t_all )) s: binaries in $out"
