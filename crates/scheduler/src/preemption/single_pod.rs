//! Pod-by-pod preemption for a standalone pod (upstream `DefaultPreemption.PostFilter`:
//! `pkg/scheduler/framework/preemption/preemption.go` `Evaluator.Preempt`,
//! `findCandidates`/`DryRunPreemption`, `SelectVictimsOnNode` and `pickOneNodeForPreemption`
//! in `default_preemption.go` and `preemption.go`).
//!
//! Per node: evict every lower-priority unit touching it (an `all` unit leaves all its nodes),
//! check the pod fits, then reprieve units most important first (PDB-violating ones first).
//! Nodes whose Filter says UnschedulableAndUnresolvable are skipped. Among the candidate nodes
//! the lowest [`Cost`] wins (the ordering group preemption uses too: fewest PDB violations,
//! lowest highest victim priority, lowest priority sum, fewest pods, latest start of the
//! highest-priority victims), then the first found.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::framework::{Code, PostFilterResult, PreemptionHandle, Preemptor, ProposedAssignment, Status};
use crate::preemption::cost::Cost;
use crate::preemption::evaluator::{Chosen, eligibility, result};
use crate::preemption::reprieve::reprieve;
use crate::preemption::units::{self, VictimUnit};
use crate::snapshot::Snapshot;

/// Upstream reason when a node has no lower-priority pod.
pub const NO_VICTIMS_POD: &str = "No preemption victims found for incoming pod";
/// Upstream reason for nodes where Filter is UnschedulableAndUnresolvable.
pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
/// Upstream `MinCandidateNodesPercentage` default.
pub const MIN_CANDIDATE_NODES_PERCENTAGE: usize = 10;
/// Upstream `MinCandidateNodesAbsolute` default.
pub const MIN_CANDIDATE_NODES_ABSOLUTE: usize = 100;

#[derive(Debug, Clone)]
struct NodeCandidate {
    node: usize,
    victims: Vec<usize>,
    cost: Cost,
}

/// Upstream `calculateNumCandidates`: 10% of the nodes, at least 100, at most all.
fn num_candidates(n: usize) -> usize {
    (n * MIN_CANDIDATE_NODES_PERCENTAGE / 100)
        .max(MIN_CANDIDATE_NODES_ABSOLUTE)
        .min(n)
}

/// `SelectVictimsOnNode`; `Err` carries the Filter message when the pod does not fit even
/// with every candidate gone.
fn select_on_node(
    snapshot: &mut Snapshot,
    handle: &mut dyn PreemptionHandle,
    preemptor: &Preemptor<'_>,
    units: &[VictimUnit],
    potential: &[usize],
    idx: usize,
) -> Result<NodeCandidate, String> {
    let Some(pod) = preemptor.pods.first() else {
        return Err(String::new());
    };
    let mark = snapshot.mark();
    units::evict(snapshot, potential.iter().map(|&u| &units[u]));
    let st = handle.filter(snapshot, pod, idx);
    if !st.is_success() {
        snapshot.revert_to(mark);
        return Err(st.message);
    }
    let global = !handle.node_local(snapshot, pod);
    let independent = |u: &VictimUnit| !global && !u.has_affinity && !u.on_node(idx);
    let mut fits = |s: &mut Snapshot, h: &mut dyn PreemptionHandle, _: &VictimUnit| -> bool {
        h.filter(s, pod, idx).is_success()
    };
    let r = reprieve(snapshot, handle, units, potential, &independent, &mut fits);
    snapshot.revert_to(mark);
    Ok(NodeCandidate {
        node: idx,
        cost: Cost::of(units, &r),
        victims: r.victims,
    })
}

/// Pod-by-pod preemption; messages are upstream's, without a prefix.
pub(crate) fn preempt(
    snapshot: &mut Snapshot,
    preemptor: &Preemptor<'_>,
    handle: &mut dyn PreemptionHandle,
) -> Result<PostFilterResult, Status> {
    let Some(pod) = preemptor.pods.first().cloned() else {
        return Err(Status::new(Code::Error, "no pod to preempt for"));
    };
    if let Some(waiting) = eligibility(snapshot, preemptor, handle)? {
        return Ok(waiting);
    }
    let n = snapshot.len();
    let mut units = units::collect(snapshot, preemptor.priority);
    if snapshot.preemption.pdbs().is_empty() {
        units::sort_by_priority(&mut units);
    } else {
        units::sort_for_budgets(&mut units);
    }
    let mut on_node: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, u) in units.iter().enumerate() {
        for m in u.members() {
            if let Some(list) = m.node.and_then(|node| on_node.get_mut(node))
                && list.last() != Some(&i)
            {
                list.push(i);
            }
        }
    }
    // Start at a pod-specific offset so that pods spread over the candidate budget (upstream
    // starts at a random offset).
    let mut h = DefaultHasher::new();
    pod.uid.hash(&mut h);
    let offset = if n == 0 {
        0
    } else {
        (h.finish() % n as u64) as usize
    };
    let want = num_candidates(n);
    let mut found: Vec<NodeCandidate> = Vec::new();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut all_unresolvable = true;
    for k in 0..n {
        let idx = (offset + k) % n;
        let st = handle.filter(snapshot, &pod, idx);
        if st.code == Code::UnschedulableAndUnresolvable {
            *reasons.entry(NOT_HELPFUL.into()).or_default() += 1;
            continue;
        }
        all_unresolvable = false;
        if st.is_success() {
            // Fits as things are (a nomination went away meanwhile): no victims needed.
            found.push(NodeCandidate {
                node: idx,
                victims: vec![],
                cost: Cost::NONE,
            });
            break;
        }
        if on_node[idx].is_empty() {
            *reasons.entry(NO_VICTIMS_POD.into()).or_default() += 1;
            continue;
        }
        match select_on_node(snapshot, handle, preemptor, &units, &on_node[idx], idx) {
            Ok(c) => {
                found.push(c);
                if found.len() >= want {
                    break;
                }
            }
            Err(msg) => *reasons.entry(msg).or_default() += 1,
        }
    }
    // Upstream `pickOneNodeForPreemption`: the lowest cost, then the first found.
    let Some(best) = found.into_iter().min_by_key(|c| c.cost) else {
        let mut parts: Vec<String> = reasons.iter().map(|(r, c)| format!("{c} {r}")).collect();
        parts.sort();
        let code = if all_unresolvable {
            Code::UnschedulableAndUnresolvable
        } else {
            Code::Unschedulable
        };
        return Err(Status::new(
            code,
            format!("0/{n} nodes are available: {}.", parts.join(", ")),
        ));
    };
    let chosen = Chosen {
        assignments: vec![ProposedAssignment {
            pod: pod.clone(),
            node: best.node,
        }],
        victims: best.victims,
        cost: best.cost,
    };
    Ok(result(snapshot, preemptor, &units, chosen))
}
