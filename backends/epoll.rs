//! The Linux `epoll(7)` backend: a thin shim over `epoll_create1`,
//! `epoll_ctl` and `epoll_wait`.
//!
//! - Registrations are level-triggered unless the watchers ask otherwise:
//!   [`Trigger::Edge`] becomes `EPOLLET` and [`Trigger::Oneshot`] becomes
//!   `EPOLLONESHOT` (one-shot is native: the kernel disarms the fd after one
//!   report, and the loop re-arms it with `EPOLL_CTL_MOD`).
//! - A readable registration also asks for `EPOLLRDHUP`, so that a peer's
//!   half-close is reported as [`Ready::HUP`]. `EPOLLHUP` and `EPOLLRDHUP`
//!   are reported as `HUP | READABLE` (the next read sees EOF); `EPOLLERR`
//!   as `ERROR | READABLE | WRITABLE` (the next read or write sees the
//!   error).
//! - The fd number travels in `epoll_event.u64`.
//! - `EEXIST` on `EPOLL_CTL_ADD` is retried as a `MOD`, and `ENOENT` on
//!   `MOD` as an `ADD`, as libev does: both happen when an fd number is
//!   reused, or when the kernel dropped a registration because its file was
//!   closed behind the loop's back. Forgetting an fd the kernel no longer
//!   knows (`ENOENT`, `EBADF`) succeeds.
//! - **Regular files and directories**: `epoll` refuses them (`EPERM`). The
//!   registration fails with an error that says so, and the loop stops the
//!   fd's watchers and passes them [`Ready::ERROR`]. (libev instead fakes
//!   "always ready" for them.) The poll and select backends refuse them the
//!   same way, so a file watcher fails alike on every backend.
//! - `epoll_wait` fills a reusable buffer, doubled whenever a wait fills it
//!   completely. Timeouts are rounded up to whole milliseconds, so timers
//!   never fire early; a wait interrupted by a signal is resumed with the
//!   time left.
//! - After `fork()`, [`Backend::reinit`] closes the inherited epoll fd (the
//!   kernel object is shared with the parent) and creates a new one.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use super::{Clock, Deadline};
use crate::{Backend, Capabilities, Interest, PollEvent, PollStatus, Ready, Trigger};

/// Initial number of events one `epoll_wait` can return.
const INITIAL_EVENTS: usize = 64;
/// The buffer stops growing at this many events.
const MAX_EVENTS: usize = 4096;

/// The `epoll` backend (Linux).
///
/// ```
/// use evloop::backends::epoll::Epoll;
/// use evloop::{Backend, Interest, PollEvent, Ready};
/// use std::io::Write;
/// use std::os::fd::AsRawFd;
/// use std::os::unix::net::UnixStream;
/// use std::time::Duration;
///
/// let mut ep = Epoll::new()?;
/// let (a, mut b) = UnixStream::pair()?;
/// ep.modify(a.as_raw_fd(), Interest::NONE, Interest::READABLE)?;
/// b.write_all(b"ping")?;
/// let mut events = Vec::new();
/// ep.poll(Some(Duration::from_secs(5)), &mut events)?;
/// assert_eq!(events, [PollEvent { fd: a.as_raw_fd(), ready: Ready::READABLE }]);
/// ep.modify(a.as_raw_fd(), Interest::READABLE, Interest::NONE)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Epoll {
    epfd: OwnedFd,
    /// `epoll_wait`'s output buffer; its length is the `maxevents` argument.
    buf: Vec<libc::epoll_event>,
    clock: Clock,
}

impl std::fmt::Debug for Epoll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Epoll")
            .field("epfd", &self.epfd.as_raw_fd())
            .field("max_events", &self.buf.len())
            .finish_non_exhaustive()
    }
}

impl Epoll {
    /// Creates an epoll instance (`epoll_create1(EPOLL_CLOEXEC)`).
    ///
    /// ```
    /// use evloop::{backends::epoll::Epoll, Backend, Loop};
    /// let ep = Epoll::new().unwrap();
    /// assert!(ep.capabilities().edge && ep.capabilities().oneshot);
    /// let lp: Loop = Loop::with_backend(ep);
    /// assert_eq!(lp.backend_name(), "epoll");
    /// ```
    pub fn new() -> io::Result<Epoll> {
        Ok(Epoll {
            epfd: create()?,
            buf: vec![libc::epoll_event { events: 0, u64: 0 }; INITIAL_EVENTS],
            clock: Clock::new(),
        })
    }

    /// One `epoll_ctl` call.
    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events,
            u64: fd as u64,
        };
        // SAFETY: `epfd` is an open epoll fd owned by `self`, and `ev` is a
        // valid epoll_event that outlives the call (the kernel copies it;
        // for EPOLL_CTL_DEL it is ignored). An invalid `fd` is reported as
        // an error, not undefined behaviour.
        let r = unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), op, fd, &mut ev) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

/// `epoll_create1(EPOLL_CLOEXEC)`, owned.
fn create() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall without pointer arguments.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by epoll_create1, so it is open and
    // nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The `epoll_event.events` mask for an interest.
fn epoll_events(interest: Interest) -> u32 {
    let mut ev = 0;
    if interest.is_readable() {
        ev |= libc::EPOLLIN | libc::EPOLLRDHUP;
    }
    if interest.is_writable() {
        ev |= libc::EPOLLOUT;
    }
    ev |= match interest.trigger() {
        Trigger::Level => 0,
        Trigger::Edge => libc::EPOLLET,
        Trigger::Oneshot => libc::EPOLLONESHOT,
    };
    ev as u32
}

