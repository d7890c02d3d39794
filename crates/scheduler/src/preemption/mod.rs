//! Workload-aware preemption (upstream `DefaultPreemption`:
//! `pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go` and
//! `pkg/scheduler/framework/preemption/`; KEP-4671, KEP-5710 workload-aware preemption,
//! KEP-6012 for CompositePodGroups).
//!
//! Pure: preemption only simulates on the [`Snapshot`] (restored afterwards) and returns data,
//! victims to evict and nominations to set, in the cycle's [`crate::Decision`]. The runtime
//! actuates it (`DisruptionTarget` condition, delete, `Preempted` event) and feeds the
//! consequences back as snapshot inputs ([`state`]): nominated pods, pods terminating by
//! preemption, preemptions in flight, PDBs, group objects and start times.
//!
//! - [`evaluator`]: a root group (PodGroup or CompositePodGroup tree) as the preemptor;
//! - [`single_pod`]: a standalone pod, per-node victim selection;
//! - `units`: victim units (`disruptionMode: all` groups are evicted whole);
//! - [`pdb`]: the PodDisruptionBudget data and the violating/non-violating split;
//! - `nominated`: nominated pods reserve capacity in Filter.

pub(crate) mod cost;
pub mod evaluator;
pub(crate) mod handle;
pub(crate) mod node_cost;
pub(crate) mod nominated;
pub mod pdb;
pub(crate) mod reprieve;
pub mod single_pod;
pub mod state;
pub(crate) mod units;

use std::time::Instant;

use crate::config::SchedulerConfig;
use crate::decision::{ConditionReason, Decision, FailureReason, Outcome, PreemptionReport, RequeueMode};
use crate::framework::{
    Code, PodGroupPostFilterPlugin, PostFilterPlugin, PostFilterResult, PreemptionHandle, Preemptor, Status,
};
use crate::snapshot::Snapshot;

pub use pdb::Pdb;
pub use state::{NominatedPod, PreemptionState};

/// Prefix of every group preemption message (upstream `PodGroupPostFilter`).
pub const GROUP_PREFIX: &str = "pod group preemption: ";
/// Prefix of every pod preemption message (upstream `PostFilter`'s `preemption: `).
pub const POD_PREFIX: &str = "preemption: ";

/// The default preemption plugin: [`PodGroupPostFilterPlugin`] for root groups and
/// [`PostFilterPlugin`] for standalone pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultPreemption {
    /// Placements of a topology-constrained root evaluated for least disruption
    /// (`preemptionCandidatePlacements`; 1 = upstream's single best placement).
    pub candidate_placements: usize,
}

impl DefaultPreemption {
    /// Upstream plugin name.
    pub const NAME: &'static str = "DefaultPreemption";

    /// The plugin with the configuration's settings.
    pub fn new(config: &SchedulerConfig) -> DefaultPreemption {
        DefaultPreemption {
            candidate_placements: (config.preemption_candidate_placements as usize).max(1),
        }
    }
}

fn prefixed(prefix: &str, st: Status) -> Status {
    Status::new(st.code, format!("{prefix}{}", st.message))
}

impl PodGroupPostFilterPlugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn post_filter(
        &self,
        snapshot: &mut Snapshot,
        preemptor: &Preemptor<'_>,
        handle: &mut dyn PreemptionHandle,
    ) -> Result<PostFilterResult, Status> {
        let mut r = evaluator::preempt(snapshot, preemptor, handle, self.candidate_placements)
            .map_err(|st| prefixed(GROUP_PREFIX, st))?;
        r.message = if r.ongoing && r.message.is_empty() {
            format!("{GROUP_PREFIX}waiting for the preemption for this pod group to be finished")
        } else if r.ongoing {
            format!("{GROUP_PREFIX}{}", r.message)
        } else {
            format!(
                "{GROUP_PREFIX}found a placement for the pod group, preempting {} victims",
                r.victims.len()
            )
        };
        Ok(r)
    }
}

impl PostFilterPlugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn post_filter(
        &self,
        snapshot: &mut Snapshot,
        preemptor: &Preemptor<'_>,
        handle: &mut dyn PreemptionHandle,
    ) -> Result<PostFilterResult, Status> {
        let mut r =
            single_pod::preempt(snapshot, preemptor, handle).map_err(|st| prefixed(POD_PREFIX, st))?;
        r.message = if r.ongoing && r.message.is_empty() {
            format!("{POD_PREFIX}waiting for the preemption for this pod to be finished")
        } else if r.ongoing {
            format!("{POD_PREFIX}{}", r.message)
        } else {
            format!("{POD_PREFIX}preempting {} victims", r.victims.len())
        };
        Ok(r)
    }
}

/// What a PostFilter chain produced.
#[derive(Debug, Clone)]
pub(crate) struct ChainOutcome {
    pub(crate) plugin: Option<&'static str>,
    pub(crate) result: Result<PostFilterResult, Status>,
    pub(crate) started: Instant,
}

