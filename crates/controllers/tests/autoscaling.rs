//! Gangs that grow the cluster (issue 39): Phalanx beside the real Karpenter v1.8.0 (its KWOK cloud provider,
//! `sigs.k8s.io/karpenter/kwok`, built by `hack/build-workloads.sh karpenter`).
//!
//! On the real control plane of phalanx-testenv (kwok marks the Nodes Karpenter creates Ready), Karpenter runs as a
//! child process and Phalanx's controllers and one scheduler in process (`autoscaling/harness.rs`). Each case has its
//! own namespace and NodePool (named alike; `autoscaling/cluster.rs`): one instance type of 8 cpu, the pool's taint,
//! and its pods select the pool (`karpenter.sh/nodepool`) and tolerate the taint, so no other node is usable by the
//! case and the cluster starts, for it, with no room at all. Karpenter provisions for pods whose `PodScheduled`
//! condition is False with reason `Unschedulable`, whatever their scheduler (`pkg/utils/pod/scheduling.go`,
//! `IsProvisionable`, `FailedToSchedule`): Phalanx writes that on every member of a gang that does not fit, and
//! `WaitingForQuorum` on the members of a gang short of pods. Karpenter is not gang-aware: it provisions per pod,
//! within a NodePool's `limits`; Phalanx binds a gang whole or not at all on whatever nodes come.
//!
//! Every gang is 8 members of 3500m (two per node), so 4 nodes is the least that holds one. The cases run in parallel
//! (one Karpenter serves every NodePool).
//!
//! Opt-in: `make test-autoscaling` (Karpenter's cold build takes minutes, so it is not in `make test`).
//! Run: `cargo test -p phalanx-controllers --features autoscaling-test --test autoscaling -- --nocapture` (the
//! `autoscaling-figure:` lines are the measured figures).

#[path = "shared/checks.rs"]
mod checks;
#[path = "autoscaling/cluster.rs"]
mod cluster;
#[path = "autoscaling/harness.rs"]
mod harness;
#[path = "shared/processes.rs"]
mod processes;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use kube::ResourceExt;
use phalanx_api::conditions::reasons;
use tokio::time::sleep;

use cluster::{
    Case, INSTANCE_TYPE, MEMBER_CPU, MEMBERS_PER_NODE, NODEPOOL_LABEL, case, claim_condition, pod_scheduled,
};

/// Members of every gang here, and its minCount.
const GANG: usize = 8;
/// How long the cases that check that nothing happens watch: five of Karpenter's batch windows (3 s at most, see
/// `harness::BATCH_MAX`) and more than the few seconds case `gang_gets_nodes_from_karpenter` measures from a gang's
/// creation to Karpenter's first NodeClaim; each check is repeated at every poll of the window.
const QUIET: Duration = Duration::from_secs(15);
/// How long a gang may be seen partly bound: Phalanx binds a placed gang's members one API call each, so a list
/// taken meanwhile shows some bound; a gang still partly bound after this is split.
const BIND_BURST: Duration = Duration::from_secs(10);
/// Poll interval of the observation loops.
const POLL: Duration = Duration::from_millis(200);

/// The least nodes of [`INSTANCE_TYPE`] that hold `members` members.
fn min_nodes(members: usize) -> usize {
    members.div_ceil(MEMBERS_PER_NODE)
}

