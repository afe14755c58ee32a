//! A 4-ary min-heap of timers, ordered by (expiry, start sequence).
//!
//! As in libev, each node caches the expiry time (integer nanoseconds) so
//! that sifting touches only the heap array, and every timer knows its
//! node's position, so stop and restart need no search. The positions live
//! in a table of per-timer records owned by the heap (indexed by the
//! watcher's registry slot). A 4-ary heap is shallower than a binary one and
//! its four children sit next to each other in memory: fewer levels, one
//! cache line per sift step. Nodes are 16 bytes, records 32.
//!
//! The sequence number breaks ties: timers due at the same instant fire in
//! the order they were (re)started. It is 32 bits in the node; when it
//! would wrap, the live sequences are renumbered in order (once per 2^32
//! starts), so the order is kept exactly.
//!
//! Two operations are lazy, which is what makes restarting cheap:
//!
//! - Moving a timer *later* (the inactivity timeout pushed back on every
//!   read, a new timeout further away) only records its true key; its node
//!   keeps the earlier key, which still respects heap order. When such a
//!   node reaches the top, [`TimerHeap::peek`] moves it down to its true
//!   place first (libev's documentation calls this being smart about
//!   timeouts). Moving it *earlier* sifts the node up at once.
//! - Stopping a timer only marks it; its node stays until it reaches the top
//!   (then it is dropped) or the timer starts again (then the node is
//!   reused, moved like a restart). So stop-then-start with a new timeout
//!   costs no more than a restart. [`TimerHeap::discard`] removes a node for
//!   good (the watcher is gone).

use std::num::NonZeroU32;

use crate::slot_list::Slot;

const D: usize = 4;

/// One timer in the heap: its expiry (for a lazily moved or stopped timer,
/// no later than the true one), its start order (equal expiries fire
/// FIFO) and its slot, packed as `at << 64 | seq << 32 | slot` so that the
/// node *is* its key: one 128-bit compare orders two nodes, with no
/// shifting. (Sequences are unique, so the slot never decides.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Node(u128);

impl Node {
    #[inline(always)]
    fn new(at: u64, seq: u32, slot: usize) -> Node {
        Node(((at as u128) << 64) | ((seq as u128) << 32) | slot as u128)
    }

    #[inline(always)]
    fn at(self) -> u64 {
        (self.0 >> 64) as u64
    }

    #[inline(always)]
    fn seq(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// The registry index of its timer.
    #[inline(always)]
    fn slot(self) -> usize {
        self.0 as u32 as usize
    }

    /// The same timer with the key `(at, seq)`.
    #[inline(always)]
    fn rekeyed(self, at: u64, seq: u32) -> Node {
        Node::new(at, seq, self.slot())
    }
}

/// The earliest armed timer ([`TimerHeap::peek`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Top {
    /// Its expiry, in loop nanoseconds.
    pub at: u64,
    /// The timer watcher.
    pub slot: Slot,
}

/// Where a timer's node is, and whether the timer is stopped.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
struct Node32(Option<NonZeroU32>);

/// Per-timer record, indexed by registry slot.
#[derive(Clone, Copy, Default)]
struct Place {
    /// The true expiry; the node's may be earlier (lazily moved).
    at: u64,
    /// The timer's delay (for a start) and period (zero: one-shot), in
    /// nanoseconds: kept with the rest, so that a restart reads one record.
    after: u64,
    repeat: u64,
    /// The true sequence.
    seq: u32,
    /// The node's position plus one (no node: `None`), with the top bit
    /// set while the timer is stopped (its node waits to be dropped or
    /// reused).
    node: Node32,
}

const STOPPED: u32 = 1 << 31;

impl Place {
    /// The position of its node, whether it is armed or stopped.
    #[inline(always)]
    fn pos(&self) -> Option<usize> {
        self.node.0.map(|n| ((n.get() & !STOPPED) - 1) as usize)
    }

