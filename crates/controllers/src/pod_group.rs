//! PodGroup controller: protection finalizer, PriorityClass resolution, workloadRef and hierarchy checks,
//! and the member-pod counters in status.
//!
//! Pipeline: meta (finalizer + priority, one guarded merge patch) -> validate (workloadRef, hierarchy, member
//! pods of another scheduler; pure functions over the store) -> build the desired status (pure) -> apply (server-side apply, throttled) ->
//! events on changes.
//!
//! Upstream equivalents: the PodGroupProtection admission plugin and podgroup-protection controller (finalizer
//! `scheduling.k8s.io/podgroup-protection`, removed only when every pod that references the group is terminal
//! or gone), the Priority admission plugin, and the scheduler's runtime hierarchy validation (KEP-6012).
//!
//! Counters: `pods` = non-terminal member pods, `scheduledPods` = those bound to a node and not being deleted (a
//! terminating member no longer counts toward the gang's quorum), `runningPods` = those in phase Running, `readyPods` = those with `Ready=True`; `succeededPods` and `failedPods` count the terminal
//! members by phase. A status write happens at most once per `min_status_interval` per group (default
//! 1 s), the first one too, so a 1,000-pod group being bound costs a handful of writes, not 1,000.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::core::v1::PodCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use phalanx_api::conditions::reasons::WAITING_FOR_PODS;
use phalanx_api::conditions::reasons::{GROUP_RESTARTED, RESTARTED_BY_RECOVERY_POLICY};
use phalanx_api::conditions::{
    DISRUPTION_TARGET, POD_GROUP_FAILED, POD_GROUP_INITIALLY_SCHEDULED, POD_GROUP_SATISFIED, TERMINATING,
};
use phalanx_api::finalizers::POD_GROUP_PROTECTION;
use phalanx_api::v1beta1::PodGroup;
use phalanx_store::PodRecord;
use phalanx_store::{GroupKey, GroupKind};
use serde_json::{Value, json};

use crate::checks;
use crate::context::Ctx;
use crate::error::{Error, Result};
use crate::group::{self, PrioritySpec};
use crate::group_claims;
use crate::group_status::{Counts, LiveStatus, count};
use crate::members_wait;
use crate::recovery;
use crate::satisfied;
use crate::scheduled;
use crate::status::{self, WriteDecision};
use crate::status::{Problem, VALID};
use crate::workload::report_validity;

/// Controller name in metrics and logs.
pub const CONTROLLER: &str = "podgroup";

/// Most pod names a `Terminating` message lists.
const TERMINATING_NAMES: usize = 10;

/// Pure: the `Terminating=True/WaitingForPods` condition of a group being deleted while it has
/// non-terminal members (`None` otherwise); the transition time is the deletion's.
pub fn terminating_condition(pg: &PodGroup, members: &[Arc<PodRecord>]) -> Option<Condition> {
    let since = pg.metadata.deletion_timestamp.clone()?;
    let mut names: Vec<String> = members
        .iter()
        .filter(|p| !p.is_terminal())
        .map(|p| p.name().to_owned())
        .collect();
    if names.is_empty() {
        return None;
    }
    names.sort();
    let n = names.len();
    let mut list = names
        .into_iter()
        .take(TERMINATING_NAMES)
        .collect::<Vec<_>>()
        .join(", ");
    if n > TERMINATING_NAMES {
        list.push_str(&format!(", and {} more", n - TERMINATING_NAMES));
    }
    Some(Condition {
        type_: TERMINATING.to_string(),
        status: "True".to_string(),
        reason: WAITING_FOR_PODS.to_string(),
        message: format!(
            "deletion waits for {n} member pod(s) to finish or be deleted (finalizer {POD_GROUP_PROTECTION}): {list}"
        ),
        observed_generation: pg.metadata.generation,
        last_transition_time: since,
    })
}