/// Checks that every member of `group` is bound to a Node Karpenter made for this case's NodePool: the Node has
/// the pool's label and is owned by one of the pool's NodeClaims (Karpenter's registration sets that owner in the
/// same patch that lifts its `karpenter.sh/unregistered` taint, `pkg/controllers/nodeclaim/lifecycle/
/// registration.go`, so before any pod can bind; the NodeClaim's `status.nodeName` may come a moment later).
/// Returns the pool's NodeClaims.
async fn on_karpenter_nodes(c: &Case, group: &str) -> Result<usize> {
    let claims: BTreeSet<String> = c.node_claims().await?.iter().map(ResourceExt::name_any).collect();
    let nodes = c.nodes().await?;
    for p in c.pods(group).await? {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let owned = nodes.iter().any(|n| {
            n.name_any() == node
                && n.labels().get(NODEPOOL_LABEL).map(String::as_str) == Some(c.pool())
                && n.owner_references()
                    .iter()
                    .any(|o| o.kind == "NodeClaim" && claims.contains(&o.name))
        });
        ensure!(
            owned,
            "pod {} is on {node:?}, not a node of one of NodePool {}'s NodeClaims {claims:?}\n{}",
            p.name_any(),
            c.pool(),
            c.describe().await
        );
    }
    Ok(claims.len())
}

/// Waits until `group` has all its [`GANG`] members bound, checking at each poll that it is never seen partly bound
/// for longer than [`BIND_BURST`]; returns the time from `since` to the poll that saw the last bind.
async fn until_bound_whole(c: &Case, group: &str, since: Instant) -> Result<Duration> {
    let mut partial_since: Option<Instant> = None;
    let deadline = Instant::now() + cluster::WAIT;
    loop {
        let (pods, b) = c.counts(group).await?;
        if (pods, b) == (GANG, GANG) {
            return Ok(since.elapsed());
        }
        if b > 0 {
            let first = *partial_since.get_or_insert_with(Instant::now);
            ensure!(
                first.elapsed() < BIND_BURST,
                "gang {group} split: {b} of {pods} members bound for {:?}\n{}",
                first.elapsed(),
                c.describe().await
            );
        }
        ensure!(
            Instant::now() < deadline,
            "gang {group} not bound whole after {:?} ({b} of {pods} bound)\n{}",
            cluster::WAIT,
            c.describe().await
        );
        sleep(POLL).await;
    }
}

/// (a) A gang of 8 × 3500m with no room: Karpenter adds nodes, the gang binds whole, every member on a node
/// Karpenter made for the case's NodePool. Figures: time from the gang's creation to Karpenter's first NodeClaim
/// and to the last bind, NodeClaims made against the least that hold the gang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_gets_nodes_from_karpenter() -> Result<()> {
    let c = case("as-grow").await?;
    c.node_pool(None).await?;
    let t0 = Instant::now();
    c.gang("gang", GANG as i32, GANG).await?;
    let first_claim = c
        .until("Karpenter's first NodeClaim", || async {
            Ok((!c.node_claims().await?.is_empty()).then(|| t0.elapsed()))
        })
        .await?;
    let last_bind = until_bound_whole(&c, "gang", t0).await?;
    let added = on_karpenter_nodes(&c, "gang").await?;
    println!(
        "autoscaling-figure: gang-grows: {GANG} members x {MEMBER_CPU} cpu on {INSTANCE_TYPE}: first NodeClaim \
         after {:.1} s, last bind after {:.1} s, nodes added {added}, least needed {}",
        first_claim.as_secs_f64(),
        last_bind.as_secs_f64(),
        min_nodes(GANG)
    );
    ensure!(
        added >= min_nodes(GANG),
        "{added} NodeClaims hold a gang that needs {} nodes?\n{}",
        min_nodes(GANG),
        c.describe().await
    );
    Ok(())
}

