//! Per-priority FIFO queues of watchers whose callbacks are due.
//!
//! libev keeps one array per priority and pops from its end (LIFO); evloop
//! promises FIFO within a priority, so each queue is a `Vec` with a read
//! cursor. Entries never move while queued, so a watcher can remember its
//! position and a stop can cancel the entry in O(1) by turning it into a
//! tombstone. A queue is reset to empty (keeping its capacity) whenever its
//! cursor reaches the end, so steady-state use allocates nothing. A bit
//! mask of non-empty queues makes finding the highest one a single
//! instruction.
//!
//! A queued watcher's position is stored in the watcher as a
//! [`PendingSlot`]; the queue it is in is always the watcher's own priority
//! (changing the priority of a pending watcher moves its entry). Nothing
//! counts live entries on the hot path: [`PendingQueues::len`] derives the
//! count from the queue lengths and the number of unread tombstones.

use crate::Ready;

/// Number of priorities (`MIN_PRIORITY..=MAX_PRIORITY`).
pub(crate) const NUM_PRIORITIES: usize = 5;

/// The queues array is padded to a power of two so that indexing it with a
/// masked priority needs no bounds check on the hot path.
const QUEUES: usize = 8;
const QUEUE_MASK: usize = QUEUES - 1;
const _: () = assert!(NUM_PRIORITIES <= QUEUES);

/// Marks a cancelled entry.
pub(crate) const CANCELLED: u32 = u32::MAX;

/// One queued invocation. No generation is needed: stopping or removing a
/// watcher cancels its entry, so a live entry always names a live watcher.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pending {
    /// Slab index of the watcher, or [`CANCELLED`].
    pub idx: u32,
    /// The events to pass to the callback.
    pub ready: Ready,
}

/// Where a queued entry lives in its queue (its position), as stored in
/// the watcher; [`NOT_PENDING`] when it is not queued.
pub(crate) type PendingSlot = u32;

