//! The samples under `config/samples` (and `examples/` below it) as a new user meets them: every manifest the README
//! or another sample names exists, every file of `config/samples/examples` is one the README shows, and every
//! object of every sample passes the real kube-apiserver's validation (server-side apply with `dryRun=All`, the
//! CRDs installed: Phalanx's, and those of the workload controllers whose kinds a sample uses, from their Go modules),
//! so a broken sample fails CI. Nothing is persisted but the PriorityClasses the samples' pods
//! name (the Priority admission plugin resolves them even in a dry run), which the test removes again.
//!
//! Run: `cargo test -p phalanx --test samples`. The dry-run test needs the control plane of phalanx-testenv and
//! never skips: without it the test fails with the harness's error.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, ensure};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::{Api, Client};
use phalanx_testenv::{TestEnv, apply_crds, create_namespace};

/// The repository root, from this crate's own manifest directory (`crates/phalanx`).
fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// Field manager of this test's applies.
const MANAGER: &str = "phalanx-samples-test";
/// The samples' directory, relative to the repository root.
const SAMPLES: &str = "config/samples";
/// The README's examples (not applied by the quick start).
const EXAMPLES: &str = "config/samples/examples";

/// Every `.yaml` file under `dir`, recursively, sorted.
fn yaml_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            out.extend(yaml_files(&path)?);
        } else if path.extension().is_some_and(|e| e == "yaml") {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// The `config/samples/...yaml` paths `text` names (as in `kubectl apply -f config/samples/x.yaml`).
fn named_samples(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(SAMPLES) {
        let tail = &rest[at..];
        let len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '-' | '_')))
            .unwrap_or(tail.len());
        let path = tail[..len].trim_end_matches('.');
        if path.ends_with(".yaml") {
            out.push(path.to_string());
        }
        rest = &tail[len..];
    }
    out
}

/// The README shows no sample that is missing, and ships no example it does not show: every `config/samples/...yaml`
/// that README.md, docs/*.md or a sample's own comments name exists, and every file of `config/samples/examples` is
/// named in README.md.
#[test]
fn every_named_sample_exists_and_every_example_is_shown() -> anyhow::Result<()> {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).context("reading README.md")?;
    let mut sources: Vec<(PathBuf, String)> = vec![(root.join("README.md"), readme.clone())];
    for entry in std::fs::read_dir(root.join("docs")).context("reading docs/")? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "md") {
            sources.push((path.clone(), std::fs::read_to_string(&path)?));
        }
    }
    for path in yaml_files(&root.join(SAMPLES))? {
        sources.push((path.clone(), std::fs::read_to_string(&path)?));
    }
    let mut missing = Vec::new();
    for (source, text) in &sources {
        for named in named_samples(text) {
            if !root.join(&named).is_file() {
                missing.push(format!("{} names {named}", source.display()));
            }
        }
    }
    ensure!(
        missing.is_empty(),
        "named samples that do not exist: {missing:#?}"
    );
    let shown = named_samples(&readme);
    let unshown: Vec<String> = yaml_files(&root.join(EXAMPLES))?
        .iter()
        .filter_map(|p| p.strip_prefix(&root).ok().map(|p| p.display().to_string()))
        .filter(|p| !shown.contains(p))
        .collect();
    ensure!(
        unshown.is_empty(),
        "examples the README never shows (config/samples/examples holds the README's): {unshown:?}"
    );
    Ok(())
}

/// The documents of one sample file; a `kind: List` is replaced by its items, as `kubectl apply` does.
fn documents(file: &Path) -> anyhow::Result<Vec<DynamicObject>> {
    let yaml = std::fs::read_to_string(file)?;
    let parsed: Vec<DynamicObject> = serde_saphyr::from_multiple(&yaml).context("parsing the YAML")?;
    let mut out = Vec::new();
    for obj in parsed {
        let kind = obj.types.as_ref().map(|t| t.kind.as_str());
        if kind == Some("List") {
            let items = obj.data.get("items").cloned().unwrap_or_default();
            let items: Vec<DynamicObject> = serde_json::from_value(items).context("the List's items")?;
            out.extend(items);
        } else {
            out.push(obj);
        }
    }
    Ok(out)
}

/// The workload controller (a name `hack/build-workloads.sh` knows) whose CRDs serve API group `group`.
fn workload_controller(group: &str) -> Option<&'static str> {
    match group {
        "jobset.x-k8s.io" => Some("jobset"),
        "leaderworkerset.x-k8s.io" => Some("lws"),
        "ray.io" => Some("kuberay"),
        "trainer.kubeflow.org" => Some("trainer"),
        "kubeflow.org" => Some("mpi-operator"),
        _ => None,
    }
}

