//! The per-pod pass (upstream `schedule_one.go` `schedulePod`): PreFilter, Filter over the
//! nodes of the current placement starting at a rotating index until
//! `numFeasibleNodesToFind` feasible nodes are found (percentageOfNodesToScore), then Score,
//! NormalizeScore, weights, and select the best node (ties: lowest node index).
//!
//! Batching (upstream OpportunisticBatching, KEP-5598, made exact here): for pods without
//! inter-pod constraints, when no existing pod's affinity term selects the pod, a node's Filter
//! result and raw scores depend only on the pod's [`PodSpecInfo`] and that node's state. They are
//! cached per node and reused while the node's generation is unchanged, so the members of a
//! homogeneous gang, and later gangs with the same spec, only re-evaluate nodes that changed.
//! Normalisation and selection still run over the same node subset as without the cache, so
//! results are identical.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::{PluginWeights, SchedulerConfig, ScoringStrategy};
use crate::decision::CycleStats;
use crate::framework::Code;
use crate::model::{NodeInfo, PodInfo, PodSpecInfo};
use crate::plugins::{
    Rejection, default_normalize, inter_pod_affinity, node_affinity, node_name, node_ports, node_resources,
    node_unschedulable, pod_topology_spread, taint_toleration,
};
use crate::snapshot::Snapshot;

/// Upstream `minFeasibleNodesToFind`.
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// Upstream `minFeasibleNodesPercentageToFind`.
pub const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: usize = 5;
/// Upstream `ErrNoNodesAvailable` message.
pub const NO_NODES_AVAILABLE: &str = "no nodes available to schedule pods";

/// Upstream `numFeasibleNodesToFind`: all nodes below 100; else `percentage` (adaptive
/// `50 - n/125`, at least 5, when 0) of the nodes, but at least 100.
pub fn num_feasible_nodes_to_find(num_all: usize, percentage: u32) -> usize {
    if num_all < MIN_FEASIBLE_NODES_TO_FIND || percentage >= 100 {
        return num_all;
    }
    let mut pct = percentage as usize;
    if pct == 0 {
        pct = 50usize
            .saturating_sub(num_all / 125)
            .max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND);
    }
    (num_all * pct / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// Outcome of scheduling one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodResult {
    /// Best node (index into the snapshot).
    Fit(usize),
    /// No node fits: upstream FitError. `code` is UnschedulableAndUnresolvable when every
    /// rejection was, else Unschedulable.
    NoFit {
        /// Code.
        code: Code,
        /// `0/N nodes are available: …` message.
        message: String,
    },
    /// Internal error (invalid pod).
    Error(String),
}

/// Raw node-local scores: taint count, node affinity sum, fit score, balanced score.
type Raw = [i64; 4];

#[derive(Debug, Clone)]
enum Eval {
    Feasible(Raw),
    Rejected(Arc<Rejection>),
}

#[derive(Debug, Default)]
struct EvalCache {
    snapshot_id: u64,
    spec: Option<Arc<PodSpecInfo>>,
    entries: Vec<(u64, Option<Eval>)>,
    /// `copies_fitting` per node, under the same validity rules.
    caps: Vec<(u64, Option<usize>)>,
}

impl EvalCache {
    fn prepare(&mut self, snapshot: &Snapshot, spec: &Arc<PodSpecInfo>) {
        let same_spec = self
            .spec
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, spec) || **s == **spec);
        if self.snapshot_id != snapshot.id() || !same_spec || self.entries.len() != snapshot.len() {
            self.snapshot_id = snapshot.id();
            self.spec = Some(spec.clone());
            self.entries.clear();
            self.entries.resize(snapshot.len(), (0, None));
            self.caps.clear();
            self.caps.resize(snapshot.len(), (0, None));
        }
    }
}

/// Runs the per-pod plugins; holds the rotating start index and the batching cache across
/// cycles.
#[derive(Debug)]
pub struct PodScheduler {
    weights: PluginWeights,
    strategy: ScoringStrategy,
    resources: Vec<(node_resources::ScoredResource, i64)>,
    percentage: u32,
    next_start: usize,
    cache: EvalCache,
    feasible: Vec<(usize, Raw)>,
    total: Vec<i64>,
    col: Vec<i64>,
}

