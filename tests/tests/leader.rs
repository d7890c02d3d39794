//! Leader election of `phalanx run` on a real API server: one of two replicas leads, the other is a warm standby
//! (Ready, not leading); the standby takes over when the leader stops; a leader whose Lease is taken away stops with
//! an error (fail-stop) instead of continuing to write.
//!
//! A test binary of its own, so its operators never see the quick-start test's pods (each test binary has its own
//! control plane).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use phalanx::RunOptions;
use phalanx::leader::{LeaderConfig, OnLeaseLost};
use phalanx_e2e::http_get;
use phalanx_testenv::{TestEnv, create_namespace, wait_for};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const LEASE: &str = "phalanx";
const DURATION_SECS: u64 = 6;

struct Replica {
    addr: SocketAddr,
    shutdown: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

async fn start(client: &Client, ns: &str, identity: &str) -> anyhow::Result<Replica> {
    let shutdown = CancellationToken::new();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let opts = RunOptions {
        // A scheduler name no pod uses: this test is about the Lease, not about placing pods.
        scheduler_name: format!("leader-test-{ns}"),
        node_selector: format!("{}={ns}", phalanx_testenv::TEST_NS_LABEL),
        leader: LeaderConfig {
            enabled: true,
            lease_name: Some(LEASE.into()),
            namespace: Some(ns.to_owned()),
            identity: Some(identity.to_owned()),
            lease_duration_secs: DURATION_SECS,
            grace_secs: 2,
        },
        on_lease_lost: OnLeaseLost::Cancel,
        bound_addr: Some(tx),
        ..RunOptions::default()
    };
    let task = tokio::spawn(phalanx::run(client.clone(), opts, shutdown.clone()));
    let addr = tokio::time::timeout(Duration::from_secs(30), rx)
        .await
        .context("server start")??;
    Ok(Replica { addr, shutdown, task })
}

/// (ready, leader) as the replica reports them on /readyz and /metrics.
async fn state(addr: SocketAddr) -> anyhow::Result<(bool, bool)> {
    let (ready, _) = http_get(addr, "/readyz").await?;
    let (_, metrics) = http_get(addr, "/metrics").await?;
    Ok((ready == 200, metrics.lines().any(|l| l == "phalanx_leader 1")))
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases.get(LEASE).await.ok()?.spec?.holder_identity
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_standby_takes_over_and_lost_lease_stops() -> anyhow::Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = create_namespace(&client, "leader").await?;
    phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);

    // 1. Replica a leads.
    let a = start(&client, &ns, "replica-a").await?;
    wait_for("replica-a ready and leading", Duration::from_secs(60), || async {
        Ok((state(a.addr).await? == (true, true)).then_some(()))
    })
    .await?;
    ensure!(holder(&leases).await.as_deref() == Some("replica-a"));

    // 2. Replica b becomes Ready (caches warm) but does not lead while a holds the Lease.
    let b = start(&client, &ns, "replica-b").await?;
    wait_for("replica-b ready", Duration::from_secs(60), || async {
        Ok(state(b.addr).await?.0.then_some(()))
    })
    .await?;
    for _ in 0..10 {
        ensure!(
            !state(b.addr).await?.1,
            "replica-b leads while replica-a holds the Lease"
        );
        ensure!(state(a.addr).await?.1, "replica-a stopped leading");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // 3. a stops gracefully (returns Ok); b takes the Lease over.
    let stopped = std::time::Instant::now();
    a.shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(30), a.task)
        .await
        .context("replica-a stop")???;
    wait_for(
        "replica-b leading",
        Duration::from_secs(4 * DURATION_SECS),
        || async {
            Ok(
                (state(b.addr).await?.1 && holder(&leases).await.as_deref() == Some("replica-b"))
                    .then_some(()),
            )
        },
    )
    .await?;
    eprintln!(
        "replica-b took over {:?} after replica-a was asked to stop",
        stopped.elapsed()
    );

    // 4. Someone else takes the Lease from b (as a replica on the other side of a partition would once b's renewals
    //    stopped arriving): b notices at its next renewal and stops with an error instead of writing on.
    let stolen = serde_json::json!({
        "spec": {
            "holderIdentity": "intruder",
            "leaseDurationSeconds": 3600,
            "acquireTime": MicroTime(k8s_openapi::jiff::Timestamp::now()),
            "renewTime": MicroTime(k8s_openapi::jiff::Timestamp::now()),
        }
    });
    leases
        .patch(LEASE, &PatchParams::default(), &Patch::Merge(&stolen))
        .await?;
    let stolen_at = std::time::Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(4 * DURATION_SECS), b.task)
        .await
        .context("replica-b did not stop after losing the Lease")??;
    eprintln!(
        "replica-b stopped {:?} after the Lease was taken",
        stolen_at.elapsed()
    );
    let err = result.expect_err("a replica that lost the Lease must return an error");
    ensure!(
        format!("{err:#}").contains("lost the leader Lease"),
        "unexpected error: {err:#}"
    );
    ensure!(
        b.shutdown.is_cancelled(),
        "losing the Lease must cancel the replica's shutdown token"
    );
    ensure!(
        holder(&leases).await.as_deref() == Some("intruder"),
        "the loser must not release someone else's Lease"
    );
    Ok(())
}

