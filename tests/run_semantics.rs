//! What `run` promises, checked on the simulator and on every OS backend
//! of the host (each scenario under a watchdog, so a hang fails in seconds):
//!
//! - it never blocks with nothing to wait for: when the last active,
//!   referenced watcher goes away in any phase that runs callbacks, it
//!   returns `NoActiveWatchers` (the simulator's `Stalled` once hid this);
//! - idle watchers follow libev's rule, one priority level per iteration;
//! - within one priority, io callbacks run before check watchers, which run
//!   before the timers that expired in the same iteration (Node's
//!   `setImmediate` before `setTimeout(0)`);
//! - an io callback receives only what its interest lets through at
//!   delivery time.

mod common;

use std::time::Duration;

use common::{drain, on_every_backend, on_every_world, RunTo, World};
use evloop::{Check, Idle, Interest, Loop, Prepare, Ready, RunMode, RunOutcome};

// ---- run never blocks with nothing to wait for ----------------------------

/// The `Prepare::new` doc example, on every backend.
#[test]
fn a_prepare_watcher_that_removes_itself_ends_the_run() {
    on_every_backend("prepare removes itself", |name| {
        let mut lp: Loop<u32> = World::new(name).new_loop();
        Prepare::new(&mut lp, |lp, n, me| {
            *n += 1;
            lp.remove(me).unwrap();
        })
        .unwrap();
        let mut n = 0;
        let outcome = lp.run(RunMode::Default, &mut n).unwrap();
        assert_eq!((outcome, n), (RunOutcome::NoActiveWatchers, 1), "{name}");
    });
}

/// An unreferenced watcher stays, but nothing keeps the loop alive once
/// the prepare watcher unrefs itself: `run` must not wait on the rest.
#[test]
fn a_prepare_watcher_that_unrefs_itself_ends_the_run_even_in_once_mode() {
    on_every_world("prepare unrefs itself", |w| {
        let (conn, _peer) = w.pair();
        for mode in [RunMode::Default, RunMode::Once] {
            let mut lp: Loop<u32> = w.new_loop();
            let quiet = lp.io(conn_clone(w, &conn), Interest::READABLE, |_, _, _| {});
            let quiet = quiet.unwrap();
            lp.set_ref(quiet, false).unwrap();
            Prepare::new(&mut lp, |lp, n, me| {
                *n += 1;
                lp.set_ref(me, false).unwrap();
            })
            .unwrap();
            let mut n = 0;
            let outcome = lp.run(mode, &mut n).unwrap();
            assert_eq!((outcome, n), (RunOutcome::NoActiveWatchers, 1), "{mode:?}");
        }
    });
}

/// A second watcher on the same connection, for a test that needs one per
/// loop (the simulator's sockets cannot be cloned: a fresh pair will do,
/// since the test only waits on it).
fn conn_clone(w: &World, conn: &common::Conn) -> common::Conn {
    match conn {
        #[cfg(unix)]
        common::Conn::Os(s) => common::Conn::Os(s.try_clone().unwrap()),
        common::Conn::Sim(_) => w.pair().0,
    }
}

#[test]
fn an_event_fed_before_run_whose_callback_stops_the_last_watcher_ends_the_run() {
    on_every_backend("fed event stops the last watcher", |name| {
        let mut lp: Loop<u32> = World::new(name).new_loop();
        let t = lp
            .timer(Duration::from_secs(3600), Duration::ZERO, |lp, n, me| {
                *n += 1;
                lp.stop(me).unwrap();
            })
            .unwrap();
        lp.feed_event(t, Ready::EMPTY).unwrap();
        let mut n = 0;
        let outcome = lp.run(RunMode::Default, &mut n).unwrap();
        assert_eq!((outcome, n), (RunOutcome::NoActiveWatchers, 1), "{name}");
        assert_eq!(lp.iteration(), 0, "{name}: no iteration was needed");
    });
}

/// A nested `run` invokes what its caller's iteration left pending; when
/// that stops the last watcher, the nested run returns, and so does the
/// outer one.
#[test]
fn a_nested_run_whose_pending_callbacks_stop_the_last_watcher_returns() {
    on_every_backend("nested run", |name| {
        let mut lp: Loop<Vec<String>> = World::new(name).new_loop();
        let keepalive = lp
            .timer(Duration::from_secs(3600), Duration::ZERO, |_, _, _| {})
            .unwrap();
        // Both due at once: `outer` runs first (started first) and nests.
        lp.timer(Duration::ZERO, Duration::ZERO, |lp, log, _| {
            let outcome = lp.run(RunMode::Default, log);
            log.push(format!("nested: {outcome:?}"));
        })
        .unwrap();
        lp.timer(Duration::ZERO, Duration::ZERO, move |lp, log, _| {
            log.push("stops the last watcher".into());
            lp.stop(keepalive).unwrap();
        })
        .unwrap();
        let mut log = vec![];
        let outcome = lp.run(RunMode::Default, &mut log).unwrap();
        assert_eq!(outcome, RunOutcome::NoActiveWatchers, "{name}");
        assert_eq!(
            log,
            ["stops the last watcher", "nested: Ok(NoActiveWatchers)"],
            "{name}"
        );
    });
}

