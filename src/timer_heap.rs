//! A 4-ary min-heap of timers, ordered by (expiry, start sequence).
//!
//! As in libev, each node caches the expiry time (integer nanoseconds) so
//! that sifting touches only the heap array, and every timer knows its
//! node's position, so stop and restart need no search. The positions live
//! in per-timer records ([`TimerRecord`]) held outside the heap, where the
//! timer's other state is (the registry entry of a timer watcher), and
//! reached through [`TimerRecords`] by the slot each node carries. A
//! 4-ary heap is shallower than a binary one and its four children sit
//! next to each other in memory: fewer levels, and a node's four
//! children, 48 bytes stored from a multiple of 48 (libev's `HEAP0`
//! offset), span one or two cache lines. Nodes are 12 bytes (a 64-bit
//! expiry and a 32-bit slot), records 36.
//!
//! The sequence number breaks ties: timers due at the same instant fire in
//! the order they were (re)started. The node's sequence is kept in its
//! timer's record (`node_seq`), read only when two expiries compare equal,
//! which random deadlines almost never do; when it would wrap, the live
//! sequences are renumbered in order (once per 2^31 starts), so the order
//! is kept exactly.
//!
//! Two operations are lazy, which is what makes restarting cheap:
//!
//! - Moving a timer *later* (the inactivity timeout pushed back on every
//!   read, a new timeout further away) only records its true key; its node
//!   keeps the earlier key, which still respects heap order. A move to no
//!   earlier than the timer's last expiry does not even read the node
//!   (whose key is no later than that): one record touched, no node. When such a
//!   node reaches the top, [`TimerHeap::peek`] moves it down to its true
//!   place first (libev's documentation calls this being smart about
//!   timeouts). Moving it *earlier* sifts the node up at once. When many
//!   such nodes come due together (a mass expiry after lazy restarts),
//!   `peek` rebuilds the heap instead, in O(n), so that each costs one
//!   sift, not two ([`TimerHeap::rebuild`]).
//! - Stopping a timer only marks it; its node stays until it reaches the top
//!   (then it is dropped) or the timer starts again (then the node is
//!   reused, moved like a restart). So stop-then-start with a new timeout
//!   costs no more than a restart. [`TimerHeap::discard`] removes a node for
//!   good (the watcher is gone).

use std::num::NonZeroU32;

use crate::slot_list::Slot;

const D: usize = 4;

/// Where position 0 (the top) is stored: three places in, so that the
/// children of the node at `p`, at `4p + 1 ..= 4p + 4`, are stored at
/// `4(p + 1) ..= 4(p + 1) + 3`: 48 bytes from a multiple of 48, so that
/// (the array being 16-byte aligned, as the allocator gives it) they
/// span one cache line for half the nodes and two for the others
/// (libev's `HEAP0`, with 16-byte nodes: one line always).
const OFFSET: usize = D - 1;

/// One node: an expiry (for a lazily moved or stopped timer, no later
/// than the true one) and a slot, 12 bytes (packed to 4-byte alignment:
/// its fields are only ever copied).
#[derive(Clone, Copy, Default)]
#[repr(C, packed(4))]
struct Node {
    at: u64,
    slot: u32,
}

/// The place of the first node among `nodes` (a node's children), ties
/// broken by the records.
#[cold]
fn min_of<R: TimerRecords + ?Sized>(recs: &R, nodes: &[Node]) -> usize {
    let mut m = 0;
    for (i, n) in nodes.iter().enumerate().skip(1) {
        let (a, b) = (*n, nodes[m]);
        if before(recs, a.at, a.slot as usize, b.at, b.slot as usize) {
            m = i;
        }
    }
    m
}

/// The least of four whole children stored from `ci`, and its offset
/// from `ci`, by expiry alone: `None` if there are not four, or if the
/// least expiry is tied (rare: then the records decide, [`min_child`]).
/// A tournament without branches.
#[inline(always)]
fn least_of_four(store: &[Node], ci: usize) -> Option<(usize, Node)> {
    let g = store.get(ci..)?.first_chunk::<D>()?;
    let [k0, k1, k2, k3] = [g[0].at, g[1].at, g[2].at, g[3].at];
    let (ka, kb) = (k0.min(k1), k2.min(k3));
    let a = (k1 < k0) as usize;
    let b = 2 + (k3 < k2) as usize;
    // The choice is right unless the least expiry is also the other one
    // of the winner's pair, or the final's loser.
    let (m, pair_tie) = if kb < ka {
        (b, k2 == k3)
    } else {
        (a, k0 == k1)
    };
    (!(pair_tie | (ka == kb))).then(|| (m, g[m]))
}

