//! The loop's own queries and controls, outside any iteration: its
//! backend, its clock, how much is pending or active, breaking out of
//! `run`, and starting over after `fork()`.

use std::time::Duration;

use crate::backend::{Backend, Capabilities};
use crate::timers::from_ns;
use crate::unwind::Held;
use crate::{Break, Builder, Error, Loop, Result};

impl<'s, S> Loop<'s, S> {
    /// Reserves room for `n` more watchers (any kind) and for io watchers
    /// on fds numbered below `n`, so that creating them grows none of the
    /// loop's tables: [`Builder::capacity`] for a loop already made (one
    /// on [`Loop::with_backend`], say), as `Vec::reserve` is to
    /// `Vec::with_capacity`.
    ///
    /// ```
    /// use evloop::{Interest, Loop, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// lp.reserve(100);
    /// for i in 0..100 {
    ///     lp.io(sim.socket(&format!("s{i}"), 0), Interest::READABLE, |_, _, _| {})
    ///         .unwrap();
    /// }
    /// assert_eq!(lp.active_count(), 100);
    /// ```
    pub fn reserve(&mut self, n: usize) {
        self.registry.reserve(n);
        self.fds.reserve(n);
        self.timers.reserve(n);
    }

    /// A loop on the default OS backend, or the one named by
    /// `EVLOOP_BACKEND`: `Builder::new().build()`.
    ///
    /// ```
    /// use evloop::{Loop, RunMode};
    /// use std::time::{Duration, Instant};
    ///
    /// let start = Instant::now();
    /// let mut lp: Loop = Loop::new()?;
    /// lp.timer(Duration::from_millis(5), Duration::ZERO, |_, _, _| {})?;
    /// lp.run(RunMode::Default, &mut ())?;
    /// assert!(start.elapsed() >= Duration::from_millis(5));
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn new() -> Result<Self> {
        Builder::new().build()
    }

