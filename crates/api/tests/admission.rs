//! Admission against the real kube-apiserver (v1.37, started by phalanx-testenv): the generated CRDs install,
//! every sample in config/samples applies, and invalid objects and forbidden updates are rejected by the
//! schema and its CEL rules with a message that names the field.
//!
//! Run: `cargo test -p phalanx-api --test admission` (builds the control-plane binaries on first use; see
//! docs/testing.md). These tests never skip: without a control plane they fail with the harness's error.

use std::path::PathBuf;

use anyhow::{Context as _, bail, ensure};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Scope;
use kube::{Api, Client};
use phalanx_api::v1alpha3::CompositePodGroup;
use phalanx_api::v1beta1::{PodGroup, Workload};
use phalanx_testenv::{TestEnv, apply_crds, create_namespace};
use serde_json::{Value, json};

const MANAGER: &str = "phalanx-api-test";

/// A client and a fresh namespace on the shared control plane, with the CRDs installed.
async fn setup(prefix: &str) -> anyhow::Result<(Client, String)> {
    let client = TestEnv::shared().client().await?;
    apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    let ns = create_namespace(&client, prefix).await?;
    Ok((client, ns))
}

fn api<K: kube::Resource<DynamicType = ()>>(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<K>(&()))
}

fn object(api_version: &str, kind: &str, name: &str, spec: Value) -> anyhow::Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }))?)
}

fn pod_group(name: &str, spec: Value) -> anyhow::Result<DynamicObject> {
    object("scheduling.phalanx.dev/v1beta1", "PodGroup", name, spec)
}

fn workload(name: &str, spec: Value) -> anyhow::Result<DynamicObject> {
    object("scheduling.phalanx.dev/v1beta1", "Workload", name, spec)
}

fn composite(name: &str, spec: Value) -> anyhow::Result<DynamicObject> {
    object("scheduling.phalanx.dev/v1alpha3", "CompositePodGroup", name, spec)
}

/// Asserts that `result` is a 422 Invalid whose message contains the field path and the fragment.
fn assert_invalid<T: std::fmt::Debug>(
    result: Result<T, kube::Error>,
    field: &str,
    fragment: &str,
) -> anyhow::Result<()> {
    match result {
        Err(kube::Error::Api(status)) => {
            ensure!(
                status.code == 422,
                "expected 422 Invalid, got {}: {}",
                status.code,
                status.message
            );
            ensure!(
                status.message.contains(field),
                "the message does not name the field `{field}`: {}",
                status.message
            );
            ensure!(
                status.message.contains(fragment),
                "the message lacks `{fragment}`: {}",
                status.message
            );
            Ok(())
        }
        Err(other) => bail!("expected an Invalid error naming {field}, got {other}"),
        Ok(accepted) => bail!(
            "the API server accepted an invalid object (expected an error naming {field}): {accepted:?}"
        ),
    }
}

/// Creates `obj` and expects the API server to reject it naming `field`.
async fn rejects_create(
    prefix: &str,
    make_api: fn(&Client, &str) -> Api<DynamicObject>,
    obj: DynamicObject,
    field: &str,
    fragment: &str,
) -> anyhow::Result<()> {
    let (client, ns) = setup(prefix).await?;
    let result = make_api(&client, &ns).create(&PostParams::default(), &obj).await;
    assert_invalid(result, field, fragment)
}

fn pod_groups(client: &Client, ns: &str) -> Api<DynamicObject> {
    api::<PodGroup>(client, ns)
}

fn workloads(client: &Client, ns: &str) -> Api<DynamicObject> {
    api::<Workload>(client, ns)
}

fn composites(client: &Client, ns: &str) -> Api<DynamicObject> {
    api::<CompositePodGroup>(client, ns)
}

fn basic_template(name: &str) -> Value {
    json!({"name": name, "schedulingPolicy": {"basic": {}}})
}

// ---------------------------------------------------------------------------------------------------------
// Invalid objects on create
// ---------------------------------------------------------------------------------------------------------

#[tokio::test]
async fn rejects_both_basic_and_gang() -> anyhow::Result<()> {
    let obj = pod_group(
        "both",
        json!({"schedulingPolicy": {"basic": {}, "gang": {"minCount": 1}}}),
    )?;
    rejects_create(
        "both",
        pod_groups,
        obj,
        "spec.schedulingPolicy",
        "exactly one of: `basic`, `gang`",
    )
    .await
}

#[tokio::test]
async fn rejects_neither_basic_nor_gang() -> anyhow::Result<()> {
    let obj = pod_group("neither", json!({"schedulingPolicy": {}}))?;
    rejects_create(
        "neither",
        pod_groups,
        obj,
        "spec.schedulingPolicy",
        "exactly one of: `basic`, `gang`",
    )
    .await
}

