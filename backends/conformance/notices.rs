//! The notifier checks: signals, child exits and wake-ups, through the
//! public `Loop` API (signal, child and async watchers) on loops made with
//! the backend under test, each reported by name (`notices/<check>`):
//!
//! - `notices/signal_delivery`: `SIGUSR2`, sent to the process while two
//!   loops (two threads, a backend each) are blocked watching it, wakes
//!   both and runs each watcher once;
//! - `notices/signal_disposition_restored`: a handler installed with
//!   `sigaction` before a loop watches `SIGUSR2` is installed again once it
//!   stops (the same `sa_sigaction`), and is what a later `SIGUSR2` runs;
//! - `notices/child_two_loops_one_child`: one child watched by two loops
//!   in two threads, each on its own backend: both report exit status 7,
//!   and it was reaped once (`waitpid` afterwards: `ECHILD`);
//! - `notices/wake_from_another_thread`: an async watcher woken from
//!   another thread ends a blocked run; a sender that outlives the loop
//!   (and its backend) is harmless;
//! - `notices/fork_reinit`: in a forked child, after
//!   `Loop::reinit_after_fork`, the child's signal watcher and waker work,
//!   and the parent's loop is not woken by what the child did.
//!
//! A backend that does not provide a hook (its `watch_signal`,
//! `watch_child` or `waker` returns [`backend::unsupported`]'s error,
//! `ErrorKind::Unsupported`) gets `Skipped` for the checks that need it.
//! Every loop has a watchdog timer that fails the check after
//! [`WATCHDOG`]. The checks run one at a time in the process (a lock):
//! signals are process-wide. The kit uses `SIGUSR1` to interrupt waits, so
//! these checks use `SIGUSR2`, for which the kit installs a handler of its
//! own (it only counts) for the rest of the process, so that a backend
//! that fails to catch it does not end the test binary. Windows: the
//! signal, child and fork checks are skipped there, each with its reason;
//! the wake check runs.
//!
//! [`backend::unsupported`]: crate::backend::unsupported

use std::io;
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use super::{CheckResult, Factory, Outcome, WATCHDOG};
use crate::{Async, Break, Error, Loop, Prepare, RunMode};

/// The checks, in the order [`check_all_notices`] runs them.
pub const NOTICE_CHECKS: &[&str] = &[
    "notices/signal_delivery",
    "notices/signal_disposition_restored",
    "notices/child_two_loops_one_child",
    "notices/wake_from_another_thread",
    "notices/fork_reinit",
];

/// A check that did not run, with its reason.
type Skip = &'static str;

/// Runs the check called `name` (one of [`NOTICE_CHECKS`]) on the backend `open`
/// creates, caught.
///
/// ```
/// use evloop::conformance::{notices, Outcome};
/// let poll = evloop::backends::factory("poll").unwrap();
/// let outcome = notices::check_notice("notices/wake_from_another_thread", "poll", poll);
/// assert_eq!(outcome, Outcome::Passed);
/// ```
///
/// Panics if `name` is not one of [`NOTICE_CHECKS`].
pub fn check_notice(name: &str, backend: &'static str, open: Factory) -> Outcome {
    let f: fn(&'static str, Factory) -> Result<(), Skip> = match name {
        "notices/signal_delivery" => signal_delivery,
        "notices/signal_disposition_restored" => signal_disposition_restored,
        "notices/child_two_loops_one_child" => child_two_loops_one_child,
        "notices/wake_from_another_thread" => wake_from_another_thread,
        "notices/fork_reinit" => fork_reinit,
        _ => panic!(
            "the kit has no notifier check {name:?}; it has {}",
            NOTICE_CHECKS.join(", ")
        ),
    };
    let _one_at_a_time = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // Windows: the handles these checks make (wake-up sockets) must not
    // take a value a scenario of the kit is about to see reused, so they
    // hold the fixture's handle lock shared, as every scenario does.
    let _handles = super::fixture::scenario_lock(false);
    super::outcome_of(|| f(backend, open))
}

