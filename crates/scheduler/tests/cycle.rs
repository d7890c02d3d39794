//! Cycle-level behaviour not covered by the upstream scenarios: skipping, invalid input,
//! a composite child handed alone, decision shape.

use phalanx_scheduler::decision::{ConditionReason, ConditionType};
use std::sync::Arc;
use std::time::Instant;

use phalanx_scheduler::model::NodeStatic;
use phalanx_scheduler::queue::QueuedEntity;
use phalanx_scheduler::{
    EntityKey, FailureReason, GroupInfo, GroupKey, GroupPolicy, Outcome, PodInfo, RequeueMode, Scheduler,
    SchedulerConfig, Snapshot,
};

fn snap() -> Snapshot {
    Snapshot::new([Arc::new(NodeStatic::simple("n", 4000, 1 << 33, &[]))])
}

fn member(name: &str, group: &str) -> PodInfo {
    let mut p = PodInfo::simple("ns", name, 1000);
    p.group_name = Some(group.into());
    p
}

fn entity(group: GroupInfo, pods: Vec<PodInfo>) -> QueuedEntity {
    QueuedEntity {
        tree: None,
        key: EntityKey::Group(group.key.clone()),
        group: Some(Arc::new(group)),
        pods: pods.into_iter().map(Arc::new).collect(),
        attempts: 0,
        timestamp: Instant::now(),
    }
}

#[test]
fn deleting_and_already_assumed_pods_are_skipped() {
    let mut s = snap();
    let mut gone = member("gone", "g");
    gone.deleting = true;
    let mut bound = member("bound", "g");
    bound.node_name = Some("n".into());
    s.add_pod(Arc::new(bound.clone()));
    bound.node_name = None;
    let g = GroupInfo::new("ns", "g", GroupPolicy::Gang { min_count: 1 });
    let d = Scheduler::new(SchedulerConfig::default()).schedule(&mut s, &entity(g, vec![gone, bound]));
    assert_eq!(d.outcome, Outcome::Skipped);
    assert!(d.bindings.is_empty() && d.failures.is_empty() && d.requeue.is_none());
}

#[test]
fn an_invalid_member_fails_the_group_with_scheduler_error() {
    let mut s = snap();
    let mut bad = member("bad", "g");
    bad.invalid = Some("container \"c\": invalid quantity \"x\"".into());
    let g = GroupInfo::new("ns", "g", GroupPolicy::Gang { min_count: 2 });
    let d =
        Scheduler::new(SchedulerConfig::default()).schedule(&mut s, &entity(g, vec![member("ok", "g"), bad]));
    assert_eq!(d.outcome, Outcome::Error);
    assert!(d.bindings.is_empty());
    assert_eq!(d.requeue.as_ref().map(|r| r.mode), Some(RequeueMode::Backoff));
    assert!(
        d.failures
            .iter()
            .all(|f| f.reason == FailureReason::SchedulerError)
    );
    assert_eq!(
        d.conditions[0].message,
        "failed to schedule other pod from a pod group: pod ns/bad is invalid: container \"c\": invalid quantity \"x\""
    );
    assert_eq!(
        s.node(0).requested.milli_cpu,
        0,
        "the partial assumption was reverted"
    );
}

#[test]
fn child_of_a_composite_group_alone_is_an_error() {
    // A PodGroup with a parent is scheduled with its root's tree; handed alone it is an error.
    let mut s = snap();
    let mut g = GroupInfo::new("ns", "g", GroupPolicy::Basic);
    g.parent = Some(GroupKey::composite("ns", "root"));
    let d = Scheduler::new(SchedulerConfig::default()).schedule(&mut s, &entity(g, vec![member("p", "g")]));
    assert_eq!(d.outcome, Outcome::Error);
    assert!(
        d.conditions[0]
            .message
            .contains("it is scheduled as part of its root's tree, not alone")
    );
}

#[test]
fn success_decision_shape() {
    let mut s = snap();
    let mut g = GroupInfo::new("ns", "g", GroupPolicy::Gang { min_count: 2 });
    g.generation = 7;
    let pods = vec![
        member("a", "g"),
        member("b", "g"),
        member("c", "g"),
        member("d", "g"),
        member("e", "g"),
    ];
    let d = Scheduler::new(SchedulerConfig::default()).schedule(&mut s, &entity(g, pods));
    assert_eq!(d.outcome, Outcome::Scheduled);
    assert_eq!(d.bindings.len(), 4);
    assert_eq!(d.failures.len(), 1);
    assert_eq!(d.failures[0].pod.name.as_ref(), "e");
    assert_eq!(
        d.failures[0].message,
        "0/1 nodes are available: 1 Insufficient cpu."
    );
    let c = &d.conditions[0];
    assert_eq!(
        (c.type_, c.status, c.reason, c.observed_generation),
        (
            ConditionType::PodGroupInitiallyScheduled,
            true,
            ConditionReason::Scheduled,
            7
        )
    );
    let r = d.requeue.as_ref().unwrap();
    assert_eq!((r.mode, r.pods.len()), (RequeueMode::Immediate, 1));
    // Bindings stay assumed in the snapshot.
    assert_eq!(s.node(0).requested.milli_cpu, 4000);
    assert_eq!(s.scheduled_count(&GroupKey::pod_group("ns", "g")), 4);
}

