//! Workload-aware preemption for a root group (upstream `PodGroupEvaluator.Preempt` /
//! `selectVictimsOnDomain` in `pkg/scheduler/framework/preemption/podgrouppreemption.go`,
//! KEP-4671 / KEP-5710; reached through `DefaultPreemption.PodGroupPostFilter`).
//!
//! Steps, as upstream: eligibility; victim units below the preemptor's priority (none →
//! UnschedulableAndUnresolvable); evict every candidate; re-run the whole group algorithm
//! (placement and topology included); if it still does not fit, return its status; otherwise
//! reprieve units most important first (PDB-violating ones first) while every preemptor
//! assignment still passes Filter; the rest are the victims.
//!
//! Phalanx additions, all choosing by the one victim [`Cost`] both preemptors use (upstream
//! `pickOneNodeForPreemption`'s order counted in pods: fewest PDB violations, lowest highest
//! victim priority, lowest priority sum, fewest pods, latest start; ties keep upstream's
//! choice):
//! - **Steered node choice** ([`node_cost`]): each run sees, per node, the cost of its
//!   lowest-priority candidates, and the per-pod pass prefers cheaper nodes before the plugin
//!   score; upstream's run scores nodes as if empty, so victims never influence which node is
//!   taken. Upstream's run is made too and wins unless the steered one costs less, so the
//!   estimate can only improve on upstream's victims, never add to them.
//! - **Candidate placements** (upstream 1.37 takes the single best placement; scoring the top
//!   placements by victim cost is listed as future work): for a topology-constrained root the
//!   algorithm returns its best `preemptionCandidatePlacements` placements instead of one, and
//!   each is reprieved.
//! - **Priority tiers**: when upstream's run (every candidate evicted) takes a victim above the
//!   lowest candidate priority, the lowest priority levels are tried on their own (evict only
//!   units of priority ≤ p), so a preemptor that fits by evicting priority-5 pods does not take
//!   a priority-10 pod just because the scorer preferred its node (upstream's integration test
//!   "Partial Preemption with basic policy" expects exactly that choice).
//! - **PDB tier**: when the best answer still violates a PodDisruptionBudget, the candidates
//!   whose eviction violates none are tried on their own.

use std::collections::{HashMap, HashSet};

use crate::decision::{Nomination, Victim};
use crate::framework::{
    Code, PodGroupAssignments, PostFilterResult, PreemptionHandle, Preemptor, ProposedAssignment, Status,
};
use crate::model::{PodKey, PreemptionPolicy};
use crate::preemption::cost::Cost;
use crate::preemption::node_cost;
use crate::preemption::pdb::split_by_violation;
use crate::preemption::reprieve::reprieve;
use crate::preemption::units::{self, VictimUnit};
use crate::snapshot::Snapshot;

/// Upstream message for `preemptionPolicy: Never`.
pub const NOT_ELIGIBLE_NEVER: &str = "not eligible due to preemptionPolicy=Never.";
/// Upstream message when a lower-priority pod on a nominated node is still terminating.
pub const NOT_ELIGIBLE_TERMINATING: &str = "not eligible due to a terminating pod on the nominated node.";
/// Start of the message when a preemptor keeps waiting for its victims on a nominated node to
/// terminate (followed by `; ` and [`NOT_ELIGIBLE_TERMINATING`]); see `eligibility`.
pub const WAITING_TERMINATING: &str = "waiting for preempted pods on the nominated node to terminate";
/// Upstream message when no unit has a lower priority than a group preemptor.
pub const NO_VICTIMS_GROUP: &str = "No preemption victims found for incoming preemptor";

/// At most this many priority levels are simulated: the lowest `MAX_TIERS - 1` alone, and
/// all candidates together (upstream's single run).
pub const MAX_TIERS: usize = 4;

/// Result of one preemption evaluation (before it is turned into a [`PostFilterResult`]).
#[derive(Debug, Clone)]
pub(crate) struct Chosen {
    pub(crate) assignments: Vec<ProposedAssignment>,
    pub(crate) victims: Vec<usize>,
    pub(crate) cost: Cost,
}

