//! The doc examples of `Loop`'s core (the crate's, README.md's, `Backend`'s,
//! `Builder`'s and `Loop`'s methods, the handle and event types), on every
//! backend.

use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

use crate::common::{drain, ms, Conn, RunTo, World};
use evloop::{Break, Idle, Interest, Io, Loop, Prepare, Ready, RunMode, RunOutcome, Trigger};

tests_on!(
    every_backend,
    crate::common::backends(),
    [
        crate_example,
        readme_example,
        backend_trait_example,
        builder_build_example,
        loop_new_example,
        break_example,
        run_outcome_example,
        loop_example,
        loop_depth_example,
        loop_break_loop_example,
        loop_io_example,
        loop_io_borrowed_example,
        loop_timer_example,
        loop_idle_example,
        loop_prepare_example,
        loop_stop_example,
        loop_set_ref_example,
        loop_feed_event_example,
        idle_example,
        io_event_example,
        kqueue_module_example,
        loop_set_callback_example,
        loop_set_io_callback_example,
        loop_set_borrowed_io_callback_example,
    ]
);

/// The crate documentation's echo handler (src/lib.rs). The peer, owned by
/// a timer, closes once it has its echo (the simulator closed it at 20 ms).
fn crate_example(w: &World) {
    let (conn, mut peer) = w.pair();
    peer.send(b"hello");
    let mut lp: Loop<Vec<u8>> = w.new_loop();
    lp.io(conn, Interest::READABLE, |lp, _, ev| {
        let mut buf = [0u8; 64];
        match ev.source.read(&mut buf) {
            Ok(0) => lp.remove(ev.watcher).unwrap(), // EOF
            Ok(n) => ev.source.write_all(&buf[..n]).unwrap(),
            Err(e) => assert_eq!(e.kind(), ErrorKind::WouldBlock),
        }
    })
    .unwrap();
    let mut peer = Some(peer);
    lp.timer(ms(1), ms(1), move |lp, echoed, me| {
        echoed.extend(peer.as_mut().unwrap().receive());
        if echoed.len() >= 5 {
            peer = None; // closes it
            lp.remove(me).unwrap();
        }
    })
    .unwrap();
    assert_eq!(lp.finish(vec![]), b"hello");
}

