# shellcheck shell=bash
# Versions of the control-plane binaries that tests and the quick start use.
# Sourced by the hack/ scripts; the cache directory is keyed by these.
# Kubernetes 1.34-1.38 build (a wrapper module per minor version in hack/k8s-bins/, see hack/gen-k8s-mod.sh); the
# staging modules' version follows: v1.M.P -> v0.M.P (v1.38.0-beta.0 -> v0.38.0-beta.0).
K8S_VERSION=${K8S_VERSION:-v1.37.2}
K8S_STAGING_VERSION=${K8S_STAGING_VERSION:-v0.${K8S_VERSION#v1.}}
# The Go toolchain of the Kubernetes build alone (etcd, kwok and helm keep the default): 1.38's modules say
# `go 1.27.0` in their go.mod, so Go 1.26 refuses them; the build pins go1.27.3 (fetched from the module proxy as
# golang.org/toolchain) instead of whatever GOTOOLCHAIN=auto would pick from the wrapper module's go line. Empty:
# the default of hack/lib.sh (phalanx::go_env). GOTOOLCHAIN_OVERRIDE still wins over both.
# shellcheck disable=SC2034 # read by the scripts that source this file (phalanx::k8s_go_env of hack/lib.sh)
case "$K8S_VERSION" in
  v1.38.*) K8S_GOTOOLCHAIN=go1.27.3 ;;
  *) K8S_GOTOOLCHAIN= ;;
esac
# The commands built from k8s.io/kubernetes (used by the scripts that source this file).
# shellcheck disable=SC2034
PHALANX_K8S_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
HELM_VERSION=${HELM_VERSION:-v3.22.0}
PHALANX_CACHE=${PHALANX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/phalanx}
PHALANX_BIN_DIR=${PHALANX_BIN_DIR:-$PHALANX_CACHE/bin/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION-helm-$HELM_VERSION}
# Kueue (opt-in: `make test-kueue`, hack/build-kueue.sh); built from its Go module like the control plane.
KUEUE_VERSION=${KUEUE_VERSION:-v0.17.0}
KUEUE_BIN_DIR=${KUEUE_BIN_DIR:-$PHALANX_CACHE/bin/kueue-$KUEUE_VERSION}
# crane (go-containerregistry): assembles nothing itself, but validates and pushes the image `make image` writes
# (hack/image.sh), and serves a loopback registry for its test; built from its Go module (hack/build-crane.sh).
CRANE_VERSION=${CRANE_VERSION:-v0.22.1}
CRANE_BIN_DIR=${CRANE_BIN_DIR:-$PHALANX_CACHE/bin/crane-$CRANE_VERSION}
# cargo-cyclonedx (crates.io): the release's SBOM, a CycloneDX document of the binary's crates from Cargo.lock
# (hack/release.sh; installed with `cargo install --locked` by hack/build-sbom-tool.sh).
CYCLONEDX_VERSION=${CYCLONEDX_VERSION:-0.5.9}
CYCLONEDX_BIN_DIR=${CYCLONEDX_BIN_DIR:-$PHALANX_CACHE/bin/cargo-cyclonedx-$CYCLONEDX_VERSION}
# Workload controllers (issue 38; opt-in: `make workloads`, hack/build-workloads.sh): each built from its Go module in
# its own wrapper module (hack/workloads-bin/<name>; their k8s.io versions differ, one shared go.mod would lift them
# all to the highest), cached per version.
JOBSET_VERSION=${JOBSET_VERSION:-v0.10.1}
LWS_VERSION=${LWS_VERSION:-v0.7.0}
KUBERAY_VERSION=${KUBERAY_VERSION:-v1.5.0}
TRAINER_VERSION=${TRAINER_VERSION:-v2.0.0}
MPI_OPERATOR_VERSION=${MPI_OPERATOR_VERSION:-v0.6.0}
# Cluster Autoscaler's API module (its ProvisioningRequest CRD only: `hack/build-workloads.sh --crds cluster-autoscaler`).
CLUSTER_AUTOSCALER_APIS_VERSION=${CLUSTER_AUTOSCALER_APIS_VERSION:-v0.0.0-20240830133931-adfbe7e45277}
WORKLOADS_BIN_DIR=${WORKLOADS_BIN_DIR:-$PHALANX_CACHE/bin/workloads}
# Karpenter's KWOK cloud provider (issue 39; opt-in: `make karpenter`, `make test-autoscaling`): built by
# hack/build-workloads.sh like the workload controllers, from sigs.k8s.io/karpenter's kwok main package.
KARPENTER_VERSION=${KARPENTER_VERSION:-v1.8.0}
