//! [`NoteRecorders`]: event recorders keyed by object and note, shared by the scheduler and the controllers.
//!
//! Why not one shared `Recorder`: kube-runtime's `Recorder` folds events with the same object, type, reason
//! and action into one series and keeps the FIRST note, so a pod whose `FailedScheduling` message changes
//! between attempts, or an owner whose `GangGroupApplied` names a new `minCount`, would keep showing the oldest
//! message in `kubectl describe`. client-go's recorder (`k8s.io/client-go/tools/events`, what kube-scheduler and
//! kube-controller-manager use) keys its cache by the note too, so it aggregates only identical messages. Keying
//! recorders by note gives the same result while still letting the library aggregate repeats of one message into
//! a series.
//!
//! Keyed by the object too: a `Recorder` keeps every event it published in its cache for 6 minutes (kube-runtime's
//! `CACHE_TTL`), so one recorder for a note that thousands of objects share (a group's `Valid` transition, one
//! waiting message for every member) grew with the cluster: 12.5 MB of the scheduler's 88 MB peak heap with 1,000
//! gangs of 8 (docs/benchmarks.md). With one recorder per object and note each holds one event, and
//! [`MAX_NOTE_RECORDERS`] bounds them all (client-go's recorder bounds its cache the same way, an LRU of 4,096).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};

/// How many distinct (object, note) pairs keep a recorder, and so at most how many events are cached; past it the
/// map starts afresh (a repeat then opens a new series, which is harmless).
pub const MAX_NOTE_RECORDERS: usize = 1024;

/// Event recorders, one per object and event note (see the module documentation).
pub struct NoteRecorders {
    client: Client,
    reporter: Reporter,
    by_note: Mutex<HashMap<String, Arc<Recorder>>>,
}

impl NoteRecorders {
    /// Recorders that publish as `reporter` through `client`.
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Self {
            client,
            reporter,
            by_note: Mutex::new(HashMap::new()),
        }
    }

    /// A recorder kept by no one, for an event an object gets once (a pod's `Scheduled`: a pod is bound once).
    /// Keeping its recorder would only hold the event for 6 minutes: with 8,000 pods bound, the 1,024 kept
    /// recorders were all such one-time events.
    pub fn one_shot(&self) -> Recorder {
        Recorder::new(self.client.clone(), self.reporter.clone())
    }

    /// The recorder for events about `object` whose note is `note`.
    pub fn for_event(&self, object: &ObjectReference, note: &str) -> Arc<Recorder> {
        // The uid tells a recreated object from its predecessor; without one, kind, namespace and name.
        let who = match object.uid.as_deref().filter(|u| !u.is_empty()) {
            Some(uid) => uid.to_owned(),
            None => format!(
                "{}/{}/{}",
                object.kind.as_deref().unwrap_or_default(),
                object.namespace.as_deref().unwrap_or_default(),
                object.name.as_deref().unwrap_or_default()
            ),
        };
        let key = format!("{who}\n{note}");
        let mut by_note = self.by_note.lock().unwrap_or_else(|p| p.into_inner());
        if by_note.len() >= MAX_NOTE_RECORDERS && !by_note.contains_key(&key) {
            by_note.clear();
        }
        by_note
            .entry(key)
            .or_insert_with(|| Arc::new(Recorder::new(self.client.clone(), self.reporter.clone())))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(uid: &str, name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("Pod".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(uid.into()),
            ..Default::default()
        }
    }

    /// One object's repeats of a note share a recorder (kube-runtime folds them into a series); another object with
    /// the same note gets its own, so no recorder's cache grows with the number of objects.
    #[tokio::test]
    async fn recorders_are_per_object_and_note_and_bounded() -> anyhow::Result<()> {
        let config = kube::Config::new("http://127.0.0.1:9".parse()?);
        let recorders = NoteRecorders::new(Client::try_from(config)?, Reporter::from("test"));
        let (a, b) = (object("u-a", "a"), object("u-b", "b"));
        let first = recorders.for_event(&a, "waiting for 3 more pods");
        assert!(Arc::ptr_eq(
            &first,
            &recorders.for_event(&a, "waiting for 3 more pods")
        ));
        assert!(!Arc::ptr_eq(
            &first,
            &recorders.for_event(&b, "waiting for 3 more pods")
        ));
        assert!(!Arc::ptr_eq(
            &first,
            &recorders.for_event(&a, "waiting for 2 more pods")
        ));
        // A recreated object (same name, another uid) starts a new series.
        assert!(!Arc::ptr_eq(
            &first,
            &recorders.for_event(&object("u-a2", "a"), "waiting for 3 more pods")
        ));
        for i in 0..2 * MAX_NOTE_RECORDERS {
            recorders.for_event(&object(&format!("u-{i}"), "x"), "scheduled");
        }
        let held = recorders.by_note.lock().map(|m| m.len()).unwrap_or(usize::MAX);
        assert!(held <= MAX_NOTE_RECORDERS, "{held} recorders held");
        // A one-time event's recorder is not kept.
        let before = recorders.by_note.lock().map(|m| m.len()).unwrap_or(usize::MAX);
        drop(recorders.one_shot());
        let after = recorders.by_note.lock().map(|m| m.len()).unwrap_or(usize::MAX);
        assert_eq!(before, after, "one_shot must not keep its recorder");
        Ok(())
    }
}
