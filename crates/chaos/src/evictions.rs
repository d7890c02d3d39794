//! I7, one preemption per preemptor: no pod is evicted except for a higher-priority pod that waits with a
//! nomination and is not bound yet, and no preemptor's victims are evicted twice. This module keeps the pod history
//! I7 is decided from (fed by the checker's pod watch, [`crate::checker`]) and decides it over the pod deletions
//! of the audit log.
//!
//! What is observed. The checker's pod watch is one stream over all pods, delivered in resourceVersion order, so
//! the order in which it observes versions is the order in which they were written: a nomination written before
//! a victim's deletion (the driver waits for the nomination's answer before it deletes, `crates/driver/src/runtime/cycle.rs` and `crates/driver/src/dispatcher/preempt.rs`)
//! is observed before it. The [`Ledger`] numbers every observation, notes when it was made, and keeps per pod
//! UID: priority, PodGroup, node, when it was first seen bound, every change of `status.nominatedNodeName`, its
//! first version with a `deletionTimestamp` (and whether that carried `DisruptionTarget=True/PreemptionByScheduler`)
//! and when it went. The audit log says who deleted which pod and when: Phalanx deletes pods to preempt
//! (`crates/driver/src/evict.rs`), and to restart a gang whose `recoveryPolicy` is `RestartGroup`
//! (`crates/controllers/src/pod_group.rs`, marked `DisruptionTarget=True/RestartedByRecoveryPolicy` first). Every
//! other deletion request of a replica is an eviction; the restarts are judged by I8 ([`crate::member_kill`]).
//!
//! The rules, for every pod V a replica deleted (first seen deleting at observation d):
//! - (a) marked: V's first deleting version carried `DisruptionTarget=True` with reason `PreemptionByScheduler`
//!   (the victim is marked before it is deleted, upstream `prepareCandidate` in
//!   `pkg/scheduler/framework/preemption/preemption.go`);
//! - (b) for a waiting preemptor: at d some pod of higher priority than V had a nomination and was not bound;
//! - (c) one plan at a time: V's preemptors are the waiting pods of (b) nominated to V's node (a PodGroup's pods
//!   count as one preemptor). Two evictions for one preemptor belong to different plans when different replicas
//!   sent them or a nomination of that preemptor changed between them (a plan writes all its nominations before
//!   it deletes any victim). While a victim W of a plan is still terminating, no later plan of the same preemptor
//!   may evict: neither another pod V (a second set of victims) nor W again (its victims evicted twice). Upstream
//!   refuses a new preemption while a victim on the nominated node terminates (`PodEligibleToPreemptOthers`, the
//!   same file).
//!
//! Limits: a pod deleted and gone while the checker's watch was down (an API server outage) has no deleting
//! version and is skipped; victims of a `disruptionMode: all` unit on nodes where no preemptor is nominated satisfy
//! (b) through any waiting preemptor and are not attributed for (c); a repeated deletion by the same replica counts
//! as a new plan only when the nomination change was observed before the request arrived (else it passes). A
//! deletion of unknown outcome (a 5xx or no response, as a SIGKILLed replica's last requests are audited) counts
//! only if it arrived at most `UNKNOWN_OUTCOME_SLACK` before the pod's deletion took effect (its
//! `deletionTimestamp` less its grace period): a request the server dropped leaves the pod running, and the
//! next leader's first eviction of it is not a second one.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use crate::audit::AuditEvent;
use crate::invariants::{Invariant, Violation};

/// The condition type and reason a preempting scheduler puts on its victims (upstream
/// `pkg/apis/core/types.go` `DisruptionTarget`, `PodReasonPreemptionByScheduler`).
const DISRUPTION_TARGET: &str = "DisruptionTarget";
const PREEMPTION_BY_SCHEDULER: &str = "PreemptionByScheduler";
/// The reason on the members a `recoveryPolicy` `RestartGroup` deletes (Phalanx's own).
const RESTARTED_BY_RECOVERY_POLICY: &str = "RestartedByRecoveryPolicy";

