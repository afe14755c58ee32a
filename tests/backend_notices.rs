//! Signals, child exits and wake-ups at the backend level, on every OS
//! backend of the host (`evloop::backends::AVAILABLE`, kqueue included
//! with `--features emulated-kqueue`): `watch_signal`, `watch_child`,
//! `waker`, `take_notices`, `reinit` after a fork.
//!
//! Signals are process-wide and the tests of one binary run in parallel,
//! so every signal test lives in this binary, each with a signal of its
//! own, and a signal whose default action ends the process is raised only
//! while a watcher of it is installed. The fork test takes `common::FORK` for
//! writing, so that no other test is inside a backend (or holds the hub's
//! lock) when it forks; every other test holds it for reading. Anything
//! that waits runs under a watchdog.
#![cfg(unix)]

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    action, alone, gather, held, install_marker, is_marker, on_each_kernel, open, shared, spawn,
    wait_exited, watchdog, Served, MARKS,
};
use evloop::backend::{ChildExit, Notices, Wake};
use evloop::{backends, ExitStatus};

/// How long a scenario may take.
const LIMIT: Duration = Duration::from_secs(20);
/// How long a wait that must end early may last before it counts as stuck.
const LONG: Duration = Duration::from_secs(5);

/// A signal for one test (each test its own: they run in parallel).
fn sig(n: usize) -> i32 {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        libc::SIGRTMIN() + n as i32
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        [libc::SIGURG, libc::SIGIO, libc::SIGINFO, libc::SIGPROF][n - 3]
    }
}

fn kill_self(signal: i32) {
    // SAFETY: sends a signal to this process; every caller has a watcher
    // of it installed (or a disposition that does not end the process).
    assert_eq!(unsafe { libc::kill(libc::getpid(), signal) }, 0);
}

/// One poll of `timeout`: how long it took, and the notices after it.
fn poll_once(b: &mut Served, timeout: Duration) -> (Duration, Notices) {
    let mut events = Vec::new();
    let t = Instant::now();
    b.poll(Some(timeout), &mut events).unwrap();
    let took = t.elapsed();
    assert_eq!(events, [], "{}: an internal fd was reported", b.name());
    let mut notices = Notices::default();
    b.take_notices(&mut notices);
    (took, notices)
}

/// The next poll blocks for its whole timeout and notices nothing: the
/// wake fd was drained (and no one else's wake-up reaches it).
fn assert_quiet(b: &mut Served) {
    let (took, notices) = poll_once(b, Duration::from_millis(60));
    assert!(notices.is_empty(), "{}: {notices:?}", b.name());
    let name = b.name();
    assert!(
        took >= Duration::from_millis(50),
        "{name}: returned after {took:?}"
    );
}

/// For 60 ms the backend notices nothing, and its polls block: a wake fd
/// left readable would make them return at once, thousands of times. A
/// few early returns are allowed: a backend on the `SIGCHLD` fallback is
/// woken by the exits of other tests' children.
fn assert_settled(b: &mut Served) {
    let deadline = Instant::now() + Duration::from_millis(60);
    let mut polls = 0;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let (_, notices) = poll_once(b, left);
        assert!(notices.is_empty(), "{}: {notices:?}", b.name());
        polls += 1;
    }
    assert!(
        polls < 200,
        "{}: {polls} polls in 60 ms: it spins",
        b.name()
    );
}

/// Raises `signal` from another thread after `delay`.
fn raise_later(signal: i32, delay: Duration) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        kill_self(signal);
    })
}

#[test]
fn a_signal_is_reported_and_wakes_a_blocked_poll() {
    on_each_kernel("signal", |name| {
        let signal = libc::SIGUSR1;
        let mut b = open(name);
        b.watch_signal(signal).unwrap();
        let t = Instant::now();
        let raiser = raise_later(signal, Duration::from_millis(50));
        let got = gather(&mut b, LONG, |n| !n.signals.is_empty());
        raiser.join().unwrap();
        assert!(t.elapsed() < LONG, "{name}: the poll was not woken");
        assert_eq!(got.signals.iter().collect::<Vec<_>>(), [signal], "{name}");
        assert!(got.exits.is_empty() && !got.woken, "{name}: {got:?}");
        // Drained: the next poll blocks again.
        assert_quiet(&mut b);
        b.unwatch_signal(signal);
    });
}

