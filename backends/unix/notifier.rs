//! The Unix OS-notice service: [`Notifier`] (signals, the waker, child
//! exits, wall-clock step reports and path change hints), which the loop
//! owns and composes with any readiness backend, its internal fds
//! registered through the backend's `modify` ([`InternalFds`]) and their
//! readiness routed back here; and [`Wakeup`] (its hub slot and wake fd,
//! the signals it watches, its waker), which the kqueue backend's own
//! service embeds beside `EVFILT_PROC`. Public (re-exported by
//! `backends::unix`).

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use super::children::{self, Added, Children};
use super::clock_steps::ClockSteps;
use super::hub::{self, Slot};
use super::path_hints::PathHints;
use crate::backend::InternalFds;
use crate::backend::{NoticeService, Notices, SignalSet, Wake};
use crate::Spawned;

pub(crate) const SIGCHLD_BIT: u64 = 1 << (libc::SIGCHLD - 1);

/// Signals and the waker, for a backend that handles child exits itself
/// (as kqueue does with `EVFILT_PROC`) or not at all; [`Notifier`] embeds
/// one and adds children, clock steps and path hints.
///
/// A `Wakeup` holds the backend's *slot* in the process-wide signal hub,
/// claimed at the first call that needs it: a wake fd of its own (an
/// `eventfd` on Linux, a pipe elsewhere; non-blocking, close-on-exec),
/// which goes into the backend's kernel set through [`InternalFds`] and
/// becomes readable when a watched signal arrives or the waker is used.
///
/// Guarantees (the same as the crate's backends have):
///
/// - **Signals**: one `sigaction` handler per signal for the whole
///   process, installed while any backend of any loop, in any thread,
///   watches it; every backend watching it hears every arrival (arrivals
///   between two takes coalesce). The disposition found before the first
///   watch is saved and put back when the last backend stops watching it.
///   The handler is async-signal-safe (atomics and a `write`, no locks).
/// - **Wake-ups**: [`waker`](Wakeup::waker) hands out one waker per
///   backend; `Wake::wake` from any thread ends the backend's wait (or
///   makes the next one return at once). A waker that outlives the
///   backend is harmless: its slot (and fd) outlive it, and a later owner
///   of the slot is not woken by it.
/// - **Fork**: in the child, [`reinit`](Wakeup::reinit) gives the backend
///   a wake fd of its own (the inherited one is shared with the parent)
///   and forgets every signal (the loop watches its own again); wakers
///   handed out before the fork wake the child's loop.
///
/// Dropping it gives the slot back (and stops its signal watches).
///
/// ```
/// use evloop::backend::Notices;
/// use evloop::backends::unix::Wakeup;
///
/// let mut set: Vec<i32> = Vec::new(); // the backend's kernel set
/// let mut w = Wakeup::new("mine");
/// w.watch_signal(libc::SIGWINCH, &mut set)?;
/// let fd = w.wake_fd().unwrap();
/// assert_eq!(set, [fd]); // now in the kernel set
///
/// // SAFETY: raise(3) is safe to call; SIGWINCH is ignored by default
/// // and now caught by the hub's handler.
/// unsafe { libc::raise(libc::SIGWINCH) };
/// // The backend's wait reports `fd` readable: it drains it, and after
/// // the wait the loop's take_notices hook collects the signal.
/// assert!(w.is_wake_fd(fd));
/// w.drain();
/// let mut notices = Notices::default();
/// w.take_notices(&mut notices);
/// assert!(notices.signals.contains(libc::SIGWINCH));
/// w.unwatch_signal(libc::SIGWINCH); // the previous disposition is back
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Wakeup {
    backend: &'static str,
    slot: Option<&'static Slot>,
    /// The slot's read end, while it is in the kernel set.
    registered: Option<RawFd>,
    /// The signals the loop watches.
    user: u64,
    /// The signals the backend itself watches (`SIGCHLD` for children
    /// without pidfds).
    internal: u64,
    /// The waker handed out, if any (one per backend).
    waker: Option<Arc<SlotWaker>>,
}

impl Wakeup {
    /// Nothing claimed yet; `backend` is the backend's name, for error
    /// messages.
    ///
    /// ```
    /// let w = evloop::backends::unix::Wakeup::new("mine");
    /// assert_eq!(w.wake_fd(), None);
    /// ```
    pub fn new(backend: &'static str) -> Wakeup {
        Wakeup {
            backend,
            slot: None,
            registered: None,
            user: 0,
            internal: 0,
            waker: None,
        }
    }

