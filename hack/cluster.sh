#!/usr/bin/env bash
# Runs a real Kubernetes control plane on loopback for tests and the quick start, from the binaries that
# hack/build-bins.sh caches: etcd (data on tmpfs), kube-apiserver (own CA, RBAC), kube-controller-manager (no node
# controllers) and kwok (fake nodes annotated kwok.x-k8s.io/node=fake; pods turn Running once bound, deletions
# complete). No kube-scheduler unless asked: Phalanx is the scheduler under test.
#
#   hack/cluster.sh up [options]      start, or report the running cluster (idempotent); prints `export KUBECONFIG=...`
#   hack/cluster.sh down [options]    stop the recorded processes, remove the state (logs are kept)
#   hack/cluster.sh status [options]  show processes, ports, /readyz; exit 0 only when everything is up
#   hack/cluster.sh env [options]     print `export KUBECONFIG=...` for a running cluster
#   hack/cluster.sh kill NAME [options]     SIGKILL one component (etcd, kube-apiserver, ...; fault injection)
#   hack/cluster.sh restart NAME [options]  start that component again with its recorded command line (SIGKILL
#                                           first if it runs); returns once etcd/kube-apiserver is healthy again;
#                                           `restart kube-apiserver --upstream-workload-api` adds that API from now on
#
# Options (each also settable through the environment variable shown):
#   --state-dir DIR           PHALANX_STATE_DIR   state: PKI, kubeconfigs, PIDs (default <repo>/.phalanx)
#   --log-dir DIR             PHALANX_LOG_DIR     component logs (default <state-dir>/logs)
#   --watch-pid PID                               tear the cluster down once process PID exits
#   --upstream-workload-api   UPSTREAM_WORKLOAD_API=1  serve scheduling.k8s.io with the GenericWorkload,
#                                                 CompositePodGroup, TopologyAwareWorkloadScheduling gates (and
#                                                 WorkloadWithJob and DRAWorkloadResourceClaims from 1.37):
#                                                 v1beta1+v1alpha3 on 1.37, v1beta1
#                                                 alone on 1.38 (CompositePodGroup is v1beta1 there)
#   --with-kube-scheduler     WITH_KUBE_SCHEDULER=1    also run upstream kube-scheduler (identity system:kube-scheduler)
# Environment only: PHALANX_BIN_DIR (binaries, see versions.sh), PHALANX_START_TIMEOUT (seconds, default 180),
# APISERVER_EXTRA_ARGS / KCM_EXTRA_ARGS / KWOK_EXTRA_ARGS / SCHEDULER_EXTRA_ARGS (word-split, appended),
# AUDIT_LOG=FILE (opt-in: kube-apiserver writes an audit log there, JSON lines, never rotated) with
# AUDIT_POLICY=FILE (default hack/audit-policy.yaml: the scheduler's writes and Lease changes).
#
# Stdout carries only the `export KUBECONFIG=...` line, so `eval "$(hack/cluster.sh up)"` works; progress goes
# to stderr. Details and debugging: docs/testing.md.
set -euo pipefail
set +m  # background jobs must stay in our process group so that setsid does not fork and $! is the real PID
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"
# shellcheck source=hack/versions.sh
source "$here/versions.sh"

usage() { sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }

cmd=${1:-}
[ $# -gt 0 ] && shift
STATE=${PHALANX_STATE_DIR:-$PHALANX_ROOT/.phalanx}
LOGS=${PHALANX_LOG_DIR:-}
WATCH_PID=
WATCH_START=
UPSTREAM_WORKLOAD_API=${UPSTREAM_WORKLOAD_API:-0}
WITH_KUBE_SCHEDULER=${WITH_KUBE_SCHEDULER:-0}
START_TIMEOUT=${PHALANX_START_TIMEOUT:-180}
AUDIT_LOG=${AUDIT_LOG:-}
AUDIT_POLICY=${AUDIT_POLICY:-$here/audit-policy.yaml}
COMPONENT=  # the NAME of `kill` and `restart`
while [ $# -gt 0 ]; do
  case $1 in
    --state-dir) STATE=${2:?--state-dir needs a directory}; shift 2 ;;
    --log-dir) LOGS=${2:?--log-dir needs a directory}; shift 2 ;;
    --watch-pid) WATCH_PID=${2:?--watch-pid needs a PID}; shift 2 ;;
    --watch-start) WATCH_START=${2:?}; shift 2 ;;  # internal: start time of the watched PID
    --upstream-workload-api) UPSTREAM_WORKLOAD_API=1; shift ;;
    --with-kube-scheduler) WITH_KUBE_SCHEDULER=1; shift ;;
    -h|--help) usage 0 ;;
    -*) echo "cluster.sh: unknown option $1" >&2; usage ;;
    *) [ -z "$COMPONENT" ] || { echo "cluster.sh: unexpected argument $1" >&2; usage; }
       COMPONENT=$1; shift ;;
  esac
