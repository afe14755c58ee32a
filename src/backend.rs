//! The [`Backend`] trait: what the loop needs from an I/O multiplexer.
//!
//! A backend knows nothing of watchers, callbacks or timers. The loop tells
//! it, per fd, the old and new union of interests ([`Backend::modify`]) at
//! most once per fd per iteration, asks it to wait ([`Backend::poll`]) and
//! reads the clock through it ([`Backend::now`]), so that a simulated backend
//! can run the loop on virtual time. `docs/porting.md` walks through writing
//! one.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use crate::{Interest, Ready};

/// One readiness report from [`Backend::poll`].
///
/// ```
/// use evloop::{PollEvent, Ready};
/// let ev = PollEvent { fd: 7, ready: Ready::READABLE | Ready::HUP };
/// assert!(ev.ready.is_hup());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollEvent {
    /// The descriptor number (virtual for simulated backends).
    pub fd: RawFd,
    /// What is ready. [`Ready::INVALID`] tells the loop the fd is gone.
    pub ready: Ready,
}

/// What a backend can do; the loop checks it before registering.
///
/// ```
/// use evloop::Capabilities;
/// let caps = Capabilities::default();
/// assert!(!caps.edge && !caps.oneshot && caps.max_fd.is_none());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Edge-triggered registrations are supported.
    pub edge: bool,
    /// One-shot registrations are native (the kernel disarms the fd after one
    /// report). When false the loop emulates one-shot itself.
    pub oneshot: bool,
    /// The backend watches virtual fds ([`SourceFd::Virtual`](crate::SourceFd))
    /// instead of OS descriptors.
    pub virtual_fds: bool,
    /// The largest fd the backend can watch, if bounded (select's
    /// `FD_SETSIZE - 1`).
    pub max_fd: Option<RawFd>,
}

/// How a call to [`Backend::poll`] ended.
///
/// ```
/// use evloop::{Backend, PollStatus, Sim};
/// // A simulator with nothing scheduled and no timeout can never wake up.
/// let mut b = Sim::new().backend();
/// assert_eq!(b.poll(None, &mut Vec::new()).unwrap(), PollStatus::Stalled);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollStatus {
    /// Events (possibly none) were collected, or the timeout elapsed.
    Done,
    /// Nothing can ever become ready and no timeout was given: waiting would
    /// block forever. Only a simulated backend can know this; the loop stops
    /// and returns [`RunOutcome::Stalled`](crate::RunOutcome::Stalled).
    Stalled,
}

