//! Tests of [`super`]: the I7 ledger over recorded and constructed pod histories.

use super::*;
use serde_json::json;

const HIGH: i32 = 1000;
const LOW: i32 = 10;

/// A pod version: `node` bound, `nominated`, `deleting`, `marked` (DisruptionTarget).
fn pod(name: &str, priority: i32, group: Option<&str>, node: Option<&str>) -> Pod {
    let labels = group.map_or(json!({}), |g| json!({ phalanx_api::labels::POD_GROUP: g }));
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "labels": labels},
        "spec": {"priority": priority, "nodeName": node, "containers": [{"name": "c"}]},
    }))
    .unwrap()
}

fn nominated(mut p: Pod, node: Option<&str>) -> Pod {
    p.status.get_or_insert_default().nominated_node_name = node.map(Into::into);
    p
}

fn deleting(mut p: Pod, mark: bool) -> Pod {
    if mark {
        p.status.get_or_insert_default().conditions = Some(vec![
            serde_json::from_value(json!({
                "type": DISRUPTION_TARGET, "status": "True", "reason": PREEMPTION_BY_SCHEDULER
            }))
            .unwrap(),
        ]);
    }
    p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        Timestamp::now(),
    ));
    p
}

fn delete(name: &str, user: &str, code: u16) -> AuditEvent {
    AuditEvent {
        user: user.into(),
        verb: "delete".into(),
        resource: "pods".into(),
        subresource: String::new(),
        namespace: "ns".into(),
        name: name.into(),
        code,
        received: Timestamp::now(),
        completed: Timestamp::now(),
        bind_target: None,
        lease_write: None,
    }
}

fn replica(u: &str) -> bool {
    u.starts_with("replica-")
}

/// Twelve low-priority fillers on six nodes (two each) and a high-priority gang of two pending.
fn filled() -> Ledger {
    let mut l = Ledger::default();
    for i in 0..12 {
        l.observe(&pod(&format!("f{i}"), LOW, None, Some(&format!("n{}", i / 2))));
    }
    for p in ["p0", "p1"] {
        l.observe(&pod(p, HIGH, Some("gang"), None));
    }
    l
}

/// The leader's plan: nominate p0 -> n0, p1 -> n1, then mark and delete f0 (n0) and f2 (n1), held Terminating.
fn first_plan(l: &mut Ledger) -> Vec<AuditEvent> {
    l.observe(&nominated(pod("p0", HIGH, Some("gang"), None), Some("n0")));
    l.observe(&nominated(pod("p1", HIGH, Some("gang"), None), Some("n1")));
    l.observe(&deleting(pod("f0", LOW, None, Some("n0")), true));
    l.observe(&deleting(pod("f2", LOW, None, Some("n1")), true));
    vec![delete("f0", "replica-a-1", 200), delete("f2", "replica-a-1", 504)]
}

/// The gang binds where it was nominated once `victims` are gone.
fn victims_gone_and_bound(l: &mut Ledger, victims: &[(&str, &str)], binds: &[(&str, &str)]) {
    for (v, n) in victims {
        l.gone(&deleting(pod(v, LOW, None, Some(n)), true));
    }
    for (p, n) in binds {
        l.observe(&nominated(pod(p, HIGH, Some("gang"), Some(n)), None));
    }
}

#[test]
fn one_plan_across_a_failover_passes() {
    let mut l = filled();
    let mut events = first_plan(&mut l);
    // The standby takes over and waits; the victims go, the gang binds.
    victims_gone_and_bound(
        &mut l,
        &[("f0", "n0"), ("f2", "n1")],
        &[("p0", "n0"), ("p1", "n1")],
    );
    // A delete refused by the UID precondition (409) and one by the admin are no evictions.
    events.push(delete("f3", "replica-b-1", 409));
    events.push(delete("f5", "admin", 200));
    let v = l.check(&events, replica);
    assert!(v.is_empty(), "{v:#?}");
    assert_eq!(l.evictions(&events, replica).len(), 2);
}

