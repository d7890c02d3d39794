//! A driver-like harness over the pure core: queue + scheduler + snapshot, with explicit time.
#![allow(dead_code)]

use phalanx_scheduler::decision::ConditionReason;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use phalanx_scheduler::decision::PodFailure;
use phalanx_scheduler::model::NodeStatic;
use phalanx_scheduler::{
    ClusterEvent, CompositeGroupInfo, CompositePolicy, Decision, EntityKey, GroupCondition, GroupInfo,
    GroupKey, GroupPolicy, PodInfo, PodKey, Scheduler, SchedulerConfig, SchedulingQueue, Snapshot,
};

pub const NS: &str = "ns";
pub const GI: i64 = 1 << 30;

pub struct Sim {
    pub snap: Snapshot,
    pub queue: SchedulingQueue,
    pub sched: Scheduler,
    pub now: Instant,
    /// Every known pod by name (pending or assigned), latest version.
    pub pods: BTreeMap<String, Arc<PodInfo>>,
    pub conditions: HashMap<String, GroupCondition>,
    pub failures: HashMap<String, PodFailure>,
    pub decisions: Vec<Decision>,
    pub groups: HashMap<String, Arc<GroupInfo>>,
}

pub fn node(name: &str, cpu: i64, labels: &[(&str, &str)]) -> NodeStatic {
    NodeStatic::simple(name, cpu * 1000, 16 * GI, labels)
}

impl Sim {
    pub fn new(nodes: Vec<NodeStatic>) -> Sim {
        Sim::with_config(nodes, SchedulerConfig::default())
    }

    pub fn with_config(nodes: Vec<NodeStatic>, config: SchedulerConfig) -> Sim {
        config.validate().unwrap();
        Sim {
            snap: Snapshot::new(nodes.into_iter().map(Arc::new)),
            queue: SchedulingQueue::new(&config),
            sched: Scheduler::new(config),
            now: Instant::now(),
            pods: BTreeMap::new(),
            conditions: HashMap::new(),
            failures: HashMap::new(),
            decisions: Vec::new(),
            groups: HashMap::new(),
        }
    }

    pub fn make_pod(name: &str, milli: i64, group: Option<&str>, priority: i32) -> PodInfo {
        let mut p = PodInfo::simple(NS, name, milli);
        p.group_name = group.map(Arc::from);
        p.priority = priority;
        p
    }

    /// A pod already bound to `node` (a blocker).
    pub fn add_assigned(&mut self, name: &str, milli: i64, node: &str, priority: i32) {
        let mut p = Self::make_pod(name, milli, None, priority);
        p.node_name = Some(node.into());
        let p = Arc::new(p);
        self.snap.add_pod(p.clone());
        self.queue.on_event(
            ClusterEvent::AssignedPodAdded {
                pod: p.key.clone(),
                group: None,
            },
            self.now,
        );
        self.pods.insert(name.into(), p);
    }

    pub fn add_pod(&mut self, p: PodInfo) {
        let p = Arc::new(p);
        self.pods.insert(p.key.name.to_string(), p.clone());
        self.queue.add_pod(p, self.now);
        self.tick();
    }

    pub fn add_group_pod(&mut self, name: &str, milli: i64, group: &str) {
        self.add_pod(Self::make_pod(name, milli, Some(group), 100));
    }

    pub fn add_group(&mut self, g: GroupInfo) {
        let g = Arc::new(g);
        self.groups.insert(g.key.name.to_string(), g.clone());
        self.queue.add_group(g, self.now);
        self.tick();
    }

    pub fn add_composite(&mut self, c: CompositeGroupInfo) {
        self.queue.add_composite_group(Arc::new(c), self.now);
        self.tick();
    }

    /// A CompositePodGroup (priority 100) under `parent`; `min` = None for basic.
    pub fn cpg(name: &str, min: Option<u32>, parent: Option<&str>) -> CompositeGroupInfo {
        let policy = match min {
            Some(m) => CompositePolicy::Gang { min_group_count: m },
            None => CompositePolicy::Basic,
        };
        let mut c = CompositeGroupInfo::new(NS, name, policy);
        c.priority = Some(100);
        c.parent = parent.map(|p| GroupKey::composite(NS, p));
        c
    }

    /// Sets the parent CompositePodGroup of a PodGroup.
    pub fn child(mut g: GroupInfo, parent: &str) -> GroupInfo {
        g.parent = Some(GroupKey::composite(NS, parent));
        g
    }

    pub fn composite_gate(&self, root: &str) -> Option<phalanx_scheduler::Gate> {
        self.queue
            .gate(&EntityKey::Group(GroupKey::composite(NS, root)))
            .cloned()
    }

    pub fn gang(name: &str, min: u32) -> GroupInfo {
        let mut g = GroupInfo::new(NS, name, GroupPolicy::Gang { min_count: min });
        g.priority = Some(100);
        g
    }

