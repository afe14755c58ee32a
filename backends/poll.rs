//! The `poll(2)` backend: works on every Unix.
//!
//! - The backend keeps the `pollfd` array that `poll` takes, plus an
//!   fd → slot index, so that registering, changing and forgetting an fd
//!   are O(1) (forgetting swap-removes the slot). Nothing is allocated in
//!   steady state.
//! - Only level-triggered registrations: the loop refuses edge-triggered
//!   watchers on this backend and emulates one-shot ones.
//! - `POLLNVAL` (the fd is not open) is reported as [`Ready::INVALID`]: the
//!   loop stops the fd's watchers with [`Ready::ERROR`] and forgets the fd.
//!   `POLLHUP` is reported as `HUP | READABLE` (the next read sees EOF),
//!   `POLLERR` as `ERROR | READABLE | WRITABLE`.
//! - Regular files and directories are refused (`EPERM`), as epoll refuses
//!   them: `poll(2)` would report them always ready, which no watcher can
//!   use. The loop stops their watchers with [`Ready::ERROR`], on every
//!   backend alike.
//! - Timeouts are rounded up to whole milliseconds, so timers never fire
//!   early and a sub-millisecond remainder never turns into a busy loop; a
//!   wait interrupted by a signal is resumed with the time left.
//! - Signals, child exits, wake-ups, wall-clock steps and path hints are
//!   the loop's (its Unix notifier, `backends/unix/`): their fds come
//!   through `modify` like any other.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use super::{Clock, Deadline};
use crate::backend::{Backend, Capabilities, PollEvent, PollStatus};
use crate::{Interest, Ready, Trigger};

/// `slot` value of an fd that is not registered.
const NO_SLOT: usize = usize::MAX;

/// The `poll` backend (every Unix).
///
/// ```
/// use evloop::backend::{Backend, PollEvent};
/// use evloop::backends::poll::Poll;
/// use evloop::{Interest, Ready};
/// use std::os::fd::AsRawFd;
/// use std::os::unix::net::UnixStream;
/// use std::time::Duration;
///
/// let mut p = Poll::new();
/// let (a, b) = UnixStream::pair()?;
/// p.modify(a.as_raw_fd(), Interest::NONE, Interest::WRITABLE)?;
/// let mut events = Vec::new();
/// p.poll(Some(Duration::ZERO), &mut events)?;
/// assert_eq!(events, [PollEvent { fd: a.as_raw_fd(), ready: Ready::WRITABLE }]);
/// # drop(b);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Poll {
    set: Set,
    clock: Clock,
}

/// The registrations.
struct Set {
    /// The array handed to `poll(2)`, one entry per registered fd.
    fds: Vec<libc::pollfd>,
    /// `slot[fd]` is the index in `fds` of a loop's fd, or `NO_SLOT`.
    slot: Vec<usize>,
}

impl std::fmt::Debug for Poll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poll")
            .field("registered", &self.set.fds.len())
            .finish_non_exhaustive()
    }
}

impl Set {
    /// Records that the loop's entry now at `s` is there.
    fn moved(&mut self, s: usize) {
        if let Some(moved) = self.fds.get(s) {
            self.slot[moved.fd as usize] = s;
        }
    }
}

impl Default for Poll {
    fn default() -> Poll {
        Poll::new()
    }
}

impl Poll {
    /// An empty poll set. Creating one cannot fail: `poll` needs no kernel
    /// object.
    ///
    /// ```
    /// use evloop::backend::Backend;
    /// use evloop::{backends::poll::Poll, Loop};
    /// let p = Poll::new();
    /// assert!(!p.capabilities().edge);
    /// let lp: Loop = Loop::with_backend(p);
    /// assert_eq!(lp.backend_name(), "poll");
    /// ```
    pub fn new() -> Poll {
        Poll {
            set: Set {
                fds: Vec::new(),
                slot: Vec::new(),
            },
            clock: Clock::new(),
        }
    }

    /// The slot of `fd` in `fds`, if registered.
    fn slot_of(&self, fd: RawFd) -> Option<usize> {
        let i = usize::try_from(fd).ok()?;
        self.set.slot.get(i).copied().filter(|&s| s != NO_SLOT)
    }
}

/// The `pollfd.events` mask for an interest.
fn poll_events(interest: Interest) -> libc::c_short {
    let mut ev = 0;
    if interest.is_readable() {
        ev |= libc::POLLIN;
    }
    if interest.is_writable() {
        ev |= libc::POLLOUT;
    }
    ev
}

/// What a `pollfd.revents` mask reports.
fn ready(revents: libc::c_short) -> Ready {
    if revents & libc::POLLNVAL != 0 {
        return Ready::INVALID;
    }
    let mut r = Ready::EMPTY;
    if revents & libc::POLLIN != 0 {
        r |= Ready::READABLE;
    }
    if revents & libc::POLLOUT != 0 {
        r |= Ready::WRITABLE;
    }
    if revents & libc::POLLHUP != 0 {
        r |= Ready::HUP | Ready::READABLE;
    }
    if revents & libc::POLLERR != 0 {
        r |= Ready::ERROR | Ready::READABLE | Ready::WRITABLE;
    }
    r
}