/// The first of the children stored from `ci` (one to four: `store`
/// ends after the heap's last node), ties broken by the records, and its
/// offset from `ci`; `None`: no children.
#[cold]
#[inline(never)]
fn min_child<R: TimerRecords + ?Sized>(
    recs: &R,
    store: &[Node],
    ci: usize,
) -> Option<(usize, Node)> {
    let rest = store.get(ci..)?;
    let group = rest.get(..D).unwrap_or(rest);
    if group.is_empty() {
        return None;
    }
    let m = min_of(recs, group);
    Some((m, group[m]))
}

/// What [`TimerHeap::rekey`] left for the heap to do.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing: the node (if any) is where it may stay.
    Done,
    /// The node stored at `index` may have to move up to the new key.
    Earlier { index: u32, seq: u32, at: u64 },
    /// The timer has no node: one is added with the new key.
    Push { seq: u32, at: u64 },
    /// The sequences are about to wrap: renumbered, then armed at this
    /// expiry.
    Renumber(u64),
}

/// The earliest armed timer ([`TimerHeap::peek`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Top {
    /// Its expiry, in loop nanoseconds.
    pub at: u64,
    /// The timer watcher.
    pub slot: Slot,
}

/// Where a timer's node is: the index it is stored at, its position plus
/// [`OFFSET`] (no node: `None`), so that a sift writes it with one plain
/// store and a restart finds the node with no arithmetic.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
struct NodePos(Option<NonZeroU32>);

/// The top bit of a record's sequence, set while the timer is stopped
/// with its node still in the heap (waiting to be dropped or reused).
/// Sequences themselves stay below it (renumbered before they reach it).
const STOPPED: u32 = 1 << 31;

/// What the heap keeps of one timer, outside its node: 36 bytes, held
/// where the timer's other state is (the loop's timers: in their registry
/// entries, so that an operation touches two records, the entry and the
/// node, as libev's touches its watcher and its node; the periodic and
/// stat kinds: in a table by slot, [`OwnTimerHeap`]). Packed to 4-byte
/// alignment, so that it fits in a registry entry after the watcher's
/// head (its fields are only ever copied, never borrowed).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
#[repr(C, packed(4))]
pub(crate) struct TimerRecord {
    /// The true expiry; the node's may be earlier (lazily moved).
    at: u64,
    /// The timer's delay (for a start) and period (zero: one-shot), in
    /// nanoseconds: kept with the rest, so that a restart reads one record.
    after: u64,
    repeat: u64,
    /// The true sequence, and the [`STOPPED`] bit.
    seq: u32,
    node: NodePos,
    /// The sequence of its node's key (the true one, or the one it had
    /// when it was lazily moved): read only when two nodes' expiries tie.
    node_seq: u32,
}

impl TimerRecord {
    /// A timer that is not armed, with its delay and period.
    #[inline]
    pub fn new(after: u64, repeat: u64) -> TimerRecord {
        TimerRecord {
            after,
            repeat,
            ..TimerRecord::default()
        }
    }

    /// The delay it starts with, in nanoseconds.
    #[inline]
    pub fn after(&self) -> u64 {
        self.after
    }

    /// The period, in nanoseconds (zero: one-shot).
    #[inline]
    pub fn repeat(&self) -> u64 {
        self.repeat
    }

    /// Sets the delay and period (the expiry is unchanged).
    #[inline]
    pub fn configure(&mut self, after: u64, repeat: u64) {
        (self.after, self.repeat) = (after, repeat);
    }

    /// The expiry (of an armed timer; otherwise the last one it had).
    #[inline]
    pub fn expiry(&self) -> u64 {
        self.at
    }

    /// Whether the timer is armed.
    #[inline]
    pub fn is_armed(&self) -> bool {
        self.pos().is_some() && !self.is_stopped()
    }

    /// The position of its node, whether it is armed or stopped.
    #[inline(always)]
    fn pos(&self) -> Option<usize> {
        let node = self.node;
        node.0.map(|n| n.get() as usize - OFFSET)
    }

    /// Whether it is stopped (meaningful while it has a node).
    #[inline(always)]
    fn is_stopped(&self) -> bool {
        self.seq & STOPPED != 0
    }