done
mkdir -p "$STATE"
STATE=$(cd "$STATE" && pwd)
LOGS=${LOGS:-$STATE/logs}
mkdir -p "$LOGS"
LOGS=$(cd "$LOGS" && pwd)
if [ -n "$AUDIT_LOG" ]; then
  mkdir -p "$(dirname "$AUDIT_LOG")"
  AUDIT_LOG=$(cd "$(dirname "$AUDIT_LOG")" && pwd)/$(basename "$AUDIT_LOG")
  [ -f "$AUDIT_POLICY" ] || phalanx::die "AUDIT_POLICY=$AUDIT_POLICY: no such file"
fi
PKI=$STATE/pki
PIDS=$STATE/pids
KUBECONFIG_OUT=$STATE/kubeconfig
ENV_FILE=$STATE/cluster.env
BIN=$PHALANX_BIN_DIR
# Components in start order; they are stopped in reverse.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok watchdog)

# One cluster operation at a time per state dir. Children get fd 9 closed so they never hold the lock.
lock() {
  exec 9>"$STATE/.lock"
  flock -w 300 9 || phalanx::die "another cluster.sh holds $STATE/.lock for more than 300 s"
}

# --- recorded processes ---------------------------------------------------------------------------------
# pids/<name> holds "PID EXE"; EXE is checked before any signal so a reused PID is never killed.
record_pid() { mkdir -p "$PIDS"; echo "$2 $3" >"$PIDS/$1"; }
recorded() { [ -f "$PIDS/$1" ] && cat "$PIDS/$1"; }
alive() {  # alive NAME: the recorded process runs (zombies count as dead)
  local rec pid exe st
  rec=$(recorded "$1") || return 1
  read -r pid exe <<<"$rec"
  phalanx::pid_is "$pid" "$exe" || return 1
  st=$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null | head -c1 || true)
  [ "$st" != Z ]
}

# start NAME EXE ARGS...: runs EXE in its own session (so terminal signals aimed at our caller do not hit it),
# stdin from /dev/null, stdout+stderr to $LOGS/NAME.log (appended to when APPEND_LOG=1, as `restart` does), and
# records its PID and its command line (pids/NAME.cmd, NUL-separated, for `restart`).
start() {
  local name=$1 exe=$2; shift 2
  [ "${APPEND_LOG:-0}" = 1 ] || : >"$LOGS/$name.log"
  mkdir -p "$PIDS"
  printf '%s\0' "$exe" "$@" >"$PIDS/$name.cmd"
  ( exec setsid "$exe" "$@" ) </dev/null >>"$LOGS/$name.log" 2>&1 9>&- &
  local pid=$! real
  real=$(readlink -f "$exe")
  record_pid "$name" "$pid" "$real"
  # Until the subshell has exec'd setsid and setsid the binary, /proc/PID/exe is bash or setsid, and `alive`
  # would call the component dead. Wait for the exec (or the process's death).
  for _ in $(seq 1 100); do
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$real" ] && return 0
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.02
  done
  phalanx::log "$name (pid $pid) did not exec $real within 2 s"
}

