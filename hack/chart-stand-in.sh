#!/usr/bin/env bash
# Stands in for a pod of the chart's Deployment on a cluster whose nodes run no containers (the kwok nodes of
# `make cluster-up`, where the release's pods are reported Running but nothing runs): runs the image's own binary
# (hack/image-binary.sh) in the foreground with the Deployment's arguments, the release's ConfigMap as `--config`,
# and a token of the release's ServiceAccount (`kubectl create token`), so it may do exactly what the chart's RBAC
# grants. It contends for the chart's Lease like a pod of the release; its holder identity is $POD_NAME. Ctrl-C (or
# SIGTERM) stops it and releases the Lease.
#
#   hack/chart-stand-in.sh [RELEASE [NAMESPACE]]      defaults: phalanx phalanx-system
#
# Environment: KUBECONFIG (the cluster, as for kubectl), POD_NAME (default <release>-stand-in),
# STAND_IN_METRICS_ADDR (default 127.0.0.1:18081), PHALANX_STATE_DIR (files go to <it>/stand-in/, default .phalanx).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"
# shellcheck source=hack/versions.sh
source "$here/versions.sh"
cd "$PHALANX_ROOT"
release=${1:-phalanx}
ns=${2:-phalanx-system}
kubectl=$(command -v kubectl || echo "$PHALANX_BIN_DIR/kubectl")
[ -x "$kubectl" ] || phalanx::die "kubectl not found on PATH nor in $PHALANX_BIN_DIR (make bins)"
command -v jq >/dev/null || phalanx::die "'jq' is required but not on PATH"
work=${PHALANX_STATE_DIR:-$PHALANX_ROOT/.phalanx}/stand-in/$ns-$release
mkdir -p "$work"

deployment=$("$kubectl" -n "$ns" get deployment "$release" -o json) ||
  phalanx::die "no Deployment $ns/$release: is the chart installed (helm install $release charts/phalanx -n $ns)?"
sa=$(jq -r '.spec.template.spec.serviceAccountName' <<<"$deployment")
cm=$(jq -r '[.spec.template.spec.volumes[]? | select(.configMap) | .configMap.name][0] // empty' <<<"$deployment")
[ -n "$cm" ] || phalanx::die "Deployment $ns/$release mounts no ConfigMap"
"$kubectl" -n "$ns" get configmap "$cm" -o jsonpath='{.data.phalanx\.yaml}' >"$work/phalanx.yaml"
args=()
while IFS= read -r a; do
  case "$a" in
    --config=*) args+=("--config=$work/phalanx.yaml") ;;
    --metrics-addr=*) args+=("--metrics-addr=${STAND_IN_METRICS_ADDR:-127.0.0.1:18081}") ;;
    *) args+=("$a") ;;
  esac
done < <(jq -r '.spec.template.spec.containers[0].args[]' <<<"$deployment")
[ "${args[0]:-}" = run ] || phalanx::die "Deployment $ns/$release does not run \`phalanx run\`: ${args[*]}"

# A kubeconfig that authenticates as the release's ServiceAccount, against the server kubectl talks to.
token=$("$kubectl" -n "$ns" create token "$sa" --duration=24h)
server=$("$kubectl" config view --minify --raw -o jsonpath='{.clusters[0].cluster.server}')
ca=$("$kubectl" config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
if [ -z "$ca" ]; then
  ca_file=$("$kubectl" config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority}')
  [ -n "$ca_file" ] || phalanx::die "the current kubeconfig context names no certificate authority"
  ca=$(base64 -w0 <"$ca_file")
fi
umask 077
cat >"$work/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "$server", certificate-authority-data: "$ca"}}]
users: [{name: $sa, user: {token: "$token"}}]
contexts: [{name: c, context: {cluster: c, user: $sa}}]
current-context: c
KC

bin=$("$here/image-binary.sh")
export POD_NAME=${POD_NAME:-$release-stand-in}
echo "[chart-stand-in] $bin ${args[*]}"
echo "[chart-stand-in] as system:serviceaccount:$ns:$sa, identity $POD_NAME, metrics on ${STAND_IN_METRICS_ADDR:-127.0.0.1:18081}"
exec env -u KUBECONFIG "$bin" "${args[@]}" --kubeconfig="$work/kubeconfig"
