//! Direct dispatch of io events: the poll results are the pending queue.
//!
//! The eager path turns every io event into an 8-byte pending entry
//! (`queue_io_events`) and then invokes the entries in order. When nothing
//! could interleave with them, that round trip is pure overhead: the io
//! events of an iteration would be queued first at the default priority
//! and invoked first at that priority, in poll order. So, when
//!
//! - every active io watcher has the default priority and is not one-shot
//!   (the loop counts the others in `io_blocking_direct`),
//! - no poll result reports an invalid fd (killing it stops watchers,
//!   which must happen before any callback runs), and
//! - nothing is queued at the default priority yet,
//!
//! the loop skips queuing and later walks the poll results themselves,
//! invoking each fd's watcher straight from them, after every queue of a
//! higher priority and before the default queue (where the expired timers,
//! idle and check watchers of the iteration were queued, behind the io
//! events as before).
//!
//! The result must be exactly what the eager path does. Everything that
//! could tell the difference *materialises* the rest of the batch first,
//! turning the remaining events into ordinary pending entries placed ahead
//! of whatever was queued at the default priority meanwhile, as if they had
//! been queued eagerly:
//!
//! - an operation on an io watcher that would have met its queued entry,
//!   or that adds a watcher to an fd or changes what one receives: start,
//!   creating an io watcher, `set_priority`, `feed_event`,
//!   `clear_pending`, `set_interest`;
//! - a nested `run` and `reinit_after_fork` (defensive: a nested run would
//!   drain the batch in the same order anyway);
//! - an event the fast walk does not handle: an fd with several watchers
//!   (one-shot registrations and invalid fds were ruled out up front).
//!
//! Stopping or removing an io watcher needs nothing: the walk looks an
//! fd's watchers up when it reaches the fd, so a stopped watcher is skipped
//! exactly as its cancelled entry would have been, and anything that could
//! put it back (start, creation) settles first. `is_pending` and
//! `pending_count` take `&self`, so they count the remaining events
//! instead. Timer, idle, prepare and check operations
//! (`again` above all) need none of this: their entries never share a
//! queue position with io events. `tests/direct_dispatch.rs` runs random
//! programs with direct dispatch on and off and compares their traces, and
//! has one hand-built program per settle point that fails without it.

use crate::event_loop::DEFAULT_QUEUE;
use crate::fd_table::NOT_SINGLE;
use crate::pending::NOT_PENDING;
use crate::{Handle, Loop, PollEvent, Ready};

impl<'s, S> Loop<'s, S> {
    /// Whether this iteration's io events can be dispatched straight from
    /// the poll results (see the module documentation).
    #[inline]
    pub(crate) fn can_dispatch_directly(&self) -> bool {
        self.direct_dispatch
            && self.io_blocking_direct == 0
            && !self.pending.has_entries_in(DEFAULT_QUEUE)
            // Killing an invalid fd stops its watchers: that must happen
            // when the events are queued, before any callback runs.
            // (An OR over all of them, which compiles to a branch-free loop.)
            && !self
                .events
                .iter()
                .fold(Ready::EMPTY, |all, ev| all | ev.ready)
                .is_invalid()
    }

    /// Keeps [`Loop::io_blocking_direct`] in step when an active io
    /// watcher's priority or trigger mode changes.
    pub(crate) fn recount_blocking_direct(&mut self, before: bool, now: bool) {
        match (before, now) {
            (false, true) => self.io_blocking_direct += 1,
            (true, false) => self.io_blocking_direct -= 1,
            _ => {}
        }
    }

    /// Whether poll results remain to be dispatched directly.
    #[inline]
    pub(crate) fn batch_active(&self) -> bool {
        self.batch_pos < self.batch_end
    }

