//! The `select(2)` backend: works on every Unix, for fds below `FD_SETSIZE`.
//!
//! - The backend keeps master read and write `fd_set`s and the largest
//!   registered fd, and copies the sets for each `select` call.
//! - `fd_set` has room for fds `0..FD_SETSIZE` only (1024 on Linux).
//!   [`Capabilities::max_fd`] says so, and the loop refuses larger fds with
//!   [`Error::FdTooLarge`](crate::Error::FdTooLarge); [`Backend::modify`]
//!   checks again and returns an error rather than write outside a set.
//! - Only level-triggered registrations: the loop refuses edge-triggered
//!   watchers on this backend and emulates one-shot ones.
//! - `select` reports only "readable" and "writable": a hang-up or a pending
//!   error shows up as readiness, and the next read or write reports it.
//! - `EBADF` from `select` means a registered fd was closed behind the
//!   loop's back: the backend finds which with `fcntl(fd, F_GETFD)` and
//!   reports them as [`Ready::INVALID`] (the loop stops their watchers with
//!   [`Ready::ERROR`] and forgets them); other fds report nothing that round.
//!   (Linux ignores, rather than refuses, closed fds numbered beyond the
//!   process's current fd table, so such an fd may simply stay silent.)
//! - Regular files and directories are refused (`EPERM`), as epoll refuses
//!   them (see the poll backend).
//! - Timeouts are rounded up to whole microseconds; a wait interrupted by a
//!   signal is resumed with the time left.
//! - Signals, child exits, wake-ups, wall-clock steps and path hints are
//!   the loop's (its Unix notifier, `backends/unix/`): their fds come
//!   through `modify` like any other, below `FD_SETSIZE` like any other
//!   (the notifier asks for its wake fd below [`Capabilities::max_fd`],
//!   and watches a child whose pidfd is beyond it through `SIGCHLD`).
#![allow(unsafe_code)]

use std::io;
use std::mem;
use std::os::fd::RawFd;
use std::time::Duration;

use super::{Clock, Deadline};
use crate::backend::{Backend, Capabilities, PollEvent, PollStatus};
use crate::{Interest, Ready, Trigger};

/// One more than the largest fd an `fd_set` can hold.
const SETSIZE: RawFd = libc::FD_SETSIZE as RawFd;

/// The longest single wait: some systems (macOS) refuse `tv_sec` above
/// 10^8 with `EINVAL`. The loop simply polls again after it.
const MAX_WAIT_SECS: u64 = 100_000_000;

/// The `select` backend (every Unix, fds below `FD_SETSIZE`).
///
/// ```
/// use evloop::backend::{Backend, PollEvent};
/// use evloop::backends::select::Select;
/// use evloop::{Interest, Ready};
/// use std::io::Write;
/// use std::os::fd::AsRawFd;
/// use std::os::unix::net::UnixStream;
/// use std::time::Duration;
///
/// let mut s = Select::new();
/// assert_eq!(s.capabilities().max_fd, Some(libc::FD_SETSIZE as i32 - 1));
/// let (a, mut b) = UnixStream::pair()?;
/// s.modify(a.as_raw_fd(), Interest::NONE, Interest::READABLE)?;
/// b.write_all(b"ping")?;
/// let mut events = Vec::new();
/// s.poll(Some(Duration::from_secs(5)), &mut events)?;
/// assert_eq!(events, [PollEvent { fd: a.as_raw_fd(), ready: Ready::READABLE }]);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Select {
    set: Set,
    clock: Clock,
}

/// The master sets.
struct Set {
    read: libc::fd_set,
    write: libc::fd_set,
    /// The largest registered fd, or -1.
    max_fd: RawFd,
}

impl std::fmt::Debug for Select {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Select")
            .field("max_fd", &self.set.max_fd)
            .finish_non_exhaustive()
    }
}

impl Set {
    /// Whether `fd` is in either master set.
    fn registered(&self, fd: RawFd) -> bool {
        is_set(fd, &self.read) || is_set(fd, &self.write)
    }

    /// `fd` left the sets: lowers `max_fd` past the fds no longer there.
    fn lower_max(&mut self, fd: RawFd) {
        if fd == self.max_fd {
            while self.max_fd >= 0 && !self.registered(self.max_fd) {
                self.max_fd -= 1;
            }
        }
    }
}

impl Default for Select {
    fn default() -> Select {
        Select::new()
    }
}

