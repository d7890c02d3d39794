#!/usr/bin/env bash
# The compatibility suite: the integration tests that prove what Phalanx promises, run against the control plane of
# one Kubernetes version (K8S_VERSION, default that of hack/versions.sh). Each group below is a set of existing
# tests, selected by name, so the suite checks the same assertions `make test` checks on v1.37.
#
#   K8S_VERSION=v1.34.4 hack/test-compat.sh          one version (builds its control plane first if not cached)
#   hack/test-compat.sh --all                         v1.34.4, v1.35.4, v1.36.3, v1.37.2, v1.38.0-beta.0 in turn
#   hack/test-compat.sh --oldest                      the oldest supported version only (what .ci/run adds)
#   hack/test-compat.sh --list                        the groups and their tests, without running them
#
# Prints a line per group with its time, and a summary; writes it to target/compat/<version>.txt too. Exit status
# is non-zero when a group fails (the others still run, so one run shows every failure).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
cd "$root"

# The versions `--all` runs: the newest patch release of each supported minor that the Go module proxy serves (for
# 1.38, released 2026-12-16, its newest pre-release until then; its build uses Go 1.27, see hack/versions.sh).
ALL_VERSIONS=(v1.34.4 v1.35.4 v1.36.3 v1.37.2 v1.38.0-beta.0)

# name | cargo test arguments | test-name filters (substring matches, as libtest's). `--workspace --test NAME`
# (test target names are unique in the workspace) keeps cargo's feature resolution that of `make test`, so the
# suite reuses its build instead of rebuilding dependencies with other features.
SUITE=(
  "crds-and-admission|--workspace --test admission|"
  "server-probe|--workspace --test store_cluster|server_probe_matches_the_control_plane"
  "gang-and-events|--workspace --test scheduling_cluster|s1_gang_all_fit s2_quorum_wait s3_group_missing_then_capacity s5_two_gangs_no_deadlock s9_basic_partial_capacity"
  "topology-one-rack|--workspace --test scheduling_topology|preferred_rack_is_honoured_then_relaxed_to_the_block required_zone_with_preferred_rack"
  "preemption|--workspace --test preemption_cluster|victims_carry_disruption_target_before_deletion s49_full_preemption_gang preemptor_gets_nominated_node_name"
  "group-conditions|--workspace --test controllers_integration|invalid_hierarchies_are_reported_on_every_group priority_class_resolution deletion_waits_for_member_pods"
  "annotated-job|--workspace --test owner_integration|annotated_job_is_one_gang_without_a_hand_written_pod_group"
  "one-leader|--workspace --test leader|one_leader_standby_takes_over_and_lost_lease_stops"
  "volumes|--workspace --test scheduling_volumes|a_gang_binds_each_member_to_its_own_local_volume dynamic_provisioning_selects_the_nodes_and_binds_only_after_the_volumes_exist a_read_write_once_pod_claim_in_use_keeps_the_second_pod_pending a_csi_node_limit_of_two_keeps_a_third_volume_off_the_node"
  "devices|--workspace --test scheduling_dra|a_gang_of_four_gets_two_devices_each_on_its_pods_nodes a_gang_short_of_one_device_binds_nothing_and_allocates_nothing a_claim_shared_by_three_pods_is_allocated_once_and_reserved_for_all a_high_priority_gang_preempts_pods_that_hold_devices_and_gets_them"
  "chart|--workspace --test chart_cluster|"
  "explain|--workspace --test explain|explain_quorum explain_resources explain_topology explain_preemption"
  "admission-policies|--workspace --test admission_policies|"
  "upstream-api|--workspace --test scheduling_upstream --test explain_upstream|"
)

list=0; all=0
for a in "$@"; do
  case "$a" in
    --list) list=1 ;;
    --oldest) export K8S_VERSION=${ALL_VERSIONS[0]} ;;
    --all) all=1 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test-compat: unknown argument $a (try --help)" >&2; exit 2 ;;
  esac
done

if [ "$list" = 1 ]; then
  for g in "${SUITE[@]}"; do IFS='|' read -r name args filters <<<"$g"; echo "$name: cargo test $args -- ${filters:-(all)}"; done
  exit 0
fi

if [ "$all" = 1 ]; then
  rc=0
  for v in "${ALL_VERSIONS[@]}"; do K8S_VERSION=$v "$0" || rc=1; done
  echo "[test-compat] summaries in target/compat/"
  for v in "${ALL_VERSIONS[@]}"; do tail -n 1 "target/compat/$v.txt" 2>/dev/null || echo "$v: no result"; done
  exit "$rc"
fi

# shellcheck source=hack/versions.sh
source "$here/versions.sh"
export K8S_VERSION K8S_STAGING_VERSION
mkdir -p target/compat
summary=target/compat/$K8S_VERSION.txt
start=$SECONDS
echo "[test-compat $(date +%H:%M:%S)] Kubernetes $K8S_VERSION: control plane from $PHALANX_BIN_DIR"
hack/build-bins.sh
: >"$summary"
failed=()
for g in "${SUITE[@]}"; do
  IFS='|' read -r name args filters <<<"$g"
  t=$SECONDS
  # shellcheck disable=SC2086 # args and filters are word lists
  if cargo test $args -- $filters >"target/compat/$K8S_VERSION-$name.log" 2>&1; then verdict=ok; else
    verdict=FAILED; failed+=("$name"); fi
  passed=$(grep -Eo '[0-9]+ passed' "target/compat/$K8S_VERSION-$name.log" | awk '{s+=$1} END {print s+0}')
  line=$(printf '%-22s %-6s %3d tests %4d s' "$name" "$verdict" "$passed" $((SECONDS - t)))
  echo "[test-compat $(date +%H:%M:%S)] $K8S_VERSION $line"
  echo "$line" >>"$summary"
  if [ "$verdict" = FAILED ]; then tail -n 30 "target/compat/$K8S_VERSION-$name.log" | sed 's/^/    /'; fi
done
total=$((SECONDS - start))
if [ ${#failed[@]} -eq 0 ]; then
  echo "$K8S_VERSION: passed, ${#SUITE[@]} groups, $total s" | tee -a "$summary"
else
  echo "$K8S_VERSION: FAILED (${failed[*]}), $total s; logs in target/compat/$K8S_VERSION-<group>.log" | tee -a "$summary"
  exit 1
fi
