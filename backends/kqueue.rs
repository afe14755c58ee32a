//! The `kqueue(2)` backend: macOS, iOS, FreeBSD, NetBSD, OpenBSD and
//! DragonFly BSD.
//!
//! A kqueue is a kernel object that holds *filters* ("knotes"): each one is
//! keyed by an identifier (here an fd) and a filter type (here
//! `EVFILT_READ` or `EVFILT_WRITE`), and reports an event when its
//! condition holds. A single system call, `kevent(2)`, both submits a list
//! of changes to the filters and waits for events.
//!
//! # How changes are batched
//!
//! As in libev, [`Backend::modify`] makes no system call: it appends change
//! records (`EV_ADD` or `EV_DELETE` for `EVFILT_READ` and `EVFILT_WRITE`,
//! computed from the difference between the old and the new interest) to a
//! changelist, and [`Backend::poll`] hands the whole changelist to the same
//! `kevent` call that waits. Consequences:
//!
//! - `modify` only fails for a negative fd. A change the kernel refuses
//!   (the fd is not open: `EBADF`; the file type cannot be watched, such as
//!   a tty on older macOS: `EINVAL`; ...) comes back from the next `poll`
//!   as an `EV_ERROR` record, which is reported as [`Ready::INVALID`] for
//!   that fd: the loop then stops the fd's watchers with [`Ready::ERROR`]
//!   and forgets the fd. Errors for a *removal* (`ENOENT`: the kernel
//!   already dropped the filter, because the fd was closed or because a
//!   one-shot filter fired; `EBADF`: the fd was closed) are ignored, which
//!   is what removal wanted anyway.
//! - `kevent` reports a refused change in the event list only if there is
//!   room for it there; otherwise the whole call fails and the rest of the
//!   changelist is not applied. The event list is therefore always at least
//!   as long as the changelist plus room for events.
//! - A `kevent` call whose changelist produced errors returns at once,
//!   without waiting. When the only records were ignored errors, the
//!   backend waits again (with the time left), so a removal of an
//!   already-gone filter never cuts a wait short.
//!
//! # Trigger modes
//!
//! - [`Trigger::Level`]: plain filters. An event is reported on every wait
//!   while the condition holds.
//! - [`Trigger::Edge`]: `EV_CLEAR`. The filter's state is reset when the
//!   event is retrieved, so it is reported again only when *new* data
//!   arrives (or new room opens up). **Read (or write) until the operation
//!   returns `WouldBlock`**: whatever is left in the buffer is not
//!   announced again.
//! - [`Trigger::Oneshot`]: `EV_ONESHOT`. The kernel deletes the filter
//!   after reporting it once, and the loop stops the watchers that received
//!   the event. **Start the watcher again to re-arm it**; until then the fd
//!   is silent. kqueue disarms each filter separately, whereas the loop
//!   (like epoll's `EPOLLONESHOT`) treats the whole fd as disarmed: so when
//!   one filter of a one-shot registration for both directions fires, this
//!   backend also deletes the other one. Re-arming adds the filters again.
//!
//! `EV_ADD` on a filter that already exists updates its parameters but not
//! its `EV_CLEAR` / `EV_ONESHOT` flags, so a change of trigger mode deletes
//! the filter and adds it afresh.
//!
//! # Events
//!
//! `EVFILT_READ` becomes [`Ready::READABLE`] and `EVFILT_WRITE`
//! [`Ready::WRITABLE`]. `EV_EOF` (the peer closed its end, or shut down the
//! direction) adds [`Ready::HUP`]: on the read filter the next read returns
//! EOF once the buffer is drained. If the filter also carries a socket
//! error in `fflags`, [`Ready::ERROR`] is added. Both filters of an fd may
//! report in one wait: the two are merged into one [`PollEvent`] for the
//! fd (the loop takes each fd at most once per poll).
//!
//! Regular files: kqueue would report `EVFILT_READ` on a regular file while
//! the file offset is before the end of the file, and `EVFILT_WRITE`
//! always. For one behaviour on every backend, a regular file or directory
//! is refused (`EPERM`) when first registered, as epoll refuses it: its
//! watchers receive [`Ready::ERROR`] and are stopped.
//!
//! # Timeouts and signals
//!
//! Timeouts are passed with nanosecond precision (no rounding needed), and
//! capped at [`MAX_WAIT_SECS`] seconds (some kernels reject or overflow on
//! larger values; waking up early is harmless). `None` waits forever. A
//! wait interrupted by a signal (`EINTR`) is resumed with the time left. As
//! `kevent(2)` documents, the changelist has then already been applied, so
//! it is not submitted a second time.
//!
//! # fork and exec
//!
//! The kqueue is created with `kqueue()` and marked close-on-exec
//! (`FD_CLOEXEC`; there is a short window between the two calls in which a
//! concurrent `exec` from another thread would inherit it). A kqueue is not
//! inherited across `fork(2)` at all: in the child, the descriptor number
//! is closed by the kernel, and may already have been reused by something
//! else the child opened. [`Backend::reinit`] (called by
//! [`Loop::reinit_after_fork`](crate::Loop::reinit_after_fork)) therefore
//! creates a new kqueue and closes the old descriptor only in the process
//! that created it (libev does the same); dropping the backend in a forked
//! child likewise leaves the descriptor number alone. The loop re-registers
//! every fd after `reinit`, and any changes still queued are dropped.
//!
//! # Testing on Linux
//!
//! The system calls are reached through `sys` (an alias set in
//! `backends/mod.rs`): `libc` on the platforms above, and with the
//! `emulated-kqueue` feature on Linux, an emulation of `kqueue(2)` and
//! `kevent(2)` on top of epoll (`backends/kqueue_emulated.rs`). With that
//! feature the backend is listed as a fourth one on Linux, and its tests,
//! these doctests and the conformance suite run against it
//! (`cargo test --features emulated-kqueue`). That checks this file's
//! logic against the man page's semantics, not against a real kernel.
//!
//! # Signals, children, wake-ups
//!
//! - Signals and wakers use the shared Unix hub (`backends/unix/`): the
//!   read end of this backend's wake fd (a pipe; an eventfd over the
//!   emulation) is registered with `EVFILT_READ` and the tag `UD_WAKE`,
//!   drained when it reports and never passed to the loop. Not
//!   `EVFILT_USER` or `EVFILT_SIGNAL`: the hub's signal handler must wake
//!   every loop that watches a signal, and `kevent(2)` is not
//!   async-signal-safe per POSIX, while `write(2)` is.
//! - A watched child is an `EVFILT_PROC` filter with `NOTE_EXIT` (ident:
//!   the pid, tag `UD_PROC`). When it fires, `waitpid(pid)` reaps that
//!   child and gives its status (blocking: it has exited, and the kernel
//!   may post the note a moment before the zombie can be reaped). A child
//!   that has already exited is reported too: FreeBSD fires the filter at
//!   once for a zombie, other kernels refuse it with `ESRCH`, and then the
//!   backend reaps it at once and makes the next wait return.
//! - The reaping goes through the process-wide table of watched children
//!   (`unix/children.rs`), which the other backends use too: the backend
//!   joins a child's entry in `watch_child` and claims the reap when its
//!   note fires, and the exit goes to every backend (loop) watching that
//!   pid, this one included, through its inbox; the wake fd is poked for
//!   each of the others. An exit that another backend reaped first comes
//!   through the inbox alike (the filter, if still there, is deleted). A
//!   child that someone else reaped (`ECHILD`) is reported as
//!   `ExitStatus::Unknown`.
//! - These registrations are made at once, each with its own `kevent`
//!   call with no room for events, so that a refusal is the hook's error
//!   (they are rare), rather than queued with the loop's changes.
//! - Only watched pids are reaped: never `waitpid(-1)`, unless the loop
//!   watches any child: then `SIGCHLD` is watched through the hub, and
//!   each arrival reaps every child that exited, through the table
//!   (`unix/children.rs`, "Any child").
//! - A signal to a watched child ([`Backend::signal_child`]) is a `kill(2)`
//!   under the table's lock, once the table shows the child unreaped (no
//!   pidfds here).
//!
//! # Path hints and clock steps
//!
//! - A watched path (a stat watcher's) is an `EVFILT_VNODE` filter with
//!   `EV_CLEAR` on a descriptor of its file and one on a descriptor of its
//!   directory (tag `UD_VNODE`; never reported to the loop): see
//!   `kqueue/vnode.rs`. A directory's filter cannot name what changed in
//!   it, so the backend `stat`s the watched paths in it and hints only at
//!   those that name another file now (a sibling's creation wakes no one),
//!   and watches the new file. Registered at once, like `EVFILT_PROC`.
//! - Wall-clock steps are not reported (`watch_clock_steps` is false): no
//!   kqueue filter tells of a set of the clock. The loop looks for steps
//!   itself, waking at least once a minute while periodic watchers run.
//!
//! # Allocation
//!
//! The changelist and the event list are reused across calls; nothing is
//! allocated in steady state. The event list grows (by doubling, up to
//! [`MAX_EVENTS`] events per wait, plus room for the change errors)
//! whenever a wait fills it completely.
//!
//! # Example
//!
//! ```
//! use evloop::{Interest, Loop, RunMode};
//! use std::io::{Read, Write};
//! use std::os::unix::net::UnixStream;
//!
//! # #[cfg(any(target_os = "macos", target_os = "ios", target_os = "freebsd",
//! #           target_os = "netbsd", target_os = "openbsd", target_os = "dragonfly",
//! #           all(feature = "emulated-kqueue", target_os = "linux")))]
//! # {
//! let mut lp: Loop<Vec<u8>> = Loop::builder().backend("kqueue").build()?;
//! assert_eq!(lp.backend_name(), "kqueue");
//! assert!(lp.capabilities().edge && lp.capabilities().oneshot);
//!
//! let (a, mut b) = UnixStream::pair()?;
//! a.set_nonblocking(true)?;
//! b.write_all(b"hello")?;
//! // Edge-triggered: drain until WouldBlock.
//! let edge = Interest::READABLE.with_trigger(evloop::Trigger::Edge);
//! lp.io(a, edge, |lp, got, ev| {
//!     let mut buf = [0u8; 2];
//!     loop {
//!         match ev.source.read(&mut buf) {
//!             Ok(n) => got.extend_from_slice(&buf[..n]),
//!             Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
//!             Err(e) => panic!("{e}"),
//!         }
//!     }
//!     lp.remove(ev.watcher).unwrap();
//! })?;
//! let mut got = Vec::new();
//! lp.run(RunMode::Default, &mut got)?;
//! assert_eq!(got, b"hello");
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![allow(unsafe_code)]

