//! The portable test set on WASI, built for `wasm32-wasip1` and run under
//! wasmtime (`tests/wasi/run.sh`): the `wasi` backend is the platform's
//! only one; timers never fire early; async watchers work in the one
//! thread there is; a loop with nothing to wait for reports that it is
//! stalled instead of hanging; and every call WASI cannot honour returns
//! an error that names WASI and says why (one test per call).
//!
//! Sockets are tested with a peer on the Linux side: the echo server
//! (tests/wasi_echo.rs) and the conformance kit (tests/wasi_kit.rs).
#![cfg(target_os = "wasi")]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use evloop::backend::Backend;
use evloop::backends::{self, wasi::Wasi};
use evloop::{
    Async, Child, Embed, Error, Fork, Interest, Loop, PollableLoop, RunMode, RunOutcome, Signal,
    Stat, Trigger,
};

use common::names_wasi;

/// A loop on the `wasi` backend.
fn wasi_loop<S>() -> Loop<'static, S> {
    Loop::builder()
        .backend("wasi")
        .build()
        .expect("a loop on wasi")
}

#[test]
fn wasi_is_the_platform_backend() {
    assert_eq!(backends::AVAILABLE, ["wasi"]);
    assert_eq!(backends::default_name(), "wasi");
    let lp: Loop = Loop::new().unwrap();
    assert_eq!(lp.backend_name(), "wasi");
    let caps = Wasi::new().capabilities();
    assert!(!caps.edge && !caps.oneshot && !caps.virtual_fds);
}

/// 120 one-shot timers (sub-millisecond to 40 ms, in a scrambled order)
/// and a repeating one: each callback sees at least its delay elapsed
/// since before the loop was made (the loop's time base), and they run in
/// deadline order.
#[test]
fn timers_never_fire_early() {
    let t0 = Instant::now();
    let mut lp: Loop<Vec<Duration>> = wasi_loop();
    let mut delays: Vec<Duration> = (0..120u64)
        .map(|i| Duration::from_micros((i * 7919) % 40_000 + 150))
        .collect();
    for &d in &delays {
        lp.timer(d, Duration::ZERO, move |_, fired, _| {
            let at = t0.elapsed();
            assert!(at >= d, "a {d:?} timer fired after {at:?}");
            fired.push(d);
        })
        .unwrap();
    }
    let every = Duration::from_micros(2_500);
    let mut n = 0u32;
    lp.timer(every, every, move |lp, _, me| {
        n += 1;
        let at = t0.elapsed();
        assert!(at >= every * n, "repeat {n} of {every:?} after {at:?}");
        if n == 10 {
            lp.remove(me).unwrap();
        }
    })
    .unwrap();
    let mut fired = Vec::new();
    assert_eq!(
        lp.run(RunMode::Default, &mut fired).unwrap(),
        RunOutcome::NoActiveWatchers
    );
    delays.sort();
    assert_eq!(fired, delays, "in deadline order, each once");
}

/// A `RunMode::Once` with only a timer waits for it, and not less.
#[test]
fn a_blocking_wait_lasts_until_the_timer() {
    let mut lp: Loop<u32> = wasi_loop();
    let start = Instant::now();
    lp.timer(Duration::from_millis(12), Duration::ZERO, |_, n, _| *n += 1)
        .unwrap();
    let mut n = 0;
    while n == 0 {
        lp.run(RunMode::Once, &mut n).unwrap();
    }
    assert!(start.elapsed() >= Duration::from_millis(12));
}

/// Async watchers: sends from the loop's own thread (the only one) are
/// seen before the next wait, which then does not block.
#[test]
fn async_sends_from_the_loops_thread() {
    let mut lp: Loop<Vec<&str>> = wasi_loop();
    let (watcher, sender) = Async::new(&mut lp, |lp, log, me| {
        log.push("async");
        lp.remove(me).unwrap();
    })
    .unwrap();
    let _ = watcher;
    // A long timer keeps the loop from stalling; the send comes from a
    // short one's callback.
    let long = lp
        .timer(Duration::from_secs(60), Duration::ZERO, |_, _, _| {})
        .unwrap();
    lp.timer(
        Duration::from_millis(1),
        Duration::ZERO,
        move |lp, log, _| {
            log.push("timer");
            sender.send().unwrap();
            lp.stop(long).unwrap();
        },
    )
    .unwrap();
    let start = Instant::now();
    let mut log = Vec::new();
    lp.run(RunMode::Default, &mut log).unwrap();
    assert_eq!(log, ["timer", "async"]);
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "the send did not end the wait"
    );
}

/// Nothing to wait for and no timeout: no thread or signal could ever end
/// such a wait, so the run reports a stall instead of hanging.
#[test]
fn nothing_to_wait_for_is_a_stall() {
    let mut lp: Loop = wasi_loop();
    let (_watcher, _sender) = Async::new(&mut lp, |_, _, _| {}).unwrap();
    assert_eq!(
        lp.run(RunMode::Default, &mut ()).unwrap(),
        RunOutcome::Stalled
    );
}

#[test]
fn signal_watchers_are_refused() {
    let mut lp: Loop = wasi_loop();
    let err = Signal::new(&mut lp, Signal::TERM, |_, _, _| {}).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Backend {
                backend: "wasi",
                ..
            }
        ),
        "{err:?}"
    );
    names_wasi(&err);
    assert_eq!(lp.active_count(), 0);
}

#[test]
fn child_watchers_are_refused() {
    let mut lp: Loop = wasi_loop();
    let err = Child::new(&mut lp, 4242, |_, _, _| {}).unwrap_err();
    names_wasi(&err);
    assert_eq!(lp.active_count(), 0);
}

