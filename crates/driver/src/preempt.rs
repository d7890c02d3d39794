//! Workload-aware preemption in the runtime: what the core needs to know before a cycle, and acting on its
//! decision after it.
//!
//! Before a cycle the snapshot learns the group objects (victim units and their priorities), the nominated pods
//! (their capacity is reserved against equal- and lower-priority work), the pods terminating because of our
//! preemption, the roots whose preemption is still in flight, the PodDisruptionBudgets and the pods' start times
//! (upstream keeps these in the scheduler cache, the nominator and the async preemption executor,
//! `pkg/scheduler/framework/preemption/executor.go`).
//!
//! After a successful PodGroupPostFilter the driver evicts the victims ([`crate::Evictor`]: `DisruptionTarget`, then
//! delete, then `Preempted`), marks each victim group of an `all` unit `DisruptionTarget=True`, nominates the
//! preemptor pods (`status.nominatedNodeName`) and tells them `PodScheduled=False/WaitingForPreemption`. Nothing
//! binds in that cycle; the preemptor's next cycle, woken when the victims are gone, binds where the nominations
//! reserved room. At most one preemption per root is in flight: the core returns the current nominations while the
//! previous victims still terminate (k/k#140641).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use phalanx_api::conditions::{DISRUPTION_TARGET, reasons};
use phalanx_scheduler::model::DisruptionMode;
use phalanx_scheduler::{Decision, EntityKey, GroupKey, GroupKind, Pdb, PodKey, Snapshot};

use crate::{EvictOutcome, state::Driver};

/// How long a preemption counts as in flight at most: victims that never terminate (a stuck finalizer) must not
/// block their preemptor forever.
const IN_FLIGHT_LIMIT: Duration = Duration::from_secs(120);

/// One preemption whose victims are still terminating.
#[derive(Debug, Clone)]
pub(crate) struct InFlight {
    pub(crate) started: Instant,
    pub(crate) victims: HashSet<PodKey>,
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
        for (key, (info, node)) in self.nominated.iter().chain(&self.bind_reserved) {
            if self.known.contains_key(key) {
                snap.set_nominated(info.clone(), node);
            }
        }
        for key in &self.preempted {
            snap.set_terminating_by_preemption(key, true);
        }
        let now = Instant::now();
        self.in_flight
            .retain(|_, f| !f.victims.is_empty() && now.duration_since(f.started) < IN_FLIGHT_LIMIT);
        for entity in self.in_flight.keys() {
            snap.set_preemption_in_flight(entity, true);
        }
        let pdbs: Vec<Pdb> = self
            .store
            .pdbs()
            .state()
            .iter()
            .filter_map(|p| Pdb::from_api(p).ok())
            .collect();
        snap.set_pdbs(pdbs);
    }

    /// Acts on the preemption part of a decision: evictions, victim group conditions, nominations. Returns the
    /// number of victims evicted by this decision (0 when none, or when a preemption was already in flight).
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
        for n in &d.nominations {
            let Some(pod) = self.store.pod(&n.pod) else {
                continue;
            };
            if let Some(info) = self.known.get(&n.pod) {
                self.nominated
                    .insert(n.pod.clone(), (info.clone(), n.node.to_string()));
            }
            let (evictor, node) = (self.evictor.clone(), n.node.to_string());
            self.tasks.spawn(async move {
                if let Err(e) = evictor.nominate(&pod, Some(&node)).await {
                    tracing::debug!(pod = %pod.metadata.name.as_deref().unwrap_or_default(), error = %e, "nomination not written");
                }
            });
        }
        if report.ongoing || d.victims.is_empty() {
            return 0;
        }
        let preemptor = match &d.entity {
            EntityKey::Pod(p) => format!("pod {p}"),
            EntityKey::Group(g) if g.kind == GroupKind::PodGroup => {
                format!("pod group {}/{}", g.namespace, g.name)
            }
            EntityKey::Group(g) => format!("composite pod group {}/{}", g.namespace, g.name),
        };
        let mut victims = HashSet::new();
        let mut all_groups: HashSet<GroupKey> = HashSet::new();
        for v in &d.victims {
            self.metrics.victim(match v.mode {
                DisruptionMode::All => "all",
                DisruptionMode::Single => "single",
            });
            if v.mode == DisruptionMode::All
                && let Some(g) = &v.group
            {
                all_groups.insert(g.clone());
            }
            let Some(pod) = self.store.pod(&v.pod) else {
                continue;
            };
            if pod.metadata.uid.as_deref() != Some(&*v.uid) {
                continue;
            }
            victims.insert(v.pod.clone());
            self.preempted.insert(v.pod.clone());
            let (evictor, sched, who, node) = (
                self.evictor.clone(),
                self.opts.scheduler_name.clone(),
                preemptor.clone(),
                v.node.to_string(),
            );
            let key = v.pod.clone();
            self.tasks.spawn(async move {
                match evictor.preempt(&pod, &sched, &who, &node).await {
                    EvictOutcome::Deleted | EvictOutcome::Gone => {}
                    other => tracing::warn!(pod = %key, outcome = ?other, "victim not evicted"),
                }
            });
        }
        for g in all_groups {
            let message = format!("preempted by {preemptor}");
            self.spawn_group_condition(
                g,
                DISRUPTION_TARGET,
                true,
                reasons::PREEMPTION_BY_SCHEDULER,
                message,
            );
        }
        let n = victims.len();
        if n > 0 {
            self.in_flight.insert(
                d.entity.clone(),
                InFlight {
                    started: Instant::now(),
                    victims,
                },
            );
        }
        n
    }

    /// A pod went away (deleted or terminal): it no longer blocks a preemption in flight, and no longer counts as
    /// terminating because of us. Clears its nomination too.
    pub(crate) fn preemption_pod_gone(&mut self, key: &PodKey) {
        self.bind_reserved.remove(key);
        self.preempted.remove(key);
        self.nominated.remove(key);
        for f in self.in_flight.values_mut() {
            f.victims.remove(key);
        }
        self.in_flight.retain(|_, f| !f.victims.is_empty());
    }

    /// The message of a preemptor pod waiting for its victims.
    pub(crate) fn waiting_message(&self, entity: &EntityKey, core_message: &str) -> String {
        let n = self.in_flight.get(entity).map_or(0, |f| f.victims.len());
        if n == 0 {
            return core_message.to_owned();
        }
        format!("waiting for {n} preempted pod(s) to terminate; {core_message}")
    }
}
