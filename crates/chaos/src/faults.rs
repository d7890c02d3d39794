//! The faults. Each is injected once per run while gangs arrive, and returns what it measured.
//!
//! | Fault | What happens |
//! |---|---|
//! | `leader-kill` | SIGKILL of the Lease holder while a gang is half bound (when one is seen within 3 s); its slot is restarted only after the standby's first bind |
//! | `leader-term` | SIGTERM of the holder while a gang is half bound (a rolling update): it must stop writing, then release the Lease |
//! | `leader-pause` | SIGSTOP of the holder for longer than the Lease (until the standby holds it, at least duration + 2 s), then SIGCONT |
//! | `apiserver-kill` | SIGKILL of kube-apiserver, down for `outage`, restarted with the same flags |
//! | `etcd-kill` | SIGKILL of etcd, down for `outage`, restarted on the same data |
//! | `watch-expiry` | the replicas' connections cut and refused, etcd compacted to its head, connections allowed again: every watch resumes from a compacted resourceVersion and gets 410 Gone (checked with a probe watch) |
//! | `admission-deny` | a ValidatingAdmissionPolicy denies every second `pods/binding`: those of pods whose name ends in an odd digit, i.e. every second pod of every gang (`<gang>-<i>`), for `deny_for` |
//! | `hostile` | pods with two `9E`-memory containers (standalone and as a gang), a chain of 1,000 CompositePodGroups with a PodGroup at the bottom, a PodGroup with a user-set `spec.priority` |
//! | `preempt-kill` | a high-priority gang preempts held low-priority pods; SIGKILL of the holder as soon as the first victim is Terminating; the victims are released once the standby has taken over ([`crate::preempt_kill`]) |

use std::time::Duration;

use anyhow::Context as _;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::context::{Ctx, millis};
use crate::fault_kind::Fault;
use crate::harness::Component;
use crate::injection::{Outcome, SETUP_WAIT, lease_timeout, to_duration, wait_takeover};
use crate::workload::{GangSpec, composite_resource, create_gang};

/// Injects `fault` into the run in namespace `ns`; returns when the fault is over.
///
/// # Errors
/// The fault could not be injected or undone (a harness failure, not a scheduler one).
pub async fn inject(ctx: &Ctx, fault: Fault, ns: &str) -> anyhow::Result<Outcome> {
    match fault {
        Fault::LeaderKill => leader_stop(ctx, ns, false).await,
        Fault::LeaderTerm => leader_stop(ctx, ns, true).await,
        Fault::LeaderPause => leader_pause(ctx).await,
        Fault::ApiServerKill => component_kill(ctx, Component::ApiServer).await,
        Fault::EtcdKill => component_kill(ctx, Component::Etcd).await,
        Fault::WatchExpiry => watch_expiry(ctx).await,
        Fault::AdmissionDeny => admission_deny(ctx, ns).await,
        Fault::Hostile => hostile(ctx, ns).await,
        Fault::PreemptKill => crate::preempt_kill::inject(ctx, ns).await,
        Fault::MemberKill => crate::member_kill::inject(ctx, ns).await,
    }
}

/// Waits for the first bind by `identity` after `since`; the time from `since` to it.
async fn first_bind(ctx: &Ctx, identity: &str, since: Timestamp, timeout: Duration) -> Option<Duration> {
    let at = ctx
        .wait_audit(timeout, |a| a.first_bind_by(identity, since))
        .await?;
    Some(to_duration(millis(since, at)))
}

