# shellcheck shell=bash
# Versions of the control-plane binaries that tests and the quick start use.
# Sourced by the hack/ scripts; the cache directory is keyed by these.
K8S_VERSION=${K8S_VERSION:-v1.37.2}
K8S_STAGING_VERSION=${K8S_STAGING_VERSION:-v0.37.2}
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