    #[inline(always)]
    fn is_stopped(&self) -> bool {
        self.node.0.is_some_and(|n| n.get() & STOPPED != 0)
    }

    #[inline(always)]
    fn set_pos(&mut self, pos: usize, stopped: bool) {
        let bits = (pos as u32 + 1) | if stopped { STOPPED } else { 0 };
        self.node = Node32(NonZeroU32::new(bits));
    }
}

#[derive(Default)]
pub(crate) struct TimerHeap {
    nodes: Vec<Node>,
    slots: Vec<Place>,
    /// The last sequence handed out.
    seq: u32,
    /// Armed (not stopped) timers.
    armed: usize,
}

impl TimerHeap {
    /// Number of armed timers.
    pub fn len(&self) -> usize {
        self.armed
    }

    /// A lower bound of the earliest expiry: the top node's key, which a
    /// lazy move or a stop may have left earlier than any armed timer's.
    /// Good enough for a wake-up time (waking early only costs a settle),
    /// and free.
    #[inline]
    pub fn earliest_bound(&self) -> Option<u64> {
        self.nodes.first().map(|n| n.at())
    }

    /// The earliest armed timer, with its true key (lazily moved timers
    /// that reached the top are moved to their true place first, stopped
    /// ones dropped).
    #[inline]
    pub fn peek(&mut self) -> Option<Top> {
        loop {
            let top = *self.nodes.first()?;
            let place = self.slots[top.slot()];
            if place.is_stopped() {
                self.drop_node(0);
                continue;
            }
            if (place.at, place.seq) == (top.at(), top.seq()) {
                return Some(Top {
                    at: place.at,
                    slot: Slot::new(top.slot()),
                });
            }
            self.nodes[0] = top.rekeyed(place.at, place.seq);
            self.sift_down(0);
        }
    }

    /// Whether the timer in `slot` is armed.
    pub fn contains(&self, slot: Slot) -> bool {
        self.slots
            .get(slot.index())
            .is_some_and(|p| p.pos().is_some() && !p.is_stopped())
    }

    /// The expiry of the timer in `slot`, which must be armed.
    pub fn expiry(&self, slot: Slot) -> u64 {
        self.slots[slot.index()].at
    }

    /// Sets the delay and period of the timer in `slot` (which need not
    /// be armed; its expiry is unchanged).
    pub fn configure(&mut self, slot: Slot, after: u64, repeat: u64) {
        if slot.index() >= self.slots.len() {
            self.slots.resize(slot.index() + 1, Place::default());
        }
        let place = &mut self.slots[slot.index()];
        (place.after, place.repeat) = (after, repeat);
    }

    /// The delay of the timer in `slot` (configured).
    #[inline]
    pub fn after(&self, slot: Slot) -> u64 {
        self.slots[slot.index()].after
    }

    /// The period of the timer in `slot` (configured).
    #[inline]
    pub fn repeat(&self, slot: Slot) -> u64 {
        self.slots[slot.index()].repeat
    }

    /// Arms the timer in `slot` (configured) to expire at `at`: moved if
    /// it is armed (lazily, when later), its node reused if a stop left
    /// one, else inserted.
    #[inline]
    pub fn arm(&mut self, slot: Slot, at: u64) {
        self.arm_with(slot, |_| at);
    }

    /// [`TimerHeap::arm`] at the expiry `at_of` reads off the timer's
    /// record. The hot case (an armed timer moved later) is a handful of
    /// instructions with one bounds check per array; every other case is
    /// a tail call.
    #[inline(always)]
    fn arm_with(&mut self, slot: Slot, at_of: impl FnOnce(&mut Place) -> u64) {
        let TimerHeap {
            nodes, slots, seq, ..
        } = self;
        let place = &mut slots[slot.index()];
        let at = at_of(place);
        *seq = seq.wrapping_add(1);
        if *seq == 0 {
            return self.arm_renumbered(slot, at);
        }
        let seq = *seq;
        (place.at, place.seq) = (at, seq);
        match place.node.0 {
            // Armed (the restart of an active timer): only an earlier
            // expiry moves the node.
            Some(n) if n.get() & STOPPED == 0 => {
                let p = (n.get() - 1) as usize;
                // (A later key is only recorded, even at a leaf: the
                // node keeps the earliest key it had, so that most later
                // restarts stay O(1); rewriting it would make the next
                // random restart an upward move half the time.)
                if at < nodes[p].at() {
                    self.move_up(p, at, seq);
                }
            }
            _ => self.arm_stopped(slot, at, seq),
        }
    }

