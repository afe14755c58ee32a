//! libev's API where ported tests need it, on the simulator (exact) and on
//! every OS backend (under a watchdog): an async watcher is pending from
//! its send (`ev_async_pending`), a prepare watcher learns the timeout of
//! the poll that follows it, and the `*_set` family (a callback, a
//! periodic's schedule, a signal watcher's signal; the cached wall time).

mod common;

use std::cell::{Cell, RefCell};
use std::io::Read;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::thread;
use std::time::{Duration, SystemTime};

use common::{on_every_backend, on_every_world, Conn, RunTo, World};
use evloop::{
    Async, Break, Check, Child, Cleanup, Error, ExitStatus, Fork, Idle, Interest, Io, IoEvent,
    Loop, Periodic, Prepare, Ready, RunMode, RunOutcome, Schedule, Signal, Stat,
};

// ---- 7: an async watcher is pending from its send ------------------------------

#[test]
fn an_async_watcher_is_pending_from_its_send_until_its_callback_runs() {
    on_every_backend("async pending from its send", |name| {
        let mut lp: Loop<Vec<bool>> = World::new(name).new_loop();
        let (a, sender) = Async::new(&mut lp, |lp, seen, me| {
            // Taken by the loop: no longer pending in its own callback.
            seen.push(lp.is_pending(me).unwrap());
            lp.remove(me).unwrap();
        })
        .unwrap();
        assert!(!lp.is_pending(a).unwrap(), "{name}: not sent yet");
        sender.send().unwrap();
        assert!(lp.is_pending(a).unwrap(), "{name}: pending from the send");
        assert_eq!(lp.finish(vec![]), [false], "{name}");
    });
}

#[test]
fn an_async_watcher_sent_to_from_another_thread_is_pending_once_the_thread_is_joined() {
    on_every_backend("async pending from another thread", |name| {
        let mut lp: Loop<u32> = World::new(name).new_loop();
        let (a, sender) = Async::new(&mut lp, |_, n, _| *n += 1).unwrap();
        let other = sender.clone();
        thread::spawn(move || other.send().unwrap()).join().unwrap();
        assert!(lp.is_pending(a).unwrap(), "{name}");
        // Cleared: the send is taken back, and the callback does not run.
        lp.clear_pending(a).unwrap();
        assert!(!lp.is_pending(a).unwrap(), "{name}");
        let mut n = 0;
        lp.run(RunMode::NoWait, &mut n).unwrap();
        assert_eq!(n, 0, "{name}");
        thread::spawn(move || sender.send().unwrap())
            .join()
            .unwrap();
        assert!(lp.is_pending(a).unwrap(), "{name}");
        lp.run(RunMode::NoWait, &mut n).unwrap();
        assert_eq!(n, 1, "{name}");
        assert!(!lp.is_pending(a).unwrap(), "{name}: its callback ran");
    });
}

#[test]
fn a_send_during_its_callback_makes_an_async_watcher_pending_again_and_a_stopped_one_is_not() {
    on_every_backend("async pending: resent, stopped", |name| {
        let mut lp: Loop<Vec<(bool, bool, usize)>> = World::new(name).new_loop();
        let (a, sender) = Async::new(&mut lp, |lp, seen, me| {
            let before = lp.is_pending(me).unwrap();
            me.sender(lp).unwrap().send().unwrap();
            seen.push((before, lp.is_pending(me).unwrap(), lp.pending_count()));
            if seen.len() == 2 {
                lp.stop(me).unwrap();
            }
        })
        .unwrap();
        sender.send().unwrap();
        assert_eq!(
            (a.is_sent(&lp).unwrap(), lp.pending_count()),
            (true, 1),
            "{name}"
        );
        let seen = lp.finish(vec![]);
        // Each call resends: called twice, then stopped.
        assert_eq!(seen, [(false, true, 1); 2], "{name}");
        // Stopped: a send is dropped, and nothing is pending.
        sender.send().unwrap();
        assert!(!lp.is_pending(a).unwrap(), "{name}");
        assert!(!a.is_sent(&lp).unwrap(), "{name}");
        assert_eq!(lp.pending_count(), 0, "{name}");
        // Started again: the earlier send stays dropped.
        lp.start(a).unwrap();
        assert!(!lp.is_pending(a).unwrap(), "{name}");
    });
}

#[test]
fn a_sent_async_watcher_makes_the_poll_timeout_zero() {
    on_every_backend("async send: zero timeout", |name| {
        let mut lp: Loop = World::new(name).new_loop();
        let (_, sender) = Async::new(&mut lp, |_, _, _| {}).unwrap();
        lp.timer(Duration::from_secs(60), Duration::ZERO, |_, _, _| {})
            .unwrap();
        assert!(
            lp.backend_timeout().unwrap() > Duration::from_secs(50),
            "{name}"
        );
        sender.send().unwrap();
        assert_eq!(lp.backend_timeout(), Some(Duration::ZERO), "{name}");
    });
}

