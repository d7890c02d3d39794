//! The `preempt-kill` fault: SIGKILL of the leader in the middle of a preemption, while the victims of its plan
//! terminate, so that the standby takes over a plan it did not make and must find it in the cluster (the pending
//! pods' nominations and the victims terminating with `DisruptionTarget`, `crates/driver/src/preemption_tracker.rs`).
//!
//! Setup, on a quiet cluster (the run has no random load, see [`Fault::uses_load`]): the PriorityClasses [`LOW`]
//! and [`HIGH`]; low-priority standalone pods of half a node's CPUs, two per chaos node, scheduled by the replicas
//! and carrying [`HOLD_FINALIZER`](crate::workload::HOLD_FINALIZER), so that a deleted one stays Terminating until the fault releases it (kwok
//! removes a deleted pod at once, whatever its grace period). Then a high-priority gang of [`GANG_SIZE`] pods of
//! half a node each (minCount = size): it fits nowhere, and one plan evicts exactly [`GANG_SIZE`] of the
//! low-priority pods, one per preemptor pod.
//!
//! Sequence: a watch on the run's pods; the gang is created; at the first pod seen Terminating, SIGKILL of the
//! Lease holder (its slot restarts only when the fault ends). Once the standby holds the Lease, the victims stay
//! held for the profile's `preempt_hold` while a label of a chaos node changes every 500 ms: a node update wakes
//! every waiting entity, as the events of a busy cluster do, so the preemptor is retried while its victims
//! terminate. Then every Terminating pod of the run is released, and again as more appear, until the gang is bound
//! (60 s at most).
//!
//! Verdict: I7 as on every run ([`crate::evictions`]), and here its exact form too: the scheduler sent at most
//! [`GANG_SIZE`] evictions (one plan deletes each of its victims once; a second plan that deletes the same,
//! still Terminating victims again counts as much as one that deletes others). The failover measured is from the SIGKILL to the standby's Lease takeover (its first bind
//! waits for the hold on purpose).
//!
//! [`Fault::uses_load`]: crate::fault_kind::Fault::uses_load

use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;

use crate::context::{Ctx, millis};
use crate::injection::{Outcome, SETUP_WAIT, to_duration, wait_takeover};
use crate::invariants::{Invariant, Violation};
use crate::processes::Supervisor;
use crate::quantity::parse_milli;
use crate::workload::{GangSpec, create_gang, release_holds};

/// PriorityClass of the pods that fill the nodes (value 10).
pub const LOW: &str = "phalanx-chaos-low";
/// PriorityClass of the preemptor gang (value 1000).
pub const HIGH: &str = "phalanx-chaos-high";
/// Pods of the preemptor gang; each needs one victim.
pub const GANG_SIZE: usize = 2;
/// The preemptor gang's PodGroup.
const GANG: &str = "preemptor";
/// Label of a chaos node changed during the hold, to wake waiting work.
const TICK_LABEL: &str = "phalanx.dev/chaos-tick";
/// How long the fault waits for the gang's bind after the release (the verdict's note; I3 judges it after).
const WAIT: Duration = Duration::from_secs(60);

/// Creates [`LOW`] and [`HIGH`] (`PreemptLowerPriority`) unless they exist.
///
/// # Errors
/// The API refused.
pub async fn ensure_priority_classes(client: &kube::Client) -> anyhow::Result<()> {
    let api: Api<PriorityClass> = Api::all(client.clone());
    for (name, value) in [(LOW, 10), (HIGH, 1000)] {
        let pc: PriorityClass = serde_json::from_value(json!({
            "metadata": {"name": name},
            "value": value,
            "preemptionPolicy": "PreemptLowerPriority",
            "description": "phalanx-chaos: preemption under faults",
        }))?;
        match api.create(&PostParams::default(), &pc).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_already_exists() => {}
            Err(e) => return Err(e).with_context(|| format!("creating PriorityClass {name}")),
        }
    }
    Ok(())
}

