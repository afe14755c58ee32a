//! The idle-fds workload, shared by the criterion bench benches/idle_fds.rs
//! and the comparison example (examples/compare/), included with `#[path]`:
//! a loop with `active` always-ready fds spread evenly among `idle` idle
//! ones, all watched for reading, so that one `RunMode::NoWait` iteration
//! dispatches exactly `active` events whatever the number of idle fds.
//!
//! - Idle fds: eventfds (on Linux; a socket pair elsewhere) whose counter
//!   stays zero, so they are never readable.
//! - Active fds: eventfds whose counter is 1 and is never read, so they are
//!   readable on every iteration (level-triggered); their watchers only
//!   count.
//! - On the simulator ("sim"), idle fds are sockets with nothing to read
//!   and active ones are socket pairs holding one unread byte.

#![allow(dead_code)]

use std::io;
use std::os::fd::OwnedFd;

use evloop::{Builder, Interest, Loop, Sim};

/// Fds the process needs besides the watched ones (stdio, the epoll fd,
/// a benchmark's files, ...).
pub const RESERVE: usize = 64;

/// A descriptor that is always readable (`ready`) or never readable, plus
/// whatever must stay open for that to hold.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn make_fd(ready: bool) -> io::Result<(OwnedFd, Option<OwnedFd>)> {
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
pub const FDS_PER_WATCH: usize = 1;

/// A descriptor that is always readable (`ready`) or never readable, plus
/// whatever must stay open for that to hold (the write end of the pipe).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub fn make_fd(ready: bool) -> io::Result<(OwnedFd, Option<OwnedFd>)> {
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
pub const FDS_PER_WATCH: usize = 2;

/// A loop with `active` always-ready fds spread evenly among `idle` idle
/// ones, all watched for reading, plus what keeps them in that state. The
/// state counts callbacks.
pub struct Setup {
    pub lp: Loop<'static, u64>,
    /// The simulator's world, whose trace is emptied between batches.
    pub sim: Option<Sim>,
    _keep: Vec<Box<dyn std::any::Any>>,
}

fn on_active(_: &mut Loop<'static, u64>, n: &mut u64, _: evloop::IoEvent<'_, impl Sized>) {
    *n += 1;
}

fn on_idle(_: &mut Loop<'static, u64>, _: &mut u64, _: evloop::IoEvent<'_, impl Sized>) {
    panic!("an idle fd became ready");
}

pub fn setup(
    builder: &Builder,
    backend: &str,
    idle: usize,
    active: usize,
) -> Result<Setup, String> {
    let per_active = idle / active;
    if backend == "sim" {
        let sim = Sim::new();
        let mut lp = Loop::with_backend(sim.backend());
        let mut keep: Vec<Box<dyn std::any::Any>> = Vec::new();
        for a in 0..active {
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
    let mut lp = builder
        .clone()
        .backend(backend)
        .build()
        .map_err(|e| e.to_string())?;
    let mut keep: Vec<Box<dyn std::any::Any>> = Vec::new();
    for _ in 0..active {
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
pub fn does_not_fit(
    builder: &Builder,
    backend: &str,
    idle: usize,
    active: usize,
    fd_limit: u64,
) -> Option<String> {
    if backend == "sim" {
        return None; // virtual fds
    }
    let needed = (idle + active) * FDS_PER_WATCH + RESERVE;
    if needed as u64 > fd_limit {
        return Some(format!(
            "needs about {needed} fds but RLIMIT_NOFILE is {fd_limit}, already raised to \
             its hard limit (a privileged `ulimit -Hn {needed}` before the run lifts it, \
             where the system allows it)"
        ));
    }
    let max_fd = builder
        .clone()
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
