#!/usr/bin/env bash
# The Phalanx quick start (`make quickstart`): a real local control plane, 8 fake GPU nodes in 2 racks, the Helm
# chart installed, and `phalanx run` scheduling the samples in config/samples with the chart's ServiceAccount (so the
# chart's RBAC is what gets exercised). Safe to re-run: every step reuses what is already there.
#
#   hack/quickstart.sh          build what is missing, start everything, apply the samples, show the result
#   hack/quickstart.sh down     stop the local phalanx process and the control plane
#
# Environment: PHALANX_STATE_DIR (default <repo>/.phalanx), QUICKSTART_NAMESPACE (samples, default "default"),
# QUICKSTART_TIMEOUT (seconds to wait for the groups, default 120), QUICKSTART_METRICS_PORT (the local operator's
# metrics port, default 18080), CARGO_TARGET_DIR (cargo's usual meaning).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"
# shellcheck source=versions.sh
source "$here/versions.sh"
cd "$PHALANX_ROOT"

STATE=${PHALANX_STATE_DIR:-$PHALANX_ROOT/.phalanx}
QS=$STATE/quickstart
RELEASE=phalanx
RELEASE_NS=phalanx-system
SA=phalanx                       # the chart's ServiceAccount (release name "phalanx" => fullname "phalanx")
# The chart's Lease: named after the scheduler name, in leaderElection.namespace (kube-system); `phalanx run` defaults
# to the same, so the local process below and the chart's (never running) pods contend for one Lease.
LEASE=phalanx-scheduler
LEASE_NS=kube-system
NS=${QUICKSTART_NAMESPACE:-default}
TIMEOUT=${QUICKSTART_TIMEOUT:-120}
METRICS_ADDR=127.0.0.1:${QUICKSTART_METRICS_PORT:-18080}
TARGET=${CARGO_TARGET_DIR:-$PHALANX_ROOT/target}
PHALANX=$TARGET/debug/phalanx
KUBECTL=$PHALANX_BIN_DIR/kubectl
HELM=$PHALANX_BIN_DIR/helm
export HELM_CACHE_HOME=$STATE/helm/cache HELM_CONFIG_HOME=$STATE/helm/config HELM_DATA_HOME=$STATE/helm/data

total=9; step=0
progress() { step=$((step+1)); echo "[quickstart $step/$total $(date +%H:%M:%S)] $*"; }

