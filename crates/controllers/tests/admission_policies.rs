//! The chart's MutatingAdmissionPolicies (`charts/phalanx/files/admission-policies.yaml`, applied by
//! `phalanx_testenv::apply_admission_policies`) against a real API server, then the controllers over the groups
//! they filled.
//!
//! Without the controllers, the policies alone give each new group what the controllers' patch gives it: the kind's
//! protection finalizer, and `spec.priority` / `spec.preemptionPolicy` from the named PriorityClass, else the global
//! default, else 0 and `PreemptLowerPriority`; a written `Never` is kept. Then the controllers run over those groups
//! and send no patch (no `phalanx-controller` Update entry in `managedFields`, no `PriorityResolved` event), and the
//! groups are `Valid=True`, also the one filled with 0 before a global default PriorityClass appeared.
//!
//! The control plane is this test's own (`TestEnv::dedicated`): the policies and the global default PriorityClass
//! are cluster-wide, and the other tests assert the controllers' own patch. Where the API server does not serve
//! MutatingAdmissionPolicy (Kubernetes 1.34 and 1.35, `make test-compat`), the test checks the fallback instead:
//! the controllers' patch fills the group. It never skips.
//!
//! Run: `cargo test -p phalanx-controllers --test admission_policies`

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use phalanx_api::field_managers::CONTROLLER;
use phalanx_api::finalizers::{COMPOSITE_POD_GROUP_PROTECTION, POD_GROUP_PROTECTION};
use phalanx_api::v1alpha3::CompositePodGroup;
use phalanx_api::v1beta1::{PodGroup, PreemptionPolicy, Workload};
use phalanx_controllers::{ControllerOptions, run_controllers};
use phalanx_store::{Store, StoreConfig};
use phalanx_testenv::{TestEnv, apply_admission_policies, create_namespace, wait_for};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);

fn pg(name: &str, extra: Value) -> Result<PodGroup> {
    let mut spec = json!({ "schedulingPolicy": { "gang": { "minCount": 1 } } });
    if let (Some(s), Value::Object(e)) = (spec.as_object_mut(), extra) {
        s.extend(e);
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "PodGroup",
        "metadata": { "name": name }, "spec": spec
    }))?)
}

/// A root CompositePodGroup of the Workload `w` (template `gang-t`).
fn cpg(name: &str) -> Result<CompositePodGroup> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "scheduling.phalanx.dev/v1alpha3", "kind": "CompositePodGroup",
        "metadata": { "name": name },
        "spec": {
            "workloadRef": { "workloadName": "w", "templateName": "gang-t" },
            "schedulingPolicy": { "gang": { "minGroupCount": 1 } }
        }
    }))?)
}

fn workload() -> Result<Workload> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "Workload",
        "metadata": { "name": "w" },
        "spec": { "compositePodGroupTemplates": [{
            "name": "gang-t", "schedulingPolicy": { "gang": { "minGroupCount": 1 } },
            "podGroupTemplates": [{ "name": "leaf", "schedulingPolicy": { "gang": { "minCount": 1 } } }]
        }]}
    }))?)
}

async fn priority_class(client: &Client, name: &str, value: i32, policy: &str, default: bool) -> Result<()> {
    Api::<PriorityClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": { "name": name }, "value": value, "preemptionPolicy": policy,
                "globalDefault": default
            }))?,
        )
        .await
        .with_context(|| format!("creating PriorityClass {name}"))?;
    Ok(())
}

/// The API server reads PriorityClasses for the policy from an informer, so a class created a moment ago may not be
/// seen yet (the controllers then fill in). Waits until a dry-run group naming `class` (`None`: no class, for the
/// global default) gets `value`.
async fn wait_policy_sees(client: &Client, ns: &str, class: Option<&str>, value: i32) -> Result<()> {
    let pgs: Api<PodGroup> = Api::namespaced(client.clone(), ns);
    let extra = class.map_or(json!({}), |c| json!({ "priorityClassName": c }));
    let probe = pg("probe", extra)?;
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_for(
        &format!("the policy to resolve {class:?} to {value} (server dry run)"),
        WAIT,
        || async { Ok((pgs.create(&dry, &probe).await?.spec.priority == Some(value)).then_some(())) },
    )
    .await
}

