//! The packing burst through Phalanx's scheduling core in virtual time (`phalanx-bench pack --sim`): no API server,
//! no kwok, no wall clock. The core's queue and scheduler run as the driver runs them (pop what is ready, schedule
//! on the snapshot, `done`, bound pods confirmed, a finished job's pods deleted), but binds land at once and time
//! jumps from one event to the next (a job's end, a backoff expiry, the unschedulable flush). So the figures depend
//! only on the burst and the scheduler configuration: the same on every machine and every run, which the end-to-end
//! runs, decided by when retries happen to fall, are not. Samples are taken every `sample` of virtual time, and the
//! figures are those of the end-to-end case ([`crate::pack::figures`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use phalanx_scheduler::config::{ResourceWeight, ScoringStrategy};
use phalanx_scheduler::model::NodeStatic;
use phalanx_scheduler::resources::Resources;
use phalanx_scheduler::{
    GroupInfo, GroupPolicy, PodInfo, Scheduler, SchedulerConfig, SchedulingQueue, Snapshot,
};

use crate::pack_jobs::{GPU, Job};
use crate::pack_track::{Sample, Timeline};

/// Namespace of the simulated objects.
const NS: &str = "pack-sim";

/// The cluster of the simulation: `nodes` nodes of 32 CPU, 256Gi, 110 pods and `gpus` `nvidia.com/gpu` each, as the
/// end-to-end case's kwok nodes.
fn nodes(nodes: u32, gpus: u32) -> Vec<Arc<NodeStatic>> {
    (0..nodes)
        .map(|i| {
            let mut n = NodeStatic::simple(&format!("bench-n{i:05}"), 32_000, 256 << 30, &[]);
            n.allocatable.set(GPU, i64::from(gpus));
            Arc::new(n)
        })
        .collect()
}

/// Pod `p` of `job`: 100m CPU, 64Mi and its GPUs, in the job's gang (as [`crate::pack`] creates them).
fn pod(job: &Job, p: u32) -> PodInfo {
    let mut pod = PodInfo::simple(NS, &format!("job-{:03}-{p:02}", job.index), 100);
    let mut spec = (*pod.spec).clone();
    spec.requests = Resources {
        milli_cpu: 100,
        memory: 64 << 20,
        ..Resources::default()
    };
    spec.requests.set(GPU, i64::from(job.gpus_per_pod));
    spec.non_zero_memory = 64 << 20;
    pod.spec = Arc::new(spec);
    pod.group_name = Some(group_name(job).into());
    pod
}

/// The profiles `--sim` runs: Phalanx's defaults, and NodeResourcesFit MostAllocated over cpu, memory and
/// `nvidia.com/gpu` (weights 1, the `upstream-most-allocated` case's scoring).
pub fn profiles() -> Vec<(&'static str, SchedulerConfig)> {
    let most = SchedulerConfig {
        scoring_strategy: ScoringStrategy::MostAllocated,
        scoring_resources: ["cpu", "memory", GPU]
            .into_iter()
            .map(|name| ResourceWeight {
                name: name.to_owned(),
                weight: 1,
            })
            .collect(),
        ..SchedulerConfig::default()
    };
    vec![
        ("phalanx", SchedulerConfig::default()),
        ("phalanx-most-allocated", most),
    ]
}

fn group_name(job: &Job) -> String {
    format!("job-{:03}", job.index)
}

