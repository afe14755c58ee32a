//! An evloop backend over [mio]: `Poll`, `Registry` and `unix::SourceFd`,
//! written from `docs/porting.md` alone, in a crate of its own. It is that
//! guide's worked example of an *edge-only* mechanism (section "Edge-only
//! mechanisms"); `cargo test` here runs the conformance kit on it, and the
//! binary (`src/main.rs`) serves evloop's HTTP example on it.
//!
//! mio registers every fd edge-triggered (`EPOLLET` on Linux, `EV_CLEAR`
//! on kqueue) and offers nothing else, so the backend declares:
//!
//! - `edge: true`: native;
//! - `oneshot: false`: the loop emulates one-shot (mio has no
//!   `EPOLLONESHOT`), and hands this backend level registrations only;
//! - `level: Level::Rearmed`: level-triggered interest, every watcher's
//!   default, is emulated. Each fd that a wait reported with level interest
//!   is *re-armed* (`Registry::reregister`, an `EPOLL_CTL_MOD`) before the
//!   next wait; the kernel then checks its readiness again and queues a
//!   report if the condition still holds, exactly what a level-triggered
//!   registration would have reported. Cost: one syscall per reported level
//!   fd per wait; fds that were not reported cost nothing;
//! - `hangup: Always`, `closed_fd: ModifyFails`: what epoll does, since on
//!   Linux mio *is* epoll (`EPOLLRDHUP` comes with readable interest).
//!
//! Signals, child exits, the loop's wake-up, wall-clock steps and path
//! hints are not the backend's: the loop provides them (evloop's Unix
//! notifier), its fds (the wake fd, pidfds, a timerfd, an inotify
//! instance) registered through `modify` like any other.
//!
//! mio's `Poll` is itself an fd that holds all of that, so the backend
//! gives it as its pollable fd: another loop can run this one (the embed
//! watcher, `PollableLoop::new`). `expose_changes` re-arms the level fds
//! the last wait reported, so that readiness a run left shows on the fd.
//!
//! The rest follows the contract of `docs/porting.md`, section 2, point by
//! point: a table by fd number of what mio holds (so that reports can be
//! checked, and the `Poll` rebuilt when a `DEL` missed a registration that a
//! dup of the file keeps alive), `EINTR` retried for the time left, timeouts
//! rounded up (mio rounds to whole milliseconds upward itself), at most one
//! report per fd per wait (kqueue reports the read and the write filter
//! apart: merged), `reinit` after `fork` with a `Poll` of the child's own.
//! Steady state allocates nothing: every buffer keeps its capacity.
//!
//! ```
//! use evloop::{Interest, Loop, RunMode};
//! use std::io::Write;
//! use std::os::unix::net::UnixStream;
//!
//! let mut lp: Loop<u32> = Loop::with_backend(mio_backend::MioBackend::new()?);
//! assert_eq!(lp.backend_name(), "mio");
//! let (a, mut b) = UnixStream::pair()?;
//! b.write_all(b"x")?; // never read: level-triggered, so reported each time
//! lp.io(a, Interest::READABLE, |_, seen, _| *seen += 1)?;
//! let mut seen = 0;
//! for _ in 0..3 {
//!     lp.run(RunMode::NoWait, &mut seen)?;
//! }
//! assert_eq!(seen, 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [mio]: https://docs.rs/mio

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use evloop::backend::{Backend, Capabilities, ClosedFd, Hangup, Level, PollEvent, PollStatus};
use evloop::backends::util::{refuse_files, Clock, Deadline};
use evloop::{Interest, Ready, Trigger};
use mio::event::Event;
use mio::unix::SourceFd;
use mio::{Events, Poll, Token};

/// The name the backend is registered under (`EVLOOP_BACKEND=mio`).
pub const NAME: &str = "mio";

/// Creates the backend: the [`Factory`](evloop::backends::Factory) that
/// [`register`] registers, and that the conformance kit is given.
///
/// ```
/// let b = mio_backend::open()?;
/// assert_eq!(b.name(), mio_backend::NAME);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn open() -> io::Result<Box<dyn Backend>> {
    Ok(Box::new(MioBackend::new()?))
}

