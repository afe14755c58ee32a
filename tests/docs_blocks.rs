//! The rule for code in the documentation pages (README.md and every
//! `docs/*.md`): each Rust block compiles as a doc test, or is part of a
//! file that is built, or both. `cargo test --doc` compiles (and runs)
//! the blocks of the pages `src/lib.rs` includes under `cfg(doctest)`;
//! this test keeps that from eroding without anyone noticing:
//!
//! - every page is included there (a new page that is not would have its
//!   blocks never compiled);
//! - no block is tagged `ignore` (an ignored block is never compiled),
//!   but one marked `from:` (below) that needs what evloop's own tests do
//!   not compile: docs/recipes.md's tokio driver, from the hyper suite's
//!   crate (tests/hyper_suite/), whose build compiles the file;
//! - every block says what it is (`rust`, or `sh`, `text`, `toml`...):
//!   rustdoc compiles an untagged block as Rust, and a diagram or a
//!   command line is better tagged than kept from compiling;
//! - a block marked `<!-- from: PATH -->` on the line before it is,
//!   hidden (`# `) lines aside, a contiguous part of the file PATH, which
//!   the build compiles (an example, a test): docs/porting.md's backend
//!   and its conformance test, docs/recipes.md's `tail -F`.

use std::fs;
use std::path::{Path, PathBuf};

/// A fenced code block of a page.
struct Block {
    page: PathBuf,
    /// The line of its opening fence, from 1.
    line: usize,
    /// What follows the opening fence: `rust,no_run`, `sh`, empty.
    info: String,
    /// Its lines, without the fences.
    body: Vec<String>,
    /// The `PATH` of a `<!-- from: PATH -->` on the line before it.
    from: Option<String>,
}

impl Block {
    fn tags(&self) -> Vec<&str> {
        self.info
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|t| !t.is_empty())
            .collect()
    }

    /// Whether rustdoc compiles it: no language, `rust`, or rustdoc's own
    /// attributes only.
    fn is_rust(&self) -> bool {
        const RUSTDOC: [&str; 6] = [
            "ignore",
            "no_run",
            "should_panic",
            "compile_fail",
            "test_harness",
            "standalone_crate",
        ];
        self.tags().iter().all(|t| {
            *t == "rust"
                || RUSTDOC.contains(t)
                || t.starts_with("edition")
                || t.starts_with("ignore-")
        })
    }

    fn at(&self) -> String {
        format!("{}:{}", self.page.display(), self.line)
    }
}

/// README.md and the pages of `docs/`.
fn pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = fs::read_dir("docs")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    pages.insert(0, PathBuf::from("README.md"));
    pages
}

/// The fenced blocks of `page` (backtick or tilde fences, indented or not,
/// as in list items).
fn blocks(page: &Path) -> Vec<Block> {
    let text = fs::read_to_string(page).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        let fence_char = match trimmed.chars().next() {
            Some(c @ ('`' | '~')) => c,
            _ => {
                i += 1;
                continue;
            }
        };
        let fence_len = trimmed.chars().take_while(|&c| c == fence_char).count();
        if fence_len < 3 {
            i += 1;
            continue;
        }
        let info = trimmed[fence_len..].trim().to_string();
        let from = i
            .checked_sub(1)
            .and_then(|p| lines[p].trim().strip_prefix("<!-- from:"))
            .and_then(|rest| rest.strip_suffix("-->"))
            .map(|path| path.trim().to_string());
        let start = i;
        let mut body = Vec::new();
        i += 1;
        while i < lines.len() {
            let t = lines[i].trim_start();
            let closing = t.chars().take_while(|&c| c == fence_char).count();
            if closing >= fence_len && t[closing..].trim().is_empty() {
                break;
            }
            body.push(lines[i].to_string());
            i += 1;
        }
        out.push(Block {
            page: page.to_path_buf(),
            line: start + 1,
            info,
            body,
            from,
        });
        i += 1;
    }
    out
}

