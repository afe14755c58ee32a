//! The pollable-fd checks: a backend that gives a pollable fd
//! ([`Backend::pollable_fd`](crate::backend::Backend::pollable_fd)) held
//! to its contract (`docs/porting.md`, "A pollable fd"), through a
//! [`PollableLoop`](crate::PollableLoop) on a loop made with the backend,
//! as another loop holding the fd sees it; each reported by name
//! (`pollable/<check>`):
//!
//! - `pollable/readable_when_ready`: a watcher started on a socket with
//!   two bytes already waiting, its changes flushed, makes the fd readable
//!   without a run (a backend that queues its changes for its wait must
//!   submit them in `expose_changes`); the watcher reads one byte a call,
//!   so after the first run the fd is readable again for the byte left (a
//!   backend that re-arms level fds lazily re-arms them in
//!   `expose_changes`); with nothing left the fd settles (not readable
//!   within three runs: a fd that stays readable would spin its holder);
//!   data that comes later makes it readable again;
//! - `pollable/woken_by_send`: once `next_timeout` has been asked, an
//!   async send from another thread makes the fd readable, and the run
//!   calls the watcher;
//! - `pollable/kept_after_reinit`: after `reinit_after_fork` (no fork
//!   needed: the backend makes new kernel objects all the same) the loop
//!   still has an fd, and it is readable for a ready watched socket.
//!
//! A backend that has no pollable fd (it refuses, as poll and select do)
//! gets `Skipped` for each, and so does every backend on Windows. Nothing
//! here blocks but a `poll(2)` of the fd, bounded by [`WATCHDOG`](super::WATCHDOG).

use super::{CheckResult, Factory, Outcome};

/// The checks, in the order [`check_all_pollable_loop`] runs them.
pub const POLLABLE_CHECKS: &[&str] = &[
    "pollable/readable_when_ready",
    "pollable/woken_by_send",
    "pollable/kept_after_reinit",
];

/// A check that did not run, with its reason.
type Skip = &'static str;

/// Runs the check called `name` (one of [`POLLABLE_CHECKS`]) on the backend `open`
/// creates, caught.
///
/// ```
/// use evloop::conformance::{pollable, Outcome};
/// # #[cfg(target_os = "linux")]
/// # {
/// let epoll = evloop::backends::factory("epoll").unwrap();
/// let outcome = pollable::check_pollable_loop("pollable/readable_when_ready", "epoll", epoll);
/// assert_eq!(outcome, Outcome::Passed);
/// # }
/// let select = evloop::backends::factory("select").unwrap();
/// let outcome = pollable::check_pollable_loop("pollable/readable_when_ready", "select", select);
/// assert!(matches!(outcome, Outcome::Skipped(_)));
/// ```
///
/// Panics if `name` is not one of [`POLLABLE_CHECKS`].
pub fn check_pollable_loop(name: &str, backend: &'static str, open: Factory) -> Outcome {
    let f: fn(&'static str, Factory) -> Result<(), Skip> = match name {
        "pollable/readable_when_ready" => imp::readable_when_ready,
        "pollable/woken_by_send" => imp::woken_by_send,
        "pollable/kept_after_reinit" => imp::kept_after_reinit,
        _ => panic!(
            "the kit has no pollable-fd check {name:?}; it has {}",
            POLLABLE_CHECKS.join(", ")
        ),
    };
    super::outcome_of(|| f(backend, open))
}

/// Every check of [`POLLABLE_CHECKS`] in turn (what the kit's [`run`](super::run)
/// does, among its other checks).
///
/// ```
/// use evloop::conformance::pollable;
/// let poll = evloop::backends::factory("poll").unwrap();
/// let results = pollable::check_all_pollable_loop("poll", poll);
/// assert_eq!(results.len(), pollable::POLLABLE_CHECKS.len());
/// assert!(results.iter().all(|r| !r.outcome.failed()), "{results:?}");
/// ```
pub fn check_all_pollable_loop(backend: &'static str, open: Factory) -> Vec<CheckResult> {
    super::all_named(POLLABLE_CHECKS, check_pollable_loop, backend, open)
}