# stop_all [--keep-watchdog]: TERM every recorded process (never ourselves: the watchdog execs `down`), wait up to
# 15 s, then KILL.
stop_all() {
  local name rec pid exe i left names=()
  for name in "${COMPONENTS[@]}"; do
    [ "${1:-}" = --keep-watchdog ] && [ "$name" = watchdog ] && continue
    names+=("$name")
  done
  for ((i = ${#names[@]} - 1; i >= 0; i--)); do
    name=${names[$i]}
    rec=$(recorded "$name") || continue
    read -r pid exe <<<"$rec"
    [ "$pid" = $$ ] && continue
    if alive "$name"; then kill -TERM "$pid" 2>/dev/null || true; fi
  done
  for i in $(seq 1 75); do
    left=
    for name in "${names[@]}"; do
      rec=$(recorded "$name") || continue
      read -r pid exe <<<"$rec"
      [ "$pid" = $$ ] && continue
      alive "$name" && left+=" $name"
    done
    [ -z "$left" ] && break
    [ "$i" = 75 ] && {
      phalanx::log "still running after 15 s, sending KILL:$left"
      for name in $left; do read -r pid exe <<<"$(recorded "$name")"; kill -KILL "$pid" 2>/dev/null || true; done
      sleep 0.5
    }
    sleep 0.2
  done
}

# remove_state: deletes what `up` created (known names only, never the whole dir: it may be user-given) and the
# tmpfs etcd data dir recorded in cluster.env. Logs stay for post-mortems.
remove_state() {
  local data=
  if [ -f "$ENV_FILE" ]; then data=$(sed -n 's/^ETCD_DATA=//p' "$ENV_FILE"); fi
  case $data in
    /dev/shm/phalanx-etcd.*|"$STATE"/etcd) rm -rf "$data" ;;
    "") ;;
    *) phalanx::log "not removing unexpected etcd data dir '$data'" ;;
  esac
  rm -rf "$PKI" "$STATE/etcd" "$STATE/kwok-stages.yaml" "$STATE"/*.kubeconfig "$KUBECONFIG_OUT" "$ENV_FILE"
  if [ "${1:-}" = --keep-watchdog ] && [ -f "$PIDS/watchdog" ]; then
    find "$PIDS" -type f ! -name watchdog -delete
  else
    rm -rf "$PIDS"
  fi
}

load_env() {
  [ -f "$ENV_FILE" ] || return 1
  # shellcheck disable=SC1090
  source "$ENV_FILE"
}

api_get() {  # api_get PATH: GET against the apiserver as admin, body on stdout
  curl -fsS --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://127.0.0.1:$API_PORT$1"
}

print_export() { echo "export KUBECONFIG=$KUBECONFIG_OUT"; }

# --- certificates (openssl CLI) ----------------------------------------------------------------------------
# Own CA; apiserver serving cert for localhost/127.0.0.1; one client cert per identity. ECDSA P-256 keeps
# generation fast; the service-account signing key is RSA 2048 (RS256, what every client expects).
gen_pki() {
  [ -f "$PKI/.complete" ] && return 0
  rm -rf "$PKI"; mkdir -p "$PKI"; chmod 700 "$PKI"
  local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  cat >"$PKI/openssl.cnf" <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = DNS:localhost,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:10.96.0.1
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
EOF
  local q=(-config "$PKI/openssl.cnf")
  openssl req -x509 "${q[@]}" -extensions ca "${ec[@]}" -keyout "$PKI/ca.key" -out "$PKI/ca.crt" \
    -days 3650 -subj "/CN=phalanx-test-ca" 2>/dev/null
  # leaf NAME PROFILE SUBJECT
  leaf() {
    openssl req -new "${q[@]}" "${ec[@]}" -keyout "$PKI/$1.key" -out "$PKI/$1.csr" -subj "$3" 2>/dev/null
    openssl x509 -req -in "$PKI/$1.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
      -set_serial "0x$(openssl rand -hex 12)" -days 3650 -sha256 \
      -extfile "$PKI/openssl.cnf" -extensions "$2" -out "$PKI/$1.crt" 2>/dev/null
    rm -f "$PKI/$1.csr"
  }
  leaf apiserver server "/CN=kube-apiserver"
  leaf admin client "/O=system:masters/CN=phalanx-admin"
  leaf kcm client "/CN=system:kube-controller-manager"
  leaf scheduler client "/CN=system:kube-scheduler"
  leaf kwok client "/O=system:masters/CN=kwok-controller"
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  chmod 600 "$PKI"/*.key
  touch "$PKI/.complete"
}

write_kubeconfigs() {
  local s="https://127.0.0.1:$API_PORT"
  phalanx::write_kubeconfig "$KUBECONFIG_OUT" "$s" "$PKI/ca.crt" "$PKI/admin.crt" "$PKI/admin.key" phalanx-admin
  phalanx::write_kubeconfig "$STATE/kcm.kubeconfig" "$s" "$PKI/ca.crt" "$PKI/kcm.crt" "$PKI/kcm.key" kcm
  phalanx::write_kubeconfig "$STATE/scheduler.kubeconfig" "$s" "$PKI/ca.crt" "$PKI/scheduler.crt" "$PKI/scheduler.key" scheduler
  phalanx::write_kubeconfig "$STATE/kwok.kubeconfig" "$s" "$PKI/ca.crt" "$PKI/kwok.crt" "$PKI/kwok.key" kwok
}

# kwok stages: node-initialize (Ready + addresses, keeps the capacity the test set), pod-ready (bound pods turn
# Running) and pod-delete (pods with a deletionTimestamp are removed). No heartbeat stage: the node-lifecycle
# controller is off, so nodes never go stale, and thousands of nodes would otherwise write every few seconds.
write_kwok_stages() {
  local f src out=$STATE/kwok-stages.yaml modstage=
  if command -v go >/dev/null; then modstage=$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage; fi
  : >"$out"
  for f in node/fast/node-initialize pod/fast/pod-ready pod/fast/pod-delete; do
    src=$BIN/kwok-stages/$(basename "$f").yaml
    [ -f "$src" ] || src=$modstage/$f.yaml  # fallback: kwok's module in the Go module cache
    [ -f "$src" ] || phalanx::die "kwok stage $(basename "$f").yaml not found in $BIN/kwok-stages; run 'make bins' (hack/build-bins.sh)"
    { echo "---"; cat "$src"; } >>"$out"
  done
}

check_binaries() {
  local missing=() b need=(etcd kube-apiserver kube-controller-manager kwok)
  [ "$WITH_KUBE_SCHEDULER" = 1 ] && need+=(kube-scheduler)
  for b in "${need[@]}"; do [ -x "$BIN/$b" ] || missing+=("$b"); done
  [ ${#missing[@]} -eq 0 ] ||
    phalanx::die "missing binaries in $BIN: ${missing[*]}. Build them with 'make bins' (hack/build-bins.sh; 20-40 min cold)."
  for b in openssl curl flock setsid; do command -v "$b" >/dev/null || phalanx::die "'$b' is required but not on PATH"; done
}

# wait_until NAME TIMEOUT DESCRIPTION CMD...: polls CMD every 0.2 s; fails early when component NAME died.
wait_until() {
  local name=$1 timeout=$2 what=$3 deadline; shift 3
  deadline=$((SECONDS + timeout))
  while ! "$@"; do  # probes are quiet themselves: a redirection here would also swallow trap messages
    if ! alive "$name"; then
      phalanx::log "$name exited while waiting for $what; last log lines ($LOGS/$name.log):"
      tail -n 15 "$LOGS/$name.log" >&2 || true
      return 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      phalanx::log "timed out after ${timeout}s waiting for $what; see $LOGS/$name.log"
      tail -n 15 "$LOGS/$name.log" >&2 || true
      return 1
    fi
    sleep 0.2
  done
}

etcd_healthy() { curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; }
api_ready() { [ "$(api_get /readyz 2>/dev/null)" = ok ]; }
default_sa() { api_get /api/v1/namespaces/default/serviceaccounts/default >/dev/null 2>&1; }

port_conflict() { grep -qis "address already in use" "$LOGS"/etcd.log "$LOGS"/kube-apiserver.log 2>/dev/null; }

# The minor version of the API server binary (0 when unknown).
api_minor() {
  local m; m=$("$BIN/kube-apiserver" --version 2>/dev/null | sed -n 's/^Kubernetes v1\.\([0-9]*\).*/\1/p')
  echo "${m:-0}"
}

