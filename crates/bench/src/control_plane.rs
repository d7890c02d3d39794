//! CPU time of the control plane's processes (kube-apiserver, etcd, kube-controller-manager, kwok) over a run's
//! bind phase, to tell whether the API server or the scheduler limits the rate: on a 2-core machine an API server
//! near one and a half cores while the scheduler waits on its binds is the ceiling, not the scheduler.
//!
//! `hack/cluster.sh` records each process it starts in `<state>/pids/<name>` as `PID EXE`; the PID is read only
//! while `/proc/<pid>/exe` still is that executable, so a reused PID is never measured. CPU is `utime + stime` of
//! `/proc/<pid>/stat` ([`crate::procfs`]).

use std::path::Path;
use std::time::Instant;

/// The processes measured, by their name in `<state>/pids/`.
const PROCESSES: [&str; 4] = ["kube-apiserver", "etcd", "kube-controller-manager", "kwok"];

/// CPU seconds of each control-plane process at one instant (`None` for a process not found).
#[derive(Clone, Debug)]
pub struct CpuReading {
    at: Instant,
    cpu_s: Vec<(&'static str, Option<f64>)>,
}

/// Reads the CPU time of every process in [`PROCESSES`] now.
pub fn read(state_dir: &Path) -> CpuReading {
    CpuReading {
        at: Instant::now(),
        cpu_s: PROCESSES
            .iter()
            .map(|name| {
                (
                    *name,
                    pid_of(state_dir, name)
                        .and_then(crate::procfs::sample)
                        .map(|s| s.cpu_s),
                )
            })
            .collect(),
    }
}

/// The PID recorded for `name`, while it still runs the recorded executable.
fn pid_of(state_dir: &Path, name: &str) -> Option<u32> {
    let rec = std::fs::read_to_string(state_dir.join("pids").join(name)).ok()?;
    let (pid, exe) = parse_record(&rec)?;
    let running = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    (running == Path::new(exe)).then_some(pid)
}

/// `PID EXE` (one line) into its parts.
fn parse_record(rec: &str) -> Option<(u32, &str)> {
    let (pid, exe) = rec.trim().split_once(' ')?;
    Some((pid.parse().ok()?, exe.trim()))
}

/// `bench-e2e: <case> control_plane_cpu <phase> window_s=<w> kube-apiserver=<s>s/<c>cores ...`: each process's CPU
/// seconds between two readings and its share of the window in cores (CPU seconds per second of wall time), plus
/// `scheduler=` the scheduler process's, when given (CPU seconds in the same window).
pub fn line(
    case: &str,
    phase: &str,
    before: &CpuReading,
    after: &CpuReading,
    scheduler_cpu_s: Option<f64>,
) -> String {
    let window = after.at.saturating_duration_since(before.at).as_secs_f64();
    let mut out = format!("bench-e2e: {case} control_plane_cpu {phase} window_s={window:.1}");
    let mut entries: Vec<(&str, Option<f64>)> = before
        .cpu_s
        .iter()
        .zip(&after.cpu_s)
        .map(|((name, a), (_, b))| (*name, a.zip(*b).map(|(a, b)| b - a)))
        .collect();
    entries.push(("scheduler", scheduler_cpu_s));
    for (name, used) in entries {
        match used {
            Some(s) if window > 0.0 => out.push_str(&format!(" {name}={s:.1}s/{:.2}cores", s / window)),
            _ => out.push_str(&format!(" {name}=n/a")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_record_is_pid_then_executable() {
        assert_eq!(
            parse_record("4242 /bin/kube-apiserver\n"),
            Some((4242, "/bin/kube-apiserver"))
        );
        assert_eq!(parse_record("x /bin/etcd"), None);
        assert_eq!(parse_record(""), None);
    }

    #[test]
    fn the_line_gives_seconds_and_cores_per_process() {
        let t = Instant::now();
        let before = CpuReading {
            at: t,
            cpu_s: vec![("kube-apiserver", Some(10.0)), ("etcd", None)],
        };
        let after = CpuReading {
            at: t + Duration::from_secs(20),
            cpu_s: vec![("kube-apiserver", Some(40.0)), ("etcd", Some(3.0))],
        };
        assert_eq!(
            line("phalanx", "binds", &before, &after, Some(5.0)),
            "bench-e2e: phalanx control_plane_cpu binds window_s=20.0 kube-apiserver=30.0s/1.50cores etcd=n/a \
             scheduler=5.0s/0.25cores"
        );
    }
}