use std::io;
use std::mem::{self, ManuallyDrop};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

use super::kqueue_sys as sys;
use super::unix::children::{self, Member};
use super::unix::notifier::{Wakeup, SIGCHLD_BIT};
use super::unix::InternalFds;
use super::{Clock, Deadline};
use crate::backend::{Backend, Capabilities, NoticeService, Notices, PollEvent, PollStatus, Wake};
use crate::{Interest, Ready, Trigger};

/// Room for events in the first waits (on top of room for change errors).
const INITIAL_EVENTS: usize = 64;
/// The room for events stops growing at this many per wait.
pub const MAX_EVENTS: usize = 4096;
/// The longest single wait, in seconds (about 3 years). Old NetBSD and
/// OpenBSD kernels refuse longer timeouts with `EINVAL`, and XNU converts
/// the timeout to nanoseconds in 64 bits; the loop simply waits again.
pub const MAX_WAIT_SECS: u64 = 100_000_000;

/// `udata` tag of a change that registers a filter. Change records that
/// remove one carry `udata == 0`. The tag comes back unchanged in an
/// `EV_ERROR` record (which is how errors of removals are told apart from
/// errors of registrations, portably: FreeBSD overwrites `flags`), and in
/// every event the filter reports.
const UD_ADD: usize = 0x100;
/// In a registration's tag: the registration includes `EVFILT_READ`.
const UD_READ: usize = 0x1;
/// In a registration's tag: the registration includes `EVFILT_WRITE`.
const UD_WRITE: usize = 0x2;
/// In a registration's tag: the registration is one-shot (`EV_ONESHOT`).
const UD_ONESHOT: usize = 0x4;
/// The tag of the wake fd's `EVFILT_READ` filter (internal: never
/// reported to the loop).
const UD_WAKE: usize = 0x1000;
/// The type of a `kevent`'s `flags` (and of `EV_ADD`, `EV_DELETE`, ...):
/// 32 bits on NetBSD, 16 elsewhere.
#[cfg(target_os = "netbsd")]
type EvFlags = u32;
#[cfg(not(target_os = "netbsd"))]
type EvFlags = u16;

/// The tag of a watched child's `EVFILT_PROC` filter.
const UD_PROC: usize = 0x2000;
/// The tag of a watched path's (or its directory's) `EVFILT_VNODE` filter.
const UD_VNODE: usize = 0x4000;

