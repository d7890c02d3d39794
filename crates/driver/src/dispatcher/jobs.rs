//! The dispatcher's calls and their results as data: what the loop hands to the [`super::ApiDispatcher`] (binds,
//! PreBind jobs, evictions) and what comes back ([`ApiResult`]). Plain types, no behaviour: the dispatcher's files
//! and the loop both name them from here.

use std::sync::Arc;

use phalanx_scheduler::{
    EntityKey, GroupCondition, GroupKey, PodKey, volumes::ClaimKey, volumes::VolumeAction,
};
use phalanx_store::PodRecord;

use super::devices::ClaimJob;
use crate::preemption_tracker::Uid;
use crate::{BindOutcome, EvictOutcome};

/// What a serialised status write is about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum WriteKey {
    Pod(PodKey),
    /// `status.nominatedNodeName` of a pod: ordered apart from its conditions, so a condition write never replaces
    /// a queued nomination.
    Nomination(PodKey),
    Group(GroupKey),
}

/// A bind decided by a cycle, waiting for a binder permit: the pod is assumed on `node` in the cache already.
pub(crate) struct BindJob {
    pub(crate) key: PodKey,
    pub(crate) pod: Arc<PodRecord>,
    pub(crate) node: String,
    /// When the cycle decided it (the bind latency metric counts the wait for a permit).
    pub(crate) queued: std::time::Instant,
    /// The resource claims PreBind reserved for the pod, to unreserve when the bind fails.
    pub(crate) claims: Vec<ClaimKey>,
}

/// Result of one background bind, sent back to the loop.
pub(crate) struct BindResult {
    pub(crate) key: PodKey,
    /// The node the bind was for.
    pub(crate) node: String,
    pub(crate) outcome: BindOutcome,
}

/// A result the loop must act on ([`ApiDispatcher::next_result`]).
pub(crate) enum ApiResult {
    Bind(BindResult),
    Evict(EvictReport),
    PreBind(PreBindResult),
}

/// A decision whose pods wait for their volumes.
pub(crate) struct PreBindJob {
    /// The binds to start once the volumes are bound (the pods are assumed in the store already).
    pub(crate) binds: Vec<BindJob>,
    /// Every volume claim's action, one per claim.
    pub(crate) actions: Vec<VolumeAction>,
    /// Every resource claim's write, one per claim (DynamicResources).
    pub(crate) devices: Vec<ClaimJob>,
    /// The decision's group conditions, written only once the volumes are bound.
    pub(crate) conditions: Vec<GroupCondition>,
}

/// A PreBind that failed ([`ApiDispatcher::finish_prebind`]): no pod of its decision is bound.
pub(crate) struct PreBindFailure {
    /// The binds that do not happen (their pods are assumed until the loop forgets them).
    pub(crate) binds: Vec<BindJob>,
    /// The decision's group conditions (the loop writes False with the failure instead).
    pub(crate) conditions: Vec<GroupCondition>,
    /// Names the plugin, the claim and why.
    pub(crate) message: String,
}

/// The outcome of one [`PreBindJob`], sent back to the loop.
pub(crate) struct PreBindResult {
    pub(crate) job: PreBindJob,
    /// `Err` names the plugin, the claim and why.
    pub(crate) result: Result<(), String>,
}

/// How the eviction of one victim ended, sent back to the loop.
#[derive(Debug)]
pub(crate) struct EvictReport {
    pub(crate) preemptor: EntityKey,
    pub(crate) victim: PodKey,
    pub(crate) uid: Uid,
    /// The victim's unit group when its mode is `all` (it gets `DisruptionTarget=True`).
    pub(crate) all_group: Option<GroupKey>,
    pub(crate) outcome: EvictOutcome,
}

/// One victim to evict ([`ApiDispatcher::evict`]).
pub(crate) struct Eviction {
    pub(crate) pod: Arc<PodRecord>,
    /// The preemptor as the `Preempted` event names it (by uid).
    pub(crate) preemptor_name: String,
    pub(crate) node: String,
    pub(crate) uid: Uid,
    pub(crate) victim: PodKey,
    /// The victim's unit group when its mode is `all`.
    pub(crate) all_group: Option<GroupKey>,
}
