//! Signal, child, async, fork and cleanup watchers through the `Loop` API
//! on every OS backend of the host (kqueue too, with
//! `--features emulated-kqueue`), each scenario under the watchdog: the
//! scenarios of `tests/process_watchers_sim.rs` with real signals, real
//! child processes, real threads and a real `fork()`. (The backend layer
//! alone is tested in `tests/backend_notices.rs`.)
//!
//! The tests of this binary share one process and run in parallel:
//! - Signals are process-wide, so each test watches a signal of its own
//!   ([`own_signals`]) and raises it only while a watcher of it is active
//!   (the default action of most signals ends the process).
//! - Other tests' children exit at any moment. A loop on the `SIGCHLD`
//!   fallback ([`child_kernels`]) may be woken by each of those exits, so
//!   only loops that do not watch `SIGCHLD` are checked for waiting
//!   quietly ([`waits_for_a_timer`]).
//! - The fork test takes `common::FORK` for writing, so that no other test is
//!   inside a backend (or holds a lock a backend takes) when it forks;
//!   every other test holds it for reading.
//!
//! Nothing waits on a sleep: the tests synchronise through channels,
//! joined threads and the loop's own callbacks; a thread that must act
//! while the loop is blocked waits until the loop thread sleeps in the
//! kernel ([`wait_until_blocked`]). Timers only bound what is observed.
#![cfg(unix)]

mod common;

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Condvar, Mutex};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use common::{
    action, alone, child_kernels, drain, held, install_marker, is_marker, kernel_loop,
    on_each_kernel, shared, spawn, wait_exited, watchdog, RunTo, World, MARKS, WATCHDOG,
};
use evloop::{
    backends, Async, Check, Child, Cleanup, Error, ExitStatus, Fork, Interest, Loop, Prepare,
    Ready, RunMode, RunOutcome, Signal,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ---- sharing the process -----------------------------------------------------

/// As [`on_each_kernel`], with signals of the test's own (`ns`: see
/// [`own_signals`]).
fn on_each_kernel_with<const N: usize>(
    what: &str,
    ns: [usize; N],
    scenario: fn(&'static str, [i32; N]),
) {
    let _shared = shared();
    let _own = own_signals(&ns);
    let signals = ns.map(test_signal);
    for &name in backends::AVAILABLE {
        watchdog(&format!("{what} on {name}"), WATCHDOG, move || {
            scenario(name, signals)
        });
    }
}

/// Runs `scenario(backend)` on each of [`child_kernels`], under the
/// watchdog.
fn on_each_child_kernel(what: &str, scenario: fn(&'static str)) {
    let _shared = shared();
    for name in child_kernels() {
        watchdog(&format!("{what} on {name}"), WATCHDOG, move || {
            scenario(name)
        });
    }
}

// ---- signals of one's own ----------------------------------------------------

/// Signal `n` of the tests: a real-time signal on Linux (each test has its
/// own); elsewhere one of a few signals (tests that draw the same one take
/// turns, through [`own_signals`]).
fn test_signal(n: usize) -> i32 {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let s = libc::SIGRTMIN() + n as i32;
        assert!(
            s <= libc::SIGRTMAX(),
            "signal {n}: too few real-time signals"
        );
        s
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        const SOME: [i32; 8] = [
            libc::SIGUSR1,
            libc::SIGUSR2,
            libc::SIGURG,
            libc::SIGWINCH,
            libc::SIGIO,
            libc::SIGPROF,
            libc::SIGVTALRM,
            libc::SIGHUP,
        ];
        SOME[n % SOME.len()]
    }
}

/// The signals claimed by running tests (bit `s - 1` for signal `s`).
static CLAIMED: Mutex<u64> = Mutex::new(0);
static RELEASED: Condvar = Condvar::new();

/// Signals this test alone uses until the guard is dropped.
struct OwnSignals {
    bits: u64,
}

impl Drop for OwnSignals {
    fn drop(&mut self) {
        let mut claimed = CLAIMED.lock().unwrap_or_else(|e| e.into_inner());
        *claimed &= !self.bits;
        RELEASED.notify_all();
    }
}

/// Claims [`test_signal`]`(n)` for each of `ns`, all at once, waiting
/// while another test has any of them. Taken after `common::FORK`, always.
fn own_signals(ns: &[usize]) -> OwnSignals {
    let bits = ns
        .iter()
        .fold(0, |bits, &n| bits | 1u64 << (test_signal(n) - 1));
    let mut claimed = CLAIMED.lock().unwrap_or_else(|e| e.into_inner());
    while *claimed & bits != 0 {
        claimed = RELEASED.wait(claimed).unwrap_or_else(|e| e.into_inner());
    }
    *claimed |= bits;
    OwnSignals { bits }
}

/// Raises `signal` in the calling thread: its handler has run when this
/// returns. Only while a watcher of it is active (or a harmless handler
/// installed).
fn raise_here(signal: i32) {
    // SAFETY: sends a signal to the calling thread; see above.
    assert_eq!(unsafe { libc::raise(signal) }, 0);
}

/// Sends `signal` to the process: any thread that does not block it runs
/// the handler, soon. Only while a watcher of it is active.
fn kill_process(signal: i32) {
    // SAFETY: sends a signal to this process; see above.
    assert_eq!(unsafe { libc::kill(libc::getpid(), signal) }, 0);
}

fn handler_of(signal: i32) -> libc::sighandler_t {
    action(signal).sa_sigaction
}

fn set_default(signal: i32) {
    // SAFETY: the default action; nothing raises the signal afterwards.
    unsafe { libc::signal(signal, libc::SIG_DFL) };
}

/// Blocks `signal` in the calling thread while it lives, so that the
/// process's arrivals are handled by another thread.
struct BlockedHere {
    old: libc::sigset_t,
}

impl BlockedHere {
    fn new(signal: i32) -> BlockedHere {
        // SAFETY: valid sigsets, filled by the calls.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, signal);
            assert_eq!(libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old), 0);
            BlockedHere { old }
        }
    }
}

impl Drop for BlockedHere {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `new`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

// ---- the loop thread, blocked --------------------------------------------------

/// The calling thread's id in the kernel (`/proc/self/task/<id>`).
type Tid = i64;

fn kernel_tid() -> Tid {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SAFETY: no arguments.
        unsafe { libc::gettid() as Tid }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        0
    }
}

/// Waits until thread `tid` of this process sleeps in the kernel (state
/// `S` in `/proc`): the loop thread blocked in its poll. Fails if it never
/// does (a loop that spins). Without `/proc`, returns at once: the send
/// that follows may then reach the loop before it blocks, which it must
/// handle too.
fn wait_until_blocked(tid: Tid) {
    let path = format!("/proc/self/task/{tid}/stat");
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let Ok(stat) = std::fs::read_to_string(&path) else {
            return;
        };
        // "pid (comm) S ...": the state follows the last parenthesis.
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|s| s.trim_start().chars().next());
        if state == Some('S') {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "thread {tid} never blocked: {stat}"
        );
        thread::yield_now();
    }
}

/// A prepare watcher that sends the loop thread's id to `tx` just before
/// the loop's next poll, then removes itself.
fn tell_before_polling<S>(lp: &mut Loop<'_, S>, tx: mpsc::Sender<Tid>) {
    Prepare::new(lp, move |lp, _, me| {
        let _ = tx.send(kernel_tid());
        lp.remove(me).unwrap();
    })
    .unwrap();
}

/// The loop's next iteration waits for a 20 ms timer and runs it: nothing
/// was left over to end its wait early (a wake fd left readable, an
/// arrival not taken). The caller checks that no other callback ran.
fn waits_for_a_timer<S>(lp: &mut Loop<'_, S>, state: &mut S, name: &str) {
    let fired = Rc::new(RefCell::new(false));
    let f = fired.clone();
    let t = lp
        .timer(ms(20), Duration::ZERO, move |_, _, _| {
            *f.borrow_mut() = true
        })
        .unwrap();
    let start = Instant::now();
    lp.run_expect(RunMode::Once, state, RunOutcome::IterationDone);
    assert!(
        *fired.borrow(),
        "{name}: the wait ended after {:?}, before its timer: something was left over",
        start.elapsed()
    );
    lp.remove(t).unwrap();
}

// ---- signals -------------------------------------------------------------------