/// (finalizers, priority, preemptionPolicy) of a created group.
type Filled = (Vec<String>, Option<i32>, Option<PreemptionPolicy>);

fn filled(meta: &ObjectMeta, priority: Option<i32>, policy: Option<PreemptionPolicy>) -> Filled {
    (meta.finalizers.clone().unwrap_or_default(), priority, policy)
}

fn expect_pg(g: &PodGroup, priority: i32, policy: PreemptionPolicy) -> Result<()> {
    let got = filled(&g.metadata, g.spec.priority, g.spec.preemption_policy);
    let want = (
        vec![POD_GROUP_PROTECTION.to_string()],
        Some(priority),
        Some(policy),
    );
    ensure!(got == want, "{:?}: got {got:?}, want {want:?}", g.metadata.name);
    Ok(())
}

/// Whether some `managedFields` entry owns `spec.<field>`.
fn owned(meta: &ObjectMeta, field: &str) -> bool {
    meta.managed_fields.iter().flatten().any(|e| {
        e.fields_v1
            .as_ref()
            .and_then(|f| f.0.get("f:spec"))
            .and_then(|s| s.get(format!("f:{field}")))
            .is_some()
    })
}

/// The controllers' merge patch leaves a `phalanx-controller` Update entry on the object (their status writes are
/// server-side applies of the status subresource).
fn patched_by_controllers(meta: &ObjectMeta) -> bool {
    meta.managed_fields.iter().flatten().any(|e| {
        e.manager.as_deref() == Some(CONTROLLER)
            && e.operation.as_deref() == Some("Update")
            && e.subresource.as_deref().is_none_or(str::is_empty)
    })
}

/// The `Valid` condition of `status` as (status, reason).
fn valid(status: Option<Value>) -> Option<(String, String)> {
    let c = status?
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Valid")?
        .clone();
    Some((c["status"].as_str()?.into(), c["reason"].as_str()?.into()))
}

async fn wait_valid_pg(pgs: &Api<PodGroup>, name: &str, want: (&str, &str)) -> Result<PodGroup> {
    let res = wait_for(&format!("PodGroup {name} Valid={want:?}"), WAIT, || async {
        let g = pgs.get(name).await?;
        let v = valid(g.status.as_ref().map(serde_json::to_value).transpose()?);
        Ok((v.as_ref().map(|(s, r)| (s.as_str(), r.as_str())) == Some(want)).then_some(g))
    })
    .await;
    if res.is_err() {
        let status = pgs.get(name).await.ok().and_then(|g| g.status);
        return res.with_context(|| format!("last status of {name}: {}", json!(status)));
    }
    res
}

async fn events(client: &Client, ns: &str, name: &str, reason: &str) -> Result<usize> {
    let list = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?;
    Ok(list
        .items
        .iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .count())
}