impl PodScheduler {
    /// A pod scheduler for this configuration.
    pub fn new(config: &SchedulerConfig) -> PodScheduler {
        PodScheduler {
            weights: config.plugin_weights.clone(),
            strategy: config.scoring_strategy,
            resources: node_resources::ScoredResource::resolve(&config.scoring_resources),
            percentage: config.percentage_of_nodes_to_score,
            next_start: 0,
            cache: EvalCache::default(),
            feasible: Vec::new(),
            total: Vec::new(),
            col: Vec::new(),
        }
    }

    fn filter_node(
        &self,
        pod: &PodInfo,
        node: &NodeInfo,
        spread: Option<&pod_topology_spread::FilterState>,
        affinity: Option<&inter_pod_affinity::FilterState>,
    ) -> Result<(), Rejection> {
        node_unschedulable::filter(pod, node)?;
        node_name::filter(pod, node)?;
        taint_toleration::filter(pod, node)?;
        node_affinity::filter(pod, node)?;
        node_ports::filter(pod, node)?;
        node_resources::filter(pod, node)?;
        if let Some(s) = spread {
            pod_topology_spread::filter(s, node)?;
        }
        if let Some(a) = affinity {
            inter_pod_affinity::filter(a, pod, node)?;
        }
        Ok(())
    }

    fn raw_scores(&self, pod: &PodInfo, node: &NodeInfo) -> Raw {
        let w = &self.weights;
        [
            if w.taint_toleration != 0 {
                taint_toleration::score(pod, node)
            } else {
                0
            },
            if w.node_affinity != 0 {
                node_affinity::score(pod, node)
            } else {
                0
            },
            if w.node_resources_fit != 0 {
                node_resources::score(pod, node, self.strategy, &self.resources)
            } else {
                0
            },
            if w.node_resources_balanced_allocation != 0 && !node_resources::balanced_skips(pod) {
                node_resources::balanced_score(pod, node)
            } else {
                0
            },
        ]
    }

    /// Schedules one pod onto one of `nodes` (indices into `snapshot`; `None` = every node).
    /// Pure with respect to the snapshot: the caller assumes the result.
    pub fn schedule_pod(
        &mut self,
        snapshot: &Snapshot,
        pod: &PodInfo,
        nodes: Option<&[usize]>,
        stats: &mut CycleStats,
    ) -> PodResult {
        stats.pods_evaluated += 1;
        if let Some(msg) = &pod.invalid {
            return PodResult::Error(format!("pod {} is invalid: {msg}", pod.key));
        }
        let n = nodes.map_or(snapshot.len(), <[usize]>::len);
        if n == 0 {
            return PodResult::NoFit {
                code: Code::UnschedulableAndUnresolvable,
                message: NO_NODES_AVAILABLE.into(),
            };
        }
        let to_find = num_feasible_nodes_to_find(n, self.percentage);
        let spread = pod_topology_spread::pre_filter(pod, snapshot);
        let inter_pod =
            !pod.spec.affinity.is_empty() || inter_pod_affinity::existing_terms_match(pod, snapshot);
        let affinity = if inter_pod {
            inter_pod_affinity::pre_filter(pod, snapshot)
        } else {
            None
        };
        let cacheable = spread.is_none() && !inter_pod && !pod.spec.has_inter_pod_constraints();
        if cacheable {
            self.cache.prepare(snapshot, &pod.spec);
        }
        let mut feasible = std::mem::take(&mut self.feasible);
        feasible.clear();
        let mut rejections: Vec<Arc<Rejection>> = Vec::new();
        let start = self.next_start % n;
        let mut processed = 0;
        for k in 0..n {
            let pos = if start + k >= n { start + k - n } else { start + k };
            let idx = nodes.map_or(pos, |l| l[pos]);
            processed += 1;
            let eval = if cacheable {
                let generation = snapshot.generation(idx);
                match &self.cache.entries[idx] {
                    (g, Some(e)) if *g == generation => {
                        stats.cached_node_evaluations += 1;
                        e.clone()
                    }
                    _ => {
                        stats.node_evaluations += 1;
                        let e = self.evaluate(pod, snapshot.node(idx), None, None);
                        self.cache.entries[idx] = (generation, Some(e.clone()));
                        e
                    }
                }
            } else {
                stats.node_evaluations += 1;
                self.evaluate(pod, snapshot.node(idx), spread.as_ref(), affinity.as_ref())
            };
            match eval {
                Eval::Feasible(raw) => {
                    feasible.push((idx, raw));
                    if feasible.len() >= to_find {
                        break;
                    }
                }
                Eval::Rejected(r) => rejections.push(r),
            }
        }
        self.next_start = (start + processed) % n;
        let result = if feasible.is_empty() {
            fit_error(n, &rejections)
        } else if feasible.len() == 1 {
            PodResult::Fit(feasible[0].0)
        } else {
            PodResult::Fit(self.select(snapshot, pod, &feasible, inter_pod))
        };
        self.feasible = feasible;
        result
    }