    /// Moves its node to the stored index `i` (position `i - OFFSET`).
    #[inline(always)]
    fn move_to(&mut self, i: usize) {
        self.node = NodePos(NonZeroU32::new(i as u32));
    }
}

/// Where the heap finds a timer's record, by the slot its node carries:
/// the registry for the loop's timers, a table for the kinds' own heaps.
/// Every slot a node names has a record.
pub(crate) trait TimerRecords {
    fn record(&self, slot: usize) -> &TimerRecord;
    fn record_mut(&mut self, slot: usize) -> &mut TimerRecord;
    /// How many places [`TimerRecords::each`] goes through (records and
    /// whatever else their storage holds).
    fn count(&self) -> usize;
    /// Calls `f` with every record, in the order they are stored (a
    /// sequential pass over memory).
    fn each(&mut self, f: impl FnMut(&mut TimerRecord));
}

impl TimerRecords for Vec<TimerRecord> {
    #[inline(always)]
    fn record(&self, slot: usize) -> &TimerRecord {
        &self[slot]
    }
    #[inline(always)]
    fn record_mut(&mut self, slot: usize) -> &mut TimerRecord {
        &mut self[slot]
    }
    fn count(&self) -> usize {
        self.len()
    }
    fn each(&mut self, f: impl FnMut(&mut TimerRecord)) {
        self.iter_mut().for_each(f);
    }
}

/// Whether the node `(a, slot a)` comes before `(b, slot b)`: the earlier
/// expiry, or on a tie (rare: only then are the records read) the
/// earlier node sequence.
#[inline(always)]
fn before<R: TimerRecords + ?Sized>(recs: &R, a: u64, sa: usize, b: u64, sb: usize) -> bool {
    if a != b {
        return a < b;
    }
    tie_before(recs, sa, sb)
}

#[inline(never)]
fn tie_before<R: TimerRecords + ?Sized>(recs: &R, sa: usize, sb: usize) -> bool {
    let (a, b) = (recs.record(sa).node_seq, recs.record(sb).node_seq);
    a < b
}

/// The heap of nodes, 12 bytes each ([`Node`]), stored from [`OFFSET`]
/// on. Each operation is given the records ([`TimerRecords`]), which it
/// reads and whose positions it keeps.
#[derive(Default)]
pub(crate) struct TimerHeap {
    /// Empty, or `OFFSET` unused nodes and then the heap's.
    store: Vec<Node>,
    /// Number of nodes (armed timers and stopped ones not yet dropped).
    nodes: usize,
    /// The last sequence handed out.
    seq: u32,
    /// Armed (not stopped) timers.
    armed: usize,
    /// The window over which [`TimerHeap::peek`] decides whether to
    /// rebuild: stale tops settled and tops popped since it began (at a
    /// settle), and the sequence then (what was started since).
    settled: usize,
    popped: usize,
    mark: u32,
}

/// A window of [`TimerHeap::peek`]'s decision is this fraction of the
/// heap's nodes (but at least [`MIN_WINDOW`] tops).
const WINDOW: usize = 128;
#[cfg(not(test))]
const MIN_WINDOW: usize = 64;
/// Small in the unit tests, whose heaps are, so that rebuilds happen.
#[cfg(test)]
const MIN_WINDOW: usize = 4;

impl TimerHeap {
    /// Number of armed timers.
    #[inline]
    pub fn len(&self) -> usize {
        self.armed
    }

    /// Room for `n` more nodes.
    pub fn reserve(&mut self, n: usize) {
        let want = self.nodes + n + OFFSET;
        self.store.reserve(want.saturating_sub(self.store.len()));
    }

    /// The expiry of the node at `p`.
    #[inline(always)]
    fn at(&self, p: usize) -> u64 {
        self.store[p + OFFSET].at
    }

    /// The slot of the node at `p`.
    #[inline(always)]
    fn slot(&self, p: usize) -> usize {
        self.store[p + OFFSET].slot as usize
    }

    /// A lower bound of the earliest expiry: the top node's key, which a
    /// lazy move or a stop may have left earlier than any armed timer's.
    /// Good enough for a wake-up time (waking early only costs a settle),
    /// and free.
    #[inline]
    pub fn earliest_bound(&self) -> Option<u64> {
        (self.nodes > 0).then(|| self.at(0))
    }