/// README.md's example: the echo handler with an unreferenced inactivity
/// timeout, which must not keep the run alive for its 30 s.
fn readme_example(w: &World) {
    struct St {
        echoed: u32,
        received: Vec<u8>,
    }
    let (conn, mut peer) = w.pair();
    peer.send(b"ping");
    let mut lp: Loop<St> = w.new_loop();
    lp.io(conn, Interest::READABLE, |lp, st, ev| {
        let mut buf = [0u8; 512];
        loop {
            match ev.source.read(&mut buf) {
                Ok(0) => return lp.remove(ev.watcher).unwrap(), // peer closed
                Ok(n) => {
                    ev.source.write_all(&buf[..n]).unwrap();
                    st.echoed += n as u32;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => panic!("{e}"),
            }
        }
    })
    .unwrap();
    let t = lp
        .timer(Duration::from_secs(30), Duration::ZERO, |_, _, _| {})
        .unwrap();
    lp.set_ref(t, false).unwrap();
    let mut peer = Some(peer);
    lp.timer(ms(1), ms(1), move |lp, st, me| {
        st.received.extend(peer.as_mut().unwrap().receive());
        if st.received.len() >= 4 {
            peer = None;
            lp.remove(me).unwrap();
        }
    })
    .unwrap();
    let mut st = St {
        echoed: 0,
        received: vec![],
    };
    lp.run_to_end(&mut st);
    assert_eq!((st.echoed, st.received), (4, b"ping".to_vec()));
    assert!(lp.is_active(t).unwrap());
}

/// The `Backend` trait's example: its loop has one timer (3 s there, 3 ms
/// here), and the run returns once it has fired.
fn backend_trait_example(w: &World) {
    let mut lp: Loop = w.new_loop();
    lp.timer(ms(3), Duration::ZERO, |lp, _, _| {
        assert!(lp.now() >= ms(3));
    })
    .unwrap();
    lp.run_to_end(&mut ());
    assert!(lp.now() >= ms(3));
}

/// `Builder::build` (there on the default backend only).
fn builder_build_example(w: &World) {
    let mut lp: Loop<usize> = w.new_loop();
    let (a, mut b) = w.pair();
    b.send(b"hi");
    lp.io(a, Interest::READABLE, |lp, got, ev| {
        let mut buf = [0; 8];
        *got += ev.source.read(&mut buf).unwrap();
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    assert_eq!(lp.finish(0), 2);
}

/// `Loop::new` (there on the default backend only).
fn loop_new_example(w: &World) {
    let start = Instant::now();
    let mut lp: Loop = w.new_loop();
    lp.timer(ms(5), Duration::ZERO, |_, _, _| {}).unwrap();
    lp.run_to_end(&mut ());
    if w.sim().is_none() {
        assert!(start.elapsed() >= ms(5));
    }
}

/// `Break`: a `Default` run that a callback ends (not the last watcher
/// going away; mirrored because it is a `Default` run that must return).
fn break_example(w: &World) {
    an_idle_watcher_breaks_the_run(w, Break::One);
}

/// An idle watcher that breaks the run with `how`: the `Default` run
/// returns `Broken`, the watcher still active.
fn an_idle_watcher_breaks_the_run(w: &World, how: Break) {
    let mut lp: Loop = w.new_loop();
    let idle = Idle::new(&mut lp, move |lp, _, _| lp.break_loop(how)).unwrap();
    lp.run_expect(RunMode::Default, &mut (), RunOutcome::Broken);
    assert!(lp.is_active(idle).unwrap());
}

/// `RunOutcome`: no watchers, no iteration.
fn run_outcome_example(w: &World) {
    let mut lp: Loop = w.new_loop();
    lp.run_to_end(&mut ());
    assert_eq!(lp.iteration(), 0);
}

/// `Loop`: a repeating timer that stops itself after three ticks.
fn loop_example(w: &World) {
    let mut lp: Loop<u32> = w.new_loop();
    let t = lp
        .timer(ms(10), ms(10), |lp, ticks, me| {
            *ticks += 1;
            if *ticks == 3 {
                lp.stop(me).unwrap();
            }
        })
        .unwrap();
    assert_eq!(lp.finish(0), 3);
    assert!(lp.now() >= ms(30), "{:?}", lp.now());
    assert!(!lp.is_active(t).unwrap());
}

/// `Loop::depth`.
fn loop_depth_example(w: &World) {
    let mut lp: Loop<u32> = w.new_loop();
    Idle::new(&mut lp, |lp, seen, me| {
        *seen = lp.depth();
        lp.remove(me).unwrap();
    })
    .unwrap();
    let seen = lp.finish(0);
    assert_eq!((seen, lp.depth()), (1, 0));
}

/// `Loop::break_loop` (a `Default` run ended by a callback, as `Break`).
fn loop_break_loop_example(w: &World) {
    an_idle_watcher_breaks_the_run(w, Break::All);
}

/// `Loop::io`: a writable watcher writes and removes itself.
fn loop_io_example(w: &World) {
    let (sock, mut peer) = w.pair();
    let mut lp: Loop = w.new_loop();
    lp.io(sock, Interest::WRITABLE, |lp, _, ev| {
        ev.source.write_all(b"hello").unwrap();
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    lp.run_to_end(&mut ());
    assert_eq!(peer.receive(), b"hello");
}

/// `Io::borrowed`: the watcher stops itself; the source outlives the
/// loop.
fn loop_io_borrowed_example(w: &World) {
    let (sock, mut peer) = w.pair();
    peer.send(b"x");
    {
        let mut lp: Loop<usize> = w.new_loop();
        let io = Io::borrowed(&mut lp, &sock, Interest::READABLE, |lp, n, ev| {
            let mut buf = [0; 4];
            *n += ev.source.read(&mut buf).unwrap();
            lp.stop(ev.watcher).unwrap();
        })
        .unwrap();
        assert_eq!(lp.finish(0), 1);
        assert!(!lp.is_active(io).unwrap());
    }
    drop(sock);
}

/// `Loop::timer`: two timers fire in expiry order, not start order.
fn loop_timer_example(w: &World) {
    let mut lp: Loop<Vec<u64>> = w.new_loop();
    for after in [20, 10] {
        lp.timer(ms(after), Duration::ZERO, move |lp, log, _| {
            assert!(lp.now() >= ms(after), "fired early");
            log.push(after)
        })
        .unwrap();
    }
    assert_eq!(lp.finish(vec![]), [10, 20]);
}

/// `Idle::new`: an idle watcher that stops itself after three calls.
fn loop_idle_example(w: &World) {
    let mut lp: Loop<u32> = w.new_loop();
    Idle::new(&mut lp, |lp, n, me| {
        *n += 1;
        if *n == 3 {
            lp.stop(me).unwrap();
        }
    })
    .unwrap();
    assert_eq!(lp.finish(0), 3);
}

/// `Prepare::new` (also in run_semantics.rs, where the bug was found).
fn loop_prepare_example(w: &World) {
    let mut lp: Loop<u32> = w.new_loop();
    Prepare::new(&mut lp, |lp, n, me| {
        *n += 1;
        lp.remove(me).unwrap();
    })
    .unwrap();
    assert_eq!(lp.finish(0), 1);
}

/// `Loop::stop`: a timer stopped while it is pending is not called.
fn loop_stop_example(w: &World) {
    let mut lp: Loop<u32> = w.new_loop();
    let late = lp.timer(ms(5), Duration::ZERO, |_, n, _| *n += 1).unwrap();
    let stopper = lp
        .timer(ms(5), Duration::ZERO, move |lp, _, _| {
            lp.stop(late).unwrap();
        })
        .unwrap();
    lp.set_priority(stopper, 1).unwrap();
    assert_eq!(lp.finish(0), 0);
}

/// `Loop::set_ref`: an unreferenced 60 s timer does not keep `run` waiting.
fn loop_set_ref_example(w: &World) {
    let mut lp: Loop = w.new_loop();
    let t = lp
        .timer(Duration::from_secs(60), Duration::ZERO, |_, _, _| {})
        .unwrap();
    lp.set_ref(t, false).unwrap();
    lp.run_to_end(&mut ());
    assert!(lp.is_active(t).unwrap());
}

/// `Loop::feed_event`: a fed event on a watcher whose fd never becomes
/// ready.
fn loop_feed_event_example(w: &World) {
    let (sock, _peer) = w.pair();
    let mut lp: Loop<Vec<String>> = w.new_loop();
    let io = lp
        .io(sock, Interest::READABLE, |lp, log, ev| {
            log.push(ev.ready.to_string());
            lp.remove(ev.watcher).unwrap();
        })
        .unwrap();
    lp.feed_event(io, Ready::READABLE).unwrap();
    assert_eq!(lp.finish(vec![]), ["r"]);
}

/// `Idle` (the handle type): an idle watcher that removes itself.
fn idle_example(w: &World) {
    let mut lp: Loop = w.new_loop();
    let idle = Idle::new(&mut lp, |lp, _, me| lp.remove(me).unwrap()).unwrap();
    lp.run_to_end(&mut ());
    assert!(lp.is_active(idle).is_err());
}

/// `IoEvent`: read what arrived, then remove the watcher.
fn io_event_example(w: &World) {
    let (sock, mut peer) = w.pair();
    peer.send(b"hi");
    let mut lp: Loop<Vec<u8>> = w.new_loop();
    lp.io(sock, Interest::READABLE, |lp, got, ev| {
        let mut buf = [0; 16];
        let n = ev.source.read(&mut buf).unwrap();
        got.extend_from_slice(&buf[..n]);
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    assert_eq!(lp.finish(Vec::new()), b"hi");
}

/// The kqueue module's example (an edge-triggered reader that drains until
/// `WouldBlock`), on every backend that offers edge triggering (epoll, and
/// kqueue with `--features emulated-kqueue`); the others refuse it.
fn kqueue_module_example(w: &World) {
    let mut lp: Loop<Vec<u8>> = w.new_loop();
    let (a, mut b) = w.pair();
    b.send(b"hello");
    let edge = Interest::READABLE.with_trigger(Trigger::Edge);
    let made = lp.io(a, edge, |lp, got, ev| {
        let mut buf = [0u8; 2];
        loop {
            match ev.source.read(&mut buf) {
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        lp.remove(ev.watcher).unwrap();
    });
    if !lp.capabilities().edge {
        assert!(made.is_err(), "has no edge triggering");
        return;
    }
    made.unwrap();
    assert_eq!(lp.finish(Vec::new()), b"hello");
}

/// `Loop::set_callback`: a repeating timer's first callback installs the
/// next one, which removes it (there at 1 s and 2 s, here every 5 ms).
fn loop_set_callback_example(w: &World) {
    let mut lp: Loop<Vec<String>> = w.new_loop();
    lp.timer(ms(5), ms(5), |lp, log, me| {
        log.push("first".into());
        lp.set_callback(me, |lp, log, me| {
            log.push("then".into());
            lp.remove(me).unwrap();
        })
        .unwrap();
    })
    .unwrap();
    assert_eq!(lp.finish(vec![]), ["first", "then"]);
    assert!(lp.now() >= ms(10), "{:?}", lp.now());
}

/// `Io::set_callback`: the new callback reads what the peer sent
/// from the source the watcher owns, and removes it.
fn loop_set_io_callback_example(w: &World) {
    let (sock, mut peer) = w.pair();
    let mut lp: Loop<Vec<u8>> = w.new_loop();
    let io = lp
        .io(sock, Interest::READABLE, |_, _, _| unreachable!())
        .unwrap();
    io.set_callback(&mut lp, |lp, got, ev: evloop::IoEvent<'_, Conn>| {
        got.extend(drain(ev.source));
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    peer.send(b"hello");
    assert_eq!(lp.finish(vec![]), b"hello");
}

/// `Io::set_borrowed_callback`: the same with a borrowed source.
fn loop_set_borrowed_io_callback_example(w: &World) {
    let (sock, mut peer) = w.pair();
    let mut lp: Loop<usize> = w.new_loop();
    let io = Io::borrowed(&mut lp, &sock, Interest::READABLE, |_, _, _| unreachable!()).unwrap();
    io.set_borrowed_callback(&mut lp, &sock, |lp, n, ev| {
        let mut buf = [0; 8];
        let mut source: &Conn = ev.source;
        *n += source.read(&mut buf).unwrap();
        lp.remove(ev.watcher).unwrap();
    })
    .unwrap();
    peer.send(b"hi");
    assert_eq!(lp.finish(0), 2);
    drop(lp);
}
