//! The core loop scenarios (issue: scenarios 1-7) on every backend: what
//! the callbacks see, in which order, and how the run ends; on the
//! simulator also the exact backend trace and virtual times.

use std::time::Duration;

use crate::common::{drain, flush, ms, RunTo, World};
use evloop::{
    Break, Check, Error, Idle, Interest, Loop, Prepare, Ready, RunMode, RunOutcome, Timer,
    MAX_PRIORITY,
};

tests_on!(
    every_backend,
    crate::common::backends(),
    [
        backpressure_adds_writable_only_while_data_is_unsent,
        priorities_then_fifo_within_a_priority,
        idle_only_when_nothing_else_is_pending_and_prepare_check_around_poll,
        stopping_a_pending_watcher_cancels_its_event,
        timers_fire_in_expiry_order,
        equal_expiry_fires_in_start_order,
        timer_stopped_while_pending_is_not_delivered,
        unreferenced_watchers_do_not_keep_run_alive,
        run_with_no_watchers_returns_at_once,
        break_one_lets_pending_callbacks_run_then_returns,
        nested_run_depth_and_break_one_vs_all,
        stale_handle_after_slot_reuse_is_refused_and_harmless,
        event_for_a_running_callback_in_a_nested_run_is_delivered_after_it_returns,
        a_nested_run_from_the_only_watchers_callback_returns,
        a_callback_that_removes_itself_and_reuses_its_slot_leaves_the_new_watcher_intact,
        a_check_watcher_alone_runs_and_the_run_ends,
    ]
);

// ---------------------------------------------------------------- scenario 2

/// The handler asks for writable only while part of its response is
/// unsent. The peer drains what has arrived every millisecond (a timer
/// that owns it) and closes once it has the whole response, which is
/// larger than the socket's buffer (40 bytes of a 100-byte response on the
/// simulator; 2 MiB, more than any kernel buffer here, elsewhere), so the
/// handler must ask for writable for a while, and only then.
fn backpressure_adds_writable_only_while_data_is_unsent(w: &World) {
    #[derive(Default)]
    struct St {
        unsent: Vec<u8>,
        log: Vec<String>,
        dispatches: usize,
        writable_calls: usize,
        drains: usize,
        received: usize,
    }
    let (response, buffer) = if w.sim().is_some() {
        (100, 40)
    } else {
        (2 << 20, 1 << 16)
    };
    let mut lp: Loop<St> = w.new_loop();
    let (conn, mut peer) = w.pair_sized(buffer);
    peer.send(b"GET");
    lp.io(conn, Interest::READABLE, move |lp, st, ev| {
        st.dispatches += 1;
        if ev.ready.is_writable() {
            // Writable while nothing is unsent would be the busy loop.
            assert!(!st.unsent.is_empty(), "writable with nothing to send");
            st.writable_calls += 1;
        }
        if ev.ready.is_readable() {
            let req = drain(ev.source);
            if req.is_empty() {
                st.log.push("eof".into());
                lp.remove(ev.watcher).unwrap();
                return;
            }
            assert_eq!(req, b"GET");
            st.unsent = vec![b'x'; response];
        }
        let want = if flush(ev.source, &mut st.unsent) {
            Interest::READABLE
        } else {
            Interest::BOTH
        };
        if ev.watcher.interest(lp).unwrap() != want {
            st.log.push(format!("interest {want}"));
        }
        ev.watcher.set_interest(lp, want).unwrap();
    })
    .unwrap();
    let mut peer = Some(peer);
    lp.timer(ms(1), ms(1), move |lp, st, me| {
        let got = peer.as_mut().unwrap().receive().len();
        st.drains += usize::from(got > 0);
        st.received += got;
        if st.received == response {
            peer = None; // closes it
            st.log.push("peer closes".into());
            lp.remove(me).unwrap();
        }
    })
    .unwrap();
    let st = lp.finish(St::default());
    assert_eq!(st.received, response);
    assert_eq!(st.log, ["interest rw", "interest r", "peer closes", "eof"]);
    // No busy loop: only a drain by the peer makes the socket writable
    // again, so there is at most one writable call per drain.
    assert!(st.writable_calls >= 1);
    assert!(
        st.writable_calls <= st.drains,
        "{} writable calls for {} drains",
        st.writable_calls,
        st.drains
    );
    if let Some(sim) = w.sim() {
        assert_eq!(
            sim.trace_lines(),
            [
                "t=0ns modify fd3 - => r",
                "t=0ns poll {fd3:r}",
                "t=0ns dispatch fd3 r",
                // 40 of 100 bytes went out: Writable is added.
                "t=0ns modify fd3 r => rw",
                "t=0ns idle until t=1ms",
                "t=1ms poll {}",
                "t=1ms poll {fd3:w}",
                "t=1ms dispatch fd3 w",
                "t=1ms idle until t=2ms",
                "t=2ms poll {}",
                "t=2ms poll {fd3:w}",
                "t=2ms dispatch fd3 w",
                // All sent: Writable is removed.
                "t=2ms modify fd3 rw => r",
                // The capacity the peer frees at 3ms wakes nobody:
                // Writable is not watched; its close does.
                "t=2ms idle until t=3ms",
                "t=3ms poll {}",
                "t=3ms poll {fd3:r|hup}",
                "t=3ms dispatch fd3 r|hup",
                "t=3ms modify fd3 r => -",
            ]
        );
        assert_eq!(st.dispatches, 4, "no busy loop: one dispatch per event");
    }
}