    /// The earliest armed timer, with its true key (lazily moved timers
    /// that reached the top are moved to their true place first, stopped
    /// ones dropped).
    #[inline]
    pub fn peek<R: TimerRecords + ?Sized>(&mut self, recs: &mut R) -> Option<Top> {
        loop {
            if self.nodes == 0 {
                return None;
            }
            let (at, slot) = (self.at(0), self.slot(0));
            let place = *recs.record(slot);
            if place.is_stopped() {
                self.drop_node(recs, 0);
                continue;
            }
            if (place.at, place.seq) == (at, place.node_seq) {
                return Some(Top {
                    at,
                    slot: Slot::new(slot),
                });
            }
            if self.settle_counted() {
                self.rebuild(recs);
                continue;
            }
            self.sift_down(recs, 0, place.at, slot, place.seq);
        }
    }

    /// Arms the timer in `slot` to expire at `at`: moved if it is armed
    /// (lazily, when later), its node reused if a stop left one, else
    /// inserted.
    #[inline]
    pub fn arm<R: TimerRecords + ?Sized>(&mut self, recs: &mut R, slot: Slot, at: u64) {
        self.arm_with(recs, slot, |_| at);
    }

    /// [`TimerHeap::arm`] at the expiry `at_of` reads off the timer's
    /// record: [`TimerHeap::rekey`], then what it leaves for the heap.
    #[inline(always)]
    fn arm_with<R: TimerRecords + ?Sized>(
        &mut self,
        recs: &mut R,
        slot: Slot,
        at_of: impl FnOnce(&mut TimerRecord) -> u64,
    ) {
        let rec = recs.record_mut(slot.index());
        let at = at_of(rec);
        let step = self.rekey::<false>(rec, at);
        self.finish(recs, slot, step);
    }

    /// Arms the timer whose record is `rec` to expire at `at` (moved if it
    /// is armed, its node reused if a stop left one), as far as its record
    /// goes; what is left for the heap ([`TimerHeap::finish`]) is returned.
    /// The common cases (a move to no earlier than its last expiry, armed
    /// or stopped with its node still there) are done here: the node's
    /// key is no later than that expiry, so it still respects heap order
    /// and is not even read. (A later key is only recorded, even at a
    /// leaf: the node keeps the earliest key it had, so that most later
    /// restarts stay O(1); rewriting it would make the next random restart
    /// an upward move half the time.)
    ///
    /// `ARMED`: the caller knows the timer is armed (an active timer
    /// watcher: it has a node and is not stopped), so the stopped mark
    /// need not be tested.
    #[inline(always)]
    pub fn rekey<const ARMED: bool>(&mut self, rec: &mut TimerRecord, at: u64) -> Step {
        let seq = self.seq + 1;
        if seq & STOPPED != 0 {
            return Step::Renumber(at);
        }
        self.seq = seq;
        let (before, stopped) = (rec.at, !ARMED && rec.is_stopped());
        (rec.at, rec.seq) = (at, seq);
        let Some(n) = rec.node.0 else {
            self.armed += 1;
            return Step::Push { seq, at };
        };
        if stopped {
            self.armed += 1;
        }
        if at < before {
            Step::Earlier {
                index: n.get(),
                seq,
                at,
            }
        } else {
            Step::Done
        }
    }

    /// Does what [`TimerHeap::rekey`] left for the heap, for the timer in
    /// `slot`.
    #[inline(always)]
    pub fn finish<R: TimerRecords + ?Sized>(&mut self, recs: &mut R, slot: Slot, step: Step) {
        // Each move out of line, its values passed in registers.
        match step {
            Step::Done => {}
            // Earlier than its last expiry, but no earlier than its node's
            // key (kept from an earlier restart): it stays. The common
            // case of a random restart, inline. (A true key has a larger
            // sequence than its node's, so it is earlier only if its
            // expiry is, and only then must the node move: up.)
            Step::Earlier { index, seq, at } => {
                let i = index as usize;
                // (A record's index names a node: its group is there.)
                if self.store.get(i).is_some_and(|n| at < n.at) {
                    self.move_up(recs, slot, i - OFFSET, seq, at);
                }
            }
            Step::Push { seq, at } => self.push(recs, slot, seq, at),
            Step::Renumber(at) => self.arm_renumbered(recs, slot, at),
        }
    }

    #[inline(never)]
    fn move_up<R: TimerRecords + ?Sized>(
        &mut self,
        recs: &mut R,
        slot: Slot,
        p: usize,
        seq: u32,
        at: u64,
    ) {
        self.sift_up(recs, p, at, slot.index(), seq);
    }

    #[inline(never)]
    fn push<R: TimerRecords + ?Sized>(&mut self, recs: &mut R, slot: Slot, seq: u32, at: u64) {
        self.push_inline(recs, slot, seq, at);
    }

