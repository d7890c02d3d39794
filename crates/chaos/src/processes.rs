//! The two `phalanx run` replicas: real child processes of the real binary, supervised the way a Deployment would
//! (an exited replica is started again, as a new incarnation with a new identity), and signalled on demand
//! (SIGKILL, SIGSTOP, SIGCONT).
//!
//! Clean-up: every replica joins the process group of an *anchor*, a small `sh` loop that lives as long as this
//! process. Dropping the [`Supervisor`] (also while unwinding from a panic) kills that group; if this process dies
//! without unwinding (SIGKILL, abort), the anchor notices within a second and kills its own group, so no replica
//! outlives the suite.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::jiff::Timestamp;
use rustix::process::{Pid, Signal, kill_process, kill_process_group};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::certs::write_user_kubeconfig;

/// Prefix of every replica identity (`replica-<slot>-<incarnation>`), which is both the client certificate's CN
/// (the audit log's user) and the Lease holder identity.
pub const IDENTITY_PREFIX: &str = "replica-";

/// How to run a replica.
#[derive(Debug, Clone)]
pub struct ReplicaSpec {
    /// The `phalanx` binary.
    pub binary: PathBuf,
    /// `hack/cluster.sh` state directory (for the CA).
    pub state_dir: PathBuf,
    /// Where certificates, kubeconfigs and logs of the replicas go.
    pub dir: PathBuf,
    /// API server URL the replicas use (the fault proxy).
    pub server: String,
    /// `--scheduler-name`.
    pub scheduler_name: String,
    /// `--node-selector`.
    pub node_selector: String,
    /// `--leader-elect-lease-name`.
    pub lease_name: String,
    /// `--leader-elect-lease-namespace`.
    pub lease_namespace: String,
    /// `--leader-elect-lease-duration`.
    pub lease_duration_secs: u64,
    /// `--leader-elect-renew-grace`.
    pub renew_grace_secs: u64,
}

/// How a replica incarnation ended.
#[derive(Debug, Clone)]
pub struct ExitRecord {
    /// Its identity.
    pub identity: String,
    /// When the supervisor noticed.
    pub at: Timestamp,
    /// Exit status as text (`exit status: 1`, `signal: 9 (SIGKILL)`).
    pub status: String,
    /// The suite stopped it on purpose (SIGKILL or SIGTERM).
    pub expected: bool,
    /// Why it stopped, from the end of its log (panic message, `phalanx run failed` error, lost Lease).
    pub reason: String,
}

/// The most telling line about why a replica stopped, from the end of its log.
fn exit_reason(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let find = |needle: &str| {
        lines
            .iter()
            .rev()
            .find(|l| l.contains(needle))
            .map(|l| l.trim().to_owned())
    };
    let panic = lines.iter().position(|l| l.contains("panicked at")).map(|i| {
        let msg = lines.get(i + 1).map_or("", |m| m.trim());
        format!("{} {msg}", lines[i].trim())
    });
    let line = panic
        .or_else(|| find("lost the Lease"))
        .or_else(|| find("phalanx run failed"))
        .unwrap_or_default();
    normalize(&line).chars().take(400).collect()
}

/// Drops what differs between two crashes of the same kind (the log line's timestamp, thread ids), so that the
/// report can group them.
fn normalize(line: &str) -> String {
    let line = match line.split_once(' ') {
        Some((first, rest)) if first.parse::<Timestamp>().is_ok() => rest.trim_start(),
        _ => line,
    };
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(open) = rest.find(" (") {
        let (head, tail) = rest.split_at(open);
        out.push_str(head);
        match tail[2..].find(')') {
            Some(close) if close > 0 && tail[2..2 + close].chars().all(|c| c.is_ascii_digit()) => {
                rest = &tail[3 + close..];
            }
            _ => {
                out.push_str(" (");
                rest = &tail[2..];
            }
        }
    }
    out.push_str(rest);
    out
}

