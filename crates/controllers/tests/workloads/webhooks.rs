//! Serving certificates and webhook registrations of the workload controllers: each controller's webhooks are
//! registered by URL on loopback, with a caBundle from a CA made here with openssl.

use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::processes::{FIELD_MANAGER, run};

/// A CA and a serving certificate for IP 127.0.0.1 (`tls.crt`/`tls.key` in `dir/certs`); returns the CA's PEM.
pub fn make_certs(dir: &Path, name: &str) -> Result<String> {
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs)?;
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let c = |f: &str| certs.join(f).to_string_lossy().into_owned();
    run(Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"])
        .args(["-subj", &format!("/CN=phalanx-{name}-test-ca")])
        .args(["-keyout", &p("ca.key"), "-out", &p("ca.crt")]))?;
    run(Command::new("openssl")
        .args(["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1"])
        .args(["-keyout", &c("tls.key"), "-out", &p("tls.csr")]))?;
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n")?;
    run(Command::new("openssl")
        .args(["x509", "-req", "-days", "2", "-CAcreateserial"])
        .args(["-in", &p("tls.csr"), "-CA", &p("ca.crt"), "-CAkey", &p("ca.key")])
        .args(["-extfile", &p("ext.cnf"), "-out", &c("tls.crt")]))?;
    Ok(std::fs::read_to_string(dir.join("ca.crt"))?)
}

/// The certificates Kubeflow Trainer's cert rotator (open-policy-agent/cert-controller) accepts as they are instead
/// of making its own (which it would write to a Secret and wait to see mounted): in `dir`, `ca.crt` and `ca.key`
/// (PKCS#1, the rotator parses it so) of a CA named `kubeflow-trainer-ca`, and `tls.crt`/`tls.key` for
/// `dns_name` and 127.0.0.1; both valid beyond the rotator's 90-day lookahead. Returns the four files' contents
/// as `(ca.crt, ca.key, tls.crt, tls.key)`.
pub fn trainer_certs(dir: &Path, dns_name: &str) -> Result<[String; 4]> {
    std::fs::create_dir_all(dir)?;
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
    for key in ["ca.key", "tls.key"] {
        run(Command::new("openssl").args(["genrsa", "-traditional", "-out", &p(key), "2048"]))?;
    }
    run(Command::new("openssl")
        .args(["req", "-x509", "-new", "-key", &p("ca.key"), "-days", "3650"])
        .args(["-subj", "/O=kubeflow-trainer/CN=kubeflow-trainer-ca"])
        .args(["-addext", "subjectAltName=DNS:kubeflow-trainer-ca"])
        .args(["-addext", "basicConstraints=critical,CA:TRUE"])
        .args(["-addext", "keyUsage=critical,keyCertSign,digitalSignature"])
        .args(["-out", &p("ca.crt")]))?;
    run(Command::new("openssl")
        .args([
            "req",
            "-new",
            "-key",
            &p("tls.key"),
            "-subj",
            &format!("/CN={dns_name}"),
        ])
        .args(["-out", &p("tls.csr")]))?;
    std::fs::write(
        dir.join("ext.cnf"),
        format!(
            "subjectAltName=DNS:{dns_name},IP:127.0.0.1\nextendedKeyUsage=serverAuth\n\
             keyUsage=critical,digitalSignature,keyEncipherment\n"
        ),
    )?;
    run(Command::new("openssl")
        .args(["x509", "-req", "-days", "365", "-CAcreateserial"])
        .args(["-in", &p("tls.csr"), "-CA", &p("ca.crt"), "-CAkey", &p("ca.key")])
        .args(["-extfile", &p("ext.cnf"), "-out", &p("tls.crt")]))?;
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).with_context(|| format!("reading {}", p(f)));
    Ok([
        read("ca.crt")?,
        read("ca.key")?,
        read("tls.crt")?,
        read("tls.key")?,
    ])
}

/// How a controller's webhook manifests become registrations on loopback.
pub struct Registration<'a> {
    /// The controller, for messages.
    pub controller: &'a str,
    /// The name of each configuration by kind (`"mutating"` or `"validating"`).
    pub name: &'a dyn Fn(&str) -> String,
    /// The label every pod of the controller's objects carries: its pod webhooks get an objectSelector
    /// `<label> Exists`; `None` when it has no pod webhooks.
    pub pod_label: Option<&'a str>,
    /// The webhook server's port on 127.0.0.1.
    pub port: u16,
    /// The CA's PEM, the caBundle.
    pub ca: &'a str,
}

/// The controller's webhook configurations from its `webhook.yaml` (a MutatingWebhookConfiguration, a
/// ValidatingWebhookConfiguration or both), named by [`Registration::name`], every webhook pointed at
/// `https://127.0.0.1:<port><service.path>` with the CA as caBundle, and the pod webhooks narrowed to the pods of
/// the controller's own objects (an objectSelector on [`Registration::pod_label`]).
pub fn webhooks(
    r: &Registration<'_>,
    manifest: &str,
) -> Result<(
    Option<MutatingWebhookConfiguration>,
    Option<ValidatingWebhookConfiguration>,
)> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(manifest)
        .with_context(|| format!("parsing {}'s webhook manifests", r.controller))?;
    let mut mutating = None;
    let mut validating = None;
    for mut d in docs {
        let kind = d["kind"].as_str().unwrap_or_default().to_string();
        let short = if kind.starts_with("Mutating") {
            "mutating"
        } else {
            "validating"
        };
        let mut hooks = d["webhooks"].as_array().cloned().unwrap_or_default();
        for w in &mut hooks {
            let path = w["clientConfig"]["service"]["path"]
                .as_str()
                .with_context(|| format!("{} webhook {} has no service.path", r.controller, w["name"]))?
                .to_string();
            w["clientConfig"] = json!({ "url": format!("https://127.0.0.1:{}{path}", r.port) });
            let on_pods = w["rules"].as_array().into_iter().flatten().any(|rule| {
                rule["resources"]
                    .as_array()
                    .is_some_and(|rs| rs.iter().any(|x| x == "pods"))
            });
            if on_pods {
                let label = r.pod_label.with_context(|| {
                    format!(
                        "{} has a pod webhook {} but no pod label to narrow it",
                        r.controller, w["name"]
                    )
                })?;
                w["objectSelector"] = json!({ "matchExpressions": [{ "key": label, "operator": "Exists" }] });
            }
        }
        d["webhooks"] = Value::Array(hooks);
        d["metadata"] = json!({ "name": (r.name)(short) });
        let bundle = || Some(ByteString(r.ca.as_bytes().to_vec()));
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
    ensure!(
        mutating.is_some() || validating.is_some(),
        "{}: its webhook.yaml has no Mutating- or ValidatingWebhookConfiguration",
        r.controller
    );
    Ok((mutating, validating))
}

/// Registers the controller's webhooks ([`webhooks`]) by server-side apply (fixed names, so a later run on a reused
/// cluster replaces a stale registration instead of adding one).
pub async fn register(client: &Client, r: &Registration<'_>, manifest: &str) -> Result<()> {
    let (m, v) = webhooks(r, manifest)?;
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    if let Some(m) = m {
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .patch(&m.name_any(), &pp, &Patch::Apply(&m))
            .await
            .with_context(|| format!("registering {}'s mutating webhooks", r.controller))?;
    }
    if let Some(v) = v {
        Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .patch(&v.name_any(), &pp, &Patch::Apply(&v))
            .await
            .with_context(|| format!("registering {}'s validating webhooks", r.controller))?;
    }
    Ok(())
}