/// (b) The same gang under a NodePool whose `limits.cpu` (16: two nodes) holds half of it: Karpenter makes the two
/// nodes and says of the other members that the pool's limit stops it; Phalanx's next cycles see the nodes (the
/// PodGroup's message counts 4 of the gang placed), and nothing is bound, through [`QUIET`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_over_the_pool_limit_binds_nothing() -> Result<()> {
    let c = case("as-limit").await?;
    c.node_pool(Some("16")).await?;
    c.gang("gang", GANG as i32, GANG).await?;
    c.until_initialized(2).await?;
    // Karpenter's verdict on the members it made no room for (`pkg/controllers/provisioning/scheduling/
    // scheduler.go`): a FailedScheduling event.
    c.until("Karpenter: members over the NodePool's limits", || async {
        for p in c.pods("gang").await? {
            let events = c.karpenter_events(&p.name_any()).await?;
            if events
                .iter()
                .any(|(r, m)| r == "FailedScheduling" && m.contains("exceed limits"))
            {
                return Ok(Some(()));
            }
        }
        Ok(None)
    })
    .await?;
    // A cycle after both nodes are in: the gang half placed. Phalanx's message (`crates/scheduler/src/plugins/
    // gang_scheduling.rs`): "minCount (8) cannot be satisfied: <placed> scheduled, <left> remaining".
    let want = format!("minCount ({GANG}) cannot be satisfied: {} scheduled", GANG / 2);
    let cond = c
        .until(&format!("PodGroup gang Unschedulable: {want}"), || async {
            let cond = c.group_condition("gang").await?;
            Ok(cond.filter(|k| {
                k.status == "False" && k.reason == reasons::UNSCHEDULABLE && k.message.contains(&want)
            }))
        })
        .await?;
    println!(
        "autoscaling-figure: limit-half: PodGroupInitiallyScheduled=False/{}: {}",
        cond.reason, cond.message
    );
    let end = Instant::now() + QUIET;
    while Instant::now() < end {
        let claims = c.node_claims().await?.len();
        let (pods, b) = c.counts("gang").await?;
        ensure!(
            claims == 2 && (pods, b) == (GANG, 0),
            "over the limit: {claims} NodeClaims (2 expected), {b} of {pods} members bound (none expected)\n{}",
            c.describe().await
        );
        sleep(POLL).await;
    }
    Ok(())
}

/// (c) A gang of minCount 8 with 6 members: Phalanx writes `WaitingForQuorum` (not `Unschedulable`) on them, so
/// Karpenter provisions nothing for them: not in a round that it ran for another pod after them, nor through
/// [`QUIET`]; with the 2 missing members created, nodes come and the gang binds whole on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_short_of_members_gets_no_nodes() -> Result<()> {
    let c = case("as-quorum").await?;
    c.node_pool(None).await?;
    c.pod_group("gang", GANG as i32).await?;
    c.members("gang", 0..6, None).await?;
    let waiting = |pods: &[k8s_openapi::api::core::v1::Pod]| {
        pods.len() == 6
            && pods
                .iter()
                .all(|p| pod_scheduled(p) == Some(("False".into(), reasons::WAITING_FOR_QUORUM.into())))
    };
    c.until("6 members PodScheduled=False/WaitingForQuorum", || async {
        Ok(waiting(&c.pods("gang").await?).then_some(()))
    })
    .await?;
    // A positive sign that Karpenter has had a provisioning round since: a pod of a second NodePool that it must
    // provision for. Each round lists every pending pod and keeps the provisionable ones
    // (`pkg/controllers/provisioning/provisioner.go`, `GetPendingPods`), so the round that made the probe's
    // NodeClaim saw the members and passed them over: no NodeClaim of the gang's pool, no Karpenter event on them.
    let probe_pool = format!("{}-probe", c.ns);
    c.node_pool_named(&probe_pool, None).await?;
    c.unschedulable_probe("probe", &probe_pool).await?;
    c.until("Karpenter's NodeClaim for the probe pod", || async {
        Ok((!c.node_claims_of(&probe_pool).await?.is_empty()).then_some(()))
    })
    .await?;
    for p in c.pods("gang").await? {
        let events = c.karpenter_events(&p.name_any()).await?;
        ensure!(
            events.is_empty(),
            "Karpenter acted on {} of a gang short of members: {events:?}\n{}",
            p.name_any(),
            c.describe().await
        );
    }
    let end = Instant::now() + QUIET;
    while Instant::now() < end {
        let claims = c.node_claims().await?.len();
        let pods = c.pods("gang").await?;
        ensure!(
            claims == 0 && waiting(&pods),
            "a gang short of members: {claims} NodeClaims (none expected), members not all WaitingForQuorum\n{}",
            c.describe().await
        );
        sleep(POLL).await;
    }
    let t0 = Instant::now();
    c.members("gang", 6..GANG, None).await?;
    let last_bind = until_bound_whole(&c, "gang", t0).await?;
    let added = on_karpenter_nodes(&c, "gang").await?;
    println!(
        "autoscaling-figure: quorum: no NodeClaim for {} s while 6 of {GANG} members waited; with the last 2 \
         created, last bind after {:.1} s, nodes added {added}, least needed {}",
        QUIET.as_secs(),
        last_bind.as_secs_f64(),
        min_nodes(GANG)
    );
    Ok(())
}

