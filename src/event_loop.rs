//! The loop itself: its state, one iteration's phases, and dispatch.
//!
//! See `docs/architecture.md` for the phases and why each structure exists.

use std::os::fd::RawFd;
use std::time::Duration;

use crate::registry::Registry;
use tracing::trace;

use crate::fd_table::{FdTable, NOT_SINGLE};
use crate::pending::{Pending, PendingQueues, NOT_PENDING, NUM_PRIORITIES};
use crate::slot_list::{Link, SlotList};
use crate::timer_heap::{clock_ns, from_ns, TimerHeap, NEVER};
use crate::watcher::{BoxedCallback, Entry, Key, Kind};
use crate::{
    Backend, Capabilities, Error, Interest, PollEvent, PollStatus, Ready, Result, Trigger,
};

/// The lowest priority a watcher can have.
///
/// ```
/// assert_eq!((evloop::MIN_PRIORITY, evloop::MAX_PRIORITY), (-2, 2));
/// ```
pub const MIN_PRIORITY: i32 = -2;
/// The highest priority a watcher can have (see [`MIN_PRIORITY`]).
pub const MAX_PRIORITY: i32 = 2;

/// The pending queue of priority 0, every watcher's initial priority.
pub(crate) const DEFAULT_QUEUE: u8 = (0 - MIN_PRIORITY) as u8;

/// How [`Loop::run`] runs.
///
/// ```
/// use evloop::{Loop, RunMode, RunOutcome, Sim};
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// lp.idle(|_, _, _| {}).unwrap();
/// assert_eq!(lp.run(RunMode::NoWait, &mut ()).unwrap(), RunOutcome::IterationDone);
/// assert_eq!(lp.iteration(), 1);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunMode {
    /// Iterate until no active, referenced watcher remains, or
    /// [`Loop::break_loop`] is called (libev's `ev_run(loop, 0)`).
    Default,
    /// One iteration, blocking until at least one event arrives if nothing
    /// is pending (`EVRUN_ONCE`).
    Once,
    /// One iteration that never blocks (`EVRUN_NOWAIT`).
    NoWait,
}

/// How far [`Loop::break_loop`] unwinds.
///
/// ```
/// use evloop::{Break, Loop, RunMode, RunOutcome, Sim};
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// lp.idle(|lp, _, _| lp.break_loop(Break::One)).unwrap();
/// assert_eq!(lp.run(RunMode::Default, &mut ()).unwrap(), RunOutcome::Broken);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Break {
    /// Make the innermost [`Loop::run`] return.
    One,
    /// Make every nested [`Loop::run`] return.
    All,
}

/// Why [`Loop::run`] returned.
///
/// ```
/// use evloop::{Loop, RunMode, RunOutcome, Sim};
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// // No watchers: returns at once, without an iteration (as libuv does).
/// assert_eq!(lp.run(RunMode::Default, &mut ()).unwrap(), RunOutcome::NoActiveWatchers);
/// assert_eq!(lp.iteration(), 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    /// No active, referenced watcher is left.
    NoActiveWatchers,
    /// [`Loop::break_loop`] was called.
    Broken,
    /// The single iteration of [`RunMode::Once`] or [`RunMode::NoWait`] ended.
    IterationDone,
    /// The backend says nothing can ever happen (only a simulated backend can
    /// know this): io watchers are active, no timer is armed and no event is
    /// scheduled. Blocking would hang forever, so `run` returns instead.
    Stalled,
}

