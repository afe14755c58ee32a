//! Broken backends, wrapped around the poll backend, that the kit must
//! catch.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use evloop::backend::{Backend, Capabilities, PollEvent, PollStatus};
use evloop::backends::poll::Poll;
use evloop::Interest;

/// A backend that breaks the removal rule the way an io_uring backend
/// could: its registration holds a reference to the file (a pending poll
/// request does), and it puts a forget off until its next wait (where it
/// would submit the cancellation with the wait). A forget is held as a
/// duplicate of the fd until the next `poll`, or until the number is
/// registered again (so that a reused number starts clean, and `fd_reuse`
/// passes).
pub struct DelayedForget {
    inner: Poll,
    /// Forgets put off: the fd, what it was registered for, and the
    /// reference to its file the "registration" still holds.
    later: Vec<(RawFd, Interest, OwnedFd)>,
}

impl DelayedForget {
    pub fn open() -> io::Result<Box<dyn Backend>> {
        Ok(Box::new(DelayedForget {
            inner: Poll::new(),
            later: Vec::new(),
        }))
    }

    /// Carries out the forgets put off (of `fd` only, or all).
    fn forget_now(&mut self, fd: Option<RawFd>) {
        let mut i = 0;
        while i < self.later.len() {
            if fd.is_none_or(|fd| self.later[i].0 == fd) {
                let (fd, old, held) = self.later.swap_remove(i);
                let _ = self.inner.modify(fd, old, Interest::NONE);
                drop(held);
            } else {
                i += 1;
            }
        }
    }
}

impl Backend for DelayedForget {
    fn name(&self) -> &'static str {
        "delayed-forget"
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn modify(&mut self, fd: RawFd, old: Interest, new: Interest) -> io::Result<()> {
        if new.is_empty() {
            // SAFETY: dup of an fd the loop still has open (it forgets
            // before it closes); the duplicate is owned here.
            let held = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
            if held >= 0 {
                // SAFETY: `held` was just created and is owned by nobody.
                let held = unsafe { OwnedFd::from_raw_fd(held) };
                self.later.push((fd, old, held));
                return Ok(());
            }
            return self.inner.modify(fd, old, new);
        }
        self.forget_now(Some(fd));
        self.inner.modify(fd, old, new)
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        self.forget_now(None);
        self.inner.poll(timeout, events)
    }

    fn now(&mut self) -> Duration {
        self.inner.now()
    }
}

/// A backend that loses the first report of every fd it is told of: the
/// differential check must show every scenario that differs, not only the
/// first.
pub struct LosesFirstReports {
    inner: Poll,
    reported: Vec<RawFd>,
}

impl LosesFirstReports {
    pub fn open() -> io::Result<Box<dyn Backend>> {
        Ok(Box::new(LosesFirstReports {
            inner: Poll::new(),
            reported: Vec::new(),
        }))
    }
}

impl Backend for LosesFirstReports {
    fn name(&self) -> &'static str {
        "loses-first-reports"
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn modify(&mut self, fd: RawFd, old: Interest, new: Interest) -> io::Result<()> {
        self.inner.modify(fd, old, new)
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        let from = events.len();
        let status = self.inner.poll(timeout, events)?;
        let mut i = from;
        while i < events.len() {
            if self.reported.contains(&events[i].fd) {
                i += 1;
            } else {
                self.reported.push(events[i].fd);
                events.remove(i);
            }
        }
        Ok(status)
    }

    fn now(&mut self) -> Duration {
        self.inner.now()
    }
}