#[test]
fn every_backend_watching_a_signal_hears_each_arrival() {
    let _shared = shared();
    watchdog("two and more backends", LIMIT, || {
        let signal = libc::SIGUSR2;
        // Every backend of the host, two of the default one, in one process.
        let mut all: Vec<Served> = backends::AVAILABLE.iter().map(|n| open(n)).collect();
        all.push(open(backends::default_name()));
        for b in &mut all {
            b.watch_signal(signal).unwrap();
        }
        for round in 0..2 {
            kill_self(signal);
            for b in &mut all {
                let got = gather(b, LONG, |n| !n.signals.is_empty());
                assert!(got.signals.contains(signal), "{} round {round}", b.name());
            }
        }
        for b in &mut all {
            b.unwatch_signal(signal);
        }
    });
}

#[test]
fn arrivals_between_two_takes_coalesce() {
    on_each_kernel("coalescing", |name| {
        // SIGWINCH: ignored by default, harmless if it came late.
        let signal = libc::SIGWINCH;
        let mut b = open(name);
        b.watch_signal(signal).unwrap();
        for _ in 0..5 {
            // SAFETY: the hub's handler is installed; raise runs it on
            // this thread before returning.
            assert_eq!(unsafe { libc::raise(signal) }, 0);
        }
        let (_, got) = poll_once(&mut b, Duration::ZERO);
        assert_eq!(
            got.signals,
            evloop::backend::SignalSet::from_bits(1 << (signal - 1)),
            "{name}"
        );
        // Five arrivals, one notice: nothing left for the next take.
        assert_quiet(&mut b);
        b.unwatch_signal(signal);
    });
}

#[test]
fn the_last_unwatch_restores_the_previous_disposition() {
    on_each_kernel("restore", |name| {
        let signal = sig(3);
        install_marker(signal);
        let (mut a, mut b) = (open(name), open(name));
        a.watch_signal(signal).unwrap();
        assert!(
            !is_marker(&action(signal)),
            "{name}: the hub's handler is in"
        );
        b.watch_signal(signal).unwrap();
        a.unwatch_signal(signal);
        assert!(!is_marker(&action(signal)), "{name}: b still watches");
        let before = MARKS.load(Ordering::SeqCst);
        kill_self(signal);
        assert!(gather(&mut b, LONG, |n| !n.signals.is_empty())
            .signals
            .contains(signal));
        assert_eq!(
            MARKS.load(Ordering::SeqCst),
            before,
            "{name}: the hub had it"
        );
        b.unwatch_signal(signal);
        assert!(
            is_marker(&action(signal)),
            "{name}: previous action, flags included"
        );
        // The next arrival is not swallowed: it reaches the old handler.
        // SAFETY: the marker is installed; raise runs it before returning.
        assert_eq!(unsafe { libc::raise(signal) }, 0);
        assert_eq!(MARKS.load(Ordering::SeqCst), before + 1, "{name}");
    });
}

#[test]
fn dropping_a_backend_unwatches_its_signals() {
    on_each_kernel("drop", |name| {
        let signal = sig(4);
        install_marker(signal);
        let mut b = open(name);
        b.watch_signal(signal).unwrap();
        let waker = b.waker().unwrap();
        assert!(!is_marker(&action(signal)), "{name}");
        drop(b);
        assert!(is_marker(&action(signal)), "{name}: restored by the drop");
        // A waker that outlives its backend is harmless.
        waker.wake();
        // The slot is reused by the next backend: at worst a spurious
        // wake-up, never a notice of the old owner's.
        let mut c = open(name);
        c.watch_signal(signal).unwrap();
        waker.wake();
        let (_, got) = poll_once(&mut c, Duration::from_millis(10));
        assert!(!got.woken && got.signals.is_empty(), "{name}: {got:?}");
        c.unwatch_signal(signal);
    });
}

#[test]
fn a_waker_ends_a_blocked_poll_from_another_thread() {
    on_each_kernel("waker", |name| {
        let mut b = open(name);
        let waker = b.waker().unwrap();
        let wake_later = |waker: Arc<dyn Wake>| {
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                waker.wake();
            })
        };
        let t = Instant::now();
        let thread = wake_later(waker.clone());
        let got = gather(&mut b, LONG, |n| n.woken);
        thread.join().unwrap();
        assert!(got.woken && t.elapsed() < LONG, "{name}: not woken");
        assert!(got.signals.is_empty() && got.exits.is_empty(), "{name}");
        assert_quiet(&mut b);
        // Woken before the poll: it does not block; many wakes, one notice.
        for _ in 0..1000 {
            waker.wake();
        }
        let (took, got) = poll_once(&mut b, LONG);
        assert!(got.woken && took < LONG, "{name}");
        assert_quiet(&mut b);
        // After a reinit in the same process the waker still works.
        b.reinit().unwrap();
        let thread = wake_later(waker);
        assert!(
            gather(&mut b, LONG, |n| n.woken).woken,
            "{name}: after reinit"
        );
        thread.join().unwrap();
    });
}