    pub fn gang_topo(name: &str, min: u32, key: &str) -> GroupInfo {
        let mut g = Self::gang(name, min);
        g.topology_key = Some(key.into());
        g
    }

    pub fn basic(name: &str) -> GroupInfo {
        let mut g = GroupInfo::new(NS, name, GroupPolicy::Basic);
        g.priority = Some(100);
        g
    }

    pub fn delete_pod(&mut self, name: &str) {
        let p = self.pods.remove(name).expect("known pod");
        self.snap.remove_pod(&p.key);
        self.queue.delete_pod(&p, self.now);
    }

    fn tick(&mut self) {
        self.now += Duration::from_millis(1);
    }

    /// Runs the cycles that are ready now, without waiting for backoff.
    pub fn run_ready(&mut self) {
        while let Some(e) = self.queue.pop(self.now) {
            let d = self.sched.schedule(&mut self.snap, &e);
            self.queue.done(&d, self.now);
            self.apply(&d);
            self.tick();
        }
    }

    /// Runs cycles until nothing is ready, following backoff (not the 5-minute flush).
    pub fn run(&mut self) {
        for _ in 0..200 {
            while let Some(e) = self.queue.pop(self.now) {
                let d = self.sched.schedule(&mut self.snap, &e);
                self.queue.done(&d, self.now);
                self.apply(&d);
                self.tick();
            }
            if self.queue.counts().backoff == 0 {
                return;
            }
            match self.queue.next_wakeup() {
                Some(t) if t > self.now => self.now = t,
                _ => self.tick(),
            }
        }
        panic!("simulation did not settle");
    }

    fn apply(&mut self, d: &Decision) {
        for b in &d.bindings {
            let name = b.pod.name.to_string();
            let mut p = (*self.pods[&name]).clone();
            p.node_name = Some(b.node.clone());
            self.pods.insert(name.clone(), Arc::new(p));
            self.failures.remove(&name);
        }
        for f in &d.failures {
            self.failures.insert(f.pod.name.to_string(), f.clone());
        }
        for c in &d.conditions {
            let key = c.group.name.to_string();
            // The runtime never regresses a True condition.
            if self.conditions.get(&key).is_some_and(|old| old.status) && !c.status {
                continue;
            }
            self.conditions.insert(key, c.clone());
        }
        self.decisions.push(d.clone());
    }

    pub fn node_of(&self, pod: &str) -> Option<String> {
        self.pods
            .get(pod)
            .and_then(|p| p.node_name.as_deref().map(String::from))
    }

    pub fn bound(&self, pods: &[&str]) -> bool {
        pods.iter().all(|p| self.node_of(p).is_some())
    }

    pub fn unbound(&self, pods: &[&str]) -> bool {
        pods.iter().all(|p| self.node_of(p).is_none())
    }

    pub fn condition(&self, group: &str) -> Option<(bool, ConditionReason, String)> {
        self.conditions
            .get(group)
            .map(|c| (c.status, c.reason, c.message.clone()))
    }

    pub fn gate(&self, group: &str) -> Option<phalanx_scheduler::Gate> {
        self.queue
            .gate(&EntityKey::Group(GroupKey::pod_group(NS, group)))
            .cloned()
    }

    pub fn label_of(&self, pod: &str, key: &str) -> Option<String> {
        let n = self.node_of(pod)?;
        let i = self.snap.node_index(&n)?;
        self.snap.node(i).node.labels.get(key).cloned()
    }

    pub fn pod_key(name: &str) -> PodKey {
        PodKey::new(NS, name)
    }

    /// Sum of requests never exceeds allocatable on any node.
    pub fn assert_no_overcommit(&self) {
        for n in self.snap.nodes() {
            assert!(
                n.requested.milli_cpu <= n.node.allocatable.milli_cpu,
                "cpu overcommitted on {}",
                n.name()
            );
            assert!(
                n.requested.memory <= n.node.allocatable.memory,
                "memory overcommitted on {}",
                n.name()
            );
            assert!(
                n.pods.len() as i64 <= n.node.allowed_pods,
                "too many pods on {}",
                n.name()
            );
        }
    }
}

/// Adds a pod that requests nothing (explicit zeros, so no scoring defaults) and whose
/// anti-affinity selects every pod of namespace `ns` under a topology key no node has: it
/// changes no result, but a term selecting the incoming pods turns the batching cache off.
pub fn disable_batching(snap: &mut Snapshot) {
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "inert", "namespace": "other"},
        "spec": {"nodeName": "n0", "containers": [{"name": "c", "resources": {"requests": {"cpu": "0", "memory": "0"}}}], "affinity": {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {}, "namespaces": ["ns"], "topologyKey": "no-node-has-this-key"}]}}}
    }))
    .unwrap();
    snap.add_pod(Arc::new(PodInfo::from_pod(&pod, None)));
    assert_eq!(snap.pods_with_affinity(), 1);
}
