//! Watchers of any child (`Child::any`, libev's child watcher of pid
//! 0) with real processes, on every OS backend and on the `SIGCHLD`
//! fallbacks, each scenario under the watchdog. (The simulator's exact
//! traces are in `tests/process_watchers_sim.rs`.)
//!
//! A binary of their own: a watcher of any child reaps every child of the
//! process, so no other test's children may be around, and the tests here
//! take turns ([`SERIAL`]). Nothing waits on a sleep: each scenario runs
//! its loops until the exits it expects have been reported.
#![cfg(unix)]
// The children here are reaped by the loops, not by std.
#![allow(clippy::zombie_processes)]

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::sync::{mpsc, Mutex};
use std::thread;

use common::{child_kernels, held, kernel_loop, spawn, wait_exited, watchdog, RunTo, WATCHDOG};
use evloop::{Child, Error, ExitStatus, Loop, RunMode, Signal};

/// One scenario at a time: each one's watcher of any child takes every
/// child of the process.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `scenario(backend)` on each of [`child_kernels`], under the
/// watchdog, holding [`SERIAL`].
fn on_each_child_kernel(what: &str, scenario: fn(&'static str)) {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for name in child_kernels() {
        watchdog(&format!("{what} on {name}"), WATCHDOG, move || {
            scenario(name)
        });
    }
}

/// The kernel after `name` in [`child_kernels`]: loops on different
/// mechanisms (pidfd, `SIGCHLD`, `EVFILT_PROC`) side by side.
fn partner(name: &str) -> &'static str {
    let all = child_kernels();
    let i = all.iter().position(|&n| n == name).unwrap();
    all[(i + 1) % all.len()]
}

/// What a watcher of any child was told, by pid.
type Seen = HashMap<u32, Vec<ExitStatus>>;

fn watch_any(lp: &mut Loop<'_, Seen>) -> evloop::Child {
    Child::any(lp, |lp, seen, ev| {
        assert!(lp.is_active(ev.watcher).unwrap(), "it stays active");
        seen.entry(ev.pid)
            .or_default()
            .push(ev.status.expect("an exit"));
    })
    .unwrap()
}

/// Runs `lp` an iteration at a time until each of `pids` was reported.
fn run_until(lp: &mut Loop<'_, Seen>, seen: &mut Seen, pids: &[u32]) {
    while !pids.iter().all(|p| seen.contains_key(p)) {
        lp.run(RunMode::Once, seen).unwrap();
    }
}

#[test]
fn a_watcher_of_any_child_reaps_every_child_reports_each_once_and_stays_active() {
    on_each_child_kernel("any child", |name| {
        let mut lp: Loop<Seen> = kernel_loop(name);
        // One that exited before the watcher started is reported too.
        let early = spawn("exit 9");
        wait_exited(early);
        let any = watch_any(&mut lp);
        let pids = [
            early,
            spawn("exit 1"),
            spawn("kill -KILL $$"),
            spawn("exit 0"),
        ];
        let mut seen = Seen::new();
        run_until(&mut lp, &mut seen, &pids);
        let killed = ExitStatus::Signaled {
            signal: Signal::KILL,
            core_dumped: false,
        };
        assert_eq!(seen[&pids[0]], [ExitStatus::Exited(9)], "{name}");
        assert_eq!(seen[&pids[1]], [ExitStatus::Exited(1)], "{name}");
        assert_eq!(seen[&pids[2]], [killed], "{name}");
        assert_eq!(seen[&pids[3]], [ExitStatus::Exited(0)], "{name}");
        assert_eq!(seen.len(), 4, "{name}: {seen:?}");
        assert!(lp.is_active(any).unwrap(), "{name}");
        // It names no one child to send a signal to.
        let err = any.kill(&mut lp, Signal::TERM).unwrap_err();
        assert!(matches!(err, Error::Kill { pid: 0, .. }), "{name}: {err}");

        // It takes children from everyone else: std's wait finds none.
        let mut taken = held(2);
        drop(taken.stdin.take());
        run_until(&mut lp, &mut seen, &[taken.id()]);
        assert_eq!(seen[&taken.id()], [ExitStatus::Exited(2)], "{name}");
        assert!(taken.wait().is_err(), "{name}: ECHILD, the loop has it");

        // Stopped, it leaves children alone again; the run has nothing
        // to wait for.
        lp.stop(any).unwrap();
        let mut mine = Command::new("sh").args(["-c", "exit 6"]).spawn().unwrap();
        lp.run_to_end(&mut seen);
        assert_eq!(mine.wait().unwrap().code(), Some(6), "{name}: std's");
        // Started again, it reaps what exited meanwhile.
        let late = spawn("exit 7");
        wait_exited(late);
        lp.start(any).unwrap();
        run_until(&mut lp, &mut seen, &[late]);
        assert_eq!(seen[&late], [ExitStatus::Exited(7)], "{name}");
        lp.remove(any).unwrap();
        assert_eq!(seen.len(), 6, "{name}: each once: {seen:?}");
    });
}

