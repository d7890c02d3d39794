//! The Helm chart (`charts/phalanx`): `helm lint` passes and `helm template` renders least-privilege RBAC, the
//! hardened Deployment, one Lease per scheduler name whatever the release, the same CRDs as `crds/phalanx.yaml`, and
//! the MutatingAdmissionPolicies of `files/admission-policies.yaml` only where the API server serves them.
//! What the chart does in a cluster (install, upgrade, uninstall, a gang scheduled with its RBAC) is
//! `tests/chart_cluster.rs`.
//!
//! helm comes from `$PHALANX_BIN_DIR` (hack/versions.sh); when it is missing this test builds it with
//! hack/build-bins.sh rather than skipping.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repo root")
}

/// Path of the helm binary, building the control-plane tools once if needed.
fn helm() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| {
        let root = repo_root();
        let out = Command::new("bash")
            .arg("-c")
            .arg("source hack/versions.sh && printf %s \"$PHALANX_BIN_DIR\"")
            .current_dir(&root)
            .output()
            .expect("run bash to read hack/versions.sh");
        assert!(
            out.status.success(),
            "sourcing hack/versions.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let helm = PathBuf::from(String::from_utf8(out.stdout).expect("utf-8 path")).join("helm");
        if !helm.exists() {
            eprintln!(
                "helm not found at {}; building it with hack/build-bins.sh",
                helm.display()
            );
            let status = Command::new("bash")
                .arg("hack/build-bins.sh")
                .current_dir(&root)
                .status()
                .expect("run hack/build-bins.sh");
            assert!(
                status.success(),
                "hack/build-bins.sh failed; see its output above"
            );
        }
        assert!(
            helm.exists(),
            "hack/build-bins.sh did not produce {}",
            helm.display()
        );
        helm
    })
}

/// The Kubernetes version `helm template` and `helm lint` render for unless a test names one. The chart's
/// `kubeVersion` admits 1.34 to 1.38 only, and a helm built without the Makefile's client-go stamp (as
/// hack/build-bins.sh builds it) defaults to v1.20 (helm's `pkg/chartutil/capabilities.go`), so the offline
/// commands would refuse the chart.
const RENDER_KUBE_VERSION: &str = "v1.37.2";

fn run_helm(args: &[&str]) -> std::process::Output {
    let mut args = args.to_vec();
    if matches!(args.first(), Some(&("template" | "lint"))) && !args.contains(&"--kube-version") {
        args.extend(["--kube-version", RENDER_KUBE_VERSION]);
    }
    Command::new(helm())
        .args(&args)
        .current_dir(repo_root())
        // Keep helm from touching the user's config/cache.
        .env(
            "HELM_CACHE_HOME",
            std::env::temp_dir().join("phalanx-helm-test/cache"),
        )
        .env(
            "HELM_CONFIG_HOME",
            std::env::temp_dir().join("phalanx-helm-test/config"),
        )
        .env(
            "HELM_DATA_HOME",
            std::env::temp_dir().join("phalanx-helm-test/data"),
        )
        .output()
        .expect("run helm")
}

/// Renders the chart and returns every document (comments and empty documents dropped).
fn template(extra: &[&str]) -> Vec<Value> {
    template_release("phalanx", extra)
}

