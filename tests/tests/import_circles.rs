//! No import circles inside a crate: no set of source files of one crate that import each other in a loop (a
//! strongly connected component of more than one file in the file-level import graph). A circle means no file of it
//! can be read, changed or moved without the others, and it usually hides a shared name that belongs lower down.
//!
//! The graph is read from the source text (std only, no parser crate): an edge `a.rs -> b.rs` is a path in
//! `a.rs`'s non-test code that names a module item of `b.rs` (`crate::b::X`, `super::b`, `self::b` or a bare `b::`
//! for a child module, also inside `use` groups and in code). A path is resolved to the deepest module it names,
//! following `use` bindings of the modules on the way, so `crate::Binder` re-exported by `lib.rs` from `binder`
//! points at `binder.rs`. Edges from a crate root are not counted (it declares and re-exports every module), nor
//! re-exports (`pub use`) of a file with child modules (a `mod.rs`): both are hubs, not users.
//!
//! Not read: `#[cfg(test)]` items (test modules, test-only imports and `#[cfg(test)] mod x;` files), comments and
//! string literals, so a path written in a string attribute (`schema_with = "crate::x::f"`) is no edge, nor is a
//! mod.rs's own use of a name it re-exports.
//!
//! Std only and no control plane: this runs in `cargo test --workspace` in well under a second.

// A crate root's `mod` looks in `tests/`, not in `tests/import_circles/`; the scheduler's benches do the same.
#[path = "import_circles/graph.rs"]
mod graph;
#[path = "import_circles/scan.rs"]
mod scan;

use std::fs;
use std::path::{Path, PathBuf};

use graph::{Graph, build_graph, circles, describe};

/// The `.rs` files under `dir` (relative names with `/`), skipping `skip` subdirectories of `dir` itself.
fn rust_files(dir: &Path, skip: &[&str]) -> Vec<(String, String)> {
    fn walk(base: &Path, dir: &Path, skip: &[&str], out: &mut Vec<(String, String)>) {
        let mut entries: Vec<PathBuf> = fs::read_dir(dir)
            .expect("read a source directory")
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            let relative = path
                .strip_prefix(base)
                .expect("under base")
                .to_string_lossy()
                .replace('\\', "/");
            if path.is_dir() {
                if !skip.contains(&relative.as_str()) {
                    walk(base, &path, skip, out);
                }
            } else if relative.ends_with(".rs") {
                out.push((relative, fs::read_to_string(&path).expect("read a source file")));
            }
        }
    }
    let mut out = Vec::new();
    if dir.is_dir() {
        walk(dir, dir, skip, &mut out);
    }
    out
}

/// The crate trees of one package's `src/`: `lib.rs` and `main.rs` over `src/` (but `src/bin/`), and each
/// `src/bin/x.rs` or `src/bin/x/main.rs` as its own root over its own directory. Returns (label, graph).
fn package_graphs(src: &Path) -> Vec<(String, Graph)> {
    let mut out = vec![(
        String::new(),
        build_graph(&rust_files(src, &["bin"]), &["lib.rs", "main.rs"]),
    )];
    let bin = src.join("bin");
    if bin.is_dir() {
        for (name, source) in rust_files(&bin, &[]) {
            match name.split_once('/') {
                None => {
                    // `bin/x.rs` with modules under `bin/x/`.
                    let stem = name.trim_end_matches(".rs");
                    let mut files = vec![(name.clone(), source)];
                    for (sub, text) in rust_files(&bin.join(stem), &[]) {
                        files.push((sub, text));
                    }
                    out.push((format!("bin/{stem}"), build_graph(&files, &[name.as_str()])));
                }
                Some((dir, "main.rs")) => {
                    let files = rust_files(&bin.join(dir), &[]);
                    out.push((format!("bin/{dir}"), build_graph(&files, &["main.rs"])));
                }
                Some(_) => {}
            }
        }
    }
    out
}

/// The `name` of a `Cargo.toml`'s `[package]` (the first `name = "…"` line).
fn package_name(manifest: &Path) -> String {
    let text = fs::read_to_string(manifest).expect("read Cargo.toml");
    text.lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("name")
                .map(str::trim)
                .and_then(|l| l.strip_prefix('='))
        })
        .map(|v| v.trim().trim_matches('"').to_string())
        .expect("a package name")
}

#[test]
fn no_import_circles_in_any_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf();
    let mut packages: Vec<PathBuf> = fs::read_dir(root.join("crates"))
        .expect("read crates/")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    packages.sort();
    packages.push(root.join("tests"));
    let mut failures = Vec::new();
    let mut checked = 0;
    for package in &packages {
        let name = package_name(&package.join("Cargo.toml"));
        for (tree, graph) in package_graphs(&package.join("src")) {
            checked += graph.files.len();
            let label = if tree.is_empty() {
                name.clone()
            } else {
                format!("{name} ({tree})")
            };
            for component in circles(&graph) {
                failures.push(format!("{label}: {}", describe(&graph, &component)));
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} source files found under {}: wrong workspace root?",
        root.display()
    );
    assert!(
        failures.is_empty(),
        "{} import circle(s) inside a crate (files that import each other in a loop):\n  {}\n\nFix: move the shared \
         names down to the module that owns them (or into a new small module named by its role), so that imports \
         go one way; a crate root's or a mod.rs's `pub use` does not count, a `crate::Name` it re-exports points \
         at the module it comes from.",
        failures.len(),
        failures.join("\n  ")
    );
}

