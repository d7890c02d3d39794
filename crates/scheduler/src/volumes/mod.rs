//! Storage as the core sees it: the cluster's claims, volumes, classes and CSI facts (upstream the
//! listers `pkg/scheduler/framework/plugins/volumebinding` reads through its `AssumeCache`), and the
//! per-cycle choices the volume plugins make (upstream `AssumePodVolumes` / `RevertAssumedPodVolumes`).
//!
//! The runtime builds one [`VolumeCatalog`] from its caches (with the bindings it is still writing already
//! applied, as upstream's assume cache holds them) and gives it to the snapshot ([`crate::Snapshot::set_volumes`]).
//! Inside a cycle the snapshot keeps a [`VolumeOverlay`]: when a pod is assumed on a node, the claims it still
//! has to bind get their volume (or their node, for a claim to provision) there, and revert takes the choice
//! back, exactly like the pod's resources. The choices of a scheduled decision travel in
//! [`crate::Binding::volumes`]; the runtime writes them (PreBind) before it binds any pod of the gang.
//!
//! Pods without claims never read any of this: every plugin skips them at PreFilter.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use crate::model::PodKey;
use crate::selectors::{LabelSelector, NodeSelectorTerm};

pub mod binding;
pub mod overlay;

pub use overlay::VolumeOverlay;

/// A PersistentVolumeClaim by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimKey {
    /// metadata.namespace.
    pub namespace: Arc<str>,
    /// metadata.name.
    pub name: Arc<str>,
}