    /// Arms a new timer (its record fresh from [`TimerRecord::new`]) to
    /// expire at `at`: what [`TimerHeap::arm`] does for it, without the
    /// tests whose answers are known (no node, not stopped), inline.
    #[inline(always)]
    pub fn arm_new<R: TimerRecords + ?Sized>(&mut self, recs: &mut R, slot: Slot, at: u64) {
        let seq = self.seq + 1;
        if seq & STOPPED != 0 {
            return self.arm_renumbered(recs, slot, at);
        }
        self.seq = seq;
        self.armed += 1;
        let rec = recs.record_mut(slot.index());
        debug_assert!(rec.node.0.is_none());
        (rec.at, rec.seq) = (at, seq);
        self.push_inline(recs, slot, seq, at);
    }

    #[inline(always)]
    fn push_inline<R: TimerRecords + ?Sized>(
        &mut self,
        recs: &mut R,
        slot: Slot,
        seq: u32,
        at: u64,
    ) {
        let p = self.nodes;
        if self.store.is_empty() {
            self.store.extend([Node::default(); OFFSET]);
        }
        self.store.push(Node::default());
        self.nodes = p + 1;
        self.sift_up(recs, p, at, slot.index(), seq);
    }

    #[cold]
    #[inline(never)]
    fn arm_renumbered<R: TimerRecords + ?Sized>(&mut self, recs: &mut R, slot: Slot, at: u64) {
        self.renumber(recs);
        self.arm(recs, slot, at);
    }

    /// Disarms the timer whose record is `rec` (armed or not): lazily, see
    /// the module documentation.
    #[inline(always)]
    pub fn disarm(&mut self, rec: &mut TimerRecord) {
        if rec.node.0.is_some() && !rec.is_stopped() {
            rec.seq |= STOPPED;
            self.armed -= 1;
        }
    }

    /// Disarms the timer in `slot` (armed): lazily, see the module
    /// documentation.
    #[inline]
    pub fn remove<R: TimerRecords + ?Sized>(&mut self, recs: &mut R, slot: Slot) {
        self.disarm(recs.record_mut(slot.index()));
    }

    /// Disarms the top timer, just returned by [`TimerHeap::peek`] (it
    /// expired): its node goes at once.
    #[inline]
    pub fn pop<R: TimerRecords + ?Sized>(&mut self, recs: &mut R) {
        self.armed -= 1;
        self.popped += 1;
        self.drop_node(recs, 0);
    }

    /// Removes the node of the timer in `slot`, if it has one (armed or
    /// stopped): the watcher is gone, and its record with it.
    pub fn discard<R: TimerRecords + ?Sized>(&mut self, recs: &mut R, slot: Slot) {
        let place = *recs.record(slot.index());
        if let Some(p) = place.pos() {
            if !place.is_stopped() {
                self.armed -= 1;
            }
            self.drop_node(recs, p);
        }
    }

    /// Takes the node at `p` out of the heap, and its timer's record off it.
    fn drop_node<R: TimerRecords + ?Sized>(&mut self, recs: &mut R, p: usize) {
        recs.record_mut(self.slot(p)).node = NodePos::default();
        let last = self.nodes - 1;
        let Node { at, slot } = self.store.pop().expect("a node to drop");
        let slot = slot as usize;
        self.nodes = last;
        if p < last {
            // Down to a leaf and back up as far as it must go (above `p`
            // too, if `last` is earlier than the parent there).
            let seq = recs.record(slot).node_seq;
            self.sift_down(recs, p, at, slot, seq);
        }
    }

    /// Restarts the timer in `slot` at `now` plus its delay (libev's
    /// stop-set-start, in place).
    #[inline]
    pub fn restart<R: TimerRecords + ?Sized>(&mut self, recs: &mut R, slot: Slot, now: u64) {
        self.arm_with(recs, slot, |p| now.saturating_add(p.after));
    }

    /// Puts the node `(at, slot)` with the sequence `seq` in the hole at
    /// `p`, moving it up to its place.
    #[inline(always)]
    fn sift_up<R: TimerRecords + ?Sized>(
        &mut self,
        recs: &mut R,
        p: usize,
        at: u64,
        slot: usize,
        seq: u32,
    ) {
        let store = &mut self.store[..];
        // Stored indices: the hole's, `i`, and its parent's, `i / 4 + 2`
        // (the parent of position `p` is `(p - 1) / 4`).
        let mut i = p + OFFSET;
        while i > OFFSET {
            let pi = i / D + OFFSET - 1;
            let up = store[pi];
            if at > up.at || at == up.at && seq > recs.record(up.slot as usize).node_seq {
                break;
            }
            store[i] = up;
            recs.record_mut(up.slot as usize).move_to(i);
            i = pi;
        }
        store[i] = Node {
            at,
            slot: slot as u32,
        };
        let rec = recs.record_mut(slot);
        rec.move_to(i);
        rec.node_seq = seq;
    }

