//! PodGroup algorithms for one leaf group (upstream `podGroupSchedulingDefaultAlgorithm` and
//! `podGroupSchedulingPlacementAlgorithm` in kube-scheduler's `pkg/scheduler`), plus Phalanx's reorder retry.
//!
//! Every function leaves the snapshot as follows: on success the chosen assignments are
//! assumed; on any other status nothing of this group is assumed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::decision::CycleStats;
use crate::framework::{
    Code, Placement, PlacementFeasiblePlugin, PlacementGeneratePlugin, PlacementProgress,
    PlacementScorePlugin, PodGroupAssignments, ProposedAssignment, Status,
};
use crate::model::{GroupInfo, PodInfo, PodKey};
use crate::schedule_one::{PodResult, PodScheduler};
use crate::snapshot::Snapshot;

/// The plugins and state a group algorithm runs with.
pub struct GroupContext<'a> {
    /// Per-pod Filter/Score runner.
    pub pods: &'a mut PodScheduler,
    /// PlacementFeasible (GangScheduling).
    pub feasible: &'a dyn PlacementFeasiblePlugin,
    /// PlacementGenerate plugins, applied in sequence (each refines the previous placements).
    pub generators: &'a [Box<dyn PlacementGeneratePlugin>],
    /// PlacementScore plugins with weights.
    pub scorers: &'a [(Box<dyn PlacementScorePlugin>, i64)],
    /// Counters.
    pub stats: &'a mut CycleStats,
    /// The group is a leaf of a CompositePodGroup tree: success with nothing new placed stays
    /// Success (upstream applies `no pods were schedulable` only at the root).
    pub in_tree: bool,
    /// `percentageOfPlacementsToScore` (0 = adaptive; see [`crate::placements::placements_to_find`]).
    pub placements_percentage: u32,
}

impl GroupContext<'_> {
    /// How many feasible placements of `placements` to find before scoring.
    pub(crate) fn placements_to_find(&self, placements: &[Placement]) -> usize {
        let scored = self.scorers.iter().any(|(_, w)| *w != 0);
        crate::placements::placements_to_find(self.placements_percentage, placements, scored)
    }
}

/// Result of a group algorithm.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupResult {
    /// Success, Unschedulable or Error (Wait never comes out).
    pub status: Status,
    /// Assignments (assumed in the snapshot on success; empty otherwise).
    pub assignments: Vec<ProposedAssignment>,
    /// Per-pod failures (FitError / error messages) of the reported attempt.
    pub pod_failures: HashMap<PodKey, (Code, String)>,
    /// Number of pods that went through Filter in the reported attempt.
    pub tried: usize,
    /// The placement chosen (success) when placements were generated.
    pub placement: Option<String>,
}

impl GroupResult {
    /// A result with only a status (nothing tried or assumed).
    pub fn status_only(status: Status) -> GroupResult {
        GroupResult {
            status,
            assignments: vec![],
            pod_failures: HashMap::new(),
            tried: 0,
            placement: None,
        }
    }
}

/// The default algorithm on `nodes` (`None` = all): PlacementFeasible pre-check, then each pod
/// in order through Filter/Score and assume, PlacementFeasible after each pod, greedy past
/// minCount; reverts everything unless the final status is Success.
pub fn default_algorithm(
    ctx: &mut GroupContext<'_>,
    snapshot: &mut Snapshot,
    group: &GroupInfo,
    pods: &[Arc<PodInfo>],
    nodes: Option<&[usize]>,
) -> GroupResult {
    let mark = snapshot.mark();
    let mut progress = PlacementProgress {
        scheduled: snapshot.scheduled_count(&group.key),
        remaining: pods.len(),
    };
    let mut st = ctx.feasible.feasible(group, progress);
    let mut result = GroupResult::status_only(st.clone());
    if st.is_rejected() || st.code == Code::Error {
        if st.code == Code::Error {
            result.status = Status::new(
                Code::Error,
                format!("failed to evaluate placement feasibility: {}", st.message),
            );
        }
        return result;
    }
    for pod in pods {
        result.tried += 1;
        let r = ctx.pods.schedule_pod(snapshot, pod, nodes, ctx.stats);
        match r {
            PodResult::Fit(node) => {
                snapshot.assume(pod.clone(), node);
                result.assignments.push(ProposedAssignment {
                    pod: pod.clone(),
                    node,
                });
                progress.scheduled += 1;
            }
            PodResult::NoFit { code, message } => {
                result.pod_failures.insert(pod.key.clone(), (code, message));
            }
            PodResult::Error(e) => {
                result
                    .pod_failures
                    .insert(pod.key.clone(), (Code::Error, e.clone()));
                st = Status::new(
                    Code::Error,
                    format!("failed to schedule other pod from a pod group: {e}"),
                );
                break;
            }
        }
        progress.remaining -= 1;
        st = ctx.feasible.feasible(group, progress);
        if st.is_rejected() || st.code == Code::Error {
            break;
        }
    }
    result.status = match st.code {
        Code::Wait => Status::new(Code::Unschedulable, st.message),
        Code::Success if result.assignments.is_empty() && !ctx.in_tree => {
            Status::new(Code::Unschedulable, "no pods were schedulable")
        }
        _ => st,
    };
    if !result.status.is_success() {
        snapshot.revert_to(mark);
        result.assignments.clear();
    }
    result
}