    /// A loop on the given backend (any [`Backend`], including one defined
    /// outside this crate).
    ///
    /// ```
    /// use evloop::{Loop, Sim};
    /// let lp: Loop = Loop::with_backend(Sim::new().backend());
    /// assert_eq!(lp.backend_name(), "sim");
    /// ```
    pub fn with_backend(backend: impl Backend + 's) -> Self {
        Self::from(Box::new(backend) as Box<dyn Backend + 's>)
    }

    /// The backend's name ("epoll", "poll", "select", "kqueue", "sim", ...).
    ///
    /// ```
    /// # use evloop::{Loop, Sim};
    /// let lp: Loop = Loop::with_backend(Sim::new().backend());
    /// assert_eq!(lp.backend_name(), "sim");
    /// ```
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// What the backend supports.
    ///
    /// ```
    /// # use evloop::{Loop, Sim};
    /// let lp: Loop = Loop::with_backend(Sim::new().backend());
    /// assert!(lp.capabilities().virtual_fds);
    /// ```
    pub fn capabilities(&self) -> Capabilities {
        self.caps
    }

    /// The loop time: cached at the start of each iteration (after the
    /// backend poll), so every callback of one iteration sees the same value.
    ///
    /// ```
    /// # use evloop::{Loop, Sim};
    /// let lp: Loop = Loop::with_backend(Sim::new().backend());
    /// assert_eq!(lp.now(), std::time::Duration::ZERO);
    /// ```
    pub fn now(&self) -> Duration {
        from_ns(self.timers.now())
    }

    /// The loop's wall-clock time: [`Loop::now`]'s twin on the wall clock
    /// (libev's `ev_now`, which is on the wall clock there), the same for
    /// every callback of an iteration, and refreshed with `now` (after
    /// each poll, and by [`Loop::update_now`]). In an iteration that
    /// expired periodic watchers it is the wall time they were expired
    /// at, so a periodic's callback sees a time at or after the one it was
    /// due ([`Periodic::next_at`](crate::Periodic::next_at) before it fired); otherwise it is read
    /// when first asked for and taken back to the instant of `now` (the
    /// wall time the monotonic clock has moved on since is subtracted).
    /// [`Loop::read_wall_clock`] reads the clock itself.
    ///
    /// ```
    /// use evloop::{Loop, Periodic, RunMode, Schedule, Sim};
    /// use std::time::{Duration, SystemTime};
    /// let sim = Sim::new();
    /// sim.set_wall_clock(SystemTime::UNIX_EPOCH + Duration::from_secs(100));
    /// let mut lp: Loop<Vec<u64>> = Loop::with_backend(sim.backend());
    /// assert_eq!(lp.now_wall(), SystemTime::UNIX_EPOCH + Duration::from_secs(100));
    /// Periodic::new(&mut lp, Schedule::every(Duration::from_secs(60)), |lp, log, me| {
    ///     let t = lp.now_wall().duration_since(SystemTime::UNIX_EPOCH).unwrap();
    ///     log.push(t.as_secs());
    ///     lp.stop(me).unwrap();
    /// }).unwrap();
    /// let mut log = vec![];
    /// lp.run(RunMode::Default, &mut log).unwrap();
    /// assert_eq!(log, [120]);
    /// ```
    pub fn now_wall(&mut self) -> std::time::SystemTime {
        let wall = match self.timers.wall() {
            Some(wall) => wall,
            None => {
                let wall = crate::timers::clock_ns(self.services(|s, _| s.wall_now()));
                let since =
                    crate::timers::to_ns(self.backend.now()).saturating_sub(self.timers.now());
                let wall = wall.saturating_sub(since);
                self.timers.set_wall(wall);
                wall
            }
        };
        std::time::SystemTime::UNIX_EPOCH + from_ns(wall)
    }

    /// The wall clock, as the backend reads it now (what periodic watchers
    /// follow); not cached, unlike [`Loop::now_wall`].
    ///
    /// ```
    /// use evloop::{Loop, Sim};
    /// use std::time::{Duration, SystemTime};
    /// let sim = Sim::new();
    /// sim.set_wall_clock(SystemTime::UNIX_EPOCH + Duration::from_secs(42));
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// assert_eq!(lp.read_wall_clock(), SystemTime::UNIX_EPOCH + Duration::from_secs(42));
    /// ```
    pub fn read_wall_clock(&mut self) -> std::time::SystemTime {
        crate::timers::wall_time(self.services(|s, _| s.wall_now()))
    }

    /// Refreshes the cached loop time from the backend's clock (useful after
    /// a long computation in a callback, before starting a timer).
    ///
    /// ```
    /// # use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// lp.update_now();
    /// ```
    pub fn update_now(&mut self) {
        self.timers.set_now(self.backend.now());
    }

    /// How many callbacks are due and not yet invoked: the watchers for
    /// which [`Loop::is_pending`] says true (queued invocations, and active
    /// async watchers sent to whose send the loop has not taken yet).
    ///
    /// ```
    /// # use evloop::{Idle, Loop, Ready, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let idle = Idle::new(&mut lp, |_, _, _| {}).unwrap();
    /// lp.feed_event(idle, Ready::EMPTY).unwrap();
    /// assert_eq!(lp.pending_count(), 1);
    /// ```
    pub fn pending_count(&self) -> usize {
        self.pending.len()
            + self.registry.deferred_count()
            + self.results.invocations(&self.fds, &self.registry)
            + self.kinds_due()
    }

    /// How long the next poll would block if nothing changed meanwhile
    /// (libuv's `uv_backend_timeout`): zero if something is pending, an
    /// idle watcher is active, an async watcher's send is waiting or the
    /// run is [`RunMode::NoWait`](crate::RunMode::NoWait); else the time to
    /// the earliest timer (or periodic, or stat poll), or `None` for "until
    /// an event arrives". It reads the clock, as the loop does before it
    /// blocks.
    ///
    /// From a prepare watcher's callback it is the timeout of the poll that
    /// follows (libevent's `evwatch_prepare_get_timeout`): what is pending
    /// then, the other prepare watchers of the iteration above all, runs
    /// before the poll and does not count. Elsewhere (outside `run`, or
    /// from another callback) a pending invocation counts, as in libuv.
    ///
    /// ```
    /// use evloop::{Loop, Prepare, RunMode, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop<Vec<Option<Duration>>> = Loop::with_backend(Sim::new().backend());
    /// for _ in 0..2 {
    ///     Prepare::new(&mut lp, |lp, seen, me| {
    ///         seen.push(lp.backend_timeout());
    ///         lp.remove(me).unwrap();
    ///     }).unwrap();
    /// }
    /// lp.timer(Duration::from_secs(1), Duration::ZERO, |_, _, _| {}).unwrap();
    /// let mut seen = vec![];
    /// lp.run(RunMode::Once, &mut seen).unwrap();
    /// assert_eq!(seen, [Some(Duration::from_secs(1)); 2]);
    /// ```
    ///
    /// ```
    /// use evloop::{Interest, Loop, Ready, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// lp.io(sim.socket("s", 0), Interest::READABLE, |_, _, _| {}).unwrap();
    /// assert_eq!(lp.backend_timeout(), None);
    /// let t = lp.timer(Duration::from_millis(250), Duration::ZERO, |_, _, _| {}).unwrap();
    /// assert_eq!(lp.backend_timeout(), Some(Duration::from_millis(250)));
    /// lp.feed_event(t, Ready::EMPTY).unwrap();
    /// assert_eq!(lp.backend_timeout(), Some(Duration::ZERO));
    /// ```
    pub fn backend_timeout(&mut self) -> Option<Duration> {
        // What a direct batch holds is pending (and a deferred disarm
        // changes the count of active sources): materialised first.
        self.materialise_batch();
        let phase = self.run.phase;
        if self.kinds_due() > 0 {
            // The poll does not block: it takes the send at once.
            return Some(Duration::ZERO);
        }
        // In the prepare phase, what is pending is invoked before the poll.
        let pending = !phase.preparing && !self.pending.is_empty();
        self.block_time_given(phase.mode, pending).0
    }

    /// The backend's completion I/O, if it offers one
    /// ([`Backend::completion_io`](crate::backend::Backend::completion_io)):
    /// for the server helpers that adopt their sockets (`net`).
    #[cfg_attr(not(any(feature = "net", feature = "exec")), allow(dead_code))]
    pub(crate) fn completion_io(
        &mut self,
    ) -> Option<std::rc::Rc<dyn crate::backend::CompletionIo>> {
        self.backend.completion_io()
    }

    /// The backend's own descriptor, for another loop (a GUI toolkit's,
    /// glib's, mio's, another evloop's: [`Embed::new`](crate::Embed::new)) to watch for
    /// readability in place of this loop's wait: the epoll fd, the
    /// kqueue, or the ring's fd of an io_uring ring made without deferred
    /// task work. Unix only.
    ///
    /// **When it is readable**: when the backend would report something
    /// to a poll with a zero timeout: an fd of an active io watcher (or
    /// of a kind's watcher: a [`Once::new`](crate::Once::new), an embedded loop) is ready
    /// for what its watchers ask, or one of the backend's internal fds
    /// is: a signal the loop watches arrived, a watched child exited, a
    /// path hint came, the wall clock was stepped, or an async watcher was
    /// sent to after [`Loop::next_timeout`] was called (before that, a
    /// send only sets a flag, which `next_timeout` reads). Only changes
    /// sent to the backend count: those a `run` makes, or
    /// [`Loop::flush_changes`]. It may also be readable for nothing (a
    /// stale registration that the next poll drops); running the loop
    /// then does nothing.
    ///
    /// **Not** through the fd: expired timers (and periodic, stat and
    /// once deadlines), callbacks already pending (fed events, what a
    /// previous run left), active idle watchers, changes not yet flushed.
    /// [`Loop::next_timeout`] answers for those: the holder waits on the
    /// fd for at most that long, then runs the loop
    /// (`run(RunMode::NoWait, ..)`). Readiness is level: an edge-triggered
    /// holder re-arms its registration after each run (mio's
    /// `reregister`), or runs the loop again while
    /// [`PollableLoop::readable_now`](crate::PollableLoop::readable_now)
    /// (tokio's `AsyncFd`) (`docs/recipes.md`, "Nesting loops").
    ///
    /// `AsFd` is not implemented for `Loop`: one `Loop` type covers every
    /// backend, and some of them (poll, select, the simulator) have no fd
    /// to give, where `AsFd` cannot fail. [`PollableLoop::new`](crate::PollableLoop::new) checks
    /// once and gives a [`PollableLoop`](crate::PollableLoop), which is
    /// `AsFd`; the [`BorrowedFd`] returned here is `AsFd` too.
    ///
    /// Errors: [`Error::NoPollableFd`], naming the backend and why (poll,
    /// select, the simulator, an io_uring ring with deferred task work).
    ///
    /// [`BorrowedFd`]: std::os::fd::BorrowedFd
    ///
    /// ```
    /// use evloop::{Error, Loop, Sim};
    /// # #[cfg(target_os = "linux")]
    /// # {
    /// use evloop::backends::util::readable_now;
    /// use evloop::{Interest, RunMode};
    /// use std::io::Write;
    /// use std::os::unix::net::UnixStream;
    ///
    /// let mut lp: Loop<u32> = Loop::builder().backend("epoll").build()?;
    /// let (a, mut peer) = UnixStream::pair()?;
    /// lp.io(a, Interest::READABLE, |lp, n, ev| {
    ///     *n += 1;
    ///     lp.remove(ev.watcher).unwrap();
    /// })?;
    /// lp.flush_changes()?; // the new watcher's fd, to the epoll set
    /// assert_eq!(lp.next_timeout(), None); // no deadline
    /// assert!(!readable_now(lp.pollable_fd()?)?);
    /// peer.write_all(b"x")?; // a socket pair: ready at once
    /// assert!(readable_now(lp.pollable_fd()?)?);
    /// let mut n = 0;
    /// lp.run(RunMode::NoWait, &mut n)?;
    /// assert_eq!(n, 1);
    /// # }
    /// // The simulator has none.
    /// let lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let err = lp.pollable_fd().unwrap_err();
    /// assert!(matches!(err, Error::NoPollableFd { backend: "sim", .. }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(any(unix, target_os = "wasi"))]
    pub fn pollable_fd(&self) -> Result<std::os::fd::BorrowedFd<'_>> {
        self.backend.pollable_fd().map_err(|e| Error::NoPollableFd {
            backend: self.backend.name(),
            reason: e.to_string(),
        })
    }

