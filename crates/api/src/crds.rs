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
    vec![Workload::crd(), PodGroup::crd(), CompositePodGroup::crd()]
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
