//! [`NoteRecorders`]: event recorders keyed by note, shared by the scheduler and the controllers.
//!
//! Why not one shared `Recorder`: kube-runtime's `Recorder` folds events with the same object, type, reason
//! and action into one series and keeps the FIRST note, so a pod whose `FailedScheduling` message changes
//! between attempts, or an owner whose `GangGroupApplied` names a new `minCount`, would keep showing the oldest
//! message in `kubectl describe`. client-go's recorder (`k8s.io/client-go/tools/events`, what kube-scheduler and
//! kube-controller-manager use) keys its cache by the note too, so it aggregates only identical messages. Keying
//! recorders by note gives the same result while still letting the library aggregate repeats of one message into
//! a series.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};

/// How many distinct notes keep a recorder; past it the map starts afresh (a repeat then opens a new series,
/// which is harmless).
pub const MAX_NOTE_RECORDERS: usize = 1024;

/// Event recorders, one per event note (see the module documentation).
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

    /// The recorder for events whose note is `note`.
    pub fn for_note(&self, note: &str) -> Arc<Recorder> {
        let mut by_note = self.by_note.lock().unwrap_or_else(|p| p.into_inner());
        if by_note.len() >= MAX_NOTE_RECORDERS && !by_note.contains_key(note) {
            by_note.clear();
        }
        by_note
            .entry(note.to_owned())
            .or_insert_with(|| Arc::new(Recorder::new(self.client.clone(), self.reporter.clone())))
            .clone()
    }
}
