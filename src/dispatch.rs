//! Dispatch: how a watcher's callback is stored (one trait object per
//! watcher), invoked (from the pending queues or straight from the poll
//! results), put back whether it returns or panics, and deferred while it
//! runs further up the stack (a nested `run`); and how a handle reaches
//! its watcher (`Loop::entry_mut`, the one checked path). The callback
//! trait itself (`Dispatch`) is with `Loop`, in event_loop.rs.

use tracing::trace;

use crate::event_loop::BoxedCallback;
use crate::fd_table::Single;
use crate::handle::Handle;
use crate::pending::Priority;
use crate::registry::{CallbackState, Entry};
use crate::settled::{Batch, Settled};
use crate::slot_list::Slot;
use crate::unwind::Held;
use crate::{Loop, Ready, Result};

impl<'s, S> Loop<'s, S> {
    /// Invokes pending callbacks, highest priority first, FIFO within one.
    /// Inlined down to the test for nothing to do (the common case of the
    /// call that starts each `run`).
    #[inline(always)]
    pub(crate) fn invoke_pending(&mut self, state: &mut S) {
        if self.results.is_open() || self.pending.has_entries() {
            self.invoke_pending_now(state);
        }
    }

    #[inline(never)]
    fn invoke_pending_now(&mut self, state: &mut S) {
        // Whether each dispatch must be reported (to the backend or to a
        // `tracing` subscriber): decided once per call, not per event.
        let observed = self.report_dispatch || tracing::level_enabled!(tracing::Level::TRACE);
        loop {
            // Directly dispatched io events come after every queue above the
            // default priority and before the default queue.
            if self.results.is_open() && !self.pending.has_above(Priority::DEFAULT) {
                // Nothing queued: no watcher of the batch's fds can be
                // (see `merge_queued`), and the loop does not test each.
                let merge = !self.pending.is_empty();
                match (observed, merge) {
                    (true, _) => self.run_batch::<true, true>(state),
                    (false, true) => self.run_batch::<false, true>(state),
                    (false, false) => self.run_batch::<false, false>(state),
                }
                continue;
            }
            let Some(p) = self.pending.highest() else {
                break;
            };
            while let Some((slot, ready)) = self.pending.next_in(p) {
                self.invoke::<true>(slot, ready, observed, state);
                if self.pending.has_above(p) {
                    // A callback queued something more urgent.
                    break;
                }
            }
        }
    }

    /// Invokes the direct batch's results in order until they run out, a
    /// callback queues something more urgent than the default priority, or
    /// a result needs the queued path (then the rest is materialised).
    /// `OBSERVED` (dispatches are reported): a constant, so that the common
    /// unobserved loop does not test it per event; `MERGE` (something was
    /// queued when the batch began, which may be a watcher of one of its
    /// fds: `merge_queued`), likewise.
    #[inline(never)]
    fn run_batch<const OBSERVED: bool, const MERGE: bool>(&mut self, state: &mut S) {
        while let Some(ev) = self.results.next() {
            // Ruled out when the batch opened.
            debug_assert!(!ev.ready.is_invalid());
            // One read of the fd table: the common level case tests
            // nothing more.
            let slot = match self.fds.single(ev.fd) {
                Single::Level(slot) => slot,
                Single::Oneshot(slot) => {
                    // The watcher stays active and listed through its
                    // callback, its disarm deferred: a re-arm from the
                    // callback (the common pattern) then only clears the
                    // mark, and nothing can tell, since a query counts the
                    // mark as the disarmed watcher it stands for
                    // (is_active, active_count) and anything else settles
                    // it first (`settle_disarm`). The fd is listed among
                    // the poll's reported fds now, in poll order as
                    // queuing would (the flush takes them first).
                    self.fds.report_oneshot(ev.fd);
                    let e = &self.registry[slot];
                    let mut r = ev.ready & e.receives();
                    if r.is_empty() {
                        continue;
                    }
                    let version = e.version();
                    debug_assert!(MERGE || e.pending.is_none());
                    if MERGE && e.pending.is_some() {
                        r = self.merge_queued(slot, r);
                    }
                    self.results.defer_disarm(slot, version);
                    self.invoke::<false>(slot, r, OBSERVED, state);
                    self.settle_disarm();
                    if self.pending.has_above(Priority::DEFAULT) {
                        return;
                    }
                    continue;
                }
                Single::None => {
                    let Some(fd) = self.fds.get(ev.fd) else {
                        continue;
                    };
                    if fd.watchers().is_empty() {
                        if fd.is_oneshot() {
                            self.fds.report_oneshot(ev.fd);
                        }
                        continue;
                    }
                    // Several watchers on the fd: the queued path from
                    // here on.
                    self.results.unread();
                    self.materialise_batch();
                    return;
                }
            };
            let e = &mut self.registry[slot];
            let mut r = ev.ready & e.receives();
            if r.is_empty() {
                continue;
            }
            // Feeding or re-prioritising a watcher of an fd materialises
            // the batch first; only a kind's phase after the poll may have
            // queued one (a once whose deadline came, an embed watcher
            // whose loop has a timer due), and only before the batch
            // began (`MERGE`).
            debug_assert!(MERGE || e.pending.is_none());
            if MERGE && e.pending.is_some() {
                r = self.merge_queued(slot, r);
            }
            self.invoke::<false>(slot, r, OBSERVED, state);
            if self.pending.has_above(Priority::DEFAULT) {
                return;
            }
        }
    }