/// Fed and sent: one callback is due, counted once, and `clear_pending`
/// takes back both the queued invocation and the send.
#[test]
fn an_async_watcher_fed_and_sent_is_pending_once() {
    on_every_backend("async fed and sent", |name| {
        let mut lp: Loop<u32> = World::new(name).new_loop();
        let (a, sender) = Async::new(&mut lp, |_, n, _| *n += 1).unwrap();
        lp.feed_event(a, Ready::EMPTY).unwrap();
        sender.send().unwrap();
        assert!(lp.is_pending(a).unwrap(), "{name}");
        assert_eq!(lp.pending_count(), 1, "{name}: one callback");
        assert_eq!(lp.backend_timeout(), Some(Duration::ZERO), "{name}");
        lp.clear_pending(a).unwrap();
        assert!(!lp.is_pending(a).unwrap(), "{name}");
        assert!(!a.is_sent(&lp).unwrap(), "{name}");
        assert_eq!(lp.pending_count(), 0, "{name}");
        let mut n = 0;
        lp.run(RunMode::NoWait, &mut n).unwrap();
        assert_eq!(n, 0, "{name}: nothing was left to call");
    });
}

// ---- 9: a prepare watcher learns the timeout of the poll that follows it ------

/// The timeout each of three prepare watchers sees before the first poll,
/// with a timer `after` from now and nothing else to do. The last one
/// breaks the run, which then returns before it polls.
fn timeouts_seen_by_prepares(name: &'static str, after: Duration) -> Vec<Option<Duration>> {
    let mut lp: Loop<Vec<Option<Duration>>> = World::new(name).new_loop();
    for _ in 0..3 {
        Prepare::new(&mut lp, |lp, seen, _| {
            seen.push(lp.backend_timeout());
            if seen.len() == 3 {
                lp.break_loop(Break::One);
            }
        })
        .unwrap();
    }
    lp.timer(after, Duration::ZERO, |_, _, _| {}).unwrap();
    let mut seen = vec![];
    let outcome = lp.run(RunMode::Once, &mut seen).unwrap();
    assert_eq!(outcome, RunOutcome::Broken, "{name}");
    seen
}

#[test]
fn prepare_watchers_learn_the_timeout_of_the_poll_that_follows_them_on_the_simulator() {
    on_sim(
        "prepare_watchers_learn_the_timeout_of_the_poll_that_follows_them_on_the_simulator",
        || {
            let seen = timeouts_seen_by_prepares("sim", Duration::from_secs(1));
            assert_eq!(seen, [Some(Duration::from_secs(1)); 3]);
        },
    );
}

#[test]
fn what_a_prepare_watcher_feeds_runs_before_the_poll_and_no_wait_runs_never_block() {
    on_sim(
        "what_a_prepare_watcher_feeds_runs_before_the_poll_and_no_wait_runs_never_block",
        || {
            let sim = evloop::Sim::new();
            let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
            let t = lp
                .timer(Duration::from_secs(5), Duration::ZERO, |lp, log, _| {
                    log.push(format!("timer at {:?}", lp.now()))
                })
                .unwrap();
            let other = Check::new(&mut lp, |_, log, _| log.push("check".into())).unwrap();
            lp.stop(other).unwrap();
            Prepare::new(&mut lp, move |lp, log, _| {
                // Fed here, invoked before the poll: the wait is still the timer's.
                lp.feed_event(other, evloop::Ready::EMPTY).unwrap();
                log.push(format!("prepare {:?}", lp.backend_timeout()));
            })
            .unwrap();
            let mut log = vec![];
            lp.run(RunMode::NoWait, &mut log).unwrap();
            lp.run(RunMode::Once, &mut log).unwrap();
            assert_eq!(
                log,
                [
                    "prepare Some(0ns)", // NoWait: the poll does not block
                    "check",
                    "prepare Some(5s)",
                    "check",
                    "timer at 5s",
                ]
            );
            // Outside run, a pending invocation counts (libuv's rule).
            lp.feed_event(t, evloop::Ready::EMPTY).unwrap();
            assert_eq!(lp.backend_timeout(), Some(Duration::ZERO));
        },
    );
}

