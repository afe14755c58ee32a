//! Linear cost: the total time to create and start N watchers of one kind
//! and then stop them all, at N = 10,000 and 100,000, and to create N
//! simulated sockets. With O(1) or O(log N) work per watcher, 10x the
//! watchers take about 10x the time, somewhat more where the larger size
//! outgrows the caches or its memory is freshly faulted in; a list
//! searched or shifted on every start or stop makes it about 100x.
//!
//! Rows, `scale/<row>/<stop order>/<N>`:
//!
//! - `idle`, `prepare`, `check`: N `Idle::new(&mut lp, ..)` (etc.), then N `lp.stop`.
//! - `timer`: N timers with distinct timeouts (1..=N ms, in random order).
//! - `io_sim`: N read watchers on N simulated sockets. Io rows run one
//!   `RunMode::NoWait` iteration after the starts (the backend registers
//!   every fd) and one after the stops (it forgets them), so the backend's
//!   per-fd work is measured too; a far-off timer keeps the loop running
//!   for the second one.
//! - `io_epoll`, `io_poll`: the same on N real fds (N/2
//!   `UnixStream::pair()`s, both ends watched), at N = 1,000 and 10,000:
//!   the hard fd limit here is 20,000 (the bench raises the soft limit to
//!   it). A size that does not fit is skipped, with a line on stderr.
//! - `io_sim_one_fd`: N read watchers on one simulated socket.
//! - `sim_socket`: N `sim.socket(..)` calls (no stop order).
//!
//! Stop orders: `fifo` stops in creation order (removal from the front of
//! a list: the worst case for `Vec::remove`), `lifo` in reverse (the worst
//! case for a search from the front). Setup (the loop, the sockets, the
//! timeouts) and teardown (dropping them) are not timed. Each row takes
//! 10 samples in about a second, or 10 single runs where a run takes
//! longer, so the bench takes a few minutes even where rows are quadratic.
//!
//! Run: `CARGO_TARGET_DIR=/tmp/target-bench cargo bench --manifest-path benches/criterion/Cargo.toml --bench scale`
//! (a filter selects rows: `... --bench scale -- io_sim/`), then
//! `benches/report.py` prints the table with the large / small ratios.

#[path = "chain_workload.rs"]
mod chain_workload;

use std::any::Any;
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BatchSize, BenchmarkGroup, BenchmarkId, Criterion,
    SamplingMode,
};
use evloop::{
    Check, Handle, Idle, Interest, IoEvent, Loop, Prepare, RunMode, RunOutcome, Sim, Source,
    SourceFd, VirtualFd,
};

/// Watcher counts on the simulator and for the kinds that need no fd.
const SIZES: [usize; 2] = [10_000, 100_000];
/// Watcher (fd) counts on the kernel backends, within the fd limit.
const OS_SIZES: [usize; 2] = [1_000, 10_000];
/// Fds the process needs besides the watched ones (stdio, the epoll fd,
/// criterion's files, ...).
const RESERVE: usize = 64;

#[derive(Clone, Copy)]
enum Order {
    Fifo,
    Lifo,
}

