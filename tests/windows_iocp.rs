//! The `iocp` backend on Windows (run under Wine on Linux: tests/wine/):
//! readiness, level and one-shot semantics, hang-ups and resets, a socket
//! closed behind the loop's back, many sockets, wake-ups from another
//! thread, timers, children, console events and an echo exchange.
//!
//! Every test runs its loop in a thread under a watchdog, so that a hang
//! fails the test instead of stalling the run.
//!
//! Run them one at a time (`-- --test-threads=1`, as `.ci/run` does):
//! some close sockets behind their loop's back, and a handle value one
//! test frees may be taken at once by another test's new socket (handles,
//! unlike fds, are not kept apart by number here); and a console Ctrl-C
//! reaches every process of the console.
#![cfg(windows)]

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::windows::io::{AsRawHandle, IntoRawSocket, RawSocket};
use std::os::windows::io::{AsRawSocket, AsSocket, BorrowedSocket, FromRawSocket, OwnedSocket};
use std::process::Command;
use std::rc::Rc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use evloop::backend::{Backend, ClosedFd, Hangup};
use evloop::backends::iocp::Iocp;
use evloop::{
    Async, Child, Error, ExitStatus, Interest, Loop, Ready, RunMode, RunOutcome, Signal, Trigger,
};

/// Held by the console Ctrl-C test and by every test that starts a child:
/// `GenerateConsoleCtrlEvent(CTRL_C_EVENT, 0)` reaches every process of the
/// console, and a child `cmd` that gets it ends (exit code 0 under Wine)
/// before it can report the code the test expects.
static CONSOLE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn console_alone() -> std::sync::MutexGuard<'static, ()> {
    CONSOLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `body` in a thread; fails if it takes longer than `secs`.
fn watchdog(secs: u64, body: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        body();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(()) => t.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // The body panicked: pass its panic on.
            if let Err(e) = t.join() {
                std::panic::resume_unwind(e);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("hung: more than {secs} s"),
    }
}

fn new_loop<'s, S>() -> Loop<'s, S> {
    Loop::with_backend(Iocp::new().expect("iocp: the AFD driver is there"))
}

/// A connected loopback TCP pair, both non-blocking: (ours, the peer).
fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let peer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (ours, _) = listener.accept().unwrap();
    ours.set_nonblocking(true).unwrap();
    peer.set_nonblocking(true).unwrap();
    ours.set_nodelay(true).unwrap();
    peer.set_nodelay(true).unwrap();
    (ours, peer)
}

/// A pause between the tries of [`spin_until`] (not synchronisation:
/// the condition is what is waited for).
fn pause() {
    std::thread::sleep(Duration::from_millis(5));
}

/// A socket by number, for the tests that close one behind the loop's
/// back or hand it a handle that is not a socket.
struct RawSock(RawSocket);

impl AsSocket for RawSock {
    fn as_socket(&self) -> BorrowedSocket<'_> {
        // SAFETY: test only: the number is a socket the test keeps open
        // while the loop uses it, except where the test closes it (or
        // passes a non-socket) on purpose, which the backend must survive:
        // it only ever passes the number to the system, which fails.
        unsafe { BorrowedSocket::borrow_raw(self.0) }
    }
}

/// Whether this runs under Wine (its ntdll exports `wine_get_version`).
fn under_wine() -> bool {
    #[link(name = "kernel32")]
    unsafe extern "system" {
        fn GetModuleHandleA(name: *const u8) -> *mut std::ffi::c_void;
        fn GetProcAddress(module: *mut std::ffi::c_void, name: *const u8) -> *mut std::ffi::c_void;
    }
    // SAFETY: plain calls with NUL-terminated names; ntdll is always
    // loaded.
    unsafe {
        let ntdll = GetModuleHandleA(c"ntdll.dll".as_ptr().cast());
        !ntdll.is_null() && !GetProcAddress(ntdll, c"wine_get_version".as_ptr().cast()).is_null()
    }
}

