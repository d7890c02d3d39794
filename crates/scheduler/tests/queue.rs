//! Entity queue behaviour: ordering, gates, backoff, the unschedulable pool, flush and
//! in-flight bookkeeping.

use std::sync::Arc;
use std::time::{Duration, Instant};

use phalanx_scheduler::decision::{Decision, Outcome, Requeue, RequeueMode};
use phalanx_scheduler::resources::Resources;
use phalanx_scheduler::{
    ClusterEvent, EntityKey, GateReason, GroupInfo, GroupKey, GroupPolicy, PodInfo, PodKey, SchedulerConfig,
    SchedulingQueue,
};

fn pod(name: &str, group: Option<&str>, priority: i32) -> Arc<PodInfo> {
    let mut p = PodInfo::simple("ns", name, 100);
    p.group_name = group.map(Arc::from);
    p.priority = priority;
    Arc::new(p)
}

fn gang(name: &str, min: u32) -> Arc<GroupInfo> {
    Arc::new(GroupInfo::new("ns", name, GroupPolicy::Gang { min_count: min }))
}

fn unschedulable(key: EntityKey, pods: &[&str]) -> Decision {
    let mut d = Decision::empty(key, Outcome::Unschedulable);
    d.requeue = Some(Requeue {
        pods: pods.iter().map(|p| PodKey::new("ns", p)).collect(),
        mode: RequeueMode::Unschedulable,
        short_of: Resources::default(),
    });
    d
}

fn gkey(name: &str) -> EntityKey {
    EntityKey::Group(GroupKey::pod_group("ns", name))
}

#[test]
fn backoff_formula() {
    let q = SchedulingQueue::new(&SchedulerConfig::default());
    assert_eq!(q.backoff_duration(1, 1), Duration::from_secs(1));
    assert_eq!(q.backoff_duration(3, 1), Duration::from_secs(4));
    assert_eq!(q.backoff_duration(10, 1), Duration::from_secs(10));
    // The cap grows with sqrt(group size): 10 s * sqrt(4) = 20 s.
    assert_eq!(q.backoff_duration(10, 4), Duration::from_secs(20));
    assert_eq!(q.backoff_duration(5, 4), Duration::from_secs(16));
}

#[test]
fn priority_then_timestamp_ordering_across_pods_and_groups() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    q.add_pod(pod("old-low", None, 0), t);
    q.add_group(gang("g", 1), t + Duration::from_millis(1));
    q.add_pod(pod("m", Some("g"), 0), t + Duration::from_millis(2));
    q.add_pod(pod("new-high", None, 10), t + Duration::from_millis(3));
    let order: Vec<EntityKey> =
        std::iter::from_fn(|| q.pop(t + Duration::from_secs(1)).map(|e| e.key)).collect();
    assert_eq!(
        order,
        vec![
            EntityKey::Pod(PodKey::new("ns", "new-high")),
            EntityKey::Pod(PodKey::new("ns", "old-low")),
            gkey("g")
        ]
    );
}

#[test]
fn quorum_gate_lifts_and_reports_changes() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    q.add_pod(pod("a", Some("g"), 0), t);
    assert_eq!(q.gate(&gkey("g")).unwrap().reason, GateReason::WaitingForPodGroup);
    q.add_group(gang("g", 2), t);
    let gate = q.gate(&gkey("g")).unwrap();
    assert_eq!(
        (gate.reason, gate.message.as_str()),
        (GateReason::WaitingForQuorum, "1 of 2 pods present (minCount 2)")
    );
    assert!(q.pop(t).is_none());
    // An assigned member counts toward quorum.
    q.on_event(
        ClusterEvent::AssignedPodAdded {
            pod: PodKey::new("ns", "b"),
            group: Some(GroupKey::pod_group("ns", "g")),
        },
        t,
    );
    assert!(q.gate(&gkey("g")).is_none());
    let changes = q.take_gate_changes();
    let reasons: Vec<Option<GateReason>> = changes
        .iter()
        .map(|(_, g)| g.as_ref().map(|g| g.reason))
        .collect();
    assert_eq!(
        reasons,
        vec![
            Some(GateReason::WaitingForPodGroup),
            Some(GateReason::WaitingForQuorum),
            None
        ]
    );
    let e = q.pop(t).unwrap();
    assert_eq!(e.pods.len(), 1);
}

