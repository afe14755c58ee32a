//! libevent's bench.c workload (`benches/chain_workload.rs`) under
//! criterion, per backend: socket pairs with a read watcher each, `active`
//! chains of one-byte reads and writes hopping from pair to pair, plain and
//! with a per-pair timer restarted (`Timer::again`) by every callback.
//!
//! Two shapes: 200 pairs / 20 chains (fits select's `FD_SETSIZE`) and
//! 1,000 pairs / 100 chains (bench.c's, the one of the callgrind counts;
//! select refuses it and is skipped with a message). One criterion
//! iteration is one run of `WRITES` writes, so `WRITES + active` events;
//! the throughput line is events per second.
//!
//! Rows besides the backends:
//! - `bare`: the same reads and writes with no loop at all, through `std`'s
//!   `Read`/`Write`; `fdio`: the same through `evloop::backends::fd_io`
//!   (the calls the loop's callbacks make: the floor);
//! - `mio`: the same workload on mio 1.x (epoll, edge-triggered; no
//!   timers, so plain only).
//!
//! Run: `CARGO_TARGET_DIR=/tmp/target-bench cargo bench --manifest-path benches/criterion/Cargo.toml --bench chain`
//! (a filter selects rows: `... --bench chain -- 1000x100`), then
//! `benches/report.py` prints the table of docs/backends.md.

#[path = "chain_workload.rs"]
mod chain_workload;
#[path = "mio_chain.rs"]
mod mio_chain;

use std::time::Duration;

use chain_workload::{bare, bare_fd, on_os, on_sim_world, raise_fd_limit, Outcome, Shape};
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};

/// Writes per run.
const WRITES: usize = 20_000;

/// Times `runs` runs, counting only each run's own measured time (the
/// simulator's trace is emptied between runs, untimed).
fn time_runs(iters: u64, mut run: impl FnMut() -> Outcome, mut between: impl FnMut()) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        between();
        let o = run();
        total += o.elapsed;
    }
    total
}

fn configure(group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>, events: usize) {
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(events as u64));
}

fn chain(c: &mut Criterion) {
    raise_fd_limit();
    let mut backends: Vec<&str> = evloop::backends::AVAILABLE.to_vec();
    backends.push("sim");
    for (pairs, active) in [(200, 20), (1000, 100)] {
        for timers in [false, true] {
            let shape = Shape {
                pairs,
                active,
                writes: WRITES,
                timers,
                trigger: evloop::Trigger::Level,
            };
            let name = format!(
                "chain_{pairs}x{active}_{}",
                if timers { "timers" } else { "plain" }
            );
            let mut group = c.benchmark_group(&name);
            configure(&mut group, active + WRITES);
            for &backend in &backends {
                if backend == "sim" {
                    let (mut b, sim) = on_sim_world(shape);
                    group.bench_function("sim", |bn| {
                        bn.iter_custom(|iters| time_runs(iters, || b.run(), || sim.clear_trace()))
                    });
                    continue;
                }
                match on_os(backend, shape) {
                    Ok(mut b) => {
                        group.bench_function(backend, |bn| {
                            bn.iter_custom(|iters| time_runs(iters, || b.run(), || {}))
                        });
                    }
                    Err(e) => println!("{name}/{backend}: SKIPPED: {e}"),
                }
            }
            if !timers {
                let mut b = bare(shape);
                group.bench_function("bare", |bn| {
                    bn.iter_custom(|iters| time_runs(iters, || b.run(), || {}))
                });
                let mut f = bare_fd(shape);
                group.bench_function("fdio", |bn| {
                    bn.iter_custom(|iters| time_runs(iters, || f.run_fd_io(), || {}))
                });
                match mio_chain::build(shape) {
                    Ok(mut m) => {
                        group.bench_function("mio", |bn| {
                            bn.iter_custom(|iters| time_runs(iters, || m.run(), || {}))
                        });
                    }
                    Err(e) => println!("{name}/mio: SKIPPED: {e}"),
                }
            }
            group.finish();
        }
    }
}

criterion_group!(benches, chain);
criterion_main!(benches);
