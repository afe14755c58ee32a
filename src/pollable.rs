//! A loop as a pollable fd: [`PollableLoop`], a [`Loop`] whose backend has
//! one, as `AsFd` (mio's `Poll`, polling's `Poller` and calloop's
//! `EventLoop` are fds the same way).
//!
//! `Loop` itself is not `AsFd`: one `Loop` type runs on every backend, and
//! poll, select and the simulator have no fd to give, while `AsFd` cannot
//! fail. [`PollableLoop::new`] checks once and gives a type that always
//! has one; [`Loop::pollable_fd`] is the fallible call on any loop.

use std::ops::{Deref, DerefMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use crate::{Error, Loop, Result};

/// A [`Loop`] whose backend has a pollable fd (epoll, kqueue, io_uring
/// without deferred task work), which it is: readable when the loop has
/// io, a signal, a child's exit or a wake-up to take, once its changes are
/// out ([`Loop::flush_changes`]); [`Loop::next_timeout`] says how long a
/// holder may wait on it before running the loop for timers and pending
/// callbacks. `docs/recipes.md` ("Nesting loops") has the protocol.
///
/// It derefs to the loop: every `Loop` method works on it. Made by
/// [`PollableLoop::new`]; [`PollableLoop::into_inner`] gives the loop
/// back.
///
/// ```
/// use evloop::{Loop, PollableLoop, RunMode};
/// use std::os::fd::AsFd;
/// # #[cfg(target_os = "linux")]
/// # {
/// let lp: Loop<u32> = Loop::builder().backend("epoll").build()?;
/// let mut lp = PollableLoop::new(lp)?;
/// lp.timer(std::time::Duration::ZERO, std::time::Duration::ZERO, |_, n, _| *n += 1)?;
/// let _fd = lp.as_fd(); // for the outer loop
/// let mut n = 0;
/// lp.run(RunMode::Default, &mut n)?; // a `Loop` method, through deref
/// assert_eq!(n, 1);
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct PollableLoop<'s, S = ()> {
    lp: Loop<'s, S>,
}

impl<'s, S> PollableLoop<'s, S> {
    /// `lp` as an fd, if its backend has one ([`Loop::pollable_fd`]'s
    /// conditions); else the loop back, untouched, with the reason
    /// ([`NotPollable`]).
    ///
    /// ```
    /// use evloop::{Error, Loop, PollableLoop, Sim};
    /// let lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let refused = PollableLoop::new(lp).unwrap_err();
    /// assert!(matches!(refused.error(), Error::NoPollableFd { backend: "sim", .. }));
    /// let _lp: Loop = refused.into_loop(); // nothing lost
    /// ```
    pub fn new(lp: Loop<'s, S>) -> std::result::Result<PollableLoop<'s, S>, NotPollable<'s, S>> {
        match lp.pollable_fd().map(drop) {
            Ok(()) => Ok(PollableLoop { lp }),
            Err(error) => Err(NotPollable {
                error,
                lp: Box::new(lp),
            }),
        }
    }

    /// The loop.
    ///
    /// ```
    /// # #[cfg(target_os = "linux")]
    /// # {
    /// use evloop::{Loop, PollableLoop};
    /// let lp = PollableLoop::new(Loop::<()>::builder().backend("epoll").build()?)?;
    /// let lp: Loop = lp.into_inner();
    /// assert_eq!(lp.backend_name(), "epoll");
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn into_inner(self) -> Loop<'s, S> {
        self.lp
    }

    /// Whether the loop's fd is readable now (a zero-timeout `poll(2)`):
    /// after a `run(RunMode::NoWait, ..)`, whether readiness is left that
    /// an edge-triggered holder (tokio's `AsyncFd`, mio) would not be told
    /// of again, so must run the loop again rather than clear its
    /// readiness and wait. Errors: [`Error::Backend`] if `poll(2)` fails.
    ///
    /// ```
    /// # #[cfg(target_os = "linux")]
    /// # {
    /// use evloop::{Interest, Loop, PollableLoop, RunMode};
    /// use std::io::Write;
    ///
    /// let mut lp = PollableLoop::new(Loop::<()>::builder().backend("epoll").build()?)?;
    /// let (a, mut peer) = std::os::unix::net::UnixStream::pair()?;
    /// lp.io(a, Interest::READABLE, |_, _, _| {})?; // reads nothing
    /// lp.flush_changes()?;
    /// assert!(!lp.readable_now()?);
    /// peer.write_all(b"x")?;
    /// assert!(lp.readable_now()?);
    /// lp.run(RunMode::NoWait, &mut ())?;
    /// assert!(lp.readable_now()?); // level-triggered, still unread
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn readable_now(&self) -> Result<bool> {
        crate::backends::util::readable_now(self.as_fd()).map_err(|source| Error::Backend {
            backend: self.lp.backend_name(),
            op: "poll its pollable fd",
            source,
        })
    }
}