/// A libev-style event loop.
///
/// `'s` is how long borrowed io sources ([`Loop::io_borrowed`]) and the
/// callbacks' captures must live; `S` is the user state handed to every
/// callback by `&mut` (pass `&mut ()` when there is none). Callbacks get
/// `&mut Loop` too, so they can start, stop, modify, create and remove any
/// watcher, themselves included.
///
/// ```
/// use evloop::{Loop, RunMode, Sim};
/// use std::time::Duration;
///
/// let mut lp: Loop<u32> = Loop::with_backend(Sim::new().backend());
/// lp.timer(Duration::from_millis(10), Duration::from_millis(10), |lp, ticks, me| {
///     *ticks += 1;
///     if *ticks == 3 {
///         lp.stop(me).unwrap();
///     }
/// }).unwrap();
/// let mut ticks = 0;
/// lp.run(RunMode::Default, &mut ticks).unwrap();
/// assert_eq!((ticks, lp.now()), (3, Duration::from_millis(30)));
/// ```
pub struct Loop<'s, S = ()> {
    pub(crate) backend: Box<dyn Backend + 's>,
    pub(crate) caps: Capabilities,
    pub(crate) watchers: Registry<'s, S>,
    pub(crate) fds: FdTable,
    pub(crate) pending: PendingQueues,
    pub(crate) timers: TimerHeap,
    pub(crate) timer_seq: u64,
    /// Active idle watchers, one list per priority (the idle rule picks
    /// one priority level per iteration), in start order; and their number.
    pub(crate) idles: [SlotList; NUM_PRIORITIES],
    pub(crate) idle_count: usize,
    /// Active prepare and check watchers, in start order.
    pub(crate) prepares: SlotList,
    pub(crate) checks: SlotList,
    pub(crate) events: Vec<PollEvent>,
    /// The cached loop time, in nanoseconds (what the timer heap keys on).
    pub(crate) now_ns: u64,
    pub(crate) active_refs: usize,
    iteration: u64,
    depth: u32,
    break_req: Option<Break>,
    /// Whether the backend wants [`Backend::dispatched`] calls.
    trace_dispatch: bool,
    /// Watchers holding an event that arrived while their callback ran
    /// (counted as pending).
    pub(crate) deferred_count: usize,
    /// `events[batch_pos..batch_end]` are io events being dispatched
    /// directly, without pending entries (io_batch.rs).
    pub(crate) batch_pos: usize,
    pub(crate) batch_end: usize,
    /// Active io watchers that rule out direct dispatch
    /// ([`Entry::blocks_direct_dispatch`]: a priority other than the
    /// default, or one-shot).
    pub(crate) io_blocking_direct: usize,
    /// Whether direct dispatch may be used ([`Loop::set_direct_dispatch`]).
    pub(crate) direct_dispatch: bool,
    /// Scratch space for materialising a batch (kept for its capacity).
    pub(crate) requeue_buf: Vec<Pending>,
}

impl<'s, S> Loop<'s, S> {
    /// A loop on the given backend (any [`Backend`], including one defined
    /// outside this crate).
    ///
    /// ```
    /// use evloop::{Loop, Sim};
    /// let lp: Loop = Loop::with_backend(Sim::new().backend());
    /// assert_eq!(lp.backend_name(), "sim");
    /// ```
    pub fn with_backend(backend: impl Backend + 's) -> Self {
        Self::from_boxed(Box::new(backend))
    }

    /// A loop on an already boxed backend (what [`Builder`](crate::Builder)
    /// produces).
    ///
    /// ```
    /// use evloop::{Backend, Loop, Sim};
    /// let b: Box<dyn Backend> = Box::new(Sim::new().backend());
    /// let lp: Loop = Loop::from_boxed(b);
    /// assert_eq!(lp.backend_name(), "sim");
    /// ```
    pub fn from_boxed(mut backend: Box<dyn Backend + 's>) -> Self {
        let caps = backend.capabilities();
        let now_ns = clock_ns(backend.now());
        let trace_dispatch = backend.wants_dispatch();
        Loop {
            backend,
            caps,
            watchers: Registry::default(),
            fds: FdTable::default(),
            pending: PendingQueues::default(),
            timers: TimerHeap::default(),
            timer_seq: 0,
            idles: Default::default(),
            idle_count: 0,
            prepares: SlotList::default(),
            checks: SlotList::default(),
            events: Vec::with_capacity(64),
            now_ns,
            active_refs: 0,
            iteration: 0,
            depth: 0,
            break_req: None,
            trace_dispatch,
            deferred_count: 0,
            batch_pos: 0,
            batch_end: 0,
            io_blocking_direct: 0,
            direct_dispatch: true,
            requeue_buf: Vec::new(),
        }
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
        from_ns(self.now_ns)
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
        self.now_ns = clock_ns(self.backend.now());
    }

    /// How many callbacks are queued and not yet invoked.
    ///
    /// ```
    /// # use evloop::{Loop, Ready, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let idle = lp.idle(|_, _, _| {}).unwrap();
    /// lp.feed_event(idle, Ready::EMPTY).unwrap();
    /// assert_eq!(lp.pending_count(), 1);
    /// ```
    pub fn pending_count(&self) -> usize {
        self.pending.len() + self.deferred_count + self.batch_pending_count()
    }

    /// Turns direct dispatch of io events on (the default) or off.
    ///
    /// When every active io watcher has the default priority and none is
    /// one-shot, the loop invokes io callbacks straight from the backend's
    /// poll results instead of queuing a pending entry for each first;
    /// anything that could observe the difference makes it queue the rest
    /// first, so the order of callbacks and every pending-state query are
    /// the same either way (`docs/architecture.md`, "Direct dispatch"). The
    /// switch exists to check exactly that: the tests run programs both
    /// ways and compare. Turning it off costs speed, nothing else.
    ///
    /// ```
    /// # use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// lp.set_direct_dispatch(false); // every io event becomes a pending entry first
    /// ```
    pub fn set_direct_dispatch(&mut self, on: bool) {
        self.settle_batch();
        self.direct_dispatch = on;
    }