/// The simulator still says `Stalled` where a kernel would wait forever
/// on active io watchers: that is not the same as running out of them.
#[test]
fn the_simulator_stalls_only_with_active_watchers_left() {
    let w = World::new("sim");
    let (conn, _peer) = w.pair();
    let mut lp: Loop = w.new_loop();
    lp.io(conn, Interest::READABLE, |_, _, _| {}).unwrap();
    lp.run_expect(RunMode::Default, &mut (), RunOutcome::Stalled);
}

/// A loop with only prepare and check watchers has nothing that could end
/// a wait: `run` runs one iteration without waiting (so they run), then
/// says `Stalled` instead of waiting forever; a check watcher that removes
/// itself there ends the run as usual.
#[test]
fn with_only_prepare_and_check_watchers_run_iterates_once_then_stalls() {
    on_every_backend("hooks only", |name| {
        for mode in [RunMode::Default, RunMode::Once] {
            let mut lp: Loop<(u32, u32)> = World::new(name).new_loop();
            Prepare::new(&mut lp, |_, n, _| n.0 += 1).unwrap();
            Check::new(&mut lp, |_, n, _| n.1 += 1).unwrap();
            let mut n = (0, 0);
            let outcome = lp.run(mode, &mut n).unwrap();
            assert_eq!(
                (outcome, n),
                (RunOutcome::Stalled, (1, 1)),
                "{name} {mode:?}"
            );
            // Each run serves one more iteration.
            lp.run(mode, &mut n).unwrap();
            assert_eq!(n, (2, 2), "{name} {mode:?}");
        }
        let mut lp: Loop<u32> = World::new(name).new_loop();
        Check::new(&mut lp, |lp, n, me| {
            *n += 1;
            lp.remove(me).unwrap();
        })
        .unwrap();
        let mut n = 0;
        let outcome = lp.run(RunMode::Default, &mut n).unwrap();
        assert_eq!((outcome, n), (RunOutcome::NoActiveWatchers, 1), "{name}");
        // A timer started from a check watcher gives the loop something to
        // wait for: no stall.
        let mut lp: Loop<u32> = World::new(name).new_loop();
        Check::new(&mut lp, |lp, n, me| {
            *n += 1;
            if *n == 1 {
                lp.timer(Duration::from_millis(1), Duration::ZERO, |_, _, _| {})
                    .unwrap();
            } else {
                lp.remove(me).unwrap();
            }
        })
        .unwrap();
        let mut n = 0;
        let outcome = lp.run(RunMode::Default, &mut n).unwrap();
        assert_eq!((outcome, n), (RunOutcome::NoActiveWatchers, 2), "{name}");
    });
}

// ---- idle watchers by priority (libev's rule) -----------------------------

/// An io watcher that stays readable (the data is never read) and logs,
/// removing itself after `limit` calls so that a wrong rule shows up as a
/// wrong log, not a hang.
fn always_readable(
    lp: &mut Loop<'static, Vec<String>>,
    w: &World,
    priority: i32,
    limit: u32,
) -> evloop::Io {
    let (conn, mut peer) = w.pair();
    peer.send(b"data");
    std::mem::forget(peer); // keep the peer open for the test's duration
    let mut calls = 0;
    let io = lp
        .io(conn, Interest::READABLE, move |lp, log, ev| {
            calls += 1;
            log.push(format!("io{priority}"));
            if calls == limit {
                lp.remove(ev.watcher).unwrap();
            }
        })
        .unwrap();
    lp.set_priority(io, priority).unwrap();
    io
}

#[test]
fn a_high_priority_idle_runs_while_lower_priority_work_is_pending() {
    on_every_world("idle above pending io", |w| {
        let mut lp: Loop<Vec<String>> = w.new_loop();
        let io = always_readable(&mut lp, w, 0, 5);
        let mut n = 0;
        let idle = Idle::new(&mut lp, move |lp, log, me| {
            n += 1;
            log.push("idle2".into());
            if n == 3 {
                lp.remove(me).unwrap();
                let _ = lp.remove(io);
            }
        })
        .unwrap();
        lp.set_priority(idle, 2).unwrap();
        let log = lp.finish(vec![]);
        // Each iteration: the priority-2 idle first, then the io event.
        assert_eq!(log, ["idle2", "io0", "idle2", "io0", "idle2"]);
    });
}

