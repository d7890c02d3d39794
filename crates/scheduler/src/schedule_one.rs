//! The per-pod pass (upstream `schedule_one.go` `schedulePod`): PreFilter; the pod's nominated
//! node first when it has one among the placement's nodes and passes Filter there (upstream
//! `evaluateNominatedNode`: taken without looking further); else Filter over the nodes of the
//! current placement starting at a rotating index until `numFeasibleNodesToFind` feasible nodes
//! are found (percentageOfNodesToScore), then PreScore, Score, NormalizeScore, weights, and select
//! the best node (ties: the first node by name; while group preemption simulates, the lowest
//! victim cost comes before the score, see `preemption::node_cost`). The
//! plugins are those of a [`Profile`] (by default every in-tree plugin, weighted from
//! [`SchedulerConfig::plugin_weights`]), run through the traits of [`crate::framework`].
//!
//! Batching (upstream OpportunisticBatching, KEP-5598, made exact here): when every plugin is
//! node-local for a pod ([`crate::framework::Plugin::node_local`]: no inter-pod constraints, no
//! existing pod's affinity term selects it), a node's Filter result and raw scores depend only
//! on the pod's [`PodSpecInfo`] and that node's state. They are cached per node and reused
//! while the node's generation is unchanged, so the members of a homogeneous gang, and later
//! gangs with the same spec, only re-evaluate nodes that changed. Normalisation and selection
//! still run over the same node subset as without the cache, so results are identical. A pod
//! whose only other plugins run per pod ([`crate::framework::Plugin::filter_per_pod`]:
//! DynamicResources for a pod with claims) is batched too: the cache, keyed on the spec without
//! its claims, holds the other plugins' results, and the per-pod Filter runs on each node they
//! admit, so the members of a gang that differ only in their claims share one pass.
//!
//! Score plugins that are node-local for the pod are PreScored before Filter and scored during
//! it (that is what the cache stores); the others are PreScored and scored after Filter over
//! the feasible nodes, as upstream. Raw scores go to one reused column-major buffer (column per
//! score plugin, `numFeasibleNodesToFind` rows), so the node loop does not allocate.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::SchedulerConfig;
use crate::decision::CycleStats;
use crate::framework::{Code, ScoreColumn};
use crate::model::{NodeInfo, PodInfo, PodSpecInfo};
use crate::plugins::Rejection;
use crate::plugins::registry::{CycleState, Profile};
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

/// A node's cached Filter outcome (its raw scores are in [`EvalCache::raw`]).
#[derive(Debug, Clone)]
enum Cached {
    Feasible,
    Rejected(Arc<Rejection>),
}

/// Filter results and raw scores of batched pods, per node, for one pod spec on one snapshot.
#[derive(Debug, Default)]
struct EvalCache {
    snapshot_id: u64,
    spec: Option<Arc<PodSpecInfo>>,
    /// Per node: the generation it was evaluated at and the outcome (`None` = not yet).
    entries: Vec<(u64, Option<Cached>)>,
    /// Raw scores of feasible entries: `stride` per node (one per score slot of the profile);
    /// only the slots whose PreScore did not skip are written, and for one spec these are
    /// always the same (node-local PreScore depends on the spec only).
    raw: Vec<i64>,
    stride: usize,
    /// `copies_fitting` per node, under the same validity rules.
    caps: Vec<(u64, Option<usize>)>,
    /// Whether [`PodScheduler`]'s `copies_state` holds PreFilter for `spec`.
    copies_ready: bool,
    /// Whether the entries leave out the per-pod Filter plugins ([`crate::framework::Plugin::filter_per_pod`]); the
    /// spec is then compared without its claims.
    split: bool,
}

impl EvalCache {
    fn prepare(&mut self, snapshot: &Snapshot, spec: &Arc<PodSpecInfo>, stride: usize, split: bool) {
        let same_spec = self.spec.as_ref().is_some_and(|s| {
            Arc::ptr_eq(s, spec)
                || if split {
                    same_but_claims(s, spec)
                } else {
                    **s == **spec
                }
        });
        if self.snapshot_id != snapshot.id()
            || !same_spec
            || self.split != split
            || self.entries.len() != snapshot.len()
            || self.stride != stride
        {
            self.snapshot_id = snapshot.id();
            self.split = split;
            self.spec = Some(spec.clone());
            self.entries.clear();
            self.entries.resize(snapshot.len(), (0, None));
            self.stride = stride;
            self.raw.clear();
            self.raw.resize(snapshot.len() * stride, 0);
            self.caps.clear();
            self.caps.resize(snapshot.len(), (0, None));
            self.copies_ready = false;
        }
    }
}

