//! Starting and stopping N watchers costs O(N) (or O(N log N) for timers)
//! in all, for every kind: 200,000 of each, created, run once, and stopped
//! back to front (the worst order for a list searched from the front),
//! under a watchdog. Quadratic lists took minutes here; the criterion
//! bench `benches/scale.rs` has the numbers.

mod common;

use std::time::Duration;

use common::{watchdog, World};
use evloop::{Check, Handle, Idle, Interest, Io, Loop, Prepare, RunMode};

const N: usize = 200_000;
const LIMIT: Duration = Duration::from_secs(60);

/// Creates `n` watchers with `make`, runs one non-blocking iteration, then
/// stops them all, last first, and removes them in creation order.
fn churn<H: Handle>(
    lp: &mut Loop<'static, u64>,
    n: usize,
    mut make: impl FnMut(&mut Loop<'static, u64>, usize) -> H,
) {
    let handles: Vec<H> = (0..n).map(|i| make(lp, i)).collect();
    let mut calls = 0;
    lp.run(RunMode::NoWait, &mut calls).unwrap();
    for &h in handles.iter().rev() {
        lp.stop(h).unwrap();
    }
    assert_eq!(lp.active_count(), 0);
    for &h in &handles {
        lp.remove(h).unwrap();
    }
}

#[test]
fn idle_prepare_and_check_watchers_by_the_hundred_thousand() {
    watchdog("idle/prepare/check", LIMIT, || {
        let mut lp: Loop<u64> = World::new("sim").new_loop();
        churn(&mut lp, N, |lp, i| {
            let h = Idle::new(lp, |_, n, _| *n += 1).unwrap();
            lp.set_priority(h, (i % 5) as i32 - 2).unwrap();
            h
        });
        churn(&mut lp, N, |lp, _| {
            Prepare::new(lp, |_, n, _| *n += 1).unwrap()
        });
        churn(&mut lp, N, |lp, _| {
            Check::new(lp, |_, n, _| *n += 1).unwrap()
        });
    });
}

#[test]
fn timers_by_the_hundred_thousand() {
    watchdog("timers", LIMIT, || {
        let mut lp: Loop<u64> = World::new("sim").new_loop();
        churn(&mut lp, N, |lp, i| {
            let after = Duration::from_millis(1 + (i * 7919 % 100_000) as u64);
            lp.timer(after, Duration::ZERO, |_, n, _| *n += 1).unwrap()
        });
    });
}

#[test]
fn io_watchers_by_the_hundred_thousand_on_one_fd() {
    watchdog("io on one fd", LIMIT, || {
        let w = World::new("sim");
        let sim = w.sim.clone().unwrap();
        let mut lp: Loop<'static, u64> = w.new_loop();
        let sock = Box::leak(Box::new(sim.socket("shared", 0)));
        churn(&mut lp, N, |lp, _| {
            Io::borrowed(lp, &*sock, Interest::READABLE, |_, n, _| *n += 1).unwrap()
        });
    });
}