/// Says something on stderr past the test harness's capture (a skip, a
/// deviation of Wine's), so that it shows in every run.
fn loud(what: &str) {
    let _ = writeln!(std::io::stderr(), "NOTE: {what}");
}

/// Runs `NoWait` iterations until `done` holds (at most `n`).
fn spin_until<S>(lp: &mut Loop<'_, S>, state: &mut S, n: usize, done: impl Fn(&S) -> bool) {
    for _ in 0..n {
        if done(state) {
            return;
        }
        lp.run(RunMode::NoWait, state).unwrap();
        if done(state) {
            return;
        }
        pause();
    }
    panic!("not done after {n} iterations");
}

#[test]
fn capabilities_are_declared() {
    let b = Iocp::new().unwrap();
    let caps = b.capabilities();
    assert!(!caps.edge && caps.oneshot && !caps.virtual_fds && caps.max_fd.is_none());
    assert_eq!(caps.hangup, Hangup::AsOfWakeup);
    assert_eq!(caps.closed_fd, ClosedFd::AtNextWait);
    assert_eq!(b.name(), "iocp");
    assert_eq!(evloop::backends::default_name(), "iocp");
}

#[test]
fn readable_and_writable() {
    watchdog(30, || {
        let (a, mut peer) = pair();
        let mut lp: Loop<Vec<Ready>> = new_loop();
        let io = lp
            .io(a, Interest::READABLE, |_, got, ev| {
                got.push(ev.ready);
                let mut buf = [0u8; 64];
                while let Ok(n) = ev.source.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                }
            })
            .unwrap();
        let mut got = Vec::new();
        lp.run(RunMode::NoWait, &mut got).unwrap();
        assert_eq!(got, []);
        peer.write_all(b"ping").unwrap();
        lp.run(RunMode::Once, &mut got).unwrap();
        assert_eq!(got, [Ready::READABLE]);
        // Read, so nothing more.
        got.clear();
        lp.run(RunMode::NoWait, &mut got).unwrap();
        assert_eq!(got, []);
        // Writable at once, in the same iteration as the change.
        io.set_interest(&mut lp, Interest::WRITABLE).unwrap();
        lp.run(RunMode::NoWait, &mut got).unwrap();
        assert_eq!(got, [Ready::WRITABLE]);
        got.clear();
        io.set_interest(&mut lp, Interest::BOTH).unwrap();
        lp.run(RunMode::NoWait, &mut got).unwrap();
        assert_eq!(got, [Ready::WRITABLE]);
        got.clear();
        peer.write_all(b"x").unwrap();
        lp.run(RunMode::NoWait, &mut got).unwrap();
        assert_eq!(got, [Ready::READABLE | Ready::WRITABLE]);
        // Back to readable only: no report without data.
        got.clear();
        io.set_interest(&mut lp, Interest::READABLE).unwrap();
        lp.run(RunMode::NoWait, &mut got).unwrap();
        lp.run(RunMode::NoWait, &mut got).unwrap();
        assert_eq!(got, []);
    });
}

#[test]
fn level_triggered_rereports_unread_data() {
    watchdog(30, || {
        let (a, mut peer) = pair();
        let mut lp: Loop<u32> = new_loop();
        lp.io(a, Interest::READABLE, |_, n, ev| {
            assert_eq!(ev.ready, Ready::READABLE);
            *n += 1; // never reads
        })
        .unwrap();
        peer.write_all(b"x").unwrap();
        let mut n = 0;
        lp.run(RunMode::Once, &mut n).unwrap();
        assert_eq!(n, 1);
        for i in 2..=20 {
            lp.run(RunMode::NoWait, &mut n).unwrap();
            assert_eq!(n, i, "reported on every iteration while unread");
        }
    });
}

