//! The doc examples of the signal, child, async, fork and cleanup watchers
//! (and the simulator's `raise` and `call_at`), on every backend: a real
//! signal, child or thread on a kernel, its simulated counterpart on the
//! simulator.

use std::cell::Cell;
use std::io::Read;
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::sync::mpsc;
use std::time::Duration;

use crate::common::{ms, RunTo, World};
use evloop::{Async, Child, Cleanup, ExitStatus, Fork, Loop, Prepare};

tests_on!(
    every_backend,
    crate::common::backends(),
    [
        loop_signal_example,
        child_example,
        loop_spawn_example,
        loop_kill_example,
        child_event_example,
        loop_child_example,
        exit_status_unknown_example,
        loop_async_watcher_example,
        async_sender_example,
        loop_async_pending_example,
        loop_fork_example,
        loop_cleanup_example,
        sim_raise_example,
        sim_call_at_example,
    ]
);

tests_on!(
    os_backends,
    evloop::backends::AVAILABLE,
    [loop_child_two_loops_example,]
);

/// The simulator's stand-in for a child process: one that exits at once
/// with `status`, or a real one (`sh -c script`) on a kernel.
fn child_process(w: &World, script: &str, status: ExitStatus) -> u32 {
    match &w.sim {
        Some(sim) => {
            let pid = sim.spawn(script);
            sim.exit(Duration::ZERO, pid, status);
            pid
        }
        // Dropping the `Child` neither waits nor kills: the loop reaps it.
        None => Command::new("sh")
            .args(["-c", script])
            .spawn()
            .unwrap()
            .id(),
    }
}

/// Sends `signal` to this process from another one (a shell, to its
/// parent) on a kernel; on the simulator, raises it at `at`.
fn signal_from_outside(w: &World, at: Duration, signal: i32) {
    match w.sim() {
        Some(sim) => sim.raise(at, signal),
        None => {
            let kill = Command::new("sh")
                .args(["-c", &format!("kill -{signal} $PPID")])
                .status();
            assert!(kill.unwrap().success());
        }
    }
}

/// `Signal::new`: a SIGTERM sent by another process (a shell, to its
/// parent) ends the run; on the simulator, raised at 5 ms.
fn loop_signal_example(w: &World) {
    let mut lp: Loop<Vec<&str>> = w.new_loop();
    evloop::Signal::new(&mut lp, libc::SIGTERM, |lp, log, me| {
        log.push("SIGTERM");
        lp.remove(me).unwrap();
    })
    .unwrap();
    signal_from_outside(w, ms(5), libc::SIGTERM);
    assert_eq!(lp.finish(vec![]), ["SIGTERM"]);
}

/// `Child` (the handle type): the run reaps a child that exits at once.
fn child_example(w: &World) {
    let pid = child_process(w, "exit 0", ExitStatus::Exited(0));
    let mut lp: Loop = w.new_loop();
    let c = Child::new(&mut lp, pid, |_, _, _| {}).unwrap();
    assert!(lp.is_active(c).unwrap());
    lp.run_to_end(&mut ());
    assert!(!lp.is_active(c).unwrap());
}

