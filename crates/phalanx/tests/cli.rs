//! The `phalanx` binary as a user runs it from a shell.

use std::io::Read;
use std::process::{Command, Stdio};

/// `phalanx crds | head` closes the pipe after a few lines: the binary must exit cleanly, not panic on the broken
/// pipe (`print!` did).
#[test]
fn crds_into_a_closed_pipe_exits_cleanly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_phalanx"))
        .arg("crds")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("phalanx starts");
    let mut out = child.stdout.take().expect("stdout");
    let mut first = [0u8; 2048];
    out.read_exact(&mut first).expect("some output");
    drop(out);
    let status = child.wait().expect("phalanx exits");
    let mut err = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("stderr readable");
    assert!(!err.contains("panicked"), "no panic: {err}");
    assert!(status.success(), "exit status {status:?}, stderr: {err}");
    assert!(
        String::from_utf8_lossy(&first).contains("apiVersion"),
        "it printed YAML"
    );
}

/// Runs `phalanx <args>` and returns (success, stdout, stderr).
fn phalanx(args: &[&str]) -> (bool, String, String) {
    // The built-in configuration unless the test passes `--config`, whatever the developer's shell sets.
    let out = Command::new(env!("CARGO_BIN_EXE_phalanx"))
        .env_remove("PHALANX_CONFIG")
        .args(args)
        .output()
        .expect("phalanx runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `simulate --config` places with that file's scheduler section, as `phalanx run --config` would: offline (an
/// empty snapshot and the Nodes as manifests), one 2-CPU pod between a 4-CPU node and a 16-CPU node goes to the big
/// one under the default `LeastAllocated` and to the small one under `MostAllocated`. A bad key is refused by name.
#[test]
fn simulate_reads_the_scheduler_config() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("simulate-config");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p.display().to_string()
    };
    let empty = file("empty.yaml", "{apiVersion: v1, kind: List, items: []}\n");
    let node = |name: &str, size: u32| {
        format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}}}}}\n\
             status:\n  allocatable: {{cpu: \"{size}\", memory: {size}Gi, pods: \"110\"}}\n  \
             capacity: {{cpu: \"{size}\", memory: {size}Gi, pods: \"110\"}}\n"
        )
    };
    let manifests = file(
        "cluster.yaml",
        &format!(
            "{}---\n{}---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: default}}\nspec:\n  \
             schedulerName: phalanx-scheduler\n  containers:\n  - name: c\n    image: busybox\n    \
             resources: {{requests: {{cpu: \"2\", memory: 2Gi}}}}\n",
            node("small", 4),
            node("big", 16)
        ),
    );
    let most = file(
        "most.yaml",
        "apiVersion: config.phalanx.dev/v1alpha1\nkind: PhalanxConfiguration\nscheduler:\n  scoringStrategy: MostAllocated\n",
    );
    let bad = file(
        "bad.yaml",
        "apiVersion: config.phalanx.dev/v1alpha1\nkind: PhalanxConfiguration\nscheduler:\n  scoringStrategi: MostAllocated\n",
    );
    let base = ["simulate", "--snapshot", &empty, "-f", &manifests];
    let (ok, out, err) = phalanx(&base);
    assert!(ok, "default simulate: {err}");
    assert!(
        out.contains("p -> big"),
        "LeastAllocated spreads to the big node: {out}"
    );
    let (ok, out, err) = phalanx(&[&base[..], &["--config", &most]].concat());
    assert!(ok, "simulate --config: {err}");
    assert!(
        out.contains("p -> small"),
        "MostAllocated packs onto the small node: {out}"
    );
    let (ok, _, err) = phalanx(&[&base[..], &["--config", &bad]].concat());
    assert!(!ok, "a bad key must fail");
    assert!(err.contains("scoringStrategi"), "the error names the key: {err}");
    // A missing file: one clear line, the OS error once.
    let missing = dir.join("missing.yaml").display().to_string();
    let (ok, _, err) = phalanx(&[&base[..], &["--config", &missing]].concat());
    assert!(!ok, "a missing file must fail");
    assert_eq!(err.matches("No such file").count(), 1, "the OS error once: {err}");
}