impl ClaimKey {
    /// The key of `namespace/name`.
    pub fn new(namespace: &str, name: &str) -> ClaimKey {
        ClaimKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ClaimKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Access modes as a bit set (core/v1 `PersistentVolumeAccessMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AccessModes(pub u8);

impl AccessModes {
    /// `ReadWriteOnce`.
    pub const RWO: u8 = 1;
    /// `ReadOnlyMany`.
    pub const ROX: u8 = 2;
    /// `ReadWriteMany`.
    pub const RWX: u8 = 4;
    /// `ReadWriteOncePod`.
    pub const RWOP: u8 = 8;

    /// The set of these API names; unknown names are ignored (the API server rejects them).
    pub fn parse<'a>(modes: impl IntoIterator<Item = &'a str>) -> AccessModes {
        AccessModes(modes.into_iter().fold(0, |acc, m| {
            acc | match m {
                "ReadWriteOnce" => Self::RWO,
                "ReadOnlyMany" => Self::ROX,
                "ReadWriteMany" => Self::RWX,
                "ReadWriteOncePod" => Self::RWOP,
                _ => 0,
            }
        }))
    }

    /// Whether every mode of `wanted` is in this set (upstream `CheckAccessModes`).
    pub fn contains(self, wanted: AccessModes) -> bool {
        self.0 & wanted.0 == wanted.0
    }

    /// Whether `ReadWriteOncePod` is in the set.
    pub fn read_write_once_pod(self) -> bool {
        self.0 & Self::RWOP != 0
    }
}

/// A claim (core/v1 `PersistentVolumeClaim`), the parts scheduling reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimInfo {
    /// namespace/name.
    pub key: ClaimKey,
    /// metadata.uid (the PV's `claimRef.uid` when bound).
    pub uid: Arc<str>,
    /// metadata.deletionTimestamp is set.
    pub deleting: bool,
    /// spec.volumeName (a bound or pre-bound claim).
    pub volume_name: Option<Arc<str>>,
    /// Fully bound: `spec.volumeName` and the `pv.kubernetes.io/bind-completed` annotation (upstream
    /// `isPVCFullyBound`), or the runtime assumed the binding it is writing.
    pub bound: bool,
    /// spec.storageClassName; `""` when unset or empty (matches only class-less volumes).
    pub class: String,
    /// spec.accessModes.
    pub access: AccessModes,
    /// spec.resources.requests.storage in bytes (0 when unset; saturated at `i64::MAX`).
    pub request: i64,
    /// spec.selector over volume labels.
    pub selector: Option<LabelSelector>,
    /// spec.volumeMode is Block.
    pub block: bool,
    /// The `volume.kubernetes.io/selected-node` annotation: the node a provisioner was asked for.
    pub selected_node: Option<Arc<str>>,
}

/// status.phase of a PersistentVolume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumePhase {
    /// Pending (not yet available).
    Pending,
    /// Available for a claim.
    Available,
    /// Bound to a claim.
    Bound,
    /// Released by its claim, not yet reclaimed.
    Released,
    /// Failed reclamation.
    Failed,
}

/// A volume (core/v1 `PersistentVolume`), the parts scheduling reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeInfo {
    /// metadata.name.
    pub name: Arc<str>,
    /// metadata.resourceVersion (PreBind's precondition).
    pub resource_version: Arc<str>,
    /// spec.storageClassName (`""` when unset).
    pub class: String,
    /// spec.accessModes.
    pub access: AccessModes,
    /// spec.capacity.storage in bytes.
    pub capacity: i64,
    /// metadata.labels (VolumeZone reads the zone and region labels; claim selectors match them).
    pub labels: BTreeMap<String, String>,
    /// spec.nodeAffinity.required terms (ORed); `None` when the volume can be used anywhere.
    pub node_affinity: Option<Vec<NodeSelectorTerm>>,
    /// spec.claimRef, as (namespace/name, uid; uid empty when unset).
    pub claim_ref: Option<(ClaimKey, Arc<str>)>,
    /// status.phase.
    pub phase: VolumePhase,
    /// spec.csi as (driver, volumeHandle).
    pub csi: Option<(Arc<str>, Arc<str>)>,
    /// spec.volumeMode is Block.
    pub block: bool,
    /// metadata.deletionTimestamp is set.
    pub deleting: bool,
}

impl VolumeInfo {
    /// Whether the volume's node affinity admits a node with this name and these labels (upstream
    /// `CheckNodeAffinity`).
    pub fn admits(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.node_affinity
            .as_ref()
            .is_none_or(|terms| terms.iter().any(|t| t.matches(node_name, labels)))
    }
}

/// The provisioner of classes whose volumes are created by hand (upstream `volume.NotSupportedProvisioner`).
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// A StorageClass, the parts scheduling reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassInfo {
    /// provisioner.
    pub provisioner: Arc<str>,
    /// volumeBindingMode is WaitForFirstConsumer (binding waits for the scheduler).
    pub wait_for_first_consumer: bool,
    /// allowedTopologies as node selector terms (ORed; each a conjunction of `In` requirements); `None` = any.
    pub allowed_topologies: Option<Vec<NodeSelectorTerm>>,
}

/// A CSIStorageCapacity object (storage.k8s.io/v1): free space for one class in one topology segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityInfo {
    /// storageClassName.
    pub class: String,
    /// nodeTopology (unset: selects no node, as upstream's nil selector).
    pub node_topology: LabelSelector,
    /// The largest volume that fits: maximumVolumeSize when set, else capacity (bytes).
    pub limit: i64,
}

/// Everything the volume plugins read, built once by the runtime and shared by the cycles that run while it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumeCatalog {
    /// Claims by key.
    pub claims: HashMap<ClaimKey, Arc<ClaimInfo>>,
    /// Volumes by name, in name order (matching is deterministic).
    pub volumes: BTreeMap<Arc<str>, Arc<VolumeInfo>>,
    /// Storage classes by name.
    pub classes: HashMap<String, ClassInfo>,
    /// Per node, per CSI driver, the attach limit from the CSINode's `spec.drivers[].allocatable.count`.
    pub csi_limits: HashMap<String, HashMap<String, i64>>,
    /// CSI drivers whose CSIDriver object sets `storageCapacity: true`.
    pub capacity_drivers: HashSet<String>,
    /// CSIStorageCapacity objects.
    pub capacities: Vec<CapacityInfo>,
    /// Storage kinds (plural names) the runtime may not read: a pod with claims cannot be judged and waits.
    pub unreadable: Vec<String>,
}

impl VolumeCatalog {
    /// The claim with this key.
    pub fn claim(&self, key: &ClaimKey) -> Option<&Arc<ClaimInfo>> {
        self.claims.get(key)
    }

    /// The volume with this name.
    pub fn volume(&self, name: &str) -> Option<&Arc<VolumeInfo>> {
        self.volumes.get(name)
    }

    /// The CSI volume a pod's claim uses on a node, as (driver, unique handle), for NodeVolumeLimits (upstream
    /// `nodevolumelimits/csi.go` `getCSIDriverInfo` and, for an unbound claim, `getCSIDriverInfoFromSC` with
    /// the claim's key as a placeholder handle). `None` when it is not a CSI volume or is unknown.
    pub fn csi_volume(&self, claim: &ClaimKey, assumed: Option<&str>) -> Option<(Arc<str>, Arc<str>)> {
        let c = self.claims.get(claim)?;
        if let Some(pv) = assumed.or(c.volume_name.as_deref()) {
            return self.volumes.get(pv)?.csi.clone();
        }
        let class = self.classes.get(&c.class)?;
        (&*class.provisioner != NO_PROVISIONER)
            .then(|| (class.provisioner.clone(), Arc::from(format!("{claim}").as_str())))
    }
}

/// What PreBind does for one claim of a pod (upstream `BindingInfo` and `claimsToProvision`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum VolumeAction {
    /// Bind the claim to this volume: set the volume's `claimRef` (upstream `bindAPIUpdate`).
    Bind {
        /// The claim.
        claim: ClaimKey,
        /// Its uid (the `claimRef.uid`).
        claim_uid: Arc<str>,
        /// The chosen volume.
        volume: Arc<str>,
        /// Its resourceVersion when chosen (the write's precondition).
        resource_version: Arc<str>,
    },
    /// Ask the claim's provisioner for a volume on this node: set `volume.kubernetes.io/selected-node`.
    Provision {
        /// The claim.
        claim: ClaimKey,
        /// The chosen node.
        node: Arc<str>,
    },
}

impl VolumeAction {
    /// The claim the action is for.
    pub fn claim(&self) -> &ClaimKey {
        match self {
            VolumeAction::Bind { claim, .. } | VolumeAction::Provision { claim, .. } => claim,
        }
    }
}

/// The volume choices of the pods assumed in a cycle, by pod.
pub type PodVolumeActions = HashMap<PodKey, Vec<VolumeAction>>;
