//! Well-known label keys.

/// Pod label naming the pod's PodGroup (in the pod's namespace). Phalanx's equivalent of upstream's
/// `pod.spec.schedulingGroup.podGroupName`, usable on clusters whose API server drops that field (the
/// `GenericWorkload` gate is off by default). See [`crate::pod_group_name`].
pub const POD_GROUP: &str = "scheduling.phalanx.dev/pod-group";

/// PodGroup annotation (Phalanx): `"true"` asks for a Cluster Autoscaler ProvisioningRequest for the gang before it
/// is placed (with `autoscaling.provisioningRequests: true` in the scheduler's configuration; docs/operations.md
/// "Autoscaling"). Any other value, or none, leaves the gang to the ordinary path.
pub const PROVISIONING_REQUEST: &str = "scheduling.phalanx.dev/provisioning-request";

/// Pod annotation (Cluster Autoscaler, `provisioningrequest/apis`, `ProvisioningRequestPodAnnotationKey`): the
/// ProvisioningRequest, in the pod's namespace, whose capacity the pod consumes.
pub const CONSUME_PROVISIONING_REQUEST: &str = "autoscaling.x-k8s.io/consume-provisioning-request";

/// Pod annotation (Cluster Autoscaler, `ProvisioningClassPodAnnotationKey`): the class of the request named by
/// [`CONSUME_PROVISIONING_REQUEST`].
pub const PROVISIONING_CLASS_NAME: &str = "autoscaling.x-k8s.io/provisioning-class-name";