/// The Lease writes of the elector carry the `resourceVersion` they were based on (client-go's optimistic
/// concurrency): a renewal sent after someone else changed the Lease fails with 409 and changes nothing; after a
/// fresh read it succeeds. Against the real API server, which is what decides whether a patch's
/// `metadata.resourceVersion` is a precondition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_lease_write_is_refused_with_conflict() -> anyhow::Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = create_namespace(&client, "lease-rv").await?;
    let plain: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "rv"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 6}
    }))?;
    plain.create(&Default::default(), &lease).await?;
    let fenced: Api<Lease> = Api::namespaced(
        phalanx::lease_precondition::client(client.clone(), &ns, "rv", "a", Duration::ZERO),
        &ns,
    );
    fenced.get("rv").await?;
    // Another replica takes the Lease after our read.
    let take = serde_json::json!({"spec": {"holderIdentity": "b"}});
    plain
        .patch("rv", &PatchParams::default(), &Patch::Strategic(&take))
        .await?;
    let renew = serde_json::json!({"spec": {"renewTime": MicroTime(k8s_openapi::jiff::Timestamp::now())}});
    let err = fenced
        .patch("rv", &PatchParams::default(), &Patch::Strategic(&renew))
        .await
        .expect_err("a renewal based on a stale read must be refused");
    ensure!(
        matches!(&err, kube::Error::Api(s) if s.code == 409),
        "expected 409 Conflict, got {err}"
    );
    let now = plain.get("rv").await?;
    let spec = now.spec.context("spec")?;
    ensure!(spec.holder_identity.as_deref() == Some("b"));
    ensure!(spec.renew_time.is_none(), "the refused renewal changed the Lease");
    // A write based on a fresh read goes through, and so does the next one (the patch's response is remembered).
    fenced.get("rv").await?;
    fenced
        .patch("rv", &PatchParams::default(), &Patch::Strategic(&renew))
        .await?;
    fenced
        .patch("rv", &PatchParams::default(), &Patch::Strategic(&renew))
        .await?;
    // Requests for other objects pass through unchanged.
    let other: Api<Lease> = Api::namespaced(
        phalanx::lease_precondition::client(client, &ns, "rv", "a", Duration::ZERO),
        &ns,
    );
    let mut l2 = lease.clone();
    l2.metadata.name = Some("other".into());
    other.create(&Default::default(), &l2).await?;
    other
        .patch("other", &PatchParams::default(), &Patch::Strategic(&take))
        .await?;
    Ok(())
}

/// A holder does not renew a term of its own that has run out (kube-lease-manager would, as soon as an unreachable
/// API server answers again; the chaos suite's apiserver-kill caught it): the wrapper refuses the renewal with 409
/// without sending it, and the Lease stays as it was. An acquisition still goes through, and so does the renewal of
/// a process that has not written a term of its own yet (a restart under the same identity).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_of_an_ended_term_is_refused() -> anyhow::Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    let ns = create_namespace(&client, "lease-term").await?;
    let plain: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let now = || MicroTime(k8s_openapi::jiff::Timestamp::now());
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "term"},
        "spec": {"holderIdentity": "me", "leaseDurationSeconds": 2, "renewTime": now()}
    }))?;
    plain.create(&Default::default(), &lease).await?;
    let margin = Duration::from_millis(500);
    let holder = |c: Client| -> Api<Lease> {
        Api::namespaced(
            phalanx::lease_precondition::client(c, &ns, "term", "me", margin),
            &ns,
        )
    };
    let me = holder(client.clone());
    let renew = |t: MicroTime| serde_json::json!({"spec": {"renewTime": t}});
    // Inside the term: the renewal goes through and starts a term of 2 s.
    let renewed = me
        .patch("term", &PatchParams::default(), &Patch::Strategic(&renew(now())))
        .await?;
    let term_start = renewed.spec.and_then(|s| s.renew_time).context("renewTime")?;
    // 1.6 s later less than the 0.5 s margin is left of it.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let err = me
        .patch("term", &PatchParams::default(), &Patch::Strategic(&renew(now())))
        .await
        .expect_err("a renewal at the end of the term must be refused");
    ensure!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.message.contains("ended")),
        "expected 409 Conflict naming the ended term, got {err}"
    );
    let kept = plain.get("term").await?.spec.and_then(|s| s.renew_time);
    ensure!(
        kept.as_ref() == Some(&term_start),
        "the refused renewal reached the API server: renewTime {kept:?}, was {term_start:?}"
    );
    // An acquisition names the holder: it is not a renewal and goes through.
    let acquire =
        serde_json::json!({"spec": {"holderIdentity": "me", "renewTime": now(), "leaseDurationSeconds": 2}});
    me.patch("term", &PatchParams::default(), &Patch::Strategic(&acquire))
        .await?;
    // A fresh process under the same identity renews the (now ended) term: that is its acquisition.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let restarted = holder(client);
    restarted.get("term").await?;
    restarted
        .patch("term", &PatchParams::default(), &Patch::Strategic(&renew(now())))
        .await?;
    Ok(())
}
