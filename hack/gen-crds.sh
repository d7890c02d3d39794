#!/usr/bin/env bash
# Regenerates the Phalanx CRDs from the Rust types in crates/api (phalanx_api::crds::to_yaml) into
#   crds/phalanx.yaml               (for `kubectl apply --server-side -f crds/`)
#   charts/phalanx/crds/phalanx.yaml (the chart's copy; the same bytes)
# Usage: hack/gen-crds.sh [--check]
#   --check   regenerate into a temporary file and fail (exit 1) if either committed file differs.
# The test `cargo test -p phalanx-api --test crds_stale` checks the same thing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
source "$here/lib.sh"
cd "$PHALANX_ROOT"

check=0
case ${1:-} in
  --check) check=1 ;;
  "") ;;
  *) phalanx::die "unknown argument $1 (usage: hack/gen-crds.sh [--check])" ;;
esac

targets=(crds/phalanx.yaml charts/phalanx/crds/phalanx.yaml)
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
phalanx::log "generating CRDs from crates/api"
cargo run -q -p phalanx-api --example crdgen >"$tmp"
[ -s "$tmp" ] || phalanx::die "crdgen produced no output"

if [ "$check" = 1 ]; then
  stale=0
  for t in "${targets[@]}"; do
    if ! cmp -s "$tmp" "$t"; then
      echo "stale: $t (run 'make crds' or hack/gen-crds.sh)" >&2
      stale=1
    fi
  done
  exit "$stale"
fi

for t in "${targets[@]}"; do
  mkdir -p "$(dirname "$t")"
  install -m 0644 "$tmp" "$t"
  phalanx::log "wrote $t"
done
