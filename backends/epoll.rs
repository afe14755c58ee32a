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
//! - The fd number travels in `epoll_event.u64`. The backend keeps its own
//!   table, by fd number, of the mask (trigger included) it gave the
//!   kernel; `ADD` or `MOD` is chosen from it, and `EEXIST` on `ADD` is
//!   retried as a `MOD`, `ENOENT` on `MOD` as an `ADD`, as libev does.
//! - **An fd closed behind the loop's back**, with no other descriptor of
//!   its file: the kernel drops the registration (it is keyed on the open
//!   file, not on the number), so nothing is reported, and the loop learns
//!   at its next change of the fd (`EBADF`). With a dup alive, the
//!   registration outlives the number, out of reach of `epoll_ctl`
//!   (`EBADF`, or `ENOENT` once the number names another file), and its
//!   events would end every wait, watcher or not: a spin. That is what the
//!   table is for. A report it does not explain (an fd it does not hold,
//!   or bits that only a registration it does not describe can report;
//!   `EPOLLHUP` and `EPOLLERR` come with every registration) is dropped and
//!   answered as libev's `epoll_poll` does: a `MOD` or `DEL`, and if that
//!   fails, a rebuild (a new instance, every fd of the table added again).
//!   A `DEL` or `MOD` that misses its registration rebuilds before the
//!   next wait. An fd that cannot be added again (closed) is reported
//!   [`Ready::INVALID`], for the loop still watches it. Cost: one
//!   bounds-checked `test` per report, two unless it is readable alone.
//!   A one-shot report disarms its fd, which the loop re-arms or forgets
//!   before its next wait (the backend contract), so a rebuild at the
//!   start of a wait finds the table right; a rebuild in the wait that
//!   reported it (`sift`) records the one-shot reports as disarming their
//!   fds first, so as not to re-arm them behind the loop's back. (The
//!   common report does not pay for that: a one-shot fd's report takes
//!   the same single `test` as a level one's.)
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
//!   kernel object is shared with the parent) and creates a new one, with
//!   an empty table: the loop adds every fd again.
//! - Signals, child exits and wake-ups, wall-clock steps and path hints
//!   are the loop's (its Unix notifier, `backends/unix/`): their fds come
//!   through `modify` like any other.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use super::{Clock, Deadline};
use crate::backend::{Backend, Capabilities, Change, PollEvent, PollStatus};
use crate::{Interest, Ready, Trigger};

/// Initial number of events one `epoll_wait` can return.
const INITIAL_EVENTS: usize = 64;
/// The buffer stops growing at this many events.
const MAX_EVENTS: usize = 4096;

/// The `epoll` backend (Linux).
///
/// ```
/// use evloop::backend::{Backend, PollEvent};
/// use evloop::backends::epoll::Epoll;
/// use evloop::{Interest, Ready};
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
    /// Per fd number, the mask the kernel was given, trigger bits included
    /// (0: none; `EPOLLONESHOT` alone: a one-shot registration disarmed by
    /// a report, recorded by `sift` before a rebuild). The loop's view,
    /// kept here so that reports can be checked and the instance rebuilt;
    /// never shrunk but by `reinit`.
    masks: Vec<u32>,
    /// Per fd number, what `poll` checks reports against (derived from
    /// `masks`, same length).
    pass: Vec<Pass>,
    /// The kernel may hold a registration the table does not (a `DEL` or a
    /// `MOD` missed it): rebuild before the next wait.
    rebuild: bool,
    /// fds whose stray report a `MOD` answered since the loop last changed
    /// them (almost always empty).
    fixed: Vec<RawFd>,
    clock: Clock,
}

/// One `epoll_ctl` call, with `data` as the event's `u64`.
fn ctl(epfd: &OwnedFd, op: libc::c_int, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: data };
    // SAFETY: `epfd` is an open epoll fd, and `ev` is a valid epoll_event
    // that outlives the call (the kernel copies it; for EPOLL_CTL_DEL it is
    // ignored). An invalid `fd` is reported as an error, not undefined
    // behaviour.
    let r = unsafe { libc::epoll_ctl(epfd.as_raw_fd(), op, fd, &mut ev) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// What a report may carry for `poll` to pass it on unchecked, as two
/// complemented masks: a report passes if it has none of the bits of one
/// of them, which is one `test` each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pass {
    /// `!EPOLLIN` for a registration that asked for readable: the most
    /// common report, `EPOLLIN` alone, then passes with one `test` that
    /// also tells its readiness.
    quick: u32,
    /// Everything but the mask and `EPOLLHUP | EPOLLERR` (which the kernel
    /// adds to every registration).
    stray: u32,
}

const IN: u32 = libc::EPOLLIN as u32;
const IN_OUT: u32 = (libc::EPOLLIN | libc::EPOLLOUT) as u32;
/// What the kernel adds to every registration.
const ALWAYS: u32 = (libc::EPOLLHUP | libc::EPOLLERR) as u32;
const ONESHOT: u32 = libc::EPOLLONESHOT as u32;

impl Pass {
    /// Nothing passes: the fd is not registered (or is one-shot).
    const NONE: Pass = Pass {
        quick: !0,
        stray: !0,
    };

    const fn of(mask: u32) -> Pass {
        if mask & IN_OUT == 0 {
            return Pass::NONE;
        }
        let quick = if mask & IN != 0 { !IN } else { !0 };
        Pass {
            quick,
            stray: !(mask | ALWAYS),
        }
    }
}

/// Whether a report of `got` for an fd registered with `mask` is one the
/// loop asked for.
fn wanted(mask: u32, got: u32) -> bool {
    mask & IN_OUT != 0 && got & !(mask | ALWAYS) == 0
}

