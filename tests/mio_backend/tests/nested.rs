//! A loop on the mio backend inside another loop, through its pollable
//! fd (mio's `Poll`): embedded in an evloop loop on poll (libev's
//! `ev_embed`), and as a `PollableLoop`. A level watcher that reads one
//! byte per call leaves readiness after each run, which the backend's
//! `expose_changes` re-arms so that the fd shows it.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::Duration;

use evloop::{Embed, Interest, Loop, PollableLoop, RunMode, RunOutcome};
use mio_backend::MioBackend;

/// The inner loop: one watcher that reads a byte per call and goes at
/// the end of the stream; the peer, which writes `bytes` and closes.
fn reader(bytes: &'static [u8]) -> Loop<'static, Vec<u8>> {
    let mut inner: Loop<'static, Vec<u8>> = Loop::with_backend(MioBackend::new().unwrap());
    let (a, mut peer) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    inner
        .io(a, Interest::READABLE, |lp, got, ev| {
            let mut one = [0; 1];
            match ev.source.read(&mut one) {
                Ok(0) => lp.remove(ev.watcher).unwrap(),
                Ok(_) => got.push(one[0]),
                Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock),
            }
        })
        .unwrap();
    peer.write_all(bytes).unwrap();
    drop(peer);
    inner
}

/// Runs `f` on a thread, failing if it has not ended after 30 s.
fn watchdog(f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(()) => t.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => t.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("hung: the watchdog fired after 30 s"),
    }
}

#[test]
fn embedded_in_a_loop_on_poll() {
    watchdog(|| {
        let mut outer: Loop<Vec<u8>> = Loop::builder().backend("poll").build().unwrap();
        Embed::new(&mut outer, reader(b"nested"), |outer, got, inner, me| {
            inner.run(RunMode::NoWait, got).unwrap();
            if inner.active_count() == 0 {
                outer.stop(me).unwrap();
            }
        })
        .unwrap();
        let mut got = Vec::new();
        assert_eq!(
            outer.run(RunMode::Default, &mut got).unwrap(),
            RunOutcome::NoActiveWatchers
        );
        assert_eq!(got, b"nested");
    });
}

#[test]
fn as_a_pollable_loop() {
    watchdog(|| {
        let mut lp = PollableLoop::new(reader(b"abc")).unwrap();
        let mut got = Vec::new();
        let mut wakes = 0;
        while lp.active_count() > 0 {
            lp.flush_changes().unwrap();
            // Blocks in poll(2) on the fd until the loop has work.
            let fd = std::os::fd::AsFd::as_fd(&lp);
            assert!(evloop::backends::util::readable_within(fd, Duration::from_secs(10)).unwrap());
            lp.run(RunMode::NoWait, &mut got).unwrap();
            wakes += 1;
        }
        assert_eq!(got, b"abc");
        // A byte per run, and the end: no spin.
        assert_eq!(wakes, 4);
    });
}
