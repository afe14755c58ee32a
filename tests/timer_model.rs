//! Property test: the loop's timers (4-ary heap, start/stop/again/set,
//! repeat, equal-expiry order) against a simple model, over random
//! operation sequences: 100 cases x 1,000 operations = 100k operations.

use std::time::Duration;

use evloop::{Loop, RunMode, RunOutcome, Sim, Timer};
use proptest::prelude::*;

const TIMERS: usize = 12;

#[derive(Debug, Clone)]
enum Op {
    Set(usize, u8, u8),
    Start(usize),
    Stop(usize),
    Again(usize),
    RunOnce,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0..TIMERS, 0u8..8, 0u8..4).prop_map(|(t, a, r)| Op::Set(t, a, r)),
        3 => (0..TIMERS).prop_map(Op::Start),
        2 => (0..TIMERS).prop_map(Op::Stop),
        2 => (0..TIMERS).prop_map(Op::Again),
        3 => Just(Op::RunOnce),
    ]
}

#[derive(Clone, Copy, Default)]
struct ModelTimer {
    after: u64,
    repeat: u64,
    active: bool,
    at: u64,
    seq: u64,
}

/// The model: a list of timers scanned linearly, ordered by (at, seq).
struct Model {
    timers: [ModelTimer; TIMERS],
    now: u64,
    seq: u64,
    log: Vec<(u64, usize)>,
}

impl Model {
    fn activate(&mut self, i: usize, delay: u64) {
        self.seq += 1;
        let t = &mut self.timers[i];
        t.active = true;
        t.at = self.now + delay;
        t.seq = self.seq;
    }

    fn apply(&mut self, op: &Op) -> bool {
        match *op {
            Op::Set(i, after, repeat) => {
                let t = &mut self.timers[i];
                t.after = after as u64;
                t.repeat = repeat as u64;
                if t.active {
                    let after = t.after;
                    self.activate(i, after);
                }
            }
            Op::Start(i) => {
                if !self.timers[i].active {
                    let after = self.timers[i].after;
                    self.activate(i, after);
                }
            }
            Op::Stop(i) => self.timers[i].active = false,
            Op::Again(i) => {
                let repeat = self.timers[i].repeat;
                if repeat == 0 {
                    self.timers[i].active = false;
                } else {
                    self.activate(i, repeat);
                }
            }
            Op::RunOnce => {
                let Some(next) = self.timers.iter().filter(|t| t.active).map(|t| t.at).min() else {
                    return false; // run returns at once: nothing active
                };
                self.now = self.now.max(next);
                let mut fired = [false; TIMERS];
                loop {
                    let due = (0..TIMERS)
                        .filter(|&i| self.timers[i].active && self.timers[i].at <= self.now)
                        .min_by_key(|&i| (self.timers[i].at, self.timers[i].seq));
                    let Some(i) = due else { break };
                    let t = &mut self.timers[i];
                    if t.repeat > 0 {
                        t.at = (t.at + t.repeat).max(self.now);
                        self.seq += 1;
                        t.seq = self.seq;
                    } else {
                        t.active = false;
                    }
                    // A timer due twice in one pass is invoked once.
                    if !fired[i] {
                        fired[i] = true;
                        self.log.push((self.now, i));
                    }
                }
            }
        }
        true
    }
}

fn check(ops: &[Op]) {
    let sim = Sim::new();
    let mut lp: Loop<Vec<(u64, usize)>> = Loop::with_backend(sim.backend());
    let handles: Vec<Timer> = (0..TIMERS)
        .map(|i| {
            let t = lp
                .timer(Duration::ZERO, Duration::ZERO, move |lp, log, _| {
                    log.push((lp.now().as_millis() as u64, i))
                })
                .unwrap();
            lp.stop(t).unwrap();
            t
        })
        .collect();
    let mut model = Model {
        timers: [ModelTimer::default(); TIMERS],
        now: 0,
        seq: TIMERS as u64,
        log: Vec::new(),
    };
    let mut log = Vec::new();
    let ms = Duration::from_millis;
    for op in ops {
        let expect_iteration = model.apply(op);
        match *op {
            Op::Set(i, a, r) => (handles[i])
                .set(&mut lp, ms(a as u64), ms(r as u64))
                .unwrap(),
            Op::Start(i) => lp.start(handles[i]).unwrap(),
            Op::Stop(i) => lp.stop(handles[i]).unwrap(),
            Op::Again(i) => (handles[i]).again(&mut lp).unwrap(),
            Op::RunOnce => {
                let outcome = lp.run(RunMode::Once, &mut log).unwrap();
                let want = if expect_iteration {
                    RunOutcome::IterationDone
                } else {
                    RunOutcome::NoActiveWatchers
                };
                assert_eq!(outcome, want);
                assert_eq!(lp.now(), ms(model.now));
            }
        }
        for (i, h) in handles.iter().enumerate() {
            let t = model.timers[i];
            assert_eq!(
                lp.is_active(*h).unwrap(),
                t.active,
                "timer {i} after {op:?}"
            );
            if t.active {
                assert_eq!(
                    (*h).remaining(&lp).unwrap(),
                    ms(t.at.saturating_sub(model.now))
                );
            }
        }
        assert_eq!(log, model.log, "after {op:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100, ..ProptestConfig::default() })]
    #[test]
    fn loop_timers_match_the_model(ops in proptest::collection::vec(op(), 1000)) {
        check(&ops);
    }
}

/// A mass expiry after lazy restarts: every node is stale, so the heap
/// rebuilds itself (in the registry's order) part way; every timer still
/// fires once, in (expiry, restart) order, ties (common here) included.
#[test]
fn mass_expiry_after_lazy_restarts_keeps_the_order() {
    const N: usize = 5000;
    let ms = Duration::from_millis;
    let sim = Sim::new();
    let mut lp: Loop<Vec<usize>> = Loop::with_backend(sim.backend());
    let mut x = 12u64;
    let mut draw = |range: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % range
    };
    let handles: Vec<Timer> = (0..N)
        .map(|i| {
            lp.timer(ms(1000 + draw(100)), Duration::ZERO, move |_, log, _| {
                log.push(i)
            })
            .unwrap()
        })
        .collect();
    // Each moved later, in index order: its node keeps the earlier key.
    let mut want: Vec<(u64, usize)> = Vec::with_capacity(N);
    for (i, h) in handles.iter().enumerate() {
        let after = 1100 + draw(50);
        h.set(&mut lp, ms(after), Duration::ZERO).unwrap();
        want.push((after, i));
    }
    want.sort();
    let mut log = Vec::new();
    assert_eq!(
        lp.run(RunMode::Default, &mut log).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert_eq!(log, want.iter().map(|&(_, i)| i).collect::<Vec<_>>());
}