    /// Puts the node `(at, slot)` with the sequence `seq` in the hole at
    /// `p`, moving it down to its place, bottom-up (Floyd): the
    /// hole walks down along the smallest children to a leaf, three
    /// compares a level and none against the node, which then climbs back
    /// from there (rarely far: a node moved down, a heap's last one or a
    /// lazily moved one settling, belongs near the bottom, as most do).
    fn sift_down<R: TimerRecords + ?Sized>(
        &mut self,
        recs: &mut R,
        p: usize,
        at: u64,
        slot: usize,
        seq: u32,
    ) {
        let store = &mut self.store[..];
        // Stored indices: the hole's, `i`, and its first child's, `4i - 8`
        // (the children of position `p` are at `4p + 1 ..= 4p + 4`).
        // The common case (four children, no tie) in a loop of its own,
        // with no call: nothing to keep across one.
        let mut i = p + OFFSET;
        loop {
            while let Some((m, up)) = least_of_four(store, D * i - 2 * D) {
                store[i] = up;
                recs.record_mut(up.slot as usize).move_to(i);
                i = D * i - 2 * D + m;
            }
            let Some((m, up)) = min_child(recs, store, D * i - 2 * D) else {
                break;
            };
            store[i] = up;
            recs.record_mut(up.slot as usize).move_to(i);
            i = D * i - 2 * D + m;
        }
        self.sift_up(recs, i - OFFSET, at, slot, seq);
    }

    /// Counts a stale top about to be settled, and says whether to rebuild
    /// the heap instead ([`TimerHeap::rebuild`]). Over a window of tops
    /// (a fraction of the heap), it pays when many of the tops were stale
    /// (so, likely, are many of the nodes due next) and few timers were
    /// started meanwhile: a mass expiry after lazy restarts, where every
    /// stale timer would cost two full sifts, a settle and a pop. Not
    /// when timers are restarted faster than they come up (a server's
    /// inactivity timeouts: each would be stale again before it is due)
    /// or few tops are stale; then the cost is this count.
    #[inline]
    fn settle_counted(&mut self) -> bool {
        if self.settled == 0 {
            // A window begins at its first settle: what was started or
            // popped before does not count.
            (self.popped, self.mark) = (0, self.seq);
        }
        self.settled += 1;
        let seen = self.settled + self.popped;
        if seen < (self.nodes / WINDOW).max(MIN_WINDOW) {
            return false;
        }
        // In u64: `usize` is 32 bits on wasm32, where four times 2^31
        // starts would overflow.
        let started = u64::from(self.seq.wrapping_sub(self.mark));
        let mass = self.settled * 4 >= seen && started * 4 <= self.settled as u64;
        self.settled = 0;
        mass
    }

    /// Rekeys every node from its record (but the stopped ones) and
    /// restores heap order bottom-up (Floyd's heap construction, O(n)),
    /// with the same (expiry, sequence) order; in place, no allocation.
    #[cold]
    #[inline(never)]
    fn rebuild<R: TimerRecords + ?Sized>(&mut self, recs: &mut R) {
        // A stopped timer's node keeps its key: it goes when it reaches
        // the top, as before.
        fn rekey(store: &mut [Node], rec: &mut TimerRecord) {
            if let (Some(i), false) = (rec.node.0, rec.is_stopped()) {
                store[i.get() as usize].at = rec.at;
                rec.node_seq = rec.seq;
            }
        }
        let store = &mut self.store[..];
        if recs.count() <= 2 * self.nodes {
            // In the records' order: a sequential pass over memory.
            recs.each(|rec| rekey(store, rec));
        } else {
            for i in OFFSET..store.len() {
                let slot = store[i].slot as usize;
                rekey(store, recs.record_mut(slot));
            }
        }
        if self.nodes > 1 {
            for p in (0..=(self.nodes - 2) / D).rev() {
                self.heapify_down(recs, p);
            }
        }
    }