/// Registers the backend for the process under [`NAME`], so that
/// `Loop::new()` (with `EVLOOP_BACKEND=mio`), every `Builder` and the
/// conformance kit's `run_named` find it. Once per process: a second call
/// is refused (`Error::BackendNameTaken`).
///
/// ```
/// use evloop::{Error, Loop};
/// mio_backend::register()?;
/// assert!(evloop::backends::names().contains(&"mio"));
/// assert!(matches!(mio_backend::register(), Err(Error::BackendNameTaken { .. })));
/// let lp: Loop = Loop::builder().backend("mio").build()?;
/// assert_eq!(lp.backend_name(), "mio");
/// # Ok::<(), evloop::Error>(())
/// ```
pub fn register() -> evloop::Result<()> {
    evloop::backends::register(NAME, open)
}

/// The number of reports one wait can return at first; doubled whenever a
/// wait fills the buffer, up to [`MAX_EVENTS`] (what does not fit stays
/// queued in the kernel for the next wait).
const INITIAL_EVENTS: usize = 64;
const MAX_EVENTS: usize = 4096;

/// What the backend knows of one fd number.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    /// What mio holds for it (`None`: not registered).
    held: Option<mio::Interest>,
    /// The loop's registration is level-triggered: re-arm after a report.
    level: bool,
    /// Reported by the last wait, and not changed by the loop since: to be
    /// re-armed before the next one (a `modify` re-arms it by itself).
    rearm: bool,
    /// The wait that last reported it (see `MioBackend::wait_no`), and its
    /// index among that wait's reports: a second report of the fd in that
    /// wait is merged into the first.
    seen: u32,
    at: u32,
}

/// The mio backend.
///
/// ```
/// use evloop::backend::{Backend, Level, PollEvent};
/// use evloop::{Interest, Ready};
/// use std::io::Write;
/// use std::os::fd::AsRawFd;
/// use std::os::unix::net::UnixStream;
/// use std::time::Duration;
///
/// let mut b = mio_backend::MioBackend::new()?;
/// assert_eq!(b.capabilities().level, Level::Rearmed);
/// let (a, mut peer) = UnixStream::pair()?;
/// let fd = a.as_raw_fd();
/// b.modify(fd, Interest::NONE, Interest::READABLE)?;
/// peer.write_all(b"ping")?;
/// let mut events = Vec::new();
/// for _ in 0..2 {
///     // Level: reported again while unread (re-armed between the waits).
///     events.clear();
///     b.poll(Some(Duration::from_secs(5)), &mut events)?;
///     assert_eq!(events, [PollEvent { fd, ready: Ready::READABLE }]);
/// }
/// b.modify(fd, Interest::READABLE, Interest::NONE)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct MioBackend {
    poll: Poll,
    /// mio's output buffer.
    events: Events,
    /// By fd number: what mio holds (never shrunk but by `reinit`).
    table: Vec<Entry>,
    /// The level fds the last wait reported, to re-arm before the next.
    rearm: Vec<RawFd>,
    /// Reports of the last wait that the table does not explain (a
    /// registration that outlived its fd number), answered after it.
    strays: Vec<RawFd>,
    /// fds whose stray report a `reregister` answered since the loop last
    /// changed them (almost always empty): a second one means the
    /// registration reporting is not the one the number names now.
    fixed: Vec<RawFd>,
    /// mio may hold a registration the table does not (a `deregister` or a
    /// `reregister` missed it): replace the `Poll` before the next wait.
    rebuild: bool,
    /// The number of the current wait, for merging reports (never 0, the
    /// number of "never reported").
    wait_no: u32,
    clock: Clock,
}

impl std::fmt::Debug for MioBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MioBackend")
            .field("max_events", &self.events.capacity())
            .field("rebuild", &self.rebuild)
            .finish_non_exhaustive()
    }
}

/// mio's interest for a non-empty evloop interest (the trigger is the
/// backend's business: mio has only edge).
fn mio_interest(interest: Interest) -> mio::Interest {
    match (interest.is_readable(), interest.is_writable()) {
        (true, true) => mio::Interest::READABLE | mio::Interest::WRITABLE,
        (false, true) => mio::Interest::WRITABLE,
        _ => mio::Interest::READABLE,
    }
}

