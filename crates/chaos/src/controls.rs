//! Negative controls: before any fault, the suite plants one violation of each invariant it can plant through the
//! API and requires its checks to report it. A check that cannot fail proves nothing; these show each one can.
//!
//! Everything here is isolated from the suite's runs: its own namespace (`control-*`), nodes labelled
//! `phalanx.dev/chaos-control` (the replicas only use `phalanx.dev/chaos-node`), pods with a scheduler name no
//! replica serves, its own [`Checker`], and for I6 and I7 its own Lease and a user outside the replicas' prefix.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::audit::{AuditLog, check_writes};
use crate::checker::Checker;
use crate::harness::Cluster;
use crate::invariants::Invariant;
use crate::lease::{self, SharedLeases};
use crate::workload::{GangSpec, create_gang, pod_group_resource, release_holds};

const NODE_LABEL: &str = "phalanx.dev/chaos-control";
const SCHEDULER: &str = "chaos-control";
const USER: &str = "control-replica-1";
const LEASE: &str = "control-lease";
/// Term of the I6 control's Lease, in seconds: long enough that its first bind falls inside it on a loaded machine.
const LEASE_SECS: i64 = 10;
/// Bound of every wait for the checker or the audit log to see what a control planted (generous: nothing but a
/// slow machine stands between the plant and the sighting).
const WAIT: Duration = Duration::from_secs(60);

async fn expect(checker: &Checker, from: usize, inv: Invariant, what: &str) -> anyhow::Result<String> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = checker
            .violations_from(from)
            .into_iter()
            .find(|v| v.invariant == inv)
        {
            return Ok(format!("{} caught ({what}): {}", inv.code(), v.detail));
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "control: the {} check did not report a planted violation ({what})",
            inv.code()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn gang(name: &str, size: usize, cpu: &str, standalone: bool) -> GangSpec {
    GangSpec {
        name: name.into(),
        size,
        min_count: size,
        cpu: cpu.into(),
        memory: "1Gi".into(),
        one_rack: false,
        priority: None,
        priority_class: None,
        hold: false,
        parent: None,
        containers: 1,
        scheduler_name: SCHEDULER.into(),
        standalone,
    }
}

/// A status patch of pod `name` as `client` (a strategic merge, as the scheduler's own patches).
async fn patch_status(
    client: &Client,
    ns: &str,
    name: &str,
    status: serde_json::Value,
) -> anyhow::Result<()> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Strategic(json!({ "status": status })),
        )
        .await
        .with_context(|| format!("patching the status of {name}"))?;
    Ok(())
}