#[test]
fn oneshot_is_native_and_rearms() {
    watchdog(30, || {
        let (a, mut peer) = pair();
        let (keep, _keep_peer) = pair();
        let mut lp: Loop<u32> = new_loop();
        lp.io(keep, Interest::READABLE, |_, _, _| {}).unwrap();
        let io = lp
            .io(
                a,
                Interest::READABLE.with_trigger(Trigger::Oneshot),
                |_, n, _| *n += 1,
            )
            .unwrap();
        peer.write_all(b"x").unwrap();
        let mut n = 0;
        lp.run(RunMode::Once, &mut n).unwrap();
        assert_eq!(n, 1);
        assert!(!lp.is_active(io).unwrap());
        for _ in 0..3 {
            lp.run(RunMode::NoWait, &mut n).unwrap();
        }
        assert_eq!(n, 1, "disarmed");
        lp.start(io).unwrap();
        lp.run(RunMode::NoWait, &mut n).unwrap();
        assert_eq!(n, 2, "re-armed, still unread");
    });
}

#[test]
fn edge_is_refused() {
    let (a, _peer) = pair();
    let mut lp: Loop<()> = new_loop();
    let edge = Interest::READABLE.with_trigger(Trigger::Edge);
    match lp.io(a, edge, |_, _, _| {}) {
        Err(Error::UnsupportedTrigger {
            trigger: Trigger::Edge,
            backend: "iocp",
        }) => {}
        other => panic!("edge on iocp: {:?}", other.map(|_| ())),
    }
}

#[test]
fn peer_close_gives_data_then_eof_with_hup() {
    watchdog(30, || {
        let (a, mut peer) = pair();
        peer.write_all(b"bye").unwrap();
        drop(peer);
        #[derive(Default)]
        struct Got {
            ready: Vec<Ready>,
            data: Vec<u8>,
            eof: bool,
        }
        let mut lp: Loop<Got> = new_loop();
        lp.io(a, Interest::READABLE, |lp, got, ev| {
            got.ready.push(ev.ready);
            let mut buf = [0u8; 64];
            loop {
                match ev.source.read(&mut buf) {
                    Ok(0) => {
                        got.eof = true;
                        lp.remove(ev.watcher).unwrap();
                        break;
                    }
                    Ok(n) => got.data.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => panic!("read: {e}"),
                }
            }
        })
        .unwrap();
        let mut got = Got::default();
        spin_until(&mut lp, &mut got, 50, |g| g.eof);
        assert_eq!(got.data, b"bye");
        assert!(got.ready[0].is_readable(), "{:?}", got.ready);
        assert!(!got.ready[0].is_error(), "{:?}", got.ready);
        // Closed before the socket was armed: on Windows the report says
        // so (AFD_POLL_DISCONNECT comes with the FIN: Hangup::AsOfWakeup).
        // Wine's AFD poll reports a hang-up only once no data is left to
        // read (it finds the FIN by a zero-byte MSG_PEEK), so here the
        // data comes without HUP; the hang-up would come with the next
        // report, after the data is read.
        if under_wine() {
            assert!(!got.ready[0].is_hup(), "{:?}: Wine changed", got.ready);
            loud(
                "peer_close_gives_data_then_eof_with_hup: Wine reports no HUP while data is unread",
            );
        } else {
            assert!(got.ready[0].is_hup(), "{:?}", got.ready);
        }
        assert_eq!(
            lp.run(RunMode::NoWait, &mut got).unwrap(),
            RunOutcome::NoActiveWatchers
        );
    });
}

#[test]
fn peer_close_without_data_is_hup() {
    watchdog(30, || {
        let (a, peer) = pair();
        let mut lp: Loop<Vec<Ready>> = new_loop();
        lp.io(a, Interest::READABLE, |lp, got, ev| {
            got.push(ev.ready);
            let mut buf = [0u8; 8];
            assert_eq!(ev.source.read(&mut buf).unwrap(), 0);
            lp.remove(ev.watcher).unwrap();
        })
        .unwrap();
        let mut got = Vec::new();
        lp.run(RunMode::NoWait, &mut got).unwrap();
        assert_eq!(got, []);
        drop(peer); // while armed
        lp.run(RunMode::Once, &mut got).unwrap();
        assert_eq!(got, [Ready::READABLE | Ready::HUP]);
    });
}