// ---------------------------------------------------------------- scenario 3

fn priorities_then_fifo_within_a_priority(w: &World) {
    let mut lp: Loop<Vec<&'static str>> = w.new_loop();
    let names = ["a0", "b2", "c-1", "d2", "e0", "f-2"];
    let prios = [0, 2, -1, 2, 0, -2];
    for (timer, prio) in names.into_iter().zip(prios) {
        let t = lp
            .timer(ms(1), Duration::ZERO, move |_, log, _| log.push(timer))
            .unwrap();
        lp.set_priority(t, prio).unwrap();
    }
    assert_eq!(lp.finish(vec![]), ["b2", "d2", "a0", "e0", "c-1", "f-2"]);
}

/// The timer is started by the idle watcher's last call instead of at the
/// start, so that it cannot expire during the first three iterations
/// however slowly they run; it still has to wait 5 ms.
fn idle_only_when_nothing_else_is_pending_and_prepare_check_around_poll(w: &World) {
    let (conn, mut peer) = w.pair();
    peer.send(b"x");
    let mut lp: Loop<Vec<String>> = w.new_loop();
    let p = Prepare::new(&mut lp, |lp, log, _| {
        log.push(format!("prepare#{}", lp.iteration()))
    })
    .unwrap();
    let c = Check::new(&mut lp, |lp, log, _| {
        log.push(format!("check#{}", lp.iteration()))
    })
    .unwrap();
    lp.io(conn, Interest::READABLE, |lp, log, ev| {
        drain(ev.source);
        log.push("io".into());
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    let mut idles = 0;
    let exact = w.sim().is_some();
    Idle::new(&mut lp, move |lp, log, me| {
        idles += 1;
        log.push(format!("idle{idles}"));
        if idles == 2 {
            lp.remove(me).unwrap();
            let started = lp.now();
            lp.timer(ms(5), Duration::ZERO, move |lp, log, _| {
                assert!(lp.now() - started >= ms(5), "fired early");
                if exact {
                    assert_eq!(lp.now(), ms(5));
                }
                log.push("timer".into());
                lp.remove(p).unwrap();
                lp.remove(c).unwrap();
            })
            .unwrap();
        }
    })
    .unwrap();
    let log = lp.finish(vec![]);
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
            "timer",
        ]
    );
    if let Some(sim) = w.sim() {
        // The poll of iteration 4 blocked (virtual clock jumped), earlier
        // ones did not.
        let lines = sim.trace_lines();
        assert_eq!(lines.iter().filter(|l| l.contains("idle until")).count(), 1);
        assert!(lines.contains(&"t=0ns idle until t=5ms".to_string()));
    }
    drop(peer);
}

fn stopping_a_pending_watcher_cancels_its_event(w: &World) {
    let (a, mut peer_a) = w.pair();
    let (b, mut peer_b) = w.pair();
    peer_a.send(b"1");
    peer_b.send(b"2");
    let mut lp: Loop<Vec<String>> = w.new_loop();
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
    assert_eq!(lp.finish(vec![]), ["a"]);
    assert!(!lp.is_active(b_io).unwrap());
    if let Some(sim) = w.sim() {
        // Both were reported by one poll: b was pending when a ran.
        assert!(sim
            .trace_lines()
            .contains(&"t=0ns poll {fd5:r, fd3:r}".to_string()));
    }
    drop((peer_a, peer_b));
}