/// PlacementGenerate for a leaf group: every generator refines the previous placements,
/// starting from `parent` (`None` = all nodes).
pub(crate) fn generate(
    ctx: &GroupContext<'_>,
    snapshot: &Snapshot,
    group: &GroupInfo,
    parent: Option<&[usize]>,
) -> Result<Vec<Placement>, Status> {
    let mut placements = vec![crate::placements::parent_placement(snapshot, parent)];
    for g in ctx.generators {
        let mut next = Vec::new();
        for p in &placements {
            next.extend(g.generate(snapshot, group, p)?);
        }
        placements = next;
    }
    Ok(placements)
}

/// The placement algorithm: PlacementGenerate, one simulation per placement (reverted), then
/// PlacementScore over the successes (weighted sum of normalised scores; ties go to the first
/// placement in generation order, i.e. the smallest domain value), and the winner is assumed.
/// A group without a topology constraint runs the default algorithm on all nodes directly.
pub fn placement_algorithm(
    ctx: &mut GroupContext<'_>,
    snapshot: &mut Snapshot,
    group: &GroupInfo,
    pods: &[Arc<PodInfo>],
) -> GroupResult {
    placement_algorithm_in(ctx, snapshot, group, pods, None)
}

/// [`placement_algorithm`] restricted to the nodes of the parent's placement (`None` = all
/// nodes): a leaf of a CompositePodGroup tree only sees its parent's evaluated placement.
///
/// With `preferredTopology` (Phalanx), each level, narrowest first, refines the required
/// placements (or the parent's nodes) into that level's domains ([`crate::placements::preferred_level`]);
/// the first level with a feasible domain wins. When no level has one, the group is evaluated as
/// without preferences, and its failure is reported as such: a preference never adds a reason.
pub fn placement_algorithm_in(
    ctx: &mut GroupContext<'_>,
    snapshot: &mut Snapshot,
    group: &GroupInfo,
    pods: &[Arc<PodInfo>],
    parent: Option<&[usize]>,
) -> GroupResult {
    if group.topology_key.is_none() && group.preferred_topology.is_empty() {
        return default_algorithm(ctx, snapshot, group, pods, parent);
    }
    let required = match &group.topology_key {
        None => None,
        Some(key) => match generate(ctx, snapshot, group, parent) {
            Err(st) => return GroupResult::status_only(Status::new(Code::Error, st.message)),
            Ok(p) if p.is_empty() => {
                return GroupResult::status_only(Status::new(
                    Code::Unschedulable,
                    format!("0/0 placements are available: no node has the topology label {key:?}"),
                ));
            }
            Ok(p) => Some(p),
        },
    };
    if !group.preferred_topology.is_empty() {
        let base = required
            .clone()
            .unwrap_or_else(|| vec![crate::placements::parent_placement(snapshot, parent)]);
        let keys = std::slice::from_ref(&group.key);
        for level in &group.preferred_topology {
            let domains = crate::placements::preferred_level(snapshot, level, keys, &base);
            if domains.is_empty() {
                continue;
            }
            let r = evaluate_placements(ctx, snapshot, group, pods, &domains, level);
            if r.status.is_success() || r.status.code == Code::Error {
                return r;
            }
        }
    }
    match (required, &group.topology_key) {
        (Some(placements), Some(key)) => evaluate_placements(ctx, snapshot, group, pods, &placements, key),
        _ => default_algorithm(ctx, snapshot, group, pods, parent),
    }
}

