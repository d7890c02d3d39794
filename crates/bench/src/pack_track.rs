//! The packing benchmark's observer: one pod watch on the run's namespace keeps, per node, the GPUs of the bound
//! pods that are not being deleted; when a job's whole gang is bound it stamps the job started and, its run time
//! later, completes it (deletes its pods with grace 0, as a finished batch job's pods leave, then its group);
//! a sampler reads the state every `interval` for the occupancy and the largest free block.
//!
//! kwok moves bound pods to Running by itself (its default pod stages); a pod counts from `spec.nodeName` set,
//! as in the end-to-end bench ([`crate::measure`]), so the figures do not depend on kwok's status writes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::TryStreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tokio::sync::{mpsc, oneshot, watch};

use crate::pack_jobs::{GPU, Job};

/// Label naming a pack pod's job (its index in the burst).
pub const JOB_LABEL: &str = "phalanx-bench/job";

/// One sample of the cluster.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Seconds since the scheduler started.
    pub t: f64,
    /// GPUs of bound pods not being deleted, over all GPUs of the cluster (0..=1).
    pub occupancy: f64,
    /// The most free GPUs on one node.
    pub largest_free: u32,
}

/// What the run learnt: per job its start (whole gang bound) and completion (pods deleted), and the samples.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// Per job index: seconds from the scheduler's start to its whole gang bound.
    pub started: Vec<Option<f64>>,
    /// Per job index: seconds from the scheduler's start to its pods deleted.
    pub done: Vec<Option<f64>>,
    /// The samples, in time order.
    pub samples: Vec<Sample>,
    /// Failed completions (pod or group deletes), first message.
    pub error: Option<String>,
}

#[derive(Default)]
struct State {
    /// Live pods: name -> (job, GPUs, node once bound).
    pods: HashMap<String, (usize, u32, Option<String>)>,
    /// GPUs in use per node.
    used: HashMap<String, u32>,
    /// Bound pods per job.
    bound: Vec<u32>,
    timeline: Timeline,
}

/// A running observer (watch, completer, sampler); [`Tracker::finish`] stops it and returns the timeline.
pub struct Tracker {
    state: Arc<Mutex<State>>,
    done_count: watch::Receiver<usize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The pod's job index (from [`JOB_LABEL`]) and its GPUs (the sum over its containers' `nvidia.com/gpu` limits).
fn pod_job_gpus(p: &Pod) -> Option<(usize, u32)> {
    let job = p.metadata.labels.as_ref()?.get(JOB_LABEL)?.parse().ok()?;
    let gpus = p
        .spec
        .as_ref()?
        .containers
        .iter()
        .filter_map(|c| {
            c.resources
                .as_ref()?
                .limits
                .as_ref()?
                .get(GPU)?
                .0
                .parse::<u32>()
                .ok()
        })
        .sum();
    Some((job, gpus))
}

impl State {
    fn forget(&mut self, name: &str) {
        if let Some((job, gpus, Some(node))) = self.pods.remove(name) {
            if let Some(u) = self.used.get_mut(&node) {
                *u = u.saturating_sub(gpus);
            }
            if let Some(b) = self.bound.get_mut(job) {
                *b = b.saturating_sub(1);
            }
        }
    }

    /// Records `p`; returns its job when this event completed the job's gang for the first time.
    fn apply(&mut self, p: &Pod, jobs: &[Job], t: f64) -> Option<usize> {
        let name = p.metadata.name.clone()?;
        if p.metadata.deletion_timestamp.is_some() {
            self.forget(&name);
            return None;
        }
        let (job, gpus) = pod_job_gpus(p)?;
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        let was_bound = self.pods.get(&name).is_some_and(|e| e.2.is_some());
        if was_bound || node.is_none() {
            self.pods.entry(name).or_insert((job, gpus, None));
            return None;
        }
        let node = node?;
        *self.used.entry(node.clone()).or_default() += gpus;
        self.pods.insert(name, (job, gpus, Some(node)));
        let b = self.bound.get_mut(job)?;
        *b += 1;
        let whole = jobs.get(job).is_some_and(|j| *b >= j.pods);
        let started = self.timeline.started.get_mut(job)?;
        if whole && started.is_none() {
            *started = Some(t);
            return Some(job);
        }
        None
    }
}