    /// A kind's watcher of an fd that its phase after the poll queued (a
    /// once's deadline, an embed watcher's inner deadline) while the
    /// batch held a result for its fd: the queued path would have merged
    /// that entry into the io event's, queued first, at the fd's place in
    /// poll order; so the entry is cancelled and its readiness joins the
    /// event's, invoked now. (Such a watcher has the default priority:
    /// another would have kept the batch from opening.)
    #[cold]
    #[inline(never)]
    fn merge_queued(&mut self, slot: Slot, ready: Ready) -> Ready {
        ready | self.registry.cancel(&mut self.pending, slot)
    }

    /// Materialises the direct batch, if one is open (see
    /// direct_batch.rs), after settling a deferred disarm.
    #[inline]
    pub(crate) fn materialise_batch(&mut self) {
        if self.results.is_open() || self.results.deferred_disarm().is_some() {
            self.materialise_now();
        }
    }

    #[cold]
    #[inline(never)]
    fn materialise_now(&mut self) {
        self.settle_disarm();
        if self.results.is_open() {
            self.results.materialise(
                &mut self.fds,
                &mut self.registry,
                &mut self.pending,
                &mut *self.backend,
            );
        }
    }

    /// Disarms the one-shot watcher whose disarm a direct batch deferred
    /// (see `run_batch`), if any: what the queued path did when it queued
    /// the watcher's event. Before anything that could tell a deferred
    /// disarm from a done one.
    #[inline(always)]
    pub(crate) fn settle_disarm(&mut self) {
        if let Some(slot) = self.results.take_disarm() {
            self.fds.disarm(slot, &mut self.registry);
        }
    }

    /// Runs one watcher's callback: from a pending entry (`QUEUED`: the
    /// watcher forgets its queue position; a live entry names a live
    /// watcher, since stop and remove cancel it) or from a direct batch.
    /// Always inlined: it is the body of both dispatch loops.
    #[inline(always)]
    fn invoke<const QUEUED: bool>(
        &mut self,
        slot: Slot,
        ready: Ready,
        observed: bool,
        state: &mut S,
    ) {
        let e = &mut self.registry[slot];
        if QUEUED {
            e.pending = None;
        }
        let version = e.version();
        let Some(cb) = e.cb.take_to_run() else {
            // Its callback is running further up the stack (a nested
            // `run`): the event is delivered once it returns, rather than
            // recursing or being dropped.
            self.registry.defer(slot, ready);
            return;
        };
        if observed {
            self.observe_dispatch(slot, ready);
        }
        // The guard puts the callback back when it returns, and also if it
        // panics: the watcher and its io source survive the unwinding.
        let mut running = Running {
            lp: self,
            slot,
            version,
            cb: Some(cb),
        };
        if let Some(cb) = running.cb.as_mut() {
            cb.call(running.lp, state, slot, version, ready);
        }
    }

    /// Tells the backend (if it asked, as the simulator does to record its
    /// trace) and `tracing` about a dispatch.
    #[cold]
    fn observe_dispatch(&mut self, slot: Slot, ready: Ready) {
        if self.report_dispatch {
            if let Some(fd) = self.registry[slot].fd() {
                if let Some(s) = self.backend.notices() {
                    s.dispatched(fd, ready);
                }
            }
        }
        trace!(watcher = slot.index(), ready = %ready, "dispatch");
    }

