//! The packing benchmark's workload: a seeded burst of GPU gang jobs, in the spirit of NVIDIA's knavigator
//! (`github.com/run-ai/knavigator`, its gang-scheduling and packing task files): jobs of 1-32 pods x 1-8 GPUs per
//! pod (`nvidia.com/gpu`), each a gang (`minCount` = replicas), each with a run time counted from the moment its
//! whole gang is bound.
//!
//! The generator is our own SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
//! OOPSLA 2014; the constants of Java's `SplittableRandom`), so a seed gives the same burst on every build and
//! platform, with no dependency whose stream could change between versions.

/// The extended resource every pack node offers and every pack pod requests.
pub const GPU: &str = "nvidia.com/gpu";

/// SplitMix64: 64 bits of state, one add and a mix per draw.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed` (any value, 0 included).
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `lo..=hi` (`lo <= hi`), by rejection so every value is equally likely.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        let span = hi - lo + 1;
        // The largest multiple of `span` that fits; draws at or above it would favour the low values.
        let zone = u64::MAX - (u64::MAX % span);
        loop {
            let x = self.next_u64();
            if x < zone {
                return lo + x % span;
            }
        }
    }
}

/// The shape of the cluster and of the burst.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BurstSpec {
    /// Seed of the generator.
    pub seed: u64,
    /// Jobs in the burst.
    pub jobs: usize,
    /// Nodes of the cluster.
    pub nodes: u32,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// Most pods (replicas) of one job; at least 1 is drawn.
    pub max_pods: u32,
    /// Most GPUs of one pod; at least 1 is drawn.
    pub max_gpus_per_pod: u32,
    /// Shortest run time (s).
    pub min_run_s: u32,
    /// Longest run time (s).
    pub max_run_s: u32,
}

/// One job of the burst: `pods` identical pods of `gpus_per_pod` GPUs each, a gang of `pods`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    /// Index in the burst (its creation order and name).
    pub index: usize,
    /// Replicas, also the gang's `minCount`.
    pub pods: u32,
    /// `nvidia.com/gpu` of each pod.
    pub gpus_per_pod: u32,
    /// Seconds from the whole gang bound to its pods deleted (the job done).
    pub run_s: u32,
}

impl Job {
    /// GPUs of the whole job.
    pub fn gpus(&self) -> u32 {
        self.pods * self.gpus_per_pod
    }
}

/// True when `pods` pods of `gpus_per_pod` GPUs each fit on an empty cluster of `nodes` x `gpus_per_node`
/// (each node holds `gpus_per_node / gpus_per_pod` of them, whole pods only).
pub fn fits_empty(pods: u32, gpus_per_pod: u32, nodes: u32, gpus_per_node: u32) -> bool {
    gpus_per_pod > 0 && gpus_per_pod <= gpus_per_node && pods <= nodes * (gpus_per_node / gpus_per_pod)
}

/// The burst of `spec`: `spec.jobs` jobs drawn uniformly (pods in `1..=max_pods`, GPUs per pod in
/// `1..=max_gpus_per_pod`, run time in `min_run_s..=max_run_s`); a draw that could never fit the empty cluster is
/// drawn again, so every job can run.
///
/// # Errors
/// When the ranges are empty or no job of that shape can fit (`max_gpus_per_pod` above `gpus_per_node`, or zero
/// nodes), so the generator would never finish.
pub fn burst(spec: &BurstSpec) -> anyhow::Result<Vec<Job>> {
    anyhow::ensure!(
        spec.max_pods >= 1 && spec.max_gpus_per_pod >= 1 && spec.min_run_s <= spec.max_run_s,
        "pack: empty range (max pods {}, max GPUs per pod {}, run time {}..={} s)",
        spec.max_pods,
        spec.max_gpus_per_pod,
        spec.min_run_s,
        spec.max_run_s
    );
    anyhow::ensure!(
        fits_empty(1, 1, spec.nodes, spec.gpus_per_node),
        "pack: a cluster of {} nodes x {} GPUs fits no job",
        spec.nodes,
        spec.gpus_per_node
    );
    let mut rng = SplitMix64::new(spec.seed);
    let mut jobs = Vec::with_capacity(spec.jobs);
    while jobs.len() < spec.jobs {
        let pods = rng.range(1, u64::from(spec.max_pods)) as u32;
        let gpus_per_pod = rng.range(1, u64::from(spec.max_gpus_per_pod)) as u32;
        let run_s = rng.range(u64::from(spec.min_run_s), u64::from(spec.max_run_s)) as u32;
        if fits_empty(pods, gpus_per_pod, spec.nodes, spec.gpus_per_node) {
            jobs.push(Job {
                index: jobs.len(),
                pods,
                gpus_per_pod,
                run_s,
            });
        }
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(seed: u64) -> BurstSpec {
        BurstSpec {
            seed,
            jobs: 50,
            nodes: 32,
            gpus_per_node: 8,
            max_pods: 32,
            max_gpus_per_pod: 8,
            min_run_s: 5,
            max_run_s: 20,
        }
    }

    #[test]
    fn splitmix_matches_the_reference_stream() {
        // The first outputs for seed 0 of the reference implementation (Vigna's splitmix64.c).
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn the_burst_is_deterministic_and_every_job_fits() {
        let a = burst(&spec(41)).unwrap();
        assert_eq!(a, burst(&spec(41)).unwrap());
        assert_ne!(a, burst(&spec(42)).unwrap());
        assert_eq!(a.len(), 50);
        for (i, j) in a.iter().enumerate() {
            assert_eq!(j.index, i);
            assert!(
                (1..=32).contains(&j.pods) && (1..=8).contains(&j.gpus_per_pod),
                "{j:?}"
            );
            assert!((5..=20).contains(&j.run_s), "{j:?}");
            assert!(fits_empty(j.pods, j.gpus_per_pod, 32, 8), "{j:?}");
        }
        // Both ends of each range are drawn over 50 jobs of this seed: the draws are not stuck in the middle.
        assert!(a.iter().any(|j| j.gpus_per_pod >= 7) && a.iter().any(|j| j.gpus_per_pod <= 2));
    }

    #[test]
    fn jobs_too_big_for_the_cluster_are_never_drawn() {
        // 4 nodes x 8 GPUs: 32 pods of 5 GPUs (one per node) cannot fit; every job drawn must.
        let small = BurstSpec { nodes: 4, ..spec(7) };
        let jobs = burst(&small).unwrap();
        assert_eq!(jobs.len(), 50);
        assert!(jobs.iter().all(|j| fits_empty(j.pods, j.gpus_per_pod, 4, 8)));
        assert!(!fits_empty(5, 5, 4, 8) && fits_empty(4, 5, 4, 8) && fits_empty(8, 4, 4, 8));
        assert!(!fits_empty(1, 9, 4, 8));
        let none = BurstSpec {
            max_gpus_per_pod: 0,
            ..spec(7)
        };
        assert!(burst(&none).is_err());
    }
}
