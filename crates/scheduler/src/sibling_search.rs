//! The sibling search of a CompositePodGroup (a Phalanx addition). Upstream places the children
//! of a CompositePodGroup greedily, in order, each in its own best placement (KEP-6012), and its
//! docs warn that a first child may take the only domain a later child fits in. When that greedy
//! pass fails, this module searches child placements and child order for an assignment that
//! places every child that can be placed at all.
//!
//! 1. Candidates per child, within the parent's nodes: its preferred levels' domains, narrowest
//!    first, then its required placements (or the parent's nodes when it has no constraint).
//!    Each is simulated alone on the current snapshot; the infeasible ones are dropped and the
//!    rest are ordered best fit first (least free capacity left,
//!    [`crate::plugins::topology_packing::free_after`]), then in generation order.
//! 2. A child with no feasible candidate is left out with its own failure. When fewer children
//!    remain than `minGroupCount`, the search gives up at once.
//! 3. Depth-first over the remaining children: place child k in its next candidate (assumed in
//!    the snapshot), recurse, revert on a dead end. First in sibling order; if that fails, most
//!    constrained first (fewest feasible candidates, then sibling order).
//!
//! Bounds: the tree's time budget (`siblingSearchBudgetMs`, default 50 ms, counted from the
//! tree's first search) and [`MAX_STEPS`] child evaluations per search. The visiting order is
//! fixed, so the same input gives the same answer whenever the search ends before its budget;
//! the step cap makes that hold on any machine for searches up to its size.

use std::collections::HashSet;
use std::time::Instant;

use crate::algorithm::{GroupContext, generate};
use crate::framework::{Code, Placement, PlacementProgress, PodGroupAssignments};
use crate::model::{CompositeGroupInfo, GroupKey};
use crate::placements::{composite_placements, preferred_level};
use crate::plugins::topology_packing::free_after;
use crate::snapshot::Snapshot;
use crate::tree_eval::{TreeInput, TreeResult};

/// Child evaluations one search may make (candidate simulations plus depth-first steps).
pub const MAX_STEPS: u32 = 4096;

/// How the search places one child within `nodes`: the hierarchical algorithm's own step
/// (`run_child` of [`crate::composite`]), which may search again further down. The caller passes it in
/// because that algorithm calls this search: the recursion stays, and the import goes one way.
pub(crate) type RunChild =
    fn(&mut GroupContext<'_>, &mut Snapshot, &TreeInput<'_>, &GroupKey, Option<&[usize]>) -> TreeResult;

/// Why a search stopped without an answer.
enum Stop {
    /// The time budget or [`MAX_STEPS`] ran out.
    Budget,
    /// A child evaluation returned Error.
    Error,
}

struct Search<'s, 'c, 'i> {
    ctx: &'s mut GroupContext<'c>,
    input: &'s TreeInput<'i>,
    run_child: RunChild,
    deadline: Instant,
    steps: u32,
}

impl Search<'_, '_, '_> {
    fn step(&mut self) -> Result<(), Stop> {
        if self.steps >= MAX_STEPS || Instant::now() >= self.deadline {
            return Err(Stop::Budget);
        }
        self.steps += 1;
        Ok(())
    }

    /// The feasible candidates of `child`, best fit first, and its first failure when it has none.
    fn candidates(
        &mut self,
        snapshot: &mut Snapshot,
        child: &GroupKey,
        nodes: Option<&[usize]>,
    ) -> Result<(Vec<Placement>, Option<TreeResult>), Stop> {
        let all = child_candidates(self.ctx, snapshot, self.input, child, nodes).map_err(|_| Stop::Error)?;
        let mut ok: Vec<(f64, usize, Placement)> = Vec::new();
        let mut failure = None;
        for (i, c) in all.into_iter().enumerate() {
            self.step()?;
            let mark = snapshot.mark();
            let r = (self.run_child)(self.ctx, snapshot, self.input, child, Some(&c.nodes));
            snapshot.revert_to(mark);
            match r.status.code {
                Code::Error => return Err(Stop::Error),
                Code::Success => {
                    let a = PodGroupAssignments {
                        placement: c.clone(),
                        proposed: r.assignments,
                    };
                    ok.push((free_after(snapshot, &a), i, c));
                }
                _ if failure.is_none() => failure = Some(r),
                _ => {}
            }
        }
        ok.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let failure = if ok.is_empty() { failure } else { None };
        Ok((ok.into_iter().map(|(_, _, c)| c).collect(), failure))
    }

    /// Depth-first placement of `order[k..]`; on `Ok(true)` the placed children stay assumed and
    /// their results are in `placed`.
    fn place(
        &mut self,
        snapshot: &mut Snapshot,
        children: &[GroupKey],
        cands: &[Vec<Placement>],
        order: &[usize],
        placed: &mut Vec<TreeResult>,
    ) -> Result<bool, Stop> {
        let Some((&ci, rest)) = order.split_first() else {
            return Ok(true);
        };
        for c in &cands[ci] {
            self.step()?;
            let mark = snapshot.mark();
            let r = (self.run_child)(self.ctx, snapshot, self.input, &children[ci], Some(&c.nodes));
            match r.status.code {
                Code::Error => {
                    snapshot.revert_to(mark);
                    return Err(Stop::Error);
                }
                Code::Success => {
                    placed.push(r);
                    if self.place(snapshot, children, cands, rest, placed)? {
                        return Ok(true);
                    }
                    placed.pop();
                }
                _ => {}
            }
            snapshot.revert_to(mark);
        }
        Ok(false)
    }
}

