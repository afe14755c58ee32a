//! Per-priority FIFO queues of watchers whose callbacks are due.
//!
//! libev keeps one array per priority and pops from its end (LIFO); evloop
//! promises FIFO within a priority, so each queue is a `Vec` with a read
//! cursor. Entries never move while queued, so a watcher can remember its
//! slot and a stop can cancel the entry in O(1) by turning it into a
//! tombstone. A queue is reset to empty (keeping its capacity) whenever its
//! cursor reaches the end, so steady-state use allocates nothing. A bit
//! mask of non-empty queues makes finding the highest one a single
//! instruction.

use crate::Ready;

/// Number of priorities (`MIN_PRIORITY..=MAX_PRIORITY`).
pub(crate) const NUM_PRIORITIES: usize = 5;

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

/// Where a queued entry lives, stored in the watcher so it can be found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PendingSlot {
    pub queue: u8,
    pub pos: u32,
}

#[derive(Default)]
pub(crate) struct PendingQueues {
    queues: [Vec<Pending>; NUM_PRIORITIES],
    heads: [usize; NUM_PRIORITIES],
    /// Bit `q` is set while queue `q` has unread entries.
    nonempty: u8,
    live: usize,
}

impl PendingQueues {
    /// Number of queued, not cancelled invocations.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Appends an invocation to `queue` (0 = lowest priority) and returns
    /// its slot.
    #[inline]
    pub fn push(&mut self, queue: usize, idx: u32, ready: Ready) -> PendingSlot {
        let q = &mut self.queues[queue];
        let pos = q.len() as u32;
        q.push(Pending { idx, ready });
        self.nonempty |= 1 << queue;
        self.live += 1;
        PendingSlot {
            queue: queue as u8,
            pos,
        }
    }

    /// Adds events to an already queued invocation.
    #[inline]
    pub fn merge(&mut self, slot: PendingSlot, ready: Ready) {
        self.queues[slot.queue as usize][slot.pos as usize].ready |= ready;
    }

    /// Cancels a queued invocation; returns the events it carried.
    pub fn cancel(&mut self, slot: PendingSlot) -> Ready {
        let p = &mut self.queues[slot.queue as usize][slot.pos as usize];
        debug_assert!(p.idx != CANCELLED, "cancelling a cancelled pending entry");
        p.idx = CANCELLED;
        self.live -= 1;
        p.ready
    }

    /// Takes the oldest invocation of the highest non-empty priority,
    /// cancelled entries included (their `idx` is [`CANCELLED`]).
    #[inline]
    pub fn pop(&mut self) -> Option<Pending> {
        if self.nonempty == 0 {
            return None;
        }
        let q = 7 - self.nonempty.leading_zeros() as usize;
        let queue = &mut self.queues[q];
        let head = self.heads[q];
        let p = queue[head];
        if head + 1 == queue.len() {
            queue.clear();
            self.heads[q] = 0;
            self.nonempty &= !(1 << q);
        } else {
            self.heads[q] = head + 1;
        }
        if p.idx != CANCELLED {
            self.live -= 1;
        }
        Some(p)
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
        q.push(2, 4, Ready::EMPTY);
        q.cancel(s);
        assert_eq!(q.len(), 3);
        let mut got = vec![];
        while let Some(p) = q.pop() {
            if p.idx != CANCELLED {
                got.push(p.idx);
            }
        }
        assert_eq!(got, vec![3, 1, 4]);
        assert_eq!(q.len(), 0);
    }
}
