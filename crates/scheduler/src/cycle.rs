//! The entity cycle (upstream `schedule_one.go` for single pods and `schedule_one_podgroup.go`
//! `scheduleOnePodGroup` for groups): skip pods already assumed or being deleted, validate the
//! group, run the leaf algorithm, run PodGroupPostFilter when the group is Unschedulable, and
//! turn the result into a [`Decision`].

use std::sync::Arc;
use std::time::Instant;

use std::collections::HashMap;

use crate::algorithm::{GroupContext, GroupResult, run_leaf};
use crate::composite::run_tree;
use crate::config::SchedulerConfig;
use crate::decision::{
    Binding, ConditionReason, ConditionType, CycleStats, Decision, FailureReason, GroupCondition, Outcome,
    PodFailure, Requeue, RequeueMode,
};
use crate::framework::{
    Code, PlacementFeasiblePlugin, PlacementGeneratePlugin, PlacementScorePlugin, PodGroupPostFilterPlugin,
    PostFilterPlugin, Preemptor, Status,
};
use crate::hierarchy::GroupTree;
use crate::model::{EntityKey, GroupInfo, GroupKey, GroupKind, PodInfo, PodKey};
use crate::plugins::gang_scheduling::GangScheduling;
use crate::plugins::pod_group_pods_count::{PlacementResourcesFit, PodGroupPodsCount};
use crate::plugins::topology_packing::TopologyPacking;
use crate::plugins::topology_placement::TopologyPlacement;
use crate::preemption::handle::{CoreHandle, Root};
use crate::preemption::{self, ChainOutcome, DefaultPreemption};
use crate::queue::QueuedEntity;
use crate::resources::Resources;
use crate::schedule_one::{PodResult, PodScheduler};
use crate::snapshot::Snapshot;
use crate::tree_eval::{TreeInput, TreeResult};
use crate::validation::{validate_group, validate_tree};

