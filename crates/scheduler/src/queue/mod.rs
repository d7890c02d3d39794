//! The entity scheduling queue (upstream `pkg/scheduler/backend/queue/scheduling_queue.go`):
//! standalone pods and root groups share one active heap ordered by PrioritySort (priority
//! descending, then timestamp), a backoff queue, an unschedulable pool woken by cluster events
//! and a periodic flush, and PreEnqueue gates (SchedulingGates, GangScheduling quorum) whose
//! reasons are returned as data.
//!
//! Time is passed in explicitly (`now`), so the queue is deterministic and testable.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::SchedulerConfig;
use crate::decision::{Decision, RequeueMode};
use crate::workload_forest::WorkloadForest;

mod events;
mod gate;
mod room;
mod tree;

pub use gate::{Gate, GateReason};

use crate::hierarchy::GroupTree;
use crate::model::{EntityKey, GroupInfo, GroupKey, GroupKind, PodInfo, PodKey};
use crate::resources::Resources;

/// A cluster event that may make unschedulable entities schedulable (queueing hints).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterEvent {
    /// A node was added.
    NodeAdded,
    /// A node changed in a way that matters to scheduling (labels, taints, allocatable,
    /// unschedulable). Do not send it for status heartbeats: it wakes every unschedulable entity.
    NodeUpdated,
    /// A pod was bound/assigned (any scheduler). Counts toward its group's quorum.
    AssignedPodAdded {
        /// The pod.
        pod: PodKey,
        /// Its group, if any.
        group: Option<GroupKey>,
    },
    /// An assigned pod was deleted or finished: capacity freed.
    AssignedPodDeleted {
        /// The pod.
        pod: PodKey,
        /// Its group, if any.
        group: Option<GroupKey>,
    },
    /// An assigned pod changed in a way that may free capacity (e.g. resized down).
    AssignedPodUpdated,
    /// A claim, volume, storage class or CSI object changed (upstream's PersistentVolumeClaim, PersistentVolume,
    /// StorageClass, CSINode, CSIDriver and CSIStorageCapacity events of the volume plugins): wakes the entities
    /// with a pod that has volumes.
    StorageChanged,
    /// A DeviceClass, ResourceSlice, ResourceClaim or ResourceClaimTemplate changed (upstream DynamicResources'
    /// `EventsToRegister`): wakes the entities with a pod that has resource claims.
    DevicesChanged,
}

/// What `pop` hands to the scheduler.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedEntity {
    /// Entity key.
    pub key: EntityKey,
    /// The group object (None for a standalone pod and for a CompositePodGroup tree).
    pub group: Option<Arc<GroupInfo>>,
    /// For a root CompositePodGroup: the whole tree (`key` is then
    /// `EntityKey::Group(<root CPG key>)` and `pods` holds the pending pods of every leaf).
    pub tree: Option<Arc<GroupTree>>,
    /// Pending pods, ordered by priority descending, then first seen.
    pub pods: Vec<Arc<PodInfo>>,
    /// Previous unschedulable attempts.
    pub attempts: u32,
    /// Queue timestamp (ordering).
    pub timestamp: Instant,
}

/// Sizes of the sub-queues, for metrics (`scheduler_pending_entities`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueCounts {
    /// activeQ.
    pub active: usize,
    /// backoffQ.
    pub backoff: usize,
    /// Unschedulable pool.
    pub unschedulable: usize,
    /// Held by a PreEnqueue gate.
    pub gated: usize,
    /// Popped, not yet `done`.
    pub in_flight: usize,
}

#[derive(Debug, Clone, PartialEq)]
enum Loc {
    /// In the active heap under this priority.
    Active(i32),
    Backoff(Instant),
    Unschedulable(Instant),
    Gated(Gate),
    InFlight {
        event_seen: bool,
        popped: HashSet<PodKey>,
    },
    /// A group with no pending pods (all assigned), kept for quorum bookkeeping.
    Idle,
}