/// Whether two specs are equal but for their resource claims. Destructured, so that a field added to [`PodSpecInfo`]
/// is not left out of the comparison unnoticed.
fn same_but_claims(a: &PodSpecInfo, b: &PodSpecInfo) -> bool {
    let PodSpecInfo {
        requests,
        non_zero_milli_cpu,
        non_zero_memory,
        tolerations,
        node_selector,
        required_node_affinity,
        preferred_node_affinity,
        host_ports,
        spread,
        affinity,
        node_name,
        volumes,
        resource_claims: _,
    } = a;
    *requests == b.requests
        && *non_zero_milli_cpu == b.non_zero_milli_cpu
        && *non_zero_memory == b.non_zero_memory
        && *tolerations == b.tolerations
        && *node_selector == b.node_selector
        && *required_node_affinity == b.required_node_affinity
        && *preferred_node_affinity == b.preferred_node_affinity
        && *host_ports == b.host_ports
        && *spread == b.spread
        && *affinity == b.affinity
        && *node_name == b.node_name
        && *volumes == b.volumes
}

/// Runs the per-pod plugins of a [`Profile`]; holds the rotating start index, the batching
/// cache and reused buffers across cycles.
#[derive(Debug)]
pub struct PodScheduler {
    profile: Profile,
    percentage: u32,
    next_start: usize,
    cache: EvalCache,
    /// PreFilter/PreScore state of the pod being scheduled.
    state: CycleState,
    /// PreFilter state of the pod `copies_fitting_at` serves (valid while `cache.copies_ready`).
    copies_state: CycleState,
    /// Per plugin of the profile: node-local for the current pod.
    local: Vec<bool>,
    /// Per Filter slot: run for each pod on top of the batching cache (all false unless the current pod is batched
    /// with per-pod plugins, [`Profile::per_pod_filters`]).
    per_pod: Vec<bool>,
    /// Score slots scored during Filter (node-local, PreScore not skipped).
    early: Vec<usize>,
    /// Score slots scored after Filter (not node-local, PreScore not skipped).
    late: Vec<usize>,
    feasible: Vec<usize>,
    /// Raw scores, column-major: slot `j`, feasible position `p` at `j * rows + p`.
    cols: Vec<i64>,
    total: Vec<i64>,
}

impl PodScheduler {
    /// A pod scheduler with every in-tree plugin ([`Profile::in_tree`]) for this
    /// configuration.
    pub fn new(config: &SchedulerConfig) -> PodScheduler {
        PodScheduler::with_profile(Profile::in_tree(config), config)
    }

    /// A pod scheduler running `profile`; `config` gives percentageOfNodesToScore.
    pub fn with_profile(profile: Profile, config: &SchedulerConfig) -> PodScheduler {
        PodScheduler {
            state: profile.cycle_state(),
            copies_state: profile.cycle_state(),
            profile,
            percentage: config.percentage_of_nodes_to_score,
            next_start: 0,
            cache: EvalCache::default(),
            local: Vec::new(),
            per_pod: Vec::new(),
            early: Vec::new(),
            late: Vec::new(),
            feasible: Vec::new(),
            cols: Vec::new(),
            total: Vec::new(),
        }
    }

    /// Drops the PreFilter states of the last pod. DynamicResources' holds the device catalog, and a holder of
    /// the catalog that updates it in place when nobody else has it (the benchmark applies each cycle's
    /// allocations so) would otherwise copy every claim and allocation.
    pub fn release_states(&mut self) {
        self.state = self.profile.cycle_state();
        self.copies_state = self.profile.cycle_state();
        self.cache.copies_ready = false;
    }