/// Steps 3-5 of the placement algorithm on generated `placements` of node label `key`: one
/// simulation per placement until [`GroupContext::placements_to_find`] are feasible, PlacementScore,
/// and the winner assumed (the counts shortcut first, when it applies).
fn evaluate_placements(
    ctx: &mut GroupContext<'_>,
    snapshot: &mut Snapshot,
    group: &GroupInfo,
    pods: &[Arc<PodInfo>],
    placements: &[Placement],
    key: &str,
) -> GroupResult {
    ctx.stats.placements += placements.len() as u32;
    if let Some(r) = placement_by_counts(ctx, snapshot, group, pods, placements, key) {
        return r;
    }
    let limit = ctx.placements_to_find(placements);
    let mut successes = match simulate_placements(
        snapshot,
        placements,
        Some((key, pods, pinned(snapshot, group))),
        limit,
        |snapshot, p| default_algorithm(ctx, snapshot, group, pods, Some(&p.nodes)),
    ) {
        Ok(successes) => successes,
        Err(r) => return r,
    };
    ctx.stats.feasible_placements += successes.len() as u32;
    let best = if successes.len() == 1 {
        0
    } else {
        match score_placements(ctx, snapshot, group, placements, &successes) {
            Ok(b) => b,
            Err(st) => return GroupResult::status_only(Status::new(Code::Error, st.message)),
        }
    };
    let (pi, mut chosen) = successes.swap_remove(best);
    for a in &chosen.assignments {
        snapshot.assume(a.pod.clone(), a.node);
    }
    chosen.placement = Some(placements[pi].name.clone());
    chosen
}

/// Replays the default algorithm's PlacementFeasible sequence for `n` identical pods of which
/// the first `fits` fit; returns the final status and how many were placed.
fn replay_status(
    feasible: &dyn PlacementFeasiblePlugin,
    group: &GroupInfo,
    scheduled: usize,
    n: usize,
    fits: usize,
    in_tree: bool,
) -> (Status, usize) {
    let mut progress = PlacementProgress {
        scheduled,
        remaining: n,
    };
    let mut st = feasible.feasible(group, progress);
    if st.is_rejected() || st.code == Code::Error {
        return (st, 0);
    }
    let mut placed = 0;
    for i in 0..n {
        if i < fits {
            placed += 1;
            progress.scheduled += 1;
        }
        progress.remaining -= 1;
        st = feasible.feasible(group, progress);
        if st.is_rejected() || st.code == Code::Error {
            break;
        }
    }
    let st = match st.code {
        Code::Wait => Status::new(Code::Unschedulable, st.message),
        Code::Success if placed == 0 && !in_tree => {
            Status::new(Code::Unschedulable, "no pods were schedulable")
        }
        _ => st,
    };
    (st, placed)
}

/// A group algorithm's result as [`simulate_placements`] needs it: leaf ([`GroupResult`]) or subtree
/// (`TreeResult`).
pub(crate) trait PlacementResult {
    /// The result's status.
    fn status(&self) -> &Status;
    /// Replaces the result's status.
    fn set_status(&mut self, status: Status);
    /// An empty Unschedulable result (when no placement produced one to report).
    fn unschedulable() -> Self;
    /// Pods placed before the attempt failed, when the result knows (a leaf group); `None` for a subtree.
    fn placed(&self) -> Option<usize> {
        None
    }
    /// Appends `note` to every per-pod failure message (a leaf group's pods; a subtree has none of its own).
    fn annotate_pods(&mut self, _note: &str) {}
}

