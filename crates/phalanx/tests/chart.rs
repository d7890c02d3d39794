//! The Helm chart (`charts/phalanx`): `helm lint` passes and `helm template` renders least-privilege RBAC, the
//! hardened Deployment and the same CRDs as `crds/phalanx.yaml`.
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

fn run_helm(args: &[&str]) -> std::process::Output {
    Command::new(helm())
        .args(args)
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
    let mut args = vec![
        "template",
        "phalanx",
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

#[test]
fn cluster_role_is_exactly_least_privilege() {
    let docs = template(&[]);
    let role = one(&docs, "ClusterRole");
    let got = rule_set(&role["rules"]);
    let read = ["get", "list", "watch"];
    let mut want = BTreeSet::from([
        // delete: the scheduler evicts preemption victims.
        expect("", "pods", &["get", "list", "watch", "delete"]),
        expect("", "pods/binding", &["create"]),
        expect("", "pods/status", &["patch"]),
        expect("", "events", &["create"]),
        expect("events.k8s.io", "events", &["create", "patch"]),
        expect("", "nodes", &read),
        expect("policy", "poddisruptionbudgets", &read),
        expect("scheduling.k8s.io", "priorityclasses", &read),
    ]);
    // Owner integration: metadata caches and gets of the built-in owners and of the listed custom owners.
    want.insert(expect("batch", "jobs", &read));
    for r in ["replicasets", "deployments", "statefulsets"] {
        want.insert(expect("apps", r, &read));
    }
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
            want.insert(expect(g, r, &read));
        }
    }
    for kind in ["workloads", "podgroups", "compositepodgroups"] {
        // create: the owner integration applies the Workload and PodGroup of annotated owners.
        let verbs: &[&str] = if kind == "compositepodgroups" {
            &["get", "list", "watch", "patch", "update"]
        } else {
            &["get", "list", "watch", "create", "patch", "update"]
        };
        want.insert(expect("scheduling.phalanx.dev", kind, verbs));
        want.insert(expect(
            "scheduling.phalanx.dev",
            &format!("{kind}/status"),
            &["get", "patch", "update"],
        ));
        want.insert(expect(
            "scheduling.phalanx.dev",
            &format!("{kind}/finalizers"),
            &["update"],
        ));
    }
    assert_eq!(got, want, "ClusterRole rules differ from the least-privilege set");

    let binding = one(&docs, "ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["kind"], "ServiceAccount");
    assert_eq!(binding["subjects"][0]["namespace"], "phalanx-system");
    let sa = one(&docs, "ServiceAccount");
    assert_eq!(binding["subjects"][0]["name"], sa["metadata"]["name"]);
}

#[test]
fn leases_only_in_release_namespace() {
    let docs = template(&[]);
    let role = one(&docs, "Role");
    assert_eq!(role["metadata"]["namespace"], "phalanx-system");
    assert_eq!(
        rule_set(&role["rules"]),
        BTreeSet::from([expect(
            "coordination.k8s.io",
            "leases",
            &["get", "create", "patch"]
        )])
    );
    let rb = one(&docs, "RoleBinding");
    assert_eq!(rb["roleRef"]["kind"], "Role");
    assert_eq!(rb["roleRef"]["name"], role["metadata"]["name"]);
    // No cluster-wide Lease access anywhere.
    for cr in find(&docs, "ClusterRole") {
        assert!(
            !cr.to_string().contains("leases"),
            "ClusterRole must not grant leases"
        );
    }
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
        "--leader-elect-lease-namespace=phalanx-system",
        "--scheduler-name=phalanx-scheduler",
        "--config=/etc/phalanx/phalanx.yaml",
        "--log-format=json",
    ] {
        assert!(args.contains(&want), "missing {want} in {args:?}");
    }
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