    /// How many iterations ran (the backend was polled this many times).
    ///
    /// ```
    /// # use evloop::{Loop, Sim};
    /// let lp: Loop = Loop::with_backend(Sim::new().backend());
    /// assert_eq!(lp.iteration(), 0);
    /// ```
    pub fn iteration(&self) -> u64 {
        self.iteration
    }

    /// How many [`Loop::run`] calls are executing (nested runs count).
    ///
    /// ```
    /// # use evloop::{Loop, RunMode, Sim};
    /// let mut lp: Loop<u32> = Loop::with_backend(Sim::new().backend());
    /// lp.idle(|lp, seen, me| { *seen = lp.depth(); lp.remove(me).unwrap(); }).unwrap();
    /// let mut seen = 0;
    /// lp.run(RunMode::Default, &mut seen).unwrap();
    /// assert_eq!((seen, lp.depth()), (1, 0));
    /// ```
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// How many watchers are active and referenced (what keeps
    /// [`RunMode::Default`] running).
    ///
    /// ```
    /// # use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let idle = lp.idle(|_, _, _| {}).unwrap();
    /// assert_eq!(lp.active_count(), 1);
    /// lp.set_ref(idle, false).unwrap();
    /// assert_eq!(lp.active_count(), 0);
    /// ```
    pub fn active_count(&self) -> usize {
        self.active_refs
    }

    /// Asks the running [`Loop::run`] (or all nested ones) to return once the
    /// callbacks already pending in this iteration have run. Has no effect
    /// outside `run`.
    ///
    /// ```
    /// use evloop::{Break, Loop, RunMode, RunOutcome, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// lp.idle(|lp, _, _| lp.break_loop(Break::All)).unwrap();
    /// assert_eq!(lp.run(RunMode::Default, &mut ()).unwrap(), RunOutcome::Broken);
    /// ```
    pub fn break_loop(&mut self, how: Break) {
        if self.depth > 0 && self.break_req != Some(Break::All) {
            self.break_req = Some(how);
        }
    }

    /// Re-creates the backend's kernel object after `fork()` and registers
    /// every watched fd again (libev's `ev_loop_fork`). Call it in the child
    /// before running the loop there.
    ///
    /// ```
    /// # use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// lp.reinit_after_fork().unwrap();
    /// ```
    pub fn reinit_after_fork(&mut self) -> Result<()> {
        self.settle_batch();
        let name = self.backend.name();
        self.backend.reinit().map_err(|source| Error::Backend {
            backend: name,
            op: "re-create its kernel object after fork",
            source,
        })?;
        let fds: Vec<RawFd> = self.fds.registered_fds().collect();
        for fd in fds {
            self.fds.get_mut(fd).registered = Interest::NONE;
            self.fds.mark_changed(fd);
        }
        Ok(())
    }