#[test]
fn every_page_is_compiled_as_doc_tests() {
    let lib = fs::read_to_string("src/lib.rs").unwrap();
    let doctests = lib
        .split_once("#[cfg(doctest)]")
        .map(|(_, after)| after)
        .expect("src/lib.rs has no cfg(doctest) item for the pages");
    let missing: Vec<String> = pages()
        .iter()
        .map(|p| format!("include_str!(\"../{}\")", p.display()))
        .filter(|include| !doctests.contains(include.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "pages whose code blocks are never compiled (add `#[doc = include_str!(..)] \
         pub struct Name;` to src/lib.rs's `doc_pages` for each): {}",
        missing.join(", ")
    );
}

#[test]
fn no_block_is_ignored_or_untagged() {
    let mut wrong = Vec::new();
    let mut rust = 0;
    for page in pages() {
        for b in blocks(&page) {
            if b.tags().iter().any(|t| t.starts_with("ignore")) && b.from.is_none() {
                wrong.push(format!(
                    "{}: `{}`: an ignored block is never compiled; make it compile \
                     (`no_run` if it would serve for ever, `# ` lines for its setup), \
                     or show it `from:` a file that is built",
                    b.at(),
                    b.info
                ));
            } else if b.info.is_empty() {
                wrong.push(format!(
                    "{}: untagged (rustdoc compiles it as Rust): tag it `rust`, or \
                     `text`, `sh`, `toml`...",
                    b.at()
                ));
            }
            if b.is_rust() {
                rust += 1;
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The pages do have Rust blocks: the test is not passing for having
    // read none.
    assert!(rust >= 10, "only {rust} Rust blocks found");
}

#[test]
fn blocks_from_files_show_them_as_they_are() {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for page in pages() {
        for b in blocks(&page) {
            let Some(path) = &b.from else { continue };
            let Ok(file) = fs::read_to_string(path) else {
                wrong.push(format!("{}: from {path}, which does not exist", b.at()));
                continue;
            };
            let shown: String = b
                .body
                .iter()
                .filter(|l| {
                    let t = l.trim_start();
                    !(b.is_rust() && (t == "#" || t.starts_with("# ")))
                })
                .map(|l| format!("{l}\n"))
                .collect();
            if !file.contains(&shown) {
                let differs = shown
                    .lines()
                    .zip(1..)
                    .find(|(l, _)| !file.lines().any(|f| f == *l))
                    .map_or("its lines are there, not in this order".into(), |(l, n)| {
                        format!("its line {n} is not in the file: {l:?}")
                    });
                wrong.push(format!(
                    "{}: not a part of {path} as it is ({differs})",
                    b.at()
                ));
            }
            checked += 1;
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(checked >= 3, "only {checked} blocks marked `from:` found");
}

/// The parser itself, on a page written for it.
#[test]
fn the_block_parser_reads_tags_markers_and_fences() {
    let dir = std::env::temp_dir().join(format!("evloop-docs-blocks-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let page = dir.join("page.md");
    fs::write(
        &page,
        "text\n\n```rust,no_run\nlet a = 1;\n```\n\n<!-- from: x.rs -->\n````rust\n```\n````\n\n  ```\n  indented\n  ```\n~~~sh\nls\n~~~\n",
    )
    .unwrap();
    let found = blocks(&page);
    fs::remove_dir_all(&dir).unwrap();
    let summary: Vec<(usize, &str, bool, Option<&str>, usize)> = found
        .iter()
        .map(|b| {
            (
                b.line,
                b.info.as_str(),
                b.is_rust(),
                b.from.as_deref(),
                b.body.len(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (3, "rust,no_run", true, None, 1),
            (8, "rust", true, Some("x.rs"), 1),
            (12, "", true, None, 1),
            (15, "sh", false, None, 1),
        ]
    );
}