/// [`template`] for the release `release`.
fn template_release(release: &str, extra: &[&str]) -> Vec<Value> {
    let mut args = vec![
        "template",
        release,
        "charts/phalanx",
        "--namespace",
        "phalanx-system",
    ];
    args.extend_from_slice(extra);
    let out = run_helm(&args);
    assert!(
        out.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8 output");
    serde_saphyr::from_multiple::<Value>(&text)
        .expect("helm template output is YAML")
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found = find(docs, kind);
    assert_eq!(
        found.len(),
        1,
        "expected exactly one {kind}, found {}",
        found.len()
    );
    found[0]
}

/// A rule flattened to (apiGroup, resource, sorted verbs), one entry per group x resource.
fn rule_set(rules: &Value) -> BTreeSet<(String, String, Vec<String>)> {
    let mut set = BTreeSet::new();
    for rule in rules.as_array().expect("rules is a list") {
        let strs = |k: &str| -> Vec<String> {
            rule[k]
                .as_array()
                .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
                .unwrap_or_default()
        };
        assert!(
            rule.get("resourceNames").is_none() && rule.get("nonResourceURLs").is_none(),
            "{rule}"
        );
        let mut verbs = strs("verbs");
        verbs.sort();
        for g in strs("apiGroups") {
            for r in strs("resources") {
                assert!(
                    set.insert((g.clone(), r.clone(), verbs.clone())),
                    "duplicate rule for {g}/{r}"
                );
            }
        }
    }
    set
}

fn expect(group: &str, resource: &str, verbs: &[&str]) -> (String, String, Vec<String>) {
    let mut v: Vec<String> = verbs.iter().map(|s| s.to_string()).collect();
    v.sort();
    (group.to_owned(), resource.to_owned(), v)
}

#[test]
fn helm_lint_passes() {
    let out = run_helm(&["lint", "--strict", "charts/phalanx"]);
    assert!(
        out.status.success(),
        "helm lint failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The ClusterRole grants exactly the permissions of `phalanx::rbac::CLUSTER_PERMISSIONS`, the one table of what
/// the code calls, plus read access to the default `integrations.ownerResources`: first every verb the code calls
/// (a missing one is a 403 the operator retries forever), then nothing more (least privilege).
#[test]
fn cluster_role_is_exactly_least_privilege() {
    let docs = template(&[]);
    let role = one(&docs, "ClusterRole");
    let got = rule_set(&role["rules"]);
    let mut want = BTreeSet::new();
    for p in phalanx::rbac::CLUSTER_PERMISSIONS {
        for r in p.resources {
            want.insert(expect(p.api_group, r, p.verbs));
        }
    }
    // Owner integration: the custom owners listed in values.yaml's integrations.ownerResources.
    for (g, rs) in [
        ("jobset.x-k8s.io", &["jobsets"][..]),
        ("leaderworkerset.x-k8s.io", &["leaderworkersets"][..]),
        (
            "kubeflow.org",
            &[
                "pytorchjobs",
                "mpijobs",
                "tfjobs",
                "jaxjobs",
                "xgboostjobs",
                "paddlejobs",
            ][..],
        ),
        ("trainer.kubeflow.org", &["trainjobs"][..]),
        ("ray.io", &["rayclusters", "rayjobs"][..]),
    ] {
        for r in rs {
            want.insert(expect(g, r, phalanx::rbac::OWNER_RESOURCE_VERBS));
        }
    }
    let granted = |g: &str, r: &str, v: &String| {
        got.iter()
            .any(|(gg, rr, verbs)| gg == g && rr == r && verbs.contains(v))
    };
    let missing: Vec<String> = want
        .iter()
        .flat_map(|(g, r, verbs)| {
            verbs
                .iter()
                .filter(|v| !granted(g, r, v))
                .map(move |v| format!("{v} {g}/{r}"))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "the ClusterRole does not grant what the code calls (phalanx::rbac::CLUSTER_PERMISSIONS): {missing:?}"
    );
    assert_eq!(got, want, "ClusterRole rules differ from the least-privilege set");

    let binding = one(&docs, "ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["kind"], "ServiceAccount");
    assert_eq!(binding["subjects"][0]["namespace"], "phalanx-system");
    let sa = one(&docs, "ServiceAccount");
    assert_eq!(binding["subjects"][0]["name"], sa["metadata"]["name"]);
}

/// The leader-election Role of release `release` in `ns`, rendered with `extra`: (Role, RoleBinding, Deployment args).
fn lease_rbac(release: &str, ns: &str, extra: &[&str]) -> (Value, Value, Vec<String>) {
    let mut args = vec!["template", release, "charts/phalanx", "--namespace", ns];
    args.extend_from_slice(extra);
    let out = run_helm(&args);
    assert!(
        out.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> =
        serde_saphyr::from_multiple::<Value>(std::str::from_utf8(&out.stdout).expect("utf-8"))
            .expect("YAML")
            .into_iter()
            .filter(|v| !v.is_null())
            .collect();
    let dep = one(&docs, "Deployment");
    let args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    (
        one(&docs, "Role").clone(),
        one(&docs, "RoleBinding").clone(),
        args,
    )
}

#[test]
fn lease_role_grants_the_one_lease_in_the_lease_namespace() {
    let (role, rb, _) = lease_rbac("phalanx", "phalanx-system", &[]);
    assert_eq!(role["metadata"]["namespace"], "kube-system");
    assert_eq!(
        role["rules"],
        serde_json::json!([
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "resourceNames": ["phalanx-scheduler"], "verbs": ["get", "patch"]},
        ])
    );
    assert_eq!(rb["metadata"]["namespace"], "kube-system");
    assert_eq!(rb["roleRef"]["kind"], "Role");
    assert_eq!(rb["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(rb["subjects"][0]["namespace"], "phalanx-system");
    // No cluster-wide Lease access anywhere.
    for cr in find(&template(&[]), "ClusterRole") {
        assert!(
            !cr.to_string().contains("leases"),
            "ClusterRole must not grant leases"
        );
    }
}

/// Two releases of one scheduler name, in two namespaces, contend for one Lease (kube-system/<scheduler name>):
/// their Deployments pass the same Lease namespace and no Lease name (the binary names it after --scheduler-name),
/// and their Roles in that namespace do not collide. Chart 0.1.0 put each release's Lease in its own namespace.
#[test]
fn releases_of_one_scheduler_name_share_one_lease() {
    let (role_a, _, args_a) = lease_rbac("team-a", "ns-a", &[]);
    let (role_b, _, args_b) = lease_rbac("team-b", "ns-b", &[]);
    for args in [&args_a, &args_b] {
        assert!(
            args.contains(&"--scheduler-name=phalanx-scheduler".to_owned()),
            "{args:?}"
        );
        assert!(
            args.contains(&"--leader-elect-lease-namespace=kube-system".to_owned()),
            "{args:?}"
        );
        assert!(
            !args.iter().any(|a| a.starts_with("--leader-elect-lease-name=")),
            "the Lease name must follow the scheduler name: {args:?}"
        );
        let argv = std::iter::once("phalanx").chain(args.iter().map(String::as_str));
        let cli = <phalanx::cli::Cli as clap::Parser>::try_parse_from(argv).expect("chart args parse");
        let phalanx::cli::Command::Run(run) = cli.command else {
            panic!("the chart runs `phalanx run`")
        };
        let leader = phalanx::leader::LeaderConfig {
            lease_name: run.leader.lease_name.clone(),
            namespace: run.leader.lease_namespace.clone(),
            ..phalanx::leader::LeaderConfig::default()
        };
        assert_eq!(
            leader.lease_for(&run.scheduler_name),
            ("kube-system".to_owned(), "phalanx-scheduler".to_owned())
        );
    }
    assert_ne!(
        role_a["metadata"]["name"], role_b["metadata"]["name"],
        "both releases' Roles live in kube-system"
    );
    // Another scheduler name is another Lease, and its Role grants that one.
    let (role_c, _, args_c) = lease_rbac("team-c", "ns-c", &["--set", "scheduler.name=gpu-gang"]);
    assert!(args_c.contains(&"--scheduler-name=gpu-gang".to_owned()));
    assert_eq!(
        role_c["rules"][1]["resourceNames"],
        serde_json::json!(["gpu-gang"])
    );
    // And a namespace of one's own for the Lease, when asked.
    let (role_d, _, args_d) = lease_rbac("team-d", "ns-d", &["--set", "leaderElection.namespace=ns-d"]);
    assert_eq!(role_d["metadata"]["namespace"], "ns-d");
    assert!(args_d.contains(&"--leader-elect-lease-namespace=ns-d".to_owned()));
}

/// `kubeVersion` admits 1.34 to 1.38, pre-releases and distribution builds included (semver ranges admit a
/// pre-release only when the bound has one: hence `-0`), and refuses the versions around them.
#[test]
fn kube_version_admits_1_34_to_1_38() {
    for (version, admitted) in [
        ("v1.33.9", false),
        ("v1.34.0", true),
        ("v1.35.2-gke.1000", true),
        ("v1.37.2", true),
        ("v1.38.0-beta.0", true),
        ("v1.38.0", true),
        ("v1.39.0-alpha.1", false),
        ("v1.39.0", false),
    ] {
        let out = run_helm(&["template", "phalanx", "charts/phalanx", "--kube-version", version]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.success(), admitted, "{version}: {err}");
        if !admitted {
            assert!(err.contains("incompatible with Kubernetes"), "{version}: {err}");
        }
    }
}

#[test]
fn the_removed_lease_name_value_is_refused() {
    let out = run_helm(&[
        "template",
        "phalanx",
        "charts/phalanx",
        "--set",
        "leaderElection.leaseName=phalanx",
    ]);
    assert!(!out.status.success(), "rendering must fail");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("leaderElection.leaseName was removed"), "{err}");
}

#[test]
fn deployment_is_hardened_and_leader_elected() {
    let docs = template(&[]);
    let dep = one(&docs, "Deployment");
    assert_eq!(dep["metadata"]["namespace"], "phalanx-system");
    assert_eq!(dep["spec"]["replicas"], 2);
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(
        pod["serviceAccountName"],
        one(&docs, "ServiceAccount")["metadata"]["name"]
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    let c = &pod["containers"][0];
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert!(sc["capabilities"].get("add").is_none());
    assert!(
        c["resources"]["requests"]["cpu"].is_string(),
        "cpu request: {}",
        c["resources"]
    );
    assert!(
        c["resources"]["requests"]["memory"].is_string(),
        "memory request: {}",
        c["resources"]
    );
    let args: Vec<&str> = c["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(args.first(), Some(&"run"));
    for want in [
        "--leader-elect=true",
        "--leader-elect-lease-namespace=kube-system",
        "--scheduler-name=phalanx-scheduler",
        "--config=/etc/phalanx/phalanx.yaml",
        "--log-format=json",
        "--members-wait-warning=300",
    ] {
        assert!(args.contains(&want), "missing {want} in {args:?}");
    }
    // Without a live Deployment (helm template, first install) a rollout keeps a warm standby.
    assert_eq!(
        dep["spec"]["strategy"],
        serde_json::json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})
    );
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    // The binary accepts exactly these flags.
    let mut argv = vec!["phalanx"];
    argv.extend(args.iter().copied());
    <phalanx::cli::Cli as clap::Parser>::try_parse_from(&argv).expect("chart args are valid phalanx flags");

    // Configuration comes from the chart's ConfigMap, which holds config/phalanx.yaml verbatim.
    let cm_name = pod["volumes"][0]["configMap"]["name"]
        .as_str()
        .expect("config volume from a ConfigMap");
    let cm = find(&docs, "ConfigMap")
        .into_iter()
        .find(|d| d["metadata"]["name"] == cm_name)
        .expect("ConfigMap");
    let shipped =
        std::fs::read_to_string(repo_root().join("config/phalanx.yaml")).expect("config/phalanx.yaml");
    assert_eq!(cm["data"]["phalanx.yaml"].as_str(), Some(shipped.as_str()));
    phalanx::config::PhalanxConfig::parse(&shipped, "ConfigMap").expect("chart config validates");
}

#[test]
fn pdb_service_and_optional_service_monitor() {
    let docs = template(&[]);
    let pdb = one(&docs, "PodDisruptionBudget");
    let dep = one(&docs, "Deployment");
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        dep["spec"]["selector"]["matchLabels"]
    );
    let svc = one(&docs, "Service");
    assert_eq!(svc["spec"]["ports"][0]["name"], "http-metrics");
    assert!(
        find(&docs, "ServiceMonitor").is_empty(),
        "ServiceMonitor must be off by default"
    );

    let with_sm = template(&["--set", "serviceMonitor.enabled=true"]);
    let sm = one(&with_sm, "ServiceMonitor");
    assert_eq!(sm["spec"]["endpoints"][0]["path"], "/metrics");
}

#[test]
fn two_replicas_without_leader_election_is_refused() {
    let out = run_helm(&[
        "template",
        "phalanx",
        "charts/phalanx",
        "--set",
        "leaderElection.enabled=false",
    ]);
    assert!(!out.status.success(), "rendering must fail");
    assert!(String::from_utf8_lossy(&out.stderr).contains("leaderElection.enabled"));
    // One replica without leader election is fine (and has no Lease Role).
    let docs = template(&["--set", "leaderElection.enabled=false", "--set", "replicaCount=1"]);
    assert!(find(&docs, "Role").is_empty());
}

#[test]
fn chart_crds_equal_generated_crds() {
    let root = repo_root();
    let generated = std::fs::read(root.join("crds/phalanx.yaml")).expect("crds/phalanx.yaml");
    let chart_dir = root.join("charts/phalanx/crds");
    let mut chart_files: Vec<_> = std::fs::read_dir(&chart_dir)
        .expect("charts/phalanx/crds")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    chart_files.sort();
    assert_eq!(
        chart_files.len(),
        1,
        "charts/phalanx/crds must hold exactly phalanx.yaml: {chart_files:?}"
    );
    let chart = std::fs::read(&chart_files[0]).expect("chart CRDs");
    assert!(
        chart == generated,
        "charts/phalanx/crds differs from crds/phalanx.yaml"
    );
    assert_eq!(
        String::from_utf8(generated.clone()).expect("utf-8"),
        phalanx_api::crds::to_yaml()
    );

    // And helm installs exactly those.
    let docs = template(&["--include-crds"]);
    let rendered: BTreeSet<String> = find(&docs, "CustomResourceDefinition")
        .iter()
        .map(|d| d["metadata"]["name"].to_string())
        .collect();
    let want: BTreeSet<String> =
        serde_saphyr::from_multiple::<Value>(std::str::from_utf8(&generated).expect("utf-8"))
            .expect("CRD YAML")
            .iter()
            .filter(|d| !d.is_null())
            .map(|d| d["metadata"]["name"].to_string())
            .collect();
    assert_eq!(rendered, want);
    assert_eq!(want.len(), 3, "Workload, PodGroup, CompositePodGroup");
}

#[test]
fn config_value_replaces_the_shipped_file() {
    let custom = "apiVersion: config.phalanx.dev/v1alpha1\nkind: PhalanxConfiguration\nscheduler:\n  scoringStrategy: MostAllocated\n";
    let docs = template(&["--set-string", &format!("config={custom}")]);
    let cm = find(&docs, "ConfigMap").into_iter().next().expect("ConfigMap");
    assert_eq!(cm["data"]["phalanx.yaml"].as_str(), Some(custom));
    phalanx::config::PhalanxConfig::parse(custom, "values").expect("custom config validates");
    // A different configuration rolls the pods (checksum annotation changes).
    let default = template(&[]);
    let checksum = |d: &[Value]| {
        one(d, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/config"].clone()
    };
    assert_ne!(checksum(&docs), checksum(&default));
}

/// What `.Capabilities.APIVersions.Has` must find for the admission policies (Kubernetes 1.36 and later).
const MAP_CAPABILITY: &str = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy";

/// The objects of `files/admission-policies.yaml`, the one source of the policies.
fn policy_file() -> Vec<Value> {
    let text = std::fs::read_to_string(repo_root().join("charts/phalanx/files/admission-policies.yaml"))
        .expect("charts/phalanx/files/admission-policies.yaml");
    serde_saphyr::from_multiple::<Value>(&text)
        .expect("admission-policies.yaml is YAML")
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

fn admission_objects(docs: &[Value]) -> Vec<&Value> {
    docs.iter()
        .filter(|d| d["apiVersion"] == "admissionregistration.k8s.io/v1")
        .collect()
}

/// The policies render only where the API server serves MutatingAdmissionPolicy (helm's capabilities: discovery
/// on install, `--api-versions` for `helm template`, whose default set names no kinds) and
/// `admissionPolicies.enabled` allows it; then they are the file's objects, each renamed after the release (two
/// releases must not own one cluster-scoped object), with the chart's labels.
#[test]
fn admission_policies_render_where_served_and_equal_the_file() {
    assert!(
        admission_objects(&template(&[])).is_empty(),
        "rendered without the capability"
    );
    let disabled = template(&[
        "--api-versions",
        MAP_CAPABILITY,
        "--set",
        "admissionPolicies.enabled=false",
    ]);
    assert!(admission_objects(&disabled).is_empty(), "rendered while disabled");

    let file = policy_file();
    assert_eq!(file.len(), 4, "two policies and their bindings");
    for (release, prefix) in [("phalanx", "phalanx-"), ("other", "other-phalanx-")] {
        let docs = template_release(release, &["--api-versions", MAP_CAPABILITY]);
        let rendered = admission_objects(&docs);
        assert_eq!(rendered.len(), file.len(), "release {release}");
        // Helm orders the documents by kind; compare by (kind, name).
        let key = |v: &Value| (v["kind"].to_string(), v["metadata"]["name"].to_string());
        let mut got: Vec<Value> = rendered.into_iter().cloned().collect();
        for g in &mut got {
            let labels = g["metadata"]
                .as_object_mut()
                .and_then(|m| m.remove("labels"))
                .expect("the chart's labels");
            assert_eq!(labels["app.kubernetes.io/instance"], release);
        }
        got.sort_by_key(key);
        let rename = |v: &Value| {
            let name = v.as_str().expect("a name").trim_start_matches("phalanx-");
            Value::from(format!("{prefix}{name}"))
        };
        let mut want: Vec<Value> = file.clone();
        for w in &mut want {
            w["metadata"]["name"] = rename(&w["metadata"]["name"]);
            if w["kind"] == "MutatingAdmissionPolicyBinding" {
                w["spec"]["policyName"] = rename(&w["spec"]["policyName"]);
            }
        }
        want.sort_by_key(key);
        assert_eq!(got, want, "release {release}");
    }
}

/// The policies match creations of exactly the two group kinds of the CRDs, every version they serve, and add the
/// finalizers the controllers add; their priority cap is the CRDs' maximum.
#[test]
fn admission_policies_cover_the_crds_and_their_finalizers() {
    let crds: Vec<Value> = serde_saphyr::from_multiple::<Value>(&phalanx_api::crds::to_yaml())
        .expect("CRD YAML")
        .into_iter()
        .filter(|v| !v.is_null())
        .collect();
    let file = policy_file();
    let policies: Vec<&Value> = file
        .iter()
        .filter(|d| d["kind"] == "MutatingAdmissionPolicy")
        .collect();
    assert_eq!(policies.len(), 2);
    let strs = |v: &Value| -> BTreeSet<String> {
        v.as_array()
            .expect("a list")
            .iter()
            .map(|s| s.as_str().expect("a string").to_owned())
            .collect()
    };
    for p in &policies {
        assert_eq!(
            p["spec"]["failurePolicy"], "Ignore",
            "a group's creation must not depend on it"
        );
        let rules = p["spec"]["matchConstraints"]["resourceRules"]
            .as_array()
            .expect("resourceRules");
        assert_eq!(rules.len(), 1);
        let rule = &rules[0];
        assert_eq!(strs(&rule["operations"]), BTreeSet::from(["CREATE".to_owned()]));
        assert_eq!(
            strs(&rule["resources"]),
            BTreeSet::from(["podgroups".to_owned(), "compositepodgroups".to_owned()])
        );
        let versions = strs(&rule["apiVersions"]);
        for plural in ["podgroups", "compositepodgroups"] {
            let crd = crds
                .iter()
                .find(|c| c["spec"]["names"]["plural"] == plural)
                .expect("the group's CRD");
            assert_eq!(
                strs(&rule["apiGroups"]),
                BTreeSet::from([crd["spec"]["group"].as_str().unwrap().to_owned()])
            );
            for v in crd["spec"]["versions"].as_array().expect("versions") {
                let name = v["name"].as_str().expect("version name");
                assert!(
                    v["served"] == false || versions.contains("*") || versions.contains(name),
                    "{plural} {name} is served but not matched"
                );
                let max = &v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["priority"]["maximum"];
                assert_eq!(max.as_f64(), Some(1e9), "{plural} {name}: spec.priority maximum");
            }
        }
    }
    let text = serde_json::to_string(&file).expect("JSON");
    for finalizer in [
        phalanx_api::finalizers::POD_GROUP_PROTECTION,
        phalanx_api::finalizers::COMPOSITE_POD_GROUP_PROTECTION,
    ] {
        assert!(text.contains(finalizer), "{finalizer}");
    }
    assert!(text.contains("params.value <= 1000000000"), "the priority cap");
}

/// The image reference: `repository:tag` (the tag defaults to the chart's appVersion, the binary's version), and
/// `repository:tag@digest` once `image.digest` is set, as a released chart sets it to its multi-platform index.
#[test]
fn image_is_the_app_version_and_a_release_pins_its_digest() {
    let image = |extra: &[&str]| {
        one(&template(extra), "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .expect("image")
            .to_owned()
    };
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(image(&[]), format!("ghcr.io/phalanx-sched/phalanx:{version}"));
    let digest = format!("sha256:{}", "ab".repeat(32));
    assert_eq!(
        image(&[
            "--set",
            "image.repository=127.0.0.1:5000/phalanx",
            "--set",
            &format!("image.digest={digest}")
        ]),
        format!("127.0.0.1:5000/phalanx:{version}@{digest}")
    );
}
