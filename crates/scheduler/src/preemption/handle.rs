//! The scheduler's side of [`PreemptionHandle`]: re-running the root's algorithm (upstream
//! `pgSchedulingFunc`, built in `schedule_one_podgroup.go`) and Filter with nominated pods.
//!
//! With `k > 1` and a topology-constrained root, the placement step returns its `k` best
//! placements instead of committing to the winner: each placement is simulated exactly as the
//! placement algorithm does (so each result is what the algorithm would produce if that
//! placement won), then ranked by the PlacementScore plugins.

use std::sync::Arc;
use std::time::Duration;

use crate::algorithm::{
    GroupContext, GroupResult, generate, placement_totals, run_leaf, run_leaf_in, simulate_placements,
};
use crate::composite::{composite_default, composite_totals, run_tree};
use crate::framework::{Code, Placement, PodGroupAssignments, PreemptionHandle, ProposedAssignment, Status};
use crate::model::{GroupInfo, PodInfo, PodSpecInfo};
use crate::placements::composite_placements;
use crate::plugins::registry::CycleState;
use crate::snapshot::Snapshot;
use crate::tree_eval::{TreeInput, TreeResult};

/// What the handle re-schedules.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Root<'a> {
    /// A standalone pod: no group algorithm.
    Pod,
    /// A standalone/root PodGroup and its pending pods.
    Leaf {
        group: &'a GroupInfo,
        pods: &'a [Arc<PodInfo>],
    },
    /// A root CompositePodGroup with its tree.
    Tree { input: &'a TreeInput<'a> },
}

/// [`PreemptionHandle`] over the cycle's plugins.
pub(crate) struct CoreHandle<'a, 'c> {
    ctx: GroupContext<'c>,
    root: Root<'a>,
    budget: Duration,
    max_attempts: u32,
    /// PreFilter of the last node-local pod filtered, by spec: node-local PreFilter depends on
    /// the spec only (as the batching cache relies on), so reprieve checks among thousands of
    /// victims need not redo it.
    local_state: Option<(Arc<PodSpecInfo>, CycleState)>,
}

impl<'a, 'c> CoreHandle<'a, 'c> {
    /// A handle re-scheduling `root` with `ctx`; `budget` and `max_attempts` are the reorder
    /// retry limits of the cycle.
    pub(crate) fn new(ctx: GroupContext<'c>, root: Root<'a>, budget: Duration, max_attempts: u32) -> Self {
        CoreHandle {
            ctx,
            root,
            budget,
            max_attempts,
            local_state: None,
        }
    }
}

fn assignments(placement: Option<String>, proposed: Vec<ProposedAssignment>) -> PodGroupAssignments {
    PodGroupAssignments {
        placement: Placement {
            name: placement.unwrap_or_default(),
            nodes: proposed.iter().map(|a| a.node).collect(),
        },
        proposed,
    }
}

/// The `k` best entries by score, best first; ties keep generation order.
fn top_k<T>(items: Vec<T>, totals: &[i64], k: usize) -> Vec<T> {
    let mut ranked: Vec<(i64, usize, T)> = items
        .into_iter()
        .enumerate()
        .map(|(i, t)| (totals.get(i).copied().unwrap_or(0), i, t))
        .collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    ranked.into_iter().take(k).map(|(_, _, t)| t).collect()
}

impl CoreHandle<'_, '_> {
    fn leaf(
        &mut self,
        snapshot: &mut Snapshot,
        group: &GroupInfo,
        pods: &[Arc<PodInfo>],
        k: usize,
    ) -> Result<Vec<PodGroupAssignments>, Status> {
        let (budget, max) = (self.budget, self.max_attempts);
        if k <= 1 || group.topology_key.is_none() {
            let mark = snapshot.mark();
            let r = run_leaf(&mut self.ctx, snapshot, group, pods, budget, max);
            snapshot.revert_to(mark);
            return if r.status.is_success() {
                Ok(vec![assignments(r.placement, r.assignments)])
            } else {
                Err(r.status)
            };
        }
        let placements =
            generate(&self.ctx, snapshot, group, None).map_err(|st| Status::new(Code::Error, st.message))?;
        if placements.is_empty() {
            // Let the algorithm word the failure as it always does.
            return self.leaf(snapshot, group, pods, 1);
        }
        let ctx = &mut self.ctx;
        let successes = simulate_placements(snapshot, &placements, None, usize::MAX, |s, p| {
            run_leaf_in(ctx, s, group, pods, budget, max, Some(&p.nodes))
        })
        .map_err(|r: GroupResult| r.status)?;
        let totals = placement_totals(&self.ctx, snapshot, group, &placements, &successes)?;
        let named: Vec<PodGroupAssignments> = successes
            .into_iter()
            .map(|(pi, r)| assignments(Some(placements[pi].name.clone()), r.assignments))
            .collect();
        Ok(top_k(named, &totals, k))
    }

