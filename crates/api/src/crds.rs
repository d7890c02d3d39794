//! The generated CustomResourceDefinitions: the source of `crds/phalanx.yaml` and
//! `charts/phalanx/crds/phalanx.yaml` (written by `hack/gen-crds.sh` and `phalanx crds`).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::v1alpha3::CompositePodGroup;
use crate::v1beta1::{PodGroup, Workload};

/// The first line of the generated YAML.
pub const HEADER: &str =
    "# Generated from the Rust types in crates/api by hack/gen-crds.sh (`make crds`). Do not edit.\n";

/// The CRDs of Workload, PodGroup and CompositePodGroup, in that order.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![Workload::crd(), PodGroup::crd(), composite_pod_group()]
}

/// The version of CompositePodGroup served beside `v1alpha3` (the stored one), as Kubernetes 1.38 serves upstream's
/// CompositePodGroup at `scheduling.k8s.io/v1beta1` beside `v1alpha3` (`staging/src/k8s.io/api/scheduling/v1beta1`).
pub const COMPOSITE_POD_GROUP_BETA: &str = "v1beta1";

/// CompositePodGroup's CRD: `v1alpha3` (stored) and [`COMPOSITE_POD_GROUP_BETA`] with the same schema, columns and
/// subresources. The schemas are identical, so the API server's `None` conversion (it only rewrites `apiVersion`) is
/// exact and no conversion webhook is needed; clients may use either version.
pub fn composite_pod_group() -> CustomResourceDefinition {
    let mut crd = CompositePodGroup::crd();
    let mut beta = crd.spec.versions[0].clone();
    beta.name = COMPOSITE_POD_GROUP_BETA.to_owned();
    beta.storage = false;
    beta.served = true;
    crd.spec.versions.push(beta);
    crd
}

/// All CRDs as one multi-document YAML string (documents separated by `---`), preceded by [`HEADER`].
/// These are exactly the bytes of `crds/phalanx.yaml`.
pub fn to_yaml() -> String {
    // Serialising a CustomResourceDefinition (plain maps, strings and numbers) cannot fail; an error here
    // would be a bug in the serializer, so it is reported loudly rather than hidden.
    let body = serde_saphyr::to_string_multiple(&all())
        .unwrap_or_else(|e| panic!("serialising the generated CRDs to YAML failed: {e}"));
    format!("{HEADER}{body}")
}