/// Pure: the owned status subset. `existing` is the `Valid` condition to build on.
pub fn desired_status(
    pg: &PodGroup,
    existing: Option<&Condition>,
    problem: Option<&Problem>,
    counts: Counts,
    live: &LiveStatus,
) -> Value {
    let cond = status::valid_condition(
        existing,
        problem.map(|p| (p.reason.as_str(), p.message.as_str())),
        pg.metadata.generation,
    );
    let conditions: Vec<&Condition> = std::iter::once(&cond)
        .chain(live.initially_scheduled.as_ref())
        .chain(live.satisfied.as_ref())
        .chain(live.failed.as_ref())
        .chain(live.terminating.as_ref())
        .collect();
    let mut st = json!({
        "conditions": conditions,
        "pods": counts.pods,
        "scheduledPods": counts.scheduled,
        "runningPods": counts.running,
        "readyPods": counts.ready,
        "succeededPods": counts.succeeded,
        "failedPods": counts.failed,
    });
    if let Some(kind) = pg.spec.scheduling_policy.kind() {
        st["policy"] = json!(kind.as_str());
    }
    if let Some(n) = live.restarts {
        st["restarts"] = json!(n);
    }
    if let Some(t) = &live.last_restart {
        st["lastRestartTime"] = json!(t);
    }
    if !live.resource_claims.is_empty() {
        st["resourceClaimStatuses"] = json!(live.resource_claims);
    }
    st
}

/// The restart record to build on: the higher count and later time of what the object shows and
/// what this controller last wrote (the cache may lag a restart; counting it twice would delete
/// the recreated gang).
fn restart_record(ctx: &Ctx, uid: &str, current: &Value) -> (Option<i32>, Option<Time>) {
    let read = |v: &Value| {
        let n = v
            .get("restarts")
            .and_then(Value::as_i64)
            .and_then(|n| i32::try_from(n).ok());
        let t: Option<Time> = v
            .get("lastRestartTime")
            .and_then(|t| serde_json::from_value(t.clone()).ok());
        (n, t)
    };
    let (mut n, mut t) = read(current);
    if let Some(w) = ctx.last_written(uid) {
        let (wn, wt) = read(&w.status);
        n = n.max(wn);
        t = match (t, wt) {
            (Some(a), Some(b)) => Some(if b.0 > a.0 { b } else { a }),
            (a, b) => a.or(b),
        };
    }
    (n, t)
}