    /// Runs the loop (see [`RunMode`]) and says why it returned.
    ///
    /// With no active, referenced watcher and nothing pending it returns
    /// [`RunOutcome::NoActiveWatchers`] at once, without an iteration.
    /// One iteration runs these phases, in order:
    ///
    /// 1. prepare watchers are invoked;
    /// 2. fd changes are sent to the backend (at most one call per fd);
    /// 3. the blocking time is computed: zero with active idle watchers,
    ///    pending callbacks or [`RunMode::NoWait`], else until the earliest
    ///    timer, else forever;
    /// 4. the backend is polled;
    /// 5. the cached time is updated;
    /// 6. io events become pending (in poll order), then check watchers,
    ///    then expired timers (in deadline order);
    /// 7. idle watchers of one priority become pending: those of the
    ///    highest priority that has any, if no io event, expired timer or
    ///    other callback is pending at that priority or above (libev's rule;
    ///    this iteration's check watchers do not count);
    /// 8. pending callbacks are invoked, highest priority first, FIFO within
    ///    a priority: so within one priority, io callbacks run before check
    ///    watchers, which run before the timers that expired meanwhile
    ///    (Node's `setImmediate` before `setTimeout(0)`), then idles.
    ///
    /// Whenever a phase that ran callbacks leaves no active, referenced
    /// watcher and nothing pending, `run` returns
    /// [`RunOutcome::NoActiveWatchers`] rather than block on nothing.
    ///
    /// # Panics
    ///
    /// A panic in a callback propagates out of `run`, and leaves the loop
    /// whole: the callback (with its io source) is put back, the watcher
    /// keeps its state, events that arrived meanwhile stay pending, and the
    /// depth is restored, so that after `catch_unwind` the loop can be run
    /// again. Callbacks still pending from the interrupted iteration run in
    /// the next `run`.
    ///
    /// ```
    /// use evloop::{Loop, RunMode, RunOutcome, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop<Vec<&str>> = Loop::with_backend(Sim::new().backend());
    /// lp.prepare(|_, log, _| log.push("prepare")).unwrap();
    /// lp.check(|_, log, _| log.push("check")).unwrap();
    /// lp.timer(Duration::from_millis(5), Duration::ZERO, |_, log, _| log.push("timer")).unwrap();
    /// let mut log = vec![];
    /// assert_eq!(lp.run(RunMode::Once, &mut log).unwrap(), RunOutcome::IterationDone);
    /// assert_eq!(log, ["prepare", "check", "timer"]);
    /// ```
    pub fn run(&mut self, mode: RunMode, state: &mut S) -> Result<RunOutcome> {
        // A nested run invokes what its caller's iteration left pending.
        self.settle_batch();
        if self.out_of_work() {
            return Ok(RunOutcome::NoActiveWatchers);
        }
        self.depth += 1;
        self.break_req = None;
        // Restores the depth even if a callback panics.
        let guard = RunGuard(self);
        guard.0.run_iterations(mode, state)
    }

    /// Whether nothing referenced is active and nothing is queued: waiting
    /// would block forever (a simulator says `Stalled`; a kernel hangs).
    /// Events deferred for a callback that is running further up the stack
    /// do not count: this `run` cannot deliver them.
    #[inline]
    fn out_of_work(&self) -> bool {
        self.active_refs == 0 && self.pending.is_empty()
    }

    fn run_iterations(&mut self, mode: RunMode, state: &mut S) -> Result<RunOutcome> {
        // Callbacks fed before `run` (or left by a nested run) go first.
        self.invoke_pending(state);
        loop {
            if self.break_req.is_some() {
                return Ok(RunOutcome::Broken);
            }
            // Checked after every phase that runs callbacks: the last
            // watcher may have gone in any of them.
            if self.out_of_work() {
                return Ok(RunOutcome::NoActiveWatchers);
            }
            self.iteration += 1;
            trace!(iteration = self.iteration, depth = self.depth, "iteration");

            if !self.prepares.is_empty() {
                queue_list(&mut self.watchers, &mut self.pending, self.prepares);
                self.invoke_pending(state);
                if self.break_req.is_some() {
                    return Ok(RunOutcome::Broken);
                }
                if self.out_of_work() {
                    return Ok(RunOutcome::NoActiveWatchers);
                }
            }

            self.reify();

            let status = loop {
                let timeout = self.block_time(mode);
                self.events.clear();
                let status = self
                    .backend
                    .poll(timeout, &mut self.events)
                    .map_err(|source| Error::Backend {
                        backend: self.backend.name(),
                        op: "poll",
                        source,
                    })?;
                self.update_now();
                trace!(ready = self.events.len(), ?timeout, "poll");
                let timed_out = status == PollStatus::Done
                    && self.events.is_empty()
                    && timeout.is_some_and(|t| !t.is_zero());
                if timed_out && self.woke_for_a_moved_timer() {
                    // The timer that bounded the wait was restarted later
                    // meanwhile (a lazy `again`): nothing is due; wait on.
                    continue;
                }
                break status;
            };
            if status == PollStatus::Stalled {
                return Ok(RunOutcome::Stalled);
            }

            if self.can_dispatch_directly() {
                (self.batch_pos, self.batch_end) = (0, self.events.len());
            } else {
                self.queue_io_events_from(0);
            }
            // Decided before this iteration's check watchers are queued
            // (they do not hold idles back, as in libev), completed once
            // the expired timers are known.
            let idle_level = self.idle_level();
            if !self.checks.is_empty() {
                queue_list(&mut self.watchers, &mut self.pending, self.checks);
            }
            let timers_up_to = self.expire_timers();
            if let Some(q) = idle_level {
                if timers_up_to.map_or(true, |t| t < q) {
                    queue_list(&mut self.watchers, &mut self.pending, self.idles[q]);
                }
            }
            self.invoke_pending(state);

            if self.break_req.is_some() {
                return Ok(RunOutcome::Broken);
            }
            if mode != RunMode::Default {
                return Ok(RunOutcome::IterationDone);
            }
        }
    }

