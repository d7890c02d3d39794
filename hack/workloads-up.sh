#!/usr/bin/env bash
# Workload controllers beside the quick start's cluster (`make workloads-up`): JobSet and LeaderWorkerSet (and, when
# named, KubeRay and MPI Operator) built from their Go modules by hack/build-workloads.sh and run as local processes
# (there is no container engine), with their CRDs installed and their webhooks registered by URL on loopback, so
# that their own samples run on the local cluster with `schedulerName: phalanx-scheduler`.
#
#   hack/workloads-up.sh [NAME...]    start NAMEs (jobset lws kuberay mpi-operator; default: jobset lws)
#   hack/workloads-up.sh down         stop them and remove their webhook registrations
#
# The cluster is the one in $KUBECONFIG, default <state>/kubeconfig of `make quickstart` / `hack/cluster.sh up`.
# Each controller: a serving certificate from a CA made here with openssl (SAN IP:127.0.0.1), a config file with
# leader election, metrics and internal certificate management off, its health probe and webhook server on loopback
# ports, its log and PID in <state>/workloads/<name>/. The pod webhooks are narrowed to their own pods (an
# objectSelector on the controller's pod label), as the cases of `make test-workloads` register them.
#
# Environment: PHALANX_STATE_DIR (default <repo>/.phalanx), KUBECONFIG, WORKLOADS_PORT_BASE (first of the loopback
# ports, default 19440: two per controller).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"
# shellcheck source=versions.sh
source "$here/versions.sh"
cd "$PHALANX_ROOT"

STATE=${PHALANX_STATE_DIR:-$PHALANX_ROOT/.phalanx}
DIR=$STATE/workloads
export KUBECONFIG=${KUBECONFIG:-$STATE/kubeconfig}
KUBECTL=$PHALANX_BIN_DIR/kubectl
PORT_BASE=${WORKLOADS_PORT_BASE:-19440}

log() { echo "[workloads-up $(date +%H:%M:%S)] $*"; }

# name -> version, config apiVersion (empty: flags only), pod label of its pods (for the pod webhooks' selector).
version_of() {
  case $1 in
    jobset) echo "$JOBSET_VERSION" ;; lws) echo "$LWS_VERSION" ;;
    kuberay) echo "$KUBERAY_VERSION" ;; mpi-operator) echo "$MPI_OPERATOR_VERSION" ;;
    *) phalanx::die "unknown controller '$1' (jobset, lws, kuberay, mpi-operator)" ;;
  esac
}
config_api_of() {
  case $1 in jobset) echo config.jobset.x-k8s.io/v1alpha1 ;; lws) echo config.lws.x-k8s.io/v1alpha1 ;; *) echo ;; esac
}
pod_label_of() {
  case $1 in jobset) echo jobset.sigs.k8s.io/jobset-name ;; lws) echo leaderworkerset.sigs.k8s.io/name ;; *) echo ;; esac
}