    /// Sends the fd changes made since the loop last did (watchers
    /// started, stopped, changed outside a `run`) to the backend, as a
    /// `run` does before it polls (libev's `fd_reify`), and has the
    /// backend make them show on its `Loop::pollable_fd` (kqueue submits
    /// its changelist, io_uring its queued polls and the re-arms of the
    /// level fds its last poll reported). Call it before waiting on the
    /// pollable fd, then [`Loop::next_timeout`]; the embed watcher does
    /// both before its loop's poll. An fd the backend refuses has its
    /// watchers stopped and [`Ready::ERROR`](crate::Ready::ERROR) queued
    /// for them, as in a `run`.
    ///
    /// Errors: [`Error::Backend`] if the backend could not make its queued
    /// changes (they stay queued for its next poll).
    ///
    /// ```
    /// use evloop::{Interest, Loop, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// lp.io(sim.socket("s", 0), Interest::READABLE, |_, _, _| {}).unwrap();
    /// assert_eq!(sim.modify_count(), 0); // not sent yet
    /// lp.flush_changes().unwrap();
    /// assert_eq!(sim.modify_count(), 1);
    /// ```
    pub fn flush_changes(&mut self) -> Result<()> {
        self.materialise_batch();
        self.flush_fds();
        self.backend
            .expose_changes()
            .map(drop)
            .map_err(|source| Error::Backend {
                backend: self.backend.name(),
                op: "make its queued changes",
                source,
            })
    }

