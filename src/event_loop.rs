//! The loop: its components, the phases of one iteration, and dispatch.
//!
//! `Loop` holds one component per concern (the registry, the fd table,
//! the poll results, the timers, the idle lists, the prepare and check
//! lists, the pending queues) and orchestrates them; each owns its state
//! and its invariants. What a phase does is here; how a component does its
//! part is in its file. `docs/architecture.md` maps both.

use std::time::Duration;

use tracing::trace;

use crate::backend::{Backend, Capabilities, PollStatus};
use crate::direct_batch::PollResults;
use crate::fd_table::{FdTable, Flush};
use crate::kind::{Kinds, Phase};
use crate::pending::{PendingQueues, Priority};
use crate::registry::{CallbackState, Registry};
use crate::run_state::{Break, RunMode, RunOutcome, RunPhase, RunState};
use crate::slot_list::Slot;
use crate::timers::Timers;
use crate::{Error, Ready, Result};

/// A watcher's callback, type-erased: one trait object per watcher, so
/// that invoking any kind of watcher is a single indirect call. The kinds'
/// adaptors (an io callback with its source, a plain callback with its
/// handle) are in `watchers/`.
pub(crate) trait Dispatch<'s, S> {
    /// Calls it for the watcher in `slot`, whose version is `version`
    /// (`lp.registry.key(slot, version)` is its handle's key: passed in
    /// two registers rather than as a twelve-byte `Key`, which would go
    /// through memory).
    fn call(&mut self, lp: &mut Loop<'s, S>, state: &mut S, slot: Slot, version: u32, ready: Ready);
    /// The source's type, if the callback owns an io source.
    fn owned_type(&self) -> Option<std::any::TypeId> {
        None
    }
    /// The owned io source, for handing back.
    fn into_source(self: Box<Self>) -> Option<Box<dyn std::any::Any>> {
        None
    }
    /// Moves an owned io source to a new callback: `make` builds it from
    /// the source, it is put in `into`, and then this callback is dropped
    /// (its drop may panic: the new callback and the source are in place
    /// by then). Only for a callback whose [`Dispatch::owned_type`] is
    /// `Some`: the caller checks.
    fn give_source(
        self: Box<Self>,
        into: &mut CallbackState<BoxedCallback<'s, S>>,
        make: &mut dyn FnMut(Box<dyn std::any::Any>) -> BoxedCallback<'s, S>,
    ) {
        let _ = (into, make);
        unreachable!("only a callback that owns an io source gives it");
    }
    /// Whether it is an io callback that borrows its source.
    fn borrows_source(&self) -> bool {
        false
    }
    /// Runs a cleanup watcher's callback as the loop is dropped (no user
    /// state is at hand then); other kinds do nothing.
    fn cleanup(self: Box<Self>, lp: &mut Loop<'s, S>) {
        let _ = lp;
    }
}

/// What a watcher's callback is stored as.
pub(crate) type BoxedCallback<'s, S> = Box<dyn Dispatch<'s, S> + 's>;

/// A libev-style event loop.
///
/// `'s` is how long borrowed io sources ([`Io::borrowed`](crate::Io::borrowed)) and the
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
    /// Every watcher, and the counts the loop relies on.
    pub(crate) registry: Registry<BoxedCallback<'s, S>>,
    /// Per-fd state and the changes to send to the backend.
    pub(crate) fds: FdTable,
    /// The last poll's results, and the direct batch among them.
    pub(crate) results: PollResults,
    /// The clock and the timers.
    pub(crate) timers: Timers,
    pub(crate) pending: PendingQueues,
    pub(crate) run: RunState,
    /// Whether the OS service wants
    /// [`NoticeService::dispatched`](crate::backend::NoticeService::dispatched) calls.
    pub(crate) report_dispatch: bool,
    /// The loop's own OS service (services.rs), used unless the backend
    /// has one.
    pub(crate) notifier: crate::services::Own,
    /// The kinds beyond the core (kind.rs, kinds/).
    pub(crate) kinds: Kinds,
}