    /// The slot, claimed and its read end in the kernel set. A slot
    /// claimed here whose read end the set refuses (a select backend's,
    /// while no fd below `FD_SETSIZE` is free) is given back at once, so
    /// that the next call claims again (and gets a usable fd once one is
    /// free).
    pub(crate) fn ensure(&mut self, set: &mut dyn InternalFds) -> io::Result<&'static Slot> {
        let (slot, claimed) = match self.slot {
            Some(slot) => (slot, false),
            None => {
                let slot = hub::claim_within(set.fd_limit()).map_err(|err| {
                    io::Error::new(
                        err.kind(),
                        format!(
                            "the {} backend cannot create its wake fd: {err}",
                            self.backend
                        ),
                    )
                })?;
                self.slot = Some(slot);
                (slot, true)
            }
        };
        if self.registered.is_none() {
            if let Err(err) = set.add(slot.read_fd()) {
                if claimed {
                    // Nothing uses it yet (the waker and the signal
                    // watches come after this call).
                    self.slot = None;
                    hub::release(slot);
                }
                return Err(err);
            }
            self.registered = Some(slot.read_fd());
        }
        Ok(slot)
    }

    /// Whether `fd` is the wake fd in the kernel set (a report of it is
    /// the notifier's, never the loop's).
    ///
    /// ```
    /// let mut set: Vec<i32> = Vec::new();
    /// let mut w = evloop::backends::unix::Wakeup::new("mine");
    /// let _waker = w.waker(&mut set)?;
    /// assert!(w.is_wake_fd(set[0]));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_wake_fd(&self, fd: RawFd) -> bool {
        self.registered == Some(fd)
    }

    /// The wake fd in the kernel set, if any (none before the first
    /// signal watch or waker).
    ///
    /// ```
    /// let mut set: Vec<i32> = Vec::new();
    /// let mut w = evloop::backends::unix::Wakeup::new("mine");
    /// assert_eq!(w.wake_fd(), None);
    /// let _waker = w.waker(&mut set)?;
    /// assert_eq!(w.wake_fd(), Some(set[0]));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn wake_fd(&self) -> Option<RawFd> {
        self.registered
    }

    /// The wake fd was reported readable: empty it (it is level-readable
    /// until drained). Call it before [`take_notices`](Wakeup::take_notices).
    ///
    /// ```
    /// let mut set: Vec<i32> = Vec::new();
    /// let mut w = evloop::backends::unix::Wakeup::new("mine");
    /// w.waker(&mut set)?.wake();
    /// w.drain();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn drain(&self) {
        if let Some(fd) = self.registered {
            super::wake::drain(fd);
        }
    }

    /// Makes the next wait return at once (the backend has news to deliver
    /// after it); nothing before the slot is claimed.
    ///
    /// ```
    /// let mut set: Vec<i32> = Vec::new();
    /// let mut w = evloop::backends::unix::Wakeup::new("mine");
    /// let _waker = w.waker(&mut set)?;
    /// w.poke(); // the wake fd is readable until drained
    /// w.drain();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn poke(&self) {
        if let Some(slot) = self.slot {
            slot.poke();
        }
    }

    /// The loop's first watcher of `signal` started (the backend's
    /// `watch_signal` hook): catch it through the hub, the wake fd in
    /// `set`. Errors: `InvalidInput` for a number out of 1 to 64, the
    /// kernel's for a signal that cannot be caught, or for a wake fd that
    /// cannot be created or added to `set`.
    ///
    /// ```
    /// let mut set: Vec<i32> = Vec::new();
    /// let mut w = evloop::backends::unix::Wakeup::new("mine");
    /// w.watch_signal(libc::SIGWINCH, &mut set)?;
    /// assert!(w.watch_signal(0, &mut set).is_err());
    /// w.unwatch_signal(libc::SIGWINCH);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn watch_signal(&mut self, signal: i32, set: &mut dyn InternalFds) -> io::Result<()> {
        let bit = self.bit(signal)?;
        self.watch_bit(signal, bit, set)?;
        self.user |= bit;
        Ok(())
    }

    /// The loop's last watcher of `signal` stopped: this backend no
    /// longer hears it; once no backend of the process watches it, the
    /// disposition found before the first watch is installed again. A
    /// signal not watched is ignored.
    ///
    /// ```
    /// let mut set: Vec<i32> = Vec::new();
    /// let mut w = evloop::backends::unix::Wakeup::new("mine");
    /// w.watch_signal(libc::SIGWINCH, &mut set)?;
    /// w.unwatch_signal(libc::SIGWINCH);
    /// w.unwatch_signal(libc::SIGWINCH); // nothing
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn unwatch_signal(&mut self, signal: i32) {
        let Some(bit) = hub::bit(signal) else { return };
        if self.user & bit != 0 {
            self.user &= !bit;
            self.unwatch_bit(signal, bit);
        }
    }

    /// `SIGCHLD` for the backend's own use.
    pub(crate) fn watch_sigchld(&mut self, set: &mut dyn InternalFds) -> io::Result<()> {
        self.watch_bit(libc::SIGCHLD, SIGCHLD_BIT, set)?;
        self.internal |= SIGCHLD_BIT;
        Ok(())
    }

    pub(crate) fn unwatch_sigchld(&mut self) {
        if self.internal & SIGCHLD_BIT != 0 {
            self.internal &= !SIGCHLD_BIT;
            self.unwatch_bit(libc::SIGCHLD, SIGCHLD_BIT);
        }
    }

    fn bit(&self, signal: i32) -> io::Result<u64> {
        hub::bit(signal).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the {} backend cannot watch signal {signal}: not a signal number (1 to 64)",
                    self.backend
                ),
            )
        })
    }

    fn watch_bit(&mut self, signal: i32, bit: u64, set: &mut dyn InternalFds) -> io::Result<()> {
        let slot = self.ensure(set)?;
        if (self.user | self.internal) & bit == 0 {
            hub::watch(slot, signal).map_err(|err| {
                io::Error::new(err.kind(), format!("the {} backend: {err}", self.backend))
            })?;
        }
        Ok(())
    }

    fn unwatch_bit(&mut self, signal: i32, bit: u64) {
        if let Some(slot) = self.slot {
            if (self.user | self.internal) & bit == 0 {
                hub::unwatch(slot, signal);
            }
        }
    }

    /// The backend's waker (its `waker` hook): the same one on every call.
    /// `Wake::wake`, from any thread, makes the wake fd readable and sets
    /// `Notices::woken` at the next [`take_notices`](Wakeup::take_notices).
    ///
    /// ```
    /// use evloop::backend::Notices;
    /// let mut set: Vec<i32> = Vec::new();
    /// let mut w = evloop::backends::unix::Wakeup::new("mine");
    /// let waker = w.waker(&mut set)?;
    /// std::thread::spawn(move || waker.wake()).join().unwrap();
    /// w.drain();
    /// let mut notices = Notices::default();
    /// w.take_notices(&mut notices);
    /// assert!(notices.woken);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn waker(&mut self, set: &mut dyn InternalFds) -> io::Result<Arc<dyn Wake>> {
        let slot = self.ensure(set)?;
        let waker = self.waker.get_or_insert_with(|| {
            Arc::new(SlotWaker {
                slot,
                generation: slot.generation(),
            })
        });
        Ok(waker.clone())
    }

    /// After each wait (the backend's `take_notices` hook): ORs the watched
    /// signals that arrived into `notices.signals`, sets `notices.woken` if
    /// the waker was used. Allocates nothing.
    ///
    /// ```
    /// use evloop::backend::Notices;
    /// let mut w = evloop::backends::unix::Wakeup::new("mine");
    /// let mut notices = Notices::default();
    /// w.take_notices(&mut notices);
    /// assert!(notices.is_empty());
    /// ```
    pub fn take_notices(&mut self, notices: &mut Notices) {
        self.take(notices);
    }

    /// Moves the loop's signals and the waker's use into `notices`;
    /// returns every signal bit that arrived (the backend's own included).
    pub(crate) fn take(&mut self, notices: &mut Notices) -> u64 {
        let Some(slot) = self.slot else { return 0 };
        let bits = slot.take_pending();
        notices.signals |= SignalSet::from_bits(bits & self.user);
        if slot.take_woke() {
            notices.woken = true;
        }
        bits
    }

    /// After `fork()` in the child (the backend's `reinit` hook, once its
    /// new kernel set exists): the wake fd, the child's own, goes into
    /// `set`; every signal is forgotten (the loop watches its own again).
    /// The old wake fd is `remove`d from `set` first: a backend whose set
    /// is a kernel object shared with the parent (epoll) passes the new one.
    ///
    /// ```
    /// let mut set: Vec<i32> = Vec::new();
    /// let mut w = evloop::backends::unix::Wakeup::new("mine");
    /// w.watch_signal(libc::SIGWINCH, &mut set)?;
    /// // (in a forked child:)
    /// let mut new_set: Vec<i32> = Vec::new();
    /// w.reinit(&mut new_set)?;
    /// assert_eq!(new_set, [w.wake_fd().unwrap()]);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn reinit(&mut self, set: &mut dyn InternalFds) -> io::Result<()> {
        let Some(slot) = self.slot else { return Ok(()) };
        if let Some(fd) = self.registered.take() {
            set.remove(fd);
        }
        self.user = 0;
        self.internal = 0;
        hub::reinit(slot)?;
        self.ensure(set).map(|_| ())
    }
}