    /// libev's idle rule: the idle watchers of the highest priority that
    /// has any are queued, unless something is pending at that priority or
    /// above. One priority level per iteration, so an idle watcher of a
    /// high priority runs while lower work is pending, and a low one waits
    /// for everything above it. Returns that priority's queue, unless what
    /// is pending now holds it back (the caller checks the expired timers).
    fn idle_level(&self) -> Option<usize> {
        if self.idle_count == 0 {
            return None;
        }
        let q = (0..NUM_PRIORITIES)
            .rev()
            .find(|&q| !self.idles[q].is_empty())?;
        // Io events still in a direct batch are pending at the default
        // priority.
        let batch_blocks = q <= DEFAULT_QUEUE as usize && self.batch_has_pending();
        (!batch_blocks && !self.pending.has_live_at_or_above(q)).then_some(q)
    }

    /// How long the next poll may block.
    fn block_time(&mut self, mode: RunMode) -> Option<Duration> {
        if mode == RunMode::NoWait || self.idle_count > 0 || !self.pending.is_empty() {
            return Some(Duration::ZERO);
        }
        if self.timers.earliest_bound()? == NEVER {
            // Only timers beyond the end of the clock: nothing to wait for.
            return None;
        }
        // Account for the time the callbacks took (as libev does).
        self.update_now();
        let now = self.now_ns;
        let mut next = self.timers.earliest_bound()?;
        if next <= now {
            // Due or stale: settle lazily restarted timers before deciding
            // not to block.
            next = self.timers.peek()?.at;
        }
        if next == NEVER {
            return None;
        }
        Some(from_ns(next.saturating_sub(now)))
    }

    /// Whether the wait ended at a timer bound that turned out stale: the
    /// top timer was lazily restarted to a later time, which settling (it
    /// sifts such timers down) reveals.
    fn woke_for_a_moved_timer(&mut self) -> bool {
        let now = self.now_ns;
        if !self.timers.earliest_bound().is_some_and(|at| at <= now) {
            return false;
        }
        self.timers.peek().is_some_and(|top| top.at > now)
    }

    /// Sends each changed fd's new interest union to the backend, once.
    fn reify(&mut self) {
        if !self.fds.has_changes() {
            return;
        }
        let changes = self.fds.take_changes();
        for &fd in &changes {
            let anfd = self.fds.get_mut(fd);
            anfd.changed = false;
            let mut want = Interest::NONE;
            for w in anfd.watchers().iter(&self.watchers) {
                if let Kind::Io { interest, .. } = self.watchers[w].kind {
                    want |= interest;
                }
            }
            if want.is_empty() {
                want = Interest::NONE;
            } else if want.trigger() == Trigger::Oneshot && !self.caps.oneshot {
                want = want.events();
            }
            let old = anfd.registered;
            if want == old {
                continue;
            }
            trace!(fd, %old, new = %want, "backend modify");
            match self.backend.modify(fd, old, want) {
                Ok(()) => self.fds.get_mut(fd).registered = want,
                Err(err) => {
                    tracing::debug!(fd, %err, "backend refused the fd; stopping its watchers");
                    self.kill_fd(fd);
                }
            }
        }
        self.fds.restore_changes(changes);
    }

    /// The fd is unusable: every io watcher on it is stopped and receives
    /// [`Ready::ERROR`] (libev's `fd_kill`), and the backend forgets it.
    pub(crate) fn kill_fd(&mut self, fd: RawFd) {
        let anfd = self.fds.get_mut(fd);
        let old = std::mem::replace(&mut anfd.registered, Interest::NONE);
        if old != Interest::NONE {
            // Best effort: poll/select keep tables that must drop the fd.
            let _ = self.backend.modify(fd, old, Interest::NONE);
        }
        let Loop {
            fds,
            watchers,
            pending,
            active_refs,
            io_blocking_direct,
            ..
        } = self;
        fds.get_mut(fd).drain_watchers(watchers, |watchers, idx| {
            let e = &mut watchers[idx];
            e.active = false;
            if e.keepalive {
                *active_refs -= 1;
            }
            if e.blocks_direct_dispatch() {
                *io_blocking_direct -= 1;
            }
            let interest = match e.kind {
                Kind::Io { interest, .. } => interest,
                _ => Interest::NONE,
            };
            queue_entry(
                e,
                pending,
                idx,
                Ready::ERROR | Ready::from_interest(interest),
            );
        });
    }

