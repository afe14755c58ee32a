//! `Once::new` on the simulator and every OS backend, under a watchdog:
//! readiness first, timeout first, no timeout, nothing at all; in each case
//! the callback runs once, the source comes back, and nothing is left.
//! And `Timer::once`, the self-freeing one-shot timer: nothing left
//! after any number of them fired, a stale handle after.

mod common;

use std::time::Duration;

use std::cell::Cell;
use std::rc::Rc;

use common::{drain, on_every_world, RunTo};
use evloop::{Error, Interest, Loop, Once, OnceEvent, RunMode, RunOutcome, Timer};

#[test]
fn readiness_first_hands_the_source_back_and_cancels_the_timeout() {
    on_every_world("once ready", |w| {
        let (conn, mut peer) = w.pair();
        peer.send(b"hi");
        let mut lp: Loop<Vec<String>> = w.new_loop();
        Once::new(
            &mut lp,
            Some((conn, Interest::READABLE)),
            Some(Duration::from_secs(3600)),
            |lp, log, what| match what {
                OnceEvent::Ready { ready, mut source } => {
                    log.push(format!("ready {ready}: {:?}", drain(&mut source)));
                    assert_eq!(lp.active_count(), 0, "the timeout went too");
                }
                OnceEvent::TimedOut { .. } => log.push("timed out".into()),
            },
        )
        .unwrap();
        let mut log = vec![];
        let outcome = lp.run(RunMode::Default, &mut log).unwrap();
        assert_eq!(outcome, RunOutcome::NoActiveWatchers);
        assert_eq!(log, [format!("ready r: {:?}", b"hi".to_vec())]);
    });
}

#[test]
fn the_timeout_first_hands_the_source_back_too() {
    on_every_world("once timed out", |w| {
        let (conn, _peer) = w.pair();
        let mut lp: Loop<Vec<String>> = w.new_loop();
        lp.update_now();
        let start = lp.now();
        Once::new(
            &mut lp,
            Some((conn, Interest::READABLE)),
            Some(Duration::from_millis(5)),
            move |lp, log, what| match what {
                OnceEvent::Ready { .. } => log.push("ready".into()),
                OnceEvent::TimedOut { source } => {
                    assert!(lp.now() - start >= Duration::from_millis(5));
                    log.push(format!("timed out, source back: {}", source.is_some()));
                }
            },
        )
        .unwrap();
        let mut log = vec![];
        let outcome = lp.run(RunMode::Default, &mut log).unwrap();
        assert_eq!(outcome, RunOutcome::NoActiveWatchers);
        assert_eq!(log, ["timed out, source back: true"]);
    });
}

#[test]
fn without_a_timeout_it_waits_for_readiness_and_with_nothing_it_times_out_at_once() {
    on_every_world("once, io only / nothing", |w| {
        let (conn, mut peer) = w.pair();
        peer.send(b"x");
        let mut lp: Loop<Vec<&'static str>> = w.new_loop();
        Once::new(
            &mut lp,
            Some((conn, Interest::READABLE)),
            None,
            |_, log, what| {
                log.push(match what {
                    OnceEvent::Ready { .. } => "ready",
                    OnceEvent::TimedOut { .. } => "timed out",
                })
            },
        )
        .unwrap();
        Once::new(
            &mut lp,
            None::<(common::Conn, Interest)>,
            None,
            |_, log, what| {
                assert!(matches!(what, OnceEvent::TimedOut { source: None }));
                log.push("nothing to wait for");
            },
        )
        .unwrap();
        let mut log = vec![];
        let outcome = lp.run(RunMode::Default, &mut log).unwrap();
        assert_eq!(outcome, RunOutcome::NoActiveWatchers);
        assert_eq!(log, ["ready", "nothing to wait for"]);
    });
}

/// A once cancelled by `remove` reports nothing, on every backend, and
/// leaves no watcher behind (its timeout goes with it); one that fired has
/// a stale handle.
#[test]
fn a_removed_once_reports_nothing_and_leaves_nothing() {
    common::on_every_backend("a removed once", |name| {
        let w = common::World::new(name);
        let (mine, _peer) = w.pair();
        let mut lp: Loop<Vec<&'static str>> = w.new_loop();
        let once = Once::new(
            &mut lp,
            Some((mine, Interest::READABLE)),
            Some(Duration::from_millis(30)),
            |_, log, _| log.push("fired"),
        )
        .unwrap();
        assert!(lp.is_active(once).unwrap());
        lp.remove(once).unwrap();
        // Nothing left: the run returns at once, without waiting for the
        // (removed) timeout.
        let mut log = lp.finish(vec![]);
        assert!(log.is_empty());
        assert_eq!(lp.active_count(), 0);

        // A once that fired: its handle is stale.
        let fired = Once::new(
            &mut lp,
            None::<(common::Conn, Interest)>,
            Some(Duration::ZERO),
            |_, log, _| log.push("timeout"),
        )
        .unwrap();
        lp.run(RunMode::Default, &mut log).unwrap();
        assert_eq!(log, ["timeout"]);
        assert!(lp.is_active(fired).is_err());
    });
}

