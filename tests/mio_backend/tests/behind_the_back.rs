//! Files closed behind the loop's back, on the mio backend, where the
//! emulation of level triggering and epoll's registrations (keyed on the
//! open file, not on the number) meet: a re-arm that fails, and a `DEL`
//! that misses a registration a dup keeps alive (docs/porting.md,
//! section 2, `modify`; section 5, epoll's column).

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use evloop::backend::{Backend, PollEvent};
use evloop::{Break, Interest, Loop, Ready, RunMode};
use mio_backend::MioBackend;

/// One test: each part closes fd numbers behind someone's back, and a
/// test running beside it in another thread could be handed them.
#[test]
fn closed_behind_the_back() {
    a_reported_level_fd_closed_behind_the_back_is_reported_gone();
    a_missed_del_with_a_live_dup_rebuilds_the_poll();
}

/// A level fd reported, then closed behind the loop's back before the next
/// wait: its re-arm fails, and the wait after reports it gone, so that the
/// loop stops its watcher with `ERROR` instead of leaving it silent forever.
fn a_reported_level_fd_closed_behind_the_back_is_reported_gone() {
    let (a, mut peer) = UnixStream::pair().unwrap();
    let fd = a.as_raw_fd();
    let mut lp: Loop<Vec<Ready>> = Loop::with_backend(MioBackend::new().unwrap());
    let io = lp
        .io(a, Interest::READABLE, |_, seen, ev| seen.push(ev.ready))
        .unwrap();
    peer.write_all(b"x").unwrap(); // never read
    let mut seen = Vec::new();
    lp.run(RunMode::NoWait, &mut seen).unwrap();
    assert_eq!(seen, [Ready::READABLE]);
    // Closed behind the loop's back (no other descriptor of the file).
    // SAFETY: `fd` is open (the loop's stream owns it); the stream is
    // taken back below and forgotten, never closed a second time.
    assert_eq!(unsafe { libc::close(fd) }, 0);
    // A watchdog: a timer that stops the loop, so that a backend that never
    // reports fails the test instead of hanging it.
    lp.timer(Duration::from_secs(10), Duration::ZERO, |lp, _, _| {
        lp.break_loop(Break::All)
    })
    .unwrap();
    lp.run(RunMode::Once, &mut seen).unwrap();
    assert_eq!(
        seen,
        [Ready::READABLE, Ready::ERROR | Ready::READABLE],
        "fd {fd}"
    );
    assert!(!lp.is_active(io).unwrap(), "stopped");
    std::mem::forget(io.into_source::<UnixStream, _>(&mut lp).unwrap());
}

/// An fd number closed behind the loop's back while a dup of its file
/// lives: the `DEL` of its removal fails (`EBADF`) and the registration
/// lives on in the kernel, out of reach; the number is then reused by a
/// new file. The backend rebuilds its `Poll` before the next wait, so the
/// old file's data never shows up as the new file's.
fn a_missed_del_with_a_live_dup_rebuilds_the_poll() {
    let mut b = MioBackend::new().unwrap();
    let (old, mut old_peer) = UnixStream::pair().unwrap();
    let n = old.as_raw_fd();
    b.modify(n, Interest::NONE, Interest::READABLE).unwrap();
    let dup = old.try_clone().unwrap(); // keeps the old file open
    drop(old); // number `n` closed behind the backend's back
    b.modify(n, Interest::READABLE, Interest::NONE).unwrap(); // DEL fails: Ok
                                                              // A new file under the number `n`.
    let (new, mut new_peer) = UnixStream::pair().unwrap();
    let reused: OwnedFd = if new.as_raw_fd() == n {
        new.into() // the lowest free number: `n` itself
    } else {
        // SAFETY: dup2 onto `n`, which is closed (nothing of ours owns
        // it); the new descriptor `n` is then owned by `reused` alone.
        let reused = unsafe {
            assert_eq!(libc::dup2(new.as_raw_fd(), n), n);
            OwnedFd::from_raw_fd(n)
        };
        drop(new);
        reused
    };
    b.modify(n, Interest::NONE, Interest::READABLE).unwrap();

    old_peer.write_all(b"old").unwrap(); // the old file, through its peer
    let mut events = Vec::new();
    b.poll(Some(Duration::from_millis(50)), &mut events)
        .unwrap();
    assert_eq!(events, [], "the old file's data reported under fd {n}");

    new_peer.write_all(b"new").unwrap();
    b.poll(Some(Duration::from_secs(10)), &mut events).unwrap();
    let want = PollEvent {
        fd: n,
        ready: Ready::READABLE,
    };
    assert_eq!(events, [want]);
    b.modify(n, Interest::READABLE, Interest::NONE).unwrap();
    drop((dup, reused));
}
