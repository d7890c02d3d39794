//! Workload controller: validates the template tree beyond CEL (and the priority fields written in templates
//! against their PriorityClass, [`crate::checks::template_priorities`]) and publishes the verdict and per-template
//! usage counts in status.
//!
//! Pipeline (docs/controllers.md): validate ([`template_tree::validate`], pure) -> build the desired status
//! (pure) -> apply (server-side apply of `status.conditions[type=Valid]` and `status.templates`, field manager
//! `phalanx-controller`) -> events on changes of the verdict.
//!
//! Upstream `ValidateWorkloadSpec` rejects an invalid Workload at admission; a CRD cannot run that code, so
//! Phalanx reports it as `Valid=False` instead and the scheduler treats groups of an invalid Workload as it
//! treats any invalid hierarchy.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use phalanx_api::v1beta1::{Workload, WorkloadSpec};
use serde_json::{Value, json};

use crate::context::Ctx;
use crate::error::{Error, Result};
use crate::status::{self, Problem, VALID, WriteDecision};
use crate::template_tree::{self, template_nodes};

/// Controller name in metrics and logs.
pub const CONTROLLER: &str = "workload";

/// Pure: the verdict of a Workload spec (`None` = valid).
pub fn verdict(spec: &WorkloadSpec) -> Option<Problem> {
    let problems = template_tree::validate(&template_nodes(spec));
    let first = problems.first()?;
    let message = problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    Some(Problem {
        reason: first.reason().to_string(),
        message,
    })
}

/// Pure: the owned status subset: the `Valid` condition, `templates` (number of templates in the tree, the
/// `Templates` printer column) and `templateGroups`, one `{name, groups}` entry per template (tree order),
/// `groups` counting the PodGroups and CompositePodGroups whose workloadRef names the template.
pub fn desired_status(
    spec: &WorkloadSpec,
    generation: Option<i64>,
    existing: Option<&Condition>,
    problem: Option<&Problem>,
    counts: &BTreeMap<String, i32>,
) -> Value {
    let cond = status::valid_condition(
        existing,
        problem.map(|p| (p.reason.as_str(), p.message.as_str())),
        generation,
    );
    let mut seen = std::collections::BTreeSet::new();
    let templates: Vec<Value> = template_tree::names(&template_nodes(spec))
        .into_iter()
        .filter(|n| seen.insert(n.clone()))
        .map(|n| {
            let groups = counts.get(&n).copied().unwrap_or(0);
            json!({ "name": n, "groups": groups })
        })
        .collect();
    json!({ "conditions": [cond], "templates": spec.template_count(), "templateGroups": templates })
}

/// Reconciles one Workload.
pub async fn reconcile(wl: Arc<Workload>, ctx: Ctx) -> Result<Action> {
    ctx.count_reconcile(CONTROLLER);
    let uid = wl.uid().ok_or(Error::MissingField("metadata.uid"))?;
    let ns = wl.namespace().ok_or(Error::MissingField("metadata.namespace"))?;
    let name = wl.name_any();
    if !ctx.is_leader() {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }

    let mut problems: Vec<Problem> = verdict(&wl.spec).into_iter().collect();
    problems.extend(crate::checks::template_priorities(&ctx.store, &wl.spec));
    let problem = crate::checks::combine(&problems);
    let mut counts: BTreeMap<String, i32> = BTreeMap::new();
    for g in ctx.store.pod_groups().state() {
        if g.namespace().as_deref() == Some(ns.as_str())
            && let Some(r) = g.spec.workload_ref.as_ref().filter(|r| r.workload_name == name)
        {
            *counts.entry(r.template_name.clone()).or_insert(0) += 1;
        }
    }
    for g in ctx.store.composite_pod_groups().state() {
        if g.namespace().as_deref() == Some(ns.as_str()) && g.spec.workload_ref.workload_name == name {
            *counts
                .entry(g.spec.workload_ref.template_name.clone())
                .or_insert(0) += 1;
        }
    }

    let current = status::status_of(wl.as_ref());
    let existing = status::existing_condition(&ctx, &uid, &current, VALID);
    let desired = desired_status(
        &wl.spec,
        wl.metadata.generation,
        existing.as_ref(),
        problem.as_ref(),
        &counts,
    );
    let decision = status::decide(&ctx, &uid, &desired, &current);
    if decision == WriteDecision::Write {
        status::apply_status(&ctx, CONTROLLER, wl.as_ref(), &desired).await?;
    }
    // The verdict's event goes out with the status write it announces (see `report_validity`).
    if !matches!(decision, WriteDecision::Later(_)) {
        report_validity(
            &ctx,
            CONTROLLER,
            &uid,
            &wl.object_ref(&()),
            "Workload",
            &current,
            problem.as_ref(),
        )
        .await;
    }
    ctx.note_success(&uid);
    Ok(status::after(&decision, ctx.opts.resync))
}

