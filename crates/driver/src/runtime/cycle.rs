//! One scheduling cycle and what follows it (upstream `scheduleOne` / `scheduleOnePodGroup`,
//! `pkg/scheduler/schedule_one*.go`): the cache builds the snapshot, the pure core decides, and the decision goes
//! to the dispatcher: assume and bind in the background, write conditions and events, nominate and evict.
//!
//! A failed bind unreserves the pod's resource claims (in the dispatcher's bind task), is forgotten in the cache
//! by the loop, and its pod goes back to its place in the queue with backoff (upstream `handleBindingCycleError`:
//! Unreserve, `ForgetPod`, then requeue with backoff).
//!
//! Workload-aware preemption (see `crate::dispatcher::preempt` for the order of its writes): before a cycle the
//! snapshot learns the group objects (victim units and their priorities), the nominated pods, the pods terminating
//! because of preemption, the preemptors whose victims are still going and the PodDisruptionBudgets (upstream keeps
//! these in the scheduler cache, the nominator and the async preemption executor,
//! `pkg/scheduler/framework/preemption/executor.go`); after it, the tracker turns the decision into nominations and
//! evictions.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use phalanx_api::conditions::{DISRUPTION_TARGET, reasons};
use phalanx_scheduler::model::DisruptionMode;
use phalanx_scheduler::{Decision, EntityKey, GroupKey, Outcome, Pdb, PodKey, QueuedEntity, Snapshot};
use tokio::sync::oneshot;

use super::Driver;
use crate::dispatcher::{
    devices::ClaimJob,
    jobs::{BindJob, BindResult, EvictReport, Eviction, PreBindJob, PreBindResult},
};
use crate::preemption_tracker::EvictResult;
use crate::{BindOutcome, DryRun, EvictOutcome, members, names};

impl Driver {
    /// The cycle's snapshot: the cache's base (considered nodes, the pods bound to them, assumed pods; see
    /// `crate::cache::snapshot`) plus this entity's extras and the preemption inputs. Returns the extras added,
    /// which [`Driver::cycle`] removes again.
    fn snapshot(&mut self, entity: &QueuedEntity) -> (Snapshot, Vec<PodKey>) {
        let mut snap = self.cache.base_snapshot();
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
        let mut completed = HashMap::new();
        for g in &groups {
            for p in self.store.group_members(g) {
                let key = p.key().clone();
                if p.is_succeeded() {
                    // Finished members count toward the quorum without holding a node (k/k#142330).
                    *completed.entry(g.clone()).or_insert(0) += 1;
                } else if p.node_name().is_some() && !p.is_terminal() && !snap.contains_pod(&key) {
                    snap.add_pod(self.cache.pod_info(&p, Some(g.clone())));
                    extras.push(key);
                }
            }
        }
        snap.set_completed(completed);
        snap.set_volumes(self.cache.volume_catalog(self.dispatcher.volumes_in_flight()));
        snap.set_devices(self.cache.device_catalog(self.dispatcher.devices_in_flight()));
        snap.clear_preemption_inputs();
        self.preemption_inputs(&mut snap);
        (snap, extras)
    }

    /// Tells the snapshot what preemption needs (see the module docs); the pods' start times are kept with the
    /// pods themselves (see `crate::cache::snapshot`).
    fn preemption_inputs(&mut self, snap: &mut Snapshot) {
        self.cache.add_group_infos(snap);
        let cache = &self.cache;
        self.preemption.inputs(snap, |k| cache.is_known(k));
        let pdbs: Vec<Pdb> = self
            .store
            .pdbs()
            .state()
            .iter()
            .filter_map(|p| Pdb::from_api(p).ok())
            .collect();
        snap.set_pdbs(pdbs);
    }