    /// [`TimerHeap::arm`] when the sequences wrapped (`seq` is 0).
    #[cold]
    #[inline(never)]
    fn arm_renumbered(&mut self, slot: Slot, at: u64) {
        self.seq = u32::MAX;
        self.renumber();
        self.arm(slot, at);
    }

    /// [`TimerHeap::arm`] for a timer that is not armed: its node, if a
    /// stop left one, is reused; else a node is added.
    #[inline(never)]
    fn arm_stopped(&mut self, slot: Slot, at: u64, seq: u32) {
        self.armed += 1;
        let place = &mut self.slots[slot.index()];
        match place.pos() {
            Some(p) => {
                place.set_pos(p, false);
                if at < self.nodes[p].at() {
                    self.move_up(p, at, seq);
                }
            }
            None => {
                self.nodes.push(Node::new(at, seq, slot.index()));
                self.sift_up(self.nodes.len() - 1);
            }
        }
    }

    /// Disarms the timer in `slot` (armed): lazily, see the module
    /// documentation.
    pub fn remove(&mut self, slot: Slot) {
        let place = &mut self.slots[slot.index()];
        if let Some(p) = place.pos() {
            place.set_pos(p, true);
            self.armed -= 1;
        }
    }

    /// Disarms the top timer, just returned by [`TimerHeap::peek`] (it
    /// expired): its node goes at once.
    #[inline]
    pub fn pop(&mut self) {
        self.armed -= 1;
        self.drop_node(0);
    }

    /// Removes the node of the timer in `slot`, if it has one (armed or
    /// stopped): the watcher is gone, and its slot may be reused by
    /// another kind.
    pub fn discard(&mut self, slot: Slot) {
        let Some(place) = self.slots.get(slot.index()) else {
            return;
        };
        if let Some(p) = place.pos() {
            if !place.is_stopped() {
                self.armed -= 1;
            }
            self.drop_node(p);
        }
    }

    /// Takes the node at `p` out of the heap, and its timer's record off it.
    fn drop_node(&mut self, p: usize) {
        let gone = self.nodes[p].slot();
        self.slots[gone].node = Node32::default();
        let last = self.nodes.pop().expect("a node to drop");
        if p < self.nodes.len() {
            self.nodes[p] = last;
            if p > 0 && self.nodes[p] < self.nodes[(p - 1) / D] {
                self.sift_up(p);
            } else {
                self.sift_down(p);
            }
        }
    }

    /// libev's `ev_timer_again`: a repeating timer in `slot` gets the
    /// expiry `now + repeat`, moved if it is armed or armed. False, and
    /// nothing done, for a one-shot timer. One read of the timer's record.
    #[inline(always)]
    pub fn again(&mut self, slot: Slot, now: u64) -> bool {
        if self.slots[slot.index()].repeat == 0 {
            return false;
        }
        self.arm_with(slot, |p| now.saturating_add(p.repeat));
        true
    }

    /// Gives the armed timer in `slot` a new delay and period and
    /// restarts it at `now` plus the delay, in place: `set_timer` on an
    /// active timer (libev's stop, set, start) in one read of its record.
    #[inline]
    pub fn reset(&mut self, slot: Slot, after: u64, repeat: u64, now: u64) {
        self.arm_with(slot, |p| {
            (p.after, p.repeat) = (after, repeat);
            now.saturating_add(after)
        });
    }