/// Runs plugins in order (upstream `RunPodGroupPostFilterPlugins` / `RunPostFilterPlugins`):
/// the first Success wins, an Error stops the chain, rejections are collected (their messages
/// joined) and the next plugin tries. The snapshot is restored by every plugin.
pub(crate) fn run_chain<'p, P: ?Sized + 'p>(
    plugins: impl IntoIterator<Item = &'p P>,
    name: impl Fn(&P) -> &'static str,
    mut run: impl FnMut(&P) -> Result<PostFilterResult, Status>,
) -> ChainOutcome {
    let started = Instant::now();
    let mut rejections: Vec<Status> = Vec::new();
    for p in plugins {
        match run(p) {
            Ok(r) => {
                return ChainOutcome {
                    plugin: Some(name(p)),
                    result: Ok(r),
                    started,
                };
            }
            Err(st) if st.code == Code::Error => {
                return ChainOutcome {
                    plugin: None,
                    result: Err(st),
                    started,
                };
            }
            Err(st) => rejections.push(st),
        }
    }
    let code = if rejections
        .iter()
        .all(|s| s.code == Code::UnschedulableAndUnresolvable)
    {
        Code::UnschedulableAndUnresolvable
    } else {
        Code::Unschedulable
    };
    let message = rejections
        .iter()
        .map(|s| s.message.as_str())
        .filter(|m| !m.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    ChainOutcome {
        plugin: None,
        result: Err(Status::new(code, message)),
        started,
    }
}

/// Holds back a group preemption that would evict victims while the group is still in its
/// `preemptionDelaySeconds` (Phalanx; KAI-Scheduler's `preemption-delay`): the victims and nominations
/// are dropped and the outcome becomes an Unschedulable rejection naming what preemption would do and
/// `why` it waits, so that the members stay `Unschedulable` for a cluster autoscaler to act on. A
/// preemption already under way (`ongoing`), one that found room without victims, and a failure are
/// kept as they are.
pub(crate) fn hold(outcome: ChainOutcome, why: &str) -> ChainOutcome {
    match outcome.result {
        Ok(r) if !r.ongoing && !r.victims.is_empty() => ChainOutcome {
            plugin: None,
            result: Err(Status::new(
                Code::Unschedulable,
                format!(
                    "{GROUP_PREFIX}preempting {} victims would make room, but {why}",
                    r.victims.len()
                ),
            )),
            started: outcome.started,
        },
        result => ChainOutcome { result, ..outcome },
    }
}

fn append(msg: &mut String, extra: &str) {
    if extra.is_empty() || msg.contains(extra) {
        return;
    }
    // Upstream appends the PostFilter message after the FitError's closing period with a space
    // (`0/3 nodes are available: 3 Insufficient cpu. preemption: ...`).
    if msg.ends_with('.') {
        msg.push(' ');
    } else if !msg.is_empty() {
        msg.push_str("; ");
    }
    msg.push_str(extra);
}

/// Folds a chain outcome into an Unschedulable decision (upstream `podGroupCycle` step 6c for
/// groups, `handleSchedulingFailure` for pods): Success → nominations and victims, pods stay
/// requeued as unschedulable (the victims' deletion wakes them; with no victim at all they
/// back off instead); Error → the whole decision becomes a SchedulerError; any message is
/// appended to every group condition and pod failure.
pub(crate) fn apply(mut d: Decision, outcome: Option<ChainOutcome>) -> Decision {
    let Some(o) = outcome else { return d };
    let duration = o.started.elapsed();
    let (success, ongoing, message) = match o.result {
        Ok(r) => {
            d.nominations = r.nominations;
            d.victims = r.victims;
            d.cleared_nominations = r.cleared_nominations;
            (true, r.ongoing, r.message)
        }
        Err(st) if st.code == Code::Error && d.outcome == Outcome::Unschedulable => {
            d.outcome = Outcome::Error;
            for f in &mut d.failures {
                f.reason = FailureReason::SchedulerError;
                f.message = st.message.clone();
            }
            for c in &mut d.conditions {
                c.reason = ConditionReason::SchedulerError;
                c.message = st.message.clone();
            }
            if let Some(r) = &mut d.requeue {
                r.mode = RequeueMode::Backoff;
            }
            (false, false, st.message)
        }
        Err(st) => (false, false, st.message),
    };
    if d.outcome == Outcome::Unschedulable {
        for c in d.conditions.iter_mut().filter(|c| !c.status) {
            append(&mut c.message, &message);
        }
        for f in &mut d.failures {
            append(&mut f.message, &message);
        }
    }
    if success && !ongoing && d.victims.is_empty() {
        // Room without evicting anything (e.g. a nomination went away meanwhile): no deletion
        // event will come, so retry after backoff instead of waiting in the pool.
        if let Some(r) = &mut d.requeue {
            r.mode = RequeueMode::Backoff;
        }
    }
    d.preemption = Some(PreemptionReport {
        plugin: o.plugin,
        success,
        ongoing,
        message,
        duration,
    });
    d
}
