//! Workload-aware preemption in the runtime: what the core needs to know before a cycle, and acting on its
//! decision after it. The state itself has one owner, [`crate::preemption_tracker::PreemptionTracker`]; this module
//! feeds it and carries out the writes it returns.
//!
//! Before a cycle the snapshot learns the group objects (victim units and their priorities), the nominated pods
//! (their capacity is reserved against equal- and lower-priority work), the pods terminating because of
//! preemption, the preemptors whose victims are still going, the PodDisruptionBudgets and the pods' start times
//! (upstream keeps these in the scheduler cache, the nominator and the async preemption executor,
//! `pkg/scheduler/framework/preemption/executor.go`).
//!
//! After a successful PostFilter, in this order:
//! 1. the preemptor pods get `status.nominatedNodeName` (and `PodScheduled=False/WaitingForPreemption`);
//! 2. once every nomination is written, each victim gets `DisruptionTarget=True/PreemptionByScheduler`, is deleted
//!    and gets a `Preempted` event ([`crate::Evictor`]); each group of an `all` unit gets `DisruptionTarget=True`
//!    once one of its pods is deleted.
//!
//! Why nominations first: a replica that takes over finds a plan only through what the cluster shows. Victims that
//! terminate under a written nomination stop the next leader from preempting again for that preemptor (the core's
//! eligibility check); victims deleted before their preemptor's nomination was written would not. A plan whose
//! nominations could not be written evicts nothing.
//!
//! Nothing binds in a preempting cycle; the preemptor's next cycle, woken when the victims are gone, binds where
//! the nominations kept room. At most one preemption per preemptor is in flight (k/k#140641). An eviction that
//! fails is reported back: the victim stops counting, the failure is counted
//! (`phalanx_scheduler_preemption_attempts_total{result="eviction_failed"}`), a Warning `FailedPreemption` is
//! emitted on the preemptor, and the preemptor is retried after its backoff (upstream activates it).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use phalanx_api::conditions::{DISRUPTION_TARGET, reasons};
use phalanx_scheduler::model::DisruptionMode;
use phalanx_scheduler::{Decision, EntityKey, GroupKey, GroupKind, Pdb, PodKey, Snapshot};
use tokio::sync::oneshot;

use crate::EvictOutcome;
use crate::preemption_tracker::{EvictResult, NominationWrite, Uid};
use crate::state::{Driver, WriteKey};

/// How the eviction of one victim ended, sent back to the loop.
#[derive(Debug)]
pub(crate) struct EvictReport {
    pub(crate) preemptor: EntityKey,
    pub(crate) victim: PodKey,
    pub(crate) uid: Uid,
    /// The victim's unit group when its mode is `all` (it gets `DisruptionTarget=True`).
    pub(crate) all_group: Option<GroupKey>,
    pub(crate) outcome: EvictOutcome,
}

impl Driver {
    /// Tells the snapshot what preemption needs (see the module docs); the pods' start times are kept with the
    /// pods themselves (see [`crate::snapshot_cache`]).
    pub(crate) fn preemption_inputs(&mut self, snap: &mut Snapshot) {
        for g in self.group_infos.values() {
            snap.upsert_group_info(g.clone());
        }
        for c in self.composite_infos.values() {
            snap.upsert_composite_info(c.clone());
        }
        let known = &self.known;
        self.preemption.inputs(snap, |k| known.contains_key(k));
        let pdbs: Vec<Pdb> = self
            .store
            .pdbs()
            .state()
            .iter()
            .filter_map(|p| Pdb::from_api(p).ok())
            .collect();
        snap.set_pdbs(pdbs);
    }