    /// Invokes the remaining poll results in order until they run out, a
    /// callback queues something more urgent than the default priority, or
    /// an event needs the eager path (then the rest is materialised).
    /// `OBSERVED` (dispatches are reported): a constant, so that the common
    /// unobserved loop does not test it per event.
    #[inline(never)]
    pub(crate) fn run_batch<const OBSERVED: bool>(&mut self, state: &mut S) {
        while self.batch_pos < self.batch_end {
            let i = self.batch_pos;
            self.batch_pos = i + 1;
            let PollEvent { fd, ready } = self.events[i];
            let Some(anfd) = self.fds.get(fd) else {
                continue;
            };
            // Ruled out when the batch began (`can_dispatch_directly`), and
            // nothing changes an fd's watchers during a batch without
            // materialising it first.
            debug_assert!(!ready.is_invalid() && !anfd.oneshot);
            let idx = anfd.single;
            if idx == NOT_SINGLE {
                if anfd.watchers().is_empty() {
                    continue;
                }
                // Several watchers on the fd: the eager path from here on.
                self.batch_pos = i;
                self.materialize_batch();
                return;
            }
            let e = &mut self.watchers[idx];
            let r = ready & e.io_mask;
            if r.is_empty() {
                continue;
            }
            // Nothing queues an io watcher while a batch is in flight:
            // feeding or re-prioritising one materialises the batch first.
            debug_assert!(!e.is_queued(), "io watcher queued during a direct batch");
            self.invoke::<false>(idx, r, OBSERVED, state);
            if self.pending.has_above(DEFAULT_QUEUE as usize) {
                return;
            }
        }
    }

    /// [`Loop::settle_batch`] before an operation on watcher `h`, if it is
    /// an io watcher.
    #[inline]
    pub(crate) fn settle_for<H: Handle>(&mut self, _h: &H) {
        if H::IO {
            self.settle_batch();
        }
    }

    /// Materialises the rest of the batch, if one is being dispatched.
    #[inline]
    pub(crate) fn settle_batch(&mut self) {
        if self.batch_active() {
            self.materialize_batch();
        }
    }

    /// Turns the remaining poll results into ordinary pending entries,
    /// ahead of what was queued at the default priority since the poll, as
    /// the eager path would have queued them.
    #[cold]
    fn materialize_batch(&mut self) {
        let from = self.batch_pos;
        self.batch_pos = 0;
        self.batch_end = 0;
        let mut later = std::mem::take(&mut self.requeue_buf);
        self.pending.take_unread(DEFAULT_QUEUE, &mut later);
        for p in &later {
            self.watchers[p.idx].pending = NOT_PENDING;
        }
        self.queue_io_events_from(from);
        for p in later.drain(..) {
            // If an io event was queued for the same watcher just now, the
            // eager path would have merged this entry into it.
            self.queue(p.idx, p.ready);
        }
        self.requeue_buf = later;
    }

    /// Whether the remaining poll results hold an event for an io watcher
    /// on `fd` that receives `mask` (what the eager path would have queued
    /// for it).
    pub(crate) fn batch_holds(&self, fd: std::os::fd::RawFd, mask: Ready) -> bool {
        self.remaining_batch()
            .iter()
            .any(|ev| ev.fd == fd && (ev.ready.is_invalid() || !(ev.ready & mask).is_empty()))
    }

    /// How many invocations the remaining poll results stand for.
    pub(crate) fn batch_pending_count(&self) -> usize {
        let mut n = 0;
        self.visit_batch_invocations(|| {
            n += 1;
            true
        });
        n
    }

    /// Whether the remaining poll results stand for any invocation (the
    /// idle phase's "nothing else is pending" test), stopping at the first.
    pub(crate) fn batch_has_pending(&self) -> bool {
        let mut any = false;
        self.visit_batch_invocations(|| {
            any = true;
            false
        });
        any
    }

    /// Calls `f` once per invocation the remaining poll results stand for
    /// (what the eager path would have queued), until it returns false.
    fn visit_batch_invocations(&self, mut f: impl FnMut() -> bool) {
        for ev in self.remaining_batch() {
            let Some(anfd) = self.fds.get(ev.fd) else {
                continue;
            };
            for idx in anfd.watchers().iter(&self.watchers) {
                let mask = self.watchers[idx].io_mask;
                if (ev.ready.is_invalid() || !(ev.ready & mask).is_empty()) && !f() {
                    return;
                }
            }
        }
    }

    fn remaining_batch(&self) -> &[PollEvent] {
        if self.batch_active() {
            &self.events[self.batch_pos..self.batch_end]
        } else {
            &[]
        }
    }
}