impl std::fmt::Debug for Epoll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Epoll")
            .field("epfd", &self.epfd.as_raw_fd())
            .field("max_events", &self.buf.len())
            .field("rebuild", &self.rebuild)
            .finish_non_exhaustive()
    }
}

impl Epoll {
    /// Creates an epoll instance (`epoll_create1(EPOLL_CLOEXEC)`).
    ///
    /// ```
    /// use evloop::backend::Backend;
    /// use evloop::{backends::epoll::Epoll, Loop};
    /// let ep = Epoll::new().unwrap();
    /// assert!(ep.capabilities().edge && ep.capabilities().oneshot);
    /// let lp: Loop = Loop::with_backend(ep);
    /// assert_eq!(lp.backend_name(), "epoll");
    /// ```
    pub fn new() -> io::Result<Epoll> {
        Ok(Epoll {
            epfd: create()?,
            buf: vec![libc::epoll_event { events: 0, u64: 0 }; INITIAL_EVENTS],
            masks: Vec::new(),
            pass: Vec::new(),
            rebuild: false,
            fixed: Vec::new(),
            clock: Clock::new(),
        })
    }

    /// `modify`'s common change, if this is one (false: nothing was done,
    /// or the kernel refused it, and `modify_slow` retries and answers):
    /// an fd the kernel holds gets a new (or, one-shot, the same)
    /// non-empty mask. Both masks come from tables. Only while nothing is
    /// to be fixed (`fixed` is empty: the caller checks).
    #[inline(always)]
    fn modify_fast(&mut self, fd: RawFd, new: Interest) -> bool {
        let bits = (new.bits() & 0x3f) as usize;
        let events = EVENTS[bits];
        let idx = fd as u32 as usize;
        let held = match (self.masks.get(idx), self.pass.get(idx)) {
            (Some(&held), Some(_)) if held != 0 && events & IN_OUT != 0 => held,
            _ => return false,
        };
        // A one-shot re-arm (the common change: one per event) asks for
        // the mask the table holds already: nothing to write after.
        let same = held == events;
        let mut ev = libc::epoll_event {
            events,
            u64: fd as u64,
        };
        // SAFETY: `epfd` is an open epoll fd, and `ev` is a valid
        // epoll_event that outlives the call (the kernel copies it). An fd
        // the kernel does not hold is an error, not undefined behaviour.
        let r = unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_MOD, fd, &mut ev) };
        if r != 0 {
            return false;
        }
        if !same {
            self.masks[idx] = EVENTS[bits];
            self.pass[idx] = PASS[bits];
        }
        true
    }

    /// A one-shot re-arm, if this is one (`None` otherwise): `modify_fast`'s
    /// change to the very mask the table holds (one-shot: the kernel
    /// disarmed the fd and keeps its mask), so that the table stays as it
    /// is and nothing but the loop lives across the call. Whether the
    /// kernel took it. Only while nothing is to be fixed (the caller
    /// checks).
    #[inline(always)]
    fn rearm(&mut self, fd: RawFd, new: Interest) -> Option<bool> {
        let events = EVENTS[(new.bits() & 0x3f) as usize];
        if events & IN_OUT == 0 || self.masks.get(fd as u32 as usize) != Some(&events) {
            return None;
        }
        let mut ev = libc::epoll_event {
            events,
            u64: fd as u64,
        };
        // SAFETY: as in `modify_fast`.
        Some(
            unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_MOD, fd, &mut ev) }
                == 0,
        )
    }

    /// `modify` while nothing is to be fixed, out of line: `modify_all`'s
    /// changes other than a re-arm, a first registration (setup's `ADD`,
    /// the most frequent of them) tested first. The call costs setup
    /// about 27 instructions per new fd, which the re-arm's inline `MOD`
    /// (16 fewer per one-shot event) pays for.
    #[inline(never)]
    fn modify_other(&mut self, c: &Change) -> io::Result<()> {
        if let Some(added) = self.add_fast(c.fd, c.new) {
            // A first registration (setup: one per new fd).
            return added;
        }
        if self.modify_fast(c.fd, c.new) {
            return Ok(());
        }
        self.modify_slow(c.fd, c.old, c.new)
    }

    /// The ADD path, inline: the first registration of an fd the table has
    /// room for (`modify_slow`'s ADD, without its other cases); `None`
    /// for any other change. Only while nothing is to be fixed (the
    /// caller checks).
    #[inline(always)]
    fn add_fast(&mut self, fd: RawFd, new: Interest) -> Option<io::Result<()>> {
        let bits = (new.bits() & 0x3f) as usize;
        let events = EVENTS[bits];
        let idx = fd as u32 as usize;
        match (self.masks.get(idx), self.pass.get(idx)) {
            (Some(&0), Some(_)) if events & IN_OUT != 0 => {}
            _ => return None,
        }
        Some(
            match ctl(&self.epfd, libc::EPOLL_CTL_ADD, fd, events, fd as u64) {
                Ok(()) => {
                    self.masks[idx] = events;
                    self.pass[idx] = PASS[bits];
                    Ok(())
                }
                Err(e) => self.add_failed(fd, idx, events, e),
            },
        )
    }

    /// `modify` for everything but the common change: adding, deleting,
    /// and recovering from what the kernel answered.
    #[inline(never)]
    fn modify_slow(&mut self, fd: RawFd, _old: Interest, new: Interest) -> io::Result<()> {
        let Ok(idx) = usize::try_from(fd) else {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        };
        // The table, not `old`, says whether the kernel holds the fd: a
        // rebuild leaves out disarmed one-shot fds that the loop counts.
        let held = self.held(idx);
        if !self.fixed.is_empty() {
            self.fixed.retain(|&f| f != fd);
        }
        if new.is_empty() {
            if held == 0 {
                return Ok(()); // never added, or left out by a rebuild
            }
            self.set(idx, 0);
            return match self.ctl(libc::EPOLL_CTL_DEL, fd, 0) {
                Ok(()) => Ok(()),
                Err(e) => {
                    // The number was closed (`EBADF`), or names another
                    // file now (`ENOENT`; `EPERM` if that file is one epoll
                    // never takes, a regular file or a directory opened by
                    // another thread meanwhile). If the file registered under it
                    // lives on through a dup, so does its registration, out
                    // of reach of `epoll_ctl`, and its events would end
                    // every wait: rebuild. At the next poll, before it
                    // waits: not here, so that one rebuild serves all the
                    // removals of an iteration; not at the first stray
                    // report, for the number may name a new file by then,
                    // whose reports the table cannot tell from the old
                    // one's.
                    self.rebuild = true;
                    if is_errno(&e, libc::ENOENT)
                        || is_errno(&e, libc::EBADF)
                        || is_errno(&e, libc::EPERM)
                    {
                        Ok(())
                    } else {
                        Err(e)
                    }
                }
            };
        }
        let events = epoll_events(new);
        let (first, second) = if held != 0 {
            (libc::EPOLL_CTL_MOD, libc::EPOLL_CTL_ADD)
        } else {
            (libc::EPOLL_CTL_ADD, libc::EPOLL_CTL_MOD)
        };
        let result = match self.ctl(first, fd, events) {
            Err(e) if is_errno(&e, libc::EEXIST) || is_errno(&e, libc::ENOENT) => {
                if first == libc::EPOLL_CTL_MOD {
                    // ENOENT: the number was closed and reused; the old
                    // file's registration may live on, as above.
                    self.rebuild = true;
                }
                self.ctl(second, fd, events)
            }
            r => r,
        };
        self.added(fd, idx, events, result)
    }

    /// An ADD of an fd the table does not hold failed with `e`: `EEXIST`
    /// (the kernel holds it all the same) is retried as a MOD, `EPERM` (a
    /// regular file or a directory) says why; what `modify_slow` would
    /// have done with the same answer.
    #[cold]
    #[inline(never)]
    fn add_failed(&mut self, fd: RawFd, idx: usize, events: u32, e: io::Error) -> io::Result<()> {
        let result = if is_errno(&e, libc::EEXIST) {
            self.ctl(libc::EPOLL_CTL_MOD, fd, events)
        } else {
            Err(e)
        };
        self.added(fd, idx, events, result)
    }

    /// The end of a registration (ADD or MOD) of `events`: the table
    /// records it, or the error says why the fd was refused.
    fn added(
        &mut self,
        fd: RawFd,
        idx: usize,
        events: u32,
        result: io::Result<()>,
    ) -> io::Result<()> {
        match result {
            Ok(()) => {
                self.set(idx, events);
                Ok(())
            }
            Err(e) if is_errno(&e, libc::EPERM) => Err(io::Error::new(
                e.kind(),
                format!(
                    "epoll cannot watch fd {fd}: it is a regular file or a directory \
                     (always ready; no backend watches those) ({e})"
                ),
            )),
            Err(e) => Err(e),
        }
    }

    /// One `epoll_ctl` call for a fd of the loop's.
    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32) -> io::Result<()> {
        ctl(&self.epfd, op, fd, events, fd as u64)
    }

    /// The table's mask for fd number `idx` (0: none).
    fn held(&self, idx: usize) -> u32 {
        self.masks.get(idx).copied().unwrap_or(0)
    }

    /// Records `mask` as what the kernel holds for fd number `idx`.
    fn set(&mut self, idx: usize, mask: u32) {
        if idx >= self.masks.len() {
            if mask == 0 {
                return;
            }
            self.lengthen(idx);
        }
        self.masks[idx] = mask;
        self.pass[idx] = Pass::of(mask);
    }

    /// Lengthens the table to hold fd number `idx`: doubled, not to
    /// `idx + 1`, so that a run of new fds (numbered upwards as the kernel
    /// hands them out) lengthens it once per doubling, not once per fd.
    #[cold]
    #[inline(never)]
    fn lengthen(&mut self, idx: usize) {
        let len = (idx + 1).max(self.masks.len() * 2).max(INITIAL_EVENTS);
        self.masks.resize(len, 0);
        self.pass.resize(len, Pass::NONE);
    }

    /// A wait filled `buf`: more may be waiting. Report more per call from
    /// now on.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let zero = libc::epoll_event { events: 0, u64: 0 };
        self.buf.resize(self.buf.len() * 2, zero);
    }

    /// The slow path of `poll`, for a wait with a report that did not pass
    /// (or a one-shot one): `events[from..]` are the wait's reports, in
    /// `buf`'s order. A report the loop asked for is kept (a one-shot fd's
    /// is recorded as disarming it); any other is dropped, and the kernel's
    /// registration fixed, or the instance rebuilt.
    #[cold]
    #[inline(never)]
    fn sift(&mut self, events: &mut Vec<PollEvent>, from: usize) {
        let mut kept = from;
        let mut broken = false;
        for i in 0..events.len() - from {
            let (got, data) = (self.buf[i].events, self.buf[i].u64);
            let idx = data as usize;
            let mask = self.held(idx);
            if wanted(mask, got) {
                if mask & ONESHOT != 0 {
                    // Disarmed by this report (`mask` is not 0, so the
                    // table covers `idx`).
                    self.masks[idx] = ONESHOT;
                    self.pass[idx] = Pass::NONE;
                }
                events[kept] = events[from + i];
                kept += 1;
            } else if !broken {
                // Once broken, the rebuild below fixes the rest too.
                broken = !self.fix(data as RawFd, idx, mask);
            }
        }
        events.truncate(kept);
        if broken {
            // Failing, the flag stays set: the next poll retries, and
            // reports the error if it fails again.
            self.rebuild = true;
            let _ = self.rebuild(events, from);
        }
    }

    /// Makes the kernel's registration of `fd`, which reported what the
    /// table does not explain, match the table's `mask` (libev's answer):
    /// a `MOD`, or a `DEL` if the fd is not armed. False if that failed
    /// (the number is closed, or names another file than the one that
    /// reported: `EBADF`, `ENOENT`), and for a second `MOD` of one fd: the
    /// first reached the file the number names now, the report came from
    /// another.
    fn fix(&mut self, fd: RawFd, idx: usize, mask: u32) -> bool {
        if mask & IN_OUT == 0 {
            let deleted = self.ctl(libc::EPOLL_CTL_DEL, fd, 0).is_ok();
            if deleted {
                self.set(idx, 0);
            }
            return deleted;
        }
        if self.fixed.contains(&fd) || self.ctl(libc::EPOLL_CTL_MOD, fd, mask).is_err() {
            return false;
        }
        self.fixed.push(fd);
        true
    }

    /// Replaces the epoll instance with a new one holding the table's
    /// registrations: the only way to drop a registration whose file lives
    /// on (through a dup, here or in a child) under a number that was
    /// closed or reused, which no `epoll_ctl` can name any more.
    ///
    /// - Disarmed one-shot fds are left out of both: the loop's next
    ///   `modify` of them adds them again.
    /// - An fd that cannot be added again (its number was closed: `EBADF`)
    ///   leaves the table and is reported as [`Ready::INVALID`]: the table
    ///   holds only fds the loop watches, so the loop must hear that this
    ///   one is gone (it stops its watchers with [`Ready::ERROR`]). One
    ///   among this call's reports (`events[from..]`) gets it in place, to
    ///   appear once.
    /// - An edge-triggered fd that is ready reports once more (`ADD` checks
    ///   readiness). Harmless: edge watchers read until `EAGAIN` anyway.
    fn rebuild(&mut self, events: &mut Vec<PollEvent>, from: usize) -> io::Result<()> {
        // The old instance, and every registration in it, is closed here.
        self.epfd = create()?;
        self.rebuild = false;
        self.fixed.clear();
        let reported = events.len();
        for idx in 0..self.masks.len() {
            let mask = self.masks[idx];
            if mask == 0 {
                continue;
            }
            let fd = idx as RawFd;
            if mask & IN_OUT != 0 && self.ctl(libc::EPOLL_CTL_ADD, fd, mask).is_ok() {
                continue;
            }
            self.set(idx, 0);
            if mask & IN_OUT == 0 {
                continue; // disarmed
            }
            let invalid = PollEvent {
                fd,
                ready: Ready::INVALID,
            };
            match events[from..reported].iter_mut().find(|e| e.fd == fd) {
                Some(e) => *e = invalid,
                None => events.push(invalid),
            }
        }
        Ok(())
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

/// The `epoll_event.events` mask for an interest: a table lookup (by the
/// interest's bits), as `modify` runs once per event for one-shot fds.
#[inline(always)]
fn epoll_events(interest: Interest) -> u32 {
    EVENTS[(interest.bits() & 0x3f) as usize]
}

/// [`Pass::of`] the mask of every value of an interest's bits.
static PASS: [Pass; 64] = {
    let mut t = [Pass::NONE; 64];
    let mut i = 0;
    while i < 64 {
        t[i] = Pass::of(EVENTS[i]);
        i += 1;
    }
    t
};

/// [`epoll_events_of`] for every value of an interest's bits.
static EVENTS: [u32; 64] = {
    let mut t = [0u32; 64];
    let mut i = 0;
    while i < 64 {
        // The layout of `Interest::bits` (events in bits 0-1, the trigger
        // in bits 4-5); the `masks` test checks every interest against it.
        let events = match i & 3 {
            0 => Interest::NONE,
            1 => Interest::READABLE,
            2 => Interest::WRITABLE,
            _ => Interest::BOTH,
        };
        let trigger = match (i >> 4) & 3 {
            0 => Trigger::Level,
            1 => Trigger::Oneshot,
            _ => Trigger::Edge,
        };
        t[i] = epoll_events_of(events.with_trigger(trigger));
        i += 1;
    }
    t
};

/// The `epoll_event.events` mask for an interest.
const fn epoll_events_of(interest: Interest) -> u32 {
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

/// This backend, for the platform's list (backends/mod.rs).
pub(super) const OFFERED: super::Offered = super::Offered {
    name: "epoll",
    open: || Ok(Box::new(Epoll::new()?)),
};

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
            hangup: crate::backend::Hangup::Always,
            closed_fd: crate::backend::ClosedFd::ModifyFails,
            level: crate::backend::Level::Native,
            completion: false,
        }
    }

    fn modify(&mut self, fd: RawFd, old: Interest, new: Interest) -> io::Result<()> {
        if self.fixed.is_empty() {
            if self.modify_fast(fd, new) {
                return Ok(());
            }
            if let Some(added) = self.add_fast(fd, new) {
                return added;
            }
        }
        self.modify_slow(fd, old, new)
    }

    /// The loop's flush: a one-shot re-arm makes one change per event, and
    /// this loop makes it inline (`rearm`); every other change goes out of
    /// line, through `modify`'s paths.
    fn modify_all(&mut self, changes: &[Change]) -> Result<(), (usize, io::Error)> {
        // `fixed` only shrinks here (`modify_slow`): tested once.
        let fast = self.fixed.is_empty();
        for (i, c) in changes.iter().enumerate() {
            let made = if !fast {
                self.modify_slow(c.fd, c.old, c.new)
            } else {
                match self.rearm(c.fd, c.new) {
                    Some(true) => continue,
                    // Refused: so would `modify_fast` be; `modify_slow`
                    // answers.
                    Some(false) => self.modify_slow(c.fd, c.old, c.new),
                    None => self.modify_other(c),
                }
            };
            if let Err(e) = made {
                return Err((i, e));
            }
        }
        Ok(())
    }

    /// The epoll fd: readable while a registered fd (the loop's internal
    /// ones too: a signal, a child's exit, a wake-up) is ready. Every change is
    /// made at once (`expose_changes` has nothing to do); a rebuild owed
    /// after a `DEL` that missed its registration is made by the next
    /// poll, and until then the fd may be readable for a stale
    /// registration (a spurious wake-up, which that poll ends).
    fn pollable_fd(&self) -> io::Result<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        Ok(self.epfd.as_fd())
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        let mut timeout = timeout;
        if self.rebuild {
            let start = events.len();
            self.rebuild(events, start)?;
            if events.len() > start {
                // fds the rebuild found gone are news: tell them now.
                timeout = Some(Duration::ZERO);
            }
        }
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
        // Every report is checked against the table on the way: a
        // bounds-checked `test` (after a fork the instance may hold a
        // child's registrations, of numbers the table never saw), and a
        // second one unless it is the common report, readable alone. A
        // report that fails both sends the wait to `sift`. Written into
        // the spare capacity: `extend` leaves the loop out of line here,
        // which costs about half an instruction per event.
        let from = events.len();
        events.reserve(n);
        let pass = &self.pass[..];
        let mut doubt = false;
        let slots = &mut events.spare_capacity_mut()[..n];
        for (slot, ev) in slots.iter_mut().zip(&self.buf[..n]) {
            // Copy the fields out: the struct is packed on x86_64.
            // (`as usize`, not `as u32`: a zero-extension less.)
            let (got, data) = (ev.events, ev.u64);
            let idx = data as usize;
            let ready = match pass.get(idx).copied() {
                Some(p) if got & p.quick == 0 => Ready::READABLE,
                Some(p) if got & p.stray == 0 => ready(got),
                _ => {
                    doubt = true;
                    ready(got)
                }
            };
            slot.write(PollEvent {
                fd: data as RawFd,
                ready,
            });
        }
        // SAFETY: `reserve` made room for `n` more, and the loop wrote the
        // first `n` spare slots.
        unsafe { events.set_len(from + n) };
        if doubt {
            self.sift(events, from);
        }
        if n == self.buf.len() && n < MAX_EVENTS {
            self.grow();
        }
        Ok(PollStatus::Done)
    }

    fn now(&mut self) -> Duration {
        self.clock.now()
    }

    fn reinit(&mut self) -> io::Result<()> {
        // The old fd is closed when replaced; the loop re-adds every fd
        // (`old == NONE`) to the new, empty instance.
        self.epfd = create()?;
        self.masks.clear();
        self.pass.clear();
        self.fixed.clear();
        self.rebuild = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::{AsFd, BorrowedFd};
    use std::os::unix::net::UnixStream;
    use std::sync::{mpsc, Mutex};
    use std::time::Instant;

    #[test]
    fn masks() {
        for events in [
            Interest::NONE,
            Interest::READABLE,
            Interest::WRITABLE,
            Interest::BOTH,
        ] {
            for trigger in [Trigger::Level, Trigger::Edge, Trigger::Oneshot] {
                let interest = events.with_trigger(trigger);
                assert_eq!(
                    epoll_events(interest),
                    epoll_events_of(interest),
                    "{interest:?}"
                );
                assert_eq!(
                    PASS[(interest.bits() & 0x3f) as usize],
                    Pass::of(epoll_events_of(interest)),
                    "{interest:?}"
                );
            }
        }
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

    #[test]
    fn table_entries() {
        let (i, o, hup, err, rdhup) = (
            libc::EPOLLIN as u32,
            libc::EPOLLOUT as u32,
            libc::EPOLLHUP as u32,
            libc::EPOLLERR as u32,
            libc::EPOLLRDHUP as u32,
        );
        let passes = |p: Pass, got: u32| got & p.quick == 0 || got & p.stray == 0;
        let all = [i, i | rdhup, hup, err, i | hup | err, o, i | o, o | err];
        for interest in [Interest::READABLE, Interest::WRITABLE, Interest::BOTH] {
            for trigger in [Trigger::Level, Trigger::Edge, Trigger::Oneshot] {
                let mask = epoll_events(interest.with_trigger(trigger));
                let p = Pass::of(mask);
                for got in all {
                    // Only what the loop asked for passes unchecked; the
                    // quick test only `EPOLLIN` alone.
                    assert!(!passes(p, got) || wanted(mask, got), "{mask:#x} {got:#x}");
                    assert!(got & p.quick != 0 || got == i, "{mask:#x} {got:#x}");
                    // What the loop asked for passes.
                    assert_eq!(passes(p, got), wanted(mask, got));
                }
            }
        }
        let r = epoll_events(Interest::READABLE);
        assert!(wanted(r, i | rdhup) && wanted(r, hup | err) && !wanted(r, o));
        let w = epoll_events(Interest::WRITABLE);
        assert!(wanted(w, o) && wanted(w, err) && !wanted(w, i) && !wanted(w, rdhup));
        assert!(!wanted(ONESHOT, i) && !wanted(ONESHOT, hup), "disarmed");
        assert!(!wanted(0, i) && !wanted(0, err), "not registered");
        assert_eq!(Pass::of(0), Pass::NONE);
        assert_eq!(Pass::of(ONESHOT), Pass::NONE);
    }

    /// Runs `body` on a thread of its own and fails if it has not finished
    /// within five seconds, so that a spin or a hang fails fast.
    fn watchdog(body: impl FnOnce() + Send + 'static) {
        let (done, finished) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            body();
            let _ = done.send(());
        });
        match finished.recv_timeout(Duration::from_secs(5)) {
            // Disconnected: the body panicked; join passes the panic on.
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                if let Err(panic) = thread.join() {
                    std::panic::resume_unwind(panic);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("not finished after 5 s: the backend spins or hangs")
            }
        }
    }

    /// One poll's reports (the loop clears the buffer before each).
    fn poll(ep: &mut Epoll, timeout: Duration) -> Vec<PollEvent> {
        let mut events = Vec::new();
        ep.poll(Some(timeout), &mut events).unwrap();
        events
    }

    const LONG: Duration = Duration::from_secs(5);

    /// Three polls of 50 ms: none may report anything, and each must block
    /// for its timeout. (A lower bound on a blocking wait cannot flake on a
    /// loaded machine; a spin returns at once.)
    fn assert_waits(ep: &mut Epoll) {
        for _ in 0..3 {
            let t = Instant::now();
            let events = poll(ep, Duration::from_millis(50));
            let took = t.elapsed();
            assert_eq!(events, [], "after {took:?}");
            assert!(took >= Duration::from_millis(45), "returned after {took:?}");
        }
    }

    /// Keeps the numbers from `HIGH` up for one test at a time.
    static HIGH_FDS: Mutex<()> = Mutex::new(());
    /// Above what the other tests' files get (the lowest free numbers), so
    /// that a number closed by a test is not reused meanwhile.
    const HIGH: RawFd = 700;

    /// A duplicate of `fd` from `HIGH` up (hold `HIGH_FDS`).
    fn dup_high(fd: BorrowedFd<'_>) -> OwnedFd {
        // SAFETY: duplicates an open fd into a new one, owned by no one.
        let high = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, HIGH) };
        assert!(high >= HIGH, "F_DUPFD: {}", io::Error::last_os_error());
        // SAFETY: `high` was just created and is owned by no one.
        unsafe { OwnedFd::from_raw_fd(high) }
    }

    const READABLE_ONCE: Interest = Interest::READABLE.with_trigger(Trigger::Oneshot);
    const DISARMED: Interest = Interest::NONE.with_trigger(Trigger::Oneshot);

    /// Arms the rebuild flag the way the loop would: a removed watcher
    /// whose fd was closed while a dup keeps its socket (and its
    /// registration) alive. Returns what keeps it alive.
    fn remove_closed_with_dup_alive(ep: &mut Epoll) -> (UnixStream, UnixStream) {
        let (a, mut peer) = UnixStream::pair().unwrap();
        let fd = a.as_raw_fd();
        ep.modify(fd, Interest::NONE, Interest::READABLE).unwrap();
        let dup = a.try_clone().unwrap();
        drop(a);
        peer.write_all(b"x").unwrap();
        ep.modify(fd, Interest::READABLE, Interest::NONE).unwrap();
        (dup, peer)
    }

    /// A number closed behind the backend's back and reused by a regular
    /// file (another thread's `open`) while a dup keeps the old socket,
    /// and its registration, alive: the forget succeeds (the `DEL` fails
    /// with `EPERM`, as it does with `ENOENT` for a reused socket) and the
    /// instance is rebuilt, so the old socket's events end no wait.
    #[test]
    fn forgetting_a_number_reused_by_a_file_succeeds() {
        watchdog(|| {
            let _high = HIGH_FDS.lock().unwrap_or_else(|e| e.into_inner());
            let mut ep = Epoll::new().unwrap();
            let (a, mut peer) = UnixStream::pair().unwrap();
            let n = dup_high(a.as_fd());
            ep.modify(n.as_raw_fd(), Interest::NONE, Interest::READABLE)
                .unwrap();
            let file = std::fs::File::open("Cargo.toml").unwrap();
            // SAFETY: `n` is owned here; dup2 closes its socket and makes
            // the number a duplicate of `file`, which `n` then owns.
            let r = unsafe { libc::dup2(file.as_raw_fd(), n.as_raw_fd()) };
            assert_eq!(r, n.as_raw_fd(), "dup2: {}", io::Error::last_os_error());
            peer.write_all(b"x").unwrap();
            ep.modify(n.as_raw_fd(), Interest::READABLE, Interest::NONE)
                .unwrap();
            assert_waits(&mut ep);
            drop(a);
        });
    }

    /// The point of the table: a watcher removed after its fd was closed
    /// behind the loop's back, while a dup keeps the socket open. The
    /// `DEL` fails (`EBADF`, or `ENOENT` if the number was reused
    /// meanwhile), the kernel keeps the registration, and before the
    /// table every wait returned at once with the removed fd.
    #[test]
    fn removed_fd_closed_with_a_dup_alive_does_not_spin() {
        watchdog(|| {
            let mut ep = Epoll::new().unwrap();
            let _alive = remove_closed_with_dup_alive(&mut ep);
            assert_waits(&mut ep);
        });
    }

    /// A number closed and reused behind the backend's back (the old
    /// socket kept open by a dup), then changed by the loop: the `MOD`
    /// finds no registration for the new file (`ENOENT`) and adds one; the
    /// old file's lives on under the same number, and its reports carry
    /// bits the new registration asked for, so no check of a report could
    /// tell them apart. Only a rebuild before the next wait gets rid of it.
    #[test]
    fn reused_number_then_changed_does_not_report_the_old_file() {
        watchdog(|| {
            let mut ep = Epoll::new().unwrap();
            let (a, mut old_peer) = UnixStream::pair().unwrap();
            let (b, _b_peer) = UnixStream::pair().unwrap();
            let n = a.as_raw_fd();
            ep.modify(n, Interest::NONE, Interest::READABLE).unwrap();
            let _old_alive = a.try_clone().unwrap();
            // SAFETY: `n` is owned by `a`, which closes it at the end
            // whatever it names by then; `b`'s socket gets a second
            // descriptor, `n`, and nothing else uses the number.
            assert_eq!(unsafe { libc::dup2(b.as_raw_fd(), n) }, n);
            old_peer.write_all(b"old").unwrap();
            let edge = Interest::READABLE.with_trigger(Trigger::Edge);
            ep.modify(n, Interest::READABLE, edge).unwrap();
            assert_waits(&mut ep);
        });
    }

    /// A report for an fd the table does not hold is dropped, and a `DEL`
    /// that works is the whole repair (no rebuild).
    #[test]
    fn stray_report_is_dropped_and_deleted() {
        watchdog(|| {
            let mut ep = Epoll::new().unwrap();
            let (a, mut peer) = UnixStream::pair().unwrap();
            // Registered behind the table's back.
            ep.ctl(libc::EPOLL_CTL_ADD, a.as_raw_fd(), libc::EPOLLIN as u32)
                .unwrap();
            peer.write_all(b"x").unwrap();
            let epfd = ep.epfd.as_raw_fd();
            assert_eq!(poll(&mut ep, LONG), [], "reported at once, dropped");
            assert_waits(&mut ep);
            assert_eq!(ep.epfd.as_raw_fd(), epfd, "no rebuild");
        });
    }

    /// Bits outside the registered mask: a `MOD` back to the table's mask.
    /// A second stray report of the fd means the `MOD` did not reach the
    /// registration that reports (here a second registration under the
    /// same number, as a child sharing the instance could add): rebuild.
    #[test]
    fn stray_bits_are_dropped_then_rebuilt_away() {
        watchdog(|| {
            let mut ep = Epoll::new().unwrap();
            let (mut a, mut peer) = UnixStream::pair().unwrap();
            let fd = a.as_raw_fd();
            ep.modify(fd, Interest::NONE, Interest::READABLE).unwrap();
            let (other, _other_peer) = UnixStream::pair().unwrap();
            let epfd = ep.epfd.as_raw_fd();
            let mut ev = libc::epoll_event {
                events: libc::EPOLLOUT as u32,
                u64: fd as u64,
            };
            // SAFETY: `ev` is a valid epoll_event; both fds are open.
            let r = unsafe {
                libc::epoll_ctl(
                    ep.epfd.as_raw_fd(),
                    libc::EPOLL_CTL_ADD,
                    other.as_raw_fd(),
                    &mut ev,
                )
            };
            assert_eq!(r, 0, "{}", io::Error::last_os_error());
            for _ in 0..2 {
                // Writable under `fd`, which asked for readable only.
                assert_eq!(poll(&mut ep, LONG), []);
            }
            assert_ne!(ep.epfd.as_raw_fd(), epfd, "rebuilt");
            assert_waits(&mut ep);
            // `fd` is still registered, in the new instance.
            peer.write_all(b"y").unwrap();
            let want = PollEvent {
                fd,
                ready: Ready::READABLE,
            };
            assert_eq!(poll(&mut ep, LONG), [want]);
            a.read_exact(&mut [0]).unwrap();
            ep.modify(fd, Interest::READABLE, Interest::NONE).unwrap();
        });
    }

    /// A stray report whose `DEL` fails (the number is closed, the file
    /// lives on through a dup) rebuilds the instance, in the same poll: the
    /// fds the loop watches stay registered and their reports are kept; a
    /// watched fd whose number is closed for good cannot be added again and
    /// is reported `INVALID`, once.
    #[test]
    fn unrepairable_stray_report_rebuilds() {
        watchdog(|| {
            let _high = HIGH_FDS.lock().unwrap_or_else(|e| e.into_inner());
            let mut ep = Epoll::new().unwrap();
            let (a, mut pa) = UnixStream::pair().unwrap();
            let (mut b, mut pb) = UnixStream::pair().unwrap();
            let (c, _pc) = UnixStream::pair().unwrap();
            let c = dup_high(c.as_fd());
            let (bfd, cfd) = (b.as_raw_fd(), c.as_raw_fd());
            ep.modify(bfd, Interest::NONE, Interest::READABLE).unwrap();
            ep.modify(cfd, Interest::NONE, Interest::READABLE).unwrap();
            // Registered behind the table's back, then closed with a dup
            // alive: only a new instance gets rid of it.
            ep.ctl(libc::EPOLL_CTL_ADD, a.as_raw_fd(), libc::EPOLLIN as u32)
                .unwrap();
            let _a_alive = a.try_clone().unwrap();
            drop(a);
            // The last descriptor of its socket: the kernel forgets it.
            drop(c);
            pa.write_all(b"x").unwrap();
            pb.write_all(b"y").unwrap();
            let mut events = poll(&mut ep, LONG);
            events.sort_by_key(|e| e.fd);
            let b_ready = PollEvent {
                fd: bfd,
                ready: Ready::READABLE,
            };
            let c_gone = PollEvent {
                fd: cfd,
                ready: Ready::INVALID,
            };
            assert_eq!(events, [b_ready, c_gone]);
            // What the loop does with INVALID: forget the fd.
            ep.modify(cfd, Interest::READABLE, Interest::NONE).unwrap();
            b.read_exact(&mut [0]).unwrap();
            assert_waits(&mut ep);
            pb.write_all(b"z").unwrap();
            assert_eq!(poll(&mut ep, LONG), [b_ready]);
        });
    }

    /// One-shot: a report is passed on (and disarms the fd); a rebuild in
    /// the same wait (an unrepairable stray report) leaves the disarmed fd
    /// out and re-adds an armed one; the loop's re-arm from
    /// `NONE.with_trigger(Oneshot)` then works; and after the loop's
    /// changes (a re-arm, a forget), a rebuild at the start of a wait
    /// finds the table right.
    #[test]
    fn oneshot_through_a_rebuild() {
        watchdog(|| {
            let mut ep = Epoll::new().unwrap();
            let (mut x, mut px) = UnixStream::pair().unwrap();
            let (mut y, mut py) = UnixStream::pair().unwrap();
            let (xfd, yfd) = (x.as_raw_fd(), y.as_raw_fd());
            ep.modify(xfd, Interest::NONE, READABLE_ONCE).unwrap();
            ep.modify(yfd, Interest::NONE, READABLE_ONCE).unwrap();
            // Registered behind the table's back, then closed with a dup
            // alive: its report cannot be repaired, and the wait that
            // reports it with x's rebuilds the instance.
            let (a, mut pa) = UnixStream::pair().unwrap();
            ep.ctl(libc::EPOLL_CTL_ADD, a.as_raw_fd(), libc::EPOLLIN as u32)
                .unwrap();
            let _a_alive = a.try_clone().unwrap();
            drop(a);
            pa.write_all(b"a").unwrap();
            px.write_all(b"x").unwrap();
            let x_ready = PollEvent {
                fd: xfd,
                ready: Ready::READABLE,
            };
            assert_eq!(poll(&mut ep, LONG), [x_ready]);
            assert!(!ep.rebuild, "rebuilt in that wait");
            assert_waits(&mut ep); // x left out, though still readable
            py.write_all(b"y").unwrap();
            let y_ready = PollEvent {
                fd: yfd,
                ready: Ready::READABLE,
            };
            assert_eq!(poll(&mut ep, LONG), [y_ready]); // armed: re-added

            ep.modify(xfd, DISARMED, READABLE_ONCE).unwrap();
            assert!(!ep.rebuild, "the table knew x was out: an ADD");
            assert_eq!(poll(&mut ep, LONG), [x_ready]);
            x.read_exact(&mut [0]).unwrap();
            y.read_exact(&mut [0]).unwrap();
            // The loop's changes after the reports: x forgotten, y re-armed.
            ep.modify(xfd, DISARMED, Interest::NONE).unwrap();
            ep.modify(yfd, DISARMED, READABLE_ONCE).unwrap();
            assert_waits(&mut ep);
            assert!(
                !ep.rebuild,
                "every change found the kernel as the table says"
            );
            // A rebuild at the start of a wait: y armed, x not watched.
            let _alive = remove_closed_with_dup_alive(&mut ep);
            px.write_all(b"x").unwrap();
            assert_waits(&mut ep);
            py.write_all(b"y").unwrap();
            assert_eq!(poll(&mut ep, LONG), [y_ready]);
        });
    }

    /// After `reinit` the instance is empty and the loop adds every fd
    /// again with `old == NONE`: the table starts over too.
    #[test]
    fn reinit_starts_the_table_over() {
        watchdog(|| {
            let mut ep = Epoll::new().unwrap();
            let (a, mut peer) = UnixStream::pair().unwrap();
            let fd = a.as_raw_fd();
            ep.modify(fd, Interest::NONE, Interest::READABLE).unwrap();
            ep.reinit().unwrap();
            assert_waits(&mut ep);
            ep.modify(fd, Interest::NONE, Interest::READABLE).unwrap();
            assert!(!ep.rebuild, "an ADD, as the table said");
            peer.write_all(b"x").unwrap();
            let a_ready = PollEvent {
                fd,
                ready: Ready::READABLE,
            };
            assert_eq!(poll(&mut ep, LONG), [a_ready]);
        });
    }

    /// The loop's internal fds (here, its wake fd) are ordinary
    /// registrations of the instance: a rebuild (owed after a `DEL` that
    /// missed a registration a dup keeps alive) adds them again, and a
    /// wake-up still ends a blocked wait.
    #[test]
    fn the_loops_internal_fds_survive_a_rebuild() {
        /// An fd the loop watches without owning it.
        struct Raw(RawFd);
        impl AsFd for Raw {
            fn as_fd(&self) -> BorrowedFd<'_> {
                // SAFETY: the test keeps the number open while the loop
                // registers it (it is closed before the removal, whose
                // `DEL` is meant to miss).
                unsafe { BorrowedFd::borrow_raw(self.0) }
            }
        }
        watchdog(|| {
            let mut lp: crate::Loop<u32> = crate::Loop::with_backend(Epoll::new().unwrap());
            let (_w, sender) = crate::Async::new(&mut lp, |lp, woken, _| {
                *woken += 1;
                lp.break_loop(crate::Break::All);
            })
            .unwrap();
            let (a, _peer) = UnixStream::pair().unwrap();
            let io = lp
                .io(Raw(a.as_raw_fd()), Interest::READABLE, |_, _, _| {})
                .unwrap();
            lp.flush_changes().unwrap();
            let _dup = a.try_clone().unwrap();
            drop(a); // closed behind the loop's back, its file alive
            lp.remove(io).unwrap(); // the DEL misses: a rebuild is owed
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                sender.send().unwrap();
            });
            let mut woken = 0;
            lp.run(crate::RunMode::Default, &mut woken).unwrap();
            t.join().unwrap();
            assert_eq!(woken, 1);
        });
    }
}