impl Tracker {
    /// Starts watching `ns` (returns once the initial list is in), the completer and the sampler. `start` is the
    /// scheduler's start; `nodes` the names of every node and `gpus_per_node` their GPUs (a node with no bound
    /// pod is all free); `on_done` deletes a job's group once its pods are deleted.
    ///
    /// # Errors
    /// When the watch ends before its initial list (API error) or gives none within 60 s.
    #[allow(clippy::too_many_arguments)]
    pub async fn start<F, Fut>(
        client: Client,
        ns: &str,
        jobs: Vec<Job>,
        nodes: Vec<String>,
        gpus_per_node: u32,
        interval: Duration,
        start: Instant,
        on_done: F,
    ) -> anyhow::Result<Self>
    where
        F: Fn(Job) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let state = Arc::new(Mutex::new(State {
            bound: vec![0; jobs.len()],
            timeline: Timeline {
                started: vec![None; jobs.len()],
                done: vec![None; jobs.len()],
                ..Timeline::default()
            },
            ..State::default()
        }));
        let (ready_tx, ready_rx) = oneshot::channel::<()>();
        let (start_tx, mut start_rx) = mpsc::unbounded_channel::<usize>();
        let (done_tx, done_count) = watch::channel(0usize);
        let api: Api<Pod> = Api::namespaced(client, ns);
        let jobs = Arc::new(jobs);