#[tokio::test]
async fn rejects_min_count_zero() -> anyhow::Result<()> {
    let obj = pod_group("min0", json!({"schedulingPolicy": {"gang": {"minCount": 0}}}))?;
    rejects_create(
        "min0",
        pod_groups,
        obj,
        "spec.schedulingPolicy.gang.minCount",
        "greater than or equal to 1",
    )
    .await
}

#[tokio::test]
async fn rejects_two_topology_constraints() -> anyhow::Result<()> {
    let obj = pod_group(
        "topo2",
        json!({
            "schedulingPolicy": {"basic": {}},
            "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}, {"key": "topology.kubernetes.io/zone"}]},
        }),
    )?;
    rejects_create(
        "topo2",
        pod_groups,
        obj,
        "spec.schedulingConstraints.topology",
        "at most 1 item",
    )
    .await
}

#[tokio::test]
async fn rejects_topology_key_that_is_not_a_label_key() -> anyhow::Result<()> {
    let obj = pod_group(
        "badkey",
        json!({
            "schedulingPolicy": {"basic": {}},
            "schedulingConstraints": {"topology": [{"key": "rack name/with/slashes!"}]},
        }),
    )?;
    rejects_create(
        "badkey",
        pod_groups,
        obj,
        "spec.schedulingConstraints.topology[0].key",
        "should match",
    )
    .await
}

#[tokio::test]
async fn rejects_priority_above_one_billion() -> anyhow::Result<()> {
    let obj = pod_group(
        "prio",
        json!({"schedulingPolicy": {"basic": {}}, "priority": 1_000_000_001}),
    )?;
    rejects_create(
        "prio",
        pod_groups,
        obj,
        "spec.priority",
        "less than or equal to 1000000000",
    )
    .await
}

#[tokio::test]
async fn rejects_a_preemption_delay_outside_zero_to_a_day() -> anyhow::Result<()> {
    for (name, v, says) in [
        ("delay-neg", -1, "greater than or equal to 0"),
        ("delay-big", 86_401, "less than or equal to 86400"),
    ] {
        let obj = pod_group(
            name,
            json!({"schedulingPolicy": {"gang": {"minCount": 2}}, "preemptionDelaySeconds": v}),
        )?;
        rejects_create(name, pod_groups, obj, "spec.preemptionDelaySeconds", says).await?;
    }
    Ok(())
}

#[tokio::test]
async fn rejects_max_restarts_without_restart_group() -> anyhow::Result<()> {
    let obj = pod_group(
        "rp-max",
        json!({"schedulingPolicy": {"gang": {"minCount": 2}},
               "recoveryPolicy": {"action": "Fail", "maxRestarts": 3}}),
    )?;
    rejects_create(
        "rp-max",
        pod_groups,
        obj,
        "spec.recoveryPolicy.maxRestarts",
        "maxRestarts applies only to RestartGroup",
    )
    .await
}

#[tokio::test]
async fn rejects_recovery_grace_period_above_a_day() -> anyhow::Result<()> {
    let obj = pod_group(
        "rp-grace",
        json!({"schedulingPolicy": {"gang": {"minCount": 2}},
               "recoveryPolicy": {"action": "RestartGroup", "gracePeriodSeconds": 86_401}}),
    )?;
    rejects_create(
        "rp-grace",
        pod_groups,
        obj,
        "spec.recoveryPolicy.gracePeriodSeconds",
        "less than or equal to 86400",
    )
    .await
}

#[tokio::test]
async fn rejects_unknown_recovery_action() -> anyhow::Result<()> {
    let obj = pod_group(
        "rp-action",
        json!({"schedulingPolicy": {"gang": {"minCount": 2}},
               "recoveryPolicy": {"onDisruption": "Retry"}}),
    )?;
    rejects_create(
        "rp-action",
        pod_groups,
        obj,
        "spec.recoveryPolicy.onDisruption",
        "Unsupported value: \"Retry\"",
    )
    .await
}

/// A whole recovery policy is accepted on a PodGroup and in a Workload template, and it stays mutable.
#[tokio::test]
async fn recovery_policy_is_accepted_and_mutable() -> anyhow::Result<()> {
    let (client, ns) = setup("rp-ok").await?;
    let policy = json!({"action": "None", "onDisruption": "RestartGroup", "onFailure": "Fail",
                        "gracePeriodSeconds": 30, "maxRestarts": 2});
    let api = pod_groups(&client, &ns);
    let pg = pod_group(
        "rp",
        json!({"schedulingPolicy": {"gang": {"minCount": 2}}, "recoveryPolicy": policy}),
    )?;
    let created = api.create(&PostParams::default(), &pg).await?;
    ensure!(
        created.data["spec"]["recoveryPolicy"] == policy,
        "stored {:?}",
        created.data["spec"]
    );
    let updated = merge(
        &api,
        "rp",
        json!({"spec": {"recoveryPolicy": {"action": "Fail", "onDisruption": null,
                                                                       "maxRestarts": null}}}),
    )
    .await?;
    ensure!(
        updated.data["spec"]["recoveryPolicy"]["action"] == "Fail",
        "recoveryPolicy was not updated: {:?}",
        updated.data["spec"]
    );
    let wl = workload(
        "rp",
        json!({"podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}},
                                      "recoveryPolicy": {"action": "RestartGroup"}}]}),
    )?;
    workloads(&client, &ns)
        .create(&PostParams::default(), &wl)
        .await?;
    Ok(())
}

