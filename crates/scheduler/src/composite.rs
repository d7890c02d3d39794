//! The hierarchical algorithm for a root CompositePodGroup (KEP-6012; upstream
//! `podGroupSchedulingRecursiveAlgorithm`, `compositePodGroupSchedulingPlacementAlgorithm` and
//! `compositePodGroupSchedulingDefaultAlgorithm`).
//!
//! A CompositePodGroup always takes the placement path: PlacementGenerate for its own
//! constraint within the parent's placement, one simulation per candidate (children in sibling
//! order, each child placed and assumed inside the candidate so later siblings see it,
//! PlacementFeasible after each child on `minGroupCount`, abort and revert as soon as the
//! policy cannot be met), revert after each candidate, PlacementScore over every descendant
//! leaf assignment, and the best subtree re-assumed. Leaves run the PodGroup algorithms
//! ([`crate::algorithm::run_leaf_in`]) restricted to the parent's placement.
//!
//! Snapshot contract: on success the subtree's assignments are assumed; otherwise nothing of
//! the subtree is assumed.

use crate::algorithm::{GroupContext, run_leaf_in, simulate_placements};
use crate::framework::{Code, Placement, PlacementProgress, PodGroupAssignments, Status};
use crate::model::{CompositeGroupInfo, GroupKey};
use crate::placements::composite_placements;
use crate::snapshot::Snapshot;
use crate::tree_eval::{TreeInput, TreeResult};

/// Runs the whole tree from its root (upstream `RunRootSchedulingAlgorithm` for a root CPG).
/// A root that succeeds without placing any new pod becomes Unschedulable with
/// `no pods were schedulable`, as for a standalone PodGroup. `ctx.in_tree` should be true.
pub fn run_tree(ctx: &mut GroupContext<'_>, snapshot: &mut Snapshot, input: &TreeInput<'_>) -> TreeResult {
    let root = input.tree.root().key.clone();
    let mut r = run_composite(ctx, snapshot, input, &root, None);
    if r.status.is_success() && r.assignments.is_empty() {
        // `statuses[root]` keeps the tree's own Success: the groups below keep their own
        // results (their quorum is met by running members); only the cycle fails.
        r.status = Status::new(Code::Unschedulable, "no pods were schedulable");
    }
    r
}

/// A CompositePodGroup: placements for its own constraint within `parent` (all nodes when
/// `None`), one simulation each, best one re-assumed.
fn run_composite(
    ctx: &mut GroupContext<'_>,
    snapshot: &mut Snapshot,
    input: &TreeInput<'_>,
    key: &GroupKey,
    parent: Option<&[usize]>,
) -> TreeResult {
    let Some(cpg) = input.tree.composite(key).cloned() else {
        return TreeResult::new(Status::new(
            Code::Error,
            format!("composite pod group object not found in state for {key}"),
        ));
    };
    if cpg.topology_key.is_none() && cpg.preferred_topology.is_empty() {
        // No constraint: the single placement is the parent's; no revert/re-assume needed.
        return composite_default(ctx, snapshot, input, &cpg, parent);
    }
    let leaves = input.tree.leaves_under(key);
    let required = match &cpg.topology_key {
        None => None,
        Some(topology) => match composite_placements(ctx.generators, snapshot, &cpg, &leaves, parent) {
            Err(st) => return own(key, Status::new(Code::Error, st.message)),
            Ok(p) if p.is_empty() => {
                return own(
                    key,
                    Status::new(
                        Code::Unschedulable,
                        format!("0/0 placements are available: no node has the topology label {topology:?}"),
                    ),
                );
            }
            Ok(p) => Some(p),
        },
    };
    if !cpg.preferred_topology.is_empty() {
        // Preferred levels (Phalanx), narrowest first, as for a PodGroup
        // (`crate::algorithm::placement_algorithm_in`): the first level with a feasible domain wins.
        let base = required
            .clone()
            .unwrap_or_else(|| vec![crate::placements::parent_placement(snapshot, parent)]);
        for level in &cpg.preferred_topology {
            let domains = crate::placements::preferred_level(snapshot, level, &leaves, &base);
            if domains.is_empty() {
                continue;
            }
            let r = evaluate_composite(ctx, snapshot, input, &cpg, &leaves, &domains);
            if r.status.is_success() || r.status.code == Code::Error {
                return r;
            }
        }
    }
    match required {
        Some(placements) => evaluate_composite(ctx, snapshot, input, &cpg, &leaves, &placements),
        None => composite_default(ctx, snapshot, input, &cpg, parent),
    }
}

/// One simulation per candidate placement of a CompositePodGroup (until
/// [`GroupContext::placements_to_find`] are feasible), PlacementScore, and the best subtree
/// re-assumed.
fn evaluate_composite(
    ctx: &mut GroupContext<'_>,
    snapshot: &mut Snapshot,
    input: &TreeInput<'_>,
    cpg: &CompositeGroupInfo,
    leaves: &[GroupKey],
    placements: &[Placement],
) -> TreeResult {
    let key = &cpg.key;
    ctx.stats.placements += placements.len() as u32;
    let limit = ctx.placements_to_find(placements);
    let mut successes = match simulate_placements(snapshot, placements, None, limit, |snapshot, p| {
        composite_default(ctx, snapshot, input, cpg, Some(&p.nodes))
    }) {
        Ok(successes) => successes,
        Err(mut r) => {
            if r.status.code != Code::Error {
                // The CPG's own status is the re-worded placement failure.
                r.statuses.insert(key.clone(), r.status.clone());
            }
            return r;
        }
    };
    ctx.stats.feasible_placements += successes.len() as u32;
    let best = if successes.len() == 1 {
        0
    } else {
        match score(ctx, snapshot, cpg, leaves, placements, &successes) {
            Ok(b) => b,
            Err(st) => return own(key, Status::new(Code::Error, st.message)),
        }
    };
    let (pi, mut chosen) = successes.swap_remove(best);
    // Commit the best subtree so that later siblings see it.
    for a in &chosen.assignments {
        snapshot.assume(a.pod.clone(), a.node);
    }
    chosen.placement = Some(placements[pi].name.clone());
    chosen
}

