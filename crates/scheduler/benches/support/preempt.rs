//! Preemption benchmark cases: a gang preempting among 40,000 running low-priority pods on the
//! 5,000 bench nodes (8 pods of 4 CPU fill each 32-CPU node; priorities alternate 5 and 10, so
//! the priority-tier search runs twice). Each attempt is one `schedule` call for a fresh gang
//! (the failed placement plus the whole PostFilter); the harness then actuates it like a
//! runtime (victims deleted, preemptors bound on their nominated nodes), so later attempts see
//! a changed cluster. Prints `bench: <case> attempts=<n> victims_per_attempt=<v>
//! attempt_p50_ms=<x> attempt_p99_ms=<y> preemption_p50_ms=<a> preemption_p99_ms=<b>` (on one
//! line; "attempt" is the whole `schedule` call, "preemption" the PostFilter chain alone).
//!
//! `preempt-pdb-gang8` also protects every low pod on the even nodes with a PodDisruptionBudget
//! that allows no disruption: the per-node victim cost (`preemption::node_cost`) must steer the
//! gangs to the odd nodes, and the line adds `pdb_violations_per_attempt=<v>` (protected pods
//! evicted per attempt; 0 while unprotected room is left).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use phalanx_scheduler::model::NodeStatic;
use phalanx_scheduler::selectors::{LabelSelector, Requirement, SelectorOp};
use phalanx_scheduler::{
    EntityKey, GroupInfo, GroupPolicy, Pdb, PodInfo, PodKey, QueuedEntity, Scheduler, SchedulerConfig,
    Snapshot,
};

/// One preemption case.
pub struct PreemptCase {
    /// Name printed.
    pub name: &'static str,
    /// Pods per gang.
    pub size: usize,
    /// Preemption attempts (one gang each).
    pub attempts: usize,
    /// Protect the low pods of the even nodes with a PDB allowing no disruption.
    pub pdb: bool,
}

/// What one run measured.
pub struct PreemptResult {
    /// Attempt p50 and p99 (ms).
    pub attempt: (f64, f64),
    /// PostFilter chain p50 and p99 (ms).
    pub preemption: (f64, f64),
    /// Victims per attempt.
    pub victims: f64,
    /// Protected (PDB) victims per attempt.
    pub pdb_violations: f64,
}

/// Runs one case.
pub fn run(case: &PreemptCase, nodes: Vec<Arc<NodeStatic>>) -> PreemptResult {
    let mut snapshot = Snapshot::new(nodes.clone());
    let low = PodInfo::simple("low", "template", 4000);
    let mut protected_low = low.clone();
    Arc::make_mut(&mut protected_low.labels).insert("app".into(), "protected".into());
    if case.pdb {
        snapshot.set_pdbs(vec![Pdb {
            namespace: "low".into(),
            name: "protected".into(),
            selector: LabelSelector {
                requirements: vec![Requirement {
                    key: "app".into(),
                    op: SelectorOp::In,
                    values: vec!["protected".into()],
                }],
                nothing: false,
            },
            disruptions_allowed: 0,
            disrupted_pods: Default::default(),
        }]);
    }
    let mut protected: HashSet<PodKey> = HashSet::new();
    for (i, n) in nodes.iter().enumerate() {
        let shielded = case.pdb && i % 2 == 0;
        for j in 0..8 {
            let mut p = if shielded {
                protected_low.clone()
            } else {
                low.clone()
            };
            p.key = PodKey::new("low", &format!("low-{i}-{j}"));
            p.uid = format!("uid-low-{i}-{j}").into();
            p.priority = if j % 2 == 0 { 5 } else { 10 };
            p.node_name = Some(n.name.clone());
            if shielded {
                protected.insert(p.key.clone());
            }
            snapshot.add_pod(Arc::new(p));
        }
    }
    let mut scheduler = Scheduler::new(SchedulerConfig::default());
    scheduler.enable_default_preemption();
    let template = PodInfo::simple("bench", "template", 4000);
    let mut attempts: Vec<Duration> = Vec::with_capacity(case.attempts);
    let mut preemptions: Vec<Duration> = Vec::with_capacity(case.attempts);
    let mut victims = 0usize;
    let mut violations = 0usize;
    for a in 0..case.attempts {
        let name = format!("gang-{a}");
        let mut group = GroupInfo::new(
            "bench",
            &name,
            GroupPolicy::Gang {
                min_count: case.size as u32,
            },
        );
        group.priority = Some(100);
        let pods: Vec<Arc<PodInfo>> = (0..case.size)
            .map(|p| {
                let mut pod = template.clone();
                pod.key = PodKey::new("bench", &format!("{name}-{p}"));
                pod.uid = format!("uid-{name}-{p}").into();
                pod.group_name = Some(name.as_str().into());
                pod.priority = 100;
                Arc::new(pod)
            })
            .collect();
        let entity = QueuedEntity {
            key: EntityKey::Group(group.key.clone()),
            group: Some(Arc::new(group)),
            tree: None,
            pods: pods.clone(),
            attempts: 0,
            timestamp: Instant::now(),
        };
        let t = Instant::now();
        let d = scheduler.schedule(&mut snapshot, &entity);
        attempts.push(t.elapsed());
        let report = d.preemption.as_ref().expect("preemption ran");
        assert!(report.success, "{}: {}", case.name, report.message);
        preemptions.push(report.duration);
        assert_eq!(
            d.nominations.len(),
            case.size,
            "{}: every pod nominated",
            case.name
        );
        victims += d.victims.len();
        violations += d.victims.iter().filter(|v| protected.contains(&v.pod)).count();
        // Actuate: the victims go, the preemptors bind where they were nominated.
        for v in &d.victims {
            snapshot.remove_pod(&v.pod);
        }
        for n in &d.nominations {
            let mut pod = (*pods.iter().find(|p| p.key == n.pod).expect("nominated pod"))
                .as_ref()
                .clone();
            pod.node_name = Some(n.node.clone());
            snapshot.add_pod(Arc::new(pod));
        }
    }
    let pct = |v: &mut Vec<Duration>, q: f64| {
        v.sort();
        v[((v.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3
    };
    PreemptResult {
        attempt: (pct(&mut attempts, 0.5), pct(&mut attempts, 0.99)),
        preemption: (pct(&mut preemptions, 0.5), pct(&mut preemptions, 0.99)),
        victims: victims as f64 / case.attempts as f64,
        pdb_violations: violations as f64 / case.attempts as f64,
    }
}