/// (d) Two gangs, each of which fits the NodePool's limit (32 cpu: four nodes) but not both: Karpenter, per pod,
/// makes the four nodes, for members of either; Phalanx binds one gang whole and none of the other, at every observation
/// (a gang seen partly bound only within [`BIND_BURST`]); with the first gang deleted, the second binds whole on the
/// same nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gangs_over_the_limit_never_split() -> Result<()> {
    let c = case("as-two").await?;
    c.node_pool(Some("32")).await?;
    c.gang("a", GANG as i32, GANG).await?;
    c.gang("b", GANG as i32, GANG).await?;
    let mut partial: [Option<Instant>; 2] = [None, None];
    let mut longest = Duration::ZERO;
    // Observes both gangs; returns the one bound whole once the other has none bound and the pool is at its limit.
    let deadline = Instant::now() + cluster::WAIT;
    let mut settled: Option<(&str, Instant)> = None;
    let winner = loop {
        let counts = [c.counts("a").await?, c.counts("b").await?];
        for (i, (pods, b)) in counts.iter().enumerate() {
            if *b > 0 && *b < GANG {
                let first = *partial[i].get_or_insert_with(Instant::now);
                longest = longest.max(first.elapsed());
                ensure!(
                    first.elapsed() < BIND_BURST,
                    "gang {} split: {b} of {pods} bound for {:?}\n{}",
                    ["a", "b"][i],
                    first.elapsed(),
                    c.describe().await
                );
            } else {
                partial[i] = None;
            }
        }
        ensure!(
            counts[0].1 + counts[1].1 <= GANG,
            "both gangs bound: Karpenter made room beyond the pool's limit? {counts:?}\n{}",
            c.describe().await
        );
        let whole = match (counts[0].1, counts[1].1) {
            (GANG, 0) => Some("a"),
            (0, GANG) => Some("b"),
            _ => None,
        };
        // Settled: one gang whole, the pool's 4 nodes Initialized (its limit: Karpenter counts an 8-cpu instance
        // type against it for a NodeClaim being launched), and so through QUIET.
        let at_limit = whole.is_some() && {
            let claims = c.node_claims().await?;
            claims.len() == 4 && claims.iter().all(|k| claim_condition(k, "Initialized"))
        };
        match (whole, settled) {
            (Some(w), Some((s, since))) if w == s && at_limit => {
                if since.elapsed() >= QUIET {
                    break w;
                }
            }
            (Some(w), _) if at_limit => settled = Some((w, Instant::now())),
            _ => settled = None,
        }
        ensure!(
            Instant::now() < deadline,
            "no gang bound whole (a, b: {counts:?})\n{}",
            c.describe().await
        );
        sleep(POLL).await;
    };
    let other = if winner == "a" { "b" } else { "a" };
    let claims = c.node_claims().await?.len();
    on_karpenter_nodes(&c, winner).await?;

    // The winner goes; the other binds whole on the same nodes (and never partly, as above).
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(c.client.clone(), &c.ns);
    let sel = format!("{}={winner}", phalanx_api::labels::POD_GROUP);
    pods.delete_collection(
        &Default::default(),
        &kube::api::ListParams::default().labels(&sel),
    )
    .await?;
    c.until(&format!("gang {winner}'s members gone"), || async {
        Ok(c.pods(winner).await?.is_empty().then_some(()))
    })
    .await?;
    let t0 = Instant::now();
    let took = until_bound_whole(&c, other, t0).await?;
    on_karpenter_nodes(&c, other).await?;
    let after = c.node_claims().await?.len();
    ensure!(
        after == claims,
        "NodeClaims went from {claims} to {after}\n{}",
        c.describe().await
    );
    println!(
        "autoscaling-figure: two-gangs: gang {winner} bound whole, {other} none, on {claims} nodes (limit 4); \
         longest partly-bound observation {} ms; with {winner} deleted, {other} bound whole after {:.1} s",
        longest.as_millis(),
        took.as_secs_f64()
    );
    Ok(())
}

