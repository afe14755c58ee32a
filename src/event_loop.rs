//! The loop itself: its state, one iteration's phases, and dispatch.
//!
//! See `docs/architecture.md` for the phases and why each structure exists.

use std::os::fd::RawFd;
use std::time::Duration;

use crate::registry::Registry;
use tracing::trace;

use crate::fd_table::{FdTable, NOT_SINGLE};
use crate::pending::{Pending, PendingQueues, NOT_PENDING};
use crate::timer_heap::{from_ns, to_ns, TimerHeap};
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
    pub(crate) next_gen: u64,
    pub(crate) fds: FdTable,
    pub(crate) pending: PendingQueues,
    pub(crate) timers: TimerHeap,
    pub(crate) timer_seq: u64,
    /// Active idle, prepare and check watchers, in start order.
    pub(crate) idles: Vec<u32>,
    pub(crate) prepares: Vec<u32>,
    pub(crate) checks: Vec<u32>,
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
        let now_ns = to_ns(backend.now());
        let trace_dispatch = backend.wants_dispatch();
        Loop {
            backend,
            caps,
            watchers: Registry::default(),
            next_gen: 1,
            fds: FdTable::default(),
            pending: PendingQueues::default(),
            timers: TimerHeap::default(),
            timer_seq: 0,
            idles: Vec::new(),
            prepares: Vec::new(),
            checks: Vec::new(),
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
        self.now_ns = to_ns(self.backend.now());
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
    /// 6. io events become pending, then expired timers;
    /// 7. idle watchers become pending, only if nothing else is;
    /// 8. check watchers become pending;
    /// 9. pending callbacks are invoked, highest priority first, FIFO within
    ///    a priority.
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
    /// assert_eq!(log, ["prepare", "timer", "check"]);
    /// ```
    pub fn run(&mut self, mode: RunMode, state: &mut S) -> Result<RunOutcome> {
        // A nested run invokes what its caller's iteration left pending.
        self.settle_batch();
        if self.active_refs == 0 && self.pending.is_empty() {
            return Ok(RunOutcome::NoActiveWatchers);
        }
        self.depth += 1;
        self.break_req = None;
        let outcome = self.run_iterations(mode, state);
        self.depth -= 1;
        if self.break_req == Some(Break::One) || self.depth == 0 {
            self.break_req = None;
        }
        outcome
    }

    fn run_iterations(&mut self, mode: RunMode, state: &mut S) -> Result<RunOutcome> {
        // Callbacks fed before `run` (or left by a nested run) go first.
        self.invoke_pending(state);
        loop {
            if self.break_req.is_some() {
                return Ok(RunOutcome::Broken);
            }
            self.iteration += 1;
            trace!(iteration = self.iteration, depth = self.depth, "iteration");

            if !self.prepares.is_empty() {
                queue_list(&mut self.watchers, &mut self.pending, &self.prepares);
                self.invoke_pending(state);
                if self.break_req.is_some() {
                    return Ok(RunOutcome::Broken);
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
            self.expire_timers();
            if !self.idles.is_empty() && self.pending.is_empty() && !self.batch_has_pending() {
                queue_list(&mut self.watchers, &mut self.pending, &self.idles);
            }
            if !self.checks.is_empty() {
                queue_list(&mut self.watchers, &mut self.pending, &self.checks);
            }
            self.invoke_pending(state);

            if self.break_req.is_some() {
                return Ok(RunOutcome::Broken);
            }
            if mode != RunMode::Default {
                return Ok(RunOutcome::IterationDone);
            }
            if self.active_refs == 0 {
                return Ok(RunOutcome::NoActiveWatchers);
            }
        }
    }

    /// How long the next poll may block.
    fn block_time(&mut self, mode: RunMode) -> Option<Duration> {
        if mode == RunMode::NoWait || !self.idles.is_empty() || !self.pending.is_empty() {
            return Some(Duration::ZERO);
        }
        self.timers.earliest_bound()?;
        // Account for the time the callbacks took (as libev does).
        self.update_now();
        let now = self.now_ns;
        let mut next = self.timers.earliest_bound()?;
        if next <= now {
            // Due or stale: settle lazily restarted timers before deciding
            // not to block.
            next = self.timers.peek()?.at;
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
            for &w in anfd.watchers() {
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
        let list = anfd.take_watchers();
        let old = std::mem::replace(&mut anfd.registered, Interest::NONE);
        if old != Interest::NONE {
            // Best effort: poll/select keep tables that must drop the fd.
            let _ = self.backend.modify(fd, old, Interest::NONE);
        }
        for &idx in &list {
            let e = &mut self.watchers[idx];
            e.active = false;
            if e.keepalive {
                self.active_refs -= 1;
            }
            if e.blocks_direct_dispatch() {
                self.io_blocking_direct -= 1;
            }
            let interest = match e.kind {
                Kind::Io { interest, .. } => interest,
                _ => Interest::NONE,
            };
            queue(
                &mut self.watchers,
                &mut self.pending,
                idx,
                Ready::ERROR | Ready::from_interest(interest),
            );
        }
        // Keep the allocation; watchers started by the callbacks reuse it.
        self.fds.get_mut(fd).recycle_watchers(list);
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
                for &idx in anfd.watchers() {
                    queue_io(watchers, pending, idx, ready);
                }
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
        let mut j = 0;
        while let Some(&idx) = self.fds.get(fd).and_then(|a| a.watchers().get(j)) {
            let interest = match self.watchers[idx].kind {
                Kind::Io { interest, .. } => interest,
                _ => unreachable!("non-io watcher on an fd"),
            };
            let r = ready.filter(interest);
            if r.is_empty() {
                j += 1;
                continue;
            }
            queue(&mut self.watchers, &mut self.pending, idx, r);
            if interest.trigger() == Trigger::Oneshot {
                // Disarmed until started again; removes it from the list.
                self.deactivate(idx);
            } else {
                j += 1;
            }
        }
    }

    /// Makes expired timers pending; repeating ones are rescheduled.
    fn expire_timers(&mut self) {
        let now = self.now_ns;
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
                let next = top.at.saturating_add(repeat).max(now);
                self.timer_seq += 1;
                self.timers.reschedule(top.idx, next, self.timer_seq);
            } else {
                self.deactivate(top.idx);
            }
            queue(&mut self.watchers, &mut self.pending, top.idx, Ready::EMPTY);
        }
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
        let Some(mut cb) = e.cb.take() else {
            self.defer(idx, ready);
            return;
        };
        if observed {
            self.observe_dispatch(idx, ready);
        }
        cb.call(self, state, Key { idx, gen }, ready);
        // Put the callback back unless the watcher was removed meanwhile.
        match self.watchers.get_mut(idx) {
            Some(e) if e.gen == gen => {
                // The slot is empty: the callback was taken out above and
                // only this frame puts it back. So there is nothing to drop;
                // forgetting the `None` saves testing it on every event.
                debug_assert!(e.cb.is_none());
                std::mem::forget(e.cb.replace(cb));
                if e.deferred.is_some() {
                    self.requeue_deferred(idx);
                }
            }
            _ => {}
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
                self.fds.get_mut(fd).remove_watcher(idx);
                self.fds.mark_changed(fd);
            }
            Kind::Timer { .. } => self.timers.remove(idx),
            Kind::Idle => remove_from(&mut self.idles, idx),
            Kind::Prepare => remove_from(&mut self.prepares, idx),
            Kind::Check => remove_from(&mut self.checks, idx),
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
        match &mut e.kind {
            Kind::Io { fd, interest } => {
                let fd = *fd;
                let anfd = self.fds.get_mut(fd);
                anfd.push_watcher(idx);
                anfd.oneshot = interest.is_oneshot();
                self.fds.mark_changed(fd);
            }
            Kind::Timer { after, .. } => {
                self.timer_seq += 1;
                let at = now.saturating_add(*after);
                self.timers.insert(idx, at, self.timer_seq);
            }
            Kind::Idle => self.idles.push(idx),
            Kind::Prepare => self.prepares.push(idx),
            Kind::Check => self.checks.push(idx),
        }
    }

    /// Registers a new, inactive watcher.
    pub(crate) fn insert(&mut self, kind: Kind, cb: BoxedCallback<'s, S>) -> Key {
        let gen = self.next_gen;
        self.next_gen += 1;
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

fn queue_list<S>(watchers: &mut Registry<'_, S>, pending: &mut PendingQueues, list: &[u32]) {
    for &idx in list {
        queue(watchers, pending, idx, Ready::EMPTY);
    }
}

fn remove_from(list: &mut Vec<u32>, idx: u32) {
    if let Some(pos) = list.iter().position(|&w| w == idx) {
        list.remove(pos);
    }
}
