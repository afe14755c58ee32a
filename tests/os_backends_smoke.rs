//! Smoke tests of the OS backends (epoll, poll, select) on real sockets and
//! pipes, and of the backend registry and the loop builder. The full
//! cross-backend conformance suite lives elsewhere.
#![cfg(unix)]

mod common;

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::RunTo;
use evloop::backend::{Backend, PollEvent};
use evloop::{backends, Builder, Error, Idle, Interest, Loop, Ready, RunMode, RunOutcome};

/// Every OS backend of this platform.
fn names() -> &'static [&'static str] {
    backends::AVAILABLE
}

/// A loop on the named backend (never through `EVLOOP_BACKEND`: only
/// `env_var_picks_the_backend` touches the environment).
fn new_loop<S>(name: &str) -> Loop<'static, S> {
    let lp = Loop::builder().backend(name).build().unwrap();
    assert_eq!(lp.backend_name(), name);
    lp
}

fn pipe() -> (File, File) {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors pipe() writes.
    let r = unsafe { libc::pipe(fds.as_mut_ptr()) };
    assert_eq!(r, 0, "pipe: {}", std::io::Error::last_os_error());
    // SAFETY: both fds were just created by pipe() and are owned by nobody.
    unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) }
}

fn is_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD only reads the descriptor flags.
    unsafe { libc::fcntl(fd, libc::F_GETFD) != -1 }
}

/// What an io callback saw: the readiness and what it read.
type Log = Vec<(Ready, Vec<u8>)>;

