//! `Loop::once` on the simulator and every OS backend, under a watchdog:
//! readiness first, timeout first, no timeout, nothing at all; in each case
//! the callback runs once, the source comes back, and nothing is left.

mod common;

use std::time::Duration;

use common::{drain, on_every_world, RunTo};
use evloop::{Interest, Loop, OnceEvent, RunMode, RunOutcome};

#[test]
fn readiness_first_hands_the_source_back_and_cancels_the_timeout() {
    on_every_world("once ready", |w| {
        let (conn, mut peer) = w.pair();
        peer.send(b"hi");
        let mut lp: Loop<Vec<String>> = w.new_loop();
        lp.once(
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
        lp.once(
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
        lp.once(Some((conn, Interest::READABLE)), None, |_, log, what| {
            log.push(match what {
                OnceEvent::Ready { .. } => "ready",
                OnceEvent::TimedOut { .. } => "timed out",
            })
        })
        .unwrap();
        lp.once(None::<(common::Conn, Interest)>, None, |_, log, what| {
            assert!(matches!(what, OnceEvent::TimedOut { source: None }));
            log.push("nothing to wait for");
        })
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
        let once = lp
            .once(
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
        let fired = lp
            .once(
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
        let once = lp
            .once(
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
            lp.once(
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