#[test]
fn a_writer_hears_the_hangup_without_spinning() {
    watchdog(30, || {
        let (a, peer) = pair();
        peer.shutdown(Shutdown::Write).unwrap();
        let mut lp: Loop<Vec<Ready>> = new_loop();
        lp.io(a, Interest::WRITABLE, |lp, got, ev| {
            got.push(ev.ready);
            lp.stop(ev.watcher).unwrap();
        })
        .unwrap();
        let mut got = Vec::new();
        lp.run(RunMode::Once, &mut got).unwrap();
        assert_eq!(got, [Ready::WRITABLE | Ready::HUP]);
        drop(peer);
    });
}

#[test]
fn a_blocked_writer_hears_the_hangup_once() {
    watchdog(60, || {
        let (mut a, peer) = pair();
        // Fill: the peer never reads.
        let chunk = [7u8; 65536];
        let mut filled = 0usize;
        loop {
            match a.write(&chunk) {
                Ok(n) => filled += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("fill: {e}"),
            }
            assert!(filled < 1 << 30, "never full");
        }
        peer.shutdown(Shutdown::Write).unwrap();
        let mut lp: Loop<Vec<Ready>> = new_loop();
        lp.io(a, Interest::WRITABLE, |_, got, ev| got.push(ev.ready))
            .unwrap();
        let mut got = Vec::new();
        lp.run(RunMode::Once, &mut got).unwrap();
        assert_eq!(got, [Ready::HUP], "the FIN, while not writable");
        for _ in 0..5 {
            lp.run(RunMode::NoWait, &mut got).unwrap();
        }
        assert_eq!(got, [Ready::HUP], "told once: no spin while full");
        drop(peer);
    });
}

#[test]
fn reset_by_peer_is_an_error() {
    watchdog(30, || {
        let (a, peer) = pair();
        socket2::SockRef::from(&peer)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(peer); // abortive: a reset
        let mut lp: Loop<Vec<Ready>> = new_loop();
        lp.io(a, Interest::READABLE, |lp, got, ev| {
            got.push(ev.ready);
            lp.stop(ev.watcher).unwrap();
        })
        .unwrap();
        let mut got = Vec::new();
        lp.run(RunMode::Once, &mut got).unwrap();
        assert_eq!(got, [Ready::READABLE | Ready::HUP | Ready::ERROR]);
    });
}

#[test]
fn a_socket_closed_behind_the_loops_back_is_killed_at_the_next_wait() {
    watchdog(30, || {
        let (a, _peer) = pair();
        let raw = a.into_raw_socket();
        let mut lp: Loop<Vec<Ready>> = new_loop();
        let io = lp
            .io(RawSock(raw), Interest::READABLE, |_, got, ev| {
                got.push(ev.ready)
            })
            .unwrap();
        let mut got = Vec::new();
        lp.run(RunMode::NoWait, &mut got).unwrap();
        assert_eq!(got, []);
        // SAFETY: `raw` is ours (taken from the stream); the watcher holds
        // only its number.
        drop(unsafe { OwnedSocket::from_raw_socket(raw) });
        lp.run(RunMode::NoWait, &mut got).unwrap();
        assert_eq!(got, [Ready::ERROR | Ready::READABLE]);
        assert!(!lp.is_active(io).unwrap());
        // No spin: a blocking iteration waits for the timer.
        lp.timer(Duration::from_millis(5), Duration::ZERO, |_, _, _| {})
            .unwrap();
        let before = lp.iteration();
        lp.run(RunMode::Once, &mut got).unwrap();
        assert_eq!(lp.iteration(), before + 1);
        lp.remove(io).unwrap();
    });
}

