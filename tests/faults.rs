//! The loop under faults, on the simulator and every OS backend (each
//! scenario under a watchdog): a panicking callback leaves the loop whole;
//! a handle never acts on another loop's watcher; an fd that cannot be
//! watched is refused when its watcher is created; the simulator's clock
//! ends without a busy loop.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use common::{
    drain, on_every_backend, on_every_world, sim_socket, watchdog, RunTo, World, WATCHDOG,
};
use evloop::{Async, Error, Handle, Idle, Interest, Loop, Ready, RunMode, RunOutcome, Sim};

// ---- a panic in a callback -------------------------------------------------

#[test]
#[cfg_attr(
    target_os = "wasi",
    ignore = "wasm32-wasip1 aborts on a panic (no unwinding)"
)]
fn a_panicking_io_callback_leaves_the_watcher_and_its_source_in_place() {
    on_every_world("panic in io callback", |w| {
        let mut lp: Loop<Vec<u8>> = w.new_loop();
        let (conn, mut peer) = w.pair();
        let io = lp
            .io(conn, Interest::READABLE, |_, got, ev| {
                let bytes = drain(ev.source);
                got.extend_from_slice(&bytes);
                if bytes == b"boom" {
                    panic!("boom");
                }
            })
            .unwrap();
        peer.send(b"boom");
        let mut got = vec![];
        let caught = catch_unwind(AssertUnwindSafe(|| lp.run(RunMode::Default, &mut got)));
        assert!(caught.is_err(), "the panic propagates out of run");
        assert_eq!(lp.depth(), 0);
        assert!(lp.is_active(io).unwrap());
        assert_eq!(lp.pending_count(), 0);
        // The source was not dropped (closed while registered): the same
        // watcher still hears from it.
        peer.send(b" and more");
        lp.run_expect(RunMode::Once, &mut got, RunOutcome::IterationDone);
        assert_eq!(got, b"boom and more");
        // And it can be taken back (not Busy).
        let conn: common::Conn = io.into_source(&mut lp).unwrap();
        drop(conn);
        lp.run_to_end(&mut got);
    });
}

#[test]
#[cfg_attr(
    target_os = "wasi",
    ignore = "wasm32-wasip1 aborts on a panic (no unwinding)"
)]
fn after_a_panic_the_rest_of_the_iteration_runs_in_the_next_run() {
    on_every_backend("panic leaves the others pending", |name| {
        let mut lp: Loop<Vec<&str>> = World::new(name).new_loop();
        lp.timer(Duration::ZERO, Duration::ZERO, |_, log, _| {
            log.push("first");
            panic!("first");
        })
        .unwrap();
        lp.timer(Duration::ZERO, Duration::ZERO, |_, log, _| {
            log.push("second")
        })
        .unwrap();
        let mut log = vec![];
        let caught = catch_unwind(AssertUnwindSafe(|| lp.run(RunMode::Default, &mut log)));
        assert!(caught.is_err());
        assert_eq!(
            (log.clone(), lp.pending_count()),
            (vec!["first"], 1),
            "{name}"
        );
        lp.run_to_end(&mut log);
        assert_eq!(log, ["first", "second"], "{name}");
    });
}

#[test]
#[cfg_attr(
    target_os = "wasi",
    ignore = "wasm32-wasip1 aborts on a panic (no unwinding)"
)]
fn a_panic_in_a_nested_run_restores_every_depth() {
    on_every_backend("panic in nested run", |name| {
        let mut lp: Loop<u32> = World::new(name).new_loop();
        let boom = lp
            .timer(Duration::ZERO, Duration::ZERO, |_, _, _| panic!("deep"))
            .unwrap();
        lp.stop(boom).unwrap();
        Idle::new(&mut lp, move |lp, depth, me| {
            lp.remove(me).unwrap();
            lp.start(boom).unwrap();
            *depth = lp.depth();
            let _ = lp.run(RunMode::Default, depth); // panics inside
        })
        .unwrap();
        let mut depth = 0;
        let caught = catch_unwind(AssertUnwindSafe(|| lp.run(RunMode::Default, &mut depth)));
        assert!(caught.is_err());
        assert_eq!((depth, lp.depth()), (1, 0), "{name}");
        // The loop runs again, and break_loop works there.
        Idle::new(&mut lp, |lp, _, _| lp.break_loop(evloop::Break::One)).unwrap();
        lp.run_expect(RunMode::Default, &mut depth, RunOutcome::Broken);
    });
}

