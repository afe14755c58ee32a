//! The kernel-only scenarios on WASI: a number reused at once (by
//! `fd_renumber`), and regular files and directories refused, in a
//! directory the runtime preopened (`wasmtime run --dir`).
//! `closed_fd_reuse` does not run there
//! ([`Scenario::not_applicable`](super::Scenario::not_applicable) gives
//! the reason, and [`Scenario::check`](super::Scenario::check) skips it
//! before it gets here).

use std::fs::File;
use std::io;
use std::os::fd::FromRawFd;

use super::fixture::{renumber, socketpair, take_fd, Fixture, OsFixture, RawSock};
use super::record::{write_all, Record};
use super::scenarios::{reader, refused_beside_a_pipe, sleeper, start};
use super::Scenario;
use crate::{Interest, RawFd, RunMode, RunOutcome};

use RunMode::NoWait;

/// The first directory the runtime preopened, if any (found by `fstat`:
/// wasmtime puts a preopened listener before the directories, where
/// wasi-libc stops looking for them, so that std's paths do not reach
/// them; `openat` on the fd does).
pub(super) fn kit_dir() -> Option<RawFd> {
    (3..64).find(|&fd| {
        // SAFETY: `st` is a plain struct for fstat to fill in; an fd that
        // is not open gives EBADF.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::fstat(fd, &mut st) };
        r == 0 && st.st_mode & libc::S_IFMT == libc::S_IFDIR
    })
}

/// The file `name` in the directory `dir`, made if need be, opened for
/// reading and writing.
fn open_in(dir: RawFd, name: &std::ffi::CStr) -> io::Result<File> {
    // SAFETY: a NUL-terminated name, relative to an open directory; the
    // new fd is owned by the returned File.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), libc::O_RDWR | libc::O_CREAT, 0o644) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// The reason, as a panic (never reached through the kit).
fn not_here(f: &OsFixture, s: Scenario) -> Record {
    panic!(
        "{}: {s}: {}",
        f.backend(),
        s.not_applicable().unwrap_or("not written for WASI")
    )
}

/// fd number reuse, as WASI allows it: a watcher removed (deregistered;
/// its source, borrowed by number, left open, ready with unread data) and
/// its number taken at once by a new connection (`fd_renumber` onto it,
/// which closes the old one: WASI has no dup to keep it open elsewhere,
/// and wasmtime never hands out a closed number again). The new watcher
/// starts clean: nothing of the old connection's readiness reaches it,
/// then its own data does.
pub fn fd_reuse(f: &OsFixture) -> Record {
    let backend = f.backend();
    let (old, old_peer) = socketpair();
    let (mut lp, mut log) = start(f);
    let n = super::fixture::fd_of(&old);
    let by_number = RawSock::owning_nothing(n);
    log.name_fd(&by_number, "old");
    let io = lp
        .io(by_number, Interest::READABLE, sleeper("old"))
        .unwrap();
    write_all(&old_peer, b"stale"); // never read through `n`
    log.step(&mut lp, NoWait);
    log.expect(&["old:r"], &[]);

    // Deregistered; `n` stays open (the source owns nothing), still
    // readable.
    lp.remove(io).unwrap();
    log.step(&mut lp, NoWait);
    log.expect_outcome(RunOutcome::NoActiveWatchers);
    log.expect_modifies(&["old: r => -"]);

    // The number taken at once by a new connection.
    let (mut new, new_peer) = socketpair();
    let n_again = take_fd(old);
    renumber(&mut new, n_again);
    assert_eq!(super::fixture::fd_of(&new), n, "{backend}");
    log.name_fd(&new, "new");
    lp.io(new, Interest::READABLE, reader("new")).unwrap();
    log.step(&mut lp, NoWait);
    log.expect(&[], &[]);
    log.expect_modifies(&["new: - => r"]);

    write_all(&new_peer, b"fresh");
    log.step(&mut lp, NoWait);
    log.expect(&["new:r"], &["new read \"fresh\" then would-block"]);
    drop(lp);
    drop((old_peer, new_peer));
    log.into_record()
}

/// Not applicable on WASI (see [`Scenario::not_applicable`]).
pub fn closed_fd_reuse(f: &OsFixture) -> Record {
    not_here(f, Scenario::ClosedFdReuse)
}

/// A file in the preopened directory, and the directory itself (its fd,
/// borrowed: the runtime's), refused by the backend as on every platform
/// (a WASI runtime reports them always ready): `ERROR`, stopped, and a
/// pipe beside them still works.
pub fn regular_file(f: &OsFixture) -> Record {
    let Some(dir) = kit_dir() else {
        return not_here(f, Scenario::RegularFile);
    };
    let name = c"evloop_kit_regular_file";
    let file = open_in(dir, name).unwrap_or_else(|e| {
        panic!(
            "{}: cannot make a file in the preopened directory: {e}",
            f.backend()
        )
    });
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    let handles = (
        RawSock::owning_nothing(fd),
        RawSock::owning_nothing(dir),
        RawSock::owning_nothing(fd),
    );
    let (lp, record) = refused_beside_a_pipe(f, handles, super::fixture::pipe());
    // The loop, which still has the file's number, goes before the file.
    drop(lp);
    drop(file);
    // SAFETY: a NUL-terminated name, relative to the open directory.
    unsafe { libc::unlinkat(dir, name.as_ptr(), 0) };
    record
}