#[test]
fn a_nested_run_in_a_prepare_callback_has_its_own_phase() {
    on_sim(
        "a_nested_run_in_a_prepare_callback_has_its_own_phase",
        || {
            let sim = evloop::Sim::new();
            let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
            lp.timer(Duration::from_secs(2), Duration::ZERO, |_, _, _| {})
                .unwrap();
            let idle = Idle::new(&mut lp, |lp, log, me| {
                // Invoked by the nested run: not a prepare phase, and an idle
                // watcher makes every poll zero anyway.
                log.push(format!("idle {:?}", lp.backend_timeout()));
                lp.stop(me).unwrap();
            })
            .unwrap();
            lp.stop(idle).unwrap();
            Prepare::new(&mut lp, move |lp, log, me| {
                log.push(format!("outer {:?}", lp.backend_timeout()));
                lp.stop(me).unwrap();
                lp.start(idle).unwrap();
                lp.run(RunMode::NoWait, log).unwrap();
                log.push(format!("back {:?}", lp.backend_timeout()));
                lp.break_loop(Break::One);
            })
            .unwrap();
            let mut log = vec![];
            lp.run_expect(RunMode::Default, &mut log, RunOutcome::Broken);
            assert_eq!(log, ["outer Some(2s)", "idle Some(0ns)", "back Some(2s)"]);
        },
    );
}

#[test]
fn prepare_watchers_learn_the_timeout_of_the_poll_that_follows_them_on_every_backend() {
    on_every_backend("prepare learns the poll timeout", |name| {
        let seen = timeouts_seen_by_prepares(name, Duration::from_secs(60));
        assert_eq!(seen.len(), 3, "{name}");
        for t in seen {
            // Within a minute whatever the machine's speed; never zero.
            let t = t.unwrap_or_else(|| panic!("{name}: a timer bounds the wait"));
            assert!(t <= Duration::from_secs(60), "{name}: {t:?}");
            assert!(t > Duration::from_secs(50), "{name}: {t:?}");
        }
    });
}

/// Runs a simulator-only scenario under the watchdog.
fn on_sim(what: &str, scenario: fn()) {
    common::watchdog(what, common::WATCHDOG, scenario);
}

// ---- 10: the *_set family --------------------------------------------------------

type Log = Vec<String>;

/// Every kind's callback replaced (while stopped, or active), then invoked
/// by a fed event: only the new callbacks run, in feed order, and each
/// gets what its kind passes (a child watcher its pid, a stat watcher its
/// path's attributes, an io watcher its source).
#[test]
fn set_callback_replaces_the_callback_of_every_kind() {
    on_every_world("set_callback, every kind", |w| {
        let mut lp: Loop<Log> = w.new_loop();
        let far = Duration::from_secs(3600);
        let t = lp.timer(far, Duration::ZERO, old("timer")).unwrap();
        let later = lp.read_wall_clock() + far;
        let p = Periodic::new(&mut lp, Schedule::At(later), old("periodic")).unwrap();
        let i = Idle::new(&mut lp, old("idle")).unwrap();
        let pr = Prepare::new(&mut lp, old("prepare")).unwrap();
        let c = Check::new(&mut lp, old("check")).unwrap();
        let s = Signal::new(&mut lp, libc::SIGURG, old("signal")).unwrap();
        let (a, _sender) = Async::new(&mut lp, old("async")).unwrap();
        let f = Fork::new(&mut lp, old("fork")).unwrap();
        let st = Stat::new(
            &mut lp,
            "/nonexistent/evloop-libev-api",
            far,
            |_, log, _| log.push("old stat".into()),
        )
        .unwrap();
        // Stopped ones (those that would run by themselves) and active ones.
        for h in [i.into(), pr.into(), c.into(), s.into()] {
            stop_any(&mut lp, h);
        }
        lp.set_callback(t, |lp, log, me| {
            log.push(format!("new timer {}", me.remaining(lp).is_ok()))
        })
        .unwrap();
        lp.set_callback(p, |_, log, _| log.push("new periodic".into()))
            .unwrap();
        lp.set_callback(i, |_, log, _| log.push("new idle".into()))
            .unwrap();
        lp.set_callback(pr, |_, log, _| log.push("new prepare".into()))
            .unwrap();
        lp.set_callback(c, |_, log, _| log.push("new check".into()))
            .unwrap();
        lp.set_callback(s, |lp, log, me| {
            log.push(format!("new signal {}", me.number(lp).unwrap()))
        })
        .unwrap();
        lp.set_callback(a, |_, log, _| log.push("new async".into()))
            .unwrap();
        lp.set_callback(f, |_, log, _| log.push("new fork".into()))
            .unwrap();
        lp.set_callback(st, |_, log, ev| {
            log.push(format!("new stat exists={}", ev.current.exists))
        })
        .unwrap();
        let (conn, _peer) = w.pair();
        let io = lp
            .io(conn, Interest::READABLE, |_, log, _| {
                log.push("old io".into())
            })
            .unwrap();
        io.set_callback(&mut lp, |_, log, ev: IoEvent<'_, Conn>| {
            log.push(format!("new io {}", matches!(ev.source, Conn::Sim(_))))
        })
        .unwrap();
        lp.feed_event(t, Ready::EMPTY).unwrap();
        lp.feed_event(p, Ready::EMPTY).unwrap();
        lp.feed_event(i, Ready::EMPTY).unwrap();
        lp.feed_event(pr, Ready::EMPTY).unwrap();
        lp.feed_event(c, Ready::EMPTY).unwrap();
        lp.feed_event(s, Ready::EMPTY).unwrap();
        lp.feed_event(a, Ready::EMPTY).unwrap();
        lp.feed_event(f, Ready::EMPTY).unwrap();
        lp.feed_event(st, Ready::EMPTY).unwrap();
        lp.feed_event(io, Ready::READABLE).unwrap();
        let mut log = vec![];
        lp.run(RunMode::NoWait, &mut log).unwrap();
        let sim = w.backend == "sim";
        assert_eq!(
            log,
            [
                "new timer true".to_string(),
                "new periodic".into(),
                "new idle".into(),
                "new prepare".into(),
                "new check".into(),
                format!("new signal {}", libc::SIGURG),
                "new async".into(),
                "new fork".into(),
                "new stat exists=false".into(),
                format!("new io {sim}"),
            ]
        );
        // The watchers kept their state.
        assert!(lp.is_active(t).unwrap() && lp.is_active(io).unwrap());
        assert!(!lp.is_active(i).unwrap() && !lp.is_active(s).unwrap());
        // The new io callback holds the source: it can be taken back.
        let _: Conn = io.into_source(&mut lp).unwrap();
    });
}