#[test]
fn an_idle_waits_while_anything_at_its_priority_or_above_is_pending() {
    on_every_world("idle below pending io", |w| {
        let mut lp: Loop<Vec<String>> = w.new_loop();
        always_readable(&mut lp, w, 0, 3);
        for priority in [0, -1] {
            let idle = Idle::new(&mut lp, move |lp, log, me| {
                log.push(format!("idle{priority}"));
                lp.remove(me).unwrap();
            })
            .unwrap();
            lp.set_priority(idle, priority).unwrap();
        }
        let log = lp.finish(vec![]);
        // The idles wait for the io watcher to go; then one level per
        // iteration, highest first.
        assert_eq!(log, ["io0", "io0", "io0", "idle0", "idle-1"]);
    });
}

#[test]
fn idles_run_one_priority_level_per_iteration() {
    on_every_backend("idle levels", |name| {
        let mut lp: Loop<Vec<String>> = World::new(name).new_loop();
        let mut n = 0;
        let high = Idle::new(&mut lp, move |lp, log, me| {
            n += 1;
            log.push("idle1".into());
            if n == 2 {
                lp.remove(me).unwrap();
            }
        })
        .unwrap();
        lp.set_priority(high, 1).unwrap();
        let low = Idle::new(&mut lp, |lp, log, me| {
            log.push("idle-1".into());
            lp.remove(me).unwrap();
        })
        .unwrap();
        lp.set_priority(low, -1).unwrap();
        // A priority change of an active idle moves it between levels.
        let moved = Idle::new(&mut lp, |lp, log, me| {
            log.push("moved to 1".into());
            lp.remove(me).unwrap();
        })
        .unwrap();
        lp.set_priority(moved, 1).unwrap();
        assert_eq!(
            lp.finish(vec![]),
            ["idle1", "moved to 1", "idle1", "idle-1"],
            "{name}"
        );
        assert_eq!(lp.iteration(), 3, "{name}");
    });
}

#[test]
fn expired_timers_hold_back_idles_of_their_priority_and_below_only() {
    on_every_backend("idle vs expired timers", |name| {
        let mut lp: Loop<Vec<String>> = World::new(name).new_loop();
        for priority in [2, 0] {
            let idle = Idle::new(&mut lp, move |lp, log, me| {
                log.push(format!("idle{priority} @{}", lp.iteration()));
                lp.remove(me).unwrap();
            })
            .unwrap();
            lp.set_priority(idle, priority).unwrap();
        }
        let t = lp
            .timer(Duration::ZERO, Duration::ZERO, |lp, log, _| {
                log.push(format!("timer @{}", lp.iteration()))
            })
            .unwrap();
        lp.set_priority(t, 1).unwrap();
        assert_eq!(
            lp.finish(vec![]),
            ["idle2 @1", "timer @1", "idle0 @2"],
            "{name}"
        );
    });
}

// ---- io, then check, then expired timers ----------------------------------

#[test]
fn checks_run_before_the_timers_that_expired_in_the_same_iteration() {
    on_every_world("check before timer", |w| {
        let mut lp: Loop<Vec<String>> = w.new_loop();
        let (conn, mut peer) = w.pair();
        peer.send(b"x");
        lp.io(conn, Interest::READABLE, |lp, log, ev| {
            drain(ev.source);
            log.push(format!("io @{}", lp.iteration()));
            lp.remove(ev.watcher).unwrap();
            // Node's guarantee: from an io callback, setImmediate (a check
            // watcher) runs before setTimeout(0) (a zero timer).
            lp.timer(Duration::ZERO, Duration::ZERO, |lp, log, _| {
                log.push(format!("timer(0) from io @{}", lp.iteration()))
            })
            .unwrap();
            Check::new(lp, |lp, log, me| {
                log.push(format!("check from io @{}", lp.iteration()));
                lp.remove(me).unwrap();
            })
            .unwrap();
        })
        .unwrap();
        Check::new(&mut lp, |lp, log, me| {
            log.push(format!("check @{}", lp.iteration()));
            lp.remove(me).unwrap();
        })
        .unwrap();
        // Due at once: it expires in the first iteration, with the io event.
        lp.timer(Duration::ZERO, Duration::ZERO, |lp, log, _| {
            log.push(format!("timer @{}", lp.iteration()))
        })
        .unwrap();
        let log = lp.finish(vec![]);
        assert_eq!(
            log,
            [
                "io @1",
                "check @1",
                "timer @1",
                "check from io @2",
                "timer(0) from io @2",
            ]
        );
        drop(peer);
    });
}