gates_args() {
  if [ "$UPSTREAM_WORKLOAD_API" = 1 ]; then
    local gates=GenericWorkload=true,CompositePodGroup=true,TopologyAwareWorkloadScheduling=true
    # WorkloadWithJob (KEP-6089: a Job's spec.scheduling, from which the Job controller creates the Workload and the
    # PodGroup) exists from 1.37; kube-apiserver refuses a gate it does not know.
    # DRAWorkloadResourceClaims (KEP-5729, beta from 1.37, off by default): a PodGroup's own spec.resourceClaims,
    # from which kube-controller-manager generates one claim per group and resolves its members' entries to it.
    if [ "$(api_minor)" -ge 37 ]; then gates+=,WorkloadWithJob=true,DRAWorkloadResourceClaims=true; fi
    echo "--feature-gates=$gates"
  fi
}

# The API versions a cluster with upstream's Workload API serves: 1.37 has CompositePodGroup only in v1alpha3; 1.38
# has it in v1beta1 with the rest (its own scheduler and controllers read that version), so its beta API alone is
# turned on, as a 1.38 cluster that adopts the beta would.
runtime_config() {
  if [ "$(api_minor)" -ge 38 ]; then echo scheduling.k8s.io/v1beta1=true; else
    echo scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true; fi
}