impl<'s, S> Loop<'s, S> {
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
    ///    timer or other deadline (periodic, stat, once), else forever;
    /// 4. the backend is polled;
    /// 5. the cached time is updated;
    /// 6. io events become pending (in poll order), then what the kinds
    ///    queue after the poll (signals by number, child exits, async
    ///    sends, then kinds from outside the crate), then check watchers,
    ///    then expired timers (in deadline order), then periodic, stat
    ///    and once watchers whose time has come;
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
    /// [`RunOutcome::NoActiveWatchers`] rather than block on nothing. A
    /// nested `run` (called from a callback) does not count the watchers
    /// whose callbacks are running further up the stack: it cannot deliver
    /// their events, which wait until those callbacks return.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`](crate::Error::Backend) if the backend's poll
    /// fails. On Unix, `Error::CannotEmbed` once the iteration's
    /// callbacks ran, if the backend refused an embed watcher's fd (the
    /// watcher is stopped: `Embed::new` says when).
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
    /// The same holds for user code that the loop calls outside a
    /// callback: a panic propagates (from the call that ran it) and the
    /// loop stays consistent, every count right and each watcher either
    /// fully started or fully stopped.
    ///
    /// - A custom [`Schedule`](crate::Schedule) that panics is treated as
    ///   one that gave no time: in [`Periodic::new`](crate::Periodic::new) no watcher is created
    ///   (the callback is dropped); in [`Loop::start`] the watcher stays
    ///   stopped; asked after a firing or after a wall-clock step (inside
    ///   `run`), its watcher stops (that firing is still delivered), the
    ///   other periodics due or realigned are dealt with, and then the
    ///   panic propagates out of `run`.
    /// - A panic in the `Drop` of what a watcher was given (its callback's
    ///   captures, an owned io source, a custom schedule's captures)
    ///   propagates from [`Loop::remove`], or from `run` for a watcher
    ///   removed in its own callback, once the watcher is gone; everything
    ///   else is still dropped. If the callback itself panicked, its panic
    ///   is the one that propagates (a second would abort the process).
    /// - When the loop is dropped, every cleanup watcher runs, the async
    ///   watchers' senders are closed and every watcher is dropped even if
    ///   some of them panic; the first panic then propagates from the drop.
    ///
    /// ```
    /// use evloop::{Check, Loop, Prepare, RunMode, RunOutcome, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop<Vec<&str>> = Loop::with_backend(Sim::new().backend());
    /// Prepare::new(&mut lp, |_, log, _| log.push("prepare")).unwrap();
    /// Check::new(&mut lp, |_, log, _| log.push("check")).unwrap();
    /// lp.timer(Duration::from_millis(5), Duration::ZERO, |_, log, _| log.push("timer")).unwrap();
    /// let mut log = vec![];
    /// assert_eq!(lp.run(RunMode::Once, &mut log).unwrap(), RunOutcome::IterationDone);
    /// assert_eq!(log, ["prepare", "check", "timer"]);
    /// ```
    pub fn run(&mut self, mode: RunMode, state: &mut S) -> Result<RunOutcome> {
        // A nested run invokes what its caller's iteration left pending.
        self.materialise_batch();
        // Inside a callback: the watchers whose callbacks are running
        // further up the stack cannot be served by this run (their events
        // wait until those callbacks return), so they do not keep it going.
        // Found by a scan, once per nested run: nothing on the hot path
        // keeps track of them.
        if let Some(e) = self.run.failure.take() {
            return Err(e);
        }
        let nested = self.run.depth > 0;
        if nested {
            let suspended = self.registry.running();
            // Their fds leave the backend's set for this run (the flush
            // leaves running watchers out): a level-triggered fd that
            // stays ready would otherwise end every wait at once, a spin
            // for as long as the nested run lasts.
            self.fds_changed(&suspended);
            self.run.suspended.push(suspended);
        }
        if self.out_of_work() {
            if nested {
                if let Some(suspended) = self.run.suspended.pop() {
                    self.fds_changed(&suspended);
                }
            }
            return Ok(RunOutcome::NoActiveWatchers);
        }
        self.run.depth += 1;
        self.run.break_req = None;
        let outer = std::mem::replace(
            &mut self.run.phase,
            RunPhase {
                mode,
                preparing: false,
            },
        );
        // Restores the depth (and the caller's phase) even if a callback
        // panics.
        let guard = RunGuard {
            lp: self,
            nested,
            outer,
        };
        guard.lp.run_iterations(mode, state)
    }

    /// Marks the fds of the io watchers among `slots` as changed, so that
    /// the next flush recomputes what the backend is told for them.
    fn fds_changed(&mut self, slots: &[Slot]) {
        for &slot in slots {
            if let Some(fd) = self.registry[slot].fd() {
                self.fds.mark_changed(fd);
            }
        }
    }

    /// Whether nothing this run can serve is active and referenced, and
    /// nothing is queued: waiting would block forever (a simulator says
    /// `Stalled`; a kernel hangs). Events deferred for a callback that is
    /// running further up the stack do not count either: this `run`
    /// cannot deliver them.
    #[inline]
    fn out_of_work(&self) -> bool {
        let mut serving = self.registry.active_referenced();
        if let Some(suspended) = self.run.suspended.last() {
            serving -= suspended
                .iter()
                .filter(|&&slot| self.registry.is_active_referenced(slot))
                .count();
        }
        // The kinds are asked last: only when nothing else keeps it going.
        serving == 0 && self.pending.is_empty() && !self.kinds.iter().any(|k| k.keeps_alive())
    }