    pub(crate) fn cycle(&mut self, entity: QueuedEntity) {
        let started = Instant::now();
        let decision = match members::foreign_decision(&self.store, &self.opts.scheduler_name, &entity) {
            Some(d) => d,
            None => {
                let (mut snap, extras) = self.snapshot(&entity);
                if let Some((root, why)) =
                    self.delays
                        .before_cycle(&entity, self.opts.preemption_delay, Instant::now())
                {
                    snap.delay_preemption(root, why);
                }
                let mark = snap.mark();
                let decision = self.scheduler.schedule(&mut snap, &entity);
                // The snapshot is kept for the next cycle: only a scheduled decision's assumptions stay in it
                // (the core reverts the others; this makes sure), and the cycle's extras leave it.
                if decision.outcome != Outcome::Scheduled {
                    snap.revert_to(mark);
                }
                self.cache
                    .keep_snapshot(snap, &extras, decision.bindings.iter().map(|b| &b.pod));
                decision
            }
        };
        self.queue.done(&decision, Instant::now());
        if decision.outcome == Outcome::Scheduled {
            self.delays.scheduled(&decision.entity);
        }
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

    /// Hands a decision to the dispatcher: its pods assumed in the cache and bound (after PreBind when it has
    /// claims or volumes to write), its preemption carried out, its failures and conditions written.
    fn apply(&mut self, mut d: Decision) {
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
            self.cache.assume(pod.clone(), &node);
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
                        ClaimJob::merge(&mut p.devices, w, (b.pod.name.clone(), b.uid.clone()));
                    }
                }
                None => self.dispatcher.queue_bind(job),
            }
        }
        if let Some(p) = prebind {
            self.dispatcher.start_prebind(p);
            self.cache.claims_in_flight_changed();
        }
        self.dispatcher.start_binds();
        self.apply_preemption(&d);
        let waiting = d.preemption.as_ref().is_some_and(|p| p.success);
        for f in d.failures {
            let key = f.pod.clone();
            if waiting {
                // Not a failure: the pod waits for its victims (once per reason, like the other waits).
                let message = self.waiting_message(&d.entity, &f.message);
                self.dispatcher.submit_pod_condition(
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
                drop(self.dispatcher.submit_nomination(w));
            }
            let message =
                crate::dispatcher::conditions::name_group_claim_template(&self.store, &key, f.message);
            self.dispatcher.submit_pod_condition(
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
            let reason = names::condition_reason(c.reason, g.kind);
            self.dispatcher.spawn_group_condition(
                g,
                names::condition_type(c.type_),
                c.status,
                reason,
                message,
            );
        }
    }

    /// Acts on the preemption part of a decision: nominations, then evictions. Returns the number of victims whose
    /// eviction started (0 when none, or when a preemption was already in flight).
    fn apply_preemption(&mut self, d: &Decision) -> usize {
        let Some(report) = &d.preemption else { return 0 };
        let result = match (report.success, report.ongoing) {
            (true, true) => "ongoing",
            (true, false) => "success",
            // Held back by `preemptionDelaySeconds`: it would have evicted, so it is not a failure.
            (false, _) if crate::preemption_delay::until_in(&report.message).is_some() => "delayed",
            (false, _) => "failed",
        };
        self.metrics.preemption(result, report.duration.as_secs_f64());
        if !report.success {
            return 0;
        }
        let (cache, store) = (&self.cache, &self.store);
        let act = self.preemption.on_decision(
            d,
            |k| cache.known_pod(k),
            |v| store.pod(&v.pod).is_some_and(|p| Some(p.uid()) == Some(&*v.uid)),
        );
        let written: Vec<oneshot::Receiver<bool>> = act
            .nominate
            .into_iter()
            .map(|w| self.dispatcher.submit_nomination(w))
            .collect();
        // Lower-priority pods nominated to the nodes this plan takes will not fit there any more (upstream
        // `getLowerPriorityNominatedPods` in `prepareCandidate`): their nominations go.
        for pod in &d.cleared_nominations {
            if let Some(w) = self.preemption.clear_nomination(pod) {
                drop(self.dispatcher.submit_nomination(w));
            }
        }
        if act.victims_gone {
            // Its deletion may have been handled before this cycle (the snapshot still counted the pod, issue 35):
            // no event would wake the preemptor then.
            self.queue.activate(&d.entity, Instant::now());
        }
        if act.evict.is_empty() {
            return 0;
        }
        // The preemptor as upstream names it in `Preempted`: by UID (the pod nominated to the victim's node when
        // there is one), so the victim's namespace learns no name of another namespace.
        let uid_on_node: HashMap<&str, Arc<str>> = d
            .nominations
            .iter()
            .filter_map(|n| self.cache.known_pod(&n.pod).map(|i| (&*n.node, i.uid.clone())))
            .collect();
        let entity_name = match &d.entity {
            EntityKey::Pod(p) => self.cache.known_pod(p).map(|i| format!("pod {}", i.uid)),
            EntityKey::Group(g) => self.cache.group_uid(g).map(|u| format!("pod group {u}")),
        }
        .unwrap_or_else(|| "a higher priority pod".to_owned());
        let mut victims = Vec::new();
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
            victims.push(Eviction {
                pod,
                preemptor_name: who,
                node: v.node.to_string(),
                uid: v.uid.clone(),
                victim: v.pod.clone(),
                all_group: (v.mode == DisruptionMode::All).then(|| v.group.clone()).flatten(),
            });
        }
        let n = victims.len();
        self.dispatcher.evict(d.entity.clone(), written, victims);
        n
    }

    /// The message of a preemptor pod waiting for its victims.
    fn waiting_message(&self, entity: &EntityKey, core_message: &str) -> String {
        let n = self.preemption.waiting_victims(entity);
        if n == 0 {
            return core_message.to_owned();
        }
        format!("waiting for {n} preempted pod(s) to terminate; {core_message}")
    }

    pub(crate) fn on_bind_result(&mut self, r: BindResult) {
        if r.outcome.is_success() {
            return;
        }
        // The room moves from the assumed pod to the reservation in one step of the loop, with no cycle between.
        let pod = self.store.pod(&r.key);
        self.cache.forget(&r.key);
        // The queue counted the pod as assigned when the decision was done; put it back unless it is gone or bound.
        let Some(p) = pod else { return };
        if p.node_name().is_some() || p.is_terminal() || !self.cache.ours(&p) {
            return;
        }
        let info = self.cache.track_again(&p);
        if info.group_name.is_some() && !matches!(r.outcome, BindOutcome::Conflict(_) | BindOutcome::NotFound)
        {
            // Its siblings are bound: keep its room on that node, or other work takes it and the gang stays half
            // bound for good (found by the chaos suite's admission-deny fault).
            self.preemption.on_bind_failed(info.clone(), &r.node);
        }
        // Back to its place, with backoff (upstream `handleBindingCycleError`).
        self.queue.bind_failed(info, Instant::now());
    }

    pub(crate) fn on_prebind_result(&mut self, r: PreBindResult) {
        let failed = self.dispatcher.finish_prebind(r);
        self.cache.claims_in_flight_changed();
        let Some(failed) = failed else { return };
        let now = Instant::now();
        for b in failed.binds {
            self.cache.forget(&b.key);
            let Some(p) = self.store.pod(&b.key) else { continue };
            if p.node_name().is_some() || p.is_terminal() || !self.cache.ours(&p) {
                continue;
            }
            let info = self.cache.track_again(&p);
            self.queue.bind_failed(info, now);
            self.dispatcher.submit_pod_condition(
                b.key,
                Some(p.uid().to_owned()).filter(|u| !u.is_empty()),
                reasons::SCHEDULER_ERROR,
                failed.message.clone(),
                true,
                None,
            );
        }
        for c in failed.conditions {
            self.dispatcher.spawn_group_condition(
                c.group,
                names::condition_type(c.type_),
                false,
                reasons::SCHEDULER_ERROR,
                failed.message.clone(),
            );
        }
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
            self.dispatcher.spawn_group_condition(
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
            self.queue.activate(&r.preemptor, Instant::now());
        }
        let note = format!(
            "preemption: victim {} was not evicted: {why}; the preemptor is retried",
            r.victim
        );
        self.dispatcher.event_preemption_failed(&r.preemptor, note);
    }

    /// The cycles of a dry run ([`crate::dry_run`]): after a resync, one cycle per ready entity, in queue order,
    /// assuming each decision's bindings in the cache and writing nothing; at most `max_cycles`. `progress` is
    /// called after each cycle with (cycles done, entities ready at start).
    pub(crate) fn dry_run(mut self, max_cycles: usize, mut progress: impl FnMut(usize, usize)) -> DryRun {
        self.resync();
        let gated = self.queue.gated();
        let total = self.queue.counts().active;
        let mut out = DryRun {
            attempts: Vec::new(),
            gated,
        };
        let mut seen = std::collections::HashSet::new();
        while out.attempts.len() < max_cycles {
            let Some(entity) = self.queue.pop(Instant::now()) else {
                break;
            };
            if !seen.insert(entity.key.clone()) {
                // Its first decision is the answer; a second one would only repeat it against its own assumptions.
                continue;
            }
            let foreign = members::foreign_decision(&self.store, &self.opts.scheduler_name, &entity);
            let (decision, nodes, volumes, devices) = match foreign {
                Some(dec) => (dec, Vec::new(), Default::default(), Default::default()),
                None => {
                    // A fresh snapshot per cycle (none is kept: the cache's `base_snapshot` builds a full one), so
                    // it holds the placements assumed below.
                    let (mut snap, _extras) = self.snapshot(&entity);
                    let now = k8s_openapi::jiff::Timestamp::now();
                    if let Some((root, why)) = crate::preemption_delay::shown_hold(&self.store, &entity, now)
                    {
                        snap.delay_preemption(root, why);
                    }
                    let nodes = snap.nodes().to_vec();
                    let volumes = snap.volumes().clone();
                    let devices = snap.devices().clone();
                    (
                        self.scheduler.schedule(&mut snap, &entity),
                        nodes,
                        volumes,
                        devices,
                    )
                }
            };
            for b in &decision.bindings {
                if let Some(pod) = self.store.pod(&b.pod) {
                    self.cache.assume(pod, &b.node);
                }
            }
            self.queue.done(&decision, Instant::now());
            out.attempts.push(crate::Attempt {
                entity,
                decision,
                nodes,
                volumes,
                devices,
            });
            progress(out.attempts.len(), total);
        }
        out
    }
}
