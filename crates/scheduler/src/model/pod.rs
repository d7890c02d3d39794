//! Pods as the core sees them (upstream `framework.PodInfo`, `pkg/scheduler/framework/types.go`).
//!
//! Built from API objects by [`crate::convert`]; this module holds only the types.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{GroupApi, GroupKey, GroupKind, PodKey, PreemptionPolicy};
use crate::resources::{DEFAULT_MEMORY_REQUEST, DEFAULT_MILLI_CPU_REQUEST, Resources};
use crate::selectors::{LabelSelector, NodeSelectorTerm, Requirement, Toleration};

/// A host port a pod asks for (upstream `HostPortInfo` entry).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// IP; `0.0.0.0` when unset.
    pub ip: String,
    /// Protocol; `TCP` when unset.
    pub protocol: String,
    /// Port (> 0).
    pub port: i32,
}

impl HostPort {
    /// Upstream conflict rule: same protocol and port, and same IP or either is `0.0.0.0`.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

/// `whenUnsatisfiable` of a topology spread constraint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WhenUnsatisfiable {
    /// Hard (Filter).
    DoNotSchedule,
    /// Soft (Score).
    ScheduleAnyway,
}

/// A parsed topology spread constraint (`matchLabelKeys` already merged into the selector).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SpreadConstraint {
    /// maxSkew (>= 1).
    pub max_skew: i32,
    /// Topology key.
    pub topology_key: String,
    /// Hard or soft.
    pub when: WhenUnsatisfiable,
    /// Selects the pods counted.
    pub selector: LabelSelector,
    /// minDomains (hard constraints only); `None` = 1.
    pub min_domains: Option<i32>,
    /// nodeAffinityPolicy Honor (default) counts only nodes matching the pod's node affinity.
    pub honor_node_affinity: bool,
    /// nodeTaintsPolicy Honor counts only nodes whose taints the pod tolerates (default Ignore).
    pub honor_node_taints: bool,
}

/// A parsed pod (anti-)affinity term with resolved namespaces.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AffinityTerm {
    /// Namespaces the term applies to; empty with `all_namespaces` false means the pod's own.
    pub namespaces: Vec<String>,
    /// True when `namespaceSelector` is `{}` (every namespace).
    pub all_namespaces: bool,
    /// Pod label selector (`matchLabelKeys`/`mismatchLabelKeys` merged).
    pub selector: LabelSelector,
    /// Topology key.
    pub topology_key: String,
}

impl AffinityTerm {
    /// Whether `pod` is selected by this term.
    pub fn matches(&self, pod: &PodInfo) -> bool {
        (self.all_namespaces || self.namespaces.iter().any(|n| **n == *pod.key.namespace))
            && self.selector.matches(&pod.labels)
    }
}

/// Inter-pod affinity of one pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PodAffinitySpec {
    /// requiredDuringScheduling pod affinity.
    pub required_affinity: Vec<AffinityTerm>,
    /// requiredDuringScheduling pod anti-affinity.
    pub required_anti_affinity: Vec<AffinityTerm>,
    /// preferredDuringScheduling pod affinity (weight, term).
    pub preferred_affinity: Vec<(i32, AffinityTerm)>,
    /// preferredDuringScheduling pod anti-affinity (weight, term).
    pub preferred_anti_affinity: Vec<(i32, AffinityTerm)>,
}

impl PodAffinitySpec {
    /// Whether any term is present.
    pub fn is_empty(&self) -> bool {
        self.required_affinity.is_empty()
            && self.required_anti_affinity.is_empty()
            && self.preferred_affinity.is_empty()
            && self.preferred_anti_affinity.is_empty()
    }
}

