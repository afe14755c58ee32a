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
//! Nothing here is recorded: a program that wants its fd_io calls in a
//! trace calls `evloop::replay::fd_io` (feature `replay`), the same two
//! functions as a layer on top of these, so this path never tests for a
//! recording.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// Reads at most `buf.len()` bytes from `fd` with one `read(2)`; `Ok(0)`
/// is end of file. Not recorded: in a recorded loop, what it reads cannot
/// be replayed (the recording notes an io watcher on an fd that is not a
/// `replay::Recorded` socket's when it starts, and the replay names it
/// where it diverges); `evloop::replay::fd_io::recorded_read` is this
/// call recorded.
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
    // SAFETY: `buf` is a live, writable region of `buf.len()` bytes, and
    // `fd` is borrowed, so it stays open until the call returns.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
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
    // SAFETY: `buf` is a live, readable region of `buf.len()` bytes, and
    // `fd` is borrowed, so it stays open until the call returns.
    let n = unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}
