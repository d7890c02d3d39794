//! Scheduling model: pods, groups and nodes as the core sees them, mirroring upstream
//! `framework.PodInfo` / `framework.NodeInfo` / `fwk.PodGroupInfo`
//! (`pkg/scheduler/framework/types.go`).
//!
//! Everything the plugins need is derived once, when the runtime converts an API object
//! ([`crate::convert`]); this module holds only the types. The runtime converts PodGroup objects
//! into [`GroupInfo`] itself, so this crate does not depend on the CRD types.

mod group;
mod keys;
mod node;
mod pod;

pub use group::{
    CompositeGroupInfo, CompositePolicy, DisruptionMode, GroupInfo, GroupPolicy, PreemptionPolicy,
};
pub use keys::{EntityKey, GroupApi, GroupKey, GroupKind, PodKey};
pub use node::{NodeInfo, NodeStatic};
pub use pod::{
    AffinityTerm, DiskKind, HostPort, InlineDisk, PodAffinitySpec, PodClaimSource, PodInfo, PodResourceClaim,
    PodSpecInfo, PodVolume, SpreadConstraint, WhenUnsatisfiable,
};