#[test]
fn scheduling_gates_hold_a_pod() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    let mut p = PodInfo::simple("ns", "p", 100);
    p.scheduling_gates = vec!["example.com/wait".into()];
    q.add_pod(Arc::new(p.clone()), t);
    let key = EntityKey::Pod(p.key.clone());
    assert_eq!(
        q.gate(&key).unwrap().message,
        "waiting for scheduling gates: [example.com/wait]"
    );
    p.scheduling_gates.clear();
    q.update_pod(Arc::new(p), t);
    assert!(q.pop(t).is_some());
}

#[test]
fn unschedulable_pool_waits_for_event_then_backoff() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    q.add_pod(pod("p", None, 0), t);
    let e = q.pop(t).unwrap();
    q.done(&unschedulable(e.key.clone(), &["p"]), t);
    assert_eq!(q.counts().unschedulable, 1);
    assert!(
        q.pop(t + Duration::from_secs(60)).is_none(),
        "no event: stays in the pool"
    );
    q.on_event(ClusterEvent::NodeAdded, t + Duration::from_millis(100));
    // Still backing off (1 s from the failure).
    assert_eq!(q.counts().backoff, 1);
    assert!(q.pop(t + Duration::from_millis(500)).is_none());
    let e = q.pop(t + Duration::from_secs(1)).unwrap();
    assert_eq!(e.attempts, 1);
}

#[test]
fn periodic_flush_moves_old_unschedulable_entities() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    q.add_pod(pod("p", None, 0), t);
    let e = q.pop(t).unwrap();
    q.done(&unschedulable(e.key, &["p"]), t);
    assert_eq!(q.next_wakeup(), Some(t + Duration::from_secs(300)));
    assert!(q.pop(t + Duration::from_secs(299)).is_none());
    assert!(q.pop(t + Duration::from_secs(300)).is_some());
}

#[test]
fn event_during_cycle_skips_the_pool() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    q.add_pod(pod("p", None, 0), t);
    let e = q.pop(t).unwrap();
    q.on_event(
        ClusterEvent::AssignedPodDeleted {
            pod: PodKey::new("ns", "x"),
            group: None,
        },
        t,
    );
    q.done(&unschedulable(e.key, &["p"]), t);
    assert_eq!(q.counts().unschedulable, 0);
    assert_eq!(q.counts().backoff, 1);
}

/// A targeted event (here storage, which wakes only pods with volumes) that arrives while a pod is being
/// scheduled makes that pod retry after its cycle, as every other event does; a pod it does not concern parks.
#[test]
fn targeted_event_during_cycle_skips_the_pool_only_for_the_pods_it_concerns() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    let mut with_claim = PodInfo::simple("ns", "claim", 100);
    Arc::make_mut(&mut with_claim.spec)
        .volumes
        .push(phalanx_scheduler::model::PodVolume::Claim {
            name: "data".into(),
            ephemeral: false,
        });
    q.add_pod(Arc::new(with_claim), t);
    q.add_pod(pod("plain", None, 0), t);
    let a = q.pop(t).unwrap();
    let b = q.pop(t).unwrap();
    q.on_event(ClusterEvent::StorageChanged, t);
    for e in [a, b] {
        let names: Vec<&str> = e.pods.iter().map(|p| &*p.key.name).collect();
        q.done(&unschedulable(e.key.clone(), &names), t);
    }
    assert_eq!(q.counts().unschedulable, 1, "the plain pod parks");
    assert_eq!(q.counts().backoff, 1, "the pod with a claim retries");
    let next = q.pop(t + Duration::from_secs(20)).map(|e| e.key);
    assert_eq!(next, Some(EntityKey::Pod(PodKey::new("ns", "claim"))));
}

