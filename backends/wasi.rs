//! The `wasi` backend: `poll_oneoff` of WASI preview 1, on `wasm32-wasip1`
//! (wasmtime, WasmEdge, wasmer and the like).
//!
//! - A WASI guest watches the descriptors its runtime gives it: stdin,
//!   stdout and stderr, TCP listeners preopened by the runtime
//!   (`wasmtime run -S preview2=n -S tcplisten=ADDR`; see
//!   [`preopened_listeners`]) and the connections accepted on them
//!   (`sock_accept`, std's `TcpListener::accept`). It cannot create
//!   sockets, pipes or socketpairs of its own.
//! - `poll_oneoff` takes the whole set at each call, as `poll(2)` does: the
//!   backend keeps one entry per fd (an fd → entry index, so that changes
//!   are O(1)) and writes the subscriptions into a buffer it reuses, one
//!   per direction, plus a clock subscription for the timeout. Nothing is
//!   allocated in steady state.
//! - Level-triggered only: the loop refuses edge-triggered watchers here
//!   and emulates one-shot ones.
//! - Timers never fire early: the clock subscription is relative, on the
//!   monotonic clock that `Instant` (and so [`Clock`]) reads; a wait that
//!   a runtime ends before the deadline is resumed for the time left.
//! - When a wait reports every fd subscription of several, each is asked
//!   again on its own, with a clock that has already expired: wasmtime's
//!   legacy WASIp1 (the one with preopened sockets) completes every
//!   subscription whenever any fd is ready, and a full socket reported
//!   writable, or a quiet one readable, would break the loop's level
//!   contract (the conformance kit checks it). A runtime that reports
//!   only what is ready rarely reports them all, and then pays one call
//!   per fd.
//! - An fd that is not open is reported as [`Ready::INVALID`] (the event's
//!   `EBADF`); another per-fd error (a reset) as `ERROR | HUP | READABLE |
//!   WRITABLE`; the
//!   event's hang-up flag as `HUP | READABLE`. Regular files and
//!   directories are refused, as on every backend.
//! - What WASI does not have, the backend's notice service refuses with
//!   an error that names WASI and says why: signals, child processes,
//!   path hints (stat watchers poll instead), a pollable fd, and `fork`.
//!   Async watchers work: the only thread is the loop's, so every send is
//!   made before the loop's next wait, which then does not block.
//! - With nothing to wait for (no fd, no timeout) the poll reports
//!   [`PollStatus::Stalled`]: nothing could ever end such a wait, since a
//!   WASI guest has no signals and no other threads.
#![allow(unsafe_code)]

use std::io;
use std::net::TcpListener;
use std::os::fd::FromRawFd;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{Clock, Deadline};
use crate::backend::{
    Backend, Capabilities, ClosedFd, Hangup, InternalFds, Level, NoticeService, PollEvent,
    PollStatus, Spawned, Wake,
};
use crate::{Interest, RawFd, Ready, Trigger};

/// The WASI preview 1 ABI: the two calls and the layouts they take
/// (`wasi_snapshot_preview1.witx`).
mod sys {
    /// `subscription`: 48 bytes; `tag` selects the union (`u`).
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct Subscription {
        pub userdata: u64,
        pub tag: u8,
        pub u: SubscriptionU,
    }

    /// `subscription_clock` (`id`, `timeout`, `precision`, `flags`), or
    /// `subscription_fd_readwrite` (the fd in `id_or_fd`, the rest unused).
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct SubscriptionU {
        pub id_or_fd: u32,
        pub timeout: u64,
        pub precision: u64,
        pub flags: u16,
    }

    /// `event`: 32 bytes.
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct Event {
        pub userdata: u64,
        pub error: u16,
        pub kind: u8,
        pub nbytes: u64,
        pub flags: u16,
    }

    /// `fdstat`: 24 bytes.
    #[repr(C)]
    pub struct Fdstat {
        pub filetype: u8,
        pub flags: u16,
        pub rights_base: u64,
        pub rights_inheriting: u64,
    }