        let (st, js, pods) = (state.clone(), jobs.clone(), api.clone());
        let watch_task = tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let stream = watcher::watcher(pods, watcher::Config::default());
            futures::pin_mut!(stream);
            loop {
                match stream.try_next().await {
                    Ok(Some(Event::Apply(p) | Event::InitApply(p))) => {
                        let t = start.elapsed().as_secs_f64();
                        if let Some(job) = lock(&st).apply(&p, &js, t) {
                            let _ = start_tx.send(job);
                        }
                    }
                    Ok(Some(Event::Delete(p))) => {
                        if let Some(name) = p.metadata.name.as_deref() {
                            lock(&st).forget(name);
                        }
                    }
                    Ok(Some(Event::InitDone)) => {
                        if let Some(tx) = ready.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(Some(Event::Init)) => {}
                    Ok(None) => break,
                    // The watcher re-lists by itself after an error; keep going.
                    Err(e) => tracing::warn!(error = %e, "pack pod watch error"),
                }
            }
        });

        let (st, on_done) = (state.clone(), Arc::new(on_done));
        let completer = tokio::spawn(async move {
            let mut running = tokio::task::JoinSet::new();
            let done_tx = Arc::new(done_tx);
            while let Some(job) = start_rx.recv().await {
                let Some(j) = jobs.get(job).copied() else {
                    continue;
                };
                let (st, api, on_done, done_tx) = (st.clone(), api.clone(), on_done.clone(), done_tx.clone());
                running.spawn(async move {
                    tokio::time::sleep(Duration::from_secs(u64::from(j.run_s))).await;
                    let dp = DeleteParams {
                        grace_period_seconds: Some(0),
                        ..DeleteParams::default()
                    };
                    let lp = ListParams::default().labels(&format!("{JOB_LABEL}={job}"));
                    let res = match api.delete_collection(&dp, &lp).await {
                        Ok(_) => on_done(j).await,
                        Err(e) => Err(anyhow::anyhow!("deleting the pods of job {job}: {e}")),
                    };
                    let t = start.elapsed().as_secs_f64();
                    let mut s = lock(&st);
                    if let Err(e) = res {
                        s.timeline.error.get_or_insert_with(|| format!("{e:#}"));
                    }
                    if let Some(d) = s.timeline.done.get_mut(job) {
                        *d = Some(t);
                    }
                    let n = s.timeline.done.iter().flatten().count();
                    drop(s);
                    done_tx.send_replace(n);
                });
            }
            while running.join_next().await.is_some() {}
        });

        let st = state.clone();
        let total = f64::from(gpus_per_node) * nodes.len() as f64;
        let sampler = tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let mut s = lock(&st);
                let used_total: u32 = s.used.values().sum();
                let largest_free = nodes
                    .iter()
                    .map(|n| gpus_per_node.saturating_sub(s.used.get(n).copied().unwrap_or(0)))
                    .max()
                    .unwrap_or(0);
                let sample = Sample {
                    t: start.elapsed().as_secs_f64(),
                    occupancy: if total > 0.0 {
                        f64::from(used_total) / total
                    } else {
                        0.0
                    },
                    largest_free,
                };
                s.timeline.samples.push(sample);
            }
        });

        let tracker = Self {
            state,
            done_count,
            tasks: vec![watch_task, completer, sampler],
        };
        tokio::time::timeout(Duration::from_secs(60), ready_rx)
            .await
            .map_err(|_| anyhow::anyhow!("pod watch on {ns}: no initial list within 60 s"))?
            .map_err(|_| anyhow::anyhow!("pod watch on {ns} ended before its initial list"))?;
        Ok(tracker)
    }

    /// GPUs of bound pods right now (0 before the scheduler starts, if nothing was bound by anyone else).
    pub fn used_gpus(&self) -> u32 {
        lock(&self.state).used.values().sum()
    }

    /// Waits until `want` jobs are completed or `timeout` passes; returns the count reached.
    pub async fn wait_done(&mut self, want: usize, timeout: Duration) -> usize {
        let _ = tokio::time::timeout(timeout, self.done_count.wait_for(|n| *n >= want)).await;
        *self.done_count.borrow()
    }

    /// Stops the tasks and returns the timeline.
    pub fn finish(self) -> Timeline {
        for t in &self.tasks {
            t.abort();
        }
        std::mem::take(&mut lock(&self.state).timeline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, job: usize, gpus: u32, node: Option<&str>) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {JOB_LABEL: job.to_string()}},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "resources": {"limits": {GPU: gpus.to_string()}}}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_job_starts_when_its_whole_gang_is_bound_and_frees_its_gpus_when_deleted() {
        let jobs = vec![Job {
            index: 0,
            pods: 2,
            gpus_per_pod: 3,
            run_s: 1,
        }];
        let mut s = State {
            bound: vec![0],
            timeline: Timeline {
                started: vec![None],
                done: vec![None],
                ..Timeline::default()
            },
            ..State::default()
        };
        assert_eq!(s.apply(&pod("a", 0, 3, None), &jobs, 0.1), None);
        assert_eq!(s.apply(&pod("a", 0, 3, Some("n1")), &jobs, 0.2), None);
        // A repeated event of a bound pod counts once.
        assert_eq!(s.apply(&pod("a", 0, 3, Some("n1")), &jobs, 0.3), None);
        assert_eq!(s.apply(&pod("b", 0, 3, Some("n1")), &jobs, 0.4), Some(0));
        assert_eq!(s.timeline.started, vec![Some(0.4)]);
        assert_eq!(s.used.get("n1"), Some(&6));
        let mut gone = pod("a", 0, 3, Some("n1"));
        gone.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        assert_eq!(s.apply(&gone, &jobs, 0.5), None);
        s.forget("b");
        assert_eq!(s.used.get("n1"), Some(&0));
        assert_eq!(s.bound, vec![0]);
        // The job started once: re-binding does not restart it.
        assert_eq!(s.timeline.started, vec![Some(0.4)]);
    }
}