# start_all: one attempt at bringing every component up. Returns 1 on failure (the caller stops what started).
start_all() {
  local t0=$SECONDS gates
  ETCD_PORT=$(phalanx::free_port)
  ETCD_PEER_PORT=$(phalanx::free_port "$ETCD_PORT")
  API_PORT=$(phalanx::free_port "$ETCD_PORT" "$ETCD_PEER_PORT")
  if [ -d /dev/shm ] && [ -w /dev/shm ]; then ETCD_DATA=$(mktemp -d /dev/shm/phalanx-etcd.XXXXXX); else
    ETCD_DATA=$STATE/etcd; mkdir -p "$ETCD_DATA"; fi
  # Written before anything starts so that `down` can clean up a half-started cluster.
  cat >"$ENV_FILE" <<EOF
ETCD_PORT=$ETCD_PORT
ETCD_PEER_PORT=$ETCD_PEER_PORT
API_PORT=$API_PORT
ETCD_DATA=$ETCD_DATA
BIN_DIR=$BIN
LOG_DIR=$LOGS
UPSTREAM_WORKLOAD_API=$UPSTREAM_WORKLOAD_API
WITH_KUBE_SCHEDULER=$WITH_KUBE_SCHEDULER
AUDIT_LOG=$AUDIT_LOG
EOF
  gen_pki
  write_kubeconfigs
  write_kwok_stages
  gates=$(gates_args)

  phalanx::log "etcd on 127.0.0.1:$ETCD_PORT (data $ETCD_DATA)"
  start etcd "$BIN/etcd" --name=phalanx --data-dir="$ETCD_DATA" \
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="phalanx=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls= \
    --unsafe-no-fsync --quota-backend-bytes=8589934592 --log-level=warn
  wait_until etcd 60 "etcd /health" etcd_healthy || return 1

  phalanx::log "kube-apiserver on https://127.0.0.1:$API_PORT"
  local api_args=(
    --etcd-servers="http://127.0.0.1:$ETCD_PORT"
    --bind-address=127.0.0.1 --secure-port="$API_PORT" --advertise-address=127.0.0.1
    --cert-dir="$PKI" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key"
    --client-ca-file="$PKI/ca.crt" --authorization-mode=RBAC
    --service-account-issuer="https://127.0.0.1:$API_PORT" --service-account-key-file="$PKI/sa.pub"
    --service-account-signing-key-file="$PKI/sa.key"
    --service-cluster-ip-range=10.96.0.0/16 --endpoint-reconciler-type=none
    --allow-privileged=true --profiling=false --v=1
    # TaintNodesByCondition puts node.kubernetes.io/not-ready:NoSchedule on every new node; only the
    # node-lifecycle controller (off here: kwok sends no heartbeats) would take it away again.
    --disable-admission-plugins=TaintNodesByCondition
  )
  if [ "$UPSTREAM_WORKLOAD_API" = 1 ]; then
    api_args+=("$gates" "--runtime-config=$(runtime_config)")
  fi
  if [ -n "$AUDIT_LOG" ]; then
    # Blocking mode: a request is answered only after its event is written, so the log is complete up to a
    # SIGKILL. maxsize in MB; large enough that the file is never rotated under a reader.
    api_args+=(--audit-log-path="$AUDIT_LOG" --audit-policy-file="$AUDIT_POLICY" --audit-log-format=json
      --audit-log-mode=blocking --audit-log-maxsize=1000000 --audit-log-maxbackup=0)
  fi
  # shellcheck disable=SC2206
  api_args+=(${APISERVER_EXTRA_ARGS:-})
  start kube-apiserver "$BIN/kube-apiserver" "${api_args[@]}"
  wait_until kube-apiserver "$START_TIMEOUT" "kube-apiserver /readyz" api_ready || return 1

  phalanx::log "kube-controller-manager (node-lifecycle, node-ipam and ttl controllers off)"
  local kcm_args=(
    --kubeconfig="$STATE/kcm.kubeconfig" --leader-elect=false --secure-port=0
    --use-service-account-credentials=true --service-account-private-key-file="$PKI/sa.key"
    --root-ca-file="$PKI/ca.crt" --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key"
    --controllers="*,-node-lifecycle-controller,-node-ipam-controller,-ttl-controller"
    --kube-api-qps=200 --kube-api-burst=400 --v=1
  )
  [ -n "$gates" ] && kcm_args+=("$gates")
  # shellcheck disable=SC2206
  kcm_args+=(${KCM_EXTRA_ARGS:-})
  start kube-controller-manager "$BIN/kube-controller-manager" "${kcm_args[@]}"

  phalanx::log "kwok (nodes annotated kwok.x-k8s.io/node=fake; stages node-initialize, pod-ready, pod-delete)"
  local kwok_args=(
    --kubeconfig="$STATE/kwok.kubeconfig" --config="$STATE/kwok-stages.yaml"
    --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake
    --node-lease-duration-seconds=0 --cidr=10.128.0.0/9 --node-ip=10.0.0.1
  )
  # shellcheck disable=SC2206
  kwok_args+=(${KWOK_EXTRA_ARGS:-})
  start kwok "$BIN/kwok" "${kwok_args[@]}"

  if [ "$WITH_KUBE_SCHEDULER" = 1 ]; then
    phalanx::log "kube-scheduler (upstream, leader election off)"
    local s_args=(--kubeconfig="$STATE/scheduler.kubeconfig" --leader-elect=false --secure-port=0 --v=1)
    [ -n "$gates" ] && s_args+=("$gates")
    # shellcheck disable=SC2206
    s_args+=(${SCHEDULER_EXTRA_ARGS:-})
    start kube-scheduler "$BIN/kube-scheduler" "${s_args[@]}"
  fi

  # The default ServiceAccount appears once the controller-manager's serviceaccount controller runs; pods are
  # rejected by admission before that, so `up` returns only when it exists.
  wait_until kube-controller-manager 120 "the default ServiceAccount (controller-manager)" default_sa || return 1
  alive kwok || { phalanx::log "kwok exited; see $LOGS/kwok.log"; tail -n 15 "$LOGS/kwok.log" >&2; return 1; }
  if [ "$WITH_KUBE_SCHEDULER" = 1 ] && ! alive kube-scheduler; then
    phalanx::log "kube-scheduler exited; see $LOGS/kube-scheduler.log"; tail -n 15 "$LOGS/kube-scheduler.log" >&2; return 1
  fi
  phalanx::log "control plane ready in $((SECONDS - t0)) s; logs in $LOGS"
}