// ---- readiness filtered by the interest at delivery time ------------------

#[test]
fn an_event_queued_before_set_interest_delivers_only_the_new_interest() {
    on_every_world("filter at delivery", |w| {
        let mut lp: Loop<Vec<String>> = w.new_loop();
        // Readable (data waits) and writable.
        let (both, mut peer_a) = w.pair();
        peer_a.send(b"x");
        // Only writable, and it asks for only that.
        let (write_only, _peer_b) = w.pair();
        let y = lp
            .io(both, Interest::BOTH, |lp, log, ev| {
                log.push(format!("y {}", ev.ready));
                lp.remove(ev.watcher).unwrap();
            })
            .unwrap();
        let z = lp
            .io(write_only, Interest::WRITABLE, |lp, log, ev| {
                log.push(format!("z {}", ev.ready));
                lp.remove(ev.watcher).unwrap();
            })
            .unwrap();
        // Runs first and changes what y and z receive while their events
        // (y: rw, z: w) are already queued.
        let (trigger, mut peer_c) = w.pair();
        peer_c.send(b"go");
        let x = lp
            .io(trigger, Interest::READABLE, move |lp, log, ev| {
                drain(ev.source);
                log.push("x".into());
                y.set_interest(lp, Interest::READABLE).unwrap();
                z.set_interest(lp, Interest::READABLE).unwrap();
                lp.remove(ev.watcher).unwrap();
            })
            .unwrap();
        lp.set_priority(x, 1).unwrap();
        let mut log = vec![];
        lp.run(RunMode::Once, &mut log).unwrap();
        // z's queued `w` was all it had: it is not called at all.
        assert_eq!(log, ["x", "y r"]);
        assert!(!lp.is_pending(z).unwrap());
        lp.remove(z).unwrap();
        drop((peer_a, peer_c));
    });
}

/// The same through a direct batch (every watcher at the default
/// priority, so io callbacks run straight from the poll results):
/// `set_interest` turns the rest of the batch into queued entries, which
/// are filtered alike.
#[test]
fn set_interest_from_a_callback_filters_a_direct_batch_too() {
    #[derive(Default)]
    struct St {
        log: Vec<String>,
        watchers: Vec<evloop::Io>,
    }
    on_every_world("filter at delivery, direct", |w| {
        let mut lp: Loop<St> = w.new_loop();
        let mut st = St::default();
        let mut peers = vec![];
        for _ in 0..2 {
            let (conn, mut peer) = w.pair();
            peer.send(b"x");
            peers.push(peer);
            let h = lp
                .io(conn, Interest::BOTH, |lp, st: &mut St, ev| {
                    st.log.push(ev.ready.to_string());
                    drain(ev.source);
                    lp.remove(ev.watcher).unwrap();
                    // Whichever runs first narrows the other to READABLE.
                    for &other in &st.watchers {
                        if other != ev.watcher && lp.is_active(other).unwrap_or(false) {
                            other.set_interest(lp, Interest::READABLE).unwrap();
                        }
                    }
                })
                .unwrap();
            st.watchers.push(h);
        }
        lp.run(RunMode::Once, &mut st).unwrap();
        assert_eq!(st.log, ["rw", "r"]);
        drop(peers);
    });
}

/// `set_repeat(0)` on an active repeating timer (libuv's
/// `uv_timer_set_repeat`): the expiry already scheduled still comes, then
/// the timer stops and the run ends; on every backend.
#[test]
fn a_repeat_set_to_zero_fires_once_more_then_stops() {
    on_every_world("set_repeat zero", |w| {
        let mut lp: Loop<Vec<u32>> = w.new_loop();
        let t = lp
            .timer(
                Duration::from_millis(5),
                Duration::from_millis(5),
                |lp, log, me| {
                    log.push(log.len() as u32 + 1);
                    if log.len() == 2 {
                        me.set_repeat(lp, Duration::ZERO).unwrap();
                        // Still active: the next expiry was scheduled
                        // before the change.
                        assert!(lp.is_active(me).unwrap());
                    }
                },
            )
            .unwrap();
        let mut log = vec![];
        let outcome = lp.run(RunMode::Default, &mut log).unwrap();
        assert_eq!(outcome, RunOutcome::NoActiveWatchers);
        assert_eq!(log, [1, 2, 3]);
        assert!(!lp.is_active(t).unwrap());
        assert_eq!(t.repeat(&lp).unwrap(), Duration::ZERO);
    });
}