    /// Turns the backend's readiness reports, from `events[from]` on, into
    /// pending io callbacks.
    pub(crate) fn queue_io_events_from(&mut self, mut from: usize) {
        loop {
            let stop = self.queue_io_events_fast(from);
            let Some(&PollEvent { fd, ready }) = self.events.get(stop) else {
                return;
            };
            self.queue_io_event_slow(fd, ready);
            from = stop + 1;
        }
    }

    /// Queues the events from index `from` on, up to the first one that
    /// needs [`Loop::queue_io_event_slow`] (an invalid fd or a one-shot
    /// registration), whose index it returns (`events.len()` if none).
    /// Split out, and kept out of `run`, so that the common case compiles
    /// to a tight loop with everything in registers.
    #[inline(never)]
    fn queue_io_events_fast(&mut self, from: usize) -> usize {
        let Loop {
            events,
            fds,
            watchers,
            pending,
            ..
        } = self;
        let rest = events.get(from..).unwrap_or_default();
        for (off, &PollEvent { fd, ready }) in rest.iter().enumerate() {
            let Some(anfd) = fds.get(fd) else {
                continue;
            };
            // Not one-shot, so reify (which ran just before the poll) left
            // the registration matching the watchers' shared mode.
            if anfd.oneshot || ready.is_invalid() {
                return from + off;
            }
            if anfd.single != NOT_SINGLE {
                queue_io(watchers, pending, anfd.single, ready);
            } else {
                anfd.watchers().for_each(watchers, |watchers, idx| {
                    queue_io(watchers, pending, idx, ready)
                });
            }
        }
        events.len()
    }

    /// Invalid fds and one-shot registrations.
    #[cold]
    fn queue_io_event_slow(&mut self, fd: RawFd, ready: Ready) {
        if ready.is_invalid() {
            self.kill_fd(fd);
            return;
        }
        if self.fds.get_mut(fd).registered.trigger() == Trigger::Oneshot {
            // The kernel disarmed the fd (native one-shot): re-arm or
            // forget it at the next reify.
            self.fds.get_mut(fd).registered = Interest::NONE.with_trigger(Trigger::Oneshot);
            self.fds.mark_changed(fd);
        }
        let Some(anfd) = self.fds.get(fd) else {
            return;
        };
        let mut cur = anfd.watchers().first();
        while let Some(idx) = cur {
            // Read before `deactivate` unlinks `idx`.
            cur = SlotList::next(&self.watchers, idx);
            let interest = match self.watchers[idx].kind {
                Kind::Io { interest, .. } => interest,
                _ => unreachable!("non-io watcher on an fd"),
            };
            let r = ready.filter(interest);
            if r.is_empty() {
                continue;
            }
            queue(&mut self.watchers, &mut self.pending, idx, r);
            if interest.trigger() == Trigger::Oneshot {
                // Disarmed until started again; removes it from the list.
                self.deactivate(idx);
            }
        }
    }

    /// Makes expired timers pending; repeating ones are rescheduled.
    /// Returns the highest priority queue among them, if any expired (the
    /// idle rule needs it).
    fn expire_timers(&mut self) -> Option<usize> {
        let now = self.now_ns;
        // `now` is below NEVER, so timers parked there never come up.
        debug_assert!(now < NEVER);
        let mut highest = None;
        // Settle (sift lazily restarted timers) only once the bound is due.
        while self.timers.earliest_bound().is_some_and(|at| at <= now) {
            let Some(top) = self.timers.peek() else { break };
            if top.at > now {
                break;
            }
            let Kind::Timer { repeat, .. } = self.watchers[top.idx].kind else {
                unreachable!("non-timer in the timer heap")
            };
            if repeat > 0 {
                // A late repeating timer fires once and is rescheduled from
                // now, like libev: it does not replay every missed period.
                // Past the end of the clock it is parked at NEVER, so that
                // it cannot come up again in this loop.
                let next = top.at.saturating_add(repeat).max(now);
                self.timer_seq += 1;
                self.timers.reschedule(top.idx, next, self.timer_seq);
            } else {
                self.deactivate(top.idx);
            }
            let e = &mut self.watchers[top.idx];
            highest = highest.max(Some(e.queue as usize));
            queue_entry(e, &mut self.pending, top.idx, Ready::EMPTY);
        }
        highest
    }

    /// Invokes pending callbacks, highest priority first, FIFO within one.
    pub(crate) fn invoke_pending(&mut self, state: &mut S) {
        // Whether each dispatch must be reported (to the backend or to a
        // `tracing` subscriber): decided once per call, not per event.
        let observed = self.trace_dispatch || tracing::level_enabled!(tracing::Level::TRACE);
        loop {
            // Directly dispatched io events come after every queue above the
            // default priority and before the default queue.
            if self.batch_active() && !self.pending.has_above(DEFAULT_QUEUE as usize) {
                if observed {
                    self.run_batch::<true>(state);
                } else {
                    self.run_batch::<false>(state);
                }
                continue;
            }
            let Some(q) = self.pending.highest() else {
                break;
            };
            while let Some(p) = self.pending.next_in(q) {
                self.invoke::<true>(p.idx, p.ready, observed, state);
                if self.pending.has_above(q) {
                    // A callback queued something more urgent.
                    break;
                }
            }
        }
    }