/// The CRDs of `controllers`, read from their Go modules (`hack/build-workloads.sh --crds`: a module download, no
/// build), as one multi-document YAML.
fn workload_crds(root: &Path, controllers: &BTreeSet<&str>) -> anyhow::Result<String> {
    let out = std::process::Command::new(root.join("hack/build-workloads.sh"))
        .arg("--crds")
        .args(controllers)
        .output()
        .context("running hack/build-workloads.sh --crds (Go and the module proxy are needed)")?;
    ensure!(
        out.status.success(),
        "hack/build-workloads.sh --crds {controllers:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut yaml = String::new();
    for path in String::from_utf8_lossy(&out.stdout).lines() {
        yaml.push_str("\n---\n");
        yaml.push_str(&std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?);
    }
    Ok(yaml)
}

/// The Api for `obj`'s kind (from discovery), in `ns` when namespaced, with `obj`'s name.
async fn api_for(
    client: &Client,
    ns: &str,
    obj: &DynamicObject,
) -> anyhow::Result<(Api<DynamicObject>, String)> {
    let types = obj.types.clone().context("a document has no apiVersion/kind")?;
    let gvk = GroupVersionKind::try_from(&types)?;
    let name = obj
        .metadata
        .name
        .clone()
        .context("a document has no metadata.name")?;
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .with_context(|| {
            format!(
                "the API server does not serve {}/{}",
                types.api_version, types.kind
            )
        })?;
    let api = match caps.scope {
        Scope::Namespaced => Api::namespaced_with(client.clone(), ns, &resource),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    Ok((api, name))
}

/// Every object of every sample passes server-side apply with `dryRun=All` on the real API server (schema, CEL
/// rules, built-in validation and admission). The PriorityClasses of the samples are created for real first (only
/// those that do not exist yet, and only those are deleted again): pods name them, and the Priority admission
/// plugin refuses a pod whose class does not exist, also in a dry run.
#[tokio::test]
async fn every_sample_passes_server_side_dry_run() -> anyhow::Result<()> {
    let client = TestEnv::shared().client().await?;
    apply_crds(&client, &phalanx_api::crds::to_yaml()).await?;
    let ns = create_namespace(&client, "samples").await?;
    let root = repo_root();
    let files = yaml_files(&root.join(SAMPLES))?;
    ensure!(
        files.iter().any(|f| f.starts_with(root.join(EXAMPLES))),
        "no examples found under {EXAMPLES}: {files:?}"
    );
    let mut all = Vec::new();
    for file in &files {
        let docs = documents(file).with_context(|| format!("sample {}", file.display()))?;
        all.push((file, docs));
    }
    // Samples of workload controllers' kinds (an LWS): their CRDs, from the controllers' Go modules.
    let controllers: BTreeSet<&str> = all
        .iter()
        .flat_map(|(_, docs)| docs.iter())
        .filter_map(|o| o.types.as_ref())
        .filter_map(|t| workload_controller(t.api_version.rsplit_once('/').map_or("", |(g, _)| g)))
        .collect();
    if !controllers.is_empty() {
        apply_crds(&client, &workload_crds(&root, &controllers)?).await?;
    }

    let mut created_classes = Vec::new();
    for (file, docs) in &all {
        for obj in docs
            .iter()
            .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == "PriorityClass"))
        {
            let (api, name) = api_for(&client, &ns, obj).await?;
            if api.get_opt(&name).await?.is_none() {
                api.patch(&name, &PatchParams::apply(MANAGER), &Patch::Apply(obj))
                    .await
                    .with_context(|| format!("{}: creating PriorityClass {name}", file.display()))?;
                created_classes.push((api, name));
            }
        }
    }

    let mut checked = 0usize;
    let mut failures = Vec::new();
    for (file, docs) in &all {
        for obj in docs {
            let (api, name) = api_for(&client, &ns, obj).await?;
            let kind = obj.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default();
            let params = PatchParams::apply(MANAGER).dry_run();
            match api.patch(&name, &params, &Patch::Apply(obj)).await {
                Ok(_) => checked += 1,
                Err(e) => failures.push(format!("{}: {kind} {name}: {e}", file.display())),
            }
        }
    }
    for (api, name) in created_classes {
        api.delete(&name, &DeleteParams::default()).await?;
    }
    ensure!(
        failures.is_empty(),
        "samples the API server refuses: {failures:#?}"
    );
    ensure!(
        checked >= 50,
        "only {checked} objects checked in {} files",
        all.len()
    );
    Ok(())
}
