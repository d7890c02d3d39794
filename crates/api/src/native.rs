//! Upstream's own CompositePodGroup (`scheduling.k8s.io`, KEP-6012) at either version a server serves it:
//! `v1alpha3` (Kubernetes 1.37 and 1.38) or `v1beta1` (1.38, `staging/src/k8s.io/api/scheduling/v1beta1/types.go`).
//! k8s-openapi 0.29 (`v1_37`) knows only `v1alpha3`, and a 1.38 cluster that turns on the beta API serves `v1beta1`
//! alone; the two versions have the same JSON fields, so one type with the version as a parameter reads both.
//!
//! Only what a scheduler needs is typed: the metadata and the status conditions it writes. The spec is kept as
//! served and read through Phalanx's own [`crate::v1alpha3::CompositePodGroup`], whose schema is upstream's field
//! for field.

use std::{borrow::Cow, marker::PhantomData};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::{Deserialize, Serialize};

/// The version of upstream's CompositePodGroup a type reads and writes.
pub trait CompositeVersion: Clone + std::fmt::Debug + Default + Send + Sync + 'static {
    /// The version part of the group-version, e.g. `v1beta1`.
    const VERSION: &'static str;
}

/// `scheduling.k8s.io/v1alpha3` (1.37, 1.38).
#[derive(Clone, Debug, Default)]
pub struct V1alpha3;
impl CompositeVersion for V1alpha3 {
    const VERSION: &'static str = "v1alpha3";
}

/// `scheduling.k8s.io/v1beta1` (1.38).
#[derive(Clone, Debug, Default)]
pub struct V1beta1;
impl CompositeVersion for V1beta1 {
    const VERSION: &'static str = "v1beta1";
}

/// The API group of upstream's scheduling kinds.
pub const UPSTREAM_GROUP: &str = "scheduling.k8s.io";

/// Upstream's CompositePodGroup at version `V`: its metadata, its spec as served (JSON), its status conditions.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NativeCompositePodGroup<V: CompositeVersion> {
    /// Standard object metadata.
    pub metadata: ObjectMeta,
    /// The spec as served; `null` in a status write (Phalanx never writes an upstream spec).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub spec: serde_json::Value,
    /// The status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<NativeCompositeStatus>,
    #[serde(skip)]
    version: PhantomData<V>,
}

/// The status of [`NativeCompositePodGroup`]: its conditions (upstream's `CompositePodGroupStatus`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NativeCompositeStatus {
    /// `PodGroupScheduled`, `DisruptionTarget` and the others upstream's scheduler writes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl<V: CompositeVersion> NativeCompositePodGroup<V> {
    /// An object with `metadata` and `conditions` only: the body of a status write.
    pub fn status_view(metadata: ObjectMeta, conditions: Vec<Condition>) -> Self {
        NativeCompositePodGroup {
            metadata,
            spec: serde_json::Value::Null,
            status: Some(NativeCompositeStatus { conditions }),
            version: PhantomData,
        }
    }

    /// Its conditions (empty without status).
    pub fn conditions(&self) -> &[Condition] {
        self.status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default()
    }
}

impl<V: CompositeVersion> kube::Resource for NativeCompositePodGroup<V> {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "CompositePodGroup".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        UPSTREAM_GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        V::VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "compositepodgroups".into()
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
    use kube::Resource;

    #[test]
    fn both_versions_read_the_same_object_and_name_their_own_path() {
        let served = |v: &str| {
            serde_json::json!({
                "apiVersion": format!("scheduling.k8s.io/{v}"), "kind": "CompositePodGroup",
                "metadata": { "name": "root", "namespace": "ns" },
                "spec": { "schedulingPolicy": { "gang": { "minGroupCount": 2 } } },
                "status": { "conditions": [{ "type": "PodGroupScheduled", "status": "True", "reason": "Scheduled",
                                             "message": "", "lastTransitionTime": "2026-12-07T00:00:00Z" }] },
            })
        };
        let beta: NativeCompositePodGroup<V1beta1> = serde_json::from_value(served("v1beta1")).unwrap();
        let alpha: NativeCompositePodGroup<V1alpha3> = serde_json::from_value(served("v1alpha3")).unwrap();
        assert_eq!(beta.spec, alpha.spec);
        assert_eq!(beta.conditions()[0].reason, "Scheduled");
        assert_eq!(
            NativeCompositePodGroup::<V1beta1>::api_version(&()),
            "scheduling.k8s.io/v1beta1"
        );
        assert_eq!(
            NativeCompositePodGroup::<V1alpha3>::api_version(&()),
            "scheduling.k8s.io/v1alpha3"
        );
        assert_eq!(
            NativeCompositePodGroup::<V1beta1>::url_path(&(), Some("ns")),
            "/apis/scheduling.k8s.io/v1beta1/namespaces/ns/compositepodgroups"
        );
        // A status write carries no spec.
        let w = NativeCompositePodGroup::<V1beta1>::status_view(beta.metadata.clone(), vec![]);
        let body = serde_json::to_value(&w).unwrap();
        assert!(body.get("spec").is_none());
    }
}