/// A panic in the middle of a poll's results (dispatched straight from
/// them): the results after it are not lost, and the next run delivers
/// them; the watcher that panicked still works.
#[test]
#[cfg_attr(
    target_os = "wasi",
    ignore = "wasm32-wasip1 aborts on a panic (no unwinding)"
)]
fn a_panic_amid_one_polls_results_loses_none_of_the_rest() {
    on_every_world("panic amid a batch", |w| {
        let mut lp: Loop<Vec<String>> = w.new_loop();
        let mut peers = vec![];
        for i in 0..3 {
            let (conn, peer) = w.pair();
            peers.push(peer);
            lp.io(conn, Interest::READABLE, move |_, log, ev| {
                let bytes = drain(ev.source);
                log.push(format!("{i}:{}", String::from_utf8_lossy(&bytes)));
                if bytes == b"boom" {
                    panic!("boom");
                }
            })
            .unwrap();
        }
        // All three ready before the loop polls: one poll reports them.
        for (i, p) in peers.iter_mut().enumerate() {
            p.send(if i == 1 { b"boom" } else { b"data" });
        }
        let mut log = vec![];
        let caught = catch_unwind(AssertUnwindSafe(|| lp.run(RunMode::Once, &mut log)));
        assert!(caught.is_err());
        assert_eq!(lp.depth(), 0);
        // The third's event was read from the kernel with the others: it
        // is still owed, and a level-triggered fd would report it again
        // anyway. Either way it is delivered exactly once.
        peers[1].send(b"again");
        for _ in 0..3 {
            if log.len() >= 4 {
                break;
            }
            lp.run(RunMode::Once, &mut log).unwrap();
        }
        let mut sorted = log.clone();
        sorted.sort();
        assert_eq!(sorted, ["0:data", "1:again", "1:boom", "2:data"], "{log:?}");
    });
}

/// A one-shot watcher whose callback panics before re-arming itself is
/// left disarmed (inactive, its fd not watched), with direct dispatch and
/// without (the direct path defers the disarm while the callback runs):
/// a start re-arms it, and it hears from its fd again.
#[test]
#[cfg_attr(
    target_os = "wasi",
    ignore = "wasm32-wasip1 aborts on a panic (no unwinding)"
)]
fn a_panicking_oneshot_callback_leaves_its_watcher_disarmed() {
    on_every_world("panic in a one-shot callback", |w| {
        for direct in [true, false] {
            let mut lp: Loop<Vec<u8>> = w.new_loop();
            lp.set_direct_dispatch(direct);
            let (conn, mut peer) = w.pair();
            let oneshot = Interest::READABLE.with_trigger(evloop::Trigger::Oneshot);
            let io = lp
                .io(conn, oneshot, |_, got, ev| {
                    let bytes = drain(ev.source);
                    got.extend_from_slice(&bytes);
                    if bytes == b"boom" {
                        panic!("boom");
                    }
                })
                .unwrap();
            peer.send(b"boom");
            let mut got = vec![];
            let caught = catch_unwind(AssertUnwindSafe(|| lp.run(RunMode::Default, &mut got)));
            assert!(caught.is_err(), "the panic propagates out of run");
            assert_eq!(
                (lp.is_active(io).unwrap(), lp.active_count(), lp.depth()),
                (false, 0, 0),
                "direct {direct}"
            );
            lp.run_to_end(&mut got);
            lp.start(io).unwrap();
            assert_eq!((lp.is_active(io).unwrap(), lp.active_count()), (true, 1));
            peer.send(b" and more");
            lp.run_expect(RunMode::Once, &mut got, RunOutcome::IterationDone);
            assert_eq!(got, b"boom and more", "direct {direct}");
            assert!(!lp.is_active(io).unwrap());
            lp.run_to_end(&mut got);
        }
    });
}