    /// Restarts the timer in `slot` at `now` plus its delay (libev's
    /// stop-set-start, in place).
    #[inline]
    pub fn restart(&mut self, slot: Slot, now: u64) {
        self.arm_with(slot, |p| now.saturating_add(p.after));
    }

    /// The node at `p` gets an earlier key (a true key has a larger
    /// sequence than its node's, so it is earlier only if its expiry is,
    /// and only then must the node move: up).
    #[inline(never)]
    fn move_up(&mut self, p: usize, at: u64, seq: u32) {
        self.nodes[p] = self.nodes[p].rekeyed(at, seq);
        self.sift_up(p);
    }

    fn sift_up(&mut self, mut p: usize) {
        let node = self.nodes[p];
        while p > 0 {
            let parent = (p - 1) / D;
            let up = self.nodes[parent];
            if node >= up {
                break;
            }
            self.nodes[p] = up;
            self.set_pos(up.slot(), p);
            p = parent;
        }
        self.nodes[p] = node;
        self.set_pos(node.slot(), p);
    }

    fn sift_down(&mut self, mut p: usize) {
        let node = self.nodes[p];
        let len = self.nodes.len();
        loop {
            let first = p * D + 1;
            let (mut min, min_node);
            if first + D <= len {
                // Fast path: all four children exist (one bounds check).
                let kids = &self.nodes[first..first + D];
                let (a, na) = if kids[1] < kids[0] {
                    (1, kids[1])
                } else {
                    (0, kids[0])
                };
                let (b, nb) = if kids[3] < kids[2] {
                    (3, kids[3])
                } else {
                    (2, kids[2])
                };
                (min, min_node) = if nb < na { (b, nb) } else { (a, na) };
                min += first;
            } else if first < len {
                let (mut m, mut mn) = (first, self.nodes[first]);
                for c in first + 1..len {
                    if self.nodes[c] < mn {
                        (m, mn) = (c, self.nodes[c]);
                    }
                }
                (min, min_node) = (m, mn);
            } else {
                break;
            }
            if min_node >= node {
                break;
            }
            self.nodes[p] = min_node;
            self.set_pos(min_node.slot(), p);
            p = min;
        }
        self.nodes[p] = node;
        self.set_pos(node.slot(), p);
    }

    /// Records that the node of `slot` is now at `p` (keeping its stopped
    /// mark).
    #[inline(always)]
    fn set_pos(&mut self, slot: usize, p: usize) {
        let place = &mut self.slots[slot];
        let stopped = place.is_stopped();
        place.set_pos(p, stopped);
    }

    /// The sequences are about to wrap: renumbers every sequence in use
    /// (nodes' and records', which may differ after a lazy move) from 1,
    /// in order. Once per 2^32 starts.
    #[cold]
    fn renumber(&mut self) {
        let mut used: Vec<u32> = self.nodes.iter().map(|n| n.seq()).collect();
        for n in &self.nodes {
            used.push(self.slots[n.slot()].seq);
        }
        used.sort_unstable();
        used.dedup();
        let rank = |s: u32| used.binary_search(&s).map_or(0, |i| i as u32 + 1);
        for i in 0..self.nodes.len() {
            let n = self.nodes[i];
            self.nodes[i] = n.rekeyed(n.at(), rank(n.seq()));
            let place = &mut self.slots[n.slot()];
            place.seq = rank(place.seq);
        }
        self.seq = used.len() as u32;
    }