/// The controllers as the operator runs them (store, leader), on this test's runtime; cancelled by the token.
async fn start_controllers(client: &Client) -> Result<CancellationToken> {
    let store = Store::start(client.clone(), StoreConfig::default());
    let mut registry = Registry::default();
    let (leader_tx, leader_rx) = watch::channel(true);
    let stop = CancellationToken::new();
    let fut = run_controllers(
        client.clone(),
        store.clone(),
        ControllerOptions {
            instance: Some("admission-policies-test".into()),
            ..ControllerOptions::default()
        },
        leader_rx,
        stop.clone(),
        &mut registry,
    );
    tokio::spawn(async move {
        let _keep = (leader_tx, registry);
        if let Err(e) = fut.await {
            eprintln!("controllers ended with an error: {e:#}");
        }
    });
    tokio::time::timeout(Duration::from_secs(120), store.wait_ready())
        .await
        .context("store not ready after 120 s")?;
    Ok(stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_fill_new_groups_and_the_controllers_send_no_patch() -> Result<()> {
    let env = tokio::task::spawn_blocking(|| TestEnv::dedicated("admission-policies", &[])).await??;
    let client = env.client().await?;
    phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    let installed = apply_admission_policies(&client).await?;
    let version = client.apiserver_version().await?;
    let minor: u32 = version.minor.trim_end_matches('+').parse().unwrap_or(0);
    if !installed {
        // MutatingAdmissionPolicy is GA and on by default from 1.36: a newer server must serve it.
        ensure!(
            minor < 36,
            "{} does not serve admissionregistration.k8s.io/v1 MutatingAdmissionPolicy",
            version.git_version
        );
        eprintln!(
            "{}: no MutatingAdmissionPolicy; checking the controllers' fallback patch",
            version.git_version
        );
        return fallback(&client).await;
    }
    let ns = create_namespace(&client, "admission-policies").await?;
    let pgs: Api<PodGroup> = Api::namespaced(client.clone(), &ns);
    let cpgs: Api<CompositePodGroup> = Api::namespaced(client.clone(), &ns);
    let pcs: Api<PriorityClass> = Api::all(client.clone());
    let pp = PostParams::default();
    let (high, may, default) = (format!("{ns}-high"), format!("{ns}-may"), format!("{ns}-default"));
    priority_class(&client, &high, 1000, "Never", false).await?;
    priority_class(&client, &may, 100, "PreemptLowerPriority", false).await?;
    wait_policy_sees(&client, &ns, Some(&high), 1000).await?;
    wait_policy_sees(&client, &ns, Some(&may), 100).await?;

    // 1. The policies alone (no controller runs yet).
    let plain = pgs.create(&pp, &pg("plain", json!({}))?).await?;
    expect_pg(&plain, 0, PreemptionPolicy::PreemptLowerPriority)?;
    // What admission adds at creation is owned by no field manager: the API server updates managedFields before
    // mutating admission (k8s.io/apiserver pkg/endpoints/handlers/create.go). The controllers rely on it.
    ensure!(
        !owned(&plain.metadata, "priority") && !owned(&plain.metadata, "preemptionPolicy"),
        "policy-filled fields are owned: {:?}",
        plain.metadata.managed_fields
    );
    let named = pgs
        .create(&pp, &pg("high", json!({ "priorityClassName": high }))?)
        .await?;
    expect_pg(&named, 1000, PreemptionPolicy::Never)?;
    let restrict = json!({ "priorityClassName": may, "preemptionPolicy": "Never" });
    let restricted = pgs.create(&pp, &pg("restrict", restrict)?).await?;
    expect_pg(&restricted, 100, PreemptionPolicy::Never)?;
    ensure!(
        owned(&restricted.metadata, "preemptionPolicy"),
        "written by the author"
    );
    // A system class (2e9) is beyond the CRDs' maximum: skipped, the creation does not fail.
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let system = pgs
        .create(
            &dry,
            &pg(
                "system",
                json!({ "priorityClassName": "system-cluster-critical" }),
            )?,
        )
        .await?;
    ensure!(system.spec.priority.is_none(), "{:?}", system.spec.priority);
    let wl: Api<Workload> = Api::namespaced(client.clone(), &ns);
    wl.create(&pp, &workload()?).await?;
    let comp = cpgs.create(&pp, &cpg("comp")?).await?;
    let got = filled(&comp.metadata, comp.spec.priority, comp.spec.preemption_policy);
    let want = (
        vec![COMPOSITE_POD_GROUP_PROTECTION.to_string()],
        Some(0),
        Some(PreemptionPolicy::PreemptLowerPriority),
    );
    ensure!(got == want, "CompositePodGroup: got {got:?}, want {want:?}");

    // 2. A global default PriorityClass, evaluated as one param among all classes.
    priority_class(&client, &default, 500, "Never", true).await?;
    wait_policy_sees(&client, &ns, None, 500).await?;
    let defaulted = pgs.create(&pp, &pg("defaulted", json!({}))?).await?;
    expect_pg(&defaulted, 500, PreemptionPolicy::Never)?;
    // The order of the two policies is not defined. If the first one ran before the default's invocation, the
    // object already had priority 0 and PreemptLowerPriority; written by hand here, the same state must end the same.
    let zero = json!({ "priority": 0, "preemptionPolicy": "PreemptLowerPriority" });
    expect_pg(
        &pgs.create(&pp, &pg("zero-first", zero)?).await?,
        500,
        PreemptionPolicy::Never,
    )?;
    // Any other written priority is kept for the controllers to report, as upstream admission would refuse it.
    let kept = pgs.create(&pp, &pg("kept", json!({ "priority": 42 }))?).await?;
    ensure!(kept.spec.priority == Some(42), "{:?}", kept.spec.priority);
    let comp_default = cpgs.create(&pp, &cpg("comp-default")?).await?;
    ensure!(comp_default.spec.priority == Some(500), "{:?}", comp_default.spec);

    // 3. The controllers: nothing left to patch. `plain` (0, filled before the default appeared) stays valid.
    let stop = start_controllers(&client).await?;
    let live = pgs.create(&pp, &pg("live", json!({}))?).await?;
    expect_pg(&live, 500, PreemptionPolicy::Never)?;
    let result = async {
        for name in ["plain", "high", "restrict", "defaulted", "zero-first", "live"] {
            let g = wait_valid_pg(&pgs, name, ("True", "Valid")).await?;
            ensure!(
                !patched_by_controllers(&g.metadata),
                "the controllers patched {name}: {:?}",
                g.metadata.managed_fields
            );
            ensure!(
                events(&client, &ns, name, "PriorityResolved").await? == 0,
                "{name}"
            );
        }
        let kept = wait_valid_pg(&pgs, "kept", ("False", "PriorityIgnored")).await?;
        ensure!(kept.spec.priority == Some(42));
        for name in ["comp", "comp-default"] {
            let c = wait_for(&format!("CompositePodGroup {name} reconciled"), WAIT, || async {
                let c = cpgs.get(name).await?;
                let v = valid(c.status.as_ref().map(serde_json::to_value).transpose()?);
                Ok(v.map(|_| c))
            })
            .await?;
            ensure!(
                !patched_by_controllers(&c.metadata),
                "the controllers patched {name}"
            );
            ensure!(
                events(&client, &ns, name, "PriorityResolved").await? == 0,
                "{name}"
            );
        }
        Ok(())
    }
    .await;
    stop.cancel();
    for n in [&high, &may, &default] {
        pcs.delete(n, &DeleteParams::default()).await?;
    }
    result
}

/// Kubernetes 1.34/1.35: no policy, so the controllers add the finalizer and fill the priority with their patch.
async fn fallback(client: &Client) -> Result<()> {
    let ns = create_namespace(client, "admission-fallback").await?;
    let pgs: Api<PodGroup> = Api::namespaced(client.clone(), &ns);
    let created = pgs
        .create(&PostParams::default(), &pg("plain", json!({}))?)
        .await?;
    ensure!(
        created.metadata.finalizers.is_none() && created.spec.priority.is_none(),
        "nothing fills the group at creation"
    );
    let stop = start_controllers(client).await?;
    let result = async {
        let g = wait_valid_pg(&pgs, "plain", ("True", "Valid")).await?;
        expect_pg(&g, 0, PreemptionPolicy::PreemptLowerPriority)?;
        ensure!(
            patched_by_controllers(&g.metadata),
            "{:?}",
            g.metadata.managed_fields
        );
        wait_for("the PriorityResolved event", WAIT, || async {
            Ok((events(client, &ns, "plain", "PriorityResolved").await? > 0).then_some(()))
        })
        .await
    }
    .await;
    stop.cancel();
    result
}
