//! Property test: pending invocations (feed, stop, re-prioritise, invoke)
//! against a model: highest priority first, FIFO within a priority, a
//! stopped watcher never invoked, a fed event merged into a queued one,
//! a re-prioritised pending watcher moved to the end of its new queue.

use std::collections::HashMap;

use evloop::{Idle, Loop, Ready, RunMode, Sim};
use proptest::prelude::*;

const WATCHERS: usize = 8;

#[derive(Debug, Clone)]
enum Op {
    Feed(usize),
    Stop(usize),
    SetPriority(usize, i32),
    Invoke,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..WATCHERS).prop_map(Op::Feed),
        1 => (0..WATCHERS).prop_map(Op::Stop),
        2 => (0..WATCHERS, -2i32..=2).prop_map(|(w, p)| Op::SetPriority(w, p)),
        1 => Just(Op::Invoke),
    ]
}

#[derive(Default)]
struct Model {
    priority: [i32; WATCHERS],
    /// Pending watchers: id -> (priority when queued, sequence).
    pending: HashMap<usize, (i32, u64)>,
    seq: u64,
}

impl Model {
    fn push(&mut self, w: usize) {
        self.seq += 1;
        self.pending.insert(w, (self.priority[w], self.seq));
    }

    /// The invocation order of everything pending, then empty.
    fn invoke(&mut self) -> Vec<usize> {
        let mut all: Vec<(usize, (i32, u64))> = self.pending.drain().collect();
        all.sort_by_key(|&(_, (p, s))| (-p, s));
        all.into_iter().map(|(w, _)| w).collect()
    }
}

fn check(ops: &[Op]) {
    let mut lp: Loop<Vec<usize>> = Loop::with_backend(Sim::new().backend());
    let handles: Vec<Idle> = (0..WATCHERS)
        .map(|i| {
            let h = Idle::new(&mut lp, move |_, log: &mut Vec<usize>, _| log.push(i)).unwrap();
            lp.stop(h).unwrap(); // inactive: only fed events invoke it
            h
        })
        .collect();
    let mut model = Model::default();
    for op in ops {
        match *op {
            Op::Feed(w) => {
                lp.feed_event(handles[w], Ready::READABLE).unwrap();
                if !model.pending.contains_key(&w) {
                    model.push(w);
                }
            }
            Op::Stop(w) => {
                lp.stop(handles[w]).unwrap();
                model.pending.remove(&w);
            }
            Op::SetPriority(w, p) => {
                lp.set_priority(handles[w], p).unwrap();
                if model.priority[w] != p {
                    model.priority[w] = p;
                    if model.pending.contains_key(&w) {
                        model.push(w);
                    }
                }
            }
            Op::Invoke => {
                let mut log = Vec::new();
                lp.run(RunMode::NoWait, &mut log).unwrap();
                assert_eq!(log, model.invoke(), "invocation order after {ops:?}");
            }
        }
        assert_eq!(lp.pending_count(), model.pending.len());
        for (w, h) in handles.iter().enumerate() {
            assert_eq!(lp.is_pending(*h).unwrap(), model.pending.contains_key(&w));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    #[test]
    fn pending_queues_match_the_model(ops in proptest::collection::vec(op(), 1..300)) {
        check(&ops);
    }
}