/// Searches an assignment of `cpg`'s children within `nodes` after its greedy pass failed (see
/// the module doc). On `Some` the result is Success and its assignments are assumed; on `None`
/// nothing is assumed and the caller reports the greedy failure. `run_child` places one child
/// ([`RunChild`]).
pub(crate) fn search(
    ctx: &mut GroupContext<'_>,
    snapshot: &mut Snapshot,
    input: &TreeInput<'_>,
    cpg: &CompositeGroupInfo,
    nodes: Option<&[usize]>,
    run_child: RunChild,
) -> Option<TreeResult> {
    let children = input.tree.children(&cpg.key);
    if input.search_budget.is_zero() || children.len() < 2 {
        return None;
    }
    let started = *input.search_started.get_or_init(Instant::now);
    let mut s = Search {
        ctx,
        input,
        run_child,
        deadline: started + input.search_budget,
        steps: 0,
    };
    let mark = snapshot.mark();
    let found = run(&mut s, snapshot, cpg, children, nodes);
    s.ctx.stats.sibling_search_steps += s.steps;
    match found {
        Some(r) => {
            s.ctx.stats.sibling_search_succeeded = true;
            Some(r)
        }
        None => {
            snapshot.revert_to(mark);
            None
        }
    }
}

fn run(
    s: &mut Search<'_, '_, '_>,
    snapshot: &mut Snapshot,
    cpg: &CompositeGroupInfo,
    children: &[GroupKey],
    nodes: Option<&[usize]>,
) -> Option<TreeResult> {
    let mut cands = Vec::with_capacity(children.len());
    let mut left_out = Vec::new();
    for child in children {
        let (c, failure) = s.candidates(snapshot, child, nodes).ok()?;
        if let Some(f) = failure {
            left_out.push(f);
        }
        cands.push(c);
    }
    let placeable: Vec<usize> = (0..children.len()).filter(|&i| !cands[i].is_empty()).collect();
    if (placeable.len() as u32) < cpg.policy.min_group_count() {
        return None;
    }
    let mut constrained = placeable.clone();
    constrained.sort_by_key(|&i| (cands[i].len(), i));
    let mut orders = vec![placeable];
    if constrained != orders[0] {
        orders.push(constrained);
    }
    for order in &orders {
        let mut placed = Vec::new();
        match s.place(snapshot, children, &cands, order, &mut placed) {
            Ok(true) => return Some(assemble(s.ctx, cpg, placed, left_out)),
            Ok(false) => {}
            Err(_) => return None,
        }
    }
    None
}

/// The search's answer as the composite's result: every placed child's assignments and
/// statuses, the left-out children's failures, and the composite's own status from
/// PlacementFeasible (Success when `minGroupCount` is met).
fn assemble(
    ctx: &GroupContext<'_>,
    cpg: &CompositeGroupInfo,
    placed: Vec<TreeResult>,
    left_out: Vec<TreeResult>,
) -> TreeResult {
    let scheduled = placed.len();
    let mut res = TreeResult::new(crate::framework::Status::success());
    for r in placed {
        res.assignments.extend(r.assignments.iter().cloned());
        res.merge(r);
    }
    for r in left_out {
        res.merge(r);
    }
    let st = ctx.feasible.feasible_composite(
        cpg,
        PlacementProgress {
            scheduled,
            remaining: 0,
        },
    );
    if !st.is_success() {
        // Cannot happen: the search only ends with at least `minGroupCount` children placed.
        res.status = st;
    }
    res.statuses.insert(cpg.key.clone(), res.status.clone());
    res
}

/// The candidate placements of one child within `nodes` (see the module doc), without duplicates.
fn child_candidates(
    ctx: &GroupContext<'_>,
    snapshot: &Snapshot,
    input: &TreeInput<'_>,
    child: &GroupKey,
    nodes: Option<&[usize]>,
) -> Result<Vec<Placement>, crate::framework::Status> {
    let parent = || crate::placements::parent_placement(snapshot, nodes);
    let (required, preferred, leaves) = if let Some(leaf) = input.tree.leaf(child) {
        let required = match leaf.topology_key {
            Some(_) => generate(ctx, snapshot, leaf, nodes)?,
            None => vec![parent()],
        };
        (required, leaf.preferred_topology.clone(), vec![child.clone()])
    } else if let Some(c) = input.tree.composite(child) {
        let leaves = input.tree.leaves_under(child);
        let required = match c.topology_key {
            Some(_) => composite_placements(ctx.generators, snapshot, c, &leaves, nodes)?,
            None => vec![parent()],
        };
        (required, c.preferred_topology.clone(), leaves)
    } else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for level in &preferred {
        out.extend(preferred_level(snapshot, level, &leaves, &required));
    }
    out.extend(required);
    let mut seen = HashSet::new();
    out.retain(|p| seen.insert(p.nodes.clone()));
    Ok(out)
}
