#!/usr/bin/env bash
# `make bench-compare`: the core benchmark (crates/scheduler/benches/cycle.rs) of a base commit against the working
# tree, in one run on one machine, so a change to the core reports its delta as a ratio.
#
#   hack/bench-compare.sh                                 base `main`, cases gang8 gang1000 gang8-rack, 5 rounds
#   BASE=HEAD~1 CASES=gang8 ROUNDS=3 hack/bench-compare.sh
#   make bench-compare BASE=<rev> CASES='<case>...' ROUNDS=<n>
#
# BASE (default `main`) is any revision git resolves to a commit. "head" is always the working tree, uncommitted
# changes included; so on main itself the default compares the committed HEAD with the uncommitted changes, and
# after a commit `BASE=HEAD~1` measures that commit.
#
# Steps:
#  1. A detached `git worktree` of the base under <target>/bench-compare/<short-sha> (reused when it is there, clean
#     and at that commit; never removed: `git worktree remove <dir>` does it, and `git worktree prune` clears the
#     entry once the directory is gone, e.g. after `cargo clean`). Its bench is built with
#     `cargo bench -p phalanx-scheduler --bench cycle --no-run` in the SAME target directory as this tree (`target`
#     or $CARGO_TARGET_DIR), so registry dependencies are compiled once; the executable is read from cargo's JSON
#     messages and copied to <target>/bench-compare/bin/. Then the working tree's bench the same way. Cargo cannot
#     tell the two trees' workspace crates apart (same names, same fingerprints; see build() below), so the base's
#     are rebuilt each time and removed from the target right after its build: the workspace crates are compiled
#     twice per run, and the target is left with this tree's.
#  2. ROUNDS rounds; in each, every case of CASES runs once per binary with BENCH_REPEAT=1, under `nice -n
#     $BENCH_NICE` (default 10) for both: base first in odd rounds, head first in even ones, so a drift of the
#     machine's load falls on both sides alike. The bench's case filter is a substring match (`gang8` also selects
#     gang8-rack, preempt-gang8, ...), so each run is stopped as soon as the line of its case is out. A case the base
#     (or head) does not have is reported as missing, not as an error.
#  3. Per case, the median over rounds of every figure of the `bench:` line of each side and the ratio head/base
#     (pods/s: higher is better; times: lower is better), as a table; then one line per case:
#       bench-compare: <case> base=<sha> pods_per_sec_ratio=<r> p50_ratio=<r> rounds=<n>
#     (preemption cases: attempt_p50_ratio and preemption_p50_ratio; a missing case: missing=base|head|both).
#     Raw lines, build output and the table go to <target>/bench-compare/<short-sha>-vs-head.log.
#
# Exits non-zero when BASE does not resolve, a build fails, or a bench run fails (panics, or ends without its line
# although the binary has the case). Environment: BASE, CASES, ROUNDS, BENCH_NICE, CARGO (default cargo),
# CARGO_TARGET_DIR.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"
cd "$PHALANX_ROOT"