    // The ABI's sizes and offsets, checked where the file is compiled.
    const _: () = assert!(std::mem::size_of::<Subscription>() == 48);
    const _: () = assert!(std::mem::offset_of!(Subscription, u) == 16);
    const _: () = assert!(std::mem::offset_of!(SubscriptionU, timeout) == 8);
    const _: () = assert!(std::mem::offset_of!(SubscriptionU, flags) == 24);
    const _: () = assert!(std::mem::size_of::<Event>() == 32);
    const _: () = assert!(std::mem::offset_of!(Event, nbytes) == 16);
    const _: () = assert!(std::mem::offset_of!(Event, flags) == 24);
    const _: () = assert!(std::mem::size_of::<Fdstat>() == 24);

    pub const EVENTTYPE_CLOCK: u8 = 0;
    pub const EVENTTYPE_FD_READ: u8 = 1;
    pub const EVENTTYPE_FD_WRITE: u8 = 2;
    pub const CLOCKID_MONOTONIC: u32 = 1;
    pub const EVENTRWFLAGS_HANGUP: u16 = 1;
    pub const ERRNO_BADF: u16 = 8;
    pub const FILETYPE_DIRECTORY: u8 = 3;
    pub const FILETYPE_REGULAR_FILE: u8 = 4;
    pub const FILETYPE_SOCKET_STREAM: u8 = 6;

    #[link(wasm_import_module = "wasi_snapshot_preview1")]
    unsafe extern "C" {
        pub fn poll_oneoff(
            subscriptions: *const Subscription,
            events: *mut Event,
            count: usize,
            events_out: *mut usize,
        ) -> i32;
        pub fn fd_fdstat_get(fd: i32, stat: *mut Fdstat) -> i32;
    }
}

/// The `userdata` of the clock subscription (fds use `fd << 1 | dir`).
const CLOCK: u64 = u64::MAX;
/// `slot` value of an fd that is not registered.
const NO_SLOT: usize = usize::MAX;

/// The `wasi` backend (`wasm32-wasip1`).
///
/// ```
/// use evloop::backends::wasi::Wasi;
/// use evloop::{Loop, RunMode};
/// use std::time::Duration;
/// let mut lp: Loop<u32> = Loop::with_backend(Wasi::new());
/// assert_eq!(lp.backend_name(), "wasi");
/// lp.timer(Duration::from_millis(2), Duration::ZERO, |_, n, _| *n += 1)?;
/// let mut n = 0;
/// lp.run(RunMode::Default, &mut n)?; // a clock subscription, then the timer
/// assert_eq!(n, 1);
/// # Ok::<(), evloop::Error>(())
/// ```
pub struct Wasi {
    /// One entry per registered fd: the fd and its interest.
    entries: Vec<(RawFd, Interest)>,
    /// `slot[fd]` is the index in `entries` of a registered fd, or `NO_SLOT`.
    slot: Vec<usize>,
    /// What each entry was found ready for, gathered from the events of
    /// one wait (two per fd at most).
    ready: Vec<Ready>,
    /// The subscriptions handed to `poll_oneoff`, rebuilt at each wait.
    subscriptions: Vec<sys::Subscription>,
    /// Where `poll_oneoff` writes its events.
    events: Vec<sys::Event>,
    clock: Clock,
    notices: WasiNotices,
}

impl std::fmt::Debug for Wasi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wasi")
            .field("registered", &self.entries.len())
            .finish_non_exhaustive()
    }
}

impl Default for Wasi {
    fn default() -> Wasi {
        Wasi::new()
    }
}

/// This backend, for the platform's list (backends/mod.rs).
pub(super) const OFFERED: super::Offered = super::Offered {
    name: "wasi",
    open: || Ok(Box::new(Wasi::new())),
};

impl Wasi {
    /// An empty set. Creating one cannot fail: `poll_oneoff` needs no
    /// kernel object.
    ///
    /// ```
    /// use evloop::backend::Backend;
    /// let w = evloop::backends::wasi::Wasi::new();
    /// assert!(!w.capabilities().edge);
    /// ```
    pub fn new() -> Wasi {
        Wasi {
            entries: Vec::new(),
            slot: Vec::new(),
            ready: Vec::new(),
            subscriptions: Vec::new(),
            events: Vec::new(),
            clock: Clock::new(),
            notices: WasiNotices,
        }
    }

    /// The entry of `fd`, if registered.
    fn slot_of(&self, fd: RawFd) -> Option<usize> {
        let i = usize::try_from(fd).ok()?;
        self.slot.get(i).copied().filter(|&s| s != NO_SLOT)
    }

