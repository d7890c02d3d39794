//! Cluster events into the queue (upstream's queueing hints, `pkg/scheduler/backend/queue`): which unschedulable
//! entities an event wakes, and how an event that arrives while an entity is being scheduled makes it retry.

use std::time::Instant;

use super::{ClusterEvent, Loc, SchedulingQueue};
use crate::model::{EntityKey, PodInfo};

impl SchedulingQueue {
    /// Applies a cluster event (queueing hints): node and pod-deletion events wake every
    /// unschedulable entity; an assigned member pod counts toward quorum and wakes its group.
    pub fn on_event(&mut self, event: ClusterEvent, now: Instant) {
        match event {
            ClusterEvent::AssignedPodAdded { pod, group } => {
                self.sent.remove(&pod);
                if let Some(g) = group {
                    let key = self.forest.home_of(&g);
                    let e = self.entry_mut(&key, now);
                    e.pods.remove(&pod);
                    e.assigned.insert(pod, Some(g));
                    self.wake(&key, now);
                    self.reevaluate(&key, now);
                    self.cleanup(&key);
                }
                // A pod that lands can satisfy pod affinity or change topology spread counts (upstream's
                // InterPodAffinity and PodTopologySpread queueing hints on Pod/Add): wake whoever waits on those.
                self.wake_inter_pod(now);
            }
            ClusterEvent::AssignedPodDeleted { pod, group } => {
                if let Some(g) = group {
                    let key = self.forest.home_of(&g);
                    if let Some(e) = self.entries.get_mut(&key) {
                        e.assigned.remove(&pod);
                    }
                    self.reevaluate(&key, now);
                    self.cleanup(&key);
                }
                self.wake_all(now);
            }
            ClusterEvent::NodeAdded | ClusterEvent::NodeUpdated | ClusterEvent::AssignedPodUpdated => {
                self.wake_all(now)
            }
            ClusterEvent::StorageChanged => self.wake_where(now, |p| !p.spec.volumes.is_empty()),
            ClusterEvent::DevicesChanged => self.wake_where(now, |p| !p.spec.resource_claims.is_empty()),
        }
    }

    /// Moves one entity out of the unschedulable pool, into backoff or active by its backoff expiry (upstream
    /// `Activate`, which the preemption executor calls when evicting a victim failed: the preemptor would
    /// otherwise wait for a deletion that never comes). An entity being scheduled retries when its cycle ends;
    /// one elsewhere in the queue, or unknown, is left as it is.
    pub fn activate(&mut self, key: &EntityKey, now: Instant) {
        self.wake(key, now);
    }

    /// Wakes the unschedulable entities with a pod that has inter-pod constraints (pod affinity, anti-affinity,
    /// topology spread). Coarser than upstream's hints, which also check that the landed pod matches a term: a wasted
    /// retry costs one cycle, a missed one costs the flush interval.
    pub(super) fn wake_inter_pod(&mut self, now: Instant) {
        self.wake_where(now, |p| p.spec.has_inter_pod_constraints());
    }

    /// Wakes the unschedulable entities with a pending pod for which `wanted` holds.
    pub(super) fn wake_where(&mut self, now: Instant, wanted: impl Fn(&PodInfo) -> bool) {
        let keys: Vec<EntityKey> = self
            .pool
            .iter()
            .map(|(_, _, k)| k.clone())
            .filter(|k| {
                self.entries
                    .get(k)
                    .is_some_and(|e| e.pods.values().any(|(p, _)| wanted(p)))
            })
            .collect();
        for k in keys {
            self.wake(&k, now);
        }
        // An entity being scheduled saw its snapshot before this event: it retries instead of parking (as in
        // wake_all), or a storage or pod-affinity change during its cycle would wait for the flush.
        for k in &self.in_flight {
            if let Some(e) = self.entries.get_mut(k)
                && let Loc::InFlight { event_seen, .. } = &mut e.loc
                && e.pods.values().any(|(p, _)| wanted(p))
            {
                *event_seen = true;
            }
        }
    }

    pub(super) fn wake_all(&mut self, now: Instant) {
        let keys: Vec<EntityKey> = self.pool.iter().map(|(_, _, k)| k.clone()).collect();
        for k in keys {
            self.wake(&k, now);
        }
        for k in &self.in_flight {
            if let Some(e) = self.entries.get_mut(k)
                && let Loc::InFlight { event_seen, .. } = &mut e.loc
            {
                *event_seen = true;
            }
        }
    }

    /// Moves an entity out of the unschedulable pool (to backoff or active).
    pub(super) fn wake(&mut self, key: &EntityKey, now: Instant) {
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        match &mut e.loc {
            Loc::Unschedulable(since) => {
                let since = *since;
                self.pool.remove(&(since, e.seq, key.clone()));
                e.loc = Loc::Idle;
                self.place(key, now);
            }
            Loc::InFlight { event_seen, .. } => *event_seen = true,
            _ => {}
        }
    }
}