#[test]
fn a_closed_socket_is_killed_when_it_is_polled_again() {
    watchdog(30, || {
        // Closed while its request is not pending: between a report and
        // the next wait (the request is issued again then, and fails).
        let (a, mut peer) = pair();
        let raw = a.into_raw_socket();
        let mut lp: Loop<Vec<Ready>> = new_loop();
        lp.io(RawSock(raw), Interest::READABLE, move |_, got, ev| {
            got.push(ev.ready);
            if got.len() == 1 {
                // SAFETY: as above: ours, closed once, here.
                drop(unsafe { OwnedSocket::from_raw_socket(raw) });
            }
        })
        .unwrap();
        peer.write_all(b"x").unwrap();
        let mut got = Vec::new();
        lp.run(RunMode::Once, &mut got).unwrap();
        assert_eq!(got, [Ready::READABLE]);
        lp.run(RunMode::NoWait, &mut got).unwrap();
        assert_eq!(got, [Ready::READABLE, Ready::ERROR | Ready::READABLE]);
        assert_eq!(
            lp.run(RunMode::NoWait, &mut got).unwrap(),
            RunOutcome::NoActiveWatchers
        );
    });
}

#[test]
fn a_handle_that_is_not_a_socket_is_refused() {
    let file = std::fs::File::open(std::env::current_exe().unwrap()).unwrap();
    let raw = file.as_raw_handle() as RawSocket;
    let mut lp: Loop<()> = new_loop();
    let err = lp
        .io(RawSock(raw), Interest::READABLE, |_, _, _| {})
        .map(|_| ())
        .unwrap_err();
    assert!(matches!(err, Error::InvalidFd { .. }), "{err:?}");
    assert!(err.to_string().contains("not an open socket"), "{err}");
    // The backend refuses it too, should it be asked directly.
    let mut b = Iocp::new().unwrap();
    let err = b
        .modify(raw, Interest::NONE, Interest::READABLE)
        .unwrap_err();
    assert!(err.to_string().contains("iocp"), "{err}");
    drop(file);
}

#[test]
fn a_closed_socket_is_refused() {
    let mut lp: Loop<()> = new_loop();
    // Another test's thread may make a socket that takes the freed value
    // at once (then it is a socket, and accepted): try again. A check that
    // accepted closed sockets would accept every try.
    let refused = (0..20).any(|_| {
        let (a, _peer) = pair();
        let raw = a.as_raw_socket();
        drop(a);
        match lp.io(RawSock(raw), Interest::READABLE, |_, _, _| {}) {
            Err(err) => {
                assert!(matches!(err, Error::InvalidFd { .. }), "{err:?}");
                true
            }
            Ok(reused) => {
                lp.remove(reused).unwrap();
                false
            }
        }
    });
    assert!(refused, "a closed socket accepted 20 times");
}

#[test]
fn many_sockets() {
    watchdog(120, || {
        const N: usize = 1100;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut peers = Vec::with_capacity(N);
        let mut lp: Loop<BTreeSet<usize>> = new_loop();
        for i in 0..N {
            let peer = TcpStream::connect(addr).unwrap();
            let (ours, _) = listener.accept().unwrap();
            ours.set_nonblocking(true).unwrap();
            lp.io(ours, Interest::READABLE, move |_, seen, ev| {
                let mut buf = [0u8; 16];
                let n = ev.source.read(&mut buf).unwrap();
                assert_eq!(n, 1);
                assert_eq!(buf[0], i as u8);
                assert!(seen.insert(i), "{i} reported twice");
            })
            .unwrap();
            peers.push(peer);
        }
        let mut seen = BTreeSet::new();
        lp.run(RunMode::NoWait, &mut seen).unwrap();
        assert!(seen.is_empty());
        // Every seventh, then all the others.
        let some: BTreeSet<usize> = (0..N).step_by(7).collect();
        for &i in &some {
            peers[i].write_all(&[i as u8]).unwrap();
        }
        let t0 = Instant::now();
        while seen.len() < some.len() {
            lp.run(RunMode::Once, &mut seen).unwrap();
            assert!(t0.elapsed() < Duration::from_secs(60));
        }
        assert_eq!(seen, some);
        for i in (0..N).filter(|i| !some.contains(i)) {
            peers[i].write_all(&[i as u8]).unwrap();
        }
        while seen.len() < N {
            lp.run(RunMode::Once, &mut seen).unwrap();
            assert!(t0.elapsed() < Duration::from_secs(60));
        }
        // Everything read: nothing more.
        lp.run(RunMode::NoWait, &mut seen).unwrap();
        assert_eq!(seen.len(), N);
    });
}