/// The first version of a pod with a `deletionTimestamp`.
#[derive(Debug, Clone, Copy)]
struct Deleting {
    /// Observation number.
    at: u64,
    /// It carried `DisruptionTarget=True/PreemptionByScheduler`.
    marked: bool,
    /// It carried `DisruptionTarget=True/RestartedByRecoveryPolicy`: a gang restart, not an eviction.
    restarted: bool,
    /// When the API server took the deletion in: `deletionTimestamp - deletionGracePeriodSeconds` (whole seconds,
    /// as `metav1.Time` serializes; upstream `BeforeDelete` in `staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go`
    /// sets the timestamp to the time of the request plus the grace period).
    effect: Option<Timestamp>,
}

/// How long before the deletion took effect a request of unknown outcome (a 5xx or no response: its client was
/// SIGKILLed, or the API server went down) may have arrived and still be the one that deleted the pod. An earlier
/// one evicted nothing: the server dropped it (a disconnected client's request is cancelled) and a later request
/// deleted the pod. Generous against a slow server: the processing between a request's arrival and `BeforeDelete`
/// is milliseconds, and the repeat this rules out comes seconds later (a failover).
const UNKNOWN_OUTCOME_SLACK: std::time::Duration = std::time::Duration::from_secs(5);

/// When the deletion of `pod` took effect, from its first deleting version (see [`Deleting::effect`]).
fn deletion_effect(pod: &Pod) -> Option<Timestamp> {
    let at = pod.metadata.deletion_timestamp.as_ref()?.0;
    let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
    at.checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(grace))
        .ok()
}

/// What the ledger knows of one pod UID.
#[derive(Debug, Clone)]
struct History {
    namespace: String,
    name: String,
    priority: i32,
    group: Option<String>,
    node: Option<String>,
    /// Observation at which it was first seen bound.
    bound: Option<u64>,
    /// Every change of `status.nominatedNodeName` (observation, new value; `None` = cleared).
    nominations: Vec<(u64, Option<String>)>,
    deleting: Option<Deleting>,
    /// Observation at which it was seen gone.
    gone: Option<u64>,
}

impl History {
    /// The nomination in force just before observation `at`.
    fn nominated_at(&self, at: u64) -> Option<&str> {
        self.nominations
            .iter()
            .rev()
            .find(|(seq, _)| *seq < at)
            .and_then(|(_, n)| n.as_deref())
    }

    /// Pending at `at`: not bound before it, not gone before it.
    fn waiting_at(&self, at: u64) -> bool {
        self.bound.is_none_or(|b| b > at) && self.gone.is_none_or(|g| g > at)
    }

    /// The preemptor it belongs to: its PodGroup, or itself.
    fn entity(&self) -> String {
        match &self.group {
            Some(g) => format!("PodGroup {}/{g}", self.namespace),
            None => format!("pod {}/{}", self.namespace, self.name),
        }
    }
}

/// One eviction request: a deletion of a pod by a replica, as the audit log and the watch tell it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The replica that sent the request.
    pub user: String,
    /// When the request arrived (`requestReceivedTimestamp`).
    pub at: Timestamp,
    /// The node the pod was bound to.
    pub node: Option<String>,
    /// An earlier request had deleted the pod already (it was Terminating): the pod is evicted again.
    pub repeat: bool,
}

/// A pod deleted by replicas: its history and the requests (in arrival order; the first one deleted it).
struct Victim<'a> {
    uid: &'a str,
    history: &'a History,
    deleting: Deleting,
    requests: Vec<Eviction>,
}

/// Whether a request that arrived at `received` came more than [`UNKNOWN_OUTCOME_SLACK`] before `effect`.
fn arrived_long_before(received: Timestamp, effect: Timestamp) -> bool {
    effect
        .duration_since(received)
        .try_into()
        .is_ok_and(|d: std::time::Duration| d > UNKNOWN_OUTCOME_SLACK)
}

