//! Scenarios that exist only on a kernel: fd numbers that get reused, and
//! files that cannot be polled. (The simulator never reuses a number and
//! has no files.)

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::UnixStream;

use crate::{Interest, Loop, RunMode, RunOutcome};

use super::fixture::{dup_high, high_fds, socketpair, Fixture, OsFixture, RawSock};
use super::record::{drain, write_all, Log, Record};
use super::scenarios::{reader, refused_beside_a_pipe, sleeper, start};

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

    reused_starts_clean(backend, lp, log, n, &old, 1)
}

/// fd number reuse after a close behind the loop's back: an fd closed
/// while a dup of its file lives, then removed (its forget reaches a
/// closed number), and the number reused at once by a new file, which
/// must start clean. A registration keyed on the open file (epoll's)
/// outlives the closed number with the dup, out of reach of the forget
/// (`EPOLL_CTL_DEL` fails with `EBADF`): the backend must get rid of it
/// before its next wait (epoll rebuilds its instance: docs/porting.md,
/// section 5), or the old file's events arrive under the reused number,
/// for the new watcher.
pub fn closed_fd_reuse(f: &OsFixture) -> Record {
    let backend = f.backend();
    let _numbers = high_fds();
    let (old, old_peer) = socketpair();
    let n = dup_high(old.as_raw_fd());
    let (mut lp, mut log) = start(f);
    let doomed = RawSock::owning_nothing(n);
    log.name_fd(&doomed, "old");
    let io = lp.io(doomed, Interest::READABLE, sleeper("old")).unwrap();
    write_all(&old_peer, b"stale"); // never read through `n`
    log.step(&mut lp, NoWait);
    log.expect(&["old:r"], &[]);

    // Closed behind the loop's back (`old` keeps the file open), then
    // removed: the forget reaches a closed number.
    // SAFETY: `n` was made by dup_high and is owned by nobody (the watcher
    // holds a `RawSock`, which never closes); the lock keeps the number.
    assert_eq!(unsafe { libc::close(n) }, 0, "{backend}: close");
    lp.remove(io).unwrap();
    log.step(&mut lp, NoWait);
    log.expect_outcome(RunOutcome::NoActiveWatchers);
    log.expect_modifies(&["old: r => -"]);

    reused_starts_clean(backend, lp, log, n, &old, 2)
}

/// Regular files and directories are refused by every OS backend (epoll
/// cannot watch them: `EPERM`; poll and select refuse them the same way
/// for consistency, rather than report them always ready): the watcher
/// gets `Ready::ERROR` and is stopped.
pub fn regular_file(f: &OsFixture) -> Record {
    let open = || File::open(std::env::current_exe().unwrap()).unwrap();
    let dir = File::open(std::env::temp_dir()).unwrap();
    let handles = (open(), dir, open());
    refused_beside_a_pipe(f, handles, super::fixture::pipe()).1
}

/// The end of both reuse scenarios: a new socket gets the number `n` at
/// once; its watcher sees nothing for `quiet` steps (no event of the old
/// file, still open as `old` with "stale" unread, arrives under the
/// number), then its own data only; the old file's data is still there.
fn reused_starts_clean(
    backend: &str,
    mut lp: Loop<'static, Log>,
    mut log: Log,
    n: RawFd,
    old: &UnixStream,
    quiet: usize,
) -> Record {
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
    for _ in 1..quiet {
        log.step(&mut lp, NoWait);
        log.expect(&[], &[]);
    }

    write_all(&new_peer, b"fresh");
    log.step(&mut lp, NoWait);
    log.expect(&["new:r"], &["new read \"fresh\" then would-block"]);
    let (left, _) = drain(old);
    assert_eq!(left, "read \"stale\" then would-block", "{backend}");
    log.into_record()
}
