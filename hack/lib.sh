# shellcheck shell=bash
# Shared helpers for the hack/ scripts. Source it; it defines functions only (plus PHALANX_ROOT) and changes no
# shell options of the caller.
#   source "$(dirname "$0")/lib.sh"

PHALANX_ROOT=${PHALANX_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}

# phalanx::log MSG...: progress line on stderr, prefixed with the calling script's name and the time.
phalanx::log() { echo "[$(basename "$0") $(date +%H:%M:%S)] $*" >&2; }

# phalanx::die MSG...: error line on stderr, exit 1.
phalanx::die() { echo "$(basename "$0"): error: $*" >&2; exit 1; }

# phalanx::b64 FILE: the file's bytes as one line of base64 (kubeconfig *-data fields).
phalanx::b64() { base64 -w0 <"$1"; }

# phalanx::write_kubeconfig OUT SERVER CA_CRT CLIENT_CRT CLIENT_KEY [USER] [NAMESPACE]
# Writes a self-contained kubeconfig (certificates embedded, mode 0600) with one cluster, user and context, all
# named "phalanx" unless USER is given. SERVER is https://host:port. Used by cluster.sh for the admin,
# controller-manager, kwok and scheduler identities; other scripts may use it for their own certificates.
phalanx::write_kubeconfig() {
  local out=$1 server=$2 ca=$3 crt=$4 key=$5 user=${6:-phalanx} ns=${7:-default} tmp
  tmp=$(mktemp "$out.XXXXXX")
  chmod 600 "$tmp"
  cat >"$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: phalanx
  cluster:
    server: $server
    certificate-authority-data: $(phalanx::b64 "$ca")
users:
- name: $user
  user:
    client-certificate-data: $(phalanx::b64 "$crt")
    client-key-data: $(phalanx::b64 "$key")
contexts:
- name: phalanx
  context:
    cluster: phalanx
    user: $user
    namespace: $ns
current-context: phalanx
EOF
  mv "$tmp" "$out"
}

# phalanx::port_in_use PORT: true when something listens on 127.0.0.1:PORT (or on the wildcard address).
phalanx::port_in_use() {
  local p=$1
  if command -v ss >/dev/null; then
    [ -n "$(ss -Hltn "( sport = :$p )" 2>/dev/null)" ]
  else
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null
  fi
}

# phalanx::free_port [EXCLUDE...]: prints a TCP port that is free on loopback now, chosen at random in
# 10000-31999 (below Linux's ephemeral range, so outgoing connections do not take it meanwhile). Ports listed in
# EXCLUDE are skipped. Racy by nature: callers retry when a component reports "address already in use".
phalanx::free_port() {
  local p x skip
  for _ in $(seq 1 200); do
    p=$((10000 + (RANDOM * 32768 + RANDOM) % 22000))
    skip=0
    for x in "$@"; do [ "$x" = "$p" ] && skip=1; done
    [ $skip = 1 ] && continue
    phalanx::port_in_use "$p" || { echo "$p"; return 0; }
  done
  phalanx::die "no free loopback port found in 10000-31999"
}

# phalanx::proc_start_time PID: the process's start time in clock ticks since boot (field 22 of /proc/PID/stat),
# used to tell a live process from a later one that reused its PID. Empty when the process is gone.
phalanx::proc_start_time() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  s=${s##*) }   # drop "pid (comm) ", comm may contain spaces
  # shellcheck disable=SC2086
  set -- $s
  echo "${20}"
}

# phalanx::pid_is PID EXE: true when PID is alive and runs the executable EXE (absolute path). Guards against
# killing an unrelated process that reused a recorded PID.
phalanx::pid_is() {
  local pid=$1 exe=$2 cur
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  cur=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  [ "${cur% (deleted)}" = "$exe" ]
}

# phalanx::bin_dir: prints the directory of the cached control-plane binaries ($PHALANX_BIN_DIR, see versions.sh).
phalanx::bin_dir() {
  # shellcheck source=hack/versions.sh
  (source "$PHALANX_ROOT/hack/versions.sh" && echo "$PHALANX_BIN_DIR")
}

# phalanx::go_env: the Go environment of the hack/ builds from wrapper modules. GOTOOLCHAIN=auto (or
# GOTOOLCHAIN_OVERRIDE) may fetch the Go release a module asks for; the checksum database may be unreachable, so the
# modules' hashes are checked against the committed go.sum only (GONOSUMDB); -mod=mod lets a build complete go.sum;
# CGO_ENABLED=0 gives static binaries.
phalanx::go_env() {
  export GOTOOLCHAIN=${GOTOOLCHAIN_OVERRIDE:-auto}
  export GONOSUMDB=${GONOSUMDB:-k8s.io,sigs.k8s.io,go.etcd.io,helm.sh,github.com/google/go-containerregistry}
  export GOFLAGS="${GOFLAGS:-} -mod=mod"
  export CGO_ENABLED=0
}

# phalanx::k8s_go_env: phalanx::go_env for the Kubernetes build (hack/build-bins.sh step 2, hack/gen-k8s-mod.sh),
# with the toolchain that version needs ($K8S_GOTOOLCHAIN of hack/versions.sh: go1.27.3 for 1.38) unless
# GOTOOLCHAIN_OVERRIDE names one.
phalanx::k8s_go_env() {
  phalanx::go_env
  # shellcheck disable=SC2031 # set by hack/versions.sh in this shell (phalanx::bin_dir's subshell is another one)
  if [ -z "${GOTOOLCHAIN_OVERRIDE:-}" ] && [ -n "${K8S_GOTOOLCHAIN:-}" ]; then export GOTOOLCHAIN=$K8S_GOTOOLCHAIN; fi
}
