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

/// Label (Phalanx) on the ProvisioningRequests and PodTemplates Phalanx creates: the uid of the PodGroup they were
/// made for (a uid, since a name may be longer than a label value). The controller watches only requests with this
/// label.
pub const PROVISIONING_FOR: &str = "scheduling.phalanx.dev/provisioning-for";

/// Label (Phalanx) on the ProvisioningRequests and PodTemplates Phalanx creates: the attempt number (`"1"`, `"2"`,
/// …); a failed or expired request is replaced by one of the next attempt.
pub const PROVISIONING_ATTEMPT: &str = "scheduling.phalanx.dev/provisioning-attempt";