mod vnode;

/// One of the two filters this backend uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Filter {
    Read,
    Write,
}

impl Filter {
    /// Whether `interest` asks for this filter.
    fn of(self, interest: Interest) -> bool {
        match self {
            Filter::Read => interest.is_readable(),
            Filter::Write => interest.is_writable(),
        }
    }

    fn other(self) -> Filter {
        match self {
            Filter::Read => Filter::Write,
            Filter::Write => Filter::Read,
        }
    }
}

/// What a change record does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// `EV_ADD | EV_ENABLE`, with the trigger mode's flag, tagged with the
    /// whole new interest.
    Add(Interest),
    /// `EV_DELETE`.
    Delete,
}

/// The kqueue backend (macOS, iOS, FreeBSD, NetBSD, OpenBSD, DragonFly).
///
/// ```
/// use evloop::backend::{Backend, PollEvent};
/// use evloop::backends::kqueue::Kqueue;
/// use evloop::{Interest, Ready};
/// use std::io::Write;
/// use std::os::fd::AsRawFd;
/// use std::os::unix::net::UnixStream;
/// use std::time::Duration;
///
/// let mut kq = Kqueue::new()?;
/// let (a, mut b) = UnixStream::pair()?;
/// // Queued only: submitted by the next poll.
/// kq.modify(a.as_raw_fd(), Interest::NONE, Interest::READABLE)?;
/// b.write_all(b"ping")?;
/// let mut events = Vec::new();
/// kq.poll(Some(Duration::from_secs(5)), &mut events)?;
/// assert_eq!(events, [PollEvent { fd: a.as_raw_fd(), ready: Ready::READABLE }]);
/// kq.modify(a.as_raw_fd(), Interest::READABLE, Interest::NONE)?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Kqueue {
    /// The kqueue. Closed on drop only by the process that created it (see
    /// the module documentation on fork).
    kq: ManuallyDrop<OwnedFd>,
    /// The process that created `kq`.
    owner: u32,
    /// Changes queued by `modify` (and by one-shot events), submitted by
    /// the next `poll` (or by `expose_changes`).
    changes: Vec<sys::kevent>,
    /// Registrations the kernel refused in `expose_changes`: reported
    /// invalid by the next `poll`, which then does not block.
    refused: Vec<RawFd>,
    /// `kevent`'s output buffer (its capacity is reused; its length is the
    /// number of records the last call returned).
    out: Vec<sys::kevent>,
    /// How many events one wait may return, besides change errors.
    room: usize,
    clock: Clock,
    /// Numbers the `poll` calls, for `reported`.
    wait_seq: u64,
    /// `reported[fd]`: the `wait_seq` of the last `poll` that reported the
    /// fd, and where in `events` (see [`Kqueue::report`]).
    reported: Vec<(u64, usize)>,
    /// The hub slot and wake fd: signals and the waker.
    wakeup: Wakeup,
    /// The watched children whose `EVFILT_PROC` filter is registered.
    procs: Vec<libc::pid_t>,
    /// Its place in the table of watched children, and the exits handed
    /// to it there (by its own reaps or another backend's), not yet taken.
    kids: Member,
    /// Any child has just come to be watched: the next `take_notices`
    /// reaps those that exited before, without waiting for a `SIGCHLD`.
    any_due: bool,
    /// The watched paths (`EVFILT_VNODE` filters).
    vnodes: vnode::Vnodes,
}

/// The kqueue as the notifier sees it: its filters are changed at once.
struct Kernel(RawFd);

impl InternalFds for Kernel {
    fn add(&mut self, fd: RawFd) -> io::Result<()> {
        let mut kev = zeroed_kevent();
        kev.ident = fd as sys::uintptr_t;
        kev.filter = sys::EVFILT_READ;
        kev.flags = sys::EV_ADD | sys::EV_ENABLE;
        kev.udata = UD_WAKE as _;
        apply_now(self.0, &kev)
    }

    fn remove(&mut self, fd: RawFd) {
        let mut kev = zeroed_kevent();
        kev.ident = fd as sys::uintptr_t;
        kev.filter = sys::EVFILT_READ;
        kev.flags = sys::EV_DELETE;
        // Fails only if it is not there (a new kqueue).
        let _ = apply_now(self.0, &kev);
    }
}

/// A change record for the `EVFILT_PROC` filter of `pid`.
fn proc_record(pid: libc::pid_t, flags: EvFlags) -> sys::kevent {
    let mut kev = zeroed_kevent();
    kev.ident = pid as sys::uintptr_t;
    kev.filter = sys::EVFILT_PROC;
    kev.flags = flags;
    kev.fflags = sys::NOTE_EXIT;
    kev.udata = UD_PROC as _;
    kev
}

fn zeroed_kevent() -> sys::kevent {
    // SAFETY: as in `record`: all-zero bytes are a valid `kevent`.
    unsafe { mem::zeroed() }
}

