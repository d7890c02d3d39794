//! Pod-to-group linkage.

use k8s_openapi::api::core::v1::Pod;

use crate::labels;

/// The name of the PodGroup (in the pod's own namespace) that `pod` belongs to.
///
/// The label [`labels::POD_GROUP`] wins; otherwise upstream's `spec.schedulingGroup.podGroupName`
/// (Kubernetes 1.36+, KEP-4671) is used. Empty values count as absent. Returns `None` for pods that are
/// not in a group.
pub fn pod_group_name(pod: &Pod) -> Option<&str> {
    let from_label = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(labels::POD_GROUP))
        .map(String::as_str)
        .filter(|name| !name.is_empty());
    from_label.or_else(|| {
        pod.spec
            .as_ref()?
            .scheduling_group
            .as_ref()?
            .pod_group_name
            .as_deref()
            .filter(|name| !name.is_empty())
    })
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
    fn no_group() {
        assert_eq!(pod_group_name(&pod(None, None)), None);
        assert_eq!(pod_group_name(&pod(None, Some(""))), None);
        assert_eq!(pod_group_name(&Pod::default()), None);
    }
}
