//! Devices for the runs with `--devices-per-node N` (issue 41, "devices side by side"): Dynamic Resource Allocation
//! as a GPU cluster has it, on the benchmark's kwok nodes.
//!
//! - one DeviceClass [`CLASS`] selecting the devices of the driver [`DRIVER`];
//! - one ResourceSlice per benchmark node (named after the node, labelled [`SLICE_LABEL`]) with `N` devices
//!   `gpu-<i>`, as a driver's kubelet plugin publishes them (`resource.k8s.io/v1`, KEP-4381);
//! - in each run's namespace a ResourceClaimTemplate [`TEMPLATE`] for one device of the class; every pod has an
//!   entry [`ENTRY`] naming it, so kube-controller-manager's resourceclaim controller creates one claim per pod
//!   (`pkg/controller/resourceclaim/controller.go`) and records it in the pod's `status.resourceClaimStatuses`, as on
//!   a real cluster. The run waits for every pod's claim before it starts the scheduler ([`wait_claims`]), so that
//!   the figure measures the scheduler, not the controller's creates.
//!
//! The scheduler allocates each claim (`status.allocation`, `status.reservedFor`) before it binds the pod. The
//! bind-rate case binds the pods without allocating: the API server's ceiling for the binds alone.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate, ResourceSlice};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// Label on every benchmark ResourceSlice, so a reused cluster's slices can be listed.
pub const SLICE_LABEL: &str = "phalanx.dev/bench-slice";
/// The driver of the benchmark's devices (`spec.driver` of each slice).
pub const DRIVER: &str = "gpu.bench.phalanx.dev";
/// The DeviceClass the claims ask for.
pub const CLASS: &str = "phalanx-bench-gpu";
/// The ResourceClaimTemplate of each run's namespace: one device of [`CLASS`].
pub const TEMPLATE: &str = "gpu";
/// The pods' `spec.resourceClaims[].name` (and their container's `resources.claims[].name`).
pub const ENTRY: &str = "gpu";

/// Makes sure the DeviceClass exists and each of `nodes` publishes a slice of `per_node` devices, creating what is
/// missing with `concurrency` calls in flight.
///
/// # Errors
/// A create call fails, or a reused cluster's slice has another device count (stop it with `hack/cluster.sh down`).
pub async fn ensure_slices(
    admin: &Client,
    nodes: &[String],
    per_node: usize,
    concurrency: usize,
) -> anyhow::Result<()> {
    let class: DeviceClass = serde_json::from_value(json!({
        "metadata": { "name": CLASS },
        "spec": { "selectors": [{ "cel": { "expression": format!("device.driver == \"{DRIVER}\"") } }] },
    }))?;
    match Api::<DeviceClass>::all(admin.clone())
        .create(&PostParams::default(), &class)
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        other => {
            other.context("creating the benchmark's DeviceClass (is resource.k8s.io/v1 served?)")?;
        }
    }
    let api: Api<ResourceSlice> = Api::all(admin.clone());
    let existing = api
        .list(&ListParams::default().labels(SLICE_LABEL))
        .await
        .context("listing the benchmark's ResourceSlices")?;
    let mut have = std::collections::BTreeSet::new();
    for s in existing.items {
        let n = s.spec.devices.as_ref().map_or(0, Vec::len);
        let name = s.metadata.name.unwrap_or_default();
        anyhow::ensure!(
            n == per_node,
            "the reused cluster's ResourceSlice {name} has {n} devices, not the {per_node} of --devices-per-node; \
             stop it with `hack/cluster.sh down --state-dir <state dir>`"
        );
        have.insert(name);
    }
    let missing: Vec<&String> = nodes.iter().filter(|n| !have.contains(*n)).collect();
    futures::stream::iter(missing.into_iter().map(|node| {
        let api = api.clone();
        async move {
            let slice = slice(node, per_node)?;
            api.create(&PostParams::default(), &slice)
                .await
                .with_context(|| format!("creating the ResourceSlice of {node}"))
                .map(|_| ())
        }
    }))
    .buffer_unordered(concurrency.max(1))
    .try_collect::<Vec<()>>()
    .await?;
    Ok(())
}

