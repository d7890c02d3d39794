//! Resource use of a child process (kube-scheduler or `phalanx run`), read from `/proc/<pid>/status` and
//! `/proc/<pid>/stat` while it still runs.
//!
//! - peak RSS: `VmHWM` ("high water mark" of the resident set) in `status`, in kB;
//! - resident now: `VmRSS` in `status`;
//! - CPU: `utime + stime` (fields 14 and 15 of `stat`: user and system time of the process, all its threads, in
//!   clock ticks), divided by `getconf CLK_TCK` (read once; 100, the Linux value on every common architecture,
//!   when `getconf` is missing).

use std::sync::OnceLock;

/// One reading of a process.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProcSample {
    /// `VmHWM`: peak resident set so far, in bytes.
    pub peak_rss_bytes: u64,
    /// `VmRSS`: resident set now, in bytes.
    pub rss_bytes: u64,
    /// `utime + stime`, in seconds.
    pub cpu_s: f64,
}

impl ProcSample {
    /// Peak RSS in MiB.
    pub fn peak_rss_mb(&self) -> f64 {
        self.peak_rss_bytes as f64 / (1024.0 * 1024.0)
    }

    /// Current RSS in MiB.
    pub fn rss_mb(&self) -> f64 {
        self.rss_bytes as f64 / (1024.0 * 1024.0)
    }
}

/// Reads process `pid`. `None` when it is gone or its files do not parse.
pub fn sample(pid: u32) -> Option<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = stat_cpu_ticks(&stat)?;
    Some(ProcSample {
        peak_rss_bytes: status_kb(&status, "VmHWM")? * 1024,
        rss_bytes: status_kb(&status, "VmRSS")? * 1024,
        cpu_s: ticks as f64 / clock_ticks() as f64,
    })
}

/// The value of a `Key:   1234 kB` line of `/proc/<pid>/status`, in kB.
pub fn status_kb(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        let mut parts = rest.split_whitespace();
        let n = parts.next()?.parse().ok()?;
        (parts.next() == Some("kB")).then_some(n)
    })
}

/// `utime + stime` (clock ticks) from `/proc/<pid>/stat`. The command name (field 2) is in parentheses and may
/// contain spaces and parentheses itself, so fields are counted after the last `)`: there, field 3 (`state`) is
/// the first, so utime (14) and stime (15) are the 12th and 13th.
pub fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second (`getconf CLK_TCK`, read once; 100 if that fails).
pub fn clock_ticks() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .filter(|t: &u64| *t > 0)
            .unwrap_or(100)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tkube-scheduler\nUmask:\t0022\nState:\tS (sleeping)\nPid:\t4242\n\
        VmPeak:\t 1300000 kB\nVmSize:\t 1290000 kB\nVmLck:\t       0 kB\nVmHWM:\t  181234 kB\n\
        VmRSS:\t  150000 kB\nRssAnon:\t  120000 kB\nThreads:\t12\n";

    #[test]
    fn status_values_in_kb() {
        assert_eq!(status_kb(STATUS, "VmHWM"), Some(181_234));
        assert_eq!(status_kb(STATUS, "VmRSS"), Some(150_000));
        // `VmRSS` must not match `VmRSSfoo`-like keys nor a key without the unit.
        assert_eq!(status_kb(STATUS, "Vm"), None);
        assert_eq!(status_kb(STATUS, "Threads"), None);
        assert_eq!(status_kb(STATUS, "VmSwap"), None);
    }

    #[test]
    fn stat_cpu_is_utime_plus_stime() {
        // Fields: pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime ...
        let stat = "4242 (kube-scheduler) S 1 4242 4242 0 -1 4194560 51234 0 12 0 1234 567 0 0 20 0 12 0 \
            987654 1290000000 37500 18446744073709551615 1 1 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(stat_cpu_ticks(stat), Some(1234 + 567));
        // A command name with spaces and a closing parenthesis.
        let odd = "7 (a) b (c)) R 1 7 7 0 -1 0 0 0 0 0 10 20 0 0 20 0 1 0 5 100 10";
        assert_eq!(stat_cpu_ticks(odd), Some(30));
        assert_eq!(stat_cpu_ticks("7 (x) R 1 2"), None);
        assert_eq!(stat_cpu_ticks(""), None);
    }

    #[test]
    fn this_process_can_be_sampled() {
        let s = sample(std::process::id()).expect("own /proc entry");
        assert!(s.peak_rss_bytes >= s.rss_bytes && s.rss_bytes > 0, "{s:?}");
        assert!(s.cpu_s >= 0.0);
        assert!(clock_ticks() > 0);
    }
}