/// Eligibility shared by group and pod preemptors (upstream
/// `preemptorEligibleToPreemptOthers` in `podgrouppreemption.go` / `PodEligibleToPreemptOthers`
/// in `default_preemption.go`). `Err`: not eligible (`preemptionPolicy: Never`). `Ok(Some)`:
/// keep waiting, Success with the current nominations and nothing new evicted, either because
/// a preemption for the entity is in flight (k/k#140641; empty message) or because a
/// lower-priority pod terminating by preemption sits on a member's nominated node (message
/// [`WAITING_TERMINATING`]). Upstream refuses the latter with [`NOT_ELIGIBLE_TERMINATING`] and
/// keeps the nomination (a failure without nominating info leaves it); saying "waiting" keeps it
/// here too, so that a restarted scheduler that only sees nominations and terminating pods
/// waits instead of preempting again. A nominated node where Filter says
/// UnschedulableAndUnresolvable for that member (tainted, cordoned, gone from the snapshot)
/// does not hold the member back: upstream `PodEligibleToPreemptOthers` makes the pod eligible
/// then; for groups (upstream checks only the terminating pods) this is Phalanx's extension.
pub(crate) fn eligibility(
    snapshot: &Snapshot,
    preemptor: &Preemptor<'_>,
    handle: &mut dyn PreemptionHandle,
) -> Result<Option<PostFilterResult>, Status> {
    if preemptor.preemption_policy == PreemptionPolicy::Never {
        return Err(Status::new(Code::Unschedulable, NOT_ELIGIBLE_NEVER));
    }
    let st = &snapshot.preemption;
    if st.is_in_flight(preemptor.key) {
        return Ok(Some(waiting(snapshot, preemptor, String::new())));
    }
    // Per nominated node: whether a lower-priority pod terminates there by preemption.
    let mut terminating: HashMap<&str, bool> = HashMap::new();
    for p in preemptor.pods {
        let Some(n) = st.nomination(&p.key) else {
            continue;
        };
        let Some(idx) = snapshot.node_index(&n.node) else {
            // Gone: upstream's status for an absent node is UnschedulableAndUnresolvable.
            continue;
        };
        let busy = *terminating.entry(&*n.node).or_insert_with(|| {
            snapshot.node(idx).pods.iter().any(|q| {
                st.is_terminating(&q.key) && units::lineage(snapshot, q).priority < preemptor.priority
            })
        });
        if busy && handle.filter(snapshot, p, idx).code != Code::UnschedulableAndUnresolvable {
            return Ok(Some(waiting(
                snapshot,
                preemptor,
                format!("{WAITING_TERMINATING}; {NOT_ELIGIBLE_TERMINATING}"),
            )));
        }
    }
    Ok(None)
}

/// The "keep waiting" result: Success, ongoing, the members' current nominations.
fn waiting(snapshot: &Snapshot, preemptor: &Preemptor<'_>, message: String) -> PostFilterResult {
    let st = &snapshot.preemption;
    let nominations = preemptor
        .pods
        .iter()
        .filter_map(|p| {
            st.nomination(&p.key).map(|n| Nomination {
                pod: p.key.clone(),
                node: n.node.clone(),
            })
        })
        .collect();
    PostFilterResult {
        nominations,
        victims: vec![],
        cleared_nominations: vec![],
        message,
        ongoing: true,
    }
}

/// Start index (into the units, sorted priority-descending) of each simulated tier, smallest
/// set first: "priority ≤ p" is always a suffix.
fn tier_starts(units: &[VictimUnit]) -> Vec<usize> {
    let mut starts = Vec::new();
    for i in (0..units.len()).rev() {
        let boundary = i == 0 || units[i - 1].priority != units[i].priority;
        if boundary {
            starts.push(i);
        }
    }
    if starts.len() > MAX_TIERS {
        let full = starts.len() - 1;
        starts = starts[..MAX_TIERS - 1]
            .iter()
            .copied()
            .chain([starts[full]])
            .collect();
    }
    starts
}

/// Whether preemptor assignments must all be re-checked when any unit returns (a Filter result
/// may depend on other nodes).
fn global_check(
    snapshot: &Snapshot,
    handle: &dyn PreemptionHandle,
    assignments: &[ProposedAssignment],
) -> bool {
    assignments.iter().any(|a| !handle.node_local(snapshot, &a.pod))
}