/// A crate tree from (file, source) pairs with `lib.rs` as root.
fn synthetic(files: &[(&str, &str)]) -> Graph {
    let files: Vec<(String, String)> = files
        .iter()
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .collect();
    build_graph(&files, &["lib.rs", "main.rs"])
}

/// The circles of `graph` as sorted file names.
fn circle_names(graph: &Graph) -> Vec<Vec<&str>> {
    circles(graph)
        .iter()
        .map(|c| c.iter().map(|&v| graph.files[v].as_str()).collect())
        .collect()
}

#[test]
fn the_checker_finds_circles() {
    // A field type naming `b` inline, and `b` naming `a` in a nested `use` group: one circle. `c` only imported.
    let graph = synthetic(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\npub use a::Shared;\n"),
        (
            "a.rs",
            "pub struct Shared;\npub struct Holder { report: crate::b::Report }\n",
        ),
        (
            "b.rs",
            "use crate::{c, a::{self, Shared as S}};\npub struct Report;\n",
        ),
        ("c.rs", "pub fn f() {}\n"),
    ]);
    assert_eq!(circle_names(&graph), vec![vec!["a.rs", "b.rs"]]);
    assert!(describe(&graph, &circles(&graph)[0]).starts_with("a.rs -> b.rs -> a.rs"));

    // Through a re-export of the crate root: `crate::Shared` is `a`'s.
    let graph = synthetic(&[
        ("lib.rs", "mod a;\nmod b;\npub use a::Shared;\n"),
        ("a.rs", "pub struct Shared;\nfn g() { crate::b::f() }\n"),
        ("b.rs", "pub fn f() -> crate::Shared { todo!() }\n"),
    ]);
    assert_eq!(circle_names(&graph), vec![vec!["a.rs", "b.rs"]]);

    // A mod.rs calling its child, and the child naming a type the mod.rs defines (`super::`), three levels deep.
    let graph = synthetic(&[
        ("lib.rs", "pub mod explain;\n"),
        (
            "explain/mod.rs",
            "mod gather;\npub struct Verdict;\npub fn run() { gather::go() }\n",
        ),
        ("explain/gather.rs", "use super::Verdict;\npub fn go() {}\n"),
    ]);
    assert_eq!(
        circle_names(&graph),
        vec![vec!["explain/gather.rs", "explain/mod.rs"]]
    );

    // Three files in a ring, through `self::` in a mod.rs and `super::super::`.
    let graph = synthetic(&[
        ("lib.rs", "mod x;\nmod y;\n"),
        ("x/mod.rs", "mod z;\nfn f() { self::z::g() }\n"),
        ("x/z.rs", "pub fn g() { super::super::y::h() }\n"),
        ("y.rs", "pub fn h() { crate::x::f() }\n"),
    ]);
    assert_eq!(circle_names(&graph), vec![vec!["x/mod.rs", "x/z.rs", "y.rs"]]);
}

#[test]
fn the_checker_passes_a_one_way_crate() {
    let graph = synthetic(&[
        // The root's re-exports and `mod`s are not edges.
        (
            "lib.rs",
            "mod a;\nmod b;\nmod c;\nmod explain;\npub use c::Shared;\npub use a::run;\n",
        ),
        // Through the root's re-export `crate::Shared` is `c`'s, not the root's or `a`'s.
        ("a.rs", "use crate::Shared;\npub fn run() { crate::b::f(); }\n"),
        (
            "b.rs",
            "/* crate::a::run() */\n// crate::a::run()\nconst S: &str = \"crate::a::run\";\nconst R: &str = \
             r#\"crate::a\"#;\nconst C: char = '\"';\npub fn f() -> crate::Shared { let _ = '{'; todo!() }\n\
             #[cfg(test)]\nmod tests {\n    use crate::a::run;\n    #[test]\n    fn t() { run() }\n}\n",
        ),
        (
            "c.rs",
            "pub struct Shared;\n#[cfg(test)]\nuse crate::a::run;\n#[cfg(test)]\nmod c_tests;\n",
        ),
        ("c/c_tests.rs", "use crate::a::run;\n"),
        // A mod.rs re-exporting its child is a hub, not a user; the child names the mod.rs's re-export, which is
        // `verdict`'s, and a type of `crate::c` through an alias.
        (
            "explain/mod.rs",
            "mod gather;\nmod verdict;\npub use gather::explain;\npub use verdict::Verdict;\n",
        ),
        (
            "explain/gather.rs",
            "use super::Verdict;\nuse crate::c::Shared as S;\npub fn explain() {}\n",
        ),
        ("explain/verdict.rs", "pub struct Verdict;\n"),
    ]);
    assert_eq!(circle_names(&graph), Vec::<Vec<&str>>::new(), "{:?}", graph.edges);
    // And the edges it did find.
    let index = |n: &str| graph.files.iter().position(|f| f == n).expect("a file");
    let targets = |n: &str| -> Vec<&str> {
        graph.edges[index(n)]
            .keys()
            .map(|&t| graph.files[t].as_str())
            .collect()
    };
    assert_eq!(targets("a.rs"), vec!["b.rs", "c.rs"]);
    assert_eq!(targets("b.rs"), vec!["c.rs"]);
    assert_eq!(targets("explain/gather.rs"), vec!["c.rs", "explain/verdict.rs"]);
    assert!(targets("explain/mod.rs").is_empty());
    assert!(targets("lib.rs").is_empty());
}