    /// Checks the heap property and the positions (tests only).
    #[cfg(test)]
    pub fn check(&self) {
        for (i, n) in self.nodes.iter().enumerate() {
            let place = &self.slots[n.slot()];
            assert_eq!(
                place.pos(),
                Some(i),
                "position of timer {} is stale",
                n.slot()
            );
            if !place.is_stopped() {
                assert!(
                    (n.at(), n.seq()) <= (place.at, place.seq),
                    "node of {} later than its true key",
                    n.slot()
                );
            }
            if i > 0 {
                assert!(*n >= self.nodes[(i - 1) / D], "heap order broken at {i}");
            }
        }
        let armed = self
            .nodes
            .iter()
            .filter(|n| !self.slots[n.slot()].is_stopped())
            .count();
        assert_eq!(armed, self.armed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeSet, HashMap};

    fn sl(id: u32) -> Slot {
        Slot::new(id as usize + 1)
    }

    #[derive(Debug, Clone)]
    enum Op {
        Start(u32, u16),
        Stop(u32),
        Again(u32, u16),
        Discard(u32),
        PopDue(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u32..64, 0u16..50).prop_map(|(t, a)| Op::Start(t, a)),
            (0u32..64).prop_map(Op::Stop),
            (0u32..64, 0u16..50).prop_map(|(t, a)| Op::Again(t, a)),
            (0u32..64).prop_map(Op::Discard),
            (0u16..10).prop_map(Op::PopDue),
        ]
    }

    /// The model: an ordered set of (at, order, id), `order` counting
    /// starts and restarts.
    fn run_ops(ops: &[Op], start_seq: u32) {
        let mut heap = TimerHeap {
            seq: start_seq,
            ..TimerHeap::default()
        };
        let mut model: BTreeSet<(u64, u64, u32)> = BTreeSet::new();
        let mut key_of: HashMap<u32, (u64, u64)> = HashMap::new();
        let (mut now, mut order) = (0u64, 0u64);
        for id in 0..64 {
            heap.configure(sl(id), 0, 0);
        }
        for op in ops {
            match *op {
                Op::Start(id, after) | Op::Again(id, after) => {
                    order += 1;
                    let at = now + after as u64;
                    if let Some(old) = key_of.insert(id, (at, order)) {
                        model.remove(&(old.0, old.1, id));
                    }
                    heap.arm(sl(id), at);
                    model.insert((at, order, id));
                }
                Op::Stop(id) | Op::Discard(id) => {
                    let armed = key_of.remove(&id);
                    if let Some(old) = armed {
                        model.remove(&(old.0, old.1, id));
                        assert_eq!(heap.expiry(sl(id)), old.0);
                    }
                    match op {
                        // Armed or stopped or without a node: all fine.
                        Op::Discard(_) => heap.discard(sl(id)),
                        _ if armed.is_some() => heap.remove(sl(id)),
                        _ => {}
                    }
                }
                Op::PopDue(dt) => {
                    now += dt as u64;
                    while let Some(top) = heap.peek() {
                        if top.at > now {
                            break;
                        }
                        let first = *model.iter().next().unwrap();
                        let id = top.slot.index() as u32 - 1;
                        assert_eq!((top.at, id), (first.0, first.2), "heap and model disagree");
                        model.remove(&first);
                        key_of.remove(&id);
                        heap.pop();
                    }
                }
            }
            assert_eq!(heap.len(), model.len());
            assert_eq!(
                heap.peek().map(|n| (n.at, n.slot.index() as u32 - 1)),
                model.iter().next().map(|&(at, _, id)| (at, id))
            );
            for id in 0..64 {
                assert_eq!(heap.contains(sl(id)), key_of.contains_key(&id));
            }
            heap.check();
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 100, ..ProptestConfig::default() })]
        /// 100 cases of 1,000 operations: 100k operations against the model.
        #[test]
        fn heap_matches_model(ops in proptest::collection::vec(op(), 1000)) {
            run_ops(&ops, 0);
        }

        /// The same across the renumbering of sequences near their wrap.
        #[test]
        fn heap_matches_model_across_the_sequence_wrap(ops in proptest::collection::vec(op(), 300)) {
            run_ops(&ops, u32::MAX - 100);
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(std::mem::size_of::<Node>(), 16);
        assert_eq!(std::mem::size_of::<Place>(), 32);
    }
}