/// The scheduler: configuration, plugins and the state kept across cycles (rotating node
/// index, batching cache). One instance per scheduling loop; not shared between threads.
pub struct Scheduler {
    config: SchedulerConfig,
    pods: PodScheduler,
    feasible: Box<dyn PlacementFeasiblePlugin>,
    generators: Vec<Box<dyn PlacementGeneratePlugin>>,
    scorers: Vec<(Box<dyn PlacementScorePlugin>, i64)>,
    post_filters: Vec<Box<dyn PodGroupPostFilterPlugin>>,
    pod_post_filters: Vec<Box<dyn PostFilterPlugin>>,
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
    /// TopologyPlacement (PlacementGenerate), NodeResourcesFit + PodGroupPodsCount + Phalanx's
    /// TopologyPacking (PlacementScore, weights from the config), no PodGroupPostFilter. The config should
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
            (
                Box::new(TopologyPacking),
                config.placement_score_weights.topology_packing,
            ),
        ];
        Scheduler {
            pods: PodScheduler::new(&config),
            config,
            feasible: Box::new(GangScheduling),
            generators: vec![Box::new(TopologyPlacement)],
            scorers,
            post_filters: Vec::new(),
            pod_post_filters: Vec::new(),
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

    /// Adds a PostFilter for standalone pods (pod-by-pod preemption); run in order, first
    /// success wins.
    pub fn add_pod_post_filter(&mut self, plugin: Box<dyn PostFilterPlugin>) {
        self.pod_post_filters.push(plugin);
    }

    /// Registers [`DefaultPreemption`] (upstream's default) as PodGroupPostFilter and
    /// PostFilter. Off by default so that a runtime that does not actuate victims never gets
    /// any; preemption only simulates on the snapshot and returns victims and nominations.
    pub fn enable_default_preemption(&mut self) {
        let p = DefaultPreemption::new(&self.config);
        self.post_filters.push(Box::new(p.clone()));
        self.pod_post_filters.push(Box::new(p));
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
        let mut d = match (&entity.tree, &entity.group) {
            (Some(t), _) => self.schedule_tree(snapshot, entity, t),
            (None, None) => self.schedule_single(snapshot, entity),
            (None, Some(g)) => self.schedule_group(snapshot, entity, g),
        };
        snapshot.commit();
        if snapshot.devices().served {
            self.pods.release_states();
        }
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
                    short_of: Resources::default(),
                });
                let outcome = self.pod_post_filter(snapshot, entity, &mut stats);
                d = preemption::apply(d, outcome);
            }
            PodResult::Error(e) => {
                d.outcome = Outcome::Error;
                d.failures.push(failure(pod, FailureReason::SchedulerError, e));
                d.requeue = Some(Requeue {
                    pods: vec![pod.key.clone()],
                    mode: RequeueMode::Backoff,
                    short_of: Resources::default(),
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
        if let Err(e) = validate_group(group, &pods, snapshot) {
            return error_decision(d, group, &pods, e.to_string(), ConditionReason::GroupError);
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
            in_tree: false,
            placements_percentage: self.config.percentage_of_placements_to_score,
        };
        let result = run_leaf(&mut ctx, snapshot, group, &pods, budget, max_attempts);
        let outcome = if result.status.code == Code::Unschedulable {
            let preemptor = Preemptor::group(
                &entity.key,
                &pods,
                group.priority,
                group.preemption_policy,
                group.topology_key.is_some(),
            );
            self.group_post_filter(
                snapshot,
                &preemptor,
                Root::Leaf { group, pods: &pods },
                &mut stats,
            )
        } else {
            None
        };
        d.stats = stats;
        preemption::apply(assemble(d, group, &pods, snapshot, result), outcome)
    }
}

impl Scheduler {
    /// The cycle of a root CompositePodGroup (upstream `scheduleOnePodGroup` with KEP-6012's recursion): skip, validate the hierarchy
    /// and its members (invalid → SchedulerError on every pod and every group of the tree),
    /// run the recursive algorithm, and build the decision (bindings only when the root
    /// succeeds; a leaf counts only when every ancestor succeeded). PodGroupPostFilter does not
    /// run for trees yet.
    fn schedule_tree(
        &mut self,
        snapshot: &mut Snapshot,
        entity: &QueuedEntity,
        tree: &GroupTree,
    ) -> Decision {
        let d = Decision::empty(entity.key.clone(), Outcome::Skipped);
        let pods: Vec<Arc<PodInfo>> = entity
            .pods
            .iter()
            .filter(|p| !p.deleting && !snapshot.contains_pod(&p.key))
            .cloned()
            .collect();
        if pods.is_empty() {
            return d;
        }
        if let Err(e) = validate_tree(tree, &pods, snapshot) {
            return tree_error_decision(d, tree, &pods, &e.to_string(), ConditionReason::GroupError);
        }
        let mut by_leaf: HashMap<GroupKey, Vec<Arc<PodInfo>>> = HashMap::new();
        for p in &pods {
            if let Some(g) = p.group_key() {
                by_leaf.entry(g).or_default().push(p.clone());
            }
        }
        let input = TreeInput {
            tree,
            pods: by_leaf,
            budget: self.config.reorder_budget(),
            max_attempts: self.config.reorder_max_attempts,
            search_budget: self.config.sibling_search_budget(),
            search_started: std::sync::OnceLock::new(),
        };
        let mut stats = CycleStats::default();
        let mut ctx = GroupContext {
            pods: &mut self.pods,
            feasible: self.feasible.as_ref(),
            generators: &self.generators,
            scorers: &self.scorers,
            stats: &mut stats,
            in_tree: true,
            placements_percentage: self.config.percentage_of_placements_to_score,
        };
        let result = run_tree(&mut ctx, snapshot, &input);
        // Preemption runs only at the root (KEP-6012).
        let outcome = if result.status.code == Code::Unschedulable {
            let root = tree.root();
            let preemptor = Preemptor::group(
                &entity.key,
                &pods,
                root.priority,
                root.preemption_policy,
                root.topology_key.is_some(),
            );
            self.group_post_filter(snapshot, &preemptor, Root::Tree { input: &input }, &mut stats)
        } else {
            None
        };
        let mut d = d;
        d.stats = stats;
        preemption::apply(assemble_tree(d, tree, &pods, snapshot, &result), outcome)
    }
}

impl Scheduler {
    /// Runs the PodGroupPostFilter chain for an Unschedulable root (upstream `podGroupCycle`
    /// step 6c); `None` when no plugin is registered.
    fn group_post_filter(
        &mut self,
        snapshot: &mut Snapshot,
        preemptor: &Preemptor<'_>,
        root: Root<'_>,
        stats: &mut CycleStats,
    ) -> Option<ChainOutcome> {
        if self.post_filters.is_empty() {
            return None;
        }
        let ctx = GroupContext {
            pods: &mut self.pods,
            feasible: self.feasible.as_ref(),
            generators: &self.generators,
            scorers: &self.scorers,
            stats,
            in_tree: matches!(root, Root::Tree { .. }),
            placements_percentage: self.config.percentage_of_placements_to_score,
        };
        let (budget, max) = (self.config.reorder_budget(), self.config.reorder_max_attempts);
        let mut handle = CoreHandle::new(ctx, root, budget, max);
        let outcome = preemption::run_chain(
            self.post_filters.iter().map(|b| b.as_ref()),
            |p| p.name(),
            |p| p.post_filter(snapshot, preemptor, &mut handle),
        );
        let delayed = match preemptor.key {
            EntityKey::Group(g) => snapshot.preemption_state().delayed(g).cloned(),
            EntityKey::Pod(_) => None,
        };
        Some(match delayed {
            Some(why) => preemption::hold(outcome, &why),
            None => outcome,
        })
    }

    /// Runs the PostFilter chain for a standalone pod that did not fit.
    fn pod_post_filter(
        &mut self,
        snapshot: &mut Snapshot,
        entity: &QueuedEntity,
        stats: &mut CycleStats,
    ) -> Option<ChainOutcome> {
        if self.pod_post_filters.is_empty() {
            return None;
        }
        let pod = entity.pods.first()?;
        let pods = std::slice::from_ref(pod);
        let preemptor = Preemptor::group(
            &entity.key,
            pods,
            Some(pod.priority),
            Some(pod.preemption_policy),
            false,
        );
        let ctx = GroupContext {
            pods: &mut self.pods,
            feasible: self.feasible.as_ref(),
            generators: &self.generators,
            scorers: &self.scorers,
            stats,
            in_tree: false,
            placements_percentage: self.config.percentage_of_placements_to_score,
        };
        let (budget, max) = (self.config.reorder_budget(), self.config.reorder_max_attempts);
        let mut handle = CoreHandle::new(ctx, Root::Pod, budget, max);
        Some(preemption::run_chain(
            self.pod_post_filters.iter().map(|b| b.as_ref()),
            |p| p.name(),
            |p| p.post_filter(snapshot, &preemptor, &mut handle),
        ))
    }
}

/// Condition for any group of a tree, by kind.
fn tree_condition(
    tree: &GroupTree,
    key: &GroupKey,
    status: bool,
    reason: ConditionReason,
    message: String,
) -> Option<GroupCondition> {
    let (type_, generation) = match (tree.composite(key), tree.leaf(key)) {
        (Some(c), _) => (ConditionType::CompositePodGroupInitiallyScheduled, c.generation),
        (None, Some(l)) => (ConditionType::PodGroupInitiallyScheduled, l.generation),
        (None, None) => return None,
    };
    Some(GroupCondition {
        group: key.clone(),
        type_,
        status,
        reason,
        message,
        observed_generation: generation,
    })
}

/// Every pod `SchedulerError`, every group of the tree False with `reason` (`GroupError` for a failed runtime
/// validation, `SchedulerError` for an internal error), backoff.
fn tree_error_decision(
    mut d: Decision,
    tree: &GroupTree,
    pods: &[Arc<PodInfo>],
    msg: &str,
    reason: ConditionReason,
) -> Decision {
    d.outcome = Outcome::Error;
    for p in pods {
        d.failures
            .push(failure(p, FailureReason::SchedulerError, msg.to_string()));
    }
    for k in tree.groups() {
        d.conditions
            .extend(tree_condition(tree, &k, false, reason, msg.to_string()));
    }
    d.requeue = Some(Requeue {
        pods: pods.iter().map(|p| p.key.clone()).collect(),
        mode: RequeueMode::Backoff,
        short_of: Resources::default(),
    });
    d
}

/// Effective status of every group: its own result unless an ancestor failed, in which case
/// the nearest failed ancestor's status (children of a failed parent cannot bind; upstream
/// `successfulLeafResults`).
fn effective_statuses(tree: &GroupTree, result: &TreeResult) -> HashMap<GroupKey, (Status, bool)> {
    // (status, own): own = the status is the group's own result.
    let mut eff: HashMap<GroupKey, (Status, bool)> = HashMap::new();
    let root = tree.root().key.clone();
    eff.insert(
        root.clone(),
        (
            result
                .statuses
                .get(&root)
                .cloned()
                .unwrap_or_else(|| result.status.clone()),
            true,
        ),
    );
    let mut stack = vec![root];
    while let Some(k) = stack.pop() {
        let parent = eff[&k].0.clone();
        for c in tree.children(&k) {
            let e = if !parent.is_success() {
                (parent.clone(), false)
            } else {
                match result.statuses.get(c) {
                    Some(st) => (st.clone(), true),
                    None => (
                        Status::new(Code::Unschedulable, "pod group was not evaluated in this cycle"),
                        true,
                    ),
                }
            };
            eff.insert(c.clone(), e);
            stack.push(c.clone());
        }
    }
    eff
}

fn assemble_tree(
    mut d: Decision,
    tree: &GroupTree,
    pods: &[Arc<PodInfo>],
    snapshot: &Snapshot,
    result: &TreeResult,
) -> Decision {
    if result.status.code == Code::Error {
        return tree_error_decision(
            d,
            tree,
            pods,
            &result.status.message,
            ConditionReason::SchedulerError,
        );
    }
    let eff = effective_statuses(tree, result);
    let success = result.status.is_success();
    if success {
        d.outcome = Outcome::Scheduled;
        for a in &result.assignments {
            d.bindings.push(binding(&a.pod, snapshot, a.node));
        }
    } else {
        d.outcome = Outcome::Unschedulable;
    }
    let bound: std::collections::HashSet<&PodKey> = d.bindings.iter().map(|b| &b.pod).collect();
    let mut left = Vec::new();
    for p in pods {
        if bound.contains(&p.key) {
            continue;
        }
        let leaf = p.group_key();
        let leaf_result = leaf.as_ref().and_then(|g| result.leaves.get(g));
        let fit = leaf_result
            .and_then(|r| r.pod_failures.get(&p.key))
            .map(|(_, m)| m.clone());
        let msg = match leaf.as_ref().and_then(|g| eff.get(g)) {
            // The leaf failed on its own (or succeeded and left this pod over): the pod's own
            // fit error first.
            Some((st, true)) => fit.unwrap_or_else(|| {
                if st.is_success() {
                    "pod was not tried in this cycle".to_string()
                } else {
                    st.message.clone()
                }
            }),
            // An ancestor failed: that is why the pod does not bind.
            Some((st, false)) => st.message.clone(),
            None => result.status.message.clone(),
        };
        d.failures.push(failure(p, FailureReason::Unschedulable, msg));
        left.push(p.key.clone());
    }
    let root = tree.root().key.clone();
    for k in tree.groups() {
        let Some((st, own)) = eff.get(&k) else { continue };
        // The root reports the cycle's result (e.g. `no pods were schedulable`).
        let st = if k == root { &result.status } else { st };
        let cond = if st.is_success() {
            tree_condition(tree, &k, true, ConditionReason::Scheduled, String::new())
        } else {
            let mut msg = st.message.clone();
            if *own && let Some(r) = result.leaves.get(&k) {
                // As for a standalone group: `<group message>; <first pod fit error>`.
                let first_fit = pods
                    .iter()
                    .find_map(|p| r.pod_failures.get(&p.key).map(|(_, m)| m.clone()));
                if let Some(fit) = first_fit
                    && !msg.contains(fit.as_str())
                {
                    msg = format!("{msg}; {fit}");
                }
            }
            tree_condition(tree, &k, false, ConditionReason::Unschedulable, msg)
        };
        d.conditions.extend(cond);
    }
    if !left.is_empty() {
        d.requeue = Some(Requeue {
            pods: left,
            mode: if success {
                RequeueMode::Immediate
            } else {
                RequeueMode::Unschedulable
            },
            short_of: if success {
                Resources::default()
            } else {
                let mut short = Resources::default();
                for r in result.leaves.values() {
                    short.add(&short_of(&r.pod_failures, pods));
                }
                short
            },
        });
    }
    d
}

/// The summed requests of the `pods` rejected as `Unschedulable`, the code removing pods can resolve (preemption reads
/// it the same way, upstream `pkg/scheduler/framework/preemption`): [`Requeue::short_of`].
fn short_of(failures: &HashMap<PodKey, (Code, String)>, pods: &[Arc<PodInfo>]) -> Resources {
    let mut short = Resources::default();
    for p in pods {
        if matches!(failures.get(&p.key), Some((Code::Unschedulable, _))) {
            short.add(&p.spec.requests);
        }
    }
    short
}

fn binding(pod: &PodInfo, snapshot: &Snapshot, node: usize) -> Binding {
    Binding {
        pod: pod.key.clone(),
        uid: pod.uid.clone(),
        node: snapshot.node(node).node.name.clone(),
        volumes: snapshot.volume_overlay().actions_of(&pod.key).to_vec(),
        devices: crate::dra::scheduling::writes(snapshot.devices(), snapshot.device_overlay(), pod),
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

fn condition(group: &GroupInfo, status: bool, reason: ConditionReason, message: String) -> GroupCondition {
    let type_ = match group.key.kind {
        GroupKind::PodGroup => ConditionType::PodGroupInitiallyScheduled,
        GroupKind::CompositePodGroup => ConditionType::CompositePodGroupInitiallyScheduled,
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

/// Every pod `SchedulerError`, the group False with `reason` (as for [`tree_error_decision`]), backoff.
fn error_decision(
    mut d: Decision,
    group: &GroupInfo,
    pods: &[Arc<PodInfo>],
    msg: String,
    reason: ConditionReason,
) -> Decision {
    d.outcome = Outcome::Error;
    for p in pods {
        d.failures
            .push(failure(p, FailureReason::SchedulerError, msg.clone()));
    }
    d.conditions.push(condition(group, false, reason, msg));
    d.requeue = Some(Requeue {
        pods: pods.iter().map(|p| p.key.clone()).collect(),
        mode: RequeueMode::Backoff,
        short_of: Resources::default(),
    });
    d
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
                .push(condition(group, true, ConditionReason::Scheduled, String::new()));
            if !left.is_empty() {
                d.requeue = Some(Requeue {
                    pods: left,
                    mode: RequeueMode::Immediate,
                    short_of: Resources::default(),
                });
            }
        }
        Code::Error => {
            return error_decision(
                d,
                group,
                pods,
                result.status.message,
                ConditionReason::SchedulerError,
            );
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
            // A pod with its own fit error says it; every other member (placed then reverted, or never
            // tried) carries the group's message including the first fit error, so that any pod of the
            // group tells what is missing (upstream gives those pods the bare PlacementFeasible text).
            for p in pods {
                let msg = result
                    .pod_failures
                    .get(&p.key)
                    .map(|(_, m)| m.clone())
                    .unwrap_or_else(|| cond_msg.clone());
                d.failures.push(failure(p, FailureReason::Unschedulable, msg));
            }
            d.conditions
                .push(condition(group, false, ConditionReason::Unschedulable, cond_msg));
            d.requeue = Some(Requeue {
                pods: pods.iter().map(|p| p.key.clone()).collect(),
                mode: RequeueMode::Unschedulable,
                short_of: short_of(&result.pod_failures, pods),
            });
        }
    }
    d
}