struct Running {
    identity: String,
    pid: i32,
    metrics_port: u16,
    child: tokio::process::Child,
}

struct Slot {
    name: char,
    incarnation: u32,
    running: Option<Running>,
    hold: bool,
    killed: bool,
    restart_at: Option<tokio::time::Instant>,
}

struct Inner {
    spec: ReplicaSpec,
    anchor_pgid: i32,
    slots: Vec<Slot>,
    exits: Vec<ExitRecord>,
    /// Every identity ever started, with its slot.
    identities: BTreeMap<String, char>,
}

/// The anchor process: the process group leader of all replicas and their watchdog.
struct Anchor {
    child: std::process::Child,
    pgid: i32,
}

impl Anchor {
    fn spawn() -> anyhow::Result<Self> {
        let me = std::process::id();
        // `kill 0` signals the anchor's own group: the replicas and the anchor.
        let script = format!("while kill -0 {me} 2>/dev/null; do sleep 1; done; kill -KILL 0");
        let child = {
            use std::os::unix::process::CommandExt as _;
            std::process::Command::new("sh")
                .args(["-c", &script])
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting the anchor process")?
        };
        let pgid = i32::try_from(child.id()).context("pid")?;
        Ok(Self { child, pgid })
    }
}

impl Drop for Anchor {
    fn drop(&mut self) {
        if let Some(pid) = Pid::from_raw(self.pgid) {
            let _ = kill_process_group(pid, Signal::KILL);
        }
        let _ = self.child.wait();
    }
}