/// Starts a watcher that reads once, logs, and removes itself.
fn read_once<T: Read + evloop::Source + 'static>(lp: &mut Loop<'static, Log>, src: T) {
    lp.io(src, Interest::READABLE, |lp, log, ev| {
        let mut buf = [0u8; 64];
        let n = ev.source.read(&mut buf).unwrap();
        log.push((ev.ready, buf[..n].to_vec()));
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
}

#[test]
fn readable_after_the_peer_writes() {
    for &name in names() {
        let mut lp = new_loop::<Log>(name);
        let (a, mut b) = UnixStream::pair().unwrap();
        read_once(&mut lp, a);
        let (pr, mut pw) = pipe();
        read_once(&mut lp, pr);
        b.write_all(b"sock").unwrap();
        pw.write_all(b"pipe").unwrap();
        let mut log = Log::new();
        let out = lp.run(RunMode::Default, &mut log).unwrap();
        assert_eq!(out, RunOutcome::NoActiveWatchers, "{name}");
        log.sort_by(|x, y| x.1.cmp(&y.1));
        assert_eq!(
            log,
            [
                (Ready::READABLE, b"pipe".to_vec()),
                (Ready::READABLE, b"sock".to_vec())
            ],
            "{name}"
        );
    }
}

/// A poll with a zero timeout (`RunMode::NoWait`; any run while an idle
/// watcher is active) returns at once and still delivers what is ready:
/// a pipe written before the run is read by that run, on every backend
/// (io_uring's zero-timeout poll submits and reaps without waiting).
#[test]
fn zero_timeout_runs_deliver_what_is_ready() {
    for &name in names() {
        let mut lp = new_loop::<Vec<Vec<u8>>>(name);
        let (pr, mut pw) = pipe();
        lp.io(pr, Interest::READABLE, |_, log, ev| {
            let mut buf = [0u8; 64];
            let n = ev.source.read(&mut buf).unwrap();
            log.push(buf[..n].to_vec());
        })
        .unwrap();
        let mut log = vec![];
        for _ in 0..100 {
            assert_eq!(
                lp.run(RunMode::NoWait, &mut log).unwrap(),
                RunOutcome::IterationDone,
                "{name}"
            );
        }
        assert_eq!(log, Vec::<Vec<u8>>::new(), "{name}");
        pw.write_all(b"one").unwrap();
        lp.run(RunMode::NoWait, &mut log).unwrap();
        assert_eq!(log, [b"one".to_vec()], "{name}: a NoWait run");
        // An idle watcher makes every poll a zero-timeout one.
        let idle = Idle::new(&mut lp, |_, _, _| {}).unwrap();
        pw.write_all(b"two").unwrap();
        lp.run(RunMode::Once, &mut log).unwrap();
        assert_eq!(
            log,
            [b"one".to_vec(), b"two".to_vec()],
            "{name}: with an idle"
        );
        lp.remove(idle).unwrap();
    }
}

#[test]
fn writable() {
    for &name in names() {
        let mut lp = new_loop::<u32>(name);
        let (a, mut b) = UnixStream::pair().unwrap();
        let (mut pr, pw) = pipe();
        for src in [File::from(OwnedFd::from(a)), pw] {
            lp.io(src, Interest::WRITABLE, |lp, n, ev| {
                assert_eq!(ev.ready, Ready::WRITABLE);
                ev.source.write_all(b"w").unwrap();
                *n += 1;
                lp.remove(ev.watcher).unwrap();
            })
            .unwrap();
        }
        assert_eq!(lp.finish(0), 2, "{name}");
        let mut buf = [0u8; 1];
        b.read_exact(&mut buf).unwrap();
        pr.read_exact(&mut buf).unwrap();
    }
}

#[test]
fn peer_close_gives_hup_and_eof() {
    for &name in names() {
        let mut lp = new_loop::<Log>(name);
        let (a, b) = UnixStream::pair().unwrap();
        read_once(&mut lp, a);
        let (pr, pw) = pipe();
        read_once(&mut lp, pr);
        drop((b, pw));
        let log = lp.finish(Log::new());
        assert_eq!(log.len(), 2, "{name}");
        for (ready, bytes) in log {
            assert!(ready.is_readable(), "{name}: {ready}");
            assert!(bytes.is_empty(), "{name}: EOF expected");
            // select cannot tell a hang-up from readability.
            assert_eq!(ready.is_hup(), name != "select", "{name}: {ready}");
        }
    }
}

#[test]
fn a_poll_with_nothing_ready_waits_at_least_the_timeout() {
    let timeouts = [
        Duration::ZERO,
        Duration::from_micros(300),
        Duration::from_micros(1500),
        Duration::from_millis(15),
    ];
    for &name in names() {
        let mut backend = backends::open(name).unwrap();
        let (a, _b) = UnixStream::pair().unwrap();
        backend
            .modify(a.as_raw_fd(), Interest::NONE, Interest::READABLE)
            .unwrap();
        let mut events = Vec::new();
        for t in timeouts {
            let start = Instant::now();
            backend.poll(Some(t), &mut events).unwrap();
            assert!(
                start.elapsed() >= t,
                "{name}: {:?} < {t:?}",
                start.elapsed()
            );
            assert!(events.is_empty(), "{name}: {events:?}");
        }
        backend
            .modify(a.as_raw_fd(), Interest::READABLE, Interest::NONE)
            .unwrap();
    }
}

extern "C" fn ignore_signal(_: libc::c_int) {}

#[test]
fn a_poll_interrupted_by_signals_resumes_with_the_time_left() {
    // SAFETY: installs a handler that does nothing (async-signal-safe), with
    // no SA_RESTART so that the waits fail with EINTR. It stays installed,
    // so a late signal cannot kill the process.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = ignore_signal as *const () as libc::sighandler_t;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
    let timeout = Duration::from_millis(60);
    for &name in names() {
        let mut backend = backends::open(name).unwrap();
        let (a, _b) = UnixStream::pair().unwrap();
        backend
            .modify(a.as_raw_fd(), Interest::NONE, Interest::READABLE)
            .unwrap();
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() } as usize;
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop = done.clone();
        let pest = std::thread::spawn(move || {
            // Not synchronisation: the test holds whenever the signals land.
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // SAFETY: `me` is the polling thread, alive until joined.
                unsafe { libc::pthread_kill(me as libc::pthread_t, libc::SIGUSR1) };
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let mut events = Vec::new();
        let start = Instant::now();
        let res = backend.poll(Some(timeout), &mut events);
        let elapsed = start.elapsed();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        pest.join().unwrap();
        res.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(elapsed >= timeout, "{name}: {elapsed:?}");
        assert!(events.is_empty(), "{name}: {events:?}");
    }
}

#[test]
fn a_timer_fires_after_one_poll_never_early() {
    for &name in names() {
        for after in [Duration::from_micros(1500), Duration::from_millis(20)] {
            let start = Instant::now();
            let mut lp = new_loop::<Option<Duration>>(name);
            let (a, _b) = UnixStream::pair().unwrap();
            let io = lp.io(a, Interest::READABLE, |_, _, _| {}).unwrap();
            lp.timer(after, Duration::ZERO, move |_, fired, _| {
                *fired = Some(start.elapsed());
            })
            .unwrap();
            let mut fired = None;
            // One iteration: the poll must not return before the timer is due.
            lp.run(RunMode::Once, &mut fired).unwrap();
            let elapsed = fired.unwrap_or_else(|| panic!("{name}: woke up early"));
            assert!(elapsed >= after, "{name}: {elapsed:?} < {after:?}");
            lp.remove(io).unwrap();
        }
    }
}

#[test]
fn env_var_picks_the_backend() {
    // The only test in this binary that reads or writes EVLOOP_BACKEND.
    const VAR: &str = "EVLOOP_BACKEND";
    let saved = std::env::var_os(VAR);
    // SAFETY: no other thread of this test binary reads or writes the environment.
    unsafe { std::env::set_var(VAR, "poll") };
    assert_eq!(Builder::new().backend_name(), "poll");
    assert_eq!(Loop::<()>::new().unwrap().backend_name(), "poll");
    let explicit: Loop = Loop::builder().backend("select").build().unwrap();
    assert_eq!(explicit.backend_name(), "select");
    // SAFETY: no other thread of this test binary reads or writes the environment.
    unsafe { std::env::set_var(VAR, "") };
    let lp: Loop = Builder::new().build().unwrap();
    assert_eq!(lp.backend_name(), backends::default_name());
    // SAFETY: no other thread of this test binary reads or writes the environment.
    unsafe { std::env::set_var(VAR, "no-such-backend") };
    let err = Loop::<()>::new().unwrap_err();
    assert!(
        matches!(&err, Error::UnknownBackend { name, .. } if name == "no-such-backend"),
        "{err}"
    );
    // SAFETY: no other thread of this test binary reads or writes the environment.
    unsafe { std::env::remove_var(VAR) };
    assert_eq!(Builder::new().backend_name(), backends::default_name());
    if let Some(v) = saved {
        // SAFETY: no other thread of this test binary reads or writes the environment.
        unsafe { std::env::set_var(VAR, v) };
    }
}

#[test]
fn unknown_backend_name() {
    let err = Loop::builder().backend("iocp").build::<()>().unwrap_err();
    let Error::UnknownBackend {
        name, available, ..
    } = &err
    else {
        panic!("unexpected error: {err}");
    };
    assert_eq!(
        (name.as_str(), available.as_slice()),
        ("iocp", backends::AVAILABLE)
    );
    let msg = err.to_string();
    assert!(msg.contains("\"iocp\""), "{msg}");
    assert!(msg.contains(&backends::AVAILABLE.join(", ")), "{msg}");
    #[cfg(all(
        target_os = "linux",
        not(feature = "emulated-kqueue"),
        not(feature = "io-uring")
    ))]
    assert!(msg.ends_with("epoll, poll, select"), "{msg}");
    #[cfg(all(
        target_os = "linux",
        not(feature = "emulated-kqueue"),
        feature = "io-uring"
    ))]
    assert!(msg.ends_with("epoll, io_uring, poll, select"), "{msg}");
}