/// The pod history I7 is decided from; see the module documentation.
#[derive(Debug, Default)]
pub struct Ledger {
    seq: u64,
    /// When each observation was made (index: observation number - 1).
    times: Vec<Timestamp>,
    pods: HashMap<String, History>,
    /// UIDs listed by the relist in progress.
    relist: Option<HashSet<String>>,
}

fn disrupted_for(pod: &Pod, reason: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == DISRUPTION_TARGET && c.status == "True" && c.reason.as_deref() == Some(reason)
            })
        })
}

fn marked(pod: &Pod) -> bool {
    disrupted_for(pod, PREEMPTION_BY_SCHEDULER)
}

impl Ledger {
    /// A new observation number.
    fn tick(&mut self) -> u64 {
        self.seq += 1;
        self.times.push(Timestamp::now());
        self.seq
    }

    /// How many observations were made by `t` (the number of the last one, 0 for none).
    fn seq_at(&self, t: Timestamp) -> u64 {
        self.times.partition_point(|x| *x <= t) as u64
    }

    /// When observation `seq` was made.
    fn time_of(&self, seq: u64) -> Option<Timestamp> {
        self.times
            .get(usize::try_from(seq).ok()?.checked_sub(1)?)
            .copied()
    }

    /// Records one version of a pod (a watch event or a relisted object).
    pub fn observe(&mut self, pod: &Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let seq = self.tick();
        if let Some(seen) = self.relist.as_mut() {
            seen.insert(uid.clone());
        }
        let spec = pod.spec.as_ref();
        let h = self.pods.entry(uid).or_insert_with(|| History {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            priority: 0,
            group: None,
            node: None,
            bound: None,
            nominations: Vec::new(),
            deleting: None,
            gone: None,
        });
        h.priority = spec.and_then(|s| s.priority).unwrap_or(0);
        h.group = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(phalanx_api::labels::POD_GROUP))
            .cloned();
        if let Some(n) = spec.and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty()) {
            h.bound.get_or_insert(seq);
            h.node = Some(n);
        }
        let nominated = pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.clone())
            .filter(|n| !n.is_empty());
        if h.nominations
            .last()
            .map_or(nominated.is_some(), |(_, n)| *n != nominated)
        {
            h.nominations.push((seq, nominated));
        }
        if pod.metadata.deletion_timestamp.is_some() && h.deleting.is_none() {
            h.deleting = Some(Deleting {
                at: seq,
                marked: marked(pod),
                restarted: disrupted_for(pod, RESTARTED_BY_RECOVERY_POLICY),
                effect: deletion_effect(pod),
            });
        }
    }

    /// Records that a pod is gone (its watch Delete event, which carries its last state).
    pub fn gone(&mut self, pod: &Pod) {
        self.observe(pod);
        let seq = self.seq;
        if let Some(h) = pod.metadata.uid.as_deref().and_then(|u| self.pods.get_mut(u)) {
            // Deleted at once (no finalizer, grace period 0): the Delete event is its only deleting version.
            h.deleting.get_or_insert(Deleting {
                at: seq,
                marked: marked(pod),
                restarted: disrupted_for(pod, RESTARTED_BY_RECOVERY_POLICY),
                effect: deletion_effect(pod),
            });
            h.gone.get_or_insert(seq);
        }
    }

    /// A relist starts: the pods it does not list are gone once it ends.
    pub fn begin_relist(&mut self) {
        self.relist = Some(HashSet::new());
    }

    /// The relist is complete.
    pub fn end_relist(&mut self) {
        let Some(seen) = self.relist.take() else { return };
        let seq = self.tick();
        for (uid, h) in &mut self.pods {
            if !seen.contains(uid) {
                h.gone.get_or_insert(seq);
            }
        }
    }

    /// The UID an audited deletion of `namespace/name` took effect on: the pod of that name seen deleting closest
    /// to the request's arrival (names are unique within a run, so there is normally one).
    fn resolve(&self, e: &AuditEvent) -> Option<(&str, &History, Deleting)> {
        self.pods
            .iter()
            .filter(|(_, h)| h.namespace == e.namespace && h.name == e.name)
            .filter_map(|(u, h)| Some((u.as_str(), h, h.deleting?)))
            .min_by_key(|(_, _, d)| {
                self.time_of(d.at)
                    .map_or(i128::MAX, |t| t.duration_since(e.received).as_millis().abs())
            })
    }

    /// The pods deleted by users for which `is_replica` holds, from `events` (audit events; a request refused
    /// with a 4xx, one the watch never saw take effect, or one of unknown outcome that arrived long before the
    /// deletion took effect evicted nothing), in the order the watch saw them go Terminating.
    fn victims<'a>(&'a self, events: &[AuditEvent], is_replica: impl Fn(&str) -> bool) -> Vec<Victim<'a>> {
        let mut by_uid: BTreeMap<&str, Victim<'a>> = BTreeMap::new();
        let mut deletes: Vec<&AuditEvent> = events
            .iter()
            .filter(|e| {
                e.verb == "delete"
                    && e.resource == "pods"
                    && e.subresource.is_empty()
                    && is_replica(&e.user)
                    // A SIGKILLed client's request is audited with 504 even when it took effect.
                    && (e.accepted() || e.code >= 500 || e.code == 0)
            })
            .collect();
        deletes.sort_by_key(|e| e.received);
        for e in deletes {
            let Some((uid, history, deleting)) = self.resolve(e) else {
                continue;
            };
            if !e.accepted()
                && deleting
                    .effect
                    .is_some_and(|t| arrived_long_before(e.received, t))
            {
                // Of unknown outcome and long before the pod's deletion took effect: it deleted nothing.
                continue;
            }
            let v = by_uid.entry(uid).or_insert_with(|| Victim {
                uid,
                history,
                deleting,
                requests: Vec::new(),
            });
            let repeat = !v.requests.is_empty();
            v.requests.push(Eviction {
                namespace: history.namespace.clone(),
                name: history.name.clone(),
                user: e.user.clone(),
                at: e.received,
                node: history.node.clone(),
                repeat,
            });
        }
        let mut out: Vec<Victim<'a>> = by_uid.into_values().collect();
        out.sort_by_key(|v| v.deleting.at);
        out
    }

    /// Every eviction request in `events` by users for which `is_replica` holds (see [`Ledger::check`]), in
    /// arrival order; a pod evicted again while Terminating appears once more, as a `repeat`.
    pub fn evictions(&self, events: &[AuditEvent], is_replica: impl Fn(&str) -> bool) -> Vec<Eviction> {
        let mut out: Vec<Eviction> = self
            .victims(events, is_replica)
            .into_iter()
            .flat_map(|v| v.requests)
            .collect();
        out.sort_by_key(|e| e.at);
        out
    }

    /// Every `status.nominatedNodeName` pod `namespace/name` was seen with, in order (`-`: cleared), for evidence.
    pub fn nominations_of(&self, namespace: &str, name: &str) -> Vec<String> {
        self.pods
            .values()
            .filter(|h| h.namespace == namespace && h.name == name)
            .flat_map(|h| h.nominations.iter())
            .map(|(_, n)| n.clone().unwrap_or_else(|| "-".into()))
            .collect()
    }

    /// Whether a pod of preemptor `entity` had its nomination changed by an observation in `(from, to)`.
    fn nomination_changed(&self, entity: &str, from: u64, to: u64) -> bool {
        self.pods
            .values()
            .any(|p| p.entity() == entity && p.nominations.iter().any(|(seq, _)| *seq > from && *seq < to))
    }

    /// Whether some pod of preemptor `entity` still waited (unbound, not gone) at observation `at`.
    fn entity_waiting(&self, entity: &str, at: u64) -> bool {
        self.pods
            .values()
            .any(|p| p.entity() == entity && p.waiting_at(at))
    }

    /// The preemptors V was evicted for: the waiting higher-priority pods nominated to V's node at its deletion.
    /// `None` when no higher-priority pod waited with a nomination anywhere (rule (b)).
    fn preemptors_of(&self, v: &Victim<'_>) -> Option<BTreeSet<String>> {
        let d = v.deleting.at;
        let waiting: Vec<(&str, &History)> = self
            .pods
            .iter()
            .filter(|(u, p)| *u != v.uid && p.priority > v.history.priority && p.waiting_at(d))
            .filter_map(|(_, p)| Some((p.nominated_at(d)?, p)))
            .collect();
        if waiting.is_empty() {
            return None;
        }
        Some(
            waiting
                .iter()
                .filter(|(node, _)| v.history.node.as_deref() == Some(*node))
                .map(|(_, p)| p.entity())
                .collect(),
        )
    }

    /// I7 over the pod deletions in `events` (audit events) by users for which `is_replica` holds: rules (a), (b)
    /// and (c) of the module documentation, at most one violation per rule and request.
    pub fn check(&self, events: &[AuditEvent], is_replica: impl Fn(&str) -> bool) -> Vec<Violation> {
        let victims = self.victims(events, is_replica);
        let mut out = Vec::new();
        let mut push = |e: &Eviction, detail: String| {
            out.push(Violation {
                invariant: Invariant::SinglePreemption,
                at: e.at,
                object: Some((e.namespace.clone(), e.name.clone())),
                detail,
            });
        };
        let what = |v: &Victim<'_>, e: &Eviction| {
            format!(
                "pod {}/{} (priority {}, on {}) {} by {} at {}",
                e.namespace,
                e.name,
                v.history.priority,
                e.node.as_deref().unwrap_or("no node"),
                if e.repeat { "deleted again" } else { "deleted" },
                e.user,
                e.at
            )
        };
        // Per preemptor, the victims attributed to it so far (indexes into `victims`).
        let mut by_preemptor: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, v) in victims.iter().enumerate() {
            if v.deleting.restarted {
                continue;
            }
            let (d, first) = (v.deleting.at, &v.requests[0]);
            if !v.deleting.marked {
                push(
                    first,
                    format!(
                        "{} without {DISRUPTION_TARGET}=True/{PREEMPTION_BY_SCHEDULER}",
                        what(v, first)
                    ),
                );
            }
            let Some(preemptors) = self.preemptors_of(v) else {
                push(
                    first,
                    format!(
                        "{} while no pod of higher priority waited with a nomination",
                        what(v, first)
                    ),
                );
                continue;
            };
            // A second set of victims: V, of a later plan, while an earlier victim W of the preemptor terminates.
            let mut second: Option<String> = None;
            for p in &preemptors {
                let earlier = by_preemptor.entry(p.clone()).or_default();
                for &j in earlier.iter() {
                    let w = &victims[j];
                    let terminating = w.history.gone.is_none_or(|g| g > d);
                    let other_plan =
                        w.requests[0].user != first.user || self.nomination_changed(p, w.deleting.at, d);
                    if terminating && other_plan && second.is_none() {
                        second = Some(format!(
                            "{} for {p} while {}/{}, evicted for it by an earlier plan ({} at {}), was still \
                             terminating: a second set of victims for one preemptor",
                            what(v, first),
                            w.history.namespace,
                            w.history.name,
                            w.requests[0].user,
                            w.requests[0].at
                        ));
                    }
                }
                earlier.push(i);
            }
            if let Some(detail) = second {
                push(first, detail);
            }
            // The same victims again: V deleted once more by a later plan of a preemptor that still waits.
            for r in &v.requests[1..] {
                let at = self.seq_at(r.at);
                let terminating = v.history.gone.is_none_or(|g| g > at);
                let again = preemptors.iter().find(|p| {
                    self.entity_waiting(p, at)
                        && (r.user != first.user || self.nomination_changed(p, d, at + 1))
                });
                if let (true, Some(p)) = (terminating, again) {
                    push(
                        r,
                        format!(
                            "{} for {p}, which still waited, while it was still terminating from its eviction by {} \
                             at {}: a plan's victims evicted twice",
                            what(v, r),
                            first.user,
                            first.at
                        ),
                    );
                }
            }
        }
        out
    }
}

#[cfg(test)]
#[path = "evictions_tests.rs"]
mod tests;
