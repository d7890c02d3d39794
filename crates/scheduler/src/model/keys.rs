//! Identities: pods, groups and queue entities.
//!
//! One definition for the whole workspace: the store, the driver and the controllers key their caches with these
//! types too. Group keys carry the kind because a PodGroup and a CompositePodGroup may share a name in one
//! namespace (upstream keys queue entities as `pg-type/namespace/name`, `pkg/scheduler/backend/queue`).

use std::fmt;
use std::sync::Arc;

/// `namespace/name` of a pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodKey {
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
}

impl PodKey {
    /// Builds a key.
    pub fn new(namespace: &str, name: &str) -> PodKey {
        PodKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Kind of a scheduling group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupKind {
    /// A leaf `PodGroup`.
    PodGroup,
    /// A `CompositePodGroup`: an inner node of a hierarchy (KEP-6012); never owns pods.
    CompositePodGroup,
}

impl GroupKind {
    /// The API kind, e.g. `PodGroup`.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupKind::PodGroup => "PodGroup",
            GroupKind::CompositePodGroup => "CompositePodGroup",
        }
    }
}

/// The API group a group object lives in. A pod names a group of one of them (see `phalanx_api::pod_group_ref`),
/// so a Phalanx PodGroup and a `scheduling.k8s.io` PodGroup of the same name in one namespace are two groups.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupApi {
    /// Phalanx's own objects, `scheduling.phalanx.dev`.
    #[default]
    Phalanx,
    /// Upstream's objects, `scheduling.k8s.io` (served with the `GenericWorkload` gate, KEP-4671), scheduled by
    /// Phalanx when their pods name `phalanx-scheduler`.
    Upstream,
}

impl GroupApi {
    /// The API group, e.g. `scheduling.k8s.io`.
    pub fn group(self) -> &'static str {
        match self {
            GroupApi::Phalanx => "scheduling.phalanx.dev",
            GroupApi::Upstream => "scheduling.k8s.io",
        }
    }
}

/// Identity of a group (upstream entity key `pg-type/namespace/name`, plus the API group it lives in).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// Kind.
    pub kind: GroupKind,
    /// API group of the object.
    pub api: GroupApi,
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
}

impl GroupKey {
    /// A PodGroup key.
    pub fn pod_group(namespace: &str, name: &str) -> GroupKey {
        GroupKey {
            kind: GroupKind::PodGroup,
            api: GroupApi::Phalanx,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// A `scheduling.k8s.io` PodGroup key.
    pub fn upstream_pod_group(namespace: &str, name: &str) -> GroupKey {
        GroupKey {
            api: GroupApi::Upstream,
            ..GroupKey::pod_group(namespace, name)
        }
    }

    /// Whether the object is upstream's (`scheduling.k8s.io`).
    pub fn is_upstream(&self) -> bool {
        self.api == GroupApi::Upstream
    }

    /// A CompositePodGroup key.
    pub fn composite(namespace: &str, name: &str) -> GroupKey {
        GroupKey {
            kind: GroupKind::CompositePodGroup,
            api: GroupApi::Phalanx,
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = match self.kind {
            GroupKind::PodGroup => "podgroup",
            GroupKind::CompositePodGroup => "compositepodgroup",
        };
        match self.api {
            GroupApi::Phalanx => write!(f, "{k}/{}/{}", self.namespace, self.name),
            GroupApi::Upstream => write!(f, "{k}.scheduling.k8s.io/{}/{}", self.namespace, self.name),
        }
    }
}

/// A queue entity: a standalone pod or a root group.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EntityKey {
    /// A pod with no group.
    Pod(PodKey),
    /// A root group: a standalone/root PodGroup, or a root CompositePodGroup with its whole
    /// subtree.
    Group(GroupKey),
}

impl fmt::Display for EntityKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntityKey::Pod(p) => write!(f, "pod/{p}"),
            EntityKey::Group(g) => write!(f, "{g}"),
        }
    }
}