/// Supervises the two replicas. Dropping it kills them all.
pub struct Supervisor {
    inner: Arc<Mutex<Inner>>,
    task: tokio::task::JoinHandle<()>,
    // Declared last: dropped after the task is aborted, so nothing restarts a replica after the group is killed.
    _anchor: Anchor,
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn signal(pid: i32, sig: Signal) -> anyhow::Result<()> {
    let p = Pid::from_raw(pid).context("bad pid")?;
    kill_process(p, sig).with_context(|| format!("signalling pid {pid}"))
}

impl Inner {
    fn spawn(&mut self, idx: usize) -> anyhow::Result<()> {
        let slot = &mut self.slots[idx];
        slot.incarnation += 1;
        let identity = format!("{IDENTITY_PREFIX}{}-{}", slot.name, slot.incarnation);
        let spec = &self.spec;
        let kubeconfig = write_user_kubeconfig(&spec.state_dir, &spec.dir, &identity, &spec.server)?;
        let log_path = spec.dir.join(format!("{identity}.log"));
        let log =
            std::fs::File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
        let metrics_port = free_port()?;
        let child = tokio::process::Command::new(&spec.binary)
            .arg("run")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--scheduler-name", &spec.scheduler_name])
            .args(["--node-selector", &spec.node_selector])
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")])
            .args(["--log-format", "text", "--leader-elect"])
            .args(["--leader-elect-lease-name", &spec.lease_name])
            .args(["--leader-elect-lease-namespace", &spec.lease_namespace])
            .args(["--leader-elect-identity", &identity])
            .args([
                "--leader-elect-lease-duration",
                &spec.lease_duration_secs.to_string(),
            ])
            .args(["--leader-elect-renew-grace", &spec.renew_grace_secs.to_string()])
            .env(
                "RUST_LOG",
                std::env::var("CHAOS_REPLICA_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env_remove("KUBECONFIG")
            .process_group(self.anchor_pgid)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", spec.binary.display()))?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .context("replica has no pid")?;
        tracing::info!(%identity, pid, "replica started");
        self.identities.insert(identity.clone(), slot.name);
        slot.running = Some(Running {
            identity,
            pid,
            metrics_port,
            child,
        });
        slot.killed = false;
        Ok(())
    }

    /// Notices exits, records them and restarts slots that are not held (after a short backoff, like a kubelet's
    /// first restart).
    fn reap(&mut self) {
        let now = tokio::time::Instant::now();
        for idx in 0..self.slots.len() {
            let slot = &mut self.slots[idx];
            if let Some(r) = slot.running.as_mut()
                && let Ok(Some(status)) = r.child.try_wait()
            {
                tracing::info!(identity = %r.identity, %status, "replica exited");
                let log = self.spec.dir.join(format!("{}.log", r.identity));
                self.exits.push(ExitRecord {
                    identity: r.identity.clone(),
                    at: Timestamp::now(),
                    status: status.to_string(),
                    expected: slot.killed,
                    reason: if slot.killed {
                        String::new()
                    } else {
                        exit_reason(&log)
                    },
                });
                slot.running = None;
                slot.restart_at = Some(now + Duration::from_millis(500));
            }
            if slot.running.is_none() && !slot.hold && slot.restart_at.is_none_or(|t| t <= now) {
                slot.restart_at = None;
                if let Err(e) = self.spawn(idx) {
                    tracing::warn!(error = %format!("{e:#}"), "restarting a replica failed; retrying");
                    self.slots[idx].restart_at = Some(now + Duration::from_secs(1));
                }
            }
        }
    }
}

impl Supervisor {
    /// Starts replicas `a` and `b` and the supervision loop.
    ///
    /// # Errors
    /// The anchor or a replica cannot be started.
    pub fn start(spec: ReplicaSpec) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&spec.dir).with_context(|| format!("creating {}", spec.dir.display()))?;
        let anchor = Anchor::spawn()?;
        let slot = |name| Slot {
            name,
            incarnation: 0,
            running: None,
            hold: false,
            killed: false,
            restart_at: None,
        };
        let mut inner = Inner {
            spec,
            anchor_pgid: anchor.pgid,
            slots: vec![slot('a'), slot('b')],
            exits: Vec::new(),
            identities: BTreeMap::new(),
        };
        inner.spawn(0)?;
        inner.spawn(1)?;
        let inner = Arc::new(Mutex::new(inner));
        let weak = Arc::downgrade(&inner);
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let Some(inner) = weak.upgrade() else { return };
                if let Ok(mut i) = inner.lock() {
                    i.reap();
                }
            }
        });
        Ok(Self {
            inner,
            task,
            _anchor: anchor,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Identities of the incarnations running now.
    pub fn running(&self) -> Vec<String> {
        self.lock()
            .slots
            .iter()
            .filter_map(|s| s.running.as_ref().map(|r| r.identity.clone()))
            .collect()
    }

    /// Whether `user` is a replica identity (any incarnation, past or present).
    pub fn is_replica(user: &str) -> bool {
        user.starts_with(IDENTITY_PREFIX)
    }

    /// The slot (`a` or `b`) of an identity.
    pub fn slot_of(&self, identity: &str) -> Option<char> {
        self.lock().identities.get(identity).copied()
    }

    /// The running identity of the other slot than `identity`'s.
    pub fn other_running(&self, identity: &str) -> Option<String> {
        let slot = self.slot_of(identity)?;
        self.lock()
            .slots
            .iter()
            .filter(|s| s.name != slot)
            .find_map(|s| s.running.as_ref().map(|r| r.identity.clone()))
    }

    fn with_running<T>(&self, identity: &str, f: impl FnOnce(&mut Slot) -> T) -> anyhow::Result<T> {
        let mut inner = self.lock();
        let slot = inner
            .slots
            .iter_mut()
            .find(|s| s.running.as_ref().is_some_and(|r| r.identity == identity))
            .with_context(|| format!("replica {identity} is not running"))?;
        Ok(f(slot))
    }

    /// SIGKILLs `identity`. With `hold`, its slot is not restarted until [`Supervisor::release`].
    ///
    /// # Errors
    /// It does not run.
    pub fn kill(&self, identity: &str, hold: bool) -> anyhow::Result<()> {
        self.stop_with(identity, hold, Signal::KILL)
    }

    /// SIGTERMs `identity` (a graceful stop, as in a rolling update); like [`Supervisor::kill`] otherwise.
    ///
    /// # Errors
    /// It does not run.
    pub fn terminate(&self, identity: &str, hold: bool) -> anyhow::Result<()> {
        self.stop_with(identity, hold, Signal::TERM)
    }

    fn stop_with(&self, identity: &str, hold: bool, sig: Signal) -> anyhow::Result<()> {
        let pid = self.with_running(identity, |s| {
            s.killed = true;
            s.hold |= hold;
            s.running.as_ref().map(|r| r.pid)
        })?;
        signal(pid.context("no pid")?, sig)
    }

    /// Lets a held slot be restarted.
    pub fn release(&self, identity: &str) {
        if let Some(slot) = self.slot_of(identity) {
            for s in self.lock().slots.iter_mut().filter(|s| s.name == slot) {
                s.hold = false;
            }
        }
    }

    /// SIGSTOPs `identity` (it keeps its sockets; the kernel queues what the API server sends).
    ///
    /// # Errors
    /// It does not run.
    pub fn pause(&self, identity: &str) -> anyhow::Result<()> {
        let pid = self.with_running(identity, |s| s.running.as_ref().map(|r| r.pid))?;
        signal(pid.context("no pid")?, Signal::STOP)
    }

    /// SIGCONTs `identity`.
    ///
    /// # Errors
    /// It does not run.
    pub fn resume(&self, identity: &str) -> anyhow::Result<()> {
        let pid = self.with_running(identity, |s| s.running.as_ref().map(|r| r.pid))?;
        signal(pid.context("no pid")?, Signal::CONT)
    }

    /// Exits recorded since index `from` (see [`Supervisor::exit_count`]).
    pub fn exits_from(&self, from: usize) -> Vec<ExitRecord> {
        self.lock()
            .exits
            .get(from..)
            .map(<[ExitRecord]>::to_vec)
            .unwrap_or_default()
    }

    /// Exits recorded so far.
    pub fn exit_count(&self) -> usize {
        self.lock().exits.len()
    }

    /// Whether `identity` answers 200 on `/readyz` (caches synced: a warm standby).
    pub async fn ready(&self, identity: &str) -> bool {
        let port = self
            .with_running(identity, |s| s.running.as_ref().map(|r| r.metrics_port))
            .ok()
            .flatten();
        match port {
            Some(p) => http_status(p, "/readyz").await == Some(200),
            None => false,
        }
    }

    /// Kills every replica now (the anchor's group) and stops restarting them.
    pub fn kill_all(&self) {
        let pgid = {
            let mut inner = self.lock();
            for s in &mut inner.slots {
                s.hold = true;
            }
            inner.anchor_pgid
        };
        // The anchor is in the group too; it dies here, which is fine: the suite is over.
        if let Some(pid) = Pid::from_raw(pgid) {
            let _ = kill_process_group(pid, Signal::KILL);
        }
    }
}

/// Status code of `GET path` on `127.0.0.1:port`, `None` when nothing answers within 2 s.
async fn http_status(port: u16, path: &str) -> Option<u16> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        String::from_utf8_lossy(&buf)
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    tokio::time::timeout(Duration::from_secs(2), exchange)
        .await
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn crash_lines_of_one_kind_normalize_alike() {
        let a = "thread 'tokio-rt-worker' (1784) panicked at crates/x.rs:100:9: attempt to add with overflow";
        let b = "thread 'tokio-rt-worker' (2012) panicked at crates/x.rs:100:9: attempt to add with overflow";
        assert_eq!(normalize(a), normalize(b));
        assert_eq!(
            normalize(a),
            "thread 'tokio-rt-worker' panicked at crates/x.rs:100:9: attempt to add with overflow"
        );
        let lost = "2026-12-01T09:29:37.453789Z ERROR phalanx::leader: lost the Lease (fail-stop) reason=x";
        assert_eq!(
            normalize(lost),
            "ERROR phalanx::leader: lost the Lease (fail-stop) reason=x"
        );
    }
}