#[test]
fn a_plan_cut_short_and_completed_after_its_victim_went_passes() {
    // The leader was killed after its first delete: the standby waits for f0, then evicts one more for p1.
    let mut l = filled();
    l.observe(&nominated(pod("p0", HIGH, Some("gang"), None), Some("n0")));
    l.observe(&nominated(pod("p1", HIGH, Some("gang"), None), Some("n1")));
    l.observe(&deleting(pod("f0", LOW, None, Some("n0")), true));
    l.gone(&deleting(pod("f0", LOW, None, Some("n0")), true));
    l.observe(&deleting(pod("f2", LOW, None, Some("n1")), true));
    victims_gone_and_bound(&mut l, &[("f2", "n1")], &[("p0", "n0"), ("p1", "n1")]);
    let events = vec![delete("f0", "replica-a-1", 504), delete("f2", "replica-b-1", 200)];
    let v = l.check(&events, replica);
    assert!(v.is_empty(), "{v:#?}");
}

/// The sequence a `preempt-kill` run records when the new leader refuses to wait (it clears the nominations as
/// not eligible) and preempts again on its next attempt while the first victims are still held.
/// Deleting at `effect` (as the API server sets it: `deletionTimestamp` = effect + grace period).
fn deleting_at(p: Pod, effect: Timestamp) -> Pod {
    let mut p = deleting(p, true);
    p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        effect + k8s_openapi::jiff::SignedDuration::from_secs(30),
    ));
    p.metadata.deletion_grace_period_seconds = Some(30);
    p
}

/// The CI run of a `preempt-kill` fault: the leader marked `low-6` and was SIGKILLed while its delete was in
/// flight (audited 504, dropped by the server: the pod stayed Running, so the fault never held it); the new
/// leader waited for `low-7`, then evicted `low-6` for the first time. One eviction of `low-6`, not two.
#[test]
fn a_dropped_delete_of_a_killed_leader_is_not_an_eviction() {
    let mut l = recorded_fillers();
    l.observe(&gang_pod("preemptor-0", Some("chaos-n0"), None));
    l.observe(&gang_pod("preemptor-1", Some("chaos-n1"), None));
    let t0 = Timestamp::now();
    let mut dropped = delete("low-6", "replica-b-4", 504);
    dropped.received = t0;
    let mut first = delete("low-7", "replica-b-4", 200);
    first.received = t0;
    l.observe(&deleting_at(pod("low-7", LOW, None, Some("chaos-n1")), t0));
    l.gone(&deleting_at(pod("low-7", LOW, None, Some("chaos-n1")), t0));
    let later = t0 + k8s_openapi::jiff::SignedDuration::from_secs(10);
    let mut evicted = delete("low-6", "replica-a-3", 200);
    evicted.received = later;
    l.observe(&deleting_at(pod("low-6", LOW, None, Some("chaos-n0")), later));
    l.gone(&deleting_at(pod("low-6", LOW, None, Some("chaos-n0")), later));
    l.observe(&gang_pod("preemptor-0", None, Some("chaos-n0")));
    l.observe(&gang_pod("preemptor-1", None, Some("chaos-n1")));
    let events = vec![dropped.clone(), first.clone(), evicted.clone()];
    let v = l.check(&events, replica);
    assert!(v.is_empty(), "{v:#?}");
    assert_eq!(l.evictions(&events, replica).len(), 2);
    // The same request with a 200 did delete the pod: then the new leader's request is a repeat.
    let mut took_effect = dropped;
    took_effect.code = 200;
    let mut l2 = recorded_fillers();
    l2.observe(&gang_pod("preemptor-0", Some("chaos-n0"), None));
    l2.observe(&gang_pod("preemptor-1", Some("chaos-n1"), None));
    l2.observe(&deleting_at(pod("low-6", LOW, None, Some("chaos-n0")), t0));
    l2.observe(&deleting_at(pod("low-7", LOW, None, Some("chaos-n1")), t0));
    l2.gone(&deleting_at(pod("low-7", LOW, None, Some("chaos-n1")), t0));
    l2.gone(&deleting_at(pod("low-6", LOW, None, Some("chaos-n0")), t0));
    let e2 = l2.evictions(&[took_effect, first, evicted], replica);
    assert_eq!(e2.iter().filter(|e| e.repeat).count(), 1, "{e2:#?}");
}

