//! Pod-by-pod preemption for a standalone pod (upstream `DefaultPreemption.PostFilter`:
//! `pkg/scheduler/framework/preemption/preemption.go` `Evaluator.Preempt`,
//! `findCandidates`/`DryRunPreemption`, `SelectVictimsOnNode` and `pickOneNodeForPreemption`
//! in `default_preemption.go` and `preemption.go`).
//!
//! Per node: evict every lower-priority unit touching it (an `all` unit leaves all its nodes),
//! check the pod fits, then reprieve units most important first (PDB-violating ones first).
//! Nodes whose Filter says UnschedulableAndUnresolvable are skipped. Among the candidate nodes:
//! fewest PDB violations, lowest highest victim priority, lowest priority sum, fewest victims,
//! latest start of the highest-priority victims, then the first found.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::framework::{Code, PostFilterResult, PreemptionHandle, Preemptor, ProposedAssignment, Status};
use crate::preemption::evaluator::{Chosen, eligibility, result};
use crate::preemption::reprieve::{Cost, Reprieved, reprieve};
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
    pdb_violations: usize,
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
        victims: r.victims,
        pdb_violations: r.pdb_violations,
    })
}

/// Ordering key of a candidate node, smaller is better (upstream `pickOneNodeForPreemption`).
fn rank(units: &[VictimUnit], c: &NodeCandidate) -> (usize, i64, i64, usize, std::cmp::Reverse<Option<i64>>) {
    let pods = || {
        c.victims
            .iter()
            .flat_map(|&i| units[i].members().map(move |m| (i, m)))
    };
    let highest = c
        .victims
        .iter()
        .map(|&i| i64::from(units[i].priority))
        .max()
        .unwrap_or(i64::MIN);
    // Offset so that negative priorities still sum the right way (upstream adds MaxInt32 + 1).
    let sum: i64 = pods()
        .map(|(i, _)| i64::from(units[i].priority) + i64::from(i32::MAX) + 1)
        .sum();
    let count = pods().count();
    let earliest_of_highest = pods()
        .filter(|(i, _)| i64::from(units[*i].priority) == highest)
        .filter_map(|(i, _)| units[i].earliest_start)
        .min();
    (
        c.pdb_violations,
        highest,
        sum,
        count,
        std::cmp::Reverse(earliest_of_highest),
    )
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
    if let Some(ongoing) = eligibility(snapshot, preemptor)? {
        return Ok(ongoing);
    }
    let n = snapshot.len();
    let mut units = units::collect(snapshot, preemptor.priority);
    if snapshot.preemption.pdbs().is_empty() {
        units::sort_by_priority(&mut units);
    } else {
        units::sort(&mut units);
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
                pdb_violations: 0,
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
    let Some(best) = found.iter().min_by_key(|c| rank(&units, c)).cloned() else {
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
    let cost = Cost::of(
        &units,
        &Reprieved {
            victims: best.victims.clone(),
            pdb_violations: best.pdb_violations,
        },
    );
    let chosen = Chosen {
        assignments: vec![ProposedAssignment {
            pod: pod.clone(),
            node: best.node,
        }],
        victims: best.victims,
        cost,
    };
    Ok(result(snapshot, preemptor.key, &units, chosen))
}