start_watchdog() {
  [ -n "$WATCH_PID" ] || return 0
  local st
  st=$(phalanx::proc_start_time "$WATCH_PID")
  [ -n "$st" ] || phalanx::die "--watch-pid $WATCH_PID: no such process"
  ( exec setsid bash "$here/cluster.sh" __watch --state-dir "$STATE" --log-dir "$LOGS" \
      --watch-pid "$WATCH_PID" --watch-start "$st" ) </dev/null >>"$LOGS/watchdog.log" 2>&1 9>&- &
  record_pid watchdog "$!" "$(readlink -f /proc/$$/exe)"
  phalanx::log "watchdog $! tears the cluster down when process $WATCH_PID exits"
}

# --- commands -----------------------------------------------------------------------------------------------
cmd_up() {
  lock
  local want_api=$UPSTREAM_WORKLOAD_API want_sched=$WITH_KUBE_SCHEDULER want_audit=$AUDIT_LOG pid
  if load_env; then
    AUDIT_LOG=${AUDIT_LOG:-}
    local ok=1 name
    for name in etcd kube-apiserver kube-controller-manager kwok; do alive "$name" || ok=0; done
    [ "$WITH_KUBE_SCHEDULER" = 1 ] && { alive kube-scheduler || ok=0; }
    if [ $ok = 1 ] && [ "$UPSTREAM_WORKLOAD_API" = "$want_api" ] && [ "$WITH_KUBE_SCHEDULER" = "$want_sched" ] &&
      [ "$AUDIT_LOG" = "$want_audit" ] &&
      [ "$(api_get /readyz 2>/dev/null)" = ok ]; then
      phalanx::log "already running at https://127.0.0.1:$API_PORT (state $STATE)"
      if [ -n "$WATCH_PID" ]; then
        # A watchdog left by an earlier caller watches that caller, which may be exiting right now (a benchmark
        # started just after another one ended): it would tear down the cluster this caller is about to use. The
        # cluster passes to this caller. The watchdog's PID is also the `down` it may have exec'd already.
        if alive watchdog; then
          read -r pid _ <<<"$(recorded watchdog)"
          kill -TERM "$pid" 2>/dev/null || true
        fi
        start_watchdog
      fi
      print_export
      return 0
    fi
    UPSTREAM_WORKLOAD_API=$want_api WITH_KUBE_SCHEDULER=$want_sched AUDIT_LOG=$want_audit
    phalanx::log "found a stopped, partial or differently configured cluster in $STATE; restarting it"
    stop_all
    remove_state
  fi
  check_binaries
  # Interrupted (Ctrl-C on `make cluster-up`, the test binary killed while starting): stop what already runs.
  # Components run in their own sessions, so nothing else would.
  trap 'phalanx::log "interrupted; stopping what was started"; stop_all; remove_state; exit 130' INT TERM HUP
  # The watchdog comes first, so a test binary that dies during the start still gets its cluster torn down
  # (the watchdog's `down` waits for our lock).
  start_watchdog
  local attempt
  for attempt in 1 2 3; do
    if start_all; then
      trap - INT TERM HUP
      print_export
      return 0
    fi
    if port_conflict && [ $attempt -lt 3 ]; then
      phalanx::log "port taken meanwhile (attempt $attempt); retrying on other ports"
      stop_all --keep-watchdog; remove_state --keep-watchdog
      continue
    fi
    stop_all; remove_state
    phalanx::die "control plane failed to start; logs: $LOGS"
  done
}

