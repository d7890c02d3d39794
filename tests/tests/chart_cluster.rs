//! The Helm chart as published, in a real cluster (the control plane of `phalanx-testenv`, helm and kubectl from
//! hack/build-bins.sh): `helm template` passes the API server's own validation (`kubectl apply --dry-run=server`),
//! `helm install` creates every object of the release, the container image's own `phalanx` binary (unpacked from the
//! layer of `make image`'s archive), run out of the cluster with the chart's ServiceAccount token and the
//! Deployment's own arguments, takes the Lease and schedules a gang (so the image and the chart's RBAC are enough), `helm upgrade` from the previous chart version keeps the CRDs and the Lease, and
//! `helm uninstall` leaves the CRDs (and says so in NOTES.txt). Two releases of one scheduler name elect one leader,
//! and the second one's NOTES.txt warns about the first.
//!
//! Without a kubelet the chart's own pods never run; the binary run here stands in for them. Each test uses its own
//! scheduler name and nodes, so the tests of this binary can share the control plane.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use phalanx_api::conditions::{POD_GROUP_INITIALLY_SCHEDULED, reasons};
use phalanx_api::labels::POD_GROUP;
use phalanx_api::v1beta1::PodGroup;
use phalanx_e2e::helm::{Helm, chart_version, previous_chart};
use phalanx_e2e::process::{Phalanx, image_binary, phalanx_binary};
use phalanx_e2e::{apply_objects, get_object, parse_objects, service_account_kubeconfig};
use phalanx_testenv::{FakeNode, TEST_NS_LABEL, TestEnv, create_namespace, wait_for};

const CRDS: [&str; 3] = [
    "workloads.scheduling.phalanx.dev",
    "podgroups.scheduling.phalanx.dev",
    "compositepodgroups.scheduling.phalanx.dev",
];
/// The chart's default: the Lease namespace every release of a scheduler name shares.
const LEASE_NS: &str = "kube-system";
const TIMEOUT: Duration = Duration::from_secs(90);

/// A working directory for one test's files (kubeconfigs, configuration copies, logs).
fn work_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("phalanx-chart-cluster-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).expect("work dir");
    d
}

/// `--set`s that point a release at this test's scheduler name and nodes.
fn values(scheduler: &str, ns: &str) -> Vec<String> {
    vec![
        "--set".into(),
        format!("scheduler.name={scheduler}"),
        "--set-string".into(),
        format!("scheduler.nodeSelector={TEST_NS_LABEL}={ns}"),
    ]
}

fn with<'a>(base: &[&'a str], extra: &'a [String]) -> Vec<&'a str> {
    base.iter()
        .copied()
        .chain(extra.iter().map(String::as_str))
        .collect()
}

/// Two fake nodes with 4 CPUs each, selected by this test's node selector.
async fn nodes(admin: &Client, ns: &str) -> anyhow::Result<()> {
    for i in 0..2 {
        FakeNode::new(format!("{ns}-n{i}"))
            .cpu("4")
            .test_namespace(ns)
            .create(admin)
            .await?;
    }
    Ok(())
}

