//! The cost of one loop iteration (`lp.run(RunMode::NoWait, ..)`) with 100
//! active fds and 100 / 500 / 1,000 / 10,000 / 100,000 idle ones, per
//! backend.
//!
//! - Idle fds: eventfds (on Linux; a socket pair elsewhere) whose counter stays
//!   zero, so they are never readable; each has a read watcher.
//! - Active fds: eventfds whose counter is 1 and is never read, so they are
//!   readable on every iteration (level-triggered); each has a read watcher
//!   that only counts. One iteration therefore dispatches exactly 100
//!   events, whatever the number of idle fds.
//! - On the simulator, idle fds are sockets with nothing to read and active
//!   ones are socket pairs holding one unread byte.
//!
//! The setup is benches/idle_workload.rs, shared with the comparison
//! example's `idle` workload (examples/compare/).
//!
//! epoll's cost should stay flat as the idle fds grow: the kernel reports
//! only the ready ones. poll's and select's grow: every call hands the
//! kernel, and scans, the whole set. Sizes that do not fit are skipped with
//! a message: the process's fd limit (`RLIMIT_NOFILE`, raised to its hard
//! limit first) or select's `FD_SETSIZE`.
//!
//! Run: `CARGO_TARGET_DIR=/tmp/target-bench cargo bench --manifest-path benches/criterion/Cargo.toml --bench idle_fds`
//! (a filter selects a backend: `... --bench idle_fds -- epoll`), then
//! `benches/report.py` prints the table of docs/backends.md. Where the
//! hard fd limit stops short of 100,000, `benches/idle_fds_vm.sh` runs this
//! bench in a QEMU guest that has none.

#[path = "chain_workload.rs"]
mod chain_workload;
#[path = "idle_workload.rs"]
mod idle_workload;

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use evloop::{Loop, RunMode};
use idle_workload::{does_not_fit, setup};

/// Active fds: each is ready on every iteration.
const ACTIVE: usize = 100;
/// The numbers of idle fds measured (500 is there so that select, which
/// stops at `FD_SETSIZE`, shows its growth too).
const IDLE: [usize; 5] = [100, 500, 1_000, 10_000, 100_000];
fn idle_fds(c: &mut Criterion) {
    let fd_limit = chain_workload::raise_fd_limit();
    let builder = Loop::builder();
    let mut backends: Vec<&str> = evloop::backends::AVAILABLE.to_vec();
    backends.push("sim");
    let mut group = c.benchmark_group("idle_fds");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for backend in backends {
        for idle in IDLE {
            if let Some(why) = does_not_fit(&builder, backend, idle, ACTIVE, fd_limit) {
                println!("idle_fds/{backend}/{idle}: SKIPPED: {why}");
                continue;
            }
            let mut s = match setup(&builder, backend, idle, ACTIVE) {
                Ok(s) => s,
                Err(e) => {
                    println!("idle_fds/{backend}/{idle}: SKIPPED: setup failed: {e}");
                    continue;
                }
            };
            // The first iteration registers every fd, and a backend may
            // take a few to size its buffers (epoll starts with room for 64
            // events and doubles it when full). Then one iteration must
            // dispatch exactly the active fds.
            let mut fired = 0u64;
            for _ in 0..8 {
                fired = 0;
                s.lp.run(RunMode::NoWait, &mut fired).unwrap();
            }
            assert_eq!(fired, ACTIVE as u64, "{backend}: events in one iteration");
            fired = 0;
            let mut iterations = 0u64;
            group.bench_with_input(BenchmarkId::new(backend, idle), &idle, |b, _| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    let mut left = iters;
                    while left > 0 {
                        let n = left.min(1000);
                        if let Some(sim) = &s.sim {
                            sim.clear_trace();
                        }
                        let start = Instant::now();
                        for _ in 0..n {
                            s.lp.run(RunMode::NoWait, &mut fired).unwrap();
                        }
                        total += start.elapsed();
                        left -= n;
                    }
                    iterations += iters;
                    total
                })
            });
            assert_eq!(fired, iterations * ACTIVE as u64, "{backend}: events");
        }
    }
    group.finish();
}

criterion_group!(benches, idle_fds);
criterion_main!(benches);