    /// Writes the subscriptions of one wait: each entry's directions, then
    /// the clock (when the wait has an end).
    fn subscribe(&mut self, timeout: Option<Duration>) {
        self.subscriptions.clear();
        for &(fd, interest) in &self.entries {
            let fd = fd as u64;
            if interest.is_readable() {
                self.subscriptions.push(fd_subscription(fd << 1));
            }
            if interest.is_writable() {
                self.subscriptions.push(fd_subscription(fd << 1 | 1));
            }
        }
        if let Some(t) = timeout {
            self.subscriptions.push(sys::Subscription {
                userdata: CLOCK,
                tag: sys::EVENTTYPE_CLOCK,
                u: sys::SubscriptionU {
                    id_or_fd: sys::CLOCKID_MONOTONIC,
                    // Relative (flags 0), in nanoseconds.
                    timeout: u64::try_from(t.as_nanos()).unwrap_or(u64::MAX),
                    precision: 0,
                    flags: 0,
                },
            });
        }
    }

    /// After a `poll_oneoff` that failed with `EBADF` (`err`): each
    /// registered fd that is not open reported as [`Ready::INVALID`]; the
    /// error if every one is.
    fn report_closed(
        &mut self,
        events: &mut Vec<PollEvent>,
        err: io::Error,
    ) -> io::Result<PollStatus> {
        let before = events.len();
        for &(fd, _) in &self.entries {
            if filetype(fd).is_err_and(|e| e.raw_os_error() == err.raw_os_error()) {
                events.push(PollEvent {
                    fd,
                    ready: Ready::INVALID,
                });
            }
        }
        if events.len() == before {
            return Err(err);
        }
        Ok(PollStatus::Done)
    }

    /// One `poll_oneoff` of the subscriptions written; the events it
    /// wrote are `self.events[..n]`.
    fn wait_once(&mut self) -> io::Result<usize> {
        let count = self.subscriptions.len();
        self.events.resize(
            count,
            sys::Event {
                userdata: 0,
                error: 0,
                kind: 0,
                nbytes: 0,
                flags: 0,
            },
        );
        let mut n = 0usize;
        // SAFETY: `subscriptions` holds `count` initialised subscriptions
        // and `events` room for `count` events (at most one per
        // subscription); `n` is a valid place for the count. The runtime
        // reads and writes only those, during the call.
        let errno = unsafe {
            sys::poll_oneoff(
                self.subscriptions.as_ptr(),
                self.events.as_mut_ptr(),
                count,
                &mut n,
            )
        };
        if errno != 0 {
            return Err(io::Error::from_raw_os_error(errno));
        }
        Ok(n.min(count))
    }
}

/// The subscription of one direction of an fd (`userdata`: `fd << 1 | dir`,
/// 0 reading, 1 writing).
fn fd_subscription(userdata: u64) -> sys::Subscription {
    sys::Subscription {
        userdata,
        tag: if userdata & 1 == 0 {
            sys::EVENTTYPE_FD_READ
        } else {
            sys::EVENTTYPE_FD_WRITE
        },
        u: sys::SubscriptionU {
            id_or_fd: (userdata >> 1) as u32,
            timeout: 0,
            precision: 0,
            flags: 0,
        },
    }
}

/// The event of the fd subscription `userdata` if it is ready now: a
/// `poll_oneoff` of it and a clock that has expired already, which does
/// not wait.
fn probe(userdata: u64) -> io::Result<Option<sys::Event>> {
    let now = sys::Subscription {
        userdata: CLOCK,
        tag: sys::EVENTTYPE_CLOCK,
        u: sys::SubscriptionU {
            id_or_fd: sys::CLOCKID_MONOTONIC,
            timeout: 0,
            precision: 0,
            flags: 0,
        },
    };
    let subscriptions = [fd_subscription(userdata), now];
    let mut events = [sys::Event {
        userdata: 0,
        error: 0,
        kind: 0,
        nbytes: 0,
        flags: 0,
    }; 2];
    let mut n = 0usize;
    // SAFETY: two initialised subscriptions, room for two events, and a
    // valid place for the count, for the duration of the call.
    let errno = unsafe { sys::poll_oneoff(subscriptions.as_ptr(), events.as_mut_ptr(), 2, &mut n) };
    if errno != 0 {
        return Err(io::Error::from_raw_os_error(errno));
    }
    Ok(events[..n.min(2)]
        .iter()
        .find(|e| e.userdata == userdata)
        .copied())
}

