//! The container image of `make image` (hack/image.sh), built without a container engine: the archive is unpacked
//! and checked as an engine would read it. Its OCI layout (index -> manifest -> config and layer, every digest and
//! size) and its `docker save` view (manifest.json) agree; the config has the Containerfile's user, entrypoint,
//! command, environment and labels and the build machine's architecture (also in the index's platform); the name is
//! the chart's default image; the one layer holds /usr/local/bin/phalanx and its directories, owned by root and
//! dated SOURCE_DATE_EPOCH (the commit time); the binary from the unpacked root file system is static and runs
//! (`version`, `crds` equal to crds/phalanx.yaml, `run --help`); `crane` (hack/build-crane.sh) pushes the layout
//! and the archive to a registry it serves on loopback; and packaging the same binary again gives the same digest.
//!
//! The test builds the image itself (a release build for the musl target, cached in the target directory like any
//! cargo build: 10-20 minutes cold on 2 cores), so it never skips. Two builds of one commit from scratch giving one
//! digest is `make image-reproducible`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use phalanx_testenv::{LoopbackRegistry, crane_binary};
use serde_json::Value;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repo root")
}

/// The target directory of this test binary (`<target>/<profile>/deps/<exe>`): `make image` and this test share it.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    exe.ancestors()
        .nth(3)
        .expect("<target>/<profile>/deps/<exe>")
        .to_owned()
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(cmd: &mut Command) -> String {
    String::from_utf8(run(cmd).stdout).expect("UTF-8 output")
}

fn sha256(path: &Path) -> String {
    let out = stdout(Command::new("sha256sum").arg(path));
    format!(
        "sha256:{}",
        out.split_whitespace().next().expect("sha256sum output")
    )
}

fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Runs hack/image.sh with `env` and returns its output directory (`<target>/image`) and its stdout.
fn image_sh(env: &[(&str, &str)]) -> (PathBuf, String) {
    let target = target_dir();
    let mut cmd = Command::new("bash");
    cmd.arg("hack/image.sh")
        .current_dir(repo_root())
        .env("CARGO_TARGET_DIR", &target)
        .envs(env.iter().copied());
    let out = stdout(&mut cmd);
    eprintln!("{out}");
    (target.join("image"), out)
}

/// The image, built once per test process, unpacked: (the archive, the unpacked layout).
fn image() -> &'static (PathBuf, PathBuf) {
    static IMAGE: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let (out, log) = image_sh(&[]);
        for step in 1..=6 {
            assert!(
                log.contains(&format!("[image {step}/6 ")),
                "no progress line for step {step}:\n{log}"
            );
        }
        // This version's archive by name: the directory may still hold an earlier version's.
        let archive = out.join(format!(
            "phalanx-{}-linux-{}.tar",
            env!("CARGO_PKG_VERSION"),
            oci_arch()
        ));
        assert!(
            archive.is_file(),
            "hack/image.sh did not write {}:\n{log}",
            archive.display()
        );
        let unpacked = out.join("test-unpacked");
        let _ = std::fs::remove_dir_all(&unpacked);
        std::fs::create_dir_all(&unpacked).expect("unpack dir");
        run(Command::new("tar")
            .arg("-xf")
            .arg(&archive)
            .arg("-C")
            .arg(&unpacked));
        (archive, unpacked)
    })
}

/// A blob of the unpacked layout by its digest, checked against that digest and, when given, its size.
fn blob(layout: &Path, digest: &Value, size: Option<&Value>) -> PathBuf {
    let digest = digest.as_str().expect("digest string");
    let path = layout
        .join("blobs/sha256")
        .join(digest.strip_prefix("sha256:").expect("sha256 digest"));
    assert_eq!(
        sha256(&path),
        digest,
        "blob {} does not match its digest",
        path.display()
    );
    if let Some(size) = size {
        let len = std::fs::metadata(&path).expect("blob").len();
        assert_eq!(Some(len), size.as_u64(), "size of {digest}");
    }
    path
}

/// (index, manifest, config) of the unpacked layout, every reference checked.
fn documents(layout: &Path) -> (Value, Value, Value) {
    assert_eq!(
        json(&layout.join("oci-layout")),
        serde_json::json!({"imageLayoutVersion": "1.0.0"})
    );
    let index = json(&layout.join("index.json"));
    assert_eq!(index["mediaType"], "application/vnd.oci.image.index.v1+json");
    let manifests = index["manifests"].as_array().expect("manifests");
    assert_eq!(manifests.len(), 1, "one image: {index}");
    let m = &manifests[0];
    assert_eq!(m["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    let manifest = json(&blob(layout, &m["digest"], Some(&m["size"])));
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.oci.image.config.v1+json"
    );
    let config = json(&blob(
        layout,
        &manifest["config"]["digest"],
        Some(&manifest["config"]["size"]),
    ));
    (index, manifest, config)
}

/// The architecture name of the OCI image spec for this machine.
fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => panic!("hack/image.sh supports x86_64 and aarch64, not {other}"),
    }
}