/// Every check of [`NOTICE_CHECKS`] in turn (what the kit's [`run`](super::run)
/// does, among its other checks). The fork check forks: see
/// [`run`](super::run) on giving the kit a test binary of its own.
///
/// ```
/// use evloop::conformance::notices;
/// let poll = evloop::backends::factory("poll").unwrap();
/// let results = notices::check_all_notices("poll", poll);
/// assert_eq!(results.len(), notices::NOTICE_CHECKS.len());
/// assert!(results.iter().all(|r| !r.outcome.failed()), "{results:?}");
/// ```
pub fn check_all_notices(backend: &'static str, open: Factory) -> Vec<CheckResult> {
    super::all_named(NOTICE_CHECKS, check_notice, backend, open)
}

/// Every check of [`NOTICE_CHECKS`], each result handed to `push` as it ends.
pub(super) fn each(backend: &'static str, open: Factory, push: &mut dyn FnMut(String, Outcome)) {
    super::each_named(NOTICE_CHECKS, check_notice, backend, open, push);
}

/// One check at a time in the process: signals and the reaping of
/// children are process-wide.
static LOCK: Mutex<()> = Mutex::new(());

/// A loop on the backend under test.
fn new_loop<S>(backend: &str, open: Factory) -> Loop<'static, S> {
    let b = open().unwrap_or_else(|e| panic!("cannot create the {backend} backend: {e}"));
    Loop::from(b)
}

/// Whether the loop's error is the backend's "I do not provide this".
fn unsupported<T>(r: &Result<T, Error>) -> bool {
    matches!(
        r,
        Err(Error::Backend { source, .. } | Error::Child { source, .. })
            if source.kind() == io::ErrorKind::Unsupported
    )
}

/// What a loop of these checks records.
#[derive(Debug, Default)]
struct Seen {
    /// Calls of the watcher under test.
    calls: u32,
    /// The watchdog fired.
    timed_out: bool,
    /// The child's exit status, for the child check (Unix only).
    #[cfg_attr(not(unix), allow(dead_code))]
    status: Option<crate::ExitStatus>,
}

/// The watchdog: fails the run (recorded, and the run broken) if what it
/// waits for has not come after [`WATCHDOG`].
fn watchdog(lp: &mut Loop<'static, Seen>) -> crate::Timer {
    lp.timer(WATCHDOG, Duration::ZERO, |lp, seen, _| {
        seen.timed_out = true;
        lp.break_loop(Break::All);
    })
    .unwrap()
}

/// Runs `lp` until the watcher under test has been called (it breaks the
/// loop) or the watchdog fires; the error says which failed. (No panic
/// here: a check joins its other threads before it asserts.)
fn run_until_called(
    lp: &mut Loop<'static, Seen>,
    seen: &mut Seen,
    backend: &str,
    what: &str,
) -> Result<(), String> {
    while seen.calls == 0 && !seen.timed_out {
        lp.run(RunMode::Once, seen)
            .map_err(|e| format!("{backend}: run failed while waiting for {what}: {e}"))?;
    }
    if seen.timed_out {
        return Err(format!(
            "{backend}: {what} did not come within {WATCHDOG:?}: the blocked wait was not ended"
        ));
    }
    Ok(())
}