    fn evaluate(
        &self,
        pod: &PodInfo,
        node: &NodeInfo,
        spread: Option<&pod_topology_spread::FilterState>,
        affinity: Option<&inter_pod_affinity::FilterState>,
    ) -> Eval {
        match self.filter_node(pod, node, spread, affinity) {
            Ok(()) => Eval::Feasible(self.raw_scores(pod, node)),
            Err(r) => Eval::Rejected(Arc::new(r)),
        }
    }

    /// Score, normalise, weight and pick the best feasible node.
    fn select(
        &mut self,
        snapshot: &Snapshot,
        pod: &PodInfo,
        feasible: &[(usize, Raw)],
        inter_pod: bool,
    ) -> usize {
        let mut total = std::mem::take(&mut self.total);
        let mut col = std::mem::take(&mut self.col);
        let best = self.select_with(snapshot, pod, feasible, inter_pod, &mut total, &mut col);
        self.total = total;
        self.col = col;
        best
    }

    fn select_with(
        &self,
        snapshot: &Snapshot,
        pod: &PodInfo,
        feasible: &[(usize, Raw)],
        inter_pod: bool,
        total: &mut Vec<i64>,
        col: &mut Vec<i64>,
    ) -> usize {
        let w = &self.weights;
        let len = feasible.len();
        total.clear();
        total.resize(len, 0);
        col.clear();
        col.resize(len, 0);
        // TaintToleration: reverse-normalised. When no feasible node has an untolerated
        // PreferNoSchedule taint every node gets the same 100, which cannot change the choice.
        if w.taint_toleration != 0 && feasible.iter().any(|f| f.1[0] != 0) {
            col.iter_mut().zip(feasible).for_each(|(c, f)| *c = f.1[0]);
            default_normalize(crate::plugins::MAX_NODE_SCORE, true, col);
            total
                .iter_mut()
                .zip(col.iter())
                .for_each(|(t, c)| *t += c * w.taint_toleration);
        }
        if w.node_affinity != 0 && !pod.spec.preferred_node_affinity.is_empty() {
            col.iter_mut().zip(feasible).for_each(|(c, f)| *c = f.1[1]);
            default_normalize(crate::plugins::MAX_NODE_SCORE, false, col);
            total
                .iter_mut()
                .zip(col.iter())
                .for_each(|(t, c)| *t += c * w.node_affinity);
        }
        for (t, f) in total.iter_mut().zip(feasible.iter()) {
            *t += f.1[2] * w.node_resources_fit + f.1[3] * w.node_resources_balanced_allocation;
        }
        if w.pod_topology_spread != 0 {
            let idx: Vec<usize> = feasible.iter().map(|f| f.0).collect();
            if let Some(st) = pod_topology_spread::pre_score(pod, snapshot, &idx) {
                let mut raw: Vec<Option<i64>> = idx
                    .iter()
                    .map(|&i| pod_topology_spread::score(&st, snapshot.node(i)))
                    .collect();
                let norm = pod_topology_spread::normalize(&mut raw);
                total
                    .iter_mut()
                    .zip(&norm)
                    .for_each(|(t, c)| *t += c * w.pod_topology_spread);
            }
        }
        if w.inter_pod_affinity != 0
            && inter_pod
            && let Some(st) = inter_pod_affinity::pre_score(pod, snapshot)
        {
            col.iter_mut()
                .zip(feasible)
                .for_each(|(c, f)| *c = inter_pod_affinity::score(&st, snapshot.node(f.0)));
            inter_pod_affinity::normalize(col);
            total
                .iter_mut()
                .zip(col.iter())
                .for_each(|(t, c)| *t += c * w.inter_pod_affinity);
        }
        let mut best = 0;
        for i in 1..len {
            if total[i] > total[best] || (total[i] == total[best] && feasible[i].0 < feasible[best].0) {
                best = i;
            }
        }
        feasible[best].0
    }

    /// Whether the pod's Filter/Score results on a node depend only on that node (no
    /// inter-pod constraints on the pod, no existing pod's affinity term selects it).
    pub fn node_local(&self, snapshot: &Snapshot, pod: &PodInfo) -> bool {
        pod.invalid.is_none()
            && !pod.spec.has_inter_pod_constraints()
            && !inter_pod_affinity::existing_terms_match(pod, snapshot)
    }