/// The slice of `node`: `per_node` devices `gpu-<i>` of [`DRIVER`], one pool per node.
fn slice(node: &str, per_node: usize) -> anyhow::Result<ResourceSlice> {
    let devices: Vec<_> = (0..per_node)
        .map(|i| json!({ "name": format!("gpu-{i}") }))
        .collect();
    serde_json::from_value(json!({
        "metadata": { "name": node, "labels": { SLICE_LABEL: "true" } },
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": { "name": node, "generation": 1, "resourceSliceCount": 1 },
            "devices": devices,
        },
    }))
    .context("building a benchmark ResourceSlice")
}

/// Creates the run's ResourceClaimTemplate [`TEMPLATE`] in `ns`.
///
/// # Errors
/// The create call fails.
pub async fn create_template(admin: &Client, ns: &str) -> anyhow::Result<()> {
    let t: ResourceClaimTemplate = serde_json::from_value(json!({
        "metadata": { "name": TEMPLATE },
        "spec": { "spec": { "devices": { "requests": [
            { "name": "gpu", "exactly": { "deviceClassName": CLASS, "count": 1 } }
        ] } } },
    }))?;
    Api::<ResourceClaimTemplate>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &t)
        .await
        .context("creating the run's ResourceClaimTemplate")?;
    Ok(())
}

/// Adds the claim entry to a pod's JSON: `spec.resourceClaims[{name: gpu, resourceClaimTemplateName: gpu}]` and the
/// container's `resources.claims[{name: gpu}]`.
pub fn add_claim(pod: &mut serde_json::Value) {
    pod["spec"]["resourceClaims"] = json!([{ "name": ENTRY, "resourceClaimTemplateName": TEMPLATE }]);
    pod["spec"]["containers"][0]["resources"]["claims"] = json!([{ "name": ENTRY }]);
}

/// Waits until all `want` pods of `ns` name their claim in `status.resourceClaimStatuses` (kube-controller-manager
/// created it), printing progress every 10 s; returns how long that took.
///
/// # Errors
/// Not all claims within `timeout` (is kube-controller-manager running?), or the list fails.
pub async fn wait_claims(
    admin: &Client,
    ns: &str,
    want: usize,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    let api: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let start = Instant::now();
    let mut said = Instant::now();
    loop {
        let pods = api
            .list(&ListParams::default())
            .await
            .context("listing the run's pods")?;
        let ready = pods.items.iter().filter(|p| has_claim(p)).count();
        if ready >= want {
            return Ok(start.elapsed());
        }
        anyhow::ensure!(
            start.elapsed() < timeout,
            "only {ready}/{want} pods got their ResourceClaim from kube-controller-manager within {timeout:?}"
        );
        if said.elapsed() >= Duration::from_secs(10) {
            eprintln!("bench-e2e: waiting for the pods' claims: {ready}/{want}");
            said = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// True when the pod's entry [`ENTRY`] is resolved to a claim.
fn has_claim(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref())
        .is_some_and(|v| {
            v.iter()
                .any(|c| c.name == ENTRY && c.resource_claim_name.is_some())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_has_the_node_its_pool_and_its_devices() {
        let s = slice("bench-n00003", 8).unwrap();
        assert_eq!(s.spec.node_name.as_deref(), Some("bench-n00003"));
        assert_eq!(s.spec.pool.name, "bench-n00003");
        let names: Vec<String> = s.spec.devices.unwrap().into_iter().map(|d| d.name).collect();
        assert_eq!(names.len(), 8);
        assert_eq!(names[7], "gpu-7");
    }

    #[test]
    fn a_pod_with_a_claim_names_the_template_in_spec_and_container() {
        let mut v = json!({ "spec": { "containers": [{ "name": "c", "resources": { "requests": {} } }] } });
        add_claim(&mut v);
        assert_eq!(
            v["spec"]["resourceClaims"][0]["resourceClaimTemplateName"],
            TEMPLATE
        );
        assert_eq!(
            v["spec"]["containers"][0]["resources"]["claims"][0]["name"],
            ENTRY
        );
        let mut p: Pod = serde_json::from_value(v).unwrap();
        assert!(!has_claim(&p));
        p.status = Some(
            serde_json::from_value(json!({
                "resourceClaimStatuses": [{ "name": ENTRY, "resourceClaimName": "p-gpu-x" }]
            }))
            .unwrap(),
        );
        assert!(has_claim(&p));
    }
}
