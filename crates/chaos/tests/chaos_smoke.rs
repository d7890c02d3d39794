//! The chaos suite's short subset inside `cargo test` / `make test`: one run of every fault against the real
//! `phalanx` binary, on a control plane this test starts itself (a few minutes on 2 cores). It fails on any
//! violation of I1-I8 and on any harness failure; it never skips. `make chaos` runs the full suite.

use std::path::{Path, PathBuf};
use std::process::Command;

use phalanx_chaos::{Fault, Profile, SuiteOptions};

/// `<target>` and the profile directory (`debug`/`release`) of this test binary (`<target>/<profile>/deps/<exe>`).
fn target_and_profile() -> (PathBuf, String) {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    let profile_dir = deps.parent().expect("profile dir");
    let target = profile_dir.parent().expect("target dir").to_path_buf();
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("debug")
        .to_owned();
    (target, profile)
}

/// Builds the `phalanx` binary into this test's target directory (a no-op when `cargo test --workspace` built it
/// already; cargo releases its build lock before running tests, so this does not deadlock).
fn phalanx_binary() -> PathBuf {
    let (target, profile) = target_and_profile();
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-p", "phalanx", "--bin", "phalanx"])
        .env("CARGO_TARGET_DIR", &target);
    if profile == "release" {
        cmd.arg("--release");
    }
    let status = cmd.status().expect("running cargo build -p phalanx");
    assert!(status.success(), "cargo build -p phalanx failed: {status}");
    let bin = target.join(&profile).join("phalanx");
    assert!(
        Path::new(&bin).is_file(),
        "no phalanx binary at {}",
        bin.display()
    );
    bin
}

#[test]
fn chaos_smoke() {
    let phalanx_bin = phalanx_binary();
    let (target, _) = target_and_profile();
    let work_dir = target.join("chaos").join(format!("smoke-{}", std::process::id()));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let opts = SuiteOptions {
        phalanx_bin,
        work_dir: work_dir.clone(),
        keep: false,
        seed: rand::random(),
    };
    let report = runtime
        .block_on(phalanx_chaos::run(Profile::smoke(), opts))
        .unwrap_or_else(|e| {
            panic!(
                "the chaos suite itself failed: {e:#} (logs in {})",
                work_dir.display()
            )
        });
    let text = report.render(5);
    let _ = std::fs::write(work_dir.join("report.txt"), &text);
    let _ = std::fs::write(work_dir.join("violations.txt"), report.render(usize::MAX));
    eprintln!("{text}");
    let ran: Vec<Fault> = report.results.iter().map(|r| r.fault).collect();
    assert_eq!(
        ran,
        Profile::SMOKE_FAULTS.to_vec(),
        "one run of every smoke fault"
    );
    assert_eq!(report.controls.len(), 7, "every invariant's control ran");
    assert!(
        report.harness_errors().is_empty(),
        "harness errors: {:?}",
        report.harness_errors()
    );
    assert!(
        report.ok(),
        "{} violation(s) of I1-I8; the report is above and in {}",
        report.violations().len(),
        work_dir.join("violations.txt").display()
    );
}
