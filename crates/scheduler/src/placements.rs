//! Placement candidates beyond a group's required topology: the soft `preferredTopology` levels
//! (a Phalanx addition; KEP-5732 lists preferred constraints as future work) and the number of
//! placements a group evaluates before it stops (upstream `percentageOfPlacementsToScore`,
//! k/k#139064).
//!
//! A preferred level refines each required placement (or the parent's nodes when the group has
//! no required key) into the domains of the level's node label. The group algorithms evaluate
//! the levels narrowest first and keep the first level where a placement is feasible; when none
//! is, they fall back to the required placements, so a preference never makes a group
//! unschedulable.
//!
//! Also the required placements of a CompositePodGroup ([`composite_placements`]), which the
//! hierarchical algorithm ([`crate::composite`]) and its sibling search ([`crate::sibling_search`])
//! both generate.

use crate::framework::{Placement, PlacementGeneratePlugin, Status};
use crate::model::{CompositeGroupInfo, GroupKey};
use crate::plugins::topology_placement::domains_for;
use crate::snapshot::Snapshot;

/// The parent's placement as a candidate: `nodes` (`None` = every node of the snapshot), unnamed.
pub fn parent_placement(snapshot: &Snapshot, nodes: Option<&[usize]>) -> Placement {
    Placement {
        name: String::new(),
        nodes: nodes.map_or_else(|| (0..snapshot.len()).collect(), <[usize]>::to_vec),
    }
}

/// The placements of one preferred level: the domains of node label `key` inside each of `base`
/// (in `base` order, then by domain value), named `<value>`. When members of `groups` already
/// run, only the domain that holds all of them is kept; when they span several domains of this
/// level (or run on a node without the label), the level cannot be honoured and the result is
/// empty, so the caller moves on to the next level.
pub fn preferred_level(
    snapshot: &Snapshot,
    key: &str,
    groups: &[GroupKey],
    base: &[Placement],
) -> Vec<Placement> {
    let mut out = Vec::new();
    for p in base {
        match domains_for(snapshot, key, groups, p) {
            Ok(domains) => out.extend(domains),
            Err(_) => return Vec::new(),
        }
    }
    out
}

/// How many feasible placements a group looks for before it stops evaluating more (upstream
/// `numFeasiblePlacementsToFind`, k/k#139064).
///
/// - Without a PlacementScore plugin of non-zero weight (`scored` false) the first feasible
///   placement wins: 1.
/// - `percentage` 1..=100: that share of `placements`.
/// - `percentage` 0 (adaptive): `max(5, 100 - n x 9/500)` percent, where `n` is the number of
///   nodes over all placements (overlaps counted again, as upstream does), so 10% at 5,000 nodes
///   and 100% for an empty cluster.
///
/// Always at least 1. Phalanx rounds up where upstream truncates, so that a small cluster (3
/// placements at 99.8%) still evaluates all of them.
pub fn placements_to_find(percentage: u32, placements: &[Placement], scored: bool) -> usize {
    if !scored || placements.is_empty() {
        return 1;
    }
    let pct = if percentage == 0 || percentage > 100 {
        let nodes: usize = placements.iter().map(|p| p.nodes.len()).sum();
        (100.0 - nodes as f64 * 9.0 / 500.0).max(5.0)
    } else {
        f64::from(percentage)
    };
    ((placements.len() as f64 * pct / 100.0).ceil() as usize).clamp(1, placements.len())
}

/// PlacementGenerate for a CompositePodGroup within `parent` (`None` = all nodes): every
/// generator of `generators` (a cycle's [`GroupContext::generators`](crate::algorithm::GroupContext)) refines
/// the previous placements.
pub(crate) fn composite_placements(
    generators: &[Box<dyn PlacementGeneratePlugin>],
    snapshot: &Snapshot,
    cpg: &CompositeGroupInfo,
    leaves: &[GroupKey],
    parent: Option<&[usize]>,
) -> Result<Vec<Placement>, Status> {
    let mut placements = vec![parent_placement(snapshot, parent)];
    for g in generators {
        let mut next = Vec::new();
        for p in &placements {
            next.extend(g.generate_composite(snapshot, cpg, leaves, p)?);
        }
        placements = next;
    }
    Ok(placements)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placements(n: usize, nodes_each: usize) -> Vec<Placement> {
        (0..n)
            .map(|i| Placement {
                name: format!("p{i}"),
                nodes: (i * nodes_each..(i + 1) * nodes_each).collect(),
            })
            .collect()
    }

    #[test]
    fn adaptive_limit_is_ten_percent_at_5000_nodes() {
        // 50 racks of 100 nodes: 100 - 5000 x 9/500 = 10% of 50 = 5.
        assert_eq!(placements_to_find(0, &placements(50, 100), true), 5);
        // 15,000 nodes: the 5% floor; 150 racks -> 7.5 -> 8.
        assert_eq!(placements_to_find(0, &placements(150, 100), true), 8);
        // A small cluster evaluates every placement.
        assert_eq!(placements_to_find(0, &placements(3, 2), true), 3);
    }

    #[test]
    fn fixed_percentage_and_unscored_groups() {
        assert_eq!(placements_to_find(100, &placements(50, 100), true), 50);
        assert_eq!(placements_to_find(1, &placements(50, 100), true), 1);
        assert_eq!(placements_to_find(30, &placements(10, 1), true), 3);
        assert_eq!(placements_to_find(0, &placements(50, 100), false), 1);
        assert_eq!(placements_to_find(0, &[], true), 1);
    }
}