#[tokio::test]
async fn rejects_parent_without_workload_ref() -> anyhow::Result<()> {
    let obj = pod_group(
        "orphan",
        json!({"schedulingPolicy": {"basic": {}}, "parentCompositePodGroupName": "root"}),
    )?;
    rejects_create(
        "orphan",
        pod_groups,
        obj,
        "spec.workloadRef",
        "must be set when parentCompositePodGroupName is set",
    )
    .await
}

#[tokio::test]
async fn rejects_composite_pod_group_without_workload_ref() -> anyhow::Result<()> {
    let obj = composite(
        "nowl",
        json!({"schedulingPolicy": {"gang": {"minGroupCount": 1}}}),
    )?;
    rejects_create("cpg-nowl", composites, obj, "spec.workloadRef", "Required value").await
}

#[tokio::test]
async fn rejects_composite_min_group_count_zero() -> anyhow::Result<()> {
    let obj = composite(
        "mgc0",
        json!({
            "workloadRef": {"workloadName": "w", "templateName": "t"},
            "schedulingPolicy": {"gang": {"minGroupCount": 0}},
        }),
    )?;
    rejects_create(
        "cpg-mgc0",
        composites,
        obj,
        "spec.schedulingPolicy.gang.minGroupCount",
        "greater than or equal to 1",
    )
    .await
}

#[tokio::test]
async fn rejects_bad_object_name() -> anyhow::Result<()> {
    let obj = pod_group("Bad_Name", json!({"schedulingPolicy": {"basic": {}}}))?;
    rejects_create("badname", pod_groups, obj, "metadata.name", "RFC 1123 subdomain").await
}

#[tokio::test]
async fn rejects_bad_template_name_in_workload_ref() -> anyhow::Result<()> {
    let obj = pod_group(
        "badref",
        json!({
            "schedulingPolicy": {"basic": {}},
            "workloadRef": {"workloadName": "train", "templateName": "Workers.1"},
        }),
    )?;
    rejects_create(
        "badref",
        pod_groups,
        obj,
        "spec.workloadRef.templateName",
        "should match",
    )
    .await
}

#[tokio::test]
async fn rejects_both_disruption_modes() -> anyhow::Result<()> {
    let obj = pod_group(
        "dm2",
        json!({"schedulingPolicy": {"basic": {}}, "disruptionMode": {"single": {}, "all": {}}}),
    )?;
    rejects_create(
        "dm2",
        pod_groups,
        obj,
        "spec.disruptionMode",
        "exactly one of: `single`, `all`",
    )
    .await
}

#[tokio::test]
async fn rejects_five_resource_claims() -> anyhow::Result<()> {
    let claims: Vec<Value> = (0..5)
        .map(|i| json!({"name": format!("c{i}"), "resourceClaimName": format!("claim-{i}")}))
        .collect();
    let obj = pod_group(
        "rc5",
        json!({"schedulingPolicy": {"basic": {}}, "resourceClaims": claims}),
    )?;
    rejects_create("rc5", pod_groups, obj, "spec.resourceClaims", "at most 4 items").await
}

#[tokio::test]
async fn rejects_resource_claim_with_both_sources() -> anyhow::Result<()> {
    let obj = pod_group(
        "rcboth",
        json!({
            "schedulingPolicy": {"basic": {}},
            "resourceClaims": [{"name": "gpus", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}],
        }),
    )?;
    rejects_create(
        "rcboth",
        pod_groups,
        obj,
        "spec.resourceClaims[0]",
        "exactly one of: `resourceClaimName`, `resourceClaimTemplateName`",
    )
    .await
}

#[tokio::test]
async fn rejects_nine_templates() -> anyhow::Result<()> {
    let templates: Vec<Value> = (0..9).map(|i| basic_template(&format!("t{i}"))).collect();
    let obj = workload("nine", json!({"podGroupTemplates": templates}))?;
    rejects_create(
        "nine",
        workloads,
        obj,
        "spec.podGroupTemplates",
        "at most 8 items",
    )
    .await
}

#[tokio::test]
async fn rejects_duplicate_template_names() -> anyhow::Result<()> {
    let obj = workload(
        "dupe",
        json!({"podGroupTemplates": [basic_template("a"), basic_template("a")]}),
    )?;
    rejects_create(
        "dupe",
        workloads,
        obj,
        "spec.podGroupTemplates[1]",
        "Duplicate value",
    )
    .await
}