cmd_down() {
  lock
  if [ ! -f "$ENV_FILE" ] && [ ! -d "$PIDS" ]; then
    phalanx::log "no cluster recorded in $STATE"
    return 0
  fi
  stop_all
  remove_state
  phalanx::log "stopped; state removed from $STATE (logs kept in $LOGS)"
}

cmd_status() {
  load_env || { echo "no cluster recorded in $STATE"; return 3; }
  local rc=0 name rec ready
  for name in "${COMPONENTS[@]}"; do
    rec=$(recorded "$name") || continue
    if alive "$name"; then printf '%-24s running  pid %s\n' "$name" "${rec%% *}"; else
      printf '%-24s DEAD     pid %s (log %s)\n' "$name" "${rec%% *}" "$LOGS/$name.log"; rc=1; fi
  done
  ready=$(api_get /readyz 2>/dev/null || true)
  echo "etcd                     http://127.0.0.1:$ETCD_PORT (data $ETCD_DATA)"
  echo "kube-apiserver           https://127.0.0.1:$API_PORT /readyz: ${ready:-unreachable}"
  echo "upstream workload API    $([ "$UPSTREAM_WORKLOAD_API" = 1 ] && echo on || echo off)"
  echo "kubeconfig               $KUBECONFIG_OUT"
  echo "logs                     $LOGS"
  [ "$ready" = ok ] || rc=1
  return $rc
}

cmd_env() {
  load_env || phalanx::die "no cluster recorded in $STATE; run hack/cluster.sh up"
  print_export
}

