//! The entity cycle (upstream `schedule_one.go` for single pods and `schedule_one_podgroup.go`
//! `scheduleOnePodGroup` for groups): skip pods already assumed or being deleted, validate the
//! group, run the leaf algorithm, run PodGroupPostFilter when the group is Unschedulable, and
//! turn the result into a [`Decision`].

use std::sync::Arc;
use std::time::Instant;

use crate::algorithm::{GroupContext, GroupResult, run_leaf};
use crate::config::SchedulerConfig;
use crate::decision::{
    Binding, CycleStats, Decision, FailureReason, GroupCondition, Outcome, POD_GROUP_INITIALLY_SCHEDULED,
    PodFailure, REASON_SCHEDULED, REASON_SCHEDULER_ERROR, REASON_UNSCHEDULABLE, Requeue, RequeueMode,
};
use crate::framework::{
    Code, PlacementFeasiblePlugin, PlacementGeneratePlugin, PlacementScorePlugin, PodGroupAssignments,
    PodGroupPostFilterPlugin, Status,
};
use crate::model::{GroupInfo, GroupKind, PodInfo, PodKey};
use crate::plugins::gang_scheduling::GangScheduling;
use crate::plugins::pod_group_pods_count::{PlacementResourcesFit, PodGroupPodsCount};
use crate::plugins::topology_placement::TopologyPlacement;
use crate::queue::QueuedEntity;
use crate::schedule_one::{PodResult, PodScheduler};
use crate::snapshot::Snapshot;