/// Reconciles one PodGroup.
pub async fn reconcile(pg: Arc<PodGroup>, ctx: Ctx) -> Result<Action> {
    ctx.count_reconcile(CONTROLLER);
    let uid = pg.uid().ok_or(Error::MissingField("metadata.uid"))?;
    let ns = pg.namespace().ok_or(Error::MissingField("metadata.namespace"))?;
    if !ctx.is_leader() {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let key = GroupKey::pod_group(&ns, &pg.name_any());
    let members = ctx.store.group_members(&key);
    let counts = count(members.iter().map(AsRef::as_ref));
    let reference = pg.object_ref(&());

    if pg.metadata.deletion_timestamp.is_some() {
        if counts.pods == 0 {
            if status::remove_finalizer(&ctx, pg.as_ref(), POD_GROUP_PROTECTION).await? {
                tracing::debug!(podgroup = %key, "all member pods terminal or gone; finalizer removed");
            }
            ctx.forget(&uid);
            return Ok(Action::await_change());
        }
        if pg.finalizers().iter().any(|f| f == POD_GROUP_PROTECTION)
            && ctx.transition(&uid, "deletion", "waiting", None).is_some()
        {
            let note = format!(
                "Deletion waits for {} non-terminal member pod(s) to finish or be deleted",
                counts.pods
            );
            ctx.publish(
                CONTROLLER,
                &reference,
                EventType::Normal,
                WAITING_FOR_PODS,
                "Delete",
                note,
            )
            .await;
        }
    }

    let prio = PrioritySpec {
        class_name: pg.spec.priority_class_name.as_deref(),
        priority: pg.spec.priority,
        preemption_policy: pg.spec.preemption_policy,
    };
    let mut problems = group::ensure_meta(&ctx, CONTROLLER, pg.as_ref(), POD_GROUP_PROTECTION, &prio).await?;
    if let Some(r) = &pg.spec.workload_ref {
        problems.extend(checks::workload_ref(
            &ctx.store,
            &ns,
            GroupKind::PodGroup,
            pg.spec.scheduling_policy.kind(),
            r,
        ));
    }
    problems.extend(checks::hierarchy(&ctx.store, &key));
    problems.extend(checks::foreign_members(
        members.iter().map(AsRef::as_ref),
        &ctx.opts.scheduler_names,
    ));
    // A group being deleted generates no claim (the garbage collector is about to delete them).
    let claims = if pg.metadata.deletion_timestamp.is_some() {
        group_claims::GroupClaims::default()
    } else {
        group_claims::ensure(&ctx, &pg).await?
    };
    problems.extend(claims.problem);
    let problem = checks::combine(&problems);

    let current = status::status_json(pg.status.as_ref());
    let existing = status::existing_condition(&ctx, &uid, &current, VALID);
    let existing_satisfied = status::existing_condition(&ctx, &uid, &current, POD_GROUP_SATISFIED);
    let existing_failed = status::existing_condition(&ctx, &uid, &current, POD_GROUP_FAILED);
    let initially_scheduled = if ctx.opts.initially_scheduled {
        let existing = status::existing_condition(&ctx, &uid, &current, POD_GROUP_INITIALLY_SCHEDULED);
        scheduled::condition(&pg, existing.as_ref(), &members, &ctx.opts.scheduler_names)
    } else {
        None
    };
    let scheduled_now = initially_scheduled.as_ref().is_some_and(|c| c.status == "True");
    let satisfied = satisfied::condition(&pg, existing_satisfied.as_ref(), counts, scheduled_now);
    let (restarts, last_restart) = restart_record(&ctx, &uid, &current);
    let now = Timestamp::now();
    let deleting = pg.metadata.deletion_timestamp.is_some();
    let policy = recovery::effective_policy(&ctx.store, &pg);
    let step = if deleting {
        recovery::Step::Nothing
    } else {
        recovery::decide(recovery::Facts {
            policy: policy.as_ref(),
            satisfied: satisfied.as_ref(),
            failed: existing_failed.as_ref().is_some_and(|c| c.status == "True"),
            valid: problem.is_none(),
            restarts: restarts.unwrap_or(0),
            last_restart: last_restart.as_ref().map(|t| t.0),
            bound: counts.scheduled,
            left_over: recovery::left_over(&members, last_restart.as_ref().map(|t| t.0))
                .count()
                .try_into()
                .unwrap_or(i32::MAX),
            now,
        })
    };
    let ever_scheduled = scheduled_now
        || status::existing_condition(&ctx, &uid, &current, POD_GROUP_INITIALLY_SCHEDULED)
            .is_some_and(|c| c.status == "True");
    let failed = existing_failed.as_ref().is_some_and(|c| c.status == "True");
    let gathering = problem.is_none() && !deleting && !failed && !ever_scheduled;
    let facts = members_wait::Facts::of(
        &pg,
        &members,
        counts,
        gathering,
        ctx.opts.members_wait_warning,
        now,
    );
    let members_wait =
        members_wait::report(&ctx, CONTROLLER, &uid, &reference, members_wait::decide(&facts)).await;
    let mut live = LiveStatus {
        failed: recovery::failed_condition(existing_failed.as_ref(), &step, pg.metadata.generation),
        satisfied,
        restarts,
        last_restart,
        terminating: terminating_condition(&pg, &members),
        resource_claims: claims.statuses,
        initially_scheduled,
    };
    if let recovery::Step::Restart { number } = step {
        live.restarts = Some(number);
        live.last_restart = Some(Time(now));
    }
    let shown = current
        .get("conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| !c.is_empty())
        || ctx.last_written(&uid).is_some();
    if ctx.opts.initially_scheduled
        && scheduled::first_write_waits(shown, problem.is_some(), deleting, counts, &live)
    {
        // Nothing to say but "waiting": the binds, or the scheduler's reason for the wait, come first.
        ctx.nothing_wanted(&uid);
        ctx.note_success(&uid);
        return Ok(Action::requeue(
            members_wait.map_or(ctx.opts.resync, |d| d.min(ctx.opts.resync)),
        ));
    }
    let desired = desired_status(&pg, existing.as_ref(), problem.as_ref(), counts, &live);
    let decision = status::decide(&ctx, &uid, &desired, &current);
    if decision == WriteDecision::Write {
        status::apply_status(&ctx, CONTROLLER, pg.as_ref(), &desired).await?;
    }
    if !matches!(decision, WriteDecision::Later(_))
        && let Some(c) = &live.satisfied
    {
        report_satisfied(&ctx, &uid, &reference, existing_satisfied.as_ref(), c).await;
    }
    // Finishing a counted restart needs no status write, so a throttled one does not hold it back.
    if !matches!(decision, WriteDecision::Later(_)) || matches!(step, recovery::Step::Finish { .. }) {
        act(&ctx, &uid, &reference, &step, &members, &live).await?;
    }
    // The sooner of the end of a grace period and the threshold of a gang that waits for members.
    let wait = match step {
        recovery::Step::Wait { left, .. } => Some(left),
        _ => None,
    }
    .into_iter()
    .chain(members_wait)
    .min();
    // The verdict's event goes out with the status write it announces (see `report_validity`).
    if !matches!(decision, WriteDecision::Later(_)) {
        report_validity(
            &ctx,
            CONTROLLER,
            &uid,
            &reference,
            "PodGroup",
            &current,
            problem.as_ref(),
        )
        .await;
    }
    ctx.note_success(&uid);
    let action = status::after(&decision, ctx.opts.resync);
    // Come back when that time is up (the pods' events may be over by then).
    Ok(match wait {
        Some(d) if d < ctx.opts.resync && !matches!(decision, WriteDecision::Later(_)) => {
            Action::requeue(d + Duration::from_millis(100))
        }
        _ => action,
    })
}

/// Marks a member `DisruptionTarget=True/RestartedByRecoveryPolicy` (so that a Job's
/// `podFailurePolicy` can tell the restart from a failure, as it does for preemption and eviction;
/// a member marked by an earlier attempt is not patched again) and deletes it with its UID as
/// precondition. `false`: it was already gone or replaced.
async fn restart_member(ctx: &Ctx, pod: &PodRecord) -> Result<bool> {
    let name = pod.name();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), pod.namespace());
    if !recovery::marked_by_restart(pod) {
        mark_member(&api, name).await?;
    }
    let dp = DeleteParams {
        preconditions: Some(pod.uid())
            .filter(|u| !u.is_empty())
            .map(|uid| Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
        ..DeleteParams::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Writes `DisruptionTarget=True/RestartedByRecoveryPolicy` on the member `name` (a member already
/// gone is fine).
async fn mark_member(api: &Api<Pod>, name: &str) -> Result<()> {
    let cond = PodCondition {
        type_: DISRUPTION_TARGET.into(),
        status: "True".into(),
        reason: Some(RESTARTED_BY_RECOVERY_POLICY.into()),
        message: Some(
            "recoveryPolicy RestartGroup: the gang fell below minCount and is placed again whole".into(),
        ),
        last_transition_time: Some(Time(Timestamp::now())),
        ..Default::default()
    };
    let patch = Patch::Strategic(json!({ "status": { "conditions": [cond] } }));
    match api.patch_status(name, &PatchParams::default(), &patch).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Restarts (marks and deletes) each of `pods`, going on past a failure so that one refused delete
/// does not leave the rest of the gang running: `(deleted, first error)`.
async fn restart_members<'a>(
    ctx: &Ctx,
    pods: impl Iterator<Item = &'a Arc<PodRecord>>,
) -> (usize, Option<Error>) {
    let mut deleted = 0;
    let mut first = None;
    for p in pods {
        match restart_member(ctx, p).await {
            Ok(true) => deleted += 1,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(pod = %p.key(), error = %e, "recoveryPolicy RestartGroup: deleting a member failed");
                first.get_or_insert(e);
            }
        }
    }
    (deleted, first)
}

/// Carries out a recovery step once its status is written: `Restart` deletes the bound members
/// (a member already gone is fine) and announces it; `Finish` deletes the members a counted
/// restart left; `Fail` announces the new `PodGroupFailed`. A failed delete does not stop the
/// others; the first error is returned once all were tried, so the reconcile is retried with
/// backoff and the next one finishes the restart ([`recovery::Step::Finish`]).
async fn act(
    ctx: &Ctx,
    uid: &str,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    step: &recovery::Step,
    members: &[Arc<PodRecord>],
    live: &LiveStatus,
) -> Result<()> {
    match step {
        recovery::Step::Restart { number } => {
            let (deleted, error) = restart_members(ctx, recovery::bound_members(members)).await;
            let note = format!(
                "recoveryPolicy RestartGroup: restart {number}: deleted {deleted} bound member pod(s) so that the gang is placed again whole ({})",
                live.satisfied
                    .as_ref()
                    .map(|c| c.message.as_str())
                    .unwrap_or_default()
            );
            tracing::info!(podgroup = %reference.name.as_deref().unwrap_or_default(), restart = number, deleted, "gang restarted");
            ctx.publish(
                CONTROLLER,
                reference,
                EventType::Warning,
                GROUP_RESTARTED,
                "Restart",
                note,
            )
            .await;
            if let Some(e) = error {
                return Err(e);
            }
        }
        recovery::Step::Finish { number } => {
            let (deleted, error) =
                restart_members(ctx, recovery::left_over(members, live_restart(live))).await;
            let name = reference.name.as_deref().unwrap_or_default();
            tracing::info!(podgroup = %name, restart = number, deleted, "gang restart finished");
            if deleted > 0 {
                let note = format!(
                    "recoveryPolicy RestartGroup: restart {number} finished: deleted {deleted} member pod(s) it had left bound"
                );
                ctx.publish(
                    CONTROLLER,
                    reference,
                    EventType::Warning,
                    GROUP_RESTARTED,
                    "Restart",
                    note,
                )
                .await;
            }
            if let Some(e) = error {
                return Err(e);
            }
        }
        recovery::Step::Fail { .. } => {
            if let Some(c) = &live.failed
                && ctx.transition(uid, "failed", "True", None).is_some()
            {
                ctx.publish(
                    CONTROLLER,
                    reference,
                    EventType::Warning,
                    POD_GROUP_FAILED,
                    "Fail",
                    c.message.clone(),
                )
                .await;
            }
        }
        recovery::Step::Nothing | recovery::Step::Wait { .. } => {}
    }
    Ok(())
}

/// `status.lastRestartTime` as [`LiveStatus`] carries it.
fn live_restart(live: &LiveStatus) -> Option<Timestamp> {
    live.last_restart.as_ref().map(|t| t.0)
}

/// Publishes the event for a change of `PodGroupSatisfied` (once per change, seeded from the
/// condition the object showed, so a restarted controller does not repeat the last one).
async fn report_satisfied(
    ctx: &Ctx,
    uid: &str,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    shown: Option<&Condition>,
    now: &Condition,
) {
    let Some(last) = ctx.transition(uid, "satisfied", &now.reason, shown.map(|c| c.reason.as_str())) else {
        return;
    };
    let Some(kind) = satisfied::event(last.as_deref(), now) else {
        return;
    };
    ctx.publish(
        CONTROLLER,
        reference,
        kind,
        &now.reason,
        "Reconcile",
        now.message.clone(),
    )
    .await;
}

/// Error policy: exponential backoff per object (no hot loop), logged by the caller.
pub fn error_policy(pg: Arc<PodGroup>, err: &Error, ctx: Ctx) -> Action {
    crate::error_action(CONTROLLER, pg.uid().as_deref(), err, &ctx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};

    fn api_pod(node: Option<&str>, phase: &str) -> Pod {
        // A Running pod is Ready here, as kwok's pod-ready stage makes it.
        let ready = (phase == "Running").then(|| {
            vec![k8s_openapi::api::core::v1::PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]
        });
        Pod {
            spec: Some(PodSpec {
                node_name: node.map(str::to_string),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: ready,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(node: Option<&str>, phase: &str) -> PodRecord {
        PodRecord::from_pod(&api_pod(node, phase))
    }

    #[test]
    fn counts_skip_terminal_pods() {
        let pods = [
            pod(None, "Pending"),
            pod(Some("n1"), "Pending"),
            pod(Some("n1"), "Running"),
            pod(Some("n2"), "Succeeded"),
            pod(Some("n2"), "Failed"),
        ];
        assert_eq!(
            count(pods.iter()),
            Counts {
                pods: 3,
                scheduled: 2,
                running: 1,
                ready: 1,
                succeeded: 1,
                failed: 1,
                healthy: 2,
                disrupted: 0,
                terminating: 0,
            }
        );
        assert_eq!(count([].iter()), Counts::default());
    }

    /// A bound member with a `deletionTimestamp` and, when `reason` is set, `DisruptionTarget=True`
    /// with that reason.
    fn terminating(reason: Option<&str>) -> PodRecord {
        let mut p = api_pod(Some("n1"), "Running");
        p.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        if let Some(r) = reason {
            p.status
                .get_or_insert_with(Default::default)
                .conditions
                .get_or_insert_with(Vec::new)
                .push(PodCondition {
                    type_: DISRUPTION_TARGET.into(),
                    status: "True".into(),
                    reason: Some(r.into()),
                    ..Default::default()
                });
        }
        PodRecord::from_pod(&p)
    }

    #[test]
    fn terminating_members_are_not_scheduled_and_a_restart_is_no_disruption() {
        let pods = [
            pod(Some("n1"), "Running"),
            terminating(None),
            terminating(Some(RESTARTED_BY_RECOVERY_POLICY)),
            terminating(Some("PreemptionByScheduler")),
        ];
        let c = count(pods.iter());
        assert_eq!(
            (c.pods, c.scheduled, c.healthy, c.terminating),
            (4, 1, 1, 3),
            "{c:?}"
        );
        // The restart's own mark is not a disruption; the scheduler's preemption is.
        assert_eq!(c.disrupted, 1, "{c:?}");
    }

    #[test]
    fn a_group_being_deleted_names_the_pods_it_waits_for() {
        let mut pg = PodGroup::new("g", phalanx_api::v1beta1::PodGroupSpec::default());
        let named = |name: &str, phase: &str| {
            let mut p = api_pod(Some("n1"), phase);
            p.metadata.name = Some(name.into());
            Arc::new(PodRecord::from_pod(&p))
        };
        let members: Vec<Arc<PodRecord>> = (0..12)
            .map(|i| named(&format!("p{i:02}"), "Running"))
            .chain([named("done", "Succeeded")])
            .collect();
        assert!(
            terminating_condition(&pg, &members).is_none(),
            "not being deleted"
        );
        pg.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        let c = terminating_condition(&pg, &members).expect("condition");
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("Terminating", "True", "WaitingForPods")
        );
        assert!(
            c.message.starts_with("deletion waits for 12 member pod(s)"),
            "{}",
            c.message
        );
        assert!(
            c.message
                .ends_with(": p00, p01, p02, p03, p04, p05, p06, p07, p08, p09, and 2 more"),
            "{}",
            c.message
        );
        assert_eq!(c.last_transition_time, Time(Timestamp::UNIX_EPOCH));
        assert!(
            terminating_condition(&pg, &members[12..]).is_none(),
            "only finished members left"
        );
    }

    #[test]
    fn status_has_counters_policy_and_condition() {
        let pg = PodGroup::new(
            "g",
            phalanx_api::v1beta1::PodGroupSpec {
                scheduling_policy: phalanx_api::v1beta1::PodGroupSchedulingPolicy::gang(2),
                ..Default::default()
            },
        );
        let problem = Problem {
            reason: "ParentNotFound".into(),
            message: "missing".into(),
        };
        let st = desired_status(
            &pg,
            None,
            Some(&problem),
            Counts {
                pods: 3,
                scheduled: 2,
                running: 1,
                ready: 1,
                succeeded: 4,
                failed: 5,
                ..Default::default()
            },
            &LiveStatus::default(),
        );
        assert_eq!(st["pods"], 3);
        assert_eq!(st["scheduledPods"], 2);
        assert_eq!(st["runningPods"], 1);
        assert_eq!(st["readyPods"], 1);
        assert_eq!(st["succeededPods"], 4);
        assert_eq!(st["failedPods"], 5);
        assert_eq!(st["policy"], "Gang");
        assert_eq!(st["conditions"][0]["type"], "Valid");
        assert_eq!(st["conditions"][0]["status"], "False");
        assert_eq!(st["conditions"][0]["reason"], "ParentNotFound");
    }
}
