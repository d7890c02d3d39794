//! Writing to the API: status by server-side apply, finalizers and filled-in spec fields by merge patches
//! guarded with `metadata.resourceVersion`, all with field manager [`FIELD_MANAGER`]; plus the pure pieces that
//! decide whether a write is needed (condition building, owned-field comparison).
//!
//! Conditions are `listType=map` keyed by `type`, so applying only our own condition type (`Valid`) leaves the
//! scheduler's `PodGroupInitiallyScheduled` (field manager `phalanx-scheduler`) untouched (server-side apply keeps list-map entries per manager; `k8s.io/apimachinery` `managedFields`).

use std::fmt::Debug;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::context::{Context, FIELD_MANAGER};
use crate::error::{Error, Result};

/// One problem of a group: a CamelCase reason and a user-facing message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Condition/event reason.
    pub reason: String,
    /// Condition/event message.
    pub message: String,
}

impl Problem {
    pub(crate) fn new(reason: &str, message: impl Into<String>) -> Self {
        Self {
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

/// Condition type the controllers own on all three kinds.
pub const VALID: &str = "Valid";
/// Reason of `Valid=True`.
pub const REASON_VALID: &str = "Valid";
/// How long we trust our own last write over a cache that does not show it yet.
pub const CACHE_LAG_GRACE: Duration = Duration::from_secs(5);

/// The `Valid` condition for `generation`: True/`Valid` when `problem` is None, else False with the problem's
/// reason and message. `lastTransitionTime` is kept from `existing` unless the status flips (upstream
/// `meta.SetStatusCondition` semantics).
pub fn valid_condition(
    existing: Option<&Condition>,
    problem: Option<(&str, &str)>,
    generation: Option<i64>,
) -> Condition {
    let (status, reason, message) = match problem {
        None => ("True", REASON_VALID, String::new()),
        Some((reason, message)) => ("False", reason, message.to_string()),
    };
    let last_transition_time = match existing {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Time(Timestamp::now()),
    };
    Condition {
        type_: VALID.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: generation,
        last_transition_time,
    }
}

/// Finds a condition by type in a (possibly absent) status JSON value.
pub fn find_condition(status: &Value, type_: &str) -> Option<Condition> {
    status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
        .and_then(|c| serde_json::from_value(c.clone()).ok())
}

/// The condition `type_` (one we own, e.g. [`VALID`]) to build on: our own last write if it is recent (the
/// cache may not show it yet), else the cached object's. Keeps `lastTransitionTime` stable while the cache
/// lags our writes.
pub fn existing_condition(ctx: &Context, uid: &str, current: &Value, type_: &str) -> Option<Condition> {
    if let Some(w) = ctx.last_written(uid).filter(|w| w.at.elapsed() < CACHE_LAG_GRACE)
        && let Some(c) = find_condition(&w.status, type_)
    {
        return Some(c);
    }
    find_condition(current, type_)
}

/// True when every field of `desired` (our owned subset) already has that value in `current`. Conditions are
/// compared per type, so other managers' conditions are ignored.
pub fn is_applied(desired: &Value, current: &Value) -> bool {
    let Some(fields) = desired.as_object() else {
        return desired == current;
    };
    fields.iter().all(|(k, v)| {
        let cur = current.get(k).unwrap_or(&Value::Null);
        if k == "conditions" {
            let wanted = v.as_array().map(Vec::as_slice).unwrap_or_default();
            wanted.iter().all(|w| {
                let t = w.get("type");
                cur.as_array()
                    .and_then(|cs| cs.iter().find(|c| c.get("type") == t))
                    .is_some_and(|c| conditions_equal(w, c))
            })
        } else {
            cur == v
        }
    })
}

fn conditions_equal(a: &Value, b: &Value) -> bool {
    // Timestamps may be re-serialised with a different precision; compare everything else exactly and the
    // transition time as a parsed instant.
    let keys = ["type", "status", "reason", "message", "observedGeneration"];
    keys.iter().all(|k| a.get(*k) == b.get(*k))
        && parse_time(a.get("lastTransitionTime")) == parse_time(b.get("lastTransitionTime"))
}

fn parse_time(v: Option<&Value>) -> Option<Timestamp> {
    v.and_then(Value::as_str).and_then(|s| s.parse().ok())
}

/// What to do about a desired status.
#[derive(Debug, PartialEq, Eq)]
pub enum WriteDecision {
    /// The object already shows it (or our recent identical write will show up soon).
    Skip,
    /// Write now.
    Write,
    /// Throttled: try again after this delay.
    Later(Duration),
}

/// Decides whether to apply `desired` to the object `uid` whose cached status is `current`.
pub fn decide(ctx: &Context, uid: &str, desired: &Value, current: &Value) -> WriteDecision {
    let recent_identical = || {
        ctx.last_written(uid)
            .is_some_and(|w| w.status == *desired && w.at.elapsed() < CACHE_LAG_GRACE)
    };
    if is_applied(desired, current) || recent_identical() {
        ctx.nothing_wanted(uid);
        return WriteDecision::Skip;
    }
    match ctx.write_delay(uid) {
        d if d.is_zero() => WriteDecision::Write,
        d => WriteDecision::Later(d),
    }
}

fn api_for<K>(ctx: &Context, obj: &K) -> Result<Api<K>>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    let ns = obj
        .meta()
        .namespace
        .as_deref()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    Ok(Api::namespaced(ctx.client.clone(), ns))
}

/// Server-side applies `status` (our owned subset) to the status subresource of `obj`.
pub async fn apply_status<K>(ctx: &Context, controller: &str, obj: &K, status: &Value) -> Result<()>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let api = api_for(ctx, obj)?;
    let uid = obj
        .meta()
        .uid
        .as_deref()
        .ok_or(Error::MissingField("metadata.uid"))?;
    let body = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(
        &obj.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    ctx.record_written(uid, status.clone());
    ctx.count_status_write(controller);
    Ok(())
}

/// Merge-patches `patch` into `obj`, guarded by the cached `resourceVersion` (409 Conflict if the object
/// changed meanwhile; the reconcile is then retried with fresh data).
pub async fn merge_patch<K>(ctx: &Context, obj: &K, mut patch: Value) -> Result<()>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug,
{
    if !ctx.is_leader() {
        return Ok(());
    }
    let api = api_for(ctx, obj)?;
    let rv = obj
        .meta()
        .resource_version
        .clone()
        .ok_or(Error::MissingField("metadata.resourceVersion"))?;
    if let Some(map) = patch.as_object_mut() {
        let meta = map.entry("metadata").or_insert_with(|| json!({}));
        if let Some(m) = meta.as_object_mut() {
            m.insert("resourceVersion".into(), Value::String(rv));
        }
    }
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    api.patch(&obj.name_any(), &params, &Patch::Merge(&patch)).await?;
    Ok(())
}

/// Adds `finalizer` to `obj` if missing. Returns true if a patch was sent.
pub async fn ensure_finalizer<K>(ctx: &Context, obj: &K, finalizer: &str) -> Result<bool>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug,
{
    if obj.finalizers().iter().any(|f| f == finalizer) {
        return Ok(false);
    }
    let mut list = obj.finalizers().to_vec();
    list.push(finalizer.to_string());
    merge_patch(ctx, obj, json!({ "metadata": { "finalizers": list } })).await?;
    Ok(true)
}

/// Removes `finalizer` from `obj` if present. Returns true if a patch was sent.
pub async fn remove_finalizer<K>(ctx: &Context, obj: &K, finalizer: &str) -> Result<bool>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug,
{
    if !obj.finalizers().iter().any(|f| f == finalizer) {
        return Ok(false);
    }
    let list: Vec<&String> = obj.finalizers().iter().filter(|f| *f != finalizer).collect();
    match merge_patch(ctx, obj, json!({ "metadata": { "finalizers": list } })).await {
        Ok(()) => Ok(true),
        // Already gone: the object was removed as soon as the last finalizer went.
        Err(Error::Kube(kube::Error::Api(s))) if s.is_not_found() => Ok(true),
        Err(e) => Err(e),
    }
}

/// The `status` of any object as JSON (`Null` when absent), independent of the Rust status type.
pub fn status_of<K: Serialize>(obj: &K) -> Value {
    serde_json::to_value(obj)
        .ok()
        .and_then(|v| v.get("status").cloned())
        .unwrap_or(Value::Null)
}

/// Serializes an optional status to JSON (`Null` when absent).
pub fn status_json<S: Serialize>(status: Option<&S>) -> Value {
    status
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(Value::Null)
}

/// The action after a reconcile that wrote nothing or wants to re-check later: throttled writes come back
/// after their delay, everything else waits for a watch event, with a slow safety resync.
pub fn after(decision: &WriteDecision, resync: Duration) -> Action {
    match decision {
        WriteDecision::Later(d) => Action::requeue(*d),
        WriteDecision::Skip | WriteDecision::Write => Action::requeue(resync),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn condition_keeps_transition_time_unless_status_flips() {
        let old = valid_condition(None, Some(("HierarchyCycle", "cycle")), Some(1));
        let same = valid_condition(Some(&old), Some(("ParentNotFound", "missing")), Some(2));
        assert_eq!(same.last_transition_time, old.last_transition_time);
        assert_eq!(
            (same.status.as_str(), same.reason.as_str()),
            ("False", "ParentNotFound")
        );
        std::thread::sleep(Duration::from_millis(2));
        let flipped = valid_condition(Some(&old), None, Some(2));
        assert_ne!(flipped.last_transition_time, old.last_transition_time);
        assert_eq!(
            (
                flipped.status.as_str(),
                flipped.reason.as_str(),
                flipped.message.as_str()
            ),
            ("True", "Valid", "")
        );
    }

    #[test]
    fn applied_ignores_other_conditions_and_fields() {
        let ours = valid_condition(None, None, Some(3));
        let desired = json!({ "conditions": [ours], "pods": 3 });
        let current = json!({
            "conditions": [
                {"type": "PodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                serde_json::to_value(&ours).unwrap()
            ],
            "pods": 3,
            "resourceClaimStatuses": []
        });
        assert!(is_applied(&desired, &current));
        let stale = json!({ "conditions": [serde_json::to_value(&ours).unwrap()], "pods": 2 });
        assert!(!is_applied(&desired, &stale));
        assert!(!is_applied(&desired, &Value::Null));
        let cond = find_condition(&current, VALID).unwrap();
        assert_eq!(cond.status, "True");
        assert!(find_condition(&current, "Nope").is_none());
    }
}