#[derive(Debug)]
struct Entry {
    group: Option<Arc<GroupInfo>>,
    is_group: bool,
    pods: BTreeMap<PodKey, (Arc<PodInfo>, u64)>,
    /// Assigned members with their leaf group (several leaves for a tree entity).
    assigned: HashMap<PodKey, Option<GroupKey>>,
    loc: Loc,
    attempts: u32,
    errors: u32,
    timestamp: Instant,
    seq: u64,
    backoff_until: Option<Instant>,
}

type ActiveKey = (Reverse<i32>, Instant, u64, EntityKey);

/// Where a pod stood when its bind was decided.
#[derive(Debug, Clone, Copy)]
struct Sent {
    /// The entity's queue timestamp and sequence number (its place in the active heap).
    timestamp: Instant,
    entity_seq: u64,
    /// The pod's first-seen sequence number within its entity.
    pod_seq: u64,
    /// Consecutive failed binds of this pod (drives the backoff).
    failures: u32,
}

/// The queue. Not thread-safe by itself: the driver owns it (or wraps it in a mutex).
#[derive(Debug)]
pub struct SchedulingQueue {
    initial_backoff: Duration,
    max_backoff: Duration,
    flush_interval: Duration,
    entries: HashMap<EntityKey, Entry>,
    active: BTreeSet<ActiveKey>,
    backoff: BTreeSet<(Instant, u64, EntityKey)>,
    pool: BTreeSet<(Instant, u64, EntityKey)>,
    in_flight: HashSet<EntityKey>,
    /// Entities in `Loc::Gated`, kept as a count so that [`SchedulingQueue::counts`] is O(1): the driver reads
    /// the sizes on every pass of its loop, and a scan of 12,500 entities per pass was measurable at 100,000
    /// pending pods (docs/benchmarks.md). Raised where an entity becomes gated, lowered in `detach`.
    gated: usize,
    seq: u64,
    gate_changes: Vec<(EntityKey, Option<Gate>)>,
    /// CompositePodGroups, hierarchy leaves, parent links and where each leaf's pods live.
    forest: WorkloadForest,
    /// Pods whose bind was decided and not yet confirmed by the watch: where they stood, so that a failed bind puts
    /// them back in place (see [`SchedulingQueue::bind_failed`]).
    sent: HashMap<PodKey, Sent>,
    /// Leaves to move once the in-flight entity holding or receiving them is done.
    deferred: Vec<GroupKey>,
    /// Groups that failed short of room, and the requests freed since ([`room`]).
    room: room::RoomWatch,
}