/// The final stage of the Containerfile: its USER, ENTRYPOINT, CMD, ENV and LABEL values (continuation lines joined).
fn containerfile() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(repo_root().join("Containerfile")).expect("Containerfile");
    let joined = text.replace("\\\n", " ");
    let stage = joined
        .rsplit_once("\nFROM ")
        .expect("a multi-stage Containerfile")
        .1;
    assert!(
        stage.starts_with("scratch"),
        "the image stage starts FROM scratch: {stage}"
    );
    let mut out = BTreeMap::new();
    for line in stage.lines().map(str::trim) {
        let Some((word, rest)) = line.split_once(' ') else {
            continue;
        };
        match word {
            "USER" | "ENTRYPOINT" | "CMD" => {
                out.insert(word.to_owned(), rest.trim().to_owned());
            }
            "ENV" | "LABEL" => {
                for (k, v) in pairs(rest) {
                    out.insert(format!("{word} {k}"), v);
                }
            }
            _ => {}
        }
    }
    out
}

/// `KEY=VALUE KEY="VALUE WITH SPACES" ...` of an ENV or LABEL instruction.
fn pairs(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    while let Some((key, after)) = rest.split_once('=') {
        let (value, next) = match after.strip_prefix('"') {
            Some(quoted) => quoted.split_once('"').expect("closing quote"),
            None => after.split_once(char::is_whitespace).unwrap_or((after, "")),
        };
        out.push((key.trim().to_owned(), value.to_owned()));
        rest = next.trim_start();
    }
    out
}

fn chart_image() -> String {
    let root = repo_root();
    let values: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(root.join("charts/phalanx/values.yaml")).expect("values"),
    )
    .expect("values.yaml");
    let chart: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(root.join("charts/phalanx/Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml");
    assert_eq!(
        values["image"]["tag"], "",
        "the chart's tag defaults to its appVersion"
    );
    assert_eq!(
        chart["appVersion"],
        env!("CARGO_PKG_VERSION"),
        "the chart's appVersion is the binary's version"
    );
    format!(
        "{}:{}",
        values["image"]["repository"].as_str().expect("repository"),
        env!("CARGO_PKG_VERSION")
    )
}

#[test]
fn image_config_is_the_containerfiles_and_the_name_is_the_charts() {
    let (_, layout) = image();
    let (index, _, config) = documents(layout);
    let reference = chart_image();
    let m = &index["manifests"][0];
    assert_eq!(
        m["platform"],
        serde_json::json!({"architecture": oci_arch(), "os": "linux"})
    );
    assert_eq!(
        m["annotations"]["org.opencontainers.image.ref.name"],
        reference.as_str()
    );
    assert_eq!(m["annotations"]["io.containerd.image.name"], reference.as_str());
    assert_eq!(config["architecture"], oci_arch());
    assert_eq!(config["os"], "linux");

    let c = &config["config"];
    let cf = containerfile();
    assert_eq!(c["User"], "65532:65532");
    assert_eq!(cf["USER"], "65532:65532");
    assert_eq!(c["Entrypoint"], serde_json::json!(["phalanx"]));
    assert_eq!(
        serde_json::from_str::<Value>(&cf["ENTRYPOINT"]).expect("exec form"),
        c["Entrypoint"]
    );
    assert_eq!(c["Cmd"], serde_json::json!(["run"]));
    assert_eq!(
        serde_json::from_str::<Value>(&cf["CMD"]).expect("exec form"),
        c["Cmd"]
    );
    assert_eq!(c["Env"], serde_json::json!([format!("PATH={}", cf["ENV PATH"])]));
    let labels = c["Labels"].as_object().expect("labels");
    for (key, want) in cf
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("LABEL ")?, v)))
    {
        let got = labels
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no label {key}"));
        if want.starts_with("${") {
            // A build argument in the Containerfile; hack/image.sh stamps it from the commit.
            assert!(!got.is_empty(), "label {key} is empty");
        } else {
            assert_eq!(got, want, "label {key}");
        }
    }
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(
        labels["org.opencontainers.image.licenses"],
        env!("CARGO_PKG_LICENSE")
    );
    assert_eq!(
        labels["org.opencontainers.image.source"],
        env!("CARGO_PKG_REPOSITORY")
    );
    let epoch = stdout(
        Command::new("git")
            .args(["log", "-1", "--format=%ct"])
            .current_dir(repo_root()),
    );
    let created =
        stdout(Command::new("date").args(["-u", "-d", &format!("@{}", epoch.trim()), "+%Y-%m-%dT%H:%M:%SZ"]));
    assert_eq!(config["created"], created.trim(), "created is the commit time");
    assert_eq!(labels["org.opencontainers.image.created"], created.trim());
    let head = stdout(
        Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(repo_root()),
    );
    let revision = labels["org.opencontainers.image.revision"]
        .as_str()
        .expect("revision");
    assert!(
        revision.starts_with(head.trim()),
        "revision {revision} is not HEAD {head}"
    );

    // `docker save`'s view of the same archive (what docker's classic store and `crane push` of a tarball read).
    let docker = json(&layout.join("manifest.json"));
    let d = &docker[0];
    assert_eq!(d["RepoTags"], serde_json::json!([reference]));
    let (_, manifest, _) = documents(layout);
    let hex = |v: &Value| v.as_str().expect("digest").replace("sha256:", "blobs/sha256/");
    assert_eq!(d["Config"], hex(&manifest["config"]["digest"]).as_str());
    assert_eq!(
        d["Layers"],
        serde_json::json!([hex(&manifest["layers"][0]["digest"])])
    );
}