/// A callback that logs "old {kind}": it must never run.
fn old<'s, H>(kind: &'static str) -> impl FnMut(&mut Loop<'s, Log>, &mut Log, H) + 's {
    move |_, log, _| log.push(format!("old {kind}"))
}

/// Stops any of the watchers `set_callback_replaces_the_callback_of_every_kind` stops.
fn stop_any(lp: &mut Loop<Log>, h: AnyHandle) {
    match h {
        AnyHandle::Idle(h) => lp.stop(h).unwrap(),
        AnyHandle::Prepare(h) => lp.stop(h).unwrap(),
        AnyHandle::Check(h) => lp.stop(h).unwrap(),
        AnyHandle::Signal(h) => lp.stop(h).unwrap(),
    }
}

enum AnyHandle {
    Idle(Idle),
    Prepare(Prepare),
    Check(Check),
    Signal(Signal),
}

impl From<Idle> for AnyHandle {
    fn from(h: Idle) -> Self {
        AnyHandle::Idle(h)
    }
}
impl From<Prepare> for AnyHandle {
    fn from(h: Prepare) -> Self {
        AnyHandle::Prepare(h)
    }
}
impl From<Check> for AnyHandle {
    fn from(h: Check) -> Self {
        AnyHandle::Check(h)
    }
}
impl From<Signal> for AnyHandle {
    fn from(h: Signal) -> Self {
        AnyHandle::Signal(h)
    }
}

/// A child watcher's new callback gets the exit, with the pid (the
/// adaptor no longer keeps it: it reads the watcher's).
#[test]
fn a_child_watchers_new_callback_gets_its_exit() {
    on_every_world("set_callback, child", |w| {
        let mut lp: Loop<Log> = w.new_loop();
        let pid = match &w.sim {
            Some(sim) => {
                let pid = sim.spawn("job");
                sim.exit(Duration::from_millis(5), pid, ExitStatus::Exited(3));
                pid
            }
            None => common::spawn("exit 3"),
        };
        let ch = Child::new(&mut lp, pid, old("child")).unwrap();
        lp.set_callback(ch, move |_, log, ev| {
            assert_eq!(ev.pid, pid);
            log.push(format!("new child {:?}", ev.status));
        })
        .unwrap();
        assert_eq!(lp.finish(vec![]), ["new child Some(Exited(3))"]);
    });
}

/// From its own callback: the running callback finishes, the new one is
/// called from then on (a nested run included), events deferred meanwhile
/// reach it, and the old one is dropped when it returns.
#[test]
fn a_callback_replaced_while_it_runs_finishes_and_the_new_one_takes_over() {
    on_sim("replaced while running", replaced_while_running);
}

fn replaced_while_running() {
    let sim = evloop::Sim::new();
    let mut lp: Loop<Log> = Loop::with_backend(sim.backend());
    let dropped = Rc::new(Cell::new(false));
    let guard = DropFlag(dropped.clone(), false);
    let seen = dropped.clone();
    let i = Idle::new(&mut lp, move |lp, log, me| {
        let _keep = &guard;
        log.push("old, start".into());
        // Invoked by a nested run while it runs: deferred (its
        // callback is out), and the nested run has nothing else.
        lp.feed_event(me, Ready::EMPTY).unwrap();
        let outcome = lp.run(RunMode::NoWait, log).unwrap();
        assert_eq!(outcome, RunOutcome::NoActiveWatchers);
        let seen = seen.clone();
        lp.set_callback(me, move |lp, log, me| {
            log.push(format!("new, old dropped: {}", seen.get()));
            if log.len() >= 5 {
                lp.remove(me).unwrap();
            }
        })
        .unwrap();
        // A nested run invokes the new callback, which is in place:
        // the event fed, then the idle of its iteration.
        lp.feed_event(me, Ready::EMPTY).unwrap();
        lp.run(RunMode::NoWait, log).unwrap();
        log.push("old, end".into());
    })
    .unwrap();
    let log = lp.finish(vec![]);
    assert_eq!(
        log,
        [
            "old, start",
            // The second nested run: the event fed, then the one the
            // first deferred (queued when a callback is back in place),
            // then its idle.
            "new, old dropped: false",
            "new, old dropped: false",
            "new, old dropped: false",
            "old, end",
            "new, old dropped: true", // the next iteration's idle
        ]
    );
    assert!(lp.is_active(i).is_err(), "removed");
}

/// Sets its flag when dropped; panics then if told to.
struct DropFlag(Rc<Cell<bool>>, bool);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.set(true);
        if self.1 {
            panic!("a panicking drop");
        }
    }
}