# component_arg: checks that `kill`/`restart` got the NAME of a recorded component.
component_arg() {
  case $COMPONENT in
    etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kwok) ;;
    "") phalanx::die "$cmd needs a component: etcd, kube-apiserver, kube-controller-manager, kube-scheduler or kwok" ;;
    *) phalanx::die "$cmd: unknown component '$COMPONENT'" ;;
  esac
  load_env || phalanx::die "no cluster recorded in $STATE"
  recorded "$COMPONENT" >/dev/null || phalanx::die "$COMPONENT is not part of the cluster in $STATE"
}

# kill_component: SIGKILL the recorded process of $COMPONENT (if it runs) and wait until it is gone.
kill_component() {
  local pid exe
  read -r pid exe <<<"$(recorded "$COMPONENT")"
  alive "$COMPONENT" || return 0
  kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do alive "$COMPONENT" || return 0; sleep 0.05; done
  phalanx::die "$COMPONENT (pid $pid) still runs 5 s after SIGKILL"
}

# Fault injection for the chaos suite: SIGKILL, no shutdown of any kind (the data stays; `restart` resumes it).
cmd_kill() {
  lock
  component_arg
  kill_component
  phalanx::log "killed $COMPONENT (SIGKILL)"
}

# Starts $COMPONENT again with the command line `start` recorded (same ports, flags and data directory), appending
# to its log; waits for etcd's /health or kube-apiserver's /readyz.
cmd_restart() {
  local add_upstream=$UPSTREAM_WORKLOAD_API  # this command's flag, before load_env reads the recorded one
  lock
  component_arg
  kill_component
  [ -f "$PIDS/$COMPONENT.cmd" ] || phalanx::die "no recorded command line for $COMPONENT ($PIDS/$COMPONENT.cmd)"
  local argv=()
  mapfile -d '' argv <"$PIDS/$COMPONENT.cmd"
  # An API server that starts serving upstream's Workload API, as a cluster whose administrator turns it on does;
  # the flags are recorded with the command line, so a later restart keeps them. (Repeated --feature-gates and
  # --runtime-config flags add up.)
  if [ "$add_upstream" = 1 ] && [ "$COMPONENT" = kube-apiserver ] && [ "$UPSTREAM_WORKLOAD_API" != 1 ]; then
    UPSTREAM_WORKLOAD_API=1
    argv+=("$(gates_args)" "--runtime-config=$(runtime_config)")
    sed -i 's/^UPSTREAM_WORKLOAD_API=.*/UPSTREAM_WORKLOAD_API=1/' "$ENV_FILE"
  fi
  echo "--- restarted by cluster.sh restart at $(date -u +%FT%TZ) ---" >>"$LOGS/$COMPONENT.log"
  APPEND_LOG=1 start "$COMPONENT" "${argv[@]}"
  case $COMPONENT in
    etcd) wait_until etcd 60 "etcd /health" etcd_healthy || phalanx::die "etcd did not come back" ;;
    kube-apiserver) wait_until kube-apiserver "$START_TIMEOUT" "kube-apiserver /readyz" api_ready ||
      phalanx::die "kube-apiserver did not come back" ;;
    *) sleep 0.5; alive "$COMPONENT" || phalanx::die "$COMPONENT exited at once; see $LOGS/$COMPONENT.log" ;;
  esac
  phalanx::log "restarted $COMPONENT (pid $(recorded "$COMPONENT" | cut -d' ' -f1))"
}

# Internal: the watchdog loop. Polls once a second; when the watched process is gone (or its PID was reused),
# it becomes `down` itself (exec keeps the PID, which stop_all skips).
cmd_watch() {
  while [ "$(phalanx::proc_start_time "$WATCH_PID")" = "$WATCH_START" ]; do sleep 1; done
  phalanx::log "process $WATCH_PID exited; tearing down $STATE"
  exec bash "$here/cluster.sh" down --state-dir "$STATE" --log-dir "$LOGS"
}

case $cmd in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) cmd_env ;;
  kill) cmd_kill ;;
  restart) cmd_restart ;;
  __watch) cmd_watch ;;
  ""|-h|--help|help) usage 0 ;;
  *) echo "cluster.sh: unknown command '$cmd'" >&2; usage ;;
esac