#[test]
fn the_one_layer_holds_only_the_static_binary_which_runs() {
    let (_, layout) = image();
    let (_, manifest, config) = documents(layout);
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "{manifest}");
    assert_eq!(
        layers[0]["mediaType"],
        "application/vnd.oci.image.layer.v1.tar+gzip"
    );
    let layer = blob(layout, &layers[0]["digest"], Some(&layers[0]["size"]));

    // diff_id: the digest of the uncompressed layer.
    let tar = layout.join("../test-layer.tar");
    let gunzip = run(Command::new("gzip").arg("-dc").arg(&layer));
    std::fs::write(&tar, &gunzip.stdout).expect("layer tar");
    assert_eq!(config["rootfs"]["diff_ids"], serde_json::json!([sha256(&tar)]));

    // Entries: sorted, owned by root, dated SOURCE_DATE_EPOCH, the binary executable by everyone.
    let listing = stdout(
        Command::new("tar")
            .args(["--numeric-owner", "--full-time", "-tvf"])
            .arg(&tar),
    );
    let entries: Vec<Vec<&str>> = listing.lines().map(|l| l.split_whitespace().collect()).collect();
    let names: Vec<&str> = entries.iter().map(|e| e[5]).collect();
    assert_eq!(
        names,
        ["usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/phalanx"],
        "{listing}"
    );
    let epoch = stdout(
        Command::new("git")
            .args(["log", "-1", "--format=%ct"])
            .current_dir(repo_root()),
    );
    let when =
        stdout(Command::new("date").args(["-u", "-d", &format!("@{}", epoch.trim()), "+%Y-%m-%d %H:%M:%S"]));
    for e in &entries {
        assert_eq!(e[1], "0/0", "owner of {}", e[5]);
        assert!(e[0].ends_with("rwxr-xr-x"), "mode of {}: {}", e[5], e[0]);
        // GNU tar prints the time in the local zone; TZ=UTC is not forced on it, so compare after converting.
        let shown = format!("{} {}", e[3], e[4]);
        let utc = stdout(Command::new("date").args(["-u", "-d", &shown, "+%Y-%m-%d %H:%M:%S"]));
        assert_eq!(utc.trim(), when.trim(), "mtime of {}", e[5]);
    }

    // The unpacked root file system: the binary is static (no interpreter, no shared library) and runs.
    let rootfs = layout.join("../test-rootfs");
    let _ = std::fs::remove_dir_all(&rootfs);
    std::fs::create_dir_all(&rootfs).expect("rootfs");
    run(Command::new("tar").arg("-xf").arg(&tar).arg("-C").arg(&rootfs));
    let bin = rootfs.join("usr/local/bin/phalanx");
    let program_headers = stdout(Command::new("readelf").arg("-lW").arg(&bin));
    assert!(
        !program_headers.contains("INTERP"),
        "the binary asks for a dynamic loader:\n{program_headers}"
    );
    let dynamic = stdout(Command::new("readelf").arg("-dW").arg(&bin));
    assert!(
        !dynamic.contains("(NEEDED)"),
        "the binary needs shared libraries:\n{dynamic}"
    );
    // Run as the image does: nothing from the host's environment.
    let in_image = |args: &[&str]| {
        let mut cmd = Command::new(&bin);
        cmd.args(args)
            .env_clear()
            .env("PATH", "/usr/local/bin")
            .current_dir(&rootfs);
        stdout(&mut cmd)
    };
    assert_eq!(
        in_image(&["version"]),
        format!("phalanx {}\n", env!("CARGO_PKG_VERSION"))
    );
    let crds = std::fs::read_to_string(repo_root().join("crds/phalanx.yaml")).expect("crds/phalanx.yaml");
    assert!(
        in_image(&["crds"]) == crds,
        "`phalanx crds` of the image differs from crds/phalanx.yaml"
    );
    let help = in_image(&["run", "--help"]);
    assert!(
        help.contains("Usage: phalanx run") && help.contains("--leader-elect"),
        "{help}"
    );
}

