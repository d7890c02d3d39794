//! The `member-kill` fault: members of a running gang die while its replacements cannot bind, and the gang's
//! `recoveryPolicy` `RestartGroup` must not leave it partly running (I8).
//!
//! Setup, on a quiet cluster (no random load, see [`Fault::uses_load`]): a Deployment annotated
//! `scheduling.phalanx.dev/gang: "true"` of [`SIZE`] one-CPU pods (the owner integration makes its PodGroup),
//! and `recoveryPolicy: {action: RestartGroup, gracePeriodSeconds: GRACE_SECS}` patched onto that group, as a user
//! would. Each of [`ROUNDS`] rounds cordons every chaos node, marks one bound member `Failed` (a crashed
//! container), and in the last round SIGKILLs the Lease holder right after, so that the standby's controllers
//! must carry out the restart. The gang is then partly running (its replacement cannot bind): the PodGroup
//! controller must delete the survivors after the grace period. Then the nodes are uncordoned and the recreated
//! gang must bind whole again.
//!
//! Verdict (I8): from the loss on, the gang is polled every 100 ms; a gang partly running (some but fewer than
//! [`SIZE`] members bound and not on their way out) for longer than the grace period plus [`SLACK`] (plus the
//! Lease takeover in the round with the SIGKILL) is a violation. The issue's bound is the grace period plus one
//! controller resync; the controller requeues itself at the end of the grace period and a standby retries every
//! 5 s, so the tighter bound holds.
//!
//! [`Fault::uses_load`]: crate::fault_kind::Fault::uses_load

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::context::{Ctx, millis};
use crate::injection::{Outcome, SETUP_WAIT, lease_timeout, to_duration, wait_takeover};
use crate::invariants::{Invariant, Violation};

/// Members of the gang (`minCount`).
pub const SIZE: usize = 3;
/// Losses injected, the last one with a SIGKILL of the leader.
pub const ROUNDS: usize = 2;
/// `recoveryPolicy.gracePeriodSeconds` of the gang.
pub const GRACE_SECS: u64 = 2;
/// Allowed on top of the grace period before a partly running gang is a violation.
pub const SLACK: Duration = Duration::from_secs(10);
/// The Deployment; its PodGroup is `restartable-deployment`.
const OWNER: &str = "restartable";
const GROUP: &str = "restartable-deployment";

/// Tracks how long a gang stays partly running (pure, so that the check itself is tested).
#[derive(Debug, Default)]
pub struct PartialTracker {
    since: Option<Timestamp>,
    /// The longest stretch seen, and when it started.
    pub longest: Option<(Duration, Timestamp)>,
}

impl PartialTracker {
    /// Records one observation at `now` of `bound` live members out of `size`.
    pub fn observe(&mut self, now: Timestamp, bound: usize, size: usize) {
        if bound > 0 && bound < size {
            let since = *self.since.get_or_insert(now);
            let d = to_duration(millis(since, now));
            if self.longest.is_none_or(|(l, _)| d > l) {
                self.longest = Some((d, since));
            }
        } else {
            self.since = None;
        }
    }

    /// The violation when the longest stretch exceeds `limit`.
    pub fn violation(&self, ns: &str, limit: Duration, context: &str) -> Option<Violation> {
        let (d, since) = self.longest.filter(|(d, _)| *d > limit)?;
        Some(Violation {
            invariant: Invariant::RestartedGangsNotPartial,
            at: since,
            object: Some((ns.to_owned(), GROUP.to_owned())),
            detail: format!(
                "PodGroup {ns}/{GROUP} (recoveryPolicy RestartGroup, grace {GRACE_SECS} s) was partly running for \
                 {} ms from {since}, more than the {} ms allowed ({context})",
                d.as_millis(),
                limit.as_millis()
            ),
        })
    }
}

/// Whether a pod is a live, bound member: not terminal, not being deleted, bound.
fn live_bound(p: &Pod) -> bool {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed"))
        && p.metadata.deletion_timestamp.is_none()
        && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
}

async fn members(pods: &Api<Pod>) -> anyhow::Result<Vec<Pod>> {
    Ok(pods
        .list(&ListParams::default().labels(&format!("app={OWNER}")))
        .await?
        .items)
}

async fn cordon(ctx: &Ctx, on: bool) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    for i in 0..ctx.profile.nodes {
        let name = format!("chaos-n{i}");
        nodes
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": on}})),
            )
            .await
            .with_context(|| format!("cordon {name} = {on}"))?;
    }
    Ok(())
}