    /// How long the holder of the loop's `Loop::pollable_fd` may wait on
    /// it before running the loop (`run(RunMode::NoWait, ..)`) for what
    /// the fd does not show: zero if callbacks are pending (fed events,
    /// what a previous run left, an async watcher's send not yet taken),
    /// an idle watcher is active, fd changes wait for
    /// [`Loop::flush_changes`] or the backend holds a report its fd does
    /// not show; else the time to the earliest timer, periodic, stat or
    /// once deadline (the clock is read, and the loop's time with it);
    /// `None` if nothing but the fd can bring work (no deadline at all,
    /// or nothing active: nothing then ever needs the loop to run).
    ///
    /// From this call until the loop next polls, a send to one of its
    /// async watchers (from any thread) makes the pollable fd readable;
    /// before it, a send only sets a flag that this call reads (libev's
    /// rule that the wake-up fd is written only while the loop waits). So
    /// call it last before waiting.
    ///
    /// It differs from [`Loop::backend_timeout`], which answers for the
    /// loop's own next poll: that one is zero for a loop that has nothing
    /// to wait for (its `run` would poll without blocking and stop), and
    /// knows of a `run`'s mode and prepare phase.
    ///
    /// ```
    /// use evloop::{Loop, Ready, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// assert_eq!(lp.next_timeout(), None); // nothing to do, ever
    /// let t = lp.timer(Duration::from_millis(250), Duration::ZERO, |_, _, _| {}).unwrap();
    /// assert_eq!(lp.next_timeout(), Some(Duration::from_millis(250)));
    /// lp.feed_event(t, Ready::EMPTY).unwrap();
    /// assert_eq!(lp.next_timeout(), Some(Duration::ZERO)); // pending
    /// ```
    pub fn next_timeout(&mut self) -> Option<Duration> {
        self.materialise_batch();
        let now = Some(Duration::ZERO);
        if !self.pending.is_empty() || self.kinds_due() > 0 {
            return now;
        }
        if self.fds.has_unflushed() {
            return now;
        }
        // A report the fd does not show (or a failure to expose the
        // changes, which the next poll reports): run the loop now.
        if self.backend.expose_changes().unwrap_or(true) {
            return now;
        }
        // From here a send to an async watcher wakes the backend (its fd),
        // until the loop's next poll; one made already is due now.
        if self.kinds_sleep() {
            return now;
        }
        match self.block_time_given(crate::RunMode::Default, false) {
            // Only prepare and check watchers, or nothing: no deadline.
            (_, true) => None,
            (wait, false) => wait,
        }
    }