    /// How many copies of `pod` fit on `node` one after another (0 when Filter rejects the
    /// first). Exact for node-local pods: the pod count, each requested resource and host
    /// ports (a pod's own host ports conflict with a copy of itself) bound it.
    pub fn copies_fitting(&self, pod: &PodInfo, node: &NodeInfo) -> usize {
        if self.filter_node(pod, node, None, None).is_err() {
            return 0;
        }
        let mut cap = (node.node.allowed_pods - node.pods.len() as i64).max(0);
        if !pod.spec.host_ports.is_empty() {
            cap = cap.min(1);
        }
        let req = &pod.spec.requests;
        let alloc = &node.node.allocatable;
        let used = &node.requested;
        let mut bound = |want: i64, have: i64, used: i64| {
            if want > 0 {
                cap = cap.min(((have - used) / want).max(0));
            }
        };
        bound(req.milli_cpu, alloc.milli_cpu, used.milli_cpu);
        bound(req.memory, alloc.memory, used.memory);
        bound(
            req.ephemeral_storage,
            alloc.ephemeral_storage,
            used.ephemeral_storage,
        );
        for (name, want) in &req.scalar {
            bound(*want, alloc.scalar(name), used.scalar(name));
        }
        cap as usize
    }

    /// [`PodScheduler::copies_fitting`] on node `idx`, cached per node generation like Filter
    /// results. Only for node-local pods (see [`PodScheduler::node_local`]).
    pub fn copies_fitting_at(&mut self, snapshot: &Snapshot, pod: &PodInfo, idx: usize) -> usize {
        self.cache.prepare(snapshot, &pod.spec);
        let generation = snapshot.generation(idx);
        if let (g, Some(c)) = self.cache.caps[idx]
            && g == generation
        {
            return c;
        }
        let c = self.copies_fitting(pod, snapshot.node(idx));
        self.cache.caps[idx] = (generation, Some(c));
        c
    }

    /// Filter-only count of feasible nodes for a pod (used to order pods by how constrained
    /// they are in the reorder retry).
    pub fn count_feasible(&self, snapshot: &Snapshot, pod: &PodInfo, nodes: Option<&[usize]>) -> usize {
        let spread = pod_topology_spread::pre_filter(pod, snapshot);
        let affinity = inter_pod_affinity::pre_filter(pod, snapshot);
        let n = nodes.map_or(snapshot.len(), <[usize]>::len);
        (0..n)
            .filter(|&k| {
                let idx = nodes.map_or(k, |l| l[k]);
                self.filter_node(pod, snapshot.node(idx), spread.as_ref(), affinity.as_ref())
                    .is_ok()
            })
            .count()
    }
}

/// Upstream `FitError.Error()`: `0/N nodes are available: <count reason, …>.` with the reason
/// histogram sorted as strings.
fn fit_error(n: usize, rejections: &[Arc<Rejection>]) -> PodResult {
    let mut hist: BTreeMap<&Cow<'static, str>, usize> = BTreeMap::new();
    let mut all_unresolvable = true;
    for r in rejections {
        all_unresolvable &= r.code == Code::UnschedulableAndUnresolvable;
        for reason in &r.reasons {
            *hist.entry(reason).or_insert(0) += 1;
        }
    }
    let mut parts: Vec<String> = hist.iter().map(|(r, c)| format!("{c} {r}")).collect();
    parts.sort();
    let mut message = format!("0/{n} nodes are available:");
    if !parts.is_empty() {
        message.push_str(&format!(" {}.", parts.join(", ")));
    }
    let code = if all_unresolvable {
        Code::UnschedulableAndUnresolvable
    } else {
        Code::Unschedulable
    };
    PodResult::NoFit { code, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feasible_nodes_to_find_matches_upstream() {
        assert_eq!(num_feasible_nodes_to_find(50, 0), 50);
        assert_eq!(num_feasible_nodes_to_find(5000, 0), 500);
        assert_eq!(num_feasible_nodes_to_find(1000, 0), 420);
        assert_eq!(num_feasible_nodes_to_find(200, 0), 100);
        assert_eq!(num_feasible_nodes_to_find(10_000, 0), 500);
        assert_eq!(num_feasible_nodes_to_find(5000, 100), 5000);
        assert_eq!(num_feasible_nodes_to_find(5000, 1), 100);
    }
}
