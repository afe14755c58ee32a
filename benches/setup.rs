//! Setup per fd in wall time: a fresh loop on each backend, one read
//! watcher created per fd (the bench.c shape: socket pairs, a borrowed
//! source, a callback that captures its pair's index), one non-blocking
//! iteration that registers them, then the loop dropped; with and without
//! the capacity hint (`Builder::capacity`), which reserves the loop's
//! tables so that none grows while the watchers are created.
//!
//! The instruction counts of the same setup, against libev's on the
//! shared peer harness, come from `benches/setup_per_fd.sh`
//! (docs/benchmarks.md, "Setup per fd"); this bench is for wall time and
//! for the hint, which the harness does not use.
//!
//! Run: `CARGO_TARGET_DIR=/tmp/target-bench cargo bench --manifest-path benches/criterion/Cargo.toml --bench setup`
//! (a filter selects a backend: `... --bench setup -- epoll`).

use std::hint::black_box;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use evloop::{Interest, Io, Loop, RunMode};

/// Socket pairs per loop (select stops at `FD_SETSIZE`, 1,024 fds).
const PAIRS: usize = 400;

fn setup(c: &mut Criterion) {
    let pairs: Vec<(UnixStream, UnixStream)> = (0..PAIRS)
        .map(|_| UnixStream::pair().expect("socketpair"))
        .collect();
    let highest = pairs
        .iter()
        .map(|(a, b)| a.as_raw_fd().max(b.as_raw_fd()))
        .max();
    let fds = highest.unwrap_or(0) as usize + 1;
    let mut group = c.benchmark_group("setup");
    group.throughput(Throughput::Elements(PAIRS as u64));
    for &backend in evloop::backends::AVAILABLE {
        for (hint, capacity) in [("grown", 0), ("reserved", fds.max(PAIRS))] {
            group.bench_function(BenchmarkId::new(backend, hint), |b| {
                b.iter(|| {
                    let mut lp: Loop<'_, usize> = Loop::builder()
                        .backend(backend)
                        .capacity(capacity)
                        .build()
                        .expect("loop");
                    for (i, (read, _)) in pairs.iter().enumerate() {
                        Io::borrowed(&mut lp, read, Interest::READABLE, move |_, n, _| *n += i)
                            .expect("io watcher");
                    }
                    let mut n = 0;
                    lp.run(RunMode::NoWait, &mut n).expect("run");
                    black_box(n);
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, setup);
criterion_main!(benches);