    /// Turns direct dispatch of io events on (the default) or off. A test
    /// switch, not part of the supported API: the differential test runs
    /// programs both ways and compares (`docs/architecture.md`, "Direct
    /// dispatch"). Turning it off costs speed, nothing else.
    ///
    /// ```
    /// # use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// lp.set_direct_dispatch(false); // every io event becomes a pending entry first
    /// ```
    #[doc(hidden)]
    pub fn set_direct_dispatch(&mut self, on: bool) {
        self.materialise_batch();
        self.results.set_enabled(on);
    }

    /// How many iterations ran (the backend was polled this many times).
    ///
    /// ```
    /// # use evloop::{Loop, Sim};
    /// let lp: Loop = Loop::with_backend(Sim::new().backend());
    /// assert_eq!(lp.iteration(), 0);
    /// ```
    pub fn iteration(&self) -> u64 {
        self.run.iteration
    }

    /// How many [`Loop::run`] calls are executing (nested runs count).
    ///
    /// ```
    /// # use evloop::{Idle, Loop, RunMode, Sim};
    /// let mut lp: Loop<u32> = Loop::with_backend(Sim::new().backend());
    /// Idle::new(&mut lp, |lp, seen, me| { *seen = lp.depth(); lp.remove(me).unwrap(); }).unwrap();
    /// let mut seen = 0;
    /// lp.run(RunMode::Default, &mut seen).unwrap();
    /// assert_eq!((seen, lp.depth()), (1, 0));
    /// ```
    pub fn depth(&self) -> u32 {
        self.run.depth
    }

    /// How many watchers are active and referenced (what keeps
    /// [`RunMode::Default`](crate::RunMode::Default) running).
    ///
    /// ```
    /// # use evloop::{Idle, Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let idle = Idle::new(&mut lp, |_, _, _| {}).unwrap();
    /// assert_eq!(lp.active_count(), 1);
    /// lp.set_ref(idle, false).unwrap();
    /// assert_eq!(lp.active_count(), 0);
    /// ```
    pub fn active_count(&self) -> usize {
        // One-shot watchers whose events wait in a direct batch, or whose
        // disarm it deferred, are disarmed all the same (see
        // `Loop::is_active`).
        let deferred = self
            .results
            .deferred_disarm()
            .is_some_and(|slot| self.registry.is_active_referenced(slot));
        self.registry.active_referenced()
            - deferred as usize
            - self.results.disarmed_referenced(&self.fds, &self.registry)
    }

    /// How many watchers the loop holds, active or not: each keeps its
    /// callback (and what the closure captures) until [`Loop::remove`], or
    /// until it frees itself ([`Timer::once`](crate::Timer::once), [`Once::new`](crate::Once::new)). A
    /// count that only grows is a leak of stopped watchers, such as fired
    /// one-shot timers nobody removed.
    ///
    /// ```
    /// # use evloop::{Loop, RunMode, Sim, Timer};
    /// # use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// lp.timer(Duration::ZERO, Duration::ZERO, |_, _, _| {}).unwrap();
    /// Timer::once(&mut lp, Duration::ZERO, |_, _| {}).unwrap();
    /// lp.run(RunMode::Default, &mut ()).unwrap();
    /// // The fired one-shot `timer` is stopped but kept; `Timer::once` is gone.
    /// assert_eq!((lp.active_count(), lp.watcher_count()), (0, 1));
    /// ```
    pub fn watcher_count(&self) -> usize {
        self.registry.len()
    }

