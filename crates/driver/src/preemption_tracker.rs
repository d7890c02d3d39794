//! The one owner of the runtime's preemption state: nominations, bind reservations, pods terminating because of
//! preemption, and preemptions in flight. Upstream keeps the same state in the nominator
//! (`pkg/scheduler/backend/queue/nominator.go`) and the preemption executor
//! (`pkg/scheduler/framework/preemption/executor.go`).
//!
//! Why one owner, and why the cluster is the source: a preempting scheduler must never evict a second set of pods
//! for the same preemptor. A leader that restarts, or a replica that takes over, while victims are still
//! terminating knows nothing of the plan it did not make. So everything that decides "do not preempt again" is
//! rebuilt from objects the API server keeps:
//! - nominations from the pending pods' `status.nominatedNodeName`;
//! - terminating victims from pods with a `deletionTimestamp` and `DisruptionTarget=True` with reason
//!   `PreemptionByScheduler` (upstream `podTerminatingByPreemption`).
//!
//! The core then refuses to preempt again for a preemptor whose nominated node still holds a lower-priority pod
//! terminating by preemption, and keeps its nomination (upstream `PodEligibleToPreemptOthers`). What only memory
//! knows (victims whose delete is being sent now, the victims of each plan, bind reservations) adds to that; losing
//! it on a restart costs at most a wait, never a second eviction.
//!
//! Every entry is keyed by the pod's UID, so a same-named replacement (a StatefulSet's `web-0`) inherits nothing.
//! A preemption in flight has no time limit: its victims' own termination bounds the wait, and a victim whose
//! eviction failed stops counting at once ([`PreemptionTracker::on_evict_result`]).
//!
//! The type is pure data (no client, no clock): the driver feeds it watch events and decisions and carries out the
//! writes it returns. Transitions: [`on_pod`](PreemptionTracker::on_pod),
//! [`on_pod_deleted`](PreemptionTracker::on_pod_deleted), [`on_resync`](PreemptionTracker::on_resync),
//! [`on_decision`](PreemptionTracker::on_decision), [`on_failure`](PreemptionTracker::on_failure),
//! [`on_bind_failed`](PreemptionTracker::on_bind_failed), [`on_evict_result`](PreemptionTracker::on_evict_result).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use phalanx_api::conditions::{DISRUPTION_TARGET, reasons};
use phalanx_scheduler::model::DisruptionMode;
use phalanx_scheduler::{Decision, EntityKey, GroupKey, PodInfo, PodKey, Snapshot, Victim};
use phalanx_store::PodRecord;

/// A pod's `metadata.uid`.
pub(crate) type Uid = Arc<str>;

/// Room kept for a pending pod on a node.
#[derive(Clone, Debug)]
struct Hold {
    info: Arc<PodInfo>,
    node: Arc<str>,
}

/// A `status.nominatedNodeName` write the driver must send (`node: None` clears it). Writes for one pod must be
/// sent in the order they are returned; a later one replaces an earlier one that has not started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NominationWrite {
    pub(crate) pod: PodKey,
    pub(crate) uid: Uid,
    pub(crate) node: Option<Arc<str>>,
}

/// What a decision asks the driver to do, in this order: write the nominations, then (once they are written)
/// evict the victims and mark the disrupted groups.
#[derive(Clone, Debug, Default)]
pub(crate) struct Actuation {
    pub(crate) nominate: Vec<NominationWrite>,
    pub(crate) evict: Vec<Victim>,
    pub(crate) disrupted_groups: Vec<GroupKey>,
    /// A victim of the plan is not in the store with its decided UID (gone, replaced, or, assumed after a fresh
    /// read, not shown by the watch yet): no eviction and maybe no deletion event will come for it, so the
    /// preemptor must not wait for one. It retries after its backoff (as upstream activates a preemptor whose
    /// victim could not be deleted, `pkg/scheduler/framework/preemption/executor.go`).
    pub(crate) victims_gone: bool,
}

