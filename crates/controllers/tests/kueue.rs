//! Phalanx under Kueue (issue 16): Kueue v0.17.0 admits Jobs by quota, Phalanx gang-schedules the admitted ones.
//!
//! On the real control plane of phalanx-testenv (with kube-controller-manager, so the Job controller creates the
//! pods), this test runs Kueue's manager built from its Go module by `hack/build-kueue.sh` (run here; a no-op when
//! cached), with its CRDs from the module and its Job and Kueue webhooks registered by URL on loopback (serving
//! certificate from a CA made here with openssl), plus Phalanx's controllers and an in-process scheduler.
//!
//! Kueue v0.17.0 with `internalCertManagement.enable: false` reads a metrics certificate from the fixed path
//! `/etc/kueue/metrics/certs` (cmd/kueue/main.go) even when its metrics server is off; the test writes a
//! self-signed pair there when missing, and fails naming that path when it cannot.
//!
//! Opt-in: `make test-kueue` (the cold Kueue build takes about 10 minutes on 2 cores, so it is not in `make test`).
//! Run: `cargo test -p phalanx-controllers --features kueue-test --test kueue`

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use phalanx_api::owners::GANG;
use phalanx_controllers::{ControllerOptions, run_controllers};
use phalanx_driver::SchedulerOptions;
use phalanx_store::{Store, StoreConfig};
use phalanx_testenv::{FakeNode, TEST_NS_LABEL, TestEnv, create_namespace, wait_for};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(120);
const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// Where Kueue v0.17.0 looks for its metrics certificate when its internal cert management is off.
const METRICS_CERT_DIR: &str = "/etc/kueue/metrics/certs";

/// Kills the Kueue process when the test ends.
struct KueueProcess(Child);

impl Drop for KueueProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Builds (or finds cached) Kueue with the project's script; returns `$KUEUE_BIN_DIR`.
fn kueue_bin_dir() -> Result<PathBuf> {
    let root = TestEnv::repo_root();
    run(Command::new(root.join("hack/build-kueue.sh")).stdout(Stdio::piped()))
        .context("hack/build-kueue.sh (Go and the module proxy are needed on a cold cache)")?;
    let dir = run(Command::new("bash")
        .arg("-c")
        .arg("source hack/versions.sh && echo \"$KUEUE_BIN_DIR\"")
        .current_dir(&root))?;
    Ok(PathBuf::from(dir))
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A CA and a serving certificate for 127.0.0.1 (`tls.crt`/`tls.key` in `dir/certs`); returns the CA's PEM.
fn make_certs(dir: &Path) -> Result<String> {
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs)?;
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let c = |f: &str| certs.join(f).to_string_lossy().into_owned();
    run(Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"])
        .args([
            "-subj",
            "/CN=phalanx-kueue-test-ca",
            "-keyout",
            &p("ca.key"),
            "-out",
            &p("ca.crt"),
        ]))?;
    run(Command::new("openssl")
        .args(["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1"])
        .args(["-keyout", &c("tls.key"), "-out", &p("tls.csr")]))?;
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n")?;
    run(Command::new("openssl")
        .args(["x509", "-req", "-days", "2", "-CAcreateserial"])
        .args([
            "-in",
            &p("tls.csr"),
            "-CA",
            &p("ca.crt"),
            "-CAkey",
            &p("ca.key"),
            "-extfile",
            &p("ext.cnf"),
            "-out",
            &c("tls.crt"),
        ]))?;
    Ok(std::fs::read_to_string(dir.join("ca.crt"))?)
}

/// The metrics certificate Kueue insists on (see the module docs); any valid pair does, the server is off.
fn ensure_metrics_cert(dir: &Path) -> Result<()> {
    let target = Path::new(METRICS_CERT_DIR);
    if target.join("tls.crt").exists() && target.join("tls.key").exists() {
        return Ok(());
    }
    let copy = || -> std::io::Result<()> {
        std::fs::create_dir_all(target)?;
        std::fs::copy(dir.join("certs/tls.crt"), target.join("tls.crt"))?;
        std::fs::copy(dir.join("certs/tls.key"), target.join("tls.key"))?;
        Ok(())
    };
    copy().with_context(|| {
        format!(
            "Kueue v0.17.0 without internal cert management reads {METRICS_CERT_DIR}/tls.crt (fixed in cmd/kueue/main.go); \
             create it writable for this user (sudo mkdir -p {METRICS_CERT_DIR} && sudo chown $USER {METRICS_CERT_DIR})"
        )
    })
}

