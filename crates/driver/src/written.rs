//! The `PodScheduled=False` conditions this scheduler wrote that the watch has not brought back yet.
//!
//! Why: a pod's store copy learns of our own condition write only when the watch delivers the patched pod. A second
//! decision taken before then (the next member of a gang arriving a moment after the first was told it waits for
//! quorum) would read no condition, write the pod again and publish a second event for the same wait. Every
//! `PodScheduled=False` write goes through [`crate::StatusWriter::pod_unschedulable`], which records it here; the
//! record is what the API server holds for that pod until the store shows the same condition (then the record is
//! dropped, so it costs memory only while a write is in transit) or the pod is deleted. kube-scheduler reads the
//! informer's copy alone (`updatePod`, `pkg/scheduler/schedule_one.go`) and so writes again in that window.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use phalanx_scheduler::PodKey;
use phalanx_store::PodRecord;

/// A pod's `PodScheduled=False` condition: `reason`, `message` and `lastTransitionTime`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Unschedulable {
    /// `reason` (`Unschedulable`, `WaitingForQuorum`, ...).
    pub(crate) reason: String,
    /// `message`.
    pub(crate) message: String,
    /// `lastTransitionTime`, when known.
    pub(crate) since: Option<Time>,
}

struct Written {
    uid: String,
    condition: Unschedulable,
}

/// Our writes not yet seen in the store, per pod (see the module docs). Cheap to clone; the clones share the map.
#[derive(Clone, Default)]
pub(crate) struct WrittenConditions {
    by_pod: Arc<Mutex<HashMap<PodKey, Written>>>,
}

impl WrittenConditions {
    /// The pod's `PodScheduled=False` condition as the API server has it: our last write to this pod (same uid)
    /// not yet in the store, else the store copy's condition; `None` when it has no such condition.
    pub(crate) fn current(&self, pod: &PodRecord) -> Option<Unschedulable> {
        let by_pod = self.by_pod.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(w) = by_pod.get(pod.key()).filter(|w| w.uid == pod.uid()) {
            return Some(w.condition.clone());
        }
        drop(by_pod);
        let c = pod.condition("PodScheduled").filter(|c| c.status == "False")?;
        Some(Unschedulable {
            reason: c.reason.as_deref().unwrap_or_default().to_owned(),
            message: c.message.as_deref().unwrap_or_default().to_owned(),
            since: c.last_transition_time.clone(),
        })
    }

    /// Records a write the API server accepted for `pod`.
    pub(crate) fn record(&self, pod: &PodRecord, condition: Unschedulable) {
        self.by_pod.lock().unwrap_or_else(PoisonError::into_inner).insert(
            pod.key().clone(),
            Written {
                uid: pod.uid().to_owned(),
                condition,
            },
        );
    }

    /// Called with every store copy of a pod the watch brings (`None`: deleted): drops the record once the copy
    /// shows the write (or a binding, or another pod under the name), so the store is the truth again.
    pub(crate) fn observe(&self, key: &PodKey, pod: Option<&PodRecord>) {
        let mut by_pod = self.by_pod.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(w) = by_pod.get(key) else { return };
        let caught_up = match pod {
            None => true,
            Some(p) if p.uid() != w.uid || p.node_name().is_some() || p.is_terminal() => true,
            Some(p) => p.condition("PodScheduled").is_some_and(|c| {
                c.status == "False"
                    && c.reason.as_deref() == Some(w.condition.reason.as_str())
                    && c.message.as_deref() == Some(w.condition.message.as_str())
            }),
        };
        if caught_up {
            by_pod.remove(key);
        }
    }

    /// Records in transit (for tests and the memory bound).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.by_pod.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(uid: &str, node: Option<&str>, scheduled: Option<(&str, &str)>) -> PodRecord {
        PodRecord::from_pod(&Pod {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("p1".into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(Into::into),
                ..Default::default()
            }),
            status: Some(PodStatus {
                conditions: scheduled.map(|(r, m)| {
                    vec![PodCondition {
                        type_: "PodScheduled".into(),
                        status: "False".into(),
                        reason: Some(r.into()),
                        message: Some(m.into()),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
        })
    }

    fn wait(message: &str) -> Unschedulable {
        Unschedulable {
            reason: "WaitingForQuorum".into(),
            message: message.into(),
            since: None,
        }
    }

    #[test]
    fn our_write_counts_until_the_store_shows_it() {
        let w = WrittenConditions::default();
        let stale = pod("u1", None, None);
        assert_eq!(w.current(&stale), None, "nothing written, nothing in the store");
        w.record(&stale, wait("1 of 3"));
        // The watch has not brought the write back: the stale copy is answered with our write.
        assert_eq!(w.current(&stale).map(|c| c.message), Some("1 of 3".into()));
        // An older copy (another message) does not drop the record.
        w.observe(
            stale.key(),
            Some(&pod("u1", None, Some(("Unschedulable", "old")))),
        );
        assert_eq!(w.len(), 1);
        // The copy that shows the write does; the store answers from then on.
        let seen = pod("u1", None, Some(("WaitingForQuorum", "1 of 3")));
        w.observe(seen.key(), Some(&seen));
        assert_eq!(w.len(), 0);
        assert_eq!(w.current(&seen).map(|c| c.message), Some("1 of 3".into()));
    }

    #[test]
    fn another_pod_under_the_name_a_binding_or_a_deletion_ends_the_record() {
        let w = WrittenConditions::default();
        let p = pod("u1", None, None);
        w.record(&p, wait("1 of 3"));
        let again = pod("u2", None, None);
        assert_eq!(w.current(&again), None, "a recreated pod inherits nothing");
        w.observe(again.key(), Some(&again));
        assert_eq!(w.len(), 0);
        w.record(&p, wait("1 of 3"));
        w.observe(p.key(), Some(&pod("u1", Some("n1"), None)));
        assert_eq!(w.len(), 0, "bound");
        w.record(&p, wait("1 of 3"));
        w.observe(p.key(), None);
        assert_eq!(w.len(), 0, "deleted");
    }
}