#[test]
fn a_second_plan_while_the_first_victims_terminate_is_caught() {
    let mut l = filled();
    let mut events = first_plan(&mut l);
    l.observe(&nominated(pod("p0", HIGH, Some("gang"), None), None));
    l.observe(&nominated(pod("p1", HIGH, Some("gang"), None), None));
    l.observe(&nominated(pod("p0", HIGH, Some("gang"), None), Some("n2")));
    l.observe(&nominated(pod("p1", HIGH, Some("gang"), None), Some("n3")));
    l.observe(&deleting(pod("f4", LOW, None, Some("n2")), true));
    l.observe(&deleting(pod("f6", LOW, None, Some("n3")), true));
    events.extend([delete("f4", "replica-b-1", 200), delete("f6", "replica-b-1", 200)]);
    victims_gone_and_bound(
        &mut l,
        &[("f0", "n0"), ("f2", "n1"), ("f4", "n2"), ("f6", "n3")],
        &[("p0", "n2"), ("p1", "n3")],
    );
    let v = l.check(&events, replica);
    let names: Vec<&str> = v
        .iter()
        .filter_map(|v| v.object.as_ref())
        .map(|o| o.1.as_str())
        .collect();
    assert_eq!(names, vec!["f4", "f6"], "{v:#?}");
    assert!(v.iter().all(|v| v.invariant == Invariant::SinglePreemption));
    assert!(
        v[0].detail.contains("second set of victims for one preemptor"),
        "{}",
        v[0].detail
    );
    assert!(v[0].detail.contains("PodGroup ns/gang"), "{}", v[0].detail);
    assert!(v[0].detail.contains("ns/f0"), "{}", v[0].detail);
}

/// Fillers `low-<i>` as the `preempt-kill` fault creates them: two per node on `chaos-n0`..`chaos-n5`.
fn recorded_fillers() -> Ledger {
    let mut l = Ledger::default();
    for i in 0..12 {
        l.observe(&pod(
            &format!("low-{i}"),
            LOW,
            None,
            Some(&format!("chaos-n{}", i % 6)),
        ));
    }
    for p in ["preemptor-0", "preemptor-1"] {
        l.observe(&pod(p, HIGH, Some("preemptor"), None));
    }
    l
}

fn gang_pod(name: &str, nominated_to: Option<&str>, bound: Option<&str>) -> Pod {
    nominated(pod(name, HIGH, Some("preemptor"), bound), nominated_to)
}

/// The sequence a live `preempt-kill` run recorded (before the core waits for victims terminating on the
/// nominated node): replica-a-1 nominates and evicts `low-6` and `low-7` and is SIGKILLed; replica-b-1 takes
/// over, finds the nominated nodes still holding victims terminating by preemption, refuses and clears the
/// nominations, and on its next attempt plans again: the same nodes, and the same (still Terminating) victims,
/// deleted a second time. Nominations seen: `preemptor-0 chaos-n0 > - > chaos-n0 > -`, `preemptor-1 chaos-n1 >
/// - > chaos-n1 > -`.
#[test]
fn the_recorded_failover_that_evicted_the_same_victims_again_is_caught() {
    let mut l = recorded_fillers();
    l.observe(&gang_pod("preemptor-0", Some("chaos-n0"), None));
    l.observe(&gang_pod("preemptor-1", Some("chaos-n1"), None));
    l.observe(&deleting(pod("low-6", LOW, None, Some("chaos-n0")), true));
    l.observe(&deleting(pod("low-7", LOW, None, Some("chaos-n1")), true));
    let mut events = vec![
        delete("low-6", "replica-a-1", 200),
        delete("low-7", "replica-a-1", 200),
    ];
    l.observe(&gang_pod("preemptor-1", None, None));
    l.observe(&gang_pod("preemptor-0", None, None));
    l.observe(&gang_pod("preemptor-1", Some("chaos-n1"), None));
    l.observe(&gang_pod("preemptor-0", Some("chaos-n0"), None));
    events.extend([
        delete("low-6", "replica-b-1", 200),
        delete("low-7", "replica-b-1", 200),
    ]);
    l.gone(&deleting(pod("low-6", LOW, None, Some("chaos-n0")), true));
    l.gone(&deleting(pod("low-7", LOW, None, Some("chaos-n1")), true));
    l.observe(&gang_pod("preemptor-0", None, Some("chaos-n0")));
    l.observe(&gang_pod("preemptor-1", None, Some("chaos-n1")));
    let v = l.check(&events, replica);
    let got: Vec<(&str, bool)> = v
        .iter()
        .map(|v| {
            (
                v.object.as_ref().unwrap().1.as_str(),
                v.detail.contains("evicted twice"),
            )
        })
        .collect();
    assert_eq!(got, vec![("low-6", true), ("low-7", true)], "{v:#?}");
    assert!(
        v[0].detail.contains("deleted again by replica-b-1"),
        "{}",
        v[0].detail
    );
    assert!(v[0].detail.contains("PodGroup ns/preemptor"), "{}", v[0].detail);
    let e = l.evictions(&events, replica);
    assert_eq!(e.iter().filter(|e| e.repeat).count(), 2, "{e:#?}");
}