/// Creates a gang `name` of `n` pods (minCount `n`, 1 CPU each) for scheduler `scheduler` in `ns`, as a tenant would,
/// and waits until it is `True/Scheduled` with every pod bound; returns the nodes.
async fn schedule_gang(
    admin: &Client,
    ns: &str,
    scheduler: &str,
    name: &str,
    n: usize,
) -> anyhow::Result<Vec<String>> {
    let mut yaml = format!(
        "apiVersion: scheduling.phalanx.dev/v1beta1\nkind: PodGroup\nmetadata: {{name: {name}}}\n\
         spec: {{schedulingPolicy: {{gang: {{minCount: {n}}}}}}}\n"
    );
    for i in 0..n {
        yaml += &format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}-{i}, labels: {{{POD_GROUP}: {name}}}}}\n\
             spec:\n  schedulerName: {scheduler}\n  containers:\n  - name: c\n    image: registry.k8s.io/pause:3.10\n\
             \x20   resources: {{requests: {{cpu: \"1\"}}}}\n"
        );
    }
    apply_objects(admin, &parse_objects(&yaml)?, ns).await?;
    let groups: Api<PodGroup> = Api::namespaced(admin.clone(), ns);
    wait_for(&format!("PodGroup {name} True/Scheduled"), TIMEOUT, || {
        let groups = groups.clone();
        async move {
            let g = groups.get(name).await?;
            let c = g
                .status
                .iter()
                .flat_map(|s| s.conditions.iter())
                .find(|c| c.type_ == POD_GROUP_INITIALLY_SCHEDULED);
            Ok(c.filter(|c| c.status == "True" && c.reason == reasons::SCHEDULED)
                .map(|_| ()))
        }
    })
    .await?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    wait_for(
        &format!("every pod of {name} bound"),
        Duration::from_secs(30),
        || {
            let pods = pods.clone();
            async move {
                let list = pods
                    .list(&ListParams::default().labels(&format!("{POD_GROUP}={name}")))
                    .await?;
                let nodes: Vec<Option<String>> = list
                    .items
                    .iter()
                    .map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
                    .collect();
                Ok((nodes.len() == n && nodes.iter().all(Option::is_some))
                    .then(|| nodes.into_iter().flatten().collect()))
            }
        },
    )
    .await
}

/// Publishes 2 devices on node `<ns>-n0` (a DeviceClass `<ns>-gpu` and a ResourceSlice, as a driver would), creates a
/// gang of 2 pods with a template claim for 1 device each, and waits until both claims are allocated and reserved;
/// returns the devices. The cluster-scoped objects are deleted again.
async fn schedule_device_gang(admin: &Client, ns: &str, scheduler: &str) -> anyhow::Result<Vec<String>> {
    use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
    let class = format!("{ns}-gpu");
    let node = format!("{ns}-n0");
    let mut yaml = format!(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {{name: {class}}}\n\
         spec: {{selectors: [{{cel: {{expression: 'device.driver == \"gpu.example.com\"'}}}}]}}\n\
         ---\napiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: {node}}}\n\
         spec: {{driver: gpu.example.com, nodeName: {node}, pool: {{name: {node}, generation: 1, resourceSliceCount: 1}}, \
         devices: [{{name: gpu-0}}, {{name: gpu-1}}]}}\n\
         ---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{name: one-gpu}}\n\
         spec: {{spec: {{devices: {{requests: [{{name: gpu, exactly: {{deviceClassName: {class}}}}}]}}}}}}\n\
         ---\napiVersion: scheduling.phalanx.dev/v1beta1\nkind: PodGroup\nmetadata: {{name: devices}}\n\
         spec: {{schedulingPolicy: {{gang: {{minCount: 2}}}}}}\n"
    );
    for i in 0..2 {
        yaml += &format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: devices-{i}, labels: {{{POD_GROUP}: devices}}}}\n\
             spec:\n  schedulerName: {scheduler}\n  resourceClaims: [{{name: gpu, resourceClaimTemplateName: one-gpu}}]\n\
             \x20 containers:\n  - name: c\n    image: registry.k8s.io/pause:3.10\n\
             \x20   resources: {{requests: {{cpu: 100m}}, claims: [{{name: gpu}}]}}\n"
        );
    }
    apply_objects(admin, &parse_objects(&yaml)?, ns).await?;
    let claims: Api<ResourceClaim> = Api::namespaced(admin.clone(), ns);
    let got = wait_for("both device claims allocated and reserved", TIMEOUT, || {
        let claims = claims.clone();
        async move {
            let list = claims.list(&ListParams::default()).await?;
            let done: Vec<String> = list
                .items
                .iter()
                .filter_map(|c| {
                    let st = c.status.as_ref()?;
                    st.reserved_for.as_ref().filter(|r| !r.is_empty())?;
                    let a = st.allocation.as_ref()?.devices.as_ref()?;
                    Some(
                        a.results
                            .iter()
                            .flatten()
                            .map(|r| r.device.clone())
                            .collect::<Vec<_>>()
                            .join(","),
                    )
                })
                .collect();
            Ok((done.len() == 2).then_some(done))
        }
    })
    .await?;
    let dp = kube::api::DeleteParams::default();
    let _ = Api::<ResourceSlice>::all(admin.clone()).delete(&node, &dp).await;
    let _ = Api::<DeviceClass>::all(admin.clone()).delete(&class, &dp).await;
    let mut sorted = got.clone();
    sorted.sort();
    sorted.dedup();
    ensure!(sorted.len() == 2, "a device was given twice: {got:?}");
    Ok(got)
}

