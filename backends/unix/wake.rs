//! The wake fd: what a signal handler or another thread writes to end a
//! backend's wait. `eventfd(EFD_NONBLOCK | EFD_CLOEXEC)` on Linux and
//! Android; elsewhere a non-blocking, close-on-exec pipe (`pipe2(2)`
//! where the platform has it; macOS sets the flags after `pipe(2)`). The backend
//! watches the read end in its own kernel set (kqueue too: `kevent(2)` is
//! not async-signal-safe per POSIX, so the signal handler could not use
//! `EVFILT_USER`, whereas `write(2)` is on the list of async-signal-safe
//! functions).
//!
//! These are raw descriptors on purpose: a hub slot owns its pair and
//! closes it only when no handler or waker can be writing it (see
//! `hub.rs`), so no `OwnedFd` may close it.

use std::io;
use std::os::fd::RawFd;

/// A new wake fd: `(read end, write end)`, the same descriptor for an
/// eventfd.
pub(crate) fn create() -> io::Result<(RawFd, RawFd)> {
    cfg_if::cfg_if! {
        if #[cfg(any(target_os = "linux", target_os = "android"))] {
            // SAFETY: plain system call with integer arguments.
            let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok((fd, fd))
        } else if #[cfg(any(
            target_os = "freebsd",
            target_os = "dragonfly",
            target_os = "netbsd",
            target_os = "openbsd",
            target_os = "illumos",
            target_os = "solaris"
        ))] {
            let mut fds = [-1 as libc::c_int; 2];
            // Both flags in the one call: no window in which a concurrent
            // exec could inherit the pair.
            // SAFETY: `fds` has room for the two descriptors pipe2 writes.
            if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok((fds[0], fds[1]))
        } else {
            let mut fds = [-1 as libc::c_int; 2];
            // SAFETY: `fds` has room for the two descriptors pipe writes.
            if unsafe { libc::pipe(fds.as_mut_ptr()) } < 0 {
                return Err(io::Error::last_os_error());
            }
            // macOS has no pipe2: set the flags one by one. (A concurrent
            // exec in another thread may inherit the pair meanwhile.)
            for fd in fds {
                // SAFETY: fcntl on descriptors just created and owned here.
                let ok = unsafe {
                    libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) >= 0
                        && libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) >= 0
                };
                if !ok {
                    let err = io::Error::last_os_error();
                    close(fds[0], fds[1]);
                    return Err(err);
                }
            }
            Ok((fds[0], fds[1]))
        }
    }
}

/// Closes a pair made by [`create`].
pub(crate) fn close(read: RawFd, write: RawFd) {
    // SAFETY: the caller owns both descriptors and never uses them again
    // (the hub only closes a pair no handler or waker of this process can
    // reach; see `hub.rs`).
    unsafe {
        libc::close(read);
        if write != read {
            libc::close(write);
        }
    }
}

/// Makes the read end readable. Async-signal-safe: one `write(2)`, no
/// allocation, no lock, no panic. A full pipe or a saturated eventfd
/// (`EAGAIN`) is already readable, and any other failure cannot be
/// reported from a signal handler, so the result is ignored.
#[inline]
pub(crate) fn poke(write: RawFd) {
    // 8 bytes: what an eventfd requires, and within PIPE_BUF, so a pipe
    // takes all of it or nothing.
    let one: u64 = 1;
    // SAFETY: `one` is 8 readable bytes; `write` is an open descriptor
    // (the hub never closes one that a handler or waker may still write).
    unsafe { libc::write(write, (&one as *const u64).cast(), 8) };
}

/// Empties the read end, so that the next wait blocks again.
pub(crate) fn drain(read: RawFd) {
    let mut buf = [0u8; 256];
    loop {
        // SAFETY: `buf` has room for `buf.len()` bytes; `read` is open and
        // non-blocking.
        let n = unsafe { libc::read(read, buf.as_mut_ptr().cast(), buf.len()) };
        // An eventfd hands its whole counter in one read of 8 bytes; a pipe
        // may hold more than one buffer.
        if n < buf.len() as isize {
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(fd: RawFd) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    #[test]
    fn poke_drain_and_flags() {
        let (r, w) = create().unwrap();
        assert!(!readable(r));
        for _ in 0..100 {
            poke(w);
        }
        assert!(readable(r));
        drain(r);
        assert!(!readable(r), "drained");
        for fd in [r, w] {
            // SAFETY: F_GETFD / F_GETFL on descriptors owned by the test.
            let (fd_flags, fl) = unsafe {
                (
                    libc::fcntl(fd, libc::F_GETFD),
                    libc::fcntl(fd, libc::F_GETFL),
                )
            };
            assert_ne!(fd_flags & libc::FD_CLOEXEC, 0);
            assert_ne!(fl & libc::O_NONBLOCK, 0);
        }
        close(r, w);
    }
}