cfg_if::cfg_if! {
    if #[cfg(unix)] {
        use std::sync::atomic::{AtomicUsize, Ordering};

        const SIGNAL: i32 = libc::SIGUSR2;

        /// The kit's own `SIGUSR2` handler: counts.
        static KIT_HANDLED: AtomicUsize = AtomicUsize::new(0);

        extern "C" fn kit_handler(_: libc::c_int) {
            KIT_HANDLED.fetch_add(1, Ordering::Relaxed);
        }

        /// The `sa_sigaction` installed for `SIGUSR2` now.
        fn current_handler() -> libc::sighandler_t {
            // SAFETY: reads the current action into a zeroed sigaction.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                let r = libc::sigaction(SIGNAL, std::ptr::null(), &mut old);
                assert_eq!(r, 0, "sigaction: {}", io::Error::last_os_error());
                old.sa_sigaction
            }
        }

        /// Installs the kit's handler (no loop of the process watches
        /// `SIGUSR2` now: the checks run one at a time).
        fn install_kit_handler() -> libc::sighandler_t {
            let handler = kit_handler as *const () as libc::sighandler_t;
            // SAFETY: installs a handler that only bumps an atomic counter
            // (async-signal-safe), with SA_RESTART.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = handler;
                sa.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                let r = libc::sigaction(SIGNAL, &sa, std::ptr::null_mut());
                assert_eq!(r, 0, "sigaction: {}", io::Error::last_os_error());
            }
            handler
        }

        /// Sends `SIGUSR2` to the process (any thread not blocking it
        /// takes it).
        fn send_to_process() {
            // SAFETY: kill(2) on our own pid; the kit's handler or the
            // loops' catches it.
            let r = unsafe { libc::kill(libc::getpid(), SIGNAL) };
            assert_eq!(r, 0, "kill: {}", io::Error::last_os_error());
        }

        const NO_SIGNALS: Skip =
            "the backend does not watch signals (its watch_signal returns backend::unsupported)";

        /// A loop watching `SIGUSR2`, its watcher breaking the loop; `None`
        /// if the backend does not watch signals.
        fn signal_loop(backend: &str, open: Factory) -> Option<(Loop<'static, Seen>, crate::Signal)> {
            let mut lp = new_loop(backend, open);
            let r = crate::Signal::new(&mut lp, SIGNAL, |lp, seen: &mut Seen, _| {
                seen.calls += 1;
                lp.break_loop(Break::All);
            });
            if unsupported(&r) {
                return None;
            }
            let w = r.unwrap_or_else(|e| panic!("{backend}: watching SIGUSR2 failed: {e}"));
            Some((lp, w))
        }

        fn signal_delivery(backend: &'static str, open: Factory) -> Result<(), Skip> {
            install_kit_handler();
            let Some((mut a, wa)) = signal_loop(backend, open) else { return Err(NO_SIGNALS) };
            let dog = watchdog(&mut a);
            // The second loop, in a thread of its own, on its own backend.
            let (ready_tx, ready_rx) = mpsc::channel::<bool>();
            let other = std::thread::spawn(move || {
                let Some((mut b, wb)) = signal_loop(backend, open) else {
                    let _ = ready_tx.send(false);
                    return (Seen::default(), Ok(()));
                };
                watchdog(&mut b);
                let mut seen = Seen::default();
                // Its watcher is on (the hub catches the signal from now
                // on): the signal may be sent.
                let _ = ready_tx.send(true);
                let came = run_until_called(&mut b, &mut seen, backend, "SIGUSR2 (in the second loop)");
                // Once: a NoWait iteration more calls nothing.
                let _ = b.run(RunMode::NoWait, &mut seen);
                let _ = b.remove(wb);
                (seen, came)
            });
            let both = ready_rx.recv_timeout(WATCHDOG);
            if both != Ok(true) {
                let _ = other.join();
                panic!("{backend}: the second loop did not start watching SIGUSR2");
            }
            // Sent once this loop is about to block (its prepare hook).
            let (block_tx, block_rx) = mpsc::channel::<()>();
            let mut once = Some(block_tx);
            let prep = Prepare::new(&mut a, move |_, _, _| {
                if let Some(tx) = once.take() {
                    let _ = tx.send(());
                }
            }).unwrap();
            let sender = std::thread::spawn(move || {
                if block_rx.recv_timeout(WATCHDOG).is_ok() {
                    send_to_process();
                }
            });
            let mut seen = Seen::default();
            let came = run_until_called(&mut a, &mut seen, backend, "SIGUSR2");
            let again = a.run(RunMode::NoWait, &mut seen);
            sender.join().unwrap();
            let (theirs, theirs_came) =
                other.join().unwrap_or_else(|_| panic!("{backend}: the second loop panicked"));
            came.and(theirs_came).unwrap_or_else(|why| panic!("{why}"));
            again.unwrap();
            assert_eq!(seen.calls, 1, "{backend}: one SIGUSR2, the watcher called {} times", seen.calls);
            assert_eq!(
                theirs.calls, 1,
                "{backend}: one SIGUSR2, the second loop's watcher called {} times",
                theirs.calls
            );
            for w in [a.remove(wa), a.remove(dog), a.remove(prep)] {
                w.unwrap();
            }
            Ok(())
        }

        fn signal_disposition_restored(backend: &'static str, open: Factory) -> Result<(), Skip> {
            let before = install_kit_handler();
            let Some((mut lp, w)) = signal_loop(backend, open) else { return Err(NO_SIGNALS) };
            let dog = watchdog(&mut lp);
            // Heard while watched (through the loop, not the kit's handler).
            let counted = KIT_HANDLED.load(Ordering::Relaxed);
            send_to_process();
            let mut seen = Seen::default();
            run_until_called(&mut lp, &mut seen, backend, "SIGUSR2").unwrap_or_else(|why| panic!("{why}"));
            lp.remove(w).unwrap();
            let after = current_handler();
            assert!(
                after == before,
                "{backend}: the last watcher of SIGUSR2 stopped, and the handler installed \
                 before the loop watched it is not back (sa_sigaction {after:#x}, was {before:#x})"
            );
            assert_eq!(
                KIT_HANDLED.load(Ordering::Relaxed),
                counted,
                "{backend}: the handler found before ran while the loop watched SIGUSR2"
            );
            // SAFETY: raise(3) on this thread: the restored handler runs
            // before it returns.
            unsafe { libc::raise(SIGNAL) };
            assert_eq!(
                KIT_HANDLED.load(Ordering::Relaxed),
                counted + 1,
                "{backend}: after the unwatch, SIGUSR2 did not reach the handler found before"
            );
            lp.remove(dog).unwrap();
            Ok(())
        }

        const NO_CHILDREN: Skip =
            "the backend does not watch children (its watch_child returns backend::unsupported)";

        fn child_two_loops_one_child(backend: &'static str, open: Factory) -> Result<(), Skip> {
            use std::process::{Command, Stdio};
            // A child that exits with 7 once its stdin closes: both loops
            // watch it before it can exit.
            // Not waited for here: the loops reap it (the point of the
            // check); `waitpid` afterwards must find nothing.
            #[allow(clippy::zombie_processes)]
            let mut job = Command::new("sh")
                .args(["-c", "read _; exit 7"])
                .stdin(Stdio::piped())
                .spawn()
                .expect("cannot spawn sh");
            let pid = job.id();
            let stdin = job.stdin.take();
            let watch = move |lp: &mut Loop<'static, Seen>| {
                crate::Child::new(lp, pid, |lp, seen: &mut Seen, ev| {
                    seen.calls += 1;
                    seen.status = ev.status;
                    lp.break_loop(Break::All);
                })
            };
            let mut a = new_loop(backend, open);
            let r = watch(&mut a);
            if unsupported(&r) {
                // The child ends with its stdin; reaped here.
                drop(stdin);
                let _ = job.wait();
                return Err(NO_CHILDREN);
            }
            r.unwrap_or_else(|e| panic!("{backend}: watching the child failed: {e}"));
            watchdog(&mut a);
            let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
            let other = std::thread::spawn(move || {
                let mut b = new_loop(backend, open);
                if let Err(e) = watch(&mut b) {
                    let _ = ready_tx.send(Err(e.to_string()));
                    return (Seen::default(), Ok(()));
                }
                watchdog(&mut b);
                let _ = ready_tx.send(Ok(()));
                let mut seen = Seen::default();
                let came = run_until_called(&mut b, &mut seen, backend, "the child's exit (second loop)");
                (seen, came)
            });
            let started = ready_rx.recv_timeout(WATCHDOG);
            if !matches!(started, Ok(Ok(()))) {
                drop(stdin);
                let _ = other.join();
                panic!("{backend}: the second loop could not watch the child: {started:?}");
            }
            drop(stdin); // the child exits now
            let mut seen = Seen::default();
            let came = run_until_called(&mut a, &mut seen, backend, "the child's exit");
            let (theirs, theirs_came) =
                other.join().unwrap_or_else(|_| panic!("{backend}: the second loop panicked"));
            came.and(theirs_came).unwrap_or_else(|why| panic!("{why}"));
            let want = Some(crate::ExitStatus::Exited(7));
            assert_eq!((seen.calls, seen.status), (1, want), "{backend}: the first loop's report");
            assert_eq!((theirs.calls, theirs.status), (1, want), "{backend}: the second loop's report");
            let mut status = 0;
            // SAFETY: waitpid on the child's pid with a valid int; WNOHANG.
            let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
            let err = io::Error::last_os_error();
            assert!(
                r == -1 && err.raw_os_error() == Some(libc::ECHILD),
                "{backend}: both loops reported the exit, and the child is still there to reap \
                 (waitpid returned {r}, {err}): it must be reaped once, by a loop"
            );
            Ok(())
        }

        /// The forked child's exit statuses.
        mod code {
            pub const OK: i32 = 0;
            pub const REINIT_FAILED: i32 = 20;
            pub const NO_SIGNAL: i32 = 21;
            pub const NO_WAKE: i32 = 22;
            pub const RUN_FAILED: i32 = 23;
            pub const PANICKED: i32 = 24;

            pub fn explain(code: i32) -> &'static str {
                match code {
                    REINIT_FAILED => "reinit_after_fork failed",
                    NO_SIGNAL => "the child's signal watcher was not called after reinit",
                    NO_WAKE => "the child's async watcher was not called after reinit",
                    RUN_FAILED => "run failed in the child",
                    PANICKED => "the child panicked",
                    _ => "unexpected status",
                }
            }
        }

        /// Which of the fork check's watchers was called.
        #[derive(Debug, Default)]
        struct ForkSeen {
            signal: u32,
            woken: u32,
            timed_out: bool,
        }

        fn fork_reinit(backend: &'static str, open: Factory) -> Result<(), Skip> {
            use std::io::Write;
            if let Some(n) = super::fork::threads() {
                assert!(
                    n <= 2,
                    "{backend}: {n} threads are running: the fork check would copy their \
                     descriptors into the child; run the kit in a test binary of its own"
                );
            }
            install_kit_handler();
            let mut lp: Loop<'static, ForkSeen> = new_loop(backend, open);
            let r = crate::Signal::new(&mut lp, SIGNAL, |lp, seen: &mut ForkSeen, _| {
                seen.signal += 1;
                lp.break_loop(Break::All);
            });
            if unsupported(&r) {
                return Err(NO_SIGNALS);
            }
            let sig = r.unwrap_or_else(|e| panic!("{backend}: watching SIGUSR2 failed: {e}"));
            let r = Async::new(&mut lp, |lp, seen: &mut ForkSeen, _| {
                seen.woken += 1;
                lp.break_loop(Break::All);
            });
            if unsupported(&r) {
                return Err(NO_WAKER);
            }
            let (wake, sender) = r.unwrap_or_else(|e| panic!("{backend}: no waker: {e}"));
            let dog = lp.timer(WATCHDOG, WATCHDOG, |lp, seen: &mut ForkSeen, _| {
                seen.timed_out = true;
                lp.break_loop(Break::All);
            }).unwrap();
            lp.run(RunMode::NoWait, &mut ForkSeen::default()).unwrap();

            std::io::stdout().flush().unwrap();
            std::io::stderr().flush().unwrap();
            // SAFETY: no other thread runs but the test harness's, blocked
            // waiting for this one (checked above where it can be). The
            // child does a few syscalls and small allocations, then leaves
            // with `_exit` (no destructors, no atexit handlers).
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
            if pid == 0 {
                let child = || -> i32 {
                    if lp.reinit_after_fork().is_err() {
                        return code::REINIT_FAILED;
                    }
                    let mut seen = ForkSeen::default();
                    // SAFETY: raise(3) in this (the child's only) thread.
                    unsafe { libc::raise(SIGNAL) };
                    while seen.signal == 0 && !seen.timed_out {
                        if lp.run(RunMode::Once, &mut seen).is_err() {
                            return code::RUN_FAILED;
                        }
                    }
                    if seen.signal == 0 {
                        return code::NO_SIGNAL;
                    }
                    let _ = sender.send();
                    while seen.woken == 0 && !seen.timed_out {
                        if lp.run(RunMode::Once, &mut seen).is_err() {
                            return code::RUN_FAILED;
                        }
                    }
                    if seen.woken == 0 {
                        return code::NO_WAKE;
                    }
                    code::OK
                };
                let c = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child));
                // SAFETY: ends the child at once, as a forked child should.
                unsafe { libc::_exit(c.unwrap_or(code::PANICKED)) };
            }

            let mut status = 0;
            // SAFETY: waits for the child just forked; `status` is a valid int.
            let r = unsafe { libc::waitpid(pid, &mut status, 0) };
            assert_eq!(r, pid, "waitpid: {}", io::Error::last_os_error());
            assert!(libc::WIFEXITED(status), "{backend}: the forked child died: {status:#x}");
            let c = libc::WEXITSTATUS(status);
            assert_eq!(c, code::OK, "{backend}: forked child: {}", code::explain(c));

            // The parent's loop was not woken by the child's signal or
            // waker: an iteration waits for its timer (a wake fd shared
            // with the child would end it at once, with nothing to do).
            let mut seen = ForkSeen::default();
            let (tx, rx) = mpsc::channel::<()>();
            let wait = Duration::from_millis(300);
            let t = lp.timer(wait, Duration::ZERO, move |_, _, _| { let _ = tx.send(()); }).unwrap();
            let started = std::time::Instant::now();
            lp.run(RunMode::Once, &mut seen).unwrap();
            // (Not a timing assert but "not early": an iteration with
            // nothing to report ends with its timer.)
            assert!(
                rx.try_recv().is_ok() || started.elapsed() >= wait,
                "{backend}: the parent's loop woke with nothing to do ({:?} into a {wait:?} \
                 wait) after its forked child raised SIGUSR2 and used the waker: the child's \
                 reinit did not give it a wake fd of its own",
                started.elapsed()
            );
            assert_eq!(
                (seen.signal, seen.woken),
                (0, 0),
                "{backend}: the parent's loop heard the forked child's signal or waker"
            );
            for r in [lp.remove(sig), lp.remove(dog), lp.remove(t)] {
                r.unwrap();
            }
            lp.remove(wake).unwrap();
            Ok(())
        }
    } else if #[cfg(target_os = "wasi")] {
        const NOT_ON_WASI_SIGNALS: Skip =
            "not applicable on WASI: there are no signals (a guest gets none)";

        fn signal_delivery(_: &'static str, _: Factory) -> Result<(), Skip> {
            Err(NOT_ON_WASI_SIGNALS)
        }

        fn signal_disposition_restored(_: &'static str, _: Factory) -> Result<(), Skip> {
            Err(NOT_ON_WASI_SIGNALS)
        }

        fn child_two_loops_one_child(_: &'static str, _: Factory) -> Result<(), Skip> {
            Err("not applicable on WASI: a guest starts no processes")
        }

        fn fork_reinit(_: &'static str, _: Factory) -> Result<(), Skip> {
            Err("not applicable on WASI: there is no fork")
        }
    } else {
        const NOT_ON_WINDOWS_SIGNALS: Skip =
            "not applicable on Windows: no POSIX signals (console events come instead, through \
             the Windows notifier)";

        fn signal_delivery(_: &'static str, _: Factory) -> Result<(), Skip> {
            Err(NOT_ON_WINDOWS_SIGNALS)
        }

        fn signal_disposition_restored(_: &'static str, _: Factory) -> Result<(), Skip> {
            Err(NOT_ON_WINDOWS_SIGNALS)
        }

        fn child_two_loops_one_child(_: &'static str, _: Factory) -> Result<(), Skip> {
            Err("not run on Windows: the check proves the single reap with waitpid's ECHILD, \
                 and Windows has no reaping (each loop waits on its own process handle)")
        }

        fn fork_reinit(_: &'static str, _: Factory) -> Result<(), Skip> {
            Err("not applicable on Windows: there is no fork")
        }
    }
}