// ---------------------------------------------------------------- scenario 4

fn timers_fire_in_expiry_order(w: &World) {
    let mut lp: Loop<Vec<(Duration, &str)>> = w.new_loop();
    for (after, timer) in [(30, "c"), (10, "a"), (20, "b")] {
        lp.timer(ms(after), Duration::ZERO, move |lp, log, _| {
            assert!(lp.now() >= ms(after), "{timer} fired early");
            log.push((lp.now(), timer))
        })
        .unwrap();
    }
    let log = lp.finish(vec![]);
    let names: Vec<&str> = log.iter().map(|(_, n)| *n).collect();
    assert_eq!(names, ["a", "b", "c"]);
    if w.sim().is_some() {
        assert_eq!(log, [(ms(10), "a"), (ms(20), "b"), (ms(30), "c")]);
    }
}

fn equal_expiry_fires_in_start_order(w: &World) {
    let mut lp: Loop<Vec<&str>> = w.new_loop();
    let mut handles = vec![];
    for timer in ["a", "b", "c", "d"] {
        handles.push(
            lp.timer(ms(5), ms(5), move |_, log, _| log.push(timer))
                .unwrap(),
        );
    }
    // Restarting "b" at the same instant puts it after the others.
    (handles[1]).again(&mut lp).unwrap();
    let stopped = handles.clone();
    lp.timer(ms(10), Duration::ZERO, move |lp, _, _| {
        for h in &stopped {
            lp.stop(*h).unwrap();
        }
    })
    .unwrap();
    let log = lp.finish(vec![]);
    // At 5ms: a c d b. At 10ms the stopper (started at t=0) comes before
    // the repeats (rescheduled at t=5ms) and stops them while pending.
    assert_eq!(log, ["a", "c", "d", "b"]);
    for h in handles {
        assert!(!lp.is_active(h).unwrap());
    }
}

fn timer_stopped_while_pending_is_not_delivered(w: &World) {
    let mut lp: Loop<Vec<&str>> = w.new_loop();
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
    assert_eq!(lp.finish(vec![]), ["killer"]);
    assert!(!lp.is_pending(victim).unwrap());
}

// ---------------------------------------------------------------- scenario 5

/// How often the 1 ms background timer fires before the 3 ms one depends
/// on real time on a kernel; that it fires first (it is due first), that
/// the run ends with the foreground timer's iteration, and what is left,
/// does not.
fn unreferenced_watchers_do_not_keep_run_alive(w: &World) {
    let mut lp: Loop<Vec<&str>> = w.new_loop();
    let bg = lp.timer(ms(1), ms(1), |_, log, _| log.push("bg")).unwrap();
    lp.set_ref(bg, false).unwrap();
    lp.timer(ms(3), Duration::ZERO, |_, log, _| log.push("fg"))
        .unwrap();
    let log = lp.finish(vec![]);
    // bg+ fg bg?: at most one more bg, in fg's own iteration.
    let fg = log.iter().position(|&l| l == "fg").expect("fg fired");
    assert!(fg >= 1, "{log:?}");
    assert!(log[..fg].iter().all(|&l| l == "bg"), "{log:?}");
    assert!(log[fg + 1..].len() <= 1, "{log:?}");
    assert!(log[fg + 1..].iter().all(|&l| l == "bg"), "{log:?}");
    if w.sim().is_some() {
        // At 3ms both are due; "fg" was started (t=0) before "bg" was last
        // rescheduled (t=2ms), so it runs first.
        assert_eq!(log, ["bg", "bg", "fg", "bg"]);
    }
    assert!(lp.is_active(bg).unwrap(), "still active, only unreferenced");
    // Only the unreferenced watcher is left: run returns without iterating.
    let before = lp.iteration();
    assert!(lp.finish(vec![]).is_empty(), "nothing more fired");
    assert_eq!(lp.iteration(), before);
    lp.set_ref(bg, true).unwrap();
    assert_eq!(lp.active_count(), 1);
}