/// What a mio event reports, as evloop's contract wants it: a hang-up as
/// `HUP | READABLE` (the next read sees EOF), an error as
/// `ERROR | READABLE | WRITABLE` (the next read or write sees it).
fn ready(ev: &Event) -> Ready {
    let mut r = Ready::EMPTY;
    if ev.is_readable() {
        r |= Ready::READABLE;
    }
    if ev.is_writable() {
        r |= Ready::WRITABLE;
    }
    // On epoll, read-closed is `EPOLLHUP` or `EPOLLIN | EPOLLRDHUP`, and
    // write-closed without an error is `EPOLLHUP`; on kqueue, `EV_EOF` on
    // either filter.
    if ev.is_read_closed() || (ev.is_write_closed() && !ev.is_error()) {
        r |= Ready::HUP | Ready::READABLE;
    }
    if ev.is_error() {
        r |= Ready::ERROR | Ready::READABLE | Ready::WRITABLE;
    }
    r
}

/// Whether a report of `ev` for a registration of `held` is one the loop
/// asked for: a direction it did not ask for means the report came from
/// another registration under the same number (hang-ups and errors come
/// with every registration).
fn explained(held: mio::Interest, ev: &Event) -> bool {
    (!ev.is_readable() || held.is_readable()) && (!ev.is_writable() || held.is_writable())
}

fn is_errno(err: &io::Error, errno: libc::c_int) -> bool {
    err.raw_os_error() == Some(errno)
}

impl MioBackend {
    /// Creates a `mio::Poll` (an epoll instance on Linux, a kqueue on the
    /// BSDs and macOS).
    ///
    /// ```
    /// use evloop::backend::Backend;
    /// let b = mio_backend::MioBackend::new()?;
    /// let caps = b.capabilities();
    /// assert!(caps.edge && !caps.oneshot);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new() -> io::Result<MioBackend> {
        Ok(MioBackend {
            poll: Poll::new()?,
            events: Events::with_capacity(INITIAL_EVENTS),
            table: Vec::new(),
            rearm: Vec::new(),
            strays: Vec::new(),
            fixed: Vec::new(),
            rebuild: false,
            wait_no: 0,
            clock: Clock::new(),
        })
    }

    fn entry(&self, idx: usize) -> Entry {
        self.table.get(idx).copied().unwrap_or_default()
    }

    fn entry_mut(&mut self, idx: usize) -> &mut Entry {
        if idx >= self.table.len() {
            self.table.resize(idx + 1, Entry::default());
        }
        &mut self.table[idx]
    }

    /// Level emulation: re-arms each level fd the last wait reported and
    /// the loop did not change since. A re-arm that fails (the number was
    /// closed behind the loop's back, or names another file) leaves the
    /// registration to the rebuild, which reports the fd gone if it is.
    fn rearm_reported(&mut self) {
        for i in 0..self.rearm.len() {
            let fd = self.rearm[i];
            let e = &mut self.table[fd as usize];
            if !e.rearm {
                continue; // changed or forgotten since: nothing to re-arm
            }
            e.rearm = false;
            let Some(held) = e.held else { continue };
            let token = Token(fd as usize);
            if self
                .poll
                .registry()
                .reregister(&mut SourceFd(&fd), token, held)
                .is_err()
            {
                self.rebuild = true;
            }
        }
        self.rearm.clear();
    }

    /// Answers a report the table does not explain, as libev's epoll
    /// backend does: a `deregister` where the fd is not watched, a
    /// `reregister` to what the table holds where it is. False if that
    /// failed (the number was closed, or names another file than the one
    /// that reported), and for a second `reregister` of one fd: the first
    /// reached the file the number names now, the report came from another.
    fn fix(&mut self, fd: RawFd) -> bool {
        let registry = self.poll.registry();
        match self.entry(fd as usize).held {
            None => registry.deregister(&mut SourceFd(&fd)).is_ok(),
            Some(held) => {
                if self.fixed.contains(&fd) {
                    return false;
                }
                let token = Token(fd as usize);
                if registry
                    .reregister(&mut SourceFd(&fd), token, held)
                    .is_err()
                {
                    return false;
                }
                self.fixed.push(fd);
                true
            }
        }
    }

    /// Replaces the `Poll` with a new one holding the table's registrations:
    /// the only way to drop a registration whose file lives on (through a
    /// dup) under a number that was closed or reused, which no `epoll_ctl`
    /// can name any more. An fd that cannot be registered again (its number
    /// was closed) leaves the table and is reported [`Ready::INVALID`] (the
    /// loop still watches it, and stops its watchers), once: in place of a
    /// report of it among `out[from..]`, or appended.
    #[cold]
    fn rebuild(&mut self, out: &mut Vec<PollEvent>, from: usize) -> io::Result<()> {
        // The old Poll, and every registration in it, is closed here.
        self.poll = Poll::new()?;
        self.rebuild = false;
        self.fixed.clear();
        let reported = out.len();
        for idx in 0..self.table.len() {
            let Some(held) = self.table[idx].held else {
                continue;
            };
            let fd = idx as RawFd;
            let registry = self.poll.registry();
            if registry
                .register(&mut SourceFd(&fd), Token(idx), held)
                .is_ok()
            {
                continue;
            }
            self.table[idx] = Entry::default();
            let invalid = PollEvent {
                fd,
                ready: Ready::INVALID,
            };
            match out[from..reported].iter_mut().find(|e| e.fd == fd) {
                Some(e) => *e = invalid,
                None => out.push(invalid),
            }
        }
        Ok(())
    }

    /// Turns the wait's reports into `out`'s events; reports the table does
    /// not explain are answered (and dropped).
    fn collect(&mut self, out: &mut Vec<PollEvent>) -> io::Result<()> {
        let from = out.len();
        self.wait_no = self.wait_no.wrapping_add(1);
        if self.wait_no == 0 {
            // Once in 2^32 waits: no entry may look reported by this one.
            self.table.iter_mut().for_each(|e| e.seen = 0);
            self.wait_no = 1;
        }
        let wait_no = self.wait_no;
        let mut n = 0;
        for ev in self.events.iter() {
            n += 1;
            let token = ev.token().0;
            let fd = token as RawFd;
            let e = match self.table.get_mut(token) {
                Some(e) if e.held.is_some_and(|held| explained(held, ev)) => e,
                _ => {
                    self.strays.push(fd);
                    continue;
                }
            };
            let ready = ready(ev);
            if e.seen == wait_no {
                // The fd's other filter (kqueue): one report per fd.
                out[e.at as usize].ready |= ready;
                continue;
            }
            e.seen = wait_no;
            e.at = out.len() as u32;
            if e.level && !e.rearm {
                e.rearm = true;
                self.rearm.push(fd);
            }
            out.push(PollEvent { fd, ready });
        }
        if !self.strays.is_empty() {
            let mut broken = false;
            for i in 0..self.strays.len() {
                // Once broken, the rebuild below fixes the rest too.
                broken = broken || !self.fix(self.strays[i]);
            }
            self.strays.clear();
            if broken {
                self.rebuild(out, from)?;
            }
        }
        if n == self.events.capacity() && n < MAX_EVENTS {
            // Full: more may be waiting. Take more per wait from now on.
            self.events = Events::with_capacity(self.events.capacity() * 2);
        }
        Ok(())
    }
}