BASE=${BASE:-main}
CASES=${CASES:-gang8 gang1000 gang8-rack}
ROUNDS=${ROUNDS:-5}
BENCH_NICE=${BENCH_NICE:-10}
CARGO=${CARGO:-cargo}
target=${CARGO_TARGET_DIR:-target}
case $target in /*) ;; *) target=$PHALANX_ROOT/$target ;; esac

[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || phalanx::die "ROUNDS must be a positive integer, not '$ROUNDS'"
[[ $BENCH_NICE =~ ^-?[0-9]+$ ]] || phalanx::die "BENCH_NICE must be an integer, not '$BENCH_NICE'"
read -r -a cases <<<"$CASES"
[ ${#cases[@]} -gt 0 ] || phalanx::die "CASES is empty"

base_sha=$(git rev-parse --verify --quiet "$BASE^{commit}") ||
  phalanx::die "BASE=$BASE does not resolve to a commit in $PHALANX_ROOT (give any revision: BASE=main, BASE=HEAD~1, BASE=<sha>)"
short=$(git rev-parse --short=12 "$base_sha")
head_sha=$(git rev-parse HEAD)
dirty=""
# --no-optional-locks: no opportunistic index refresh (another git command may be running in this tree).
git --no-optional-locks diff --quiet HEAD -- || dirty="+uncommitted changes"

out=$target/bench-compare
wt=$out/$short
bindir=$out/bin
log=$out/$short-vs-head.log
mkdir -p "$out" "$bindir"
: >"$log"
tmp=$(mktemp -d "$out/.run.XXXXXX")
running=""
cleanup() {
  if [ -n "$running" ]; then kill "$running" 2>/dev/null || true; fi
  if [ -n "${base_pending:-}" ]; then unshare_base || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# note MSG...: a progress line on stderr, also kept in the log.
note() { phalanx::log "$@"; echo "# $*" >>"$log"; }

note "base $BASE = $base_sha; head = working tree at $head_sha${dirty:+ $dirty}; log $log"
if [ "$base_sha" = "$head_sha" ] && [ -z "$dirty" ]; then
  note "base and head are the same code (HEAD, no uncommitted changes): an A/A run, the ratios show the noise"
fi

# 1. The base's worktree: made here, or reused when it is a clean worktree of this repository at that commit.
if [ -e "$wt" ]; then
  if [ "$(git -C "$wt" rev-parse --show-toplevel 2>/dev/null)" != "$wt" ] ||
    [ "$(git -C "$wt" rev-parse --path-format=absolute --git-common-dir 2>/dev/null)" != \
      "$(git rev-parse --path-format=absolute --git-common-dir)" ] ||
    [ "$(git -C "$wt" rev-parse HEAD 2>/dev/null)" != "$base_sha" ]; then
    phalanx::die "$wt exists but is not a worktree of this repository at $base_sha: remove it (git worktree remove --force $wt, or rm -rf it and git worktree prune)"
  fi
  changes=$(git -C "$wt" --no-optional-locks status --porcelain --untracked-files=no)
  [ -z "$changes" ] ||
    phalanx::die "the base worktree $wt has local changes, so it is not $base_sha:"$'\n'"$changes"$'\n'"remove it (git worktree remove --force $wt) and run again"
  note "base worktree $wt (reused)"
else
  force=()
  # Registered but missing (its directory went with `cargo clean`): `add` needs --force to take the path again.
  if git worktree list --porcelain | grep -qxF "worktree $wt"; then force=(--force); fi
  git worktree add --quiet --detach "${force[@]}" "$wt" "$base_sha" >>"$log" 2>&1 ||
    phalanx::die "git worktree add $wt $base_sha failed: see $log"
  note "base worktree $wt (made; git worktree remove $wt removes it)"
fi

# Cargo names and fingerprints a workspace crate by its path relative to the workspace root, and judges it fresh by
# its sources' mtimes: to cargo, the base's crates in the shared target ARE this tree's crates. So:
#  - the base's tracked files are touched before its build (they are ours), so cargo rebuilds its workspace crates;
#    else a reused worktree, older than this tree's last build, would pass for fresh and run the head's code;
#  - right after the base's build, failed or not (or on exit, if interrupted), the workspace crates it built are
#    removed from the target (`cargo clean --profile bench -p <name>`): nothing built from the base is left
#    where this tree's builds would take it for their own, and the head's build then compiles them from its sources;
#  - each executable is copied out at once, since both builds write the same file name.

# build SIDE DIR NAME: builds the cycle bench of the tree at DIR into $target, copies the executable to
# $bindir/cycle-NAME and sets $exe to it. Cargo's stderr (progress, rendered compiler errors) goes to the log; its
# JSON messages to $tmp/build-SIDE.json.
build() {
  local side=$1 dir=$2 name=$3 json=$tmp/build-$1.json err=$tmp/build-$1.err t=$SECONDS rc=0 built
  note "building the $side bench ($name) in $dir (CARGO_TARGET_DIR=$target)"
  (cd "$dir" && CARGO_TARGET_DIR=$target "$CARGO" bench -p phalanx-scheduler --bench cycle --no-run \
    --message-format=json-render-diagnostics) >"$json" 2>"$err" || rc=$?
  { echo "## cargo bench --no-run ($side, $dir), exit $rc"; cat "$err"; } >>"$log"
  # The compiler-artifact message of the bench target `cycle` carries the executable's path.
  built=$(grep '"reason":"compiler-artifact"' "$json" | grep '"kind":\["bench"\]' | grep '"name":"cycle"' |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1) || true
  exe=$bindir/cycle-$name
  rm -f "$exe"
  if [ "$rc" = 0 ] && [ -n "$built" ] && [ -x "$built" ]; then cp -f "$built" "$exe"; fi
  [ "$side" != base ] || unshare_base
  if [ "$rc" != 0 ]; then
    tail -n 40 "$err" >&2
    phalanx::die "the $side build failed (cargo exit $rc; above, the end of its output; all of it in $log)"
  fi
  if [ ! -x "$exe" ]; then
    { echo "## cargo's JSON messages ($side)"; cat "$json"; } >>"$log"
    phalanx::die "the $side build gave no executable for the bench target 'cycle' (cargo's messages are in $log)"
  fi
  note "$side built in $(( SECONDS - t )) s: $built (copied to $exe)"
}

# unshare_base: removes from the target the workspace crates (path packages) that the base's build produced. Their
# package ids read path+file:///<dir>#<name>@<version>, or path+file:///<dir>#<version> when <name> is <dir>'s
# last component; `cargo clean -p <name>` removes every build of that package in the profile's directory.
base_pending=""
unshare_base() {
  local id name names=()
  base_pending=""
  while IFS= read -r id; do
    case ${id#*#} in
      *@*) name=${id#*#}; name=${name%@*} ;;
      *) name=${id%#*}; name=${name##*/} ;;
    esac
    names+=("$name")
  done < <(grep '"reason":"compiler-artifact"' "$tmp/build-base.json" 2>/dev/null |
    sed -n 's/.*"package_id":"\(path+file:[^"]*\)".*/\1/p' | sort -u)
  [ ${#names[@]} -gt 0 ] || return 0
  for name in "${names[@]}"; do
    (cd "$wt" && CARGO_TARGET_DIR=$target "$CARGO" clean --profile bench -p "$name") >>"$log" 2>&1 ||
      phalanx::die "could not remove the base's build of $name from $target (see $log): run" \
        "\`cargo clean --profile bench -p $name\` before the next release build here"
  done
  note "removed the base's workspace crates from $target: ${names[*]}"
}

exe=""
base_pending=1
git -C "$wt" ls-files -z | (cd "$wt" && xargs -0 touch -c --)
build base "$wt" "$short"
base_bin=$exe
build head "$PHALANX_ROOT" head
head_bin=$exe
if cmp -s "$base_bin" "$head_bin"; then
  note "the two executables are identical: base and head have the same core code"
fi

# run_one SIDE BIN CASE ROUND: one run of one case; appends its figures to $tmp/results as
# "case side round key value" lines. Returns 3 when the binary has no such case (it ended without the case's line
# and exit status 0). The run is stopped once its line is out, since the filter also selects the longer names.
run_one() {
  local side=$1 bin=$2 case=$3 round=$4 fifo=$tmp/fifo line found="" killed="" rc=0 kv kvs
  rm -f "$fifo"; mkfifo "$fifo"
  BENCH_REPEAT=1 nice -n "$BENCH_NICE" "$bin" --bench "$case" >"$fifo" 2>>"$log" &
  running=$!
  exec {fd}<"$fifo"
  while IFS= read -r -u "$fd" line; do
    echo "round=$round side=$side $line" >>"$log"
    if [[ $line == "bench: $case "* ]]; then
      found=$line
      kill "$running" 2>/dev/null && killed=1
      break
    fi
  done
  exec {fd}<&-
  wait "$running" || rc=$?
  running=""
  if [ -z "$found" ]; then
    [ "$rc" = 0 ] && return 3
    phalanx::die "round $round: the $side bench ($bin --bench $case) failed with exit status $rc: see $log"
  fi
  [ -n "$killed" ] || [ "$rc" = 0 ] ||
    phalanx::die "round $round: the $side bench ($bin --bench $case) failed with exit status $rc: see $log"
  read -r -a kvs <<<"${found#"bench: $case "}"
  for kv in "${kvs[@]}"; do
    [[ $kv == *=* ]] && printf '%s\t%s\t%s\t%s\t%s\n' "$case" "$side" "$round" "${kv%%=*}" "${kv#*=}" >>"$tmp/results"
  done
  note "round $round/$ROUNDS $case $side: ${found#"bench: $case "}"
}

# 2. Alternate: base first in odd rounds, head first in even ones.
declare -A missing=()
: >"$tmp/results"
note "measuring: cases ${cases[*]}, $ROUNDS rounds, BENCH_REPEAT=1, nice -n $BENCH_NICE; load average $(cut -d' ' -f1-3 /proc/loadavg)"
t=$SECONDS
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then order=(base head); else order=(head base); fi
  for c in "${cases[@]}"; do
    for side in "${order[@]}"; do
      [ -z "${missing[$c/$side]:-}" ] || continue
      if [ "$side" = base ]; then bin=$base_bin; else bin=$head_bin; fi
      rc=0
      run_one "$side" "$bin" "$c" "$r" || rc=$?
      if [ "$rc" = 3 ]; then
        missing[$c/$side]=1
        note "$c: the $side binary has no such case (reported as missing)"
      elif [ "$rc" != 0 ]; then
        exit "$rc"
      fi
    done
  done
done
note "measured in $(( SECONDS - t )) s; load average $(cut -d' ' -f1-3 /proc/loadavg)"

# median CASE SIDE KEY: the median of that figure over the rounds (mean of the middle two for an even count).
median() {
  awk -F'\t' -v c="$1" -v s="$2" -v k="$3" '$1 == c && $2 == s && $4 == k { print $5 }' "$tmp/results" |
    sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit; m = int((NR + 1) / 2);
      printf "%.6f\n", (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'
}
# ratio HEAD BASE: head/base to 3 decimals, n/a when the base is 0.
ratio() { awk -v h="$1" -v b="$2" 'BEGIN { if (b == 0) print "n/a"; else printf "%.3f\n", h / b }'; }
# fmt KEY VALUE: pods/s and counts without decimals, times with 3.
fmt() {
  case $1 in
    *_ms) printf '%.3f' "$2" ;;
    pods_per_sec | attempts) printf '%.0f' "$2" ;;
    *) printf '%.2f' "$2" ;;
  esac
}