fn run_with_no_watchers_returns_at_once(w: &World) {
    let mut lp: Loop = w.new_loop();
    for mode in [RunMode::Default, RunMode::Once, RunMode::NoWait] {
        lp.run_expect(mode, &mut (), RunOutcome::NoActiveWatchers);
    }
    assert_eq!(lp.iteration(), 0);
}

/// The "next iteration" timer is started by the breaker, so that it cannot
/// expire in the breaker's iteration however late that iteration wakes up.
fn break_one_lets_pending_callbacks_run_then_returns(w: &World) {
    let mut lp: Loop<Vec<&str>> = w.new_loop();
    let breaker = lp
        .timer(ms(1), Duration::ZERO, |lp, log, _| {
            log.push("breaker");
            lp.break_loop(Break::One);
            lp.timer(ms(1), Duration::ZERO, |_, log, _| {
                log.push("next iteration")
            })
            .unwrap();
        })
        .unwrap();
    lp.set_priority(breaker, 2).unwrap();
    lp.timer(ms(1), Duration::ZERO, |_, log, _| {
        log.push("same iteration")
    })
    .unwrap();
    let mut log = vec![];
    lp.run_expect(RunMode::Default, &mut log, RunOutcome::Broken);
    assert_eq!(log, ["breaker", "same iteration"]);
    // The loop can be run again; the break was consumed.
    lp.run_to_end(&mut log);
    assert_eq!(log, ["breaker", "same iteration", "next iteration"]);
}

/// The later timer is started by the outer callback once the nested run
/// has returned (due at 5 ms from the start, a nested run that woke late
/// could reach it).
fn nested_run_depth_and_break_one_vs_all(w: &World) {
    #[derive(Default)]
    struct St {
        log: Vec<String>,
        how: Option<Break>,
        later: Option<Timer>,
    }
    for how in [Break::One, Break::All] {
        let mut lp: Loop<St> = w.new_loop();
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
            lp.start(st.later.unwrap()).unwrap();
        })
        .unwrap();
        let later = lp
            .timer(ms(1), Duration::ZERO, |_, st, _| {
                st.log.push("later timer".into())
            })
            .unwrap();
        lp.stop(later).unwrap();
        let mut st = St {
            how: Some(how),
            later: Some(later),
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
        assert_eq!(lp.is_active(later).unwrap(), how == Break::All);
    }
}

// ---------------------------------------------------------------- scenario 6