/// Kueue's webhooks for Jobs and its own kinds, pointed at `https://127.0.0.1:port` with `ca` as caBundle. The
/// other frameworks' webhooks are left out: their handlers are not registered with only `batch/job` enabled, and
/// a pod or Deployment webhook without a handler would reject every pod.
fn webhooks(
    manifest: &str,
    port: u16,
    ca: &str,
) -> Result<(MutatingWebhookConfiguration, ValidatingWebhookConfiguration)> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(manifest).context("parsing Kueue's webhook manifests")?;
    let keep = |path: &str| path.ends_with("-batch-v1-job") || path.contains("-kueue-x-k8s-io-");
    let mut mutating = None;
    let mut validating = None;
    for mut d in docs {
        let kind = d["kind"].as_str().unwrap_or_default().to_string();
        let hooks: Vec<Value> = d["webhooks"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|mut w| {
                let path = w["clientConfig"]["service"]["path"].as_str()?.to_string();
                if !keep(&path) {
                    return None;
                }
                w["clientConfig"] = json!({ "url": format!("https://127.0.0.1:{port}{path}") });
                Some(w)
            })
            .collect();
        d["webhooks"] = Value::Array(hooks);
        d["metadata"] =
            json!({ "name": format!("kueue-{}", d["metadata"]["name"].as_str().unwrap_or("webhooks")) });
        let bundle = || Some(ByteString(ca.as_bytes().to_vec()));
        match kind.as_str() {
            "MutatingWebhookConfiguration" => {
                let mut m: MutatingWebhookConfiguration = serde_json::from_value(d)?;
                for w in m.webhooks.iter_mut().flatten() {
                    w.client_config.ca_bundle = bundle();
                }
                mutating = Some(m);
            }
            "ValidatingWebhookConfiguration" => {
                let mut v: ValidatingWebhookConfiguration = serde_json::from_value(d)?;
                for w in v.webhooks.iter_mut().flatten() {
                    w.client_config.ca_bundle = bundle();
                }
                validating = Some(v);
            }
            _ => {}
        }
    }
    Ok((
        mutating.context("no MutatingWebhookConfiguration")?,
        validating.context("no ValidatingWebhookConfiguration")?,
    ))
}

