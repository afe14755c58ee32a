//! The kernel-only scenarios on WASI: regular files and directories
//! refused, in a directory the runtime preopened (`wasmtime run --dir`).
//! The fd reuse scenarios do not run there
//! ([`Scenario::not_applicable`](super::Scenario::not_applicable) gives
//! the reasons, and [`Scenario::check`](super::Scenario::check) skips them
//! before they get here).

use std::fs::File;
use std::io;
use std::os::fd::FromRawFd;

use super::fixture::{Fixture, OsFixture, RawSock};
use super::record::Record;
use super::scenarios::refused_beside_a_pipe;
use super::Scenario;
use crate::RawFd;

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

/// Not applicable on WASI (see [`Scenario::not_applicable`]).
pub fn fd_reuse(f: &OsFixture) -> Record {
    not_here(f, Scenario::FdReuse)
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