#[tokio::test]
async fn rejects_duplicate_names_across_sibling_template_lists() -> anyhow::Result<()> {
    let obj = workload(
        "dupe2",
        json!({"compositePodGroupTemplates": [{
            "name": "root",
            "schedulingPolicy": {"basic": {}},
            "podGroupTemplates": [basic_template("x")],
            "compositePodGroupTemplates": [{"name": "x", "schedulingPolicy": {"basic": {}}, "podGroupTemplates": [basic_template("leaf")]}],
        }]}),
    )?;
    rejects_create(
        "dupe2",
        workloads,
        obj,
        "spec.compositePodGroupTemplates[0]",
        "template names must be unique",
    )
    .await
}

#[tokio::test]
async fn rejects_composite_template_without_children() -> anyhow::Result<()> {
    let obj = workload(
        "childless",
        json!({"compositePodGroupTemplates": [{"name": "c", "schedulingPolicy": {"basic": {}}}]}),
    )?;
    rejects_create(
        "childless",
        workloads,
        obj,
        "spec.compositePodGroupTemplates[0]",
        "must have at least one child PodGroupTemplate or CompositePodGroupTemplate",
    )
    .await
}

#[tokio::test]
async fn rejects_workload_without_templates() -> anyhow::Result<()> {
    let obj = workload("empty", json!({}))?;
    rejects_create(
        "wl-empty",
        workloads,
        obj,
        "spec",
        "exactly one of: `podGroupTemplates`, `compositePodGroupTemplates`",
    )
    .await
}

/// Composite templates nested four deep: the fourth composite level would be at depth 4 (upstream
/// `WorkloadMaxTreeDepth`), which leaves no room for its PodGroup templates.
#[tokio::test]
async fn rejects_template_tree_deeper_than_four() -> anyhow::Result<()> {
    let mut level = json!({"name": "c4", "schedulingPolicy": {"basic": {}}, "podGroupTemplates": [basic_template("leaf")]});
    for name in ["c3", "c2", "c1"] {
        level =
            json!({"name": name, "schedulingPolicy": {"basic": {}}, "compositePodGroupTemplates": [level]});
    }
    let obj = workload("deep", json!({"compositePodGroupTemplates": [level]}))?;
    rejects_create(
        "deep",
        workloads,
        obj,
        "spec.compositePodGroupTemplates[0].compositePodGroupTemplates[0].compositePodGroupTemplates[0].compositePodGroupTemplates",
        "maximum template hierarchy depth is 4",
    )
    .await
}

// ---------------------------------------------------------------------------------------------------------
// Updates: everything is immutable except gang.minCount and gang.minGroupCount
// ---------------------------------------------------------------------------------------------------------

/// A standalone gang PodGroup with every immutable field set.
fn full_pod_group(name: &str) -> anyhow::Result<DynamicObject> {
    pod_group(
        name,
        json!({
            "workloadRef": {"workloadName": "train", "templateName": "workers"},
            "schedulingPolicy": {"gang": {"minCount": 4}},
            "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
            "priorityClassName": "high",
            "priority": 100,
            "preemptionPolicy": "Never",
        }),
    )
}