/// A descriptor numbered at least 1100 (above select's FD_SETSIZE), or
/// `None` if the fd limit cannot be raised that far.
fn high_fd(of: &impl AsRawFd) -> Option<OwnedFd> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit to fill in.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    if lim.rlim_cur < 1200 {
        if lim.rlim_max < 1200 {
            return None;
        }
        lim.rlim_cur = 1200;
        // SAFETY: raising the soft limit up to the hard limit.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    }
    // SAFETY: duplicates an open fd; the new fd is owned by nobody else.
    let fd = unsafe { libc::fcntl(of.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 1100) };
    assert!(fd >= 1100, "F_DUPFD: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` was just created and is owned by nobody else.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[test]
fn select_refuses_fds_from_fd_setsize_up() {
    let (a, _b) = UnixStream::pair().unwrap();
    let Some(high) = high_fd(&a) else {
        eprintln!("skipped: RLIMIT_NOFILE cannot be raised to 1200");
        return;
    };
    let fd = high.as_raw_fd();
    let max = libc::FD_SETSIZE as RawFd - 1;

    // The backend itself refuses it, without touching its sets...
    let mut select = evloop::backends::select::Select::new();
    let err = select
        .modify(fd, Interest::NONE, Interest::READABLE)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);

    // ...and the loop refuses it at registration.
    let mut lp: Loop = new_loop("select");
    let err = lp.io(high, Interest::READABLE, |_, _, _| {}).unwrap_err();
    assert!(
        matches!(err, Error::FdTooLarge { fd: f, max: m, backend: "select" } if f == fd && m == max),
        "{err}"
    );
    assert!(err.to_string().contains("select"), "{err}");

    // The other backends take such fds.
    for &name in names().iter().filter(|&&n| n != "select") {
        let mut lp: Loop = new_loop(name);
        let high = high_fd(&a).unwrap();
        assert!(high.as_raw_fd() > max);
        let io = lp
            .io(high, Interest::WRITABLE, |lp, _, ev| {
                lp.remove(ev.watcher).unwrap()
            })
            .unwrap();
        lp.run(RunMode::Default, &mut ()).unwrap();
        assert!(lp.is_active(io).is_err(), "{name}: removed by its callback");
    }
}

/// A descriptor number that is certainly not open, but within the process's
/// fd table (Linux's select ignores fds beyond the table instead of failing
/// with EBADF). New fds take the lowest free number, so no other test gets
/// this one meanwhile.
fn closed_fd() -> RawFd {
    let (a, _b) = UnixStream::pair().unwrap();
    // SAFETY: duplicates an open fd; the duplicate is closed right away.
    let fd = unsafe { libc::fcntl(a.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 900) };
    assert!(fd >= 900, "F_DUPFD: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` was just created here and nothing else uses it.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
    assert!(!is_open(fd));
    fd
}

#[test]
fn poll_and_select_report_closed_fds_as_invalid() {
    let backends: [Box<dyn Backend>; 2] = [
        Box::new(backends::poll::Poll::new()),
        Box::new(backends::select::Select::new()),
    ];
    for mut b in backends {
        let (a, mut peer) = UnixStream::pair().unwrap();
        let fd = closed_fd();
        b.modify(fd, Interest::NONE, Interest::READABLE).unwrap();
        b.modify(a.as_raw_fd(), Interest::NONE, Interest::READABLE)
            .unwrap();
        peer.write_all(b"x").unwrap();
        let mut events = Vec::new();
        b.poll(Some(Duration::from_secs(5)), &mut events).unwrap();
        let invalid = PollEvent {
            fd,
            ready: Ready::INVALID,
        };
        assert!(events.contains(&invalid), "{}: {events:?}", b.name());
        // What the loop then does: forget it. The other fd still works.
        b.modify(fd, Interest::READABLE, Interest::NONE).unwrap();
        events.clear();
        b.poll(Some(Duration::from_secs(5)), &mut events).unwrap();
        let readable = PollEvent {
            fd: a.as_raw_fd(),
            ready: Ready::READABLE,
        };
        assert_eq!(events, [readable], "{}", b.name());
    }
}

#[test]
fn reinit_keeps_watching() {
    for &name in names() {
        let mut lp = new_loop::<Log>(name);
        let (a, mut b) = UnixStream::pair().unwrap();
        read_once(&mut lp, a);
        // Registered with the kernel first, then re-created.
        assert_eq!(
            lp.run(RunMode::NoWait, &mut Log::new()).unwrap(),
            RunOutcome::IterationDone
        );
        lp.reinit_after_fork().unwrap();
        b.write_all(b"again").unwrap();
        assert_eq!(
            lp.finish(Log::new()),
            [(Ready::READABLE, b"again".to_vec())],
            "{name}"
        );
    }
}

#[test]
fn regular_files_and_directories_are_refused_at_creation_by_every_backend() {
    for &name in names() {
        let mut lp = new_loop::<()>(name);
        for path in [std::env::current_exe().unwrap(), std::env::temp_dir()] {
            let file = File::open(&path).unwrap();
            let fd = file.as_raw_fd();
            // epoll refuses them (EPERM); the others would report them
            // always ready. Every backend says so at creation, not later
            // with an ERROR callback.
            let err = lp
                .io(file, Interest::READABLE, |_, _, _| panic!("called"))
                .unwrap_err();
            assert!(
                matches!(err, Error::InvalidFd { fd: f, ref reason }
                    if f == fd && reason.contains("regular file or a directory")),
                "{name}: {err}"
            );
        }
        assert_eq!(lp.active_count(), 0);
        assert_eq!(
            lp.run(RunMode::Default, &mut ()).unwrap(),
            RunOutcome::NoActiveWatchers
        );
    }
}

/// A source whose descriptor number is closed: what a watcher sees when
/// another part of the program closed the fd behind its owner's back.
struct ClosedFd(RawFd);

impl evloop::Source for ClosedFd {
    fn source_fd(&self) -> evloop::SourceFd<'_> {
        // SAFETY (test): the number is closed; the loop only passes it to
        // system calls, which report EBADF. Safe code cannot make this.
        evloop::SourceFd::Os(unsafe { std::os::fd::BorrowedFd::borrow_raw(self.0) })
    }
}

/// A number that is surely closed: far above the lowest free numbers that
/// other test threads of this binary are given (none holds more than a few
/// dozen fds), and below select's `FD_SETSIZE`.
fn closed_fd_number() -> RawFd {
    // SAFETY (test): F_DUPFD on stdin returns a new descriptor (the lowest
    // free one at or above 900), closed again at once.
    unsafe {
        let fd = libc::fcntl(0, libc::F_DUPFD_CLOEXEC, 900);
        assert!((900..1024).contains(&fd));
        libc::close(fd);
        fd
    }
}

#[test]
fn an_fd_that_is_not_open_is_refused_at_creation_by_every_backend() {
    for &name in names() {
        let mut lp = new_loop::<()>(name);
        let fd = closed_fd_number();
        let result = lp.io(ClosedFd(fd), Interest::READABLE, |_, _, _| panic!("called"));
        let err = result.unwrap_err();
        assert!(
            matches!(err, Error::InvalidFd { fd: f, ref reason }
                if f == fd && reason.contains("not open")),
            "{name}: {err}"
        );
        assert_eq!(lp.active_count(), 0);
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod epoll {
    use super::*;
    use evloop::backends::epoll::Epoll;
    use evloop::Trigger;

    #[test]
    fn oneshot_is_disarmed_by_the_kernel_and_rearmed_with_mod() {
        let mut ep = Epoll::new().unwrap();
        let (a, mut b) = UnixStream::pair().unwrap();
        let fd = a.as_raw_fd();
        let oneshot = Interest::READABLE.with_trigger(Trigger::Oneshot);
        let disarmed = Interest::NONE.with_trigger(Trigger::Oneshot);
        ep.modify(fd, Interest::NONE, oneshot).unwrap();
        b.write_all(b"x").unwrap();
        let mut events = Vec::new();
        let zero = Some(Duration::ZERO);
        ep.poll(zero, &mut events).unwrap();
        assert_eq!(events.len(), 1);
        events.clear();
        ep.poll(zero, &mut events).unwrap();
        assert!(events.is_empty(), "disarmed, though still readable");
        ep.modify(fd, disarmed, oneshot).unwrap();
        ep.poll(zero, &mut events).unwrap();
        assert_eq!(events.len(), 1, "re-armed");
        ep.modify(fd, disarmed, Interest::NONE).unwrap();
    }

    #[test]
    fn oneshot_watcher_fires_once_and_rearms_with_start() {
        let mut lp = new_loop::<u32>("epoll");
        let (a, mut b) = UnixStream::pair().unwrap();
        let oneshot = Interest::READABLE.with_trigger(Trigger::Oneshot);
        // Never reads: the fd stays readable, so every re-arm fires again.
        let io = lp
            .io(a, oneshot, |lp, n, ev| {
                assert!(ev.ready.is_readable());
                assert!(
                    !lp.is_active(ev.watcher).unwrap(),
                    "stopped before the call"
                );
                *n += 1;
                if *n < 3 {
                    lp.start(ev.watcher).unwrap();
                }
            })
            .unwrap();
        b.write_all(b"x").unwrap();
        let mut n = 0;
        let out = lp.run(RunMode::Default, &mut n).unwrap();
        assert_eq!((out, n), (RunOutcome::NoActiveWatchers, 3));
        assert!(!lp.is_active(io).unwrap());
        // Re-armed from outside the callback: the fd is still known to the
        // kernel (disarmed), so this is an EPOLL_CTL_MOD.
        lp.start(io).unwrap();
        lp.run(RunMode::Default, &mut n).unwrap();
        assert_eq!(n, 4);
    }

    #[test]
    fn edge_fires_once_per_arrival_not_per_iteration() {
        let count = |trigger: Trigger| {
            let mut lp = new_loop::<u32>("epoll");
            let (a, mut b) = UnixStream::pair().unwrap();
            let io = lp
                .io(a, Interest::READABLE.with_trigger(trigger), |_, n, _| {
                    *n += 1
                })
                .unwrap();
            let mut n = 0;
            let mut seen = vec![];
            for chunk in [b"a", b"b"] {
                b.write_all(chunk).unwrap(); // never read
                for _ in 0..3 {
                    lp.run(RunMode::NoWait, &mut n).unwrap();
                }
                seen.push(n);
            }
            lp.remove(io).unwrap();
            seen
        };
        assert_eq!(count(Trigger::Edge), [1, 2]);
        assert_eq!(count(Trigger::Level), [3, 6]);
    }

    #[test]
    fn fd_number_reuse_after_a_close_behind_the_loops_back() {
        // The loop believes fd N is registered; the kernel dropped it when
        // it was closed. A new registration of the same number must work
        // (ENOENT on MOD is retried as ADD).
        let mut ep = Epoll::new().unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        let fd = a.as_raw_fd();
        ep.modify(fd, Interest::NONE, Interest::READABLE).unwrap();
        drop((a, b));
        let (c, _d) = UnixStream::pair().unwrap();
        let fd2 = c.as_raw_fd();
        ep.modify(fd2, Interest::READABLE, Interest::WRITABLE)
            .unwrap();
        let mut events = Vec::new();
        ep.poll(Some(Duration::ZERO), &mut events).unwrap();
        assert!(events.contains(&PollEvent {
            fd: fd2,
            ready: Ready::WRITABLE
        }));
        // Adding an fd the kernel already has (EEXIST) is retried as MOD.
        ep.modify(fd2, Interest::NONE, Interest::WRITABLE).unwrap();
        ep.modify(fd2, Interest::WRITABLE, Interest::NONE).unwrap();
        // Forgetting an unknown fd succeeds.
        ep.modify(fd2, Interest::WRITABLE, Interest::NONE).unwrap();
    }
}
