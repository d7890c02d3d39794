//! Writing what a scheduling attempt found: pod `PodScheduled` conditions, group conditions, and events.
//!
//! Follows kube-scheduler: `updatePod` in `pkg/scheduler/schedule_one.go` (strategic-merge patch of
//! `PodScheduled=False` on pods/status, skipped when nothing changed), `updatePodGroupCondition` in
//! `schedule_one_podgroup.go` (the group condition is True once and never goes back, `observedGeneration` is set, no
//! call when unchanged, `lastTransitionTime` changes only when the status flips), and the `Scheduled` /
//! `FailedScheduling` events. Group conditions are written by server-side apply with field manager
//! `phalanx-scheduler` so the scheduler owns only its condition entry (conditions are a map list keyed by `type`).
//! Every writer checks the leader flag first: only the lease holder writes.

use std::sync::Arc;

use k8s_openapi::{
    api::core::v1::{ObjectReference, Pod, PodCondition},
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::events::{Event, EventType, Reporter},
};
use phalanx_api::conditions::reasons;
use phalanx_scheduler::PodKey;
use phalanx_store::{Leader, NoteRecorders, PodRecord};
use serde::de::DeserializeOwned;
use serde_json::json;

/// The group condition types the scheduler owns (field manager [`FIELD_MANAGER`]).
pub const SCHEDULER_CONDITIONS: [&str; 3] = [
    phalanx_api::conditions::POD_GROUP_INITIALLY_SCHEDULED,
    phalanx_api::conditions::COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED,
    phalanx_api::conditions::DISRUPTION_TARGET,
];

/// Whether an event is one an object gets only once (its recorder is then not kept; see
/// [`NoteRecorders::one_shot`]).
#[derive(Clone, Copy)]
enum Once {
    Yes,
    No,
}

/// Field manager of every write the scheduler makes.
pub use phalanx_api::field_managers::SCHEDULER as FIELD_MANAGER;

/// A group condition the scheduler wants written, for the group object with `uid` (the dispatcher records it,
/// [`StatusWriter::group_conditions`] writes it).
#[derive(Clone, Debug)]
pub(crate) struct WantedCondition {
    pub(crate) uid: String,
    pub(crate) type_: &'static str,
    pub(crate) status: bool,
    pub(crate) reason: &'static str,
    pub(crate) message: String,
    /// When the driver decided it (a True left to the PodGroup controller is written by the driver after all once
    /// it is older than a catch-up interval and still not shown; see `catch_up_delegated`).
    pub(crate) at: std::time::Instant,
    /// A True left to the PodGroup controller (`SchedulerOptions::initially_scheduled_by_controllers`): a write
    /// queued for the group before it was decided does not send it while it is younger than a catch-up interval.
    pub(crate) delegated: bool,
}

/// The writes a scheduling attempt makes, gated on leadership.
#[derive(Clone)]
pub struct StatusWriter {
    client: Client,
    recorders: Arc<NoteRecorders>,
    leader: Leader,
    /// `PodScheduled=False` writes the watch has not brought back yet.
    written: crate::written::WrittenConditions,
}

impl StatusWriter {
    /// A writer that publishes events as `reporter` and writes only while `leader` is true.
    pub fn new(client: Client, reporter: Reporter, leader: Leader) -> Self {
        Self {
            recorders: Arc::new(NoteRecorders::new(client.clone(), reporter)),
            client,
            leader,
            written: Default::default(),
        }
    }

    /// True while this replica holds the Lease and its fencing deadline has not passed (see `phalanx_store::Leader`).
    pub fn is_leader(&self) -> bool {
        self.leader.is_leader()
    }

