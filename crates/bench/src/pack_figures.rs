//! The figures of one packing run, from its [`Timeline`] (the end-to-end case's and the simulation's alike):
//! mean GPU occupancy, the last start, the makespan and the largest free block, up to the makespan.

use crate::pack_track::Timeline;

/// What one run measured (seconds from the scheduler's start).
#[derive(Clone, Debug, PartialEq)]
pub struct Figures {
    /// Mean of the occupancy samples up to the makespan.
    pub mean_occupancy: f64,
    /// The last job's whole gang bound.
    pub last_start_s: f64,
    /// The last job completed.
    pub makespan_s: f64,
    /// Smallest of the per-sample largest free block (GPUs on one node) up to the makespan.
    pub largest_free_min: u32,
    /// Mean of the same.
    pub largest_free_mean: f64,
    /// Samples counted.
    pub samples: usize,
}

impl Figures {
    /// `mean_occupancy=... last_start_s=... makespan_s=... largest_free_min=... largest_free_mean=... samples=...`,
    /// the figures of a `bench-pack:` or `bench-pack-sim:` line.
    pub fn line(&self) -> String {
        format!(
            "mean_occupancy={:.3} last_start_s={:.1} makespan_s={:.1} largest_free_min={} largest_free_mean={:.2} \
             samples={}",
            self.mean_occupancy,
            self.last_start_s,
            self.makespan_s,
            self.largest_free_min,
            self.largest_free_mean,
            self.samples
        )
    }
}

/// The figures of a complete timeline (every job started and done); `None` when a job is missing.
pub fn figures(tl: &Timeline) -> Option<Figures> {
    let last_start_s = tl
        .started
        .iter()
        .copied()
        .collect::<Option<Vec<f64>>>()?
        .into_iter()
        .fold(0.0, f64::max);
    let makespan_s = tl
        .done
        .iter()
        .copied()
        .collect::<Option<Vec<f64>>>()?
        .into_iter()
        .fold(0.0, f64::max);
    let window: Vec<_> = tl.samples.iter().filter(|s| s.t <= makespan_s).collect();
    let n = window.len().max(1) as f64;
    Some(Figures {
        mean_occupancy: window.iter().map(|s| s.occupancy).sum::<f64>() / n,
        last_start_s,
        makespan_s,
        largest_free_min: window.iter().map(|s| s.largest_free).min().unwrap_or(0),
        largest_free_mean: window.iter().map(|s| f64::from(s.largest_free)).sum::<f64>() / n,
        samples: window.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack_track::Sample;

    #[test]
    fn figures_cover_the_run_up_to_the_makespan() {
        let s = |t, occupancy, largest_free| Sample {
            t,
            occupancy,
            largest_free,
        };
        let tl = Timeline {
            started: vec![Some(1.0), Some(3.0)],
            done: vec![Some(4.0), Some(6.0)],
            samples: vec![
                s(0.0, 0.0, 8),
                s(2.0, 0.5, 2),
                s(4.0, 1.0, 0),
                s(6.0, 0.5, 4),
                s(8.0, 0.0, 8),
            ],
            error: None,
        };
        let f = figures(&tl).unwrap();
        assert_eq!(f.samples, 4);
        assert!((f.mean_occupancy - 0.5).abs() < 1e-9, "{f:?}");
        assert_eq!((f.last_start_s, f.makespan_s, f.largest_free_min), (3.0, 6.0, 0));
        assert!((f.largest_free_mean - 3.5).abs() < 1e-9, "{f:?}");
        assert_eq!(
            f.line(),
            "mean_occupancy=0.500 last_start_s=3.0 makespan_s=6.0 largest_free_min=0 largest_free_mean=3.50 samples=4"
        );
        let unfinished = Timeline {
            done: vec![Some(4.0), None],
            ..tl
        };
        assert_eq!(figures(&unfinished), None);
    }
}
