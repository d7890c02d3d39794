//! Applying a per-kind [`Plan`](super::kinds::Plan) (issue 38): the Workload, CompositePodGroups and PodGroups
//! [`super::kinds::objects::desired`] builds, by server-side apply (field manager
//! [`phalanx_api::field_managers::INTEGRATION`]), then the deletion of the groups made earlier for the owner that
//! the plan no longer has (a replica group scaled away, a replicated job removed, the one-gang group of the default
//! rule). Events on the owner: a Warning `UnsupportedOwnerSpec` for a spec that cannot be planned or a setting that
//! cannot work with a gang (each note once per state), a Normal `GangGroupApplied` when the set of groups changes.
//!
//! Upstream counterpart: none in kube-scheduler (KEP-5547 leaves Workload creation to each workload controller);
//! the per-kind grouping follows KAI-Scheduler's pod-grouper and Kueue's PodSets, see docs/integrations.md.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::EventType;
use phalanx_api::conditions::reasons;
use phalanx_api::field_managers::INTEGRATION;
use phalanx_api::owner_policy::owner_policy;
use phalanx_api::v1alpha3::CompositePodGroup;
use phalanx_api::v1beta1::{PodGroup, Workload};
use phalanx_store::owners::OwnerRef;

use super::build::OwnerFacts;
use super::events::CONTROLLER;
use super::kinds::{KindError, Plan, objects};
use crate::context::Ctx;

/// Per owner uid: a hash of the objects last applied, so that the reconciles its pods' events trigger send nothing
/// while nothing changed and every object is still there.
pub(super) type Memo = std::sync::Mutex<std::collections::HashMap<String, u64>>;

fn fingerprint(d: &objects::Desired) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    d.workload.to_string().hash(&mut h);
    for (n, b) in d.composites.iter().chain(&d.groups) {
        n.hash(&mut h);
        b.to_string().hash(&mut h);
    }
    h.finish()
}

/// Applies `plan` (or reports `Err`) for the owner `o` read as `facts` with `annotations`; `reference` addresses its
/// events. A bad policy annotation ([`phalanx_api::owner_policy`]) is reported like a bad plan: nothing is applied
/// and the pods wait.
pub(super) async fn apply(
    ctx: &Ctx,
    memo: &Memo,
    o: &OwnerRef,
    (facts, annotations): (&OwnerFacts, Option<&BTreeMap<String, String>>),
    reference: &ObjectReference,
    plan: Result<Plan, KindError>,
) -> Result<(), kube::Error> {
    let planned = plan.map_err(|e| e.to_string()).and_then(|p| {
        owner_policy(annotations)
            .map(|policy| (p, policy))
            .map_err(|e| e.to_string())
    });
    let (plan, policy) = match planned {
        Ok(p) => p,
        Err(e) => {
            warn(ctx, o, reference, e).await;
            return Ok(());
        }
    };
    let mut notes = plan.warnings.clone();
    let pods = ctx.store.pods_of_owner(&o.uid);
    let labels: Vec<&BTreeMap<String, String>> = pods
        .iter()
        .filter(|p| !p.is_terminal() && p.deletion_timestamp.is_none())
        .map(|p| p.labels())
        .collect();
    let mut want = objects::desired(facts, &plan, &policy, &labels);
    // Topology and disruption mode are immutable once a group exists: an existing group keeps its own (a changed
    // annotation applies to the groups created after it, and says so).
    let mut kept = Vec::new();
    for (name, body) in &mut want.composites {
        if let Some(c) = ctx.store.composite_pod_group(&o.namespace, name) {
            keep_immutable(
                body,
                &serde_json::to_value(&c.spec).unwrap_or_default(),
                name,
                &mut kept,
            );
        }
    }
    for (name, body) in &mut want.groups {
        if let Some(g) = ctx.store.pod_group(&o.namespace, name) {
            keep_immutable(
                body,
                &serde_json::to_value(&g.spec).unwrap_or_default(),
                name,
                &mut kept,
            );
        }
    }
    if !kept.is_empty() {
        notes.push(format!(
            "the topology or disruption annotations changed after {} existed; they keep theirs (immutable), new \
             groups take the annotations",
            kept.join(", ")
        ));
    }
    warn(ctx, o, reference, notes.join("; ")).await;
    let pp = PatchParams::apply(INTEGRATION).force();
    let ns = &o.namespace;
    let workloads: Api<Workload> = Api::namespaced(ctx.client.clone(), ns);
    let composites: Api<CompositePodGroup> = Api::namespaced(ctx.client.clone(), ns);
    let groups: Api<PodGroup> = Api::namespaced(ctx.client.clone(), ns);
    let print = fingerprint(&want);
    let unchanged = memo
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&o.uid)
        == Some(&print)
        && want
            .groups
            .iter()
            .all(|(n, _)| ctx.store.pod_group(ns, n).is_some())
        && want
            .composites
            .iter()
            .all(|(n, _)| ctx.store.composite_pod_group(ns, n).is_some());
    // Nothing to write while the plan and its objects are as last applied: the reconciles its pods' events trigger
    // cost no request and no scan of the groups.
    if unchanged {
        return Ok(());
    }
    if !want.groups.is_empty() {
        let name = phalanx_api::owners::owner_group_name(&o.kind, &o.name);
        workloads.patch(&name, &pp, &Patch::Apply(&want.workload)).await?;
    }
    for (name, body) in &want.composites {
        composites.patch(name, &pp, &Patch::Apply(body)).await?;
    }
    for (name, body) in &want.groups {
        groups.patch(name, &pp, &Patch::Apply(body)).await?;
    }
    // Groups made for this owner earlier that the plan no longer has.
    let keep: HashSet<&str> = want.groups.iter().map(|(n, _)| n.as_str()).collect();
    let keep_composites: HashSet<&str> = want.composites.iter().map(|(n, _)| n.as_str()).collect();
    let mut deleted = Vec::new();
    for g in ctx.store.pod_groups().state() {
        if made_for(&g.metadata, o) && !keep.contains(g.metadata.name.as_deref().unwrap_or_default()) {
            delete(&groups, &g.metadata, &mut deleted).await?;
        }
    }
    for c in ctx.store.composite_pod_groups().state() {
        if made_for(&c.metadata, o)
            && !keep_composites.contains(c.metadata.name.as_deref().unwrap_or_default())
        {
            delete(&composites, &c.metadata, &mut deleted).await?;
        }
    }
    // Recorded once everything went through: a failure above is retried in full.
    memo.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(o.uid.clone(), print);
    let mut state = want.summary.join("; ");
    if !deleted.is_empty() {
        state.push_str(&format!(" (deleted {})", deleted.join(", ")));
    }
    if want.groups.is_empty() {
        return Ok(());
    }
    if ctx
        .transition(&o.uid, "gang-intent", &want.summary.join("; "), None)
        .is_some()
    {
        ctx.publish(
            CONTROLLER,
            reference,
            EventType::Normal,
            reasons::GANG_GROUP_APPLIED,
            "Apply",
            format!("{} {}: {state}", o.kind, o.name),
        )
        .await;
    }
    Ok(())
}

