//! Signal, child, async, fork and cleanup watchers on the simulator, with
//! exact traces: signal arrivals, child exits and async sends scheduled at
//! virtual times. (The same behaviour on the kernels is in
//! `tests/process_watchers.rs`.)

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use common::{sim_socket, trace_with, RunTo};
use evloop::{
    Async, Check, Child, Cleanup, Error, ExitStatus, Fork, Idle, Interest, Loop, Prepare, Ready,
    RunMode, RunOutcome, Signal, Sim,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ---- signals -----------------------------------------------------------------

#[test]
fn every_watcher_of_a_signal_runs_once_per_iteration_in_which_it_arrived() {
    let sim = Sim::new();
    // Three arrivals of SIGTERM at 1ms coalesce; the one at 4ms is another.
    for _ in 0..3 {
        sim.raise(ms(1), evloop::Signal::TERM);
    }
    sim.raise(ms(1), evloop::Signal::HUP);
    sim.raise(ms(4), evloop::Signal::TERM);
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    let mut handles = vec![];
    for name in ["a", "b"] {
        let h = Signal::new(&mut lp, evloop::Signal::TERM, move |lp, log, _| {
            log.push(format!("{name}: TERM at {:?}", lp.now()))
        })
        .unwrap();
        handles.push(h);
    }
    let hup = Signal::new(&mut lp, evloop::Signal::HUP, |lp, log, _| {
        log.push(format!("HUP at {:?}", lp.now()))
    })
    .unwrap();
    handles.push(hup);
    // Ends the test at 10ms.
    lp.timer(ms(10), Duration::ZERO, move |lp, _, _| {
        for &h in &handles {
            lp.remove(h).unwrap();
        }
    })
    .unwrap();
    let log = lp.finish(vec![]);
    assert_eq!(
        log,
        [
            // By signal number (SIGHUP is 1), then in start order.
            "HUP at 1ms",
            "a: TERM at 1ms",
            "b: TERM at 1ms",
            "a: TERM at 4ms",
            "b: TERM at 4ms",
        ]
    );
    assert!(sim.watched_signals().is_empty(), "the last stop unwatches");
    let lines = sim.trace_lines();
    assert_eq!(lines.iter().filter(|l| l.ends_with("signal 15")).count(), 4);
}

#[test]
fn signals_that_cannot_be_watched_are_refused() {
    let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    for (signal, why) in [
        (evloop::Signal::KILL, "cannot be caught"),
        (evloop::Signal::STOP, "cannot be caught"),
        (0, "numbered from 1"),
        (65, "numbered from 1"),
        (-1, "numbered from 1"),
    ] {
        let err = Signal::new(&mut lp, signal, |_, _, _| {}).unwrap_err();
        assert!(
            matches!(err, Error::InvalidSignal { signal: s, .. } if s == signal),
            "{err}"
        );
        assert!(err.to_string().contains(why), "{err}");
    }
    assert_eq!(lp.active_count(), 0);
}

/// A loop on the simulator where a byte and `signal` both arrive at 2 ms:
/// its io watcher logs "io", its watcher of `signal` logs `name`, and each
/// removes itself.
fn io_and_signal_at_once(
    signal: i32,
    name: &'static str,
) -> (Loop<'static, Vec<&'static str>>, evloop::Signal) {
    let (sim, sock) = sim_socket("s", 0);
    sim.deliver(ms(2), &sock, b"x");
    sim.raise(ms(2), signal);
    let mut lp: Loop<Vec<&str>> = Loop::with_backend(sim.backend());
    lp.io(sock, Interest::READABLE, |lp, log, ev| {
        log.push("io");
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    let watcher = Signal::new(&mut lp, signal, move |lp, log, me| {
        log.push(name);
        lp.remove(me).unwrap();
    })
    .unwrap();
    (lp, watcher)
}

#[test]
fn a_signal_watcher_at_a_higher_priority_runs_before_io() {
    let (mut lp, usr1) = io_and_signal_at_once(evloop::Signal::USR1, "usr1");
    lp.set_priority(usr1, 1).unwrap();
    assert_eq!(lp.finish(vec![]), ["usr1", "io"]);
}

#[test]
fn at_the_default_priority_signals_come_after_io_and_before_checks() {
    let (mut lp, _) = io_and_signal_at_once(evloop::Signal::USR2, "usr2");
    let check = Check::new(&mut lp, |_, log, _| log.push("check")).unwrap();
    lp.set_ref(check, false).unwrap();
    assert_eq!(lp.finish(vec![]), ["io", "usr2", "check"]);
}

#[test]
fn in_one_iteration_signals_come_before_child_exits_async_sends_and_checks() {
    // Whichever watcher was created first: the order within one priority
    // is io, signals, child exits, async sends, check watchers.
    let sim = Sim::new();
    let job = sim.spawn("job");
    sim.raise(Duration::ZERO, evloop::Signal::USR1);
    sim.exit(Duration::ZERO, job, ExitStatus::Exited(0));
    let mut lp: Loop<Vec<&str>> = Loop::with_backend(sim.backend());
    let check = Check::new(&mut lp, |_, log, _| log.push("check")).unwrap();
    lp.set_ref(check, false).unwrap();
    let (_, sender) = Async::new(&mut lp, |lp, log, me| {
        log.push("async");
        lp.remove(me).unwrap();
    })
    .unwrap();
    Child::new(&mut lp, job, |lp, log, ev| {
        log.push("child");
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    Signal::new(&mut lp, evloop::Signal::USR1, |lp, log, me| {
        log.push("usr1");
        lp.remove(me).unwrap();
    })
    .unwrap();
    sender.send().unwrap();
    let mut log = vec![];
    lp.run(RunMode::Once, &mut log).unwrap();
    assert_eq!(log, ["usr1", "child", "async", "check"]);
}

// ---- children ----------------------------------------------------------------

#[test]
fn a_child_is_reported_once_with_how_it_ended_even_if_it_exited_before() {
    let sim = Sim::new();
    let early = sim.spawn("early");
    let late = sim.spawn("late");
    let killed = sim.spawn("killed");
    sim.exit(Duration::ZERO, early, ExitStatus::Exited(3));
    sim.exit(ms(5), late, ExitStatus::Exited(0));
    sim.exit(
        ms(6),
        killed,
        ExitStatus::Signaled {
            signal: evloop::Signal::KILL,
            core_dumped: false,
        },
    );
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    // Let `early` exit before anyone watches it.
    lp.timer(ms(1), Duration::ZERO, |_, _, _| {}).unwrap();
    lp.run(RunMode::Default, &mut vec![]).unwrap();
    let mut watchers = vec![];
    for pid in [early, late, killed] {
        let w = Child::new(&mut lp, pid, move |lp, log, ev| {
            assert_eq!(ev.pid, pid);
            assert!(
                !lp.is_active(ev.watcher).unwrap(),
                "stopped: the child is gone"
            );
            log.push(format!(
                "{} {} at {:?}",
                sim_name(pid),
                ev.status.unwrap(),
                lp.now()
            ));
        })
        .unwrap();
        watchers.push(w);
    }
    // A second watcher of the same child hears it too.
    Child::new(&mut lp, late, |_, log, ev| {
        log.push(format!("again: {}", ev.status.unwrap()))
    })
    .unwrap();
    let log = lp.finish(vec![]);
    assert_eq!(
        log,
        [
            "early exited with code 3 at 1ms",
            "late exited with code 0 at 5ms",
            "again: exited with code 0",
            "killed killed by signal 9 at 6ms",
        ]
    );
    // Reaped: it cannot be watched again.
    let err = lp.start(watchers[0]).unwrap_err();
    assert!(
        matches!(err, Error::Child { pid, .. } if pid == early),
        "{err}"
    );

    fn sim_name(pid: u32) -> &'static str {
        match pid % 1000 {
            0 => "early",
            1 => "late",
            _ => "killed",
        }
    }
}

#[test]
fn a_pid_that_is_not_a_child_is_refused() {
    let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    let err = Child::new(&mut lp, 4242, |_, _, _| {}).unwrap_err();
    assert!(matches!(err, Error::Child { pid: 4242, .. }), "{err}");
    assert!(err.to_string().contains("4242"), "{err}");
    assert_eq!(lp.active_count(), 0);
}

#[test]
fn a_hundred_children_exiting_at_once_are_each_reported_once() {
    let sim = Sim::new();
    let pids: Vec<u32> = (0..100).map(|i| sim.spawn(&format!("c{i}"))).collect();
    for (i, &pid) in pids.iter().enumerate() {
        sim.exit(ms(3), pid, ExitStatus::Exited(i as i32));
    }
    let mut lp: Loop<Vec<(u32, ExitStatus)>> = Loop::with_backend(sim.backend());
    for &pid in &pids {
        Child::new(&mut lp, pid, |_, got, ev| {
            got.push((ev.pid, ev.status.unwrap()))
        })
        .unwrap();
    }
    let got = lp.finish(vec![]);
    let want: Vec<_> = pids
        .iter()
        .enumerate()
        .map(|(i, &p)| (p, ExitStatus::Exited(i as i32)))
        .collect();
    assert_eq!(got, want);
}

/// The loop side of a child reaped by someone else, exactly: its
/// watchers are stopped and called with `ExitStatus::Unknown` at the
/// moment of the reap, and the run returns; an unwatched child reaped
/// elsewhere can no longer be watched; a later exit of it is nothing.
#[test]
fn a_child_reaped_elsewhere_stops_its_watchers_with_an_unknown_status() {
    let sim = Sim::new();
    let watched = sim.spawn("watched");
    let gone = sim.spawn("gone");
    sim.reap_elsewhere(ms(4), watched);
    sim.exit(ms(6), watched, ExitStatus::Exited(1)); // too late: reaped
    sim.reap_elsewhere(Duration::ZERO, gone);
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    for tag in ["first", "second"] {
        Child::new(&mut lp, watched, move |lp, log, ev| {
            assert!(!lp.is_active(ev.watcher).unwrap());
            log.push(format!("{tag}: {} at {:?}", ev.status.unwrap(), lp.now()));
        })
        .unwrap();
    }
    let mut log = lp.finish(vec![]);
    assert_eq!(
        log,
        [
            "first: reaped elsewhere, exit status unknown at 4ms",
            "second: reaped elsewhere, exit status unknown at 4ms",
        ]
    );
    let trace = sim.trace_lines();
    assert!(
        trace.contains(&format!(
            "t=0ns child {gone} reaped elsewhere, exit status unknown (not watched)"
        )),
        "{trace:#?}"
    );
    assert!(
        trace.contains(&format!(
            "t=4ms child {watched} reaped elsewhere, exit status unknown"
        )),
        "{trace:#?}"
    );
    let err = Child::new(&mut lp, gone, |_, _, _| {}).unwrap_err();
    assert!(
        matches!(err, Error::Child { pid, .. } if pid == gone),
        "{err}"
    );
    // Its scheduled exit comes after the reap: nothing is told again.
    lp.timer(ms(10), Duration::ZERO, |_, _, _| {}).unwrap();
    lp.run(RunMode::Default, &mut log).unwrap();
    assert_eq!(log.len(), 2, "{log:?}");
}

// ---- async ---------------------------------------------------------------------

#[test]
fn sends_coalesce_until_the_callback_runs_and_a_send_from_it_runs_it_again() {
    let sim = Sim::new();
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    let mut calls = 0;
    let (_, sender) = Async::new(&mut lp, move |lp, log, me| {
        calls += 1;
        log.push(format!("call {calls} at {:?}", lp.now()));
        match calls {
            // Sent again from inside: runs again, next iteration.
            1 => me.sender(lp).unwrap().send().unwrap(),
            2 => {}
            _ => lp.remove(me).unwrap(),
        }
    })
    .unwrap();
    let s = sender.clone();
    sim.call_at(ms(5), move || {
        for _ in 0..3 {
            s.send().unwrap();
        }
    });
    let s = sender.clone();
    sim.call_at(ms(9), move || s.send().unwrap());
    assert_eq!(
        lp.finish(vec![]),
        ["call 1 at 5ms", "call 2 at 5ms", "call 3 at 9ms"]
    );
    let lines = sim.trace_lines();
    assert!(lines.contains(&"t=5ms woken".to_string()), "{lines:?}");
    assert!(matches!(
        sender.send(),
        Err(Error::WatcherGone { kind: "async" })
    ));
}

#[test]
fn a_stopped_async_watcher_drops_sends_and_a_dropped_loop_is_reported() {
    let sim = Sim::new();
    let mut lp: Loop<u32> = Loop::with_backend(sim.backend());
    let (a, sender) = Async::new(&mut lp, |_, n, _| *n += 1).unwrap();
    lp.stop(a).unwrap();
    sender.send().unwrap();
    lp.start(a).unwrap();
    let mut n = 0;
    lp.run(RunMode::NoWait, &mut n).unwrap();
    assert_eq!(n, 0, "sent while stopped: dropped");
    sender.send().unwrap();
    lp.run(RunMode::NoWait, &mut n).unwrap();
    assert_eq!(n, 1);
    drop(lp);
    assert!(matches!(sender.send(), Err(Error::WatcherGone { .. })));
}

// ---- fork and cleanup ----------------------------------------------------------

#[test]
fn after_reinit_fork_watchers_run_first_signals_keep_working_children_stop() {
    let sim = Sim::new();
    let pid = sim.spawn("parent's child");
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    let child = Child::new(&mut lp, pid, |_, log, _| log.push("child".into())).unwrap();
    Signal::new(&mut lp, evloop::Signal::TERM, |lp, log, me| {
        log.push("TERM".into());
        lp.remove(me).unwrap();
    })
    .unwrap();
    Fork::new(&mut lp, |lp, log, me| {
        log.push("fork".into());
        lp.remove(me).unwrap();
    })
    .unwrap();
    Prepare::new(&mut lp, |lp, log, me| {
        log.push("prepare".into());
        lp.remove(me).unwrap();
    })
    .unwrap();
    lp.reinit_after_fork().unwrap();
    assert!(
        !lp.is_active(child).unwrap(),
        "the parent's child is not ours"
    );
    assert!(
        sim.watched_signals().contains(evloop::Signal::TERM),
        "watched again"
    );
    sim.raise(ms(1), evloop::Signal::TERM);
    assert_eq!(lp.finish(vec![]), ["fork", "prepare", "TERM"]);
}

#[test]
fn cleanup_watchers_run_once_at_drop_in_start_order_and_keep_nothing_alive() {
    let log = Rc::new(RefCell::new(Vec::<String>::new()));
    let sim = Sim::new();
    let mut lp: Loop = Loop::with_backend(sim.backend());
    let keep = Idle::new(&mut lp, |_, _, _| {}).unwrap();
    lp.stop(keep).unwrap();
    for name in ["first", "second", "stopped"] {
        let log = log.clone();
        let c = Cleanup::new(&mut lp, move |lp| {
            log.borrow_mut().push(name.to_string());
            // The loop is usable: remove another watcher.
            if name == "first" {
                lp.remove(keep).unwrap();
            }
        })
        .unwrap();
        if name == "stopped" {
            lp.stop(c).unwrap();
        }
    }
    assert_eq!(
        lp.active_count(),
        0,
        "cleanup watchers never keep the loop alive"
    );
    lp.run_to_end(&mut ());
    assert!(log.borrow().is_empty());
    drop(lp);
    assert_eq!(*log.borrow(), ["first", "second"]);
}

/// The cleanup watchers run as libev walks its list: one a cleanup
/// callback starts runs after the others, one it stops does not, one it
/// stops and starts again moves to the end. The async senders are still
/// open while they run (a send succeeds, a new sender is handed out), and
/// closed once they have: before the watchers' callbacks are dropped.
#[test]
fn cleanup_callbacks_start_and_stop_cleanups_and_see_the_senders_open() {
    let log = Rc::new(RefCell::new(Vec::<String>::new()));
    let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    let (a, sender) = Async::new(&mut lp, |_, _, _| {}).unwrap();
    // What an idle callback's captures see of the sender when they drop.
    struct OnDrop(evloop::AsyncSender, Rc<RefCell<Vec<String>>>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            let open = self.0.send().is_ok();
            let mut log = self.1.borrow_mut();
            log.push(format!("idle dropped, sender open: {open}"));
        }
    }
    let on_drop = OnDrop(sender.clone(), log.clone());
    Idle::new(&mut lp, move |_, _, _| {
        let _ = &on_drop;
    })
    .unwrap();
    // Its callback, which needs the others' handles, is set below.
    let first = Cleanup::new(&mut lp, |_| {}).unwrap();
    let l = log.clone();
    let stopped = Cleanup::new(&mut lp, move |_| l.borrow_mut().push("stopped".into())).unwrap();
    let l = log.clone();
    let moved = Cleanup::new(&mut lp, move |_| l.borrow_mut().push("moved".into())).unwrap();
    let l = log.clone();
    first
        .set_callback(&mut lp, move |lp| {
            l.borrow_mut().push("first".into());
            lp.stop(stopped).unwrap();
            lp.stop(moved).unwrap();
            let started = l.clone();
            Cleanup::new(lp, move |_| {
                started.borrow_mut().push("started by first".into())
            })
            .unwrap();
            lp.start(moved).unwrap();
            let sent = sender.send().is_ok() && a.sender(lp).unwrap().send().is_ok();
            l.borrow_mut().push(format!("sender open: {sent}"));
        })
        .unwrap();
    drop(lp);
    assert_eq!(
        *log.borrow(),
        [
            "first",
            "sender open: true",
            "started by first",
            "moved",
            "idle dropped, sender open: false",
        ]
    );
}

#[test]
fn a_fed_event_runs_a_cleanup_watcher_now_and_not_again() {
    let runs = Rc::new(RefCell::new(0));
    let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    let r = runs.clone();
    let c = Cleanup::new(&mut lp, move |_| *r.borrow_mut() += 1).unwrap();
    lp.set_ref(c, true).unwrap(); // ignored: cleanup watchers never keep it alive
    assert_eq!(lp.active_count(), 0);
    lp.feed_event(c, Ready::EMPTY).unwrap();
    lp.run(RunMode::NoWait, &mut ()).unwrap();
    assert_eq!(*runs.borrow(), 1);
    drop(lp);
    assert_eq!(*runs.borrow(), 1);
}

// ---- notices and lazily restarted timers -------------------------------------

/// The simulator as a kernel backend behaves: what a poll noticed (a
/// signal, a wake-up) is taken out of the kernel at once (the wake fd is
/// drained), so that a second poll blocks; the loop gets it only from
/// `take_notices`.
use evloop::backend::{InternalFds, NoticeService};

struct Draining {
    inner: evloop::backends::sim::SimBackend,
    held: evloop::backend::Notices,
}

impl evloop::backend::Backend for Draining {
    fn name(&self) -> &'static str {
        "draining-sim"
    }
    fn capabilities(&self) -> evloop::backend::Capabilities {
        self.inner.capabilities()
    }
    fn modify(&mut self, fd: i32, old: Interest, new: Interest) -> std::io::Result<()> {
        self.inner.modify(fd, old, new)
    }
    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<evloop::backend::PollEvent>,
    ) -> std::io::Result<evloop::backend::PollStatus> {
        let status = self.inner.poll(timeout, events)?;
        self.inner.take_notices(&mut self.held, &mut Vec::new());
        Ok(status)
    }
    fn now(&mut self) -> Duration {
        self.inner.now()
    }
    fn notices(&mut self) -> Option<&mut dyn NoticeService> {
        Some(self)
    }
}

impl NoticeService for Draining {
    fn watch_signal(&mut self, signal: i32, fds: &mut dyn InternalFds) -> std::io::Result<()> {
        self.inner.watch_signal(signal, fds)
    }
    fn unwatch_signal(&mut self, signal: i32) {
        self.inner.unwatch_signal(signal)
    }
    fn take_notices(&mut self, notices: &mut evloop::backend::Notices, _: &mut dyn InternalFds) {
        notices.signals |= self.held.signals;
        self.held.clear();
    }
}

/// A poll that ends at a lazily restarted timer's old deadline (nothing is
/// due: the loop waits on) may have been ended by a notice as well: the
/// loop must take it then, not at the timer's true deadline.
#[test]
fn a_signal_at_a_lazily_restarted_timers_old_deadline_is_not_delayed() {
    let sim = Sim::new();
    sim.raise(ms(10), evloop::Signal::USR1);
    let backend = Draining {
        inner: sim.backend(),
        held: evloop::backend::Notices::default(),
    };
    let mut lp: Loop<Vec<String>> = Loop::with_backend(backend);
    let t = lp
        .timer(ms(10), ms(100), |lp, log, _| {
            log.push(format!("timer at {:?}", lp.now()))
        })
        .unwrap();
    // Pushed back to 100 ms, lazily: its heap node still says 10 ms.
    t.again(&mut lp).unwrap();
    Signal::new(&mut lp, evloop::Signal::USR1, |lp, log, _| {
        log.push(format!("signal at {:?}", lp.now()));
        lp.break_loop(evloop::Break::All);
    })
    .unwrap();
    let mut log = vec![];
    lp.run_expect(RunMode::Default, &mut log, RunOutcome::Broken);
    assert_eq!(log, ["signal at 10ms"]);
}

// ---- any child, signals to children, spawning ---------------------------------

/// A watcher of any child on the simulator, exactly: the exit of a child
/// that exited unwatched comes at its start; a pid watcher of the same
/// child runs before it; exits of arbitrary pids (children started some
/// other way) reach it; two exits at one instant are two calls; it stays
/// active until stopped, and after that exits go unwatched.
#[test]
fn a_watcher_of_any_child_hears_every_exit_in_order_and_stays_active() {
    let sim = Sim::new();
    let early = sim.spawn("early");
    let job = sim.spawn("job");
    sim.exit(Duration::ZERO, early, ExitStatus::Exited(3));
    let killed = ExitStatus::Signaled {
        signal: Signal::KILL,
        core_dumped: false,
    };
    sim.exit(ms(2), job, ExitStatus::Exited(0));
    sim.exit(ms(2), 4242, killed);
    sim.exit(ms(5), 4343, ExitStatus::Exited(1));
    sim.exit(ms(7), 4444, ExitStatus::Exited(2));
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    // Let `early` exit before anyone watches.
    lp.timer(ms(1), Duration::ZERO, |_, _, _| {}).unwrap();
    lp.run(RunMode::Default, &mut vec![]).unwrap();
    let any = Child::any(&mut lp, |lp, log, ev| {
        assert!(lp.is_active(ev.watcher).unwrap());
        log.push(format!(
            "any: {} {} at {:?}",
            ev.pid,
            ev.status.unwrap(),
            lp.now()
        ))
    })
    .unwrap();
    Child::new(&mut lp, job, |lp, log, ev| {
        log.push(format!("job: {} at {:?}", ev.status.unwrap(), lp.now()))
    })
    .unwrap();
    // At 6ms and 8ms (the clock is at 1ms).
    lp.timer(ms(5), Duration::ZERO, move |lp, _, _| lp.stop(any).unwrap())
        .unwrap();
    lp.timer(ms(7), Duration::ZERO, |_, _, _| {}).unwrap();
    let mut log = lp.finish(vec![]);
    assert_eq!(
        log,
        [
            "any: 1000 exited with code 3 at 1ms",
            "job: exited with code 0 at 2ms",
            "any: 1001 exited with code 0 at 2ms",
            "any: 4242 killed by signal 9 at 2ms",
            "any: 4343 exited with code 1 at 5ms",
        ]
    );
    let exits: Vec<String> = trace_with(&sim, " child ");
    assert_eq!(
        exits,
        [
            "t=0ns child 1000 exited with code 3 (not watched)",
            "t=2ms child 1001 exited with code 0",
            "t=2ms child 4242 killed by signal 9",
            "t=5ms child 4343 exited with code 1",
            "t=7ms child 4444 exited with code 2 (not watched)",
        ]
    );
    // Started again: the one that exited while it was stopped comes now.
    lp.start(any).unwrap();
    lp.run(RunMode::NoWait, &mut log).unwrap();
    assert_eq!(log[5..], ["any: 4444 exited with code 2 at 8ms"]);
    // It names no one child: no signal to send.
    assert!(matches!(
        any.kill(&mut lp, Signal::TERM),
        Err(Error::Kill { pid: 0, .. })
    ));
}

#[test]
fn a_watcher_of_any_child_keeps_going_after_reinit_and_pid_zero_is_refused() {
    let sim = Sim::new();
    let mut lp: Loop<Vec<u32>> = Loop::with_backend(sim.backend());
    let err = Child::new(&mut lp, 0, |_, _, _| {}).unwrap_err();
    assert!(
        matches!(err, Error::Child { pid: 0, .. }) && err.to_string().contains("Child::any"),
        "{err}"
    );
    let parents = sim.spawn("parent's");
    let any = Child::any(&mut lp, |lp, got, ev| {
        got.push(ev.pid);
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    let by_pid = Child::new(&mut lp, parents, |_, _, _| {}).unwrap();
    lp.reinit_after_fork().unwrap();
    assert!(!lp.is_active(by_pid).unwrap(), "the parent's child");
    assert!(lp.is_active(any).unwrap(), "the child's own children");
    sim.exit(ms(1), 5000, ExitStatus::Exited(0));
    assert_eq!(lp.finish(vec![]), [5000]);
}

/// `Child::spawn` and `Child::kill` on the simulator, exactly: the spawn and
/// the signal are steps of the trace; the test makes the child die of it.
/// The fired watcher stays (stopped) until removed.
#[test]
fn a_spawned_child_is_signalled_dies_and_its_fired_watcher_stays_until_removed() {
    let sim = Sim::new();
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    let (w, spawned) = Child::spawn(
        &mut lp,
        &mut std::process::Command::new("worker"),
        |lp, log, ev| {
            log.push(format!(
                "{} {} at {:?}",
                ev.pid,
                ev.status.unwrap(),
                lp.now()
            ))
        },
    )
    .unwrap();
    assert_eq!(sim.child_name(spawned.pid).as_deref(), Some("worker"));
    assert!(spawned.stdin.is_none() && spawned.stdout.is_none());
    let by_term = ExitStatus::Signaled {
        signal: Signal::TERM,
        core_dumped: false,
    };
    let s = sim.clone();
    lp.timer(ms(3), Duration::ZERO, move |lp, _, _| {
        w.kill(lp, Signal::TERM).unwrap();
        s.exit(ms(4), spawned.pid, by_term);
    })
    .unwrap();
    assert_eq!(lp.finish(vec![]), ["1000 killed by signal 15 at 4ms"]);
    assert_eq!(sim.signals_sent(spawned.pid), [Signal::TERM]);
    let steps: Vec<String> = trace_with(&sim, "child");
    assert_eq!(
        steps,
        [
            "t=0ns spawn child 1000 (worker)",
            "t=3ms signal 15 to child 1000",
            "t=4ms child 1000 killed by signal 15",
        ]
    );
    // Fired: stopped, still there, refusing signals.
    assert!(!lp.is_active(w).unwrap());
    assert!(matches!(
        w.kill(&mut lp, Signal::TERM),
        Err(Error::ChildExited { pid: 1000, status: Some(s) }) if s == by_term
    ));
    assert!(lp.start(w).is_err());
    lp.remove(w).unwrap();
    assert_eq!(sim.signals_sent(spawned.pid), [Signal::TERM], "no more");
}