    /// Sets `PodScheduled=False` with `reason`/`message` on the pod unless it already says exactly that, as far as
    /// this writer knows ([`StatusWriter::unschedulable`]: its own writes still in transit count). Returns whether
    /// a patch was sent. With `at`, the pod's `resourceVersion` the caller decided on is a precondition: the API
    /// server answers 409 when the pod changed since (a binding that landed first, whose `PodScheduled=True` this
    /// write would otherwise turn back to False).
    pub async fn pod_unschedulable(
        &self,
        pod: &PodRecord,
        reason: &str,
        message: &str,
        at: Option<&str>,
    ) -> Result<bool, kube::Error> {
        let current = self.written.current(pod);
        if current
            .as_ref()
            .is_some_and(|c| c.reason == reason && c.message == message)
        {
            return Ok(false);
        }
        if !self.is_leader() {
            return Ok(false);
        }
        let ltt = current.and_then(|c| c.since).unwrap_or(Time(Timestamp::now()));
        let cond = PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_transition_time: Some(ltt.clone()),
            ..Default::default()
        };
        let api: Api<Pod> = Api::namespaced(self.client.clone(), pod.namespace());
        let patch = match at {
            Some(rv) => json!({ "metadata": { "resourceVersion": rv }, "status": { "conditions": [cond] } }),
            None => json!({ "status": { "conditions": [cond] } }),
        };
        api.patch_status(pod.name(), &PatchParams::default(), &Patch::Strategic(patch))
            .await?;
        self.written.record(
            pod,
            crate::written::Unschedulable {
                reason: reason.to_owned(),
                message: message.to_owned(),
                since: Some(ltt),
            },
        );
        Ok(true)
    }

    /// The pod as the API server has it now, read past the cache: its `resourceVersion` while it is the same pod
    /// (`pod`'s uid), unbound and not `PodScheduled=True`; `None` when it is gone, recreated, bound or scheduled.
    ///
    /// # Errors
    /// The read failed (not a 404).
    pub(crate) async fn pod_still_pending(&self, pod: &PodRecord) -> Result<Option<String>, kube::Error> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), pod.namespace());
        let Some(now) = api.get_opt(pod.name()).await? else {
            return Ok(None);
        };
        let same = now.metadata.uid.as_deref() == Some(pod.uid());
        let bound = now.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
        let scheduled = now
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "PodScheduled" && c.status == "True"));
        Ok((same && !bound && !scheduled)
            .then_some(now.metadata.resource_version)
            .flatten())
    }

    /// The pod's `PodScheduled=False` condition as the API server has it: this writer's last write to it while the
    /// watch has not brought that write back, else the store copy's (see `crate::written`).
    pub(crate) fn unschedulable(&self, pod: &PodRecord) -> Option<crate::written::Unschedulable> {
        self.written.current(pod)
    }

    /// Tells the writer the store's new copy of a pod (`None`: deleted), so a write it shows is no longer tracked.
    pub(crate) fn observe_pod(&self, key: &PodKey, pod: Option<&PodRecord>) {
        self.written.observe(key, pod);
    }

    /// Emits the `Scheduled` event kube-scheduler emits after a successful bind.
    pub async fn event_scheduled(&self, pod: &PodRecord, node: &str) {
        let note = format!(
            "Successfully assigned {}/{} to {}",
            pod.namespace(),
            pod.name(),
            node
        );
        self.publish(
            &pod.object_ref(),
            Once::Yes,
            EventType::Normal,
            "Scheduled",
            "Binding",
            note,
        )
        .await;
    }

    /// Emits the event for a pod that is not placed. `pod_reason` is the reason of its `PodScheduled=False`
    /// condition: `Unschedulable` and `SchedulerError` give a Warning `FailedScheduling`, as kube-scheduler emits;
    /// a waiting reason (`WaitingForPodGroup`, `WaitingForQuorum`, `SchedulingGated`; upstream emits nothing
    /// there) gives a Normal event with that reason.
    /// Waiting is not a failure, so it is not reported as one.
    pub async fn event_failed(&self, pod: &PodRecord, pod_reason: &str, message: &str) {
        let (type_, reason) = match pod_reason {
            reasons::UNSCHEDULABLE | reasons::SCHEDULER_ERROR => (EventType::Warning, "FailedScheduling"),
            waiting => (EventType::Normal, waiting),
        };
        self.event(pod, type_, reason, "Scheduling", message.to_owned())
            .await;
    }

    /// Emits the `Preempted` event on a preemption victim (upstream `prepareCandidate`: Normal, reason `Preempted`,
    /// action `Preempting`).
    pub async fn event_preempted(&self, victim: &PodRecord, note: String) {
        self.event(victim, EventType::Normal, "Preempted", "Preempting", note)
            .await;
    }

    /// Emits the Warning `FailedPreemption` on `object` (the preemptor pod, or its group object): a victim of its
    /// plan could not be evicted, so the preemptor is retried rather than left waiting for a deletion that never
    /// comes (upstream logs the error and activates the preemptor, `pkg/scheduler/framework/preemption/executor.go`).
    pub async fn event_preemption_failed(&self, object: &ObjectReference, note: String) {
        self.publish(
            object,
            Once::No,
            EventType::Warning,
            "FailedPreemption",
            "Preempting",
            note,
        )
        .await;
    }

    /// Sets `status.nominatedNodeName` of `pod` (with `uid`) to `node` (`None` clears it), as upstream's
    /// `updatePod` does for a preemptor that waits for its victims (`pkg/scheduler/schedule_one.go`). The patch is
    /// sent as it is: the caller orders the writes of one pod and decides whether one is needed, because the cached
    /// pod may not show an earlier write yet. The UID in the patch makes the API server refuse it for a pod
    /// recreated under the name. Returns `Ok(false)` when this replica does not lead (nothing sent).
    ///
    /// # Errors
    /// The API call's error (404 when the pod is gone, 409 when it was replaced).
    pub async fn nominate(&self, pod: &PodKey, uid: &str, node: Option<&str>) -> Result<bool, kube::Error> {
        if !self.is_leader() {
            return Ok(false);
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let patch = json!({ "metadata": { "uid": uid }, "status": { "nominatedNodeName": node } });
        api.patch_status(&pod.name, &PatchParams::default(), &Patch::Strategic(patch))
            .await?;
        Ok(true)
    }

    async fn event(&self, pod: &PodRecord, type_: EventType, reason: &str, action: &str, note: String) {
        self.publish(&pod.object_ref(), Once::No, type_, reason, action, note)
            .await;
    }

    async fn publish(
        &self,
        object: &ObjectReference,
        once: Once,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        if !self.is_leader() {
            return;
        }
        let note = truncate(note, 1000);
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        let res = match once {
            Once::Yes => self.recorders.one_shot().publish(&ev, object).await,
            Once::No => {
                let recorder = self
                    .recorders
                    .for_event(object, ev.note.as_deref().unwrap_or_default());
                recorder.publish(&ev, object).await
            }
        };
        if let Err(e) = res {
            tracing::debug!(object = ?object.name, error = %e, "event not recorded");
        }
    }

    /// Reads `namespace/name` from the API server, bypassing the caches (`None` when it does not exist); used
    /// after a write conflict, when the cached copy is known to be stale.
    ///
    /// # Errors
    /// The API call's error.
    pub(crate) async fn read<K>(&self, namespace: &str, name: &str) -> Result<Option<Arc<K>>, kube::Error>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        Ok(api.get_opt(name).await?.map(Arc::new))
    }

    /// Applies the conditions the scheduler wants on a group (`wanted`, one per type) with upstream's rules, in one
    /// server-side apply that also carries every other condition this field manager owns as it stands (`current`:
    /// the object's conditions as cached), because an apply drops the manager's entries its body leaves out. A True
    /// condition is never replaced by a non-True one; nothing is sent when no wanted condition changes status,
    /// reason, message or observedGeneration. Returns whether a patch was sent.
    pub(crate) async fn group_conditions<K>(
        &self,
        obj: &K,
        current: &[Condition],
        wanted: &[WantedCondition],
    ) -> Result<bool, kube::Error>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        let generation = obj.meta().generation;
        let mut changed = false;
        let mut body: Vec<Condition> = Vec::new();
        for w in wanted {
            match desired_group_condition(current, w.type_, w.status, w.reason, &w.message, generation) {
                Some(c) => {
                    changed = true;
                    body.push(c);
                }
                None => body.extend(current.iter().filter(|c| c.type_ == w.type_).cloned()),
            }
        }
        if !changed {
            return Ok(false);
        }
        for c in current {
            if SCHEDULER_CONDITIONS.contains(&c.type_.as_str()) && !body.iter().any(|b| b.type_ == c.type_) {
                body.push(c.clone());
            }
        }
        if !self.is_leader() {
            return Ok(false);
        }
        let (Some(ns), name) = (obj.namespace(), obj.name_any()) else {
            return Ok(false);
        };
        let api: Api<K> = Api::namespaced(self.client.clone(), &ns);
        // The version the decision was based on is a precondition (409 if the object changed since): a writer
        // whose view is stale, a replica resumed after another took over for one, cannot turn a condition the
        // newer writer set True back to False (upstream: no regression from True).
        let body = json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": { "resourceVersion": obj.meta().resource_version },
            "status": { "conditions": body },
        });
        api.patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await?;
        Ok(true)
    }
}