impl Drop for Wakeup {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            hub::release(slot);
        }
    }
}

/// What [`Wakeup::waker`] hands out: the slot and its owner's generation,
/// so that it stays harmless after the backend is gone (the slot and its
/// fd live on) and wakes the child's loop after a fork (the child's slot
/// has the child's fd).
#[derive(Debug)]
struct SlotWaker {
    slot: &'static Slot,
    generation: u64,
}

impl Wake for SlotWaker {
    fn wake(&self) {
        self.slot.wake(self.generation);
    }
}

/// Everything but fd readiness: the loop's OS service on Unix
/// ([`NoticeService`]): a [`Wakeup`] (signals, the waker), the watched
/// children (and the loop's place in the process-wide table of them), the
/// clock-step timer and the path hints. Every loop owns one, whatever its
/// backend, and registers its internal fds with that backend.
///
/// Guarantees, besides those of [`Wakeup`]:
///
/// - **Children**: one table of watched children per process. Any number
///   of loops, in any threads, each on its own backend, may watch one
///   child: the first backend to notice the exit reaps it (that pid only,
///   never `waitpid(-1)` unless the loop watches any child), once, and
///   every backend watching it reports the exit with its status. On Linux
///   through pidfds (internal fds in the set), elsewhere or where pidfds
///   fail through `SIGCHLD` and `waitpid(pid, WNOHANG)`; a child reaped by
///   someone else first is reported with `ExitStatus::Unknown`; a child
///   that exited before the watch is reported without blocking.
/// - **Clock steps** (Linux): a `CLOCK_REALTIME` timerfd that reports
///   each set of the wall clock; elsewhere
///   [`watch_clock_steps`](Notifier::watch_clock_steps) says no and the
///   loop looks for steps itself.
/// - **Path hints** (Linux): inotify, for stat watchers; elsewhere the
///   watchers poll their paths.
/// - **Fork**: [`reinit`](Notifier::reinit) in the child forgets the
///   parent's children and signals, and gives the child a wake fd, timer
///   and inotify instance of its own.
///
/// What the owner does (the loop; [`WithServices`](crate::backends::WithServices)
/// outside one): lend it a set ([`InternalFds`]) for its fds, never
/// report them to a watcher, and route their readiness to
/// [`ready`](Notifier::ready) before [`take_notices`](Notifier::take_notices).
///
/// ```
/// use evloop::backend::Notices;
/// use evloop::backends::unix::Notifier;
///
/// let mut set: Vec<i32> = Vec::new(); // the backend's kernel set
/// let mut n = Notifier::new("mine");
/// let child = std::process::Command::new("sh").args(["-c", "exit 7"]).spawn()?;
/// n.watch_child(child.id(), &mut set)?;
/// assert!(!set.is_empty()); // the wake fd (and on Linux, a pidfd)
/// let mut notices = Notices::default();
/// while notices.exits.is_empty() {
///     // The backend's wait: here poll(2) on the set, for 10 s at most.
///     let mut fds: Vec<libc::pollfd> =
///         set.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
///     // SAFETY: `fds` is a valid array of `fds.len()` pollfds.
///     let n_ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as _, 10_000) };
///     assert!(n_ready > 0, "no exit within 10 s");
///     for p in fds.iter().filter(|p| p.revents != 0) {
///         n.ready(p.fd, &mut set);
///     }
///     n.take_notices(&mut notices, &mut set);
/// }
/// assert_eq!(notices.exits[0].pid, child.id());
/// assert_eq!(notices.exits[0].status, evloop::ExitStatus::Exited(7));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Notifier {
    pub(crate) wakeup: Wakeup,
    children: Children,
    /// A child watched through `SIGCHLD` had exited before `watch_child`:
    /// the next `take_notices` reaps without waiting for a `SIGCHLD`.
    scan_due: bool,
    /// Any child has just come to be watched: the next `take_notices`
    /// reaps those that exited before, without waiting for a `SIGCHLD`.
    any_due: bool,
    /// Wall-clock steps (a timerfd on Linux).
    clock: ClockSteps,
    /// Path change hints (inotify on Linux).
    paths: PathHints,
}