/// Applies one change now, with no room for events: a refusal is the
/// call's error.
fn apply_now(kq: RawFd, change: &sys::kevent) -> io::Result<()> {
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: one readable change record; no event list (0 records may be
    // written, so a null pointer is never written through); a valid
    // timeout that outlives the call.
    let n = unsafe { sys::kevent(kq, change, 1, ptr::null_mut(), 0, &zero) };
    if n < 0 {
        let err = io::Error::last_os_error();
        // EINTR: "all changes ... have been applied".
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
    Ok(())
}

impl Kqueue {
    /// Creates a kqueue (`kqueue()`, then `FD_CLOEXEC`).
    ///
    /// ```
    /// use evloop::backend::Backend;
    /// use evloop::{backends::kqueue::Kqueue, Loop};
    /// let kq = Kqueue::new().unwrap();
    /// assert!(kq.capabilities().edge && kq.capabilities().oneshot);
    /// let lp: Loop = Loop::with_backend(kq);
    /// assert_eq!(lp.backend_name(), "kqueue");
    /// ```
    pub fn new() -> io::Result<Kqueue> {
        Ok(Kqueue {
            kq: ManuallyDrop::new(create()?),
            owner: std::process::id(),
            changes: Vec::new(),
            refused: Vec::new(),
            out: Vec::with_capacity(INITIAL_EVENTS),
            room: INITIAL_EVENTS,
            clock: Clock::new(),
            wait_seq: 0,
            reported: Vec::new(),
            wakeup: Wakeup::new("kqueue"),
            procs: Vec::new(),
            kids: Member::default(),
            any_due: false,
            vnodes: vnode::Vnodes::default(),
        })
    }

    fn kernel(&self) -> Kernel {
        Kernel(self.kq.as_raw_fd())
    }

    /// A watched child's `NOTE_EXIT`: reaps it.
    fn proc_exited(&mut self, pid: libc::pid_t) {
        let Some(i) = self.procs.iter().position(|&p| p == pid) else {
            return;
        };
        self.procs.swap_remove(i);
        // The kernel deleted the filter when it reported the exit.
        self.reap(pid);
    }

    /// Reaps `pid`, which has exited, unless another backend watching it
    /// has or is doing so; the exit goes to every backend that watches it
    /// (this one's through its inbox).
    fn reap(&mut self, pid: libc::pid_t) {
        if self.kids.claim(pid) {
            // Blocking, outside the table's lock (see `claim`).
            let result = children::reap(pid, true);
            self.kids.publish(pid, result);
        }
    }

    /// Forgets the filter of `pid`, if still registered.
    fn drop_proc(&mut self, pid: libc::pid_t) {
        if let Some(i) = self.procs.iter().position(|&p| p == pid) {
            self.procs.swap_remove(i);
            let _ = apply_now(self.kq.as_raw_fd(), &proc_record(pid, sys::EV_DELETE));
        }
    }

    /// Queues one change record.
    fn push(&mut self, fd: RawFd, filter: Filter, action: Action) {
        self.changes.push(record(fd, filter, action));
    }

    /// Appends `ready` for `fd` to `events`, or ORs it into the fd's
    /// earlier report of this `poll`: both filters of an fd may fire in one
    /// wait, and the loop takes each fd at most once per poll (the
    /// `Backend` contract). O(1): `reported` remembers where each fd went.
    fn report(&mut self, events: &mut Vec<PollEvent>, fd: RawFd, ready: Ready) {
        let i = fd as usize;
        if i >= self.reported.len() {
            self.reported.resize(i + 1, (0, 0));
        }
        let (wait, at) = self.reported[i];
        match events.get_mut(at) {
            Some(earlier) if wait == self.wait_seq && earlier.fd == fd => earlier.ready |= ready,
            _ => {
                self.reported[i] = (self.wait_seq, events.len());
                events.push(PollEvent { fd, ready });
            }
        }
    }
}

impl Drop for Kqueue {
    fn drop(&mut self) {
        if std::process::id() == self.owner {
            // Closing the kqueue drops its filters; deleting the vnode ones
            // first (a few calls, only with watched paths) lets an
            // emulation release what feeds them.
            self.vnodes.release(self.kq.as_raw_fd());
            // SAFETY: `kq` is never used again: this is the destructor.
            unsafe { ManuallyDrop::drop(&mut self.kq) }
        }
        // In a forked child the kernel has already closed the kqueue, and
        // the number may belong to another file now: leave it alone.
    }
}

/// `kqueue()` with `FD_CLOEXEC`, owned.
fn create() -> io::Result<OwnedFd> {
    // SAFETY: plain system call without arguments.
    let fd = unsafe { sys::kqueue() };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by kqueue(), so it is open and nothing
    // else owns it; from here on it is closed on every path.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: fcntl(F_SETFD) on an open fd we own, with an int argument.
    if unsafe { libc::fcntl(owned.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(owned)
}

/// The `udata` tag of a registration with interest `new`.
fn tag(new: Interest) -> usize {
    let mut t = UD_ADD;
    if new.is_readable() {
        t |= UD_READ;
    }
    if new.is_writable() {
        t |= UD_WRITE;
    }
    if new.trigger() == Trigger::Oneshot {
        t |= UD_ONESHOT;
    }
    t
}

/// A change record.
fn record(fd: RawFd, filter: Filter, action: Action) -> sys::kevent {
    // `kevent` is a plain C struct of integers and a raw pointer (plus, on
    // FreeBSD 12 and later, an array of integers): all-zero bytes are a
    // valid value (a null `udata`). Zeroing also clears the fields that
    // differ between systems, which is why no struct literal is used.
    let mut kev = zeroed_kevent();
    kev.ident = fd as sys::uintptr_t;
    kev.filter = match filter {
        Filter::Read => sys::EVFILT_READ,
        Filter::Write => sys::EVFILT_WRITE,
    };
    let udata = match action {
        Action::Delete => {
            kev.flags = sys::EV_DELETE;
            0
        }
        Action::Add(new) => {
            kev.flags = sys::EV_ADD
                | sys::EV_ENABLE
                | match new.trigger() {
                    Trigger::Level => 0,
                    Trigger::Edge => sys::EV_CLEAR,
                    Trigger::Oneshot => sys::EV_ONESHOT,
                };
            tag(new)
        }
    };
    // An integer tag, never dereferenced (`void *` on most systems).
    kev.udata = udata as _;
    kev
}

/// The change records that turn registration `old` into `new` for one fd,
/// in order (at most one removal and one registration per filter).
fn plan(old: Interest, new: Interest) -> impl Iterator<Item = (Filter, Action)> {
    // An `old` of `NONE` with the one-shot trigger means that an event
    // disarmed the fd, and the kernel holds no filter for it any more (the
    // one that fired was deleted by the kernel, its sibling by `poll`): as
    // for a new fd, the filters of `new` are added, and nothing is deleted.
    // EV_ADD on an existing filter does not change EV_CLEAR / EV_ONESHOT.
    let same_mode = new.is_empty() || old.trigger() == new.trigger();
    // One-shot filters carry the whole registration in their tag (see
    // `poll`): keep the tags of the remaining filter up to date too.
    let retag = new.trigger() == Trigger::Oneshot;
    [Filter::Read, Filter::Write]
        .into_iter()
        .flat_map(move |f| {
            let (held, wanted) = (f.of(old), f.of(new));
            let delete = held && (!wanted || !same_mode);
            let add = wanted && (!held || !same_mode || retag);
            let del = delete.then_some((f, Action::Delete));
            let add = add.then_some((f, Action::Add(new)));
            del.into_iter().chain(add)
        })
}

/// A timeout as a `timespec`, capped at [`MAX_WAIT_SECS`].
fn timespec(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: d.as_secs().min(MAX_WAIT_SECS) as libc::time_t,
        tv_nsec: d.subsec_nanos() as _,
    }
}

/// This backend, for the platform's list (backends/mod.rs).
pub(super) const OFFERED: super::Offered = super::Offered {
    name: "kqueue",
    open: || Ok(Box::new(Kqueue::new()?)),
};

impl Kqueue {
    fn submit_changes(&mut self) -> io::Result<()> {
        let nchanges = self.changes.len();
        if nchanges == 0 {
            return Ok(());
        }
        if nchanges > libc::c_int::MAX as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("kqueue: {nchanges} queued changes are too many for one kevent call"),
            ));
        }
        for c in &mut self.changes {
            c.flags |= sys::EV_RECEIPT;
        }
        self.out.clear();
        self.out.reserve(nchanges);
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `kq` is an open kqueue owned by `self`; `changes` holds
        // `nchanges` initialised records that the kernel only reads; `out`
        // has capacity for `nchanges` records (one receipt per change),
        // which the kernel may write; `zero` outlives the call.
        let n = unsafe {
            sys::kevent(
                self.kq.as_raw_fd(),
                self.changes.as_ptr(),
                nchanges as _,
                self.out.as_mut_ptr(),
                nchanges as _,
                &zero,
            )
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                // Nothing is known to be applied: the changes stay queued
                // for the next poll, as they were.
                for c in &mut self.changes {
                    c.flags &= !sys::EV_RECEIPT;
                }
                return Err(err);
            }
            // kevent(2): "All changes contained in the changelist are
            // applied before returning this error" (their receipts lost:
            // a refusal among them shows as the fd's silence, as a removal
            // behind the loop's back would).
            self.changes.clear();
            return Ok(());
        }
        self.changes.clear();
        // SAFETY: the kernel initialised the first `n` records, and
        // `n <= nchanges <= capacity`; `kevent` is `Copy` (no drop).
        unsafe { self.out.set_len(n as usize) };
        for ev in &self.out {
            let udata = ev.udata as usize;
            if ev.flags & sys::EV_ERROR != 0 && ev.data != 0 && udata & UD_ADD != 0 {
                let fd = ev.ident as RawFd;
                if !self.refused.contains(&fd) {
                    self.refused.push(fd);
                }
            }
        }
        Ok(())
    }
}

