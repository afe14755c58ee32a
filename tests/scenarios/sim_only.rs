//! What only the simulator can show, asserted as exact traces and virtual
//! times, once: arrivals at chosen times on a run that ends `Stalled`, a
//! busy loop that virtual time exposes, exact timer arithmetic, `Once` and
//! `NoWait` against the virtual clock, and the faults it injects
//! (spurious wake-ups, invalidated fds, failing interest changes,
//! scheduled calls).

use std::io::{Read, Write};
use std::time::Duration;

use crate::common::{drain_to_eof, flush, ms, sim_socket, RunTo};
use evloop::{Break, Interest, Io, IoEvent, Loop, RunMode, RunOutcome, Sim, SimSocket};

/// Per-connection state of the handler that leaves writable on.
#[derive(Default)]
struct Outbox {
    unsent: Vec<u8>,
    dispatches: usize,
}

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
            let (bytes, _) = drain_to_eof(ev.source);
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

#[test]
fn leaving_writable_on_spins_the_loop() {
    let (sim, conn) = sim_socket("c", 40);
    sim.deliver(ms(1), &conn, b"GET");
    sim.free_send(ms(5), &conn, 100);

    let mut lp: Loop<Outbox> = Loop::with_backend(sim.backend());
    lp.io(conn, Interest::BOTH, |lp, out, ev| {
        out.dispatches += 1;
        if ev.ready.is_readable() {
            drain_to_eof(ev.source);
            out.unsent.extend(std::iter::repeat_n(b'x', 100));
        }
        flush(ev.source, &mut out.unsent);
        if out.dispatches == 50 {
            lp.break_loop(Break::All); // the test's safety valve
        }
    })
    .unwrap();
    let mut out = Outbox::default();
    lp.run_expect(RunMode::Default, &mut out, RunOutcome::Broken);
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

#[test]
fn repeat_again_and_remaining() {
    let sim = Sim::new();
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    let tick = lp
        .timer(ms(10), ms(10), |lp, log, me| {
            log.push(format!("tick@{:?}", lp.now()));
            assert_eq!(me.remaining(lp).unwrap(), ms(10));
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
    idle_timeout.again(&mut lp).unwrap();
    assert_eq!(idle_timeout.remaining(&lp).unwrap(), ms(25));
    assert_eq!(tick.remaining(&lp).unwrap(), ms(10));
    lp.timer(ms(10), ms(10), move |lp, _, me| {
        idle_timeout.again(lp).unwrap();
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
    once.again(&mut lp).unwrap();
    assert!(!lp.is_active(once).unwrap());
    assert_eq!(once.remaining(&lp).unwrap(), Duration::ZERO);
}

#[test]
fn run_once_blocks_for_an_event_and_nowait_never_blocks() {
    let sim = Sim::new();
    let mut lp: Loop<u32> = Loop::with_backend(sim.backend());
    lp.timer(ms(50), Duration::ZERO, |_, n, _| *n += 1).unwrap();
    let mut n = 0;
    lp.run_expect(RunMode::NoWait, &mut n, RunOutcome::IterationDone);
    assert_eq!((n, sim.now()), (0, Duration::ZERO));
    lp.run_expect(RunMode::Once, &mut n, RunOutcome::IterationDone);
    assert_eq!((n, sim.now()), (1, ms(50)));
    assert_eq!(lp.iteration(), 2);
}

#[test]
fn spurious_wakeup_changes_nothing() {
    let (sim, sock) = sim_socket("s", 0);
    sim.spurious_wakeup(ms(2));
    sim.deliver(ms(5), &sock, b"x");
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    lp.io(sock, Interest::READABLE, |lp, log, ev| {
        drain_to_eof(ev.source);
        log.push(format!("read@{:?}", lp.now()));
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    lp.timer(ms(8), Duration::ZERO, |lp, log, _| {
        log.push(format!("timer@{:?}", lp.now()))
    })
    .unwrap();
    let log = lp.finish(vec![]);
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
    let (sim, sock) = sim_socket("s", 0);
    sim.invalidate(ms(3), sock.fd());
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
    assert_eq!(lp.finish(Vec::new()), ["reader r|err active=false"]);
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
    let (sim, sock) = sim_socket("s", 0);
    sim.invalidate(ms(3), &sock);
    let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    // Each logs its interest, what it was told, and whether it is active.
    fn log(lp: &mut Loop<'_, Vec<String>>, log: &mut Vec<String>, ev: IoEvent<'_, &SimSocket>) {
        let interest = ev.watcher.interest(lp).unwrap();
        let active = lp.is_active(ev.watcher).unwrap();
        log.push(format!("{interest} {} active={active}", ev.ready))
    }
    let r = Io::borrowed(&mut lp, &sock, Interest::READABLE, log).unwrap();
    let w = Io::borrowed(&mut lp, &sock, Interest::WRITABLE, log).unwrap();
    let mut log = lp.finish(vec![]);
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
    let (sim, sock) = sim_socket("s", 0);
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
    assert_eq!(lp.finish(vec![]), ["r|err active=false"]);
    assert_eq!(sim.trace_lines()[0], "t=0ns modify fd3 - => r failed");
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
        let (bytes, eof) = drain_to_eof(ev.source);
        log.push((lp.now().as_millis() as u64, bytes, eof));
        if eof {
            lp.remove(ev.watcher).unwrap();
        }
    })
    .unwrap();
    assert_eq!(lp.finish(vec![]), [(7, b"bye".to_vec(), true)]);
}
