//! Priorities, and the per-priority FIFO queues of watchers whose
//! callbacks are due.
//!
//! libev keeps one array per priority and pops from its end (LIFO); evloop
//! promises FIFO within a priority, so each queue is a `Vec` with a read
//! cursor. Entries never move while queued, so a watcher remembers its
//! [`QueuePos`] and a stop cancels the entry in O(1) by turning it into a
//! tombstone. A queue is reset to empty (keeping its capacity) whenever its
//! cursor reaches the end, so steady-state use allocates nothing. A bit
//! mask of non-empty queues makes finding the highest one a single
//! instruction.
//!
//! The queue a watcher's entry is in is always the watcher's own
//! priority (changing the priority of a pending watcher moves its entry).
//! Nothing counts live entries on the hot path: [`PendingQueues::len`]
//! derives the count from the queue lengths and the unread tombstones.

use std::num::NonZeroU32;

use crate::slot_list::Slot;
use crate::Ready;

/// The lowest priority a watcher can have.
///
/// ```
/// assert_eq!((evloop::MIN_PRIORITY, evloop::MAX_PRIORITY), (-2, 2));
/// ```
pub const MIN_PRIORITY: i32 = -2;
/// The highest priority a watcher can have (see [`MIN_PRIORITY`]).
pub const MAX_PRIORITY: i32 = 2;

/// A watcher's priority, as the index of its queue: 0 is
/// [`MIN_PRIORITY`], 4 is [`MAX_PRIORITY`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub(crate) struct Priority(u8);

impl Priority {
    /// How many priorities there are.
    pub const COUNT: usize = (MAX_PRIORITY - MIN_PRIORITY + 1) as usize;
    /// Priority 0, every watcher's initial priority.
    pub const DEFAULT: Priority = Priority((0 - MIN_PRIORITY) as u8);

    /// The priority a user calls `p`, if it is in range.
    pub fn from_user(p: i32) -> Option<Priority> {
        (MIN_PRIORITY..=MAX_PRIORITY)
            .contains(&p)
            .then(|| Priority((p - MIN_PRIORITY) as u8))
    }

    /// What the user calls it (`MIN_PRIORITY..=MAX_PRIORITY`).
    pub fn user(self) -> i32 {
        self.0 as i32 + MIN_PRIORITY
    }

    /// The queue index, `0..COUNT`.
    #[inline(always)]
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// Every priority, highest first.
    pub fn descending() -> impl Iterator<Item = Priority> {
        (0..Self::COUNT as u8).rev().map(Priority)
    }
}

/// The queues array is padded to a power of two so that indexing it with a
/// masked priority needs no bounds check on the hot path.
const QUEUES: usize = 8;
const QUEUE_MASK: usize = QUEUES - 1;
const _: () = assert!(Priority::COUNT <= QUEUES);

/// One queued invocation. No version is needed: stopping or removing a
/// watcher cancels its entry, so a live entry always names a live watcher.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pending {
    /// The watcher, or `None` for a cancelled entry (a tombstone).
    pub slot: Option<Slot>,
    /// The events to pass to the callback.
    pub ready: Ready,
}

/// Where a queued invocation sits in its queue, as the watcher records it
/// (stored plus one, so that `Option<QueuePos>` is four bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct QueuePos(NonZeroU32);

impl QueuePos {
    #[inline(always)]
    fn new(pos: usize) -> QueuePos {
        // A queue holds at most one live entry per watcher plus tombstones
        // cleared at every drain, so positions stay far below 2^32.
        QueuePos(NonZeroU32::new(pos as u32 + 1).expect("pending queue position"))
    }

    #[inline(always)]
    fn index(self) -> usize {
        (self.0.get() - 1) as usize
    }
}

#[derive(Default)]
pub(crate) struct PendingQueues {
    queues: [Vec<Pending>; QUEUES],
    heads: [usize; QUEUES],
    /// Bit `q` is set while queue `q` has unread entries.
    nonempty: u32,
    /// Cancelled entries not yet read, per queue (so that
    /// [`PendingQueues::len`] needs no counter updated on the hot path).
    cancelled: [u32; QUEUES],
}

impl PendingQueues {
    /// Number of queued, not cancelled invocations.
    pub fn len(&self) -> usize {
        (0..QUEUES).map(|q| self.live_in(q)).sum()
    }