    fn run_iterations(&mut self, mode: RunMode, state: &mut S) -> Result<RunOutcome> {
        // Callbacks fed before `run` (or left by a nested run) go first.
        self.invoke_pending(state);
        loop {
            let exit = match self.iterate(mode, state) {
                Ok(()) => continue,
                Err(exit) => exit,
            };
            // What the callbacks queued for the kernel goes before `run`
            // returns (completion I/O's sends); a failure leaves it for
            // the next wait.
            if let Err(e) = self.backend.submit_pending() {
                tracing::trace!(%e, "submitting before run returns failed");
            }
            return match exit {
                Exit::Returns(outcome) => Ok(outcome),
                Exit::Fails(e) => Err(e),
            };
        }
    }

    /// One iteration: the phases of [`Loop::run`]'s doc, one step a line;
    /// `Err` when `run` returns.
    fn iterate(&mut self, mode: RunMode, state: &mut S) -> Step {
        self.may_go_on()?; // 0. a break, or nothing left to serve
        self.run.next_iteration();
        self.run_prepare(state)?; // 1. prepare watchers, invoked before the poll
        self.flush_fds(); // 2. fd changes, one backend call per fd
        let nothing_to_wait_for = self.poll_backend(mode)?; // 3-5. block time, poll, time
        self.queue_io(); // 6. io events (or a direct batch), then the kinds:
        self.polled(); //    signals, child exits, async sends...
        self.run_phase(Phase::Check, None); //    check watchers
        let expired = self.expire(); //    timers, then periodics and stats
        self.run_phase(Phase::Idle, expired); // 7. idle watchers, libev's rule
        self.invoke_pending(state); // 8. invoked by priority, FIFO
        self.iteration_done(mode, nothing_to_wait_for)
    }

    /// Whether `run` goes on: no break was asked for, and something is
    /// left to serve (checked after every phase that runs callbacks: the
    /// last watcher may go in any of them).
    fn may_go_on(&mut self) -> Step {
        if let Some(e) = self.run.failure.take() {
            return Err(Exit::Fails(e)); // met by the callbacks just run
        }
        if self.run.break_req.is_some() {
            return Err(Exit::Returns(RunOutcome::Broken));
        }
        if self.out_of_work() {
            return Err(Exit::Returns(RunOutcome::NoActiveWatchers));
        }
        Ok(())
    }

    /// The prepare phase: what it queues runs before the poll (and does
    /// not make the timeout a prepare watcher asks for zero).
    fn run_prepare(&mut self, state: &mut S) -> Step {
        if self.run_phase(Phase::Prepare, None).is_none() {
            return Ok(());
        }
        self.run.phase.preparing = true;
        self.invoke_pending(state);
        self.run.phase.preparing = false;
        self.may_go_on()
    }

    /// libev's `fd_reify`: the changed fds' interests to the backend.
    pub(crate) fn flush_fds(&mut self) {
        let flush = Flush {
            native_oneshot: self.caps.oneshot,
            nested: self.run.depth > 1,
        };
        self.fds.flush_changes(
            &mut self.registry,
            &mut self.pending,
            &mut *self.backend,
            flush,
        );
    }

    /// The poll's io events become pending, in poll order, unless they
    /// can be dispatched straight from the results (direct_batch.rs).
    fn queue_io(&mut self) {
        self.route_internal();
        // A direct batch lists its one-shot fds as it reaches them.
        if !self.results.open(&self.registry, &self.pending) {
            self.fds.queue_events(
                self.results.all(),
                &mut self.registry,
                &mut self.pending,
                &mut *self.backend,
            );
        }
    }

    /// The kinds' polled phase, with the backend's notices taken for it
    /// (once: the phase changes what the kinds want) and cleared after.
    fn polled(&mut self) {
        let noticed = self.uses_notices();
        if noticed {
            self.take_notices();
        }
        self.run_phase(Phase::Polled, None);
        if noticed {
            self.clear_notices();
        }
    }

    /// Expired timers, then the kinds' deadlines; the highest priority
    /// among them (the idle rule needs it).
    fn expire(&mut self) -> Option<Priority> {
        let timers = self.timers.expire(&mut self.registry, &mut self.pending);
        timers.max(self.run_phase(Phase::Expire, timers))
    }

    /// After the invocations: a break, a run that could only stall, or
    /// the end of a `Once`/`NoWait` run.
    fn iteration_done(&mut self, mode: RunMode, nothing_to_wait_for: bool) -> Step {
        if let Some(e) = self.run.failure.take() {
            return Err(Exit::Fails(e));
        }
        if self.run.break_req.is_some() {
            return Err(Exit::Returns(RunOutcome::Broken));
        }
        if nothing_to_wait_for && !self.out_of_work() && self.nothing_can_happen() {
            // Only prepare and check watchers (or timers beyond the end
            // of the clock) are left: the iteration ran them without
            // waiting, and waiting for another would hang forever.
            return Err(Exit::Returns(RunOutcome::Stalled));
        }
        if mode != RunMode::Default {
            return Err(Exit::Returns(RunOutcome::IterationDone));
        }
        Ok(())
    }

