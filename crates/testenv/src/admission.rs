//! Installing the chart's MutatingAdmissionPolicies, opt-in: the admission that adds the protection finalizer and
//! fills `spec.priority` / `spec.preemptionPolicy` at creation, where the chart would install it.

use std::time::Duration;

use anyhow::Context as _;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::wait::wait_for;

/// The policies and their bindings: the chart's file, the one source (`charts/phalanx/files/admission-policies.yaml`,
/// rendered by `templates/admission-policies.yaml` with each name prefixed by the release).
pub const ADMISSION_POLICIES_YAML: &str =
    include_str!("../../../charts/phalanx/files/admission-policies.yaml");

/// The group-version that serves MutatingAdmissionPolicy as GA (Kubernetes 1.36 and later, on by default).
const ADMISSION_V1: &str = "admissionregistration.k8s.io/v1";
/// Field manager of the harness's server-side applies.
const FIELD_MANAGER: &str = "phalanx-testenv";
/// The finalizer the policies add to a PodGroup (`phalanx_api::finalizers::POD_GROUP_PROTECTION`; this crate does
/// not depend on phalanx-api, and the controllers' policy test compares the two).
const POD_GROUP_FINALIZER: &str = "scheduling.phalanx.dev/podgroup-protection";
/// How long the API server may take to put the policies in effect. It loads them asynchronously (policy and
/// binding informers, a recompilation every second: k8s.io/apiserver pkg/admission/plugin/policy/generic
/// policy_source.go), and answers 503 to the groups' creations for the first seconds after their CRD is created
/// (mutating/patch/typeconverter.go refreshes its OpenAPI paths every 5 s).
const IN_EFFECT_TIMEOUT: Duration = Duration::from_secs(60);

/// Applies the chart's MutatingAdmissionPolicies and bindings ([`ADMISSION_POLICIES_YAML`], server-side apply,
/// names as in the file) when the API server serves `admissionregistration.k8s.io/v1` MutatingAdmissionPolicy, and
/// returns whether it did (`false`: Kubernetes 1.34 and 1.35, where the controllers' patch adds the finalizer and
/// the priority). Returns once the policies are in effect: a PodGroup created with a server dry run comes back with
/// the protection finalizer and `spec.priority`. Call it after [`crate::apply_crds`], as a chart install would.
///
/// Opt-in: with the policies the controllers see no group to patch, and tests that assert the controllers' own
/// patch (their `PriorityResolved` events) must not use it. The policies are cluster-wide: a cluster reused through
/// `PHALANX_TEST_KUBECONFIG` keeps them.
///
/// # Errors
/// When discovery fails, the API refuses an object, or the policies are not in effect within 60 s; the error names
/// the last answer of the probe.
pub async fn apply_admission_policies(client: &Client) -> anyhow::Result<bool> {
    if !serves_mutating_admission_policy(client).await? {
        return Ok(false);
    }
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for (kind, name, api, doc) in policy_objects(client)? {
        api.patch(&name, &pp, &Patch::Apply(&doc))
            .await
            .with_context(|| format!("applying {kind} {name}"))?;
    }
    wait_in_effect(client, true).await?;
    Ok(true)
}

/// Deletes what [`apply_admission_policies`] applied (an object already gone is fine) and returns once a PodGroup
/// created with a server dry run comes back without the protection finalizer, that is once the API server has
/// unloaded them; `false` when the API is not served. The benchmark's `phalanx-base` case uses it to run an earlier
/// binary as it was installed.
///
/// # Errors
/// When discovery fails, the API refuses a deletion, or the policies are still in effect after 60 s.
pub async fn remove_admission_policies(client: &Client) -> anyhow::Result<bool> {
    if !serves_mutating_admission_policy(client).await? {
        return Ok(false);
    }
    for (kind, name, api, _) in policy_objects(client)? {
        match api.delete(&name, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e).with_context(|| format!("deleting {kind} {name}")),
        }
    }
    wait_in_effect(client, false).await?;
    Ok(true)
}

/// One object of [`ADMISSION_POLICIES_YAML`]: kind, name, the API to write it through, and the document.
type PolicyObject = (String, String, Api<DynamicObject>, Value);

