//! One-syscall `read(2)` and `write(2)` on any borrowed fd.
//!
//! `std`'s socket `Read`/`Write` impls go through several layers (and
//! `recv`/`send` with flags) before reaching the kernel; in a callback that
//! moves a few bytes per event, those layers cost more than the loop's own
//! dispatch. These two functions are the thinnest safe way to make the
//! syscall: the fd is borrowed (so it is open for the duration of the call)
//! and the buffer is a Rust slice (so its length is right). They return
//! what the syscall returned: a byte count, or the `errno` as an
//! [`io::Error`] (`WouldBlock` on a non-blocking fd with nothing to do).
//! No retry on `EINTR`, no loop for short writes: exactly one syscall.
//!
//! ```
//! use evloop::backends::fd_io;
//! use std::os::unix::net::UnixStream;
//!
//! let (a, b) = UnixStream::pair().unwrap();
//! b.set_nonblocking(true).unwrap();
//! assert_eq!(fd_io::write(&a, b"hi").unwrap(), 2);
//! let mut buf = [0u8; 8];
//! assert_eq!(fd_io::read(&b, &mut buf).unwrap(), 2);
//! assert_eq!(&buf[..2], b"hi");
//! let err = fd_io::read(&b, &mut buf).unwrap_err();
//! assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
//! ```
//!
//! With the cargo feature `record-fd-io`, while a loop of the thread
//! records (`evloop::replay`), each call and what it moved are written to
//! the trace, and during a replay a call here (on a real descriptor: the
//! replay's sockets are virtual) is reported as a divergence and makes no
//! syscall. The feature costs each call one thread-local test (about 20
//! instructions per event on the bench.c workload, where these calls are
//! most of a callback), so it is off by default: without it, reads and
//! writes here are behind a recording's back (a replay reports them as
//! reads the recording lacks).

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

#[cfg(feature = "record-fd-io")]
use crate::replay::sink;

/// Reads at most `buf.len()` bytes from `fd` with one `read(2)`; `Ok(0)`
/// is end of file.
///
/// ```
/// # use evloop::backends::fd_io;
/// let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
/// drop(a);
/// assert_eq!(fd_io::read(&b, &mut [0u8; 4]).unwrap(), 0);
/// ```
#[inline]
pub fn read(fd: impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    let fd = fd.as_fd();
    #[cfg(feature = "record-fd-io")]
    if sink::active() {
        return observed_read(fd, buf);
    }
    raw_read(fd, buf)
}

#[inline]
fn raw_read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live, writable region of `buf.len()` bytes, and
    // `fd` is borrowed, so it stays open until the call returns.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// A read while the thread records or replays.
#[cfg(feature = "record-fd-io")]
#[cold]
#[inline(never)]
fn observed_read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    if sink::mode() == sink::REPLAYING {
        return Err(outside(fd, "a read"));
    }
    let r = raw_read(fd, buf);
    record(sink::READ_TAG, fd, buf, &r);
    r
}

/// Records a read's or a write's result, and the bytes it moved (the
/// start of `buf`).
#[cfg(feature = "record-fd-io")]
#[inline]
fn record(tag: u8, fd: BorrowedFd<'_>, buf: &[u8], r: &io::Result<usize>) {
    let moved = r.as_ref().map_or(0, |&n| n.min(buf.len()));
    sink::record_transfer(
        tag,
        fd.as_raw_fd(),
        buf.len(),
        r.as_ref().copied(),
        &buf[..moved],
    );
}

/// During a replay: reported (the replay's sockets are virtual), and no
/// syscall made.
#[cfg(feature = "record-fd-io")]
fn outside(fd: BorrowedFd<'_>, what: &str) -> io::Error {
    sink::outside(fd.as_raw_fd(), what, "backends::fd_io");
    io::ErrorKind::WouldBlock.into()
}

/// Writes at most `buf.len()` bytes to `fd` with one `write(2)` and says
/// how many were taken (possibly fewer: a short write is not retried).
///
/// On a socket whose peer is gone this fails with `EPIPE` (Rust programs
/// ignore `SIGPIPE`, as `std` sets it up).
///
/// ```
/// # use evloop::backends::fd_io;
/// let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
/// assert_eq!(fd_io::write(&a, b"x").unwrap(), 1);
/// drop(b);
/// assert_eq!(fd_io::write(&a, b"x").unwrap_err().kind(), std::io::ErrorKind::BrokenPipe);
/// ```
#[inline]
pub fn write(fd: impl AsFd, buf: &[u8]) -> io::Result<usize> {
    let fd = fd.as_fd();
    #[cfg(feature = "record-fd-io")]
    if sink::active() {
        return observed_write(fd, buf);
    }
    raw_write(fd, buf)
}

#[inline]
fn raw_write(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live, readable region of `buf.len()` bytes, and
    // `fd` is borrowed, so it stays open until the call returns.
    let n = unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// A write while the thread records or replays.
#[cfg(feature = "record-fd-io")]
#[cold]
#[inline(never)]
fn observed_write(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    if sink::mode() == sink::REPLAYING {
        return Err(outside(fd, "a write"));
    }
    let r = raw_write(fd, buf);
    record(sink::WRITE_TAG, fd, buf, &r);
    r
}
