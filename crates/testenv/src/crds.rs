//! Installing CustomResourceDefinitions from YAML.

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client};

/// Field manager of the harness's server-side applies.
const FIELD_MANAGER: &str = "phalanx-testenv";
/// How long one CRD may take to become Established.
const ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(60);

/// Server-side applies every CustomResourceDefinition in `yaml` (a multi-document stream such as
/// `crds/phalanx.yaml`; empty documents are skipped) and waits until each is `Established`, so the caller can create
/// custom objects right away. Idempotent: applying the same YAML again succeeds (conflicts are forced, the harness
/// owns the CRDs of its cluster).
///
/// # Errors
/// When the YAML does not parse as CRDs, the API rejects one, or one is not Established within 60 s.
pub async fn apply_crds(client: &Client, yaml: &str) -> anyhow::Result<()> {
    let crds: Vec<CustomResourceDefinition> =
        serde_saphyr::from_multiple(yaml).context("parsing CustomResourceDefinition YAML")?;
    anyhow::ensure!(
        !crds.is_empty(),
        "apply_crds: the YAML holds no CustomResourceDefinition"
    );
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let mut names = Vec::with_capacity(crds.len());
    for crd in &crds {
        let name = crd
            .metadata
            .name
            .clone()
            .context("a CustomResourceDefinition has no metadata.name")?;
        api.patch(&name, &pp, &Patch::Apply(crd))
            .await
            .with_context(|| format!("applying CustomResourceDefinition {name}"))?;
        names.push(name);
    }
    for name in &names {
        tokio::time::timeout(
            ESTABLISHED_TIMEOUT,
            await_condition(api.clone(), name, conditions::is_crd_established()),
        )
        .await
        .with_context(|| {
            format!("CustomResourceDefinition {name} not Established after {ESTABLISHED_TIMEOUT:?}")
        })?
        .with_context(|| format!("watching CustomResourceDefinition {name}"))?;
    }
    Ok(())
}