impl<S> AsFd for PollableLoop<'_, S> {
    /// The backend's pollable fd ([`Loop::pollable_fd`]).
    ///
    /// # Panics
    ///
    /// Only if the backend breaks its contract: it gave a pollable fd
    /// when the loop was made pollable and refuses one now (the crate's
    /// backends keep theirs for their life, `reinit_after_fork` included).
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self.lp.pollable_fd() {
            Ok(fd) => fd,
            Err(e) => panic!("a pollable loop's backend no longer has its fd: {e}"),
        }
    }
}

impl<S> AsRawFd for PollableLoop<'_, S> {
    /// The backend's pollable fd, as a number (for mio's `SourceFd`).
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

impl<'s, S> Deref for PollableLoop<'s, S> {
    type Target = Loop<'s, S>;
    fn deref(&self) -> &Loop<'s, S> {
        &self.lp
    }
}

impl<S> DerefMut for PollableLoop<'_, S> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.lp
    }
}

impl<S> std::fmt::Debug for PollableLoop<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PollableLoop").field(&self.lp).finish()
    }
}

/// [`PollableLoop::new`]'s refusal: why ([`Error::NoPollableFd`]), and
/// the loop, untouched.
///
/// ```
/// use evloop::{Loop, PollableLoop, Sim};
/// let lp: Loop = Loop::with_backend(Sim::new().backend());
/// let refused = PollableLoop::new(lp).unwrap_err();
/// assert!(refused.to_string().contains("no pollable fd"), "{refused}");
/// let (_error, _lp) = refused.into_parts();
/// ```
pub struct NotPollable<'s, S = ()> {
    error: Error,
    // Boxed: the refusal is rare, and a `Result` with a whole loop on
    // its error side would be as large as the loop.
    lp: Box<Loop<'s, S>>,
}

impl<'s, S> NotPollable<'s, S> {
    /// Why the loop has no fd.
    ///
    /// ```
    /// use evloop::{Error, Loop, PollableLoop, Sim};
    /// let lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let refused = PollableLoop::new(lp).unwrap_err();
    /// assert!(matches!(refused.error(), Error::NoPollableFd { .. }));
    /// ```
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// The loop, as it was.
    ///
    /// ```
    /// use evloop::{Loop, PollableLoop, Sim};
    /// let lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let lp = PollableLoop::new(lp).unwrap_err().into_loop();
    /// assert_eq!(lp.backend_name(), "sim");
    /// ```
    pub fn into_loop(self) -> Loop<'s, S> {
        *self.lp
    }

    /// The reason and the loop.
    ///
    /// ```
    /// use evloop::{Loop, PollableLoop, Sim};
    /// let lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let (error, lp) = PollableLoop::new(lp).unwrap_err().into_parts();
    /// assert!(error.to_string().contains("sim"));
    /// # drop(lp);
    /// ```
    pub fn into_parts(self) -> (Error, Loop<'s, S>) {
        (self.error, *self.lp)
    }
}

impl<S> std::fmt::Debug for NotPollable<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotPollable")
            .field("error", &self.error)
            .field("lp", &self.lp)
            .finish()
    }
}

impl<S> std::fmt::Display for NotPollable<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl<S> std::error::Error for NotPollable<'_, S> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}