    /// The watcher `h` names, for an operation that a direct batch could
    /// tell from queued events: for an io handle, the batch is
    /// materialised first ([`Settled`], without which the registry hands
    /// out no watcher for a change). Queries use [`Loop::entry`]; the only
    /// other path, stop and remove's, says why.
    #[inline]
    pub(crate) fn entry_mut<H: Handle>(
        &mut self,
        h: &H,
    ) -> Result<&mut Entry<BoxedCallback<'s, S>>> {
        let settled = Settled::for_handle::<H>(self);
        self.registry.lookup_mut(h.key(), h.kind(), settled)
    }

    /// The watcher `h` names, to start it: as [`Loop::entry_mut`], but a
    /// direct batch that has read the watcher's fd already stays open
    /// ([`Settled::for_start`]).
    #[inline]
    pub(crate) fn entry_to_start<H: Handle>(
        &mut self,
        h: &H,
    ) -> Result<&mut Entry<BoxedCallback<'s, S>>> {
        let settled = if H::IO && self.results.is_open() {
            let fd = self.registry.lookup(h.key(), h.kind())?.fd();
            Settled::for_start::<H>(self, fd)
        } else {
            Settled::for_handle::<H>(self)
        };
        self.registry.lookup_mut(h.key(), h.kind(), settled)
    }

    /// The watcher `h` names, for a query (queries take `&self`, so they
    /// count a direct batch's results instead of materialising it).
    #[inline]
    pub(crate) fn entry<H: Handle>(&self, h: &H) -> Result<&Entry<BoxedCallback<'s, S>>> {
        self.registry.lookup(h.key(), h.kind())
    }
}

/// A callback taken out of its entry to run; dropping this puts it back
/// (see [`Loop::invoke`]), whether the callback returned or panicked.
struct Running<'a, 's, S> {
    lp: &'a mut Loop<'s, S>,
    slot: Slot,
    version: u32,
    cb: Option<BoxedCallback<'s, S>>,
}

impl<S> Drop for Running<'_, '_, S> {
    #[inline(always)]
    fn drop(&mut self) {
        let Some(cb) = self.cb.take() else { return };
        // Put the callback back unless the watcher was removed meanwhile
        // (then the callback, and an owned source, are dropped here).
        match self.lp.registry.get_mut(self.slot) {
            Some(e) if e.version() == self.version => {
                let CallbackState::Running = e.cb else {
                    // `set_callback` put a new one in meanwhile.
                    return self.lp.replaced_while_running(self.slot, cb);
                };
                // Running: only this frame puts the callback back, and
                // there is nothing to drop (the state is known here).
                e.cb = CallbackState::Stored(cb);
                if e.deferred().is_some() {
                    self.lp.requeue_deferred(self.slot);
                }
            }
            _ => drop_removed(cb),
        }
    }
}

/// Drops the callback of a watcher removed while it ran (its captures
/// and an owned source are user code). A panic in that `Drop` propagates
/// (the watcher is gone already: the loop is consistent), unless the
/// callback itself panicked: then it is dropped, as a second panic out of
/// the unwinding would abort the process.
#[cold]
#[inline(never)]
fn drop_removed<T>(cb: T) {
    let mut held = Held::default();
    held.drop(cb);
    held.resume();
}

impl<'s, S> Loop<'s, S> {
    /// A callback returned that was replaced while it ran: the new one
    /// stays, events deferred meanwhile are queued for it, and the old
    /// one is dropped (last: its drop may panic).
    #[cold]
    fn replaced_while_running(&mut self, slot: Slot, old: BoxedCallback<'s, S>) {
        if self.registry[slot].deferred().is_some() {
            self.requeue_deferred(slot);
        }
        drop_removed(old);
    }

    /// Queues the events a watcher received while its callback ran.
    #[cold]
    fn requeue_deferred(&mut self, slot: Slot) {
        if let Some(ready) = self.registry.take_deferred(slot) {
            self.registry.queue(&mut self.pending, slot, ready);
        }
    }
}

impl<S> Batch for Loop<'_, S> {
    #[inline(always)]
    fn is_open(&self) -> bool {
        self.results.is_open() || self.results.deferred_disarm().is_some()
    }
    #[inline(always)]
    fn has_read(&self, fd: crate::RawFd) -> bool {
        self.results.last_read() == Some(fd)
    }
    fn materialise(&mut self) {
        self.materialise_batch();
    }
}
