//! `scheduling.phalanx.dev/v1alpha3`: `CompositePodGroup`, mirroring upstream `scheduling.k8s.io/v1alpha3`
//! (Kubernetes 1.37, KEP-6012). Upstream's v1alpha3 sub-types are identical to v1beta1's, so they are
//! re-exported from [`crate::v1beta1`].

mod composite_pod_group;

pub use crate::v1beta1::{
    AllCompositeDisruptionMode, CompositeBasicSchedulingPolicy, CompositeDisruptionMode,
    CompositeGangSchedulingPolicy, CompositePodGroupSchedulingConstraints, CompositePodGroupSchedulingPolicy,
    PolicyKind, PreemptionPolicy, SingleCompositeDisruptionMode, TopologyConstraint, WorkloadReference,
};
pub use composite_pod_group::{CompositePodGroup, CompositePodGroupSpec, CompositePodGroupStatus};