impl Backend for Kqueue {
    fn name(&self) -> &'static str {
        "kqueue"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            edge: true,
            oneshot: true,
            virtual_fds: false,
            max_fd: None,
            hangup: crate::backend::Hangup::Always,
            closed_fd: crate::backend::ClosedFd::InvalidAfterChange,
            level: crate::backend::Level::Native,
            completion: false,
        }
    }

    fn modify(&mut self, fd: RawFd, old: Interest, new: Interest) -> io::Result<()> {
        if fd < 0 {
            return if new.is_empty() {
                Ok(())
            } else {
                Err(io::Error::from_raw_os_error(libc::EBADF))
            };
        }
        if !self.refused.is_empty() {
            // A refusal `expose_changes` kept: this change supersedes it
            // (a new registration is tried, and reports, on its own).
            self.refused.retain(|&f| f != fd);
        }
        if !new.is_empty() && old == Interest::NONE {
            // kqueue would accept a regular file and report it always
            // readable; refuse it as every other backend does (EPERM).
            super::util::refuse_files("kqueue", fd)?;
        }
        for (filter, action) in plan(old, new) {
            self.push(fd, filter, action);
        }
        Ok(())
    }

    /// The kqueue: readable while a filter has an event to report (a
    /// watched fd is ready, or the wake fd: a signal, a wake-up), once
    /// the changelist is submitted (`expose_changes`).
    fn pollable_fd(&self) -> io::Result<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        Ok(self.kq.as_fd())
    }

    /// Submits the changelist now, each record with `EV_RECEIPT`: the
    /// kernel answers every change with an `EV_ERROR` record (`data` 0
    /// when it succeeded) and returns without collecting an event, so
    /// nothing is drained from the kqueue. A refused registration is kept
    /// for the next `poll`, which reports the fd invalid (as it would have
    /// had it submitted the change itself); a refused removal is ignored,
    /// as there.
    fn expose_changes(&mut self) -> io::Result<bool> {
        self.submit_changes()?;
        // A refusal kept for the next poll, an exit found outside a wait.
        Ok(!self.refused.is_empty() || self.kids.has_mail())
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        // Exits found outside a wait (a child gone before `watch_child`)
        // are news: do not block.
        let timeout = if !self.kids.has_mail() {
            timeout
        } else {
            Some(Duration::ZERO)
        };
        self.wait_seq += 1;
        // Registrations refused when `expose_changes` submitted them: news
        // too.
        let timeout = if self.refused.is_empty() {
            timeout
        } else {
            for fd in std::mem::take(&mut self.refused) {
                self.report(events, fd, Ready::INVALID);
            }
            Some(Duration::ZERO)
        };
        let deadline = Deadline::new(timeout);
        loop {
            let nchanges = self.changes.len();
            // Room for one error record per change, plus room for events.
            let nevents = nchanges + self.room;
            if nevents > libc::c_int::MAX as usize {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("kqueue: {nchanges} queued changes are too many for one kevent call"),
                ));
            }
            self.out.clear();
            self.out.reserve(nevents);
            let ts = deadline.remaining().map(timespec);
            let ts_ptr = ts
                .as_ref()
                .map_or(ptr::null(), |t| t as *const libc::timespec);
            // SAFETY: `kq` is an open kqueue owned by `self`; `changes`
            // holds `nchanges` initialised records that the kernel only
            // reads; `out` has capacity for at least `nevents` records,
            // which the kernel may write; `ts_ptr` is null or points to
            // `ts`, which outlives the call.
            let n = unsafe {
                sys::kevent(
                    self.kq.as_raw_fd(),
                    self.changes.as_ptr(),
                    nchanges as _,
                    self.out.as_mut_ptr(),
                    nevents as _,
                    ts_ptr,
                )
            };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    // kevent(2): "All changes contained in the changelist
                    // are applied before returning this error."
                    self.changes.clear();
                    continue;
                }
                // Nothing is known to be applied: the changes stay queued
                // (re-submitting them is harmless: adds are idempotent and
                // failed removals are ignored).
                return Err(err);
            }
            let n = n as usize;
            self.changes.clear();
            // SAFETY: the kernel initialised the first `n` records, and
            // `n <= nevents <= capacity`; `kevent` is `Copy` (no drop).
            unsafe { self.out.set_len(n) };

            let before = events.len();
            let mut ignored = false;
            let mut noticed = false;
            for i in 0..n {
                let ev = self.out[i];
                let fd = ev.ident as RawFd;
                let udata = ev.udata as usize;
                if ev.flags & sys::EV_ERROR != 0 {
                    if ev.data == 0 {
                        // A receipt, not an error (EV_RECEIPT is not used).
                        continue;
                    }
                    if udata & UD_ADD == 0 {
                        // A removal of a filter the kernel no longer has.
                        ignored = true;
                        continue;
                    }
                    tracing::debug!(
                        fd,
                        err = %io::Error::from_raw_os_error(ev.data as i32),
                        "kqueue refused a registration; reporting the fd invalid"
                    );
                    // Both filters of an fd usually fail together: one report.
                    self.report(events, fd, Ready::INVALID);
                    continue;
                }
                if udata == UD_WAKE {
                    self.wakeup.drain();
                    noticed = true;
                    continue;
                }
                if ev.filter == sys::EVFILT_VNODE {
                    if udata == UD_VNODE {
                        let kq = self.kq.as_raw_fd();
                        self.vnodes.fired(kq, ev.ident as RawFd, ev.fflags);
                        noticed = true;
                    }
                    continue;
                }
                if ev.filter == sys::EVFILT_PROC {
                    if ev.fflags & sys::NOTE_EXIT != 0 {
                        self.proc_exited(ev.ident as libc::pid_t);
                        noticed = true;
                    }
                    continue;
                }
                let filter = if ev.filter == sys::EVFILT_READ {
                    Filter::Read
                } else if ev.filter == sys::EVFILT_WRITE {
                    Filter::Write
                } else {
                    continue;
                };
                let mut ready = match filter {
                    Filter::Read => Ready::READABLE,
                    Filter::Write => Ready::WRITABLE,
                };
                if ev.flags & sys::EV_EOF != 0 {
                    ready |= Ready::HUP;
                    if ev.fflags != 0 {
                        // The socket error (an errno) rides in fflags.
                        ready |= Ready::ERROR;
                    }
                }
                self.report(events, fd, ready);
                if udata & (UD_ADD | UD_ONESHOT) == UD_ADD | UD_ONESHOT {
                    // The kernel deleted this one-shot filter when reporting
                    // it; the loop now considers the whole fd disarmed, so
                    // delete the sibling filter too (if the sibling fired in
                    // this same wait, the removal fails with ENOENT, which
                    // is ignored).
                    let sibling = filter.other();
                    let bit = match sibling {
                        Filter::Read => UD_READ,
                        Filter::Write => UD_WRITE,
                    };
                    if udata & bit != 0 {
                        self.push(fd, sibling, Action::Delete);
                    }
                }
            }

            if n == nevents && self.room < MAX_EVENTS {
                // Full: more may be waiting. Take more per wait from now on
                // (the buffer itself grows at the next call).
                self.room = (self.room * 2).min(MAX_EVENTS);
            }
            if events.len() == before && ignored && !noticed {
                // The call returned early only because of errors we ignore
                // (kevent neither waits nor collects events when a change
                // fails): the changes are applied, so wait again for the
                // time left (even none: that call still collects what is
                // ready). The changelist is empty now, so this happens at
                // most once per poll.
                continue;
            }
            return Ok(PollStatus::Done);
        }
    }

    fn now(&mut self) -> Duration {
        self.clock.now()
    }

    fn reinit(&mut self) -> io::Result<()> {
        let fresh = create()?;
        let old = mem::replace(&mut self.kq, ManuallyDrop::new(fresh));
        let me = std::process::id();
        if me == self.owner {
            // Not a forked child (or a kernel that kept the descriptor):
            // the old kqueue is ours to close.
            drop(ManuallyDrop::into_inner(old));
        }
        self.owner = me;
        // They were meant for the old kqueue; the loop re-registers every fd.
        self.changes.clear();
        self.refused.clear();
        // The children are the parent's; their filters went with the old
        // kqueue.
        self.procs.clear();
        self.kids.leave_all();
        self.any_due = false;
        // The paths stay watched: their descriptors are inherited, their
        // filters went with the old kqueue.
        self.vnodes.reinit(self.kq.as_raw_fd());
        let mut kernel = self.kernel();
        self.wakeup.reinit(&mut kernel)
    }

    fn notices(&mut self) -> Option<&mut dyn NoticeService> {
        Some(self)
    }
}

