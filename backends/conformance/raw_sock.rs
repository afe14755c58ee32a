//! What the fd-based fixtures (Unix and WASI) share: the doomed source,
//! an fd registered by number only, and the locks they need none of.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use super::SharedStream;
use crate::RawFd;

/// The number of a borrowed fd.
pub(crate) fn raw(fd: BorrowedFd<'_>) -> RawFd {
    fd.as_raw_fd()
}

/// Nothing to hold while a loop or a pair is made (`None`): on Unix the
/// fd numbers nobody else may take are kept apart by high numbers
/// (fixture_unix.rs); a WASI guest has one thread. (Windows, whose
/// handle values cannot be kept apart, holds a lock.)
pub(crate) fn creating() -> Option<()> {
    None
}

/// Nothing to hold for a scenario either (`None`): see [`creating`].
pub(crate) fn scenario_lock(_exclusive: bool) -> Option<()> {
    None
}

/// An fd registered by number only: it owns nothing and closes nothing
/// when dropped, so a test can `close(2)` the fd behind the loop's back
/// without anything closing it a second time (std aborts on a double close
/// of an `OwnedFd` in debug builds).
///
/// ```
/// use evloop::conformance::fixture::{Fixture, OsFixture, RawSock};
/// fn doomed(_: &<OsFixture as Fixture>::Doomed) {}
/// let _: fn(&RawSock) = doomed;
/// ```
pub struct RawSock {
    fd: RawFd,
}

impl RawSock {
    /// The fd `fd`, registered by number only: the caller closes it (or
    /// not), never the `RawSock`.
    pub(crate) fn owning_nothing(fd: RawFd) -> RawSock {
        RawSock { fd }
    }
}

impl AsFd for RawSock {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: deliberately weaker than `borrow_raw` asks: the fd is open
        // when the watcher is registered, and the test closes it while the
        // watcher is active to check what the loop does then. The loop only
        // passes the number to the backend; nothing reads through it after
        // the close but the kernel (or the WASI runtime), which reports
        // EBADF.
        unsafe { BorrowedFd::borrow_raw(self.fd) }
    }
}

impl SharedStream for RawSock {
    fn read_some(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for `buf.len()` bytes; a closed fd gives
        // EBADF.
        let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
    fn write_some(&self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for `buf.len()` bytes; a closed fd gives
        // EBADF.
        let n = unsafe { libc::write(self.fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}