/// Runs `jobs` on `node_count` nodes of `gpus_per_node` GPUs with `config`, sampling every `sample`; gives up (the
/// timeline then lacks the jobs not done) after `limit` of virtual time.
pub fn simulate(
    jobs: &[Job],
    node_count: u32,
    gpus_per_node: u32,
    config: &SchedulerConfig,
    sample: Duration,
    limit: Duration,
) -> Timeline {
    let t0 = Instant::now();
    let mut snap = Snapshot::new(nodes(node_count, gpus_per_node));
    let mut queue = SchedulingQueue::new(config);
    let mut sched = Scheduler::new(config.clone());
    let mut tl = Timeline {
        started: vec![None; jobs.len()],
        done: vec![None; jobs.len()],
        ..Timeline::default()
    };
    // Every pod of the burst by name: (job index, latest version).
    let mut pods: BTreeMap<String, (usize, Arc<PodInfo>)> = BTreeMap::new();
    let mut bound = vec![0u32; jobs.len()];
    // Job ends by time (virtual, from t0), then index.
    let mut ends: BTreeMap<(Instant, usize), ()> = BTreeMap::new();
    // GPUs used per node index, from the bound pods.
    let mut used = vec![0u32; node_count as usize];
    let node_index: BTreeMap<Arc<str>, usize> = (0..snap.len())
        .map(|i| (snap.node(i).node.name.clone(), i))
        .collect();
    let total = f64::from(node_count * gpus_per_node);

    // The burst, created before the scheduler starts (as in the end-to-end case): groups first, then pods.
    for job in jobs {
        let g = GroupInfo::new(NS, &group_name(job), GroupPolicy::Gang { min_count: job.pods });
        queue.add_group(Arc::new(g), t0);
        for p in 0..job.pods {
            let pod = Arc::new(pod(job, p));
            queue.add_pod(pod.clone(), t0);
            pods.insert(pod.key.name.to_string(), (job.index, pod));
        }
    }

    let mut now = t0;
    let mut next_sample = t0;
    let secs = |t: Instant| t.duration_since(t0).as_secs_f64();
    loop {
        // Every cycle that is ready now.
        while let Some(entity) = queue.pop(now) {
            let d = sched.schedule(&mut snap, &entity);
            queue.done(&d, now);
            for b in &d.bindings {
                let Some((job, pod)) = pods.get_mut(&*b.pod.name) else {
                    continue;
                };
                let mut p = (**pod).clone();
                p.node_name = Some(b.node.clone());
                *pod = Arc::new(p);
                // The watch confirms the bind.
                queue.update_pod(pod.clone(), now);
                used[node_index[&b.node]] += jobs[*job].gpus_per_pod;
                bound[*job] += 1;
                if bound[*job] == jobs[*job].pods {
                    tl.started[*job] = Some(secs(now));
                    ends.insert((now + Duration::from_secs(u64::from(jobs[*job].run_s)), *job), ());
                }
            }
        }
        if tl.done.iter().all(Option::is_some) || now.duration_since(t0) >= limit {
            break;
        }
        let next = [ends.keys().next().map(|(t, _)| *t), queue.next_wakeup()]
            .into_iter()
            .flatten()
            .min();
        let Some(next) = next else { break };
        let next = next.max(now);
        // Samples up to (not including) the next event: the state is constant in between.
        while next_sample < next {
            let occupied: u32 = used.iter().sum();
            tl.samples.push(Sample {
                t: secs(next_sample),
                occupancy: f64::from(occupied) / total,
                largest_free: used.iter().map(|u| gpus_per_node - u).max().unwrap_or(0),
            });
            next_sample += sample;
        }
        now = next;
        // Jobs that end now: their pods are deleted (their group stays, empty, as it would until deleted).
        while let Some(&(t, job)) = ends.keys().next() {
            if t > now {
                break;
            }
            ends.remove(&(t, job));
            let names: Vec<String> = pods
                .iter()
                .filter(|(_, (j, _))| *j == job)
                .map(|(n, _)| n.clone())
                .collect();
            for name in names {
                let Some((_, p)) = pods.remove(&name) else {
                    continue;
                };
                snap.remove_pod(&p.key);
                if let Some(n) = &p.node_name {
                    used[node_index[n]] -= jobs[job].gpus_per_pod;
                }
                queue.delete_pod(&p, now);
            }
            tl.done[job] = Some(secs(now));
        }
    }
    tl
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack_figures::figures;

    fn job(index: usize, pods: u32, gpus_per_pod: u32, run_s: u32) -> Job {
        Job {
            index,
            pods,
            gpus_per_pod,
            run_s,
        }
    }

    #[test]
    fn a_burst_that_must_run_one_job_after_the_other_takes_their_summed_run_times() {
        // Two nodes of 8 GPUs: job 0 takes both for 10 s, job 1 (one node) can only start after it, for 5 s.
        let jobs = [job(0, 2, 8, 10), job(1, 1, 8, 5)];
        let tl = simulate(
            &jobs,
            2,
            8,
            &SchedulerConfig::default(),
            Duration::from_millis(250),
            Duration::from_secs(600),
        );
        let f = figures(&tl).expect("every job done");
        assert_eq!(tl.started, vec![Some(0.0), Some(10.0)], "{tl:?}");
        assert_eq!(f.makespan_s, 15.0);
        // 10 s full, then 5 s half full: (10 * 1 + 5 * 0.5) / 15.
        assert!((f.mean_occupancy - 12.5 / 15.0).abs() < 1e-9, "{f:?}");
        assert_eq!(f.largest_free_min, 0);
    }

    #[test]
    fn a_gang_that_backed_off_starts_as_soon_as_the_room_it_lacked_is_freed() {
        // Two nodes of 8 GPUs. Job 0 holds one node for 8 s; jobs 1-6 (one GPU each) share the other and end at
        // 1..6 s, each end waking job 7 (both nodes), which fails each time and backs off 1, 2, 4, then 8 s after
        // its failure at 7 s, lacking one node. Job 0's end at 8 s frees that node: job 7 starts then, not when its
        // backoff ends at 15 s.
        let mut jobs = vec![job(0, 1, 8, 8)];
        jobs.extend((1..=6).map(|i| job(i, 1, 1, i as u32)));
        jobs.push(job(7, 2, 8, 2));
        let tl = simulate(
            &jobs,
            2,
            8,
            &SchedulerConfig::default(),
            Duration::from_millis(250),
            Duration::from_secs(600),
        );
        assert_eq!(tl.started[7], Some(8.0), "{tl:?}");
        assert_eq!(figures(&tl).map(|f| f.makespan_s), Some(10.0));
    }
}
