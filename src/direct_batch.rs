//! The poll results of an iteration, and the part of them that is being
//! dispatched directly: io callbacks invoked straight from the results,
//! with no pending entry per event, when nothing could tell the
//! difference. `docs/architecture.md` ("Direct dispatch") has the rule and
//! why it is exact; in short, the batch is *materialised* (its unread
//! results turned into the pending entries the queued path would have
//! made) before anything could observe it.

use crate::RawFd;

use crate::backend::{Backend, Notices, PollEvent};
use crate::fd_table::FdTable;
use crate::pending::{Pending, PendingQueues, Priority};
use crate::registry::Registry;
use crate::slot_list::Slot;
use crate::Ready;

/// The cursor of a closed batch: past any results.
const CLOSED: usize = usize::MAX;

pub(crate) struct PollResults {
    /// What the last poll reported.
    events: Vec<PollEvent>,
    /// `events[next..]` is the direct batch: results not yet invoked nor
    /// queued. [`CLOSED`] (or `events.len()`, once all are read) when none
    /// is open: one bounds check per read then tells both.
    next: usize,
    /// Whether direct dispatch may be used (tests compare both ways).
    enabled: bool,
    /// Scratch space for materialising (kept for its capacity).
    requeue: Vec<Pending>,
    /// The one-shot watcher whose callback the batch is running, with its
    /// fd (the fd's only watcher), whose disarm is deferred: it stays
    /// active and on its fd's list, marked, until the callback re-arms it
    /// ([`Loop::start`](crate::Loop::start): the mark is cleared, nothing
    /// else), anything could tell (the loop settles the mark first: the
    /// disarm the queued path made when it queued the event), or the
    /// callback returns (then it is disarmed). Its slot and version: the
    /// loop's own watcher.
    disarm: Option<(Slot, u32)>,
    /// What the backend noticed besides fd readiness in the last poll:
    /// the kinds read it in the polled phase (kept for its capacity).
    pub notices: Notices,
}

impl Default for PollResults {
    fn default() -> Self {
        PollResults {
            events: Vec::with_capacity(64),
            next: CLOSED,
            enabled: true,
            requeue: Vec::new(),
            disarm: None,
            notices: Notices::default(),
        }
    }
}

impl PollResults {
    /// The buffer for the next poll, emptied.
    pub fn buffer(&mut self) -> &mut Vec<PollEvent> {
        debug_assert!(!self.is_open(), "polling with a direct batch open");
        debug_assert!(self.disarm.is_none(), "polling with a disarm deferred");
        self.next = CLOSED;
        self.events.clear();
        &mut self.events
    }

    /// What the last poll reported.
    pub fn all(&self) -> &[PollEvent] {
        &self.events
    }