impl SchedulingQueue {
    /// An empty queue using the backoff and flush settings of `config`.
    pub fn new(config: &SchedulerConfig) -> SchedulingQueue {
        SchedulingQueue {
            initial_backoff: config.initial_backoff(),
            max_backoff: config.max_backoff(),
            flush_interval: config.flush_interval(),
            entries: HashMap::new(),
            active: BTreeSet::new(),
            backoff: BTreeSet::new(),
            pool: BTreeSet::new(),
            in_flight: HashSet::new(),
            gated: 0,
            seq: 0,
            gate_changes: Vec::new(),
            forest: WorkloadForest::default(),
            sent: HashMap::new(),
            deferred: Vec::new(),
            room: room::RoomWatch::default(),
        }
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Backoff for the n-th failure of an entity of `size` pods:
    /// `min(initial · 2^(n−1), max · sqrt(size))` (upstream queue guide).
    pub fn backoff_duration(&self, n: u32, size: usize) -> Duration {
        let exp = self
            .initial_backoff
            .saturating_mul(1u32 << n.saturating_sub(1).min(20));
        let cap = self.max_backoff.mul_f64((size.max(1) as f64).sqrt());
        exp.min(cap)
    }

    /// The entity currently holding a pod: its root's for a hierarchy leaf, else its group's
    /// (or itself).
    fn entity_of(&self, pod: &PodInfo) -> EntityKey {
        match pod.group_key() {
            Some(g) => self.forest.home_of(&g),
            None => EntityKey::Pod(pod.key.clone()),
        }
    }

    fn entry_mut(&mut self, key: &EntityKey, now: Instant) -> &mut Entry {
        if !self.entries.contains_key(key) {
            let seq = self.next_seq();
            self.entries.insert(
                key.clone(),
                Entry {
                    group: None,
                    is_group: matches!(key, EntityKey::Group(_)),
                    pods: BTreeMap::new(),
                    assigned: HashMap::new(),
                    loc: Loc::Idle,
                    attempts: 0,
                    errors: 0,
                    timestamp: now,
                    seq,
                    backoff_until: None,
                },
            );
        }
        self.entries.get_mut(key).expect("inserted above")
    }

    /// Adds a pod with this scheduler's name. A pod with `node_name` set counts as assigned
    /// (group quorum) instead of being queued. Grouped pods join their group's entity.
    pub fn add_pod(&mut self, pod: Arc<PodInfo>, now: Instant) {
        if pod.node_name.is_some() {
            self.on_event(
                ClusterEvent::AssignedPodAdded {
                    pod: pod.key.clone(),
                    group: pod.group_key(),
                },
                now,
            );
            return;
        }
        let key = self.entity_of(&pod);
        let seq = self.next_seq();
        let entry = self.entry_mut(&key, now);
        if entry.pods.is_empty() && !matches!(entry.loc, Loc::InFlight { .. }) {
            // The entity starts with its first pending pod (upstream creates the queued entity
            // then): a group object seen earlier, or members already running, do not make it older.
            entry.timestamp = now;
            entry.seq = seq;
        }
        entry.assigned.remove(&pod.key);
        let added = match entry.pods.get_mut(&pod.key) {
            Some(slot) => {
                slot.0 = pod;
                false
            }
            None => {
                entry.pods.insert(pod.key.clone(), (pod, seq));
                true
            }
        };
        let changes = self.gate_changes.len();
        self.reevaluate(&key, now);
        // A pod that joins an entity gated for a reason that did not change (a group not created yet says the same
        // to every member) is announced too: the runtime writes the reason on members that do not carry it yet.
        if added
            && self.gate_changes.len() == changes
            && let Some(Loc::Gated(g)) = self.entries.get(&key).map(|e| &e.loc)
        {
            self.gate_changes.push((key.clone(), Some(g.clone())));
        }
        if added && matches!(&key, EntityKey::Group(_)) {
            // GangScheduling's hint (UnscheduledPod/Add -> Queue for the same hierarchy): a new
            // pending member re-queues an unschedulable group or tree, through backoff. The new pod
            // may fit where the others did not, and a tree may have failed only because a child
            // had no pods yet.
            self.wake(&key, now);
        }
    }

    /// Updates a pod (same as add; a pod that got a `nodeName` leaves the queue and counts as
    /// assigned, until it gets a `deletionTimestamp`).
    pub fn update_pod(&mut self, pod: Arc<PodInfo>, now: Instant) {
        if pod.node_name.is_some() {
            // The watch shows it bound: its bind is confirmed.
            self.sent.remove(&pod.key);
            let key = self.entity_of(&pod);
            if pod.deleting {
                // A member being deleted holds no place in its gang's quorum (as in `Snapshot::scheduled_count`):
                // the gate counts it out now, not when a finalizer or the kubelet lets it go.
                if let Some(e) = self.entries.get_mut(&key) {
                    e.pods.remove(&pod.key);
                    if e.assigned.remove(&pod.key).is_some() {
                        self.reevaluate(&key, now);
                        self.cleanup(&key);
                    }
                }
                return;
            }
            let already_assigned = self
                .entries
                .get(&key)
                .is_some_and(|e| e.assigned.contains_key(&pod.key));
            if let Some(e) = self.entries.get_mut(&key) {
                e.pods.remove(&pod.key);
            }
            if already_assigned {
                // An update of a member that was already bound (status, labels) is not a new member: upstream's
                // GangScheduling hint wakes the group on Add only.
                return;
            }
            self.on_event(
                ClusterEvent::AssignedPodAdded {
                    pod: pod.key.clone(),
                    group: pod.group_key(),
                },
                now,
            );
            self.cleanup(&key);
            return;
        }
        self.add_pod(pod, now);
    }

    /// Deletes a pod (pending or assigned). Deleting an assigned pod frees capacity and wakes
    /// unschedulable entities. So does deleting a pod whose bind was decided but not yet seen by the watch: it
    /// held room as an assumed pod (upstream wakes on the rejection of an assumed, waiting pod the same way,
    /// `deletePodFromSchedulingQueue` in `pkg/scheduler/eventhandlers.go`).
    pub fn delete_pod(&mut self, pod: &PodInfo, now: Instant) {
        let decided = self.sent.remove(&pod.key).is_some();
        let key = self.entity_of(pod);
        let mut was_assigned = pod.node_name.is_some() || decided;
        if let Some(e) = self.entries.get_mut(&key) {
            e.pods.remove(&pod.key);
            was_assigned |= e.assigned.remove(&pod.key).is_some();
        }
        if was_assigned {
            self.room_freed(&pod.spec.requests, now);
            self.on_event(
                ClusterEvent::AssignedPodDeleted {
                    pod: pod.key.clone(),
                    group: pod.group_key(),
                },
                now,
            );
        } else {
            self.reevaluate(&key, now);
        }
        self.cleanup(&key);
    }

    /// A member pod Succeeded: it leaves the pending set but keeps counting toward its group's quorum (kept with the
    /// assigned members until the pod object is deleted, [`SchedulingQueue::delete_pod`]), and its capacity is free,
    /// so unschedulable entities wake as for a deletion. A pod without a group is simply deleted. Failed pods are
    /// deleted, not completed: they do not count (k/k#142330 asks for completions, not failures, to count).
    pub fn complete_pod(&mut self, pod: &PodInfo, now: Instant) {
        let Some(g) = pod.group_key() else {
            self.delete_pod(pod, now);
            return;
        };
        self.sent.remove(&pod.key);
        let key = self.forest.home_of(&g);
        let e = self.entry_mut(&key, now);
        e.pods.remove(&pod.key);
        e.assigned.insert(pod.key.clone(), Some(g));
        self.reevaluate(&key, now);
        self.cleanup(&key);
        self.room_freed(&pod.spec.requests, now);
        self.wake_all(now);
    }

    /// Counts the requests of an assigned pod that left toward the groups waiting for room, and retries at once the
    /// ones now covered ([`room`]): their backoff is cleared, and one in backoff moves to the active queue (one in
    /// the unschedulable pool moves there with the wake that follows every deletion).
    fn room_freed(&mut self, requests: &Resources, now: Instant) {
        for key in self.room.freed(requests) {
            let Some(e) = self.entries.get_mut(&key) else {
                continue;
            };
            e.backoff_until = None;
            if matches!(e.loc, Loc::Backoff(_)) {
                self.detach(&key);
                self.place(&key, now);
            }
        }
    }

    fn detach(&mut self, key: &EntityKey) {
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        match &e.loc {
            Loc::Active(prio) => {
                self.active
                    .remove(&(Reverse(*prio), e.timestamp, e.seq, key.clone()));
            }
            Loc::Backoff(t) => {
                self.backoff.remove(&(*t, e.seq, key.clone()));
            }
            Loc::Unschedulable(t) => {
                self.pool.remove(&(*t, e.seq, key.clone()));
            }
            Loc::Gated(_) => self.gated -= 1,
            _ => {}
        }
        e.loc = Loc::Idle;
    }

    fn priority_of(e: &Entry) -> i32 {
        let pod_priority = || e.pods.values().map(|(p, _)| p.priority).max().unwrap_or(0);
        match &e.group {
            Some(g) => g.priority.unwrap_or_else(pod_priority),
            None => pod_priority(),
        }
    }

    /// Puts an idle entity into active or backoff according to its backoff expiry.
    fn place(&mut self, key: &EntityKey, now: Instant) {
        // A tree's priority is its root CompositePodGroup's (when set).
        let tree_priority = match key {
            EntityKey::Group(g) if g.kind == GroupKind::CompositePodGroup => {
                self.forest.composites.get(g).and_then(|(c, _)| c.priority)
            }
            _ => None,
        };
        let Some(e) = self.entries.get_mut(key) else {
            return;
        };
        debug_assert_eq!(e.loc, Loc::Idle);
        if e.pods.is_empty() {
            return;
        }
        match e.backoff_until.filter(|t| *t > now) {
            Some(t) => {
                e.loc = Loc::Backoff(t);
                self.backoff.insert((t, e.seq, key.clone()));
            }
            None => {
                let prio = tree_priority.unwrap_or_else(|| Self::priority_of(e));
                e.loc = Loc::Active(prio);
                self.active
                    .insert((Reverse(prio), e.timestamp, e.seq, key.clone()));
            }
        }
    }

    /// Drops entities that hold nothing.
    fn cleanup(&mut self, key: &EntityKey) {
        let Some(e) = self.entries.get(key) else { return };
        if matches!(e.loc, Loc::InFlight { .. }) {
            return;
        }
        if e.pods.is_empty() && e.assigned.is_empty() && e.group.is_none() {
            self.detach(key);
            self.entries.remove(key);
            self.room.forget(key);
        } else if e.pods.is_empty() && !matches!(e.loc, Loc::Idle) {
            let gated = matches!(e.loc, Loc::Gated(_));
            self.detach(key);
            if gated {
                self.gate_changes.push((key.clone(), None));
            }
        }
    }

    /// Moves expired backoff entries and flushes old unschedulable ones.
    fn advance(&mut self, now: Instant) {
        while let Some((t, _, k)) = self.backoff.first().cloned() {
            if t > now {
                break;
            }
            self.detach(&k);
            self.place(&k, now);
        }
        while let Some((since, _, k)) = self.pool.first().cloned() {
            if since + self.flush_interval > now {
                break;
            }
            self.wake(&k, now);
        }
    }

    /// Pops the highest-priority, oldest entity that is ready at `now` and marks it in flight.
    /// Returns `None` when nothing is ready (see [`SchedulingQueue::next_wakeup`]).
    pub fn pop(&mut self, now: Instant) -> Option<QueuedEntity> {
        self.advance(now);
        let (key, tree) = loop {
            let (_, _, _, key) = self.active.pop_first()?;
            let EntityKey::Group(g) = &key else {
                break (key, None);
            };
            if g.kind != GroupKind::CompositePodGroup {
                break (key, None);
            }
            match self.forest.build_tree(g) {
                Some(t) => break (key, Some(Arc::new(t))),
                None => {
                    // Cannot happen while gates are up to date (an unknown root is gated); never hand a
                    // tree's pods to the scheduler without their tree.
                    if let Some(e) = self.entries.get_mut(&key) {
                        e.loc = Loc::Idle;
                    }
                    self.reevaluate(&key, now);
                }
            }
        };
        let e = self.entries.get_mut(&key).expect("active entries exist");
        let mut pods: Vec<(Arc<PodInfo>, u64)> = e.pods.values().cloned().collect();
        pods.sort_by(|a, b| b.0.priority.cmp(&a.0.priority).then(a.1.cmp(&b.1)));
        let popped = pods.iter().map(|(p, _)| p.key.clone()).collect();
        e.loc = Loc::InFlight {
            event_seen: false,
            popped,
        };
        self.in_flight.insert(key.clone());
        Some(QueuedEntity {
            key,
            group: e.group.clone(),
            tree,
            pods: pods.into_iter().map(|(p, _)| p).collect(),
            attempts: e.attempts,
            timestamp: e.timestamp,
        })
    }

    /// Ends the attempt of a popped entity: bound pods count as assigned; the remaining pods
    /// (the decision's requeue list plus pods that arrived meanwhile) are requeued per the
    /// decision's [`RequeueMode`].
    pub fn done(&mut self, decision: &Decision, now: Instant) {
        self.done_entity(decision, now);
        if !self.deferred.is_empty() {
            for leaf in std::mem::take(&mut self.deferred) {
                self.rehome(&leaf, now);
            }
        }
    }

    fn done_entity(&mut self, decision: &Decision, now: Instant) {
        let key = decision.entity.clone();
        self.in_flight.remove(&key);
        self.room.forget(&key);
        let Some(e) = self.entries.get_mut(&key) else {
            return;
        };
        let Loc::InFlight { event_seen, popped } = std::mem::replace(&mut e.loc, Loc::Idle) else {
            return;
        };
        for b in &decision.bindings {
            let removed = e.pods.remove(&b.pod);
            let failures = self.sent.get(&b.pod).map_or(0, |s| s.failures);
            if let Some((_, pod_seq)) = &removed {
                self.sent.insert(
                    b.pod.clone(),
                    Sent {
                        timestamp: e.timestamp,
                        entity_seq: e.seq,
                        pod_seq: *pod_seq,
                        failures,
                    },
                );
            }
            if e.is_group {
                let g = removed.and_then(|(p, _)| p.group_key());
                e.assigned.insert(b.pod.clone(), g);
            }
        }
        let keep: HashSet<&PodKey> = decision.requeue.iter().flat_map(|r| r.pods.iter()).collect();
        for p in &popped {
            if !keep.contains(p) {
                e.pods.remove(p);
            }
        }
        let size = e.pods.len();
        match decision.requeue.as_ref().map(|r| r.mode) {
            Some(RequeueMode::Unschedulable) => {
                e.attempts += 1;
                e.errors = 0;
                let n = e.attempts;
                let d = self.backoff_duration(n, size);
                let e = self.entries.get_mut(&key).expect("present");
                e.backoff_until = Some(now + d);
                e.timestamp = now;
                if e.is_group
                    && let Some(r) = &decision.requeue
                {
                    self.room.watch(key.clone(), r.short_of.clone());
                }
                if !event_seen && !e.pods.is_empty() {
                    e.loc = Loc::Unschedulable(now);
                    self.pool.insert((now, e.seq, key.clone()));
                    // A gate may apply (e.g. the group was deleted meanwhile).
                    self.regate(&key, now);
                    self.cleanup(&key);
                    return;
                }
            }
            Some(RequeueMode::Backoff) => {
                e.errors += 1;
                let n = e.errors;
                let d = self.backoff_duration(n, size);
                let e = self.entries.get_mut(&key).expect("present");
                e.backoff_until = Some(now + d);
                e.timestamp = now;
            }
            Some(RequeueMode::Immediate) => {
                e.backoff_until = None;
            }
            None => {
                e.timestamp = now;
            }
        }
        let e = self.entries.get(&key).expect("present");
        if let Some(g) = self.gate_of(e, &key).filter(|_| !e.pods.is_empty()) {
            let e = self.entries.get_mut(&key).expect("present");
            e.loc = Loc::Gated(g.clone());
            self.gated += 1;
            self.gate_changes.push((key.clone(), Some(g)));
        } else {
            self.place(&key, now);
        }
        self.cleanup(&key);
    }

    /// A bind decided by a cycle failed (upstream `handleBindingCycleError`: the pod is forgotten, then requeued
    /// with backoff). The pod goes back to its entity at the place it held: its first-seen order among the members,
    /// and, for an entity that had nothing else pending, the entity's old queue timestamp. It backs off
    /// `min(initial * 2^(n-1), max * sqrt(size))` after its n-th consecutive failure, so a webhook that denies
    /// `pods/binding` costs one attempt per backoff step, not one per second.
    pub fn bind_failed(&mut self, pod: Arc<PodInfo>, now: Instant) {
        let sent = self.sent.remove(&pod.key);
        let failures = sent.map_or(1, |s| s.failures + 1);
        let key = self.entity_of(&pod);
        let fresh_seq = self.next_seq();
        let in_flight = self
            .entries
            .get(&key)
            .is_some_and(|e| matches!(e.loc, Loc::InFlight { .. }));
        if !in_flight {
            // Out of the heaps before its keys change.
            self.detach(&key);
        }
        let e = self.entry_mut(&key, now);
        if let Some(s) = sent
            && e.pods.is_empty()
            && !in_flight
        {
            e.timestamp = s.timestamp;
            e.seq = s.entity_seq;
        }
        e.assigned.remove(&pod.key);
        let pod_seq = sent.map_or(fresh_seq, |s| s.pod_seq);
        e.pods.insert(pod.key.clone(), (pod.clone(), pod_seq));
        let size = e.pods.len();
        let until = now + self.backoff_duration(failures, size);
        let e = self.entries.get_mut(&key).expect("present");
        e.backoff_until = Some(e.backoff_until.map_or(until, |t| t.max(until)));
        let (timestamp, entity_seq) = (e.timestamp, e.seq);
        // Remember the count until the next successful bind.
        self.sent.insert(
            pod.key.clone(),
            Sent {
                timestamp,
                entity_seq,
                pod_seq,
                failures,
            },
        );
        if !in_flight {
            self.reevaluate(&key, now);
        }
    }

    /// When the next backoff expires or the next flush is due; the driver sleeps until then
    /// (or until an event arrives).
    pub fn next_wakeup(&self) -> Option<Instant> {
        let b = self.backoff.first().map(|(t, _, _)| *t);
        let f = self.pool.first().map(|(t, _, _)| *t + self.flush_interval);
        match (b, f) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The gate currently holding an entity, if any.
    pub fn gate(&self, key: &EntityKey) -> Option<&Gate> {
        match &self.entries.get(key)?.loc {
            Loc::Gated(g) => Some(g),
            _ => None,
        }
    }

    /// Every gated entity with its gate.
    pub fn gated(&self) -> Vec<(EntityKey, Gate)> {
        let mut v: Vec<(EntityKey, Gate)> = self
            .entries
            .iter()
            .filter_map(|(k, e)| match &e.loc {
                Loc::Gated(g) => Some((k.clone(), g.clone())),
                _ => None,
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Gate changes since the last call, oldest first: `Some(gate)` when an entity became (or
    /// stays, with a new message) gated, `None` when its gate lifted.
    pub fn take_gate_changes(&mut self) -> Vec<(EntityKey, Option<Gate>)> {
        std::mem::take(&mut self.gate_changes)
    }

    /// Sub-queue sizes, in entities. O(1): the sizes of the heaps and sets the queue keeps anyway, and the count
    /// of gated entities (the driver reads them on every pass of its loop). Debug builds check them against a scan
    /// of every entity.
    pub fn counts(&self) -> QueueCounts {
        let c = QueueCounts {
            active: self.active.len(),
            backoff: self.backoff.len(),
            unschedulable: self.pool.len(),
            gated: self.gated,
            in_flight: self.in_flight.len(),
        };
        debug_assert_eq!(
            c,
            self.counts_by_scan(),
            "queue sizes out of step with the entities"
        );
        c
    }

    /// The sizes counted entity by entity (what [`SchedulingQueue::counts`] must equal).
    fn counts_by_scan(&self) -> QueueCounts {
        let mut c = QueueCounts::default();
        for e in self.entries.values() {
            match e.loc {
                Loc::Active(_) => c.active += 1,
                Loc::Backoff(_) => c.backoff += 1,
                Loc::Unschedulable(_) => c.unschedulable += 1,
                Loc::Gated(_) => c.gated += 1,
                Loc::InFlight { .. } => c.in_flight += 1,
                Loc::Idle => {}
            }
        }
        c
    }

    /// Whether a pending pod is held by the queue (in any sub-queue or in flight).
    pub fn contains_pod(&self, pod: &PodInfo) -> bool {
        self.entries
            .get(&self.entity_of(pod))
            .is_some_and(|e| e.pods.contains_key(&pod.key))
    }

    /// Number of known members of a group: pending plus assigned (upstream `AllPodsCount`).
    pub fn group_member_count(&self, key: &GroupKey) -> usize {
        let home = self.forest.home_of(key);
        let Some(e) = self.entries.get(&home) else {
            return 0;
        };
        if home == EntityKey::Group(key.clone()) {
            return e.pods.len() + e.assigned.len();
        }
        let pending = e
            .pods
            .values()
            .filter(|(p, _)| p.group_key().as_ref() == Some(key))
            .count();
        pending + e.assigned.values().filter(|g| g.as_ref() == Some(key)).count()
    }
}