/// The objects of [`ADMISSION_POLICIES_YAML`], in the file's order.
fn policy_objects(client: &Client) -> anyhow::Result<Vec<PolicyObject>> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(ADMISSION_POLICIES_YAML)
        .context("parsing charts/phalanx/files/admission-policies.yaml")?;
    let mut out = Vec::new();
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        let kind = doc["kind"]
            .as_str()
            .context("an admission policy object has no kind")?
            .to_owned();
        let name = doc["metadata"]["name"]
            .as_str()
            .with_context(|| format!("a {kind} has no metadata.name"))?
            .to_owned();
        let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", &kind);
        let plural = match kind.as_str() {
            "MutatingAdmissionPolicy" => "mutatingadmissionpolicies",
            "MutatingAdmissionPolicyBinding" => "mutatingadmissionpolicybindings",
            other => anyhow::bail!("admission-policies.yaml: unexpected kind {other}"),
        };
        let api: Api<DynamicObject> =
            Api::all_with(client.clone(), &ApiResource::from_gvk_with_plural(&gvk, plural));
        out.push((kind, name, api, doc));
    }
    Ok(out)
}

/// Whether discovery lists MutatingAdmissionPolicy in `admissionregistration.k8s.io/v1`.
async fn serves_mutating_admission_policy(client: &Client) -> anyhow::Result<bool> {
    match client.list_api_group_resources(ADMISSION_V1).await {
        Ok(list) => Ok(list
            .resources
            .iter()
            .any(|r| r.kind == "MutatingAdmissionPolicy" && !r.name.contains('/'))),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        Err(e) => Err(e).context(format!("discovery of {ADMISSION_V1}")),
    }
}

/// Polls with dry-run creations of a PodGroup in `default` (nothing is stored, nothing to delete) until one comes
/// back with the finalizer and a priority (`present`), or without the finalizer (`!present`).
async fn wait_in_effect(client: &Client, present: bool) -> anyhow::Result<()> {
    let gvk = GroupVersionKind::gvk("scheduling.phalanx.dev", "v1beta1", "PodGroup");
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(&gvk, "podgroups"),
    );
    let probe: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "PodGroup",
        "metadata": { "generateName": "phalanx-testenv-policy-probe-" },
        "spec": { "schedulingPolicy": { "basic": {} } },
    }))?;
    let pp = PostParams {
        dry_run: true,
        field_manager: Some(FIELD_MANAGER.into()),
    };
    let what = if present {
        "the MutatingAdmissionPolicies to add the finalizer and spec.priority to a new PodGroup (server dry run)"
    } else {
        "the removed MutatingAdmissionPolicies to stop adding the finalizer to a new PodGroup (server dry run)"
    };
    wait_for(what, IN_EFFECT_TIMEOUT, || async {
        let got = api
            .create(&pp, &probe)
            .await
            .context("dry-run creation of a PodGroup")?;
        let finalized = got
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == POD_GROUP_FINALIZER);
        let prioritized = got.data["spec"]["priority"].is_i64();
        if !present {
            if finalized {
                anyhow::bail!("not yet: finalizers {:?}", got.metadata.finalizers);
            }
            return Ok(Some(()));
        }
        if !(finalized && prioritized) {
            anyhow::bail!(
                "not yet: finalizers {:?}, spec.priority {}",
                got.metadata.finalizers,
                got.data["spec"]["priority"]
            );
        }
        Ok(Some(()))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file holds two policies, each with its binding, under the names the chart prefixes.
    #[test]
    fn the_file_holds_two_policies_and_their_bindings() {
        let docs: Vec<Value> = serde_saphyr::from_multiple(ADMISSION_POLICIES_YAML).unwrap();
        let docs: Vec<&Value> = docs.iter().filter(|d| !d.is_null()).collect();
        let names = |kind: &str| -> Vec<&str> {
            docs.iter()
                .filter(|d| d["kind"] == kind)
                .filter_map(|d| d["metadata"]["name"].as_str())
                .collect()
        };
        let policies = names("MutatingAdmissionPolicy");
        assert_eq!(policies, ["phalanx-group-defaults", "phalanx-group-priority"]);
        let bound: Vec<&str> = docs
            .iter()
            .filter(|d| d["kind"] == "MutatingAdmissionPolicyBinding")
            .filter_map(|d| d["spec"]["policyName"].as_str())
            .collect();
        assert_eq!(bound, policies);
        assert!(
            docs.iter()
                .all(|d| d["apiVersion"] == ADMISSION_V1 && d["metadata"]["name"] != Value::Null)
        );
        assert!(ADMISSION_POLICIES_YAML.contains(POD_GROUP_FINALIZER));
    }
}