    /// Live (not cancelled) unread entries in queue `q`.
    fn live_in(&self, q: usize) -> usize {
        self.queues[q].len() - self.heads[q] - self.cancelled[q] as usize
    }

    /// Whether a queue has entries, live or cancelled (a cheap "maybe
    /// something to invoke").
    #[inline(always)]
    pub fn has_entries(&self) -> bool {
        self.nonempty != 0
    }

    /// Whether nothing is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        // Cancelled entries may remain: count only live ones.
        self.nonempty == 0 || self.len() == 0
    }

    /// Whether a live entry is queued at `p` or above (the idle rule).
    pub fn has_live_at_or_above(&self, p: Priority) -> bool {
        (p.index()..Priority::COUNT).any(|q| self.nonempty & (1 << q) != 0 && self.live_in(q) > 0)
    }

    /// Queues an invocation of `slot`, whose priority is `priority` and
    /// whose queue position is recorded in `at`: appended if it is not
    /// queued, else OR-ed into its entry (as libev merges events into a
    /// pending watcher).
    #[inline]
    pub fn queue(
        &mut self,
        at: &mut Option<QueuePos>,
        priority: Priority,
        slot: Slot,
        ready: Ready,
    ) {
        let q = priority.index() & QUEUE_MASK;
        let list = &mut self.queues[q];
        match *at {
            None => {
                *at = Some(QueuePos::new(list.len()));
                list.push(Pending {
                    slot: Some(slot),
                    ready,
                });
                self.nonempty |= 1 << q;
            }
            Some(pos) => list[pos.index()].ready |= ready,
        }
    }

    /// The events of a queued invocation.
    pub fn get(&self, priority: Priority, pos: QueuePos) -> Ready {
        self.queues[priority.index() & QUEUE_MASK][pos.index()].ready
    }

    /// Keeps only the events in `mask` of a queued invocation.
    pub fn restrict(&mut self, priority: Priority, pos: QueuePos, mask: Ready) {
        let p = &mut self.queues[priority.index() & QUEUE_MASK][pos.index()];
        p.ready = p.ready & mask;
    }

    /// Cancels a queued invocation; returns the events it carried.
    pub fn cancel(&mut self, priority: Priority, pos: QueuePos) -> Ready {
        let q = priority.index() & QUEUE_MASK;
        let p = &mut self.queues[q][pos.index()];
        debug_assert!(p.slot.is_some(), "cancelling a cancelled pending entry");
        p.slot = None;
        self.cancelled[q] += 1;
        p.ready
    }

    /// The highest priority with entries, if any.
    #[inline]
    pub fn highest(&self) -> Option<Priority> {
        if self.nonempty == 0 {
            None
        } else {
            Some(Priority(31 - self.nonempty.leading_zeros() as u8))
        }
    }

    /// Whether a queue above `p` has entries (a callback queued something
    /// more urgent than what is being drained).
    #[inline]
    pub fn has_above(&self, p: Priority) -> bool {
        self.nonempty >> (p.index() + 1) != 0
    }

    /// Takes the oldest live entry of queue `p`, skipping cancelled ones.
    /// When the queue is exhausted it is reset to empty (keeping its
    /// capacity) and `None` is returned. The caller tells the watcher it
    /// is no longer queued.
    #[inline]
    pub fn next_in(&mut self, p: Priority) -> Option<(Slot, Ready)> {
        let q = p.index() & QUEUE_MASK;
        let list = &mut self.queues[q];
        loop {
            let head = self.heads[q];
            let Some(&entry) = list.get(head) else {
                list.clear();
                self.heads[q] = 0;
                self.nonempty &= !(1 << q);
                return None;
            };
            self.heads[q] = head + 1;
            match entry.slot {
                Some(slot) => return Some((slot, entry.ready)),
                None => self.cancelled[q] -= 1,
            }
        }
    }

    /// Whether queue `p` has unread entries (tombstones included).
    #[inline]
    pub fn has_entries_in(&self, p: Priority) -> bool {
        self.nonempty & (1 << (p.index() & QUEUE_MASK)) != 0
    }

    /// Empties queue `p`, appending its unread live entries, in order, to
    /// `out` (their watchers' positions are then stale: the caller
    /// re-queues them). `out` is the caller's reused buffer, so that this
    /// allocates nothing in steady state.
    pub fn take_unread(&mut self, p: Priority, out: &mut Vec<Pending>) {
        let q = p.index() & QUEUE_MASK;
        let head = std::mem::take(&mut self.heads[q]);
        for entry in self.queues[q].drain(..).skip(head) {
            if entry.slot.is_some() {
                out.push(entry);
            } else {
                self.cancelled[q] -= 1;
            }
        }
        self.nonempty &= !(1 << q);
    }

    /// Takes the oldest live invocation of the highest non-empty priority.
    #[cfg(test)]
    pub fn pop(&mut self) -> Option<(Slot, Ready)> {
        while let Some(p) = self.highest() {
            if let Some(entry) = self.next_in(p) {
                return Some(entry);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prio(p: i32) -> Priority {
        Priority::from_user(p).unwrap()
    }

    /// Queues `slot` (not yet queued) and returns its position.
    fn push(q: &mut PendingQueues, p: i32, slot: usize, ready: Ready) -> QueuePos {
        let mut at = None;
        q.queue(&mut at, prio(p), Slot::new(slot), ready);
        at.unwrap()
    }

    fn popped(q: &mut PendingQueues) -> Vec<(usize, Ready)> {
        std::iter::from_fn(|| q.pop())
            .map(|(s, r)| (s.index(), r))
            .collect()
    }

    #[test]
    fn priorities_map_to_queues() {
        assert_eq!(Priority::from_user(-3), None);
        assert_eq!(Priority::from_user(3), None);
        assert_eq!(prio(-2).index(), 0);
        assert_eq!(Priority::DEFAULT, prio(0));
        assert_eq!(prio(2).user(), 2);
        let all: Vec<i32> = Priority::descending().map(Priority::user).collect();
        assert_eq!(all, [2, 1, 0, -1, -2]);
    }

    #[test]
    fn fifo_within_priority_highest_first_and_cancel() {
        // Slots 1, 2, 3, ... (0 is never a slot).
        let mut q = PendingQueues::default();
        push(&mut q, 0, 1, Ready::EMPTY);
        let s = push(&mut q, 0, 2, Ready::EMPTY);
        push(&mut q, 2, 3, Ready::EMPTY);
        push(&mut q, 0, 4, Ready::READABLE);
        let mut at = Some(s);
        q.queue(&mut at, prio(0), Slot::new(2), Ready::WRITABLE);
        assert_eq!(q.cancel(prio(0), s), Ready::WRITABLE);
        assert_eq!(q.len(), 3);
        assert_eq!(
            popped(&mut q),
            vec![(3, Ready::EMPTY), (1, Ready::EMPTY), (4, Ready::READABLE)]
        );
        assert_eq!((q.len(), q.highest()), (0, None));
        // Emptied queues start again at the first position.
        assert_eq!(push(&mut q, -2, 9, Ready::EMPTY).index(), 0);
    }

    #[test]
    fn take_unread_returns_live_entries_in_order_and_forgets_tombstones() {
        let mut q = PendingQueues::default();
        push(&mut q, 0, 1, Ready::EMPTY);
        let s = push(&mut q, 0, 2, Ready::EMPTY);
        push(&mut q, 0, 3, Ready::READABLE);
        push(&mut q, 0, 4, Ready::EMPTY);
        assert_eq!(q.next_in(prio(0)).map(|(s, _)| s.index()), Some(1));
        q.cancel(prio(0), s);
        let mut out = Vec::new();
        q.take_unread(prio(0), &mut out);
        let got: Vec<usize> = out.iter().map(|p| p.slot.unwrap().index()).collect();
        assert_eq!(got, vec![3, 4]);
        assert!(!q.has_entries_in(prio(0)));
        assert_eq!((q.len(), q.highest()), (0, None));
    }

    #[test]
    fn live_at_or_above_ignores_tombstones() {
        let mut q = PendingQueues::default();
        let s = push(&mut q, 1, 1, Ready::EMPTY);
        push(&mut q, -1, 2, Ready::EMPTY);
        assert!(q.has_live_at_or_above(prio(1)) && q.has_live_at_or_above(prio(-2)));
        assert!(!q.has_live_at_or_above(prio(2)));
        q.cancel(prio(1), s);
        assert!(!q.has_live_at_or_above(prio(0)) && q.has_live_at_or_above(prio(-1)));
    }
}