/// The scheduler: configuration, plugins and the state kept across cycles (rotating node
/// index, batching cache). One instance per scheduling loop; not shared between threads.
pub struct Scheduler {
    config: SchedulerConfig,
    pods: PodScheduler,
    feasible: Box<dyn PlacementFeasiblePlugin>,
    generators: Vec<Box<dyn PlacementGeneratePlugin>>,
    scorers: Vec<(Box<dyn PlacementScorePlugin>, i64)>,
    post_filters: Vec<Box<dyn PodGroupPostFilterPlugin>>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// A scheduler with the default plugin set: GangScheduling (PlacementFeasible),
    /// TopologyPlacement (PlacementGenerate), NodeResourcesFit + PodGroupPodsCount
    /// (PlacementScore, weights from the config), no PodGroupPostFilter. The config should
    /// have passed [`SchedulerConfig::validate`].
    pub fn new(config: SchedulerConfig) -> Scheduler {
        let scorers: Vec<(Box<dyn PlacementScorePlugin>, i64)> = vec![
            (
                Box::new(PlacementResourcesFit {
                    resources: config.scoring_resources.clone(),
                }),
                config.placement_score_weights.node_resources_fit,
            ),
            (
                Box::new(PodGroupPodsCount),
                config.placement_score_weights.pod_group_pods_count,
            ),
        ];
        Scheduler {
            pods: PodScheduler::new(&config),
            config,
            feasible: Box::new(GangScheduling),
            generators: vec![Box::new(TopologyPlacement)],
            scorers,
            post_filters: Vec::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Adds a PodGroupPostFilter (e.g. workload-aware preemption); run in order, first
    /// success wins.
    pub fn add_post_filter(&mut self, plugin: Box<dyn PodGroupPostFilterPlugin>) {
        self.post_filters.push(plugin);
    }

    /// Adds a PlacementGenerate plugin; it refines the placements of the previous ones.
    pub fn add_placement_generator(&mut self, plugin: Box<dyn PlacementGeneratePlugin>) {
        self.generators.push(plugin);
    }

    /// Adds a PlacementScore plugin with a weight.
    pub fn add_placement_scorer(&mut self, plugin: Box<dyn PlacementScorePlugin>, weight: i64) {
        self.scorers.push((plugin, weight));
    }

    /// Replaces the PlacementFeasible plugin.
    pub fn set_placement_feasible(&mut self, plugin: Box<dyn PlacementFeasiblePlugin>) {
        self.feasible = plugin;
    }

    /// Runs one cycle for a popped entity. On return the decision's bindings are assumed in
    /// `snapshot` and everything else is reverted (the undo log is committed).
    pub fn schedule(&mut self, snapshot: &mut Snapshot, entity: &QueuedEntity) -> Decision {
        let started = Instant::now();
        let mut d = match &entity.group {
            None => self.schedule_single(snapshot, entity),
            Some(g) => self.schedule_group(snapshot, entity, g),
        };
        snapshot.commit();
        d.stats.duration = started.elapsed();
        d
    }

    fn schedule_single(&mut self, snapshot: &mut Snapshot, entity: &QueuedEntity) -> Decision {
        let mut d = Decision::empty(entity.key.clone(), Outcome::Skipped);
        let Some(pod) = entity.pods.first() else { return d };
        if pod.deleting || snapshot.contains_pod(&pod.key) {
            return d;
        }
        let mut stats = CycleStats::default();
        match self.pods.schedule_pod(snapshot, pod, None, &mut stats) {
            PodResult::Fit(node) => {
                snapshot.assume(pod.clone(), node);
                d.outcome = Outcome::Scheduled;
                d.bindings.push(binding(pod, snapshot, node));
            }
            PodResult::NoFit { message, .. } => {
                d.outcome = Outcome::Unschedulable;
                d.failures
                    .push(failure(pod, FailureReason::Unschedulable, message));
                d.requeue = Some(Requeue {
                    pods: vec![pod.key.clone()],
                    mode: RequeueMode::Unschedulable,
                });
            }
            PodResult::Error(e) => {
                d.outcome = Outcome::Error;
                d.failures.push(failure(pod, FailureReason::SchedulerError, e));
                d.requeue = Some(Requeue {
                    pods: vec![pod.key.clone()],
                    mode: RequeueMode::Backoff,
                });
            }
        }
        d.stats = stats;
        d
    }

    fn schedule_group(
        &mut self,
        snapshot: &mut Snapshot,
        entity: &QueuedEntity,
        group: &GroupInfo,
    ) -> Decision {
        let mut d = Decision::empty(entity.key.clone(), Outcome::Skipped);
        // skipPodGroupPodSchedule: drop pods being deleted or already assumed.
        let pods: Vec<Arc<PodInfo>> = entity
            .pods
            .iter()
            .filter(|p| !p.deleting && !snapshot.contains_pod(&p.key))
            .cloned()
            .collect();
        if pods.is_empty() {
            return d;
        }
        if let Err(msg) = validate_group(group, &pods, snapshot) {
            return error_decision(d, group, &pods, msg);
        }
        let mut stats = CycleStats::default();
        let budget = self.config.reorder_budget();
        let max_attempts = self.config.reorder_max_attempts;
        let mut ctx = GroupContext {
            pods: &mut self.pods,
            feasible: self.feasible.as_ref(),
            generators: &self.generators,
            scorers: &self.scorers,
            stats: &mut stats,
        };
        let result = run_leaf(&mut ctx, snapshot, group, &pods, budget, max_attempts);
        if result.status.code == Code::Unschedulable && !self.post_filters.is_empty() {
            let mut rerun = |s: &mut Snapshot| -> Result<PodGroupAssignments, Status> {
                let mut st = CycleStats::default();
                let mut c = GroupContext {
                    pods: &mut self.pods,
                    feasible: self.feasible.as_ref(),
                    generators: &self.generators,
                    scorers: &self.scorers,
                    stats: &mut st,
                };
                let mark = s.mark();
                let r = run_leaf(&mut c, s, group, &pods, budget, max_attempts);
                s.revert_to(mark);
                if r.status.is_success() {
                    let placement = crate::framework::Placement {
                        name: r.placement.clone().unwrap_or_default(),
                        nodes: r.assignments.iter().map(|a| a.node).collect(),
                    };
                    Ok(PodGroupAssignments {
                        placement,
                        proposed: r.assignments,
                    })
                } else {
                    Err(r.status)
                }
            };
            for pf in &self.post_filters {
                if let Ok(res) = pf.post_filter(snapshot, group, &pods, &mut rerun) {
                    d.nominations = res.nominations;
                    d.victims = res.victims;
                    break;
                }
            }
        }
        d.stats = stats;
        assemble(d, group, &pods, snapshot, result)
    }
}

fn binding(pod: &PodInfo, snapshot: &Snapshot, node: usize) -> Binding {
    Binding {
        pod: pod.key.clone(),
        uid: pod.uid.clone(),
        node: snapshot.node(node).node.name.clone(),
    }
}

fn failure(pod: &PodInfo, reason: FailureReason, message: String) -> PodFailure {
    PodFailure {
        pod: pod.key.clone(),
        uid: pod.uid.clone(),
        reason,
        message,
    }
}

fn condition(group: &GroupInfo, status: bool, reason: &'static str, message: String) -> GroupCondition {
    let type_ = match group.key.kind {
        GroupKind::PodGroup => POD_GROUP_INITIALLY_SCHEDULED,
        GroupKind::CompositePodGroup => crate::decision::COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED,
    };
    GroupCondition {
        group: group.key.clone(),
        type_,
        status,
        reason,
        message,
        observed_generation: group.generation,
    }
}

fn error_decision(mut d: Decision, group: &GroupInfo, pods: &[Arc<PodInfo>], msg: String) -> Decision {
    d.outcome = Outcome::Error;
    for p in pods {
        d.failures
            .push(failure(p, FailureReason::SchedulerError, msg.clone()));
    }
    d.conditions
        .push(condition(group, false, REASON_SCHEDULER_ERROR, msg));
    d.requeue = Some(Requeue {
        pods: pods.iter().map(|p| p.key.clone()).collect(),
        mode: RequeueMode::Backoff,
    });
    d
}

/// Upstream `validatePodGroup` for a leaf group (queued and already scheduled members).
fn validate_group(group: &GroupInfo, pods: &[Arc<PodInfo>], snapshot: &Snapshot) -> Result<(), String> {
    if group.key.kind == GroupKind::CompositePodGroup || group.parent.is_some() {
        return Err(format!(
            "composite pod group hierarchies are not supported yet (group {})",
            group.key
        ));
    }
    let scheduled: Vec<Arc<PodInfo>> = snapshot
        .group_state(&group.key)
        .map(|st| {
            st.scheduled
                .iter()
                .filter_map(|(k, _)| snapshot.pod(k).cloned())
                .collect()
        })
        .unwrap_or_default();
    let all: Vec<&Arc<PodInfo>> = pods.iter().chain(scheduled.iter()).collect();
    let first = all[0];
    let group_ref = format!("{}/{}", group.key.namespace, group.key.name);
    for p in &all {
        if p.scheduler_name != first.scheduler_name {
            return Err(format!(
                "all pods in a pod group hierarchy should have the same .spec.schedulerName set, got: {:?} ({:?}) and {:?} ({:?})",
                &*first.scheduler_name,
                first.key.to_string(),
                &*p.scheduler_name,
                p.key.to_string()
            ));
        }
    }
    for p in &all {
        match group.priority {
            Some(gp) if p.priority != gp => {
                return Err(format!(
                    "all pods in a pod group hierarchy should have the same priority as the root pod group's priority, got {gp} ({group_ref:?}) and {} ({:?})",
                    p.priority,
                    p.key.to_string()
                ));
            }
            None if p.priority != first.priority => {
                return Err(format!(
                    "all pods in a pod group hierarchy should have the same priority, got {} ({:?}) and {} ({:?})",
                    first.priority,
                    first.key.to_string(),
                    p.priority,
                    p.key.to_string()
                ));
            }
            _ => {}
        }
    }
    for p in &all {
        match group.preemption_policy {
            Some(gp) if p.preemption_policy != gp => {
                return Err(format!(
                    "all pods in a pod group hierarchy should have the same preemption policy as the root pod group's preemption policy, got {gp} ({group_ref:?}) and {} ({:?})",
                    p.preemption_policy,
                    p.key.to_string()
                ));
            }
            None if p.preemption_policy != first.preemption_policy => {
                return Err(format!(
                    "all pods in a pod group hierarchy should have the same preemption policy, got {} ({:?}) and {} ({:?})",
                    first.preemption_policy,
                    first.key.to_string(),
                    p.preemption_policy,
                    p.key.to_string()
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

fn assemble(
    mut d: Decision,
    group: &GroupInfo,
    pods: &[Arc<PodInfo>],
    snapshot: &Snapshot,
    result: GroupResult,
) -> Decision {
    match result.status.code {
        Code::Success => {
            d.outcome = Outcome::Scheduled;
            for a in &result.assignments {
                d.bindings.push(binding(&a.pod, snapshot, a.node));
            }
            let mut left = Vec::new();
            let bound: std::collections::HashSet<&PodKey> = d.bindings.iter().map(|b| &b.pod).collect();
            for p in pods {
                if bound.contains(&p.key) {
                    continue;
                }
                let msg = result
                    .pod_failures
                    .get(&p.key)
                    .map(|(_, m)| m.clone())
                    .unwrap_or_else(|| "pod was not tried in this cycle".into());
                d.failures.push(failure(p, FailureReason::Unschedulable, msg));
                left.push(p.key.clone());
            }
            d.conditions
                .push(condition(group, true, REASON_SCHEDULED, String::new()));
            if !left.is_empty() {
                d.requeue = Some(Requeue {
                    pods: left,
                    mode: RequeueMode::Immediate,
                });
            }
        }
        Code::Error => {
            return error_decision(d, group, pods, result.status.message);
        }
        _ => {
            d.outcome = Outcome::Unschedulable;
            let group_msg = result.status.message.clone();
            let first_fit = pods
                .iter()
                .find_map(|p| result.pod_failures.get(&p.key).map(|(_, m)| m.clone()));
            let cond_msg = match &first_fit {
                Some(fit) if !group_msg.contains(fit.as_str()) => format!("{group_msg}; {fit}"),
                _ => group_msg.clone(),
            };
            for p in pods {
                let msg = result
                    .pod_failures
                    .get(&p.key)
                    .map(|(_, m)| m.clone())
                    .unwrap_or_else(|| group_msg.clone());
                d.failures.push(failure(p, FailureReason::Unschedulable, msg));
            }
            d.conditions
                .push(condition(group, false, REASON_UNSCHEDULABLE, cond_msg));
            d.requeue = Some(Requeue {
                pods: pods.iter().map(|p| p.key.clone()).collect(),
                mode: RequeueMode::Unschedulable,
            });
        }
    }
    d
}