impl Notifier {
    /// Nothing watched yet; `backend` is the backend's name, for error
    /// messages.
    ///
    /// ```
    /// let n = evloop::backends::unix::Notifier::new("mine");
    /// assert_eq!(n.internal_fds().count(), 0);
    /// ```
    pub fn new(backend: &'static str) -> Notifier {
        Notifier {
            wakeup: Wakeup::new(backend),
            children: Children::default(),
            scan_due: false,
            any_due: false,
            clock: ClockSteps::default(),
            paths: PathHints::new(backend),
        }
    }

    /// For tests: child exits through `SIGCHLD` even where pidfds work.
    #[doc(hidden)]
    pub fn force_sigchld_fallback(&mut self) {
        self.children.force_sigchld();
    }

    /// Every internal fd the kernel set must hold: what a backend that
    /// re-creates its kernel set (a rebuild after an error) adds to the
    /// new one. (After `fork()`, call [`reinit`](Notifier::reinit) instead.)
    ///
    /// ```
    /// use evloop::backends::unix::Notifier;
    /// let mut set: Vec<i32> = Vec::new();
    /// let mut n = Notifier::new("mine");
    /// let _waker = n.waker(&mut set)?;
    /// let rebuilt: Vec<i32> = n.internal_fds().collect();
    /// assert_eq!(rebuilt, set);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn internal_fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.wakeup
            .wake_fd()
            .into_iter()
            .chain(self.clock.fd())
            .chain(self.paths.fd())
            .chain(self.children.pidfds())
    }

    /// The loop's first watcher of child `pid` started (the backend's
    /// `watch_child` hook): join the process's table for it. Errors
    /// (`ECHILD`, with a message that says so) for a pid that is not an
    /// unreaped child of this process.
    ///
    /// ```
    /// use evloop::backends::unix::Notifier;
    /// let mut set: Vec<i32> = Vec::new();
    /// let mut n = Notifier::new("mine");
    /// let mut child = std::process::Command::new("true").spawn()?;
    /// n.watch_child(child.id(), &mut set)?;
    /// assert!(n.watch_child(std::process::id(), &mut set).is_err()); // not a child
    /// n.unwatch_child(child.id(), &mut set); // left unreaped
    /// assert!(child.wait()?.success());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn watch_child(&mut self, pid: u32, set: &mut dyn InternalFds) -> io::Result<()> {
        let backend = self.wakeup.backend;
        // Whoever reaps the child, this backend or another loop's, pokes
        // the wake fd: it must be in the kernel set.
        let slot = self.wakeup.ensure(set)?;
        let (pid, mut added) = self.children.add(backend, pid, slot)?;
        if let Added::Pidfd(fd) = added {
            if set.fd_limit().is_some_and(|limit| fd >= limit) {
                // A pidfd the set cannot hold (select, past FD_SETSIZE):
                // this child's exit comes through SIGCHLD instead.
                tracing::trace!(pid, fd, "pidfd beyond the backend's fds: SIGCHLD instead");
                self.children.use_sigchld_for(pid);
                added = Added::Sigchld;
            }
        }
        match added {
            Added::Already | Added::Exited => {}
            Added::Pidfd(fd) => {
                // An exited child's pidfd is readable at once: the next
                // wait returns and reaps it.
                if let Err(err) = set.add(fd) {
                    self.children.remove(pid);
                    return Err(err);
                }
            }
            Added::Sigchld => {
                if let Err(err) = self.wakeup.watch_sigchld(set) {
                    self.children.remove(pid);
                    self.settle_sigchld();
                    return Err(err);
                }
                // Checked after SIGCHLD is watched: an exit before that
                // brought no SIGCHLD of ours, an exit after it does.
                if children::has_exited(pid) {
                    // Reaped by the next `take_notices`, after a wait that
                    // must not block. (Not here: `unwatch_child` must be
                    // able to leave it unreaped.)
                    self.scan_due = true;
                    self.wakeup.poke();
                }
            }
        }
        Ok(())
    }

    /// The loop's last watcher of `pid` stopped: leave the table, the
    /// child unreaped (unless another backend reaps it). Example:
    /// [`watch_child`](Notifier::watch_child).
    pub fn unwatch_child(&mut self, pid: u32, set: &mut dyn InternalFds) {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return;
        };
        if let Some(pidfd) = self.children.remove(pid) {
            if let Some(fd) = pidfd {
                set.remove(fd.as_raw_fd());
            }
            self.settle_sigchld();
        }
    }

    /// Stops the internal `SIGCHLD` watch once no child needs it.
    fn settle_sigchld(&mut self) {
        if !self.children.uses_sigchld() && !self.children.watches_any() {
            self.wakeup.unwatch_sigchld();
        }
    }

    /// The loop's first watcher of any child started (the backend's
    /// `watch_any_child` hook): `SIGCHLD` is watched, and each arrival
    /// reaps every child that exited (`waitpid(-1)`) and reports it, still
    /// handing the exits of children other backends watch by pid to them.
    ///
    /// ```
    /// use evloop::backends::unix::Notifier;
    /// let mut set: Vec<i32> = Vec::new();
    /// let mut n = Notifier::new("mine");
    /// n.watch_any_child(&mut set)?;
    /// n.unwatch_any_child();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn watch_any_child(&mut self, set: &mut dyn InternalFds) -> io::Result<()> {
        if self.children.watches_any() {
            return Ok(());
        }
        let slot = self.wakeup.ensure(set)?;
        self.wakeup.watch_sigchld(set)?;
        self.children.join_any(slot);
        // Children that exited before: reaped by the next `take_notices`,
        // after a wait that must not block.
        self.any_due = true;
        self.wakeup.poke();
        Ok(())
    }

    /// The loop's last watcher of any child stopped. Example:
    /// [`watch_any_child`](Notifier::watch_any_child).
    pub fn unwatch_any_child(&mut self) {
        self.children.leave_any();
        self.any_due = false;
        self.settle_sigchld();
    }

    /// Sends `signal` to the watched child `pid` (the backend's
    /// `signal_child` hook, for `Child::kill`) only if it cannot have been
    /// reaped (through its pidfd, or under the table's lock); an error of
    /// kind `NotFound` once it has been.
    ///
    /// ```
    /// use evloop::backends::unix::Notifier;
    /// let mut set: Vec<i32> = Vec::new();
    /// let mut n = Notifier::new("mine");
    /// let mut child = std::process::Command::new("sleep").arg("30").spawn()?;
    /// n.watch_child(child.id(), &mut set)?;
    /// n.signal_child(child.id(), libc::SIGKILL)?;
    /// n.unwatch_child(child.id(), &mut set);
    /// assert!(!child.wait()?.success());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn signal_child(&mut self, pid: u32, signal: i32) -> io::Result<()> {
        self.children.signal(pid, signal)
    }

    /// Spawns `command` and watches the child (the backend's
    /// `spawn_child` hook, for `Child::spawn`), with no moment in between at
    /// which a loop of the process watching any child could reap it.
    ///
    /// ```
    /// use evloop::backends::unix::Notifier;
    /// let mut set: Vec<i32> = Vec::new();
    /// let mut n = Notifier::new("mine");
    /// let spawned = n.spawn_child(&mut std::process::Command::new("true"), &mut set)?;
    /// assert!(spawned.pid > 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn spawn_child(
        &mut self,
        command: &mut Command,
        set: &mut dyn InternalFds,
    ) -> io::Result<Spawned> {
        let slot = self.wakeup.ensure(set)?;
        let mut child = self.children.spawn(command, slot)?;
        let pid = child.id();
        if let Err(err) = self.watch_child(pid, set) {
            self.children.abandon(pid);
            let _ = child.kill();
            let _ = child.wait();
            return Err(err);
        }
        Ok(Spawned::from_std(child))
    }

    /// An internal fd was reported readable by the backend's wait: drains
    /// the wake fd, reads the timer or inotify, or reaps the child (its
    /// pidfd leaves `set`). Call it after collecting the loop's events,
    /// for each internal fd reported; an fd that is not internal is
    /// ignored. Example: [`Notifier`].
    pub fn ready(&mut self, fd: RawFd, set: &mut dyn InternalFds) {
        if self.wakeup.is_wake_fd(fd) {
            self.wakeup.drain();
        } else if self.clock.fd() == Some(fd) {
            self.clock.ready();
        } else if self.paths.fd() == Some(fd) {
            self.paths.ready();
        } else if let Some(pidfd) = self.children.pidfd_ready(fd) {
            set.remove(pidfd.as_raw_fd());
        }
    }

    /// After each wait (the backend's `take_notices` hook): moves what was
    /// noticed into `notices`: the loop's signals, the waker's use, the
    /// exits of watched children (reaped by this backend or by another
    /// that watched them too; their pidfds leave `set`), clock steps, path
    /// hints. Allocates nothing in steady state. Example: [`Notifier`].
    pub fn take_notices(&mut self, notices: &mut Notices, set: &mut dyn InternalFds) {
        let bits = self.wakeup.take(notices);
        let any_due = std::mem::take(&mut self.any_due);
        if self.children.watches_any() && (any_due || bits & SIGCHLD_BIT != 0) {
            self.children.reap_any();
        }
        let due = std::mem::take(&mut self.scan_due);
        let scan = (due || bits & SIGCHLD_BIT != 0) && self.children.uses_sigchld();
        if scan {
            self.children.scan();
        }
        if self.children.take_exits(&mut notices.exits, set) || scan {
            self.settle_sigchld();
        }
        notices.clock_stepped |= self.clock.take();
        self.paths.take(&mut notices.paths);
    }

    /// After `fork()` in the child (the backend's `reinit` hook), once the
    /// backend has its new kernel set: the children are the parent's
    /// (their pidfds closed here), the signals forgotten (the loop watches
    /// its own again), the wake fd the child's own. Clock steps and paths
    /// stay watched (the loop does not ask again), each through a new
    /// timer and inotify instance of the child's own. Fds are `remove`d
    /// from `set` and added again: pass the new set.
    ///
    /// ```
    /// use evloop::backends::unix::Notifier;
    /// let mut set: Vec<i32> = Vec::new();
    /// let mut n = Notifier::new("mine");
    /// let _waker = n.waker(&mut set)?;
    /// // (in a forked child:)
    /// let mut new_set: Vec<i32> = Vec::new();
    /// n.reinit(&mut new_set)?;
    /// assert_eq!(new_set, n.internal_fds().collect::<Vec<_>>());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn reinit(&mut self, set: &mut dyn InternalFds) -> io::Result<()> {
        for fd in self.children.pidfds() {
            set.remove(fd);
        }
        self.children.clear();
        self.scan_due = false;
        self.any_due = false;
        self.wakeup.reinit(set)?;
        self.clock.reinit(set)?;
        self.paths.reinit(set)
    }

    /// The loop's first periodic watcher started (the backend's
    /// `watch_clock_steps` hook): starts reporting wall-clock steps in
    /// `Notices::clock_stepped`; false where the platform has no way (only
    /// Linux has one: a `CLOCK_REALTIME` timerfd).
    ///
    /// ```
    /// use evloop::backends::unix::Notifier;
    /// let mut set: Vec<i32> = Vec::new();
    /// let mut n = Notifier::new("mine");
    /// let reported = n.watch_clock_steps(&mut set);
    /// # #[cfg(target_os = "linux")]
    /// assert!(reported && set.len() == 1);
    /// n.unwatch_clock_steps(&mut set);
    /// # #[cfg(target_os = "linux")]
    /// assert!(set.is_empty());
    /// ```
    pub fn watch_clock_steps(&mut self, set: &mut dyn InternalFds) -> bool {
        self.clock.watch(set)
    }

    /// The loop's last periodic watcher stopped. Example:
    /// [`watch_clock_steps`](Notifier::watch_clock_steps).
    pub fn unwatch_clock_steps(&mut self, set: &mut dyn InternalFds) {
        self.clock.unwatch(set);
    }

    /// A stat watcher started (the backend's `watch_path` hook): hints at
    /// changes of `path` with `token` in `Notices::paths` (inotify on
    /// Linux; elsewhere nothing is hinted and the watcher polls).
    ///
    /// ```
    /// use evloop::backends::unix::Notifier;
    /// let mut set: Vec<i32> = Vec::new();
    /// let mut n = Notifier::new("mine");
    /// n.watch_path(&std::env::temp_dir(), 1, &mut set)?;
    /// n.unwatch_path(1, &mut set);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn watch_path(
        &mut self,
        path: &Path,
        token: u64,
        set: &mut dyn InternalFds,
    ) -> io::Result<()> {
        self.paths.watch(path, token, set)
    }

    /// The stat watcher of `token` stopped. Example:
    /// [`watch_path`](Notifier::watch_path).
    pub fn unwatch_path(&mut self, token: u64, set: &mut dyn InternalFds) {
        self.paths.unwatch(token, set);
    }

    /// [`Wakeup::watch_signal`] (the backend's `watch_signal` hook).
    ///
    /// ```
    /// use evloop::backends::unix::Notifier;
    /// let mut set: Vec<i32> = Vec::new();
    /// let mut n = Notifier::new("mine");
    /// n.watch_signal(libc::SIGWINCH, &mut set)?;
    /// n.unwatch_signal(libc::SIGWINCH);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn watch_signal(&mut self, signal: i32, set: &mut dyn InternalFds) -> io::Result<()> {
        self.wakeup.watch_signal(signal, set)
    }

    /// [`Wakeup::unwatch_signal`]. Example:
    /// [`watch_signal`](Notifier::watch_signal).
    pub fn unwatch_signal(&mut self, signal: i32) {
        self.wakeup.unwatch_signal(signal);
    }

    /// [`Wakeup::waker`] (the backend's `waker` hook).
    ///
    /// ```
    /// use evloop::backends::unix::Notifier;
    /// let mut set: Vec<i32> = Vec::new();
    /// let mut n = Notifier::new("mine");
    /// n.waker(&mut set)?.wake();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn waker(&mut self, set: &mut dyn InternalFds) -> io::Result<Arc<dyn Wake>> {
        self.wakeup.waker(set)
    }
}