#[test]
fn watching_any_child_is_refused() {
    let mut lp: Loop = wasi_loop();
    let err = Child::any(&mut lp, |_, _, _| {}).unwrap_err();
    names_wasi(&err);
}

#[test]
fn spawning_a_child_is_refused() {
    let mut lp: Loop = wasi_loop();
    let err = Child::spawn(&mut lp, &mut Command::new("true"), |_, _, _| {}).unwrap_err();
    assert!(matches!(err, Error::Spawn { .. }), "{err:?}");
    names_wasi(&err);
}

#[test]
fn signalling_a_child_is_refused() {
    let mut w = Wasi::new();
    let err = w.notices().unwrap().signal_child(4242, 15).unwrap_err();
    names_wasi(&err);
}

#[test]
fn the_pollable_fd_is_refused() {
    let lp: Loop = wasi_loop();
    let err = lp.pollable_fd().unwrap_err();
    assert!(
        matches!(
            err,
            Error::NoPollableFd {
                backend: "wasi",
                ..
            }
        ),
        "{err:?}"
    );
    names_wasi(&err);
    let Err(not) = PollableLoop::new(lp) else {
        panic!("a wasi loop is not pollable")
    };
    names_wasi(not.error());
}

#[test]
fn embedding_a_wasi_loop_is_refused() {
    let mut outer: Loop = wasi_loop();
    let inner: Loop = wasi_loop();
    let err = Embed::new(&mut outer, inner, |_, _, _, _| {}).unwrap_err();
    names_wasi(&err);
}

#[test]
fn fork_is_refused() {
    let mut lp: Loop = wasi_loop();
    let err = lp.reinit_after_fork().unwrap_err();
    names_wasi(&err);
}

#[test]
fn fork_watchers_are_refused_but_on_the_simulator() {
    let mut lp: Loop = wasi_loop();
    let err = Fork::new(&mut lp, |_, _, _| {}).unwrap_err();
    names_wasi(&err);
    assert_eq!(lp.active_count(), 0);
    // The simulator simulates a fork: its watchers run.
    let mut sim: Loop<u32> = Loop::with_backend(evloop::Sim::new().backend());
    Fork::new(&mut sim, |lp, n, me| {
        *n += 1;
        lp.remove(me).unwrap();
    })
    .unwrap();
    sim.reinit_after_fork().unwrap();
    let mut n = 0;
    sim.run(RunMode::NoWait, &mut n).unwrap();
    assert_eq!(n, 1);
}

#[test]
fn path_hints_are_refused_and_stat_watchers_poll() {
    let mut w = Wasi::new();
    let mut fds: Vec<evloop::RawFd> = Vec::new();
    let err = w
        .notices()
        .unwrap()
        .watch_path(std::path::Path::new("/x"), 1, &mut fds)
        .unwrap_err();
    names_wasi(&err);
    // Without hints a stat watcher still works: it polls.
    let mut lp: Loop = wasi_loop();
    let stat = Stat::new(
        &mut lp,
        "/no/such/file",
        Duration::from_millis(5),
        |_, _, _| {},
    );
    assert!(stat.is_ok(), "{stat:?}");
}

#[test]
fn threads_to_wake_the_loop_from_do_not_exist() {
    // wasm32-wasip1 has one thread: std refuses to start another, so no
    // sender can ever be used from elsewhere (the in-thread send works:
    // async_sends_from_the_loops_thread).
    let err = std::thread::Builder::new().spawn(|| {}).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::Unsupported, "{err}");
}

#[test]
fn edge_triggered_watchers_are_refused() {
    let mut lp: Loop = wasi_loop();
    let edge = Interest::READABLE.with_trigger(Trigger::Edge);
    let err = lp.io(std::io::stdin(), edge, |_, _, _| {}).unwrap_err();
    assert!(matches!(err, Error::UnsupportedTrigger { .. }), "{err:?}");
    let err = Wasi::new().modify(0, Interest::NONE, edge).unwrap_err();
    assert!(err.to_string().contains("level-triggered"), "{err}");
}

#[test]
fn a_closed_fd_is_refused_at_the_call() {
    let err = Wasi::new()
        .modify(977, Interest::NONE, Interest::READABLE)
        .unwrap_err();
    assert!(err.to_string().contains("cannot watch fd 977"), "{err}");
    let mut w = Wasi::new();
    let err = w.notices().unwrap().check_fd(977).unwrap_err();
    assert!(err.to_string().contains("fd 977"), "{err}");
}

#[test]
fn the_preopened_listeners_are_handed_out_once() {
    // None was preopened for this guest.
    assert!(backends::wasi::preopened_listeners().unwrap().is_empty());
    let err = backends::wasi::preopened_listeners().unwrap_err();
    assert!(err.to_string().contains("handed out already"), "{err}");
}

/// The executor, single-threaded: tasks spawned and joined, sleeps that
/// never end early, a waker used in the loop's own thread.
#[test]
fn the_executor_runs_tasks_and_sleeps() {
    use evloop::exec;
    let t0 = Instant::now();
    let mut lp: Loop = wasi_loop();
    let a = exec::spawn_on(&mut lp, async move {
        exec::sleep(Duration::from_millis(7)).await;
        t0.elapsed()
    })
    .unwrap();
    let b = exec::spawn_on(&mut lp, async move {
        exec::sleep(Duration::from_millis(3)).await;
        t0.elapsed()
    })
    .unwrap();
    let (ta, tb) = exec::block_on(&mut lp, &mut (), async move {
        let tb = b.await.unwrap();
        let ta = a.await.unwrap();
        (ta, tb)
    })
    .unwrap();
    assert!(ta >= Duration::from_millis(7), "{ta:?}");
    assert!(tb >= Duration::from_millis(3), "{tb:?}");
    assert!(tb <= ta);
}
