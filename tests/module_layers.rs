//! The modules of `src/` and `backends/` import each other in one
//! direction only (docs/architecture.md, "Layers"): this reads every
//! `crate::...`, `self::...` and `super::...` path (in `use` or in code),
//! resolves the re-exports of the crate root and of each module
//! (`crate::Loop` is `event_loop`, `crate::net::Stream` is `net::conn`),
//! and fails with the cycle if one module reaches itself again.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// One file's text, comments removed, split into the parts whose `self::`
/// and `super::` mean different modules: the file's own items, and each
/// top-level inline module (`mod adapt { ... }`, ended by a `}` in column
/// 0 as rustfmt writes it). In-file test modules (`tests`, loom's `model`)
/// are left out: they import what they test.
struct File {
    /// The module's path from the crate root (`["replay", "sink"]`).
    path: Vec<String>,
    /// (the path `self::` names there, the text).
    parts: Vec<(Vec<String>, String)>,
}

/// Module name (`event_loop`, `watchers::io`, `backends::unix::hub`) → its file.
fn modules() -> BTreeMap<String, File> {
    fn walk(dir: &Path, root: &Path, prefix: &[&str], out: &mut BTreeMap<String, File>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                // src/lib.rs mounts backends/conformance/ as `conformance`.
                if path == Path::new("backends/conformance") {
                    walk(&path, &path, &["conformance"], out);
                } else {
                    walk(&path, root, prefix, out);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).unwrap().with_extension("");
                let mut segs: Vec<String> = prefix.iter().map(|s| s.to_string()).collect();
                segs.extend(rel.iter().map(|s| s.to_string_lossy().into_owned()));
                if segs.last().is_some_and(|l| l == "mod") {
                    segs.pop();
                }
                if segs == ["lib"] {
                    segs.clear();
                }
                let text = fs::read_to_string(&path).unwrap();
                out.insert(name_of(&segs), split(segs, &text));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(Path::new("src"), Path::new("src"), &[], &mut out);
    walk(
        Path::new("backends"),
        Path::new("backends"),
        &["backends"],
        &mut out,
    );
    out
}

fn name_of(segs: &[String]) -> String {
    if segs.is_empty() {
        "lib".to_string()
    } else {
        segs.join("::")
    }
}

/// `text` of the module at `path`, comments removed, in its parts (see
/// [`File`]).
fn split(path: Vec<String>, text: &str) -> File {
    let mut parts = vec![(path.clone(), String::new())];
    let mut inline: Option<(Vec<String>, String, bool)> = None;
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        if let Some((_, body, _)) = &mut inline {
            if line == "}" {
                let (p, body, skip) = inline.take().unwrap();
                if !skip {
                    parts.push((p, body));
                }
            } else {
                body.push_str(code);
                body.push('\n');
            }
            continue;
        }
        let decl = code
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub ");
        if let Some(name) = decl.strip_prefix("mod ").and_then(|r| r.strip_suffix(" {")) {
            let mut p = path.clone();
            p.push(name.to_string());
            inline = Some((p, String::new(), name == "tests" || name == "model"));
            continue;
        }
        parts[0].1.push_str(code);
        parts[0].1.push('\n');
    }
    File { path, parts }
}

/// Every path named after `crate::`, `self::` or `super::` (any number of
/// them), from the crate root, with `{a, b::c}` groups expanded (one
/// level, which is all the crate uses). `here` is what `self::` names.
fn paths(text: &str, here: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut at = 0;
    while at < text.len() {
        let rest = &text[at..];
        let boundary = at == 0
            || !(bytes[at - 1].is_ascii_alphanumeric()
                || bytes[at - 1] == b'_'
                || bytes[at - 1] == b':');
        let base: Option<(Vec<String>, usize)> = if !boundary {
            None
        } else if rest.starts_with("crate::") {
            Some((Vec::new(), "crate::".len()))
        } else if rest.starts_with("self::") {
            Some((here.to_vec(), "self::".len()))
        } else if rest.starts_with("super::") {
            let mut base = here.to_vec();
            let mut len = 0;
            while rest[len..].starts_with("super::") {
                base.pop();
                len += "super::".len();
            }
            Some((base, len))
        } else {
            None
        };
        let Some((base, len)) = base else {
            at += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        let tail = &rest[len..];
        let join = |item: &str| {
            let mut p = base.clone();
            p.extend(
                item.split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            );
            p
        };
        if let Some(group) = tail.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let item = item.split_whitespace().next().unwrap_or("");
                if !item.is_empty() && item != "self" {
                    out.push(join(item));
                }
            }
        } else {
            let end = tail
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(tail.len());
            out.push(join(tail[..end].trim_end_matches(':')));
        }
        at += len;
    }
    out
}