impl PlacementResult for GroupResult {
    fn status(&self) -> &Status {
        &self.status
    }
    fn set_status(&mut self, status: Status) {
        self.status = status;
    }
    fn unschedulable() -> Self {
        GroupResult::status_only(Status::new(Code::Unschedulable, ""))
    }
    fn placed(&self) -> Option<usize> {
        // Assignments are cleared on failure; every pod tried either fit or has a failure entry.
        Some(self.tried.saturating_sub(self.pod_failures.len()))
    }
    fn annotate_pods(&mut self, note: &str) {
        // The fit error ends a sentence (`... 2 Insufficient cpu.`): the note follows as the next one.
        let note = note.trim_start_matches("; ");
        for (_, m) in self.pod_failures.values_mut() {
            m.push(' ');
            m.push_str(note);
        }
    }
}

/// The end of a failed topology group's message: the key and the domain that came closest, so the reader knows
/// where to add room (`; topology key "rack": closest domain rack=r2 (2 of 3 pods fit)`). `placed` holds the pods
/// placed per placement, in placement order; the first of the most wins. Empty when nothing is known. When the
/// group's scheduled members `pinned` it to its one domain (a replacement for a lost member of a running gang), the
/// message says so: `; topology key "rack": the group's scheduled members hold it to domain rack=r1, which is full
/// (0 of 1 pods fit)`.
pub(crate) fn closest_domain(
    key: &str,
    placements: &[Placement],
    placed: &[usize],
    pods: usize,
    pinned: bool,
) -> String {
    match best_placement(placed) {
        Some((i, n)) if pinned && placements.len() == 1 && i == 0 => format!(
            "; topology key {key:?}: the group's scheduled members hold it to domain {key}={}, which is full ({n} of {pods} pods fit)",
            placements[0].name
        ),
        Some((i, n)) if i < placements.len() => format!(
            "; topology key {key:?}: closest domain {key}={} ({n} of {pods} pods fit)",
            placements[i].name
        ),
        _ => String::new(),
    }
}

/// The placement that placed the most pods (the first of them) and how many it placed.
fn best_placement(placed: &[usize]) -> Option<(usize, usize)> {
    let mut best: Option<(usize, usize)> = None;
    for (i, &n) in placed.iter().enumerate() {
        if best.is_none_or(|(_, b)| n > b) {
            best = Some((i, n));
        }
    }
    best
}

/// For the closest domain of a failed topology group: the claim that keeps a pod out of it, when one does
/// (`; in it, pod p1: claim ns/c1: node(s) didn't find available persistent volumes to bind`), and the device
/// class it is short of (`; in it, 8 devices of class gpu.example.com wanted, 6 free`); empty for a group without
/// claims.
fn volume_note(
    snapshot: &Snapshot,
    placements: &[Placement],
    placed: &[usize],
    pods: &[Arc<PodInfo>],
) -> String {
    let Some((i, _)) = best_placement(placed) else {
        return String::new();
    };
    let Some(p) = placements.get(i) else {
        return String::new();
    };
    let nodes: Vec<&crate::model::NodeInfo> = p.nodes.iter().map(|&n| snapshot.node(n)).collect();
    let mut note = String::new();
    if pods.iter().any(|pod| !pod.spec.volumes.is_empty())
        && let Some(why) =
            crate::volumes::binding::blocking_claim(snapshot.volumes(), pods, nodes.iter().copied())
    {
        note = format!("; in it, {why}");
    }
    if pods.iter().any(|pod| !pod.spec.resource_claims.is_empty())
        && let Some(short) =
            crate::dra::scheduling::domain_shortfall(snapshot.devices(), pods, nodes.iter().copied())
    {
        note.push_str(&format!("; in it, {short}"));
    }
    note
}

/// Whether the group has scheduled members on nodes, which pin its topology domain ([`crate::plugins`]'s
/// TopologyPlacement generates only their domain then).
fn pinned(snapshot: &Snapshot, group: &GroupInfo) -> bool {
    snapshot
        .group_state(&group.key)
        .is_some_and(|s| !s.scheduled.is_empty())
}