/// How the eviction of one victim ended (see [`crate::EvictOutcome`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EvictResult {
    /// Marked and deleted: it terminates now.
    Deleted,
    /// Already gone, or replaced under its name.
    Gone,
    /// Nothing was deleted: a call failed or timed out, or this replica lost the lead.
    Failed,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct PreemptionTracker {
    /// The UID each pod key with state here currently has.
    uids: HashMap<PodKey, Uid>,
    /// Our pending pods with a nomination (the cluster's, or one we asked for and the watch does not show yet).
    nominated: HashMap<Uid, Hold>,
    /// Gang members whose bind failed: their room stays kept on the node of that bind until they bind or give up,
    /// so that other work cannot take it and leave the gang half bound.
    reserved: HashMap<Uid, Hold>,
    /// Pods terminating because a scheduler preempted them, and victims whose delete this replica saw succeed.
    terminating: HashMap<Uid, PodKey>,
    /// Victims not yet gone, by the preemptor whose plan chose them.
    in_flight: HashMap<EntityKey, HashMap<Uid, PodKey>>,
    /// `status.nominatedNodeName` as the watch last showed it, for pods of ours that have one (each registered in
    /// `uids`, so a delete forgets it; pods of other schedulers are never held here).
    observed: HashMap<Uid, Arc<str>>,
    /// The nomination this replica last asked for, until the watch shows it: an older watch event must not undo a
    /// newer request.
    requested: HashMap<Uid, Option<Arc<str>>>,
}

/// Whether `pod` is terminating because a scheduler preempted it (upstream `podTerminatingByPreemption` in
/// `pkg/scheduler/framework/preemption/preemption.go`).
pub(crate) fn terminating_by_preemption(pod: &PodRecord) -> bool {
    pod.deletion_timestamp.is_some()
        && pod.condition(DISRUPTION_TARGET).is_some_and(|c| {
            c.status == "True" && c.reason.as_deref() == Some(reasons::PREEMPTION_BY_SCHEDULER)
        })
}

fn nominated_node(pod: &PodRecord) -> Option<Arc<str>> {
    pod.nominated_node_name.as_deref().map(Into::into)
}

impl PreemptionTracker {
    /// A pod was added or changed (`ours` = its queue model when the scheduler owns it and it is not terminal).
    pub(crate) fn on_pod(&mut self, pod: &PodRecord, ours: Option<&Arc<PodInfo>>) {
        let (key, uid) = (pod.key().clone(), pod.uid());
        if uid.is_empty() {
            return;
        }
        let uid: Uid = uid.into();
        if let Some(old) = self.uids.get(&key)
            && *old != uid
        {
            // Replaced under its name: the old pod is gone, and the new one starts with nothing.
            let old = old.clone();
            self.forget(&old);
        }
        if pod.is_terminal() {
            self.forget(&uid);
            return;
        }
        if terminating_by_preemption(pod) {
            self.terminating.insert(uid.clone(), key.clone());
            self.uids.insert(key.clone(), uid.clone());
        } else {
            self.terminating.remove(&uid);
        }
        let cluster = nominated_node(pod);
        let Some(info) = ours else {
            // Another scheduler's pod (or a terminal one): its nomination is not ours to keep or to clear, so
            // nothing of it is observed (an entry here would outlive the pod, which is forgotten by key only).
            self.observed.remove(&uid);
            self.nominated.remove(&uid);
            self.reserved.remove(&uid);
            self.requested.remove(&uid);
            return;
        };
        match &cluster {
            Some(n) => {
                // Registered under its key too, so that `on_pod_deleted` (which gets only the key) forgets it even
                // when no other entry registered it (a bound pod whose `nominatedNodeName` was left set).
                self.uids.insert(key.clone(), uid.clone());
                self.observed.insert(uid.clone(), n.clone());
            }
            None => {
                self.observed.remove(&uid);
            }
        }
        if pod.node_name().is_some() {
            // Bound: it needs no room kept any more.
            self.nominated.remove(&uid);
            self.reserved.remove(&uid);
            self.requested.remove(&uid);
            return;
        }
        if let Some(r) = self.reserved.get_mut(&uid) {
            r.info = info.clone();
        }
        let wanted = match self.requested.get(&uid) {
            Some(req) if *req == cluster => {
                self.requested.remove(&uid);
                cluster
            }
            Some(req) => req.clone(),
            None => cluster,
        };
        match wanted {
            Some(node) => {
                self.uids.insert(key, uid.clone());
                self.nominated.insert(
                    uid,
                    Hold {
                        info: info.clone(),
                        node,
                    },
                );
            }
            None => {
                self.nominated.remove(&uid);
            }
        }
    }