    /// Runs one watcher's callback: from a pending entry (`QUEUED`: the
    /// watcher forgets its slot; a live entry names a live watcher, since
    /// stop and remove cancel it) or from a direct batch (io_batch.rs).
    /// Always inlined: it is the body of both dispatch loops.
    #[inline(always)]
    pub(crate) fn invoke<const QUEUED: bool>(
        &mut self,
        idx: u32,
        ready: Ready,
        observed: bool,
        state: &mut S,
    ) {
        let e = &mut self.watchers[idx];
        if QUEUED {
            e.pending = NOT_PENDING;
        }
        let gen = e.gen;
        let Some(cb) = e.cb.take() else {
            self.defer(idx, ready);
            return;
        };
        if observed {
            self.observe_dispatch(idx, ready);
        }
        // The guard puts the callback back when it returns, and also if it
        // panics: the watcher and its io source survive the unwinding.
        let mut running = Running {
            lp: self,
            idx,
            gen,
            cb: Some(cb),
        };
        if let Some(cb) = running.cb.as_mut() {
            cb.call(running.lp, state, Key { idx, gen }, ready);
        }
    }

    /// The watcher's callback is running further up the stack (a nested
    /// `run`): the event is delivered once it returns, rather than
    /// recursing or being dropped.
    #[cold]
    fn defer(&mut self, idx: u32, ready: Ready) {
        let e = &mut self.watchers[idx];
        match &mut e.deferred {
            Some(held) => *held |= ready,
            None => {
                e.deferred = Some(ready);
                self.deferred_count += 1;
            }
        }
    }

    /// Queues the event a watcher received while its callback ran.
    #[cold]
    fn requeue_deferred(&mut self, idx: u32) {
        if let Some(ready) = self.watchers[idx].deferred.take() {
            self.deferred_count -= 1;
            self.queue(idx, ready);
        }
    }

    /// Tells the backend (if it asked, as the simulator does to record its
    /// trace) and `tracing` about a dispatch.
    #[cold]
    fn observe_dispatch(&mut self, idx: u32, ready: Ready) {
        if self.trace_dispatch {
            if let Kind::Io { fd, .. } = self.watchers[idx].kind {
                self.backend.dispatched(fd, ready);
            }
        }
        trace!(watcher = idx, ready = %ready, "dispatch");
    }

    /// Takes a watcher out of its active structure (fd list, heap, list).
    /// Does not touch a pending invocation.
    pub(crate) fn deactivate(&mut self, idx: u32) {
        let e = &mut self.watchers[idx];
        if !e.active {
            return;
        }
        e.active = false;
        if e.keepalive {
            self.active_refs -= 1;
        }
        match e.kind {
            Kind::Io { fd, .. } => {
                if e.blocks_direct_dispatch() {
                    self.io_blocking_direct -= 1;
                }
                self.fds.get_mut(fd).remove_watcher(&mut self.watchers, idx);
                self.fds.mark_changed(fd);
            }
            Kind::Timer { .. } => self.timers.remove(idx),
            Kind::Idle => {
                let q = e.queue as usize;
                self.idles[q].remove(&mut self.watchers, idx);
                self.idle_count -= 1;
            }
            Kind::Prepare => self.prepares.remove(&mut self.watchers, idx),
            Kind::Check => self.checks.remove(&mut self.watchers, idx),
        }
    }

    /// Puts a watcher into its active structure. The caller has checked that
    /// this cannot fail (trigger conflicts).
    pub(crate) fn activate(&mut self, idx: u32) {
        let now = self.now_ns;
        let e = &mut self.watchers[idx];
        if e.active {
            return;
        }
        e.active = true;
        if e.keepalive {
            self.active_refs += 1;
        }
        if e.blocks_direct_dispatch() {
            self.io_blocking_direct += 1;
        }
        match e.kind {
            Kind::Io { fd, interest } => {
                let anfd = self.fds.get_mut(fd);
                anfd.push_watcher(&mut self.watchers, idx, interest.trigger());
                self.fds.mark_changed(fd);
            }
            Kind::Timer { after, .. } => {
                self.timer_seq += 1;
                let at = now.saturating_add(after);
                self.timers.insert(idx, at, self.timer_seq);
            }
            Kind::Idle => {
                let q = e.queue as usize;
                self.idles[q].push(&mut self.watchers, idx);
                self.idle_count += 1;
            }
            Kind::Prepare => self.prepares.push(&mut self.watchers, idx),
            Kind::Check => self.checks.push(&mut self.watchers, idx),
        }
    }