/// A once is one watcher: `stop` pauses it (neither readiness nor the
/// timeout is reported, and it does not keep `run` going), `start`
/// resumes it with the same deadline, which, passed meanwhile, comes at
/// the next iteration.
#[test]
fn a_stopped_once_is_paused_and_a_started_one_resumes() {
    on_every_world("a paused once", |w| {
        let name = w.backend;
        let (quiet, _peer) = w.pair();
        let mut lp: Loop<Vec<&'static str>> = w.new_loop();
        let once = Once::new(
            &mut lp,
            Some((quiet, Interest::READABLE)),
            Some(Duration::ZERO),
            |_, log, what| {
                log.push(match what {
                    OnceEvent::Ready { .. } => "ready",
                    OnceEvent::TimedOut { source } => {
                        assert!(source.is_some());
                        "timed out"
                    }
                })
            },
        )
        .unwrap();
        assert_eq!(lp.active_count(), 1, "{name}");
        lp.stop(once).unwrap();
        let mut log = vec![];
        assert_eq!(
            lp.run(RunMode::Default, &mut log).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert!(log.is_empty(), "{name}: {log:?}");
        lp.start(once).unwrap();
        assert_eq!(
            lp.run(RunMode::Default, &mut log).unwrap(),
            RunOutcome::NoActiveWatchers,
            "{name}"
        );
        assert_eq!(log, ["timed out"], "{name}");
        assert!(lp.is_active(once).is_err(), "fired: stale");
    });
}

/// Readiness and the timeout in one iteration (the fd ready before the
/// run, a zero timeout): one call, with the readiness, as the queued path
/// gives it, also when the poll's results are dispatched directly (the
/// once's deadline queues it after the poll, while the direct batch still
/// holds its fd's result: the two merge at the fd's place).
#[test]
fn readiness_and_the_timeout_in_one_iteration_make_one_call() {
    on_every_world("once ready at its deadline", |w| {
        let mut logs = vec![];
        for direct in [true, false] {
            // `conn` below `first` in fd order, as a quiet process numbers
            // them: select and poll report in fd order, and the binary's
            // other tests open fds meanwhile (the two runs must see the
            // same order to compare).
            let ((conn, mut peer), (first, mut first_peer)) = loop {
                let (a, b) = (w.pair(), w.pair());
                if fd_number(&a.0) < fd_number(&b.0) {
                    break (a, b);
                }
            };
            peer.send(b"x");
            first_peer.send(b"y");
            let mut lp: Loop<Vec<String>> = w.new_loop();
            lp.set_direct_dispatch(direct);
            lp.io(first, Interest::READABLE, |lp, log, ev| {
                log.push("io".into());
                lp.remove(ev.watcher).unwrap();
            })
            .unwrap();
            Once::new(
                &mut lp,
                Some((conn, Interest::READABLE)),
                Some(Duration::ZERO),
                |_, log, what| {
                    log.push(match what {
                        OnceEvent::Ready { ready, .. } => format!("ready {ready}"),
                        OnceEvent::TimedOut { .. } => "timed out".into(),
                    })
                },
            )
            .unwrap();
            let log = lp.finish(vec![]);
            assert_eq!(log.len(), 2, "direct {direct}: {log:?}");
            assert!(
                log.contains(&"ready r".to_string()),
                "direct {direct}: {log:?}"
            );
            logs.push(log);
        }
        assert_eq!(logs[0], logs[1], "direct dispatch vs queued");
    });
}

/// A connection's fd number, on either kind of backend.
fn fd_number(c: &impl evloop::Source) -> i64 {
    match c.source_fd() {
        evloop::SourceFd::Os(fd) => i64::from(std::os::fd::AsRawFd::as_raw_fd(&fd)),
        evloop::SourceFd::Virtual(v) => i64::from(v.get()),
    }
}

/// Counts its drops: what a closure captures, freed or not.
struct Captured(Rc<Cell<u64>>);

impl Drop for Captured {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

/// Self-freeing timers in rounds of `BATCH`, as a timer-per-key server
/// makes them: after every round the loop holds no watcher and every
/// closure (with what it captured) was dropped, however many fired.
/// (`Loop::timer` without a `remove` keeps each fired one: the loop's
/// watcher count grows by one per expiry.) 1,000,000 on each backend.
#[test]
fn fired_self_freeing_timers_leave_nothing_behind() {
    const BATCH: u64 = 1000;
    on_every_world("timer_once churn", |w| {
        let total: u64 = 1_000_000;
        let mut lp: Loop<u64> = w.new_loop();
        let dropped = Rc::new(Cell::new(0));
        let mut fired = 0;
        for round in 0..total / BATCH {
            for i in 0..BATCH {
                let captured = Captured(dropped.clone());
                Timer::once(&mut lp, Duration::from_micros(i % 3), move |_, fired| {
                    let _keep = &captured;
                    *fired += 1;
                })
                .unwrap();
            }
            assert_eq!(lp.watcher_count(), BATCH as usize);
            lp.run_to_end(&mut fired);
            assert_eq!(fired, (round + 1) * BATCH, "{}", w.backend);
            assert_eq!(lp.watcher_count(), 0, "{}: round {round}", w.backend);
            assert_eq!(dropped.get(), fired, "{}: every closure freed", w.backend);
        }
        // The same with `Loop::timer`: each fired one-shot stays.
        for _ in 0..BATCH {
            lp.timer(Duration::ZERO, Duration::ZERO, |_, fired, _| *fired += 1)
                .unwrap();
        }
        lp.run_to_end(&mut fired);
        assert_eq!(lp.watcher_count(), BATCH as usize, "kept until remove");
    });
}

/// After it fired (and already in its callback) a self-freeing timer's
/// handle is stale: every operation returns `Error::StaleHandle`, and none
/// reaches the watcher made since in its slot.
#[test]
fn a_fired_self_freeing_timer_has_a_stale_handle() {
    on_every_world("timer_once stale", |w| {
        let name = w.backend;
        let mut lp: Loop<Option<evloop::Timer>> = w.new_loop();
        let t = Timer::once(&mut lp, Duration::from_millis(1), |lp, me| {
            let me = me.unwrap();
            assert!(matches!(lp.is_active(me), Err(Error::StaleHandle { .. })));
        })
        .unwrap();
        assert!(lp.is_active(t).unwrap());
        let mut me = Some(t);
        lp.run_to_end(&mut me);
        // A watcher in its place (the slot is reused), then every
        // operation on the stale handle.
        let next = lp
            .timer(Duration::from_secs(60), Duration::ZERO, |_, _, _| {})
            .unwrap();
        let stale = |r: evloop::Result<()>| matches!(r, Err(Error::StaleHandle { .. }));
        assert!(stale(lp.is_active(t).map(drop)), "{name}");
        assert!(stale(t.remaining(&lp).map(drop)), "{name}");
        assert!(stale(lp.stop(t)), "{name}");
        assert!(stale(lp.start(t)), "{name}");
        assert!(stale(t.again(&mut lp)), "{name}");
        assert!(
            stale(t.set(&mut lp, Duration::ZERO, Duration::ZERO)),
            "{name}"
        );
        assert!(stale(lp.set_ref(t, false)), "{name}");
        assert!(stale(lp.remove(t)), "{name}");
        assert!(
            lp.is_active(next).unwrap(),
            "{name}: the new watcher untouched"
        );
        assert_eq!(next.remaining(&lp).unwrap(), Duration::from_secs(60));
        assert_eq!(lp.watcher_count(), 1);
    });
}

/// Before it fires, a self-freeing timer is a timer: `Timer::set` pushes
/// its expiry back, `set_ref(false)` keeps it from holding `run`, and
/// `remove` cancels it (its closure dropped uncalled).
#[test]
fn a_waiting_self_freeing_timer_can_be_pushed_back_unreferenced_or_cancelled() {
    on_every_world("timer_once before it fires", |w| {
        let mut lp: Loop<Vec<&'static str>> = w.new_loop();
        let dropped = Rc::new(Cell::new(0));
        let captured = Captured(dropped.clone());
        let cancelled = Timer::once(&mut lp, Duration::ZERO, move |_, log| {
            let _keep = &captured;
            log.push("cancelled fired");
        })
        .unwrap();
        lp.remove(cancelled).unwrap();
        assert_eq!(dropped.get(), 1, "dropped uncalled");
        let unreferenced = Timer::once(&mut lp, Duration::from_secs(3600), |_, log| {
            log.push("expiry")
        })
        .unwrap();
        lp.set_ref(unreferenced, false).unwrap();
        let pushed =
            Timer::once(&mut lp, Duration::ZERO, |_, log| log.push("pushed back")).unwrap();
        pushed
            .set(&mut lp, Duration::from_millis(2), Duration::ZERO)
            .unwrap();
        assert_eq!(pushed.remaining(&lp).unwrap(), Duration::from_millis(2));
        let log = lp.finish(vec![]);
        assert_eq!(log, ["pushed back"], "{}", w.backend);
        // The unreferenced one did not hold `run`, and waits on.
        assert!(lp.is_active(unreferenced).unwrap());
        assert_eq!(lp.watcher_count(), 1);
    });
}
