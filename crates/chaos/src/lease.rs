//! The leader Lease's history: every state seen by watching it, completed with the state each accepted Lease write
//! left behind (the audit log's `responseObject`), ordered by resourceVersion.
//!
//! The watch alone can skip states: after a 410 it relists and sees only the newest one. The audit log cannot skip
//! an accepted write (blocking mode: the answer waits for the event). Both sources are kept; a state known from
//! both keeps the earlier "valid from" time.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};

/// Where a state was learnt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The checker's watch on the Lease.
    Watch,
    /// The `responseObject` of an accepted write in the audit log.
    Audit,
}

/// One stored version of the Lease.
#[derive(Debug, Clone)]
pub struct LeaseState {
    /// `metadata.resourceVersion` as a number (etcd's revision of the write).
    pub rv: u64,
    /// `spec.holderIdentity`.
    pub holder: Option<String>,
    /// `spec.renewTime`, written by the holder from its own clock (the same host's clock here).
    pub renew: Option<Timestamp>,
    /// `spec.leaseDurationSeconds`.
    pub duration_secs: Option<i64>,
    /// The earliest moment this version may have been in force: the arrival of the request that wrote it
    /// (audit), or the moment the watch delivered it (watch only).
    pub valid_from: Timestamp,
    /// The moment it was certainly in force: the answer to the request that wrote it (audit), or the watch
    /// delivery. Between `valid_from` and `certain_from` the previous version may still have been in force; I6
    /// gives the writer the benefit of that doubt.
    pub certain_from: Timestamp,
    /// Where it was learnt first.
    pub source: Source,
}

impl LeaseState {
    /// `renewTime + leaseDurationSeconds`: until then the holder may write.
    pub fn expiry(&self) -> Option<Timestamp> {
        let renew = self.renew?;
        renew
            .checked_add(SignedDuration::from_secs(self.duration_secs?))
            .ok()
    }

    /// Reads a Lease object written between `valid_from` and `certain_from`; `None` without a numeric
    /// resourceVersion.
    pub fn from_lease(
        lease: &Lease,
        valid_from: Timestamp,
        certain_from: Timestamp,
        source: Source,
    ) -> Option<Self> {
        let rv = lease.metadata.resource_version.as_deref()?.parse().ok()?;
        let spec = lease.spec.clone().unwrap_or_default();
        Some(Self {
            rv,
            holder: spec.holder_identity,
            renew: spec.renew_time.map(|t| t.0),
            duration_secs: spec.lease_duration_seconds.map(i64::from),
            valid_from,
            certain_from,
            source,
        })
    }
}

/// All known versions of one Lease.
#[derive(Debug, Default)]
pub struct LeaseHistory {
    states: BTreeMap<u64, LeaseState>,
}

impl LeaseHistory {
    /// Adds a version; for a version already known, keeps the tighter (earlier) times.
    pub fn insert(&mut self, state: LeaseState) {
        match self.states.get_mut(&state.rv) {
            Some(known) => {
                if state.valid_from < known.valid_from {
                    known.valid_from = state.valid_from;
                    known.source = state.source;
                }
                known.certain_from = known.certain_from.min(state.certain_from);
            }
            None => {
                self.states.insert(state.rv, state);
            }
        }
    }

    /// The version certainly in force at `t`: the newest (highest resourceVersion) of those certain by `t`.
    pub fn at(&self, t: Timestamp) -> Option<&LeaseState> {
        self.states
            .values()
            .filter(|s| s.certain_from <= t)
            .max_by_key(|s| s.rv)
    }

    /// Every version that may have been in force at `t`: [`LeaseHistory::at`] and the newer ones whose write was
    /// in flight at `t`.
    pub fn candidates(&self, t: Timestamp) -> Vec<&LeaseState> {
        let certain = self.at(t);
        let floor = certain.map_or(0, |c| c.rv);
        let mut out: Vec<&LeaseState> = certain.into_iter().collect();
        out.extend(
            self.states
                .values()
                .filter(|s| s.rv > floor && s.valid_from <= t && t < s.certain_from),
        );
        out
    }