/// A standalone pod that a cycle decided to bind and that is deleted before the watch shows it bound held room as an
/// assumed pod: its deletion wakes the unschedulable entities, as an assigned pod's would.
#[test]
fn deleting_a_pod_whose_bind_was_decided_wakes_the_pool() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    let bound = pod("bound", None, 0);
    q.add_pod(bound.clone(), t);
    q.add_pod(pod("waiting", None, 0), t);
    let first = q.pop(t).unwrap();
    let mut d = Decision::empty(first.key.clone(), Outcome::Scheduled);
    d.bindings.push(phalanx_scheduler::decision::Binding {
        pod: first.pods[0].key.clone(),
        uid: "uid".into(),
        node: "n1".into(),
        volumes: Vec::new(),
        devices: vec![],
    });
    q.done(&d, t);
    let second = q.pop(t).unwrap();
    let names: Vec<&str> = second.pods.iter().map(|p| &*p.key.name).collect();
    q.done(&unschedulable(second.key.clone(), &names), t);
    assert_eq!(q.counts().unschedulable, 1);
    let decided = if &*first.pods[0].key.name == "bound" {
        bound
    } else {
        pod("waiting", None, 0)
    };
    q.delete_pod(&decided, t);
    assert_eq!(q.counts().unschedulable, 0, "the deletion freed the assumed room");
}

#[test]
fn leftovers_requeue_immediately_keeping_timestamp_and_arrivals_merge() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    q.add_group(gang("g", 1), t);
    q.add_pod(pod("a", Some("g"), 0), t);
    q.add_pod(pod("b", Some("g"), 0), t);
    let e = q.pop(t).unwrap();
    let ts = e.timestamp;
    // c arrives while the group is in flight.
    q.add_pod(pod("c", Some("g"), 0), t + Duration::from_millis(5));
    assert!(q.pop(t + Duration::from_millis(5)).is_none(), "in flight");
    let mut d = Decision::empty(e.key.clone(), Outcome::Scheduled);
    d.bindings.push(phalanx_scheduler::Binding {
        pod: PodKey::new("ns", "a"),
        uid: "u".into(),
        node: "n".into(),
        volumes: vec![],
        devices: vec![],
    });
    d.requeue = Some(Requeue {
        pods: vec![PodKey::new("ns", "b")],
        mode: RequeueMode::Immediate,
        short_of: Resources::default(),
    });
    q.done(&d, t + Duration::from_millis(10));
    let e2 = q.pop(t + Duration::from_millis(10)).unwrap();
    assert_eq!(e2.timestamp, ts);
    let names: Vec<&str> = e2.pods.iter().map(|p| &*p.key.name).collect();
    assert_eq!(names, ["b", "c"]);
    assert_eq!(q.group_member_count(&GroupKey::pod_group("ns", "g")), 3);
}

#[test]
fn deleting_the_last_pending_pod_drops_the_entity() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    let p = pod("p", None, 0);
    q.add_pod(p.clone(), t);
    q.delete_pod(&p, t);
    assert_eq!(q.counts(), Default::default());
    assert!(q.pop(t).is_none());
}

#[test]
fn error_requeue_backs_off_exponentially() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    q.add_pod(pod("p", None, 0), t);
    let mut now = t;
    for n in 1..=3u32 {
        let e = q.pop(now).unwrap();
        let mut d = Decision::empty(e.key, Outcome::Error);
        d.requeue = Some(Requeue {
            pods: vec![PodKey::new("ns", "p")],
            mode: RequeueMode::Backoff,
            short_of: Resources::default(),
        });
        q.done(&d, now);
        let wait = Duration::from_secs(1 << (n - 1));
        assert!(q.pop(now + wait - Duration::from_millis(1)).is_none());
        now += wait;
    }
    assert!(q.pop(now).is_some());
}