/// A nested run that panics while the outer callback's watcher has events
/// held back for it (they arrived while its callback ran): the events are
/// delivered once the loop runs again.
#[test]
#[cfg_attr(
    target_os = "wasi",
    ignore = "wasm32-wasip1 aborts on a panic (no unwinding)"
)]
fn events_held_back_for_an_outer_callback_survive_a_panic_in_the_nested_run() {
    on_every_world("held back across a nested panic", |w| {
        let mut lp: Loop<Vec<String>> = w.new_loop();
        let (conn, mut peer) = w.pair();
        let boom = lp
            .timer(Duration::from_millis(5), Duration::ZERO, |_, _, _| {
                panic!("nested")
            })
            .unwrap();
        lp.stop(boom).unwrap();
        let mut first = true;
        lp.io(conn, Interest::READABLE, move |lp, log, ev| {
            let bytes = drain(ev.source);
            log.push(format!("read {}", String::from_utf8_lossy(&bytes)));
            if std::mem::take(&mut first) {
                // More for this watcher while its callback runs, then a
                // nested run whose timer panics.
                lp.start(boom).unwrap();
                let _ = lp.run(RunMode::Default, log);
            }
        })
        .unwrap();
        peer.send(b"one");
        // The peer's second send lands while the outer callback runs: a
        // helper timer in the nested run sends it before the panic.
        let mut peer2 = Some(peer);
        lp.timer(Duration::from_millis(1), Duration::ZERO, move |_, _, me| {
            if let Some(p) = peer2.as_mut() {
                p.send(b"two");
            }
            let _ = me;
        })
        .unwrap();
        let mut log = vec![];
        let caught = catch_unwind(AssertUnwindSafe(|| lp.run(RunMode::Default, &mut log)));
        assert!(caught.is_err());
        assert_eq!(lp.depth(), 0);
        for _ in 0..3 {
            if log.len() >= 2 {
                break;
            }
            lp.run(RunMode::Once, &mut log).unwrap();
        }
        assert_eq!(log, ["read one", "read two"]);
    });
}

/// An event held back for a running callback (fed to it during a nested
/// run) is narrowed by a `set_interest` made before the callback returns:
/// it is delivered with the new interest only.
#[test]
fn an_event_held_back_during_a_nested_run_is_narrowed_by_set_interest() {
    on_every_world("held back, then narrowed", |w| {
        let mut lp: Loop<Vec<Ready>> = w.new_loop();
        let (conn, mut peer) = w.pair();
        let mut first = true;
        lp.io(conn, Interest::BOTH, move |lp, log, ev| {
            log.push(ev.ready);
            if std::mem::take(&mut first) {
                drain(ev.source);
                // Held back: this callback is running.
                lp.feed_event(ev.watcher, Ready::READABLE | Ready::WRITABLE)
                    .unwrap();
                let _ = lp.run(RunMode::NoWait, log);
                ev.watcher.set_interest(lp, Interest::READABLE).unwrap();
            } else {
                lp.remove(ev.watcher).unwrap();
            }
        })
        .unwrap();
        peer.send(b"x");
        let mut log = vec![];
        for _ in 0..3 {
            if log.len() >= 2 {
                break;
            }
            lp.run(RunMode::Once, &mut log).unwrap();
        }
        assert_eq!(log.len(), 2, "{log:?}");
        assert!(log[0].is_writable(), "first {:?}", log[0]);
        assert!(
            log[1].is_readable() && !log[1].is_writable(),
            "the held-back event kept WRITABLE: {:?}",
            log[1]
        );
    });
}

// ---- handles belong to their loop -------------------------------------------