/// What an `epoll_event.events` mask reports.
#[inline]
fn ready(events: u32) -> Ready {
    // The common case first: one compare.
    if events == libc::EPOLLIN as u32 {
        return Ready::READABLE;
    }
    let ev = events as libc::c_int;
    let mut r = Ready::EMPTY;
    if ev & libc::EPOLLIN != 0 {
        r |= Ready::READABLE;
    }
    if ev & libc::EPOLLOUT != 0 {
        r |= Ready::WRITABLE;
    }
    if ev & (libc::EPOLLHUP | libc::EPOLLRDHUP) != 0 {
        r |= Ready::HUP | Ready::READABLE;
    }
    if ev & libc::EPOLLERR != 0 {
        r |= Ready::ERROR | Ready::READABLE | Ready::WRITABLE;
    }
    r
}

fn is_errno(err: &io::Error, errno: libc::c_int) -> bool {
    err.raw_os_error() == Some(errno)
}

impl Backend for Epoll {
    fn name(&self) -> &'static str {
        "epoll"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            edge: true,
            oneshot: true,
            virtual_fds: false,
            max_fd: None,
        }
    }

    fn modify(&mut self, fd: RawFd, old: Interest, new: Interest) -> io::Result<()> {
        if new.is_empty() {
            return match self.ctl(libc::EPOLL_CTL_DEL, fd, 0) {
                // Already gone from the kernel's set (closed, or never added).
                Err(e) if is_errno(&e, libc::ENOENT) || is_errno(&e, libc::EBADF) => Ok(()),
                r => r,
            };
        }
        let events = epoll_events(new);
        // `NONE` is a new fd; `NONE` with the one-shot trigger is an fd the
        // kernel still holds, disarmed after a one-shot report.
        let known = old != Interest::NONE;
        let (first, second) = if known {
            (libc::EPOLL_CTL_MOD, libc::EPOLL_CTL_ADD)
        } else {
            (libc::EPOLL_CTL_ADD, libc::EPOLL_CTL_MOD)
        };
        let result = match self.ctl(first, fd, events) {
            Err(e) if is_errno(&e, libc::EEXIST) || is_errno(&e, libc::ENOENT) => {
                self.ctl(second, fd, events)
            }
            r => r,
        };
        result.map_err(|e| {
            if is_errno(&e, libc::EPERM) {
                io::Error::new(
                    e.kind(),
                    format!(
                        "epoll cannot watch fd {fd}: it is a regular file or a directory \
                         (always ready; no backend watches those) ({e})"
                    ),
                )
            } else {
                e
            }
        })
    }

    fn check_fd(&self, fd: RawFd) -> io::Result<()> {
        super::unix::check_pollable("epoll", fd)
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        let deadline = Deadline::new(timeout);
        let n = loop {
            let max = self.buf.len().min(libc::c_int::MAX as usize) as libc::c_int;
            // SAFETY: `buf` holds `buf.len()` initialised epoll_events that
            // the kernel may overwrite, and `max` does not exceed that
            // length; `epfd` is open.
            let n = unsafe {
                libc::epoll_wait(
                    self.epfd.as_raw_fd(),
                    self.buf.as_mut_ptr(),
                    max,
                    deadline.millis(),
                )
            };
            if n >= 0 {
                break n as usize;
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        };
        // `extend` over an exact-size iterator: one capacity check per call.
        events.extend(self.buf[..n].iter().map(|ev| {
            // Copy the fields out: the struct is packed on x86_64.
            let (mask, data) = (ev.events, ev.u64);
            PollEvent {
                fd: data as RawFd,
                ready: ready(mask),
            }
        }));
        if n == self.buf.len() && n < MAX_EVENTS {
            // Full: more may be waiting. Report more per call from now on.
            let zero = libc::epoll_event { events: 0, u64: 0 };
            self.buf.resize(n * 2, zero);
        }
        Ok(PollStatus::Done)
    }

    fn now(&mut self) -> Duration {
        self.clock.now()
    }

    fn reinit(&mut self) -> io::Result<()> {
        // The old fd is closed when replaced; the loop re-adds every fd.
        self.epfd = create()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks() {
        let ro = epoll_events(Interest::READABLE) as libc::c_int;
        assert_eq!(ro, libc::EPOLLIN | libc::EPOLLRDHUP);
        let w_edge = epoll_events(Interest::WRITABLE.with_trigger(Trigger::Edge)) as libc::c_int;
        assert_eq!(w_edge, libc::EPOLLOUT | libc::EPOLLET);
        let both = epoll_events(Interest::BOTH.with_trigger(Trigger::Oneshot)) as libc::c_int;
        assert_eq!(
            both,
            libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLOUT | libc::EPOLLONESHOT
        );
        assert_eq!(ready(libc::EPOLLHUP as u32), Ready::HUP | Ready::READABLE);
        assert_eq!(
            ready(libc::EPOLLERR as u32),
            Ready::ERROR | Ready::READABLE | Ready::WRITABLE
        );
        assert_eq!(ready(libc::EPOLLOUT as u32), Ready::WRITABLE);
    }
}
