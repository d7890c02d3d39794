//! Pod-to-group linkage.

use k8s_openapi::api::core::v1::Pod;

use crate::labels;

/// The name of the PodGroup (in the pod's own namespace) that `pod` belongs to.
///
/// The label [`labels::POD_GROUP`] wins; otherwise upstream's `spec.schedulingGroup.podGroupName`
/// (Kubernetes 1.36+, KEP-4671) is used. Empty values count as absent. Returns `None` for pods that are
/// not in a group.
pub fn pod_group_name(pod: &Pod) -> Option<&str> {
    pod_group_ref(pod).map(GroupRef::name)
}

/// How a pod names its group: by Phalanx's label or by upstream's field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupRef<'a> {
    /// The label [`labels::POD_GROUP`]: a `scheduling.phalanx.dev` PodGroup.
    Label(&'a str),
    /// `spec.schedulingGroup.podGroupName` (KEP-4671): a `scheduling.k8s.io` PodGroup where the server serves them,
    /// else (as before Phalanx scheduled upstream's objects) a `scheduling.phalanx.dev` PodGroup.
    Field(&'a str),
    /// Both are set: the label's group is Phalanx's, the field's upstream's. Where upstream's API is served this is
    /// ambiguous (upstream's controllers count the pod in the field's group, Phalanx in the label's), and the pod
    /// is refused with a message naming both; elsewhere the label wins, as [`pod_group_name`] says.
    Both {
        /// The label's value.
        label: &'a str,
        /// The field's value.
        field: &'a str,
    },
}

impl<'a> GroupRef<'a> {
    /// The group name that wins where upstream's API is not served: the label's, else the field's.
    pub fn name(self) -> &'a str {
        match self {
            GroupRef::Label(n) | GroupRef::Field(n) => n,
            GroupRef::Both { label, .. } => label,
        }
    }
}

/// How `pod` names its PodGroup ([`GroupRef`]); empty values count as absent, `None` for a pod in no group.
pub fn pod_group_ref(pod: &Pod) -> Option<GroupRef<'_>> {
    let label = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(labels::POD_GROUP))
        .map(String::as_str)
        .filter(|name| !name.is_empty());
    let field = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_group.as_ref())
        .and_then(|g| g.pod_group_name.as_deref())
        .filter(|name| !name.is_empty());
    match (label, field) {
        (Some(label), Some(field)) => Some(GroupRef::Both { label, field }),
        (Some(n), None) => Some(GroupRef::Label(n)),
        (None, Some(n)) => Some(GroupRef::Field(n)),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{PodSchedulingGroup, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn pod(label: Option<&str>, field: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                labels: label.map(|l| BTreeMap::from([(labels::POD_GROUP.to_string(), l.to_string())])),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                scheduling_group: field.map(|f| PodSchedulingGroup {
                    pod_group_name: Some(f.to_string()),
                }),
                ..PodSpec::default()
            }),
            status: None,
        }
    }

    #[test]
    fn label_wins_over_field() {
        assert_eq!(pod_group_name(&pod(Some("a"), Some("b"))), Some("a"));
    }

    #[test]
    fn field_is_used_without_label() {
        assert_eq!(pod_group_name(&pod(None, Some("b"))), Some("b"));
        assert_eq!(pod_group_name(&pod(Some(""), Some("b"))), Some("b"));
    }

    #[test]
    fn reference_says_which_source_named_the_group() {
        assert_eq!(pod_group_ref(&pod(Some("a"), None)), Some(GroupRef::Label("a")));
        assert_eq!(pod_group_ref(&pod(None, Some("b"))), Some(GroupRef::Field("b")));
        let p = pod(Some("a"), Some("b"));
        let both = pod_group_ref(&p).unwrap();
        assert_eq!(
            both,
            GroupRef::Both {
                label: "a",
                field: "b"
            }
        );
        assert_eq!(both.name(), "a");
        assert_eq!(pod_group_ref(&pod(Some(""), Some(""))), None);
    }

    #[test]
    fn no_group() {
        assert_eq!(pod_group_name(&pod(None, None)), None);
        assert_eq!(pod_group_name(&pod(None, Some(""))), None);
        assert_eq!(pod_group_name(&Pod::default()), None);
    }
}