fn stale_handle_after_slot_reuse_is_refused_and_harmless(w: &World) {
    let mut lp: Loop<Vec<&str>> = w.new_loop();
    let old = Idle::new(&mut lp, |_, log, _| log.push("old")).unwrap();
    lp.remove(old).unwrap();
    let new = Idle::new(&mut lp, |lp, log, me| {
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
    assert_eq!(lp.finish(vec![]), ["new"]);
}

// ---------------------------------------------------------------- scenario 7

/// A nested run run from an io callback does not watch that callback's fd
/// (it could only hold its events back: a level-triggered fd that stays
/// ready would end every wait at once, a spin for as long as the nested
/// run lasts). It waits for what it can serve (a timer the first call
/// starts); the fd is watched again once the callback returns; the peer,
/// closed by a later timer, ends it.
fn event_for_a_running_callback_in_a_nested_run_is_delivered_after_it_returns(w: &World) {
    let (conn, mut peer) = w.pair();
    peer.send(b"xy");
    let mut lp: Loop<Vec<String>> = w.new_loop();
    let mut calls = 0;
    let mut entered = vec![];
    let exact = w.sim().is_some();
    lp.io(conn, Interest::READABLE, move |lp, log, ev| {
        calls += 1;
        entered.push(lp.now());
        log.push(format!("enter depth={}", lp.depth()));
        if lp.depth() == 1 {
            if calls == 1 {
                // Something for the nested run to wait for: a nested run
                // does not count the watcher whose callback is running
                // (it cannot serve it).
                lp.timer(ms(5), Duration::ZERO, move |lp, log, _| {
                    if exact {
                        assert_eq!(lp.now(), ms(5));
                    }
                    log.push("timer".into())
                })
                .unwrap();
            }
            // Still readable, but this run does not watch the fd: it
            // waits for the timer, and never recurses.
            lp.run(RunMode::Once, log).unwrap();
            log.push(format!("nested returned, pending={}", lp.pending_count()));
        } else {
            log.push("recursed!".into());
        }
        let bytes = drain(ev.source);
        log.push(format!("read {}", bytes.len()));
        if bytes.is_empty() {
            if exact {
                assert_eq!(entered, [Duration::ZERO, ms(20)]);
            }
            lp.remove(ev.watcher).unwrap();
        }
    })
    .unwrap();
    let mut peer = Some(peer);
    lp.timer(ms(20), Duration::ZERO, move |_, _, _| {
        peer.take(); // the end of file
    })
    .unwrap();
    let log = lp.finish(vec![]);
    assert_eq!(
        log,
        [
            "enter depth=1",
            "timer",
            "nested returned, pending=0",
            "read 2",
            // The end of file, once the fd is watched again.
            "enter depth=1",
            // The timer is gone: nothing a nested run could serve, it
            // returns at once.
            "nested returned, pending=0",
            "read 0",
        ]
    );
    if let Some(sim) = w.sim() {
        // The fd left the backend's set for the nested run and came back.
        let trace = sim.trace_lines().join("\n");
        assert!(trace.contains("modify fd3 r => -"), "{trace}");
        assert!(trace.contains("modify fd3 - => r"), "{trace}");
    }
}

/// A nested `run` from the callback of the loop's only watcher can deliver
/// nothing (an event for a watcher whose callback is running is deferred
/// until it returns); it used to wait for that watcher, forever, on a
/// kernel, while the simulator said `Stalled`. Now the nested run does not
/// count it, and returns at once: for an event fed before the run (no
/// iteration yet) and for one the backend reported (the first).
fn a_nested_run_from_the_only_watchers_callback_returns(w: &World) {
    for fed in [true, false] {
        let (conn, mut peer) = w.pair();
        let mut lp: Loop<Vec<String>> = w.new_loop();
        let io = lp
            .io(conn, Interest::READABLE, |lp, log, ev| {
                let nested = lp.run(RunMode::Default, log);
                log.push(format!(
                    "nested: {nested:?}, iterations so far {}",
                    lp.iteration()
                ));
                drain(ev.source);
                lp.remove(ev.watcher).unwrap();
            })
            .unwrap();
        if fed {
            lp.feed_event(io, Ready::READABLE).unwrap();
        } else {
            peer.send(b"x");
        }
        let log = lp.finish(vec![]);
        let iterations = if fed { 0 } else { 1 };
        assert_eq!(
            log,
            [format!(
                "nested: Ok(NoActiveWatchers), iterations so far {iterations}"
            )],
            "fed: {fed}"
        );
    }
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

fn a_callback_that_removes_itself_and_reuses_its_slot_leaves_the_new_watcher_intact(w: &World) {
    let mut lp: Loop<Vec<String>> = w.new_loop();
    let first = Idle::new(&mut lp, |lp, log, me| {
        log.push("first".into());
        lp.remove(me).unwrap();
        // The freed slot is reused at once by the new watcher.
        let second = Idle::new(lp, |lp, log, me| {
            log.push("second".into());
            lp.remove(me).unwrap();
        })
        .unwrap();
        log.push(format!("same slot: {}", slot_of(&me) == slot_of(&second)));
    })
    .unwrap();
    let log = lp.finish(vec![]);
    // The first callback was not put back into the new watcher's slot.
    assert_eq!(log, ["first", "same slot: true", "second"]);
    assert!(matches!(
        lp.is_active(first),
        Err(Error::StaleHandle { .. })
    ));
}

/// A loop whose only watchers are prepare and check watchers has nothing
/// that can end a wait, yet check watchers run only after one: on a kernel
/// the first poll used to wait forever (no timeout), so the check watcher
/// below never ran; the simulator said `Stalled` with the check not run
/// either. Now the poll does not block when nothing could end it.
fn a_check_watcher_alone_runs_and_the_run_ends(w: &World) {
    let mut lp: Loop<Vec<u64>> = w.new_loop();
    Check::new(&mut lp, |lp, ran_in, me| {
        ran_in.push(lp.iteration());
        lp.remove(me).unwrap();
    })
    .unwrap();
    // Once, in the first iteration; then nothing is left and the run ends.
    assert_eq!(lp.finish(vec![]), [1]);
}
