//! The pure part of the owner integration: what an owner asks for, and the Workload and PodGroup built for it.
//!
//! Follows upstream's Job controller compilation of KEP-5547 (`pkg/controller/job`, `WorkloadWithJob`): one
//! Workload with one PodGroupTemplate and one PodGroup per owner, both controlled by the owner (so the garbage
//! collector deletes them with it), `gang.minCount` defaulting to `parallelism` and following it (minCount is
//! mutable since 1.37, KEP-4671). Phalanx reads the intent from owner annotations ([`phalanx_api::owners`]).

use phalanx_api::owners::{self, GangAnnotationError, GangRequest};
use serde_json::{Value, json};

/// Name of the one PodGroupTemplate in a Workload built for an owner.
pub const TEMPLATE_NAME: &str = "pods";

/// The parts of an owner (any kind, read as JSON) that the integration needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerFacts {
    /// `apiVersion`, e.g. `batch/v1`.
    pub api_version: String,
    /// `kind`, e.g. `Job`.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `spec.replicas`, or for a Job the pods it still runs at once: `min(parallelism, completions -
    /// status.succeeded)`, at least 1 (a Job with `completions` below `parallelism` never creates `parallelism`
    /// pods); `None` when the kind has neither.
    pub replicas: Option<i64>,
    /// `spec.suspend` is true (a suspended Job creates no pods; its group is created when it is resumed).
    pub suspended: bool,
    /// `metadata.generation` (recorded on the PodGroup as [`owners::OWNER_GENERATION`]).
    pub generation: Option<i64>,
}

impl OwnerFacts {
    /// Reads the facts from an owner as JSON (a `DynamicObject`).
    pub fn from_json(v: &Value) -> OwnerFacts {
        let s = |p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let kind = s("/kind");
        let replicas = if kind == "Job" {
            let parallelism = v
                .pointer("/spec/parallelism")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let remaining = v.pointer("/spec/completions").and_then(Value::as_i64).map(|c| {
                let done = v
                    .pointer("/status/succeeded")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                c.saturating_sub(done).max(1)
            });
            // parallelism 0 (a paused Job) stays 0 and is refused as today.
            Some(remaining.map_or(parallelism, |r| parallelism.min(r)))
        } else {
            v.pointer("/spec/replicas")
                .or_else(|| v.pointer("/spec/parallelism"))
                .and_then(Value::as_i64)
        };
        OwnerFacts {
            api_version: s("/apiVersion"),
            kind,
            namespace: s("/metadata/namespace"),
            name: s("/metadata/name"),
            uid: s("/metadata/uid"),
            replicas,
            suspended: v.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true),
            generation: v.pointer("/metadata/generation").and_then(Value::as_i64),
        }
    }
}

/// Why no group is built for an owner that asks for one; the message is the Warning event's note.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IntentError {
    /// A gang annotation has a bad value.
    #[error(transparent)]
    Annotation(#[from] GangAnnotationError),
    /// `gang: "true"` on a kind without `spec.replicas` / `spec.parallelism`.
    #[error(
        "annotation {gang}=\"true\" needs spec.replicas or spec.parallelism, which {kind} has not: set {min}=\"N\"",
        gang = owners::GANG,
        min = owners::GANG_MIN_COUNT
    )]
    NoReplicas {
        /// The owner's kind.
        kind: String,
    },
    /// `gang: "true"` and replicas outside `1..=2147483647`.
    #[error("annotation {gang}=\"true\" takes minCount from replicas/parallelism, which is {value}: want 1 to 2147483647", gang = owners::GANG)]
    BadReplicas {
        /// The value.
        value: i64,
    },
}

/// The gang quorum the owner asks for: `Ok(None)` when it asks for none, the `minCount` (>= 1) otherwise.
pub fn min_count(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
    facts: &OwnerFacts,
) -> Result<Option<i32>, IntentError> {
    match owners::gang_request(annotations)? {
        None => Ok(None),
        Some(GangRequest::MinCount(n)) => Ok(Some(n)),
        Some(GangRequest::FollowReplicas) => {
            let r = facts.replicas.ok_or_else(|| IntentError::NoReplicas {
                kind: facts.kind.clone(),
            })?;
            i32::try_from(r)
                .ok()
                .filter(|n| *n >= 1)
                .map(Some)
                .ok_or(IntentError::BadReplicas { value: r })
        }
    }
}

fn owner_reference(f: &OwnerFacts) -> Value {
    json!({
        "apiVersion": f.api_version,
        "kind": f.kind,
        "name": f.name,
        "uid": f.uid,
        "controller": true,
    })
}

