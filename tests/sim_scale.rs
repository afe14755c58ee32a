//! The simulator at scale, without timing assertions: 200,000 sockets
//! registered through a loop, polled and forgotten, and 200,000 scheduled
//! deliveries applied, each run under a 60-second watchdog. Every per-fd
//! and per-action step of the simulator is O(1) or O(log n), so each test
//! takes a second or two in a debug build; one linear step per operation
//! (searching the registration list, scanning the schedule) makes it take
//! many minutes, which the watchdog turns into a failure. The watchdog is
//! far above the linear cost, so a slow machine does not trip it.
//!
//! The same tests check that scale changes nothing observable: polls
//! report fds in registration order and deliveries apply in (time,
//! scheduling order) order. A property test checks registration order
//! against a model at small scale (re-registration after a forget goes to
//! the end, an interest change keeps the fd's place).

use std::io::{ErrorKind, Read};
use std::os::fd::RawFd;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use evloop::backend::{Backend, PollEvent};
use evloop::backends::sim::StepKind;
use evloop::{Interest, Loop, Ready, RunMode, RunOutcome, Sim};
use proptest::prelude::*;

const N: usize = 200_000;
const WATCHDOG: Duration = Duration::from_secs(60);

/// Runs `body` in its own thread (`Loop` and `Sim` are not `Send`, so the
/// body creates them) and fails if it has not finished within
/// [`WATCHDOG`]; a panic in the body fails the test with its message.
fn under_watchdog(name: &str, body: impl FnOnce() + Send + 'static) {
    let (done, finished) = mpsc::channel();
    let worker = thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            body();
            let _ = done.send(());
        })
        .unwrap();
    match finished.recv_timeout(WATCHDOG) {
        Ok(()) => worker.join().unwrap(),
        // The sender was dropped without sending: the body panicked.
        Err(RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(worker.join().unwrap_err())
        }
        Err(RecvTimeoutError::Timeout) => {
            panic!("{name}: not finished after {WATCHDOG:?} (a quadratic path?)")
        }
    }
}

/// A small deterministic generator (xorshift64*), so that orders are
/// scrambled but every run is the same.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, (self.next() % (i as u64 + 1)) as usize);
        }
    }
}

#[test]
fn loop_registers_polls_and_forgets_200k_sockets() {
    under_watchdog("register_poll_forget", || {
        let sim = Sim::new();
        let mut lp: Loop<Vec<RawFd>> = Loop::with_backend(sim.backend());
        // Registered in a scrambled order, so that registration order (what
        // poll reports in) differs from fd order; every third socket has a
        // byte to read.
        let mut socks: Vec<_> = (0..N).map(|_| sim.socket("s", 0)).collect();
        Rng(0x5eed).shuffle(&mut socks);
        let mut expected = Vec::new();
        let mut ios = Vec::with_capacity(N);
        for (i, sock) in socks.into_iter().enumerate() {
            if i % 3 == 0 {
                sim.deliver(Duration::ZERO, &sock, b"x");
                expected.push(sock.fd());
            }
            let io = lp.io(sock, Interest::READABLE, |_, seen, ev| {
                let mut buf = [0; 2];
                assert_eq!(ev.source.read(&mut buf).unwrap(), 1);
                seen.push(ev.source.fd());
            });
            ios.push(io.unwrap());
        }
        let mut seen = Vec::new();
        let outcome = lp.run(RunMode::NoWait, &mut seen).unwrap();
        assert_eq!(outcome, RunOutcome::IterationDone);
        assert_eq!(sim.modify_count(), N as u64);
        assert!(seen == expected, "callbacks not in registration order");
        let trace = sim.trace();
        let StepKind::Poll(events) = &trace[N].kind else {
            panic!("expected the poll after {N} registrations: {}", trace[N]);
        };
        let polled: Vec<RawFd> = events.iter().map(|e| e.fd).collect();
        assert!(polled == expected, "poll not in registration order");
        assert_eq!(sim.registered(expected[0]), Interest::READABLE);

        // Removing a watcher forgets its fd at once. Creation (fd) order
        // differs from registration order: removals hit every part of it.
        ios.sort_by_key(|&io| io.fd(&lp).unwrap());
        for io in ios {
            lp.remove(io).unwrap();
        }
        assert_eq!(sim.modify_count(), 2 * N as u64);
        assert_eq!(sim.registered(expected[0]), Interest::NONE);
        assert_eq!(
            lp.run(RunMode::NoWait, &mut seen).unwrap(),
            RunOutcome::NoActiveWatchers
        );
    });
}