/// An I/O readiness multiplexer the loop runs on.
///
/// Implementations live in `backends/` (epoll, poll, select, kqueue, and the
/// simulator), and a crate may define its own and hand it to
/// [`Loop::with_backend`](crate::Loop::with_backend).
///
/// Contract:
/// - `modify(fd, old, new)` is called only when `old != new`. `old` is what
///   the backend was last told for that fd ([`Interest::NONE`] for a new fd),
///   `new` is the union of the interests of the fd's active watchers
///   ([`Interest::NONE`] to forget the fd). An `Err` means the fd cannot be
///   watched; the loop stops its watchers and reports [`Ready::ERROR`] to
///   them, and considers the fd unregistered.
/// - `poll` appends to `events` (the loop clears it first) and waits at most
///   `timeout` (`None`: until something happens). Timeouts are rounded up,
///   never down. An interrupted wait (`EINTR`) is retried with the remaining
///   time or returns with no events; it is never an error. Each fd appears
///   at most once per call, with everything that is ready on it (the loop
///   may invoke a watcher once per report).
/// - One-shot: when [`Capabilities::oneshot`] is false the loop emulates it
///   and the backend only ever sees level registrations. When it is true,
///   the backend receives interests whose [`Interest::trigger`] is
///   `Oneshot`; after an event on such an fd the loop records the fd as
///   `Interest::NONE.with_trigger(Trigger::Oneshot)` (still known to the
///   kernel, but disarmed), and that is the `old` of the next `modify`: the
///   backend must then re-arm (`EPOLL_CTL_MOD`) or forget (`DEL`), not add.
/// - Edge registrations arrive only if [`Capabilities::edge`] is true.
/// - `now` is monotonic.
///
/// [`Interest::trigger`]: crate::Interest::trigger
///
/// ```
/// use evloop::{Backend, Capabilities, Interest, PollEvent, PollStatus};
/// use std::{io, os::fd::RawFd, time::Duration};
///
/// /// A backend with no fds: it only lets time pass (virtually).
/// struct Clockwork { now: Duration }
///
/// impl Backend for Clockwork {
///     fn name(&self) -> &'static str { "clockwork" }
///     fn capabilities(&self) -> Capabilities { Capabilities::default() }
///     fn modify(&mut self, _fd: RawFd, _old: Interest, _new: Interest) -> io::Result<()> {
///         Err(io::Error::new(io::ErrorKind::Unsupported, "clockwork watches no fds"))
///     }
///     fn poll(&mut self, timeout: Option<Duration>, _events: &mut Vec<PollEvent>)
///         -> io::Result<PollStatus> {
///         match timeout {
///             Some(t) => { self.now += t; Ok(PollStatus::Done) }
///             None => Ok(PollStatus::Stalled),
///         }
///     }
///     fn now(&mut self) -> Duration { self.now }
/// }
///
/// let mut lp = evloop::Loop::with_backend(Clockwork { now: Duration::ZERO });
/// lp.timer(Duration::from_secs(3), Duration::ZERO, |lp, _, _| {
///     assert_eq!(lp.now(), Duration::from_secs(3));
/// }).unwrap();
/// lp.run(evloop::RunMode::Default, &mut ()).unwrap();
/// assert_eq!(lp.now(), Duration::from_secs(3));
/// ```
pub trait Backend {
    /// A short lowercase name ("epoll", "poll", "sim", ...).
    fn name(&self) -> &'static str;

    /// What this backend supports.
    fn capabilities(&self) -> Capabilities;

    /// Changes the registration of `fd` from `old` to `new` (see the trait
    /// documentation for the contract).
    fn modify(&mut self, fd: RawFd, old: Interest, new: Interest) -> io::Result<()>;

    /// Waits for readiness for at most `timeout` and appends what is ready.
    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus>;

    /// The current monotonic time, measured from an arbitrary fixed origin.
    fn now(&mut self) -> Duration;

    /// Whether `fd` can ever be watched, asked once when an io watcher is
    /// created, so that [`Loop::io`](crate::Loop::io) can fail at once
    /// with the reason ([`Error::InvalidFd`](crate::Error::InvalidFd))
    /// instead of succeeding and reporting [`Ready::ERROR`] later. The
    /// OS backends refuse fds that are not open, regular files and
    /// directories. The default accepts every fd (a refusal then comes
    /// from [`Backend::modify`]).
    fn check_fd(&self, fd: RawFd) -> io::Result<()> {
        let _ = fd;
        Ok(())
    }

    /// Called by the loop for every io callback it invokes, just before the
    /// call, if [`Backend::wants_dispatch`] said so; a simulated backend
    /// records it in its trace. The default does nothing.
    fn dispatched(&mut self, fd: RawFd, ready: Ready) {
        let _ = (fd, ready);
    }

    /// Whether the loop should call [`Backend::dispatched`]. Asked once,
    /// when the loop is created; the default (`false`) keeps the call off
    /// the hot path.
    fn wants_dispatch(&self) -> bool {
        false
    }

    /// Re-creates the kernel object after `fork()` (epoll and kqueue handles
    /// are shared with the parent). The loop then re-registers every fd with
    /// `old == Interest::NONE`. The default does nothing.
    fn reinit(&mut self) -> io::Result<()> {
        Ok(())
    }
}
