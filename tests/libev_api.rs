//! libev's API where ported tests need it, on the simulator (exact) and on
//! every OS backend (under a watchdog): an async watcher is pending from
//! its send (`ev_async_pending`), a prepare watcher learns the timeout of
//! the poll that follows it, and the `*_set` family (a callback, a
//! periodic's schedule, a signal watcher's signal; the cached wall time).

mod common;

use std::thread;
use std::time::Duration;

use common::{on_every_backend, World};
use evloop::{Break, Loop, RunMode, RunOutcome};

// ---- 7: an async watcher is pending from its send ------------------------------

#[test]
fn an_async_watcher_is_pending_from_its_send_until_its_callback_runs() {
    on_every_backend("async pending from its send", |name| {
        let mut lp: Loop<Vec<bool>> = World::new(name).new_loop();
        let (a, sender) = lp
            .async_watcher(|lp, seen, me| {
                // Taken by the loop: no longer pending in its own callback.
                seen.push(lp.is_pending(me).unwrap());
                lp.remove(me).unwrap();
            })
            .unwrap();
        assert!(!lp.is_pending(a).unwrap(), "{name}: not sent yet");
        sender.send().unwrap();
        assert!(lp.is_pending(a).unwrap(), "{name}: pending from the send");
        let mut seen = vec![];
        lp.run(RunMode::Default, &mut seen).unwrap();
        assert_eq!(seen, [false], "{name}");
    });
}

#[test]
fn an_async_watcher_sent_to_from_another_thread_is_pending_once_the_thread_is_joined() {
    on_every_backend("async pending from another thread", |name| {
        let mut lp: Loop<u32> = World::new(name).new_loop();
        let (a, sender) = lp.async_watcher(|_, n, _| *n += 1).unwrap();
        thread::spawn(move || sender.send().unwrap())
            .join()
            .unwrap();
        assert!(lp.is_pending(a).unwrap(), "{name}");
        let mut n = 0;
        lp.run(RunMode::NoWait, &mut n).unwrap();
        assert_eq!(n, 1, "{name}");
        assert!(!lp.is_pending(a).unwrap(), "{name}: its callback ran");
    });
}

#[test]
fn a_send_during_its_callback_makes_an_async_watcher_pending_again_and_a_stopped_one_is_not() {
    on_every_backend("async pending: resent, stopped", |name| {
        let mut lp: Loop<Vec<(bool, bool, usize)>> = World::new(name).new_loop();
        let (a, sender) = lp
            .async_watcher(|lp, seen, me| {
                let before = lp.is_pending(me).unwrap();
                lp.async_sender(me).unwrap().send().unwrap();
                seen.push((before, lp.is_pending(me).unwrap(), lp.pending_count()));
                if seen.len() == 2 {
                    lp.stop(me).unwrap();
                }
            })
            .unwrap();
        sender.send().unwrap();
        assert_eq!(
            (lp.async_pending(a).unwrap(), lp.pending_count()),
            (true, 1),
            "{name}"
        );
        let mut seen = vec![];
        lp.run(RunMode::Default, &mut seen).unwrap();
        // Each call resends: called twice, then stopped.
        assert_eq!(seen, [(false, true, 1); 2], "{name}");
        // Stopped: a send is dropped, and nothing is pending.
        sender.send().unwrap();
        assert!(!lp.is_pending(a).unwrap(), "{name}");
        assert!(!lp.async_pending(a).unwrap(), "{name}");
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
        let (_, sender) = lp.async_watcher(|_, _, _| {}).unwrap();
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

// ---- 9: a prepare watcher learns the timeout of the poll that follows it ------

/// The timeout each of three prepare watchers sees before the first poll,
/// with a timer `after` from now and nothing else to do. The last one
/// breaks the run, which then returns before it polls.
fn timeouts_seen_by_prepares(name: &'static str, after: Duration) -> Vec<Option<Duration>> {
    let mut lp: Loop<Vec<Option<Duration>>> = World::new(name).new_loop();
    for _ in 0..3 {
        lp.prepare(|lp, seen, _| {
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
    let seen = timeouts_seen_by_prepares("sim", Duration::from_secs(1));
    assert_eq!(seen, [Some(Duration::from_secs(1)); 3]);
}

#[test]
fn what_a_prepare_watcher_feeds_runs_before_the_poll_and_no_wait_runs_never_block() {
    let sim = evloop::Sim::new();
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    let t = lp
        .timer(Duration::from_secs(5), Duration::ZERO, |lp, log, _| {
            log.push(format!("timer at {:?}", lp.now()))
        })
        .unwrap();
    let other = lp.check(|_, log, _| log.push("check".into())).unwrap();
    lp.stop(other).unwrap();
    lp.prepare(move |lp, log, _| {
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
}

#[test]
fn a_nested_run_in_a_prepare_callback_has_its_own_phase() {
    let sim = evloop::Sim::new();
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    lp.timer(Duration::from_secs(2), Duration::ZERO, |_, _, _| {})
        .unwrap();
    let idle = lp
        .idle(|lp, log, me| {
            // Invoked by the nested run: not a prepare phase, and an idle
            // watcher makes every poll zero anyway.
            log.push(format!("idle {:?}", lp.backend_timeout()));
            lp.stop(me).unwrap();
        })
        .unwrap();
    lp.stop(idle).unwrap();
    lp.prepare(move |lp, log, me| {
        log.push(format!("outer {:?}", lp.backend_timeout()));
        lp.stop(me).unwrap();
        lp.start(idle).unwrap();
        lp.run(RunMode::NoWait, log).unwrap();
        log.push(format!("back {:?}", lp.backend_timeout()));
        lp.break_loop(Break::One);
    })
    .unwrap();
    let mut log = vec![];
    assert_eq!(
        lp.run(RunMode::Default, &mut log).unwrap(),
        RunOutcome::Broken
    );
    assert_eq!(log, ["outer Some(2s)", "idle Some(0ns)", "back Some(2s)"]);
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
        let mut log = vec![];
        lp.run(RunMode::Default, &mut log).unwrap();
        assert_eq!(log, [Duration::from_secs(2)]);
        assert_eq!(lp.iteration(), 1, "one poll, until the timer");
    });
}