/// Waits until `p` is Ready and `want_leader` is what its `phalanx_leader` metric says.
async fn wait_state(p: &mut Phalanx, what: &str, want_leader: bool) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        match p.state().await {
            Ok((true, leader)) if leader == want_leader => return Ok(()),
            Err(e) if e.to_string().contains("exited") => return Err(e),
            _ => {}
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "{what}: not ready with leader={want_leader} within {TIMEOUT:?}; log:\n{}",
            p.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

async fn lease_holder(
    admin: &Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<Option<(String, Option<String>)>> {
    let lease = Api::<Lease>::namespaced(admin.clone(), ns).get_opt(name).await?;
    Ok(lease.map(|l| {
        (
            l.uid().unwrap_or_default(),
            l.spec.and_then(|s| s.holder_identity),
        )
    }))
}

async fn crd_uids(admin: &Client) -> anyhow::Result<Vec<String>> {
    let api: Api<CustomResourceDefinition> = Api::all(admin.clone());
    let mut uids = Vec::new();
    for c in CRDS {
        uids.push(
            api.get(c)
                .await
                .with_context(|| format!("CRD {c}"))?
                .uid()
                .unwrap_or_default(),
        );
    }
    Ok(uids)
}

/// Starts the binary as release `release`'s Deployment in `ns` would run, with a token of the chart's
/// ServiceAccount (named after the release: the chart's fullname).
async fn start_as_release(
    env: &TestEnv,
    admin: &Client,
    bin: &Path,
    ns: &str,
    release: &str,
    identity: &str,
    work: &Path,
) -> anyhow::Result<Phalanx> {
    let kubeconfig = work.join(format!("{identity}.kubeconfig"));
    service_account_kubeconfig(env, admin, ns, release, &kubeconfig).await?;
    Phalanx::start_as_deployment(bin, admin, ns, release, &kubeconfig, identity, work).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_installs_schedules_a_gang_with_its_rbac_and_uninstall_keeps_the_crds() -> anyhow::Result<()> {
    let env = TestEnv::shared();
    let admin = env.client().await?;
    let helm = Helm::new(env);
    // The image's own binary: this test is what proves that the published image, with the chart's RBAC, schedules.
    let bin = image_binary()?;
    let work = work_dir("install");
    let ns = create_namespace(&admin, "chart").await?;
    let release = format!("phalanx-{}", &ns[ns.len() - 8..]);
    let scheduler = format!("sched-{ns}");
    let vals = values(&scheduler, &ns);

    // 1. What `helm template` renders is accepted by the API server's validation and admission (server dry run).
    let rendered = helm.run(&with(
        &[
            "template",
            &release,
            "charts/phalanx",
            "-n",
            &ns,
            "--include-crds",
        ],
        &vals,
    ))?;
    let file = work.join("rendered.yaml");
    std::fs::write(&file, &rendered)?;
    let kubectl = std::process::Command::new(env.bin_dir().join("kubectl"))
        .arg(format!("--kubeconfig={}", env.kubeconfig_path().display()))
        .args(["apply", "--dry-run=server", "-f"])
        .arg(&file)
        .output()?;
    let dry = String::from_utf8_lossy(&kubectl.stdout);
    ensure!(
        kubectl.status.success(),
        "server dry run failed: {}{dry}",
        String::from_utf8_lossy(&kubectl.stderr)
    );
    let objects = parse_objects(&rendered)?;
    ensure!(
        dry.matches("(server dry run)").count() == objects.len(),
        "dry run of {} objects:\n{dry}",
        objects.len()
    );

    // 2. helm install creates every object of the release, CRDs included.
    let notes = helm.run(&with(&["install", &release, "charts/phalanx", "-n", &ns], &vals))?;
    ensure!(
        notes.contains("Uninstalling") && notes.contains("keeps the CustomResourceDefinitions"),
        "NOTES must say that uninstalling keeps the CRDs:\n{notes}"
    );
    ensure!(
        !notes.contains("WARNING") && !notes.contains("DANGER"),
        "no other release of {scheduler}:\n{notes}"
    );
    let manifest = parse_objects(&helm.run(&["get", "manifest", &release, "-n", &ns])?)?;
    let kinds: std::collections::BTreeSet<String> = manifest
        .iter()
        .filter_map(|o| o.types.as_ref().map(|t| t.kind.clone()))
        .collect();
    for k in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
    ] {
        ensure!(kinds.contains(k), "the release has no {k}: {kinds:?}");
    }
    for o in &manifest {
        ensure!(
            get_object(&admin, o, &ns).await?.is_some(),
            "{:?} {} was not created",
            o.types,
            o.name_any()
        );
    }
    let crds = crd_uids(&admin).await?;

    // 3. The binary as the chart's ServiceAccount, with the Deployment's arguments: it takes the Lease named after
    //    the scheduler name in kube-system and binds a gang.
    nodes(&admin, &ns).await?;
    let mut p = start_as_release(env, &admin, &bin, &ns, &release, "installed-0", &work).await?;
    wait_state(&mut p, "installed-0", true).await?;
    let (_, holder) = lease_holder(&admin, LEASE_NS, &scheduler)
        .await?
        .context("no Lease named after the scheduler")?;
    ensure!(
        holder.as_deref() == Some("installed-0"),
        "Lease {LEASE_NS}/{scheduler} holder {holder:?}"
    );
    let placed = schedule_gang(&admin, &ns, &scheduler, "gang", 3).await?;
    eprintln!("gang bound to {placed:?} by the binary as ServiceAccount {ns}/{release}");
    // A gang that claims devices: the chart's RBAC must let the scheduler read the DRA objects and write the
    // claims' allocation (kube-apiserver 1.37 also checks resourceclaims/binding).
    let devices = schedule_device_gang(&admin, &ns, &scheduler).await?;
    eprintln!("device gang allocated {devices:?} by the binary as ServiceAccount {ns}/{release}");
    ensure!(p.stop().await?.success(), "phalanx did not exit cleanly");

    // 4. helm uninstall removes the release's objects and leaves the CRDs (same objects) and the groups.
    helm.run(&["uninstall", &release, "-n", &ns, "--wait"])?;
    for o in &manifest {
        ensure!(
            get_object(&admin, o, &ns).await?.is_none(),
            "{:?} {} survived helm uninstall",
            o.types,
            o.name_any()
        );
    }
    ensure!(
        crd_uids(&admin).await? == crds,
        "the CRDs were deleted or replaced by helm uninstall"
    );
    ensure!(
        Api::<PodGroup>::namespaced(admin.clone(), &ns)
            .get_opt("gang")
            .await?
            .is_some(),
        "the PodGroup went with the release"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_from_the_previous_chart_keeps_the_crds_and_the_lease() -> anyhow::Result<()> {
    let env = TestEnv::shared();
    let admin = env.client().await?;
    let helm = Helm::new(env);
    let bin = phalanx_binary()?;
    let work = work_dir("upgrade");
    let (previous, old_chart) = previous_chart(&work.join("previous"))?;
    let current = chart_version()?;
    let ns = create_namespace(&admin, "upgrade").await?;
    let release = format!("phalanx-{}", &ns[ns.len() - 8..]);
    let scheduler = format!("sched-{ns}");
    let vals = values(&scheduler, &ns);
    let old_chart = old_chart.to_str().context("path")?.to_owned();

    // 1. The previous version, its scheduler leading on its own Lease and scheduling.
    helm.run(&with(&["install", &release, &old_chart, "-n", &ns], &vals))?;
    nodes(&admin, &ns).await?;
    let mut old = start_as_release(env, &admin, &bin, &ns, &release, "old-0", &work).await?;
    wait_state(&mut old, "old-0", true).await?;
    let deps: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    let old_args = deps
        .get(&release)
        .await?
        .spec
        .template
        .spec
        .context("pod spec")?
        .containers[0]
        .args
        .clone()
        .unwrap_or_default();
    let old_lease_ns = old_args
        .iter()
        .find_map(|a| a.strip_prefix("--leader-elect-lease-namespace="))
        .context("old args")?
        .to_owned();
    let old_lease_name = old_args
        .iter()
        .find_map(|a| a.strip_prefix("--leader-elect-lease-name="))
        .unwrap_or(scheduler.as_str())
        .to_owned();
    let lease_before = lease_holder(&admin, &old_lease_ns, &old_lease_name)
        .await?
        .context("the old Lease")?;
    ensure!(
        lease_before.1.as_deref() == Some("old-0"),
        "old Lease: {lease_before:?}"
    );
    schedule_gang(&admin, &ns, &scheduler, "before", 2).await?;
    let crds = crd_uids(&admin).await?;

    // 2. helm upgrade to this version: CRDs untouched, the Lease still held by the running scheduler, and the
    //    Deployment recreated (not rolled) because its Lease changes.
    helm.run(&with(&["upgrade", &release, "charts/phalanx", "-n", &ns], &vals))?;
    eprintln!("upgraded {release} from chart {previous} to {current}");
    ensure!(crd_uids(&admin).await? == crds, "helm upgrade replaced the CRDs");
    ensure!(
        lease_holder(&admin, &old_lease_ns, &old_lease_name).await? == Some(lease_before.clone()),
        "helm upgrade touched the Lease"
    );
    wait_state(&mut old, "old-0 after the upgrade", true).await?;
    let dep = deps.get(&release).await?;
    let strategy = dep.spec.strategy.clone().unwrap_or_default();
    let new_args = dep.spec.template.spec.context("pod spec")?.containers[0]
        .args
        .clone()
        .unwrap_or_default();
    let new_lease = new_args
        .iter()
        .find_map(|a| a.strip_prefix("--leader-elect-lease-namespace="))
        .context("new args")?;
    if (new_lease, scheduler.as_str()) != (old_lease_ns.as_str(), old_lease_name.as_str()) {
        ensure!(
            strategy.type_.as_deref() == Some("Recreate") && strategy.rolling_update.is_none(),
            "the Lease moves from {old_lease_ns}/{old_lease_name} to {new_lease}/{scheduler}: old and new replicas must not overlap, strategy {strategy:?}"
        );
    }

    // 3. The upgraded release's scheduler, once the old one has stopped and released its Lease, leads and schedules
    //    with the upgraded RBAC.
    ensure!(old.stop().await?.success(), "old phalanx did not exit cleanly");
    let mut new = start_as_release(env, &admin, &bin, &ns, &release, "new-0", &work).await?;
    wait_state(&mut new, "new-0", true).await?;
    let (_, holder) = lease_holder(&admin, new_lease, &scheduler)
        .await?
        .context("the upgraded Lease")?;
    ensure!(
        holder.as_deref() == Some("new-0"),
        "upgraded Lease holder {holder:?}"
    );
    schedule_gang(&admin, &ns, &scheduler, "after", 2).await?;

    // 4. An upgrade that keeps the Lease rolls with a warm standby again.
    helm.run(&with(
        &[
            "upgrade",
            &release,
            "charts/phalanx",
            "-n",
            &ns,
            "--set",
            "logFormat=text",
        ],
        &vals,
    ))?;
    let strategy = deps.get(&release).await?.spec.strategy.unwrap_or_default();
    ensure!(
        strategy.type_.as_deref() == Some("RollingUpdate"),
        "same Lease: {strategy:?}"
    );
    wait_state(&mut new, "new-0 after the second upgrade", true).await?;
    ensure!(new.stop().await?.success(), "new phalanx did not exit cleanly");
    helm.run(&["uninstall", &release, "-n", &ns, "--wait"])?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_releases_of_one_scheduler_name_elect_one_leader_and_the_second_is_warned() -> anyhow::Result<()>
{
    let env = TestEnv::shared();
    let admin = env.client().await?;
    let helm = Helm::new(env);
    let bin = phalanx_binary()?;
    let work = work_dir("two");
    let ns_a = create_namespace(&admin, "team-a").await?;
    let ns_b = create_namespace(&admin, "team-b").await?;
    let scheduler = format!("shared-{ns_a}");
    // Release names containing "phalanx": the chart's fullname (ServiceAccount, Deployment) is then the release name.
    let (rel_a, rel_b) = (
        format!("phalanx-a-{}", &ns_a[ns_a.len() - 8..]),
        format!("phalanx-b-{}", &ns_b[ns_b.len() - 8..]),
    );
    // Both releases select the same nodes (team-a's).
    let vals = values(&scheduler, &ns_a);

    helm.run(&with(&["install", &rel_a, "charts/phalanx", "-n", &ns_a], &vals))?;
    let notes = helm.run(&with(&["install", &rel_b, "charts/phalanx", "-n", &ns_b], &vals))?;
    let lease = format!("{LEASE_NS}/{scheduler}");
    ensure!(
        notes.contains(&format!(
            "WARNING: Deployment {ns_a}/{rel_a} (release {rel_a}) also schedules for"
        )) && notes.contains(&format!("Both contend for the Lease {lease}")),
        "the second release's NOTES must name the first and the shared Lease:\n{notes}"
    );

    nodes(&admin, &ns_a).await?;
    let mut a = start_as_release(env, &admin, &bin, &ns_a, &rel_a, "team-a-0", &work).await?;
    wait_state(&mut a, "team-a-0", true).await?;
    let mut b = start_as_release(env, &admin, &bin, &ns_b, &rel_b, "team-b-0", &work).await?;
    // B is Ready as a standby and stays one while A renews (a lease term is 15 s: watch for longer than one).
    wait_state(&mut b, "team-b-0", false).await?;
    for _ in 0..20 {
        ensure!(
            a.state().await? == (true, true) && b.state().await? == (true, false),
            "two leaders or none for {scheduler}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (_, holder) = lease_holder(&admin, LEASE_NS, &scheduler)
        .await?
        .context("shared Lease")?;
    ensure!(holder.as_deref() == Some("team-a-0"), "holder {holder:?}");
    schedule_gang(&admin, &ns_a, &scheduler, "by-a", 2).await?;

    // The other release's scheduler takes over the same Lease when A stops, and schedules with its own RBAC.
    ensure!(a.stop().await?.success(), "team-a-0 did not exit cleanly");
    wait_state(&mut b, "team-b-0 after team-a-0 stopped", true).await?;
    let (_, holder) = lease_holder(&admin, LEASE_NS, &scheduler)
        .await?
        .context("shared Lease")?;
    ensure!(holder.as_deref() == Some("team-b-0"), "holder {holder:?}");
    schedule_gang(&admin, &ns_a, &scheduler, "by-b", 2).await?;
    ensure!(b.stop().await?.success(), "team-b-0 did not exit cleanly");

    // A third release of the name with a Lease of its own would lead beside them: its NOTES say so.
    let ns_c = create_namespace(&admin, "team-c").await?;
    let rel_c = format!("phalanx-c-{}", &ns_c[ns_c.len() - 8..]);
    let notes = helm.run(&with(
        &[
            "install",
            &rel_c,
            "charts/phalanx",
            "-n",
            &ns_c,
            "--set",
            &format!("leaderElection.namespace={ns_c}"),
        ],
        &vals,
    ))?;
    ensure!(
        notes.contains(&format!("DANGER: Deployment {ns_a}/{rel_a}"))
            && notes.contains(&format!("(its: {lease};")),
        "a release with another Lease must be called out:\n{notes}"
    );
    for (r, n) in [(&rel_a, &ns_a), (&rel_b, &ns_b), (&rel_c, &ns_c)] {
        helm.run(&["uninstall", r, "-n", n, "--wait"])?;
    }
    Ok(())
}

/// `crane ARGS --insecure` (the loopback registry speaks plain HTTP); its stdout, trimmed.
fn crane_out(crane: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = std::process::Command::new(crane)
        .args(args)
        .arg("--insecure")
        .output()
        .with_context(|| format!("running crane {}", args.join(" ")))?;
    ensure!(
        out.status.success(),
        "crane {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

/// `/usr/local/bin/phalanx` of the image `image` for linux/`arch`, as the registry serves it (`crane export` of the
/// platform's file system), written under `dir`.
fn pull_binary(crane: &Path, image: &str, arch: &str, dir: &Path) -> anyhow::Result<PathBuf> {
    let fs = dir.join(format!("rootfs-{arch}.tar"));
    let fs_arg = fs.to_str().context("path")?;
    crane_out(
        crane,
        &["export", "--platform", &format!("linux/{arch}"), image, fs_arg],
    )?;
    let root = dir.join(format!("rootfs-{arch}"));
    std::fs::create_dir_all(&root)?;
    let status = std::process::Command::new("tar")
        .arg("-xf")
        .arg(&fs)
        .arg("-C")
        .arg(&root)
        .arg("usr/local/bin/phalanx")
        .status()?;
    ensure!(
        status.success(),
        "the linux/{arch} image holds no usr/local/bin/phalanx"
    );
    Ok(root.join("usr/local/bin/phalanx"))
}

/// `readelf ARGS FILE`'s output.
fn readelf(args: &[&str], file: &Path) -> anyhow::Result<String> {
    let out = std::process::Command::new("readelf")
        .args(args)
        .arg(file)
        .output()?;
    ensure!(out.status.success(), "readelf {args:?} {} failed", file.display());
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The release as a user gets it. `hack/release.sh` releases this tree to a registry on loopback (`crane registry
/// serve`): the image index holds linux/amd64 and linux/arm64, each the digest the script computed, and the arm64
/// binary is a static AArch64 ELF (it cannot run here); the checksums, the krew manifest and the SBOM describe the
/// files beside them. Then the chart is installed **from the OCI registry**; its Deployment names the pushed index
/// by digest, which resolves to the pushed manifest for this machine's platform; and that platform's binary, pulled
/// from the registry, run as the chart's ServiceAccount with the Deployment's arguments, binds a gang.
///
/// `make test-release` runs it: a cold release builds the arm64 binaries and cargo-cyclonedx (15-25 minutes on two
/// cores), so it stays out of `make test`, which already builds and tests the image of this machine's platform.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "make test-release runs it (cold cross-compilation for linux/arm64, 15-25 min; not part of make test)"]
async fn a_release_on_a_loopback_registry_installs_from_it_and_its_image_binds_a_gang() -> anyhow::Result<()>
{
    let crane = phalanx_testenv::crane_binary()?;
    let registry = phalanx_testenv::LoopbackRegistry::start(&crane)?;
    let target = std::env::current_exe()?
        .ancestors()
        .nth(3)
        .context("<target>/<profile>/deps/<exe>")?
        .to_owned();
    let version = env!("CARGO_PKG_VERSION");

    // 1. The release, pushed: the script's own progress lines show with --nocapture.
    let status = std::process::Command::new("bash")
        .args(["hack/release.sh", "--registry", &registry.host, "--plain-http"])
        .current_dir(phalanx_e2e::repo_root())
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .context("running hack/release.sh")?;
    ensure!(status.success(), "hack/release.sh failed: {status}");
    let out = target.join("dist").join(version);
    let released: std::collections::BTreeMap<String, String> =
        std::fs::read_to_string(out.join("release.env"))?
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
    let field = |k: &str| {
        released
            .get(k)
            .cloned()
            .with_context(|| format!("release.env has no {k}"))
    };
    let image = field("IMAGE")?;
    ensure!(
        image.starts_with(&format!("{}/phalanx:{version}@sha256:", registry.host)),
        "IMAGE={image}"
    );

    // 2. The index the registry serves: both platforms, each the manifest the script built.
    let index: serde_json::Value = serde_json::from_str(&crane_out(&crane, &["manifest", &image])?)?;
    let mut platforms: Vec<String> = index["manifests"]
        .as_array()
        .context("not an index")?
        .iter()
        .map(|m| format!("{}/{}", m["platform"]["os"], m["platform"]["architecture"]).replace('"', ""))
        .collect();
    platforms.sort();
    ensure!(
        platforms == ["linux/amd64", "linux/arm64"],
        "platforms {platforms:?}"
    );
    for arch in ["amd64", "arm64"] {
        let served = crane_out(
            &crane,
            &["digest", "--platform", &format!("linux/{arch}"), &image],
        )?;
        ensure!(
            served == field(&format!("IMAGE_DIGEST_{}", arch.to_uppercase()))?,
            "linux/{arch} resolves to {served}"
        );
    }
    let work = work_dir("release");
    let arm = pull_binary(&crane, &image, "arm64", &work)?;
    let header = readelf(&["-h"], &arm)?;
    ensure!(
        header.contains("AArch64") && header.contains("ELF64"),
        "the arm64 image's binary is not a 64-bit AArch64 ELF:\n{header}"
    );
    ensure!(
        !readelf(&["-lW"], &arm)?.contains("INTERP") && !readelf(&["-dW"], &arm)?.contains("(NEEDED)"),
        "the arm64 binary is not statically linked"
    );

    // 3. The files a GitHub release attaches: checksums that verify, a krew manifest naming both archives by their
    //    checksum, and an SBOM of the binary's crates.
    let check = std::process::Command::new("sha256sum")
        .args(["--check", "--strict", "sha256sums.txt"])
        .current_dir(&out)
        .output()?;
    ensure!(
        check.status.success(),
        "sha256sum --check: {}",
        String::from_utf8_lossy(&check.stdout)
    );
    let sums = std::fs::read_to_string(out.join("sha256sums.txt"))?;
    let krew = std::fs::read_to_string(out.join("plugins/phalanx.yaml"))?;
    for arch in ["amd64", "arm64"] {
        let archive = format!("phalanx-{version}-linux-{arch}.tar.gz");
        let sum = sums
            .lines()
            .find(|l| l.ends_with(&archive))
            .and_then(|l| l.split_whitespace().next())
            .with_context(|| format!("sha256sums.txt lacks {archive}"))?;
        ensure!(
            krew.contains(&format!("/{archive}\n    sha256: {sum}")),
            "the krew manifest does not name {archive} with {sum}:\n{krew}"
        );
    }
    let sbom: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        out.join(format!("phalanx-{version}.cdx.json")),
    )?)?;
    let components: Vec<&str> = sbom["components"]
        .as_array()
        .context("SBOM without components")?
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    ensure!(
        ["kube-client", "k8s-openapi", "tokio", "rustls"]
            .iter()
            .all(|c| components.contains(c)),
        "the SBOM lacks the binary's main crates: {} components",
        components.len()
    );

    // 4. The chart from the OCI registry; its Deployment names the pushed index by digest.
    let env = TestEnv::shared();
    let admin = env.client().await?;
    let helm = Helm::new(env);
    let ns = create_namespace(&admin, "release").await?;
    let release = format!("phalanx-{}", &ns[ns.len() - 8..]);
    let scheduler = format!("sched-{ns}");
    let vals = values(&scheduler, &ns);
    let chart = format!("oci://{}/charts/phalanx", registry.host);
    helm.run(&with(
        &[
            "install",
            &release,
            &chart,
            "--version",
            version,
            "--plain-http",
            "-n",
            &ns,
        ],
        &vals,
    ))?;
    let deployment = Api::<Deployment>::namespaced(admin.clone(), &ns)
        .get(&release)
        .await?;
    let deployed = deployment
        .spec
        .template
        .spec
        .and_then(|p| p.containers.into_iter().next())
        .and_then(|c| c.image)
        .context("the Deployment names no image")?;
    ensure!(
        deployed == image,
        "the Deployment runs {deployed}, the release pushed {image}"
    );
    let host_arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => anyhow::bail!("unsupported test machine architecture {other}"),
    };
    let resolved = crane_out(
        &crane,
        &["digest", "--platform", &format!("linux/{host_arch}"), &deployed],
    )?;
    ensure!(
        resolved == field(&format!("IMAGE_DIGEST_{}", host_arch.to_uppercase()))?,
        "the Deployment's image resolves to {resolved} for linux/{host_arch}"
    );

    // 5. That image's binary, from the registry, as the chart's ServiceAccount: it leads and binds a gang.
    let bin = pull_binary(&crane, &deployed, host_arch, &work)?;
    nodes(&admin, &ns).await?;
    let mut p = start_as_release(env, &admin, &bin, &ns, &release, "released-0", &work).await?;
    wait_state(&mut p, "released-0", true).await?;
    let placed = schedule_gang(&admin, &ns, &scheduler, "gang", 3).await?;
    eprintln!("gang bound to {placed:?} by {deployed} (linux/{host_arch}) as ServiceAccount {ns}/{release}");
    ensure!(p.stop().await?.success(), "phalanx did not exit cleanly");
    helm.run(&["uninstall", &release, "-n", &ns, "--wait"])?;
    Ok(())
}