#[test]
fn a_repeated_request_of_the_same_plan_passes() {
    // The same replica sends the delete again without a new nomination (a retried request): one plan.
    let mut l = filled();
    let mut events = first_plan(&mut l);
    events.push(delete("f0", "replica-a-1", 200));
    let v = l.check(&events, replica);
    assert!(v.is_empty(), "{v:#?}");
}

#[test]
fn the_same_replica_replanning_under_new_nominations_is_caught() {
    // No failover: one leader whose preemptor lost its nomination and preempted again while f0 terminates.
    let mut l = filled();
    let mut events = first_plan(&mut l);
    l.observe(&nominated(pod("p0", HIGH, Some("gang"), None), Some("n4")));
    l.observe(&deleting(pod("f8", LOW, None, Some("n4")), true));
    events.push(delete("f8", "replica-a-1", 200));
    let v = l.check(&events, replica);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert_eq!(v[0].object.as_ref().unwrap().1, "f8");
}

#[test]
fn unmarked_evictions_and_evictions_without_a_waiting_preemptor_are_caught() {
    let mut l = filled();
    // f0 deleted without the mark while p0 waits nominated to n0.
    l.observe(&nominated(pod("p0", HIGH, Some("gang"), None), Some("n0")));
    l.observe(&deleting(pod("f0", LOW, None, Some("n0")), false));
    // p0 and p1 bind; then f4 is deleted (marked) though no one waits any more.
    l.observe(&nominated(pod("p0", HIGH, Some("gang"), Some("n0")), None));
    l.observe(&pod("p1", HIGH, Some("gang"), Some("n1")));
    l.gone(&deleting(pod("f4", LOW, None, Some("n2")), true));
    let events = vec![delete("f0", "replica-a-1", 200), delete("f4", "replica-a-1", 200)];
    let v = l.check(&events, replica);
    assert_eq!(v.len(), 2, "{v:#?}");
    assert!(
        v[0].detail.contains("without DisruptionTarget"),
        "{}",
        v[0].detail
    );
    assert!(
        v[1].detail.contains("no pod of higher priority waited"),
        "{}",
        v[1].detail
    );
}

#[test]
fn a_gang_restart_by_recovery_policy_is_no_eviction() {
    let mut l = filled();
    // f0 deleted by the PodGroup controller's RestartGroup: marked with its own reason, no preemptor waits.
    let mut f0 = pod("f0", LOW, Some("web"), Some("n0"));
    f0.status.get_or_insert_default().conditions = Some(vec![
        serde_json::from_value(json!({
            "type": DISRUPTION_TARGET, "status": "True", "reason": RESTARTED_BY_RECOVERY_POLICY
        }))
        .unwrap(),
    ]);
    l.observe(&deleting(f0, false));
    // f2 deleted the same way but without any mark: an eviction, caught.
    l.observe(&deleting(pod("f2", LOW, None, Some("n1")), false));
    let events = vec![delete("f0", "replica-a-1", 200), delete("f2", "replica-a-1", 200)];
    let v = l.check(&events, replica);
    assert_eq!(v.len(), 2, "{v:#?}");
    assert!(
        v.iter()
            .all(|v| v.object.as_ref().is_some_and(|(_, n)| n == "f2")),
        "{v:#?}"
    );
}

#[test]
fn a_relist_ends_what_it_does_not_list() {
    let mut l = filled();
    l.observe(&deleting(pod("f0", LOW, None, Some("n0")), true));
    l.begin_relist();
    l.observe(&pod("f1", LOW, None, Some("n0")));
    l.end_relist();
    assert!(l.pods["uid-f0"].gone.is_some());
    assert!(l.pods["uid-f1"].gone.is_none());
}