/// Upstream `podGroupSchedulingPlacementAlgorithm` steps 3–4 (also used for composite groups): runs
/// `run` once per placement on the snapshot, reverting its assumptions after each.
///
/// Stops once `limit` placements proved feasible (upstream's `numFeasiblePlacementsToFind`; `usize::MAX` = all).
/// Returns the feasible results with their placement index (in placement order), or the result to report:
/// the first `Error` at once, or, when no placement is feasible, the first failure re-worded
/// `0/<placements> placements are available: <its message>` (upstream's wording), followed for a leaf group with
/// `topology` = (key, pods, pinned) by the closest domain ([`closest_domain`]).
pub(crate) fn simulate_placements<R: PlacementResult>(
    snapshot: &mut Snapshot,
    placements: &[Placement],
    topology: Option<(&str, &[Arc<PodInfo>], bool)>,
    limit: usize,
    mut run: impl FnMut(&mut Snapshot, &Placement) -> R,
) -> Result<Vec<(usize, R)>, R> {
    let mut first: Option<R> = None;
    let mut successes = Vec::new();
    let mut placed = Vec::with_capacity(placements.len());
    for (i, p) in placements.iter().enumerate() {
        let mark = snapshot.mark();
        let r = run(snapshot, p);
        snapshot.revert_to(mark);
        if r.status().code == Code::Error {
            return Err(r);
        }
        placed.push(r.placed());
        if r.status().is_success() {
            successes.push((i, r));
            if successes.len() >= limit {
                break;
            }
        } else if first.is_none() {
            first = Some(r);
        }
    }
    if successes.is_empty() {
        let mut r = first.unwrap_or_else(R::unschedulable);
        let closest = match (topology, placed.iter().copied().collect::<Option<Vec<usize>>>()) {
            (Some((key, pods, pinned)), Some(placed)) => {
                let mut note = closest_domain(key, placements, &placed, pods.len(), pinned);
                if pinned {
                    // A replacement's own fit error names only nodes: say which domain they are, and why.
                    r.annotate_pods(&note);
                }
                if !note.is_empty() {
                    note.push_str(&volume_note(snapshot, placements, &placed, pods));
                }
                note
            }
            _ => String::new(),
        };
        let message = format!(
            "0/{} placements are available: {}{closest}",
            placements.len(),
            r.status().message
        );
        r.set_status(Status::new(Code::Unschedulable, message));
        return Err(r);
    }
    Ok(successes)
}

/// Placement evaluation without simulating every placement, for homogeneous groups of
/// node-local pods scored only by node-independent PlacementScore plugins: with identical
/// pods and per-node filters, the greedy default algorithm places exactly
/// `min(pods, Σ copies fitting per node)` pods in a placement, which decides feasibility and
/// the built-in placement scores. Only the winner is simulated for real. Returns `None` when
/// the shortcut does not apply (the caller then simulates every placement).
fn placement_by_counts(
    ctx: &mut GroupContext<'_>,
    snapshot: &mut Snapshot,
    group: &GroupInfo,
    pods: &[Arc<PodInfo>],
    placements: &[Placement],
    key: &str,
) -> Option<GroupResult> {
    if pods.is_empty()
        // Nominated pods reserve capacity per pod priority and identity: simulate for real.
        || snapshot.preemption_state().has_nominated()
        || heterogeneous(pods)
        || !ctx.pods.node_local(snapshot, &pods[0])
        || ctx.scorers.iter().any(|(s, w)| *w != 0 && s.needs_nodes())
    {
        return None;
    }
    let scheduled = snapshot.scheduled_count(&group.key);
    let limit = ctx.placements_to_find(placements);
    let mut successes: Vec<(usize, GroupResult)> = Vec::new();
    let mut placed_per = Vec::with_capacity(placements.len());
    for (i, p) in placements.iter().enumerate() {
        let mut fits = 0;
        for &n in &p.nodes {
            fits += ctx.pods.copies_fitting_at(snapshot, &pods[0], n);
            if fits >= pods.len() {
                fits = pods.len();
                break;
            }
        }
        let (st, placed) = replay_status(ctx.feasible, group, scheduled, pods.len(), fits, ctx.in_tree);
        placed_per.push(fits.min(pods.len()));
        if st.is_success() {
            let assignments = pods[..placed]
                .iter()
                .map(|p| ProposedAssignment {
                    pod: p.clone(),
                    node: crate::framework::UNSPECIFIED_NODE,
                })
                .collect();
            successes.push((
                i,
                GroupResult {
                    status: st,
                    assignments,
                    pod_failures: HashMap::new(),
                    tried: pods.len(),
                    placement: None,
                },
            ));
            if successes.len() >= limit {
                break;
            }
        }
    }
    ctx.stats.feasible_placements += successes.len() as u32;
    let pi = if successes.is_empty() {
        // Report the per-pod reasons of the first placement, as a real simulation would.
        let mark = snapshot.mark();
        let r = default_algorithm(ctx, snapshot, group, pods, Some(&placements[0].nodes));
        snapshot.revert_to(mark);
        if r.status.is_success() {
            return None;
        }
        let mut r = r;
        let pinned = pinned(snapshot, group);
        let note = closest_domain(key, placements, &placed_per, pods.len(), pinned);
        if pinned {
            r.annotate_pods(&note);
        }
        r.status = Status::new(
            Code::Unschedulable,
            format!(
                "0/{} placements are available: {}{note}",
                placements.len(),
                r.status.message
            ),
        );
        return Some(r);
    } else if successes.len() == 1 {
        successes[0].0
    } else {
        match score_placements(ctx, snapshot, group, placements, &successes) {
            Ok(b) => successes[b].0,
            Err(st) => return Some(GroupResult::status_only(Status::new(Code::Error, st.message))),
        }
    };
    let expected = successes
        .iter()
        .find(|(i, _)| *i == pi)
        .map_or(0, |(_, r)| r.assignments.len());
    let mark = snapshot.mark();
    let mut r = default_algorithm(ctx, snapshot, group, pods, Some(&placements[pi].nodes));
    if !r.status.is_success() || r.assignments.len() != expected {
        // Cannot happen for node-local identical pods; fall back to full simulation.
        snapshot.revert_to(mark);
        return None;
    }
    r.placement = Some(placements[pi].name.clone());
    Some(r)
}