/// The loop's service on Unix: each hook forwards to the method of the
/// same name.
impl NoticeService for Notifier {
    fn service_name(&self) -> &'static str {
        self.wakeup.backend
    }

    fn check_fd(&mut self, fd: RawFd) -> io::Result<()> {
        crate::backends::util::check_pollable(self.wakeup.backend, fd)
    }

    fn watch_signal(&mut self, signal: i32, fds: &mut dyn InternalFds) -> io::Result<()> {
        Notifier::watch_signal(self, signal, fds)
    }

    fn unwatch_signal(&mut self, signal: i32) {
        Notifier::unwatch_signal(self, signal);
    }

    fn watch_child(&mut self, pid: u32, fds: &mut dyn InternalFds) -> io::Result<()> {
        Notifier::watch_child(self, pid, fds)
    }

    fn unwatch_child(&mut self, pid: u32, fds: &mut dyn InternalFds) {
        Notifier::unwatch_child(self, pid, fds);
    }

    fn watch_any_child(&mut self, fds: &mut dyn InternalFds) -> io::Result<()> {
        Notifier::watch_any_child(self, fds)
    }

    fn unwatch_any_child(&mut self) {
        Notifier::unwatch_any_child(self);
    }

    fn signal_child(&mut self, pid: u32, signal: i32) -> io::Result<()> {
        Notifier::signal_child(self, pid, signal)
    }

    fn spawn_child(
        &mut self,
        command: &mut Command,
        fds: &mut dyn InternalFds,
    ) -> io::Result<Spawned> {
        Notifier::spawn_child(self, command, fds)
    }

    fn waker(&mut self, fds: &mut dyn InternalFds) -> io::Result<Arc<dyn Wake>> {
        Notifier::waker(self, fds)
    }

    fn ready(&mut self, fd: RawFd, fds: &mut dyn InternalFds) {
        Notifier::ready(self, fd, fds);
    }

    fn take_notices(&mut self, notices: &mut Notices, fds: &mut dyn InternalFds) {
        Notifier::take_notices(self, notices, fds);
    }

    fn watch_clock_steps(&mut self, fds: &mut dyn InternalFds) -> bool {
        Notifier::watch_clock_steps(self, fds)
    }

    fn unwatch_clock_steps(&mut self, fds: &mut dyn InternalFds) {
        Notifier::unwatch_clock_steps(self, fds);
    }

    fn watch_path(&mut self, path: &Path, token: u64, fds: &mut dyn InternalFds) -> io::Result<()> {
        Notifier::watch_path(self, path, token, fds)
    }

    fn unwatch_path(&mut self, token: u64, fds: &mut dyn InternalFds) {
        Notifier::unwatch_path(self, token, fds);
    }

    fn reinit(&mut self, fds: &mut dyn InternalFds) -> io::Result<()> {
        Notifier::reinit(self, fds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel set that refuses every fd (as select refuses a wake fd
    /// numbered 1024 or more) until told otherwise.
    struct Refusing {
        refuse: bool,
        held: Vec<RawFd>,
    }

    impl InternalFds for Refusing {
        fn add(&mut self, fd: RawFd) -> io::Result<()> {
            if self.refuse {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "refused"));
            }
            self.held.push(fd);
            Ok(())
        }
        fn remove(&mut self, fd: RawFd) {
            self.held.retain(|&f| f != fd);
        }
    }

    #[test]
    fn a_slot_whose_wake_fd_the_set_refuses_is_not_kept() {
        let mut set = Refusing {
            refuse: true,
            held: Vec::new(),
        };
        let mut w = Wakeup::new("test");
        assert!(w.ensure(&mut set).is_err());
        assert!(w.slot.is_none() && w.wake_fd().is_none(), "given back");
        assert!(w.waker(&mut set).is_err());
        assert!(w.watch_signal(libc::SIGWINCH, &mut set).is_err());
        assert_eq!(w.user, 0);
        set.refuse = false;
        let slot = w.ensure(&mut set).unwrap();
        assert_eq!(set.held, [slot.read_fd()]);
        assert!(w.waker(&mut set).is_ok());
    }
}