#[test]
fn a_burst_of_arrivals_runs_each_watcher_once_lower_signals_first_then_in_start_order() {
    on_each_kernel_with("burst", [0, 1], |name, [low, high]| {
        let here = thread::current().id();
        let mut lp: Loop<Vec<String>> = World::new(name).new_loop();
        let mut watchers = vec![];
        // The higher signal's watcher first: signals go by number.
        for (who, signal) in [("high", high), ("a", low), ("b", low)] {
            let w = Signal::new(&mut lp, signal, move |lp, log, me| {
                assert_eq!(thread::current().id(), here, "on the loop's thread");
                assert_eq!(me.number(lp).unwrap(), signal);
                log.push(who.to_string());
            })
            .unwrap();
            watchers.push(w);
        }
        for _ in 0..5 {
            raise_here(high);
            raise_here(low);
        }
        let mut log = vec![];
        lp.run_expect(RunMode::Once, &mut log, RunOutcome::IterationDone);
        assert_eq!(
            log,
            ["a", "b", "high"],
            "{name}: ten arrivals, one call each"
        );
        // Nothing left: the next iteration waits.
        waits_for_a_timer(&mut lp, &mut log, name);
        assert_eq!(log.len(), 3, "{name}: {log:?}");
        // Another burst, another call each.
        for _ in 0..3 {
            raise_here(low);
        }
        log.clear();
        lp.run(RunMode::Once, &mut log).unwrap();
        assert_eq!(log, ["a", "b"], "{name}");
        for w in watchers {
            lp.remove(w).unwrap();
        }
        assert_eq!(lp.active_count(), 0, "{name}");
        for s in [low, high] {
            assert_eq!(handler_of(s), libc::SIG_DFL, "{name}: not restored");
        }
    });
}

#[test]
fn a_signal_sent_from_another_thread_wakes_a_blocked_run_and_runs_on_the_loop_thread() {
    on_each_kernel_with("kill from a thread", [2], |name, [signal]| {
        let here = thread::current().id();
        // The handler runs in some other thread: this one blocks the
        // signal.
        let _blocked = BlockedHere::new(signal);
        let mut lp: Loop<Vec<ThreadId>> = World::new(name).new_loop();
        Signal::new(&mut lp, signal, |lp, seen, me| {
            seen.push(thread::current().id());
            lp.remove(me).unwrap();
        })
        .unwrap();
        let (tx, rx) = mpsc::channel();
        tell_before_polling(&mut lp, tx);
        let killer = thread::spawn(move || {
            wait_until_blocked(rx.recv().unwrap());
            kill_process(signal);
        });
        let seen = lp.finish(vec![]);
        killer.join().unwrap();
        assert_eq!(seen, [here], "{name}: once, on the loop's thread");
    });
}

/// evloop, unlike libev (where a signal may be watched by one loop only),
/// lets any number of loops, in any threads, watch one signal: each hears
/// every arrival (`Signal::new`). The hub's handler stays while any loop
/// of the process watches the signal.
#[test]
fn every_loop_watching_a_signal_hears_each_arrival_until_the_last_one_stops() {
    let _shared = shared();
    let _own = own_signals(&[3]);
    let signal = test_signal(3);
    watchdog("loops in threads", WATCHDOG, move || {
        // Every OS backend, and the default one twice, a thread each.
        let mut names: Vec<&'static str> = backends::AVAILABLE.to_vec();
        names.push(backends::default_name());
        let (heard_tx, heard) = mpsc::channel::<(usize, u32)>();
        let mut threads = vec![];
        let mut blocked = vec![];
        for (i, &name) in names.iter().enumerate() {
            let heard_tx = heard_tx.clone();
            let (tx, rx) = mpsc::channel();
            blocked.push(rx);
            threads.push(thread::spawn(move || {
                let mut lp: Loop<u32> = World::new(name).new_loop();
                Signal::new(&mut lp, signal, move |lp, calls, me| {
                    *calls += 1;
                    heard_tx.send((i, *calls)).unwrap();
                    // The first loop leaves after one arrival, the others
                    // after two.
                    if i == 0 || *calls == 2 {
                        lp.remove(me).unwrap();
                    }
                })
                .unwrap();
                tell_before_polling(&mut lp, tx);
                let mut calls = 0;
                let outcome = lp.run(RunMode::Default, &mut calls).unwrap();
                assert_eq!(outcome, RunOutcome::NoActiveWatchers, "{name}");
                calls
            }));
        }
        for rx in &blocked {
            wait_until_blocked(rx.recv().unwrap());
        }
        let hear = |n: usize, call: u32| {
            let mut who: Vec<usize> = (0..n)
                .map(|_| {
                    let (i, calls) = heard.recv().unwrap();
                    assert_eq!(calls, call, "loop {i} ({})", names[i]);
                    i
                })
                .collect();
            who.sort();
            who
        };
        kill_process(signal);
        let all: Vec<usize> = (0..names.len()).collect();
        assert_eq!(hear(names.len(), 1), all, "one arrival, every loop");
        assert_eq!(threads.remove(0).join().unwrap(), 1);
        assert_ne!(
            handler_of(signal),
            libc::SIG_DFL,
            "the other loops still watch it"
        );
        kill_process(signal);
        assert_eq!(hear(names.len() - 1, 2), all[1..], "the others hear it");
        for t in threads {
            assert_eq!(t.join().unwrap(), 2);
        }
        assert_eq!(
            handler_of(signal),
            libc::SIG_DFL,
            "the last watcher of the process stopped: the default is back"
        );
    });
}

#[test]
fn the_last_stop_of_a_signal_restores_the_previous_disposition() {
    on_each_kernel_with("restore", [4], |name, [signal]| {
        install_marker(signal);
        let marks = || MARKS.load(Ordering::SeqCst);
        let mut lp: Loop<Vec<&str>> = World::new(name).new_loop();
        let w1 = Signal::new(&mut lp, signal, |_, log, _| log.push("w1")).unwrap();
        let w2 = Signal::new(&mut lp, signal, |_, log, _| log.push("w2")).unwrap();
        assert!(!is_marker(&action(signal)), "{name}: the loop's is in");
        lp.stop(w1).unwrap();
        assert!(!is_marker(&action(signal)), "{name}: w2 still watches");
        let before = marks();
        raise_here(signal);
        let mut log = vec![];
        lp.run(RunMode::Once, &mut log).unwrap();
        assert_eq!(log, ["w2"], "{name}");
        assert_eq!(marks(), before, "{name}: the loop had it");
        lp.stop(w2).unwrap();
        assert!(
            is_marker(&action(signal)),
            "{name}: the previous action is back, with its flags"
        );
        // The next arrival is not swallowed: the old handler has it.
        raise_here(signal);
        assert_eq!(marks(), before + 1, "{name}");
        lp.run(RunMode::NoWait, &mut log).unwrap();
        assert_eq!(log, ["w2"], "{name}: no watcher heard it");
        // Started again, the loop's handler is in again; removed, out.
        lp.start(w1).unwrap();
        assert!(!is_marker(&action(signal)), "{name}");
        raise_here(signal);
        lp.run(RunMode::Once, &mut log).unwrap();
        assert_eq!((log.as_slice(), marks()), (&["w2", "w1"][..], before + 1));
        lp.remove(w1).unwrap();
        assert!(is_marker(&action(signal)), "{name}: removed");
        // Dropping a loop unwatches its signals too; the last of two
        // loops restores.
        lp.start(w2).unwrap();
        let mut other: Loop = World::new(name).new_loop();
        Signal::new(&mut other, signal, |_, _, _| {}).unwrap();
        drop(lp);
        assert!(
            !is_marker(&action(signal)),
            "{name}: the other still watches"
        );
        drop(other);
        assert!(is_marker(&action(signal)), "{name}: dropped: restored");
        set_default(signal);
    });
}

#[test]
fn a_signal_that_cannot_be_caught_or_is_no_signal_is_refused_at_the_call() {
    on_each_kernel_with("refused signals", [5], |name, [fine]| {
        let mut lp: Loop<u32> = World::new(name).new_loop();
        for (signal, why) in [
            (libc::SIGKILL, "cannot be caught"),
            (libc::SIGSTOP, "cannot be caught"),
            (0, "numbered from 1"),
            (-1, "numbered from 1"),
            (65, "numbered from 1"),
            (i32::MAX, "numbered from 1"),
            (i32::MIN, "numbered from 1"),
        ] {
            let err = Signal::new(&mut lp, signal, |_, _, _| {}).unwrap_err();
            assert!(
                matches!(err, Error::InvalidSignal { signal: s, .. } if s == signal),
                "{name}: {err}"
            );
            let text = err.to_string();
            assert!(text.contains(why), "{name}: {text}");
            assert!(
                text.contains(&format!("signal {signal} ")),
                "{name}: {text}"
            );
        }
        // Nothing was left behind: the run has nothing to do...
        assert_eq!(lp.active_count(), 0, "{name}");
        lp.run_to_end(&mut 0);
        assert_eq!(lp.iteration(), 0, "{name}");
        // ...and a signal that can be watched still is.
        Signal::new(&mut lp, fine, |lp, n, me| {
            *n += 1;
            lp.remove(me).unwrap();
        })
        .unwrap();
        raise_here(fine);
        assert_eq!(lp.finish(0), 1, "{name}");
    });
}