/// Every check of [`POLLABLE_CHECKS`], each result handed to `push` as it ends.
pub(super) fn each(backend: &'static str, open: Factory, push: &mut dyn FnMut(String, Outcome)) {
    super::each_named(POLLABLE_CHECKS, check_pollable_loop, backend, open, push);
}

#[cfg(unix)]
mod imp {
    use std::io::{ErrorKind, Read, Write};
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    use super::Skip;
    use crate::backends::util::readable_within;
    use crate::conformance::Factory;
    use crate::conformance::WATCHDOG;
    use crate::{Async, Error, Interest, Loop, PollableLoop, RunMode};

    const NO_FD: Skip =
        "the backend has no pollable fd (its pollable_fd refuses): nothing to check";
    const NO_WAKER: Skip =
        "the backend has no waker (its waker returns backend::unsupported): async watchers are refused";

    /// A pollable loop on the backend under test, or the skip.
    fn pollable_loop(backend: &str, open: Factory) -> Result<PollableLoop<'static, u32>, Skip> {
        let b = open().unwrap_or_else(|e| panic!("cannot create the {backend} backend: {e}"));
        let lp: Loop<'static, u32> = Loop::from(b);
        PollableLoop::new(lp).map_err(|_| NO_FD)
    }

    /// A socket pair: the end the loop watches (non-blocking), and its
    /// peer.
    fn pair() -> (UnixStream, UnixStream) {
        let (a, b) = UnixStream::pair().expect("socketpair");
        a.set_nonblocking(true).expect("non-blocking");
        (a, b)
    }

    /// A level io watcher on `a` that reads one byte a call (so that
    /// readiness is left after a run) and counts its calls.
    fn count_reads(lp: &mut Loop<'static, u32>, a: UnixStream) {
        lp.io(a, Interest::READABLE, |_, calls, ev| {
            *calls += 1;
            let mut one = [0; 1];
            match ev.source.read(&mut one) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("read: {e}"),
            }
        })
        .unwrap_or_else(|e| panic!("Loop::io on a socket: {e}"));
    }

    /// Whether the loop's fd becomes readable within `timeout`.
    fn readable(lp: &PollableLoop<'static, u32>, timeout: Duration) -> bool {
        use std::os::fd::AsFd;
        readable_within(lp.as_fd(), timeout).expect("poll(2) of the pollable fd")
    }

    /// Flushes the loop's changes, then requires its fd to become
    /// readable within the watchdog; `what` says what should have made it.
    fn require_readable(lp: &mut PollableLoop<'static, u32>, backend: &str, what: &str) {
        lp.flush_changes()
            .unwrap_or_else(|e| panic!("{backend}: flush_changes: {e}"));
        assert!(
            readable(lp, WATCHDOG),
            "{backend}: the pollable fd was not readable within {WATCHDOG:?} after {what}: its \
             holder would sleep through it (docs/porting.md, \"A pollable fd\")"
        );
    }

    /// Runs the loop once without blocking, and requires `calls` more
    /// calls of its watchers than before.
    fn run_once(lp: &mut PollableLoop<'static, u32>, calls: &mut u32, more: u32, backend: &str) {
        let before = *calls;
        lp.run(RunMode::NoWait, calls)
            .unwrap_or_else(|e| panic!("{backend}: run: {e}"));
        assert_eq!(
            *calls - before,
            more,
            "{backend}: the run after the pollable fd was readable called the watchers {} \
             times, not {more}",
            *calls - before
        );
    }

    /// With nothing to report, the fd is not readable within three runs
    /// (a stale report may make it readable once: the run clears it).
    fn require_settled(lp: &mut PollableLoop<'static, u32>, calls: &mut u32, backend: &str) {
        for _ in 0..3 {
            lp.flush_changes()
                .unwrap_or_else(|e| panic!("{backend}: flush_changes: {e}"));
            if !readable(lp, Duration::ZERO) {
                return;
            }
            lp.run(RunMode::NoWait, calls)
                .unwrap_or_else(|e| panic!("{backend}: run: {e}"));
        }
        panic!(
            "{backend}: the pollable fd stayed readable through three runs with nothing to \
             report: its holder would run the loop in a spin"
        );
    }

    pub(super) fn readable_when_ready(backend: &'static str, open: Factory) -> Result<(), Skip> {
        let mut lp = pollable_loop(backend, open)?;
        let mut calls = 0;
        let (a, mut peer) = pair();
        peer.write_all(b"ab").unwrap();
        count_reads(&mut lp, a);
        require_readable(
            &mut lp,
            backend,
            "a watcher was started on a socket with data waiting and the changes flushed \
             (a backend that queues changes for its wait submits them in expose_changes)",
        );
        run_once(&mut lp, &mut calls, 1, backend);
        require_readable(
            &mut lp,
            backend,
            "a run that left a level watcher's data unread (one byte of two) (a backend \
             that re-arms level fds before its wait re-arms them in expose_changes too)",
        );
        run_once(&mut lp, &mut calls, 1, backend);
        require_settled(&mut lp, &mut calls, backend);
        let writer = std::thread::spawn(move || {
            peer.write_all(b"c").unwrap();
            peer
        });
        require_readable(&mut lp, backend, "data came to a watched socket");
        let _peer = writer.join().unwrap();
        run_once(&mut lp, &mut calls, 1, backend);
        require_settled(&mut lp, &mut calls, backend);
        Ok(())
    }

    pub(super) fn woken_by_send(backend: &'static str, open: Factory) -> Result<(), Skip> {
        let mut lp = pollable_loop(backend, open)?;
        let mut calls = 0;
        let sender = match Async::new(&mut lp, |_, calls, _| *calls += 1) {
            Ok((_, sender)) => sender,
            Err(Error::Backend { source, .. }) if source.kind() == ErrorKind::Unsupported => {
                return Err(NO_WAKER)
            }
            Err(e) => panic!("{backend}: creating an async watcher failed: {e}"),
        };
        require_settled(&mut lp, &mut calls, backend);
        // The holder's last call before it waits: from here a send wakes
        // the fd.
        assert_eq!(lp.next_timeout(), None, "{backend}: nothing is due");
        let remote = std::thread::spawn(move || sender.send().expect("send"));
        assert!(
            readable(&lp, WATCHDOG),
            "{backend}: an async send from another thread, after next_timeout, did not make the \
             pollable fd readable within {WATCHDOG:?}: the backend's wake-up must be among what \
             its fd watches"
        );
        remote.join().unwrap();
        run_once(&mut lp, &mut calls, 1, backend);
        Ok(())
    }

    pub(super) fn kept_after_reinit(backend: &'static str, open: Factory) -> Result<(), Skip> {
        let mut lp = pollable_loop(backend, open)?;
        lp.reinit_after_fork()
            .unwrap_or_else(|e| panic!("{backend}: reinit_after_fork: {e}"));
        if let Err(e) = lp.pollable_fd() {
            panic!(
                "{backend}: after reinit the backend refuses the pollable fd it gave before \
                 ({e}): a PollableLoop's AsFd cannot fail, so a backend keeps one for its life"
            );
        }
        let mut calls = 0;
        let (a, mut peer) = pair();
        count_reads(&mut lp, a);
        peer.write_all(b"x").unwrap();
        require_readable(&mut lp, backend, "reinit, and data on a watched socket");
        run_once(&mut lp, &mut calls, 1, backend);
        Ok(())
    }
}

#[cfg(not(unix))]
mod imp {
    use super::Skip;
    use crate::conformance::Factory;

    const NOT_HERE: Skip = if cfg!(target_os = "wasi") {
        "not applicable on WASI: no pollable fd (poll_oneoff is handed its subscriptions at \
         each call; no descriptor holds them)"
    } else {
        "no pollable fds on this platform (Backend::pollable_fd is Unix only)"
    };

    pub(super) fn readable_when_ready(_: &'static str, _: Factory) -> Result<(), Skip> {
        Err(NOT_HERE)
    }

    pub(super) fn woken_by_send(_: &'static str, _: Factory) -> Result<(), Skip> {
        Err(NOT_HERE)
    }

    pub(super) fn kept_after_reinit(_: &'static str, _: Factory) -> Result<(), Skip> {
        Err(NOT_HERE)
    }
}