down() {
  local pidfile name
  for pidfile in "$DIR"/*/pid; do
    [ -f "$pidfile" ] || continue
    name=$(basename "$(dirname "$pidfile")")
    if kill "$(cat "$pidfile")" 2>/dev/null; then log "stopped $name"; fi
    rm -f "$pidfile"
    "$KUBECTL" delete mutatingwebhookconfiguration,validatingwebhookconfiguration \
      -l "phalanx.dev/workloads-up=$name" --ignore-not-found >/dev/null 2>&1 || true
  done
}

certs() { # dir -> CA in dir/ca.crt, serving pair in dir/certs/tls.{crt,key}
  local d=$1
  mkdir -p "$d/certs"
  [ -f "$d/certs/tls.crt" ] && return
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=phalanx-workloads-ca \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout "$d/certs/tls.key" -out "$d/server.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$d/ext.cnf"
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 365 \
    -extfile "$d/ext.cnf" -out "$d/certs/tls.crt" 2>/dev/null
}

wait_ready() { # name url pid
  local i
  for i in $(seq 1 120); do
    kill -0 "$3" 2>/dev/null || phalanx::die "$1 exited; its log: $DIR/$1/$1.log"
    if curl -sf "$2" >/dev/null 2>&1; then return; fi
    sleep 0.5
  done
  phalanx::die "$1 not ready after 60 s at $2; its log: $DIR/$1/$1.log"
}

webhooks() { # name bin-dir webhook-port
  local name=$1 bin=$2 port=$3 label ca
  [ -f "$bin/webhook.yaml" ] || return 0
  label=$(pod_label_of "$name")
  ca=$(base64 -w0 <"$DIR/$name/ca.crt")
  "$KUBECTL" create --dry-run=client -o json -f "$bin/webhook.yaml" | jq \
    --arg name "$name" --arg port "$port" --arg ca "$ca" --arg podlabel "$label" '
      (if .kind == "List" then .items else [.] end)
      | map(.metadata = {name: ("phalanx-workloads-" + $name + "-" + (.kind | ascii_downcase)),
                         labels: {"phalanx.dev/workloads-up": $name}}
            | .webhooks |= map(
                .clientConfig = {url: ("https://127.0.0.1:" + $port + .clientConfig.service.path), caBundle: $ca}
                | if ($podlabel != "" and any(.rules[]?; any(.resources[]?; . == "pods")))
                  then .objectSelector = {matchExpressions: [{key: $podlabel, operator: "Exists"}]} else . end))
      | {apiVersion: "v1", kind: "List", items: .}' | "$KUBECTL" apply -f - >/dev/null
}

up_one() { # name index
  local name=$1 version bin d api health=$((PORT_BASE + 2 * $2)) hook=$((PORT_BASE + 2 * $2 + 1)) pid args=()
  version=$(version_of "$name")
  bin=$WORKLOADS_BIN_DIR/$name-$version
  d=$DIR/$name
  mkdir -p "$d"
  if [ -f "$d/pid" ] && kill -0 "$(cat "$d/pid")" 2>/dev/null; then
    log "$name $version already running (pid $(cat "$d/pid"), log $d/$name.log)"
    webhooks "$name" "$bin" "$hook"
    return
  fi
  log "$name $version: CRDs"
  "$KUBECTL" apply --server-side --force-conflicts -f "$bin/crds/" >/dev/null
  # A CRD just created has no status.conditions yet, and `kubectl wait` fails on that instead of waiting: retry.
  local i
  for i in $(seq 1 60); do
    "$KUBECTL" wait --for condition=established --timeout=30s -f "$bin/crds/" >/dev/null 2>&1 && break
    [ "$i" -lt 60 ] || phalanx::die "$name's CRDs not Established after 60 tries ($bin/crds)"
    sleep 1
  done
  api=$(config_api_of "$name")
  case $name in
    jobset | lws)
      certs "$d"
      cat >"$d/config.yaml" <<EOF
apiVersion: $api
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
metrics:
  bindAddress: "0"
health:
  healthProbeBindAddress: 127.0.0.1:$health
webhook:
  host: 127.0.0.1
  port: $hook
  certDir: $d/certs
EOF
      args=(--config="$d/config.yaml")
      [ "$name" = lws ] && args+=(--leader-elect=false)
      ;;
    kuberay) args=(--enable-leader-election=false --metrics-addr=0 --health-probe-bind-address=127.0.0.1:$health) ;;
    mpi-operator)
      "$KUBECTL" create namespace mpi-operator --dry-run=client -o yaml | "$KUBECTL" apply -f - >/dev/null
      args=(--monitoring-port=0 --lock-namespace=mpi-operator)
      ;;
  esac
  log "$name $version: starting (log $d/$name.log)"
  setsid "$bin/$name" "${args[@]}" >"$d/$name.log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$d/pid"
  case $name in
    jobset | lws | kuberay) wait_ready "$name" "http://127.0.0.1:$health/readyz" "$pid" ;;
    # Leader election is always on: it runs once it holds its Lease (its /healthz, a fixed :8080, answers before).
    mpi-operator)
      local i
      for i in $(seq 1 120); do
        "$KUBECTL" -n mpi-operator get lease mpi-operator >/dev/null 2>&1 && break
        kill -0 "$pid" 2>/dev/null || phalanx::die "mpi-operator exited; its log: $d/$name.log"
        sleep 0.5
      done
      ;;
  esac
  webhooks "$name" "$bin" "$hook"
  log "$name $version: ready"
}

main() {
  [ "${1:-}" = down ] && { down; exit 0; }
  for b in jq openssl curl setsid; do command -v "$b" >/dev/null || phalanx::die "'$b' is required but not on PATH"; done
  [ -f "$KUBECONFIG" ] || phalanx::die "no cluster: $KUBECONFIG does not exist (run 'make quickstart' or 'hack/cluster.sh up' first)"
  local names=("$@") i=0 n
  [ ${#names[@]} -gt 0 ] || names=(jobset lws)
  for n in "${names[@]}"; do version_of "$n" >/dev/null; done
  "$here/build-workloads.sh" "${names[@]}"
  for n in "${names[@]}"; do
    up_one "$n" "$i"
    i=$((i + 1))
  done
  log "done; stop them with 'hack/workloads-up.sh down'"
}

main "$@"