/// Reaps `pid` ourselves: its status, or the error if someone else did.
fn reap_myself(pid: u32) -> std::io::Result<libc::c_int> {
    let mut status = 0;
    // SAFETY: `status` is writable.
    let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(status)
}

/// Watches each child of `pids` and gathers their exits, checking that
/// each is reported exactly once (and nothing else).
fn exits_of(b: &mut Served, pids: &[u32]) -> HashMap<u32, ExitStatus> {
    for &pid in pids {
        b.watch_child(pid).unwrap();
    }
    let got = gather(b, LIMIT / 2, |n| n.exits.len() >= pids.len());
    let mut by_pid = HashMap::new();
    for ChildExit { pid, status } in &got.exits {
        assert!(
            by_pid.insert(*pid, *status).is_none(),
            "{}: pid {pid} twice",
            b.name()
        );
    }
    assert_eq!(by_pid.len(), pids.len(), "{}: {:?}", b.name(), got.exits);
    assert!(got.signals.is_empty(), "{}: {got:?}", b.name());
    // No late duplicates, and nothing left to wake the next poll.
    assert_settled(b);
    by_pid
}

fn exit_code_and_signal(b: &mut Served) {
    let code3 = spawn("exit 3");
    let killed = spawn("kill -KILL $$");
    let got = exits_of(b, &[code3, killed]);
    assert_eq!(got[&code3], ExitStatus::Exited(3), "{}", b.name());
    let signaled = ExitStatus::Signaled {
        signal: libc::SIGKILL,
        core_dumped: false,
    };
    assert_eq!(got[&killed], signaled, "{}", b.name());
}

fn exited_before_watch(b: &mut Served) {
    let pid = spawn("exit 7");
    wait_exited(pid);
    let t = Instant::now();
    let got = exits_of(b, &[pid]);
    assert_eq!(got[&pid], ExitStatus::Exited(7), "{}", b.name());
    assert!(t.elapsed() < LONG, "{}", b.name());
}

fn hundred_at_once(b: &mut Served) {
    let pids: Vec<u32> = (0..100)
        .map(|_| Command::new("true").spawn().unwrap().id())
        .collect();
    let got = exits_of(b, &pids);
    assert!(got.values().all(|s| s.success()), "{}: {got:?}", b.name());
}

fn unwatch_leaves_it_unreaped(b: &mut Served) {
    // Running when unwatched...
    let pid = spawn("sleep 0.1; exit 5");
    b.watch_child(pid).unwrap();
    b.unwatch_child(pid);
    // ...and exited when unwatched, its exit not yet taken.
    let gone = spawn("exit 6");
    wait_exited(gone);
    b.watch_child(gone).unwrap();
    b.unwatch_child(gone);
    let got = gather(b, Duration::from_millis(300), |_| false);
    assert!(got.exits.is_empty(), "{}: {:?}", b.name(), got.exits);
    for (pid, code) in [(pid, 5), (gone, 6)] {
        let status = reap_myself(pid).unwrap_or_else(|e| panic!("{}: reaped: {e}", b.name()));
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == code);
    }
}

#[test]
fn child_exits_are_reported_with_their_status() {
    on_each_kernel("exit status", |name| exit_code_and_signal(&mut open(name)));
}

#[test]
fn a_child_that_exited_before_watch_child_is_reported() {
    on_each_kernel("exited before", |name| exited_before_watch(&mut open(name)));
}

#[test]
fn a_hundred_children_exiting_at_once_are_each_reported_once() {
    on_each_kernel("hundred", |name| hundred_at_once(&mut open(name)));
}

#[test]
fn unwatch_child_does_not_reap() {
    on_each_kernel("unwatch", |name| {
        unwatch_leaves_it_unreaped(&mut open(name))
    });
}

