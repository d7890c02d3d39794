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

/// Identity of a group (upstream entity key `pg-type/namespace/name`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// Kind.
    pub kind: GroupKind,
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
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// A CompositePodGroup key.
    pub fn composite(namespace: &str, name: &str) -> GroupKey {
        GroupKey {
            kind: GroupKind::CompositePodGroup,
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
        write!(f, "{k}/{}/{}", self.namespace, self.name)
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