#[test]
fn removing_a_watcher_lets_the_socket_close() {
    watchdog(30, || {
        // The removal takes effect at once: the pending poll must not
        // keep the socket alive, or the peer would not see EOF.
        let (a, mut peer) = pair();
        let mut lp: Loop<()> = new_loop();
        let io = lp.io(a, Interest::READABLE, |_, _, _| {}).unwrap();
        lp.run(RunMode::NoWait, &mut ()).unwrap();
        lp.remove(io).unwrap(); // closes `a`
        peer.set_nonblocking(false).unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(peer.read(&mut buf).unwrap(), 0, "EOF");
        drop(lp);
    });
}

#[test]
fn dropping_the_backend_with_requests_pending() {
    watchdog(30, || {
        let mut pairs = Vec::new();
        {
            let mut b = Iocp::new().unwrap();
            for _ in 0..100 {
                let (a, peer) = pair();
                b.modify(a.as_raw_socket(), Interest::NONE, Interest::READABLE)
                    .unwrap();
                pairs.push((a, peer));
            }
            let mut events = Vec::new();
            b.poll(Some(Duration::ZERO), &mut events).unwrap();
            assert_eq!(events, []);
            // Some re-registered (orphaned requests), some closed.
            for (a, _) in &pairs[..10] {
                b.modify(a.as_raw_socket(), Interest::READABLE, Interest::BOTH)
                    .unwrap();
            }
            pairs.truncate(90);
        } // dropped: cancels, waits for every request
        let b = Iocp::new().unwrap();
        drop(b);
    });
}

#[test]
fn async_wake_from_another_thread() {
    watchdog(30, || {
        let mut lp: Loop<u32> = new_loop();
        let (_, sender) = Async::new(&mut lp, |lp, n, a| {
            *n += 1;
            lp.stop(a).unwrap();
        })
        .unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            for _ in 0..100 {
                sender.send().unwrap();
            }
        });
        let mut n = 0;
        // Blocks (no timer, no fd) until the sender wakes it.
        lp.run(RunMode::Default, &mut n).unwrap();
        assert_eq!(n, 1);
        t.join().unwrap();
    });
}

#[test]
fn timers_never_fire_early() {
    watchdog(60, || {
        let mut lp: Loop<Option<Duration>> = new_loop();
        let (_a, _peer) = pair();
        for after in [300, 1500, 2500, 15_000, 40_000].map(Duration::from_micros) {
            let start = Instant::now();
            lp.update_now();
            lp.timer(after, Duration::ZERO, move |_, at, _| {
                *at = Some(start.elapsed())
            })
            .unwrap();
            let mut at = None;
            let mut iterations = 0;
            while at.is_none() {
                lp.run(RunMode::Once, &mut at).unwrap();
                iterations += 1;
                assert!(iterations < 100, "busy loop for a {after:?} timer");
            }
            let at = at.unwrap();
            assert!(at >= after, "a {after:?} timer fired after {at:?}");
            assert!(iterations <= 3, "{iterations} iterations for {after:?}");
        }
    });
}

#[test]
fn a_child_exits_with_its_code() {
    let _console = console_alone();
    watchdog(60, || {
        let mut lp: Loop<Option<ExitStatus>> = new_loop();
        Child::spawn(
            &mut lp,
            Command::new("cmd").args(["/c", "exit 3"]),
            |_, got, ev| *got = ev.status,
        )
        .unwrap();
        let mut got = None;
        lp.run(RunMode::Default, &mut got).unwrap();
        assert_eq!(got, Some(ExitStatus::Exited(3)));
    });
}

