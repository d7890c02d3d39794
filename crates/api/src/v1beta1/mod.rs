//! `scheduling.phalanx.dev/v1beta1`: `Workload` and `PodGroup`, mirroring upstream
//! `scheduling.k8s.io/v1beta1` (Kubernetes 1.37, `staging/src/k8s.io/api/scheduling/v1beta1/types.go`), and
//! the shared policy and template types (also used by [`crate::v1alpha3`]).

mod pod_group;
mod policy;
mod recovery;
mod templates;
mod workload;

pub use pod_group::{PodGroup, PodGroupSpec, PodGroupStatus, generated_claim_name};
pub use policy::{
    AllCompositeDisruptionMode, AllDisruptionMode, BasicSchedulingPolicy, CompositeBasicSchedulingPolicy,
    CompositeDisruptionMode, CompositeGangSchedulingPolicy, CompositePodGroupSchedulingConstraints,
    CompositePodGroupSchedulingPolicy, DisruptionMode, GangSchedulingPolicy, PodGroupResourceClaim,
    PodGroupResourceClaimStatus, PodGroupSchedulingConstraints, PodGroupSchedulingPolicy, PolicyKind,
    PreemptionPolicy, SingleCompositeDisruptionMode, SingleDisruptionMode, TopologyConstraint,
    TopologyPreference, TypedLocalObjectReference, WorkloadReference,
};
pub use recovery::{
    DEFAULT_RECOVERY_GRACE_SECONDS, MAX_RECOVERY_GRACE_SECONDS, MAX_RESTARTS, RecoveryAction, RecoveryPolicy,
};
pub use templates::{CompositePodGroupTemplate, PodGroupTemplate};
pub use workload::{Workload, WorkloadSpec, WorkloadStatus};
