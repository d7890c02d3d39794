//! One scheduling cycle and what follows it (upstream `scheduleOne` / `scheduleOnePodGroup`,
//! `pkg/scheduler/schedule_one*.go`): build the snapshot, run the pure core, then act on its
//! decision: assume and bind in the background, write conditions and events.
//!
//! A failed bind unreserves the pod's resource claims, is forgotten in the store by the loop, and its pod goes back to
//! its place in the queue with backoff (upstream `handleBindingCycleError`: Unreserve, `ForgetPod`, then requeue
//! with backoff).

use std::time::Instant;

use phalanx_api::conditions::reasons;
use phalanx_scheduler::{Decision, GroupKey, Outcome, PodKey, QueuedEntity, Snapshot};

use crate::{
    BindOutcome, names,
    prebind::PreBindJob,
    state::{BindJob, BindResult, Driver},
};

impl Driver {
    /// The cycle's snapshot: the base (considered nodes, the pods bound to them, assumed pods; see
    /// [`crate::snapshot_cache`]) plus this entity's extras and the preemption inputs. Returns the extras added,
    /// which [`Driver::cycle`] removes again.
    pub(crate) fn snapshot(&mut self, entity: &QueuedEntity) -> (Snapshot, Vec<PodKey>) {
        let mut snap = self.base_snapshot();
        // Members bound to nodes outside this instance's partition still count for their group's quorum (for a
        // CompositePodGroup tree: the members of every leaf).
        let mut groups: Vec<GroupKey> = Vec::new();
        if let Some(g) = &entity.group {
            groups.push(g.key.clone());
        }
        if let Some(t) = &entity.tree {
            groups.extend(t.leaves_under(&t.root().key).iter().cloned());
        }
        let mut extras = Vec::new();
        let mut completed = std::collections::HashMap::new();
        for g in &groups {
            for p in self.store.group_members(g) {
                let key = p.key().clone();
                if p.is_succeeded() {
                    // Finished members count toward the quorum without holding a node (k/k#142330).
                    *completed.entry(g.clone()).or_insert(0) += 1;
                } else if p.node_name().is_some() && !p.is_terminal() && !snap.contains_pod(&key) {
                    snap.add_pod(self.cache.pod(&p, Some(g.clone())));
                    extras.push(key);
                }
            }
        }
        snap.set_completed(completed);
        snap.set_volumes(self.volume_catalog());
        snap.set_devices(self.device_catalog());
        snap.clear_preemption_inputs();
        self.preemption_inputs(&mut snap);
        (snap, extras)
    }

