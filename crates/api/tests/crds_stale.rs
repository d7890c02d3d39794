//! The committed CRD YAML (crds/phalanx.yaml and the chart's copy) must be exactly what the Rust types
//! generate. Regenerate with `make crds` (hack/gen-crds.sh) after changing crates/api.

use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn check(relative: &str) {
    let path = repo_root().join(relative);
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{} cannot be read ({e}); run `make crds` (or hack/gen-crds.sh) to generate it",
            path.display()
        )
    });
    let generated = phalanx_api::crds::to_yaml();
    assert!(
        committed == generated,
        "{relative} is stale: it differs from what crates/api generates. Run `make crds` (or hack/gen-crds.sh) \
         and commit the result."
    );
}

#[test]
fn top_level_crds_are_up_to_date() {
    check("crds/phalanx.yaml");
}

#[test]
fn chart_crds_are_up_to_date() {
    check("charts/phalanx/crds/phalanx.yaml");
}

#[test]
fn yaml_holds_the_three_crds() {
    let crds: Vec<CustomResourceDefinition> =
        serde_saphyr::from_multiple(&phalanx_api::crds::to_yaml()).expect("generated YAML parses as CRDs");
    let names: Vec<_> = crds.iter().filter_map(|c| c.metadata.name.clone()).collect();
    assert_eq!(
        names,
        [
            "workloads.scheduling.phalanx.dev",
            "podgroups.scheduling.phalanx.dev",
            "compositepodgroups.scheduling.phalanx.dev"
        ]
    );
    assert_eq!(crds, phalanx_api::crds::all(), "YAML round trip changes the CRDs");
    for crd in &crds {
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["phalanx".to_string()][..])
        );
    }
}