    /// Acts on the preemption part of a decision: nominations, then evictions. Returns the number of victims whose
    /// eviction started (0 when none, or when a preemption was already in flight).
    pub(crate) fn apply_preemption(&mut self, d: &Decision) -> usize {
        let Some(report) = &d.preemption else { return 0 };
        let result = match (report.success, report.ongoing) {
            (true, true) => "ongoing",
            (true, false) => "success",
            (false, _) => "failed",
        };
        self.metrics.preemption(result, report.duration.as_secs_f64());
        if !report.success {
            return 0;
        }
        let (known, store) = (&self.known, &self.store);
        let act = self.preemption.on_decision(
            d,
            |k| known.get(k).cloned(),
            |v| store.pod(&v.pod).is_some_and(|p| Some(p.uid()) == Some(&*v.uid)),
        );
        let written: Vec<oneshot::Receiver<bool>> = act
            .nominate
            .into_iter()
            .map(|w| self.submit_nomination(w))
            .collect();
        // Lower-priority pods nominated to the nodes this plan takes will not fit there any more (upstream
        // `getLowerPriorityNominatedPods` in `prepareCandidate`): their nominations go.
        for pod in &d.cleared_nominations {
            if let Some(w) = self.preemption.clear_nomination(pod) {
                drop(self.submit_nomination(w));
            }
        }
        if act.victims_gone {
            // Its deletion may have been handled before this cycle (the snapshot still counted the pod, issue 35):
            // no event would wake the preemptor then.
            self.queue.activate(&d.entity, std::time::Instant::now());
        }
        if act.evict.is_empty() {
            return 0;
        }
        // The preemptor as upstream names it in `Preempted`: by UID (the pod nominated to the victim's node when
        // there is one), so the victim's namespace learns no name of another namespace.
        let uid_on_node: HashMap<&str, Arc<str>> = d
            .nominations
            .iter()
            .filter_map(|n| self.known.get(&n.pod).map(|i| (&*n.node, i.uid.clone())))
            .collect();
        let entity_name = match &d.entity {
            EntityKey::Pod(p) => self.known.get(p).map(|i| format!("pod {}", i.uid)),
            EntityKey::Group(g) => self.group_uid(g).map(|u| format!("pod group {u}")),
        }
        .unwrap_or_else(|| "a higher priority pod".to_owned());
        let mut jobs = Vec::new();
        for v in &act.evict {
            self.metrics.victim(match v.mode {
                DisruptionMode::All => "all",
                DisruptionMode::Single => "single",
            });
            let Some(pod) = self.store.pod(&v.pod) else {
                continue;
            };
            let who = uid_on_node
                .get(&*v.node)
                .map_or_else(|| entity_name.clone(), |u| format!("pod {u}"));
            let all_group = (v.mode == DisruptionMode::All).then(|| v.group.clone()).flatten();
            jobs.push((
                pod,
                who,
                v.node.to_string(),
                v.uid.clone(),
                v.pod.clone(),
                all_group,
            ));
        }
        let n = jobs.len();
        let (evictor, sched, tx, entity) = (
            self.evictor.clone(),
            self.opts.scheduler_name.clone(),
            self.evict_tx.clone(),
            d.entity.clone(),
        );
        self.tasks.spawn(async move {
            // Superseded writes (a newer one for the same pod replaced it before it started) count as written.
            let mut nominated = true;
            for rx in written {
                nominated &= rx.await.unwrap_or(true);
            }
            let evictions = jobs.into_iter().map(|(pod, who, node, uid, victim, all_group)| {
                let (evictor, sched, tx, preemptor) =
                    (evictor.clone(), sched.clone(), tx.clone(), entity.clone());
                async move {
                    let outcome = if nominated {
                        evictor.preempt(&pod, &sched, &who, &node).await
                    } else {
                        EvictOutcome::Failed("the preemptor's nomination was not written".into())
                    };
                    let _ = tx.send(EvictReport {
                        preemptor,
                        victim,
                        uid,
                        all_group,
                        outcome,
                    });
                }
            });
            futures::future::join_all(evictions).await;
        });
        n
    }