#[test]
fn the_old_callback_is_dropped_at_once_and_a_panic_in_its_drop_leaves_the_new_one_in_place() {
    on_every_backend("set_callback: drop of the old one", |name| {
        let mut lp: Loop<Log> = World::new(name).new_loop();
        let dropped = Rc::new(Cell::new(false));
        let guard = DropFlag(dropped.clone(), false);
        let t = lp
            .timer(Duration::from_secs(3600), Duration::ZERO, move |_, _, _| {
                let _keep = &guard;
            })
            .unwrap();
        lp.set_callback(t, |_, log, _| log.push("second".into()))
            .unwrap();
        assert!(dropped.get(), "{name}: dropped by set_callback");

        let panics = DropFlag(Rc::new(Cell::new(false)), true);
        lp.set_callback(t, move |_, _, _| {
            let _keep = &panics;
        })
        .unwrap();
        let caught = catch_unwind(AssertUnwindSafe(|| {
            lp.set_callback(t, |lp, log, me| {
                log.push("third".into());
                lp.remove(me).unwrap();
            })
        }));
        assert!(caught.is_err(), "{name}: the drop's panic propagates");
        assert!(lp.is_active(t).unwrap(), "{name}");
        assert_eq!(lp.active_count(), 1, "{name}");
        lp.feed_event(t, Ready::EMPTY).unwrap();
        assert_eq!(lp.finish(vec![]), ["third"], "{name}");
    });
}