fn own(key: &GroupKey, status: Status) -> TreeResult {
    let mut r = TreeResult::new(status.clone());
    r.statuses.insert(key.clone(), status);
    r
}

/// Children in order inside `nodes`, PlacementFeasible on `minGroupCount` after each; reverts
/// the subtree unless the final status is Success.
pub(crate) fn composite_default(
    ctx: &mut GroupContext<'_>,
    snapshot: &mut Snapshot,
    input: &TreeInput<'_>,
    cpg: &CompositeGroupInfo,
    nodes: Option<&[usize]>,
) -> TreeResult {
    let mark = snapshot.mark();
    let children = input.tree.children(&cpg.key);
    let mut progress = PlacementProgress {
        scheduled: 0,
        remaining: children.len(),
    };
    let mut res = TreeResult::new(Status::success());
    let mut st = ctx.feasible.feasible_composite(cpg, progress);
    if !(st.is_rejected() || st.code == Code::Error) {
        for child in children {
            let child_res = run_child(ctx, snapshot, input, child, nodes);
            let child_status = child_res.status.clone();
            let child_assignments = child_res.assignments.clone();
            res.merge(child_res);
            if child_status.code == Code::Error {
                st = Status::new(
                    Code::Error,
                    format!(
                        "composite pod group evaluation failed due to child error: {}",
                        child_status.message
                    ),
                );
                break;
            }
            progress.remaining -= 1;
            if child_status.is_success() {
                progress.scheduled += 1;
                res.assignments.extend(child_assignments);
            }
            st = ctx.feasible.feasible_composite(cpg, progress);
            if st.is_rejected() || st.code == Code::Error {
                break;
            }
        }
    }
    res.status = match st.code {
        Code::Wait => Status::new(Code::Unschedulable, st.message),
        Code::Success | Code::Skip => Status::success(),
        _ => st,
    };
    if !res.status.is_success() {
        snapshot.revert_to(mark);
        res.assignments.clear();
        if res.status.code == Code::Unschedulable
            && let Some(found) = crate::sibling_search::search(ctx, snapshot, input, cpg, nodes, run_child)
        {
            return found;
        }
    }
    res.statuses.insert(cpg.key.clone(), res.status.clone());
    res
}

/// One child of a CompositePodGroup within `nodes` (`None` = all): a leaf PodGroup through
/// [`run_leaf_in`], a CompositePodGroup through its own placement algorithm. On success the
/// child's assignments are assumed; otherwise nothing of it is.
pub(crate) fn run_child(
    ctx: &mut GroupContext<'_>,
    snapshot: &mut Snapshot,
    input: &TreeInput<'_>,
    child: &GroupKey,
    nodes: Option<&[usize]>,
) -> TreeResult {
    if let Some(leaf) = input.tree.leaf(child) {
        let pods = input.pods.get(child).map(Vec::as_slice).unwrap_or_default();
        let r = run_leaf_in(ctx, snapshot, leaf, pods, input.budget, input.max_attempts, nodes);
        let mut t = TreeResult::new(r.status.clone());
        t.statuses.insert(child.clone(), r.status.clone());
        t.assignments = r.assignments.clone();
        t.leaves.insert(child.clone(), r);
        t
    } else {
        run_composite(ctx, snapshot, input, child, nodes)
    }
}

/// PlacementScore over the successful candidates (weighted sum of normalised scores; ties go to
/// the first candidate in generation order, i.e. the smallest domain value).
fn score(
    ctx: &GroupContext<'_>,
    snapshot: &Snapshot,
    cpg: &CompositeGroupInfo,
    leaves: &[GroupKey],
    placements: &[Placement],
    successes: &[(usize, TreeResult)],
) -> Result<usize, Status> {
    let total = composite_totals(ctx, snapshot, cpg, leaves, placements, successes)?;
    let mut best = 0;
    for i in 1..total.len() {
        if total[i] > total[best] {
            best = i;
        }
    }
    Ok(best)
}

/// Weighted sum of the normalised PlacementScore of each successful candidate (same order as
/// `successes`).
pub(crate) fn composite_totals(
    ctx: &GroupContext<'_>,
    snapshot: &Snapshot,
    cpg: &CompositeGroupInfo,
    leaves: &[GroupKey],
    placements: &[Placement],
    successes: &[(usize, TreeResult)],
) -> Result<Vec<i64>, Status> {
    let mut total = vec![0i64; successes.len()];
    for (plugin, weight) in ctx.scorers {
        if *weight == 0 {
            continue;
        }
        let mut scores = Vec::with_capacity(successes.len());
        for (pi, r) in successes {
            let a = PodGroupAssignments {
                placement: placements[*pi].clone(),
                proposed: r.assignments.clone(),
            };
            scores.push(plugin.score_composite(snapshot, cpg, leaves, &a)?);
        }
        plugin.normalize(&mut scores)?;
        total.iter_mut().zip(&scores).for_each(|(t, s)| *t += s * weight);
    }
    Ok(total)
}