    /// Queues a `status.nominatedNodeName` write, ordered after every earlier one for the same pod (a newer one
    /// replaces one that has not started). The receiver says whether it was written (or was not needed).
    pub(crate) fn submit_nomination(&mut self, w: NominationWrite) -> oneshot::Receiver<bool> {
        let (tx, rx) = oneshot::channel();
        let (writer, timeout) = (self.writer.clone(), self.opts.bind_timeout);
        let key = w.pod.clone();
        let job = async move {
            let call = writer.nominate(&w.pod, &w.uid, w.node.as_deref());
            let ok = match tokio::time::timeout(timeout, call).await {
                Ok(Ok(sent)) => sent,
                // A clear for a pod that is gone or was replaced has nothing left to clear.
                Ok(Err(kube::Error::Api(s))) if w.node.is_none() && (s.is_not_found() || s.is_conflict()) => {
                    true
                }
                Ok(Err(e)) => {
                    tracing::info!(pod = %w.pod, error = %e, "nomination not written");
                    false
                }
                Err(_) => {
                    tracing::info!(pod = %w.pod, "nomination write timed out");
                    false
                }
            };
            let _ = tx.send(ok);
        };
        self.writes
            .submit(&mut self.tasks, WriteKey::Nomination(key), job);
        rx
    }

    /// A victim's eviction ended (see [`EvictReport`]).
    pub(crate) fn on_evict_report(&mut self, r: EvictReport) {
        let result = match &r.outcome {
            EvictOutcome::Deleted => EvictResult::Deleted,
            EvictOutcome::Gone => EvictResult::Gone,
            EvictOutcome::NotLeader | EvictOutcome::Failed(_) => EvictResult::Failed,
        };
        let retry = self
            .preemption
            .on_evict_result(&r.preemptor, &r.victim, &r.uid, result);
        if result == EvictResult::Deleted
            && let Some(g) = r.all_group
        {
            // The victim pods' own words (upstream's `DisruptionTarget` message), naming no preemptor: the
            // preemptor may live in another namespace.
            let message = crate::evict::disruption_message(&self.opts.scheduler_name);
            self.spawn_group_condition(
                g,
                DISRUPTION_TARGET,
                true,
                reasons::PREEMPTION_BY_SCHEDULER,
                message,
            );
        }
        let EvictOutcome::Failed(why) = r.outcome else {
            return;
        };
        tracing::warn!(preemptor = %r.preemptor, victim = %r.victim, error = %why, "victim not evicted; retrying the preemptor");
        self.metrics.preemption("eviction_failed", 0.0);
        if retry {
            self.queue.activate(&r.preemptor, std::time::Instant::now());
        }
        if let Some(object) = self.object_of(&r.preemptor) {
            let writer = self.writer.clone();
            let note = format!(
                "preemption: victim {} was not evicted: {why}; the preemptor is retried",
                r.victim
            );
            self.tasks
                .spawn(async move { writer.event_preemption_failed(&object, note).await });
        }
    }

    /// The API object of a preemptor (its pod, PodGroup or root CompositePodGroup), for events.
    fn object_of(&self, entity: &EntityKey) -> Option<ObjectReference> {
        match entity {
            EntityKey::Pod(p) => self.store.pod(p).map(|o| o.object_ref()),
            EntityKey::Group(g) if g.kind == GroupKind::PodGroup => self
                .store
                .pod_group(&g.namespace, &g.name)
                .map(|o| o.object_ref(&())),
            EntityKey::Group(g) => self
                .store
                .composite_pod_group(&g.namespace, &g.name)
                .map(|o| o.object_ref(&())),
        }
    }

    fn group_uid(&self, g: &GroupKey) -> Option<Arc<str>> {
        match g.kind {
            GroupKind::PodGroup => self.group_infos.get(g).map(|i| i.uid.clone()),
            GroupKind::CompositePodGroup => self.composite_infos.get(g).map(|i| i.uid.clone()),
        }
    }

    /// The message of a preemptor pod waiting for its victims.
    pub(crate) fn waiting_message(&self, entity: &EntityKey, core_message: &str) -> String {
        let n = self.preemption.waiting_victims(entity);
        if n == 0 {
            return core_message.to_owned();
        }
        format!("waiting for {n} preempted pod(s) to terminate; {core_message}")
    }
}