#[test]
fn simulator_applies_200k_deliveries_in_time_then_scheduling_order() {
    under_watchdog("deliveries", || {
        let sim = Sim::new();
        let sink = sim.socket("sink", 0);
        // Scheduled out of time order, with many deliveries per instant:
        // each carries its scheduling index, and the bytes must arrive
        // sorted by time, ties in scheduling order.
        let mut rng = Rng(0xdecaf);
        let mut order: Vec<(u64, u32)> = Vec::with_capacity(N);
        for i in 0..N as u32 {
            let at = rng.next() % (N as u64 / 4);
            sim.deliver(Duration::from_micros(at), &sink, &i.to_be_bytes());
            order.push((at, i));
        }
        order.sort_by_key(|&(at, _)| at); // stable: ties keep scheduling order
        let expected: Vec<u8> = order.iter().flat_map(|(_, i)| i.to_be_bytes()).collect();

        let mut lp: Loop<Vec<u8>> = Loop::with_backend(sim.backend());
        lp.io(sink, Interest::READABLE, |lp, got, ev| {
            let mut buf = [0; 4096];
            loop {
                match ev.source.read(&mut buf) {
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => panic!("read: {e}"),
                }
            }
            if got.len() == 4 * N {
                lp.remove(ev.watcher).unwrap();
            }
        })
        .unwrap();
        let mut got = Vec::new();
        let outcome = lp.run(RunMode::Default, &mut got).unwrap();
        assert_eq!(outcome, RunOutcome::NoActiveWatchers);
        assert!(
            got == expected,
            "deliveries out of (time, scheduling) order"
        );
        assert_eq!(lp.now(), Duration::from_micros(order.last().unwrap().0));
    });
}

/// What the property test does to one of its sockets.
#[derive(Debug, Clone)]
enum Op {
    /// Change the socket's registration (`NONE` forgets it).
    Modify(usize, Interest),
    /// Poll without waiting.
    Poll,
}

const SOCKETS: usize = 12;

fn op() -> impl Strategy<Value = Op> {
    let interest = prop_oneof![
        Just(Interest::NONE),
        Just(Interest::READABLE),
        Just(Interest::WRITABLE),
        Just(Interest::BOTH),
    ];
    prop_oneof![
        4 => (0..SOCKETS, interest).prop_map(|(s, i)| Op::Modify(s, i)),
        1 => Just(Op::Poll),
    ]
}

proptest! {
    /// Registration order against a model (a list searched linearly, as
    /// the simulator once kept it): every socket is readable and writable,
    /// so a poll reports exactly the registered fds, in the model's order.
    #[test]
    fn polls_report_fds_in_registration_order(ops in prop::collection::vec(op(), 1..400)) {
        let sim = Sim::new();
        let socks: Vec<_> = (0..SOCKETS).map(|_| sim.socket("s", 1)).collect();
        for s in &socks {
            sim.deliver(Duration::ZERO, s, b"x");
        }
        let mut b = sim.backend();
        let mut model: Vec<(RawFd, Interest)> = Vec::new();
        let mut events = Vec::new();
        for op in ops {
            match op {
                Op::Modify(s, new) => {
                    let fd = socks[s].fd();
                    let pos = model.iter().position(|&(f, _)| f == fd);
                    let old = pos.map_or(Interest::NONE, |p| model[p].1);
                    if old == new {
                        continue; // the loop never asks for a no-op change
                    }
                    b.modify(fd, old, new).unwrap();
                    match (pos, new == Interest::NONE) {
                        (Some(p), true) => { model.remove(p); }
                        (Some(p), false) => model[p].1 = new,
                        (None, _) => model.push((fd, new)),
                    }
                    prop_assert_eq!(sim.registered(fd), new);
                }
                Op::Poll => {
                    events.clear();
                    b.poll(Some(Duration::ZERO), &mut events).unwrap();
                    let want: Vec<PollEvent> = model
                        .iter()
                        .map(|&(fd, i)| PollEvent { fd, ready: Ready::from_interest(i) })
                        .collect();
                    prop_assert_eq!(&events, &want);
                }
            }
        }
    }
}