    pub(crate) fn cycle(&mut self, entity: QueuedEntity) {
        let started = Instant::now();
        let decision = match self.foreign_decision(&entity) {
            Some(d) => d,
            None => {
                let (mut snap, extras) = self.snapshot(&entity);
                let mark = snap.mark();
                let decision = self.scheduler.schedule(&mut snap, &entity);
                // The snapshot is kept for the next cycle: only a scheduled decision's assumptions stay in it
                // (the core reverts the others; this makes sure), and the cycle's extras leave it.
                if decision.outcome != Outcome::Scheduled {
                    snap.revert_to(mark);
                }
                snap.commit();
                for k in &extras {
                    snap.remove_pod(k);
                    self.snapshots.pod_changed(k);
                }
                self.snapshots.put(snap);
                for b in &decision.bindings {
                    self.snapshots.pod_changed(&b.pod);
                }
                decision
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

    pub(crate) fn apply(&mut self, mut d: Decision) {
        // A decision with volumes or resource claims to write binds no pod before PreBind has written every claim
        // of every pod.
        let mut prebind = d
            .bindings
            .iter()
            .any(|b| !b.volumes.is_empty() || !b.devices.is_empty())
            .then(|| PreBindJob {
                binds: Vec::new(),
                actions: Vec::new(),
                devices: Vec::new(),
                conditions: std::mem::take(&mut d.conditions),
            });
        for b in &d.bindings {
            let key = b.pod.clone();
            let Some(pod) = self.store.pod(&key) else { continue };
            if pod.uid() != &*b.uid {
                continue;
            }
            let node = b.node.to_string();
            self.store.assume(pod.clone(), &node);
            let job = BindJob {
                key,
                pod,
                node,
                queued: Instant::now(),
                claims: b.devices.iter().map(|w| w.claim.clone()).collect(),
            };
            match &mut prebind {
                Some(p) => {
                    p.binds.push(job);
                    for a in &b.volumes {
                        if !p.actions.iter().any(|x| x.claim() == a.claim()) {
                            p.actions.push(a.clone());
                        }
                    }
                    for w in &b.devices {
                        crate::devices::ClaimJob::merge(
                            &mut p.devices,
                            w,
                            (b.pod.name.clone(), b.uid.clone()),
                        );
                    }
                }
                None => self.pending_binds.push_back(job),
            }
        }
        if let Some(p) = prebind {
            self.start_prebind(p);
        }
        self.start_binds();
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
                    None,
                );
                continue;
            }
            // A pod that cannot be placed even on the room kept for it gives that room up, and its nomination:
            // upstream clears the nomination of a pod that failed without preempting (`clearNominatedNode`).
            if let Some(w) = self.preemption.on_failure(&key) {
                drop(self.submit_nomination(w));
            }
            let message = crate::conditions::name_group_claim_template(&self.store, &key, f.message);
            self.submit_pod_condition(
                key,
                Some(f.uid.to_string()),
                names::failure_reason(f.reason),
                message,
                true,
                None,
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

    /// Starts the queued binds that a free binder permit allows, oldest first (the order the cycles decided them).
    /// A bind waiting for a permit stays a queue entry (an `Arc` of the pod and the node name) rather than a
    /// parked task: at 8,000 pods decided at once, parked tasks held 34 MB (see `docs/benchmarks.md`).
    pub(crate) fn start_binds(&mut self) {
        while !self.pending_binds.is_empty() {
            let Some(permit) = self.binder.try_permit() else {
                return;
            };
            let Some(BindJob {
                key,
                pod,
                node,
                queued,
                claims,
            }) = self.pending_binds.pop_front()
            else {
                return;
            };
            let (client, binder, writer, store, metrics, tx) = (
                self.client.clone(),
                self.binder.clone(),
                self.writer.clone(),
                self.store.clone(),
                self.metrics.clone(),
                self.bind_tx.clone(),
            );
            let scheduled_event = self.opts.scheduled_events;
            self.tasks.spawn(async move {
                let outcome = if writer.is_leader() {
                    let o = binder.bind_with(permit, &pod, &node).await;
                    let label = match &o {
                        BindOutcome::Bound => "bound",
                        BindOutcome::AlreadyBound => "already_bound",
                        BindOutcome::Conflict(_) => "conflict",
                        BindOutcome::NotFound => "not_found",
                        BindOutcome::Failed(_) => "error",
                    };
                    metrics.bind(label, queued.elapsed().as_secs_f64());
                    o
                } else {
                    drop(permit);
                    BindOutcome::Failed("lost leadership before binding".into())
                };
                if outcome.is_success() {
                    store.finish_binding(&key);
                    // The result goes back before the event is written: the loop starts the next queued bind on
                    // it, and the permit is already free.
                    let _ = tx.send(BindResult {
                        key,
                        node: node.clone(),
                        outcome,
                    });
                    if scheduled_event {
                        writer.event_scheduled(&pod, &node).await;
                    }
                    return;
                }
                // The assumed pod is forgotten by the loop (`on_bind_result`), not here: a cycle running between a
                // forget here and the loop's handling of the result would see the room free and give it to other
                // work, leaving this pod's gang half bound.
                tracing::info!(pod = %key, node, ?outcome, "bind failed");
                if let BindOutcome::Failed(m) = &outcome {
                    let msg = format!("Binding rejected: {m}");
                    let _ = writer
                        .pod_unschedulable(&pod, reasons::SCHEDULER_ERROR, &msg)
                        .await;
                    writer.event_failed(&pod, reasons::SCHEDULER_ERROR, &msg).await;
                }
                // Unreserve (upstream runs it for every plugin when binding fails): the claims PreBind wrote
                // would keep the pod pinned to this node, and kube-controller-manager never frees them while the
                // pod exists. Done before the result goes back, so the requeued pod sees them free.
                if !claims.is_empty() && writer.is_leader() {
                    let uid: [std::sync::Arc<str>; 1] = [pod.uid().into()];
                    for c in &claims {
                        crate::devices::unreserve(&client, c, &uid).await;
                    }
                }
                let _ = tx.send(BindResult { key, node, outcome });
            });
        }
    }

    pub(crate) fn on_bind_result(&mut self, r: BindResult) {
        if r.outcome.is_success() {
            return;
        }
        // The room moves from the assumed pod to the reservation in one step of the loop, with no cycle between.
        let pod = self.store.pod(&r.key);
        self.store.forget(&r.key);
        self.snapshots.pod_changed(&r.key);
        // The queue counted the pod as assigned when the decision was done; put it back unless it is gone or bound.
        let Some(p) = pod else { return };
        if p.node_name().is_some() || p.is_terminal() || !self.ours(&p) {
            return;
        }
        let info = self.cache.pod(&p, self.store.group_of_pod(&p));
        self.known.insert(r.key.clone(), info.clone());
        if info.group_name.is_some() && !matches!(r.outcome, BindOutcome::Conflict(_) | BindOutcome::NotFound)
        {
            // Its siblings are bound: keep its room on that node, or other work takes it and the gang stays half
            // bound for good (found by the chaos suite's admission-deny fault).
            self.preemption.on_bind_failed(info.clone(), &r.node);
        }
        // Back to its place, with backoff (upstream `handleBindingCycleError`).
        self.queue.bind_failed(info, Instant::now());
    }
}