fn api_group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// The Workload (server-side-apply body) for an owner: named [`owners::owner_group_name`], controlled by the
/// owner, labelled with its uid, one gang template of `min_count`.
pub fn workload(f: &OwnerFacts, min_count: i32) -> Value {
    json!({
        "apiVersion": format!("{}/v1beta1", phalanx_api::GROUP),
        "kind": "Workload",
        "metadata": {
            "name": owners::owner_group_name(&f.kind, &f.name),
            "namespace": f.namespace,
            "labels": { owners::OWNER_UID_LABEL: f.uid },
            "ownerReferences": [owner_reference(f)],
        },
        "spec": {
            "controllerRef": { "apiGroup": api_group(&f.api_version), "kind": f.kind, "name": f.name },
            "podGroupTemplates": [{
                "name": TEMPLATE_NAME,
                "schedulingPolicy": { "gang": { "minCount": min_count } },
            }],
        },
    })
}

/// The PodGroup (server-side-apply body) for an owner: same name as its Workload, referring to its template, with
/// the owner's generation it was sized at ([`owners::OWNER_GENERATION`]).
pub fn pod_group(f: &OwnerFacts, min_count: i32) -> Value {
    let name = owners::owner_group_name(&f.kind, &f.name);
    let mut v = json!({
        "apiVersion": format!("{}/v1beta1", phalanx_api::GROUP),
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": f.namespace,
            "labels": { owners::OWNER_UID_LABEL: f.uid },
            "ownerReferences": [owner_reference(f)],
        },
        "spec": {
            "workloadRef": { "workloadName": name, "templateName": TEMPLATE_NAME },
            "schedulingPolicy": { "gang": { "minCount": min_count } },
        },
    });
    if let Some(g) = f.generation {
        v["metadata"]["annotations"] = json!({ owners::OWNER_GENERATION: g.to_string() });
    }
    v
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn job(parallelism: Option<i64>, suspend: bool) -> OwnerFacts {
        let mut v = json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": { "name": "train", "namespace": "ns", "uid": "u1" },
            "spec": { "suspend": suspend },
        });
        if let Some(p) = parallelism {
            v["spec"]["parallelism"] = json!(p);
        }
        OwnerFacts::from_json(&v)
    }

    fn ann(k: &str, v: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(k.to_string(), v.to_string())])
    }

    #[test]
    fn min_count_follows_parallelism_or_the_annotation() {
        let f = job(Some(8), false);
        assert_eq!(min_count(Some(&ann(owners::GANG, "true")), &f), Ok(Some(8)));
        assert_eq!(
            min_count(Some(&ann(owners::GANG_MIN_COUNT, "3")), &f),
            Ok(Some(3))
        );
        assert_eq!(min_count(None, &f), Ok(None));
        assert!(job(None, true).suspended);
        assert_eq!(job(None, false).replicas, Some(1), "parallelism defaults to 1");
    }

    #[test]
    fn a_job_needs_no_more_pods_than_its_remaining_completions() {
        let facts = |p: i64, c: i64, done: i64| {
            OwnerFacts::from_json(&json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": { "name": "train", "namespace": "ns", "uid": "u1" },
                "spec": { "parallelism": p, "completions": c },
                "status": { "succeeded": done },
            }))
            .replicas
        };
        assert_eq!(facts(5, 3, 0), Some(3), "completions below parallelism");
        assert_eq!(facts(3, 4, 0), Some(3));
        assert_eq!(facts(3, 4, 2), Some(2), "two done, two to go");
        assert_eq!(facts(3, 4, 4), Some(1), "complete: never 0");
    }

    #[test]
    fn bad_intent_is_an_error_naming_the_annotation() {
        let custom = OwnerFacts::from_json(&json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": { "name": "js", "namespace": "ns", "uid": "u" }, "spec": {},
        }));
        let e = min_count(Some(&ann(owners::GANG, "true")), &custom).unwrap_err();
        assert!(e.to_string().contains(owners::GANG_MIN_COUNT), "{e}");
        let e = min_count(Some(&ann(owners::GANG_MIN_COUNT, "abc")), &custom).unwrap_err();
        assert!(e.to_string().contains(owners::GANG_MIN_COUNT), "{e}");
        let e = min_count(Some(&ann(owners::GANG, "true")), &job(Some(0), false)).unwrap_err();
        assert!(e.to_string().contains(owners::GANG), "{e}");
    }

    #[test]
    fn objects_are_owned_and_linked() {
        let f = job(Some(4), false);
        let w = workload(&f, 4);
        let pg = pod_group(&f, 4);
        assert_eq!(w["metadata"]["name"], "train-job");
        assert_eq!(pg["spec"]["workloadRef"]["workloadName"], "train-job");
        assert_eq!(pg["spec"]["schedulingPolicy"]["gang"]["minCount"], 4);
        assert_eq!(pg["metadata"]["ownerReferences"][0]["uid"], "u1");
        assert_eq!(w["spec"]["controllerRef"]["apiGroup"], "batch");
        assert_eq!(pg["metadata"]["labels"][owners::OWNER_UID_LABEL], "u1");
        // The one definition of the Workload shape must satisfy the CRD's Rust type.
        serde_json::from_value::<phalanx_api::v1beta1::Workload>(w).expect("valid Workload");
        serde_json::from_value::<phalanx_api::v1beta1::PodGroup>(pg).expect("valid PodGroup");
    }
}
