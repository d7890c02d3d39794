//! The cost of a set of preemption victims ([`Cost`]), the one ordering both preemptors choose by.
//! Its own module, below the snapshot that keeps per-node costs while group preemption simulates
//! (`Snapshot::victim_costs`) and below the reprieve that computes them ([`super::reprieve`]), so
//! that the snapshot does not import the preemption code that runs on it.

use std::cmp::Reverse;

/// How much a set of victims disrupts, compared lexicographically (smaller is better): the one
/// ordering both preemptors use to choose among candidates (nodes of a standalone pod;
/// placements and priority tiers of a group) and that steers the group's node choice
/// ([`super::node_cost`]). It is upstream `pickOneNodeForPreemption`'s
/// (`pkg/scheduler/framework/preemption/preemption.go`), counting every pod a unit holds: a
/// `disruptionMode: all` gang of 40 pods costs 40 pods, not one unit.
///
/// Fields, in comparison order:
/// 1. `pdb_violations`: victim pods whose eviction exceeds a PodDisruptionBudget;
/// 2. `highest`: the highest victim priority (`i64::MIN` without victims);
/// 3. `sum`: the sum over victim pods of their unit's priority plus 2^31 (upstream adds
///    `MaxInt32 + 1` so that a few negative-priority pods do not beat fewer of them);
/// 4. `pods`: victim pods;
/// 5. `latest_start`: the earliest start time (Unix milliseconds) among the highest-priority
///    victims, reversed so that a later one is cheaper; a pod without a known start time counts
///    as started now (upstream `GetPodStartTime`), i.e. latest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Cost {
    pub(crate) pdb_violations: usize,
    pub(crate) highest: i64,
    pub(crate) sum: i64,
    pub(crate) pods: usize,
    pub(crate) latest_start: Reverse<i64>,
}

impl Default for Cost {
    fn default() -> Cost {
        Cost::NONE
    }
}

impl Cost {
    /// No victim at all: cheaper than any victim set.
    pub(crate) const NONE: Cost = Cost {
        pdb_violations: 0,
        highest: i64::MIN,
        sum: 0,
        pods: 0,
        latest_start: Reverse(i64::MAX),
    };
}