fn score_placements(
    ctx: &GroupContext<'_>,
    snapshot: &Snapshot,
    group: &GroupInfo,
    placements: &[Placement],
    successes: &[(usize, GroupResult)],
) -> Result<usize, Status> {
    let total = placement_totals(ctx, snapshot, group, placements, successes)?;
    let mut best = 0;
    for i in 1..total.len() {
        if total[i] > total[best] {
            best = i;
        }
    }
    Ok(best)
}

/// Weighted sum of the normalised PlacementScore of each success (same order as `successes`).
pub(crate) fn placement_totals(
    ctx: &GroupContext<'_>,
    snapshot: &Snapshot,
    group: &GroupInfo,
    placements: &[Placement],
    successes: &[(usize, GroupResult)],
) -> Result<Vec<i64>, Status> {
    let mut total = vec![0i64; successes.len()];
    for (plugin, weight) in ctx.scorers {
        if *weight == 0 {
            continue;
        }
        let mut scores = Vec::with_capacity(successes.len());
        for (pi, r) in successes {
            let a = PodGroupAssignments {
                placement: placements[*pi].clone(),
                proposed: r.assignments.clone(),
            };
            scores.push(plugin.score(snapshot, group, &a)?);
        }
        plugin.normalize(&mut scores)?;
        total.iter_mut().zip(&scores).for_each(|(t, s)| *t += s * weight);
    }
    Ok(total)
}

/// Whether the pods differ in their scheduling spec.
pub fn heterogeneous(pods: &[Arc<PodInfo>]) -> bool {
    pods.windows(2)
        .any(|w| !(Arc::ptr_eq(&w[0].spec, &w[1].spec) || w[0].spec == w[1].spec))
}

/// Largest request first: by priority, then the sum over resources of request / largest
/// request of that resource in the group (descending), then the original order.
pub fn largest_first(pods: &[Arc<PodInfo>]) -> Vec<Arc<PodInfo>> {
    let mut names: Vec<String> = vec!["cpu".into(), "memory".into(), "ephemeral-storage".into()];
    for p in pods {
        for (n, _) in &p.spec.requests.scalar {
            if !names.iter().any(|x| **x == **n) {
                names.push(n.to_string());
            }
        }
    }
    let max: Vec<i64> = names
        .iter()
        .map(|n| pods.iter().map(|p| p.spec.requests.get(n)).max().unwrap_or(0))
        .collect();
    let size = |p: &PodInfo| -> f64 {
        names
            .iter()
            .zip(&max)
            .filter(|(_, m)| **m > 0)
            .map(|(n, m)| p.spec.requests.get(n) as f64 / *m as f64)
            .sum()
    };
    let mut v: Vec<(usize, f64, Arc<PodInfo>)> = pods
        .iter()
        .enumerate()
        .map(|(i, p)| (i, size(p), p.clone()))
        .collect();
    v.sort_by(|a, b| {
        b.2.priority
            .cmp(&a.2.priority)
            .then(b.1.total_cmp(&a.1))
            .then(a.0.cmp(&b.0))
    });
    v.into_iter().map(|x| x.2).collect()
}

