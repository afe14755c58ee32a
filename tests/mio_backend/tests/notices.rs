//! Signals, children and wake-ups on the mio backend, through the embedded
//! Unix notifier: each ends a blocked wait, and none of the notifier's fds
//! ever reaches the loop as an io event. Every loop has a watchdog timer.
//! One test: signals are the process's.

use std::time::Duration;

use evloop::{Async, Break, Child, ExitStatus, Loop, RunMode};
use mio_backend::MioBackend;

/// A loop on the mio backend whose run fails the test after 30 s.
fn new_loop<S>() -> Loop<'static, S> {
    let mut lp = Loop::with_backend(MioBackend::new().unwrap());
    lp.timer(Duration::from_secs(30), Duration::ZERO, |_, _, _| {
        panic!("watchdog: nothing came in 30 s")
    })
    .unwrap();
    lp
}

#[test]
fn signals_children_and_wake_ups() {
    // A signal raised by another thread while the loop is blocked.
    let mut lp: Loop<u32> = new_loop();
    evloop::Signal::new(&mut lp, libc::SIGUSR2, |lp, n, _| {
        *n += 1;
        lp.break_loop(Break::All);
    })
    .unwrap();
    let raiser = std::thread::spawn(|| {
        // SAFETY: a plain syscall; SIGUSR2 is watched, so its handler runs.
        unsafe { libc::kill(libc::getpid(), libc::SIGUSR2) };
    });
    let mut n = 0;
    lp.run(RunMode::Default, &mut n).unwrap();
    raiser.join().unwrap();
    assert_eq!(n, 1);
    drop(lp);

    // A child's exit, with its status.
    let mut lp: Loop<Option<ExitStatus>> = new_loop();
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", "exit 7"]);
    Child::spawn(&mut lp, &mut cmd, |lp, got, ev| {
        *got = ev.status;
        lp.break_loop(Break::All);
    })
    .unwrap();
    let mut got = None;
    lp.run(RunMode::Default, &mut got).unwrap();
    assert_eq!(got, Some(ExitStatus::Exited(7)));
    drop(lp);

    // A wake-up from another thread.
    let mut lp: Loop<u32> = new_loop();
    let (_, sender) = Async::new(&mut lp, |lp, n, _| {
        *n += 1;
        lp.break_loop(Break::All);
    })
    .unwrap();
    let waker = std::thread::spawn(move || {
        let _ = sender.send();
    });
    let mut n = 0;
    lp.run(RunMode::Default, &mut n).unwrap();
    waker.join().unwrap();
    assert_eq!(n, 1);
}
