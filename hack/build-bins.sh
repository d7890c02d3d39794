#!/usr/bin/env bash
# Builds the control-plane binaries Phalanx tests against, from Go modules only:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok, helm.
# They land in $PHALANX_BIN_DIR (outside the repo, keyed by version); a binary already there is not rebuilt.
# Why wrapper modules: k8s.io/kubernetes and etcd's server module carry replace directives, so
# `go install pkg@version` refuses them (see docs/test-infra.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.sh
source "$here/versions.sh"

command -v go >/dev/null || { echo "build-bins: Go 1.26+ is required (go not found on PATH)" >&2; exit 1; }
export GOTOOLCHAIN=${GOTOOLCHAIN_OVERRIDE:-auto}
# The checksum database may be unreachable; go.sum is committed, so module hashes are still verified against it.
export GONOSUMDB=${GONOSUMDB:-k8s.io,sigs.k8s.io,go.etcd.io,helm.sh}
export GOFLAGS="${GOFLAGS:-} -mod=mod"
export CGO_ENABLED=0
mkdir -p "$PHALANX_BIN_DIR"
out=$PHALANX_BIN_DIR
step=0; total=5
progress() { step=$((step+1)); echo "[build-bins $step/$total $(date +%H:%M:%S)] $*"; }
have() { for b in "$@"; do [ -x "$out/$b" ] || return 1; done; }

# Each step builds in a scratch copy of its wrapper module so that a clean clone is never dirtied;
# `UPDATE_GOSUM=1` copies a regenerated go.mod/go.sum back.
scratch() {
  local src=$here/$1 dst; dst=$(mktemp -d "${TMPDIR:-/tmp}/phalanx-$1.XXXXXX")
  cp -r "$src/." "$dst/"
  echo "$dst"
}
sync_back() { if [ "${UPDATE_GOSUM:-0}" = 1 ]; then cp "$1/go.mod" "$1/go.sum" "$here/$2/"; fi; }

# 1. etcd: its own wrapper module so etcd's grpc/otel pins cannot move the apiserver's.
if have etcd; then progress "etcd $ETCD_VERSION cached"; else
  progress "etcd $ETCD_VERSION: building (2-4 min cold)"
  d=$(scratch etcd-bin)
  ( cd "$d"
    if ! grep -q "go.etcd.io/etcd/server/v3 $ETCD_VERSION" go.mod 2>/dev/null; then
      go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION"; fi
    go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3 )
  sync_back "$d" etcd-bin; rm -rf "$d"
fi

# 2. Kubernetes: a wrapper module requiring k8s.io/kubernetes, with every staging replace generated from
#    upstream's own go.mod (never by hand).
k8s_bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
if have "${k8s_bins[@]}"; then progress "kubernetes $K8S_VERSION cached"; else
  progress "kubernetes $K8S_VERSION: building ${k8s_bins[*]} (15-30 min cold, 3-5 GB RAM)"
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
      go build -trimpath -ldflags "$ld" -o "$out/$c.tmp" "k8s.io/kubernetes/cmd/$c"
      mv "$out/$c.tmp" "$out/$c"
    done )
  sync_back "$d" k8s-bins; rm -rf "$d"
fi

# 3. kwok and 4. helm: plain modules without replaces, pinned in one tools wrapper with a committed go.sum.
if have kwok helm; then progress "kwok $KWOK_VERSION, helm $HELM_VERSION cached"; else
  progress "kwok $KWOK_VERSION and helm $HELM_VERSION: building (3-6 min cold)"
  d=$(scratch tools-bin)
  ( cd "$d"
    grep -q "sigs.k8s.io/kwok $KWOK_VERSION" go.mod 2>/dev/null || go get -tool "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
    hmod="helm.sh/helm/$(echo "$HELM_VERSION" | cut -d. -f1)"
    grep -q "$hmod $HELM_VERSION" go.mod 2>/dev/null || go get -tool "$hmod/cmd/helm@$HELM_VERSION"
    go build -trimpath -ldflags "-s -w" -o "$out/kwok" sigs.k8s.io/kwok/cmd/kwok
    go build -trimpath -ldflags "-s -w -X $hmod/internal/version.version=$HELM_VERSION" -o "$out/helm" "$hmod/cmd/helm"
    # kwok's stage definitions ship in its module; copy the ones the cluster needs next to the binary.
    kdir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
    mkdir -p "$out/kwok-stages"
    cp "$kdir"/kustomize/stage/node/fast/*.yaml "$kdir"/kustomize/stage/pod/fast/*.yaml "$out/kwok-stages/" )
  sync_back "$d" tools-bin; rm -rf "$d"
fi

progress "verifying"
"$out/kube-apiserver" --version
"$out/etcd" --version | head -1
"$out/kwok" --version 2>/dev/null | head -1 || true
"$out/helm" version --short
progress "done: binaries in $out"
