//! Preemption benchmark cases: a gang preempting among 40,000 running low-priority pods on the
//! 5,000 bench nodes (8 pods of 4 CPU fill each 32-CPU node; priorities alternate 5 and 10, so
//! the priority-tier search runs twice). Each attempt is one `schedule` call for a fresh gang
//! (the failed placement plus the whole PostFilter); the harness then actuates it like a
//! runtime (victims deleted, preemptors bound on their nominated nodes), so later attempts see
//! a changed cluster. Prints `bench: <case> attempts=<n> victims_per_attempt=<v>
//! attempt_p50_ms=<x> attempt_p99_ms=<y> preemption_p50_ms=<a> preemption_p99_ms=<b>` (on one
//! line; "attempt" is the whole `schedule` call, "preemption" the PostFilter chain alone).

use std::sync::Arc;
use std::time::{Duration, Instant};

use phalanx_scheduler::model::NodeStatic;
use phalanx_scheduler::{
    EntityKey, GroupInfo, GroupPolicy, PodInfo, PodKey, QueuedEntity, Scheduler, SchedulerConfig, Snapshot,
};

/// One preemption case.
pub struct PreemptCase {
    /// Name printed.
    pub name: &'static str,
    /// Pods per gang.
    pub size: usize,
    /// Preemption attempts (one gang each).
    pub attempts: usize,
}

/// Runs one case; returns (attempt p50, attempt p99, preemption p50, preemption p99) in ms and
/// victims per attempt.
pub fn run(case: &PreemptCase, nodes: Vec<Arc<NodeStatic>>) -> (f64, f64, f64, f64, f64) {
    let mut snapshot = Snapshot::new(nodes.clone());
    let low = PodInfo::simple("low", "template", 4000);
    for (i, n) in nodes.iter().enumerate() {
        for j in 0..8 {
            let mut p = low.clone();
            p.key = PodKey::new("low", &format!("low-{i}-{j}"));
            p.uid = format!("uid-low-{i}-{j}").into();
            p.priority = if j % 2 == 0 { 5 } else { 10 };
            p.node_name = Some(n.name.clone());
            snapshot.add_pod(Arc::new(p));
        }
    }
    let mut scheduler = Scheduler::new(SchedulerConfig::default());
    scheduler.enable_default_preemption();
    let template = PodInfo::simple("bench", "template", 4000);
    let mut attempts: Vec<Duration> = Vec::with_capacity(case.attempts);
    let mut preemptions: Vec<Duration> = Vec::with_capacity(case.attempts);
    let mut victims = 0usize;
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
    (
        pct(&mut attempts, 0.5),
        pct(&mut attempts, 0.99),
        pct(&mut preemptions, 0.5),
        pct(&mut preemptions, 0.99),
        victims as f64 / case.attempts as f64,
    )
}