async fn merge(api: &Api<DynamicObject>, name: &str, patch: Value) -> Result<DynamicObject, kube::Error> {
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

#[tokio::test]
async fn pod_group_updates_only_min_count() -> anyhow::Result<()> {
    let (client, ns) = setup("pg-update").await?;
    let api = pod_groups(&client, &ns);
    api.create(&PostParams::default(), &full_pod_group("pg")?).await?;

    // The only mutable field.
    let updated = merge(
        &api,
        "pg",
        json!({"spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}),
    )
    .await?;
    ensure!(
        updated.data["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2,
        "minCount was not updated"
    );
    // The server applied the default disruption mode.
    ensure!(
        updated.data["spec"]["disruptionMode"] == json!({"single": {}}),
        "disruptionMode default missing"
    );

    let cases = [
        (
            json!({"spec": {"schedulingPolicy": {"gang": null, "basic": {}}}}),
            "spec.schedulingPolicy",
            "kind (`basic` or `gang`) is immutable",
        ),
        (
            json!({"spec": {"schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/zone"}]}}}),
            "spec.schedulingConstraints",
            "schedulingConstraints is immutable",
        ),
        (
            json!({"spec": {"schedulingConstraints": null}}),
            "spec.schedulingConstraints",
            "schedulingConstraints is immutable",
        ),
        (
            json!({"spec": {"workloadRef": {"templateName": "other"}}}),
            "spec.workloadRef",
            "workloadRef is immutable",
        ),
        (
            json!({"spec": {"workloadRef": null}}),
            "spec.workloadRef",
            "workloadRef is immutable",
        ),
        (
            json!({"spec": {"parentCompositePodGroupName": "root"}}),
            "spec.parentCompositePodGroupName",
            "parentCompositePodGroupName is immutable",
        ),
        (
            json!({"spec": {"disruptionMode": {"single": null, "all": {}}}}),
            "spec.disruptionMode",
            "disruptionMode is immutable",
        ),
        (
            json!({"spec": {"priority": 101}}),
            "spec.priority",
            "priority is immutable once set",
        ),
        (
            json!({"spec": {"priorityClassName": "low"}}),
            "spec.priorityClassName",
            "priorityClassName is immutable",
        ),
        (
            json!({"spec": {"preemptionPolicy": "PreemptLowerPriority"}}),
            "spec.preemptionPolicy",
            "preemptionPolicy is immutable once set",
        ),
    ];
    for (patch, field, fragment) in cases {
        assert_invalid(merge(&api, "pg", patch.clone()).await, field, fragment)
            .with_context(|| format!("patch {patch}"))?;
    }
    let current = api.get("pg").await?;
    ensure!(
        current.data["spec"]["schedulingPolicy"] == json!({"gang": {"minCount": 2}}),
        "policy changed"
    );
    ensure!(current.data["spec"]["priority"] == 100, "priority changed");
    Ok(())
}

#[tokio::test]
async fn pod_group_priority_can_be_filled_once() -> anyhow::Result<()> {
    let (client, ns) = setup("pg-prio").await?;
    let api = pod_groups(&client, &ns);
    api.create(
        &PostParams::default(),
        &pod_group("pg", json!({"schedulingPolicy": {"basic": {}}}))?,
    )
    .await?;
    let updated = merge(
        &api,
        "pg",
        json!({"spec": {"priority": 5, "preemptionPolicy": "PreemptLowerPriority"}}),
    )
    .await?;
    ensure!(updated.data["spec"]["priority"] == 5, "priority was not filled");
    assert_invalid(
        merge(&api, "pg", json!({"spec": {"priority": null}})).await,
        "spec.priority",
        "immutable once set",
    )
}

#[tokio::test]
async fn composite_pod_group_updates_only_min_group_count() -> anyhow::Result<()> {
    let (client, ns) = setup("cpg-update").await?;
    let api = composites(&client, &ns);
    let obj = composite(
        "root",
        json!({
            "workloadRef": {"workloadName": "lws", "templateName": "replica"},
            "schedulingPolicy": {"gang": {"minGroupCount": 2}},
            "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
        }),
    )?;
    api.create(&PostParams::default(), &obj).await?;
    let updated = merge(
        &api,
        "root",
        json!({"spec": {"schedulingPolicy": {"gang": {"minGroupCount": 1}}}}),
    )
    .await?;
    ensure!(
        updated.data["spec"]["schedulingPolicy"]["gang"]["minGroupCount"] == 1,
        "minGroupCount not updated"
    );
    ensure!(
        updated.data["spec"]["disruptionMode"] == json!({"single": {}}),
        "disruptionMode default missing"
    );

    let cases = [
        (
            json!({"spec": {"workloadRef": {"templateName": "other"}}}),
            "spec.workloadRef",
            "workloadRef is immutable",
        ),
        (
            json!({"spec": {"schedulingPolicy": {"gang": null, "basic": {}}}}),
            "spec.schedulingPolicy",
            "is immutable",
        ),
        (
            json!({"spec": {"schedulingConstraints": null}}),
            "spec.schedulingConstraints",
            "schedulingConstraints is immutable",
        ),
        (
            json!({"spec": {"parentCompositePodGroupName": "top"}}),
            "spec.parentCompositePodGroupName",
            "is immutable",
        ),
        (
            json!({"spec": {"disruptionMode": {"single": null, "all": {}}}}),
            "spec.disruptionMode",
            "disruptionMode is immutable",
        ),
    ];
    for (patch, field, fragment) in cases {
        assert_invalid(merge(&api, "root", patch.clone()).await, field, fragment)
            .with_context(|| format!("patch {patch}"))?;
    }
    Ok(())
}

#[tokio::test]
async fn workload_templates_are_fixed_but_min_count_is_mutable() -> anyhow::Result<()> {
    let (client, ns) = setup("wl-update").await?;
    let api = workloads(&client, &ns);
    let gang = json!({"name": "workers", "schedulingPolicy": {"gang": {"minCount": 4}}});
    api.create(
        &PostParams::default(),
        &workload(
            "wl",
            json!({"podGroupTemplates": [gang, basic_template("driver")]}),
        )?,
    )
    .await?;

    let templates = |min: i32| json!([{"name": "workers", "schedulingPolicy": {"gang": {"minCount": min}}}, basic_template("driver")]);
    let updated = merge(&api, "wl", json!({"spec": {"podGroupTemplates": templates(2)}})).await?;
    ensure!(updated.data["spec"]["podGroupTemplates"][0]["schedulingPolicy"]["gang"]["minCount"] == 2);

    let mut added = templates(2);
    if let Some(list) = added.as_array_mut() {
        list.push(basic_template("extra"));
    }
    assert_invalid(
        merge(&api, "wl", json!({"spec": {"podGroupTemplates": added}})).await,
        "spec.podGroupTemplates",
        "may not be added or removed",
    )?;
    assert_invalid(
        merge(
            &api,
            "wl",
            json!({"spec": {"podGroupTemplates": [basic_template("workers"), basic_template("driver")]}}),
        )
        .await,
        "spec.podGroupTemplates[0].schedulingPolicy",
        "is immutable",
    )?;
    let constrained = json!([
        {"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": {"all": {}}},
        basic_template("driver"),
    ]);
    assert_invalid(
        merge(&api, "wl", json!({"spec": {"podGroupTemplates": constrained}})).await,
        "spec.podGroupTemplates[0].disruptionMode",
        "disruptionMode is immutable",
    )
}

// ---------------------------------------------------------------------------------------------------------
// Samples and kubectl view
// ---------------------------------------------------------------------------------------------------------

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Server-side applies every document of `yaml`, resolving each kind through discovery.
async fn apply_all(
    client: &Client,
    ns: &str,
    yaml: &str,
) -> anyhow::Result<Vec<(ApiResource, Scope, String)>> {
    let objects: Vec<DynamicObject> = serde_saphyr::from_multiple(yaml).context("parsing the YAML")?;
    let mut applied = Vec::new();
    for obj in objects {
        let types = obj.types.clone().context("a document has no apiVersion/kind")?;
        let gvk = GroupVersionKind::try_from(&types)?;
        let name = obj
            .metadata
            .name
            .clone()
            .context("a document has no metadata.name")?;
        let (resource, caps) = kube::discovery::pinned_kind(client, &gvk).await?;
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => Api::namespaced_with(client.clone(), ns, &resource),
            Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        api.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&obj))
            .await
            .with_context(|| format!("applying {} {name}", gvk.kind))?;
        applied.push((resource, caps.scope, name));
    }
    Ok(applied)
}

