//! The loop's behaviour on the simulated backend, asserted as exact traces
//! and counts (issue: core loop scenarios 1-7).

use std::io::{ErrorKind, Read, Write};
use std::time::Duration;

use evloop::{
    Break, Error, Interest, Loop, Ready, RunMode, RunOutcome, Sim, SimSocket, MAX_PRIORITY,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Reads until WouldBlock/EOF; returns the bytes and whether EOF was seen.
fn drain(sock: &mut SimSocket) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut buf = [0u8; 16];
    loop {
        match sock.read(&mut buf) {
            Ok(0) => return (out, true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return (out, false),
            Err(e) => panic!("unexpected read error {e}"),
        }
    }
}

// ---------------------------------------------------------------- scenario 1

#[test]
fn three_connections_arrivals_at_different_times() {
    let sim = Sim::new();
    let conns: Vec<SimSocket> = ["c1", "c2", "c3"]
        .iter()
        .map(|n| sim.socket(n, 64))
        .collect();
    sim.deliver(ms(1), &conns[0], b"hello");
    sim.deliver(ms(1), &conns[1], b"hi");
    sim.deliver(ms(4), &conns[2], b"hey");
    sim.deliver(ms(7), &conns[0], b"again");

    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    for c in conns {
        lp.io(c, Interest::READABLE, |lp, log, ev| {
            let (bytes, _) = drain(ev.source);
            log.push(format!(
                "t={:?} {} read {:?}",
                lp.now(),
                ev.source.name(),
                String::from_utf8_lossy(&bytes)
            ));
        })
        .unwrap();
    }
    let mut log = Vec::new();
    let outcome = lp.run(RunMode::Default, &mut log).unwrap();

    assert_eq!(
        outcome,
        RunOutcome::Stalled,
        "nothing is scheduled after t=7ms"
    );
    assert_eq!(
        sim.trace_lines(),
        [
            "t=0ns modify fd3 - => r",
            "t=0ns modify fd4 - => r",
            "t=0ns modify fd5 - => r",
            "t=0ns idle until t=1ms",
            "t=1ms poll {fd3:r, fd4:r}",
            "t=1ms dispatch fd3 r",
            "t=1ms dispatch fd4 r",
            "t=1ms idle until t=4ms",
            "t=4ms poll {fd5:r}",
            "t=4ms dispatch fd5 r",
            "t=4ms idle until t=7ms",
            "t=7ms poll {fd3:r}",
            "t=7ms dispatch fd3 r",
            "t=7ms stalled",
        ]
    );
    assert_eq!(
        log,
        [
            "t=1ms c1 read \"hello\"",
            "t=1ms c2 read \"hi\"",
            "t=4ms c3 read \"hey\"",
            "t=7ms c1 read \"again\"",
        ]
    );
    assert_eq!(lp.iteration(), 4);
}

// ---------------------------------------------------------------- scenario 2

/// Per-connection state of the backpressure handler.
#[derive(Default)]
struct Outbox {
    unsent: Vec<u8>,
    dispatches: usize,
}

/// Writes as much of `unsent` as the socket takes; returns whether all went.
fn flush(sock: &mut SimSocket, unsent: &mut Vec<u8>) -> bool {
    while !unsent.is_empty() {
        match sock.write(unsent) {
            Ok(n) => {
                unsent.drain(..n);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(e) => panic!("write failed: {e}"),
        }
    }
    true
}

#[test]
fn backpressure_adds_writable_only_while_data_is_unsent() {
    let sim = Sim::new();
    let conn = sim.socket("c", 40);
    let fd = conn.fd();
    sim.deliver(ms(1), &conn, b"GET");
    // The peer reads 40 bytes every 5 ms.
    for t in [5, 10, 15] {
        sim.free_send(ms(t), &conn, 40);
    }
    sim.close_peer(ms(30), &conn);

    let mut lp: Loop<Outbox> = Loop::with_backend(sim.backend());
    lp.io(conn, Interest::READABLE, |lp, out, ev| {
        out.dispatches += 1;
        if ev.ready.is_readable() {
            let (req, eof) = drain(ev.source);
            if eof {
                lp.remove(ev.watcher).unwrap();
                return;
            }
            assert_eq!(req, b"GET");
            out.unsent.extend(std::iter::repeat(b'x').take(100));
        }
        let done = flush(ev.source, &mut out.unsent);
        let want = if done {
            Interest::READABLE
        } else {
            Interest::BOTH
        };
        lp.set_interest(ev.watcher, want).unwrap();
    })
    .unwrap();
    let mut out = Outbox::default();
    let outcome = lp.run(RunMode::Default, &mut out).unwrap();

    assert_eq!(outcome, RunOutcome::NoActiveWatchers);
    assert_eq!(sim.sent(fd).len(), 100);
    assert_eq!(
        sim.trace_lines(),
        [
            "t=0ns modify fd3 - => r",
            "t=0ns idle until t=1ms",
            "t=1ms poll {fd3:r}",
            "t=1ms dispatch fd3 r",
            // 40 of 100 bytes went out: Writable is added.
            "t=1ms modify fd3 r => rw",
            "t=1ms idle until t=5ms",
            "t=5ms poll {fd3:w}",
            "t=5ms dispatch fd3 w",
            "t=5ms idle until t=10ms",
            "t=10ms poll {fd3:w}",
            "t=10ms dispatch fd3 w",
            // All sent: Writable is removed.
            "t=10ms modify fd3 rw => r",
            // Capacity freed at 15ms wakes nobody: Writable is not watched.
            "t=10ms idle until t=15ms",
            "t=15ms idle until t=30ms",
            "t=30ms poll {fd3:r|hup}",
            "t=30ms dispatch fd3 r|hup",
            "t=30ms modify fd3 r => -",
        ]
    );
    assert_eq!(out.dispatches, 4, "no busy loop: one dispatch per event");
}

#[test]
fn leaving_writable_on_spins_the_loop() {
    let sim = Sim::new();
    let conn = sim.socket("c", 40);
    sim.deliver(ms(1), &conn, b"GET");
    sim.free_send(ms(5), &conn, 100);

    let mut lp: Loop<Outbox> = Loop::with_backend(sim.backend());
    lp.io(conn, Interest::BOTH, |lp, out, ev| {
        out.dispatches += 1;
        if ev.ready.is_readable() {
            drain(ev.source);
            out.unsent.extend(std::iter::repeat(b'x').take(100));
        }
        flush(ev.source, &mut out.unsent);
        if out.dispatches == 50 {
            lp.break_loop(Break::All); // the test's safety valve
        }
    })
    .unwrap();
    let mut out = Outbox::default();
    assert_eq!(
        lp.run(RunMode::Default, &mut out).unwrap(),
        RunOutcome::Broken
    );
    // Every iteration reports the idle socket writable: 50 dispatches, and
    // virtual time never moves: the busy loop the previous test avoids.
    assert_eq!(out.dispatches, 50);
    assert_eq!(sim.now(), Duration::ZERO);
    let polls_at_zero = sim
        .trace_lines()
        .iter()
        .filter(|l| l.starts_with("t=0ns poll {fd3:w}"))
        .count();
    assert_eq!(polls_at_zero, 50);
}

// ---------------------------------------------------------------- scenario 3

#[test]
fn priorities_then_fifo_within_a_priority() {
    let sim = Sim::new();
    let mut lp: Loop<Vec<&'static str>> = Loop::with_backend(sim.backend());
    let names = ["a0", "b2", "c-1", "d2", "e0", "f-2"];
    let prios = [0, 2, -1, 2, 0, -2];
    for (name, prio) in names.into_iter().zip(prios) {
        let t = lp
            .timer(ms(1), Duration::ZERO, move |_, log, _| log.push(name))
            .unwrap();
        lp.set_priority(t, prio).unwrap();
    }
    let mut log = vec![];
    lp.run(RunMode::Default, &mut log).unwrap();
    assert_eq!(log, ["b2", "d2", "a0", "e0", "c-1", "f-2"]);
}

#[test]
fn idle_only_when_nothing_else_is_pending_and_prepare_check_around_poll() {
    let sim = Sim::new();
    let sock = sim.socket("s", 0);
    sim.deliver(Duration::ZERO, &sock, b"x");
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    let p = lp
        .prepare(|lp, log, _| log.push(format!("prepare#{}", lp.iteration())))
        .unwrap();
    let c = lp
        .check(|lp, log, _| log.push(format!("check#{}", lp.iteration())))
        .unwrap();
    lp.io(sock, Interest::READABLE, |lp, log, ev| {
        drain(ev.source);
        log.push("io".into());
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    let mut idles = 0;
    lp.idle(move |lp, log, me| {
        idles += 1;
        log.push(format!("idle{idles}"));
        if idles == 2 {
            lp.remove(me).unwrap();
        }
    })
    .unwrap();
    lp.timer(ms(5), Duration::ZERO, move |lp, log, _| {
        log.push(format!("timer@{:?}", lp.now()));
        lp.remove(p).unwrap();
        lp.remove(c).unwrap();
    })
    .unwrap();
    let mut log = vec![];
    lp.run(RunMode::Default, &mut log).unwrap();
    assert_eq!(
        log,
        [
            // iteration 1: io is pending, so idle is not.
            "prepare#1",
            "io",
            "check#1",
            // iterations 2-3: nothing else pending: idle runs (after the
            // check watchers, which do not hold it back); the poll does not
            // block while an idle watcher is active.
            "prepare#2",
            "check#2",
            "idle1",
            "prepare#3",
            "check#3",
            "idle2",
            // iteration 4: blocks until the timer; check watchers run
            // before the timers that expired in the same iteration.
            "prepare#4",
            "check#4",
            "timer@5ms",
        ]
    );
    // The poll of iteration 4 blocked (virtual clock jumped), earlier ones did not.
    let lines = sim.trace_lines();
    assert_eq!(lines.iter().filter(|l| l.contains("idle until")).count(), 1);
    assert!(lines.contains(&"t=0ns idle until t=5ms".to_string()));
}

#[test]
fn stopping_a_pending_watcher_cancels_its_event() {
    let sim = Sim::new();
    let a = sim.socket("a", 0);
    let b = sim.socket("b", 0);
    sim.deliver(ms(1), &a, b"1");
    sim.deliver(ms(1), &b, b"2");
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    let b_io = lp
        .io(b, Interest::READABLE, |lp, log, ev| {
            log.push("b".into());
            lp.remove(ev.watcher).unwrap();
        })
        .unwrap();
    let a_io = lp
        .io(a, Interest::READABLE, move |lp, log, ev| {
            log.push("a".into());
            assert!(lp.is_pending(b_io).unwrap());
            lp.stop(b_io).unwrap();
            assert_eq!(lp.pending_count(), 0);
            lp.remove(ev.watcher).unwrap();
        })
        .unwrap();
    lp.set_priority(a_io, MAX_PRIORITY).unwrap();
    let mut log = vec![];
    assert_eq!(
        lp.run(RunMode::Default, &mut log).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert_eq!(log, ["a"]);
    assert!(sim
        .trace_lines()
        .contains(&"t=1ms poll {fd4:r, fd3:r}".to_string()));
}

// ---------------------------------------------------------------- scenario 4

#[test]
fn timers_fire_in_expiry_order() {
    let mut lp: Loop<Vec<(u128, &str)>> = Loop::with_backend(Sim::new().backend());
    for (after, name) in [(30, "c"), (10, "a"), (20, "b")] {
        lp.timer(ms(after), Duration::ZERO, move |lp, log, _| {
            log.push((lp.now().as_millis(), name))
        })
        .unwrap();
    }
    let mut log = vec![];
    lp.run(RunMode::Default, &mut log).unwrap();
    assert_eq!(log, [(10, "a"), (20, "b"), (30, "c")]);
}

#[test]
fn equal_expiry_fires_in_start_order() {
    let mut lp: Loop<Vec<&str>> = Loop::with_backend(Sim::new().backend());
    let mut handles = vec![];
    for name in ["a", "b", "c", "d"] {
        handles.push(
            lp.timer(ms(5), ms(5), move |_, log, _| log.push(name))
                .unwrap(),
        );
    }
    // Restarting "b" at the same instant puts it after the others.
    lp.again(handles[1]).unwrap();
    lp.timer(ms(10), Duration::ZERO, move |lp, _, _| {
        for h in &handles {
            lp.stop(*h).unwrap();
        }
    })
    .unwrap();
    let mut log = vec![];
    lp.run(RunMode::Default, &mut log).unwrap();
    // At 5ms: a c d b. At 10ms the stopper (started at t=0) comes before
    // the repeats (rescheduled at t=5ms) and stops them while pending.
    assert_eq!(log, ["a", "c", "d", "b"]);
}

#[test]
fn repeat_again_and_remaining() {
    let sim = Sim::new();
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    let tick = lp
        .timer(ms(10), ms(10), |lp, log, me| {
            log.push(format!("tick@{:?}", lp.now()));
            assert_eq!(lp.remaining(me).unwrap(), ms(10));
            if lp.now() == ms(30) {
                lp.stop(me).unwrap();
            }
        })
        .unwrap();
    // An inactivity timeout of 25 ms, pushed back by `again` at 10 ms and 20 ms.
    let idle_timeout = lp
        .timer(Duration::ZERO, ms(25), |lp, log, _| {
            log.push(format!("timeout@{:?}", lp.now()))
        })
        .unwrap();
    lp.again(idle_timeout).unwrap();
    assert_eq!(lp.remaining(idle_timeout).unwrap(), ms(25));
    assert_eq!(lp.remaining(tick).unwrap(), ms(10));
    lp.timer(ms(10), ms(10), move |lp, _, me| {
        lp.again(idle_timeout).unwrap();
        if lp.now() == ms(20) {
            lp.stop(me).unwrap();
        }
    })
    .unwrap();
    let mut log = vec![];
    let mut guard = 0;
    // The repeating timeout would run forever: stop after it fired twice.
    while log
        .iter()
        .filter(|l: &&String| l.starts_with("timeout"))
        .count()
        < 2
    {
        lp.run(RunMode::Once, &mut log).unwrap();
        guard += 1;
        assert!(guard < 20);
    }
    assert_eq!(
        log,
        [
            "tick@10ms",
            "tick@20ms",
            "tick@30ms",
            "timeout@45ms",
            "timeout@70ms"
        ]
    );
    // `again` on a timer without a period stops it.
    let once = lp.timer(ms(5), Duration::ZERO, |_, _, _| {}).unwrap();
    lp.again(once).unwrap();
    assert!(!lp.is_active(once).unwrap());
    assert_eq!(lp.remaining(once).unwrap(), Duration::ZERO);
}

#[test]
fn timer_stopped_while_pending_is_not_delivered() {
    let mut lp: Loop<Vec<&str>> = Loop::with_backend(Sim::new().backend());
    let victim = lp
        .timer(ms(5), Duration::ZERO, |_, log, _| log.push("victim"))
        .unwrap();
    let killer = lp
        .timer(ms(5), Duration::ZERO, move |lp, log, _| {
            assert!(lp.is_pending(victim).unwrap());
            lp.stop(victim).unwrap();
            log.push("killer");
        })
        .unwrap();
    lp.set_priority(killer, 1).unwrap();
    let mut log = vec![];
    lp.run(RunMode::Default, &mut log).unwrap();
    assert_eq!(log, ["killer"]);
    assert!(!lp.is_pending(victim).unwrap());
}

// ---------------------------------------------------------------- scenario 5

#[test]
fn unreferenced_watchers_do_not_keep_run_alive() {
    let mut lp: Loop<Vec<&str>> = Loop::with_backend(Sim::new().backend());
    let bg = lp.timer(ms(1), ms(1), |_, log, _| log.push("bg")).unwrap();
    lp.set_ref(bg, false).unwrap();
    lp.timer(ms(3), Duration::ZERO, |_, log, _| log.push("fg"))
        .unwrap();
    let mut log = vec![];
    assert_eq!(
        lp.run(RunMode::Default, &mut log).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    // At 3ms both are due; "fg" was started (t=0) before "bg" was last
    // rescheduled (t=2ms), so it runs first.
    assert_eq!(log, ["bg", "bg", "fg", "bg"]);
    assert!(lp.is_active(bg).unwrap(), "still active, only unreferenced");
    // Only the unreferenced watcher is left: run returns without iterating.
    let before = lp.iteration();
    assert_eq!(
        lp.run(RunMode::Default, &mut log).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert_eq!(lp.iteration(), before);
    lp.set_ref(bg, true).unwrap();
    assert_eq!(lp.active_count(), 1);
}

#[test]
fn run_with_no_watchers_returns_at_once() {
    let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    for mode in [RunMode::Default, RunMode::Once, RunMode::NoWait] {
        assert_eq!(lp.run(mode, &mut ()).unwrap(), RunOutcome::NoActiveWatchers);
    }
    assert_eq!(lp.iteration(), 0);
}

#[test]
fn break_one_lets_pending_callbacks_run_then_returns() {
    let mut lp: Loop<Vec<&str>> = Loop::with_backend(Sim::new().backend());
    let breaker = lp
        .timer(ms(1), Duration::ZERO, |lp, log, _| {
            log.push("breaker");
            lp.break_loop(Break::One);
        })
        .unwrap();
    lp.set_priority(breaker, 2).unwrap();
    lp.timer(ms(1), Duration::ZERO, |_, log, _| {
        log.push("same iteration")
    })
    .unwrap();
    lp.timer(ms(2), Duration::ZERO, |_, log, _| {
        log.push("next iteration")
    })
    .unwrap();
    let mut log = vec![];
    assert_eq!(
        lp.run(RunMode::Default, &mut log).unwrap(),
        RunOutcome::Broken
    );
    assert_eq!(log, ["breaker", "same iteration"]);
    // The loop can be run again; the break was consumed.
    assert_eq!(
        lp.run(RunMode::Default, &mut log).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert_eq!(log, ["breaker", "same iteration", "next iteration"]);
}

#[test]
fn nested_run_depth_and_break_one_vs_all() {
    #[derive(Default)]
    struct St {
        log: Vec<String>,
        how: Option<Break>,
    }
    for how in [Break::One, Break::All] {
        let mut lp: Loop<St> = Loop::with_backend(Sim::new().backend());
        // Outer timer at 1ms runs a nested loop; the inner timer breaks.
        lp.timer(ms(1), Duration::ZERO, |lp, st, _| {
            st.log.push(format!("outer cb depth={}", lp.depth()));
            lp.timer(ms(1), Duration::ZERO, |lp, st, _| {
                st.log.push(format!("inner cb depth={}", lp.depth()));
                lp.break_loop(st.how.unwrap());
            })
            .unwrap();
            let r = lp.run(RunMode::Default, st).unwrap();
            st.log
                .push(format!("inner run -> {r:?}, depth={}", lp.depth()));
        })
        .unwrap();
        lp.timer(ms(5), Duration::ZERO, |_, st, _| {
            st.log.push("later timer".into())
        })
        .unwrap();
        let mut st = St {
            how: Some(how),
            ..St::default()
        };
        let r = lp.run(RunMode::Default, &mut st).unwrap();
        st.log
            .push(format!("outer run -> {r:?}, depth={}", lp.depth()));
        let tail: &[&str] = match how {
            Break::One => &["later timer", "outer run -> NoActiveWatchers, depth=0"],
            Break::All => &["outer run -> Broken, depth=0"],
        };
        let mut want = vec![
            "outer cb depth=1".to_string(),
            "inner cb depth=2".into(),
            "inner run -> Broken, depth=1".into(),
        ];
        want.extend(tail.iter().map(|s| s.to_string()));
        assert_eq!(st.log, want, "{how:?}");
    }
}

#[test]
fn run_once_blocks_for_an_event_and_nowait_never_blocks() {
    let sim = Sim::new();
    let mut lp: Loop<u32> = Loop::with_backend(sim.backend());
    lp.timer(ms(50), Duration::ZERO, |_, n, _| *n += 1).unwrap();
    let mut n = 0;
    assert_eq!(
        lp.run(RunMode::NoWait, &mut n).unwrap(),
        RunOutcome::IterationDone
    );
    assert_eq!((n, sim.now()), (0, Duration::ZERO));
    assert_eq!(
        lp.run(RunMode::Once, &mut n).unwrap(),
        RunOutcome::IterationDone
    );
    assert_eq!((n, sim.now()), (1, ms(50)));
    assert_eq!(lp.iteration(), 2);
}

// ---------------------------------------------------------------- scenario 6

#[test]
fn stale_handle_after_slot_reuse_is_refused_and_harmless() {
    let mut lp: Loop<Vec<&str>> = Loop::with_backend(Sim::new().backend());
    let old = lp.idle(|_, log, _| log.push("old")).unwrap();
    lp.remove(old).unwrap();
    let new = lp
        .idle(|lp, log, me| {
            log.push("new");
            lp.remove(me).unwrap();
        })
        .unwrap();
    for err in [
        lp.stop(old).unwrap_err(),
        lp.start(old).unwrap_err(),
        lp.remove(old).unwrap_err(),
        lp.set_priority(old, 1).unwrap_err(),
        lp.feed_event(old, Ready::EMPTY).unwrap_err(),
        lp.is_active(old).unwrap_err(),
    ] {
        assert!(matches!(err, Error::StaleHandle { kind: "idle" }), "{err}");
        assert!(err.to_string().contains("stale idle handle"));
    }
    assert!(
        lp.is_active(new).unwrap(),
        "the new watcher was not touched"
    );
    assert_eq!(lp.priority(new).unwrap(), 0);
    let mut log = vec![];
    lp.run(RunMode::Default, &mut log).unwrap();
    assert_eq!(log, ["new"]);
}

// ---------------------------------------------------------------- scenario 7

#[test]
fn spurious_wakeup_changes_nothing() {
    let sim = Sim::new();
    let sock = sim.socket("s", 0);
    sim.spurious_wakeup(ms(2));
    sim.deliver(ms(5), &sock, b"x");
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    lp.io(sock, Interest::READABLE, |lp, log, ev| {
        drain(ev.source);
        log.push(format!("read@{:?}", lp.now()));
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    lp.timer(ms(8), Duration::ZERO, |lp, log, _| {
        log.push(format!("timer@{:?}", lp.now()))
    })
    .unwrap();
    let mut log = vec![];
    lp.run(RunMode::Default, &mut log).unwrap();
    assert_eq!(
        log,
        ["read@5ms", "timer@8ms"],
        "nothing fired early or twice"
    );
    assert_eq!(
        sim.trace_lines(),
        [
            "t=0ns modify fd3 - => r",
            "t=0ns idle until t=2ms",
            "t=2ms spurious wakeup",
            "t=2ms idle until t=5ms",
            "t=5ms poll {fd3:r}",
            "t=5ms dispatch fd3 r",
            "t=5ms modify fd3 r => -",
            "t=5ms idle until t=8ms",
            "t=8ms poll {}",
        ]
    );
}

#[test]
fn fd_invalidated_while_registered_stops_its_watchers_without_spinning() {
    let sim = Sim::new();
    let sock = sim.socket("s", 0);
    let fd = sock.fd();
    sim.invalidate(ms(3), fd);
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    let reader = lp
        .io(sock, Interest::READABLE, |lp, log, ev| {
            log.push(format!(
                "reader {} active={}",
                ev.ready,
                lp.is_active(ev.watcher).unwrap()
            ));
            let mut buf = [0; 1];
            let err = ev.source.read(&mut buf).unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EBADF));
        })
        .unwrap();
    let mut log = Vec::new();
    assert_eq!(
        lp.run(RunMode::Default, &mut log).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert_eq!(log, ["reader r|err active=false"]);
    assert!(!lp.is_active(reader).unwrap());
    assert_eq!(
        sim.trace_lines(),
        [
            "t=0ns modify fd3 - => r",
            "t=0ns idle until t=3ms",
            "t=3ms poll {fd3:inval}",
            "t=3ms modify fd3 r => -",
            "t=3ms dispatch fd3 r|err",
        ]
    );
    assert_eq!(sim.poll_count(), 1, "the loop did not spin on the dead fd");
}

#[test]
fn fd_invalidated_reports_error_to_every_watcher_on_it() {
    let sim = Sim::new();
    let sock = sim.socket("s", 0);
    sim.invalidate(ms(3), &sock);
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    let r = lp
        .io_borrowed(&sock, Interest::READABLE, |lp, log, ev| {
            log.push(format!(
                "r {} active={}",
                ev.ready,
                lp.is_active(ev.watcher).unwrap()
            ))
        })
        .unwrap();
    let w = lp
        .io_borrowed(&sock, Interest::WRITABLE, |lp, log, ev| {
            log.push(format!(
                "w {} active={}",
                ev.ready,
                lp.is_active(ev.watcher).unwrap()
            ))
        })
        .unwrap();
    let mut log = vec![];
    assert_eq!(
        lp.run(RunMode::Default, &mut log).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert_eq!(log, ["r r|err active=false", "w w|err active=false"]);
    assert_eq!(sim.poll_count(), 1);
    // Restarting on a dead fd fails again at the next flush of fd changes, visibly.
    lp.start(r).unwrap();
    lp.run(RunMode::Default, &mut log).unwrap();
    assert_eq!(log.last().unwrap(), "r r|err active=false");
    assert!(!lp.is_active(w).unwrap());
    drop(lp);
}

#[test]
fn error_on_interest_change_is_reported_and_the_watcher_stopped() {
    let sim = Sim::new();
    let sock = sim.socket("s", 0);
    sim.fail_next_modify(&sock);
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    lp.io(sock, Interest::READABLE, |lp, log, ev| {
        log.push(format!(
            "{} active={}",
            ev.ready,
            lp.is_active(ev.watcher).unwrap()
        ))
    })
    .unwrap();
    let mut log = vec![];
    assert_eq!(
        lp.run(RunMode::Default, &mut log).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert_eq!(log, ["r|err active=false"]);
    assert_eq!(sim.trace_lines()[0], "t=0ns modify fd3 - => r failed");
}

/// A nested run run from an io callback does not watch that callback's fd
/// (it could only hold its events back: a level-triggered fd that stays
/// ready would end every wait at once, a spin for as long as the nested
/// run lasts). It waits for what it can serve; the fd is watched again
/// once the callback returns.
#[test]
fn event_for_a_running_callback_in_a_nested_run_is_delivered_after_it_returns() {
    let sim = Sim::new();
    let sock = sim.socket("s", 0);
    sim.deliver(ms(1), &sock, b"xy");
    sim.close_peer(ms(3), &sock);
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    lp.io(sock, Interest::READABLE, |lp, log, ev| {
        log.push(format!("enter depth={} at {:?}", lp.depth(), lp.now()));
        if lp.depth() == 1 {
            // Still readable, but this run does not watch the fd: it
            // waits for the timer, and never recurses.
            lp.run(RunMode::Once, log).unwrap();
            log.push(format!("nested returned, pending={}", lp.pending_count()));
        } else {
            log.push("recursed!".into());
        }
        let (bytes, _) = drain(ev.source);
        log.push(format!("read {}", bytes.len()));
        if bytes.is_empty() {
            lp.remove(ev.watcher).unwrap();
        }
    })
    .unwrap();
    // Something for the first nested run to wait for: a nested run does
    // not count the watcher whose callback is running (it cannot serve it).
    lp.timer(ms(2), Duration::ZERO, |lp, log, _| {
        log.push(format!("timer at {:?}", lp.now()))
    })
    .unwrap();
    let mut log = vec![];
    let outcome = lp.run(RunMode::Default, &mut log).unwrap();
    assert_eq!(outcome, RunOutcome::NoActiveWatchers);
    assert_eq!(
        log,
        [
            "enter depth=1 at 1ms",
            "timer at 2ms",
            "nested returned, pending=0",
            "read 2",
            // The end of file, once the fd is watched again.
            "enter depth=1 at 3ms",
            // Nothing a nested run could serve: it returns at once.
            "nested returned, pending=0",
            "read 0",
        ]
    );
    // The fd left the backend's set for the nested run and came back.
    let trace = sim.trace_lines().join("\n");
    assert!(trace.contains("modify fd3 r => -"), "{trace}");
    assert!(trace.contains("modify fd3 - => r"), "{trace}");
}

#[test]
fn a_nested_run_with_only_its_callers_watcher_active_returns_at_once() {
    let sim = Sim::new();
    let sock = sim.socket("s", 0);
    sim.deliver(ms(1), &sock, b"x");
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    lp.io(sock, Interest::READABLE, |lp, log, ev| {
        // Only this watcher is active, and a nested run cannot serve it.
        let outcome = lp.run(RunMode::Default, log).unwrap();
        log.push(format!(
            "nested: {outcome:?}, iterations so far {}",
            lp.iteration()
        ));
        drain(ev.source);
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    let mut log = vec![];
    assert_eq!(
        lp.run(RunMode::Default, &mut log).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert_eq!(log, ["nested: NoActiveWatchers, iterations so far 1"]);
}

/// The slot index in a handle's debug form (`Idle(Key { idx: 0, gen: 1 })`).
fn slot_of(h: &impl std::fmt::Debug) -> String {
    let s = format!("{h:?}");
    let start = s.find("idx: ").expect("handle debug shows its slot") + 5;
    s[start..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect()
}

#[test]
fn a_callback_that_removes_itself_and_reuses_its_slot_leaves_the_new_watcher_intact() {
    let mut lp: Loop<Vec<String>> = Loop::with_backend(Sim::new().backend());
    let first = lp
        .idle(|lp, log, me| {
            log.push("first".into());
            lp.remove(me).unwrap();
            // The freed slot is reused at once by the new watcher.
            let second = lp
                .idle(|lp, log, me| {
                    log.push("second".into());
                    lp.remove(me).unwrap();
                })
                .unwrap();
            log.push(format!("same slot: {}", slot_of(&me) == slot_of(&second)));
        })
        .unwrap();
    let mut log = vec![];
    lp.run(RunMode::Default, &mut log).unwrap();
    // The first callback was not put back into the new watcher's slot.
    assert_eq!(log, ["first", "same slot: true", "second"]);
    assert!(matches!(
        lp.is_active(first),
        Err(Error::StaleHandle { .. })
    ));
}

/// A scheduled call may act on the simulator as a peer would: here it
/// writes to and then drops its end of a pair, and the waiting loop sees
/// the bytes and then the end of file at that virtual time.
#[test]
fn a_scheduled_call_may_write_and_drop_a_peer() {
    let sim = Sim::new();
    let (mine, mut peer) = sim.pair("conn", 1024);
    sim.call_at(ms(7), move || {
        peer.write_all(b"bye").unwrap();
        drop(peer);
    });
    let mut lp: Loop<Vec<(u64, Vec<u8>, bool)>> = Loop::with_backend(sim.backend());
    lp.io(mine, Interest::READABLE, |lp, log, ev| {
        let (bytes, eof) = drain(ev.source);
        log.push((lp.now().as_millis() as u64, bytes, eof));
        if eof {
            lp.remove(ev.watcher).unwrap();
        }
    })
    .unwrap();
    let mut log = vec![];
    assert_eq!(
        lp.run(RunMode::Default, &mut log).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    assert_eq!(log, [(7, b"bye".to_vec(), true)]);
}
