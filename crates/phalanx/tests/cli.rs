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

/// A scratch directory `sub` of the test's temporary directory, and a writer of files there that returns their path.
fn scratch(sub: &str) -> (std::path::PathBuf, impl Fn(&str, &str) -> String) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(sub);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let at = dir.clone();
    let file = move |name: &str, text: &str| {
        let p = at.join(name);
        std::fs::write(&p, text).expect("write");
        p.display().to_string()
    };
    (dir, file)
}

/// `simulate --config` places with that file's scheduler section, as `phalanx run --config` would: offline (an
/// empty snapshot and the Nodes as manifests), one 2-CPU pod between a 4-CPU node and a 16-CPU node goes to the big
/// one under the default `LeastAllocated` and to the small one under `MostAllocated`. A bad key is refused by name.
#[test]
fn simulate_reads_the_scheduler_config() {
    let (dir, file) = scratch("simulate-config");
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

/// `simulate` reads upstream's own groups from manifests (`scheduling.k8s.io/v1beta1` PodGroup, a CompositePodGroup
/// at `v1beta1`) as a cluster serving them would: a native gang of 2 whose pods join it by
/// `spec.schedulingGroup.podGroupName` lands whole; a gang of 3 on room for 2 is `Unschedulable` and places nothing;
/// a Phalanx-only field on upstream's object is refused by name, as the API server would refuse it.
#[test]
fn simulate_places_upstreams_own_groups() {
    let (_, file) = scratch("simulate-native");
    let empty = file("empty.yaml", "{apiVersion: v1, kind: List, items: []}\n");
    let pod = |name: &str, group: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  \
             schedulerName: phalanx-scheduler\n  schedulingGroup: {{podGroupName: {group}}}\n  containers:\n  \
             - name: c\n    image: busybox\n    resources: {{requests: {{cpu: \"2\"}}}}\n"
        )
    };
    let group = |name: &str, min: u32, parent: &str| {
        format!(
            "apiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\nmetadata: {{name: {name}, namespace: default}}\n\
             spec:\n  {parent}schedulingPolicy: {{gang: {{minCount: {min}}}}}\n"
        )
    };
    let node = "apiVersion: v1\nkind: Node\nmetadata: {name: n0, labels: {kubernetes.io/hostname: n0}}\nstatus:\n  \
                allocatable: {cpu: \"4\", memory: 8Gi, pods: \"110\"}\n  capacity: {cpu: \"4\", memory: 8Gi, pods: \"110\"}\n";
    let fits = file(
        "fits.yaml",
        &[
            node,
            &group("train", 2, ""),
            &pod("a", "train"),
            &pod("b", "train"),
        ]
        .join("---\n"),
    );
    let (ok, out, err) = phalanx(&["simulate", "--snapshot", &empty, "-f", &fits]);
    assert!(ok, "simulate: {err}");
    assert!(
        out.contains("PodGroup.scheduling.k8s.io default/train: Scheduled")
            && out.contains("a -> n0")
            && out.contains("b -> n0"),
        "the native gang lands whole: {out}"
    );
    let tree = "apiVersion: scheduling.k8s.io/v1beta1\nkind: CompositePodGroup\nmetadata: {name: job, namespace: default}\n\
                spec:\n  workloadRef: {workloadName: w, templateName: job}\n  schedulingPolicy: {gang: {minGroupCount: 1}}\n";
    let too_big = file(
        "too-big.yaml",
        &[
            node,
            tree,
            &group(
                "big",
                3,
                "parentCompositePodGroupName: job\n  workloadRef: {workloadName: w, templateName: big}\n  ",
            ),
            &pod("m1", "big"),
            &pod("m2", "big"),
            &pod("m3", "big"),
        ]
        .join("---\n"),
    );
    let (ok, out, err) = phalanx(&["simulate", "--snapshot", &empty, "-f", &too_big]);
    assert!(ok, "simulate: {err}");
    assert!(
        out.contains("CompositePodGroup.scheduling.k8s.io default/job: Unschedulable")
            && !out.contains(" -> n0"),
        "a gang of 3 on room for 2 places nothing: {out}"
    );
    let phalanx_only = file(
        "phalanx-only.yaml",
        "apiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\nmetadata: {name: g}\nspec:\n  \
         schedulingPolicy: {gang: {minCount: 1}}\n  recoveryPolicy: {maxRestarts: 1}\n",
    );
    let (ok, _, err) = phalanx(&["simulate", "--snapshot", &empty, "-f", &phalanx_only]);
    assert!(!ok, "a Phalanx-only field on upstream's object must fail");
    assert!(err.contains("recoveryPolicy"), "the error names the field: {err}");
}