#[link(name = "kernel32")]
unsafe extern "system" {
    fn GenerateConsoleCtrlEvent(event: u32, group: u32) -> i32;
}

#[test]
fn ctrl_c_is_signal_int() {
    let _console = console_alone();
    watchdog(60, || {
        let mut lp: Loop<u32> = new_loop();
        Signal::new(&mut lp, Signal::INT, |lp, n, ev| {
            *n += 1;
            lp.stop(ev).unwrap();
        })
        .unwrap();
        lp.run(RunMode::NoWait, &mut 0).unwrap();
        // SAFETY: plain call; CTRL_C_EVENT (0) to the console's group 0.
        if unsafe { GenerateConsoleCtrlEvent(0, 0) } == 0 {
            let err = std::io::Error::last_os_error();
            loud(&format!(
                "SKIPPED ctrl_c_is_signal_int: GenerateConsoleCtrlEvent failed ({err}): no \
                 console to deliver it to (Wine delivers console events only to a program whose \
                 console is a terminal; run with EVLOOP_WINE_PTY=1)"
            ));
            return;
        }
        let mut n = 0;
        lp.timer(Duration::from_secs(20), Duration::ZERO, |_, _, _| {
            panic!("no Ctrl-C within 20 s")
        })
        .unwrap();
        while n == 0 {
            lp.run(RunMode::Once, &mut n).unwrap();
        }
        assert_eq!(n, 1);
    });
}

