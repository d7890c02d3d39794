//! Workload-aware preemption's API calls: nominations and evictions. The state has one owner,
//! [`crate::preemption_tracker::PreemptionTracker`]; the loop (`crate::runtime::cycle`) feeds it before a cycle and
//! acts on its decision after it, and this module carries out the writes it returns.
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

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use phalanx_scheduler::{EntityKey, GroupKind};
use tokio::sync::oneshot;

use super::ApiDispatcher;
use super::jobs::{EvictReport, Eviction, WriteKey};
use crate::EvictOutcome;
use crate::preemption_tracker::NominationWrite;

impl ApiDispatcher {
    /// Evicts `victims` of `preemptor`'s plan once every nomination in `nominated` is written (a plan whose
    /// nominations could not be written evicts nothing); each eviction comes back as [`EvictReport`].
    pub(crate) fn evict(
        &mut self,
        preemptor: EntityKey,
        nominated: Vec<oneshot::Receiver<bool>>,
        victims: Vec<Eviction>,
    ) {
        let (evictor, sched, tx) = (
            self.evictor.clone(),
            self.opts.scheduler_name.clone(),
            self.channels.evict_tx.clone(),
        );
        self.tasks.spawn(async move {
            // Superseded writes (a newer one for the same pod replaced it before it started) count as written.
            let mut written = true;
            for rx in nominated {
                written &= rx.await.unwrap_or(true);
            }
            let evictions = victims.into_iter().map(|v| {
                let (evictor, sched, tx, preemptor) =
                    (evictor.clone(), sched.clone(), tx.clone(), preemptor.clone());
                async move {
                    let outcome = if written {
                        evictor.preempt(&v.pod, &sched, &v.preemptor_name, &v.node).await
                    } else {
                        EvictOutcome::Failed("the preemptor's nomination was not written".into())
                    };
                    let _ = tx.send(EvictReport {
                        preemptor,
                        victim: v.victim,
                        uid: v.uid,
                        all_group: v.all_group,
                        outcome,
                    });
                }
            });
            futures::future::join_all(evictions).await;
        });
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

    /// Emits a Warning `FailedPreemption` with `note` on the preemptor's object (its pod, PodGroup or root
    /// CompositePodGroup), if it still exists.
    pub(crate) fn event_preemption_failed(&mut self, preemptor: &EntityKey, note: String) {
        if let Some(object) = self.object_of(preemptor) {
            let writer = self.writer.clone();
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
                .pod_group_at(g)
                .map(|o| upstream_ref(&self.store, g, o.object_ref(&()))),
            EntityKey::Group(g) => self
                .store
                .composite_pod_group_at(g)
                .map(|o| upstream_ref(&self.store, g, o.object_ref(&()))),
        }
    }
}

/// `r` naming upstream's object for a group of upstream's API (cached in Phalanx's type, whose reference names
/// Phalanx's group-version).
fn upstream_ref(
    store: &phalanx_store::Store,
    g: &phalanx_scheduler::GroupKey,
    mut r: ObjectReference,
) -> ObjectReference {
    if g.is_upstream() {
        let version = match g.kind {
            GroupKind::PodGroup => phalanx_store::upstream::UPSTREAM_GROUP_VERSION,
            GroupKind::CompositePodGroup => store.upstream_composite_group_version(),
        };
        r.api_version = Some(version.to_owned());
    }
    r
}