const NO_WAKER: Skip =
    "the backend has no waker (its waker returns backend::unsupported): async watchers are refused";

fn wake_from_another_thread(backend: &'static str, open: Factory) -> Result<(), Skip> {
    if cfg!(target_os = "wasi") {
        // wasm32-wasip1 is single-threaded: std::thread::spawn fails.
        return Err("not applicable on WASI: there are no threads to wake a loop from");
    }
    // A send that lands before the loop blocks needs no wake-up (the loop
    // sees it and does not block): on a loaded machine the sender can win
    // that race, and a backend whose waker does nothing would pass. Five
    // rounds: a working backend passes each in milliseconds, and a broken
    // one must win the race five times to escape.
    for _ in 0..5 {
        wake_once(backend, open)?;
    }
    Ok(())
}

/// One round of [`wake_from_another_thread`].
fn wake_once(backend: &'static str, open: Factory) -> Result<(), Skip> {
    let mut lp: Loop<'static, Seen> = new_loop(backend, open);
    let r = Async::new(&mut lp, |lp, seen: &mut Seen, _| {
        seen.calls += 1;
        lp.break_loop(Break::All);
    });
    if unsupported(&r) {
        return Err(NO_WAKER);
    }
    let (w, sender) =
        r.unwrap_or_else(|e| panic!("{backend}: creating an async watcher failed: {e}"));
    let dog = watchdog(&mut lp);
    // Sent from another thread once the loop is about to block.
    let (block_tx, block_rx) = mpsc::channel::<()>();
    let mut once = Some(block_tx);
    let prep = Prepare::new(&mut lp, move |_, _, _| {
        if let Some(tx) = once.take() {
            let _ = tx.send(());
        }
    })
    .unwrap();
    let remote = sender.clone();
    let waker = std::thread::spawn(move || {
        if block_rx.recv_timeout(WATCHDOG).is_ok() {
            remote.send().expect("send on a live async watcher");
        }
    });
    let mut seen = Seen::default();
    let came = run_until_called(&mut lp, &mut seen, backend, "the async watcher's wake-up");
    waker.join().unwrap();
    came.unwrap_or_else(|why| panic!("{why}"));
    assert_eq!(
        seen.calls, 1,
        "{backend}: one send, the async watcher called {} times",
        seen.calls
    );
    for r in [lp.remove(w), lp.remove(dog), lp.remove(prep)] {
        r.unwrap();
    }
    // A sender (and the backend's waker behind it) that outlives the loop
    // and its backend does nothing harmful.
    drop(lp);
    let _ = sender.send();
    std::thread::spawn(move || {
        let _ = sender.send();
    })
    .join()
    .unwrap();
    Ok(())
}
