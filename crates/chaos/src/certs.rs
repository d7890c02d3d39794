//! One client certificate and kubeconfig per replica incarnation, signed by the control plane's CA.
//!
//! The API server's audit log names the authenticated user of every request, so a certificate per incarnation
//! (`CN=<identity>`) attributes each write to exactly one process, and the same string is the replica's Lease
//! holder identity. The group is `system:masters`: the suite tests scheduling under faults, not RBAC (the e2e tests
//! cover the chart's RBAC). Certificates are made with the `openssl` CLI, as `hack/cluster.sh` makes its own.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;

/// Where `hack/cluster.sh` keeps its CA (`<state>/pki/ca.{crt,key}`).
fn ca_paths(state_dir: &Path) -> (PathBuf, PathBuf) {
    let pki = state_dir.join("pki");
    (pki.join("ca.crt"), pki.join("ca.key"))
}

const CLIENT_EXTENSIONS: &str = "[client]\nbasicConstraints = critical,CA:FALSE\n\
keyUsage = critical,digitalSignature,keyEncipherment\nextendedKeyUsage = clientAuth\n";

fn openssl(args: &[&str], what: &str) -> anyhow::Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .with_context(|| format!("running openssl ({what})"))?;
    anyhow::ensure!(
        out.status.success(),
        "openssl failed ({what}): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Issues a client certificate for user `identity` in group `system:masters` and writes a kubeconfig for it that
/// talks to `server` (e.g. the fault proxy in front of the API server). Files go to `dir/<identity>.*`.
/// Returns the kubeconfig path.
///
/// # Errors
/// `openssl` is missing or fails, or a file cannot be written.
pub fn write_user_kubeconfig(
    state_dir: &Path,
    dir: &Path,
    identity: &str,
    server: &str,
) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (ca_crt, ca_key) = ca_paths(state_dir);
    let key = dir.join(format!("{identity}.key"));
    let csr = dir.join(format!("{identity}.csr"));
    let crt = dir.join(format!("{identity}.crt"));
    let ext = dir.join("client-ext.cnf");
    std::fs::write(&ext, CLIENT_EXTENSIONS).with_context(|| format!("writing {}", ext.display()))?;
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let subject = format!("/O=system:masters/CN={identity}");
    openssl(
        &[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &s(&key),
            "-out",
            &s(&csr),
            "-subj",
            &subject,
        ],
        "key and request",
    )?;
    let serial = format!("0x{:024x}", rand::random::<u128>() >> 32);
    openssl(
        &[
            "x509",
            "-req",
            "-in",
            &s(&csr),
            "-CA",
            &s(&ca_crt),
            "-CAkey",
            &s(&ca_key),
            "-set_serial",
            &serial,
            "-days",
            "2",
            "-sha256",
            "-extfile",
            &s(&ext),
            "-extensions",
            "client",
            "-out",
            &s(&crt),
        ],
        "signing",
    )?;
    let _ = std::fs::remove_file(&csr);
    let kubeconfig = dir.join(format!("{identity}.kubeconfig"));
    // File references instead of embedded data: no base64 needed, and the files stay for post-mortems.
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: chaos\n  cluster:\n    server: {server}\n    \
         certificate-authority: {ca}\nusers:\n- name: {identity}\n  user:\n    client-certificate: {crt}\n    \
         client-key: {key}\ncontexts:\n- name: chaos\n  context:\n    cluster: chaos\n    user: {identity}\n\
         current-context: chaos\n",
        ca = s(&ca_crt),
        crt = s(&crt),
        key = s(&key),
    );
    std::fs::write(&kubeconfig, text).with_context(|| format!("writing {}", kubeconfig.display()))?;
    Ok(kubeconfig)
}