impl NoticeService for Kqueue {
    fn check_fd(&mut self, fd: RawFd) -> io::Result<()> {
        super::util::check_pollable("kqueue", fd)
    }

    fn watch_signal(&mut self, signal: i32, _fds: &mut dyn InternalFds) -> io::Result<()> {
        let mut kernel = self.kernel();
        self.wakeup.watch_signal(signal, &mut kernel)
    }

    fn unwatch_signal(&mut self, signal: i32) {
        self.wakeup.unwatch_signal(signal);
    }

    fn watch_any_child(&mut self, _fds: &mut dyn InternalFds) -> io::Result<()> {
        if self.kids.watches_any() {
            return Ok(());
        }
        let mut kernel = self.kernel();
        let slot = self.wakeup.ensure(&mut kernel)?;
        self.wakeup.watch_sigchld(&mut kernel)?;
        self.kids.join_any(slot);
        // Children that exited before: reaped by the next `take_notices`,
        // after a wait that must not block.
        self.any_due = true;
        self.wakeup.poke();
        Ok(())
    }

    fn unwatch_any_child(&mut self) {
        self.kids.leave_any();
        self.any_due = false;
        self.wakeup.unwatch_sigchld();
    }

    /// No pidfds here: `kill(2)` under the table's lock, after checking
    /// that the child is unreaped (`unix/children.rs`).
    fn signal_child(&mut self, pid: u32, signal: i32) -> io::Result<()> {
        let id = libc::pid_t::try_from(pid)
            .map_err(|_| io::Error::new(io::ErrorKind::NotFound, "no such pid"))?;
        self.kids.signal(id, signal)
    }

    fn spawn_child(
        &mut self,
        command: &mut std::process::Command,
        fds: &mut dyn InternalFds,
    ) -> io::Result<crate::Spawned> {
        let mut kernel = self.kernel();
        let slot = self.wakeup.ensure(&mut kernel)?;
        let mut child = self.kids.spawn(command, slot)?;
        let pid = child.id();
        if let Err(err) = self.watch_child(pid, fds) {
            self.unwatch_child(pid, fds);
            let _ = child.kill();
            let _ = child.wait();
            return Err(err);
        }
        Ok(crate::Spawned::from_std(child))
    }