/// Publishes an event when the verdict of an object changes (once per change, also across restarts: the
/// current condition seeds the memory). No event for an object that is valid from the start.
///
/// Callers publish it with the status write it announces, never while that write is throttled
/// ([`WriteDecision::Later`]): the event Recorder folds repeats of one reason into a series that keeps the first
/// note, so a verdict whose message grows within the batching interval (pods named one by one as they are created)
/// is announced once, with the message the condition shows.
pub async fn report_validity(
    ctx: &crate::context::Context,
    controller: &str,
    uid: &str,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    kind: &str,
    current_status: &Value,
    problem: Option<&Problem>,
) {
    let previous = status::find_condition(current_status, VALID).map(|c| {
        if c.status == "True" {
            "True".to_string()
        } else {
            format!("False/{}/{}", c.reason, c.message)
        }
    });
    let state = match problem {
        None => "True".to_string(),
        Some(p) => format!("False/{}/{}", p.reason, p.message),
    };
    let Some(before) = ctx.transition(uid, "valid", &state, previous.as_deref()) else {
        return;
    };
    match problem {
        Some(p) => {
            let note = format!("{kind} is invalid: {}", p.message);
            ctx.publish(
                controller,
                reference,
                EventType::Warning,
                &p.reason,
                "Validate",
                note,
            )
            .await;
        }
        None if before.is_some_and(|b| b.starts_with("False")) => {
            let note = format!("{kind} is valid");
            ctx.publish(
                controller,
                reference,
                EventType::Normal,
                "Valid",
                "Validate",
                note,
            )
            .await;
        }
        None => {}
    }
}

/// Error policy: exponential backoff per object (no hot loop), logged by the caller.
pub fn error_policy(wl: Arc<Workload>, err: &Error, ctx: Ctx) -> Action {
    crate::error_action(CONTROLLER, wl.uid().as_deref(), err, &ctx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use phalanx_api::v1beta1::{
        CompositePodGroupSchedulingPolicy, CompositePodGroupTemplate, DisruptionMode,
        PodGroupSchedulingPolicy, PodGroupTemplate,
    };

    fn pgt(name: &str) -> PodGroupTemplate {
        PodGroupTemplate {
            name: name.into(),
            scheduling_policy: PodGroupSchedulingPolicy::gang(2),
            ..Default::default()
        }
    }

    fn cpgt(
        name: &str,
        pgs: Vec<PodGroupTemplate>,
        cpgs: Vec<CompositePodGroupTemplate>,
    ) -> CompositePodGroupTemplate {
        CompositePodGroupTemplate {
            name: name.into(),
            scheduling_policy: CompositePodGroupSchedulingPolicy::gang(1),
            pod_group_templates: Some(pgs).filter(|v| !v.is_empty()),
            composite_pod_group_templates: Some(cpgs).filter(|v| !v.is_empty()),
            ..Default::default()
        }
    }

    #[test]
    fn valid_tree_and_counts() {
        let spec = WorkloadSpec {
            composite_pod_group_templates: Some(vec![cpgt("root", vec![pgt("a"), pgt("b")], vec![])]),
            ..Default::default()
        };
        assert!(verdict(&spec).is_none());
        let counts: BTreeMap<String, i32> = [("a".to_string(), 3)].into();
        let st = desired_status(&spec, Some(1), None, None, &counts);
        assert_eq!(st["conditions"][0]["status"], "True");
        assert_eq!(st["templates"], 3);
        assert_eq!(
            st["templateGroups"],
            json!([{"name": "root", "groups": 0}, {"name": "a", "groups": 3}, {"name": "b", "groups": 0}])
        );
    }

    #[test]
    fn all_parent_with_single_child_is_invalid() {
        let mut root = cpgt("root", vec![pgt("a")], vec![]);
        root.disruption_mode = Some(phalanx_api::v1beta1::CompositeDisruptionMode::all());
        let spec = WorkloadSpec {
            composite_pod_group_templates: Some(vec![root]),
            ..Default::default()
        };
        let p = verdict(&spec).unwrap();
        assert_eq!(p.reason, "DisruptionModeMismatch");
        let mut ok_child = pgt("a");
        ok_child.disruption_mode = Some(DisruptionMode::all());
        let mut root = cpgt("root", vec![ok_child], vec![]);
        root.disruption_mode = Some(phalanx_api::v1beta1::CompositeDisruptionMode::all());
        assert!(
            verdict(&WorkloadSpec {
                composite_pod_group_templates: Some(vec![root]),
                ..Default::default()
            })
            .is_none()
        );
    }

    #[test]
    fn duplicate_and_depth_and_priority() {
        let deep = cpgt(
            "c1",
            vec![],
            vec![cpgt(
                "c2",
                vec![],
                vec![cpgt("c3", vec![], vec![cpgt("c4", vec![pgt("x")], vec![])])],
            )],
        );
        let p = verdict(&WorkloadSpec {
            composite_pod_group_templates: Some(vec![deep]),
            ..Default::default()
        })
        .unwrap();
        assert!(
            p.message.contains("maximum template hierarchy depth is 4"),
            "{}",
            p.message
        );

        let dup = cpgt("r", vec![pgt("x")], vec![cpgt("s", vec![pgt("x")], vec![])]);
        let p = verdict(&WorkloadSpec {
            composite_pod_group_templates: Some(vec![dup]),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(p.reason, "DuplicateTemplateName");

        let mut hi = pgt("hi");
        hi.priority_class_name = Some("high".into());
        let p = verdict(&WorkloadSpec {
            pod_group_templates: Some(vec![hi, pgt("lo")]),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(p.reason, "MultiplePriorities");
    }
}