#[test]
fn echo_100_connections() {
    watchdog(120, || {
        const CLIENTS: usize = 100;
        const BYTES: usize = 20_000;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let clients = std::thread::spawn(move || {
            let threads: Vec<_> = (0..CLIENTS)
                .map(|i| {
                    std::thread::spawn(move || {
                        let data: Vec<u8> = (0..BYTES).map(|j| (i * 31 + j * 7) as u8).collect();
                        let mut s = TcpStream::connect(addr).unwrap();
                        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                        let mut r = s.try_clone().unwrap();
                        let expect = data.clone();
                        let reader = std::thread::spawn(move || {
                            let mut back = Vec::new();
                            r.read_to_end(&mut back).unwrap();
                            back
                        });
                        s.write_all(&data).unwrap();
                        s.shutdown(Shutdown::Write).unwrap();
                        let back = reader.join().unwrap();
                        assert_eq!(back.len(), expect.len(), "client {i}");
                        assert!(back == expect, "client {i}: bytes differ");
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
        });

        struct Echo {
            closed: usize,
        }
        struct Conn {
            pending: Vec<u8>,
            eof: bool,
        }
        let mut lp: Loop<Echo> = new_loop();
        lp.io(listener, Interest::READABLE, |lp, _, ev| loop {
            match ev.source.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(true).unwrap();
                    let conn = Rc::new(RefCell::new(Conn {
                        pending: Vec::new(),
                        eof: false,
                    }));
                    lp.io(s, Interest::READABLE, move |lp, echo, ev| {
                        let mut c = conn.borrow_mut();
                        if ev.ready.is_readable() && !c.eof {
                            let mut buf = [0u8; 4096];
                            loop {
                                match ev.source.read(&mut buf) {
                                    Ok(0) => {
                                        c.eof = true;
                                        break;
                                    }
                                    Ok(n) => c.pending.extend_from_slice(&buf[..n]),
                                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                                    Err(e) => panic!("server read: {e}"),
                                }
                            }
                        }
                        while !c.pending.is_empty() {
                            match ev.source.write(&c.pending) {
                                Ok(n) => {
                                    c.pending.drain(..n);
                                }
                                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                                Err(e) => panic!("server write: {e}"),
                            }
                        }
                        if c.pending.is_empty() && c.eof {
                            echo.closed += 1;
                            lp.remove(ev.watcher).unwrap();
                        } else if c.pending.is_empty() {
                            ev.watcher.set_interest(lp, Interest::READABLE).unwrap();
                        } else if c.eof {
                            ev.watcher.set_interest(lp, Interest::WRITABLE).unwrap();
                        } else {
                            ev.watcher.set_interest(lp, Interest::BOTH).unwrap();
                        }
                    })
                    .unwrap();
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("accept: {e}"),
            }
        })
        .unwrap();
        let mut echo = Echo { closed: 0 };
        while echo.closed < CLIENTS {
            lp.run(RunMode::Once, &mut echo).unwrap();
        }
        clients.join().unwrap();
    });
}

/// Wake-ups before any wait, and many of them, end one wait each time,
/// never a wait that has nothing: the backend's own.
#[test]
fn waker_used_before_the_wait_and_after_the_backend() {
    watchdog(30, || {
        let mut b = Iocp::new().unwrap();
        let w = b.notices().unwrap().waker(&mut Vec::new()).unwrap();
        for _ in 0..10 {
            w.wake();
        }
        let mut events = Vec::new();
        let t0 = Instant::now();
        b.poll(Some(Duration::from_secs(10)), &mut events).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(5), "woken");
        let mut notices = evloop::backend::Notices::default();
        b.notices()
            .unwrap()
            .take_notices(&mut notices, &mut Vec::new());
        assert!(notices.woken);
        // Used up: the next wait times out.
        let t0 = Instant::now();
        b.poll(Some(Duration::from_millis(30)), &mut events)
            .unwrap();
        assert!(t0.elapsed() >= Duration::from_millis(30));
        drop(b);
        w.wake(); // harmless
        let seen = Cell::new(0);
        seen.set(1);
        assert_eq!(seen.get(), 1);
    });
}

#[test]
fn udp_readable() {
    watchdog(30, || {
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        a.set_nonblocking(true).unwrap();
        let to = a.local_addr().unwrap();
        let mut lp: Loop<Vec<Vec<u8>>> = new_loop();
        lp.io(a, Interest::READABLE, |_, got, ev| {
            let mut buf = [0u8; 64];
            while let Ok(n) = ev.source.recv(&mut buf) {
                got.push(buf[..n].to_vec());
            }
        })
        .unwrap();
        let mut got = Vec::new();
        lp.run(RunMode::NoWait, &mut got).unwrap();
        assert!(got.is_empty());
        b.send_to(b"one", to).unwrap();
        b.send_to(b"two", to).unwrap();
        while got.len() < 2 {
            lp.run(RunMode::Once, &mut got).unwrap();
        }
        assert_eq!(got, [b"one".to_vec(), b"two".to_vec()]);
    });
}

#[test]
fn connects_in_progress() {
    use socket2::{Domain, Socket, Type};
    watchdog(30, || {
        // A listener: the connect succeeds, writable.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let good = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        good.set_nonblocking(true).unwrap();
        let _ = good.connect(&listener.local_addr().unwrap().into());
        // A port nobody listens on (the listener's, once it is gone): the
        // connect fails.
        let gone = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = gone.local_addr().unwrap();
        drop(gone);
        let bad = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        bad.set_nonblocking(true).unwrap();
        let _ = bad.connect(&addr.into());
        let mut lp: Loop<Vec<(&str, Ready)>> = new_loop();
        lp.io(TcpStream::from(good), Interest::WRITABLE, |lp, got, ev| {
            got.push(("good", ev.ready));
            lp.stop(ev.watcher).unwrap();
        })
        .unwrap();
        lp.io(TcpStream::from(bad), Interest::WRITABLE, |lp, got, ev| {
            got.push(("bad", ev.ready));
            lp.stop(ev.watcher).unwrap();
        })
        .unwrap();
        let mut got = Vec::new();
        while got.len() < 2 {
            lp.run(RunMode::Once, &mut got).unwrap();
        }
        got.sort_by_key(|g| g.0);
        assert_eq!(got[1], ("good", Ready::WRITABLE));
        assert_eq!(got[0].0, "bad");
        assert!(got[0].1.is_error() && got[0].1.is_writable(), "{got:?}");
    });
}
