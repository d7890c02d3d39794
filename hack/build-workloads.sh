#!/usr/bin/env bash
# Builds the workload controllers that issue 38's tests run beside Phalanx, each from its own Go module, and copies
# their CRDs and webhook manifests out of the module, into $WORKLOADS_BIN_DIR/<name>-<version>/ (outside the repo):
#   <name>               the manager binary
#   crds/*.yaml          the module's CRDs
#   webhook.yaml         the module's webhook manifests (registered by URL on loopback by the tests); only for the
#                        controllers that have webhooks (not kuberay, mpi-operator)
#   runtimes/            trainer only: manifests/base/runtimes of the module, the ClusterTrainingRuntimes, a tree
#                        with its kustomization.yaml files (`kubectl apply -k runtimes/`, or one file at a time)
# Controllers (versions in hack/versions.sh): jobset (sigs.k8s.io/jobset, main package at the module root),
# lws (sigs.k8s.io/lws/cmd), kuberay (github.com/ray-project/kuberay/ray-operator, main at the module root),
# trainer (Kubeflow Trainer, github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager), mpi-operator
# (github.com/kubeflow/mpi-operator/cmd/mpi-operator). Usage: hack/build-workloads.sh [name...] (default: those five).
# Also, by name only (not a workload controller; `make karpenter`, for `make test-autoscaling`): karpenter, Karpenter's
# KWOK cloud provider (sigs.k8s.io/karpenter/kwok, module sigs.k8s.io/karpenter) with its CRDs (NodePool, NodeClaim,
# NodeOverlay from kwok/charts/crds, the KWOK provider's variant of pkg/apis/crds; KWOKNodeClass from kwok/apis/crds),
# no webhooks (v1.8.0 has none). Measured cold build: 10 min (610 s, of which go get 31 s; on 2 cores shared with two
# other Go builds); 9 s with the Go build cache warm.
# hack/build-workloads.sh --crds name...: builds nothing; downloads each module (seconds: the module alone, not its
# dependencies) and prints the paths of its CRD files, one per line (the samples test installs them this way).
# One more name is known to --crds only: cluster-autoscaler, the module k8s.io/autoscaler/cluster-autoscaler/apis
# and its ProvisioningRequest CRD (the ProvisioningRequest test of crates/controllers installs it this way).
# What is already there is not rebuilt. Each has its own wrapper module (hack/workloads-bin/<name>, go.sum
# committed): their k8s.io versions differ, and one shared go.mod would lift them all to the highest (minimal
# version selection). None of the six modules has replace directives or asks for a newer Go than the local one.
# The go get/build output goes to $WORKLOADS_BIN_DIR/<name>-<version>/build.log, named when a build fails.
# Environment: UPDATE_GOSUM=1 copies a regenerated go.mod/go.sum back into hack/workloads-bin/<name>/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=hack/versions.sh
source "$here/versions.sh"
command -v go >/dev/null || { echo "build-workloads: Go 1.26+ is required (go not found on PATH)" >&2; exit 1; }
command -v flock >/dev/null || { echo "build-workloads: flock (util-linux) is required" >&2; exit 1; }
export GOTOOLCHAIN=${GOTOOLCHAIN_OVERRIDE:-auto}
export GONOSUMDB=${GONOSUMDB:-k8s.io,sigs.k8s.io}
export GOFLAGS="${GOFLAGS:-} -mod=mod"
export CGO_ENABLED=0

# name -> "module version main-package crds webhook-manifest extra-dirs" (paths inside the module; crds is a glob or
# glob,glob...; "-" is none; extra-dirs is dest=src[,dest=src...], each a tree copied to <dest>/).
ALL=(jobset lws kuberay trainer mpi-operator)
KNOWN=("${ALL[@]}" karpenter)
spec() {
  case $1 in
    jobset) echo "sigs.k8s.io/jobset $JOBSET_VERSION sigs.k8s.io/jobset config/components/crd/bases/*.yaml config/components/webhook/manifests.yaml -" ;;
    lws) echo "sigs.k8s.io/lws $LWS_VERSION sigs.k8s.io/lws/cmd config/crd/bases/*.yaml config/webhook/manifests.yaml -" ;;
    kuberay) echo "github.com/ray-project/kuberay/ray-operator $KUBERAY_VERSION github.com/ray-project/kuberay/ray-operator config/crd/bases/ray.io_*.yaml - -" ;;
    trainer) echo "github.com/kubeflow/trainer/v2 $TRAINER_VERSION github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager manifests/base/crds/trainer.kubeflow.org_*.yaml manifests/base/webhook/manifests.yaml runtimes=manifests/base/runtimes" ;;
    mpi-operator) echo "github.com/kubeflow/mpi-operator $MPI_OPERATOR_VERSION github.com/kubeflow/mpi-operator/cmd/mpi-operator manifests/base/kubeflow.org_mpijobs.yaml - -" ;;
    karpenter) echo "sigs.k8s.io/karpenter $KARPENTER_VERSION sigs.k8s.io/karpenter/kwok kwok/charts/crds/*.yaml,kwok/apis/crds/*.yaml - -" ;;
    # CRDs only (--crds): Cluster Autoscaler's ProvisioningRequest API; the autoscaler itself is not built.
    cluster-autoscaler) echo "k8s.io/autoscaler/cluster-autoscaler/apis $CLUSTER_AUTOSCALER_APIS_VERSION - config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml - -" ;;
    *) echo "build-workloads: unknown controller '$1' (known: ${KNOWN[*]} cluster-autoscaler)" >&2; return 1 ;;
  esac
}

