//! The modules of `src/` import each other in one direction only
//! (docs/architecture.md, "Layers"): this reads every `use crate::...` and
//! `crate::...` path in `src/`, resolves the crate root's re-exports
//! (`crate::Loop` is `event_loop`), and fails with the cycle if one
//! module reaches itself again.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Module name (`event_loop`, `watchers::io`) → source text, comments removed.
fn modules() -> BTreeMap<String, String> {
    fn walk(dir: &Path, out: &mut BTreeMap<String, String>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix("src").unwrap().with_extension("");
                let mut name = rel.to_string_lossy().replace('/', "::");
                if let Some(parent) = name.strip_suffix("::mod") {
                    name = parent.to_string();
                }
                let text: String = fs::read_to_string(&path)
                    .unwrap()
                    .lines()
                    .map(|l| l.split("//").next().unwrap_or(""))
                    .collect::<Vec<_>>()
                    .join("\n");
                out.insert(name, text);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(Path::new("src"), &mut out);
    out
}

/// Every path named after `crate::`, with `crate::{a, b::c}` groups
/// expanded (one level, which is all `src/` uses).
fn crate_paths(text: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let item = item.trim();
                if !item.is_empty() {
                    paths.push(item.to_string());
                }
            }
        } else {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            paths.push(rest[..end].trim_end_matches(':').to_string());
        }
    }
    paths
}

/// The crate root's `pub use module::{Item, ...};`: item → module.
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for stmt in lib.split(';') {
        let Some(body) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let (module, items) = match body.find("::{") {
            Some(at) => (&body[..at], body[at + 3..].trim_end_matches('}')),
            None => match body.rfind("::") {
                Some(at) => (&body[..at], &body[at + 2..]),
                None => continue,
            },
        };
        for item in items.split(',') {
            let item = item.split_whitespace().last().unwrap_or("");
            if !item.is_empty() {
                map.insert(item.to_string(), module.to_string());
            }
        }
    }
    map
}

/// Module → the modules it imports (itself, its parents and its children
/// left out: a parent declares its children).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules();
    let exports = reexports(&mods["lib"]);
    let names: Vec<&String> = mods.keys().filter(|m| *m != "lib").collect();
    let owner = |path: &str| -> Option<String> {
        names
            .iter()
            .filter(|n| path == n.as_str() || path.starts_with(&format!("{n}::")))
            .max_by_key(|n| n.len())
            .map(|n| n.to_string())
    };
    let related = |a: &str, b: &str| {
        a == b || a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"))
    };
    let mut g = BTreeMap::new();
    for name in &names {
        let mut deps = BTreeSet::new();
        for path in crate_paths(&mods[*name]) {
            let head = path.split("::").next().unwrap_or("");
            let resolved = match exports.get(head) {
                Some(module) if head.starts_with(char::is_uppercase) => {
                    module.replace("crate::", "")
                }
                _ => path.clone(),
            };
            if let Some(dep) = owner(&resolved) {
                if !related(name, &dep) {
                    deps.insert(dep);
                }
            }
        }
        g.insert(name.to_string(), deps);
    }
    g
}

/// A cycle through `start`, if there is one.
fn cycle_from(g: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    fn dfs(
        g: &BTreeMap<String, BTreeSet<String>>,
        at: &str,
        start: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in g.get(at).into_iter().flatten() {
            if next == start {
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if dfs(g, next, start, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_string()];
    let mut seen = BTreeSet::new();
    dfs(g, start, start, &mut path, &mut seen).then(|| {
        path.push(start.to_string());
        path
    })
}

#[test]
fn no_module_of_src_imports_itself_back() {
    let g = graph();
    // The reading works: the loop's known edges are seen.
    assert!(
        g["watchers::io"].contains("event_loop"),
        "{:?}",
        g["watchers::io"]
    );
    assert!(
        g["event_loop"].contains("registry"),
        "{:?}",
        g["event_loop"]
    );
    for module in g.keys() {
        if let Some(cycle) = cycle_from(&g, module) {
            panic!("import cycle in src/: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn no_component_names_the_loop() {
    // docs/architecture.md: the components own their state and know
    // nothing of `Loop`; the registry takes the callback type as a
    // parameter.
    let g = graph();
    for component in [
        "registry",
        "fd_table",
        "direct_batch",
        "timers",
        "timer_heap",
        "kind",
        "pending",
        "slot_list",
        "handle",
        "unwind",
    ] {
        let deps = &g[component];
        assert!(
            !deps.contains("event_loop") && !deps.iter().any(|d| d.starts_with("watchers")),
            "{component} imports {deps:?}"
        );
    }
}

#[test]
fn the_reader_finds_a_cycle_when_there_is_one() {
    let mut g = graph();
    g.get_mut("registry")
        .unwrap()
        .insert("event_loop".to_string());
    let cycle = cycle_from(&g, "registry").expect("a cycle");
    assert_eq!(cycle.first(), cycle.last());
}