    /// Asks the running [`Loop::run`] (or all nested ones) to return once the
    /// callbacks already pending in this iteration have run. Has no effect
    /// outside `run`.
    ///
    /// ```
    /// use evloop::{Break, Idle, Loop, RunMode, RunOutcome, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// Idle::new(&mut lp, |lp, _, _| lp.break_loop(Break::All)).unwrap();
    /// assert_eq!(lp.run(RunMode::Default, &mut ()).unwrap(), RunOutcome::Broken);
    /// ```
    pub fn break_loop(&mut self, how: Break) {
        if self.run.depth > 0 && self.run.break_req != Some(Break::All) {
            self.run.break_req = Some(how);
        }
    }

    /// Re-creates the backend's kernel objects after `fork()` and registers
    /// every watched fd again (libev's `ev_loop_fork`). Call it in the child
    /// before running the loop there. Signal watchers keep working (in the
    /// child: the child's signals wake the child's loop), child watchers are
    /// stopped (their children are the parent's) but watchers of any child
    /// keep going (for the child's own children), async senders wake the
    /// child's loop, and fork watchers run at the start of the next `run`.
    ///
    /// Unix only: Windows has no `fork()` (the method does not exist there).
    ///
    /// ```
    /// # use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// lp.reinit_after_fork().unwrap();
    /// ```
    #[cfg(any(unix, target_os = "wasi"))]
    pub fn reinit_after_fork(&mut self) -> Result<()> {
        self.materialise_batch();
        let name = self.backend.name();
        self.backend.reinit().map_err(|source| Error::Backend {
            backend: name,
            op: "re-create its kernel object after fork",
            source,
        })?;
        // The service's internal fds are its own to re-create (the
        // inherited ones are shared with the parent), after the others.
        self.fds.forget_internal();
        self.fds.reregister_all();
        self.services(|s, fds| s.reinit(fds))
            .map_err(|source| Error::Backend {
                backend: name,
                op: "re-create its notifier after fork",
                source,
            })?;
        // The backend forgot the signals and children it watched: each
        // kind watches again what it still needs (signals, any child), or
        // stops its watchers (of the parent's children); fork watchers
        // run first thing in the next `run`.
        self.kinds_after_fork()
    }
}

// `builder` does not depend on the state type, so it lives on `Loop` with
// the default state: `Loop::builder()` then needs no type annotation, and
// the state type is chosen by `build`.
impl Loop<'_, ()> {
    /// A [`Builder`], to choose the backend; the state type of the loop is
    /// the one [`Builder::build`] is asked for.
    ///
    /// ```
    /// use evloop::Loop;
    /// let lp: Loop = Loop::builder().backend("poll").build().unwrap();
    /// assert_eq!(lp.backend_name(), "poll");
    /// let counting: Loop<u64> = Loop::builder().backend("select").build().unwrap();
    /// assert_eq!(counting.backend_name(), "select");
    /// ```
    pub fn builder() -> Builder {
        Builder::new()
    }
}

impl<'s, S> Drop for Loop<'s, S> {
    /// Runs the watchers the kinds give it (`Kind::dropping`: the cleanup
    /// watchers, in start order, each once), then drops the kinds (the
    /// async watchers' senders report the loop gone from then on),
    /// with them the custom schedules (the watchers' callbacks and sources go
    /// with the registry, after the backend). A cleanup callback that
    /// panics does not stop the others, the senders are closed all the
    /// same, and every `Drop` runs; the first panic then propagates (or is
    /// dropped if the loop is being dropped by another panic's unwinding,
    /// which a second panic would abort).
    fn drop(&mut self) {
        let mut held = Held::default();
        // The kinds' watchers that run as the loop goes (cleanup watchers:
        // in start order; one started meanwhile runs too, one stopped
        // does not), each once.
        loop {
            let due = self.kinds_dropping();
            if due.is_empty() {
                break;
            }
            for key in due {
                if !self.registry.lookup(key, "").is_ok_and(|e| e.is_active()) {
                    continue;
                }
                self.deactivate(key.slot);
                if let Some(cb) = self.registry[key.slot].cb.take_to_run() {
                    held.run(|| cb.cleanup(self));
                }
            }
        }
        // Before the registry: its callbacks' captures may hold senders
        // (and the periodic kind drops the custom schedules).
        held.drop(std::mem::take(&mut self.kinds));
        held.resume();
    }
}

impl<'s, S> std::fmt::Debug for Loop<'s, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loop")
            .field("backend", &self.backend.name())
            .field("watchers", &self.registry.len())
            .field("active", &self.active_count())
            .field("pending", &self.pending.len())
            .field("timers", &self.timers.len())
            .field("iteration", &self.run.iteration)
            .field("depth", &self.run.depth)
            .field("now", &self.now())
            .finish()
    }
}
