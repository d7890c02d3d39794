//! Well-known label keys.

/// Pod label naming the pod's PodGroup (in the pod's namespace). Phalanx's equivalent of upstream's
/// `pod.spec.schedulingGroup.podGroupName`, usable on clusters whose API server drops that field (the
/// `GenericWorkload` gate is off by default). See [`crate::pod_group_name`].
pub const POD_GROUP: &str = "scheduling.phalanx.dev/pod-group";