#[test]
fn crane_pushes_the_layout_and_the_archive() {
    let (archive, layout) = image();
    let (index, manifest, _) = documents(layout);
    let crane = crane_binary().expect("crane");
    let registry = LoopbackRegistry::start(&crane).expect("registry");
    // The layout keeps the manifest's digest; the archive, read through manifest.json, is pushed with docker media
    // types (another manifest digest) but the same config and layer.
    let by_layout = format!("{}/phalanx:layout", registry.host);
    let pushed = stdout(Command::new(&crane).arg("push").arg(layout).arg(&by_layout));
    assert!(
        pushed
            .trim()
            .ends_with(index["manifests"][0]["digest"].as_str().expect("digest")),
        "{pushed}"
    );
    assert_eq!(
        stdout(Command::new(&crane).args(["digest", &by_layout])).trim(),
        index["manifests"][0]["digest"]
    );
    let by_archive = format!("{}/phalanx:archive", registry.host);
    run(Command::new(&crane).arg("push").arg(archive).arg(&by_archive));
    let remote: Value = serde_json::from_str(&stdout(Command::new(&crane).args(["manifest", &by_archive])))
        .expect("manifest");
    assert_eq!(remote["config"]["digest"], manifest["config"]["digest"]);
    assert_eq!(remote["layers"][0]["digest"], manifest["layers"][0]["digest"]);
    let config = stdout(Command::new(&crane).args(["config", &by_archive]));
    let local = std::fs::read_to_string(blob(layout, &manifest["config"]["digest"], None)).expect("config");
    assert_eq!(
        config.trim_end(),
        local.trim_end(),
        "the registry serves the archive's config"
    );
}

#[test]
fn packaging_the_same_binary_again_gives_the_same_digest() {
    let (archive, _) = image();
    let first = std::fs::read(archive).expect("archive");
    let digest = std::fs::read_to_string(target_dir().join("image/digest")).expect("digest file");
    // Another scratch directory and a fresh mtime on the binary: neither may reach the archive.
    let bin = target_dir().join(format!(
        "{}-unknown-linux-musl/release/phalanx",
        std::env::consts::ARCH
    ));
    run(Command::new("touch").arg(&bin));
    let tmp = std::env::temp_dir().join(format!("phalanx-image-test-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).expect("tmp");
    let (out, _) = image_sh(&[("IMAGE_SKIP_BUILD", "1"), ("TMPDIR", tmp.to_str().expect("path"))]);
    assert_eq!(
        std::fs::read_to_string(out.join("digest")).expect("digest"),
        digest
    );
    assert!(
        std::fs::read(archive).expect("archive") == first,
        "the archive's bytes changed"
    );
}

/// One version for everything a release publishes (hack/release.sh refuses to release otherwise): the binary's
/// (Cargo.toml's `[workspace.package] version`), the chart's `version` and `appVersion`, the newest CHANGELOG.md
/// entry, and what `phalanx version` prints.
#[test]
fn one_version_for_the_binary_the_chart_and_the_changelog() {
    let root = repo_root();
    let version = env!("CARGO_PKG_VERSION");
    let chart: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(root.join("charts/phalanx/Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml");
    assert_eq!(chart["version"], version, "the chart's version is the binary's");
    assert_eq!(
        chart["appVersion"], version,
        "the chart's appVersion is the binary's"
    );
    let changelog = std::fs::read_to_string(root.join("CHANGELOG.md")).expect("CHANGELOG.md");
    let newest = changelog
        .lines()
        .find_map(|l| l.strip_prefix("## ["))
        .and_then(|l| l.split(']').next())
        .expect("CHANGELOG.md has an entry '## [X.Y.Z] - date'");
    assert_eq!(newest, version, "CHANGELOG.md's newest entry is the version");
    let printed = stdout(Command::new(env!("CARGO_BIN_EXE_phalanx")).arg("version"));
    assert!(printed.contains(version), "phalanx version printed {printed:?}");
}