#[test]
fn io_callbacks_keep_their_source_and_refuse_what_cannot_work() {
    on_every_world("set_io_callback", |w| {
        let (other, _other_peer) = w.pair();
        let mut lp: Loop<Log> = w.new_loop();
        let (conn, mut peer) = w.pair();
        let io = lp
            .io(conn, Interest::READABLE, |lp, log, ev| {
                // From its own callback: the callback holds the source.
                let busy = ev.watcher.set_callback(lp, |_, _, _: IoEvent<'_, Conn>| {});
                log.push(format!("old: {busy:?}"));
                let data = common::drain(ev.source);
                log.push(format!("old read {}", data.len()));
            })
            .unwrap();
        // Not the source's type, or not a borrowed one: refused, kept.
        let wrong = io.set_callback(&mut lp, |_, _, _: IoEvent<'_, std::fs::File>| {});
        assert!(matches!(wrong, Err(Error::SourceType)), "{wrong:?}");
        let owned = io.set_borrowed_callback(&mut lp, &other, |_, _, _| {});
        assert!(matches!(owned, Err(Error::SourceType)), "{owned:?}");
        peer.send(b"abc");
        let mut log = vec![];
        lp.run(RunMode::Once, &mut log).unwrap();
        assert_eq!(log, ["old: Err(Busy)", "old read 3"]);
        // Replaced: the new callback reads the same source.
        io.set_callback(&mut lp, |lp, log, ev: IoEvent<'_, Conn>| {
            let data = common::drain(ev.source);
            log.push(format!("new read {}", data.len()));
            lp.stop(ev.watcher).unwrap();
        })
        .unwrap();
        peer.send(b"defg");
        lp.run(RunMode::Default, &mut log).unwrap();
        assert_eq!(log[2..], ["new read 4"]);
        let back: Conn = io.into_source(&mut lp).unwrap();
        drop(back);
    });
}

#[test]
fn a_borrowed_io_callback_is_replaced_with_the_same_source_only() {
    on_every_world("set_borrowed_io_callback", |w| {
        let (conn, mut peer) = w.pair();
        let (other, _other_peer) = w.pair();
        let mut lp: Loop<Log> = w.new_loop();
        let io = Io::borrowed(&mut lp, &conn, Interest::READABLE, |_, log, _| {
            log.push("old".into())
        })
        .unwrap();
        let wrong = io.set_borrowed_callback(&mut lp, &other, |_, _, _| {});
        assert!(matches!(wrong, Err(Error::InvalidFd { .. })), "{wrong:?}");
        let owned = io.set_callback(&mut lp, |_, _, _: IoEvent<'_, Conn>| {});
        assert!(matches!(owned, Err(Error::SourceType)), "{owned:?}");
        io.set_borrowed_callback(&mut lp, &conn, |lp, log, ev| {
            let mut buf = [0; 16];
            let n = ev.source.read(&mut buf).unwrap();
            log.push(format!("new read {n}"));
            lp.remove(ev.watcher).unwrap();
        })
        .unwrap();
        peer.send(b"xy");
        assert_eq!(lp.finish(vec![]), ["new read 2"]);
    });
}

#[test]
fn a_cleanup_watchers_new_callback_runs_at_drop() {
    on_every_backend("set_cleanup_callback", |name| {
        let log = Rc::new(RefCell::new(Vec::<&str>::new()));
        let mut lp: Loop = World::new(name).new_loop();
        let (a, b) = (log.clone(), log.clone());
        let c = Cleanup::new(&mut lp, move |_| a.borrow_mut().push("old")).unwrap();
        Cleanup::new(&mut lp, move |_| b.borrow_mut().push("second watcher")).unwrap();
        let n = log.clone();
        c.set_callback(&mut lp, move |_| n.borrow_mut().push("new"))
            .unwrap();
        drop(lp);
        // Its place in the start order is kept.
        assert_eq!(*log.borrow(), ["new", "second watcher"], "{name}");
    });
}

#[test]
fn the_set_family_refuses_stale_and_foreign_handles() {
    on_every_world("set family: stale and foreign handles", |w| {
        let mut a: Loop = w.new_loop();
        let mut b: Loop = w.new_loop();
        let t = a
            .timer(Duration::from_secs(1), Duration::ZERO, |_, _, _| {})
            .unwrap();
        let s = Signal::new(&mut a, libc::SIGURG, |_, _, _| {}).unwrap();
        let later = a.read_wall_clock() + Duration::from_secs(3600);
        let p = Periodic::new(&mut a, Schedule::At(later), |_, _, _| {}).unwrap();
        let c = Cleanup::new(&mut a, |_| {}).unwrap();
        let (conn, _peer) = w.pair();
        let io = a.io(conn, Interest::READABLE, |_, _, _| {}).unwrap();
        a.stop(s).unwrap();
        a.stop(p).unwrap();
        let foreign = |r: evloop::Result<()>| matches!(r, Err(Error::ForeignHandle { .. }));
        assert!(foreign(b.set_callback(t, |_, _, _| {})));
        assert!(foreign(s.set_number(&mut b, libc::SIGUSR1)));
        assert!(foreign(p.set_schedule(&mut b, Schedule::At(later))));
        assert!(foreign(c.set_callback(&mut b, |_| {})));
        assert!(foreign(
            io.set_callback(&mut b, |_, _, _: IoEvent<'_, Conn>| {})
        ));
        for r in [
            a.remove(t),
            a.remove(s),
            a.remove(p),
            a.remove(c),
            a.remove(io),
        ] {
            r.unwrap();
        }
        let stale = |r: evloop::Result<()>| matches!(r, Err(Error::StaleHandle { .. }));
        assert!(stale(a.set_callback(t, |_, _, _| {})));
        assert!(stale(s.set_number(&mut a, libc::SIGUSR1)));
        assert!(stale(p.set_schedule(&mut a, Schedule::At(later))));
        assert!(stale(c.set_callback(&mut a, |_| {})));
        assert!(stale(
            io.set_callback(&mut a, |_, _, _: IoEvent<'_, Conn>| {})
        ));
        assert_eq!(a.active_count(), 0);
    });
}

/// Perl EV's t/08_async, ported: callbacks set on active async watchers
/// from another one's callback, with sends coalescing in between.
#[test]
fn async_callbacks_set_from_each_other_as_in_perl_evs_async_test() {
    on_every_backend("EV t/08_async", |name| {
        let mut lp: Loop<Log> = World::new(name).new_loop();
        let (a3, _s3) = Async::new(&mut lp, old("a3")).unwrap();
        let (a2, s2) = Async::new(&mut lp, old("a2")).unwrap();
        let (a1, s1) = Async::new(&mut lp, old("a1")).unwrap();
        let resend = s1.clone();
        lp.set_callback(a2, move |lp, log, _| {
            log.push("a2".into());
            lp.set_callback(a1, |lp, log, _| {
                log.push("a1 again".into());
                lp.break_loop(Break::One);
            })
            .unwrap();
            resend.send().unwrap();
        })
        .unwrap();
        lp.set_callback(a1, move |lp, log, me| {
            log.push(format!("a1, pending {}", me.is_sent(lp).unwrap()));
            s2.send().unwrap();
        })
        .unwrap();
        assert!(!a1.is_sent(&lp).unwrap(), "{name}");
        for _ in 0..3 {
            s1.send().unwrap();
        }
        assert!(a1.is_sent(&lp).unwrap(), "{name}");
        assert!(!a3.is_sent(&lp).unwrap(), "{name}");
        let mut log = vec![];
        lp.run_expect(RunMode::Default, &mut log, RunOutcome::Broken);
        assert_eq!(log, ["a1, pending false", "a2", "a1 again"], "{name}");
    });
}

/// Raises `signal` in the calling thread (its handler has run when this
/// returns). Only while a watcher of it is active.
fn raise_here(signal: i32) {
    // SAFETY: sends a signal to the calling thread, whose handler (the
    // loop's, installed while a watcher of it is active) only records it.
    assert_eq!(unsafe { libc::raise(signal) }, 0);
}

/// This binary's only test that raises signals: SIGUSR1 and SIGUSR2 are
/// its own.
#[test]
fn a_stopped_signal_watcher_changes_its_signal_and_an_active_one_refuses() {
    on_every_world("set_signal", |w| {
        let mut lp: Loop<Vec<i32>> = w.new_loop();
        let s = Signal::new(&mut lp, libc::SIGUSR1, |lp, log, me| {
            log.push(me.number(lp).unwrap());
            lp.remove(me).unwrap();
        })
        .unwrap();
        let active = s.set_number(&mut lp, libc::SIGUSR2).unwrap_err();
        assert!(
            matches!(
                active,
                Error::WatcherActive {
                    kind: "signal",
                    what: "signal"
                }
            ),
            "{active:?}"
        );
        assert!(active.to_string().contains("stopped"), "{active}");
        lp.stop(s).unwrap();
        for bad in [0, libc::SIGKILL, 65] {
            let err = s.set_number(&mut lp, bad).unwrap_err();
            assert!(matches!(err, Error::InvalidSignal { .. }), "{err:?}");
        }
        assert_eq!(s.number(&lp).unwrap(), libc::SIGUSR1, "unchanged");
        s.set_number(&mut lp, libc::SIGUSR2).unwrap();
        assert_eq!(s.number(&lp).unwrap(), libc::SIGUSR2);
        lp.start(s).unwrap();
        match &w.sim {
            Some(sim) => {
                let watched = sim.watched_signals();
                assert!(watched.contains(libc::SIGUSR2) && !watched.contains(libc::SIGUSR1));
                sim.raise(Duration::from_millis(1), libc::SIGUSR1);
                sim.raise(Duration::from_millis(2), libc::SIGUSR2);
            }
            None => raise_here(libc::SIGUSR2),
        }
        assert_eq!(lp.finish(vec![]), [libc::SIGUSR2]);
    });
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()
}

#[test]
fn a_stopped_periodic_takes_a_new_schedule_exactly_on_the_simulator() {
    on_sim("set_schedule on the simulator", || {
        let sim = evloop::Sim::new();
        sim.set_wall_clock(SystemTime::UNIX_EPOCH + Duration::from_secs(100));
        let mut lp: Loop<Log> = Loop::with_backend(sim.backend());
        let p = Periodic::new(
            &mut lp,
            Schedule::every(Duration::from_secs(60)),
            |lp, log, me| {
                log.push(format!("at {}", secs(lp.now_wall())));
                if log.len() == 1 {
                    let busy = me.set_schedule(lp, Schedule::every(Duration::from_secs(1)));
                    log.push(format!("{busy:?}"));
                    lp.stop(me).unwrap();
                    let zero = me.set_schedule(lp, Schedule::every(Duration::ZERO));
                    log.push(format!("zero: {}", zero.is_err()));
                    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
                    me.set_schedule(lp, Schedule::At(at)).unwrap();
                    lp.start(me).unwrap();
                    log.push(format!("next {:?}", me.next_at(lp).unwrap().map(secs)));
                }
            },
        )
        .unwrap();
        let log = lp.finish(vec![]);
        assert_eq!(
            log,
            [
                "at 120",
                "Err(WatcherActive { kind: \"periodic\", what: \"schedule\" })",
                "zero: true",
                "next Some(1000)",
                "at 1000",
            ]
        );
        // The absolute time fired once: the watcher stopped itself.
        assert!(!lp.is_active(p).unwrap());
        // A refused schedule leaves the one it had.
        let err = p
            .set_schedule(&mut lp, Schedule::every(Duration::ZERO))
            .unwrap_err();
        assert!(matches!(err, Error::InvalidSchedule { .. }));
        lp.start(p).unwrap();
        assert_eq!(p.next_at(&lp).unwrap().map(secs), Some(1000));
    });
}

#[test]
fn a_stopped_periodic_takes_a_new_schedule_on_every_backend() {
    on_every_backend("set_schedule", |name| {
        let mut lp: Loop<Vec<bool>> = World::new(name).new_loop();
        let first = lp.read_wall_clock();
        Periodic::new(&mut lp, Schedule::At(first), move |lp, seen, me| {
            // The wall time it was expired at: not before its time.
            let now = lp.now_wall();
            seen.push(now >= first);
            if seen.len() == 1 {
                lp.stop(me).unwrap();
                me.set_schedule(lp, Schedule::At(now)).unwrap();
                lp.start(me).unwrap();
            }
        })
        .unwrap();
        assert_eq!(lp.finish(vec![]), [true, true], "{name}");
    });
}

#[test]
fn now_wall_is_the_wall_time_of_the_iteration_exactly_on_the_simulator() {
    on_sim("now_wall on the simulator", || {
        let sim = evloop::Sim::new();
        sim.set_wall_clock(SystemTime::UNIX_EPOCH + Duration::from_secs(100));
        let mut lp: Loop<Log> = Loop::with_backend(sim.backend());
        assert_eq!(secs(lp.now_wall()), 100);
        for _ in 0..2 {
            lp.timer(Duration::from_secs(5), Duration::ZERO, |lp, log, _| {
                let (cached, read) = (lp.now_wall(), lp.read_wall_clock());
                log.push(format!(
                    "{:?} {} {}",
                    lp.now(),
                    secs(cached),
                    cached == read
                ));
            })
            .unwrap();
        }
        // A step of the wall clock shows at the next iteration.
        sim.step_wall_clock_forward(Duration::from_secs(7), Duration::from_secs(50));
        lp.timer(Duration::from_secs(8), Duration::ZERO, |lp, log, _| {
            log.push(format!("{:?} {}", lp.now(), secs(lp.now_wall())));
        })
        .unwrap();
        assert_eq!(lp.finish(vec![]), ["5s 105 true", "5s 105 true", "8s 158"]);
    });
}

#[test]
fn now_wall_is_one_value_per_iteration_on_every_backend() {
    on_every_backend("now_wall", |name| {
        let mut lp: Loop<Vec<SystemTime>> = World::new(name).new_loop();
        for _ in 0..3 {
            lp.timer(Duration::from_millis(1), Duration::ZERO, |lp, seen, _| {
                seen.push(lp.now_wall());
            })
            .unwrap();
        }
        let seen = lp.finish(vec![]);
        assert_eq!(seen.len(), 3, "{name}");
        assert!(seen.iter().all(|&t| t == seen[0]), "{name}: {seen:?}");
        // Refreshed with `now`: a new value after update_now.
        let before = lp.now_wall();
        assert_eq!(lp.now_wall(), before, "{name}: cached");
    });
}

/// The simulator told the loop of a wall-clock step nobody watched: the
/// loop did not take the notice, and every poll returned at once from
/// then on (a spin at the step's time; the timer after it never fired).
#[test]
fn a_wall_clock_step_without_periodic_watchers_does_not_spin_the_simulator() {
    on_sim("an unwatched wall-clock step", || {
        let sim = evloop::Sim::new();
        sim.step_wall_clock_forward(Duration::from_secs(1), Duration::from_secs(50));
        let mut lp: Loop<Vec<Duration>> = Loop::with_backend(sim.backend());
        lp.timer(Duration::from_secs(2), Duration::ZERO, |lp, log, _| {
            log.push(lp.now())
        })
        .unwrap();
        assert_eq!(lp.finish(vec![]), [Duration::from_secs(2)]);
        assert_eq!(lp.iteration(), 1, "one poll, until the timer");
    });
}