/// Reprieves the evicted units `removed` (indices into `units`) against one candidate set of
/// assignments.
fn evaluate(
    snapshot: &mut Snapshot,
    handle: &mut dyn PreemptionHandle,
    units: &[VictimUnit],
    removed: &[usize],
    assignments: Vec<ProposedAssignment>,
) -> Chosen {
    let assignments: Vec<ProposedAssignment> = assignments
        .into_iter()
        .filter(|a| a.node < snapshot.len())
        .collect();
    let global = global_check(snapshot, handle, &assignments);
    let mut used = vec![false; snapshot.len()];
    // Assignment indices per node, in scheduling order.
    let mut on_node: Vec<Vec<usize>> = vec![Vec::new(); snapshot.len()];
    for (i, a) in assignments.iter().enumerate() {
        used[a.node] = true;
        on_node[a.node].push(i);
    }
    // Node-local Filters and a unit on none of the preemptors' nodes: nothing can change.
    let independent = |unit: &VictimUnit| !global && !unit.has_affinity && !unit.touches(&used);
    let mut fits = |s: &mut Snapshot, h: &mut dyn PreemptionHandle, unit: &VictimUnit| -> bool {
        // Which assignments to re-check: all of them when a Filter may look at other nodes,
        // else those on the unit's nodes (a node-local Filter only sees its own node, so the
        // preemptors placed elsewhere need not be assumed either).
        let order: Vec<usize> = if global || unit.has_affinity {
            (0..assignments.len()).collect()
        } else {
            let mut v: Vec<usize> = unit
                .members()
                .filter_map(|m| m.node)
                .flat_map(|n| on_node[n].iter().copied())
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let m = s.mark();
        let mut ok = true;
        // In scheduling order, each preemptor assumed after it passes, as upstream.
        for a in order.iter().map(|&i| &assignments[i]) {
            if !h.filter(s, &a.pod, a.node).is_success() {
                ok = false;
                break;
            }
            s.assume(a.pod.clone(), a.node);
        }
        s.revert_to(m);
        ok
    };
    let r = reprieve(snapshot, handle, units, removed, &independent, &mut fits);
    let cost = Cost::of(units, &r);
    Chosen {
        assignments,
        victims: r.victims,
        cost,
    }
}

/// Runs the root's algorithm with the units `removed` evicted (by the caller), steered by
/// their per-node cost ([`node_cost`]), which is cleared again before returning. The flag says
/// that every node had the same cost, so the run was upstream's own (nothing steered).
fn schedule_steered(
    snapshot: &mut Snapshot,
    handle: &mut dyn PreemptionHandle,
    units: &[VictimUnit],
    removed: &[usize],
    k: usize,
) -> (Result<Vec<PodGroupAssignments>, Status>, bool) {
    let costs = node_cost::per_node(snapshot, units, removed);
    let uniform = costs.windows(2).all(|w| w[0] == w[1]);
    snapshot.victim_costs = Some(costs);
    let r = handle.schedule(snapshot, k);
    snapshot.victim_costs = None;
    (r, uniform)
}

/// The best evaluation so far and its (tier, rank): tier 0 = every candidate evicted and nodes
/// scored as if empty (upstream's run), tier 1 = every candidate evicted, steered; rank = the
/// placement's position by score.
type Best = Option<(Chosen, (usize, usize))>;

/// Reprieves every result of one scheduling run (`removed` evicted) and keeps the best of them
/// and `best`: lower cost first; on a tie, the earlier tier and then the better-scored
/// placement win.
fn best_of(
    snapshot: &mut Snapshot,
    handle: &mut dyn PreemptionHandle,
    units: &[VictimUnit],
    removed: &[usize],
    results: Vec<PodGroupAssignments>,
    mut best: Best,
    tier: usize,
) -> Best {
    for (rank, a) in results.into_iter().enumerate() {
        let c = evaluate(snapshot, handle, units, removed, a.proposed);
        let better = best
            .as_ref()
            .is_none_or(|(b, at)| (c.cost, (tier, rank)) < (b.cost, *at));
        if better {
            best = Some((c, (tier, rank)));
        }
    }
    best
}

/// Runs the algorithm with `removed` evicted (by the caller), steered by their per-node cost
/// except in tier 0 (upstream's run, nodes scored as if empty), and folds its results into
/// `best`. A run that does not fit leaves `best` as it is; an Error is returned.
fn try_tier(
    snapshot: &mut Snapshot,
    handle: &mut dyn PreemptionHandle,
    units: &[VictimUnit],
    removed: &[usize],
    k: usize,
    best: Best,
    tier: usize,
) -> Result<Best, Status> {
    let run = if tier > 0 {
        schedule_steered(snapshot, handle, units, removed, k).0
    } else {
        handle.schedule(snapshot, k)
    };
    match run {
        Ok(results) => Ok(best_of(snapshot, handle, units, removed, results, best, tier)),
        Err(st) if st.code == Code::Error => Err(st),
        // Not enough room with only these evicted: another tier may do.
        Err(_) => Ok(best),
    }
}

/// The group algorithm; see the module documentation. `k` = candidate placements (≥ 1).
/// Messages are upstream's, without the `pod group preemption: ` prefix.
pub(crate) fn preempt(
    snapshot: &mut Snapshot,
    preemptor: &Preemptor<'_>,
    handle: &mut dyn PreemptionHandle,
    k: usize,
) -> Result<PostFilterResult, Status> {
    if let Some(waiting) = eligibility(snapshot, preemptor, handle)? {
        return Ok(waiting);
    }
    let mut candidates = units::collect(snapshot, preemptor.priority);
    if candidates.is_empty() {
        return Err(Status::new(Code::UnschedulableAndUnresolvable, NO_VICTIMS_GROUP));
    }
    let has_pdbs = !snapshot.preemption.pdbs().is_empty();
    if has_pdbs {
        units::sort_for_budgets(&mut candidates);
    } else {
        units::sort_by_priority(&mut candidates);
    }
    let k = if preemptor.topology_constrained {
        k.max(1)
    } else {
        1
    };
    let mark = snapshot.mark();
    // Upstream's run: every candidate evicted. Its status is the one reported on failure.
    let all: Vec<usize> = (0..candidates.len()).collect();
    units::evict(snapshot, &candidates);
    let (run, uniform) = schedule_steered(snapshot, handle, &candidates, &all, k);
    let steered = match run {
        Ok(results) => {
            let tier = if uniform { 0 } else { 1 };
            best_of(snapshot, handle, &candidates, &all, results, None, tier)
        }
        Err(st) => {
            snapshot.revert_to(mark);
            return Err(st);
        }
    };
    // Upstream's own run (nodes scored as if empty) is the floor: steering by a per-node
    // estimate can lead the group onto nodes whose victims all stay needed (two equal-priority
    // pods, the later-started one's node looking cheaper, both evicted where the preferred
    // node's pod alone would do). Tier 0, so that it wins a tie. Nothing to gain when the
    // steered answer evicts nothing, or when every node cost the same (the run was upstream's).
    let full = if !uniform && steered.as_ref().is_some_and(|(c, _)| c.cost.pods > 0) {
        let r = try_tier(snapshot, handle, &candidates, &all, k, steered, 0);
        snapshot.revert_to(mark);
        r?
    } else {
        snapshot.revert_to(mark);
        steered
    };
    let lowest = candidates.last().map_or(i64::MIN, |u| i64::from(u.priority));
    let mut best = full;
    let mut tier = 2;
    // Priority tiers, only when upstream's answer takes something above the lowest level.
    if best.as_ref().is_some_and(|(c, _)| c.cost.highest > lowest) {
        let starts = tier_starts(&candidates);
        let mut evicted_from = candidates.len();
        // The last start is the full set, already done.
        for &start in starts.iter().take(starts.len().saturating_sub(1)) {
            units::evict(snapshot, &candidates[start..evicted_from]);
            evicted_from = start;
            let removed: Vec<usize> = (start..candidates.len()).collect();
            best = match try_tier(snapshot, handle, &candidates, &removed, k, best, tier) {
                Ok(b) => b,
                Err(st) => {
                    snapshot.revert_to(mark);
                    return Err(st);
                }
            };
            tier += 1;
        }
        snapshot.revert_to(mark);
    }
    // The PDB tier: only the candidates whose eviction violates no budget, when the best answer
    // so far violates one (the per-node cost steers within a placement; this also reaches
    // placements that the scorer ranks below a violating one).
    if has_pdbs && best.as_ref().is_some_and(|(c, _)| c.cost.pdb_violations > 0) {
        let (_, ok) = split_by_violation(
            snapshot.preemption.pdbs(),
            candidates.iter().map(|u| u.members().map(|m| &m.pdbs[..])),
        );
        if !ok.is_empty() {
            units::evict(snapshot, ok.iter().map(|&i| &candidates[i]));
            let r = try_tier(snapshot, handle, &candidates, &ok, k, best, tier);
            snapshot.revert_to(mark);
            best = r?;
        }
    }
    let Some((chosen, _)) = best else {
        return Err(Status::new(Code::Unschedulable, "no placement found"));
    };
    Ok(result(snapshot, preemptor, &candidates, chosen))
}

/// Turns a chosen evaluation into nominations, victims (most important first) and the
/// nominations to clear.
pub(crate) fn result(
    snapshot: &Snapshot,
    preemptor: &Preemptor<'_>,
    units: &[VictimUnit],
    chosen: Chosen,
) -> PostFilterResult {
    let mut victims = Vec::new();
    for &i in &chosen.victims {
        let u = &units[i];
        for m in u.members() {
            victims.push(Victim {
                pod: m.pod.key.clone(),
                uid: m.pod.uid.clone(),
                node: snapshot
                    .pod_node(&m.pod.key)
                    .cloned()
                    .or_else(|| m.pod.node_name.clone())
                    .unwrap_or_else(|| "".into()),
                group: u.group.clone(),
                mode: u.mode,
                priority: u.priority,
                preemptor: preemptor.key.clone(),
            });
        }
    }
    let nominations = chosen
        .assignments
        .iter()
        .map(|a| Nomination {
            pod: a.pod.key.clone(),
            node: snapshot.node(a.node).node.name.clone(),
        })
        .collect();
    let cleared_nominations = lower_priority_nominated(snapshot, preemptor, &victims);
    PostFilterResult {
        nominations,
        victims,
        cleared_nominations,
        message: String::new(),
        ongoing: false,
    }
}

/// Pods nominated to the victims' nodes with a priority below the preemptor's, the
/// preemptor's own pods excepted, in victim-node order (upstream `getLowerPriorityNominatedPods`
/// in `prepareCandidate`, `preemption.go`): the room they waited for is taken, so the runtime
/// clears their nomination and they look for another node.
fn lower_priority_nominated(
    snapshot: &Snapshot,
    preemptor: &Preemptor<'_>,
    victims: &[Victim],
) -> Vec<PodKey> {
    let st = &snapshot.preemption;
    if !st.has_nominated() {
        return Vec::new();
    }
    let own: HashSet<&PodKey> = preemptor.pods.iter().map(|p| &p.key).collect();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut out: Vec<PodKey> = Vec::new();
    for v in victims {
        if !seen.insert(&v.node) {
            continue;
        }
        // A pod is nominated to one node only, so no pod comes twice.
        for n in st.nominated_on(&v.node) {
            if n.pod.priority < preemptor.priority && !own.contains(&n.pod.key) {
                out.push(n.pod.key.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NodeStatic, PodInfo};
    use std::sync::Arc;

    #[test]
    fn tiers_are_growing_suffixes_capped_to_the_lowest_levels_and_all() {
        let mut s = Snapshot::new([Arc::new(NodeStatic::simple("n", 100_000, 1 << 30, &[]))]);
        for (i, prio) in [1, 1, 2, 3, 4, 5, 5, 6].iter().enumerate() {
            let mut p = PodInfo::simple("ns", &format!("p{i}"), 100);
            p.priority = *prio;
            p.node_name = Some("n".into());
            s.add_pod(Arc::new(p));
        }
        let mut units = units::collect(&s, 100);
        units::sort_by_priority(&mut units);
        let prios: Vec<i32> = units.iter().map(|u| u.priority).collect();
        assert_eq!(prios, [6, 5, 5, 4, 3, 2, 1, 1]);
        // Priority <= 1, <= 2, <= 3 alone, then everything (upstream's single run).
        assert_eq!(tier_starts(&units), [6, 5, 4, 0]);
        assert_eq!(tier_starts(&units[..3]), [1, 0]);
    }
}