#[test]
fn single_pod_decision_shape() {
    let mut s = snap();
    let p = Arc::new(PodInfo::simple("ns", "solo", 5000));
    let e = QueuedEntity {
        tree: None,
        key: EntityKey::Pod(p.key.clone()),
        group: None,
        pods: vec![p],
        attempts: 0,
        timestamp: Instant::now(),
    };
    let d = Scheduler::new(SchedulerConfig::default()).schedule(&mut s, &e);
    assert_eq!(d.outcome, Outcome::Unschedulable);
    assert!(d.conditions.is_empty());
    assert_eq!(d.failures[0].reason, FailureReason::Unschedulable);
    assert_eq!(
        d.requeue.as_ref().map(|r| r.mode),
        Some(RequeueMode::Unschedulable)
    );
}

/// k/k#142330: the last pod of a Job gang (minCount 3) with one member running and two Succeeded binds, because
/// the Succeeded members count as scheduled ([`Snapshot::set_completed`]); without them it is the gang's quorum
/// that fails, with GangScheduling's message.
#[test]
fn succeeded_members_count_as_scheduled_for_the_gang() {
    let g = GroupInfo::new("ns", "g", GroupPolicy::Gang { min_count: 3 });
    let with = |completed: usize| {
        let mut s = snap();
        let mut running = member("running", "g");
        running.node_name = Some("n".into());
        s.add_pod(Arc::new(running));
        s.set_completed(
            [(GroupKey::pod_group("ns", "g"), completed)]
                .into_iter()
                .collect(),
        );
        Scheduler::new(SchedulerConfig::default())
            .schedule(&mut s, &entity(g.clone(), vec![member("last", "g")]))
    };
    let d = with(2);
    assert_eq!(d.outcome, Outcome::Scheduled);
    assert_eq!(d.bindings.len(), 1);
    let d = with(0);
    assert_eq!(d.outcome, Outcome::Unschedulable);
    assert!(d.bindings.is_empty());
    assert!(
        d.failures.iter().all(|f| f
            .message
            .contains("minCount (3) cannot be satisfied: 1 scheduled, 1 remaining")),
        "{:?}",
        d.failures
    );
}

/// [`phalanx_scheduler::decision::Requeue::short_of`]: the requests of the members rejected for room (removing pods
/// could help), nothing when every rejection is unresolvable (here `spec.nodeName` names another node).
#[test]
fn a_gang_short_of_cpu_lacks_the_rejected_members_requests_and_one_pinned_elsewhere_lacks_nothing() {
    let g = || GroupInfo::new("ns", "g", GroupPolicy::Gang { min_count: 5 });
    let five = |pinned: bool| -> Vec<PodInfo> {
        (0..5)
            .map(|i| {
                let mut p = member(&format!("p{i}"), "g");
                if pinned {
                    let mut spec = (*p.spec).clone();
                    spec.node_name = Some("elsewhere".into());
                    p.spec = Arc::new(spec);
                }
                p
            })
            .collect()
    };
    let mut sched = Scheduler::new(SchedulerConfig::default());
    let d = sched.schedule(&mut snap(), &entity(g(), five(false)));
    let r = d.requeue.as_ref().unwrap();
    assert_eq!(
        (d.outcome, r.mode, r.short_of.milli_cpu),
        (Outcome::Unschedulable, RequeueMode::Unschedulable, 1000),
        "five 1-cpu pods on a 4-cpu node, four placed: {:?}",
        d.failures.first().map(|f| &f.message)
    );
    let d = sched.schedule(&mut snap(), &entity(g(), five(true)));
    let r = d.requeue.as_ref().unwrap();
    assert_eq!(
        (d.outcome, r.mode, r.short_of.is_zero()),
        (Outcome::Unschedulable, RequeueMode::Unschedulable, true),
        "{:?}",
        d.failures.first().map(|f| &f.message)
    );
}