/// What an fd event reports.
fn ready_of(event: &sys::Event) -> Ready {
    if event.error == sys::ERRNO_BADF {
        return Ready::INVALID;
    }
    if event.error != 0 {
        // The connection is dead (wasmtime reports POLLERR so, before the
        // POLLHUP that a reset brings with it, which is lost): a hang-up
        // too, as poll(2) reports a reset (POLLERR | POLLHUP).
        return Ready::ERROR | Ready::HUP | Ready::READABLE | Ready::WRITABLE;
    }
    let mut r = if event.kind == sys::EVENTTYPE_FD_READ {
        Ready::READABLE
    } else {
        Ready::WRITABLE
    };
    if event.flags & sys::EVENTRWFLAGS_HANGUP != 0 {
        r |= Ready::HUP | Ready::READABLE;
    }
    r
}

/// The file type of `fd` (`fd_fdstat_get`), or the error that says it
/// cannot be had (`EBADF`: not open).
fn filetype(fd: RawFd) -> io::Result<u8> {
    let mut stat = sys::Fdstat {
        filetype: 0,
        flags: 0,
        rights_base: 0,
        rights_inheriting: 0,
    };
    // SAFETY: `stat` is a valid, writable fdstat for the call to fill.
    let errno = unsafe { sys::fd_fdstat_get(fd, &mut stat) };
    if errno != 0 {
        return Err(io::Error::from_raw_os_error(errno));
    }
    Ok(stat.filetype)
}

/// Refuses what no wait can use: an fd that is not open, a regular file or
/// a directory (always ready: a busy loop), as every backend does.
fn check_watchable(fd: RawFd) -> io::Result<()> {
    let kind = filetype(fd).map_err(|err| {
        io::Error::new(
            err.kind(),
            format!("the wasi backend cannot watch fd {fd}: fd_fdstat_get failed ({err})"),
        )
    })?;
    if kind == sys::FILETYPE_REGULAR_FILE || kind == sys::FILETYPE_DIRECTORY {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "the wasi backend does not watch fd {fd}: it is a regular file or a directory, \
                 always ready"
            ),
        ));
    }
    Ok(())
}