    /// The profile this scheduler runs.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// PreFilter of `pod` on `snapshot` with this scheduler's profile, for callers that filter
    /// nodes themselves (workload-aware preemption: [`CycleState::remove_pod`] simulates
    /// removing victims without re-running PreFilter).
    pub fn pre_filter(&self, snapshot: &Snapshot, pod: &PodInfo) -> CycleState {
        self.profile.pre_filter(pod, snapshot)
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
        self.state.pre_filter(pod, snapshot);
        if let Some(idx) = self.nominated_fit(snapshot, pod, nodes, stats) {
            return PodResult::Fit(idx);
        }
        let all_local = self.profile.node_local_each(pod, snapshot, &mut self.local);
        // A pod whose only non-local plugins run per pod (DynamicResources with claims) is batched for the others.
        let split = !all_local && self.profile.per_pod_filters(pod, &self.local, &mut self.per_pod);
        if !split {
            self.per_pod.clear();
        }
        // Nominated pods count by this pod's priority and identity, which the cache does not
        // key on: no batching while any nomination exists (preemptors waiting for victims).
        let any_nominated = snapshot.preemption_state().has_nominated();
        let batchable = (all_local || split) && !any_nominated;
        // Score plugins node-local for this pod: PreScore now, Score during Filter.
        let slots = self.profile.score_count();
        self.early.clear();
        for j in 0..slots {
            if self.local[self.profile.score_owner(j)] && self.state.pre_score(j, pod, snapshot, &[]) {
                self.early.push(j);
            }
        }
        if batchable {
            self.cache.prepare(snapshot, &pod.spec, slots, split);
        }
        // At most `to_find` nodes are feasible; only grow, stale contents are overwritten.
        if self.cols.len() < slots * to_find {
            self.cols.resize(slots * to_find, 0);
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
            let row = feasible.len();
            let eval = if batchable {
                self.evaluate_cached(snapshot, pod, idx, row, to_find, stats)
            } else {
                stats.node_evaluations += 1;
                match any_nominated
                    .then(|| crate::preemption::nominated::with_nominated(snapshot, pod, idx))
                    .flatten()
                {
                    Some(with) => self.evaluate_nominated(pod, snapshot.node(idx), &with, row, to_find),
                    None => self.evaluate(pod, snapshot.node(idx), row, to_find),
                }
            };
            match eval {
                Ok(()) => {
                    feasible.push(idx);
                    if feasible.len() >= to_find {
                        break;
                    }
                }
                Err(r) => rejections.push(r),
            }
        }
        self.next_start = (start + processed) % n;
        let result = if feasible.is_empty() {
            fit_error(n, &rejections)
        } else if feasible.len() == 1 {
            PodResult::Fit(feasible[0])
        } else {
            PodResult::Fit(self.select(snapshot, pod, &feasible, to_find))
        };
        self.feasible = feasible;
        result
    }

    /// Upstream `evaluateNominatedNode` (`findNodesThatFitPod`, `schedule_one.go`): a pod
    /// nominated to a node (by an earlier preemption) that is among `nodes` and passes Filter
    /// there, counting the other nominated pods, takes it without searching or scoring other
    /// nodes (and without moving the rotating start index). PreFilter must have run for `pod`.
    fn nominated_fit(
        &self,
        snapshot: &Snapshot,
        pod: &PodInfo,
        nodes: Option<&[usize]>,
        stats: &mut CycleStats,
    ) -> Option<usize> {
        let nominated = snapshot.preemption_state().nomination(&pod.key)?;
        let idx = snapshot.node_index(&nominated.node)?;
        if nodes.is_some_and(|l| !l.contains(&idx)) {
            return None;
        }
        stats.node_evaluations += 1;
        let node = snapshot.node(idx);
        if let Some(with) = crate::preemption::nominated::with_nominated(snapshot, pod, idx) {
            nominated_filter(&self.state, pod, node, &with).ok()?;
        }
        self.state.filter(pod, node).ok()?;
        Some(idx)
    }

    /// Filter, then the early raw scores into row `row` of the columns (`rows` per column).
    fn evaluate(
        &mut self,
        pod: &PodInfo,
        node: &NodeInfo,
        row: usize,
        rows: usize,
    ) -> Result<(), Arc<Rejection>> {
        self.state.filter(pod, node).map_err(Arc::new)?;
        for &j in &self.early {
            self.cols[j * rows + row] = self.state.score(j, pod, node);
        }
        Ok(())
    }

    /// [`PodScheduler::evaluate`] where pods nominated to the node count (`with` = the node
    /// with them added): Filter on `with` (PreFilter state updated for them, upstream
    /// `addGENominatedPods`), then on the node as it is (upstream runs both passes); scores on
    /// the node as it is.
    fn evaluate_nominated(
        &mut self,
        pod: &PodInfo,
        node: &NodeInfo,
        with: &NodeInfo,
        row: usize,
        rows: usize,
    ) -> Result<(), Arc<Rejection>> {
        nominated_filter(&self.state, pod, node, with).map_err(Arc::new)?;
        self.evaluate(pod, node, row, rows)
    }

