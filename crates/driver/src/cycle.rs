//! One scheduling cycle and what follows it (upstream `scheduleOne` / `scheduleOnePodGroup`,
//! `pkg/scheduler/schedule_one*.go`): build the snapshot, run the pure core, then act on its
//! decision: assume and bind in the background, write conditions and events.
//!
//! A failed bind was already forgotten in the store, and its pod goes back to its place in the queue with backoff
//! (upstream `handleBindingCycleError`: `ForgetPod`, then requeue with backoff).

use std::{sync::Arc, time::Instant};

use kube::ResourceExt;
use phalanx_api::conditions::reasons;
use phalanx_scheduler::{Decision, GroupKey, Outcome, PodKey, QueuedEntity, Snapshot, is_terminal};
use phalanx_store::pod_node;

use crate::{
    BindOutcome, names, snapshot,
    state::{BindResult, Driver},
};

impl Driver {
    /// Builds the cycle's snapshot: considered nodes, the pods bound to them, and assumed pods.
    pub(crate) fn snapshot(&mut self, entity: &QueuedEntity) -> Snapshot {
        let nodes: Vec<_> = self
            .store
            .nodes()
            .state()
            .into_iter()
            .filter(|n| self.filter.matches(n.metadata.labels.as_ref()))
            .collect();
        let mut statics = Vec::with_capacity(nodes.len());
        for n in &nodes {
            match self.cache.node(n) {
                Ok(s) => statics.push(s),
                Err(e) => tracing::warn!(node = %n.name_any(), error = %e, "node skipped"),
            }
        }
        let mut snap = Snapshot::new(statics);
        let names: Vec<String> = nodes.iter().map(|n| n.name_any()).collect();
        // Only pods of lower priority than the entity's can be preemption victims: only their start times matter
        // (victim order), so a cycle among equal priorities pays nothing for them.
        let top = entity.pods.iter().map(|p| p.priority).max().unwrap_or(i32::MIN);
        let mut candidates = Vec::new();
        for sp in snapshot::pods_for_snapshot(&self.store, &names) {
            let info = self.cache.pod(&sp.pod, self.store.group_of_pod(&sp.pod));
            if info.priority < top {
                candidates.push(sp.pod.clone());
            }
            match sp.assumed_on {
                None => {
                    snap.add_pod(info);
                }
                Some(node) => {
                    let mut info = (*info).clone();
                    info.node_name = Some(node.as_str().into());
                    snap.add_pod(Arc::new(info));
                }
            }
        }
        // Members bound to nodes outside this instance's partition still count for their group's quorum (for a
        // CompositePodGroup tree: the members of every leaf).
        let mut groups: Vec<GroupKey> = Vec::new();
        if let Some(g) = &entity.group {
            groups.push(g.key.clone());
        }
        if let Some(t) = &entity.tree {
            groups.extend(t.leaves_under(&t.root().key).iter().cloned());
        }
        for g in &groups {
            for p in self.store.group_members(g) {
                let Some(key) = PodKey::of(&p) else { continue };
                if pod_node(&p).is_some() && !is_terminal(&p) && !snap.contains_pod(&key) {
                    snap.add_pod(self.cache.pod(&p, Some(g.clone())));
                }
            }
        }
        self.preemption_inputs(&mut snap, &candidates);
        snap
    }

    pub(crate) fn cycle(&mut self, entity: QueuedEntity) {
        let started = Instant::now();
        let decision = match self.foreign_decision(&entity) {
            Some(d) => d,
            None => {
                let mut snap = self.snapshot(&entity);
                self.scheduler.schedule(&mut snap, &entity)
            }
        };
        self.queue.done(&decision, Instant::now());
        let kind = if entity.tree.is_some() {
            "compositepodgroup"
        } else if entity.group.is_some() {
            "podgroup"
        } else {
            "pod"
        };
        let result = match decision.outcome {
            Outcome::Scheduled => "scheduled",
            Outcome::Unschedulable => "unschedulable",
            Outcome::Error => "error",
            Outcome::Skipped => "skipped",
        };
        tracing::debug!(entity = %decision.entity, result, bindings = decision.bindings.len(), "cycle");
        self.apply(decision);
        self.metrics
            .attempt(kind, result, started.elapsed().as_secs_f64());
    }