    /// Polls the backend for as long as the loop may block, and caches
    /// the time after it. Says whether the poll did not block only because
    /// nothing could have ended the wait; a simulator that knows nothing
    /// will ever happen ends the run (`Stalled`).
    fn poll_backend(&mut self, mode: RunMode) -> std::result::Result<bool, Exit> {
        loop {
            let (mut timeout, nothing_to_wait_for) = self.block_time(mode);
            // From here a send to an async watcher wakes the backend; one
            // made already means the poll must not block.
            if timeout != Some(Duration::ZERO) && self.kinds_sleep() {
                timeout = Some(Duration::ZERO);
            }
            let polled = self.backend.poll(timeout, self.results.buffer());
            self.kinds_wake();
            let status = polled.map_err(|source| Error::Backend {
                backend: self.backend.name(),
                op: "poll",
                source,
            })?;
            self.timers.set_now(self.backend.now());
            trace!(ready = self.results.all().len(), ?timeout, "poll");
            let timed_out = status == PollStatus::Done
                && self.results.all().is_empty()
                && timeout.is_some_and(|t| !t.is_zero());
            if timed_out && self.timers.woke_early(&mut self.registry) && !self.noticed_anything() {
                // The timer that bounded the wait was restarted later
                // meanwhile (a lazy `again`): nothing is due; wait on.
                continue;
            }
            if status == PollStatus::Stalled {
                return Err(Exit::Returns(RunOutcome::Stalled));
            }
            return Ok(nothing_to_wait_for);
        }
    }

    /// How long the next poll may block, and whether it may not block only
    /// because nothing could end the wait.
    pub(crate) fn block_time(&mut self, mode: RunMode) -> (Option<Duration>, bool) {
        let pending = !self.pending.is_empty();
        self.block_time_given(mode, pending)
    }

    /// [`Loop::block_time`], where `pending` says whether invocations will
    /// still be pending when the loop polls.
    pub(crate) fn block_time_given(
        &mut self,
        mode: RunMode,
        pending: bool,
    ) -> (Option<Duration>, bool) {
        if mode == RunMode::NoWait || pending {
            return (Some(Duration::ZERO), false);
        }
        let backend = &mut self.backend;
        let mut wait = self.timers.wait_bound(&mut self.registry, || backend.now());
        if let Some(bound) = self.kinds_wait() {
            wait = Some(wait.map_or(bound, |w| w.min(bound)));
        }
        match wait {
            // Nothing could end the wait: poll without blocking, so that
            // the iteration's check watchers run, and stop after it.
            None if self.registry.active_sources() == 0 => (Some(Duration::ZERO), true),
            wait => (wait, false),
        }
    }

    /// Whether nothing could ever end a wait: nothing is pending, no idle
    /// watcher is active (it would keep the loop iterating), and no active
    /// watcher can produce an event (no io watcher, no timer due within
    /// the clock's range). Prepare and check watchers run around
    /// iterations and cause none.
    fn nothing_can_happen(&mut self) -> bool {
        self.pending.is_empty()
            && !self.kinds_have_deadline()
            && self.registry.active_sources() == 0
            && !self.timers.has_deadline(&mut self.registry)
    }
}

/// A step of an iteration: `Err` when `run` returns.
type Step = std::result::Result<(), Exit>;

/// Why an iteration ends the `run`: with an outcome, or an error.
enum Exit {
    Returns(RunOutcome),
    Fails(Error),
}

impl From<Error> for Exit {
    fn from(e: Error) -> Exit {
        Exit::Fails(e)
    }
}

/// Restores the depth (and the break request) when a `run` ends, whether
/// it returns or a callback panics.
struct RunGuard<'a, 's, S> {
    lp: &'a mut Loop<'s, S>,
    /// Whether it is a nested run (which pushed its suspended watchers).
    nested: bool,
    /// The phase of the run this one is nested in (the default at depth 0).
    outer: RunPhase,
}

impl<S> Drop for RunGuard<'_, '_, S> {
    fn drop(&mut self) {
        // A callback that panicked from a direct batch leaves its disarm
        // deferred: done now, as the queued path did before the callback.
        self.lp.settle_disarm();
        if self.nested {
            // The suspended watchers' fds go back into the backend's set
            // at the caller's next flush.
            if let Some(suspended) = self.lp.run.suspended.pop() {
                self.lp.fds_changed(&suspended);
            }
        }
        let run = &mut self.lp.run;
        run.phase = self.outer;
        run.depth -= 1;
        if run.break_req == Some(Break::One) || run.depth == 0 {
            run.break_req = None;
        }
    }
}