    /// The Filter plugins for `pod` on node `idx` of `snapshot`, counting nominated pods
    /// (upstream `RunFilterPluginsWithNominatedPods`); preemption re-checks assignments with it.
    /// `state`: the pod's PreFilter on this snapshot when the caller has it (computed here
    /// otherwise). `idx` must be a node of the snapshot.
    pub(crate) fn filter_one(
        &self,
        snapshot: &Snapshot,
        pod: &PodInfo,
        idx: usize,
        state: Option<&CycleState>,
    ) -> Result<(), Rejection> {
        if let Some(msg) = &pod.invalid {
            return Err(Rejection::new(
                "PodInfo",
                Code::UnschedulableAndUnresolvable,
                format!("pod {} is invalid: {msg}", pod.key),
            ));
        }
        let owned;
        let state = match state {
            Some(s) => s,
            None => {
                owned = self.profile.pre_filter(pod, snapshot);
                &owned
            }
        };
        let node = snapshot.node(idx);
        if let Some(with) = crate::preemption::nominated::with_nominated(snapshot, pod, idx) {
            nominated_filter(state, pod, node, &with)?;
        }
        state.filter(pod, node)
    }

    /// [`PodScheduler::evaluate`] through the batching cache: the cached part, then the per-pod Filter plugins (none
    /// unless the pod is batched with some, [`Profile::per_pod_filters`]) on a node the cached part admits.
    fn evaluate_cached(
        &mut self,
        snapshot: &Snapshot,
        pod: &PodInfo,
        idx: usize,
        row: usize,
        rows: usize,
        stats: &mut CycleStats,
    ) -> Result<(), Arc<Rejection>> {
        self.evaluate_shared(snapshot, pod, idx, row, rows, stats)?;
        if !self.per_pod.is_empty() {
            self.state
                .filter_part(pod, snapshot.node(idx), &self.per_pod, true)
                .map_err(Arc::new)?;
        }
        Ok(())
    }

    /// The cached part of [`PodScheduler::evaluate_cached`]: every Filter plugin but the per-pod ones, and the
    /// early scores.
    fn evaluate_shared(
        &mut self,
        snapshot: &Snapshot,
        pod: &PodInfo,
        idx: usize,
        row: usize,
        rows: usize,
        stats: &mut CycleStats,
    ) -> Result<(), Arc<Rejection>> {
        let generation = snapshot.generation(idx);
        let stride = self.cache.stride;
        let cached = &mut self.cache.raw[idx * stride..(idx + 1) * stride];
        match &self.cache.entries[idx] {
            (g, Some(c)) if *g == generation => {
                stats.cached_node_evaluations += 1;
                match c {
                    Cached::Feasible => {
                        for &j in &self.early {
                            self.cols[j * rows + row] = cached[j];
                        }
                        Ok(())
                    }
                    Cached::Rejected(r) => Err(r.clone()),
                }
            }
            _ => {
                stats.node_evaluations += 1;
                let node = snapshot.node(idx);
                match self.state.filter_part(pod, node, &self.per_pod, false) {
                    Ok(()) => {
                        for &j in &self.early {
                            let s = self.state.score(j, pod, node);
                            cached[j] = s;
                            self.cols[j * rows + row] = s;
                        }
                        self.cache.entries[idx] = (generation, Some(Cached::Feasible));
                        Ok(())
                    }
                    Err(r) => {
                        let r = Arc::new(r);
                        self.cache.entries[idx] = (generation, Some(Cached::Rejected(r.clone())));
                        Err(r)
                    }
                }
            }
        }
    }