/// Pods `<name>-<i>` of `cpu` each in PriorityClass `class`; `hold`: standalone pods with the hold finalizer, else
/// a gang (a PodGroup with minCount = size).
fn spec(ctx: &Ctx, name: &str, size: usize, cpu: &str, class: &str, hold: bool) -> GangSpec {
    GangSpec {
        name: name.into(),
        size,
        min_count: size,
        cpu: cpu.into(),
        memory: "1Gi".into(),
        one_rack: false,
        priority: None,
        priority_class: Some(class.into()),
        hold,
        parent: None,
        containers: 1,
        scheduler_name: ctx.scheduler_name.clone(),
        standalone: hold,
    }
}

/// Waits until `probe` holds (polled every 50 ms), at most `timeout`.
async fn until(timeout: Duration, mut probe: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if probe() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The first pod of `ns` seen with a `deletionTimestamp`, by a watch in a task of its own (its initial list also
/// shows a pod that went Terminating before the watch started).
fn first_terminating(
    client: &kube::Client,
    ns: &str,
) -> tokio::task::JoinHandle<Option<(String, Timestamp)>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(ev) = stream.next().await {
            if let Ok(Event::Apply(p) | Event::InitApply(p)) = ev
                && p.metadata.deletion_timestamp.is_some()
            {
                return Some((p.metadata.name.unwrap_or_default(), Timestamp::now()));
            }
        }
        None
    })
}