#[test]
fn many_children_exiting_together_are_each_a_call_of_their_own() {
    on_each_child_kernel("fifty at once", |name| {
        let mut lp: Loop<Seen> = kernel_loop(name);
        watch_any(&mut lp);
        let pids: Vec<u32> = (0..50).map(|i| spawn(&format!("exit {i}"))).collect();
        for &pid in &pids {
            wait_exited(pid);
        }
        let mut seen = Seen::new();
        run_until(&mut lp, &mut seen, &pids);
        for (i, pid) in pids.iter().enumerate() {
            assert_eq!(seen[pid], [ExitStatus::Exited(i as i32)], "{name}");
        }
        assert_eq!(seen.len(), 50, "{name}");
    });
}

/// A child watched by pid, on this loop and on another loop in another
/// thread, while this loop also watches any child: every watcher gets the
/// real status, once; on this loop the watcher of the pid runs first.
#[test]
fn watchers_of_a_pid_still_get_the_real_status_on_every_loop() {
    on_each_child_kernel("by pid and any", |name| {
        let other = partner(name);
        let mut job = held(5);
        let pid = job.id();
        let (watching, started) = mpsc::channel();
        let thread = thread::spawn(move || {
            let mut lp: Loop<Vec<ExitStatus>> = kernel_loop(other);
            Child::new(&mut lp, pid, |_, got, ev| got.push(ev.status.unwrap())).unwrap();
            watching.send(()).unwrap();
            lp.finish(vec![])
        });
        let mut lp: Loop<Vec<String>> = kernel_loop(name);
        Child::any(&mut lp, |_, log, ev| {
            log.push(format!("any {} {}", ev.pid, ev.status.unwrap()))
        })
        .unwrap();
        Child::new(&mut lp, pid, |_, log, ev| {
            log.push(format!("pid {} {}", ev.pid, ev.status.unwrap()))
        })
        .unwrap();
        started.recv().unwrap();
        drop(job.stdin.take());
        let mut log = vec![];
        while log.len() < 2 {
            lp.run(RunMode::Once, &mut log).unwrap();
        }
        assert_eq!(
            log,
            [
                format!("pid {pid} exited with code 5"),
                format!("any {pid} exited with code 5"),
            ],
            "{name} with {other}"
        );
        assert_eq!(thread.join().unwrap(), [ExitStatus::Exited(5)], "{other}");
    });
}

/// A child reaped by another loop's watcher of its pid (in the same
/// thread, so that it certainly reaps first) reaches the watcher of any
/// child too, with its status.
#[test]
fn exits_reaped_by_another_loops_watcher_of_the_pid_reach_a_watcher_of_any_child() {
    on_each_child_kernel("reaped by the other loop", |name| {
        let mut any_loop: Loop<Seen> = kernel_loop(partner(name));
        watch_any(&mut any_loop);
        let mut by_pid: Loop<Vec<ExitStatus>> = kernel_loop(name);
        let mut job = held(3);
        let pid = job.id();
        Child::new(&mut by_pid, pid, |_, got, ev| got.push(ev.status.unwrap())).unwrap();
        drop(job.stdin.take());
        assert_eq!(by_pid.finish(vec![]), [ExitStatus::Exited(3)], "{name}");
        let mut seen = Seen::new();
        run_until(&mut any_loop, &mut seen, &[pid]);
        assert_eq!(seen[&pid], [ExitStatus::Exited(3)], "{name}");
    });
}

/// `Child::spawn` starts and watches a child under the lock that every
/// loop reaps under: a watcher of any child in another thread, reaping as
/// fast as children exit, never takes one before it is watched, and both
/// loops get every real status.
#[test]
fn spawn_loses_no_child_to_a_watcher_of_any_child_in_another_thread() {
    on_each_child_kernel("spawn against any", |name| {
        const N: usize = 20;
        let other = partner(name);
        let (watching, started) = mpsc::channel();
        let thread = thread::spawn(move || {
            let mut lp: Loop<Seen> = kernel_loop(other);
            watch_any(&mut lp);
            watching.send(()).unwrap();
            let mut seen = Seen::new();
            while seen.len() < N {
                lp.run(RunMode::Once, &mut seen).unwrap();
            }
            seen
        });
        started.recv().unwrap();
        let mut lp: Loop<Seen> = kernel_loop(name);
        let mut codes = HashMap::new();
        for i in 0..N {
            let (_, spawned) = Child::spawn(
                &mut lp,
                Command::new("sh").args(["-c", &format!("exit {i}")]),
                |lp, seen, ev| {
                    seen.entry(ev.pid).or_default().push(ev.status.unwrap());
                    lp.remove(ev.watcher).unwrap();
                },
            )
            .unwrap_or_else(|e| panic!("{name}: child {i}: {e}"));
            codes.insert(spawned.pid, ExitStatus::Exited(i as i32));
        }
        let seen = lp.finish(Seen::new());
        let theirs = thread.join().unwrap();
        for (pid, status) in &codes {
            assert_eq!(seen[pid], [*status], "{name}: pid {pid}");
            assert_eq!(theirs[pid], [*status], "{other}: pid {pid}");
        }
        assert_eq!((seen.len(), theirs.len()), (N, N), "{name}");
    });
}