/// The scheduling-relevant part of a pod spec, derived once. Two pods with equal `PodSpecInfo`
/// (and no inter-pod constraints in play) get identical Filter/Score results on a node, which
/// the scheduler uses to reuse evaluations across the members of a gang (upstream
/// OpportunisticBatching signature, KEP-5598).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PodSpecInfo {
    /// Effective requests (upstream `PodRequests`: containers, init max, sidecars, overhead).
    pub requests: Resources,
    /// cpu request with the 100m default for containers that set none (scoring only).
    pub non_zero_milli_cpu: i64,
    /// memory request with the 200Mi default for containers that set none (scoring only).
    pub non_zero_memory: i64,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// `spec.nodeSelector` as requirements.
    pub node_selector: Vec<Requirement>,
    /// requiredDuringScheduling node selector terms (ORed); `None` when unset.
    pub required_node_affinity: Option<Vec<NodeSelectorTerm>>,
    /// preferredDuringScheduling node terms (weight, term).
    pub preferred_node_affinity: Vec<(i32, NodeSelectorTerm)>,
    /// Host ports requested by containers.
    pub host_ports: Vec<HostPort>,
    /// Topology spread constraints.
    pub spread: Vec<SpreadConstraint>,
    /// Inter-pod affinity.
    pub affinity: PodAffinitySpec,
    /// `spec.nodeName` of a pod that is still pending (NodeName plugin).
    pub node_name: Option<String>,
    /// The volumes the volume plugins look at: claims and single-node in-tree disks, in spec order.
    pub volumes: Vec<PodVolume>,
    /// `spec.resourceClaims`, resolved to claim names (DynamicResources), in spec order.
    pub resource_claims: Vec<PodResourceClaim>,
}

/// One entry of a pod's `spec.resourceClaims`, resolved as upstream `resourceclaim.Name` does
/// (`staging/src/k8s.io/dynamic-resource-allocation/resourceclaim/resourceclaim.go`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodResourceClaim {
    /// The entry's `name`, which containers' `resources.claims` refer to.
    pub name: Arc<str>,
    /// The claim it stands for.
    pub source: PodClaimSource,
}

/// What a pod's resource claim entry resolves to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PodClaimSource {
    /// The ResourceClaim of this name in the pod's namespace: `resourceClaimName`, or the claim
    /// kube-controller-manager generated from `resourceClaimTemplateName` (`status.resourceClaimStatuses`).
    Claim(Arc<str>),
    /// From a template whose claim kube-controller-manager has not created yet (no status entry): the pod waits
    /// at PreEnqueue. `template` is the entry's `resourceClaimTemplateName` (`None` when the entry names neither a
    /// claim nor a template), so that a template that does not exist can be named
    /// ([`crate::dra::scheduling::claim_not_created`]).
    NotCreated {
        /// `resourceClaimTemplateName`.
        template: Option<Arc<str>>,
    },
    /// A status entry without a claim name: no claim was needed.
    NotNeeded,
}

impl PodSpecInfo {
    /// Whether the pod's own result on a node depends on other nodes or other pods
    /// (PodTopologySpread, InterPodAffinity); such pods are never batched.
    pub fn has_inter_pod_constraints(&self) -> bool {
        !self.spread.is_empty() || !self.affinity.is_empty()
    }

    /// Whether the node selector and required node affinity match (NodeAffinity Filter).
    pub fn node_affinity_matches(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.node_selector.iter().all(|r| r.matches(labels))
            && self
                .required_node_affinity
                .as_ref()
                .is_none_or(|terms| terms.iter().any(|t| t.matches(node_name, labels)))
    }
}

/// A pod volume the volume plugins look at (upstream reads `pod.Spec.Volumes` in each plugin).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PodVolume {
    /// A `persistentVolumeClaim` volume, or an `ephemeral` one (its claim is `<pod>-<volume>`, upstream
    /// `ephemeral.VolumeClaimName`, created by kube-controller-manager's ephemeral-volume controller).
    Claim {
        /// The claim's name (same namespace as the pod).
        name: Arc<str>,
        /// From an `ephemeral` volume.
        ephemeral: bool,
    },
    /// An in-tree disk that one node at a time may use (VolumeRestrictions).
    Disk(InlineDisk),
}

impl PodVolume {
    /// The claim name of a claim volume.
    pub fn claim(&self) -> Option<&Arc<str>> {
        match self {
            PodVolume::Claim { name, .. } => Some(name),
            PodVolume::Disk(_) => None,
        }
    }
}

/// The in-tree volume types upstream VolumeRestrictions checks for conflicts (`isVolumeConflict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DiskKind {
    /// gcePersistentDisk (pdName): conflicts unless both mounts are read-only.
    GcePersistentDisk,
    /// awsElasticBlockStore (volumeID): always conflicts.
    AwsElasticBlockStore,
    /// iscsi (iqn): conflicts unless both mounts are read-only.
    Iscsi,
    /// rbd (pool/image, on overlapping monitors): conflicts unless both mounts are read-only.
    Rbd,
}

