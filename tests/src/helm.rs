//! helm against the test environment's API server: install, upgrade and uninstall of `charts/phalanx` (or of an
//! older copy of it), with helm's own cache and config kept out of the user's home.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context as _, ensure};
use phalanx_testenv::TestEnv;

use crate::repo_root;

/// The helm binary of the test environment (`$PHALANX_BIN_DIR/helm`, built by hack/build-bins.sh), run from the
/// repository root with `--kubeconfig` of the test environment's admin.
pub struct Helm {
    bin: PathBuf,
    kubeconfig: PathBuf,
    home: PathBuf,
    /// The control plane's version (`kube-apiserver --version`), for the offline `helm template`.
    kube_version: Option<String>,
}

impl Helm {
    /// helm for `env`; its cache, config and data directories live under the system temp directory, one set per
    /// test process.
    pub fn new(env: &TestEnv) -> Self {
        let kube_version = Command::new(env.bin_dir().join("kube-apiserver"))
            .arg("--version")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|v| v.trim().trim_start_matches("Kubernetes ").to_owned())
            .filter(|v| v.starts_with('v'));
        Self {
            bin: env.bin_dir().join("helm"),
            kubeconfig: env.kubeconfig_path().to_owned(),
            home: std::env::temp_dir().join(format!("phalanx-e2e-helm-{}", std::process::id())),
            kube_version,
        }
    }

    /// Runs `helm ARGS` against the cluster and returns its output, whatever its exit status.
    ///
    /// # Errors
    /// helm could not be started.
    pub fn output(&self, args: &[&str]) -> anyhow::Result<Output> {
        let mut args = args.to_vec();
        // `helm template` asks no server: it checks the chart's kubeVersion (1.34 to 1.38) against its default,
        // v1.20 for a helm built without the client-go stamp of helm's Makefile (`pkg/chartutil/capabilities.go`),
        // so it is told the control plane's version.
        if let (Some(&"template"), Some(v)) = (args.first(), &self.kube_version)
            && !args.contains(&"--kube-version")
        {
            args.extend(["--kube-version", v]);
        }
        Command::new(&self.bin)
            .args(&args)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .current_dir(repo_root())
            .env("HELM_CACHE_HOME", self.home.join("cache"))
            .env("HELM_CONFIG_HOME", self.home.join("config"))
            .env("HELM_DATA_HOME", self.home.join("data"))
            .output()
            .with_context(|| format!("running {}", self.bin.display()))
    }

    /// Runs `helm ARGS` and returns its standard output; a non-zero exit is an error carrying helm's stderr.
    ///
    /// # Errors
    /// helm failed or printed something that is not UTF-8.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = self.output(args)?;
        ensure!(
            out.status.success(),
            "helm {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).context("helm output is not UTF-8")
    }
}

/// Value of `key: value` at the top level of a Chart.yaml.
fn chart_field(chart_yaml: &str, key: &str) -> Option<String> {
    chart_yaml
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .map(|v| v.trim().trim_matches('"').to_owned())
}

/// The chart version of `charts/phalanx/Chart.yaml` in the working tree.
///
/// # Errors
/// The file is missing or has no `version`.
pub fn chart_version() -> anyhow::Result<String> {
    let path = repo_root().join("charts/phalanx/Chart.yaml");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    chart_field(&text, "version").context("charts/phalanx/Chart.yaml has no version")
}

/// Copies the previous chart version into `dest/phalanx`, from git history: the chart as it was right before its
/// version last changed to the working tree's (its last state under the previous version, not merely the last
/// commit that touched Chart.yaml); or HEAD's chart when the working tree changed the version. Returns (that
/// version, the chart directory).
///
/// # Errors
/// No such commit (a shallow clone: fetch the history), or git or tar failed.
pub fn previous_chart(dest: &Path) -> anyhow::Result<(String, PathBuf)> {
    let current = chart_version()?;
    let git = |args: &[&str]| -> anyhow::Result<Vec<u8>> {
        let out = Command::new("git")
            .args(args)
            .current_dir(repo_root())
            .output()
            .context("running git")?;
        ensure!(
            out.status.success(),
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(out.stdout)
    };
    let version_at = |rev: &str| -> anyhow::Result<Option<String>> {
        let text = String::from_utf8(git(&["show", &format!("{rev}:charts/phalanx/Chart.yaml")])?)?;
        Ok(chart_field(&text, "version"))
    };
    // The oldest commit of the current version's unbroken run, newest first: its parent holds the previous one.
    let commits = String::from_utf8(git(&["log", "--format=%H", "--", "charts/phalanx/Chart.yaml"])?)?;
    let mut rev = "HEAD".to_owned();
    for commit in commits.lines() {
        if version_at(commit)?.as_deref() != Some(current.as_str()) {
            break;
        }
        rev = format!("{commit}^");
    }
    let version = version_at(&rev)?
        .filter(|v| *v != current)
        .with_context(|| {
            format!(
                "no earlier chart version than {current} in git history (a shallow clone? `git fetch --unshallow`)"
            )
        })?;
    let archive = git(&["archive", "--format=tar", &rev, "charts/phalanx"])?;
    std::fs::create_dir_all(dest)?;
    let mut tar = Command::new("tar")
        .args(["-x", "--strip-components=1", "-C"])
        .arg(dest)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .context("running tar")?;
    std::io::Write::write_all(tar.stdin.as_mut().context("tar stdin")?, &archive)?;
    drop(tar.stdin.take());
    ensure!(tar.wait()?.success(), "tar -x of charts/phalanx at {rev} failed");
    Ok((version, dest.join("phalanx")))
}