impl Backend for Wasi {
    fn name(&self) -> &'static str {
        "wasi"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            edge: false,
            oneshot: false,
            virtual_fds: false,
            max_fd: None,
            hangup: Hangup::Always,
            closed_fd: ClosedFd::AtNextWait,
            level: Level::Native,
            completion: false,
        }
    }

    fn modify(&mut self, fd: RawFd, _old: Interest, new: Interest) -> io::Result<()> {
        let Ok(i) = usize::try_from(fd) else {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        };
        if new.is_empty() {
            // Forget: swap-remove the entry and fix the index of the one
            // moved into its place. Forgetting an unknown fd succeeds.
            if let Some(s) = self.slot_of(fd) {
                self.entries.swap_remove(s);
                self.slot[i] = NO_SLOT;
                if let Some(&(moved, _)) = self.entries.get(s) {
                    self.slot[moved as usize] = s;
                }
            }
            return Ok(());
        }
        if new.trigger() != Trigger::Level {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the wasi backend supports only level-triggered registrations (poll_oneoff \
                 reports a level)",
            ));
        }
        match self.slot_of(fd) {
            Some(s) => self.entries[s].1 = new,
            None => {
                check_watchable(fd)?;
                if i >= self.slot.len() {
                    let len = (i + 1).max(self.slot.len() * 2);
                    self.slot.resize(len, NO_SLOT);
                }
                self.slot[i] = self.entries.len();
                self.entries.push((fd, new));
            }
        }
        Ok(())
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        if self.entries.is_empty() && timeout.is_none() {
            tracing::trace!("wasi: nothing to wait for and no timeout: stalled");
            return Ok(PollStatus::Stalled);
        }
        let deadline = Deadline::new(timeout);
        let n = loop {
            self.subscribe(deadline.remaining());
            let n = match self.wait_once() {
                Ok(n) => n,
                // wasmtime fails the whole call for an fd that is not open
                // (closed behind the loop's back), where the ABI has a
                // per-event EBADF: those fds are reported invalid.
                Err(e) if e.raw_os_error() == Some(i32::from(sys::ERRNO_BADF)) => {
                    return self.report_closed(events, e);
                }
                Err(e) => return Err(e),
            };
            let fds = self.events[..n].iter().any(|e| e.userdata != CLOCK);
            // The clock alone, before the deadline (a runtime that rounds
            // down): wait again for the time left, so timers are never early.
            if fds || deadline.remaining().is_none_or(|left| left.is_zero()) {
                break n;
            }
        };
        // Every fd subscription reported, of several: either all are ready,
        // or the runtime reports them all whenever one is (wasmtime's
        // legacy WASIp1 does: it completes each subscription once its
        // host poll(2) returns anything). Asking each on its own tells.
        let rw = self.subscriptions.len() - usize::from(timeout.is_some());
        let all = rw > 1
            && self.events[..n]
                .iter()
                .filter(|e| e.userdata != CLOCK)
                .count()
                == rw;
        self.ready.clear();
        self.ready.resize(self.entries.len(), Ready::EMPTY);
        for i in 0..n {
            let mut e = self.events[i];
            if e.userdata == CLOCK {
                continue;
            }
            if all {
                match probe(e.userdata)? {
                    Some(confirmed) => e = confirmed,
                    None => continue,
                }
            }
            let fd = (e.userdata >> 1) as RawFd;
            if let Some(s) = self.slot_of(fd) {
                self.ready[s] |= ready_of(&e);
            }
        }
        for (s, &r) in self.ready.iter().enumerate() {
            if !r.is_empty() {
                events.push(PollEvent {
                    fd: self.entries[s].0,
                    ready: r,
                });
            }
        }
        Ok(PollStatus::Done)
    }

    fn now(&mut self) -> Duration {
        self.clock.now()
    }

    fn reinit(&mut self) -> io::Result<()> {
        Err(wasi_lacks(
            "fork",
            "a guest cannot start another process, so nothing is ever re-created after a fork",
        ))
    }

    fn pollable_fd(&self) -> io::Result<std::os::fd::BorrowedFd<'_>> {
        Err(wasi_lacks(
            "pollable fd",
            "poll_oneoff is handed its subscriptions at each call, and no descriptor holds them \
             in between (WASI has no epoll or kqueue)",
        ))
    }

    fn notices(&mut self) -> Option<&mut dyn NoticeService> {
        Some(&mut self.notices)
    }
}

/// The error of what a WASI guest cannot do, every refusal's in the
/// crate (`net` and `exec` too): `Unsupported`, and a message that starts
/// `WASI (wasm32-wasip1)` and goes on with `what` (what it cannot do,
/// and why).
pub(crate) fn refused(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("WASI (wasm32-wasip1) {what}"),
    )
}

/// The refusal of a socket's bind (`net::ListenOptions::bind`,
/// `exec::AsyncFd::bind`).
#[cfg(any(feature = "net", feature = "exec"))]
pub(crate) const CANNOT_BIND: &str =
    "cannot bind a socket: a guest gets listeners preopened by the runtime";

/// The error of what WASI does not have: `what`, and why.
fn wasi_lacks(what: &str, why: &str) -> io::Error {
    refused(format_args!("has no {what}: {why}"))
}

/// The reason of every refusal about processes.
const NO_PROCESSES: &str = "a guest cannot start, watch, reap or signal a process";

/// The wasi backend's notice service: the checks of an fd, async
/// watchers' wake-ups, the wall clock and file attributes work; signals,
/// child processes and path hints are refused with an error that names
/// WASI and says why.
///
/// ```
/// use evloop::backend::{Backend, NoticeService};
/// let mut w = evloop::backends::wasi::Wasi::new();
/// let mut fds: Vec<evloop::RawFd> = Vec::new();
/// let err = w.notices().unwrap().watch_signal(15, &mut fds).unwrap_err();
/// assert!(err.to_string().contains("WASI"), "{err}");
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct WasiNotices;

/// Nothing to do: a WASI guest has one thread, the loop's, so a send is
/// always made before the loop's next wait, which sees it and does not
/// block (`NoticeService::async_sent`).
struct NoThreads;

impl Wake for NoThreads {
    fn wake(&self) {}
}

