//! Cluster Autoscaler's `autoscaling.x-k8s.io/v1` ProvisioningRequest, client side only, with the fields Phalanx
//! uses (upstream `cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/v1/types.go`). Not one of
//! Phalanx's CRDs: Cluster Autoscaler installs it (`config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml`
//! of the same module), and `phalanx crds` never emits it. Unknown fields are dropped on read; Phalanx never
//! writes a request back, it only creates and deletes them.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::{Deserialize, Serialize};

/// API group of ProvisioningRequests.
pub const GROUP: &str = "autoscaling.x-k8s.io";
/// API version served by Cluster Autoscaler (the storage version).
pub const VERSION: &str = "v1";
/// Condition type (upstream `Provisioned`): the capacity was made or found, and is booked for the pods.
pub const PROVISIONED: &str = "Provisioned";
/// Condition type (upstream `Failed`): Cluster Autoscaler gave up on the request.
pub const FAILED: &str = "Failed";
/// Condition type (upstream `BookingExpired`): the request was provisioned, and the booking lapsed (10 minutes by
/// default) before the pods consumed it.
pub const BOOKING_EXPIRED: &str = "BookingExpired";
/// Condition type (upstream `Accepted`): Cluster Autoscaler accepted the request for processing.
pub const ACCEPTED: &str = "Accepted";
/// Most podSets of one request (upstream `MaxItems=32` on `spec.podSets`).
pub const MAX_POD_SETS: usize = 32;

/// A ProvisioningRequest (upstream `ProvisioningRequest`): namespaced; `spec` immutable.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProvisioningRequest {
    /// `autoscaling.x-k8s.io/v1` (the API server wants it on create; [`ProvisioningRequest::new`] sets it).
    #[serde(rename = "apiVersion", default)]
    pub api_version: String,
    /// `ProvisioningRequest`.
    #[serde(default)]
    pub kind: String,
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// What to provision (immutable).
    pub spec: ProvisioningRequestSpec,
    /// Cluster Autoscaler's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ProvisioningRequestStatus>,
}

/// Upstream `ProvisioningRequestSpec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningRequestSpec {
    /// The groups of pods to provision for (1 to 32).
    pub pod_sets: Vec<PodSet>,
    /// The provisioning mode, a DNS subdomain such as `best-effort-atomic-scale-up.autoscaling.x-k8s.io`.
    pub provisioning_class_name: String,
    /// Class parameters (values at most 255 characters), e.g. `ValidUntilSeconds`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
}

/// Upstream `PodSet`: `count` pods like the PodTemplate `podTemplateRef.name` (same namespace).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSet {
    /// The PodTemplate the pods look like.
    pub pod_template_ref: Reference,
    /// How many such pods (>= 1).
    pub count: i32,
}

/// Upstream `Reference`: an object in the request's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reference {
    /// Its name.
    #[serde(default)]
    pub name: String,
}

/// Upstream `ProvisioningRequestStatus` (the conditions only; `provisioningClassDetails` is not read).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProvisioningRequestStatus {
    /// `Accepted`, `Provisioned`, `Failed`, `BookingExpired`, `CapacityRevoked`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

impl ProvisioningRequest {
    /// A request with `metadata` and `spec`, its `apiVersion` and `kind` set, no status.
    pub fn new(metadata: ObjectMeta, spec: ProvisioningRequestSpec) -> Self {
        ProvisioningRequest {
            api_version: format!("{GROUP}/{VERSION}"),
            kind: "ProvisioningRequest".into(),
            metadata,
            spec,
            status: None,
        }
    }

    /// The condition `type_` when its status is `"True"`.
    pub fn true_condition(&self, type_: &str) -> Option<&Condition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == "True")
    }
}

impl kube::Resource for ProvisioningRequest {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "ProvisioningRequest".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        "autoscaling.x-k8s.io/v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "provisioningrequests".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_the_upstream_shape_and_writes_it_back() {
        let pr: ProvisioningRequest = serde_json::from_value(json!({
            "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": {"name": "g-1", "namespace": "ns"},
            "spec": {"provisioningClassName": "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
                     "podSets": [{"podTemplateRef": {"name": "g-1-0"}, "count": 4}]},
            "status": {"conditions": [{"type": "Provisioned", "status": "True", "reason": "Provisioned",
                        "message": "ok", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                       "provisioningClassDetails": {}}
        }))
        .unwrap();
        assert_eq!(pr.spec.pod_sets[0].count, 4);
        assert!(pr.true_condition(PROVISIONED).is_some());
        assert!(pr.true_condition(FAILED).is_none());
        let v = serde_json::to_value(&pr.spec).unwrap();
        assert_eq!(v["podSets"][0]["podTemplateRef"]["name"], "g-1-0");
        assert!(v.get("parameters").is_none());
    }
}
