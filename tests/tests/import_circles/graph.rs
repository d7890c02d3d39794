//! The file-level import graph of one crate tree, and its circles (strongly connected components).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use super::scan::{FileFacts, Reference, scan_file};

/// One crate tree (a root file and the module files under its directory) as a file-level import graph.
#[derive(Debug)]
pub(crate) struct Graph {
    /// File names relative to the crate tree's directory, e.g. `explain/gather.rs`.
    pub(crate) files: Vec<String>,
    /// `edges[a][b]`: the paths in file `a` that name file `b`, as `line: path`.
    pub(crate) edges: Vec<BTreeMap<usize, Vec<String>>>,
}

/// The import graph of one crate tree: `files` are (path relative to the module directory, source), `roots` the
/// file names that are crate roots (`lib.rs`, `main.rs`).
pub(crate) fn build_graph(files: &[(String, String)], roots: &[&str]) -> Graph {
    let module_of = |name: &str| -> Vec<String> {
        if roots.contains(&name) {
            return Vec::new();
        }
        let mut parts: Vec<String> = name
            .trim_end_matches(".rs")
            .split('/')
            .map(String::from)
            .collect();
        if parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        parts
    };
    // Module path -> file index; roots share the empty path, the first root listed owns it.
    let mut modules: HashMap<Vec<String>, usize> = HashMap::new();
    for (ix, (name, _)) in files.iter().enumerate() {
        modules.entry(module_of(name)).or_insert(ix);
    }
    // Inline modules belong to their file; found in a first pass so paths into them resolve.
    let file_modules = modules.clone();
    let is_file_module = |m: &[String]| file_modules.contains_key(m);
    let mut facts: Vec<FileFacts> = files
        .iter()
        .map(|(name, src)| scan_file(src, &module_of(name), &is_file_module))
        .collect();
    for (ix, f) in facts.iter().enumerate() {
        for m in &f.inline_modules {
            modules.entry(m.clone()).or_insert(ix);
        }
    }
    if facts.iter().any(|f| !f.inline_modules.is_empty()) {
        let is_module = |m: &[String]| modules.contains_key(m);
        facts = files
            .iter()
            .map(|(name, src)| scan_file(src, &module_of(name), &is_module))
            .collect();
    }
    // Test-only files: `#![cfg(test)]`, or declared `#[cfg(test)] mod x;` by their parent.
    let mut test_only: BTreeSet<usize> = BTreeSet::new();
    for (ix, f) in facts.iter().enumerate() {
        if f.test_only {
            test_only.insert(ix);
        }
        for child in &f.test_only_children {
            let mut m = module_of(&files[ix].0);
            m.push(child.clone());
            if let Some(&c) = modules.get(&m) {
                test_only.insert(c);
            }
        }
    }
    // Names each module binds with item-level `use`s (re-exports and private imports its children can name).
    let absolute =
        |r: &Reference| absolute_path(&r.module, &r.segments, &|m: &[String]| modules.contains_key(m));
    let mut bindings: HashMap<Vec<String>, HashMap<String, Vec<String>>> = HashMap::new();
    for f in &facts {
        for r in f.references.iter().filter(|r| r.binds) {
            if let Some(target) = absolute(r) {
                let name = r
                    .alias
                    .clone()
                    .or_else(|| r.segments.last().cloned())
                    .unwrap_or_default();
                if name != "_" && name != "*" {
                    bindings.entry(r.module.clone()).or_default().insert(name, target);
                }
            }
        }
    }
    let resolver = Resolver {
        modules: &modules,
        bindings: &bindings,
    };
    let mut edges = vec![BTreeMap::<usize, Vec<String>>::new(); files.len()];
    for (ix, f) in facts.iter().enumerate() {
        let name = &files[ix].0;
        let has_children = files.iter().any(|(other, _)| {
            let m = module_of(other);
            let own = module_of(name);
            m.len() == own.len() + 1 && m.starts_with(&own)
        });
        if roots.contains(&name.as_str()) || test_only.contains(&ix) {
            continue;
        }
        for r in &f.references {
            if r.is_use && r.is_pub_use && has_children {
                continue;
            }
            let Some(target) = absolute(r) else { continue };
            let module = resolver.resolve(&target, 0);
            let Some(&to) = modules.get(&module) else { continue };
            if to != ix && !test_only.contains(&to) {
                edges[ix]
                    .entry(to)
                    .or_default()
                    .push(format!("line {}: {}", r.line, r.segments.join("::")));
            }
        }
    }
    Graph {
        files: files.iter().map(|(n, _)| n.clone()).collect(),
        edges,
    }
}

