//! An fd closed behind the loop's back while a dup keeps its file open:
//! epoll keys registrations on the open file, not on the number, so the
//! registration outlives the number, and the `EPOLL_CTL_DEL` of a removed
//! watcher cannot reach it. The backend must notice (the `DEL` fails) and
//! rebuild its epoll instance; otherwise every wait returns at once with
//! the removed fd and the loop spins.
#![cfg(target_os = "linux")]

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use evloop::backends::epoll::Epoll;
use evloop::{Interest, Loop, RunMode, RunOutcome};

/// An fd number the loop watches without owning it: nothing closes it when
/// the watcher goes, so the test can close it behind the loop's back
/// without a double close (std aborts on one in debug builds).
struct Number(RawFd);

impl AsFd for Number {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: deliberately weaker than `borrow_raw` asks: the number is
        // open when the watcher is registered, and the test closes it while
        // the watcher exists to see what the loop does then. The loop only
        // hands the number to the backend, whose system calls report a
        // closed number as an error.
        unsafe { BorrowedFd::borrow_raw(self.0) }
    }
}

/// The tests close numbers: one at a time, so that neither reuses the
/// other's meanwhile.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `body` on a thread of its own and fails if it has not finished
/// within five seconds, so that a spin or a hang fails fast.
fn watchdog(body: impl FnOnce() + Send + 'static) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (done, finished) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        body();
        let _ = done.send(());
    });
    match finished.recv_timeout(Duration::from_secs(5)) {
        // Disconnected: the body panicked; join passes the panic on.
        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("not finished after 5 s: the loop spins"),
    }
}

/// Watches one end of a socketpair through its bare number, lets `behind`
/// close (or replace) that number while a dup keeps the socket open, makes
/// the socket readable, removes the watcher, and runs the loop on a 50 ms
/// timer: it must wait for the timer, in a handful of iterations. `behind`
/// returns the number if it is still open, to be closed at the end.
fn removed_after(behind: fn(RawFd) -> Option<OwnedFd>) {
    let mut lp: Loop = Loop::with_backend(Epoll::new().unwrap());
    let (a, mut peer) = UnixStream::pair().unwrap();
    let dup = a.try_clone().unwrap(); // keeps the socket open
    let n = a.into_raw_fd(); // closed by `behind` (or at the end)
    let io = lp.io(Number(n), Interest::READABLE, |_, _, _| {}).unwrap();
    assert_eq!(
        lp.run(RunMode::NoWait, &mut ()).unwrap(),
        RunOutcome::IterationDone
    );

    let still_open = behind(n);
    peer.write_all(b"unread").unwrap();
    lp.remove(io).unwrap();
    let fired = std::rc::Rc::new(std::cell::Cell::new(false));
    let seen = fired.clone();
    lp.timer(Duration::from_millis(50), Duration::ZERO, move |_, _, _| {
        seen.set(true)
    })
    .unwrap();

    let (before, t) = (lp.iteration(), Instant::now());
    let outcome = lp.run(RunMode::Default, &mut ()).unwrap();
    let (iterations, took) = (lp.iteration() - before, t.elapsed());
    assert_eq!(outcome, RunOutcome::NoActiveWatchers);
    assert!(fired.get());
    assert!(took >= Duration::from_millis(45), "timer early: {took:?}");
    assert!(
        iterations < 10,
        "{iterations} iterations in {took:?}: the loop spun"
    );
    drop((dup, still_open));
}

/// The number is closed: the removal's `DEL` fails with `EBADF`.
#[test]
fn closed_with_a_dup_alive_then_removed_does_not_spin() {
    watchdog(|| {
        removed_after(|n| {
            // SAFETY: `n` came from `into_raw_fd` and is closed only here;
            // the watcher's `Number` never closes it.
            assert_eq!(unsafe { libc::close(n) }, 0);
            None
        })
    });
}

/// The number is reused at once (`/dev/null` over it): the removal's `DEL`
/// reaches no registration (`ENOENT`), the old socket's lives on.
#[test]
fn reused_with_a_dup_alive_then_removed_does_not_spin() {
    watchdog(|| {
        removed_after(|n| {
            let null = std::fs::File::open("/dev/null").unwrap();
            // SAFETY: replaces `n`, which this test owns (from
            // `into_raw_fd`), by a duplicate of `/dev/null`; nothing else
            // uses the number.
            assert_eq!(unsafe { libc::dup2(null.as_raw_fd(), n) }, n);
            // SAFETY: `n` is open (on /dev/null) and owned by this test.
            Some(unsafe { OwnedFd::from_raw_fd(n) })
        })
    });
}
