//! The API server's audit log (policy `hack/audit-policy.yaml`): a tailer that parses it as it grows, the replicas'
//! writes in it, and invariant I6 (no write from a replica after its Lease expired).
//!
//! Attribution: every replica incarnation authenticates with its own client certificate whose CN is also its Lease
//! holder identity ([`crate::certs`]), so `user.username` names the process that sent a request. Times are the API
//! server's `requestReceivedTimestamp`: the moment the replica's request arrived, the latest moment the replica can
//! have decided to write. Lease times (`renewTime`) come from the replicas' clocks; all processes share this host's
//! clock.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;

use crate::invariants::{Invariant, Violation};
use crate::lease::{LeaseState, SharedLeases, Source};

/// One request, as the audit log tells it.
#[derive(Debug, Clone)]
pub struct AuditEvent {
    /// `user.username`.
    pub user: String,
    /// `create`, `patch`, `update`, `delete`, ...
    pub verb: String,
    /// `objectRef.resource` (`pods`, `podgroups`, `leases`, ...).
    pub resource: String,
    /// `objectRef.subresource` (`binding`, `status`, ...), empty for the main resource.
    pub subresource: String,
    /// `objectRef.namespace`.
    pub namespace: String,
    /// `objectRef.name`.
    pub name: String,
    /// `responseStatus.code` (0 when absent).
    pub code: u16,
    /// `requestReceivedTimestamp`.
    pub received: Timestamp,
    /// `stageTimestamp` (ResponseComplete).
    pub completed: Timestamp,
    /// For a `pods/binding` create: the target node (`requestObject.target.name`).
    pub bind_target: Option<String>,
    /// For an accepted write of the leader Lease: what it did and the version it produced.
    pub lease_write: Option<LeaseWrite>,
}

/// What an accepted write of the leader Lease did, from its `requestObject.spec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseWriteKind {
    /// Creates the Lease (the first replica to start does; kube-lease-manager creates it empty).
    Create,
    /// Sets `holderIdentity` to the writer: an election.
    Acquire,
    /// Sets `renewTime` without naming a holder: extends the writer's term (kube-lease-manager renews with an
    /// unconditional strategic-merge patch, so it lands whoever holds the Lease).
    Renew,
    /// Clears `holderIdentity`.
    Release,
    /// Anything else (e.g. the `leaseTransitions` patch after an acquisition).
    Other,
}

/// An accepted write of the leader Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseWrite {
    /// What it did.
    pub kind: LeaseWriteKind,
    /// resourceVersion of the version it produced.
    pub rv_after: u64,
    /// `holderIdentity` it left.
    pub holder_after: Option<String>,
}

fn lease_write_kind(verb: &str, user: &str, request: Option<&serde_json::Value>) -> LeaseWriteKind {
    if verb == "create" {
        return LeaseWriteKind::Create;
    }
    let spec = request.map(|r| &r["spec"]);
    match spec.and_then(|s| s.as_object()) {
        Some(s) if s.contains_key("holderIdentity") => match s["holderIdentity"].as_str() {
            Some(h) if h == user => LeaseWriteKind::Acquire,
            Some(_) => LeaseWriteKind::Other,
            None => LeaseWriteKind::Release,
        },
        Some(s) if s.contains_key("renewTime") => LeaseWriteKind::Renew,
        _ => LeaseWriteKind::Other,
    }
}

impl AuditEvent {
    /// `resource/subresource` (or just `resource`).
    pub fn what(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }

    /// A 2xx answer.
    pub fn accepted(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// An accepted `pods/binding` create.
    pub fn is_bind(&self) -> bool {
        self.resource == "pods" && self.subresource == "binding" && self.verb == "create" && self.accepted()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEvent {
    #[serde(default)]
    stage: String,
    #[serde(default)]
    verb: String,
    #[serde(default)]
    user: RawUser,
    #[serde(default)]
    object_ref: RawRef,
    #[serde(default)]
    response_status: Option<RawStatus>,
    request_received_timestamp: Timestamp,
    stage_timestamp: Timestamp,
    #[serde(default)]
    request_object: Option<serde_json::Value>,
    #[serde(default)]
    response_object: Option<serde_json::Value>,
}

#[derive(Deserialize, Default)]
struct RawUser {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize, Default)]
struct RawRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct RawStatus {
    #[serde(default)]
    code: u16,
}

#[derive(Default)]
struct Inner {
    offset: u64,
    partial: Vec<u8>,
    events: Vec<AuditEvent>,
    bad_lines: usize,
}

/// The tailed audit log. Cheap to clone.
#[derive(Clone)]
pub struct AuditLog {
    path: PathBuf,
    lease_name: String,
    leases: SharedLeases,
    inner: Arc<Mutex<Inner>>,
}

impl AuditLog {
    /// A reader of `path`; accepted writes to Lease `lease_name` feed `leases`.
    pub fn new(path: PathBuf, lease_name: &str, leases: SharedLeases) -> Self {
        Self {
            path,
            lease_name: lease_name.to_owned(),
            leases,
            inner: Arc::default(),
        }
    }

    /// Reads what was appended since the last call. The API server writes in blocking mode, so after this returns
    /// every request answered before the call is in [`AuditLog::events`].
    ///
    /// # Errors
    /// The file cannot be read (it appears with the API server's first audited request).
    pub fn poll(&self) -> anyhow::Result<()> {
        let mut inner = self
            .inner
            .lock()
            .map_err(|_| anyhow::anyhow!("audit state poisoned"))?;
        let mut file = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        file.seek(SeekFrom::Start(inner.offset))?;
        let mut buf = Vec::new();
        file.read_to_end(&mut buf)?;
        inner.offset += buf.len() as u64;
        let mut data = std::mem::take(&mut inner.partial);
        data.extend_from_slice(&buf);
        let complete = data.iter().rposition(|b| *b == b'\n').map_or(0, |p| p + 1);
        inner.partial = data.split_off(complete);
        for line in data.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            match serde_json::from_slice::<RawEvent>(line) {
                Ok(raw) if raw.stage == "ResponseComplete" => {
                    if let Some(ev) = self.absorb(raw) {
                        inner.events.push(ev);
                    }
                }
                Ok(_) => {}
                Err(_) => inner.bad_lines += 1,
            }
        }
        Ok(())
    }

    fn absorb(&self, raw: RawEvent) -> Option<AuditEvent> {
        let code = raw.response_status.map_or(0, |s| s.code);
        let mut lease_write = None;
        if raw.object_ref.resource == "leases"
            && raw.object_ref.name == self.lease_name
            && (200..300).contains(&code)
            && let Some(obj) = raw.response_object
            && let Ok(lease) = serde_json::from_value::<Lease>(obj)
            && let Some(state) = LeaseState::from_lease(
                &lease,
                raw.request_received_timestamp,
                raw.stage_timestamp,
                Source::Audit,
            )
        {
            lease_write = Some(LeaseWrite {
                kind: lease_write_kind(&raw.verb, &raw.user.username, raw.request_object.as_ref()),
                rv_after: state.rv,
                holder_after: state.holder.clone(),
            });
            if let Ok(mut h) = self.leases.lock() {
                h.insert(state);
            }
        }
        let bind_target = (raw.object_ref.subresource == "binding")
            .then(|| {
                raw.request_object.as_ref()?["target"]["name"]
                    .as_str()
                    .map(str::to_owned)
            })
            .flatten();
        Some(AuditEvent {
            user: raw.user.username,
            verb: raw.verb,
            resource: raw.object_ref.resource,
            subresource: raw.object_ref.subresource,
            namespace: raw.object_ref.namespace,
            name: raw.object_ref.name,
            code,
            received: raw.request_received_timestamp,
            completed: raw.stage_timestamp,
            bind_target,
            lease_write,
        })
    }

    /// Polls every 100 ms until the task is aborted.
    pub fn spawn_tailer(&self) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                if let Err(e) = me.poll() {
                    tracing::warn!(error = %e, "reading the audit log");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    }

    /// Events whose request arrived in `[from, to]`.
    pub fn events(&self, from: Timestamp, to: Timestamp) -> Vec<AuditEvent> {
        self.inner
            .lock()
            .map(|i| {
                i.events
                    .iter()
                    .filter(|e| e.received >= from && e.received <= to)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Events for which `keep` holds, in log order.
    pub fn select(&self, keep: impl Fn(&AuditEvent) -> bool) -> Vec<AuditEvent> {
        self.inner
            .lock()
            .map(|i| i.events.iter().filter(|e| keep(e)).cloned().collect())
            .unwrap_or_default()
    }

    /// The first accepted bind by `user` that arrived after `after`.
    pub fn first_bind_by(&self, user: &str, after: Timestamp) -> Option<Timestamp> {
        let inner = self.inner.lock().ok()?;
        inner
            .events
            .iter()
            .filter(|e| e.user == user && e.is_bind() && e.received > after)
            .map(|e| e.received)
            .min()
    }

    /// The first accepted bind by any user in `users` that arrived after `after`, with that user.
    pub fn first_bind_by_any(&self, users: &[String], after: Timestamp) -> Option<(Timestamp, String)> {
        let inner = self.inner.lock().ok()?;
        inner
            .events
            .iter()
            .filter(|e| e.is_bind() && e.received > after && users.contains(&e.user))
            .map(|e| (e.received, e.user.clone()))
            .min()
    }

    /// Lines that did not parse (should stay 0; reported).
    pub fn bad_lines(&self) -> usize {
        self.inner.lock().map(|i| i.bad_lines).unwrap_or(0)
    }
}

/// I6 over `events`: every write by a replica (a user for which `is_replica` holds) must arrive while a Lease
/// version that may have been in force names that replica and has not expired ([`LeaseHistory::candidates`]:
/// while a Lease write is in flight, both the old and the new version count, so the writer gets the benefit of
/// the doubt).
///
/// Writes of the leader Lease itself are the election: its creation and an acquisition are exempt; a renewal (and any other Lease
/// write) is judged like every other write, against the versions before it, so a renewal that lands after the
/// writer's term ended, or on a term another replica holds, is a write without the Lease; a release is a
/// violation only when it clears an unexpired term of another replica.
///
/// [`LeaseHistory::candidates`]: crate::lease::LeaseHistory::candidates
pub fn check_writes(
    events: &[AuditEvent],
    leases: &SharedLeases,
    lease_name: &str,
    is_replica: impl Fn(&str) -> bool,
) -> Vec<Violation> {
    let Ok(history) = leases.lock() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in events.iter().filter(|e| is_replica(&e.user)) {
        let what = format!(
            "{} {} {}/{} by {} (HTTP {})",
            e.verb,
            e.what(),
            e.namespace,
            e.name,
            e.user,
            e.code
        );
        let own = match (&e.resource[..], &e.lease_write) {
            ("leases", _) if e.name != lease_name => continue,
            ("leases", None) => continue, // refused (e.g. a conflicting acquisition): no effect
            ("leases", Some(w)) if matches!(w.kind, LeaseWriteKind::Acquire | LeaseWriteKind::Create) => {
                continue;
            }
            ("leases", Some(w)) => Some(w),
            _ => None,
        };
        // The versions in force before this write (a Lease write is not judged by its own result).
        let candidates: Vec<_> = history
            .candidates(e.received)
            .into_iter()
            .filter(|s| own.is_none_or(|w| s.rv != w.rv_after))
            .collect();
        let live = |s: &&crate::lease::LeaseState| s.expiry().is_some_and(|x| e.received < x);
        let permitted = match own.map(|w| w.kind) {
            // A release is harmless unless it clears another replica's live term.
            Some(LeaseWriteKind::Release) => !candidates
                .iter()
                .any(|s| s.holder.as_deref().is_some_and(|h| h != e.user) && live(s)),
            _ => candidates
                .iter()
                .any(|s| s.holder.as_deref() == Some(e.user.as_str()) && live(s)),
        };
        if permitted {
            continue;
        }
        let problem = match candidates.last() {
            None => "no Lease version was in force yet".to_owned(),
            Some(s) => match (s.holder.as_deref(), s.expiry()) {
                (Some(h), _) if h != e.user => format!(
                    "the Lease was held by {h:?} (rv {}, renewTime {})",
                    s.rv,
                    s.renew.map_or("-".into(), |r| r.to_string())
                ),
                (None, _) => format!(
                    "the Lease had no holder (rv {}, released at {})",
                    s.rv, s.valid_from
                ),
                (Some(_), None) => format!("the Lease (rv {}) had no renewTime/duration", s.rv),
                (Some(_), Some(exp)) => format!(
                    "{} ms after the writer's Lease expired at {exp} (rv {}, renewTime {})",
                    e.received.duration_since(exp).as_millis(),
                    s.rv,
                    s.renew.map_or("-".into(), |r| r.to_string())
                ),
            },
        };
        let kind = match own.map(|w| w.kind) {
            Some(LeaseWriteKind::Renew) => "Lease renewal ",
            Some(LeaseWriteKind::Release) => "Lease release ",
            Some(_) => "Lease write ",
            None => "",
        };
        out.push(Violation {
            invariant: Invariant::NoWriteWithoutLease,
            at: e.received,
            object: None,
            detail: format!("{kind}{what} arrived at {}: {problem}", e.received),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::LeaseHistory;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn write(user: &str, at: i64) -> AuditEvent {
        AuditEvent {
            user: user.into(),
            verb: "create".into(),
            resource: "pods".into(),
            subresource: "binding".into(),
            namespace: "ns".into(),
            name: "p".into(),
            code: 201,
            received: ts(at),
            completed: ts(at),
            bind_target: Some("n".into()),
            lease_write: None,
        }
    }

    fn leases() -> SharedLeases {
        let mut h = LeaseHistory::default();
        for (rv, holder, renew) in [(1, "a", 100), (2, "a", 104), (3, "b", 115)] {
            h.insert(LeaseState {
                rv,
                holder: Some(holder.into()),
                renew: Some(ts(renew)),
                duration_secs: Some(6),
                valid_from: ts(renew),
                certain_from: ts(renew),
                source: Source::Audit,
            });
        }
        Arc::new(Mutex::new(h))
    }

    #[test]
    fn writes_inside_the_term_pass_and_others_fail() {
        let l = leases();
        let events = vec![
            write("a", 101),   // a's term
            write("a", 109),   // a renewed at 104: until 110
            write("a", 111),   // a's term ended at 110
            write("b", 112),   // b does not hold it yet
            write("b", 116),   // b's term
            write("a", 116),   // a after b took over
            write("admin", 1), // not a replica
            write("a", 99),    // before any version
        ];
        let v = check_writes(&events, &l, "lease", |u| u != "admin");
        let times: Vec<i64> = v.iter().map(|v| v.at.as_second()).collect();
        assert_eq!(times, vec![111, 112, 116, 99], "{v:#?}");
        assert!(v[0].detail.contains("expired"), "{}", v[0].detail);
        assert!(v[1].detail.contains("held by \"a\""), "{}", v[1].detail);
    }

    fn lease_write(user: &str, at: i64, kind: LeaseWriteKind, rv_after: u64) -> AuditEvent {
        let mut e = write(user, at);
        e.resource = "leases".into();
        e.subresource = String::new();
        e.verb = "patch".into();
        e.name = "lease".into();
        e.code = 200;
        e.lease_write = Some(LeaseWrite {
            kind,
            rv_after,
            holder_after: None,
        });
        e
    }

    #[test]
    fn lease_writes_are_judged_by_the_versions_before_them() {
        let l = leases();
        let events = vec![
            lease_write("a", 109, LeaseWriteKind::Renew, 7), // a's own live term: fine
            lease_write("a", 111, LeaseWriteKind::Renew, 8), // a's term ended at 110
            lease_write("a", 111, LeaseWriteKind::Release, 9), // releasing an expired term: fine
            lease_write("b", 115, LeaseWriteKind::Acquire, 3), // the election itself: exempt
            lease_write("a", 116, LeaseWriteKind::Renew, 10), // renewing b's term
            lease_write("a", 116, LeaseWriteKind::Release, 11), // clearing b's live term
        ];
        let v = check_writes(&events, &l, "lease", |_| true);
        let got: Vec<(i64, bool)> = v
            .iter()
            .map(|v| (v.at.as_second(), v.detail.starts_with("Lease release")))
            .collect();
        assert_eq!(got, vec![(111, false), (116, false), (116, true)], "{v:#?}");
        assert!(v[0].detail.contains("expired"), "{}", v[0].detail);
        assert!(v[1].detail.contains("held by \"b\""), "{}", v[1].detail);
    }

    #[test]
    fn poll_reads_complete_lines_and_lease_states() {
        let dir = std::env::temp_dir().join(format!("chaos-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.log");
        let bind = r#"{"stage":"ResponseComplete","verb":"create","user":{"username":"replica-a-1"},"objectRef":{"resource":"pods","subresource":"binding","namespace":"ns","name":"p0"},"responseStatus":{"code":201},"requestObject":{"target":{"name":"n7"}},"requestReceivedTimestamp":"2026-01-01T00:00:01.000001Z","stageTimestamp":"2026-01-01T00:00:01.002Z"}"#;
        let lease = r#"{"stage":"ResponseComplete","verb":"patch","user":{"username":"replica-a-1"},"objectRef":{"resource":"leases","namespace":"l","name":"lease"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-01-01T00:00:00Z","stageTimestamp":"2026-01-01T00:00:00.001Z","responseObject":{"metadata":{"name":"lease","resourceVersion":"42"},"spec":{"holderIdentity":"replica-a-1","renewTime":"2026-01-01T00:00:00.000000Z","leaseDurationSeconds":6}}}"#;
        std::fs::write(&path, format!("{lease}\n{}", &bind[..40])).unwrap();
        let h: SharedLeases = Arc::default();
        let log = AuditLog::new(path.clone(), "lease", h.clone());
        log.poll().unwrap();
        let all = || log.events(ts(0), ts(i64::from(i32::MAX)));
        assert_eq!(all().len(), 1, "the half line waits");
        std::fs::write(&path, format!("{lease}\n{bind}\n")).unwrap();
        log.poll().unwrap();
        assert_eq!(all().len(), 2);
        assert!(all()[1].is_bind());
        assert_eq!(all()[1].bind_target.as_deref(), Some("n7"));
        let w = all()[0].lease_write.clone().unwrap();
        assert_eq!(
            (w.kind, w.rv_after, w.holder_after.as_deref()),
            (LeaseWriteKind::Other, 42, Some("replica-a-1"))
        );
        assert_eq!(h.lock().unwrap().latest().unwrap().rv, 42);
        assert_eq!(log.bad_lines(), 0);
        let first = log.first_bind_by("replica-a-1", ts(0)).unwrap();
        assert_eq!(first.to_string(), "2026-01-01T00:00:01.000001Z");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