    /// Moves the node at `p` down to its place (top-down: in a heap being
    /// built, most nodes are leaves, and most of the others move little),
    /// writing the positions of the nodes it moves.
    fn heapify_down<R: TimerRecords + ?Sized>(&mut self, recs: &mut R, p: usize) {
        let store = &mut self.store[..];
        let start = p + OFFSET;
        let node = store[start];
        let slot = node.slot as usize;
        let seq = recs.record(slot).node_seq;
        let mut i = start;
        while let Some((m, up)) =
            least_of_four(store, D * i - 2 * D).or_else(|| min_child(recs, store, D * i - 2 * D))
        {
            if up.at > node.at || up.at == node.at && recs.record(up.slot as usize).node_seq > seq {
                break;
            }
            store[i] = up;
            recs.record_mut(up.slot as usize).move_to(i);
            i = D * i - 2 * D + m;
        }
        if i != start {
            store[i] = node;
            recs.record_mut(slot).move_to(i);
        }
    }

    /// The sequences are about to reach [`STOPPED`]: renumbers every
    /// sequence in use (nodes' and records', which may differ after a lazy
    /// move) from 1, in order, keeping the records' stopped bits. Once per
    /// 2^31 starts.
    #[cold]
    fn renumber<R: TimerRecords + ?Sized>(&mut self, recs: &mut R) {
        let mut used: Vec<u32> = Vec::with_capacity(2 * self.nodes);
        for p in 0..self.nodes {
            let r = recs.record(self.slot(p));
            used.push(r.node_seq);
            used.push(r.seq & !STOPPED);
        }
        used.sort_unstable();
        used.dedup();
        let rank = |s: u32| used.binary_search(&s).map_or(0, |i| i as u32 + 1);
        for p in 0..self.nodes {
            let place = recs.record_mut(self.slot(p));
            place.node_seq = rank(place.node_seq);
            place.seq = rank(place.seq & !STOPPED) | (place.seq & STOPPED);
        }
        self.seq = used.len() as u32;
        // The window's mark was a sequence of the old numbering: a new
        // window begins at the next settle.
        self.settled = 0;
    }

    /// Checks the heap property and the positions (tests only).
    #[cfg(test)]
    pub fn check<R: TimerRecords + ?Sized>(&self, recs: &R) {
        for i in 0..self.nodes {
            let (at, slot) = (self.at(i), self.slot(i));
            let place = *recs.record(slot);
            assert_eq!(place.pos(), Some(i), "position of timer {slot} is stale");
            if !place.is_stopped() {
                assert!(
                    (at, place.node_seq) <= (place.at, place.seq),
                    "node of {slot} later than its true key",
                );
            }
            if i > 0 {
                let parent = (i - 1) / D;
                let up = (self.at(parent), recs.record(self.slot(parent)).node_seq);
                assert!((at, place.node_seq) >= up, "heap order broken at {i}");
            }
        }
        let stored = self.store.len();
        assert!(stored == self.nodes + OFFSET || self.nodes == 0 && stored == 0);
        let armed = (0..self.nodes)
            .filter(|&p| !recs.record(self.slot(p)).is_stopped())
            .count();
        assert_eq!(armed, self.armed);
    }
}

/// A heap with its records in a table of its own, indexed by slot: for
/// the kinds that keep timers of their own (periodic and stat watchers),
/// whose registry entries hold no timer record.
#[derive(Default)]
pub(crate) struct OwnTimerHeap {
    heap: TimerHeap,
    records: Vec<TimerRecord>,
}

impl OwnTimerHeap {
    /// Number of armed timers.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Makes sure the watcher in `slot` has a record (a stopped watcher
    /// keeps its own: its node may still be in the heap).
    pub fn add(&mut self, slot: Slot) {
        if slot.index() >= self.records.len() {
            self.records
                .resize(slot.index() + 1, TimerRecord::default());
        }
    }

    /// See [`TimerHeap::earliest_bound`].
    pub fn earliest_bound(&self) -> Option<u64> {
        self.heap.earliest_bound()
    }

    /// See [`TimerHeap::peek`].
    pub fn peek(&mut self) -> Option<Top> {
        self.heap.peek(&mut self.records)
    }

    /// Whether the timer in `slot` is armed.
    pub fn contains(&self, slot: Slot) -> bool {
        self.records
            .get(slot.index())
            .is_some_and(TimerRecord::is_armed)
    }

    /// The expiry of the timer in `slot`, which must be armed.
    pub fn expiry(&self, slot: Slot) -> u64 {
        self.records[slot.index()].at
    }