    fn tree(
        &mut self,
        snapshot: &mut Snapshot,
        input: &TreeInput<'_>,
        k: usize,
    ) -> Result<Vec<PodGroupAssignments>, Status> {
        let root = input.tree.root().clone();
        if k <= 1 || root.topology_key.is_none() {
            let mark = snapshot.mark();
            let r = run_tree(&mut self.ctx, snapshot, input);
            snapshot.revert_to(mark);
            return if r.status.is_success() {
                Ok(vec![assignments(r.placement, r.assignments)])
            } else {
                Err(r.status)
            };
        }
        let leaves = input.tree.leaves_under(&root.key);
        let placements = composite_placements(self.ctx.generators, snapshot, &root, &leaves, None)
            .map_err(|st| Status::new(Code::Error, st.message))?;
        if placements.is_empty() {
            return self.tree(snapshot, input, 1);
        }
        let ctx = &mut self.ctx;
        let mut successes = simulate_placements(snapshot, &placements, None, usize::MAX, |s, p| {
            composite_default(ctx, s, input, &root, Some(&p.nodes))
        })
        .map_err(|r: TreeResult| r.status)?;
        // A root that places nothing new is not a success (`no pods were schedulable`).
        successes.retain(|(_, r)| !r.assignments.is_empty());
        if successes.is_empty() {
            return Err(Status::new(Code::Unschedulable, "no pods were schedulable"));
        }
        let totals = composite_totals(&self.ctx, snapshot, &root, &leaves, &placements, &successes)?;
        let named: Vec<PodGroupAssignments> = successes
            .into_iter()
            .map(|(pi, r)| assignments(Some(placements[pi].name.clone()), r.assignments))
            .collect();
        Ok(top_k(named, &totals, k))
    }
}

impl PreemptionHandle for CoreHandle<'_, '_> {
    fn schedule(&mut self, snapshot: &mut Snapshot, k: usize) -> Result<Vec<PodGroupAssignments>, Status> {
        match self.root {
            Root::Pod => Err(Status::new(
                Code::Error,
                "a standalone pod has no group scheduling algorithm",
            )),
            Root::Leaf { group, pods } => self.leaf(snapshot, group, pods, k),
            Root::Tree { input } => self.tree(snapshot, input, k),
        }
    }

    fn filter(&mut self, snapshot: &Snapshot, pod: &PodInfo, node: usize) -> Status {
        if node >= snapshot.len() {
            return Status::new(Code::UnschedulableAndUnresolvable, "node not found");
        }
        let r = if self.ctx.pods.node_local(snapshot, pod) {
            let stale = !matches!(&self.local_state,
                Some((spec, _)) if Arc::ptr_eq(spec, &pod.spec) || **spec == *pod.spec);
            if stale {
                self.local_state = Some((pod.spec.clone(), self.ctx.pods.pre_filter(snapshot, pod)));
            }
            let state = self.local_state.as_ref().map(|(_, s)| s);
            self.ctx.pods.filter_one(snapshot, pod, node, state)
        } else {
            self.ctx.pods.filter_one(snapshot, pod, node, None)
        };
        match r {
            Ok(()) => Status::success(),
            Err(r) => Status::new(r.code, r.reasons.join(", ")),
        }
    }

    fn node_local(&self, snapshot: &Snapshot, pod: &PodInfo) -> bool {
        self.ctx.pods.node_local(snapshot, pod)
    }
}
