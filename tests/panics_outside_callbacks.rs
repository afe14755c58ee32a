//! User code that the loop calls outside a callback, held to the rule
//! callbacks are held to (tests/faults.rs): a panic propagates, and the
//! loop stays consistent. That code is a custom schedule (asked when its
//! periodic is created or started, after each firing, after a wall-clock
//! step), the `Drop` of what a watcher was given (its callback's captures,
//! an owned io source, a custom schedule's captures: on `remove`, when a
//! watcher removed in its own callback is put back, when the loop is
//! dropped) and the cleanup callbacks run as the loop is dropped. On the
//! simulator and every OS backend, each under a watchdog.

mod common;

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::{on_every_backend, on_every_world, RunTo, Shifted, World};
use evloop::backend::Backend;
use evloop::{Async, Cleanup, Error, Idle, Interest, Loop, Once, Periodic, RunMode, Schedule};

/// The message of a caught panic.
fn message(panic: Box<dyn std::any::Any + Send>) -> String {
    match panic.downcast::<&str>() {
        Ok(s) => s.to_string(),
        Err(panic) => match panic.downcast::<String>() {
            Ok(s) => *s,
            Err(_) => "(not a string)".to_string(),
        },
    }
}

/// Runs `f`, which must panic; returns the panic's message.
fn panics(f: impl FnOnce()) -> String {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(()) => panic!("expected a panic"),
        Err(panic) => message(panic),
    }
}

/// A value that counts its drop, and panics in it (with `why`) if told to.
struct Bomb {
    dropped: Rc<Cell<u32>>,
    why: Option<&'static str>,
}

impl Bomb {
    fn new(dropped: &Rc<Cell<u32>>, why: Option<&'static str>) -> Bomb {
        Bomb {
            dropped: dropped.clone(),
            why,
        }
    }
}

impl Drop for Bomb {
    fn drop(&mut self) {
        self.dropped.set(self.dropped.get() + 1);
        if let Some(why) = self.why {
            panic!("{why}");
        }
    }
}

/// A schedule that asks `plan` for each time; panics when it says `None`.
fn custom(plan: impl FnMut(SystemTime) -> Option<SystemTime> + 'static) -> Schedule {
    let mut plan = plan;
    Schedule::custom(move |now| plan(now).expect("the schedule panics"))
}

const HOUR: Duration = Duration::from_secs(3600);

// ---- custom schedules ------------------------------------------------------

#[test]
fn a_schedule_that_panics_as_its_periodic_is_created_leaves_nothing_behind() {
    on_every_backend("schedule panics in periodic()", |name| {
        let mut lp: Loop<()> = World::new(name).new_loop();
        let dropped = Rc::new(Cell::new(0));
        let bomb = Bomb::new(&dropped, None);
        let why = panics(|| {
            let _ = Periodic::new(&mut lp, custom(|_| None), move |_, _, _| {
                let _ = &bomb;
            });
        });
        assert_eq!(why, "the schedule panics", "{name}");
        // No phantom: nothing active, nothing kept (the callback is gone).
        assert_eq!(lp.active_count(), 0, "{name}");
        assert_eq!(dropped.get(), 1, "{name}: the callback was not dropped");
        lp.run_to_end(&mut ());
        // The periodics still work.
        let p = Periodic::new(&mut lp, Schedule::every(HOUR), |_, _, _| {}).unwrap();
        assert_eq!(lp.active_count(), 1, "{name}");
        lp.remove(p).unwrap();
        assert_eq!(lp.active_count(), 0, "{name}");
    });
}

#[test]
fn a_schedule_that_panics_in_start_leaves_the_watcher_stopped() {
    on_every_backend("schedule panics in start()", |name| {
        let mut lp: Loop<()> = World::new(name).new_loop();
        let fail = Rc::new(Cell::new(false));
        let f = fail.clone();
        let p = Periodic::new(
            &mut lp,
            custom(move |now| (!f.get()).then_some(now + HOUR)),
            |_, _, _| {},
        )
        .unwrap();
        lp.stop(p).unwrap();
        fail.set(true);
        assert_eq!(panics(|| lp.start(p).unwrap()), "the schedule panics");
        // Fully not started.
        assert!(!lp.is_active(p).unwrap(), "{name}");
        assert_eq!(lp.active_count(), 0, "{name}");
        assert_eq!(p.next_at(&lp).unwrap(), None, "{name}");
        lp.run_to_end(&mut ());
        // Stopping it again, or starting it once the schedule works, is fine.
        lp.stop(p).unwrap();
        fail.set(false);
        lp.start(p).unwrap();
        assert!(lp.is_active(p).unwrap(), "{name}");
        assert_eq!(lp.active_count(), 1, "{name}");
        assert!(p.next_at(&lp).unwrap().is_some(), "{name}");
        lp.stop(p).unwrap();
        lp.remove(p).unwrap();
        assert_eq!(lp.active_count(), 0, "{name}");
        assert!(matches!(lp.remove(p), Err(Error::StaleHandle { .. })));
    });
}

