//! TopologyPacking, a Phalanx PlacementScore plugin (upstream has none like it): among the
//! feasible placements of a topology group, prefer the one that leaves the least free capacity
//! in its domain (best fit), so that the domains left whole are there for the next large group.
//!
//! Upstream scores placements with NodeResourcesFit's MostAllocated ratio, used / allocatable
//! over the domain. A ratio favours a large, nearly full domain over a small one that the group
//! fills exactly: a 100-node rack at 90% used scores 94 for a 4-node group, an empty 5-node rack
//! scores 80, so the group takes 4 of the big rack's last 10 nodes and an 8-node group that
//! follows finds no rack. Counted in free capacity left, the small rack leaves 1 node-equivalent
//! and the big one 6: TopologyPacking picks the small rack and both groups fit.
//!
//! Raw score: minus the free capacity left after the proposed assignments, in node-equivalents
//! (per resource: free / average allocatable per node of the domain; averaged over the resources
//! the group requests, cpu and memory when it requests none), times 1000. Normalised min-max to 0..=100,
//! so the best fit gets 100 and equal placements all get 0 (no influence).

use crate::framework::{PlacementScorePlugin, PodGroupAssignments, Status};
use crate::model::GroupInfo;
use crate::plugins::MAX_NODE_SCORE;
use crate::resources::{CPU, MEMORY};
use crate::snapshot::Snapshot;

/// Plugin name.
pub const NAME: &str = "TopologyPacking";

/// The TopologyPacking PlacementScore plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct TopologyPacking;

/// Free capacity of `a.placement` after `a.proposed`, in node-equivalents (see the module doc).
pub fn free_after(snapshot: &Snapshot, a: &PodGroupAssignments) -> f64 {
    // Only what the group asks for: free memory does not help a group that requests none.
    let mut names: Vec<&str> = Vec::new();
    for p in &a.proposed {
        let r = &p.pod.spec.requests;
        let scalar = r.scalar.iter().filter(|(_, v)| *v > 0).map(|(n, _)| &**n);
        let asked = [(CPU, r.milli_cpu), (MEMORY, r.memory)]
            .into_iter()
            .filter(|(_, v)| *v > 0)
            .map(|(n, _)| n)
            .chain(scalar);
        for n in asked {
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    if names.is_empty() {
        names = vec![CPU, MEMORY];
    }
    let nodes = a.placement.nodes.len() as f64;
    let (mut sum, mut counted) = (0.0, 0u32);
    for name in names {
        let (mut alloc, mut used) = (0i128, 0i128);
        for &i in &a.placement.nodes {
            let n = snapshot.node(i);
            alloc += i128::from(n.node.allocatable.get(name));
            used += i128::from(n.requested.get(name));
        }
        if alloc <= 0 {
            continue;
        }
        let req: i128 = a
            .proposed
            .iter()
            .map(|p| i128::from(p.pod.spec.requests.get(name)))
            .sum();
        let free = (alloc - used - req).max(0);
        sum += free as f64 * nodes / alloc as f64;
        counted += 1;
    }
    if counted == 0 {
        0.0
    } else {
        sum / f64::from(counted)
    }
}

impl PlacementScorePlugin for TopologyPacking {
    fn name(&self) -> &'static str {
        NAME
    }

    fn score(&self, snapshot: &Snapshot, _group: &GroupInfo, a: &PodGroupAssignments) -> Result<i64, Status> {
        Ok(-(free_after(snapshot, a) * 1000.0).round() as i64)
    }

    fn normalize(&self, scores: &mut [i64]) -> Result<(), Status> {
        let (Some(&min), Some(&max)) = (scores.iter().min(), scores.iter().max()) else {
            return Ok(());
        };
        let span = i128::from(max) - i128::from(min);
        for s in scores.iter_mut() {
            *s = if span == 0 {
                0
            } else {
                ((i128::from(*s) - i128::from(min)) * i128::from(MAX_NODE_SCORE) / span) as i64
            };
        }
        Ok(())
    }

    fn needs_nodes(&self) -> bool {
        // Only the domain's totals and the proposed pods' requests count, not which node each got.
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_gives_the_best_fit_100_and_equal_scores_0() {
        let p = TopologyPacking;
        let mut s = vec![-6000, -1000, -3500];
        p.normalize(&mut s).unwrap();
        assert_eq!(s, vec![0, 100, 50]);
        let mut same = vec![-2000, -2000];
        p.normalize(&mut same).unwrap();
        assert_eq!(same, vec![0, 0]);
        let mut extreme = vec![i64::MIN, 0];
        p.normalize(&mut extreme).unwrap();
        assert_eq!(extreme, vec![0, 100]);
    }
}
