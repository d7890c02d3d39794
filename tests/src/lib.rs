//! End-to-end tests of Phalanx on a real control plane (see `tests/tests/`), and the helpers they share:
//! rendering the Helm chart and applying it with kube, helm against the cluster ([`helm`]), a client or a
//! kubeconfig authenticated as the chart's ServiceAccount, the `phalanx` binary run the way the chart's Deployment
//! runs it ([`process`]), the quick start's fake GPU nodes, and the samples.
//!
//! Everything here talks to the API server that `phalanx-testenv` starts; nothing is mocked.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::api::{DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::config::AuthInfo;
use kube::discovery::{self, Scope};
use kube::{Api, Client, ResourceExt};
use phalanx_testenv::{FakeNode, TestEnv};
use serde_json::Value;

pub mod helm;
pub mod process;

/// Field manager of everything the tests apply.
pub const FIELD_MANAGER: &str = "phalanx-e2e";
/// Rack label of the quick start's nodes (the samples' topology key).
pub const RACK_LABEL: &str = "topology.kubernetes.io/rack";

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap_or_else(|_| PathBuf::from(".."))
}

/// Renders `charts/phalanx` with `helm template <release> --namespace <ns> [extra...]` (helm from the test
/// environment's binary directory) and returns the objects, in the order helm prints them.
///
/// # Errors
/// helm fails or prints something that is not a list of Kubernetes objects.
pub fn helm_template(
    env: &TestEnv,
    release: &str,
    ns: &str,
    extra: &[&str],
) -> anyhow::Result<Vec<DynamicObject>> {
    let mut args = vec!["template", release, "charts/phalanx", "--namespace", ns];
    args.extend_from_slice(extra);
    parse_objects(&helm::Helm::new(env).run(&args)?)
}

/// Parses a multi-document YAML stream into objects; empty documents are skipped.
///
/// # Errors
/// The text is not YAML or a document is not an object with apiVersion/kind/metadata.
pub fn parse_objects(yaml: &str) -> anyhow::Result<Vec<DynamicObject>> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).context("parsing YAML")?;
    docs.into_iter()
        .filter(|d| !d.is_null())
        .map(|d| serde_json::from_value::<DynamicObject>(d).context("document is not a Kubernetes object"))
        .collect()
}

/// The API of `obj`'s kind, resolved through discovery (so any installed kind works), in its namespace or, for a
/// namespaced kind without one, in `default_ns`; with `obj` given that namespace.
async fn dynamic_api(
    client: &Client,
    obj: &DynamicObject,
    default_ns: &str,
) -> anyhow::Result<(Api<DynamicObject>, DynamicObject)> {
    let types = obj.types.as_ref().context("object without apiVersion/kind")?;
    let gvk = GroupVersionKind::try_from(types).context("bad apiVersion")?;
    let (ar, caps) = discovery::pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("discovering {}/{}", types.api_version, types.kind))?;
    let mut obj = obj.clone();
    let api = match caps.scope {
        Scope::Namespaced => {
            let ns = obj.namespace().unwrap_or_else(|| default_ns.to_owned());
            obj.metadata.namespace = Some(ns.clone());
            Api::namespaced_with(client.clone(), &ns, &ar)
        }
        Scope::Cluster => Api::all_with(client.clone(), &ar),
    };
    Ok((api, obj))
}

/// Server-side applies `objects` (force, field manager [`FIELD_MANAGER`]); namespaced objects without a namespace
/// go to `default_ns`. Each kind is resolved through discovery, so any installed kind works.
///
/// # Errors
/// Discovery or apply failed; the error names the object.
pub async fn apply_objects(
    client: &Client,
    objects: &[DynamicObject],
    default_ns: &str,
) -> anyhow::Result<()> {
    for obj in objects {
        let (api, obj) = dynamic_api(client, obj, default_ns).await?;
        let name = obj.name_any();
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&obj),
        )
        .await
        .with_context(|| {
            format!(
                "applying {} {name}",
                obj.types.as_ref().map(|t| t.kind.as_str()).unwrap_or("?")
            )
        })?;
    }
    Ok(())
}

/// Reads `obj` (kind, namespace or `default_ns`, name) back from the API server: `Some` with the live object, `None`
/// when it does not exist.
///
/// # Errors
/// Discovery failed or the read failed otherwise than with 404.
pub async fn get_object(
    client: &Client,
    obj: &DynamicObject,
    default_ns: &str,
) -> anyhow::Result<Option<DynamicObject>> {
    let (api, obj) = dynamic_api(client, obj, default_ns).await?;
    Ok(api.get_opt(&obj.name_any()).await?)
}

/// A client that authenticates as ServiceAccount `ns/sa` with a fresh bound token (TokenRequest API), against the
/// test environment's API server. Everything done through it is subject to the RBAC bound to that account.
///
/// # Errors
/// The token request or the client build failed.
pub async fn service_account_client(
    env: &TestEnv,
    admin: &Client,
    ns: &str,
    sa: &str,
) -> anyhow::Result<Client> {
    let token = service_account_token(admin, ns, sa).await?;
    let mut config = env.config().await?;
    config.auth_info = AuthInfo {
        token: Some(token.into()),
        ..AuthInfo::default()
    };
    config.default_namespace = ns.to_owned();
    Ok(Client::try_from(config)?)
}

