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