#[test]
fn new_member_pod_wakes_an_unschedulable_gang() {
    // Upstream's GangScheduling hint: UnscheduledPod/Add of the same group -> Queue.
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    q.add_group(gang("g", 2), t);
    q.add_pod(pod("a", Some("g"), 0), t);
    q.add_pod(pod("b", Some("g"), 0), t);
    let e = q.pop(t).expect("quorum met: the gang is ready");
    assert_eq!(e.key, gkey("g"));
    q.done(&unschedulable(e.key.clone(), &["a", "b"]), t);
    assert_eq!(q.counts().unschedulable, 1);
    assert!(
        q.pop(t + Duration::from_secs(60)).is_none(),
        "no event: stays in the pool"
    );

    let later = t + Duration::from_secs(61);
    q.add_pod(pod("c", Some("g"), 0), later);
    assert_eq!(q.counts().unschedulable, 0, "the new member woke the gang");
    let e = q
        .pop(later + Duration::from_secs(1))
        .expect("ready after backoff");
    assert_eq!(e.pods.len(), 3);
}

/// A changed `preemptionDelaySeconds` (Phalanx, issue 39) wakes the unschedulable gang, so that a shortened delay
/// applies at once instead of at the next flush; another update of the group (same delay, same quorum) does not.
#[test]
fn a_changed_preemption_delay_wakes_the_gang() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    let mut g = (*gang("g", 2)).clone();
    g.preemption_delay_seconds = Some(600);
    q.add_group(std::sync::Arc::new(g.clone()), t);
    q.add_pod(pod("a", Some("g"), 0), t);
    q.add_pod(pod("b", Some("g"), 0), t);
    let e = q.pop(t).unwrap();
    q.done(&unschedulable(e.key.clone(), &["a", "b"]), t);
    q.update_group(std::sync::Arc::new(g.clone()), t + Duration::from_secs(1));
    assert_eq!(q.counts().unschedulable, 1, "the same group again wakes nothing");
    g.preemption_delay_seconds = Some(0);
    q.update_group(std::sync::Arc::new(g), t + Duration::from_secs(2));
    assert_eq!(q.counts().unschedulable, 0, "the shortened delay woke the gang");
}

#[test]
fn updating_a_known_member_does_not_wake_the_gang() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    q.add_group(gang("g", 2), t);
    q.add_pod(pod("a", Some("g"), 0), t);
    q.add_pod(pod("b", Some("g"), 0), t);
    let e = q.pop(t).unwrap();
    q.done(&unschedulable(e.key.clone(), &["a", "b"]), t);
    q.update_pod(pod("a", Some("g"), 0), t + Duration::from_secs(5));
    assert_eq!(
        q.counts().unschedulable,
        1,
        "an update of a known pod is not a new member"
    );
}

/// Upstream's InterPodAffinity / PodTopologySpread queueing hints (`pkg/scheduler/framework/plugins/
/// interpodaffinity/plugin.go` `isSchedulableAfterPodChange`): a pod that lands anywhere may satisfy a waiting pod's
/// affinity. Before the fix only group members' arrivals woke anyone, and such a pod slept until the flush.
#[test]
fn landed_pod_wakes_a_pod_waiting_on_inter_pod_constraints() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    let mut p = PodInfo::simple("ns", "spread", 100);
    Arc::make_mut(&mut p.spec)
        .spread
        .push(phalanx_scheduler::model::SpreadConstraint {
            max_skew: 1,
            topology_key: "zone".into(),
            when: phalanx_scheduler::model::WhenUnsatisfiable::DoNotSchedule,
            selector: Default::default(),
            min_domains: None,
            honor_node_affinity: true,
            honor_node_taints: false,
        });
    let plain = pod("plain", None, 0);
    q.add_pod(Arc::new(p), t);
    q.add_pod(plain.clone(), t);
    for _ in 0..2 {
        let e = q.pop(t).unwrap();
        let names: Vec<&str> = e.pods.iter().map(|p| &*p.key.name).collect();
        q.done(&unschedulable(e.key.clone(), &names), t);
    }
    assert_eq!(q.counts().unschedulable, 2);
    q.on_event(
        ClusterEvent::AssignedPodAdded {
            pod: PodKey::new("other", "landed"),
            group: None,
        },
        t,
    );
    assert_eq!(
        q.counts().unschedulable,
        1,
        "only the pod with a spread constraint wakes"
    );
    let woken = q.pop(t + Duration::from_secs(20)).map(|e| e.key);
    assert_eq!(woken, Some(EntityKey::Pod(PodKey::new("ns", "spread"))));
}