#[tokio::test]
async fn every_sample_applies() -> anyhow::Result<()> {
    let (client, ns) = setup("samples").await?;
    let dir = repo_root().join("config/samples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    ensure!(
        files.len() >= 4,
        "expected at least four samples in {}, found {files:?}",
        dir.display()
    );
    let mut nodes = Vec::new();
    for file in &files {
        let yaml = std::fs::read_to_string(file)?;
        let applied = apply_all(&client, &ns, &yaml)
            .await
            .with_context(|| format!("sample {}", file.display()))?;
        ensure!(!applied.is_empty(), "{} holds no objects", file.display());
        for (resource, scope, name) in applied {
            if matches!(scope, Scope::Cluster) {
                nodes.push((resource, name));
            }
        }
    }
    // Every Phalanx object of the samples is stored.
    for (kind_api, expected) in [
        (pod_groups(&client, &ns), 7),
        (workloads(&client, &ns), 2),
        (composites(&client, &ns), 1),
    ] {
        let listed = kind_api.list(&Default::default()).await?;
        ensure!(
            listed.items.len() == expected,
            "expected {expected} objects, found {}",
            listed.items.len()
        );
    }
    // Cluster-scoped sample objects (the fake nodes) are shared by the whole control plane: remove them.
    for (resource, name) in nodes {
        Api::<DynamicObject>::all_with(client.clone(), &resource)
            .delete(&name, &DeleteParams::default())
            .await?;
    }
    Ok(())
}