/// The [`PendingSlot`] of a watcher that is not queued.
pub(crate) const NOT_PENDING: PendingSlot = u32::MAX;

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

    /// Whether a live entry is queued at `q` or above (the idle rule).
    pub fn has_live_at_or_above(&self, q: usize) -> bool {
        (q..NUM_PRIORITIES).any(|q| self.nonempty & (1 << q) != 0 && self.live_in(q) > 0)
    }

    /// Whether nothing is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        // Cancelled entries may remain: count only live ones.
        self.nonempty == 0 || self.len() == 0
    }

    /// Appends an invocation to `queue` (0 = lowest priority) and returns
    /// its slot.
    #[inline]
    pub fn push(&mut self, queue: u8, idx: u32, ready: Ready) -> PendingSlot {
        let q = queue as usize & QUEUE_MASK;
        let list = &mut self.queues[q];
        // Positions fit in u32 (below NOT_PENDING): a queue holds at most
        // one live entry per watcher, and watcher indices are u32.
        let pos = list.len() as u32;
        list.push(Pending { idx, ready });
        self.nonempty |= 1 << q;
        pos
    }

    /// Adds events to an already queued invocation.
    #[inline]
    pub fn merge(&mut self, queue: u8, slot: PendingSlot, ready: Ready) {
        self.queues[queue as usize & QUEUE_MASK][slot as usize].ready |= ready;
    }

    /// The events of a queued invocation.
    pub fn get(&self, queue: u8, slot: PendingSlot) -> Ready {
        self.queues[queue as usize & QUEUE_MASK][slot as usize].ready
    }

    /// Keeps only the events in `mask` of a queued invocation.
    pub fn restrict(&mut self, queue: u8, slot: PendingSlot, mask: Ready) {
        let p = &mut self.queues[queue as usize & QUEUE_MASK][slot as usize];
        p.ready = p.ready & mask;
    }

    /// Cancels a queued invocation; returns the events it carried.
    pub fn cancel(&mut self, queue: u8, slot: PendingSlot) -> Ready {
        let p = &mut self.queues[queue as usize & QUEUE_MASK][slot as usize];
        debug_assert!(p.idx != CANCELLED, "cancelling a cancelled pending entry");
        p.idx = CANCELLED;
        self.cancelled[queue as usize & QUEUE_MASK] += 1;
        p.ready
    }

    /// The highest non-empty queue, if any.
    #[inline]
    pub fn highest(&self) -> Option<usize> {
        if self.nonempty == 0 {
            None
        } else {
            Some(31 - self.nonempty.leading_zeros() as usize)
        }
    }

    /// Whether a queue above `q` has entries (a callback queued something
    /// more urgent than what is being drained).
    #[inline]
    pub fn has_above(&self, q: usize) -> bool {
        self.nonempty >> (q + 1) != 0
    }

    /// Takes the oldest live entry of queue `q`, skipping cancelled ones.
    /// When the queue is exhausted it is reset to empty (keeping its
    /// capacity) and `None` is returned.
    #[inline]
    pub fn next_in(&mut self, q: usize) -> Option<Pending> {
        let q = q & QUEUE_MASK;
        let list = &mut self.queues[q];
        loop {
            let head = self.heads[q];
            let Some(&p) = list.get(head) else {
                list.clear();
                self.heads[q] = 0;
                self.nonempty &= !(1 << q);
                return None;
            };
            self.heads[q] = head + 1;
            if p.idx != CANCELLED {
                return Some(p);
            }
            self.cancelled[q] -= 1;
        }
    }

    /// Whether queue `q` has unread entries (tombstones included).
    #[inline]
    pub fn has_entries_in(&self, q: u8) -> bool {
        self.nonempty & (1 << (q as usize & QUEUE_MASK)) != 0
    }

    /// Empties queue `q`, appending its unread live entries, in order, to
    /// `out` (their watchers' slots are then stale: the caller re-queues
    /// them). `out` is the caller's reused buffer, so that this allocates
    /// nothing in steady state.
    pub fn take_unread(&mut self, q: u8, out: &mut Vec<Pending>) {
        let q = q as usize & QUEUE_MASK;
        let head = std::mem::take(&mut self.heads[q]);
        let list = &mut self.queues[q];
        for p in list.drain(..).skip(head) {
            if p.idx == CANCELLED {
                self.cancelled[q] -= 1;
            } else {
                out.push(p);
            }
        }
        self.nonempty &= !(1 << q);
    }

    /// Takes the oldest live invocation of the highest non-empty priority.
    #[cfg(test)]
    pub fn pop(&mut self) -> Option<Pending> {
        while let Some(q) = self.highest() {
            if let Some(p) = self.next_in(q) {
                return Some(p);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_within_priority_highest_first_and_cancel() {
        let mut q = PendingQueues::default();
        q.push(2, 1, Ready::EMPTY);
        let s = q.push(2, 2, Ready::EMPTY);
        q.push(4, 3, Ready::EMPTY);
        q.push(2, 4, Ready::READABLE);
        q.merge(2, s, Ready::WRITABLE);
        assert_eq!(q.cancel(2, s), Ready::WRITABLE);
        assert_eq!(q.len(), 3);
        let mut got = vec![];
        while let Some(p) = q.pop() {
            got.push((p.idx, p.ready));
        }
        assert_eq!(
            got,
            vec![(3, Ready::EMPTY), (1, Ready::EMPTY), (4, Ready::READABLE)]
        );
        assert_eq!((q.len(), q.highest()), (0, None));
        // Emptied queues start again at position 1.
        assert_eq!(q.push(0, 9, Ready::EMPTY), 0);
    }

    #[test]
    fn take_unread_returns_live_entries_in_order_and_forgets_tombstones() {
        let mut q = PendingQueues::default();
        q.push(2, 1, Ready::EMPTY);
        let s = q.push(2, 2, Ready::EMPTY);
        q.push(2, 3, Ready::READABLE);
        q.push(2, 4, Ready::EMPTY);
        assert_eq!(q.next_in(2).map(|p| p.idx), Some(1));
        q.cancel(2, s);
        let mut out = Vec::new();
        q.take_unread(2, &mut out);
        let got: Vec<u32> = out.iter().map(|p| p.idx).collect();
        assert_eq!(got, vec![3, 4]);
        assert!(!q.has_entries_in(2));
        assert_eq!((q.len(), q.highest()), (0, None));
    }

    #[test]
    fn live_at_or_above_ignores_tombstones() {
        let mut q = PendingQueues::default();
        let s = q.push(3, 1, Ready::EMPTY);
        q.push(1, 2, Ready::EMPTY);
        assert!(q.has_live_at_or_above(3) && q.has_live_at_or_above(0));
        assert!(!q.has_live_at_or_above(4));
        q.cancel(3, s);
        assert!(!q.has_live_at_or_above(2) && q.has_live_at_or_above(1));
    }
}