    /// A pod was deleted (the watch gives only its key). Returns whether it had room kept on a node (a nomination
    /// or a bind reservation): that room is free now, which may let a waiting pod fit.
    pub(crate) fn on_pod_deleted(&mut self, key: &PodKey) -> bool {
        let Some(uid) = self.uids.get(key).cloned() else {
            return false;
        };
        let held = self.nominated.contains_key(&uid) || self.reserved.contains_key(&uid);
        self.forget(&uid);
        held
    }

    /// Rebuilds the state from the whole pod cache (start, relist, lagged events): what the cluster says replaces
    /// what memory had, and every entry of a pod that no longer exists is dropped. `pods` yields every cached pod
    /// with its queue model when the scheduler owns it and it is not terminal.
    ///
    /// A nomination write still in flight is forgotten too: for at most one cycle the cluster's older value counts,
    /// which at worst keeps room on a node a little longer.
    pub(crate) fn on_resync<'a>(
        &mut self,
        pods: impl IntoIterator<Item = (&'a PodRecord, Option<&'a Arc<PodInfo>>)>,
    ) {
        self.uids.clear();
        self.nominated.clear();
        self.terminating.clear();
        self.observed.clear();
        self.requested.clear();
        let mut alive: HashMap<Uid, PodKey> = HashMap::new();
        for (pod, ours) in pods {
            if let (key, uid) = (pod.key().clone(), pod.uid())
                && !uid.is_empty()
                && !pod.is_terminal()
            {
                alive.insert(uid.into(), key);
            }
            self.on_pod(pod, ours);
        }
        self.reserved.retain(|uid, _| alive.contains_key(uid));
        for victims in self.in_flight.values_mut() {
            victims.retain(|uid, key| alive.get(uid) == Some(key));
        }
        self.in_flight.retain(|_, v| !v.is_empty());
        for (uid, key) in self
            .reserved
            .iter()
            .map(|(u, h)| (u, &h.info.key))
            .chain(self.in_flight.values().flatten())
        {
            self.uids.insert(key.clone(), uid.clone());
        }
    }

    /// Takes in a decision's preemption result and returns what to write. `model(pod)` is the queue model of a
    /// pending pod of ours (only those are nominated); `alive(victim)` says whether the victim still exists with
    /// the decided UID (a victim that went away or was replaced is not evicted).
    pub(crate) fn on_decision(
        &mut self,
        d: &Decision,
        model: impl Fn(&PodKey) -> Option<Arc<PodInfo>>,
        alive: impl Fn(&Victim) -> bool,
    ) -> Actuation {
        let mut out = Actuation::default();
        let Some(report) = &d.preemption else { return out };
        if !report.success {
            return out;
        }
        for n in &d.nominations {
            let Some(info) = model(&n.pod) else { continue };
            let uid = info.uid.clone();
            self.uids.insert(n.pod.clone(), uid.clone());
            self.nominated.insert(
                uid.clone(),
                Hold {
                    info,
                    node: n.node.clone(),
                },
            );
            if let Some(w) = self.request(&n.pod, &uid, Some(n.node.clone())) {
                out.nominate.push(w);
            }
        }
        if report.ongoing || d.victims.is_empty() {
            return out;
        }
        let mut groups: HashSet<GroupKey> = HashSet::new();
        let mut victims: HashMap<Uid, PodKey> = HashMap::new();
        for v in &d.victims {
            if !alive(v) {
                out.victims_gone = true;
                continue;
            }
            if v.mode == DisruptionMode::All
                && let Some(g) = &v.group
            {
                groups.insert(g.clone());
            }
            self.uids.insert(v.pod.clone(), v.uid.clone());
            victims.insert(v.uid.clone(), v.pod.clone());
            out.evict.push(v.clone());
        }
        if !victims.is_empty() {
            self.in_flight.insert(d.entity.clone(), victims);
        }
        out.disrupted_groups = groups.into_iter().collect();
        out.disrupted_groups
            .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        out
    }

    /// Records a nomination this replica asks for and returns the write to send, or `None` when the watch already
    /// shows it.
    fn request(&mut self, pod: &PodKey, uid: &Uid, node: Option<Arc<str>>) -> Option<NominationWrite> {
        // With an earlier request outstanding the watch proves nothing: that write may land after it.
        if !self.requested.contains_key(uid) && self.observed.get(uid) == node.as_ref() {
            return None;
        }
        self.requested.insert(uid.clone(), node.clone());
        Some(NominationWrite {
            pod: pod.clone(),
            uid: uid.clone(),
            node,
        })
    }

    /// Clears the nomination of `pod` (a pod that failed without preempting, upstream `clearNominatedNode`, or a
    /// lower-priority pod nominated to a node a preemption just took). Returns the write to send, if any.
    pub(crate) fn clear_nomination(&mut self, pod: &PodKey) -> Option<NominationWrite> {
        let uid = self.uids.get(pod).cloned()?;
        self.nominated.remove(&uid);
        let had = self.observed.contains_key(&uid) || self.requested.get(&uid).is_some_and(Option::is_some);
        if !had {
            self.requested.remove(&uid);
            return None;
        }
        self.request(pod, &uid, None)
    }

    /// `pod` failed a cycle that preempted nothing: it gives up its bind reservation and its nomination.
    pub(crate) fn on_failure(&mut self, pod: &PodKey) -> Option<NominationWrite> {
        if let Some(uid) = self.uids.get(pod).cloned() {
            self.reserved.remove(&uid);
        }
        self.clear_nomination(pod)
    }

    /// The bind of gang member `info` to `node` failed while its siblings bound: keep its room there.
    pub(crate) fn on_bind_failed(&mut self, info: Arc<PodInfo>, node: &str) {
        self.uids.insert(info.key.clone(), info.uid.clone());
        self.reserved.insert(
            info.uid.clone(),
            Hold {
                info,
                node: node.into(),
            },
        );
    }

    /// How the eviction of `victim` (chosen by `preemptor`'s plan) ended. Returns whether the preemptor must be
    /// retried: a victim that was not deleted frees nothing, so waiting for it would wait for nothing.
    pub(crate) fn on_evict_result(
        &mut self,
        preemptor: &EntityKey,
        victim: &PodKey,
        uid: &Uid,
        result: EvictResult,
    ) -> bool {
        match result {
            EvictResult::Deleted => {
                let planned = self.in_flight.get(preemptor).is_some_and(|v| v.contains_key(uid));
                if planned {
                    self.terminating.insert(uid.clone(), victim.clone());
                }
                false
            }
            EvictResult::Gone | EvictResult::Failed => {
                if let Some(v) = self.in_flight.get_mut(preemptor) {
                    v.remove(uid);
                    if v.is_empty() {
                        self.in_flight.remove(preemptor);
                    }
                }
                if result == EvictResult::Failed {
                    self.terminating.remove(uid);
                }
                result == EvictResult::Failed
            }
        }
    }

    /// Gives the snapshot the preemption inputs this state holds: nominations and reservations of pods the queue
    /// knows (`known`), pods terminating by preemption, and the preemptors in flight.
    pub(crate) fn inputs(&self, snap: &mut Snapshot, known: impl Fn(&PodKey) -> bool) {
        for h in self.nominated.values().chain(self.reserved.values()) {
            if known(&h.info.key) {
                snap.set_nominated(h.info.clone(), &h.node);
            }
        }
        for key in self.terminating.values() {
            snap.set_terminating_by_preemption(key, true);
        }
        for entity in self.in_flight.keys() {
            snap.set_preemption_in_flight(entity, true);
        }
    }

    /// Victims of `preemptor`'s plan that are not gone yet.
    pub(crate) fn waiting_victims(&self, preemptor: &EntityKey) -> usize {
        self.in_flight.get(preemptor).map_or(0, HashMap::len)
    }

    /// Sizes for `phalanx_scheduler_tracked_objects`: (nominated pods, preemptions in flight).
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.nominated.len(), self.in_flight.len())
    }

    /// Drops every entry of the pod with `uid`.
    fn forget(&mut self, uid: &Uid) {
        self.nominated.remove(uid);
        self.reserved.remove(uid);
        self.terminating.remove(uid);
        self.observed.remove(uid);
        self.requested.remove(uid);
        for v in self.in_flight.values_mut() {
            v.remove(uid);
        }
        self.in_flight.retain(|_, v| !v.is_empty());
        self.uids.retain(|_, u| u != uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use kube::api::ObjectMeta;
    use phalanx_scheduler::{Nomination, Outcome, PreemptionReport};
    use std::time::Duration;

    fn api_pod(name: &str, uid: &str, node: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(name.into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(Into::into),
                ..Default::default()
            }),
            status: Some(PodStatus::default()),
        }
    }

    fn pod(name: &str, uid: &str) -> PodRecord {
        PodRecord::from_pod(&api_pod(name, uid, None))
    }

    fn nominated(name: &str, uid: &str, node: &str) -> PodRecord {
        let mut p = api_pod(name, uid, None);
        p.status.as_mut().unwrap().nominated_node_name = Some(node.into());
        PodRecord::from_pod(&p)
    }

    fn bound(name: &str, uid: &str, node: &str) -> PodRecord {
        PodRecord::from_pod(&api_pod(name, uid, Some(node)))
    }

    /// A bound victim with `deletionTimestamp` and `DisruptionTarget=True/PreemptionByScheduler`.
    fn terminating(name: &str, uid: &str, node: &str) -> PodRecord {
        let mut p = api_pod(name, uid, Some(node));
        p.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        p.status.as_mut().unwrap().conditions = Some(vec![PodCondition {
            type_: DISRUPTION_TARGET.into(),
            status: "True".into(),
            reason: Some(reasons::PREEMPTION_BY_SCHEDULER.into()),
            ..Default::default()
        }]);
        PodRecord::from_pod(&p)
    }

    fn info(name: &str, uid: &str) -> Arc<PodInfo> {
        let mut i = PodInfo::simple("ns", name, 100);
        i.uid = uid.into();
        Arc::new(i)
    }

    fn key(name: &str) -> PodKey {
        PodKey::new("ns", name)
    }

    fn snapshot_of(t: &PreemptionTracker) -> Snapshot {
        let mut s = Snapshot::new(Vec::<Arc<phalanx_scheduler::NodeStatic>>::new());
        t.inputs(&mut s, |_| true);
        s
    }

    /// A successful preemption by pod `pre` (uid `u-pre`) for node `n1` with victim `v` (uid `u-v`).
    fn decision(ongoing: bool) -> Decision {
        let mut d = Decision::empty(EntityKey::Pod(key("pre")), Outcome::Unschedulable);
        d.preemption = Some(PreemptionReport {
            plugin: Some("DefaultPreemption"),
            success: true,
            ongoing,
            message: String::new(),
            duration: Duration::ZERO,
        });
        d.nominations = vec![Nomination {
            pod: key("pre"),
            node: "n1".into(),
        }];
        if !ongoing {
            d.victims = vec![Victim {
                pod: key("v"),
                uid: "u-v".into(),
                node: "n1".into(),
                group: None,
                mode: DisruptionMode::Single,
                priority: 0,
                preemptor: EntityKey::Pod(key("pre")),
            }];
        }
        d
    }

    fn decide(t: &mut PreemptionTracker, d: &Decision) -> Actuation {
        t.on_decision(d, |k| (*k == key("pre")).then(|| info("pre", "u-pre")), |_| true)
    }

    #[test]
    fn on_pod_takes_nominations_and_terminating_victims_from_the_cluster() {
        let mut t = PreemptionTracker::default();
        t.on_pod(&nominated("pre", "u-pre", "n1"), Some(&info("pre", "u-pre")));
        t.on_pod(&terminating("v", "u-v", "n1"), None);
        let s = snapshot_of(&t);
        assert_eq!(s.nominated_node(&key("pre")).map(|n| &**n), Some("n1"));
        assert!(s.preemption_state().is_terminating(&key("v")));
        // Bound: the nomination is done with.
        t.on_pod(&bound("pre", "u-pre", "n1"), Some(&info("pre", "u-pre")));
        assert_eq!(snapshot_of(&t).nominated_node(&key("pre")), None);
        // A nomination of a pod that is not ours reserves nothing.
        t.on_pod(&nominated("other", "u-o", "n1"), None);
        assert_eq!(snapshot_of(&t).nominated_node(&key("other")), None);
    }

    #[test]
    fn on_pod_deleted_and_a_replacement_under_the_name_inherit_nothing() {
        let mut t = PreemptionTracker::default();
        t.on_pod(&terminating("web-0", "u-old", "n1"), None);
        // The StatefulSet recreated web-0 before the watch delivered the deletion.
        t.on_pod(&bound("web-0", "u-new", "n1"), None);
        assert!(!snapshot_of(&t).preemption_state().is_terminating(&key("web-0")));
        t.on_pod(&nominated("pre", "u-pre", "n1"), Some(&info("pre", "u-pre")));
        assert!(t.on_pod_deleted(&key("pre")), "its nomination kept room on n1");
        assert_eq!(snapshot_of(&t).nominated_node(&key("pre")), None);
        assert!(!t.on_pod_deleted(&key("pre")), "nothing is left to free");
    }

    #[test]
    fn on_resync_rebuilds_from_the_cluster_and_prunes_what_is_gone() {
        let mut t = PreemptionTracker::default();
        let d = decision(false);
        decide(&mut t, &d);
        t.on_bind_failed(info("gang-1", "u-g1"), "n2");
        assert_eq!(t.waiting_victims(&d.entity), 1);
        // A restarted replica: nothing in memory, the cluster shows the nomination and the terminating victim.
        let mut fresh = PreemptionTracker::default();
        let (pre, v) = (nominated("pre", "u-pre", "n1"), terminating("v", "u-v", "n1"));
        let pre_info = info("pre", "u-pre");
        fresh.on_resync([(&pre, Some(&pre_info)), (&v, None)]);
        let s = snapshot_of(&fresh);
        assert_eq!(s.nominated_node(&key("pre")).map(|n| &**n), Some("n1"));
        assert!(s.preemption_state().is_terminating(&key("v")));
        // The running replica's resync after the victim and the gang member went away prunes both.
        t.on_resync([(&pre, Some(&pre_info))]);
        assert_eq!(t.waiting_victims(&d.entity), 0);
        let s = snapshot_of(&t);
        assert_eq!(s.nominated_node(&key("gang-1")), None);
        assert_eq!(s.nominated_node(&key("pre")).map(|n| &**n), Some("n1"));
    }

    #[test]
    fn on_decision_nominates_then_evicts_and_keeps_the_plan_in_flight() {
        let mut t = PreemptionTracker::default();
        t.on_pod(&pod("pre", "u-pre"), Some(&info("pre", "u-pre")));
        let d = decision(false);
        let act = decide(&mut t, &d);
        assert_eq!(
            act.nominate,
            vec![NominationWrite {
                pod: key("pre"),
                uid: "u-pre".into(),
                node: Some("n1".into())
            }]
        );
        assert_eq!(act.evict.len(), 1);
        assert_eq!(t.waiting_victims(&d.entity), 1);
        assert_eq!(t.waiting_victims(&d.entity), 1);
        // The watch still shows the pod without its nomination (our write not visible yet): it stays nominated.
        t.on_pod(&pod("pre", "u-pre"), Some(&info("pre", "u-pre")));
        assert_eq!(
            snapshot_of(&t).nominated_node(&key("pre")).map(|n| &**n),
            Some("n1")
        );
        // An ongoing repeat writes nothing new once the watch shows the nomination.
        t.on_pod(&nominated("pre", "u-pre", "n1"), Some(&info("pre", "u-pre")));
        let again = decide(&mut t, &decision(true));
        assert!(again.nominate.is_empty() && again.evict.is_empty());
        // A victim that is gone already is not evicted.
        let mut t2 = PreemptionTracker::default();
        let act = t2.on_decision(&d, |_| Some(info("pre", "u-pre")), |_| false);
        assert!(act.evict.is_empty());
        assert!(
            act.victims_gone,
            "the preemptor must not wait for a deletion of a victim that is not there"
        );
        assert!(!decide(&mut PreemptionTracker::default(), &d).victims_gone);
        assert_eq!(t2.waiting_victims(&d.entity), 0);
    }

    #[test]
    fn on_failure_clears_a_nomination_even_before_the_watch_shows_it() {
        let mut t = PreemptionTracker::default();
        t.on_pod(&pod("pre", "u-pre"), Some(&info("pre", "u-pre")));
        decide(&mut t, &decision(false));
        // The nomination was asked for but the watch has not shown it: the clear must still be written.
        let w = t.on_failure(&key("pre")).expect("a clear is written");
        assert_eq!(w.node, None);
        // The older watch event (no nomination) now matches what we want: nothing more to write.
        t.on_pod(&pod("pre", "u-pre"), Some(&info("pre", "u-pre")));
        assert_eq!(t.on_failure(&key("pre")), None);
        assert_eq!(snapshot_of(&t).nominated_node(&key("pre")), None);
    }

    #[test]
    fn on_evict_result_counts_only_deleted_victims_as_terminating() {
        let mut t = PreemptionTracker::default();
        let d = decision(false);
        decide(&mut t, &d);
        let uid: Uid = "u-v".into();
        assert!(!t.on_evict_result(&d.entity, &key("v"), &uid, EvictResult::Deleted));
        assert!(snapshot_of(&t).preemption_state().is_terminating(&key("v")));
        assert_eq!(t.waiting_victims(&d.entity), 1);
        // A failed eviction: the victim stops counting and the preemptor is retried.
        let mut t = PreemptionTracker::default();
        decide(&mut t, &d);
        assert!(t.on_evict_result(&d.entity, &key("v"), &uid, EvictResult::Failed));
        assert_eq!(t.waiting_victims(&d.entity), 0);
        assert!(!snapshot_of(&t).preemption_state().is_terminating(&key("v")));
        // Gone already: no retry, and the plan has nothing left to wait for.
        let mut t = PreemptionTracker::default();
        decide(&mut t, &d);
        assert!(!t.on_evict_result(&d.entity, &key("v"), &uid, EvictResult::Gone));
        assert_eq!(t.waiting_victims(&d.entity), 0);
    }

    #[test]
    fn in_flight_has_no_time_limit_and_ends_when_the_victims_go() {
        let mut t = PreemptionTracker::default();
        let d = decision(false);
        decide(&mut t, &d);
        t.on_pod(&terminating("v", "u-v", "n1"), None);
        // However long it takes (a 300 s grace period), only the victim's end ends the wait.
        assert_eq!(t.waiting_victims(&d.entity), 1);
        t.on_pod_deleted(&key("v"));
        assert_eq!(t.waiting_victims(&d.entity), 0);
        assert!(!snapshot_of(&t).preemption_state().is_terminating(&key("v")));
    }

    /// Every map of the tracker is empty: nothing is left of pods that are gone.
    fn holds_nothing(t: &PreemptionTracker) -> bool {
        t.uids.is_empty()
            && t.nominated.is_empty()
            && t.reserved.is_empty()
            && t.terminating.is_empty()
            && t.in_flight.is_empty()
            && t.observed.is_empty()
            && t.requested.is_empty()
    }

    /// Issue 35 (defect 9): a nominated pod of another scheduler and a bound pod of ours whose `nominatedNodeName`
    /// was left set each left an `observed` entry behind their deletion that only the next relist dropped. A pod of
    /// ours deleted while our clear of its nomination is not visible yet must leave nothing either.
    #[test]
    fn deleted_pods_leave_no_observed_nomination_behind() {
        let mut t = PreemptionTracker::default();
        t.on_pod(&nominated("other", "u-o", "n1"), None);
        assert!(
            !t.observed.contains_key("u-o"),
            "another scheduler's nomination is not ours to track"
        );
        t.on_pod_deleted(&key("other"));
        let mut p = api_pod("done", "u-d", Some("n1"));
        p.status.as_mut().unwrap().nominated_node_name = Some("n1".into());
        t.on_pod(&PodRecord::from_pod(&p), Some(&info("done", "u-d")));
        t.on_pod_deleted(&key("done"));
        t.on_pod(&nominated("pre", "u-pre", "n1"), Some(&info("pre", "u-pre")));
        assert!(t.clear_nomination(&key("pre")).is_some(), "the clear is written");
        // The watch still shows the nomination (the clear is not visible yet), then the pod is deleted.
        t.on_pod(&nominated("pre", "u-pre", "n1"), Some(&info("pre", "u-pre")));
        t.on_pod_deleted(&key("pre"));
        assert!(holds_nothing(&t), "left behind: {t:?}");
    }

    #[test]
    fn on_bind_failed_keeps_room_until_the_member_binds() {
        let mut t = PreemptionTracker::default();
        t.on_bind_failed(info("g-1", "u-g1"), "n2");
        assert_eq!(
            snapshot_of(&t).nominated_node(&key("g-1")).map(|n| &**n),
            Some("n2")
        );
        t.on_pod(&bound("g-1", "u-g1", "n2"), Some(&info("g-1", "u-g1")));
        assert_eq!(snapshot_of(&t).nominated_node(&key("g-1")), None);
    }
}
