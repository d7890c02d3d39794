//! Keys that name cached objects: pods, nodes and groups.
//!
//! The store keys objects by `namespace/name` strings wrapped in small types so that a pod key can never be passed
//! where a group key is expected. Group keys carry the kind because a PodGroup and a CompositePodGroup may share a
//! name in one namespace (upstream keys queue entities as `pg-type/namespace/name`, see `pkg/scheduler/backend/queue`).

use std::fmt;

/// Namespaced name of a Pod: `namespace/name`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodKey {
    /// Namespace of the pod.
    pub namespace: String,
    /// Name of the pod.
    pub name: String,
}

impl PodKey {
    /// Builds a key from a namespace and a name.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// Key of a pod object; `None` when the object has no name (never true for objects read from the API).
    pub fn of(pod: &k8s_openapi::api::core::v1::Pod) -> Option<Self> {
        Some(Self::new(
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone()?,
        ))
    }
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Which group kind a [`GroupKey`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupKind {
    /// `scheduling.phalanx.dev` PodGroup (a leaf: owns pods).
    PodGroup,
    /// `scheduling.phalanx.dev` CompositePodGroup (an inner node: owns child groups, never pods).
    CompositePodGroup,
}

impl GroupKind {
    /// The API kind string, e.g. `PodGroup`.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupKind::PodGroup => "PodGroup",
            GroupKind::CompositePodGroup => "CompositePodGroup",
        }
    }
}

/// Kind plus namespaced name of a PodGroup or CompositePodGroup.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// PodGroup or CompositePodGroup.
    pub kind: GroupKind,
    /// Namespace of the group (always the namespace of its pods and children).
    pub namespace: String,
    /// Name of the group.
    pub name: String,
}

impl GroupKey {
    /// A PodGroup key.
    pub fn pod_group(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind: GroupKind::PodGroup,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// A CompositePodGroup key.
    pub fn composite(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind: GroupKind::CompositePodGroup,
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind.as_str(), self.namespace, self.name)
    }
}