/// `Child::spawn`: a child started and watched at once, its output read
/// from the pipe it was given; on the simulator, a simulated child that
/// exits at 1 ms (no program runs, so none fails to start).
fn loop_spawn_example(w: &World) {
    let mut lp: Loop<Option<ExitStatus>> = w.new_loop();
    let mut job = Command::new("sh");
    job.args(["-c", "echo hello; exit 3"])
        .stdout(Stdio::piped());
    let (_watcher, spawned) = Child::spawn(&mut lp, &mut job, |lp, got, ev| {
        *got = ev.status;
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    match &w.sim {
        Some(sim) => sim.exit(ms(1), spawned.pid, ExitStatus::Exited(3)),
        None => {
            let mut out = String::new();
            spawned.stdout.unwrap().read_to_string(&mut out).unwrap();
            assert_eq!(out, "hello\n");
        }
    }
    assert_eq!(lp.finish(None), Some(ExitStatus::Exited(3)));
    if w.sim.is_none() {
        let none = Child::spawn(&mut lp, &mut Command::new("/no/such/program"), |_, _, _| {});
        assert!(none.is_err());
    }
    assert_eq!(lp.active_count(), 0);
}

/// `Child::kill`: a SIGTERM ends a spawned `sleep`, and once it is reaped
/// nothing more is sent; on the simulator, the child dies of it at 1 ms.
fn loop_kill_example(w: &World) {
    let mut lp: Loop<Option<ExitStatus>> = w.new_loop();
    let (job, spawned) = Child::spawn(&mut lp, Command::new("sleep").arg("60"), |_, got, ev| {
        *got = ev.status
    })
    .unwrap();
    job.kill(&mut lp, evloop::Signal::TERM).unwrap();
    let by_term = ExitStatus::Signaled {
        signal: evloop::Signal::TERM,
        core_dumped: false,
    };
    if let Some(sim) = &w.sim {
        sim.exit(ms(1), spawned.pid, by_term);
    }
    assert_eq!(lp.finish(None), Some(by_term));
    let err = job.kill(&mut lp, evloop::Signal::TERM).unwrap_err();
    assert!(matches!(err, evloop::Error::ChildExited { .. }), "{err}");
}

/// `ChildEvent`: a child killed by SIGKILL.
fn child_event_example(w: &World) {
    let killed = ExitStatus::Signaled {
        signal: libc::SIGKILL,
        core_dumped: false,
    };
    let pid = child_process(w, "kill -KILL $$", killed);
    let mut lp: Loop<Option<ExitStatus>> = w.new_loop();
    Child::new(&mut lp, pid, move |_, got, ev| {
        assert_eq!(ev.pid, pid);
        *got = ev.status;
    })
    .unwrap();
    assert_eq!(lp.finish(None), Some(killed));
}

/// `Child::new`: the run returns once the child has exited with code 3.
fn loop_child_example(w: &World) {
    let pid = child_process(w, "exit 3", ExitStatus::Exited(3));
    let mut lp: Loop<Vec<String>> = w.new_loop();
    Child::new(&mut lp, pid, |_, log, ev| {
        log.push(ev.status.unwrap().to_string())
    })
    .unwrap();
    assert_eq!(lp.finish(vec![]), ["exited with code 3"]);
}

/// `ExitStatus::Unknown`: a child reaped by `std` before the loop looks
/// is reported as such, and the run returns; on the simulator, reaped
/// elsewhere at 0 ms.
fn exit_status_unknown_example(w: &World) {
    let mut lp: Loop<Option<ExitStatus>> = w.new_loop();
    let job = match &w.sim {
        Some(sim) => {
            let pid = sim.spawn("job");
            sim.reap_elsewhere(Duration::ZERO, pid);
            Child::new(&mut lp, pid, |_, got, ev| *got = ev.status).unwrap();
            None
        }
        None => {
            let mut job = Command::new("sh")
                .args(["-c", "read _; exit 3"])
                .stdin(Stdio::piped())
                .spawn()
                .unwrap();
            Child::new(&mut lp, job.id(), |_, got, ev| *got = ev.status).unwrap();
            drop(job.stdin.take());
            assert_eq!(job.wait().unwrap().code(), Some(3));
            Some(job)
        }
    };
    assert_eq!(lp.finish(None), Some(ExitStatus::Unknown));
    drop(job);
}

/// `Async::new`: a worker thread hands three results over while
/// the loop waits (on the simulator, which cannot wait for a thread, the
/// worker is done before the run).
fn loop_async_watcher_example(w: &World) {
    let (results, done) = mpsc::channel();
    let mut lp: Loop<Vec<u64>> = w.new_loop();
    let (_, sender) = Async::new(&mut lp, move |lp, got, me| {
        got.extend(done.try_iter());
        if got.len() == 3 {
            lp.remove(me).unwrap();
        }
    })
    .unwrap();
    let worker = std::thread::spawn(move || {
        for n in 1..=3u64 {
            results.send(n * n).unwrap();
            sender.send().ok();
        }
    });
    if w.sim.is_some() {
        worker.join().unwrap();
    }
    assert_eq!(lp.finish(vec![]), [1, 4, 9]);
}

/// `AsyncSender`: two sends, one from another thread, coalesce into one
/// call, which removes the watcher.
fn async_sender_example(w: &World) {
    let mut lp: Loop<u32> = w.new_loop();
    let (_, sender) = Async::new(&mut lp, |lp, n, me| {
        *n += 1;
        lp.remove(me).unwrap();
    })
    .unwrap();
    let other = sender.clone();
    std::thread::spawn(move || other.send().unwrap())
        .join()
        .unwrap();
    sender.send().unwrap();
    assert_eq!(lp.finish(0), 1);
    assert!(sender.send().is_err());
}

/// `Async::is_sent`: pending from a send made by a joined thread,
/// taken (not pending) in the callback, which removes the watcher.
fn loop_async_pending_example(w: &World) {
    let mut lp: Loop<Vec<(bool, bool)>> = w.new_loop();
    let (a, sender) = Async::new(&mut lp, |lp, seen, me| {
        seen.push((me.is_sent(lp).unwrap(), lp.is_pending(me).unwrap()));
        lp.remove(me).unwrap();
    })
    .unwrap();
    assert!(!a.is_sent(&lp).unwrap());
    std::thread::spawn(move || sender.send().unwrap())
        .join()
        .unwrap();
    assert!(a.is_sent(&lp).unwrap() && lp.is_pending(a).unwrap());
    assert_eq!(lp.finish(vec![]), [(false, false)]);
}

/// `Fork::new`: after `reinit_after_fork` (in the same process here, as
/// in the example), the fork watcher runs before the prepare watcher.
fn loop_fork_example(w: &World) {
    let mut lp: Loop<Vec<&str>> = w.new_loop();
    Fork::new(&mut lp, |lp, log, me| {
        log.push("fork");
        lp.remove(me).unwrap();
    })
    .unwrap();
    Prepare::new(&mut lp, |lp, log, me| {
        log.push("prepare");
        lp.remove(me).unwrap();
    })
    .unwrap();
    lp.reinit_after_fork().unwrap();
    assert_eq!(lp.finish(vec![]), ["fork", "prepare"]);
}

/// `Cleanup::new`: a cleanup watcher keeps no run going, and runs at the
/// drop.
fn loop_cleanup_example(w: &World) {
    let ran = Rc::new(Cell::new(false));
    let seen = ran.clone();
    let mut lp: Loop = w.new_loop();
    Cleanup::new(&mut lp, move |_| seen.set(true)).unwrap();
    lp.run_to_end(&mut ());
    assert!(!ran.get());
    drop(lp);
    assert!(ran.get());
}

/// `Sim::raise`: a SIGHUP (sent by a shell to its parent on a kernel, after
/// the watcher exists: unwatched, it would end the test process) is seen
/// once, and the watcher removes itself.
fn sim_raise_example(w: &World) {
    let mut lp: Loop<u32> = w.new_loop();
    evloop::Signal::new(&mut lp, libc::SIGHUP, |lp, n, me| {
        *n += 1;
        lp.remove(me).unwrap();
    })
    .unwrap();
    signal_from_outside(w, ms(1), libc::SIGHUP);
    assert_eq!(lp.finish(0), 1);
}

/// `Sim::call_at`: an async watcher woken at 7 ms by a send from outside
/// the loop (on a kernel, a thread that sends 7 ms after it starts; the
/// loop only waits for the send, whenever it comes).
fn sim_call_at_example(w: &World) {
    let mut lp: Loop<Vec<Duration>> = w.new_loop();
    let (_, sender) = Async::new(&mut lp, |lp, log, me| {
        log.push(lp.now());
        lp.remove(me).unwrap();
    })
    .unwrap();
    let worker = match &w.sim {
        Some(sim) => {
            sim.call_at(ms(7), move || sender.send().unwrap());
            None
        }
        None => Some(std::thread::spawn(move || {
            std::thread::sleep(ms(7)); // the scenario's delay, not a synchronisation
            sender.send().unwrap();
        })),
    };
    let log = lp.finish(vec![]);
    assert_eq!(log.len(), 1, "{log:?}");
    assert!(log[0] >= ms(7), "woken at {:?}", log[0]);
    if let Some(worker) = worker {
        worker.join().unwrap();
    }
}

/// `Child::new`'s second example: two loops, in two threads, watching
/// one child both hear it. Kernels only: the simulator is one loop's
/// world.
#[allow(clippy::zombie_processes)] // the loops reap it
fn loop_child_two_loops_example(w: &World) {
    let name = w.backend;
    let mut job = Command::new("sh")
        .args(["-c", "read _; exit 4"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = job.id();
    let (watching, started) = mpsc::channel();
    let other = std::thread::spawn(move || {
        let mut lp: Loop<Option<ExitStatus>> = World::new(name).new_loop();
        Child::new(&mut lp, pid, |_, got, ev| *got = ev.status).unwrap();
        watching.send(()).unwrap();
        lp.finish(None)
    });
    let mut lp: Loop<Option<ExitStatus>> = w.new_loop();
    Child::new(&mut lp, pid, |_, got, ev| *got = ev.status).unwrap();
    started.recv().unwrap();
    drop(job.stdin.take());
    assert_eq!(lp.finish(None), Some(ExitStatus::Exited(4)));
    assert_eq!(other.join().unwrap(), Some(ExitStatus::Exited(4)));
}