/// An empty `fd_set`.
fn empty_set() -> libc::fd_set {
    let mut set = mem::MaybeUninit::<libc::fd_set>::uninit();
    // SAFETY: FD_ZERO initialises every bit of the set it is given, so the
    // value is fully initialised afterwards.
    unsafe {
        libc::FD_ZERO(set.as_mut_ptr());
        set.assume_init()
    }
}

/// Whether `fd` is in `set`. `fd` must be in `0..SETSIZE`.
fn is_set(fd: RawFd, set: &libc::fd_set) -> bool {
    debug_assert!((0..SETSIZE).contains(&fd));
    // SAFETY: `set` is a valid fd_set and the callers keep `fd` within
    // `0..FD_SETSIZE`, the range an fd_set covers.
    unsafe { libc::FD_ISSET(fd, set) }
}

/// Adds `fd` to, or removes it from, `set`. `fd` must be in `0..SETSIZE`.
fn put(fd: RawFd, set: &mut libc::fd_set, on: bool) {
    debug_assert!((0..SETSIZE).contains(&fd));
    // SAFETY: as in `is_set`: a valid set, and an fd within its range.
    unsafe {
        if on {
            libc::FD_SET(fd, set);
        } else {
            libc::FD_CLR(fd, set);
        }
    }
}

/// Whether `fd` is an open descriptor (`fcntl(fd, F_GETFD)` succeeds).
fn is_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD only reads the descriptor's flags; a closed fd yields
    // EBADF.
    let r = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    r != -1 || io::Error::last_os_error().raw_os_error() != Some(libc::EBADF)
}

/// A `timeval` for `d`, rounded up to the microsecond.
fn timeval(d: Duration) -> libc::timeval {
    let micros = d.as_nanos().div_ceil(1_000);
    let secs = (micros / 1_000_000).min(MAX_WAIT_SECS as u128);
    let usecs = if secs == MAX_WAIT_SECS as u128 {
        0
    } else {
        micros % 1_000_000
    };
    libc::timeval {
        tv_sec: secs as libc::time_t,
        tv_usec: usecs as libc::suseconds_t,
    }
}

impl Select {
    /// An empty select set. Creating one cannot fail: `select` needs no
    /// kernel object.
    ///
    /// ```
    /// use evloop::{backends::select::Select, Loop};
    /// let lp: Loop = Loop::with_backend(Select::new());
    /// assert_eq!(lp.backend_name(), "select");
    /// assert_eq!(lp.capabilities().max_fd, Some(libc::FD_SETSIZE as i32 - 1));
    /// ```
    pub fn new() -> Select {
        Select {
            set: Set {
                read: empty_set(),
                write: empty_set(),
                max_fd: -1,
            },
            clock: Clock::new(),
        }
    }

    /// After `select` failed with `EBADF`: reports the registered fds that
    /// are no longer open. Returns how many it found.
    fn report_invalid(&self, events: &mut Vec<PollEvent>) -> usize {
        let before = events.len();
        for fd in 0..=self.set.max_fd {
            if self.set.registered(fd) && !is_open(fd) {
                events.push(PollEvent {
                    fd,
                    ready: Ready::INVALID,
                });
            }
        }
        events.len() - before
    }
}

/// This backend, for the platform's list (backends/mod.rs).
pub(super) const OFFERED: super::Offered = super::Offered {
    name: "select",
    open: || Ok(Box::new(Select::new())),
};