impl Order {
    fn name(self) -> &'static str {
        match self {
            Order::Fifo => "fifo",
            Order::Lifo => "lifo",
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Row {
    Idle,
    Prepare,
    Check,
    Timer,
    IoSim,
    IoOs(&'static str),
    IoSimOneFd,
}

impl Row {
    fn name(self) -> String {
        match self {
            Row::Idle => "idle".into(),
            Row::Prepare => "prepare".into(),
            Row::Check => "check".into(),
            Row::Timer => "timer".into(),
            Row::IoSim => "io_sim".into(),
            Row::IoOs(backend) => format!("io_{backend}"),
            Row::IoSimOneFd => "io_sim_one_fd".into(),
        }
    }
}

/// A simulated fd named by number: lets many owned watchers share one fd.
struct SameFd(RawFd);

impl Source for SameFd {
    fn source_fd(&self) -> SourceFd<'_> {
        SourceFd::Virtual(VirtualFd::new(self.0))
    }
}

/// What the timed part consumes.
enum Work {
    Plain,
    Timers(Vec<Duration>),
    Sim(Vec<evloop::SimSocket>),
    Os(Vec<OwnedFd>),
    OneFd(RawFd),
}

/// One run's input, and (returned by the timed part) what is dropped
/// after the clock stops.
struct Input {
    lp: Loop<'static>,
    work: Work,
    /// The simulated world or the shared socket, kept past the timing.
    _keep: Option<Box<dyn Any>>,
}

fn nop<H>(_: &mut Loop<'static>, _: &mut (), _: H) {}

fn io_nop<T>(_: &mut Loop<'static>, _: &mut (), _: IoEvent<'_, T>) {}

fn setup(row: Row, n: usize, timeouts: &[Duration]) -> Input {
    let sim = Sim::new();
    let (mut lp, work, keep): (_, _, Option<Box<dyn Any>>) = match row {
        Row::Idle | Row::Prepare | Row::Check => {
            (Loop::with_backend(sim.backend()), Work::Plain, None)
        }
        Row::Timer => (
            Loop::with_backend(sim.backend()),
            Work::Timers(timeouts.to_vec()),
            None,
        ),
        Row::IoSim => {
            let socks = (0..n).map(|_| sim.socket("s", 0)).collect();
            let lp = Loop::with_backend(sim.backend());
            (lp, Work::Sim(socks), Some(Box::new(sim)))
        }
        Row::IoSimOneFd => {
            let sock = sim.socket("s", 0);
            let lp = Loop::with_backend(sim.backend());
            (lp, Work::OneFd(sock.fd()), Some(Box::new(sock)))
        }
        Row::IoOs(backend) => {
            let lp = Loop::builder().backend(backend).build().unwrap();
            let mut fds = Vec::with_capacity(n);
            for _ in 0..n / 2 {
                let (a, b) = UnixStream::pair().unwrap();
                fds.push(a.into());
                fds.push(b.into());
            }
            (lp, Work::Os(fds), None)
        }
    };
    if matches!(row, Row::IoSim | Row::IoSimOneFd | Row::IoOs(_)) {
        // Keeps the loop iterating once the io watchers are stopped, so
        // that the backend is told to forget their fds.
        lp.timer(Duration::from_secs(3600), Duration::ZERO, nop)
            .unwrap();
    }
    Input {
        lp,
        work,
        _keep: keep,
    }
}

fn stop_all<H: Handle>(lp: &mut Loop<'static>, handles: &[H], order: Order) {
    match order {
        Order::Fifo => handles.iter().for_each(|&h| lp.stop(h).unwrap()),
        Order::Lifo => handles.iter().rev().for_each(|&h| lp.stop(h).unwrap()),
    }
}

/// One iteration that tells the backend about every changed fd.
fn apply_registrations(lp: &mut Loop<'static>) {
    let outcome = lp.run(RunMode::NoWait, &mut ()).unwrap();
    assert_eq!(outcome, RunOutcome::IterationDone);
}

/// The timed part: create and start `n` watchers, then stop them all.
fn start_stop(mut inp: Input, row: Row, n: usize, order: Order) -> Input {
    let lp = &mut inp.lp;
    match (row, std::mem::replace(&mut inp.work, Work::Plain)) {
        (Row::Idle, _) => {
            let hs: Vec<_> = (0..n).map(|_| Idle::new(lp, nop).unwrap()).collect();
            stop_all(lp, &hs, order);
        }
        (Row::Prepare, _) => {
            let hs: Vec<_> = (0..n).map(|_| Prepare::new(lp, nop).unwrap()).collect();
            stop_all(lp, &hs, order);
        }
        (Row::Check, _) => {
            let hs: Vec<_> = (0..n).map(|_| Check::new(lp, nop).unwrap()).collect();
            stop_all(lp, &hs, order);
        }
        (Row::Timer, Work::Timers(timeouts)) => {
            let hs: Vec<_> = timeouts
                .iter()
                .map(|&t| lp.timer(t, Duration::ZERO, nop).unwrap())
                .collect();
            stop_all(lp, &hs, order);
        }
        (Row::IoSim, Work::Sim(socks)) => {
            let hs: Vec<_> = socks
                .into_iter()
                .map(|s| lp.io(s, Interest::READABLE, io_nop).unwrap())
                .collect();
            apply_registrations(lp);
            stop_all(lp, &hs, order);
            apply_registrations(lp);
        }
        (Row::IoOs(_), Work::Os(fds)) => {
            let hs: Vec<_> = fds
                .into_iter()
                .map(|fd| lp.io(fd, Interest::READABLE, io_nop).unwrap())
                .collect();
            apply_registrations(lp);
            stop_all(lp, &hs, order);
            apply_registrations(lp);
        }
        (Row::IoSimOneFd, Work::OneFd(fd)) => {
            let hs: Vec<_> = (0..n)
                .map(|_| lp.io(SameFd(fd), Interest::READABLE, io_nop).unwrap())
                .collect();
            apply_registrations(lp);
            stop_all(lp, &hs, order);
            apply_registrations(lp);
        }
        _ => unreachable!("setup made the work of another row"),
    }
    inp
}

/// 1..=n ms in a fixed pseudo-random order (xorshift64*).
fn distinct_timeouts(n: usize) -> Vec<Duration> {
    let mut v: Vec<Duration> = (1..=n as u64).map(Duration::from_millis).collect();
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    for i in (1..v.len()).rev() {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
        v.swap(i, (r % (i as u64 + 1)) as usize);
    }
    v
}

/// Few samples of few runs: the large sizes can take seconds per run.
fn configure(group: &mut BenchmarkGroup<'_, WallTime>, n: usize) {
    group.sample_size(10).sampling_mode(SamplingMode::Flat);
    if n >= 100_000 {
        group
            .warm_up_time(Duration::from_millis(1))
            .measurement_time(Duration::from_secs(1));
    } else {
        group
            .warm_up_time(Duration::from_millis(200))
            .measurement_time(Duration::from_secs(1));
    }
}

fn scale(c: &mut Criterion) {
    let fd_limit = chain_workload::raise_fd_limit();
    let mut rows = vec![Row::Idle, Row::Prepare, Row::Check, Row::Timer, Row::IoSim];
    for backend in ["epoll", "poll"] {
        if evloop::backends::AVAILABLE.contains(&backend) {
            rows.push(Row::IoOs(backend));
        }
    }
    rows.push(Row::IoSimOneFd);

    let mut group = c.benchmark_group("scale");
    for row in rows {
        let sizes = match row {
            Row::IoOs(_) => OS_SIZES,
            _ => SIZES,
        };
        for n in sizes {
            if matches!(row, Row::IoOs(_)) && (n + RESERVE) as u64 > fd_limit {
                eprintln!(
                    "scale/{}/{n}: SKIPPED: needs about {} fds, RLIMIT_NOFILE is {fd_limit}",
                    row.name(),
                    n + RESERVE
                );
                continue;
            }
            configure(&mut group, n);
            let timeouts = if row == Row::Timer {
                distinct_timeouts(n)
            } else {
                Vec::new()
            };
            for order in [Order::Fifo, Order::Lifo] {
                let id = BenchmarkId::new(format!("{}/{}", row.name(), order.name()), n);
                group.bench_function(id, |b| {
                    b.iter_batched(
                        || setup(row, n, &timeouts),
                        |inp| start_stop(inp, row, n, order),
                        // One input at a time: a batch of the fd rows'
                        // inputs would not fit in the fd limit.
                        BatchSize::PerIteration,
                    )
                });
            }
        }
    }
    for n in SIZES {
        configure(&mut group, n);
        group.bench_function(BenchmarkId::new("sim_socket", n), |b| {
            b.iter_batched(
                Sim::new,
                |sim| {
                    let socks: Vec<_> = (0..n).map(|_| sim.socket("s", 0)).collect();
                    (sim, socks)
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, scale);
criterion_main!(benches);