/// Upstream's GangScheduling hint wakes a group when a member is added, not on every update of a member that was
/// already bound (a status or label change would otherwise retry the whole gang).
#[test]
fn update_of_a_bound_member_does_not_wake_its_group() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    q.add_group(gang("g", 2), t);
    q.add_pod(pod("a", Some("g"), 0), t);
    let mut b = PodInfo::simple("ns", "b", 100);
    b.group_name = Some("g".into());
    b.node_name = Some("n1".into());
    let b = Arc::new(b);
    q.update_pod(b.clone(), t);
    let e = q.pop(t).unwrap();
    q.done(&unschedulable(e.key.clone(), &["a"]), t);
    assert_eq!(q.counts().unschedulable, 1);
    let mut b2 = (*b).clone();
    std::sync::Arc::make_mut(&mut b2.labels).insert("touched".into(), "yes".into());
    q.update_pod(Arc::new(b2), t);
    assert_eq!(q.counts().unschedulable, 1, "the group stays asleep");
}

/// A failed bind (upstream `handleBindingCycleError`) backs off exponentially and keeps the pod's place: before
/// the fix the pod came back at once with a new sequence number, behind pods that arrived after it.
#[test]
fn failed_bind_backs_off_and_keeps_its_place() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    let first = pod("first", None, 0);
    q.add_pod(first.clone(), t);
    let e = q.pop(t).unwrap();
    let mut d = Decision::empty(e.key.clone(), Outcome::Scheduled);
    d.bindings.push(phalanx_scheduler::Binding {
        pod: first.key.clone(),
        uid: first.uid.clone(),
        node: "n1".into(),
        volumes: vec![],
        devices: vec![],
    });
    q.done(&d, t);
    assert!(q.pop(t).is_none());
    let later = t + Duration::from_millis(10);
    q.add_pod(pod("second", None, 0), later);
    // The bind of `first` fails: it waits out its backoff (1 s), then comes before `second`.
    q.bind_failed(first.clone(), later);
    assert_eq!(q.counts().backoff, 1);
    let e = q.pop(later).unwrap();
    assert_eq!(e.key, EntityKey::Pod(PodKey::new("ns", "second")));
    q.done(&unschedulable(e.key.clone(), &["second"]), later);
    let e = q.pop(later + Duration::from_secs(1)).unwrap();
    assert_eq!(e.key, EntityKey::Pod(first.key.clone()));
    // The second failure in a row doubles the backoff.
    let mut d = Decision::empty(e.key.clone(), Outcome::Scheduled);
    d.bindings.push(phalanx_scheduler::Binding {
        pod: first.key.clone(),
        uid: first.uid.clone(),
        node: "n1".into(),
        volumes: vec![],
        devices: vec![],
    });
    let t2 = later + Duration::from_secs(1);
    q.done(&d, t2);
    q.bind_failed(first.clone(), t2);
    assert!(
        q.pop(t2 + Duration::from_millis(1900)).is_none(),
        "still backing off after 1.9 s"
    );
    assert!(
        q.pop(t2 + Duration::from_secs(2)).is_some(),
        "2 s after the second failure"
    );
}

/// A parent chain that loops is an invalid hierarchy, a SchedulerError as upstream's `validatePodGroup` reports it,
/// not a wait: before the fix the gate said `WaitingForPodGroup` and the group showed `Unschedulable`.
#[test]
fn parent_cycle_is_an_invalid_hierarchy_not_a_wait() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    let cpg = |name: &str, parent: &str| {
        let mut c =
            phalanx_scheduler::CompositeGroupInfo::new("ns", name, phalanx_scheduler::CompositePolicy::Basic);
        c.parent = Some(GroupKey::composite("ns", parent));
        Arc::new(c)
    };
    q.add_composite_group(cpg("a", "b"), t);
    q.add_composite_group(cpg("b", "a"), t);
    let mut g = GroupInfo::new("ns", "leaf", GroupPolicy::Gang { min_count: 1 });
    g.parent = Some(GroupKey::composite("ns", "a"));
    q.add_group(Arc::new(g), t);
    q.add_pod(pod("p", Some("leaf"), 0), t);
    let gate = q.gate(&gkey("leaf")).expect("held");
    assert_eq!(gate.reason, GateReason::InvalidHierarchy, "{}", gate.message);
    assert!(gate.message.contains("cycle"), "{}", gate.message);
    assert!(q.pop(t).is_none());
}