# 3. The table, then the parseable lines.
report=$tmp/report
{
  echo
  echo "bench-compare: base $BASE = $short, head = working tree at $(git rev-parse --short=12 HEAD)${dirty:+ $dirty};" \
    "median of $ROUNDS rounds, BENCH_REPEAT=1"
  printf '%-22s %-28s %14s %14s %10s  %s\n' case metric base head head/base ""
  for c in "${cases[@]}"; do
    if [ -n "${missing[$c/base]:-}${missing[$c/head]:-}" ]; then
      if [ -n "${missing[$c/base]:-}" ] && [ -n "${missing[$c/head]:-}" ]; then what="missing in base and head (no such case)"
      elif [ -n "${missing[$c/base]:-}" ]; then what="missing in base (head has it)"
      else what="missing in head (base has it)"; fi
      printf '%-22s %s\n' "$c" "$what"
      continue
    fi
    first=$c
    while IFS= read -r k; do
      b=$(median "$c" base "$k"); h=$(median "$c" head "$k")
      case $k in
        pods_per_sec) better="higher is better" ;;
        *_ms) better="lower is better" ;;
        *) better="" ;;
      esac
      printf '%-22s %-28s %14s %14s %10s  %s\n' "$first" "$k" "$(fmt "$k" "$b")" "$(fmt "$k" "$h")" \
        "$(ratio "$h" "$b")" "$better"
      first=""
    done < <(awk -F'\t' -v c="$c" '$1 == c && $2 == "base" && $3 == 1 { print $4 }' "$tmp/results")
  done
  echo
  for c in "${cases[@]}"; do
    if [ -n "${missing[$c/base]:-}" ] && [ -n "${missing[$c/head]:-}" ]; then m="both"
    elif [ -n "${missing[$c/base]:-}" ]; then m="base"
    elif [ -n "${missing[$c/head]:-}" ]; then m="head"
    else m=""; fi
    if [ -n "$m" ]; then
      echo "bench-compare: $c base=$base_sha missing=$m rounds=0"
      continue
    fi
    n=$(awk -F'\t' -v c="$c" '$1 == c && $2 == "base" && $4 != "" { print $3 }' "$tmp/results" | sort -u | wc -l)
    if [ -n "$(median "$c" base pods_per_sec)" ]; then
      echo "bench-compare: $c base=$base_sha" \
        "pods_per_sec_ratio=$(ratio "$(median "$c" head pods_per_sec)" "$(median "$c" base pods_per_sec)")" \
        "p50_ratio=$(ratio "$(median "$c" head cycle_p50_ms)" "$(median "$c" base cycle_p50_ms)") rounds=$n"
    else
      echo "bench-compare: $c base=$base_sha" \
        "attempt_p50_ratio=$(ratio "$(median "$c" head attempt_p50_ms)" "$(median "$c" base attempt_p50_ms)")" \
        "preemption_p50_ratio=$(ratio "$(median "$c" head preemption_p50_ms)" "$(median "$c" base preemption_p50_ms)")" \
        "rounds=$n"
    fi
  done
} >"$report"
sed "s/[[:space:]]*$//" "$report" | tee -a "$log"
