//! A 4-ary min-heap of timers, ordered by (expiry, start sequence).
//!
//! As in libev, each node caches the expiry time so that sifting compares
//! heap memory only, and every move is reported through `moved` so that the
//! timer can remember its heap index: stop and restart are then O(log n)
//! without a search. A 4-ary heap is shallower than a binary one and its four
//! children sit next to each other in memory, which is what makes it faster
//! in practice (fewer levels, one cache line per sift step).
//!
//! The sequence number breaks ties: timers due at the same instant fire in
//! the order they were (re)started.

use std::time::Duration;

const D: usize = 4;

/// One timer in the heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Node {
    /// When the timer expires.
    pub at: Duration,
    /// Start order, to keep equal expiries FIFO.
    pub seq: u64,
    /// Slab index of the timer watcher.
    pub idx: u32,
}

impl Node {
    #[inline]
    fn before(&self, other: &Node) -> bool {
        (self.at, self.seq) < (other.at, other.seq)
    }
}

#[derive(Default)]
pub(crate) struct TimerHeap {
    nodes: Vec<Node>,
}

impl TimerHeap {
    /// Number of timers in the heap.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The earliest timer.
    #[inline]
    pub fn peek(&self) -> Option<&Node> {
        self.nodes.first()
    }

    /// Inserts a node; `moved(idx, pos)` is told every node's new position.
    pub fn push(&mut self, node: Node, moved: &mut impl FnMut(u32, usize)) {
        self.nodes.push(node);
        let last = self.nodes.len() - 1;
        self.sift_up(last, moved);
    }

    /// Removes the node at `pos` and returns it.
    pub fn remove(&mut self, pos: usize, moved: &mut impl FnMut(u32, usize)) -> Node {
        let last = self.nodes.len() - 1;
        let node = self.nodes[pos];
        if pos != last {
            self.nodes[pos] = self.nodes[last];
            self.nodes.pop();
            self.restore(pos, moved);
        } else {
            self.nodes.pop();
        }
        node
    }

    /// Changes the key of the node at `pos` and restores heap order.
    pub fn update(
        &mut self,
        pos: usize,
        at: Duration,
        seq: u64,
        moved: &mut impl FnMut(u32, usize),
    ) {
        self.nodes[pos].at = at;
        self.nodes[pos].seq = seq;
        self.restore(pos, moved);
    }

    fn restore(&mut self, pos: usize, moved: &mut impl FnMut(u32, usize)) {
        if pos > 0 && self.nodes[pos].before(&self.nodes[(pos - 1) / D]) {
            self.sift_up(pos, moved);
        } else {
            self.sift_down(pos, moved);
        }
    }

    fn sift_up(&mut self, mut pos: usize, moved: &mut impl FnMut(u32, usize)) {
        let node = self.nodes[pos];
        while pos > 0 {
            let parent = (pos - 1) / D;
            if !node.before(&self.nodes[parent]) {
                break;
            }
            self.nodes[pos] = self.nodes[parent];
            moved(self.nodes[pos].idx, pos);
            pos = parent;
        }
        self.nodes[pos] = node;
        moved(node.idx, pos);
    }

    fn sift_down(&mut self, mut pos: usize, moved: &mut impl FnMut(u32, usize)) {
        let node = self.nodes[pos];
        let len = self.nodes.len();
        loop {
            let first = pos * D + 1;
            if first >= len {
                break;
            }
            let end = (first + D).min(len);
            let mut min = first;
            for c in first + 1..end {
                if self.nodes[c].before(&self.nodes[min]) {
                    min = c;
                }
            }
            if !self.nodes[min].before(&node) {
                break;
            }
            self.nodes[pos] = self.nodes[min];
            moved(self.nodes[pos].idx, pos);
            pos = min;
        }
        self.nodes[pos] = node;
        moved(node.idx, pos);
    }

    /// Checks the heap property and that `pos_of` agrees with every node's
    /// position (tests only).
    #[cfg(test)]
    pub fn check(&self, pos_of: impl Fn(u32) -> usize) {
        for (i, n) in self.nodes.iter().enumerate() {
            assert_eq!(pos_of(n.idx), i, "position of timer {} is stale", n.idx);
            if i > 0 {
                assert!(
                    !n.before(&self.nodes[(i - 1) / D]),
                    "heap order broken at {i}"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeSet, HashMap};

    #[derive(Debug, Clone)]
    enum Op {
        Start(u32, u16),
        Stop(u32),
        Again(u32, u16),
        PopDue(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u32..64, 0u16..50).prop_map(|(t, a)| Op::Start(t, a)),
            (0u32..64).prop_map(Op::Stop),
            (0u32..64, 0u16..50).prop_map(|(t, a)| Op::Again(t, a)),
            (0u16..10).prop_map(Op::PopDue),
        ]
    }

    /// The model: an ordered set of (at, seq, id).
    fn run_ops(ops: &[Op]) {
        let mut heap = TimerHeap::default();
        let pos: std::cell::RefCell<HashMap<u32, usize>> = Default::default();
        let mut model: BTreeSet<(Duration, u64, u32)> = BTreeSet::new();
        let mut key_of: HashMap<u32, (Duration, u64)> = HashMap::new();
        let mut now = Duration::ZERO;
        let mut seq = 0u64;
        for op in ops {
            let mut moved = |idx: u32, p: usize| {
                pos.borrow_mut().insert(idx, p);
            };
            match *op {
                Op::Start(id, after) | Op::Again(id, after) => {
                    seq += 1;
                    let at = now + Duration::from_millis(after as u64);
                    if let Some(old) = key_of.insert(id, (at, seq)) {
                        // "again" on an active timer: move it.
                        model.remove(&(old.0, old.1, id));
                        let p = pos.borrow()[&id];
                        heap.update(p, at, seq, &mut moved);
                    } else {
                        heap.push(Node { at, seq, idx: id }, &mut moved);
                    }
                    model.insert((at, seq, id));
                }
                Op::Stop(id) => {
                    if let Some(old) = key_of.remove(&id) {
                        model.remove(&(old.0, old.1, id));
                        let p = pos.borrow_mut().remove(&id).unwrap();
                        let n = heap.remove(p, &mut moved);
                        assert_eq!(n.idx, id);
                    }
                }
                Op::PopDue(dt) => {
                    now += Duration::from_millis(dt as u64);
                    while let Some(top) = heap.peek().copied() {
                        if top.at > now {
                            break;
                        }
                        let first = *model.iter().next().unwrap();
                        assert_eq!(
                            (top.at, top.seq, top.idx),
                            first,
                            "heap and model disagree on the earliest timer"
                        );
                        model.remove(&first);
                        key_of.remove(&top.idx);
                        pos.borrow_mut().remove(&top.idx);
                        heap.remove(0, &mut moved);
                    }
                }
            }
            assert_eq!(heap.len(), model.len());
            assert_eq!(
                heap.peek().map(|n| (n.at, n.seq, n.idx)),
                model.iter().next().copied()
            );
            heap.check(|idx| pos.borrow()[&idx]);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 100, ..ProptestConfig::default() })]
        /// 100 cases of 1,000 operations: 100k operations against the model.
        #[test]
        fn heap_matches_model(ops in proptest::collection::vec(op(), 1000)) {
            run_ops(&ops);
        }
    }
}