/// `preemptionDelaySeconds` (issue 39): a low-priority gang runs on the case's Karpenter nodes when a high-priority
/// gang arrives that could only fit by evicting it. With `preemptionDelaySeconds: 60` the high gang evicts nothing:
/// its members carry `Unschedulable` with the deadline, Karpenter adds nodes for them, and the gang binds whole on the
/// new nodes well within the delay; every low member is still running, none marked `DisruptionTarget`. (With no
/// delay, the same gang evicts at once: `s49_full_preemption_gang` in `crates/driver/tests/preemption_cluster.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preemption_delay_lets_karpenter_add_nodes_instead_of_victims() -> Result<()> {
    const DELAY: u64 = 60;
    let c = case("as-delay").await?;
    c.node_pool(None).await?;
    let (low, high) = (format!("{}-low", c.ns), format!("{}-high", c.ns));
    cluster::priority_class(&c.client, &low, 10).await?;
    cluster::priority_class(&c.client, &high, 1000).await?;
    c.pod_group_with(
        "low",
        GANG as i32,
        serde_json::json!({ "priorityClassName": low }),
    )
    .await?;
    c.members("low", 0..GANG, Some(&low)).await?;
    until_bound_whole(&c, "low", Instant::now()).await?;
    let before = c.node_claims().await?.len();
    let t0 = Instant::now();
    c.pod_group_with(
        "high",
        GANG as i32,
        serde_json::json!({ "priorityClassName": high, "preemptionDelaySeconds": DELAY }),
    )
    .await?;
    c.members("high", 0..GANG, Some(&high)).await?;
    c.until(
        "the high gang's members Unschedulable with the delay's deadline",
        || async {
            let pods = c.pods("high").await?;
            let held = pods.len() == GANG
                && pods.iter().all(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
                        .is_some_and(|c| {
                            c.reason.as_deref() == Some(reasons::UNSCHEDULABLE)
                                && c.message
                                    .as_deref()
                                    .is_some_and(|m| m.contains("preemption is delayed until"))
                        })
                });
            Ok(held.then_some(()))
        },
    )
    .await?;
    let bound = until_bound_whole(&c, "high", t0).await?;
    ensure!(
        bound < Duration::from_secs(DELAY),
        "the high gang bound {bound:?} after its creation: not before its {DELAY} s delay ended, so not on new nodes"
    );
    let added = on_karpenter_nodes(&c, "high").await?.saturating_sub(before);
    let lows = c.pods("low").await?;
    let disrupted: Vec<String> = lows
        .iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_some()
                || p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none()
                || p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "DisruptionTarget"))
        })
        .map(ResourceExt::name_any)
        .collect();
    ensure!(
        lows.len() == GANG && disrupted.is_empty(),
        "low gang: {} members, disrupted {disrupted:?}\n{}",
        lows.len(),
        c.describe().await
    );
    println!(
        "autoscaling-figure: preemption-delay: high gang ({GANG} x {MEMBER_CPU}, preemptionDelaySeconds {DELAY}) bound \
         whole after {:.1} s on {added} new nodes (least needed {}), 0 of {GANG} low members evicted",
        bound.as_secs_f64(),
        min_nodes(GANG)
    );
    Ok(())
}