/// Waits until `n` members are live and bound, at most [`SETUP_WAIT`].
///
/// # Errors
/// Not within [`SETUP_WAIT`]: the error names the pending pods of `ns` with their `PodScheduled` condition and what
/// holds each node.
async fn wait_bound(ctx: &Ctx, ns: &str, pods: &Api<Pod>, n: usize) -> anyhow::Result<Duration> {
    let start = tokio::time::Instant::now();
    loop {
        let got = members(pods).await?.iter().filter(|p| live_bound(p)).count();
        if got == n {
            return Ok(start.elapsed());
        }
        anyhow::ensure!(
            start.elapsed() < SETUP_WAIT,
            "{got} of {n} members of {OWNER} bound after {SETUP_WAIT:?} (leader {:?}); unbound: {}; what holds each \
             node: {}",
            ctx.leader(),
            ctx.checker.unbound_pods(ns).join("; "),
            ctx.checker.node_allocations()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Injects the fault into the run in `ns` (see the module documentation).
///
/// # Errors
/// The setup failed (the Deployment, its PodGroup, the policy, the cordons) or the gang never bound: a harness
/// failure.
pub async fn inject(ctx: &Ctx, ns: &str) -> anyhow::Result<Outcome> {
    let mut killed = None;
    let result = run(ctx, ns, &mut killed).await;
    if let Some(k) = killed {
        ctx.replicas.release(&k);
    }
    if let Err(e) = cordon(ctx, false).await {
        tracing::warn!(error = %format!("{e:#}"), "uncordoning the chaos nodes");
    }
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
    let _ = deployments.delete(OWNER, &DeleteParams::background()).await;
    result
}

async fn run(ctx: &Ctx, ns: &str, killed: &mut Option<String>) -> anyhow::Result<Outcome> {
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
    let dep: Deployment = serde_json::from_value(json!({
        "metadata": {"name": OWNER, "annotations": {"scheduling.phalanx.dev/gang": "true"}},
        "spec": {
            "replicas": SIZE,
            "selector": {"matchLabels": {"app": OWNER}},
            "template": {
                "metadata": {"labels": {"app": OWNER}},
                "spec": {
                    "schedulerName": ctx.scheduler_name,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "busybox",
                                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                },
            },
        },
    }))?;
    deployments
        .create(&PostParams::default(), &dep)
        .await
        .context("creating the gang Deployment")?;
    let groups: Api<phalanx_api::v1beta1::PodGroup> = Api::namespaced(ctx.client.clone(), ns);
    let deadline = tokio::time::Instant::now() + SETUP_WAIT;
    while groups.get_opt(GROUP).await?.is_none() {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "no PodGroup {GROUP} after {SETUP_WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let policy =
        json!({"spec": {"recoveryPolicy": {"action": "RestartGroup", "gracePeriodSeconds": GRACE_SECS}}});
    groups
        .patch(GROUP, &PatchParams::default(), &Patch::Merge(policy))
        .await
        .context("setting the recovery policy")?;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    wait_bound(ctx, ns, &pods, SIZE).await?;
    let mut notes = Vec::new();
    let mut violations = Vec::new();
    let mut failover = None;
    for round in 0..ROUNDS {
        let (leader, _) = ctx.wait_leader(true, SETUP_WAIT).await?;
        cordon(ctx, true).await?;
        let victim = members(&pods)
            .await?
            .into_iter()
            .find(live_bound)
            .context("no bound member")?;
        let name = victim.metadata.name.clone().unwrap_or_default();
        pods.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Failed"}})),
        )
        .await
        .with_context(|| format!("marking {name} Failed"))?;
        let lost_at = Timestamp::now();
        let mut limit = Duration::from_secs(GRACE_SECS) + SLACK;
        let last = round + 1 == ROUNDS;
        if last {
            let other = ctx.replicas.other_running(&leader).context("no standby")?;
            ctx.replicas.kill(&leader, true)?;
            *killed = Some(leader.clone());
            let took = wait_takeover(ctx, &other, lost_at).await;
            failover = took.map(|t| to_duration(millis(lost_at, t)));
            limit += lease_timeout(ctx);
            notes.push(format!(
                "round {round}: {name} Failed, SIGKILL to {leader}; {other} {}",
                took.map_or("did not take the Lease".to_string(), |t| format!(
                    "took the Lease after {} ms",
                    millis(lost_at, t)
                ))
            ));
        }
        // Poll until the restart emptied the gang (or the limit passed).
        let mut tracker = PartialTracker::default();
        let poll_until = tokio::time::Instant::now() + limit + Duration::from_secs(5);
        let mut emptied = None;
        while tokio::time::Instant::now() < poll_until {
            let bound = members(&pods).await?.iter().filter(|p| live_bound(p)).count();
            tracker.observe(Timestamp::now(), bound, SIZE);
            if bound == 0 {
                emptied = Some(millis(lost_at, Timestamp::now()));
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        violations.extend(tracker.violation(ns, limit, &format!("round {round}")));
        cordon(ctx, false).await?;
        if let Some(k) = killed.take() {
            ctx.replicas.release(&k);
        }
        let rebound = wait_bound(ctx, ns, &pods, SIZE).await;
        notes.push(format!(
            "round {round}: {name} Failed at {lost_at}; survivors {}; gang {}",
            emptied.map_or("NOT deleted".to_string(), |ms| format!("deleted after {ms} ms")),
            match &rebound {
                Ok(d) => format!("bound whole again {} ms after the uncordon", d.as_millis()),
                Err(e) => format!("not bound again: {e:#}"),
            }
        ));
        rebound?;
    }
    let restarts = groups
        .get(GROUP)
        .await?
        .status
        .and_then(|s| s.restarts)
        .unwrap_or(0);
    notes.push(format!("status.restarts {restarts} after {ROUNDS} losses"));
    Ok(Outcome {
        failover,
        notes,
        violations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_800_000_000_000 + ms).expect("time")
    }

    #[test]
    fn a_gang_partly_running_past_the_limit_is_a_violation() {
        let mut t = PartialTracker::default();
        t.observe(at(0), 3, 3);
        t.observe(at(100), 2, 3);
        t.observe(at(2_100), 2, 3);
        t.observe(at(2_200), 0, 3);
        assert!(
            t.violation("ns", Duration::from_secs(3), "r").is_none(),
            "2 s partial is within 3 s"
        );
        t.observe(at(3_000), 1, 3);
        t.observe(at(7_000), 1, 3);
        let v = t
            .violation("ns", Duration::from_secs(3), "r")
            .expect("4 s partial");
        assert_eq!(v.invariant, Invariant::RestartedGangsNotPartial);
        assert_eq!(v.at, at(3_000));
        assert!(v.detail.contains("4000 ms"), "{}", v.detail);
    }
}