/// Each module's `pub use`/`pub(crate) use` of its children's items: the
/// module → (item → the path it stands for), so that `crate::net::Stream`
/// is read as `net::conn::Stream` and `crate::Loop` as `event_loop::Loop`.
fn reexports(mods: &BTreeMap<String, File>) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let mut all = BTreeMap::new();
    for (name, file) in mods {
        let mut map = BTreeMap::new();
        for stmt in file.parts[0].1.split(';') {
            let stmt = stmt.trim();
            let Some(body) = stmt
                .strip_prefix("pub use ")
                .or_else(|| stmt.strip_prefix("pub(crate) use "))
            else {
                continue;
            };
            let body = body.trim_start_matches("self::");
            let (module, items) = match body.find("::{") {
                Some(at) => (&body[..at], body[at + 3..].trim_end_matches('}')),
                None => match body.rfind("::") {
                    Some(at) => (&body[..at], &body[at + 2..]),
                    None => continue,
                },
            };
            let target: Vec<String> = match module.strip_prefix("crate::") {
                Some(abs) => abs.split("::").map(str::to_string).collect(),
                None => {
                    let mut p = file.path.clone();
                    p.extend(module.split("::").map(str::to_string));
                    p
                }
            };
            for item in items.split(',') {
                let item = item.split_whitespace().last().unwrap_or("");
                if !item.is_empty() && item != "self" {
                    let mut p = target.clone();
                    p.push(item.to_string());
                    map.insert(item.to_string(), p);
                }
            }
        }
        all.insert(name.clone(), map);
    }
    all
}

/// Module → the modules it imports (itself, its parents and its children
/// left out: a parent declares its children).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules();
    let exports = reexports(&mods);
    let names: Vec<&String> = mods.keys().filter(|m| *m != "lib").collect();
    let owner = |path: &str| -> Option<String> {
        names
            .iter()
            .filter(|n| path == n.as_str() || path.starts_with(&format!("{n}::")))
            .max_by_key(|n| n.len())
            .map(|n| n.to_string())
    };
    // Follows re-exports: the module that defines what `path` names.
    let resolve = |path: &[String]| -> Option<String> {
        let mut path = path.to_vec();
        for _ in 0..8 {
            let joined = path.join("::");
            let module = owner(&joined).unwrap_or_else(|| "lib".to_string());
            let depth = if module == "lib" {
                0
            } else {
                module.split("::").count()
            };
            let Some(item) = path.get(depth) else {
                return (module != "lib").then_some(module);
            };
            match exports.get(&module).and_then(|m| m.get(item)) {
                Some(target) if target[..] != path[..=depth] => {
                    let mut next = target.clone();
                    next.extend(path[depth + 1..].iter().cloned());
                    path = next;
                }
                _ => return (module != "lib").then_some(module),
            }
        }
        None
    };
    let related = |a: &str, b: &str| {
        a == b || a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"))
    };
    let mut g = BTreeMap::new();
    for name in &names {
        let mut deps = BTreeSet::new();
        for (here, text) in &mods[*name].parts {
            for path in paths(text, here) {
                if let Some(dep) = resolve(&path) {
                    if !related(name, &dep) {
                        deps.insert(dep);
                    }
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
            panic!("import cycle: {}", cycle.join(" -> "));
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
fn the_reader_sees_relative_paths_and_module_reexports() {
    let g = graph();
    // `use super::format::...` in replay/record.rs; `crate::net::Stream`
    // (re-exported by net/mod.rs) in replay/play.rs; `super::` twice.
    assert!(
        g["replay::record"].contains("replay::format"),
        "{:?}",
        g["replay::record"]
    );
    assert!(
        g["replay::play"].contains("net::conn"),
        "{:?}",
        g["replay::play"]
    );
    let p = paths(
        "use super::super::hub;",
        &["backends".into(), "unix".into(), "children".into()],
    );
    assert_eq!(p, [vec!["backends".to_string(), "hub".to_string()]]);
    let p = paths("use self::{a, b::C};", &["x".into()]);
    assert_eq!(
        p,
        [
            vec!["x".to_string(), "a".to_string()],
            vec!["x".into(), "b".into(), "C".into()]
        ]
    );
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