/// A fresh bound token (TokenRequest API, valid for an hour) of ServiceAccount `ns/sa`.
///
/// # Errors
/// The token request failed or returned no token.
pub async fn service_account_token(admin: &Client, ns: &str, sa: &str) -> anyhow::Result<String> {
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), ns);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let issued = sas
        .create_token_request(sa, &PostParams::default(), &request)
        .await
        .with_context(|| format!("requesting a token for ServiceAccount {ns}/{sa}"))?;
    let token = issued.status.and_then(|s| s.token).filter(|t| !t.is_empty());
    token.with_context(|| format!("the TokenRequest for {ns}/{sa} returned no token"))
}

/// Writes to `path` a kubeconfig for the test environment's API server that authenticates with a fresh token of
/// ServiceAccount `ns/sa` (as `hack/quickstart.sh` does with `kubectl create token`), for a child process such as
/// the `phalanx` binary.
///
/// # Errors
/// The admin kubeconfig cannot be read, the token request failed, or the file cannot be written.
pub async fn service_account_kubeconfig(
    env: &TestEnv,
    admin: &Client,
    ns: &str,
    sa: &str,
    path: &Path,
) -> anyhow::Result<()> {
    let kc = kube::config::Kubeconfig::read_from(env.kubeconfig_path())?;
    let cluster = kc
        .clusters
        .first()
        .and_then(|c| c.cluster.clone())
        .context("the test kubeconfig has no cluster")?;
    let server = cluster.server.context("the test kubeconfig has no server")?;
    let ca = cluster
        .certificate_authority_data
        .context("the test kubeconfig has no certificate-authority-data")?;
    let token = service_account_token(admin, ns, sa).await?;
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster: {{server: \"{server}\", \
         certificate-authority-data: \"{ca}\"}}\nusers:\n- name: {sa}\n  user: {{token: \"{token}\"}}\n\
         contexts:\n- name: sa\n  context: {{cluster: test, user: {sa}, namespace: {ns}}}\ncurrent-context: sa\n"
    );
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// The sample nodes of `config/samples/fake-gpu-nodes.yaml` (8 kwok GPU nodes in racks `rack-a`/`rack-b`), created
/// as `<prefix>-<name>` with the same capacity and labels and labelled for `test_ns` so a scheduler under test can
/// select them. This is the cluster the quick start runs on.
///
/// # Errors
/// The file does not parse, or a node could not be created or did not become Ready.
pub async fn create_sample_nodes(client: &Client, prefix: &str, test_ns: &str) -> anyhow::Result<Vec<Node>> {
    let path = repo_root().join("config/samples/fake-gpu-nodes.yaml");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).context("parsing the sample nodes")?;
    let mut nodes = Vec::new();
    for doc in docs.into_iter().filter(|d| d["kind"] == "Node") {
        let sample: Node = serde_json::from_value(doc).context("sample Node")?;
        let name = format!("{prefix}-{}", sample.name_any());
        let mut fake = FakeNode::new(&name).test_namespace(test_ns);
        for (k, v) in sample.labels() {
            if k != "kubernetes.io/hostname" {
                fake = fake.label(k, v);
            }
        }
        let capacity = sample
            .status
            .as_ref()
            .and_then(|s| s.capacity.clone())
            .unwrap_or_default();
        ensure!(
            capacity.contains_key("nvidia.com/gpu"),
            "sample node {name} has no nvidia.com/gpu"
        );
        for (k, q) in capacity {
            fake = fake.resource(k, q.0);
        }
        nodes.push(fake.create(client).await?);
    }
    ensure!(nodes.len() == 8, "expected 8 sample nodes, found {}", nodes.len());
    Ok(nodes)
}

/// The namespaced objects in `config/samples/*.yaml` (Nodes left out), ordered so that groups exist before the pods that join them
/// (Workload, CompositePodGroup, PodGroup, then everything else).
///
/// # Errors
/// The directory is missing or a file does not parse.
pub fn sample_objects() -> anyhow::Result<Vec<DynamicObject>> {
    let dir = repo_root().join("config/samples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no samples in {}", dir.display());
    }
    let mut objects = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f)?;
        let parsed = parse_objects(&text).with_context(|| format!("parsing {}", f.display()))?;
        // Nodes are cluster-scoped: tests create their own copies (create_sample_nodes).
        objects.extend(
            parsed
                .into_iter()
                .filter(|o| o.types.as_ref().is_none_or(|t| t.kind != "Node")),
        );
    }
    let rank = |o: &DynamicObject| match o.types.as_ref().map(|t| t.kind.as_str()) {
        Some("Workload") => 0,
        Some("CompositePodGroup") => 1,
        Some("PodGroup") => 2,
        _ => 3,
    };
    objects.sort_by_key(rank);
    Ok(objects)
}

/// GETs `path` from a plain-HTTP server at `addr` and returns (status code, body). Enough for /metrics and
/// /readyz without an HTTP client dependency.
///
/// # Errors
/// Connection or protocol errors.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream =
        tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr)).await??;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut buf)).await??;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").context("no HTTP header end")?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("no HTTP status code")?;
    Ok((code, body.to_owned()))
}