/// One in-tree disk of a pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InlineDisk {
    /// The volume type.
    pub kind: DiskKind,
    /// pdName, volumeID, iqn, or `pool/image`.
    pub id: String,
    /// rbd monitors (empty for the other kinds).
    pub monitors: Vec<String>,
    /// readOnly.
    pub read_only: bool,
}

impl InlineDisk {
    /// Whether two pods mounting these disks may not share a node (upstream `isVolumeConflict`).
    pub fn conflicts(&self, other: &InlineDisk) -> bool {
        if self.kind != other.kind || self.id != other.id {
            return false;
        }
        match self.kind {
            DiskKind::AwsElasticBlockStore => true,
            DiskKind::GcePersistentDisk | DiskKind::Iscsi => !(self.read_only && other.read_only),
            DiskKind::Rbd => {
                self.monitors.iter().any(|m| other.monitors.contains(m))
                    && !(self.read_only && other.read_only)
            }
        }
    }
}

/// A pod as the scheduler sees it. Shared as `Arc<PodInfo>`; replace on update.
#[derive(Debug, Clone, PartialEq)]
pub struct PodInfo {
    /// namespace/name.
    pub key: PodKey,
    /// metadata.uid (empty when unset).
    pub uid: Arc<str>,
    /// Labels, shared: the driver clones a `PodInfo` to mark it assumed on a node, and each clone used to copy the
    /// map (a B-tree node of about 0.5 KB and every string; docs/benchmarks.md, "where the peak heap goes").
    pub labels: Arc<BTreeMap<String, String>>,
    /// spec.schedulerName (`default-scheduler` when unset).
    pub scheduler_name: Arc<str>,
    /// spec.priority (0 when unset).
    pub priority: i32,
    /// spec.preemptionPolicy.
    pub preemption_policy: PreemptionPolicy,
    /// spec.nodeName: the node the pod is bound to, if any.
    pub node_name: Option<Arc<str>>,
    /// PodGroup name (label first, then `spec.schedulingGroup.podGroupName`), same namespace.
    pub group_name: Option<Arc<str>>,
    /// The API group of the PodGroup `group_name` names (the label names a Phalanx group, the field an upstream one
    /// where the server serves them; see `phalanx_api::pod_group_ref`).
    pub group_api: GroupApi,
    /// metadata.deletionTimestamp is set.
    pub deleting: bool,
    /// spec.schedulingGates names (PreEnqueue SchedulingGates).
    pub scheduling_gates: Vec<String>,
    /// Derived scheduling data.
    pub spec: Arc<PodSpecInfo>,
    /// A problem found while converting (bad quantity, bad selector): scheduling the pod
    /// yields a SchedulerError with this message instead of a panic.
    pub invalid: Option<String>,
}

impl PodInfo {
    /// A minimal pod for tests and benchmarks: `cpu_milli` millicores, no memory request.
    pub fn simple(namespace: &str, name: &str, cpu_milli: i64) -> PodInfo {
        let spec = PodSpecInfo {
            requests: Resources {
                milli_cpu: cpu_milli,
                ..Default::default()
            },
            non_zero_milli_cpu: if cpu_milli == 0 {
                DEFAULT_MILLI_CPU_REQUEST
            } else {
                cpu_milli
            },
            non_zero_memory: DEFAULT_MEMORY_REQUEST,
            ..Default::default()
        };
        PodInfo {
            key: PodKey::new(namespace, name),
            uid: format!("uid-{namespace}-{name}").into(),
            labels: Arc::default(),
            scheduler_name: "phalanx-scheduler".into(),
            priority: 0,
            preemption_policy: PreemptionPolicy::PreemptLowerPriority,
            node_name: None,
            group_name: None,
            group_api: GroupApi::Phalanx,
            deleting: false,
            scheduling_gates: vec![],
            spec: Arc::new(spec),
            invalid: None,
        }
    }

    /// The pod's group key, if it belongs to a PodGroup.
    pub fn group_key(&self) -> Option<GroupKey> {
        self.group_name.as_ref().map(|n| GroupKey {
            kind: GroupKind::PodGroup,
            api: self.group_api,
            namespace: self.key.namespace.clone(),
            name: n.clone(),
        })
    }
}
