//! The `tail -F` recipe of docs/recipes.md (`examples/tail_follow.rs`'s
//! `follow`) on every OS backend: a log file written, rotated (renamed
//! away, written to through the writer's old descriptor, replaced),
//! rotated with a gap (the path missing for a while), and truncated (in
//! place, and by re-creating it), with lines split across writes; every
//! line must come out once, in order. The simulator is left out: its
//! files have a size but no content to read.
//!
//! No step waits for time: each makes its changes, then runs the loop one
//! iteration at a time until the follower has delivered what it must (the
//! backend's change hints make that at once; the stat watcher's 1 s
//! polling would get there too), the whole under a watchdog.

mod common;

use common::TempDir;

#[allow(dead_code)] // its `main`
#[path = "../examples/tail_follow.rs"]
mod tail_follow;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use evloop::{Loop, RunMode, Stat};

type Lines = Vec<String>;

/// Runs the loop one iteration at a time until `done`: first without
/// blocking (what is pending already, such as the follower's first read),
/// then each iteration waiting for the next event.
fn run_until(
    lp: &mut Loop<'_, Lines>,
    lines: &mut Lines,
    done: impl Fn(&Loop<'_, Lines>, &Lines) -> bool,
) {
    lp.run(RunMode::NoWait, lines).unwrap();
    while !done(lp, lines) {
        lp.run(RunMode::Once, lines).unwrap();
    }
}

/// The writer's descriptor: appends, as a logger's does.
fn open_log(path: &Path) -> File {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
}

fn numbered(from: usize, to: usize) -> Vec<String> {
    (from..=to).map(|k| format!("line {k}")).collect()
}

fn rotations_and_truncations(name: &'static str) {
    let dir = TempDir::new("tail", name);
    let log = dir.0.join("app.log");
    let mut writer = open_log(&log);
    writer.write_all(b"line 1\nline 2\n").unwrap();

    let mut lp: Loop<Lines> = Loop::builder().backend(name).build().unwrap();
    let w: Stat = tail_follow::follow(&mut lp, &log, |_, lines: &mut Lines, line| {
        lines.push(String::from_utf8(line.to_vec()).unwrap())
    })
    .unwrap();
    let mut lines = Lines::new();
    let count = |n: usize| move |_: &Loop<'_, Lines>, l: &Lines| l.len() >= n;

    // What is there at the start, then appends, one line split in two.
    run_until(&mut lp, &mut lines, count(2));
    writer.write_all(b"line 3\nli").unwrap();
    run_until(&mut lp, &mut lines, count(3));
    writer.write_all(b"ne 4\nline 5\n").unwrap();
    run_until(&mut lp, &mut lines, count(5));

    // Rotation at once: renamed, a last line through the old descriptor,
    // a new file in its place.
    std::fs::rename(&log, dir.0.join("app.log.1")).unwrap();
    writer.write_all(b"line 6\n").unwrap();
    writer = open_log(&log);
    writer.write_all(b"line 7\n").unwrap();
    run_until(&mut lp, &mut lines, count(7));

    // Rotation with a gap: the path is missing (and seen missing) while the
    // old file still gets a line.
    std::fs::rename(&log, dir.0.join("app.log.2")).unwrap();
    run_until(&mut lp, &mut lines, |lp, _| {
        !w.file_stat(lp).unwrap().exists
    });
    writer.write_all(b"line 8\n").unwrap();
    writer = open_log(&log);
    writer.write_all(b"line 9\n").unwrap();
    run_until(&mut lp, &mut lines, count(9));

    // Truncated in place (copytruncate), then written again: shorter
    // than what was read, so seen as a truncation.
    writer.write_all(b"line 10\nline 11\nline 12\n").unwrap();
    run_until(&mut lp, &mut lines, count(12));
    writer.set_len(0).unwrap();
    writer.write_all(b"line 13\n").unwrap();
    run_until(&mut lp, &mut lines, count(13));

    // Truncated by re-creating it (O_TRUNC, the same file), an unended
    // line, then rotated: the unended line comes out at the switch.
    writer.write_all(b"line 14\n").unwrap();
    run_until(&mut lp, &mut lines, count(14));
    writer = File::create(&log).unwrap();
    writer.write_all(b"line 15").unwrap();
    run_until(&mut lp, &mut lines, |lp, _| {
        w.file_stat(lp).unwrap().size == 7
    });
    std::fs::rename(&log, dir.0.join("app.log.3")).unwrap();
    writer = open_log(&log);
    writer.write_all(b"line 16\n").unwrap();
    run_until(&mut lp, &mut lines, count(16));

    // Nothing twice, nothing more.
    lp.run(RunMode::NoWait, &mut lines).unwrap();
    assert_eq!(lines, numbered(1, 16), "{name}");
    drop(writer);
}

#[test]
fn on_every_kernel_backend_every_line_once_through_rotation_and_truncation() {
    for &name in evloop::backends::AVAILABLE {
        common::watchdog(&format!("tail -F on {name}"), common::WATCHDOG, move || {
            rotations_and_truncations(name)
        });
    }
}