    /// Registers a new, inactive watcher.
    pub(crate) fn insert(&mut self, kind: Kind, cb: BoxedCallback<'s, S>) -> Key {
        let gen = self.watchers.new_generation();
        let idx = self.watchers.insert(Entry {
            gen,
            queue: DEFAULT_QUEUE,
            active: false,
            keepalive: true,
            pending: NOT_PENDING,
            io_mask: match kind {
                Kind::Io { interest, .. } => Ready::receive_mask(interest),
                _ => Ready::EMPTY,
            },
            deferred: None,
            cb: Some(cb),
            link: Link::UNLINKED,
            kind,
        });
        Key { idx, gen }
    }

    /// Queues an invocation of `idx` with `ready`.
    pub(crate) fn queue(&mut self, idx: u32, ready: Ready) {
        queue(&mut self.watchers, &mut self.pending, idx, ready);
    }
}

impl<'s, S> std::fmt::Debug for Loop<'s, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loop")
            .field("backend", &self.backend.name())
            .field("watchers", &self.watchers.len())
            .field("active", &self.active_refs)
            .field("pending", &self.pending.len())
            .field("timers", &self.timers.len())
            .field("iteration", &self.iteration)
            .field("depth", &self.depth)
            .field("now", &self.now())
            .finish()
    }
}

/// Queues an invocation, merging with one already queued (libev ORs the
/// events into the existing pending entry the same way).
#[inline]
fn queue<S>(watchers: &mut Registry<'_, S>, pending: &mut PendingQueues, idx: u32, ready: Ready) {
    queue_entry(&mut watchers[idx], pending, idx, ready)
}

/// Queues an io event for one watcher, if its interest lets it through.
#[inline]
fn queue_io<S>(
    watchers: &mut Registry<'_, S>,
    pending: &mut PendingQueues,
    idx: u32,
    ready: Ready,
) {
    let e = &mut watchers[idx];
    let r = ready & e.io_mask;
    if !r.is_empty() {
        queue_entry(e, pending, idx, r);
    }
}

#[inline]
fn queue_entry<S>(e: &mut Entry<'_, S>, pending: &mut PendingQueues, idx: u32, ready: Ready) {
    if e.pending == NOT_PENDING {
        e.pending = pending.push(e.queue, idx, ready);
    } else {
        pending.merge(e.queue, e.pending, ready);
    }
}

fn queue_list<S>(watchers: &mut Registry<'_, S>, pending: &mut PendingQueues, list: SlotList) {
    list.for_each(watchers, |watchers, idx| {
        queue_entry(&mut watchers[idx], pending, idx, Ready::EMPTY)
    });
}

/// A callback taken out of its entry to run; dropping this puts it back
/// (see [`Loop::invoke`]), whether the callback returned or panicked.
struct Running<'a, 's, S> {
    lp: &'a mut Loop<'s, S>,
    idx: u32,
    gen: u64,
    cb: Option<BoxedCallback<'s, S>>,
}

impl<S> Drop for Running<'_, '_, S> {
    #[inline(always)]
    fn drop(&mut self) {
        let Some(cb) = self.cb.take() else { return };
        // Put the callback back unless the watcher was removed meanwhile
        // (then the callback, and an owned source, are dropped here).
        match self.lp.watchers.get_mut(self.idx) {
            Some(e) if e.gen == self.gen => {
                // The slot is empty: the callback was taken out above and
                // only this frame puts it back. So there is nothing to drop;
                // forgetting the `None` saves testing it on every event.
                debug_assert!(e.cb.is_none());
                std::mem::forget(e.cb.replace(cb));
                if e.deferred.is_some() {
                    self.lp.requeue_deferred(self.idx);
                }
            }
            _ => drop(cb),
        }
    }
}

/// Restores the depth (and the break request) when a `run` ends, whether
/// it returns or a callback panics.
struct RunGuard<'a, 's, S>(&'a mut Loop<'s, S>);

impl<S> Drop for RunGuard<'_, '_, S> {
    fn drop(&mut self) {
        let lp = &mut *self.0;
        lp.depth -= 1;
        if lp.break_req == Some(Break::One) || lp.depth == 0 {
            lp.break_req = None;
        }
    }
}
