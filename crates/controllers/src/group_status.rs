//! What the PodGroup controller reads off a group before it decides the group's status: the member pod counts
//! ([`Counts`], [`count`]) and the owned status fields about a gang after its first schedule ([`LiveStatus`]).
//!
//! Its own module, below [`crate::pod_group`] and the pure deciders it calls ([`crate::satisfied`],
//! [`crate::scheduled`], [`crate::members_wait`]), so that they share these types without importing the
//! controller that calls them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use phalanx_api::conditions::DISRUPTION_TARGET;
use phalanx_api::v1beta1::PodGroupResourceClaimStatus;
use phalanx_store::PodRecord;

use crate::recovery;

/// Member pod counts of one PodGroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Non-terminal member pods (these also hold the finalizer).
    pub pods: i32,
    /// Non-terminal member pods bound to a node and not being deleted (no `deletionTimestamp`).
    pub scheduled: i32,
    /// Member pods in phase Running.
    pub running: i32,
    /// Non-terminal member pods whose `Ready` condition is True.
    pub ready: i32,
    /// Member pods in phase Succeeded (they count toward the quorum; not in `pods`).
    pub succeeded: i32,
    /// Member pods in phase Failed.
    pub failed: i32,
    /// Non-terminal member pods bound to a node, neither being deleted nor `DisruptionTarget=True`:
    /// the ones that hold the quorum of `PodGroupSatisfied` (with `succeeded`). Not written itself.
    pub healthy: i32,
    /// Non-terminal member pods with `DisruptionTarget=True` (preemption, eviction, a taint), except
    /// the ones a restart of this group marked ([`recovery::marked_by_restart`]): a restart is not a
    /// disruption. Not written itself.
    pub disrupted: i32,
    /// Non-terminal member pods being deleted (`deletionTimestamp` set; a finalizer or the kubelet
    /// may hold them for long). Not written itself.
    pub terminating: i32,
}

/// Pure: counts member pods.
pub fn count<'a>(pods: impl IntoIterator<Item = &'a PodRecord>) -> Counts {
    let mut c = Counts::default();
    for p in pods {
        match p.phase {
            Some("Succeeded") => c.succeeded += 1,
            Some("Failed") => c.failed += 1,
            _ => {}
        }
        if p.is_terminal() {
            continue;
        }
        c.pods += 1;
        let is = |type_: &str| p.condition(type_).is_some_and(|c| c.status == "True");
        if is("Ready") {
            c.ready += 1;
        }
        let disrupted = is(DISRUPTION_TARGET);
        if disrupted && !recovery::marked_by_restart(p) {
            c.disrupted += 1;
        }
        let deleting = p.deletion_timestamp.is_some();
        if deleting {
            c.terminating += 1;
        } else if p.node_name().is_some() {
            c.scheduled += 1;
            if !disrupted {
                c.healthy += 1;
            }
        }
        if p.phase == Some("Running") {
            c.running += 1;
        }
    }
    c
}

/// The owned part of the status about a gang after its first schedule.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveStatus {
    /// `PodGroupSatisfied` ([`crate::satisfied::condition`]) once armed.
    pub satisfied: Option<Condition>,
    /// `PodGroupFailed` ([`recovery::failed_condition`]) once set.
    pub failed: Option<Condition>,
    /// `status.restarts`.
    pub restarts: Option<i32>,
    /// `status.lastRestartTime`.
    pub last_restart: Option<Time>,
    /// `Terminating` ([`crate::pod_group::terminating_condition`]) while a deletion waits for member pods.
    pub terminating: Option<Condition>,
    /// `status.resourceClaimStatuses`: the claims generated for the group ([`crate::group_claims::ensure`]).
    pub resource_claims: Vec<PodGroupResourceClaimStatus>,
    /// `PodGroupInitiallyScheduled` when the controller writes it ([`crate::scheduled::condition`]).
    pub initially_scheduled: Option<Condition>,
}