/// Most constrained first: by priority, then the number of nodes passing Filter (ascending,
/// on the current snapshot), then the original order.
pub fn most_constrained_first(
    ctx: &GroupContext<'_>,
    snapshot: &Snapshot,
    pods: &[Arc<PodInfo>],
) -> Vec<Arc<PodInfo>> {
    most_constrained_first_in(ctx, snapshot, pods, None)
}

/// [`most_constrained_first`] counting only `nodes` (`None` = all).
pub fn most_constrained_first_in(
    ctx: &GroupContext<'_>,
    snapshot: &Snapshot,
    pods: &[Arc<PodInfo>],
    nodes: Option<&[usize]>,
) -> Vec<Arc<PodInfo>> {
    let mut counts: Vec<(usize, usize, Arc<PodInfo>)> = Vec::with_capacity(pods.len());
    for (i, p) in pods.iter().enumerate() {
        let known = counts
            .iter()
            .find(|(_, _, q)| q.spec == p.spec)
            .map(|(_, c, _)| *c);
        let c = known.unwrap_or_else(|| ctx.pods.count_feasible(snapshot, p, nodes));
        counts.push((i, c, p.clone()));
    }
    counts.sort_by(|a, b| {
        b.2.priority
            .cmp(&a.2.priority)
            .then(a.1.cmp(&b.1))
            .then(a.0.cmp(&b.0))
    });
    counts.into_iter().map(|x| x.2).collect()
}

/// Runs the placement algorithm in upstream's order; if the group comes out Unschedulable
/// after trying pods and its pods are heterogeneous, retries with "largest request first" and
/// "most constrained first" (at most `max_attempts`, within `budget`). Beyond upstream: a
/// fixed greedy order can strand capacity that another order would use.
pub fn run_leaf(
    ctx: &mut GroupContext<'_>,
    snapshot: &mut Snapshot,
    group: &GroupInfo,
    pods: &[Arc<PodInfo>],
    budget: Duration,
    max_attempts: u32,
) -> GroupResult {
    run_leaf_in(ctx, snapshot, group, pods, budget, max_attempts, None)
}

/// [`run_leaf`] within the parent's placement (`None` = all nodes).
pub fn run_leaf_in(
    ctx: &mut GroupContext<'_>,
    snapshot: &mut Snapshot,
    group: &GroupInfo,
    pods: &[Arc<PodInfo>],
    budget: Duration,
    max_attempts: u32,
    parent: Option<&[usize]>,
) -> GroupResult {
    let started = Instant::now();
    let first = placement_algorithm_in(ctx, snapshot, group, pods, parent);
    if first.status.code != Code::Unschedulable
        || first.tried == 0
        || budget.is_zero()
        || max_attempts == 0
        || !heterogeneous(pods)
    {
        return first;
    }
    let same = |a: &[Arc<PodInfo>], b: &[Arc<PodInfo>]| a.iter().zip(b).all(|(x, y)| x.key == y.key);
    let mut tried_orders: Vec<Vec<Arc<PodInfo>>> = vec![pods.to_vec()];
    for attempt in 0..2u32 {
        if attempt >= max_attempts || started.elapsed() >= budget {
            break;
        }
        let order = if attempt == 0 {
            largest_first(pods)
        } else {
            most_constrained_first_in(ctx, snapshot, pods, parent)
        };
        if tried_orders.iter().any(|o| same(o, &order)) {
            continue;
        }
        ctx.stats.reorder_attempts += 1;
        let r = placement_algorithm_in(ctx, snapshot, group, &order, parent);
        if r.status.is_success() {
            ctx.stats.reorder_succeeded = true;
            return r;
        }
        if r.status.code == Code::Error {
            return r;
        }
        tried_orders.push(order);
    }
    first
}