impl Backend for Select {
    fn name(&self) -> &'static str {
        "select"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            edge: false,
            oneshot: false,
            virtual_fds: false,
            max_fd: Some(SETSIZE - 1),
            hangup: crate::backend::Hangup::Never,
            closed_fd: crate::backend::ClosedFd::AtNextWait,
            level: crate::backend::Level::Native,
            completion: false,
        }
    }

    fn modify(&mut self, fd: RawFd, _old: Interest, new: Interest) -> io::Result<()> {
        if !(0..SETSIZE).contains(&fd) {
            // Forgetting an fd that cannot have been registered succeeds.
            if new.is_empty() {
                return Ok(());
            }
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("fd {fd} is outside the range select can watch (0..{SETSIZE}, FD_SETSIZE)"),
            ));
        }
        if !new.is_empty() && new.trigger() != Trigger::Level {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the select backend supports only level-triggered registrations",
            ));
        }
        let set = &mut self.set;
        if !new.is_empty() && !set.registered(fd) {
            super::util::refuse_files("select", fd)?;
        }
        put(fd, &mut set.read, new.is_readable());
        put(fd, &mut set.write, new.is_writable());
        if !new.is_empty() {
            set.max_fd = set.max_fd.max(fd);
        } else {
            set.lower_max(fd);
        }
        Ok(())
    }

    fn pollable_fd(&self) -> io::Result<std::os::fd::BorrowedFd<'_>> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "select(2) is handed the watched fds at each wait, and no kernel object holds them in \
             between (epoll and kqueue have one)",
        ))
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        let deadline = Deadline::new(timeout);
        let (mut n, read, write) = loop {
            let (mut read, mut write) = (self.set.read, self.set.write);
            let mut tv = deadline.remaining().map(timeval);
            let tv_ptr = tv
                .as_mut()
                .map_or(std::ptr::null_mut(), |tv| tv as *mut libc::timeval);
            // SAFETY: `read` and `write` are valid fd_sets holding only fds
            // below `max_fd + 1 <= FD_SETSIZE`; `tv_ptr` is null or points
            // to a live timeval. The kernel writes only within them.
            let n = unsafe {
                libc::select(
                    self.set.max_fd + 1,
                    &mut read,
                    &mut write,
                    std::ptr::null_mut(),
                    tv_ptr,
                )
            };
            if n >= 0 {
                break (n as usize, read, write);
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EBADF) if self.report_invalid(events) > 0 => {
                    return Ok(PollStatus::Done)
                }
                _ => return Err(err),
            }
        };
        let mut fd = 0;
        while n > 0 && fd <= self.set.max_fd {
            let mut r = Ready::EMPTY;
            if is_set(fd, &read) {
                r |= Ready::READABLE;
                n -= 1;
            }
            if is_set(fd, &write) {
                r |= Ready::WRITABLE;
                n -= 1;
            }
            if !r.is_empty() {
                events.push(PollEvent { fd, ready: r });
            }
            fd += 1;
        }
        Ok(PollStatus::Done)
    }

    fn now(&mut self) -> Duration {
        self.clock.now()
    }

    fn reinit(&mut self) -> io::Result<()> {
        // No kernel object to re-create. The fds are forgotten, as a new
        // kernel object would have them: the loop adds every fd it still
        // watches again (with `old` NONE), and one it drops meanwhile is
        // never named again (it would stay in the sets, closed: EBADF at
        // every wait).
        let set = &mut self.set;
        set.read = empty_set();
        set.write = empty_set();
        set.max_fd = -1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeval_rounds_up() {
        let tv = timeval(Duration::from_nanos(1));
        assert_eq!((tv.tv_sec, tv.tv_usec), (0, 1));
        let tv = timeval(Duration::from_millis(2500));
        assert_eq!((tv.tv_sec, tv.tv_usec), (2, 500_000));
        let tv = timeval(Duration::MAX);
        assert_eq!((tv.tv_sec, tv.tv_usec), (MAX_WAIT_SECS as libc::time_t, 0));
    }

    #[test]
    fn max_fd_tracks_the_sets() {
        let mut s = Select::new();
        let r = Interest::READABLE;
        // Numbers no test opens (a first registration refuses a regular
        // file or a directory, which another test may have open under a
        // low number; an fd that is not open is let through).
        let (low, high) = (1000, 1009);
        s.modify(low, Interest::NONE, r).unwrap();
        s.modify(high, Interest::NONE, Interest::WRITABLE).unwrap();
        assert_eq!(s.set.max_fd, high);
        s.modify(high, Interest::WRITABLE, Interest::NONE).unwrap();
        assert_eq!(s.set.max_fd, low);
        s.modify(low, r, Interest::NONE).unwrap();
        assert_eq!(s.set.max_fd, -1);
        assert!(s.modify(SETSIZE, Interest::NONE, r).is_err());
        assert!(s.modify(-1, Interest::NONE, r).is_err());
        assert!(s.modify(SETSIZE, r, Interest::NONE).is_ok());
    }

    /// `reinit` forgets the fds (the loop adds those it still watches
    /// again).
    #[test]
    fn reinit_forgets_the_loops_fds() {
        let mut s = Select::new();
        // Numbers no test opens (see above).
        s.modify(1000, Interest::NONE, Interest::READABLE).unwrap();
        s.modify(1001, Interest::NONE, Interest::WRITABLE).unwrap();
        s.reinit().unwrap();
        assert!(!s.set.registered(1000) && !s.set.registered(1001));
        assert_eq!(s.set.max_fd, -1);
        s.modify(1000, Interest::NONE, Interest::WRITABLE).unwrap();
        assert!(is_set(1000, &s.set.write) && !is_set(1000, &s.set.read));
        assert_eq!(s.set.max_fd, 1000);
    }
}