impl Backend for MioBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // mio registers edge-triggered only.
            edge: true,
            // No EPOLLONESHOT in mio: the loop emulates one-shot.
            oneshot: false,
            // Level: each reported fd re-armed before the next wait.
            level: Level::Rearmed,
            // EPOLLHUP / EPOLLRDHUP (EV_EOF) with every report.
            hangup: Hangup::Always,
            // epoll drops a closed fd's registration silently; the next
            // change fails (EBADF).
            closed_fd: ClosedFd::ModifyFails,
            ..Capabilities::default()
        }
    }

    fn modify(&mut self, fd: RawFd, _old: Interest, new: Interest) -> io::Result<()> {
        let idx = match usize::try_from(fd) {
            Ok(idx) => idx,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("the mio backend cannot watch fd {fd}: not a descriptor number"),
                ))
            }
        };
        // The table, not `old`, says whether mio holds the fd (a rebuild
        // may have dropped one that the loop still counts).
        let held = self.entry(idx).held;
        if !self.fixed.is_empty() {
            self.fixed.retain(|&f| f != fd);
        }
        let registry = self.poll.registry();
        let source = &mut SourceFd(&fd);
        if new.is_empty() {
            // Forget at once (the removal rule), and never fail for an fd
            // mio does not hold.
            if held.is_none() {
                return Ok(());
            }
            self.table[idx] = Entry::default(); // held: within the table
            return match registry.deregister(source) {
                Ok(()) => Ok(()),
                Err(e) => {
                    // The number was closed (EBADF) or names another file
                    // (ENOENT; EPERM for a file epoll never takes). If the
                    // file registered under it lives on through a dup, so
                    // does its registration, out of reach: rebuild before
                    // the next wait (not at the first stray report: by
                    // then the number may name a new file, whose reports
                    // the table cannot tell from the old one's).
                    self.rebuild = true;
                    if [libc::ENOENT, libc::EBADF, libc::EPERM]
                        .iter()
                        .any(|&errno| is_errno(&e, errno))
                    {
                        Ok(())
                    } else {
                        Err(e)
                    }
                }
            };
        }
        if new.trigger() == Trigger::Oneshot {
            // Defensive: `oneshot: false`, so the loop emulates it.
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the mio backend has no native one-shot (the loop emulates it)",
            ));
        }
        if held.is_none() && !cfg!(any(target_os = "linux", target_os = "android")) {
            // Regular files and directories: epoll refuses them (EPERM,
            // below); kqueue would take them, always ready. Refused alike.
            refuse_files(NAME, fd)?;
        }
        let want = mio_interest(new);
        let token = Token(idx);
        // ADD where the table has nothing, MOD where it has: and each
        // retried as the other (numbers are reused, files closed behind
        // the loop's back), as libev does.
        let result = match held {
            Some(_) => match registry.reregister(source, token, want) {
                Err(e) if is_errno(&e, libc::ENOENT) => {
                    // The number was closed and reused: the old file's
                    // registration may live on, as above.
                    self.rebuild = true;
                    registry.register(source, token, want)
                }
                r => r,
            },
            None => match registry.register(source, token, want) {
                Err(e) if is_errno(&e, libc::EEXIST) => registry.reregister(source, token, want),
                r => r,
            },
        };
        match result {
            Ok(()) => {
                // The ADD or MOD checked readiness: nothing left to re-arm.
                *self.entry_mut(idx) = Entry {
                    held: Some(want),
                    level: new.trigger() == Trigger::Level,
                    ..Entry::default()
                };
                Ok(())
            }
            Err(e) if is_errno(&e, libc::EPERM) => Err(io::Error::new(
                e.kind(),
                format!(
                    "the mio backend cannot watch fd {fd}: it is a regular file or a \
                     directory (always ready; no backend watches those) ({e})"
                ),
            )),
            Err(e) => Err(e),
        }
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        out: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        let from = out.len();
        let mut timeout = timeout;
        // Level emulation, before the wait: the fds that are still ready
        // are queued again by the kernel, and this wait reports them.
        self.rearm_reported();
        if self.rebuild {
            self.rebuild(out, from)?;
            if out.len() > from {
                // fds found gone are news: tell them now.
                timeout = Some(Duration::ZERO);
            }
        }
        let deadline = Deadline::new(timeout);
        loop {
            // mio rounds the time left up to whole milliseconds.
            match self.poll.poll(&mut self.events, deadline.remaining()) {
                Ok(()) => {}
                // EINTR: wait again for the time that is left.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let woken = !self.events.is_empty();
            self.collect(out)?;
            // Woken only by reports the loop does not see (stray ones,
            // answered in `collect`): wait again for the time left.
            let time_left = deadline.remaining() != Some(Duration::ZERO);
            if out.len() > from || !woken || !time_left {
                return Ok(PollStatus::Done);
            }
        }
    }

    fn now(&mut self) -> Duration {
        self.clock.now()
    }

    fn reinit(&mut self) -> io::Result<()> {
        // After fork the epoll instance is shared with the parent: a
        // deregister through it would remove the parent's registrations.
        // A Poll of the child's own (the inherited one is closed here, which
        // leaves the parent's alone), an empty table: the loop registers
        // every fd again (`old == NONE`).
        self.poll = Poll::new()?;
        self.table.clear();
        self.rearm.clear();
        self.fixed.clear();
        self.rebuild = false;
        Ok(())
    }

    /// mio's `Poll` is a kernel set (epoll here) that the loop's internal
    /// fds are in too: readable when a wait would report, so another loop can
    /// run this one (`PollableLoop::new`, the embed watcher).
    fn pollable_fd(&self) -> io::Result<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsRawFd;
        // SAFETY: the Poll's own fd, open while `self` lives (a `reinit`,
        // which replaces it, needs `&mut self`, so not while borrowed).
        Ok(unsafe { std::os::fd::BorrowedFd::borrow_raw(self.poll.as_raw_fd()) })
    }

    /// What `poll` re-arms lazily (the level fds the last wait reported),
    /// re-armed now, so that what they still have shows on the fd. Holds
    /// reports when mio holds a registration the table does not: the next
    /// `poll` rebuilds, and may report fds found gone, which the fd cannot
    /// show.
    fn expose_changes(&mut self) -> io::Result<bool> {
        self.rearm_reported();
        Ok(self.rebuild)
    }
}
