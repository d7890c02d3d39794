//! An OCI registry on loopback for the image and release tests: `crane registry serve` (go-containerregistry's
//! in-memory registry, built from its Go module by `hack/build-crane.sh`), on a port the kernel picks.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context as _, ensure};

use crate::TestEnv;

/// The `crane` binary of `hack/build-crane.sh` (built from its Go module on first use, about a minute cold; cached
/// under `~/.cache/phalanx/bin/crane-<version>` after that).
///
/// # Errors
/// The script failed (its stderr went to this process's stderr) or printed no executable path.
pub fn crane_binary() -> anyhow::Result<PathBuf> {
    let out = Command::new("bash")
        .arg("hack/build-crane.sh")
        .current_dir(TestEnv::repo_root())
        .stderr(Stdio::inherit())
        .output()
        .context("running hack/build-crane.sh")?;
    ensure!(out.status.success(), "hack/build-crane.sh failed: {}", out.status);
    let bin = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    ensure!(
        bin.is_file(),
        "hack/build-crane.sh named no file: {}",
        bin.display()
    );
    Ok(bin)
}

/// A running `crane registry serve --address 127.0.0.1:0`: plain HTTP, blobs in memory, killed on drop.
pub struct LoopbackRegistry {
    child: Child,
    /// `127.0.0.1:<port>`, the registry part of image references (`<host>/<repository>:<tag>`).
    pub host: String,
}

impl LoopbackRegistry {
    /// Starts the registry with `crane` and waits for the line that names its port.
    ///
    /// # Errors
    /// crane could not be started or exited before naming a port.
    pub fn start(crane: &Path) -> anyhow::Result<Self> {
        let mut child = Command::new(crane)
            .args(["registry", "serve", "--address", "127.0.0.1:0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {} registry serve", crane.display()))?;
        let mut lines = BufReader::new(child.stderr.take().context("crane's stderr")?).lines();
        let Some(port) = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|l| l.split("serving on port ").nth(1).map(|p| p.trim().to_owned()))
        else {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("crane registry serve exited without naming its port");
        };
        // Keep draining its log so that it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Ok(Self {
            child,
            host: format!("127.0.0.1:{port}"),
        })
    }
}

impl Drop for LoopbackRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