# stop_phalanx: stop the phalanx process this script started (recorded PID, checked against its executable).
stop_phalanx() {
  local pid
  [ -f "$QS/phalanx.pid" ] || return 0
  pid=$(cat "$QS/phalanx.pid")
  # A rebuilt binary shows as "<path> (deleted)" in /proc/PID/exe; it is still ours.
  if [ -n "$pid" ] && [ "$(readlink "/proc/$pid/exe" 2>/dev/null | sed 's/ (deleted)$//')" = "$(readlink -f "$PHALANX")" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$QS/phalanx.pid"
}

if [ "${1:-}" = down ]; then
  stop_phalanx
  "$here/cluster.sh" down
  echo "quick start stopped (logs kept in $STATE/logs and $QS)"
  exit 0
fi
[ $# -eq 0 ] || phalanx::die "usage: hack/quickstart.sh [down]"
mkdir -p "$QS"

# 1. Control-plane binaries (etcd, kube-apiserver, kube-controller-manager, kubectl, kwok, helm).
progress "control-plane binaries in $PHALANX_BIN_DIR"
if [ -x "$PHALANX_BIN_DIR/kube-apiserver" ] && [ -x "$KUBECTL" ] && [ -x "$HELM" ] && [ -x "$PHALANX_BIN_DIR/kwok" ] \
   && [ -x "$PHALANX_BIN_DIR/etcd" ] && [ -x "$PHALANX_BIN_DIR/kube-controller-manager" ]; then
  echo "  cached"
else
  echo "  building with hack/build-bins.sh (first run only; 20-40 min on 2 cores)"
  "$here/build-bins.sh"
fi

# 2. The phalanx binary.
progress "phalanx binary ($PHALANX)"
command -v cargo >/dev/null || phalanx::die "cargo not found: install Rust (https://rustup.rs), then re-run"
command -v curl >/dev/null || phalanx::die "curl not found: install curl, then re-run"
if ! cargo build -p phalanx --bin phalanx --bin kubectl-phalanx 2>&1 | sed 's/^/  /'; then
  phalanx::die "cargo build -p phalanx failed (output above)"
fi
[ -x "$PHALANX" ] || phalanx::die "cargo build did not produce $PHALANX"

# 3. Control plane.
progress "local control plane (hack/cluster.sh up)"
eval "$("$here/cluster.sh" up)"
export KUBECONFIG
k() { "$KUBECTL" "$@"; }

# 4. Eight fake GPU nodes in two racks, from config/samples/fake-gpu-nodes.yaml (kwok makes them Ready).
NODES_FILE=config/samples/fake-gpu-nodes.yaml
progress "8 fake GPU nodes in 2 racks ($NODES_FILE)"
k apply -f "$NODES_FILE" | sed 's/^/  /'
node_names=$(k create --dry-run=client -o name -f "$NODES_FILE" | tr '\n' ' ')
# shellcheck disable=SC2086
k wait --for=condition=Ready $node_names --timeout=60s >/dev/null
echo "  $(echo $node_names | wc -w) nodes Ready"

# 5. The Helm chart (CRDs, ServiceAccount, RBAC, Deployment, PDB, Service). Without a kubelet the Deployment's
#    pods never run a process, so they never take the leader Lease from the local process started below.
progress "helm chart charts/phalanx as release $RELEASE in $RELEASE_NS"
"$HELM" upgrade --install "$RELEASE" charts/phalanx --namespace "$RELEASE_NS" --create-namespace \
  --set logFormat=text 2>&1 | sed -n '1,3p' | sed 's/^/  /'
# helm installs charts/phalanx/crds only on first install; apply them every time so a re-run picks up changes.
k apply --server-side --force-conflicts -f crds/phalanx.yaml | sed 's/^/  /'
k wait --for=condition=Established crd --all --timeout=60s >/dev/null
# The API server answers 503 ("Resource kind ... not found") to objects of a CRD version for a few seconds after the
# CRD is Established, until its handler and, on 1.36 and later, the chart's admission policies know that version;
# each served version (v1alpha3, v1beta1) catches up on its own. So wait until a server-side dry run of every sample
# passes: it uses each kind and version the samples do. Stop with the last answer if it never does.
k get namespace "$NS" >/dev/null 2>&1 || k create namespace "$NS" >/dev/null
# The samples step 8 applies: every file of config/samples but the nodes (applied in step 4).
samples() { local f; for f in config/samples/*.yaml; do [ "$f" = "$NODES_FILE" ] || echo "$f"; done; }
samples_accepted() {
  local f
  for f in $(samples); do
    k -n "$NS" apply --dry-run=server -f "$f" >/dev/null 2>"$QS/samples-dry-run.err" || return 1
  done
}
deadline=$((SECONDS + 60))
until samples_accepted; do
  [ $SECONDS -ge $deadline ] && phalanx::die "the API server still refuses the samples 60 s after the CRDs were \
established: $(cat "$QS/samples-dry-run.err")"
  sleep 0.5
done

# 6. A kubeconfig that authenticates as the chart's ServiceAccount.
progress "kubeconfig for ServiceAccount $RELEASE_NS/$SA (kubectl create token)"
token=$(k -n "$RELEASE_NS" create token "$SA" --duration=24h)
server=$(k config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
ca=$(k config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
umask 077
cat >"$QS/phalanx-sa.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: phalanx
  cluster: {server: "$server", certificate-authority-data: "$ca"}
users:
- name: $SA
  user: {token: "$token"}
contexts:
- name: phalanx-sa
  context: {cluster: phalanx, user: $SA, namespace: $RELEASE_NS}
current-context: phalanx-sa
EOF
umask 022
echo "  $QS/phalanx-sa.kubeconfig (user system:serviceaccount:$RELEASE_NS:$SA)"

# 7. phalanx run, locally, as that ServiceAccount, with leader election on the chart's Lease ($LEASE_NS/$LEASE).
progress "phalanx run (as the ServiceAccount; log $QS/phalanx.log)"
stop_phalanx
metrics_port=${METRICS_ADDR##*:}
if phalanx::port_in_use "$metrics_port"; then
  phalanx::die "port $metrics_port is in use (another phalanx run?); free it or set QUICKSTART_METRICS_PORT"
fi
nohup "$PHALANX" run --kubeconfig "$QS/phalanx-sa.kubeconfig" --config config/phalanx.yaml \
  --leader-elect=true --leader-elect-identity "quickstart-$(uname -n)" \
  --metrics-addr "$METRICS_ADDR" --log-format text >"$QS/phalanx.log" 2>&1 &
echo $! >"$QS/phalanx.pid"
ready=0
for _ in $(seq 1 120); do
  kill -0 "$(cat "$QS/phalanx.pid")" 2>/dev/null || { tail -20 "$QS/phalanx.log" >&2; phalanx::die "phalanx run exited"; }
  if curl -fsS "http://$METRICS_ADDR/readyz" >/dev/null 2>&1 && \
     curl -fsS "http://$METRICS_ADDR/metrics" 2>/dev/null | grep -q '^phalanx_leader 1'; then ready=1; break; fi
  sleep 0.5
done
[ $ready = 1 ] || { tail -20 "$QS/phalanx.log" >&2; phalanx::die "phalanx did not become ready and leader within 60 s"; }
sleep 1
kill -0 "$(cat "$QS/phalanx.pid")" 2>/dev/null || { tail -20 "$QS/phalanx.log" >&2; phalanx::die "phalanx run exited"; }
echo "  ready, holding Lease $LEASE_NS/$LEASE; metrics at http://$METRICS_ADDR/metrics"

# 8. The samples.
progress "applying config/samples to namespace $NS"
for f in $(samples); do
  k -n "$NS" apply -f "$f" | sed 's/^/  /'
done

# 9. Wait until every PodGroup has its PodGroupInitiallyScheduled condition, then show the result. The Job sample's
#    PodGroup (batch-gang-job) is created by Phalanx a moment after the Job, so wait for it to exist first.
progress "waiting up to ${TIMEOUT}s for the scheduling decisions"
pg=podgroups.scheduling.phalanx.dev
deadline=$((SECONDS + TIMEOUT))
until k -n "$NS" get "$pg" batch-gang-job >/dev/null 2>&1 || [ $SECONDS -ge $deadline ]; do sleep 1; done
while :; do
  total_groups=$(k -n "$NS" get "$pg" --no-headers 2>/dev/null | wc -l)
  decided=$(k -n "$NS" get "$pg" -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="PodGroupInitiallyScheduled")].status}{"\n"}{end}' | grep -c . || true)
  [ "$total_groups" -gt 0 ] && [ "$decided" -ge "$total_groups" ] && break
  [ $SECONDS -ge $deadline ] && { echo "  timed out: $decided of $total_groups groups decided (see $QS/phalanx.log)"; break; }
  sleep 1
done
# The controllers' counters (PODS, SCHEDULED, RUNNING columns) trail the decisions by a moment.
member_pods=$(k -n "$NS" get pods -l scheduling.phalanx.dev/pod-group --no-headers 2>/dev/null | wc -l)
for _ in $(seq 1 15); do
  counted=$(k -n "$NS" get "$pg" -o jsonpath='{range .items[*]}{.status.pods}{"\n"}{end}' | awk '{s+=$1} END {print s+0}')
  [ "$counted" -ge "$member_pods" ] && break
  sleep 1
done

echo
echo "== PodGroups (kubectl -n $NS get $pg) =="
k -n "$NS" get "$pg" -o wide
echo
echo "== PodGroupInitiallyScheduled conditions =="
k -n "$NS" get "$pg" -o custom-columns='NAME:.metadata.name,STATUS:.status.conditions[?(@.type=="PodGroupInitiallyScheduled")].status,REASON:.status.conditions[?(@.type=="PodGroupInitiallyScheduled")].reason,MESSAGE:.status.conditions[?(@.type=="PodGroupInitiallyScheduled")].message'
echo
cpg=compositepodgroups.scheduling.phalanx.dev
echo "== CompositePodGroups (kubectl -n $NS get $cpg) =="
k -n "$NS" get "$cpg" -o custom-columns='NAME:.metadata.name,STATUS:.status.conditions[?(@.type=="CompositePodGroupInitiallyScheduled")].status,REASON:.status.conditions[?(@.type=="CompositePodGroupInitiallyScheduled")].reason,CHILDREN:.status.childGroups,MESSAGE:.status.conditions[?(@.type=="CompositePodGroupInitiallyScheduled")].message'
echo
echo "== Job-created gang (config/samples/gang-job.yaml: a Job with scheduling.phalanx.dev/gang: \"true\", no PodGroup written) =="
k -n "$NS" get job batch-gang -o custom-columns='JOB:.metadata.name,PARALLELISM:.spec.parallelism,GANG:.metadata.annotations.scheduling\.phalanx\.dev/gang'
k -n "$NS" get "$pg" batch-gang-job -o custom-columns='PODGROUP:.metadata.name,OWNER:.metadata.ownerReferences[0].kind,MIN:.spec.schedulingPolicy.gang.minCount,PODS:.status.pods,STATUS:.status.conditions[?(@.type=="PodGroupInitiallyScheduled")].reason'
echo
echo "== Pods and their nodes =="
k -n "$NS" get pods -o custom-columns='POD:.metadata.name,GROUP:.metadata.labels.scheduling\.phalanx\.dev/pod-group,OWNER:.metadata.ownerReferences[0].name,NODE:.spec.nodeName,PHASE:.status.phase' --sort-by=.metadata.name
echo
echo "== Nodes by rack =="
# shellcheck disable=SC2086
k get $node_names -o custom-columns='NODE:.metadata.name,RACK:.metadata.labels.topology\.kubernetes\.io/rack,GPUS:.status.allocatable.nvidia\.com/gpu,CPU:.status.allocatable.cpu'

down_cmd="hack/quickstart.sh down"
[ "$STATE" = "$PHALANX_ROOT/.phalanx" ] || down_cmd="PHALANX_STATE_DIR=$STATE $down_cmd"
cat <<EOF

Explore (kubectl and helm are in $PHALANX_BIN_DIR):
  export KUBECONFIG=$KUBECONFIG PATH=$PHALANX_BIN_DIR:\$PATH
  kubectl -n $NS get $pg                      # or: kubectl get phalanx (all Phalanx kinds)
  kubectl -n $NS get $pg too-big -o jsonpath='{.status.conditions[?(@.type=="PodGroupInitiallyScheduled")].message}'
  kubectl -n $NS get pods -o wide
  kubectl -n $NS describe pod too-big-0                # PodScheduled condition and FailedScheduling events
  $PHALANX explain ppg too-big -n $NS     # why it is pending (also: kubectl phalanx ..., README)
  kubectl -n $NS get events --sort-by=.lastTimestamp
  kubectl -n $LEASE_NS get lease $LEASE -o jsonpath='{.spec.holderIdentity}'
  curl -s http://$METRICS_ADDR/metrics | grep ^phalanx_
  tail -f $QS/phalanx.log

Tear down (stops phalanx and the control plane; logs are kept):
  $down_cmd
EOF