#[test]
fn a_handle_from_another_loop_is_refused_and_touches_nothing() {
    on_every_world("foreign handles", |w| {
        let mut a: Loop = w.new_loop();
        let mut b: Loop = w.new_loop();
        // Both in slot 0 of their loop, so only the loop id in the handle tells them
        // apart.
        let ta = a
            .timer(Duration::from_secs(60), Duration::ZERO, |_, _, _| {})
            .unwrap();
        let tb = b
            .timer(Duration::from_secs(60), Duration::ZERO, |_, _, _| {})
            .unwrap();
        let (ca, _pa) = w.pair();
        let (cb, _pb) = w.pair();
        let ia = a.io(ca, Interest::READABLE, |_, _, _| {}).unwrap();
        let ib = b.io(cb, Interest::READABLE, |_, _, _| {}).unwrap();
        let foreign = |r: Result<(), Error>, h: &dyn std::fmt::Debug| match r {
            Err(e @ Error::ForeignHandle { .. }) => {
                assert!(e.to_string().contains("another loop"), "{e}")
            }
            other => panic!("{h:?} on the wrong loop gave {other:?}"),
        };
        foreign(a.stop(tb), &tb);
        foreign(a.start(tb), &tb);
        foreign(a.set_priority(tb, 1), &tb);
        foreign(a.set_ref(tb, false), &tb);
        foreign(a.feed_event(tb, Ready::EMPTY), &tb);
        foreign(tb.again(&mut a), &tb);
        foreign(tb.set(&mut a, Duration::ZERO, Duration::ZERO), &tb);
        foreign(a.is_active(tb).map(drop), &tb);
        foreign(a.is_pending(tb).map(drop), &tb);
        foreign(a.priority(tb).map(drop), &tb);
        foreign(tb.remaining(&a).map(drop), &tb);
        foreign(a.clear_pending(tb).map(drop), &tb);
        foreign(ib.set_interest(&mut a, Interest::WRITABLE), &ib);
        foreign(ib.interest(&a).map(drop), &ib);
        foreign(ib.fd(&a).map(drop), &ib);
        foreign(ib.into_source::<common::Conn, _>(&mut a).map(drop), &ib);
        foreign(a.remove(ib), &ib);
        foreign(a.remove(tb), &tb);
        // Nothing of a's changed.
        assert_eq!(a.active_count(), 2);
        assert_eq!(ta.remaining(&a).unwrap(), Duration::from_secs(60));
        assert_eq!(a.priority(ta).unwrap(), 0);
        assert!(!a.is_pending(ta).unwrap());
        assert_eq!(ia.interest(&a).unwrap(), Interest::READABLE);
        // b's handles still work on b.
        b.remove(tb).unwrap();
        b.remove(ib).unwrap();
        // A removed watcher's handle is stale, not foreign.
        a.remove(ta).unwrap();
        assert!(matches!(
            a.stop(ta),
            Err(Error::StaleHandle { kind: "timer" })
        ));
        assert_eq!(ta.kind(), "timer");
    });
}

// ---- fds that cannot be watched: refused at creation -------------------------

#[test]
fn an_invalidated_simulated_socket_is_refused_at_creation() {
    let (sim, sock) = sim_socket("gone", 0);
    sim.invalidate(Duration::ZERO, &sock);
    let mut lp: Loop = Loop::with_backend(sim.backend());
    // Let the simulator apply the invalidation.
    Idle::new(&mut lp, |lp, _, me| lp.remove(me).unwrap()).unwrap();
    lp.run(RunMode::NoWait, &mut ()).unwrap();
    let fd = sock.fd();
    let err = lp
        .io(sock, Interest::READABLE, |_, _, _| panic!("called"))
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidFd { fd: f, ref reason } if f == fd && reason.contains("invalidated")),
        "{err}"
    );
}

// ---- the end of the simulator's clock ---------------------------------------

/// A repeating timer at the end of the clock (`u64::MAX` ns of virtual
/// time) fires once and is then parked: it used to be rescheduled to the
/// same saturated instant and expire again, forever, inside one iteration.
#[test]
fn a_repeating_timer_at_the_end_of_the_clock_fires_once_and_the_run_ends() {
    watchdog("end of time", WATCHDOG, || {
        let sim = Sim::new();
        let mut lp: Loop<u32> = Loop::with_backend(sim.backend());
        let last = Duration::from_nanos(u64::MAX - 1);
        let t = lp
            .timer(last, Duration::from_nanos(1), |lp, n, _| {
                *n += 1;
                assert_eq!(lp.now(), Duration::from_nanos(u64::MAX - 1));
            })
            .unwrap();
        let mut n = 0;
        // Nothing can happen after the end of the clock: on the simulator
        // the run stalls (a kernel would simply wait).
        lp.run_expect(RunMode::Default, &mut n, RunOutcome::Stalled);
        assert_eq!(n, 1);
        // Still active, due "never".
        assert!(lp.is_active(t).unwrap());
        assert_eq!(t.remaining(&lp).unwrap(), Duration::MAX);
    });
}

/// Deadlines beyond the end of the clock never fire, and bound no wait.
#[test]
fn a_timer_beyond_the_end_of_the_clock_never_fires() {
    on_every_backend("timer at Duration::MAX", |name| {
        let mut lp: Loop<u32> = World::new(name).new_loop();
        let never = lp
            .timer(Duration::MAX, Duration::MAX, |_, n, _| *n += 1)
            .unwrap();
        lp.set_ref(never, false).unwrap();
        lp.timer(Duration::from_millis(1), Duration::ZERO, |_, _, _| {})
            .unwrap();
        assert_eq!(lp.finish(0), 0, "{name}");
        assert!(lp.is_active(never).unwrap());
        assert_eq!(never.remaining(&lp).unwrap(), Duration::MAX, "{name}");
    });
}