/// The absolute module path a written path starts from (`crate::a` -> `[a]`, `super::b` from `[x, y]` ->
/// `[x, b]`, `child::f` from `[x]` -> `[x, child, f]`); `None` for paths outside the crate (`std::…`, `Self::…`).
pub(crate) fn absolute_path(
    module: &[String],
    segments: &[String],
    is_module: &dyn Fn(&[String]) -> bool,
) -> Option<Vec<String>> {
    let mut rest = segments;
    let mut base: Vec<String> = match rest.first()?.as_str() {
        "crate" => {
            rest = &rest[1..];
            Vec::new()
        }
        "self" => {
            rest = &rest[1..];
            module.to_vec()
        }
        "super" => {
            let mut m = module.to_vec();
            while rest.first().is_some_and(|s| s == "super") {
                m.pop()?;
                rest = &rest[1..];
            }
            m
        }
        first => {
            let mut m = module.to_vec();
            m.push(first.to_string());
            if !is_module(&m) {
                return None;
            }
            module.to_vec()
        }
    };
    base.extend(rest.iter().filter(|s| s.as_str() != "self").cloned());
    Some(base)
}

/// Resolves absolute paths to the module that owns the item they name.
pub(crate) struct Resolver<'a> {
    modules: &'a HashMap<Vec<String>, usize>,
    bindings: &'a HashMap<Vec<String>, HashMap<String, Vec<String>>>,
}

impl Resolver<'_> {
    /// The deepest module `path` names, following `use` bindings (re-exports) on the way: `[a, b, Thing]` -> `[a,
    /// b]` if `a::b` is a module, else `[a]`, or the module `a` imported `Thing` from.
    fn resolve(&self, path: &[String], hops: usize) -> Vec<String> {
        let mut current: Vec<String> = Vec::new();
        for (k, segment) in path.iter().enumerate() {
            let mut next = current.clone();
            next.push(segment.clone());
            if self.modules.contains_key(&next) {
                current = next;
                continue;
            }
            // A name the module imported: the item lives where the `use` points (bounded: `use` loops are errors).
            if hops < 16
                && let Some(target) = self.bindings.get(&current).and_then(|b| b.get(segment))
                && *target != next
            {
                let mut t = target.clone();
                t.extend(path[k + 1..].iter().cloned());
                return self.resolve(&t, hops + 1);
            }
            break;
        }
        current
    }
}

/// Strongly connected components of more than one node (Tarjan), each sorted by file name, in order of their first
/// file.
pub(crate) fn circles(graph: &Graph) -> Vec<Vec<usize>> {
    struct State<'a> {
        files: &'a [String],
        edges: &'a [BTreeMap<usize, Vec<String>>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn connect(s: &mut State, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in s.edges[v].keys() {
            match s.index[w] {
                None => {
                    connect(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                let files = s.files;
                component.sort_by_key(|&f| &files[f]);
                s.out.push(component);
            }
        }
    }
    let n = graph.files.len();
    let mut s = State {
        files: &graph.files,
        edges: &graph.edges,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            connect(&mut s, v);
        }
    }
    s.out.sort_by_key(|c| &graph.files[c[0]]);
    s.out
}

/// One circle of `component` as a shortest loop from its first file (`a.rs -> b.rs -> a.rs`), then each edge
/// inside the component with the paths that make it.
pub(crate) fn describe(graph: &Graph, component: &[usize]) -> String {
    let inside: BTreeSet<usize> = component.iter().copied().collect();
    let start = component[0];
    let mut previous: HashMap<usize, usize> = HashMap::new();
    let mut queue = VecDeque::from([start]);
    let mut closing = None;
    'search: while let Some(v) = queue.pop_front() {
        for &w in graph.edges[v].keys().filter(|w| inside.contains(w)) {
            if w == start {
                closing = Some(v);
                break 'search;
            }
            if let std::collections::hash_map::Entry::Vacant(e) = previous.entry(w) {
                e.insert(v);
                queue.push_back(w);
            }
        }
    }
    let mut path = vec![start];
    let mut v = closing.unwrap_or(start);
    while v != start {
        path.push(v);
        v = previous[&v];
    }
    path[1..].reverse();
    path.push(start);
    let names: Vec<&str> = path.iter().map(|&v| graph.files[v].as_str()).collect();
    let mut text = names.join(" -> ");
    if component.len() + 1 > path.len() {
        // The loop shown need not pass through every file of the component: name them all.
        let all: Vec<&str> = component.iter().map(|&v| graph.files[v].as_str()).collect();
        text.push_str(&format!(" ({} files: {})", component.len(), all.join(", ")));
    }
    for &a in component {
        for (b, why) in graph.edges[a].iter().filter(|(b, _)| inside.contains(b)) {
            let shown: Vec<&str> = why.iter().take(4).map(String::as_str).collect();
            let more = if why.len() > 4 {
                format!(", … {} more", why.len() - 4)
            } else {
                String::new()
            };
            text.push_str(&format!(
                "\n      {} -> {}: {}{more}",
                graph.files[a],
                graph.files[*b],
                shown.join(", ")
            ));
        }
    }
    text
}
