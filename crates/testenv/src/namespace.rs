//! One namespace per test.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use crate::names::unique_name;
use crate::wait::wait_for;

/// Label put on every namespace [`create_namespace`] makes, valued with the test process id (helps cleaning up a
/// long-lived cluster reused through `PHALANX_TEST_KUBECONFIG`: `kubectl delete ns -l phalanx.dev/testenv`).
pub const TESTENV_NAMESPACE_LABEL: &str = "phalanx.dev/testenv";

/// How long the controller-manager may take to create the namespace's `default` ServiceAccount.
const SERVICE_ACCOUNT_TIMEOUT: Duration = Duration::from_secs(60);

/// Creates a namespace named `<prefix>-<8 hex digits>` (prefix sanitised to a DNS-1123 label) and returns its name.
///
/// Returns only once the namespace's `default` ServiceAccount exists: the ServiceAccount admission plugin rejects
/// pods before kube-controller-manager has created it, which would make the first pod of a test flaky.
///
/// # Errors
/// When the namespace cannot be created, or its ServiceAccount does not appear within 60 s.
pub async fn create_namespace(client: &Client, prefix: &str) -> anyhow::Result<String> {
    let name = unique_name(prefix);
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(BTreeMap::from([(
                TESTENV_NAMESPACE_LABEL.to_string(),
                std::process::id().to_string(),
            )])),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
    wait_for(
        &format!("ServiceAccount {name}/default (made by kube-controller-manager)"),
        SERVICE_ACCOUNT_TIMEOUT,
        || async { Ok(sas.get_opt("default").await?.map(|_| ())) },
    )
    .await?;
    Ok(name)
}