// ---- a backend that cannot be woken ----------------------------------------

/// A backend from outside the crate whose own OS services offer no waker
/// (`NoNotices`: every service refused).
struct Unwakeable(Duration, evloop::backend::NoNotices);

impl evloop::backend::Backend for Unwakeable {
    fn name(&self) -> &'static str {
        "unwakeable"
    }
    fn capabilities(&self) -> evloop::backend::Capabilities {
        evloop::backend::Capabilities::default()
    }
    fn modify(&mut self, _: std::os::fd::RawFd, _: Interest, _: Interest) -> std::io::Result<()> {
        Ok(())
    }
    fn poll(
        &mut self,
        timeout: Option<Duration>,
        _: &mut Vec<evloop::backend::PollEvent>,
    ) -> std::io::Result<evloop::backend::PollStatus> {
        self.0 += timeout.unwrap_or(Duration::from_millis(1));
        Ok(evloop::backend::PollStatus::Done)
    }
    fn now(&mut self) -> Duration {
        self.0
    }
    fn notices(&mut self) -> Option<&mut dyn evloop::backend::NoticeService> {
        Some(&mut self.1)
    }
}

/// Without a waker an async watcher is refused when it is created, with
/// the backend's error, and leaves nothing behind; the loop goes on.
#[test]
fn an_async_watcher_on_a_backend_without_a_waker_is_refused_and_leaves_nothing() {
    let mut lp: Loop<u32> =
        Loop::with_backend(Unwakeable(Duration::ZERO, evloop::backend::NoNotices));
    for _ in 0..2 {
        match Async::new(&mut lp, |_, _, _| {}) {
            Err(Error::Backend {
                backend: "unwakeable",
                op: "provide a waker",
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
    }
    assert!(format!("{lp:?}").contains("watchers: 0"), "{lp:?}");
    assert_eq!(lp.pending_count(), 0);
    lp.timer(Duration::from_millis(5), Duration::ZERO, |_, n, _| *n += 1)
        .unwrap();
    let mut n = 0;
    assert_eq!(
        lp.run(RunMode::Default, &mut n).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert_eq!(n, 1);
}

// ---- a backend that breaks its contract ------------------------------------

#[test]
fn a_backend_refusing_a_change_outside_its_batch_tells_the_watchers_and_does_not_panic() {
    use evloop::backend::{Backend, Capabilities, Change, NoticeService, PollEvent, PollStatus};
    use evloop::RawFd;

    // `modify_all` names a failed change beyond the batch (a trace once
    // did, through the replay's backend): which fds it registered is
    // unknown, so each one's watchers get ERROR, as a refused fd's do.
    struct Broken<B>(B);
    impl<B: Backend> Backend for Broken<B> {
        fn name(&self) -> &'static str {
            "broken"
        }
        fn capabilities(&self) -> Capabilities {
            self.0.capabilities()
        }
        fn modify(&mut self, fd: RawFd, old: Interest, new: Interest) -> std::io::Result<()> {
            self.0.modify(fd, old, new)
        }
        fn modify_all(&mut self, changes: &[Change]) -> Result<(), (usize, std::io::Error)> {
            if changes.iter().any(|c| c.new != Interest::NONE) {
                return Err((changes.len() + 49, std::io::Error::other("refused")));
            }
            self.0.modify_all(changes)
        }
        fn poll(
            &mut self,
            timeout: Option<Duration>,
            events: &mut Vec<PollEvent>,
        ) -> std::io::Result<PollStatus> {
            self.0.poll(timeout, events)
        }
        fn now(&mut self) -> Duration {
            self.0.now()
        }
        fn notices(&mut self) -> Option<&mut dyn NoticeService> {
            self.0.notices()
        }
    }
    watchdog("change outside its batch", WATCHDOG, || {
        let sim = Sim::new();
        let sock = sim.socket("s", 0);
        let mut lp: Loop<Vec<Ready>> = Loop::with_backend(Broken(sim.backend()));
        lp.io(sock, Interest::READABLE, |lp, got, ev| {
            got.push(ev.ready);
            lp.remove(ev.watcher).unwrap();
        })
        .unwrap();
        let mut got = vec![];
        lp.run(RunMode::Default, &mut got).unwrap();
        assert_eq!(got.len(), 1);
        assert!(got[0].contains(Ready::ERROR), "{:?}", got[0]);
    });
}