/// Waits (at most 3 s) until some gang of the run has some but not all of its pods bound; how many are.
async fn wait_partial_gang(ctx: &Ctx, ns: &str) -> usize {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        let partial = ctx
            .checker
            .gangs(ns)
            .iter()
            .filter(|g| g.bound > 0 && (g.bound as i64) < g.min_count)
            .count();
        if partial > 0 || tokio::time::Instant::now() >= deadline {
            return partial;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// SIGKILL (or, with `graceful`, SIGTERM) of the leader mid-gang; its slot restarts only after the standby's first
/// bind, so the failover measured is the standby's.
async fn leader_stop(ctx: &Ctx, ns: &str, graceful: bool) -> anyhow::Result<Outcome> {
    let (leader, other) = ctx.wait_leader(true, SETUP_WAIT).await?;
    let other = other.context("no standby")?;
    let exits_before = ctx.replicas.exit_count();
    let partial = wait_partial_gang(ctx, ns).await;
    let stopped_at = Timestamp::now();
    if graceful {
        ctx.replicas.terminate(&leader, true)?;
    } else {
        ctx.replicas.kill(&leader, true)?;
    }
    let how = if graceful { "SIGTERM" } else { "SIGKILL" };
    let mut notes = vec![format!("{how} to {leader} with {partial} gang(s) partly bound")];
    let took = wait_takeover(ctx, &other, stopped_at).await;
    match took {
        Some(t) => notes.push(format!(
            "{other} took the Lease after {} ms",
            millis(stopped_at, t)
        )),
        None => notes.push(format!(
            "{other} did not take the Lease within {:?}",
            lease_timeout(ctx)
        )),
    }
    let failover = first_bind(ctx, &other, stopped_at, Duration::from_secs(30)).await;
    if graceful {
        let exit = ctx
            .replicas
            .exits_from(exits_before)
            .into_iter()
            .find(|e| e.identity == leader);
        notes.push(match exit {
            Some(e) => format!(
                "{leader} exited {} ms after SIGTERM ({})",
                millis(stopped_at, e.at),
                e.status
            ),
            None => format!("{leader} had not exited when the standby took over"),
        });
    }
    ctx.replicas.release(&leader);
    Ok(Outcome {
        failover,
        notes,
        violations: Vec::new(),
    })
}

async fn leader_pause(ctx: &Ctx) -> anyhow::Result<Outcome> {
    let (leader, other) = ctx.wait_leader(true, SETUP_WAIT).await?;
    let other = other.context("no standby")?;
    let exits_before = ctx.replicas.exit_count();
    let paused_at = Timestamp::now();
    ctx.replicas.pause(&leader)?;
    let mut notes = vec![format!("paused {leader}")];
    let min_pause = Duration::from_secs(ctx.profile.lease_duration_secs + 2);
    let took = wait_takeover(ctx, &other, paused_at).await;
    let failover = first_bind(ctx, &other, paused_at, Duration::from_secs(30)).await;
    let elapsed = to_duration(millis(paused_at, Timestamp::now()));
    if elapsed < min_pause {
        tokio::time::sleep(min_pause - elapsed).await;
    }
    let resumed_at = Timestamp::now();
    ctx.replicas.resume(&leader)?;
    notes.push(match took {
        Some(t) => format!(
            "{other} took the Lease {} ms after the pause",
            millis(paused_at, t)
        ),
        None => format!("{other} did not take the Lease while {leader} was paused"),
    });
    notes.push(format!("SIGCONT after {} ms", millis(paused_at, resumed_at)));
    // Fail-stop expected: the resumed replica must notice the lost Lease and exit.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(e) = ctx
            .replicas
            .exits_from(exits_before)
            .into_iter()
            .find(|e| e.identity == leader)
        {
            notes.push(format!(
                "{leader} exited {} ms after SIGCONT ({})",
                millis(resumed_at, e.at),
                e.status
            ));
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            notes.push(format!("{leader} still runs 15 s after SIGCONT"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(Outcome {
        failover,
        notes,
        violations: Vec::new(),
    })
}

async fn component_kill(ctx: &Ctx, c: Component) -> anyhow::Result<Outcome> {
    ctx.wait_leader(false, SETUP_WAIT).await?;
    let killed_at = Timestamp::now();
    ctx.cluster.kill(c).await?;
    tokio::time::sleep(ctx.profile.outage).await;
    ctx.cluster.restart(c).await?;
    ctx.cluster
        .wait_usable(&ctx.client, Duration::from_secs(60))
        .await?;
    let up_at = Timestamp::now();
    let mut notes = vec![format!("{c:?} down for {} ms", millis(killed_at, up_at))];
    notes.extend(ctx.cluster.ensure_controller_manager(&ctx.client).await?);
    let all: Vec<String> = ctx.replicas.running();
    let first = ctx
        .wait_audit(Duration::from_secs(60), |a| {
            // Any replica, including one started after the outage.
            let mut users = all.clone();
            users.extend(ctx.replicas.running());
            a.first_bind_by_any(&users, up_at)
        })
        .await;
    let failover = first.map(|(t, who)| {
        notes.push(format!("first bind after the restart by {who}"));
        to_duration(millis(up_at, t))
    });
    Ok(Outcome {
        failover,
        notes,
        violations: Vec::new(),
    })
}

/// A resourceVersion of the pods collection now.
async fn pods_rv(ctx: &Ctx) -> anyhow::Result<String> {
    let list = Api::<Pod>::all(ctx.client.clone())
        .list_metadata(&ListParams::default().limit(1))
        .await?;
    list.metadata
        .resource_version
        .context("list without resourceVersion")
}

async fn watch_expiry(ctx: &Ctx) -> anyhow::Result<Outcome> {
    ctx.wait_leader(false, SETUP_WAIT).await?;
    let old_rv = pods_rv(ctx).await?;
    let severed_before = ctx.proxy.severed();
    ctx.proxy.sever(true);
    // The feeder keeps writing (admin client, not proxied), so the replicas' resourceVersions fall behind: wait
    // until a pod write landed after `old_rv` (a fixed pause proved nothing on a loaded machine), at least 1.2 s.
    let severed_at = tokio::time::Instant::now();
    let old: u64 = old_rv
        .parse()
        .with_context(|| format!("resourceVersion {old_rv:?}"))?;
    phalanx_testenv::wait_for(
        &format!("a pod write after resourceVersion {old_rv}"),
        SETUP_WAIT,
        || async {
            let now: u64 = pods_rv(ctx).await?.parse()?;
            Ok((now > old && severed_at.elapsed() >= Duration::from_millis(1200)).then_some(()))
        },
    )
    .await?;
    let rev = ctx.cluster.etcd_revision().await?;
    ctx.cluster.etcd_compact(rev).await?;
    // Probe: a watch from the replicas' era must now be answered with 410 Gone.
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let mut stream = pods
        .watch(&WatchParams::default().timeout(2), &old_rv)
        .await?
        .boxed();
    let first = tokio::time::timeout(SETUP_WAIT, stream.try_next()).await;
    ctx.proxy.unblock();
    let gone = matches!(&first, Ok(Ok(Some(WatchEvent::Error(e)))) if e.code == 410);
    anyhow::ensure!(
        gone,
        "the probe watch from resourceVersion {old_rv} did not get 410 Gone: {first:?}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    Ok(Outcome {
        failover: None,
        violations: Vec::new(),
        notes: vec![format!(
            "cut {} connections, compacted etcd at revision {rev}; watch from rv {old_rv} -> 410 Gone",
            ctx.proxy.severed() - severed_before
        )],
    })
}

const POLICY: &str = "phalanx-chaos-deny-every-second-bind";

/// Binds a throw-away pod (scheduled by nobody) to the first node; `Ok(true)` when the bind was denied.
async fn probe_bind(ctx: &Ctx, ns: &str, name: &str) -> anyhow::Result<bool> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"schedulerName": "chaos-nobody", "terminationGracePeriodSeconds": 0,
                 "automountServiceAccountToken": false,
                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let res = phalanx_testenv::bind_pod(&ctx.client, ns, name, "chaos-n0").await;
    pods.delete(name, &DeleteParams::default().grace_period(0))
        .await?;
    match res {
        Ok(()) => Ok(false),
        Err(e) if format!("{e:#}").contains("chaos: every second bind") => Ok(true),
        Err(e) => Err(e),
    }
}

async fn admission_deny(ctx: &Ctx, ns: &str) -> anyhow::Result<Outcome> {
    ctx.wait_leader(false, SETUP_WAIT).await?;
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods/binding"]
            }]},
            // The Binding's name is the pod's; `<gang>-<i>` with an odd i is every second pod of a gang.
            "validations": [{
                "expression": "!['1','3','5','7','9'].exists(d, object.metadata.name.endsWith(d))",
                "message": "chaos: every second bind is denied",
                "reason": "Forbidden"
            }]
        }
    }))?;
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": POLICY},
        "spec": {
            "policyName": POLICY,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchExpressions": [
                {"key": phalanx_testenv::TESTENV_NAMESPACE_LABEL, "operator": "Exists"}
            ]}}
        }
    }))?;
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(ctx.client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(ctx.client.clone());
    policies.create(&PostParams::default(), &policy).await?;
    bindings.create(&PostParams::default(), &binding).await?;
    let mut active = false;
    let deadline = tokio::time::Instant::now() + SETUP_WAIT;
    let mut i = 0;
    while tokio::time::Instant::now() < deadline {
        i += 1;
        if probe_bind(ctx, ns, &format!("probe-on-{i}1")).await? {
            active = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    anyhow::ensure!(
        active,
        "the admission policy did not take effect within {SETUP_WAIT:?} ({i} probe binds accepted)"
    );
    let on_at = Timestamp::now();
    tokio::time::sleep(ctx.profile.deny_for).await;
    let off_at = Timestamp::now();
    bindings.delete(POLICY, &DeleteParams::default()).await?;
    policies.delete(POLICY, &DeleteParams::default()).await?;
    let mut inactive = false;
    let deadline = tokio::time::Instant::now() + SETUP_WAIT;
    let mut i = 0;
    while tokio::time::Instant::now() < deadline {
        i += 1;
        if !probe_bind(ctx, ns, &format!("probe-off-{i}1")).await? {
            inactive = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    anyhow::ensure!(
        inactive,
        "the admission policy still denies binds {SETUP_WAIT:?} after its deletion ({i} probe binds denied)"
    );
    let _ = ctx.audit.poll();
    let events = ctx.audit.events(on_at, off_at);
    let replica_binds = events
        .iter()
        .filter(|e| e.resource == "pods" && e.subresource == "binding");
    let (mut denied, mut accepted) = (0, 0);
    for e in replica_binds.filter(|e| crate::processes::Supervisor::is_replica(&e.user)) {
        if e.accepted() {
            accepted += 1;
        } else {
            denied += 1;
        }
    }
    Ok(Outcome {
        failover: None,
        violations: Vec::new(),
        notes: vec![format!(
            "policy active {} ms: replicas' binds accepted {accepted}, denied {denied}",
            millis(on_at, off_at)
        )],
    })
}

async fn hostile(ctx: &Ctx, ns: &str) -> anyhow::Result<Outcome> {
    ctx.wait_leader(false, SETUP_WAIT).await?;
    let started = Timestamp::now();
    let client = &ctx.client;
    let huge = |name: &str, size, min_count| GangSpec {
        name: name.into(),
        size,
        min_count,
        cpu: "100m".into(),
        memory: "9E".into(),
        one_rack: false,
        priority: None,
        priority_class: None,
        hold: false,
        parent: None,
        containers: 2,
        scheduler_name: ctx.scheduler_name.clone(),
        standalone: false,
    };
    // Two containers of 9E memory each: 18E overflows a signed 64-bit byte count.
    let mut single = huge("hostile-9e-pod", 2, 1);
    single.standalone = true;
    create_gang(client, ns, &single).await?;
    create_gang(client, ns, &huge("hostile-9e-gang", 2, 2)).await?;
    // A user-set priority on a PodGroup (the API allows it; Phalanx resolves priority from the class otherwise).
    let mut prio = huge("hostile-priority", 3, 3);
    prio.memory = "1Gi".into();
    prio.cpu = "1".into();
    prio.containers = 1;
    prio.priority = Some(1_000_000_000);
    create_gang(client, ns, &prio).await?;
    // A chain of 1,000 CompositePodGroups, each the parent of the next (Phalanx allows 4 levels), and a PodGroup
    // with one pod at its bottom.
    let ar = composite_resource();
    let cpgs: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let chain = 1000;
    futures::stream::iter((0..chain).map(|i| {
        let mut spec = json!({
            "workloadRef": {"workloadName": "chain", "templateName": format!("level-{i}")},
            "schedulingPolicy": {"gang": {"minGroupCount": 1}},
        });
        if i > 0 {
            spec["parentCompositePodGroupName"] = json!(format!("chain-{:04}", i - 1));
        }
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": ar.api_version, "kind": ar.kind,
            "metadata": {"name": format!("chain-{i:04}"), "namespace": ns}, "spec": spec,
        }))
        .expect("static object");
        let cpgs = cpgs.clone();
        async move { cpgs.create(&PostParams::default(), &obj).await.map(|_| ()) }
    }))
    .buffered(8)
    .try_collect::<Vec<()>>()
    .await
    .context("creating the CompositePodGroup chain")?;
    let mut leaf = huge("chain-leaf", 1, 1);
    leaf.memory = "1Gi".into();
    leaf.containers = 1;
    leaf.parent = Some(format!("chain-{:04}", chain - 1));
    create_gang(client, ns, &leaf).await?;
    let created = millis(started, Timestamp::now());
    // Let the replicas digest them while gangs keep arriving.
    tokio::time::sleep(Duration::from_secs(10)).await;
    Ok(Outcome {
        failover: None,
        violations: Vec::new(),
        notes: vec![format!(
            "created 2 standalone 9E pods, a gang of two, a priority-1e9 PodGroup and a {chain}-deep CompositePodGroup chain in {created} ms"
        )],
    })
}