#[test]
fn a_signal_at_a_higher_priority_runs_before_io_and_at_the_default_after_io_before_checks() {
    on_each_kernel_with("signal order", [6, 7], |name, [urgent, plain]| {
        let (conn, mut peer) = UnixStream::pair().unwrap();
        conn.set_nonblocking(true).unwrap();
        let mut lp: Loop<Vec<&str>> = World::new(name).new_loop();
        lp.io(conn, Interest::READABLE, |lp, log, ev| {
            drain(ev.source);
            log.push("io");
            lp.remove(ev.watcher).unwrap();
        })
        .unwrap();
        let hi = Signal::new(&mut lp, urgent, |lp, log, me| {
            log.push("urgent signal");
            lp.remove(me).unwrap();
        })
        .unwrap();
        lp.set_priority(hi, 1).unwrap();
        Signal::new(&mut lp, plain, |lp, log, me| {
            log.push("signal");
            lp.remove(me).unwrap();
        })
        .unwrap();
        let check = Check::new(&mut lp, |_, log, _| log.push("check")).unwrap();
        lp.set_ref(check, false).unwrap();
        // All three ready before the loop's first poll.
        peer.write_all(b"x").unwrap();
        raise_here(plain);
        raise_here(urgent);
        assert_eq!(
            lp.finish(vec![]),
            ["urgent signal", "io", "signal", "check"],
            "{name}"
        );
    });
}

#[test]
fn a_panicking_signal_callback_leaves_the_loop_usable() {
    on_each_kernel_with("panic in a signal callback", [8], |name, [signal]| {
        let mut lp: Loop<Vec<&str>> = World::new(name).new_loop();
        let mut first = true;
        let a = Signal::new(&mut lp, signal, move |_, log, _| {
            log.push("a");
            if std::mem::take(&mut first) {
                panic!("a's first call");
            }
        })
        .unwrap();
        let b = Signal::new(&mut lp, signal, |_, log, _| log.push("b")).unwrap();
        raise_here(signal);
        let mut log = vec![];
        let caught = catch_unwind(AssertUnwindSafe(|| lp.run(RunMode::Once, &mut log)));
        assert!(caught.is_err(), "{name}: the panic propagates");
        assert_eq!((log.clone(), lp.pending_count()), (vec!["a"], 1), "{name}");
        assert!(
            lp.is_active(a).unwrap() && lp.is_active(b).unwrap(),
            "{name}"
        );
        assert_eq!(lp.depth(), 0, "{name}");
        // b, interrupted, runs in the next run; the next arrival reaches
        // both.
        lp.run(RunMode::NoWait, &mut log).unwrap();
        assert_eq!(log, ["a", "b"], "{name}");
        raise_here(signal);
        lp.run(RunMode::Once, &mut log).unwrap();
        assert_eq!(log, ["a", "b", "a", "b"], "{name}");
        waits_for_a_timer(&mut lp, &mut log, name);
        assert_eq!(log.len(), 4, "{name}");
        lp.remove(a).unwrap();
        lp.remove(b).unwrap();
        assert_eq!(handler_of(signal), libc::SIG_DFL, "{name}");
    });
}

// ---- children --------------------------------------------------------------------