/// A schedule that panics when asked for the time after a firing stops
/// its watcher (as one that gave no time does), the firing itself is
/// delivered, and the rest of the expiry goes on: a periodic due at the
/// same time is queued in the same iteration.
#[test]
fn a_schedule_that_panics_when_rescheduled_stops_its_watcher_and_the_expiry_goes_on() {
    on_every_backend("schedule panics after a firing", |name| {
        let mut lp: Loop<Vec<&str>> = World::new(name).new_loop();
        let due = lp.read_wall_clock() + Duration::from_millis(20);
        let asked = Rc::new(Cell::new(0));
        let a = asked.clone();
        let p = Periodic::new(
            &mut lp,
            custom(move |now| {
                a.set(a.get() + 1);
                match a.get() {
                    1 => Some(due),
                    2 => None,      // panics
                    _ => Some(now), // no time: stops
                }
            }),
            |_, log, _| log.push("custom"),
        )
        .unwrap();
        Periodic::new(&mut lp, Schedule::At(due), |_, log, _| log.push("at")).unwrap();
        let mut log = vec![];
        let why = panics(|| {
            let _ = lp.run(RunMode::Default, &mut log);
        });
        assert_eq!(why, "the schedule panics", "{name}");
        assert_eq!(asked.get(), 2, "{name}");
        assert!(!lp.is_active(p).unwrap(), "{name}");
        assert_eq!(p.next_at(&lp).unwrap(), None, "{name}");
        assert_eq!(lp.pending_count(), 2, "{name}: both firings queued");
        assert_eq!(lp.depth(), 0, "{name}");
        lp.run_to_end(&mut log);
        assert_eq!(log, ["custom", "at"], "{name}");
        assert_eq!(asked.get(), 2, "{name}: not asked again");
        lp.start(p).unwrap(); // asked again: no time, and no panic
        assert_eq!(asked.get(), 3, "{name}");
        assert!(!lp.is_active(p).unwrap(), "{name}");
        lp.remove(p).unwrap();
    });
}

/// After a wall-clock step the custom schedules are asked again: one that
/// panics then is stopped, and the others are still realigned.
#[test]
fn a_schedule_that_panics_when_realigned_after_a_step_stops_only_its_watcher() {
    on_every_world("schedule panics after a clock step", |w| {
        let inner: Box<dyn Backend> = match &w.sim {
            Some(sim) => {
                // (Its wall clock starts at the epoch: a step back from
                // there would wrap.)
                sim.set_wall_clock(SystemTime::UNIX_EPOCH + 10 * HOUR);
                Box::new(sim.backend())
            }
            None => evloop::backends::open(w.backend).unwrap(),
        };
        let shift = Arc::new(AtomicI64::new(0));
        let backend = Shifted {
            inner,
            shift_ns: shift.clone(),
        };
        let mut lp: Loop<Vec<&str>> = Loop::with_backend(backend);
        let asked = Rc::new(Cell::new(0));
        let a = asked.clone();
        let panicky = Periodic::new(
            &mut lp,
            custom(move |now| {
                a.set(a.get() + 1);
                (a.get() == 1).then_some(now + HOUR)
            }),
            |_, _, _| {},
        )
        .unwrap();
        let steady =
            Periodic::new(&mut lp, Schedule::custom(|now| now + HOUR), |_, _, _| {}).unwrap();
        // The wall clock goes back half an hour; a second timer wakes the
        // loop after it, and the loop notices the step.
        lp.timer(Duration::ZERO, Duration::ZERO, move |_, log, _| {
            shift.store(-((HOUR / 2).as_nanos() as i64), Ordering::Relaxed);
            log.push("stepped");
        })
        .unwrap();
        lp.timer(Duration::from_millis(5), Duration::ZERO, |_, log, _| {
            log.push("woke")
        })
        .unwrap();
        let mut log = vec![];
        let why = panics(|| {
            let _ = lp.run(RunMode::Default, &mut log);
        });
        assert_eq!(why, "the schedule panics");
        assert_eq!(asked.get(), 2);
        assert!(!lp.is_active(panicky).unwrap());
        assert_eq!(panicky.next_at(&lp).unwrap(), None);
        // The other one was realigned: an hour from the new time (not an
        // hour and a half, as before the step).
        let next = steady.next_at(&lp).unwrap().unwrap();
        let ahead = next.duration_since(lp.read_wall_clock()).unwrap();
        assert!(ahead <= HOUR, "{ahead:?} ahead, not realigned");
        assert_eq!(lp.active_count(), 1, "the steady periodic");
        assert_eq!(lp.pending_count(), 1, "the second timer");
        lp.remove(steady).unwrap();
        lp.run_to_end(&mut log);
        assert_eq!(log, ["stepped", "woke"]);
        lp.remove(panicky).unwrap();
        assert_eq!(lp.active_count(), 0);
    });
}

