//! Scenarios that exist only on a kernel: fd numbers that get reused, and
//! files that cannot be polled. (The simulator never reuses a number and
//! has no files.)

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream;

use crate::{Interest, Ready, RunMode, RunOutcome};

use super::fixture::{dup_high, high_fds, socketpair, Fixture, OsFixture};
use super::record::{drain, write_all, Record};
use super::scenarios::{reader, sleeper, start};

use RunMode::NoWait;

/// fd number reuse: removing an owned watcher deregisters the fd *before*
/// closing it, so a new file that gets the same number at once starts
/// clean: its registration works, and no event of the old file (still open
/// elsewhere, with unread data) reaches the new watcher. On epoll, a close
/// without the deregistration would leave the old file in the interest
/// list under the same number, and its events would be reported for it.
pub fn fd_reuse(f: &OsFixture) -> Record {
    let backend = f.backend();
    let _numbers = high_fds();
    let (old, old_peer) = socketpair();
    let n = dup_high(old.as_raw_fd());
    // SAFETY: `n` was just created by dup_high and is owned by nobody else.
    let old_high = unsafe { UnixStream::from_raw_fd(n) };
    let (mut lp, mut log) = start(f);
    log.name_fd(&old_high, "old");
    let io = lp.io(old_high, Interest::READABLE, sleeper("old")).unwrap();
    write_all(&old_peer, b"stale"); // never read through `n`
    log.step(&mut lp, NoWait);
    log.expect(&["old:r"], &[]);

    // Deregisters, then closes `n`; `old` keeps the socket open.
    lp.remove(io).unwrap();
    log.step(&mut lp, NoWait);
    log.expect_outcome(RunOutcome::NoActiveWatchers);
    log.expect_modifies(&["old: r => -"]);

    let (new, new_peer) = socketpair();
    let m = dup_high(new.as_raw_fd());
    assert_eq!(m, n, "{backend}: the number is reused");
    drop(new);
    // SAFETY: `m` was just created by dup_high and is owned by nobody else.
    let new_high = unsafe { UnixStream::from_raw_fd(m) };
    log.name_fd(&new_high, "new");
    lp.io(new_high, Interest::READABLE, reader("new")).unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);
    log.expect_modifies(&["new: - => r"]);

    write_all(&new_peer, b"fresh");
    log.step(&mut lp, NoWait);
    log.expect(&["new:r"], &["new read \"fresh\" then would-block"]);
    let (left, _) = drain(&old);
    assert_eq!(left, "read \"stale\" then would-block", "{backend}");
    log.into_record()
}

/// Regular files and directories are refused by every OS backend (epoll
/// cannot watch them: `EPERM`; poll and select refuse them the same way
/// for consistency, rather than report them always ready): the watcher
/// gets `Ready::ERROR` and is stopped.
pub fn regular_file(f: &OsFixture) -> Record {
    let backend = f.backend();
    let file = File::open(std::env::current_exe().unwrap()).unwrap();
    let dir = File::open(std::env::temp_dir()).unwrap();
    let (mut lp, mut log) = start(f);
    log.name_fd(&file, "file");
    log.name_fd(&dir, "dir");
    let a = lp.io(file, Interest::READABLE, sleeper("file")).unwrap();
    let b = lp.io(dir, Interest::READABLE, sleeper("dir")).unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&["dir:r killed", "file:r killed"], &[]);
    log.expect_modifies(&["file: - => r failed", "dir: - => r failed"]);
    assert_eq!(log.last().raw("file"), Ready::ERROR | Ready::READABLE);
    let stopped = !lp.is_active(a).unwrap() && !lp.is_active(b).unwrap();
    assert!(stopped, "{backend}: refused watchers are stopped");
    log.step(&mut lp, NoWait);
    log.expect_outcome(RunOutcome::NoActiveWatchers);

    // A pipe next to a refused file still works.
    let (r, w) = super::fixture::pipe();
    let file = File::open(std::env::current_exe().unwrap()).unwrap();
    lp.io(file, Interest::WRITABLE, sleeper("file")).unwrap();
    lp.io(r, Interest::READABLE, reader("pipe")).unwrap();
    write_all(&w, b"x");
    log.step(&mut lp, NoWait);
    log.expect(
        &["file:w killed", "pipe:r"],
        &["pipe read \"x\" then would-block"],
    );
    log.into_record()
}