/// Starts Kueue against the test cluster and registers its webhooks; returns once it is ready.
async fn start_kueue(client: &Client) -> Result<KueueProcess> {
    let bin = kueue_bin_dir()?;
    let mut crds = String::new();
    for e in std::fs::read_dir(bin.join("crds"))? {
        crds.push_str("\n---\n");
        crds.push_str(&std::fs::read_to_string(e?.path())?);
    }
    phalanx_testenv::apply_crds(client, &crds)
        .await
        .context("applying Kueue's CRDs")?;
    let env = TestEnv::shared();
    let dir = env.log_dir().join("kueue");
    std::fs::create_dir_all(&dir)?;
    let ca = make_certs(&dir)?;
    ensure_metrics_cert(&dir)?;
    let (webhook_port, health_port) = (free_port()?, free_port()?);
    let config = format!(
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nnamespace: kueue-system\n\
         health:\n  healthProbeBindAddress: 127.0.0.1:{health_port}\nmetrics:\n  bindAddress: \"0\"\n\
         webhook:\n  host: 127.0.0.1\n  port: {webhook_port}\n  certDir: {}\nleaderElection:\n  leaderElect: false\n\
         internalCertManagement:\n  enable: false\nintegrations:\n  frameworks:\n  - batch/job\n",
        dir.join("certs").display()
    );
    std::fs::write(dir.join("config.yaml"), config)?;
    let ns: Api<Namespace> = Api::all(client.clone());
    if ns.get_opt("kueue-system").await?.is_none() {
        ns.create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": "kueue-system" } }))?,
        )
        .await?;
    }
    let log = std::fs::File::create(dir.join("kueue.log"))?;
    let child = Command::new(bin.join("kueue"))
        .arg(format!("--config={}", dir.join("config.yaml").display()))
        // The on-demand visibility API server wants its own certificate in /visibility; nothing here uses it.
        .arg("--feature-gates=VisibilityOnDemand=false")
        .env("KUBECONFIG", env.kubeconfig_path())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting kueue")?;
    let proc = KueueProcess(child);
    let ready = format!("http://127.0.0.1:{health_port}/readyz");
    wait_for("Kueue /readyz", WAIT, || {
        let ready = ready.clone();
        async move {
            let out = tokio::process::Command::new("curl")
                .args(["-sf", &ready])
                .output()
                .await?;
            Ok(out.status.success().then_some(()))
        }
    })
    .await
    .with_context(|| format!("Kueue not ready; its log: {}", dir.join("kueue.log").display()))?;
    let manifest = std::fs::read_to_string(bin.join("webhook.yaml"))?;
    let (m, v) = webhooks(&manifest, webhook_port, &ca)?;
    let pp = PatchParams::apply("phalanx-kueue-test").force();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(&m.name_any(), &pp, &Patch::Apply(&m))
        .await?;
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(&v.name_any(), &pp, &Patch::Apply(&v))
        .await?;
    Ok(proc)
}

fn kueue_api(client: &Client, kind: &str, plural: &str, ns: Option<&str>) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", kind), plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

async fn create(api: &Api<DynamicObject>, v: Value) -> Result<()> {
    let name = v["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let obj: DynamicObject = serde_json::from_value(v)?;
    // Kueue's validating webhook may not answer for the first moments after /readyz; retry.
    wait_for(&format!("creating {name}"), WAIT, || async {
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => Ok(Some(())),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Some(())),
            Err(e) => Err(e.into()),
        }
    })
    .await
}

async fn job_pods(client: &Client, ns: &str, job: &str) -> Result<(usize, usize)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await?;
    let bound = list
        .items
        .iter()
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| !n.is_empty())
        })
        .count();
    Ok((list.items.len(), bound))
}