# cached OUT NAME WEBHOOK EXTRAS: true when everything the build leaves in OUT is there.
cached() {
  local out=$1 name=$2 webhook=$3 extras=$4 e
  [ -x "$out/$name" ] && [ -n "$(ls "$out/crds" 2>/dev/null)" ] || return 1
  [ "$webhook" = - ] || [ -f "$out/webhook.yaml" ] || return 1
  [ "$extras" = - ] && return 0
  for e in ${extras//,/ }; do [ -n "$(ls "$out/${e%%=*}" 2>/dev/null)" ] || return 1; done
}

# crd_files DIR GLOBS: the files under DIR matching GLOBS (glob[,glob...]), one per line.
crd_files() {
  local g f globs
  IFS=, read -ra globs <<<"$2"
  for g in "${globs[@]}"; do for f in "$1"/$g; do [ -f "$f" ] && echo "$f"; done; done
  return 0
}

build_one() {
  local name=$1 module version pkg crds webhook extras out d t log rc
  read -r module version pkg crds webhook extras < <(spec "$name")
  [ "$pkg" != - ] || { echo "build-workloads: $name has nothing to build (its CRDs: --crds $name)" >&2; exit 1; }
  out=$WORKLOADS_BIN_DIR/$name-$version
  if cached "$out" "$name" "$webhook" "$extras"; then
    echo "[build-workloads] $name $version cached in $out"
    return 0
  fi
  mkdir -p "$out"
  exec 9>"$out/.build.lock"
  if ! flock -n 9; then echo "[build-workloads] another build holds $out/.build.lock; waiting"; flock 9; fi
  d=$(mktemp -d "${TMPDIR:-/tmp}/phalanx-$name-bin.XXXXXX")
  [ ! -d "$here/workloads-bin/$name" ] || cp -r "$here/workloads-bin/$name/." "$d/"
  log=$out/build.log
  t=$SECONDS
  echo "[build-workloads $(date +%H:%M:%S)] building $name $version (1-2 min with the k8s.io modules cached, 5-10 cold; log: $log)"
  # errexit holds inside the subshell only outside a condition, hence set +e around it rather than `if ! ( ... )`.
  set +e
  ( set -e
    cd "$d"
    [ -f go.mod ] || go mod init "example.invalid/phalanx/${name//-/}bin"
    grep -q "$module $version" go.mod || go get -tool "$pkg@$version"
    if [ ! -x "$out/$name" ]; then
      go build -trimpath -ldflags "-s -w" -o "$out/$name.tmp" "$pkg"
      mv "$out/$name.tmp" "$out/$name"
    fi
    kdir=$(go list -m -f '{{.Dir}}' "$module")
    rm -rf "$out/crds"
    mkdir -p "$out/crds"
    # Module-cache files are read-only; install gives the copies a normal mode so a later run can replace them.
    n=0
    for f in $(crd_files "$kdir" "$crds"); do install -m 0644 "$f" "$out/crds/"; n=$((n + 1)); done
    [ "$n" -gt 0 ] || { echo "no CRD matches $crds in $kdir"; exit 1; }
    [ "$webhook" = - ] || install -m 0644 "$kdir/$webhook" "$out/webhook.yaml"
    if [ "$extras" != - ]; then
      for e in ${extras//,/ }; do
        rm -rf "$out/${e%%=*}"
        cp -r "$kdir/${e#*=}" "$out/${e%%=*}"
        chmod -R u+w "$out/${e%%=*}"
      done
    fi ) >"$log" 2>&1
  rc=$?
  set -e
  if [ "$rc" != 0 ]; then
    rm -rf "$d"
    tail -n 15 "$log" | sed 's/^/  /' >&2
    echo "build-workloads: building $name $version failed (exit $rc); log: $log" >&2
    exit 1
  fi
  if [ "${UPDATE_GOSUM:-0}" = 1 ]; then
    mkdir -p "$here/workloads-bin/$name"
    cp "$d/go.mod" "$d/go.sum" "$here/workloads-bin/$name/"
    echo "  updated hack/workloads-bin/$name/go.mod, go.sum"
  fi
  rm -rf "$d"
  exec 9>&-
  echo "[build-workloads $(date +%H:%M:%S)] $name $version done in $(( SECONDS - t )) s: $out"
}

# --crds: the CRD files of each module, from the module cache (no build).
if [ "${1:-}" = --crds ]; then
  shift
  for n in "$@"; do
    read -r module version _ crds _ < <(spec "$n")
    dir=$(GOFLAGS= go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [ -d "$dir" ] || { echo "build-workloads: downloading $module@$version gave no directory" >&2; exit 1; }
    files=$(crd_files "$dir" "$crds")
    [ -n "$files" ] || { echo "build-workloads: no CRD matches $crds in $dir" >&2; exit 1; }
    echo "$files"
  done
  exit 0
fi

names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${ALL[@]}")
for n in "${names[@]}"; do spec "$n" >/dev/null; done
for n in "${names[@]}"; do build_one "$n"; done