    /// The newest version.
    pub fn latest(&self) -> Option<&LeaseState> {
        self.states.values().next_back()
    }

    /// The first version after `t` that names `holder` (a takeover).
    pub fn first_held_by_after(&self, holder: &str, t: Timestamp) -> Option<&LeaseState> {
        self.states
            .values()
            .filter(|s| s.valid_from > t && s.holder.as_deref() == Some(holder))
            .min_by_key(|s| s.rv)
    }
}

/// The shared history.
pub type SharedLeases = Arc<Mutex<LeaseHistory>>;

/// Watches Lease `namespace/name` until the task is aborted, recording every version it sees. Errors (the API
/// server down) are retried with kube's default backoff.
pub fn spawn_watch(
    client: Client,
    namespace: &str,
    name: &str,
    history: SharedLeases,
) -> tokio::task::JoinHandle<()> {
    let api: Api<Lease> = Api::namespaced(client, namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, config).default_backoff().boxed();
        while let Some(event) = stream.next().await {
            let lease = match event {
                Ok(Event::Apply(l) | Event::InitApply(l) | Event::Delete(l)) => l,
                Ok(Event::Init | Event::InitDone) => continue,
                Err(e) => {
                    tracing::debug!(error = %e, "lease watch error (retrying)");
                    continue;
                }
            };
            let now = Timestamp::now();
            if let Some(state) = LeaseState::from_lease(&lease, now, now, Source::Watch)
                && let Ok(mut h) = history.lock()
            {
                h.insert(state);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(rv: u64, holder: &str, renew: i64, from: i64) -> LeaseState {
        LeaseState {
            rv,
            holder: Some(holder.into()),
            renew: Some(Timestamp::from_second(renew).unwrap()),
            duration_secs: Some(6),
            valid_from: Timestamp::from_second(from).unwrap(),
            certain_from: Timestamp::from_second(from).unwrap(),
            source: Source::Watch,
        }
    }

    #[test]
    fn version_in_force_is_the_newest_already_valid() {
        let mut h = LeaseHistory::default();
        h.insert(st(10, "a", 100, 100));
        h.insert(st(12, "a", 104, 104));
        h.insert(st(15, "b", 111, 111));
        let at = |s| h.at(Timestamp::from_second(s).unwrap()).map(|x| x.rv);
        assert_eq!(at(99), None);
        assert_eq!(at(103), Some(10));
        assert_eq!(at(109), Some(12));
        assert_eq!(at(111), Some(15));
        assert_eq!(
            h.at(Timestamp::from_second(109).unwrap())
                .unwrap()
                .expiry()
                .unwrap()
                .as_second(),
            110
        );
        assert_eq!(
            h.first_held_by_after("b", Timestamp::from_second(105).unwrap())
                .unwrap()
                .rv,
            15
        );
    }

    #[test]
    fn a_state_seen_twice_keeps_the_earlier_times() {
        let mut h = LeaseHistory::default();
        h.insert(st(10, "a", 100, 103));
        let mut audit = st(10, "a", 100, 100);
        audit.certain_from = Timestamp::from_second(101).unwrap();
        audit.source = Source::Audit;
        h.insert(audit);
        h.insert(st(10, "a", 100, 105));
        let s = h.latest().unwrap();
        assert_eq!(s.valid_from.as_second(), 100);
        assert_eq!(s.certain_from.as_second(), 101);
        assert_eq!(s.source, Source::Audit);
    }

    #[test]
    fn a_write_in_flight_makes_both_versions_candidates() {
        let mut h = LeaseHistory::default();
        h.insert(st(10, "a", 100, 100));
        let mut release = st(11, "b", 104, 104);
        release.certain_from = Timestamp::from_second(106).unwrap();
        h.insert(release);
        let rvs = |t| {
            h.candidates(Timestamp::from_second(t).unwrap())
                .iter()
                .map(|s| s.rv)
                .collect::<Vec<_>>()
        };
        assert_eq!(rvs(103), vec![10]);
        assert_eq!(rvs(105), vec![10, 11]);
        assert_eq!(rvs(106), vec![11]);
    }
}