    /// PreScore and Score the late plugins, normalise, weight and pick the best feasible node.
    /// `rows` is the column length of `cols`.
    fn select(&mut self, snapshot: &Snapshot, pod: &PodInfo, feasible: &[usize], rows: usize) -> usize {
        let len = feasible.len();
        self.late.clear();
        for j in 0..self.profile.score_count() {
            if !self.local[self.profile.score_owner(j)] && self.state.pre_score(j, pod, snapshot, feasible) {
                self.late.push(j);
                let col = &mut self.cols[j * rows..j * rows + len];
                for (c, &i) in col.iter_mut().zip(feasible) {
                    *c = self.state.score(j, pod, snapshot.node(i));
                }
            }
        }
        let total = &mut self.total;
        total.clear();
        total.resize(len, 0);
        for &j in self.early.iter().chain(&self.late) {
            let col = &mut self.cols[j * rows..j * rows + len];
            if self.state.normalize(j, pod, snapshot, feasible, col) == ScoreColumn::Uniform {
                continue;
            }
            let w = self.profile.weight(j);
            total.iter_mut().zip(col.iter()).for_each(|(t, c)| *t += c * w);
        }
        // Ties go to the first node by name, not by index: a snapshot's node order depends on how it was built
        // (kept between cycles, nodes appended as they come), so by name the same cluster state gives the same
        // node whichever way the snapshot was built (`phalanx simulate` relies on it). Upstream picks among ties
        // at random (`selectHost`, `schedule_one.go`); any fixed rule is one of its outcomes.
        // While group preemption simulates, the victims' cost of a node comes first
        // (`preemption::node_cost`).
        let costs = snapshot.victim_costs.as_deref();
        let cost = |i: usize| costs.and_then(|c| c.get(feasible[i]));
        // Name order through the snapshot's ranks: most feasible nodes tie on an empty or even cluster, and
        // comparing the names themselves costs a string comparison (and three dependent loads) per tie.
        let ranks = snapshot.name_ranks();
        let mut best = 0;
        for i in 1..len {
            let better = match cost(i).cmp(&cost(best)) {
                std::cmp::Ordering::Less => true,
                std::cmp::Ordering::Greater => false,
                std::cmp::Ordering::Equal => {
                    total[i] > total[best]
                        || (total[i] == total[best] && ranks[feasible[i]] < ranks[feasible[best]])
                }
            };
            if better {
                best = i;
            }
        }
        feasible[best]
    }

    /// Whether the pod's Filter/Score results on a node depend only on that node (every plugin
    /// is node-local for it: no inter-pod constraints on the pod, no existing pod's affinity
    /// term selects it).
    pub fn node_local(&self, snapshot: &Snapshot, pod: &PodInfo) -> bool {
        pod.invalid.is_none() && self.profile.node_local(pod, snapshot)
    }

    /// How many copies of `pod` fit on `node` one after another (0 when Filter rejects the
    /// first). Exact for node-local pods: the pod count, each requested resource and host
    /// ports (a pod's own host ports conflict with a copy of itself) bound it. Runs PreFilter
    /// on `snapshot` each call; [`PodScheduler::copies_fitting_at`] caches.
    pub fn copies_fitting(&self, snapshot: &Snapshot, pod: &PodInfo, node: &NodeInfo) -> usize {
        copies_with(&self.profile.pre_filter(pod, snapshot), pod, node)
    }

    /// [`PodScheduler::copies_fitting`] on node `idx`, cached per node generation like Filter
    /// results. Only for node-local pods (see [`PodScheduler::node_local`]).
    pub fn copies_fitting_at(&mut self, snapshot: &Snapshot, pod: &PodInfo, idx: usize) -> usize {
        self.cache
            .prepare(snapshot, &pod.spec, self.profile.score_count(), false);
        let generation = snapshot.generation(idx);
        if let (g, Some(c)) = self.cache.caps[idx]
            && g == generation
        {
            return c;
        }
        // Node-local PreFilter depends on the spec only: computed once per cached spec.
        if !self.cache.copies_ready {
            self.copies_state.pre_filter(pod, snapshot);
            self.cache.copies_ready = true;
        }
        let c = copies_with(&self.copies_state, pod, snapshot.node(idx));
        self.cache.caps[idx] = (generation, Some(c));
        c
    }

    /// Filter-only count of feasible nodes for a pod (used to order pods by how constrained
    /// they are in the reorder retry).
    pub fn count_feasible(&self, snapshot: &Snapshot, pod: &PodInfo, nodes: Option<&[usize]>) -> usize {
        let state = self.profile.pre_filter(pod, snapshot);
        let n = nodes.map_or(snapshot.len(), <[usize]>::len);
        (0..n)
            .filter(|&k| {
                let idx = nodes.map_or(k, |l| l[k]);
                state.filter(pod, snapshot.node(idx)).is_ok()
            })
            .count()
    }
}

/// Filter on `with` (= `node` plus the nominated pods that count), with the PreFilter state
/// updated for those pods.
fn nominated_filter(
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
    with: &NodeInfo,
) -> Result<(), Rejection> {
    let mut state = state.clone();
    let mut added = with.pods.iter().skip(node.pods.len());
    if let Some(err) = added.find_map(|p| state.add_pod(pod, p, with).err()) {
        return Err(Rejection::new("NominatedPods", Code::Unschedulable, err.message));
    }
    state.filter(pod, with)
}

/// [`PodScheduler::copies_fitting`] with PreFilter already run into `state`.
fn copies_with(state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> usize {
    if state.filter(pod, node).is_err() {
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
            cap = cap.min((have.saturating_sub(used) / want).max(0));
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