/// The condition to write, or `None` when nothing must be written (no regression from True, or no change).
pub fn desired_group_condition(
    current: &[Condition],
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Option<Condition> {
    use phalanx_api::conditions::{set_condition, status as cs};
    let status_s = if status { cs::TRUE } else { cs::FALSE };
    let mut conds: Vec<Condition> = current.iter().filter(|c| c.type_ == type_).cloned().collect();
    if conds.first().is_some_and(|o| o.status == cs::TRUE) && !status {
        // PodGroupInitiallyScheduled is terminal once True (KEP-4671; upstream `updatePodGroupCondition`).
        return None;
    }
    let new = Condition {
        type_: type_.into(),
        status: status_s.into(),
        reason: reason.into(),
        message: truncate(message.to_owned(), 32_000),
        observed_generation: generation,
        last_transition_time: Time(Timestamp::now()),
    };
    if !set_condition(&mut conds, new) {
        return None;
    }
    conds.pop()
}

/// Cuts `s` to at most `max` bytes on a char boundary (events allow 1 kB notes, conditions 32 kB messages).
fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut i = max;
        while !s.is_char_boundary(i) {
            i -= 1;
        }
        s.truncate(i);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(status: &str, reason: &str, msg: &str, gen_: Option<i64>) -> Condition {
        Condition {
            type_: "PodGroupInitiallyScheduled".into(),
            status: status.into(),
            reason: reason.into(),
            message: msg.into(),
            observed_generation: gen_,
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
        }
    }

    #[test]
    fn group_condition_rules() {
        let t = "PodGroupInitiallyScheduled";
        // First write.
        let c = desired_group_condition(&[], t, false, "Unschedulable", "m", Some(1)).unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "Unschedulable"));
        // Unchanged: no write.
        let cur = [cond("False", "Unschedulable", "m", Some(1))];
        assert!(desired_group_condition(&cur, t, false, "Unschedulable", "m", Some(1)).is_none());
        // New message keeps the transition time (status did not flip).
        let c = desired_group_condition(&cur, t, false, "Unschedulable", "m2", Some(1)).unwrap();
        assert_eq!(c.last_transition_time, Time(Timestamp::UNIX_EPOCH));
        // New generation is written.
        assert!(desired_group_condition(&cur, t, false, "Unschedulable", "m", Some(2)).is_some());
        // Flip to True changes the transition time.
        let c = desired_group_condition(&cur, t, true, "Scheduled", "", Some(1)).unwrap();
        assert_ne!(c.last_transition_time, Time(Timestamp::UNIX_EPOCH));
        // Never back from True.
        let cur = [cond("True", "Scheduled", "", Some(1))];
        assert!(desired_group_condition(&cur, t, false, "Unschedulable", "x", Some(2)).is_none());
    }

    #[test]
    fn truncate_on_char_boundary() {
        assert_eq!(truncate("héllo".into(), 2), "h");
        assert_eq!(truncate("abc".into(), 5), "abc");
    }
}