/// Puts the existing object's `schedulingConstraints` and `disruptionMode` (`current`, its spec) into `body`; names
/// the object in `kept` when that differs from what `body` asked for.
fn keep_immutable(
    body: &mut serde_json::Value,
    current: &serde_json::Value,
    name: &str,
    kept: &mut Vec<String>,
) {
    let mut differs = false;
    for field in ["schedulingConstraints", "disruptionMode"] {
        let now = current.get(field).filter(|v| !v.is_null()).cloned();
        let asked = body["spec"].get(field).cloned();
        // The API server defaults disruptionMode to single: an absent request matches that default.
        let same = match (&asked, &now) {
            (None, Some(v)) if field == "disruptionMode" => *v == serde_json::json!({ "single": {} }),
            _ => asked == now,
        };
        differs |= !same;
        match now {
            Some(v) => body["spec"][field] = v,
            None => {
                if let Some(spec) = body["spec"].as_object_mut() {
                    spec.remove(field);
                }
            }
        }
    }
    if differs {
        kept.push(name.to_owned());
    }
}

/// A Warning event with `note` on the owner, once per distinct note (an empty note only resets it).
async fn warn(ctx: &Ctx, o: &OwnerRef, reference: &ObjectReference, note: String) {
    if ctx.transition(&o.uid, "kind-plan", &note, None).is_some() && !note.is_empty() {
        tracing::info!(owner = %o.name, kind = %o.kind, note = %note, "owner spec not planned as asked");
        ctx.publish(
            CONTROLLER,
            reference,
            EventType::Warning,
            reasons::UNSUPPORTED_OWNER_SPEC,
            "Plan",
            note,
        )
        .await;
    }
}

/// Whether an object is one the integration made for `o`: labelled with its uid and controlled by it.
fn made_for(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, o: &OwnerRef) -> bool {
    m.labels
        .as_ref()
        .and_then(|l| l.get(phalanx_api::owners::OWNER_UID_LABEL))
        == Some(&o.uid)
        && phalanx_store::owners::controller_of(m).is_some_and(|c| c.uid == o.uid)
}

/// Deletes the object `m` names (uid precondition: a same-named replacement is kept); gone already is fine.
async fn delete<K>(
    api: &Api<K>,
    m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    deleted: &mut Vec<String>,
) -> Result<(), kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = m.name.clone().unwrap_or_default();
    let dp = DeleteParams::default().preconditions(Preconditions {
        uid: m.uid.clone(),
        resource_version: None,
    });
    match api.delete(&name, &dp).await {
        Ok(_) => deleted.push(name),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        Err(e) => return Err(e),
    }
    Ok(())
}