/// k/k#142330: a Job gang with `parallelism: 3, completions: 4`. Two members Succeed and the Job creates the last
/// pod; the finished members still count toward the quorum, so the last pod passes the gate. A Failed member does
/// not count, and deleting a Succeeded pod object takes it out of the count.
#[test]
fn succeeded_members_count_toward_the_quorum_and_failed_ones_do_not() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    q.add_group(gang("g", 3), t);
    let bound = |name: &str| {
        let mut p = (*pod(name, Some("g"), 0)).clone();
        p.node_name = Some("n1".into());
        Arc::new(p)
    };
    for n in ["a", "b", "c"] {
        q.add_pod(bound(n), t);
    }
    assert_eq!(q.group_member_count(&GroupKey::pod_group("ns", "g")), 3);
    q.complete_pod(&bound("a"), t);
    q.complete_pod(&bound("b"), t);
    assert_eq!(
        q.group_member_count(&GroupKey::pod_group("ns", "g")),
        3,
        "completed members still count"
    );
    q.add_pod(pod("d", Some("g"), 0), t);
    assert!(
        q.gate(&gkey("g")).is_none(),
        "2 succeeded + 1 running + 1 pending meets minCount 3"
    );
    assert_eq!(q.pop(t).map(|e| e.key), Some(gkey("g")));

    // The same without the completions: the Failed member leaves the count and the last pod waits.
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    q.add_group(gang("g", 3), t);
    for n in ["a", "b", "c"] {
        q.add_pod(bound(n), t);
    }
    q.complete_pod(&bound("a"), t);
    q.delete_pod(&bound("b"), t); // Failed: the driver deletes it from the queue
    q.delete_pod(&bound("a"), t); // the Succeeded pod object is deleted (TTL, pod GC)
    q.add_pod(pod("d", Some("g"), 0), t);
    let gate = q.gate(&gkey("g")).expect("below quorum");
    assert_eq!(gate.message, "2 of 3 pods present (minCount 3)");
}

/// A group whose owner is being resized (the runtime sets `resizing`) holds its pending pods, even though the old
/// quorum is met, and releases them once the runtime clears it.
#[test]
fn a_group_being_resized_holds_its_pending_pods_until_cleared() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    q.add_group(gang("g", 2), t);
    for n in ["a", "b"] {
        let mut p = (*pod(n, Some("g"), 0)).clone();
        p.node_name = Some("n1".into());
        q.add_pod(Arc::new(p), t);
    }
    let mut info = (*gang("g", 2)).clone();
    info.resizing = Some("waiting for minCount to follow Deployment web".into());
    q.add_group(Arc::new(info), t);
    q.add_pod(pod("c", Some("g"), 0), t);
    let gate = q.gate(&gkey("g")).expect("held");
    assert_eq!(gate.reason, GateReason::WaitingForQuorum);
    assert_eq!(gate.message, "waiting for minCount to follow Deployment web");
    assert!(q.pop(t).is_none());
    q.add_group(gang("g", 3), t);
    assert!(
        q.gate(&gkey("g")).is_none(),
        "resized: 2 bound + 1 pending meets minCount 3"
    );
    assert_eq!(q.pop(t).map(|e| e.key), Some(gkey("g")));
}

