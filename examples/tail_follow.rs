//! `tail -F` on evloop: follows a log file across rotation and truncation,
//! printing each line once, as it is written.
//!
//! Run with: `cargo run --example tail_follow PATH`, then append to PATH
//! (`echo hello >> PATH`), rotate it (`mv PATH PATH.1; echo new > PATH`),
//! truncate it (`: > PATH`).
//!
//! `docs/recipes.md` shows and explains this file from its first `use` on
//! (`tests/docs_blocks.rs` checks that the page shows it as it is);
//! `tests/tail_follow.rs` drives `follow` on every OS backend through
//! appends, rotations and truncations.

use std::fs::File;
use std::io::{ErrorKind, Read, Seek};
use std::path::Path;
use std::time::Duration;

use evloop::{Loop, Ready, RunMode, Stat};

/// Follows the file at `path` as `tail -F` does, from its first byte:
/// `on_line` gets every line (without its `\n`) once, through appends,
/// rotation (the file renamed away and a new one created in its place) and
/// truncation. The file need not exist yet. Removing the returned watcher
/// stops following.
pub fn follow<'s, S>(
    lp: &mut Loop<'s, S>,
    path: impl AsRef<Path>,
    mut on_line: impl FnMut(&mut Loop<'s, S>, &mut S, &[u8]) + 's,
) -> evloop::Result<Stat> {
    let mut reader = Reader::default();
    // Where the backend hints at changes (inotify, kqueue) each one is seen
    // at once; the interval is the fallback (and what a network file system
    // gets).
    let watcher = Stat::new(lp, path, Duration::from_secs(1), move |lp, state, ev| {
        reader.catch_up(ev.path, &mut |line| on_line(lp, state, line));
    })?;
    // A stat watcher calls back on changes only: read what is there now.
    lp.feed_event(watcher, Ready::EMPTY)?;
    Ok(watcher)
}

/// Which file `meta` describes: its device and inode on Unix. On Windows,
/// where stable Rust gives no file index, its creation time (a file made
/// in the place of one renamed away less than 15 s before may inherit the
/// old one's, NTFS's "tunneling": that rotation is then missed).
#[cfg(unix)]
fn file_id(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}
#[cfg(windows)]
fn file_id(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::windows::fs::MetadataExt;
    (meta.creation_time(), 0)
}

/// The file being read (kept open after it is renamed away, to read its
/// last lines), which file that is, how far it was read, and the line not
/// yet ended.
#[derive(Default)]
struct Reader {
    file: Option<(File, (u64, u64))>, // (device, inode)
    offset: u64,
    partial: Vec<u8>,
}

impl Reader {
    /// The path changed (or may have): read what is new.
    fn catch_up(&mut self, path: &Path, on_line: &mut dyn FnMut(&[u8])) {
        loop {
            // 1. The open file, to its end: new lines, or a rotated file's
            //    last ones.
            self.read_to_end(on_line);
            // 2. Does the path still name it? Missing (renamed away, not
            //    replaced yet): keep reading the old one. Another file: that
            //    one from its start (if the path moves on again meanwhile,
            //    the next time round).
            let Ok(meta) = std::fs::metadata(path) else {
                return;
            };
            if matches!(&self.file, Some((_, id)) if *id == file_id(&meta)) {
                return;
            }
            let Ok(file) = File::open(path) else { return };
            let Ok(meta) = file.metadata() else { return };
            self.end_line(on_line); // the old file's last line, unended
            self.file = Some((file, file_id(&meta)));
            self.offset = 0;
        }
    }

    fn read_to_end(&mut self, on_line: &mut dyn FnMut(&[u8])) {
        let Some((file, _)) = &mut self.file else {
            return;
        };
        // Shorter than what was read: truncated. Read it again from the
        // start.
        if file.metadata().is_ok_and(|m| m.len() < self.offset) && file.rewind().is_ok() {
            self.offset = 0;
            if !self.partial.is_empty() {
                on_line(&self.partial);
                self.partial.clear();
            }
        }
        let mut buf = [0; 16 * 1024];
        loop {
            let n = match file.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return, // a directory now, say: the next change
            };
            self.offset += n as u64;
            let mut rest = &buf[..n];
            while let Some(end) = rest.iter().position(|&b| b == b'\n') {
                if self.partial.is_empty() {
                    on_line(&rest[..end]);
                } else {
                    self.partial.extend_from_slice(&rest[..end]);
                    on_line(&self.partial);
                    self.partial.clear();
                }
                rest = &rest[end + 1..];
            }
            self.partial.extend_from_slice(rest);
        }
    }

    fn end_line(&mut self, on_line: &mut dyn FnMut(&[u8])) {
        if !self.partial.is_empty() {
            on_line(&self.partial);
            self.partial.clear();
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args_os()
        .nth(1)
        .ok_or("usage: tail_follow PATH")?;
    let mut lp: Loop = Loop::new()?;
    follow(&mut lp, path, |_, _, line| {
        println!("{}", String::from_utf8_lossy(line));
    })?;
    lp.run(RunMode::Default, &mut ())?;
    Ok(())
}