    /// See [`TimerHeap::arm`].
    pub fn arm(&mut self, slot: Slot, at: u64) {
        self.heap.arm(&mut self.records, slot, at);
    }

    /// See [`TimerHeap::remove`].
    pub fn remove(&mut self, slot: Slot) {
        self.heap.remove(&mut self.records, slot);
    }

    /// See [`TimerHeap::pop`].
    pub fn pop(&mut self) {
        self.heap.pop(&mut self.records);
    }

    /// See [`TimerHeap::discard`].
    pub fn discard(&mut self, slot: Slot) {
        if slot.index() < self.records.len() {
            self.heap.discard(&mut self.records, slot);
        }
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
        Rebuild,
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

    /// The same, with rebuilds at random points, and long waits so that
    /// many timers come due at once (so that `peek` rebuilds by itself).
    fn op_with_rebuilds() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => op(),
            1 => Just(Op::Rebuild),
            1 => (0u16..60).prop_map(Op::PopDue),
        ]
    }

    /// The model: an ordered set of (at, order, id), `order` counting
    /// starts and restarts.
    fn run_ops(ops: &[Op], start_seq: u32) {
        let mut heap = TimerHeap {
            seq: start_seq,
            ..TimerHeap::default()
        };
        let mut recs = vec![TimerRecord::default(); 65];
        let mut model: BTreeSet<(u64, u64, u32)> = BTreeSet::new();
        let mut key_of: HashMap<u32, (u64, u64)> = HashMap::new();
        let (mut now, mut order) = (0u64, 0u64);
        for op in ops {
            match *op {
                Op::Start(id, after) | Op::Again(id, after) => {
                    order += 1;
                    let at = now + after as u64;
                    if let Some(old) = key_of.insert(id, (at, order)) {
                        model.remove(&(old.0, old.1, id));
                    }
                    heap.arm(&mut recs, sl(id), at);
                    model.insert((at, order, id));
                }
                Op::Stop(id) | Op::Discard(id) => {
                    let armed = key_of.remove(&id);
                    if let Some(old) = armed {
                        model.remove(&(old.0, old.1, id));
                        assert_eq!(recs[sl(id).index()].expiry(), old.0);
                    }
                    match op {
                        // Armed or stopped or without a node: all fine.
                        Op::Discard(_) => heap.discard(&mut recs, sl(id)),
                        _ if armed.is_some() => heap.remove(&mut recs, sl(id)),
                        _ => {}
                    }
                }
                Op::Rebuild => {
                    if heap.nodes > 0 {
                        heap.rebuild(&mut recs);
                    }
                }
                Op::PopDue(dt) => {
                    now += dt as u64;
                    while let Some(top) = heap.peek(&mut recs) {
                        if top.at > now {
                            break;
                        }
                        let first = *model.iter().next().unwrap();
                        let id = top.slot.index() as u32 - 1;
                        assert_eq!((top.at, id), (first.0, first.2), "heap and model disagree");
                        model.remove(&first);
                        key_of.remove(&id);
                        heap.pop(&mut recs);
                    }
                }
            }
            assert_eq!(heap.len(), model.len());
            assert_eq!(
                heap.peek(&mut recs)
                    .map(|n| (n.at, n.slot.index() as u32 - 1)),
                model.iter().next().map(|&(at, _, id)| (at, id))
            );
            for id in 0..64 {
                assert_eq!(recs[sl(id).index()].is_armed(), key_of.contains_key(&id));
            }
            heap.check(&recs);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 100, ..ProptestConfig::default() })]
        /// 100 cases of 1,000 operations: 100k operations against the model.
        #[test]
        fn heap_matches_model(ops in proptest::collection::vec(op(), 1000)) {
            run_ops(&ops, 0);
        }

        /// With rebuilds: each keeps the order, same-instant timers too.
        #[test]
        fn heap_matches_model_with_rebuilds(ops in proptest::collection::vec(op_with_rebuilds(), 1000)) {
            run_ops(&ops, 0);
        }

        /// The same across the renumbering of sequences near their wrap.
        #[test]
        fn heap_matches_model_across_the_sequence_wrap(ops in proptest::collection::vec(op(), 300)) {
            run_ops(&ops, STOPPED - 100);
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(std::mem::size_of::<Node>(), 12);
        assert_eq!(std::mem::size_of::<TimerRecord>(), 36);
        assert_eq!(std::mem::align_of::<TimerRecord>(), 4);
    }
}