// ---- drops of what a watcher was given -------------------------------------

/// `remove` drops the callback (and an owned source, and a custom
/// schedule) after the loop is done with the watcher: a panic in one of
/// those drops propagates from `remove`, every other one still runs, and
/// the counts are right.
#[test]
fn a_panic_dropping_a_removed_watcher_propagates_from_remove_with_the_loop_consistent() {
    on_every_world("panic in drop on remove", |w| {
        let mut lp: Loop<()> = w.new_loop();
        let dropped = Rc::new(Cell::new(0));
        let (conn, _peer) = w.pair();

        let b = Bomb::new(&dropped, Some("idle capture"));
        let idle = Idle::new(&mut lp, move |_, _, _| {
            let _ = &b;
        })
        .unwrap();
        let b = Bomb::new(&dropped, Some("timer capture"));
        let timer = lp
            .timer(HOUR, Duration::ZERO, move |_, _, _| {
                let _ = &b;
            })
            .unwrap();
        let b = Bomb::new(&dropped, Some("io capture"));
        let io = lp
            .io(conn, Interest::READABLE, move |_, _, _| {
                let _ = &b;
            })
            .unwrap();
        let (conn, _peer2) = w.pair();
        let b = Bomb::new(&dropped, Some("once capture"));
        let once = Once::new(
            &mut lp,
            Some((conn, Interest::READABLE)),
            Some(HOUR),
            move |_, _, _| {
                let _ = &b;
            },
        )
        .unwrap();
        // Both the schedule's and the callback's captures panic: both are
        // dropped, the first panic propagates.
        let s = Bomb::new(&dropped, Some("schedule capture"));
        let c = Bomb::new(&dropped, Some("periodic capture"));
        let periodic = Periodic::new(
            &mut lp,
            Schedule::custom(move |now| {
                let _ = &s;
                now + HOUR
            }),
            move |_, _, _| {
                let _ = &c;
            },
        )
        .unwrap();
        // (A once, source and timeout, is one watcher.)
        assert_eq!(lp.active_count(), 5);

        assert_eq!(panics(|| lp.remove(idle).unwrap()), "idle capture");
        assert_eq!((lp.active_count(), dropped.get()), (4, 1));
        assert_eq!(panics(|| lp.remove(timer).unwrap()), "timer capture");
        assert_eq!((lp.active_count(), dropped.get()), (3, 2));
        assert_eq!(panics(|| lp.remove(io).unwrap()), "io capture");
        assert_eq!((lp.active_count(), dropped.get()), (2, 3));
        // Its timeout goes with it: nothing of the once is left.
        assert_eq!(panics(|| lp.remove(once).unwrap()), "once capture");
        assert_eq!((lp.active_count(), dropped.get()), (1, 4));
        assert_eq!(panics(|| lp.remove(periodic).unwrap()), "schedule capture");
        assert_eq!((lp.active_count(), dropped.get()), (0, 6));
        for gone in [
            lp.remove(idle),
            lp.remove(timer),
            lp.remove(io),
            lp.remove(periodic),
        ] {
            assert!(matches!(gone, Err(Error::StaleHandle { .. })));
        }
        lp.run_to_end(&mut ());
        // The loop still makes and runs watchers.
        lp.timer(Duration::ZERO, Duration::ZERO, |lp, _, me| {
            lp.remove(me).unwrap()
        })
        .unwrap();
        lp.run_to_end(&mut ());
    });
}

/// A callback that removes itself: its captures are dropped when it
/// returns. A panic in that drop propagates out of `run` with the loop
/// consistent; if the callback itself panicked, its panic propagates and
/// the drop's is dropped (two at once would abort the process).
#[test]
fn a_watcher_removed_in_its_own_callback_with_a_capture_that_panics_in_drop() {
    on_every_backend("panic in drop after a callback", |name| {
        let mut lp: Loop<Vec<&str>> = World::new(name).new_loop();
        let dropped = Rc::new(Cell::new(0));
        let b = Bomb::new(&dropped, Some("capture"));
        lp.timer(Duration::ZERO, Duration::ZERO, move |lp, log, me| {
            let _ = &b;
            log.push("returns");
            lp.remove(me).unwrap();
        })
        .unwrap();
        lp.timer(Duration::ZERO, Duration::ZERO, |_, log, _| log.push("next"))
            .unwrap();
        let mut log = vec![];
        assert_eq!(
            panics(|| {
                let _ = lp.run(RunMode::Default, &mut log);
            }),
            "capture",
            "{name}"
        );
        assert_eq!((dropped.get(), lp.depth()), (1, 0), "{name}");
        assert_eq!((lp.active_count(), lp.pending_count()), (0, 1), "{name}");
        lp.run_to_end(&mut log);
        assert_eq!(log, ["returns", "next"], "{name}");

        let b = Bomb::new(&dropped, Some("capture"));
        lp.timer(Duration::ZERO, Duration::ZERO, move |lp, _, me| {
            let _ = &b;
            lp.remove(me).unwrap();
            panic!("callback");
        })
        .unwrap();
        assert_eq!(
            panics(|| {
                let _ = lp.run(RunMode::Default, &mut log);
            }),
            "callback",
            "{name}"
        );
        assert_eq!((dropped.get(), lp.depth(), lp.active_count()), (2, 0, 0));
        lp.run_to_end(&mut log);
    });
}

