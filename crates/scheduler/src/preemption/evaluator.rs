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
//! Two Phalanx additions, both choosing among upstream-style results by disruption (fewest
//! PDB violations, then fewest victim units, then lowest highest victim priority, then lowest
//! priority sum; ties keep upstream's choice):
//! - **Candidate placements** (upstream 1.37 takes the single best placement; scoring the top
//!   placements by victim cost is listed as future work): for a topology-constrained root the
//!   algorithm returns its best `preemptionCandidatePlacements` placements instead of one, and
//!   each is reprieved.
//! - **Priority tiers**: when upstream's run (every candidate evicted) takes a victim above the
//!   lowest candidate priority, the lowest priority levels are tried on their own (evict only
//!   units of priority ≤ p), so a preemptor that fits by evicting priority-5 pods does not take
//!   a priority-10 pod just because the scorer preferred its node (upstream's integration test
//!   "Partial Preemption with basic policy" expects exactly that choice).

use crate::decision::{Nomination, Victim};
use crate::framework::{Code, PostFilterResult, PreemptionHandle, Preemptor, ProposedAssignment, Status};
use crate::model::{EntityKey, PreemptionPolicy};
use crate::preemption::reprieve::{Cost, reprieve};
use crate::preemption::units::{self, VictimUnit};
use crate::snapshot::Snapshot;

/// Upstream message for `preemptionPolicy: Never`.
pub const NOT_ELIGIBLE_NEVER: &str = "not eligible due to preemptionPolicy=Never.";
/// Upstream message when a lower-priority pod on a nominated node is still terminating.
pub const NOT_ELIGIBLE_TERMINATING: &str = "not eligible due to a terminating pod on the nominated node.";
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
/// `preemptorEligibleToPreemptOthers` / `PodEligibleToPreemptOthers`). `Ok(Some)` = a
/// preemption is in flight: Success with the current nominations (k/k#140641).
pub(crate) fn eligibility(
    snapshot: &Snapshot,
    preemptor: &Preemptor<'_>,
) -> Result<Option<PostFilterResult>, Status> {
    if preemptor.preemption_policy == PreemptionPolicy::Never {
        return Err(Status::new(Code::Unschedulable, NOT_ELIGIBLE_NEVER));
    }
    let st = &snapshot.preemption;
    if st.is_in_flight(preemptor.key) {
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
        return Ok(Some(PostFilterResult {
            nominations,
            victims: vec![],
            message: String::new(),
            ongoing: true,
        }));
    }
    let mut nodes: Vec<&str> = preemptor
        .pods
        .iter()
        .filter_map(|p| st.nomination(&p.key).map(|n| &*n.node))
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    for name in nodes {
        let Some(i) = snapshot.node_index(name) else {
            continue;
        };
        for p in &snapshot.node(i).pods {
            if st.is_terminating(&p.key) && units::lineage(snapshot, p).priority < preemptor.priority {
                return Err(Status::new(Code::Unschedulable, NOT_ELIGIBLE_TERMINATING));
            }
        }
    }
    Ok(None)
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

/// Reprieves `units[start..]` against one candidate set of assignments.
fn evaluate(
    snapshot: &mut Snapshot,
    handle: &mut dyn PreemptionHandle,
    units: &[VictimUnit],
    start: usize,
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
    let removed: Vec<usize> = (start..units.len()).collect();
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
    let r = reprieve(snapshot, handle, units, &removed, &independent, &mut fits);
    let cost = Cost::of(units, &r);
    Chosen {
        assignments,
        victims: r.victims,
        cost,
    }
}

/// Reprieves every result of one scheduling run (`units[start..]` evicted) and keeps the best
/// of them and `best`: lower cost first; on a tie, the earlier tier (`tier` 0 = every candidate
/// evicted, upstream's run) and then the better-scored placement win. Returns the winner and
/// its (tier, rank).
fn best_of(
    snapshot: &mut Snapshot,
    handle: &mut dyn PreemptionHandle,
    units: &[VictimUnit],
    start: usize,
    results: Vec<crate::framework::PodGroupAssignments>,
    best: Option<(Chosen, (usize, usize))>,
    tier: usize,
) -> Option<(Chosen, (usize, usize))> {
    let mut best = best;
    for (rank, a) in results.into_iter().enumerate() {
        let c = evaluate(snapshot, handle, units, start, a.proposed);
        let better = best
            .as_ref()
            .is_none_or(|(b, at)| (c.cost, (tier, rank)) < (b.cost, *at));
        if better {
            best = Some((c, (tier, rank)));
        }
    }
    best
}

/// The group algorithm; see the module documentation. `k` = candidate placements (≥ 1).
/// Messages are upstream's, without the `pod group preemption: ` prefix.
pub(crate) fn preempt(
    snapshot: &mut Snapshot,
    preemptor: &Preemptor<'_>,
    handle: &mut dyn PreemptionHandle,
    k: usize,
) -> Result<PostFilterResult, Status> {
    if let Some(ongoing) = eligibility(snapshot, preemptor)? {
        return Ok(ongoing);
    }
    let mut candidates = units::collect(snapshot, preemptor.priority);
    if candidates.is_empty() {
        return Err(Status::new(Code::UnschedulableAndUnresolvable, NO_VICTIMS_GROUP));
    }
    if snapshot.preemption.pdbs().is_empty() {
        units::sort_by_priority(&mut candidates);
    } else {
        units::sort(&mut candidates);
    }
    let k = if preemptor.topology_constrained {
        k.max(1)
    } else {
        1
    };
    let mark = snapshot.mark();
    // Upstream's run: every candidate evicted. Its status is the one reported on failure.
    units::evict(snapshot, &candidates);
    let full = match handle.schedule(snapshot, k) {
        Ok(results) => best_of(snapshot, handle, &candidates, 0, results, None, 0),
        Err(st) => {
            snapshot.revert_to(mark);
            return Err(st);
        }
    };
    snapshot.revert_to(mark);
    let lowest = candidates.last().map_or(i64::MIN, |u| i64::from(u.priority));
    let mut best = full;
    // Priority tiers, only when upstream's answer takes something above the lowest level.
    if best.as_ref().is_some_and(|(c, _)| c.cost.highest > lowest) {
        let starts = tier_starts(&candidates);
        let mut evicted_from = candidates.len();
        // The last start is the full set, already done.
        for (t, &start) in starts.iter().enumerate().take(starts.len().saturating_sub(1)) {
            units::evict(snapshot, &candidates[start..evicted_from]);
            evicted_from = start;
            match handle.schedule(snapshot, k) {
                Ok(results) => best = best_of(snapshot, handle, &candidates, start, results, best, t + 1),
                Err(st) if st.code == Code::Error => {
                    snapshot.revert_to(mark);
                    return Err(st);
                }
                // Not enough room at this level: a higher one may do.
                Err(_) => {}
            }
        }
        snapshot.revert_to(mark);
    }
    let Some((chosen, _)) = best else {
        return Err(Status::new(Code::Unschedulable, "no placement found"));
    };
    Ok(result(snapshot, preemptor.key, &candidates, chosen))
}

/// Turns a chosen evaluation into nominations and victims (victims most important first).
pub(crate) fn result(
    snapshot: &Snapshot,
    preemptor: &EntityKey,
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
                preemptor: preemptor.clone(),
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
    PostFilterResult {
        nominations,
        victims,
        message: String::new(),
        ongoing: false,
    }
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