impl NoticeService for WasiNotices {
    fn service_name(&self) -> &'static str {
        "wasi"
    }

    fn check_fd(&mut self, fd: RawFd) -> io::Result<()> {
        check_watchable(fd)
    }

    fn watch_signal(&mut self, signal: i32, fds: &mut dyn InternalFds) -> io::Result<()> {
        let _ = (signal, fds);
        Err(wasi_lacks(
            "signals",
            "no WASI runtime delivers a signal to a guest, so none can be watched",
        ))
    }

    fn watch_child(&mut self, pid: u32, fds: &mut dyn InternalFds) -> io::Result<()> {
        let _ = (pid, fds);
        Err(wasi_lacks("child processes", NO_PROCESSES))
    }

    fn watch_any_child(&mut self, fds: &mut dyn InternalFds) -> io::Result<()> {
        let _ = fds;
        Err(wasi_lacks("child processes", NO_PROCESSES))
    }

    fn signal_child(&mut self, pid: u32, signal: i32) -> io::Result<()> {
        let _ = (pid, signal);
        Err(wasi_lacks("child processes", NO_PROCESSES))
    }

    fn spawn_child(
        &mut self,
        command: &mut Command,
        fds: &mut dyn InternalFds,
    ) -> io::Result<Spawned> {
        let _ = (command, fds);
        Err(wasi_lacks("child processes", NO_PROCESSES))
    }

    fn waker(&mut self, fds: &mut dyn InternalFds) -> io::Result<Arc<dyn Wake>> {
        let _ = fds;
        Ok(Arc::new(NoThreads))
    }

    fn watch_path(&mut self, path: &Path, token: u64, fds: &mut dyn InternalFds) -> io::Result<()> {
        let _ = (path, token, fds);
        Err(wasi_lacks(
            "path change hints",
            "WASI has no inotify or kqueue vnode events; stat watchers poll at their interval",
        ))
    }
}

/// Whether [`preopened_listeners`] has handed them out.
static LISTENERS_TAKEN: AtomicBool = AtomicBool::new(false);

/// The TCP listeners the runtime preopened for this guest (`wasmtime run
/// -S preview2=n -S tcplisten=127.0.0.1:8080`), in fd order, owned: they
/// are handed out once per process; a second call fails. A guest cannot
/// create a listener itself (WASI preview 1 has no `bind` or `listen`).
///
/// They are the stream sockets among the descriptors after stdin, stdout
/// and stderr (preopened directories come first; the scan stops at the
/// first fd that is not open).
///
/// ```
/// // `wasmtime run -S preview2=n -S tcplisten=127.0.0.1:8080` gives one;
/// // a guest run without gives none.
/// let listeners = evloop::backends::wasi::preopened_listeners()?;
/// for listener in &listeners {
///     listener.set_nonblocking(true)?;
/// }
/// assert!(evloop::backends::wasi::preopened_listeners().is_err(), "handed out once");
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn preopened_listeners() -> io::Result<Vec<TcpListener>> {
    if LISTENERS_TAKEN.swap(true, Ordering::AcqRel) {
        return Err(io::Error::other(
            "the preopened listeners were handed out already (to an earlier call)",
        ));
    }
    let mut listeners = Vec::new();
    for fd in 3.. {
        match filetype(fd) {
            Ok(sys::FILETYPE_SOCKET_STREAM) => {
                // SAFETY: `fd` is open (fdstat answered), a stream socket
                // the runtime preopened before the program started, and
                // owned by nothing else: this is the one call that hands
                // them out, once per process (the flag above).
                listeners.push(unsafe { TcpListener::from_raw_fd(fd) });
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    Ok(listeners)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: u8, error: u16, flags: u16) -> sys::Event {
        sys::Event {
            userdata: 0,
            error,
            kind,
            nbytes: 0,
            flags,
        }
    }

    /// A per-fd error is a reset: a hang-up too (the conformance kit's
    /// reset_by_peer, with Hangup::Always declared).
    #[test]
    fn an_error_is_a_hangup() {
        let reset = event(sys::EVENTTYPE_FD_READ, 54, 0); // ECONNRESET's errno
        assert_eq!(
            ready_of(&reset),
            Ready::ERROR | Ready::HUP | Ready::READABLE | Ready::WRITABLE
        );
        let bad = event(sys::EVENTTYPE_FD_READ, sys::ERRNO_BADF, 0);
        assert_eq!(ready_of(&bad), Ready::INVALID);
        let hup = event(sys::EVENTTYPE_FD_READ, 0, sys::EVENTRWFLAGS_HANGUP);
        assert_eq!(ready_of(&hup), Ready::HUP | Ready::READABLE);
    }
}