/// Marks pod `name` `DisruptionTarget=True/PreemptionByScheduler` and deletes it, as `user` (a preempting
/// scheduler's eviction, `crates/driver/src/evict.rs`).
async fn evict(user: &Client, ns: &str, name: &str) -> anyhow::Result<()> {
    let cond = json!([{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                       "message": "planted by the chaos controls", "lastTransitionTime": Timestamp::now().to_string()}]);
    patch_status(user, ns, name, json!({ "conditions": cond })).await?;
    Api::<Pod>::namespaced(user.clone(), ns)
        .delete(name, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting {name}"))?;
    Ok(())
}

/// I7's control: two low-priority pods held by the hold finalizer on `control-n1`, a high-priority pod pending;
/// `user` nominates it there and evicts `victim-0` (one plan: passes), then clears and rewrites the nomination and
/// evicts `victim-1` while `victim-0` is still Terminating (a second plan: exactly that eviction must be caught).
async fn double_eviction(
    client: &Client,
    user: &Client,
    audit: &AuditLog,
    checker: &Checker,
    ns: &str,
) -> anyhow::Result<String> {
    crate::preempt_kill::ensure_priority_classes(client).await?;
    let mut victims = gang("victim", 2, "1", true);
    victims.priority_class = Some(crate::preempt_kill::LOW.into());
    victims.hold = true;
    create_gang(client, ns, &victims).await?;
    let mut preemptor = gang("preemptor", 1, "1", true);
    preemptor.priority_class = Some(crate::preempt_kill::HIGH.into());
    create_gang(client, ns, &preemptor).await?;
    for v in ["victim-0", "victim-1"] {
        phalanx_testenv::bind_pod(client, ns, v, "control-n1").await?;
    }
    let start = Timestamp::now();
    patch_status(
        user,
        ns,
        "preemptor-0",
        json!({"nominatedNodeName": "control-n1"}),
    )
    .await?;
    evict(user, ns, "victim-0").await?;
    patch_status(user, ns, "preemptor-0", json!({"nominatedNodeName": null})).await?;
    patch_status(
        user,
        ns,
        "preemptor-0",
        json!({"nominatedNodeName": "control-n1"}),
    )
    .await?;
    evict(user, ns, "victim-1").await?;
    let is_user = |u: &str| u == USER;
    let seen = phalanx_testenv::wait_for("the checker to see both evictions", WAIT, || async {
        audit.poll()?;
        let events = audit.events(start, Timestamp::now());
        let n = checker.with_evictions(|l| l.evictions(&events, is_user).len());
        Ok((n == 2).then_some(events))
    })
    .await?;
    let i7 = checker.with_evictions(|l| l.check(&seen, is_user));
    anyhow::ensure!(
        i7.len() == 1
            && i7[0].object.as_ref().is_some_and(|o| o.1 == "victim-1")
            && i7[0].detail.contains("second set of victims"),
        "control: I7 expected exactly the second plan's eviction of victim-1, got {i7:?}"
    );
    Ok(format!(
        "I7 caught (a second eviction under a new nomination while the first victim terminated; the first passed): {}",
        i7[0].detail
    ))
}

/// Plants I2-I7 violations (I1 cannot be planted: the API server refuses a second binding, which is checked) and
/// returns one line per invariant saying how it was caught.
///
/// # Errors
/// A check missed its planted violation, or the setup failed.
pub async fn run(cluster: &Cluster, client: &Client) -> anyhow::Result<Vec<String>> {
    let ns = phalanx_testenv::create_namespace(client, "control").await?;
    for (name, cpu) in [("control-n0", "1"), ("control-n1", "8")] {
        phalanx_testenv::FakeNode::new(name)
            .cpu(cpu)
            .memory("16Gi")
            .pods(110)
            .label(NODE_LABEL, "true")
            .create(client)
            .await?;
    }
    let checker = Arc::new(Checker::start(client, SCHEDULER, NODE_LABEL, "control-"));
    checker.wait_synced(WAIT).await?;
    let bind = |pod: String, node: &'static str| {
        let ns = ns.clone();
        async move { phalanx_testenv::bind_pod(client, &ns, &pod, node).await }
    };
    let mut lines = Vec::new();

    // I2: two 1-CPU pods on a 1-CPU node.
    create_gang(client, &ns, &gang("over", 2, "1", true)).await?;
    let from = checker.violation_count();
    bind("over-0".into(), "control-n0").await?;
    bind("over-1".into(), "control-n0").await?;
    lines.push(expect(&checker, from, Invariant::NoOvercommit, "2 CPUs on a 1-CPU node").await?);

    // I1: a second binding is refused by the API server (409), so the rebinding check has nothing to see.
    let second = bind("over-0".into(), "control-n1").await;
    let refused = second
        .as_ref()
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    anyhow::ensure!(
        refused.contains("already assigned"),
        "control: a second binding was not refused: {second:?}"
    );
    anyhow::ensure!(
        checker
            .violations_from(from)
            .iter()
            .all(|v| v.invariant != Invariant::SingleBinding),
        "control: a refused rebinding was reported as I1"
    );
    lines.push("I1 cannot be planted: the API server refused a second binding (409 already assigned)".into());

    // I3 and I4: a gang of 3 with one pod bound by hand; the other two stay pending without any condition.
    create_gang(client, &ns, &gang("partial", 3, "1", false)).await?;
    bind("partial-0".into(), "control-n1").await?;
    // The checks judge what the checker has seen: wait until it has seen the gang, its 3 pods and the bind.
    phalanx_testenv::wait_for("the checker to see the partial gang", WAIT, || async {
        Ok(checker
            .gangs(&ns)
            .iter()
            .any(|g| g.name == "partial" && g.pods == 3 && g.bound == 1)
            .then_some(()))
    })
    .await?;
    let (_, i3) = checker.await_gangs(&ns, Duration::from_secs(3)).await;
    anyhow::ensure!(i3.len() == 1, "control: I3 expected 1 partial gang, got {i3:?}");
    lines.push(format!("I3 caught (1 of 3 bound): {}", i3[0].detail));
    let i4 = checker.await_pending_reasons(&ns, Duration::from_secs(1)).await;
    anyhow::ensure!(
        i4.len() == 2,
        "control: I4 expected 2 pods without a reason, got {i4:?}"
    );
    lines.push(format!(
        "I4 caught (2 pods without PodScheduled): {}",
        i4[0].detail
    ));

    // I5: the gang's condition set True, then False.
    let groups: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &pod_group_resource());
    let from = checker.violation_count();
    for status in ["True", "False"] {
        let patch = json!({"status": {"conditions": [{
            "type": phalanx_api::conditions::POD_GROUP_INITIALLY_SCHEDULED, "status": status,
            "reason": "Control", "message": "planted by the chaos controls",
            "lastTransitionTime": Timestamp::now().to_string(), "observedGeneration": 1
        }]}});
        groups
            .patch_status("partial", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .context("patching the control gang's status")?;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    lines.push(
        expect(
            &checker,
            from,
            Invariant::InitiallyScheduledSticks,
            "True then False",
        )
        .await?,
    );

    // I6: a Lease of LEASE_SECS for USER; a bind inside the term passes, one after it does not.
    let history: SharedLeases = SharedLeases::default();
    let audit = AuditLog::new(cluster.audit_log.clone(), LEASE, history.clone());
    let watch = lease::spawn_watch(client.clone(), &ns, LEASE, history.clone());
    let start = Timestamp::now();
    let dir = cluster.state_dir.join("control-users");
    let kubeconfig = crate::certs::write_user_kubeconfig(
        &cluster.state_dir,
        &dir,
        USER,
        &format!("https://{}", cluster.api_addr),
    )?;
    let user_client = {
        let kc = kube::config::Kubeconfig::read_from(&kubeconfig)?;
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        Client::try_from(config)?
    };
    create_gang(client, &ns, &gang("lease", 2, "1", true)).await?;
    // The term starts right before the first bind (not before the slow setup above), so that the first bind falls
    // inside it however loaded the machine is; the second waits out the term on the wall clock.
    let renewed = Timestamp::now();
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": LEASE},
        "spec": {"holderIdentity": USER, "leaseDurationSeconds": LEASE_SECS, "renewTime": MicroTime(renewed)}
    }))?;
    Api::<Lease>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &lease)
        .await?;
    phalanx_testenv::bind_pod(&user_client, &ns, "lease-0", "control-n1").await?;
    let first_bind = Timestamp::now();
    anyhow::ensure!(
        first_bind.duration_since(renewed).as_secs() < LEASE_SECS,
        "control setup: the first bind returned {} ms after the Lease's renewTime, not inside its {LEASE_SECS} s term",
        first_bind.duration_since(renewed).as_millis()
    );
    let expired = renewed.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(LEASE_SECS + 1))?;
    let left = expired.duration_since(Timestamp::now());
    if left.is_positive() {
        tokio::time::sleep(Duration::try_from(left)?).await;
    }
    phalanx_testenv::bind_pod(&user_client, &ns, "lease-1", "control-n1").await?;
    // Judge only once the audit log holds both binds and the Lease watch has seen the Lease.
    let events = phalanx_testenv::wait_for(
        "the audit log's two binds by the control user and the Lease in the watch's history",
        WAIT,
        || async {
            audit.poll()?;
            let events = audit.events(start, Timestamp::now());
            let binds = events.iter().filter(|e| e.is_bind() && e.user == USER).count();
            let seen = history
                .lock()
                .map_err(|_| anyhow::anyhow!("lease history poisoned"))?
                .latest()
                .is_some();
            Ok((binds == 2 && seen).then_some(events))
        },
    )
    .await?;
    let i6 = check_writes(&events, &history, LEASE, |u| u == USER);
    watch.abort();
    anyhow::ensure!(
        i6.len() == 1 && i6[0].detail.contains("lease-1") && i6[0].detail.contains("expired"),
        "control: I6 expected exactly the late bind of lease-1, got {i6:?} (from {} audited writes)",
        events.len()
    );
    lines.push(format!(
        "I6 caught (bind after a {LEASE_SECS} s Lease expired; the bind inside it passed): {}",
        i6[0].detail
    ));

    // I7: USER evicts for a waiting preemptor, then again under a new nomination while the first victim is held.
    let i7 = double_eviction(client, &user_client, &audit, &checker, &ns).await;
    release_holds(client, &ns, false).await?;
    lines.push(i7?);

    // Clean up: pods first (grace 0), then the namespace and the nodes.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.delete_collection(&DeleteParams::default().grace_period(0), &Default::default())
        .await?;
    Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::default())
        .await?;
    for name in ["control-n0", "control-n1"] {
        Api::<Node>::all(client.clone())
            .delete(name, &DeleteParams::default())
            .await?;
    }
    Ok(lines)
}