    pub(crate) fn apply(&mut self, d: Decision) {
        for b in &d.bindings {
            let key = b.pod.clone();
            let Some(pod) = self.store.pod(&key) else { continue };
            if pod.metadata.uid.as_deref() != Some(&*b.uid) {
                continue;
            }
            let node = b.node.to_string();
            self.store.assume(pod.clone(), &node);
            let (binder, writer, store, metrics, tx) = (
                self.binder.clone(),
                self.writer.clone(),
                self.store.clone(),
                self.metrics.clone(),
                self.bind_tx.clone(),
            );
            self.tasks.spawn(async move {
                let outcome = if writer.is_leader() {
                    let t = Instant::now();
                    let o = binder.bind(&pod, &node).await;
                    let label = match &o {
                        BindOutcome::Bound => "bound",
                        BindOutcome::AlreadyBound => "already_bound",
                        BindOutcome::Conflict(_) => "conflict",
                        BindOutcome::NotFound => "not_found",
                        BindOutcome::Failed(_) => "error",
                    };
                    metrics.bind(label, t.elapsed().as_secs_f64());
                    o
                } else {
                    BindOutcome::Failed("lost leadership before binding".into())
                };
                if outcome.is_success() {
                    store.finish_binding(&key);
                    writer.event_scheduled(&pod, &node).await;
                } else {
                    store.forget(&key);
                    tracing::info!(pod = %key, node, ?outcome, "bind failed");
                    if let BindOutcome::Failed(m) = &outcome {
                        let msg = format!("Binding rejected: {m}");
                        let _ = writer
                            .pod_unschedulable(&pod, reasons::SCHEDULER_ERROR, &msg)
                            .await;
                        writer.event_failed(&pod, reasons::SCHEDULER_ERROR, &msg).await;
                    }
                }
                let _ = tx.send(BindResult { key, node, outcome });
            });
        }
        self.apply_preemption(&d);
        let waiting = d.preemption.as_ref().is_some_and(|p| p.success);
        for f in d.failures {
            let key = f.pod.clone();
            if waiting {
                // Not a failure: the pod waits for its victims (once per reason, like the other waits).
                let message = self.waiting_message(&d.entity, &f.message);
                self.submit_pod_condition(
                    key,
                    Some(f.uid.to_string()),
                    reasons::WAITING_FOR_PREEMPTION,
                    message,
                    false,
                );
                continue;
            }
            // A pod that cannot be placed even on the room kept for it gives that room up.
            self.bind_reserved.remove(&key);
            if self.nominated.remove(&key).is_some()
                && let Some(pod) = self.store.pod(&key)
            {
                // Upstream clears the nomination of a pod that failed without preempting (`clearNominatedNode`).
                let evictor = self.evictor.clone();
                self.tasks.spawn(async move {
                    let _ = evictor.nominate(&pod, None).await;
                });
            }
            self.submit_pod_condition(
                key,
                Some(f.uid.to_string()),
                names::failure_reason(f.reason),
                f.message,
                true,
            );
        }
        for c in d.conditions {
            let g = c.group.clone();
            let message = if waiting {
                self.waiting_message(&d.entity, &c.message)
            } else {
                c.message
            };
            self.spawn_group_condition(
                g,
                names::condition_type(c.type_),
                c.status,
                names::condition_reason(c.reason),
                message,
            );
        }
    }

    pub(crate) fn on_bind_result(&mut self, r: BindResult) {
        if r.outcome.is_success() {
            return;
        }
        // The queue counted the pod as assigned when the decision was done; put it back unless it is gone or bound.
        let Some(p) = self.store.pod(&r.key) else { return };
        if pod_node(&p).is_some() || is_terminal(&p) || !self.ours(&p) {
            return;
        }
        let info = self.cache.pod(&p, self.store.group_of_pod(&p));
        self.known.insert(r.key.clone(), info.clone());
        if info.group_name.is_some() && !matches!(r.outcome, BindOutcome::Conflict(_) | BindOutcome::NotFound)
        {
            // Its siblings are bound: keep its room on that node, or other work takes it and the gang stays half
            // bound for good (found by the chaos suite's admission-deny fault).
            self.bind_reserved.insert(r.key.clone(), (info.clone(), r.node));
        }
        // Back to its place, with backoff (upstream `handleBindingCycleError`).
        self.queue.bind_failed(info, Instant::now());
    }
}