/// A gang waiting for its ProvisioningRequest (the runtime sets `provisioning`) is held after its quorum, with its
/// own reason (not `Unschedulable`, which would make an autoscaler scale up twice), and popped, whole, once the
/// runtime clears the hold.
#[test]
fn a_gang_waiting_for_provisioning_is_held_after_its_quorum() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    let mut info = (*gang("g", 2)).clone();
    info.provisioning = Some("waiting for capacity: ProvisioningRequest ns/g-1 pending".into());
    q.add_group(Arc::new(info), t);
    q.add_pod(pod("a", Some("g"), 0), t);
    let gate = q.gate(&gkey("g")).expect("held");
    assert_eq!(
        gate.reason,
        GateReason::WaitingForQuorum,
        "the quorum comes first"
    );
    q.add_pod(pod("b", Some("g"), 0), t);
    let gate = q.gate(&gkey("g")).expect("held");
    assert_eq!(gate.reason, GateReason::WaitingForProvisioning);
    assert!(gate.message.contains("g-1"), "{}", gate.message);
    assert!(q.pop(t).is_none());
    q.add_group(gang("g", 2), t);
    assert!(q.gate(&gkey("g")).is_none(), "provisioned: released");
    assert_eq!(q.pop(t).map(|e| e.key), Some(gkey("g")));
}

/// Every pod that joins a group not created yet is announced (the runtime writes `WaitingForPodGroup` on members
/// that do not carry it), not only the first: the gate's message is the same for all, so it never changes.
#[test]
fn each_pod_of_a_missing_group_is_announced() {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    for p in ["a", "b", "c"] {
        q.add_pod(pod(p, Some("g"), 0), t);
    }
    let changes = q.take_gate_changes();
    assert_eq!(changes.len(), 3, "{changes:?}");
    assert!(changes.iter().all(|(k, g)| {
        *k == gkey("g")
            && g.as_ref()
                .is_some_and(|g| g.reason == GateReason::WaitingForPodGroup)
    }));
    // An update of a pod already there announces nothing new.
    q.update_pod(pod("a", Some("g"), 0), t);
    assert!(q.take_gate_changes().is_empty());
}

/// The sizes the driver reads on every pass of its loop are kept as counts, not scanned; they must follow every
/// move in and out of the gated state (a new gate, a changed message, a lifted gate, a group deleted under its
/// pods, the last pod gone) and the other sub-queues (debug builds also check each call against a scan).
#[test]
fn counts_follow_gates_and_sub_queues() {
    use phalanx_scheduler::QueueCounts;
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let t = Instant::now();
    let counts = |active, backoff, unschedulable, gated, in_flight| QueueCounts {
        active,
        backoff,
        unschedulable,
        gated,
        in_flight,
    };
    // Two pods of a group that does not exist yet: gated (WaitingForPodGroup), then the message changes
    // (WaitingForQuorum, 2 of 3) when the group comes: still one gated entity.
    q.add_pod(pod("a", Some("g"), 0), t);
    q.add_pod(pod("b", Some("g"), 0), t);
    assert_eq!(q.counts(), counts(0, 0, 0, 1, 0));
    q.add_group(gang("g", 3), t);
    assert_eq!(q.gate(&gkey("g")).unwrap().reason, GateReason::WaitingForQuorum);
    assert_eq!(q.counts(), counts(0, 0, 0, 1, 0));
    // A standalone pod with a scheduling gate: a second gated entity.
    let mut s = PodInfo::simple("ns", "s", 100);
    s.scheduling_gates = vec!["example.com/wait".into()];
    q.add_pod(Arc::new(s.clone()), t);
    assert_eq!(q.counts(), counts(0, 0, 0, 2, 0));
    // The quorum comes: the gang is active.
    q.add_pod(pod("c", Some("g"), 0), t);
    assert_eq!(q.counts(), counts(1, 0, 0, 1, 0));
    // The group is deleted under its pods: gated again (WaitingForPodGroup).
    q.delete_group(&GroupKey::pod_group("ns", "g"), t);
    assert_eq!(q.counts(), counts(0, 0, 0, 2, 0));
    // The gated standalone pod is deleted: its entity goes, and with it its count.
    q.delete_pod(&s, t);
    assert_eq!(q.counts(), counts(0, 0, 0, 1, 0));
    // The group is back with a quorum of 1: active, popped (in flight), found unschedulable (the pool).
    q.add_group(gang("g", 1), t);
    assert_eq!(q.counts(), counts(1, 0, 0, 0, 0));
    let e = q.pop(t).unwrap();
    assert_eq!(q.counts(), counts(0, 0, 0, 0, 1));
    q.done(&unschedulable(e.key, &["a", "b", "c"]), t);
    assert_eq!(q.counts(), counts(0, 0, 1, 0, 0));
    // A node event wakes it into backoff.
    q.on_event(ClusterEvent::NodeAdded, t);
    assert_eq!(q.counts(), counts(0, 1, 0, 0, 0));
}