/// Dropping the loop drops every watcher's callback, source and schedule
/// even if some of those drops panic; the first panic propagates.
#[test]
fn dropping_the_loop_drops_everything_even_if_drops_panic() {
    on_every_world("panics in drops at loop drop", |w| {
        let mut lp: Loop<()> = w.new_loop();
        let dropped = Rc::new(Cell::new(0));
        let (conn, _peer) = w.pair();
        let b = Bomb::new(&dropped, Some("first"));
        Idle::new(&mut lp, move |_, _, _| {
            let _ = &b;
        })
        .unwrap();
        let b = Bomb::new(&dropped, None);
        lp.io(conn, Interest::READABLE, move |_, _, _| {
            let _ = &b;
        })
        .unwrap();
        let b = Bomb::new(&dropped, Some("second"));
        lp.timer(HOUR, Duration::ZERO, move |_, _, _| {
            let _ = &b;
        })
        .unwrap();
        let s = Bomb::new(&dropped, Some("schedule"));
        Periodic::new(
            &mut lp,
            Schedule::custom(move |now| {
                let _ = &s;
                now + HOUR
            }),
            |_, _, _| {},
        )
        .unwrap();
        let why = panics(move || drop(lp));
        assert!(
            ["first", "second", "schedule"].contains(&why.as_str()),
            "{why}"
        );
        assert_eq!(dropped.get(), 4, "every drop ran");
    });
}

// ---- cleanup watchers ------------------------------------------------------

/// A cleanup callback that panics: the others still run, the async
/// watchers' senders are closed (`WatcherGone`, as documented), and the
/// panic propagates from the drop.
#[test]
fn a_panicking_cleanup_lets_the_other_cleanups_run_and_the_senders_close() {
    on_every_backend("panicking cleanup", |name| {
        let mut lp: Loop<()> = World::new(name).new_loop();
        let log = Rc::new(RefCell::new(vec![]));
        let (_a, sender) = Async::new(&mut lp, |_, _, _| {}).unwrap();
        let l = log.clone();
        Cleanup::new(&mut lp, move |_| l.borrow_mut().push("first")).unwrap();
        Cleanup::new(&mut lp, |_| panic!("cleanup")).unwrap();
        let l = log.clone();
        Cleanup::new(&mut lp, move |_| l.borrow_mut().push("third")).unwrap();
        let l = log.clone();
        Cleanup::new(&mut lp, move |_| {
            l.borrow_mut().push("fourth");
            panic!("another cleanup");
        })
        .unwrap();
        sender.send().unwrap();
        assert_eq!(panics(move || drop(lp)), "cleanup", "{name}");
        assert_eq!(*log.borrow(), ["first", "third", "fourth"], "{name}");
        assert!(
            matches!(sender.send(), Err(Error::WatcherGone { kind: "async" })),
            "{name}"
        );
    });
}

/// A cleanup's panic propagates from the drop of the loop; a watcher
/// whose captures panic in their drop, dropped afterwards during that
/// unwinding, does not abort the process.
#[test]
fn a_panicking_cleanup_and_a_panicking_drop_do_not_abort() {
    on_every_backend("panicking cleanup and drop", |name| {
        let mut lp: Loop<()> = World::new(name).new_loop();
        let dropped = Rc::new(Cell::new(0));
        let b = Bomb::new(&dropped, Some("drop"));
        Idle::new(&mut lp, move |_, _, _| {
            let _ = &b;
        })
        .unwrap();
        let b = Bomb::new(&dropped, None);
        Idle::new(&mut lp, move |_, _, _| {
            let _ = &b;
        })
        .unwrap();
        Cleanup::new(&mut lp, |_| panic!("cleanup")).unwrap();
        assert_eq!(panics(move || drop(lp)), "cleanup", "{name}");
        assert_eq!(dropped.get(), 2, "{name}");
    });
}
