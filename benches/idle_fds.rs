//! The cost of one loop iteration (`lp.run(RunMode::NoWait, ..)`) with 100
//! active fds and 100 / 500 / 1,000 / 10,000 / 100,000 idle ones, per
//! backend.
//!
//! - Idle fds: eventfds (on Linux; a pipe elsewhere) whose counter stays
//!   zero, so they are never readable; each has a read watcher.
//! - Active fds: eventfds whose counter is 1 and is never read, so they are
//!   readable on every iteration (level-triggered); each has a read watcher
//!   that only counts. One iteration therefore dispatches exactly 100
//!   events, whatever the number of idle fds.
//! - On the simulator, idle fds are sockets with nothing to read and active
//!   ones are socket pairs holding one unread byte.
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

use std::io;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use evloop::{Interest, Loop, RunMode, Sim};

/// Active fds: each is ready on every iteration.
const ACTIVE: usize = 100;
/// The numbers of idle fds measured (500 is there so that select, which
/// stops at `FD_SETSIZE`, shows its growth too).
const IDLE: [usize; 5] = [100, 500, 1_000, 10_000, 100_000];
/// Fds the process needs besides the watched ones (stdio, the epoll fd,
/// criterion's files, ...).
const RESERVE: usize = 64;

/// A descriptor that is always readable (`ready`) or never readable, plus
/// whatever must stay open for that to hold.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn make_fd(ready: bool) -> io::Result<(OwnedFd, Option<OwnedFd>)> {
    use std::os::fd::FromRawFd;
    // SAFETY: eventfd takes no pointers; a non-negative result is a new fd
    // that nothing else owns.
    let fd = unsafe {
        libc::eventfd(
            ready as libc::c_uint,
            libc::EFD_NONBLOCK | libc::EFD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: see above.
    Ok((unsafe { OwnedFd::from_raw_fd(fd) }, None))
}

/// Descriptors per watched fd (an eventfd is one).
#[cfg(any(target_os = "linux", target_os = "android"))]
const FDS_PER_WATCH: usize = 1;

/// A descriptor that is always readable (`ready`) or never readable, plus
/// whatever must stay open for that to hold (the write end of the pipe).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn make_fd(ready: bool) -> io::Result<(OwnedFd, Option<OwnedFd>)> {
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    let (r, mut w) = UnixStream::pair()?;
    r.set_nonblocking(true)?;
    if ready {
        w.write_all(b"x")?;
    }
    Ok((r.into(), Some(w.into())))
}

/// Descriptors per watched fd (a socket pair is two).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const FDS_PER_WATCH: usize = 2;

/// A loop with `ACTIVE` always-ready fds spread evenly among `idle` idle
/// ones, all watched for reading, plus what keeps them in that state. The
/// state counts callbacks.
struct Setup {
    lp: Loop<'static, u64>,
    /// The simulator's world, whose trace is emptied between batches.
    sim: Option<Sim>,
    _keep: Vec<Box<dyn std::any::Any>>,
}

fn on_active(_: &mut Loop<'static, u64>, n: &mut u64, _: evloop::IoEvent<'_, impl Sized>) {
    *n += 1;
}

fn on_idle(_: &mut Loop<'static, u64>, _: &mut u64, _: evloop::IoEvent<'_, impl Sized>) {
    panic!("an idle fd became ready");
}

fn setup(backend: &str, idle: usize) -> Result<Setup, String> {
    let per_active = idle / ACTIVE;
    if backend == "sim" {
        let sim = Sim::new();
        let mut lp = Loop::with_backend(sim.backend());
        let mut keep: Vec<Box<dyn std::any::Any>> = Vec::new();
        for a in 0..ACTIVE {
            let (r, mut w) = sim.pair(&format!("a{a}"), 16);
            std::io::Write::write_all(&mut w, b"x").unwrap();
            lp.io(r, Interest::READABLE, on_active)
                .map_err(|e| e.to_string())?;
            keep.push(Box::new(w));
            for i in 0..per_active {
                let s = sim.socket(&format!("i{a}.{i}"), 0);
                lp.io(s, Interest::READABLE, on_idle)
                    .map_err(|e| e.to_string())?;
            }
        }
        return Ok(Setup {
            lp,
            sim: Some(sim),
            _keep: keep,
        });
    }
    let mut lp = Loop::builder()
        .backend(backend)
        .build()
        .map_err(|e| e.to_string())?;
    let mut keep: Vec<Box<dyn std::any::Any>> = Vec::new();
    for _ in 0..ACTIVE {
        let (fd, other) = make_fd(true).map_err(|e| e.to_string())?;
        lp.io(fd, Interest::READABLE, on_active)
            .map_err(|e| e.to_string())?;
        keep.extend(other.map(|o| Box::new(o) as Box<dyn std::any::Any>));
        for _ in 0..per_active {
            let (fd, other) = make_fd(false).map_err(|e| e.to_string())?;
            lp.io(fd, Interest::READABLE, on_idle)
                .map_err(|e| e.to_string())?;
            keep.extend(other.map(|o| Box::new(o) as Box<dyn std::any::Any>));
        }
    }
    Ok(Setup {
        lp,
        sim: None,
        _keep: keep,
    })
}

/// Why `idle` idle fds cannot be measured on `backend` here, if they
/// cannot.
fn does_not_fit(backend: &str, idle: usize, fd_limit: u64) -> Option<String> {
    if backend == "sim" {
        return None; // virtual fds
    }
    let needed = (idle + ACTIVE) * FDS_PER_WATCH + RESERVE;
    if needed as u64 > fd_limit {
        return Some(format!(
            "needs about {needed} fds but RLIMIT_NOFILE is {fd_limit}, already raised to \
             its hard limit (a privileged `ulimit -Hn {needed}` before the run lifts it, \
             where the system allows it)"
        ));
    }
    let max_fd = Loop::<()>::builder()
        .backend(backend)
        .build::<()>()
        .ok()?
        .capabilities()
        .max_fd;
    match max_fd {
        Some(max) if needed as u64 > max as u64 + 1 => Some(format!(
            "needs fds up to about {needed}, beyond the backend's largest fd {max} \
             (FD_SETSIZE - 1)"
        )),
        _ => None,
    }
}

fn idle_fds(c: &mut Criterion) {
    let fd_limit = chain_workload::raise_fd_limit();
    let mut backends: Vec<&str> = evloop::backends::AVAILABLE.to_vec();
    backends.push("sim");
    let mut group = c.benchmark_group("idle_fds");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for backend in backends {
        for idle in IDLE {
            if let Some(why) = does_not_fit(backend, idle, fd_limit) {
                println!("idle_fds/{backend}/{idle}: SKIPPED: {why}");
                continue;
            }
            let mut s = match setup(backend, idle) {
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
