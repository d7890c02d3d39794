//! VolumeRestrictions (upstream `plugins/volumerestrictions`): a `ReadWriteOncePod` claim may be used by one pod
//! only, and the in-tree disks that attach to one node at a time may not be mounted on two nodes' pods at once
//! ([`crate::model::InlineDisk::conflicts`]).
//!
//! PreFilter counts the scheduled pods that use one of the pod's `ReadWriteOncePod` claims; Filter rejects every
//! node while that count is above zero (Unschedulable: preempting the user can free the claim, so the state
//! follows pods added and removed, upstream `AddPod`/`RemovePod`).

use std::sync::Arc;

use crate::framework::Status;
use crate::framework::{Code, FilterPlugin, Plugin, PreFilterExtensions, PreFilterPlugin};
use crate::model::{InlineDisk, NodeInfo, PodInfo, PodVolume};
use crate::plugins::Rejection;
use crate::snapshot::Snapshot;

/// Plugin name.
pub const NAME: &str = "VolumeRestrictions";
/// Upstream `ErrReasonDiskConflict`.
pub const ERR_REASON_DISK_CONFLICT: &str = "node(s) had no available disk";
/// Upstream `ErrReasonReadWriteOncePodConflict`.
pub const ERR_REASON_RWOP_CONFLICT: &str =
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode";

/// PreFilter's result.
#[derive(Debug, Clone)]
pub struct State {
    /// The pod's claims with the `ReadWriteOncePod` access mode.
    rwop: Arc<Vec<Arc<str>>>,
    /// Scheduled pods (other than this one) using one of them.
    conflicts: usize,
    /// The pod's in-tree disks.
    disks: Arc<Vec<InlineDisk>>,
}

fn disks(pod: &PodInfo) -> impl Iterator<Item = &InlineDisk> {
    pod.spec.volumes.iter().filter_map(|v| match v {
        PodVolume::Disk(d) => Some(d),
        PodVolume::Claim { .. } => None,
    })
}

/// Whether `other` (another pod) uses one of `pod`'s `ReadWriteOncePod` claims.
fn uses_claim(pod: &PodInfo, rwop: &[Arc<str>], other: &PodInfo) -> bool {
    other.key != pod.key
        && other.key.namespace == pod.key.namespace
        && other
            .spec
            .volumes
            .iter()
            .any(|v| v.claim().is_some_and(|c| rwop.contains(c)))
}

/// The plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct VolumeRestrictions;

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        NAME
    }
    /// A `ReadWriteOncePod` claim is checked against every scheduled pod, and claims' modes live in the catalog.
    fn node_local(&self, pod: &PodInfo, _: &Snapshot) -> bool {
        pod.spec.volumes.iter().all(|v| v.claim().is_none())
    }
}

impl PreFilterPlugin for VolumeRestrictions {
    type PreFilterState = State;
    fn pre_filter(&self, pod: &PodInfo, snapshot: &Snapshot) -> Option<State> {
        let catalog = snapshot.volumes();
        let rwop: Vec<Arc<str>> = pod
            .spec
            .volumes
            .iter()
            .filter_map(|v| v.claim())
            .filter(|name| {
                catalog
                    .claim(&crate::volumes::ClaimKey {
                        namespace: pod.key.namespace.clone(),
                        name: (*name).clone(),
                    })
                    .is_some_and(|c| c.access.read_write_once_pod())
            })
            .cloned()
            .collect();
        let disks: Vec<InlineDisk> = disks(pod).cloned().collect();
        if rwop.is_empty() && disks.is_empty() {
            return None;
        }
        let conflicts = if rwop.is_empty() {
            0
        } else {
            snapshot
                .nodes()
                .iter()
                .flat_map(|n| &n.pods)
                .filter(|o| uses_claim(pod, &rwop, o))
                .count()
        };
        Some(State {
            rwop: Arc::new(rwop),
            conflicts,
            disks: Arc::new(disks),
        })
    }
    fn pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions<State>> {
        Some(self)
    }
}

impl PreFilterExtensions<State> for VolumeRestrictions {
    fn add_pod(
        &self,
        state: &mut Option<State>,
        pod: &PodInfo,
        other: &PodInfo,
        _: &NodeInfo,
    ) -> Result<(), Status> {
        if let Some(s) = state
            && uses_claim(pod, &s.rwop, other)
        {
            s.conflicts += 1;
        }
        Ok(())
    }
    fn remove_pod(
        &self,
        state: &mut Option<State>,
        pod: &PodInfo,
        other: &PodInfo,
        _: &NodeInfo,
    ) -> Result<(), Status> {
        if let Some(s) = state
            && uses_claim(pod, &s.rwop, other)
        {
            s.conflicts = s.conflicts.saturating_sub(1);
        }
        Ok(())
    }
}

impl FilterPlugin for VolumeRestrictions {
    fn filter(&self, state: &State, _: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
        if state.conflicts > 0 {
            return Err(Rejection::new(
                NAME,
                Code::Unschedulable,
                ERR_REASON_RWOP_CONFLICT,
            ));
        }
        if !state.disks.is_empty()
            && node
                .pods
                .iter()
                .any(|p| disks(p).any(|d| state.disks.iter().any(|mine| mine.conflicts(d))))
        {
            return Err(Rejection::new(
                NAME,
                Code::Unschedulable,
                ERR_REASON_DISK_CONFLICT,
            ));
        }
        Ok(())
    }
}
