//! Per-object serialisation of status writes, latest wins.
//!
//! Status patches run in the background so a cycle never waits on the API. Two writes for the same object must not
//! overtake each other (an old `WaitingForQuorum` landing after `Scheduled` would undo it), and only the newest
//! matters. So each object has at most one writer task; a newer write replaces a queued one, and the writer runs
//! them in order. Writes are lazy futures: they read the store when they run, so their "unchanged?" and "never back
//! from True" checks see the freshest state.

use std::{
    collections::HashMap,
    future::Future,
    hash::Hash,
    pin::Pin,
    sync::{Arc, Mutex},
};

use tokio::task::JoinSet;

type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

struct Slot {
    pending: Option<Job>,
}

/// Serialises jobs per key; see the module docs.
pub(crate) struct Serializer<K> {
    slots: Arc<Mutex<HashMap<K, Slot>>>,
}

impl<K> Clone for Serializer<K> {
    fn clone(&self) -> Self {
        Self {
            slots: self.slots.clone(),
        }
    }
}

impl<K: Hash + Eq + Clone + Send + 'static> Serializer<K> {
    pub(crate) fn new() -> Self {
        Self {
            slots: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Queues `job` for `key`, replacing a job queued earlier that has not started. Spawns the key's writer on
    /// `tasks` if none runs.
    pub(crate) fn submit(
        &self,
        tasks: &mut JoinSet<()>,
        key: K,
        job: impl Future<Output = ()> + Send + 'static,
    ) {
        let mut slots = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(slot) = slots.get_mut(&key) {
            // A writer is running for this key; it will pick this job up next.
            slot.pending = Some(Box::pin(job));
            return;
        }
        slots.insert(key.clone(), Slot { pending: None });
        drop(slots);
        let shared = self.slots.clone();
        tasks.spawn(async move {
            let mut next: Option<Job> = Some(Box::pin(job));
            while let Some(j) = next.take() {
                j.await;
                let mut slots = shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                match slots.get_mut(&key).and_then(|s| s.pending.take()) {
                    Some(j) => next = Some(j),
                    None => {
                        slots.remove(&key);
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn latest_wins_in_order() {
        let s: Serializer<&str> = Serializer::new();
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = JoinSet::new();
        for i in 0..5 {
            let log = log.clone();
            s.submit(&mut tasks, "a", async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                log.lock().unwrap().push(i);
            });
        }
        while tasks.join_next().await.is_some() {}
        // The first job started at once; jobs 1..3 were replaced by 4 before they could start.
        assert_eq!(*log.lock().unwrap(), vec![0, 4]);
        assert!(s.slots.lock().unwrap().is_empty());
    }
}