/// This backend, for the platform's list (backends/mod.rs).
pub(super) const OFFERED: super::Offered = super::Offered {
    name: "poll",
    open: || Ok(Box::new(Poll::new())),
};

impl Backend for Poll {
    fn name(&self) -> &'static str {
        "poll"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            edge: false,
            oneshot: false,
            virtual_fds: false,
            max_fd: None,
            hangup: crate::backend::Hangup::Always,
            closed_fd: crate::backend::ClosedFd::AtNextWait,
            level: crate::backend::Level::Native,
            completion: false,
        }
    }

    fn modify(&mut self, fd: RawFd, _old: Interest, new: Interest) -> io::Result<()> {
        let Ok(i) = usize::try_from(fd) else {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        };
        if new.is_empty() {
            // Forget: swap-remove the slot and fix the index of the fd moved
            // into it. Forgetting an unknown fd succeeds.
            if let Some(s) = self.slot_of(fd) {
                self.set.fds.swap_remove(s);
                self.set.slot[i] = NO_SLOT;
                self.set.moved(s);
            }
            return Ok(());
        }
        if new.trigger() != Trigger::Level {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the poll backend supports only level-triggered registrations",
            ));
        }
        let events = poll_events(new);
        match self.slot_of(fd) {
            Some(s) => self.set.fds[s].events = events,
            None => {
                super::util::refuse_files("poll", fd)?;
                let set = &mut self.set;
                if i >= set.slot.len() {
                    // Doubled, not to `i + 1`: new fds come numbered
                    // upwards, and each would lengthen it again.
                    let len = (i + 1).max(set.slot.len() * 2);
                    set.slot.resize(len, NO_SLOT);
                }
                set.slot[i] = set.fds.len();
                set.fds.push(libc::pollfd {
                    fd,
                    events,
                    revents: 0,
                });
            }
        }
        Ok(())
    }

    fn pollable_fd(&self) -> io::Result<std::os::fd::BorrowedFd<'_>> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "poll(2) is handed the watched fds at each wait, and no kernel object holds them in \
             between (epoll and kqueue have one)",
        ))
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        let deadline = Deadline::new(timeout);
        let n = loop {
            // SAFETY: `fds` is a valid, initialised array of `fds.len()`
            // pollfds, which the kernel reads and whose `revents` it writes.
            let n = unsafe {
                libc::poll(
                    self.set.fds.as_mut_ptr(),
                    self.set.fds.len() as libc::nfds_t,
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
        let mut n = n;
        for pfd in &self.set.fds {
            if n == 0 {
                break;
            }
            if pfd.revents != 0 {
                n -= 1;
                events.push(PollEvent {
                    fd: pfd.fd,
                    ready: ready(pfd.revents),
                });
            }
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
        // never named again (it would stay in the array, closed: POLLNVAL
        // at every wait).
        let set = &mut self.set;
        for p in &set.fds {
            set.slot[p.fd as usize] = NO_SLOT;
        }
        set.fds.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(p: &Poll) -> Vec<(RawFd, libc::c_short)> {
        p.set.fds.iter().map(|f| (f.fd, f.events)).collect()
    }

    #[test]
    fn swap_remove_keeps_index() {
        let mut p = Poll::new();
        let (r, w) = (Interest::READABLE, Interest::WRITABLE);
        for fd in [900, 901, 902] {
            p.modify(fd, Interest::NONE, r).unwrap();
        }
        p.modify(900, r, Interest::NONE).unwrap();
        assert_eq!(table(&p), [(902, libc::POLLIN), (901, libc::POLLIN)]);
        p.modify(902, r, w).unwrap();
        assert_eq!(table(&p), [(902, libc::POLLOUT), (901, libc::POLLIN)]);
        p.modify(900, Interest::NONE, Interest::NONE).unwrap();
        p.modify(901, r, Interest::NONE).unwrap();
        p.modify(902, w, Interest::NONE).unwrap();
        assert!(table(&p).is_empty());
        assert!(p.modify(-1, Interest::NONE, r).is_err());
    }

    /// `reinit` forgets the fds (the loop adds those it still watches
    /// again).
    #[test]
    fn reinit_forgets_the_loops_fds() {
        use std::os::fd::AsRawFd;
        let mut p = Poll::new();
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let fd = a.as_raw_fd();
        p.modify(fd, Interest::NONE, Interest::READABLE).unwrap();
        p.reinit().unwrap();
        assert!(p.set.fds.is_empty());
        assert_eq!(p.slot_of(fd), None);
        p.modify(fd, Interest::NONE, Interest::WRITABLE).unwrap();
        assert_eq!(table(&p), [(fd, libc::POLLOUT)]);
    }

    #[test]
    fn masks() {
        assert_eq!(ready(libc::POLLNVAL | libc::POLLIN), Ready::INVALID);
        assert_eq!(ready(libc::POLLHUP), Ready::HUP | Ready::READABLE);
        assert_eq!(
            ready(libc::POLLERR),
            Ready::ERROR | Ready::READABLE | Ready::WRITABLE
        );
    }
}