/// `kubectl get` shows the printer columns, the short names resolve and `kubectl get phalanx` lists all kinds.
#[tokio::test]
async fn kubectl_shows_printer_columns_short_names_and_category() -> anyhow::Result<()> {
    let (client, ns) = setup("kubectl").await?;
    let api = pod_groups(&client, &ns);
    api.create(
        &PostParams::default(),
        &pod_group("train", json!({"schedulingPolicy": {"gang": {"minCount": 4}}}))?,
    )
    .await?;
    let status = json!({"status": {
        "policy": "Gang", "pods": 4, "scheduledPods": 3, "runningPods": 2,
        "conditions": [{"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable",
                        "message": "0/8 nodes are available", "lastTransitionTime": "2026-11-30T00:00:00Z"}],
    }});
    // A group the controllers found invalid but whose other conditions look healthy (issue 35, defect 13): the
    // default columns must show the Valid condition's reason.
    api.create(
        &PostParams::default(),
        &pod_group(
            "claimless",
            json!({"schedulingPolicy": {"gang": {"minCount": 2}}}),
        )?,
    )
    .await?;
    let invalid = json!({"status": {
        "policy": "Gang", "pods": 2, "scheduledPods": 2,
        "conditions": [
            {"type": "PodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled", "message": "",
             "lastTransitionTime": "2026-11-30T00:00:00Z"},
            {"type": "PodGroupSatisfied", "status": "True", "reason": "Satisfied", "message": "",
             "lastTransitionTime": "2026-11-30T00:00:00Z"},
            {"type": "Valid", "status": "False", "reason": "ResourceClaimTemplateNotFound",
             "message": "spec.resourceClaims[0].resourceClaimTemplateName: not found",
             "lastTransitionTime": "2026-11-30T00:00:00Z"}],
    }});
    api.patch_status("claimless", &PatchParams::default(), &Patch::Merge(&invalid))
        .await?;
    api.patch_status("train", &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    workloads(&client, &ns)
        .create(
            &PostParams::default(),
            &workload("etl", json!({"podGroupTemplates": [basic_template("a")]}))?,
        )
        .await?;
    composites(&client, &ns)
        .create(
            &PostParams::default(),
            &composite("lws-0", json!({"workloadRef": {"workloadName": "etl", "templateName": "a"}, "schedulingPolicy": {"basic": {}}}))?,
        )
        .await?;

    let pg = kubectl(&["get", "ppg", "-n", &ns])?;
    let mut lines = pg.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    ensure!(
        header
            == [
                "NAME",
                "POLICY",
                "MIN",
                "PODS",
                "SCHEDULED",
                "STATUS",
                "SATISFIED",
                "VALID",
                "AGE"
            ],
        "header: {pg}"
    );
    // Rows come sorted by name: claimless, then train.
    let row: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    ensure!(
        row[..8]
            == [
                "claimless",
                "Gang",
                "2",
                "2",
                "2",
                "Scheduled",
                "Satisfied",
                "ResourceClaimTemplateNotFound"
            ],
        "an invalid group's row must name its Valid reason: {pg}"
    );
    let row: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    ensure!(
        row[..6] == ["train", "Gang", "4", "4", "3", "Unschedulable"],
        "row: {pg}"
    );

    let wide = kubectl(&["get", "ppg", "-n", &ns, "-o", "wide"])?;
    ensure!(
        wide.contains("RUNNING") && wide.contains("PARENT"),
        "wide columns missing: {wide}"
    );
    let cpg = kubectl(&["get", "pcpg", "-n", &ns])?;
    ensure!(cpg.contains("CHILDREN") && cpg.contains("lws-0"), "pcpg: {cpg}");
    let wl = kubectl(&["get", "pwl", "-n", &ns])?;
    ensure!(wl.contains("TEMPLATES") && wl.contains("etl"), "pwl: {wl}");
    let all = kubectl(&["get", "phalanx", "-n", &ns, "-o", "name"])?;
    for expected in [
        "podgroup.scheduling.phalanx.dev/train",
        "workload.scheduling.phalanx.dev/etl",
        "compositepodgroup.scheduling.phalanx.dev/lws-0",
    ] {
        ensure!(
            all.lines().any(|l| l == expected),
            "`kubectl get phalanx` lacks {expected}: {all}"
        );
    }
    Ok(())
}

/// The short names collide with no other resource the server knows.
#[tokio::test]
async fn short_names_are_unique_on_the_server() -> anyhow::Result<()> {
    let _ = setup("shortnames").await?;
    let resources = kubectl(&["api-resources", "--no-headers"])?;
    for short in ["ppg", "pcpg", "pwl"] {
        let owners: Vec<&str> = resources
            .lines()
            .filter(|line| {
                line.split_whitespace()
                    .nth(1)
                    .is_some_and(|s| s.split(',').any(|s| s == short))
            })
            .collect();
        ensure!(
            owners.len() == 1,
            "short name {short} is used by {} resources: {owners:?}",
            owners.len()
        );
    }
    Ok(())
}

fn kubectl(args: &[&str]) -> anyhow::Result<String> {
    let env = TestEnv::shared();
    let out = std::process::Command::new(env.bin_dir().join("kubectl"))
        .arg("--kubeconfig")
        .arg(env.kubeconfig_path())
        .args(args)
        .output()
        .context("running kubectl")?;
    ensure!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// `preferredTopology` (a Phalanx addition) at most 8 levels.
#[tokio::test]
async fn rejects_nine_preferred_topology_levels() -> anyhow::Result<()> {
    let levels: Vec<Value> = (0..9).map(|i| json!({"key": format!("level-{i}")})).collect();
    let obj = pod_group(
        "pref9",
        json!({
            "schedulingPolicy": {"basic": {}},
            "schedulingConstraints": {"preferredTopology": levels},
        }),
    )?;
    rejects_create(
        "pref9",
        pod_groups,
        obj,
        "spec.schedulingConstraints.preferredTopology",
        "at most 8 items",
    )
    .await
}

/// `preferredTopology` is a list-map keyed by `key`: a level given twice is a duplicate.
#[tokio::test]
async fn rejects_duplicate_preferred_topology_keys() -> anyhow::Result<()> {
    let obj = composite(
        "prefdup",
        json!({
            "workloadRef": {"workloadName": "w", "templateName": "t"},
            "schedulingPolicy": {"basic": {}},
            "schedulingConstraints": {"preferredTopology": [{"key": "rack"}, {"key": "block"}, {"key": "rack"}]},
        }),
    )?;
    rejects_create(
        "prefdup",
        composites,
        obj,
        "spec.schedulingConstraints.preferredTopology[2]",
        "Duplicate value",
    )
    .await
}

/// A preferred level's key must be a label key, as the required one.
#[tokio::test]
async fn rejects_preferred_topology_key_that_is_not_a_label_key() -> anyhow::Result<()> {
    let obj = pod_group(
        "prefbad",
        json!({
            "schedulingPolicy": {"basic": {}},
            "schedulingConstraints": {"preferredTopology": [{"key": "rack"}, {"key": "not a key!"}]},
        }),
    )?;
    rejects_create(
        "prefbad",
        pod_groups,
        obj,
        "spec.schedulingConstraints.preferredTopology[1].key",
        "should match",
    )
    .await
}

/// Required and preferred together on a PodGroup, and preferred levels in the Workload's templates down to the
/// deepest level, are accepted and kept as written.
#[tokio::test]
async fn accepts_preferred_topology_on_groups_and_templates() -> anyhow::Result<()> {
    let (client, ns) = setup("prefok").await?;
    let constraints = json!({
        "topology": [{"key": "topology.kubernetes.io/zone"}],
        "preferredTopology": [{"key": "example.com/block"}, {"key": "example.com/rack"}],
    });
    let pg = pod_group(
        "both",
        json!({"schedulingPolicy": {"gang": {"minCount": 2}}, "schedulingConstraints": constraints}),
    )?;
    let created = pod_groups(&client, &ns)
        .create(&PostParams::default(), &pg)
        .await?;
    ensure!(
        created.data["spec"]["schedulingConstraints"] == constraints,
        "stored as written: {}",
        created.data["spec"]["schedulingConstraints"]
    );
    let leaf = json!({
        "name": "leaf",
        "schedulingPolicy": {"basic": {}},
        "schedulingConstraints": {"preferredTopology": [{"key": "rack"}]},
    });
    let mut tree = json!({"name": "c3", "schedulingPolicy": {"basic": {}}, "podGroupTemplates": [leaf],
        "schedulingConstraints": {"preferredTopology": [{"key": "block"}]}});
    for name in ["c2", "c1"] {
        tree = json!({"name": name, "schedulingPolicy": {"basic": {}}, "compositePodGroupTemplates": [tree],
            "schedulingConstraints": {"preferredTopology": [{"key": "zone"}]}});
    }
    let w = workload("deep", json!({"compositePodGroupTemplates": [tree]}))?;
    workloads(&client, &ns).create(&PostParams::default(), &w).await?;
    Ok(())
}

/// CompositePodGroup is served at `v1beta1` beside the stored `v1alpha3` (as Kubernetes 1.38 serves upstream's), with
/// the same schema: an object created at `v1beta1` reads back at `v1alpha3` into the typed struct unchanged, and the
/// same CEL rules reject at `v1beta1`.
#[tokio::test]
async fn composite_pod_group_is_served_at_v1beta1_too() -> anyhow::Result<()> {
    let (client, ns) = setup("cpg-beta").await?;
    let beta = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("scheduling.phalanx.dev", "v1beta1", "CompositePodGroup"),
        "compositepodgroups",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &beta);
    let spec = json!({
        "workloadRef": {"workloadName": "lws", "templateName": "replica"},
        "schedulingPolicy": {"gang": {"minGroupCount": 2}},
        "preemptionDelaySeconds": 30,
    });
    let mut obj = object(
        "scheduling.phalanx.dev/v1beta1",
        "CompositePodGroup",
        "root",
        spec,
    )?;
    obj.types = Some(kube::core::TypeMeta {
        api_version: "scheduling.phalanx.dev/v1beta1".into(),
        kind: "CompositePodGroup".into(),
    });
    api.create(&PostParams::default(), &obj).await?;
    let typed: Api<CompositePodGroup> = Api::namespaced(client.clone(), &ns);
    let got = typed.get("root").await?;
    ensure!(
        got.spec.preemption_delay_seconds == Some(30),
        "read at v1alpha3: {:?}",
        got.spec
    );
    ensure!(
        got.spec
            .scheduling_policy
            .gang
            .as_ref()
            .map(|g| g.min_group_count)
            == Some(2),
        "minGroupCount lost: {:?}",
        got.spec
    );
    let bad = object(
        "scheduling.phalanx.dev/v1beta1",
        "CompositePodGroup",
        "bad",
        json!({
            "workloadRef": {"workloadName": "lws", "templateName": "replica"},
            "schedulingPolicy": {"gang": {"minGroupCount": 0}},
        }),
    )?;
    assert_invalid(
        api.create(&PostParams::default(), &bad).await,
        "spec.schedulingPolicy.gang.minGroupCount",
        "greater than or equal to 1",
    )
}