type Exits = Vec<(u32, ExitStatus, &'static str)>;

#[test]
fn child_watchers_report_an_exit_code_or_a_signal_once_then_stop() {
    on_each_child_kernel("exit statuses", |name| {
        let mut lp: Loop<Exits> = kernel_loop(name);
        let code3 = spawn("exit 3");
        let killed = spawn("kill -KILL $$");
        let fine = spawn("exit 0");
        let mut watchers = vec![];
        for pid in [code3, killed, fine] {
            let w = Child::new(&mut lp, pid, move |lp, got, ev| {
                assert_eq!(ev.pid, pid);
                assert!(
                    !lp.is_active(ev.watcher).unwrap(),
                    "stopped: its child is gone"
                );
                got.push((ev.pid, ev.status.expect("an exit"), "first"));
            })
            .unwrap();
            watchers.push(w);
        }
        // A second watcher of one child hears it too, after the first.
        Child::new(&mut lp, code3, |_, got, ev| {
            got.push((ev.pid, ev.status.unwrap(), "second"))
        })
        .unwrap();
        assert_eq!(lp.active_count(), 4, "{name}");
        let got = lp.finish(vec![]);
        let of = |pid: u32| -> Vec<(ExitStatus, &str)> {
            got.iter()
                .filter(|e| e.0 == pid)
                .map(|e| (e.1, e.2))
                .collect()
        };
        let by_kill = ExitStatus::Signaled {
            signal: libc::SIGKILL,
            core_dumped: false,
        };
        assert_eq!(
            of(code3),
            [
                (ExitStatus::Exited(3), "first"),
                (ExitStatus::Exited(3), "second")
            ],
            "{name}"
        );
        assert_eq!(of(killed), [(by_kill, "first")], "{name}");
        assert_eq!(of(fine), [(ExitStatus::Exited(0), "first")], "{name}");
        assert_eq!(got.len(), 4, "{name}: {got:?}");
        // Reaped: it cannot be watched again.
        let err = lp.start(watchers[0]).unwrap_err();
        assert!(
            matches!(err, Error::Child { pid, .. } if pid == code3),
            "{name}: {err}"
        );
        assert_eq!(lp.active_count(), 0, "{name}");
    });
}

#[test]
#[allow(clippy::zombie_processes)] // `late` is reaped by the loop
fn a_child_that_exited_before_its_watcher_started_is_reported() {
    on_each_child_kernel("exited before", |name| {
        let mut lp: Loop<Exits> = kernel_loop(name);
        // Alone, so that no other exit of ours wakes the loop for it.
        let early = spawn("exit 7");
        wait_exited(early);
        Child::new(&mut lp, early, |_, got, ev| {
            got.push((ev.pid, ev.status.unwrap(), ""))
        })
        .unwrap();
        let mut got = lp.finish(vec![]);
        assert_eq!(got, [(early, ExitStatus::Exited(7), "")], "{name}");
        // Watched while running, stopped, exited, started again.
        let mut late = Command::new("sh")
            .args(["-c", "read _; exit 8"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let w = Child::new(&mut lp, late.id(), |_, got, ev| {
            got.push((ev.pid, ev.status.unwrap(), "late"))
        })
        .unwrap();
        lp.stop(w).unwrap();
        drop(late.stdin.take());
        wait_exited(late.id());
        lp.start(w).unwrap();
        lp.run_to_end(&mut got);
        assert_eq!(
            got[1..],
            [(late.id(), ExitStatus::Exited(8), "late")],
            "{name}"
        );
    });
}

#[test]
fn a_hundred_children_exiting_together_are_each_reported_once() {
    on_each_child_kernel("a hundred children", |name| {
        let mut lp: Loop<HashMap<u32, Vec<ExitStatus>>> = kernel_loop(name);
        let pids: Vec<u32> = (0..100).map(|i| spawn(&format!("exit {i}"))).collect();
        for &pid in &pids {
            Child::new(&mut lp, pid, |_, got, ev| {
                got.entry(ev.pid).or_default().push(ev.status.unwrap())
            })
            .unwrap();
        }
        let got = lp.finish(HashMap::new());
        assert_eq!(got.len(), 100, "{name}");
        for (i, pid) in pids.iter().enumerate() {
            assert_eq!(
                got[pid],
                [ExitStatus::Exited(i as i32)],
                "{name}: pid {pid}"
            );
        }
    });
}

/// Pid 0 is refused (a watcher of any child is `Child::any`, never
/// pid 0 by accident), like every pid that is not an unreaped child of
/// this process.
#[test]
fn a_pid_that_is_not_an_unreaped_child_is_refused_at_the_call() {
    on_each_child_kernel("not a child", |name| {
        let mut lp: Loop = kernel_loop(name);
        let mut reaped = Command::new("true").spawn().unwrap();
        reaped.wait().unwrap();
        for pid in [
            0,
            1,
            std::process::id(),
            reaped.id(),
            i32::MAX as u32 + 1,
            u32::MAX,
        ] {
            let err = Child::new(&mut lp, pid, |_, _, _| {}).unwrap_err();
            assert!(
                matches!(err, Error::Child { pid: p, .. } if p == pid),
                "{name}: {err}"
            );
            let text = err.to_string();
            assert!(
                text.contains(&format!("cannot watch child process {pid}:")),
                "{name}: {text}"
            );
        }
        assert_eq!(lp.active_count(), 0, "{name}");
        assert_eq!(
            lp.run(RunMode::Default, &mut ()).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}: nothing left behind"
        );
    });
}

#[test]
fn the_loop_reaps_only_the_children_it_watches() {
    on_each_child_kernel("only its own", |name| {
        let mut lp: Loop<Vec<u32>> = kernel_loop(name);
        // Never watched, and watched but stopped before it exits.
        let mut unwatched = Command::new("sh").args(["-c", "exit 4"]).spawn().unwrap();
        let mut stopped = Command::new("sh")
            .args(["-c", "read _; exit 5"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let w = Child::new(&mut lp, stopped.id(), |_, got, ev| got.push(ev.pid)).unwrap();
        lp.stop(w).unwrap();
        drop(stopped.stdin.take());
        wait_exited(stopped.id());
        wait_exited(unwatched.id());
        // One watched child, run to its end.
        let watched = spawn("exit 6");
        Child::new(&mut lp, watched, |_, got, ev| got.push(ev.pid)).unwrap();
        assert_eq!(lp.finish(vec![]), [watched], "{name}");
        // The others are still there for their owners to reap.
        assert_eq!(unwatched.wait().unwrap().code(), Some(4), "{name}");
        assert_eq!(stopped.wait().unwrap().code(), Some(5), "{name}");
    });
}

/// The loop's own `SIGCHLD` watcher and a child watcher together: on the
/// `SIGCHLD` fallback the backend watches `SIGCHLD` for itself as well,
/// and the two must not take each other's arrivals or stop each other's
/// watch.
#[test]
fn a_sigchld_watcher_and_child_watchers_work_side_by_side() {
    on_each_child_kernel("SIGCHLD and children", |name| {
        #[derive(Default)]
        struct Seen {
            sigchld: u32,
            exits: Vec<ExitStatus>,
        }
        let mut lp: Loop<Seen> = kernel_loop(name);
        let sigchld = Signal::new(&mut lp, libc::SIGCHLD, |_, seen, _| seen.sigchld += 1).unwrap();
        let pid = spawn("exit 2");
        Child::new(&mut lp, pid, |_, seen, ev| {
            seen.exits.push(ev.status.unwrap())
        })
        .unwrap();
        // Other tests' children send SIGCHLD too: wait for ours.
        let mut seen = Seen::default();
        while seen.exits.is_empty() || seen.sigchld == 0 {
            lp.run(RunMode::Once, &mut seen).unwrap();
        }
        assert_eq!(seen.exits, [ExitStatus::Exited(2)], "{name}");
        // The SIGCHLD watcher gone, child watchers keep working...
        lp.remove(sigchld).unwrap();
        let pid = spawn("exit 3");
        Child::new(&mut lp, pid, |_, seen, ev| {
            seen.exits.push(ev.status.unwrap())
        })
        .unwrap();
        lp.run_to_end(&mut seen);
        assert_eq!(seen.exits[1..], [ExitStatus::Exited(3)], "{name}");
        // ...and, the children gone, a SIGCHLD watcher still hears exits.
        let sigchld = Signal::new(&mut lp, libc::SIGCHLD, |_, seen, _| seen.sigchld += 1).unwrap();
        let mut mine = Command::new("true").spawn().unwrap();
        seen.sigchld = 0;
        while seen.sigchld == 0 {
            lp.run(RunMode::Once, &mut seen).unwrap();
        }
        lp.remove(sigchld).unwrap();
        assert!(mine.wait().unwrap().success(), "{name}: left to its owner");
    });
}

#[test]
fn a_panicking_child_callback_leaves_the_loop_usable() {
    on_each_child_kernel("panic in a child callback", |name| {
        let mut lp: Loop<Vec<&str>> = kernel_loop(name);
        let pid = spawn("exit 1");
        let first = Child::new(&mut lp, pid, |_, log, _| {
            log.push("first");
            panic!("first");
        })
        .unwrap();
        Child::new(&mut lp, pid, |_, log, _| log.push("second")).unwrap();
        let mut log = vec![];
        let caught = catch_unwind(AssertUnwindSafe(|| lp.run(RunMode::Default, &mut log)));
        assert!(caught.is_err(), "{name}: the panic propagates");
        assert_eq!(
            (log.clone(), lp.pending_count()),
            (vec!["first"], 1),
            "{name}"
        );
        assert!(!lp.is_active(first).unwrap(), "{name}: its child is gone");
        // The second watcher, interrupted, runs in the next run.
        lp.run_to_end(&mut log);
        assert_eq!(log, ["first", "second"], "{name}");
        // And the next child is watched as usual.
        let next = spawn("exit 2");
        Child::new(&mut lp, next, |_, log, ev| {
            assert_eq!(ev.status, Some(ExitStatus::Exited(2)));
            log.push("next");
        })
        .unwrap();
        lp.run(RunMode::Default, &mut log).unwrap();
        assert_eq!(log, ["first", "second", "next"], "{name}");
    });
}

// ---- one child, several loops; a child reaped elsewhere ---------------------------

/// The kernel `k` places after `name` in [`child_kernels`]: loops on
/// different mechanisms (pidfd, `SIGCHLD`, `EVFILT_PROC`) side by side.
fn partner(name: &str, k: usize) -> &'static str {
    let all = child_kernels();
    let i = all.iter().position(|&n| n == name).unwrap();
    all[(i + k) % all.len()]
}

/// Each watcher of `pid` on `lp` records what it was told.
fn watch_into(lp: &mut Loop<'_, Vec<ExitStatus>>, pid: u32) -> evloop::Child {
    Child::new(lp, pid, move |lp, got, ev| {
        assert_eq!(ev.pid, pid);
        assert!(
            !lp.is_active(ev.watcher).unwrap(),
            "stopped: its child is gone"
        );
        got.push(ev.status.expect("an exit"));
    })
    .unwrap()
}

/// Runs `lp` until it has no watcher left.
fn run_out(lp: &mut Loop<'_, Vec<ExitStatus>>, what: &str) -> Vec<ExitStatus> {
    let mut got = vec![];
    assert_eq!(
        lp.run(RunMode::Default, &mut got).unwrap(),
        RunOutcome::NoActiveWatchers,
        "{what}"
    );
    got
}

#[test]
fn two_loops_in_two_threads_watching_one_child_both_get_its_exit() {
    on_each_child_kernel("two loops, two threads", |name| {
        let other = partner(name, 1);
        let mut job = held(5);
        let pid = job.id();
        let (watching, started) = mpsc::channel();
        let thread = thread::spawn(move || {
            let mut lp: Loop<Vec<ExitStatus>> = kernel_loop(other);
            watch_into(&mut lp, pid);
            tell_before_polling(&mut lp, watching);
            run_out(&mut lp, other)
        });
        let mut lp: Loop<Vec<ExitStatus>> = kernel_loop(name);
        watch_into(&mut lp, pid);
        // The other loop is asleep in its poll when the child exits:
        // whichever loop reaps it, the other must wake up and hear it.
        wait_until_blocked(started.recv().unwrap());
        drop(job.stdin.take());
        let mine = run_out(&mut lp, name);
        let theirs = thread
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        assert_eq!(mine, [ExitStatus::Exited(5)], "{name} (with {other})");
        assert_eq!(theirs, [ExitStatus::Exited(5)], "{other} (with {name})");
        assert!(job.try_wait().is_err(), "{name}/{other}: reaped");
    });
}

#[test]
fn two_loops_in_one_thread_watching_one_child_both_get_its_exit() {
    on_each_child_kernel("two loops, one thread", |name| {
        for other in [name, partner(name, 1)] {
            // Whichever runs first reaps it; the other, run later, is told.
            for first in [0, 1] {
                let mut loops: [Loop<Vec<ExitStatus>>; 2] = [kernel_loop(name), kernel_loop(other)];
                let mut job = held(6);
                for lp in &mut loops {
                    watch_into(lp, job.id());
                    watch_into(lp, job.id()); // two watchers on each
                }
                drop(job.stdin.take());
                wait_exited(job.id());
                for i in [first, 1 - first] {
                    let what =
                        format!("{name} and {other}, loop {i} of the two (the first run: {first})");
                    let got = run_out(&mut loops[i], &what);
                    assert_eq!(got, [ExitStatus::Exited(6); 2], "{what}");
                }
                assert!(job.try_wait().is_err(), "{name}/{other}: reaped");
            }
        }
    });
}

#[test]
fn a_child_reaped_by_std_wait_is_reported_as_unknown_and_the_run_returns() {
    on_each_child_kernel("reaped elsewhere", |name| {
        let mut lp: Loop<Vec<ExitStatus>> = kernel_loop(name);
        let mut job = held(3);
        let w = watch_into(&mut lp, job.id());
        watch_into(&mut lp, job.id());
        // An iteration that finds it running.
        let mut got = vec![];
        lp.run_expect(RunMode::NoWait, &mut got, RunOutcome::IterationDone);
        drop(job.stdin.take());
        assert_eq!(job.wait().unwrap().code(), Some(3), "{name}: std reaps it");
        let got = run_out(&mut lp, name);
        assert_eq!(got, [ExitStatus::Unknown; 2], "{name}");
        // It is gone: starting its watcher again is refused at the call.
        let err = lp.start(w).unwrap_err();
        assert!(
            matches!(err, Error::Child { pid, .. } if pid == job.id()),
            "{name}: {err}"
        );
        assert_eq!(lp.active_count(), 0, "{name}");
    });
}

/// A `wait` in another thread races the loop: whichever reaps the child
/// has its status, and the other learns that it is gone. Never both,
/// never neither, and the run returns.
#[test]
fn a_child_waited_for_in_another_thread_while_the_loop_blocks_is_reported_either_way() {
    on_each_child_kernel("waited for in another thread", |name| {
        let mut lp: Loop<Vec<ExitStatus>> = kernel_loop(name);
        let mut job = held(9);
        watch_into(&mut lp, job.id());
        let stdin = job.stdin.take();
        let (blocking, blocked) = mpsc::channel();
        tell_before_polling(&mut lp, blocking);
        let waiter = thread::spawn(move || {
            wait_until_blocked(blocked.recv().unwrap());
            drop(stdin);
            job.wait()
        });
        let got = run_out(&mut lp, name);
        let waited = waiter.join().unwrap();
        match (&waited, &got[..]) {
            (Ok(status), [ExitStatus::Unknown]) if status.code() == Some(9) => {}
            (Err(err), [ExitStatus::Exited(9)]) if err.raw_os_error() == Some(libc::ECHILD) => {}
            _ => panic!("{name}: wait gave {waited:?}, the loop {got:?}"),
        }
    });
}

#[test]
fn twenty_children_each_watched_by_three_loops_are_reported_once_to_each() {
    on_each_child_kernel("20 children, 3 loops", |name| {
        let mut jobs: Vec<std::process::Child> = (0..20).map(held).collect();
        let pids: Vec<u32> = jobs.iter().map(|j| j.id()).collect();
        let kinds = [name, partner(name, 1), name];
        let (watching, started) = mpsc::channel();
        let threads: Vec<_> = kinds
            .iter()
            .map(|&kind| {
                let (pids, watching) = (pids.clone(), watching.clone());
                thread::spawn(move || {
                    let mut lp: Loop<HashMap<u32, Vec<ExitStatus>>> = kernel_loop(kind);
                    for &pid in &pids {
                        Child::new(&mut lp, pid, |_, got, ev| {
                            got.entry(ev.pid).or_default().push(ev.status.unwrap())
                        })
                        .unwrap();
                    }
                    watching.send(()).unwrap();
                    let mut got = HashMap::new();
                    let outcome = lp.run(RunMode::Default, &mut got).unwrap();
                    assert_eq!(outcome, RunOutcome::NoActiveWatchers, "{kind}");
                    got
                })
            })
            .collect();
        for _ in &kinds {
            started.recv().unwrap();
        }
        for job in &mut jobs {
            drop(job.stdin.take());
        }
        for (thread, kind) in threads.into_iter().zip(kinds) {
            let got = thread
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            assert_eq!(got.len(), 20, "{name}: the loop on {kind}");
            for (i, pid) in pids.iter().enumerate() {
                assert_eq!(
                    got[pid],
                    [ExitStatus::Exited(i as i32)],
                    "{name}: the loop on {kind}, pid {pid}"
                );
            }
        }
        for job in &mut jobs {
            assert!(job.try_wait().is_err(), "{name}: reaped");
        }
    });
}

#[test]
#[allow(clippy::zombie_processes)] // the loops reap them
fn a_loop_dropped_while_watching_a_child_leaves_the_others_working() {
    on_each_child_kernel("a loop dropped", |name| {
        let kinds = [name, partner(name, 1), partner(name, 2)];
        let new_loops = || -> Vec<Loop<Vec<ExitStatus>>> { kinds.map(kernel_loop).into() };

        // Dropped while the child runs.
        let mut loops = new_loops();
        let mut job = held(2);
        for lp in &mut loops {
            watch_into(lp, job.id());
        }
        drop(loops.remove(1));
        // A loop made now may take the dropped one's hub slot: nothing
        // meant for the dropped one reaches it.
        let mut fresh: Loop<Vec<ExitStatus>> = kernel_loop(name);
        let mut own = held(4);
        watch_into(&mut fresh, own.id());
        drop(job.stdin.take());
        for (lp, kind) in loops.iter_mut().zip([kinds[0], kinds[2]]) {
            let what = format!("{kind}, with {} dropped", kinds[1]);
            assert_eq!(run_out(lp, &what), [ExitStatus::Exited(2)], "{what}");
        }
        if !name.ends_with("+sigchld") {
            // (Other tests' exits wake a loop on the SIGCHLD fallback.)
            let mut got = vec![];
            waits_for_a_timer(&mut fresh, &mut got, name);
            assert!(got.is_empty(), "{name}: {got:?}");
        }
        drop(own.stdin.take());
        assert_eq!(run_out(&mut fresh, name), [ExitStatus::Exited(4)], "{name}");

        // Dropped with the exit handed to it, not yet taken.
        let mut loops = new_loops();
        let mut job = held(3);
        for lp in &mut loops {
            watch_into(lp, job.id());
        }
        drop(job.stdin.take());
        wait_exited(job.id());
        assert_eq!(run_out(&mut loops[0], kinds[0]), [ExitStatus::Exited(3)]);
        drop(loops.remove(1));
        assert_eq!(
            run_out(&mut loops[1], kinds[2]),
            [ExitStatus::Exited(3)],
            "{}, with {} dropped",
            kinds[2],
            kinds[1]
        );
    });
}

// ---- async -------------------------------------------------------------------------

#[test]
fn a_send_from_another_thread_wakes_a_blocked_run_and_runs_on_the_loop_thread() {
    on_each_kernel("async wake-up", |name| {
        let here = thread::current().id();
        let mut lp: Loop<Vec<ThreadId>> = World::new(name).new_loop();
        let (_, sender) = Async::new(&mut lp, |lp, seen, me| {
            seen.push(thread::current().id());
            lp.remove(me).unwrap();
        })
        .unwrap();
        let (tx, rx) = mpsc::channel();
        tell_before_polling(&mut lp, tx);
        let t = thread::spawn(move || {
            wait_until_blocked(rx.recv().unwrap());
            sender.send().unwrap();
        });
        let seen = lp.finish(vec![]);
        t.join().unwrap();
        assert_eq!(seen, [here], "{name}");
    });
}

#[test]
fn sends_before_the_callback_runs_coalesce_and_one_from_inside_it_runs_it_again() {
    on_each_kernel("coalescing sends", |name| {
        let mut lp: Loop<Vec<String>> = World::new(name).new_loop();
        let mut calls = 0;
        let (_, sender) = Async::new(&mut lp, move |lp, log, me| {
            calls += 1;
            log.push(format!("call {calls}"));
            match calls {
                2 => me.sender(lp).unwrap().send().unwrap(),
                3 => lp.remove(me).unwrap(),
                _ => {}
            }
        })
        .unwrap();
        // A thousand sends from four threads, all before the loop looks.
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = sender.clone();
                thread::spawn(move || {
                    for _ in 0..250 {
                        s.send().unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut log = vec![];
        lp.run(RunMode::Once, &mut log).unwrap();
        assert_eq!(log, ["call 1"], "{name}");
        waits_for_a_timer(&mut lp, &mut log, name);
        assert_eq!(log, ["call 1"], "{name}: nothing more");
        // Sent again: call 2 sends from inside, and call 3 follows
        // without the loop blocking (or this run would never end).
        sender.send().unwrap();
        lp.run_to_end(&mut log);
        assert_eq!(log, ["call 1", "call 2", "call 3"], "{name}");
        assert!(matches!(
            sender.send(),
            Err(Error::WatcherGone { kind: "async" })
        ));
    });
}

/// Round trips between threads and the loop, through several async
/// watchers at once: each send waits for the callback of the one before,
/// so a lost wake-up would hang the run.
#[test]
fn round_trips_through_several_async_watchers_lose_no_wake_up() {
    on_each_kernel("round trips", |name| {
        const WATCHERS: usize = 3;
        const ROUNDS: usize = 300;
        let mut lp: Loop<usize> = World::new(name).new_loop();
        let mut threads = vec![];
        for _ in 0..WATCHERS {
            let (ack, acks) = mpsc::channel::<usize>();
            let mut n = 0;
            let (_, sender) = Async::new(&mut lp, move |lp, done, me| {
                n += 1;
                ack.send(n).unwrap();
                if n == ROUNDS {
                    *done += 1;
                    lp.remove(me).unwrap();
                }
            })
            .unwrap();
            threads.push(thread::spawn(move || {
                for round in 1..=ROUNDS {
                    sender.send().unwrap();
                    assert_eq!(acks.recv().unwrap(), round, "one call per send");
                }
            }));
        }
        assert_eq!(lp.finish(0), WATCHERS, "{name}");
        for t in threads {
            t.join().unwrap();
        }
    });
}

#[test]
fn a_send_to_a_stopped_watcher_is_dropped_and_to_a_removed_one_or_a_dropped_loop_refused() {
    on_each_kernel("async gone", |name| {
        let mut lp: Loop<Vec<&str>> = World::new(name).new_loop();
        let (a, sender) = Async::new(&mut lp, |_, log, _| log.push("a")).unwrap();
        lp.stop(a).unwrap();
        sender.send().unwrap();
        lp.start(a).unwrap();
        let mut log = vec![];
        // (The send still ends the next wait early, as libev's does: one
        // iteration with nothing to run.)
        lp.run(RunMode::NoWait, &mut log).unwrap();
        waits_for_a_timer(&mut lp, &mut log, name);
        assert!(log.is_empty(), "{name}: sent while stopped: dropped");
        sender.send().unwrap();
        lp.run(RunMode::Once, &mut log).unwrap();
        assert_eq!(log, ["a"], "{name}");
        // Removed: every sender of it says so.
        let (b, first) = Async::new(&mut lp, |_, log, _| log.push("b")).unwrap();
        let second = b.sender(&lp).unwrap();
        lp.remove(b).unwrap();
        for s in [&first, &second] {
            assert!(
                matches!(s.send(), Err(Error::WatcherGone { kind: "async" })),
                "{name}"
            );
        }
        assert!(matches!(
            b.sender(&lp),
            Err(Error::StaleHandle { kind: "async" })
        ));
        // The loop dropped while another thread sends: Ok until it is
        // gone, then WatcherGone; nothing breaks.
        let (started, has_started) = mpsc::channel();
        let s = sender.clone();
        let t = thread::spawn(move || {
            let mut oks = 0u64;
            loop {
                match s.send() {
                    Ok(()) => {
                        oks += 1;
                        if oks == 1 {
                            started.send(()).unwrap();
                        }
                    }
                    Err(Error::WatcherGone { kind: "async" }) => return oks,
                    Err(e) => panic!("{e}"),
                }
            }
        });
        has_started.recv().unwrap();
        drop(lp);
        assert!(t.join().unwrap() >= 1);
        let err = sender.send().unwrap_err();
        assert!(
            matches!(err, Error::WatcherGone { kind: "async" }),
            "{name}"
        );
        assert!(err.to_string().contains("loop dropped"), "{err}");
    });
}

#[test]
fn an_async_sent_from_a_callback_runs_without_the_loop_blocking() {
    on_each_kernel("send from a callback", |name| {
        let (conn, mut peer) = UnixStream::pair().unwrap();
        conn.set_nonblocking(true).unwrap();
        let mut lp: Loop<Vec<&str>> = World::new(name).new_loop();
        let (_, to_b) = Async::new(&mut lp, |lp, log, me| {
            log.push("b");
            lp.remove(me).unwrap();
        })
        .unwrap();
        // The timer is started by a's callback, not before the run: how
        // long the machine takes to get there cannot reorder the log.
        let (_, to_a) = Async::new(&mut lp, move |lp, log, me| {
            log.push("a");
            lp.remove(me).unwrap();
            let to_b = to_b.clone();
            lp.timer(ms(5), Duration::ZERO, move |_, log, _| {
                log.push("timer");
                to_b.send().unwrap();
            })
            .unwrap();
        })
        .unwrap();
        lp.io(conn, Interest::READABLE, move |lp, log, ev| {
            drain(ev.source);
            log.push("io");
            to_a.send().unwrap();
            lp.remove(ev.watcher).unwrap();
        })
        .unwrap();
        peer.write_all(b"x").unwrap();
        // Each send leaves its watcher the only thing to wait for: had
        // the loop not seen it, it would block forever.
        assert_eq!(lp.finish(vec![]), ["io", "a", "timer", "b"], "{name}");
    });
}

#[test]
fn a_panicking_async_callback_leaves_the_loop_usable() {
    on_each_kernel("panic in an async callback", |name| {
        let mut lp: Loop<Vec<&str>> = World::new(name).new_loop();
        let mut first = true;
        let (_, a) = Async::new(&mut lp, move |_, log, _| {
            log.push("a");
            if std::mem::take(&mut first) {
                panic!("a's first call");
            }
        })
        .unwrap();
        let (_, b) = Async::new(&mut lp, |_, log, _| log.push("b")).unwrap();
        a.send().unwrap();
        b.send().unwrap();
        let mut log = vec![];
        let caught = catch_unwind(AssertUnwindSafe(|| lp.run(RunMode::Once, &mut log)));
        assert!(caught.is_err(), "{name}");
        assert_eq!((log.clone(), lp.pending_count()), (vec!["a"], 1), "{name}");
        lp.run(RunMode::NoWait, &mut log).unwrap();
        assert_eq!(log, ["a", "b"], "{name}");
        // Sent from another thread: it wakes the loop as before.
        thread::spawn(move || a.send().unwrap()).join().unwrap();
        lp.run(RunMode::Once, &mut log).unwrap();
        assert_eq!(log, ["a", "b", "a"], "{name}");
        waits_for_a_timer(&mut lp, &mut log, name);
        assert_eq!(log.len(), 3, "{name}");
    });
}

// ---- fork --------------------------------------------------------------------------

/// What a loop saw, in the fork test.
#[derive(Default, Debug)]
struct Seen {
    log: Vec<&'static str>,
    read: Vec<u8>,
    exits: Vec<ExitStatus>,
}

impl Seen {
    fn count(&self, what: &str) -> usize {
        self.log.iter().filter(|&&l| l == what).count()
    }
}

/// The forked child's exit statuses, and what each means.
const CHILD_OK: i32 = 0;
const CHILD_FAILURES: [&str; 10] = [
    "reinit_after_fork failed",
    "the parent's child is still watched in the child",
    "a watcher could not be created in the child",
    "the async send failed in the child",
    "run failed in the child",
    "the child's loop did not see everything within 10 s (fd, signal, async, timer or its own child)",
    "the fork watcher did not run first, once, before the prepare watcher",
    "the child's loop saw something twice, or something of the parent's",
    "removing the io watcher failed in the child",
    "the child panicked",
];
const CHILD_PANICKED: i32 = 10 + CHILD_FAILURES.len() as i32 - 1;

fn explain(code: i32) -> &'static str {
    usize::try_from(code - 10)
        .ok()
        .and_then(|i| CHILD_FAILURES.get(i))
        .unwrap_or(&"unexpected status")
}

/// Runs `lp` one iteration at a time until `done` holds (its timers bound
/// each wait) or `limit` has passed; false if it never held.
fn run_until<S>(
    lp: &mut Loop<'_, S>,
    state: &mut S,
    limit: Duration,
    done: impl Fn(&S) -> bool,
) -> evloop::Result<bool> {
    let give_up = Instant::now() + limit;
    while !done(state) {
        if Instant::now() > give_up {
            return Ok(false);
        }
        lp.run(RunMode::Once, state)?;
    }
    Ok(true)
}

/// What the forked child does with the loop it inherited: reinit, then
/// io, a signal, an async send, a timer and a child of its own, all
/// through its own kernel objects; the parent's child is not its own.
fn in_forked_child(
    lp: &mut Loop<'static, Seen>,
    peer: &mut UnixStream,
    signal: i32,
    sender: &evloop::AsyncSender,
    parents_child: evloop::Child,
    io: evloop::Io,
) -> i32 {
    let fail = |i: i32| 10 + i;
    if lp.reinit_after_fork().is_err() {
        return fail(0);
    }
    if lp.is_active(parents_child).unwrap_or(true) {
        return fail(1);
    }
    let made = Prepare::new(lp, |lp, seen, me| {
        seen.log.push("prepare");
        lp.remove(me).unwrap();
    })
    .and_then(|_| lp.timer(ms(1), Duration::ZERO, |_, seen, _| seen.log.push("timer")))
    .and_then(|_| lp.timer(ms(100), ms(100), |_, _, _| {}))
    .and_then(|_| {
        Child::new(lp, spawn("exit 4"), |_, seen, ev| {
            seen.exits.push(ev.status.unwrap())
        })
    });
    if made.is_err() {
        return fail(2);
    }
    peer.write_all(b"child").unwrap();
    raise_here(signal);
    if sender.send().is_err() {
        return fail(3);
    }
    let mut seen = Seen::default();
    let everything = |s: &Seen| {
        s.read == b"child"
            && s.count("signal") > 0
            && s.count("async") > 0
            && s.count("timer") > 0
            && !s.exits.is_empty()
    };
    match run_until(lp, &mut seen, Duration::from_secs(10), everything) {
        Err(_) => return fail(4),
        Ok(false) => return fail(5),
        Ok(true) => {}
    }
    if seen.log[..2] != ["fork", "prepare"] || seen.count("fork") != 1 {
        return fail(6);
    }
    let once = ["signal", "async", "timer"]
        .iter()
        .all(|w| seen.count(w) == 1);
    if !once || seen.exits != [ExitStatus::Exited(4)] {
        return fail(7);
    }
    // A change through a kernel object still shared with the parent would
    // take the parent's registration away too.
    if lp.remove(io).is_err() || lp.run(RunMode::NoWait, &mut seen).is_err() {
        return fail(8);
    }
    // Left undrained: had the child kept the parent's wake fd, the
    // parent's next wait would end early.
    raise_here(signal);
    CHILD_OK
}

#[allow(clippy::zombie_processes)] // `parents_child` is reaped by the loop
fn fork_case(name: &'static str, signal: i32) {
    let (conn, mut peer) = UnixStream::pair().unwrap();
    conn.set_nonblocking(true).unwrap();
    let mut parents_child = Command::new("sh")
        .args(["-c", "read _; exit 9"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lp: Loop<'static, Seen> = World::new(name).new_loop();
    let io = lp
        .io(conn, Interest::READABLE, |_, seen, ev| {
            seen.read.extend(drain(ev.source))
        })
        .unwrap();
    let sig = Signal::new(&mut lp, signal, |_, seen, _| seen.log.push("signal")).unwrap();
    let (asy, sender) = Async::new(&mut lp, |_, seen, _| seen.log.push("async")).unwrap();
    let fork = Fork::new(&mut lp, |_, seen, _| seen.log.push("fork")).unwrap();
    let theirs = Child::new(&mut lp, parents_child.id(), |_, seen, ev| {
        seen.exits.push(ev.status.unwrap())
    })
    .unwrap();
    // Everything registered with the kernel before the fork.
    let mut seen = Seen::default();
    lp.run(RunMode::NoWait, &mut seen).unwrap();
    assert!(
        seen.log.is_empty() && seen.read.is_empty(),
        "{name}: {seen:?}"
    );

    std::io::stdout().flush().unwrap();
    std::io::stderr().flush().unwrap();
    // SAFETY: no other test of this binary runs (the caller holds `FORK`
    // for writing), so no other thread is inside a backend or holds a
    // lock the child needs. The child runs the loop and leaves with
    // `_exit`, never returning into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = catch_unwind(AssertUnwindSafe(|| {
            in_forked_child(&mut lp, &mut peer, signal, &sender, theirs, io)
        }))
        .unwrap_or(CHILD_PANICKED);
        // SAFETY: ends the child at once, without destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked; `status` is writable.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid, "waitpid: {}", std::io::Error::last_os_error());
    assert!(
        libc::WIFEXITED(status),
        "{name}: the child died: {status:#x}"
    );
    let code = libc::WEXITSTATUS(status);
    assert_eq!(code, CHILD_OK, "{name}: in the child, {}", explain(code));

    if name == "io_uring" {
        // The parent's poll of `conn` completed when the child wrote to
        // the socket they share: an io_uring poll reports the wake-up,
        // where epoll checks the fd again at the wait. One report, whose
        // read finds nothing (the child took the data).
        lp.run(RunMode::NoWait, &mut seen).unwrap();
        assert!(seen.read.is_empty(), "{name}: {seen:?}");
    }
    // Nothing of the child's reached the parent's loop: its next iteration
    // waits for its timer, and runs nothing else.
    waits_for_a_timer(&mut lp, &mut seen, name);
    assert!(
        seen.log.is_empty() && seen.read.is_empty() && seen.exits.is_empty(),
        "{name}: the parent saw the child's: {seen:?}"
    );
    assert!(lp.is_active(fork).unwrap() && lp.is_active(theirs).unwrap());
    // And everything works as before the fork, the parent's child included.
    peer.write_all(b"parent").unwrap();
    raise_here(signal);
    thread::spawn(move || sender.send().unwrap())
        .join()
        .unwrap();
    drop(parents_child.stdin.take());
    lp.timer(ms(100), ms(100), |_, _, _| {}).unwrap();
    let everything = |s: &Seen| {
        s.read == b"parent" && s.count("signal") > 0 && s.count("async") > 0 && !s.exits.is_empty()
    };
    let all = run_until(&mut lp, &mut seen, Duration::from_secs(10), everything).unwrap();
    assert!(all, "{name}: the parent's loop after the fork: {seen:?}");
    assert_eq!(
        seen.log.len(),
        2,
        "{name}: once each, no fork watcher: {seen:?}"
    );
    assert_eq!(seen.exits, [ExitStatus::Exited(9)], "{name}");
    lp.remove(sig).unwrap();
    lp.remove(asy).unwrap();
    assert_eq!(handler_of(signal), libc::SIG_DFL, "{name}");
}

#[test]
fn a_forked_child_reinits_its_loop_and_then_both_loops_work_on_their_own() {
    // No other test runs while this one forks.
    let _alone = alone();
    let _own = own_signals(&[9]);
    let signal = test_signal(9);
    for &name in backends::AVAILABLE {
        watchdog(&format!("fork on {name}"), WATCHDOG, move || {
            fork_case(name, signal)
        });
    }
}

// ---- cleanup -----------------------------------------------------------------------

#[test]
fn cleanup_watchers_run_once_at_drop_in_start_order_with_the_loop_at_hand() {
    on_each_kernel_with("cleanup", [10], |name, [signal]| {
        let (conn, mut peer) = UnixStream::pair().unwrap();
        conn.set_nonblocking(true).unwrap();
        let log = Rc::new(RefCell::new(Vec::<String>::new()));
        let mut lp: Loop = World::new(name).new_loop();
        let io = lp.io(conn, Interest::READABLE, |_, _, _| {}).unwrap();
        let sig = Signal::new(&mut lp, signal, |_, _, _| {}).unwrap();
        let (_, sender) = Async::new(&mut lp, |_, _, _| {}).unwrap();
        let l = log.clone();
        // The orderly stop: the first removes what the loop owns.
        Cleanup::new(&mut lp, move |lp| {
            l.borrow_mut().push("first".into());
            lp.remove(io).unwrap();
            lp.remove(sig).unwrap();
        })
        .unwrap();
        let l = log.clone();
        Cleanup::new(&mut lp, move |lp| {
            let io = if lp.is_active(io).is_err() {
                "gone"
            } else {
                "there"
            };
            l.borrow_mut().push(format!("second: io {io}"));
        })
        .unwrap();
        let l = log.clone();
        let stopped =
            Cleanup::new(&mut lp, move |_| l.borrow_mut().push("stopped".into())).unwrap();
        lp.stop(stopped).unwrap();
        let l = log.clone();
        let fed = Cleanup::new(&mut lp, move |_| l.borrow_mut().push("fed".into())).unwrap();
        // Cleanup watchers never keep a run going.
        assert_eq!(lp.active_count(), 3, "{name}: io, signal, async");
        // Fed: it runs now, and never again.
        for _ in 0..2 {
            lp.feed_event(fed, Ready::EMPTY).unwrap();
            lp.run(RunMode::NoWait, &mut ()).unwrap();
        }
        assert_eq!(*log.borrow(), ["fed"], "{name}");
        assert!(lp.is_active(fed).unwrap(), "{name}");
        drop(lp);
        assert_eq!(*log.borrow(), ["fed", "first", "second: io gone"], "{name}");
        // Dropped: the signal's disposition is back, the senders know, the
        // source is closed.
        assert_eq!(handler_of(signal), libc::SIG_DFL, "{name}");
        assert!(matches!(sender.send(), Err(Error::WatcherGone { .. })));
        // (A blocking read: a child another test is spawning may hold a
        // copy of the fd until its exec closes it.)
        // Retried when a signal interrupts it (other tests' children
        // exit, their SIGCHLD lands in any thread).
        let mut buf = [0u8; 1];
        peer.set_read_timeout(Some(WATCHDOG)).unwrap();
        let read = loop {
            match peer.read(&mut buf) {
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                r => break r,
            }
        };
        assert_eq!(read.unwrap(), 0, "{name}: EOF");
        assert!(matches!(
            peer.write(b"x").map_err(|e| e.kind()),
            Err(ErrorKind::BrokenPipe)
        ));
    });
}

/// The sender can go to any thread, be shared between threads and be
/// cloned (checked by the compiler).
#[test]
fn an_async_sender_is_send_sync_and_clone() {
    fn shareable<T: Send + Sync + Clone + 'static>() {}
    shareable::<evloop::AsyncSender>();
}

// ---- signals to children, spawning, a fired watcher ------------------------------

#[test]
fn kill_signals_a_watched_child_and_refuses_once_it_has_been_reaped() {
    on_each_child_kernel("kill", |name| {
        let mut lp: Loop<Vec<ExitStatus>> = kernel_loop(name);
        let (job, spawned) =
            Child::spawn(&mut lp, Command::new("sleep").arg("60"), |_, got, ev| {
                got.push(ev.status.unwrap())
            })
            .unwrap();
        job.kill(&mut lp, 0).unwrap(); // only the checks
        for bad in [-1, 65] {
            let err = job.kill(&mut lp, bad).unwrap_err();
            assert!(
                matches!(err, Error::InvalidSignal { signal, .. } if signal == bad),
                "{name}: {err}"
            );
        }
        job.kill(&mut lp, Signal::TERM).unwrap();
        let by_term = ExitStatus::Signaled {
            signal: Signal::TERM,
            core_dumped: false,
        };
        assert_eq!(run_out(&mut lp, name), [by_term], "{name}");
        // Reaped: its pid may name another process by now.
        let err = job.kill(&mut lp, Signal::TERM).unwrap_err();
        assert!(
            matches!(err, Error::ChildExited { pid, status: Some(s) }
                if pid == spawned.pid && s == by_term),
            "{name}: {err}"
        );
        assert!(err.to_string().contains("no signal was sent"), "{err}");
    });
}

#[test]
#[allow(clippy::zombie_processes)] // the first `job` is reaped by the loop
fn kill_refuses_a_child_reaped_elsewhere_or_unwatched_and_a_zombie_takes_it_harmlessly() {
    on_each_child_kernel("kill, the edges", |name| {
        let mut lp: Loop<Vec<ExitStatus>> = kernel_loop(name);
        // Exited, not yet reaped: the signal does nothing, and succeeds.
        let mut job = held(4);
        let w = watch_into(&mut lp, job.id());
        drop(job.stdin.take());
        wait_exited(job.id());
        w.kill(&mut lp, Signal::TERM).unwrap();
        assert_eq!(run_out(&mut lp, name), [ExitStatus::Exited(4)], "{name}");
        // Reaped by std before the loop looked: refused, never sent to
        // whatever has the pid now.
        let mut job = held(5);
        let w = watch_into(&mut lp, job.id());
        drop(job.stdin.take());
        assert_eq!(job.wait().unwrap().code(), Some(5), "{name}");
        let err = w.kill(&mut lp, Signal::TERM).unwrap_err();
        assert!(
            matches!(err, Error::ChildExited { status: None, .. }),
            "{name}: {err}"
        );
        assert_eq!(run_out(&mut lp, name), [ExitStatus::Unknown], "{name}");
        // A stopped watcher: the loop cannot tell whether it was reaped.
        let mut job = held(6);
        let w = watch_into(&mut lp, job.id());
        lp.stop(w).unwrap();
        let err = w.kill(&mut lp, Signal::TERM).unwrap_err();
        assert!(matches!(err, Error::Kill { .. }), "{name}: {err}");
        drop(job.stdin.take());
        assert_eq!(job.wait().unwrap().code(), Some(6), "{name}: untouched");
        lp.remove(w).unwrap();
        let err = w.kill(&mut lp, Signal::TERM).unwrap_err();
        assert!(matches!(err, Error::StaleHandle { .. }), "{name}: {err}");
    });
}

#[test]
fn spawn_watches_a_new_child_and_hands_back_its_pipes_and_no_std_child() {
    on_each_child_kernel("spawn", |name| {
        #[derive(Default)]
        struct Job {
            out: Vec<u8>,
            status: Option<ExitStatus>,
        }
        let mut lp: Loop<Job> = kernel_loop(name);
        let mut command = Command::new("sh");
        command
            .args(["-c", "read line; echo got $line; exit 4"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let (w, spawned) =
            Child::spawn(&mut lp, &mut command, |_, job, ev| job.status = ev.status).unwrap();
        assert!(lp.is_active(w).unwrap(), "{name}");
        let evloop::Spawned {
            pid,
            stdin,
            stdout,
            stderr,
        } = spawned;
        assert!(pid > 0 && stderr.is_none(), "{name}");
        let mut stdin = stdin.unwrap();
        stdin.write_all(b"ping\n").unwrap();
        drop(stdin);
        // One read per readiness: it never blocks.
        lp.io(stdout.unwrap(), Interest::READABLE, |lp, job, ev| {
            let mut buf = [0; 64];
            match ev.source.read(&mut buf).unwrap() {
                0 => lp.remove(ev.watcher).unwrap(),
                n => job.out.extend_from_slice(&buf[..n]),
            }
        })
        .unwrap();
        let job = lp.finish(Job::default());
        assert_eq!(job.out, b"got ping\n", "{name}");
        assert_eq!(job.status, Some(ExitStatus::Exited(4)), "{name}");
        // A program that cannot start: refused at the call, nothing left.
        let err = Child::spawn(
            &mut lp,
            &mut Command::new("/nonexistent/evloop-test"),
            |_, _, _| {},
        )
        .unwrap_err();
        assert!(
            matches!(&err, Error::Spawn { program, .. } if program == "/nonexistent/evloop-test"),
            "{name}: {err}"
        );
        assert_eq!(lp.active_count(), 0, "{name}");
    });
}

/// What `Child::new` documents: a fired watcher is stopped (the run
/// returns without its removal) but stays, its handle usable, until
/// removed; it cannot start again, nor send a signal.
#[test]
fn a_fired_child_watcher_is_stopped_and_stays_until_removed() {
    on_each_child_kernel("a fired watcher", |name| {
        let mut lp: Loop<u32> = kernel_loop(name);
        let (w, _) = Child::spawn(&mut lp, &mut Command::new("true"), |_, n, _| *n += 1).unwrap();
        let mut n = 0;
        assert_eq!(
            lp.run(RunMode::Default, &mut n).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}: not removed, and the run returns"
        );
        assert_eq!(n, 1, "{name}");
        assert!(!lp.is_active(w).unwrap(), "{name}: stopped");
        assert_eq!(lp.priority(w).unwrap(), 0, "{name}: still there");
        let err = lp.start(w).unwrap_err();
        assert!(matches!(err, Error::Child { .. }), "{name}: {err}");
        let err = w.kill(&mut lp, Signal::TERM).unwrap_err();
        assert!(matches!(err, Error::ChildExited { .. }), "{name}: {err}");
        lp.run_to_end(&mut n);
        assert_eq!(n, 1, "{name}: called once");
        lp.remove(w).unwrap();
        assert!(matches!(lp.is_active(w), Err(Error::StaleHandle { .. })));
    });
}