#[test]
fn watch_child_refuses_what_is_not_an_unreaped_child() {
    on_each_kernel("not a child", |name| {
        let mut b = open(name);
        let not_mine = [1, std::process::id()];
        for pid in not_mine {
            let err = b.watch_child(pid).unwrap_err().to_string();
            assert!(err.contains("not an unreaped child"), "{name}: {err}");
            assert!(err.contains(&format!("pid {pid}")), "{name}: {err}");
        }
        let mut child = Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        let err = b.watch_child(child.id()).unwrap_err().to_string();
        assert!(err.contains("not an unreaped child"), "{name}: {err}");
        assert!(b.watch_child(0).is_err());
    });
}

/// The backends with a `SIGCHLD` fallback (all but kqueue), forced onto it.
fn fallback(name: &str) -> Option<Served> {
    match name {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        "epoll" => {
            let mut b = common::Served::new(Box::new(backends::epoll::Epoll::new().unwrap()));
            b.force_sigchld_fallback();
            Some(b)
        }
        "poll" => {
            let mut b = common::Served::new(Box::new(backends::poll::Poll::new()));
            b.force_sigchld_fallback();
            Some(b)
        }
        "select" => {
            let mut b = common::Served::new(Box::new(backends::select::Select::new()));
            b.force_sigchld_fallback();
            Some(b)
        }
        #[cfg(all(feature = "io-uring", target_os = "linux"))]
        "io_uring" => {
            let mut b = common::Served::new(Box::new(backends::io_uring::IoUring::new().unwrap()));
            b.force_sigchld_fallback();
            Some(b)
        }
        _ => None, // kqueue: EVFILT_PROC, no fallback
    }
}

#[test]
fn the_sigchld_fallback_reports_the_same() {
    on_each_kernel("sigchld fallback", |name| {
        let Some(mut b) = fallback(name) else { return };
        exit_code_and_signal(&mut b);
        exited_before_watch(&mut b);
        hundred_at_once(&mut b);
        unwatch_leaves_it_unreaped(&mut b);
        // The loop's own SIGCHLD watch sees the arrivals the fallback uses
        // (and keeps seeing them after the fallback stops needing them).
        b.watch_signal(libc::SIGCHLD).unwrap();
        let pid = spawn("exit 4");
        b.watch_child(pid).unwrap();
        let got = gather(&mut b, LONG, |n| {
            !n.exits.is_empty() && !n.signals.is_empty()
        });
        assert_eq!(
            got.exits,
            [ChildExit {
                pid,
                status: ExitStatus::Exited(4)
            }],
            "{name}"
        );
        assert!(got.signals.contains(libc::SIGCHLD), "{name}");
        let mut other = Command::new("true").spawn().unwrap();
        let got = gather(&mut b, LONG, |n| !n.signals.is_empty());
        assert!(got.signals.contains(libc::SIGCHLD), "{name}");
        other.wait().unwrap();
        b.unwatch_signal(libc::SIGCHLD);
    });
}

/// Every OS backend, then each with a `SIGCHLD` fallback forced onto it
/// (`<name>+sigchld`).
fn child_kinds() -> Vec<String> {
    let mut all: Vec<String> = backends::AVAILABLE.iter().map(|n| n.to_string()).collect();
    for &name in backends::AVAILABLE {
        if fallback(name).is_some() {
            all.push(format!("{name}+sigchld"));
        }
    }
    all
}

/// A backend of [`child_kinds`].
fn open_kind(kind: &str) -> Served {
    match kind.strip_suffix("+sigchld") {
        Some(name) => fallback(name).unwrap(),
        None => open(kind),
    }
}

#[test]
#[allow(clippy::zombie_processes)] // the backends reap it
fn several_backends_watching_one_child_each_report_its_exit_once() {
    let _shared = shared();
    watchdog("several backends, one child", LIMIT, || {
        // Every kind, and two of the default one, in one process.
        let mut kinds = child_kinds();
        kinds.push(backends::default_name().to_string());
        let mut all: Vec<Served> = kinds.iter().map(|k| open_kind(k)).collect();
        let mut job = held(7);
        let pid = job.id();
        for b in &mut all {
            b.watch_child(pid).unwrap();
            b.watch_child(pid).unwrap(); // twice: still one report
        }
        drop(job.stdin.take());
        let exit = ChildExit {
            pid,
            status: ExitStatus::Exited(7),
        };
        // One at a time: the first to look reaps it for all.
        for (b, kind) in all.iter_mut().zip(&kinds) {
            let got = gather(b, LONG, |n| !n.exits.is_empty());
            assert_eq!(got.exits, [exit], "{kind}");
        }
        // No late duplicate, nothing left to wake a poll.
        for (b, kind) in all.iter_mut().zip(&kinds) {
            let (_, got) = poll_once(b, Duration::ZERO);
            assert!(got.exits.is_empty(), "{kind}: {got:?}");
            assert_settled(b);
        }
        let err = reap_myself(pid).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ECHILD), "reaped once");
    });
}