/// A Job labelled for a Kueue LocalQueue and scheduled by Phalanx is admitted by Kueue (unsuspended) and then
/// gang-scheduled by Phalanx; a second one over the ClusterQueue's quota stays suspended with no pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_admits_phalanx_gang_schedules_over_quota_waits() -> Result<()> {
    let env = TestEnv::shared();
    let client = env.client().await?;
    phalanx_testenv::apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    let _kueue = start_kueue(&client).await?;
    let ns = create_namespace(&client, "kueue").await?;
    for i in 0..2 {
        FakeNode::new(format!("{ns}-n{i}"))
            .cpu("4")
            .memory("32Gi")
            .pods(110)
            .test_namespace(&ns)
            .create(&client)
            .await?;
    }
    // Phalanx: controllers (with the owner integration) and a scheduler for this namespace's nodes.
    let shutdown = CancellationToken::new();
    let _stop = shutdown.clone().drop_guard();
    let sched = format!("phalanx-{ns}");
    let (leader_tx, leader_rx) = watch::channel(true);
    let mut registry = Registry::default();
    let store = Store::start(client.clone(), StoreConfig::default());
    let controllers = run_controllers(
        client.clone(),
        store.clone(),
        ControllerOptions::default(),
        leader_rx.clone(),
        shutdown.clone(),
        &mut registry,
    );
    let scheduler = phalanx_driver::run(
        client.clone(),
        store,
        SchedulerOptions {
            scheduler_name: sched.clone(),
            node_selector: Some(format!("{TEST_NS_LABEL}={ns}")),
            ..SchedulerOptions::default()
        },
        leader_rx,
        shutdown.clone(),
        &mut registry,
    );
    tokio::spawn(controllers);
    tokio::spawn(scheduler);
    let _keep = leader_tx;

    // Kueue: one flavor, a ClusterQueue with 4 cpu of quota (the nodes have 8), a LocalQueue in the namespace.
    create(&kueue_api(&client, "ResourceFlavor", "resourceflavors", None), json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": { "name": "default-flavor" } }))
    .await?;
    let cq = format!("cq-{ns}");
    create(
        &kueue_api(&client, "ClusterQueue", "clusterqueues", None),
        json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": { "name": cq },
            "spec": {
                "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": ns } },
                "resourceGroups": [{ "coveredResources": ["cpu"], "flavors": [{ "name": "default-flavor",
                    "resources": [{ "name": "cpu", "nominalQuota": "4" }] }] }],
            }
        }),
    )
    .await?;
    create(&kueue_api(&client, "LocalQueue", "localqueues", Some(&ns)), json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": { "name": "q", "namespace": ns },
        "spec": { "clusterQueue": cq } }))
    .await?;

    // Two gang Jobs of 4 x 1 cpu, created unsuspended: Kueue's Job webhook suspends them, its quota admits one.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    for name in ["first", "second"] {
        let job: Job = serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": { "name": name, "labels": { QUEUE_LABEL: "q" }, "annotations": { GANG: "true" } },
            "spec": {
                "parallelism": 4, "completions": 4,
                "template": { "spec": {
                    "schedulerName": sched, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                    "containers": [{ "name": "c", "image": "busybox", "resources": { "requests": { "cpu": "1" } } }],
                } },
            }
        }))?;
        let created = wait_for(&format!("creating Job {name}"), WAIT, || async {
            match jobs.create(&PostParams::default(), &job).await {
                Ok(j) => Ok(Some(j)),
                Err(e) => Err(e.into()),
            }
        })
        .await?;
        ensure!(
            created.spec.as_ref().and_then(|s| s.suspend) == Some(true),
            "Kueue's webhook did not suspend Job {name} on creation"
        );
        if name == "first" {
            // Admission first, so which Job wins is known.
            wait_for("first Job admitted (unsuspended)", WAIT, || async {
                let j = jobs.get("first").await?;
                Ok((j.spec.and_then(|s| s.suspend) == Some(false)).then_some(()))
            })
            .await?;
        }
    }
    wait_for("4 pods of the admitted Job bound by Phalanx", WAIT, || async {
        Ok((job_pods(&client, &ns, "first").await? == (4, 4)).then_some(()))
    })
    .await?;
    let pg = Api::<phalanx_api::v1beta1::PodGroup>::namespaced(client.clone(), &ns)
        .get("first-job")
        .await?;
    ensure!(
        pg.spec.scheduling_policy.gang.map(|g| g.min_count) == Some(4),
        "the admitted Job is one gang of 4"
    );
    // Over quota: suspended, no pods, no group. The positive sign is Kueue's verdict on the Job's Workload
    // (`QuotaReserved=False`: it has been considered and does not fit), written while the Job stays suspended.
    let kueue_workloads = kueue_api(&client, "Workload", "workloads", Some(&ns));
    wait_for(
        "Kueue's Workload of Job second QuotaReserved=False",
        WAIT,
        || async {
            let l = kueue_workloads.list(&ListParams::default()).await?;
            let pending = l.items.iter().any(|w| {
                let of_second = w
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.kind == "Job" && o.name == "second");
                let conditions = w.data.pointer("/status/conditions").cloned().unwrap_or_default();
                of_second
                    && conditions.as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "QuotaReserved" && c["status"] == "False")
                    })
            });
            Ok(pending.then_some(()))
        },
    )
    .await?;
    let second = jobs.get("second").await?;
    ensure!(
        second.spec.and_then(|s| s.suspend) == Some(true),
        "the Job over quota was admitted"
    );
    let (total, _) = job_pods(&client, &ns, "second").await?;
    if total != 0 {
        bail!("the Job over quota has {total} pods");
    }
    ensure!(
        Api::<phalanx_api::v1beta1::PodGroup>::namespaced(client.clone(), &ns)
            .get_opt("second-job")
            .await?
            .is_none(),
        "a suspended Job got a PodGroup"
    );
    Ok(())
}