/// Changes [`TICK_LABEL`] of the first chaos node every 500 ms for `hold`; returns how many updates landed.
async fn tick_nodes(ctx: &Ctx, hold: Duration) -> usize {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let deadline = tokio::time::Instant::now() + hold;
    let mut n = 0;
    while tokio::time::Instant::now() < deadline {
        // A value no earlier run used, so that every patch is a change.
        let value = Timestamp::now().as_millisecond().to_string();
        let patch = json!({"metadata": {"labels": {TICK_LABEL: value}}});
        if nodes
            .patch("chaos-n0", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .is_ok()
        {
            n += 1;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    n
}

/// Injects the fault into the run in `ns` (see the module documentation).
///
/// # Errors
/// The setup failed (PriorityClasses, pods, a leader with a warm standby), no victim turned Terminating, or the
/// leader could not be killed: a harness failure.
pub async fn inject(ctx: &Ctx, ns: &str) -> anyhow::Result<Outcome> {
    let mut killed = None;
    let result = run(ctx, ns, &mut killed).await;
    // Whatever happened: the killed slot may restart, and no pod of the run stays held.
    if let Some(k) = killed {
        ctx.replicas.release(&k);
    }
    if let Err(e) = release_holds(&ctx.client, ns, false).await {
        tracing::warn!(error = %format!("{e:#}"), "releasing the held pods");
    }
    result
}

async fn run(ctx: &Ctx, ns: &str, killed: &mut Option<String>) -> anyhow::Result<Outcome> {
    ensure_priority_classes(&ctx.client).await?;
    let node_milli = parse_milli(ctx.profile.node_cpu)?;
    let half = format!("{}m", node_milli / 2);
    let fillers = 2 * ctx.profile.nodes;
    create_gang(&ctx.client, ns, &spec(ctx, "low", fillers, &half, LOW, true)).await?;
    anyhow::ensure!(
        until(SETUP_WAIT, || ctx.checker.bound_count(ns) >= fillers).await,
        "{} of {fillers} low-priority pods ({half} CPU each) bound within {SETUP_WAIT:?} (leader {:?}); unbound: \
         {}; free: {}; what holds each node: {}",
        ctx.checker.bound_count(ns),
        ctx.leader(),
        ctx.checker.unbound_pods(ns).join("; "),
        ctx.checker.free_capacity(),
        ctx.checker.node_allocations()
    );
    let (leader, _) = ctx.wait_leader(true, SETUP_WAIT).await?;
    let watch = first_terminating(&ctx.client, ns);
    let created_at = Timestamp::now();
    create_gang(&ctx.client, ns, &spec(ctx, GANG, GANG_SIZE, &half, HIGH, false)).await?;
    let first = tokio::time::timeout(SETUP_WAIT, watch).await;
    let (victim, seen_at) = match first {
        Ok(Ok(Some(v))) => v,
        _ => anyhow::bail!(
            "no pod of {ns} turned Terminating within {SETUP_WAIT:?} of the preemptor gang's creation (leader \
             {:?}); unbound: {}; what holds each node: {}",
            ctx.leader(),
            ctx.checker.unbound_pods(ns).join("; "),
            ctx.checker.node_allocations()
        ),
    };
    // The holder now (normally the leader that made the plan).
    let holder = ctx.leader().unwrap_or(leader);
    let other = ctx.replicas.other_running(&holder).context("no standby")?;
    ctx.replicas.kill(&holder, true)?;
    let killed_at = Timestamp::now();
    *killed = Some(holder.clone());
    let mut notes = vec![format!(
        "{victim} Terminating {} ms after the gang's creation; SIGKILL to {holder} {} ms later",
        millis(created_at, seen_at),
        millis(seen_at, killed_at)
    )];
    let took = wait_takeover(ctx, &other, killed_at).await;
    notes.push(match took {
        Some(t) => format!("{other} took the Lease after {} ms", millis(killed_at, t)),
        None => format!("{other} did not take the Lease"),
    });
    let ticks = tick_nodes(ctx, ctx.profile.preempt_hold).await;
    let released_at = Timestamp::now();
    let mut released = Vec::new();
    let gang_bound = || {
        ctx.checker
            .gangs(ns)
            .iter()
            .any(|g| g.name == GANG && g.bound >= GANG_SIZE)
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while !gang_bound() && tokio::time::Instant::now() < deadline {
        released.extend(release_holds(&ctx.client, ns, true).await.unwrap_or_default());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let bound = gang_bound();
    notes.push(format!(
        "held {:?} after the takeover ({ticks} node updates), released {}; gang {}",
        ctx.profile.preempt_hold,
        released.join(" "),
        if bound {
            format!(
                "bound {} ms after the release",
                millis(released_at, Timestamp::now())
            )
        } else {
            format!("NOT bound {WAIT:?} after the release")
        }
    ));
    let _ = ctx.audit.poll();
    let events = ctx.audit.select(|e| e.namespace == ns);
    let evictions = ctx
        .checker
        .with_evictions(|l| l.evictions(&events, Supervisor::is_replica));
    let list: Vec<String> = evictions
        .iter()
        .map(|e| {
            format!(
                "{}{} on {} by {} at {}",
                e.name,
                if e.repeat { " (again)" } else { "" },
                e.node.as_deref().unwrap_or("-"),
                e.user,
                e.at.strftime("%H:%M:%S%.3f")
            )
        })
        .collect();
    let nominations: Vec<String> = (0..GANG_SIZE)
        .map(|i| {
            let pod = format!("{GANG}-{i}");
            let seen = ctx.checker.with_evictions(|l| l.nominations_of(ns, &pod));
            format!("{pod} {}", seen.join(" > "))
        })
        .collect();
    let pods = evictions.iter().filter(|e| !e.repeat).count();
    notes.push(format!(
        "{} eviction(s) of {pods} pod(s) (one plan needs {GANG_SIZE}): {}; nominations seen: {}",
        evictions.len(),
        list.join(", "),
        nominations.join(", ")
    ));
    let mut violations = Vec::new();
    // One plan sends one deletion per victim, across the SIGKILL too; every further one is a second preemption.
    if evictions.len() > GANG_SIZE {
        violations.push(Violation {
            invariant: Invariant::SinglePreemption,
            at: evictions[GANG_SIZE].at,
            object: Some((ns.to_owned(), GANG.to_owned())),
            detail: format!(
                "PodGroup {ns}/{GANG} needed {GANG_SIZE} evictions (one per pod, each half a node); the scheduler \
                 sent {} eviction(s) of {pods} pod(s) across the SIGKILL of {holder} at {killed_at}: {}",
                evictions.len(),
                list.join(", ")
            ),
        });
    }
    Ok(Outcome {
        failover: took.map(|t| to_duration(millis(killed_at, t))),
        notes,
        violations,
    })
}