#[test]
#[allow(clippy::zombie_processes)] // reaped with `reap_myself`
fn a_child_reaped_elsewhere_is_reported_with_an_unknown_status() {
    let _shared = shared();
    for kind in child_kinds() {
        watchdog(&format!("reaped elsewhere on {kind}"), LIMIT, move || {
            let mut b = open_kind(&kind);
            let mut job = held(8);
            let pid = job.id();
            b.watch_child(pid).unwrap();
            let (_, got) = poll_once(&mut b, Duration::ZERO);
            assert!(got.exits.is_empty(), "{kind}: running");
            drop(job.stdin.take());
            let status = reap_myself(pid).unwrap();
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 8);
            let got = gather(&mut b, LONG, |n| !n.exits.is_empty());
            let unknown = ChildExit {
                pid,
                status: ExitStatus::Unknown,
            };
            assert_eq!(got.exits, [unknown], "{kind}");
            assert_settled(&mut b);
            // Not a child any more: refused at the call.
            let err = b.watch_child(pid).unwrap_err().to_string();
            assert!(err.contains("not an unreaped child"), "{kind}: {err}");
        });
    }
}

/// The forked child's exit statuses.
const CHILD_OK: i32 = 0;
const CHILD_REINIT: i32 = 10;
const CHILD_WATCH: i32 = 11;
const CHILD_NO_SIGNAL: i32 = 12;
const CHILD_NO_WAKE: i32 = 13;
const CHILD_PANIC: i32 = 14;

/// In the forked child: the backend inherited from the parent, after
/// `reinit`, hears the child's signal and the waker inherited with it.
fn in_child(b: &mut Served, signal: i32, waker: &dyn Wake) -> i32 {
    if b.reinit().is_err() {
        return CHILD_REINIT;
    }
    if b.watch_signal(signal).is_err() {
        return CHILD_WATCH;
    }
    kill_self(signal);
    if !gather(b, Duration::from_secs(2), |n| !n.signals.is_empty())
        .signals
        .contains(signal)
    {
        return CHILD_NO_SIGNAL;
    }
    waker.wake();
    if !gather(b, Duration::from_secs(2), |n| n.woken).woken {
        return CHILD_NO_WAKE;
    }
    // Left undrained: had the child kept the parent's wake fd, the
    // parent's next wait would end.
    waker.wake();
    kill_self(signal);
    CHILD_OK
}

#[test]
fn reinit_in_a_forked_child_gives_the_child_its_own_wakeups() {
    // No other test runs while this one forks.
    let _alone = alone();
    for &name in backends::AVAILABLE {
        watchdog(&format!("fork on {name}"), LIMIT, move || {
            let signal = sig(5);
            let mut b = open(name);
            b.watch_signal(signal).unwrap();
            let waker = b.waker().unwrap();
            // SAFETY: the child only runs the backend's code and leaves
            // with `_exit`, never returning into the test harness.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
            if pid == 0 {
                let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    in_child(&mut b, signal, &*waker)
                }))
                .unwrap_or(CHILD_PANIC);
                // SAFETY: ends the child without running the harness.
                unsafe { libc::_exit(code) };
            }
            let status = reap_myself(pid as u32).unwrap();
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == CHILD_OK,
                "{name}: the child failed with status {status:#x} (codes: 10 reinit, \
                 11 watch, 12 no signal, 13 no wake-up, 14 panic)"
            );
            // The child's signal and wake-up went to the child's own wake
            // fd, not to the one it inherited from us.
            assert_quiet(&mut b);
            // And ours still work.
            waker.wake();
            assert!(gather(&mut b, LONG, |n| n.woken).woken, "{name}");
            kill_self(signal);
            let got = gather(&mut b, LONG, |n| !n.signals.is_empty());
            assert!(got.signals.contains(signal), "{name}");
            b.unwatch_signal(signal);
        });
    }
}
