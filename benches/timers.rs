//! Timer operations with a million armed timers: the case of
//! benches/timers_1m.rs (which runs against libev, with benches/timers_1m.c),
//! tracked without C. One loop (the platform's default backend, nothing
//! polled) with N = 1,000,000 armed timers of 1000 s plus a random part
//! below 1000 s, so that nothing fires; every row does one operation per
//! iteration on a timer drawn from a pre-generated random stream
//! (splitmix64, 2^20 entries, cycled), and the loop's cached time is
//! refreshed every 1024 operations, as between iterations of a real loop.
//!
//! Rows, `timers_1m/<row>`, each keeping N timers armed:
//!
//! - `arm`: `Loop::timer` (create and start one more timer). Timed in
//!   chunks of at most 4096, each followed (untimed) by the removal of the
//!   timers it created, so the heap holds between N and N + 4096 timers;
//!   the registry reuses the removed timers' slots, so this is steady-state
//!   creation (connections coming and going), not the first arming into
//!   fresh memory that benches/timers_1m.rs times.
//! - `restart`: `Timer::set(t, d, d)` with a new random timeout.
//! - `again`: `t.again(&mut lp)` (the period unchanged).
//! - `stop_start`: `Loop::stop`, `Timer::set(t, d, d)`, `Loop::start`.
//!
//! Run: `CARGO_TARGET_DIR=/tmp/target-bench cargo bench --manifest-path benches/criterion/Cargo.toml --bench timers`
//! (about 25 seconds: setup of about a second, then 20 samples in 3 s after
//! a 1 s warm-up per row; a filter selects rows: `... -- restart`).

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use evloop::{Loop, Timer};

// splitmix64 and the timeouts and picks, as benches/timers_1m.rs draws them.
#[path = "timer_workload.rs"]
mod timer_workload;
use timer_workload::{Rng, NANOS};

/// Armed timers.
const N: usize = 1_000_000;
/// Entries of the random stream (a power of two).
const STREAM: usize = 1 << 20;
/// The cached loop time is refreshed when the operation count has these
/// low bits clear.
const REFRESH_MASK: usize = 1023;
/// The largest chunk of `arm`.
const ARM_CHUNK: u64 = 4096;

struct Fixture {
    lp: Loop<'static, ()>,
    timers: Vec<Timer>,
    /// (timer index, timeout)
    stream: Vec<(u32, Duration)>,
    /// Operations so far (the stream position, and when to refresh the
    /// time).
    k: usize,
}

impl Fixture {
    fn new() -> Fixture {
        let mut rng = Rng(12);
        let mut lp = Loop::new().expect("a loop on the default backend");
        let timers = (0..N)
            .map(|_| {
                let d = rng.timeout(NANOS);
                lp.timer(d, d, |_, _, _| {}).unwrap()
            })
            .collect();
        let stream = (0..STREAM).map(|_| rng.pick(N, NANOS)).collect();
        Fixture {
            lp,
            timers,
            stream,
            k: 0,
        }
    }

    /// The next timer and timeout of the stream; refreshes the loop time
    /// every 1024 operations.
    #[inline(always)]
    fn next(&mut self) -> (Timer, Duration) {
        let (i, d) = self.stream[self.k & (STREAM - 1)];
        if self.k & REFRESH_MASK == 0 {
            self.lp.update_now();
        }
        self.k = self.k.wrapping_add(1);
        (self.timers[i as usize], d)
    }

    /// `iters` timers created (timed, in chunks), each chunk removed
    /// afterwards (untimed).
    fn arm(&mut self, iters: u64) -> Duration {
        let mut created = Vec::with_capacity(ARM_CHUNK as usize);
        let mut spent = Duration::ZERO;
        let mut left = iters;
        while left > 0 {
            let chunk = left.min(ARM_CHUNK);
            let t0 = Instant::now();
            for _ in 0..chunk {
                let (_, d) = self.next();
                created.push(self.lp.timer(d, d, |_, _, _| {}).unwrap());
            }
            spent += t0.elapsed();
            for t in created.drain(..) {
                self.lp.remove(t).unwrap();
            }
            left -= chunk;
        }
        spent
    }
}

fn timers(c: &mut Criterion) {
    let mut fx = Fixture::new();
    let mut group = c.benchmark_group("timers_1m");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    group.bench_function("arm", |b| b.iter_custom(|iters| fx.arm(iters)));
    group.bench_function("restart", |b| {
        b.iter(|| {
            let (t, d) = fx.next();
            t.set(&mut fx.lp, d, d).unwrap();
        })
    });
    group.bench_function("again", |b| {
        b.iter(|| {
            let (t, _) = fx.next();
            t.again(&mut fx.lp).unwrap();
        })
    });
    group.bench_function("stop_start", |b| {
        b.iter(|| {
            let (t, d) = fx.next();
            fx.lp.stop(t).unwrap();
            t.set(&mut fx.lp, d, d).unwrap();
            fx.lp.start(t).unwrap();
        })
    });
    group.finish();
    // Every row kept the N timers armed.
    assert_eq!(fx.lp.active_count(), N);
}

criterion_group!(benches, timers);
criterion_main!(benches);