    fn watch_child(&mut self, pid: u32, _fds: &mut dyn InternalFds) -> io::Result<()> {
        if self.procs.iter().any(|&p| p as u32 == pid) {
            return Ok(());
        }
        // Whoever reaps the child, this backend or another loop's, pokes
        // the wake fd: it must be in the kqueue.
        let mut kernel = self.kernel();
        let slot = self.wakeup.ensure(&mut kernel)?;
        let joined = self.kids.join("kqueue", pid, slot)?;
        let pid = joined.pid;
        if joined.reaping {
            // Another backend is reaping it: its exit comes without a filter.
            return Ok(());
        }
        let add = proc_record(pid, sys::EV_ADD | sys::EV_ENABLE);
        match apply_now(self.kq.as_raw_fd(), &add) {
            Ok(()) => self.procs.push(pid),
            // A zombie, on kernels that do not attach to one (or a child
            // reaped since the check): it has exited, so reap it now
            // (`poll` then does not block).
            Err(err) if err.raw_os_error() == Some(libc::ESRCH) => self.reap(pid),
            Err(err) => {
                self.kids.leave(pid);
                return Err(io::Error::new(
                    err.kind(),
                    format!(
                        "the kqueue backend cannot watch pid {pid}: EVFILT_PROC refused ({err})"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn unwatch_child(&mut self, pid: u32, _fds: &mut dyn InternalFds) {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return;
        };
        // An exit reaped but not yet taken is dropped: the loop no longer
        // asks.
        self.kids.leave(pid);
        self.drop_proc(pid);
    }

    fn waker(&mut self, _fds: &mut dyn InternalFds) -> io::Result<Arc<dyn Wake>> {
        let mut kernel = self.kernel();
        self.wakeup.waker(&mut kernel)
    }

    fn take_notices(&mut self, notices: &mut Notices, _fds: &mut dyn InternalFds) {
        let bits = self.wakeup.take(notices);
        let any_due = std::mem::take(&mut self.any_due);
        if self.kids.watches_any() && (any_due || bits & SIGCHLD_BIT != 0) {
            self.kids.reap_any();
        }
        let from = notices.exits.len();
        self.kids.take(&mut notices.exits);
        for i in from..notices.exits.len() {
            // Reaped by another backend first: its note may not have come.
            self.drop_proc(notices.exits[i].pid as libc::pid_t);
        }
        self.vnodes.take(&mut notices.paths);
    }

    /// Always false: no kqueue filter reports a step of the wall clock
    /// (`EVFILT_TIMER` with `NOTE_ABSTIME` is not documented to fire or be
    /// cancelled when the clock is set; macOS has nothing, FreeBSD a
    /// timerfd only from 14.0, which a binary for 13 cannot call). The
    /// loop looks for steps itself, waking at least once a minute.
    fn watch_clock_steps(&mut self, _fds: &mut dyn InternalFds) -> bool {
        false
    }

    fn watch_path(
        &mut self,
        path: &Path,
        token: u64,
        _fds: &mut dyn InternalFds,
    ) -> io::Result<()> {
        self.vnodes.watch(self.kq.as_raw_fd(), path, token)
    }

    fn unwatch_path(&mut self, token: u64, _fds: &mut dyn InternalFds) {
        self.vnodes.unwatch(self.kq.as_raw_fd(), token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    fn plan_of(old: Interest, new: Interest) -> Vec<(Filter, Action)> {
        plan(old, new).collect()
    }

    #[test]
    fn plans() {
        use Action::{Add, Delete};
        use Filter::{Read, Write};
        let r = Interest::READABLE;
        let w = Interest::WRITABLE;
        let rw = Interest::BOTH;
        let disarmed = Interest::NONE.with_trigger(Trigger::Oneshot);
        assert_eq!(plan_of(Interest::NONE, r), [(Read, Add(r))]);
        assert_eq!(plan_of(r, rw), [(Write, Add(rw))]);
        assert_eq!(plan_of(rw, w), [(Read, Delete)]);
        assert_eq!(
            plan_of(rw, Interest::NONE),
            [(Read, Delete), (Write, Delete)]
        );
        let re = r.with_trigger(Trigger::Edge);
        assert_eq!(plan_of(r, re), [(Read, Delete), (Read, Add(re))]);
        let ro = r.with_trigger(Trigger::Oneshot);
        let rwo = rw.with_trigger(Trigger::Oneshot);
        assert_eq!(plan_of(ro, rwo), [(Read, Add(rwo)), (Write, Add(rwo))]);
        assert_eq!(plan_of(disarmed, ro), [(Read, Add(ro))]);
        assert_eq!(plan_of(disarmed, Interest::NONE), []);
        assert_eq!(plan_of(disarmed, r), [(Read, Add(r))]);
        assert_eq!(plan_of(ro, Interest::NONE), [(Read, Delete)]);
    }

    fn pair() -> (UnixStream, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        (a, b)
    }

    fn wait(kq: &mut Kqueue, ms: u64) -> Vec<PollEvent> {
        let mut events = Vec::new();
        kq.poll(Some(Duration::from_millis(ms)), &mut events)
            .unwrap();
        events
    }

    #[test]
    fn level_read_and_write() {
        let mut kq = Kqueue::new().unwrap();
        let (a, mut b) = pair();
        let fd = a.as_raw_fd();
        kq.modify(fd, Interest::NONE, Interest::BOTH).unwrap();
        let ev = wait(&mut kq, 100);
        assert_eq!(
            ev,
            [PollEvent {
                fd,
                ready: Ready::WRITABLE
            }]
        );
        kq.modify(fd, Interest::BOTH, Interest::READABLE).unwrap();
        assert!(wait(&mut kq, 0).is_empty());
        b.write_all(b"x").unwrap();
        let ev = wait(&mut kq, 1000);
        assert_eq!(
            ev,
            [PollEvent {
                fd,
                ready: Ready::READABLE
            }]
        );
        // Level: reported again while unread.
        assert_eq!(wait(&mut kq, 0), ev);
    }

    #[test]
    fn edge_reports_once() {
        let mut kq = Kqueue::new().unwrap();
        let (a, mut b) = pair();
        let fd = a.as_raw_fd();
        let edge = Interest::READABLE.with_trigger(Trigger::Edge);
        kq.modify(fd, Interest::NONE, edge).unwrap();
        b.write_all(b"x").unwrap();
        assert_eq!(wait(&mut kq, 1000).len(), 1);
        assert!(wait(&mut kq, 0).is_empty());
        b.write_all(b"y").unwrap();
        assert_eq!(wait(&mut kq, 1000).len(), 1);
    }

    #[test]
    fn oneshot_disarms_the_whole_fd_and_rearms() {
        let mut kq = Kqueue::new().unwrap();
        let (a, mut b) = pair();
        let fd = a.as_raw_fd();
        let rwo = Interest::BOTH.with_trigger(Trigger::Oneshot);
        let disarmed = Interest::NONE.with_trigger(Trigger::Oneshot);
        b.write_all(b"x").unwrap();
        kq.modify(fd, Interest::NONE, rwo).unwrap();
        let first = wait(&mut kq, 1000);
        assert!(!first.is_empty());
        // Whatever fired, nothing more comes until re-armed.
        assert!(wait(&mut kq, 0).is_empty());
        kq.modify(fd, disarmed, rwo).unwrap();
        assert!(!wait(&mut kq, 1000).is_empty());
        kq.modify(fd, disarmed, Interest::NONE).unwrap();
        assert!(wait(&mut kq, 0).is_empty());
        let mut buf = [0; 4];
        let _ = (&a).read(&mut buf);
    }

    #[test]
    fn close_on_exec() {
        let kq = Kqueue::new().unwrap();
        // SAFETY: F_GETFD on the open kqueue.
        let flags = unsafe { libc::fcntl(kq.kq.as_raw_fd(), libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
    }

    #[test]
    fn oneshot_deletes_the_sibling_filter() {
        let mut kq = Kqueue::new().unwrap();
        let (a, mut b) = pair();
        let fd = a.as_raw_fd();
        let rwo = Interest::BOTH.with_trigger(Trigger::Oneshot);
        kq.modify(fd, Interest::NONE, rwo).unwrap();
        // Only the write filter fires (nothing to read yet)...
        let ev = wait(&mut kq, 1000);
        assert_eq!(
            ev,
            [PollEvent {
                fd,
                ready: Ready::WRITABLE
            }]
        );
        // ...and the fd is disarmed as a whole: new data is not reported
        // by the read filter, which the backend deleted with it.
        b.write_all(b"x").unwrap();
        assert!(wait(&mut kq, 50).is_empty());
    }

    #[test]
    fn more_refused_changes_than_room_for_events() {
        let mut kq = Kqueue::new().unwrap();
        // Not open: every registration is refused, each with an error
        // record, which kevent writes only while the eventlist has room.
        let fds: Vec<RawFd> = (0..3 * INITIAL_EVENTS as RawFd)
            .map(|i| 900_000 + i)
            .collect();
        for &fd in &fds {
            kq.modify(fd, Interest::NONE, Interest::READABLE).unwrap();
        }
        let ev = wait(&mut kq, 1000);
        let invalid: Vec<RawFd> = ev
            .iter()
            .filter(|e| e.ready == Ready::INVALID)
            .map(|e| e.fd)
            .collect();
        assert_eq!(invalid, fds);
    }

    #[test]
    fn closed_fd_is_invalid() {
        let mut kq = Kqueue::new().unwrap();
        // Not open (a closed socket's number could be reused at once by a
        // test running in parallel).
        let fd = 999_999;
        kq.modify(fd, Interest::NONE, Interest::BOTH).unwrap();
        let ev = wait(&mut kq, 1000);
        assert_eq!(
            ev,
            [PollEvent {
                fd,
                ready: Ready::INVALID
            }]
        );
        // The loop then forgets it: the failed removals are ignored.
        kq.modify(fd, Interest::BOTH, Interest::NONE).unwrap();
        assert!(wait(&mut kq, 10).is_empty());
    }

    #[test]
    fn hangup() {
        let mut kq = Kqueue::new().unwrap();
        let (a, b) = pair();
        let fd = a.as_raw_fd();
        kq.modify(fd, Interest::NONE, Interest::READABLE).unwrap();
        drop(b);
        let ev = wait(&mut kq, 1000);
        assert_eq!(ev.len(), 1);
        assert!(ev[0].ready.contains(Ready::READABLE | Ready::HUP));
    }

    #[test]
    fn reinit_drops_queued_changes() {
        let mut kq = Kqueue::new().unwrap();
        let (a, _b) = pair();
        kq.modify(a.as_raw_fd(), Interest::NONE, Interest::WRITABLE)
            .unwrap();
        Backend::reinit(&mut kq).unwrap();
        assert!(wait(&mut kq, 0).is_empty());
        kq.modify(a.as_raw_fd(), Interest::NONE, Interest::WRITABLE)
            .unwrap();
        assert_eq!(wait(&mut kq, 100).len(), 1);
    }

    #[test]
    fn timeout_and_clock() {
        let mut kq = Kqueue::new().unwrap();
        let t0 = kq.now();
        assert!(wait(&mut kq, 20).is_empty());
        assert!(kq.now() - t0 >= Duration::from_millis(20));
        let ts = timespec(Duration::new(u64::MAX, 5));
        assert_eq!(ts.tv_sec as u64, MAX_WAIT_SECS);
        assert_eq!(ts.tv_nsec, 5);
    }

    /// Path hints: watchers of one file and the files of one directory
    /// share descriptors (and filters); the last unwatch closes them. No
    /// clock-step reports on kqueue.
    #[test]
    fn path_hints_share_descriptors_and_close_them() {
        let mut kq = Kqueue::new().unwrap();
        let fds = &mut Vec::new();
        assert!(!kq.watch_clock_steps(fds));
        let dir = std::env::temp_dir().join(format!(
            "evloop-kqueue-vnodes-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::write(&a, "a").unwrap();
        std::fs::write(&b, "b").unwrap();
        kq.watch_path(&a, 1, fds).unwrap();
        kq.watch_path(&a, 2, fds).unwrap();
        kq.watch_path(&b, 3, fds).unwrap();
        assert_eq!(kq.vnodes.open_nodes(), 3, "a, b and their directory");
        std::fs::write(&b, "bb").unwrap();
        assert_eq!(wait(&mut kq, 1000), [], "a hint is not an io event");
        let mut notices = Notices::default();
        kq.take_notices(&mut notices, fds);
        assert_eq!(notices.paths, [3]);
        kq.unwatch_path(1, fds);
        assert_eq!(kq.vnodes.open_nodes(), 3);
        kq.unwatch_path(2, fds);
        assert_eq!(kq.vnodes.open_nodes(), 2, "a's went");
        kq.unwatch_path(3, fds);
        assert_eq!(kq.vnodes.open_nodes(), 0);
        std::fs::write(&b, "unseen").unwrap();
        assert_eq!(wait(&mut kq, 20), []);
        let mut notices = Notices::default();
        kq.take_notices(&mut notices, fds);
        assert!(notices.paths.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