fn bound_pod(name: &str, cpu_milli: i64) -> Arc<PodInfo> {
    let mut p = PodInfo::simple("ns", name, cpu_milli);
    p.node_name = Some("n1".into());
    Arc::new(p)
}

/// A gang of two 100m pods fails three times (4 s of backoff), the last time short of `short_milli` of cpu; returns
/// the queue and the time of the last failure.
fn gang_failed_three_times(short_milli: i64) -> (SchedulingQueue, Instant) {
    let mut q = SchedulingQueue::new(&SchedulerConfig::default());
    let mut t = Instant::now();
    q.add_group(gang("g", 2), t);
    q.add_pod(pod("a", Some("g"), 0), t);
    q.add_pod(pod("b", Some("g"), 0), t);
    for _ in 0..3 {
        let e = q.pop(t).expect("the gang is ready");
        let mut d = unschedulable(e.key, &["a", "b"]);
        d.requeue.as_mut().unwrap().short_of.milli_cpu = short_milli;
        // An event during the cycle sends it to backoff rather than the pool, so the loop can pop it again.
        q.on_event(ClusterEvent::NodeAdded, t);
        q.done(&d, t);
        t += Duration::from_secs(5);
    }
    t -= Duration::from_secs(5);
    assert_eq!(q.counts().backoff, 1);
    (q, t)
}

#[test]
fn a_gang_short_of_room_retries_as_soon_as_the_pods_deleted_since_cover_what_it_lacked() {
    let (mut q, t) = gang_failed_three_times(200);
    for p in ["x", "y"] {
        q.add_pod(bound_pod(p, 100), t);
    }
    let soon = t + Duration::from_millis(10);
    q.delete_pod(&bound_pod("x", 100), soon);
    assert!(
        q.pop(soon).is_none(),
        "100m freed of the 200m the gang lacked: it keeps backing off"
    );
    q.delete_pod(&bound_pod("y", 100), soon);
    let e = q
        .pop(soon)
        .expect("200m freed: the gang retries without waiting out its 4 s backoff");
    assert_eq!(e.key, gkey("g"));
    // A new failure starts a new account: what was freed before it does not count.
    let mut d = unschedulable(e.key, &["a", "b"]);
    d.requeue.as_mut().unwrap().short_of.milli_cpu = 200;
    q.done(&d, soon);
    q.add_pod(bound_pod("z", 100), soon);
    q.delete_pod(&bound_pod("z", 100), soon);
    assert!(q.pop(soon).is_none());
}

#[test]
fn a_gang_that_lacked_one_pod_of_room_retries_after_one_deletion() {
    // One member was placed, the other rejected: the gang lacked 100m, not its whole 200m.
    let (mut q, t) = gang_failed_three_times(100);
    q.add_pod(bound_pod("x", 100), t);
    let soon = t + Duration::from_millis(10);
    q.delete_pod(&bound_pod("x", 100), soon);
    assert_eq!(q.pop(soon).map(|e| e.key), Some(gkey("g")));
}

#[test]
fn a_gang_rejected_for_other_reasons_waits_out_its_backoff_whatever_is_deleted() {
    let (mut q, t) = gang_failed_three_times(0);
    q.add_pod(bound_pod("big", 10_000), t);
    let soon = t + Duration::from_millis(10);
    q.delete_pod(&bound_pod("big", 10_000), soon);
    assert!(q.pop(soon).is_none());
    assert!(
        q.pop(t + Duration::from_secs(4)).is_some(),
        "its backoff expires as before"
    );
}