    /// Allows or forbids direct dispatch (from the next poll on).
    pub fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
    }

    /// Opens a direct batch over all the results, if nothing could tell it
    /// from queued events: direct dispatch is on, no active io watcher has
    /// a priority other than the default (the registry counts them), nothing is queued at the default priority yet, and no
    /// result reports an invalid fd (killing it stops watchers, which must
    /// happen before any callback runs). Returns whether it opened one.
    #[inline]
    pub fn open<C>(&mut self, registry: &Registry<C>, pending: &PendingQueues) -> bool {
        let direct = self.enabled
            && registry.blocking_direct() == 0
            && !pending.has_entries_in(Priority::DEFAULT)
            && !any_invalid(&self.events);
        if direct {
            self.next = 0;
        }
        direct
    }

    /// Whether a direct batch has unread results.
    #[inline]
    pub fn is_open(&self) -> bool {
        self.next < self.events.len()
    }

    /// The next unread result of the direct batch, now read.
    #[inline]
    pub fn next(&mut self) -> Option<PollEvent> {
        let ev = *self.events.get(self.next)?;
        self.next += 1;
        Some(ev)
    }

    /// The fd of the result read last, while a batch is open: by the
    /// backend contract (each fd at most once per poll), no unread result
    /// is for it.
    #[inline]
    pub fn last_read(&self) -> Option<RawFd> {
        if self.next == CLOSED || self.next == 0 {
            return None;
        }
        self.events.get(self.next - 1).map(|ev| ev.fd)
    }

    /// Defers the disarm of the one-shot watcher in `slot` (whose version
    /// is `version`), the only watcher of its fd, whose callback is about
    /// to run from the batch.
    #[inline(always)]
    pub fn defer_disarm(&mut self, slot: Slot, version: u32) {
        debug_assert!(self.disarm.is_none(), "a disarm deferred already");
        self.disarm = Some((slot, version));
    }

    /// The slot of the watcher whose disarm is deferred, if any.
    #[inline(always)]
    pub fn deferred_disarm(&self) -> Option<Slot> {
        self.disarm.map(|(slot, _)| slot)
    }

    /// Whether the disarm of the watcher at `slot` is deferred: it is
    /// active and listed, but stands for a disarmed (inactive) watcher.
    #[inline]
    pub fn is_disarming(&self, slot: Slot) -> bool {
        self.deferred_disarm() == Some(slot)
    }

    /// Whether the disarm of this loop's watcher in `slot` with `version`
    /// is deferred.
    #[inline(always)]
    pub fn is_disarming_version(&self, slot: Slot, version: u32) -> bool {
        self.disarm == Some((slot, version))
    }

    /// Takes the deferred disarm, if any (the watcher's slot): the caller
    /// disarms the watcher (or, re-armed by its callback, keeps it as it
    /// is).
    #[inline(always)]
    pub fn take_disarm(&mut self) -> Option<Slot> {
        self.disarm.take().map(|(slot, _)| slot)
    }

    /// Makes the result just read unread again (it needs the queued path).
    pub fn unread(&mut self) {
        self.next -= 1;
    }

    /// Turns the unread results into ordinary pending entries, ahead of
    /// what was queued at the default priority since the poll, exactly
    /// where the queued path would have put them, and closes the batch.
    #[cold]
    pub fn materialise<C>(
        &mut self,
        fds: &mut FdTable,
        registry: &mut Registry<C>,
        pending: &mut PendingQueues,
        backend: &mut dyn Backend,
    ) {
        debug_assert!(
            self.disarm.is_none(),
            "materialising with a disarm deferred"
        );
        let from = self.next;
        self.next = CLOSED;
        let mut later = std::mem::take(&mut self.requeue);
        pending.take_unread(Priority::DEFAULT, &mut later);
        for p in &later {
            if let Some(slot) = p.slot {
                registry[slot].pending = None;
            }
        }
        fds.queue_events(&self.events[from..], registry, pending, backend);
        for p in later.drain(..) {
            if let Some(slot) = p.slot {
                // If an io event was queued for the same watcher just now,
                // the queued path would have merged this entry into it.
                registry.queue(pending, slot, p.ready);
            }
        }
        self.requeue = later;
    }

    /// The unread results of the batch (none when it is closed).
    pub fn unread_results(&self) -> &[PollEvent] {
        self.events.get(self.next..).unwrap_or_default()
    }

    /// Whether the batch holds an event for an io watcher on `fd` that
    /// receives `receives` (what the queued path would have queued for it).
    pub fn holds(&self, fd: RawFd, receives: Ready) -> bool {
        self.unread_results()
            .iter()
            .any(|ev| ev.fd == fd && reaches(ev.ready, receives))
    }

    /// How many invocations the batch stands for (what the queued path
    /// would have queued).
    pub fn invocations<C>(&self, fds: &FdTable, registry: &Registry<C>) -> usize {
        self.invocation_iter(fds, registry).count()
    }

    /// Whether the batch stands for any invocation.
    pub fn has_invocations<C>(&self, fds: &FdTable, registry: &Registry<C>) -> bool {
        self.invocation_iter(fds, registry).next().is_some()
    }

    /// How many active, referenced one-shot watchers the batch stands
    /// for: the queued path would have disarmed them already, so they no
    /// longer count as active.
    pub fn disarmed_referenced<C>(&self, fds: &FdTable, registry: &Registry<C>) -> usize {
        self.unread_results()
            .iter()
            .filter_map(|ev| Some((ev.ready, fds.get(ev.fd)?)))
            .filter(|(_, state)| state.is_oneshot())
            .flat_map(|(ready, state)| {
                state.watchers().iter(registry).filter(move |&slot| {
                    reaches(ready, registry[slot].receives()) && registry.is_active_referenced(slot)
                })
            })
            .count()
    }

    fn invocation_iter<'a, C>(
        &'a self,
        fds: &'a FdTable,
        registry: &'a Registry<C>,
    ) -> impl Iterator<Item = ()> + 'a {
        self.unread_results()
            .iter()
            .filter_map(move |ev| Some((ev.ready, fds.get(ev.fd)?)))
            .flat_map(move |(ready, state)| {
                state
                    .watchers()
                    .iter(registry)
                    .filter(move |&slot| reaches(ready, registry[slot].receives()))
                    .map(|_| ())
            })
    }
}

/// Whether a result with `ready` makes an invocation of a watcher that
/// receives `receives` (an invalid fd reaches every watcher on it).
fn reaches(ready: Ready, receives: Ready) -> bool {
    ready.is_invalid() || !(ready & receives).is_empty()
}

/// Whether a result reports an invalid fd: an OR over all of them,
/// eight at a time (branch-free, one load and OR per result: it runs
/// over every poll's results on the direct path).
#[inline]
fn any_invalid(events: &[PollEvent]) -> bool {
    let mut chunks = events.chunks_exact(8);
    let mut all = 0u8;
    for c in &mut chunks {
        all |= c[0].ready.bits()
            | c[1].ready.bits()
            | c[2].ready.bits()
            | c[3].ready.bits()
            | c[4].ready.bits()
            | c[5].ready.bits()
            | c[6].ready.bits()
            | c[7].ready.bits();
    }
    for ev in chunks.remainder() {
        all |= ev.ready.bits();
    }
    all & Ready::INVALID.bits() != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_result_is_found_wherever_it_is() {
        for len in 0..20 {
            let mut events = vec![
                PollEvent {
                    fd: 3,
                    ready: Ready::READABLE | Ready::HUP,
                };
                len
            ];
            assert!(!any_invalid(&events), "{len}");
            for at in 0..len {
                events[at].ready = Ready::INVALID;
                assert!(any_invalid(&events), "{len} {at}");
                events[at].ready = Ready::WRITABLE;
            }
        }
    }
}
