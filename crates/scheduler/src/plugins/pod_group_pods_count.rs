//! PlacementScore plugins: PodGroupPodsCount (upstream `plugins/podgrouppodscount`: already
//! scheduled + proposed members, normalised by the maximum) and NodeResourcesFit's placement
//! score (upstream `noderesources/placement_score.go`: always MostAllocated over the
//! placement's aggregate requested/allocatable).

use crate::config::ResourceWeight;
use crate::framework::{Code, PlacementScorePlugin, PodGroupAssignments, Status};
use crate::model::{CompositeGroupInfo, GroupInfo, GroupKey};
use crate::plugins::{MAX_NODE_SCORE, node_resources};
use crate::resources::{CPU, EPHEMERAL_STORAGE, MEMORY};
use crate::snapshot::Snapshot;

/// Plugin name.
pub const NAME: &str = "PodGroupPodsCount";

/// PodGroupPodsCount.
#[derive(Debug, Clone, Copy, Default)]
pub struct PodGroupPodsCount;

impl PlacementScorePlugin for PodGroupPodsCount {
    fn name(&self) -> &'static str {
        NAME
    }

    fn score(&self, snapshot: &Snapshot, group: &GroupInfo, a: &PodGroupAssignments) -> Result<i64, Status> {
        Ok((snapshot.scheduled_count(&group.key) + a.proposed.len()) as i64)
    }

    fn score_composite(
        &self,
        snapshot: &Snapshot,
        _group: &CompositeGroupInfo,
        leaves: &[GroupKey],
        a: &PodGroupAssignments,
    ) -> Result<i64, Status> {
        // Upstream sums ScheduledPodsCount over every leaf of the subtree.
        let scheduled: usize = leaves.iter().map(|l| snapshot.scheduled_count(l)).sum();
        Ok((scheduled + a.proposed.len()) as i64)
    }

    fn normalize(&self, scores: &mut [i64]) -> Result<(), Status> {
        let max = scores.iter().copied().max().unwrap_or(0);
        if max == 0 {
            return Err(Status::new(
                Code::Error,
                "no pods from pod group are assigned to any of the candidate placements",
            ));
        }
        for s in scores.iter_mut() {
            *s = *s * MAX_NODE_SCORE / max;
        }
        Ok(())
    }

    fn needs_nodes(&self) -> bool {
        false
    }
}

/// NodeResourcesFit as a PlacementScore plugin.
#[derive(Debug, Clone)]
pub struct PlacementResourcesFit {
    /// Scored resources and weights.
    pub resources: Vec<ResourceWeight>,
}

impl PlacementScorePlugin for PlacementResourcesFit {
    fn name(&self) -> &'static str {
        node_resources::NAME
    }

    fn score(&self, snapshot: &Snapshot, _group: &GroupInfo, a: &PodGroupAssignments) -> Result<i64, Status> {
        // Upstream PlacementBinPacking: per scoring resource, (Σ node requests + Σ proposed
        // requests) / Σ allocatable over the placement, MostAllocated, weighted; cpu and memory
        // use non-zero requests; an extended resource the group does not request is skipped.
        let (mut total, mut weights) = (0i64, 0i64);
        for rw in &self.resources {
            let name = rw.name.as_str();
            let non_zero = name == CPU || name == MEMORY;
            let pod_req: i64 = a
                .proposed
                .iter()
                .map(|p| match name {
                    CPU => p.pod.spec.non_zero_milli_cpu,
                    MEMORY => p.pod.spec.non_zero_memory,
                    other => p.pod.spec.requests.get(other),
                })
                .sum();
            if !non_zero && name != EPHEMERAL_STORAGE && pod_req == 0 {
                continue;
            }
            let (mut used, mut alloc) = (0i64, 0i64);
            for &i in &a.placement.nodes {
                let n = snapshot.node(i);
                alloc += n.node.allocatable.get(name);
                used += match name {
                    CPU => n.non_zero_milli_cpu,
                    MEMORY => n.non_zero_memory,
                    other => n.requested.get(other),
                };
            }
            if alloc == 0 {
                continue;
            }
            total += node_resources::most_requested(used + pod_req, alloc) * rw.weight;
            weights += rw.weight;
        }
        Ok(if weights == 0 { 0 } else { total / weights })
    }

    fn needs_nodes(&self) -> bool {
        false
    }
}
