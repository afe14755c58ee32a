//! `exec::Sleep` as tokio's behaves: a sleep due at its first poll says it
//! elapsed; a reset to a deadline already passed completes at the next
//! poll (and its timer no longer keeps `run` going); a reset from another
//! thread takes effect. On the simulator (exact virtual times) and every
//! kernel backend, under the watchdog.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use common::{on_backends, World};
use evloop::exec::{block_on, sleep, sleep_until, spawn_on, timeout, Sleep};
use evloop::{Loop, RunMode, RunOutcome};

fn every_backend() -> Vec<&'static str> {
    common::backends()
}

/// Polls `s` once.
async fn poll_once(s: &mut Pin<Box<Sleep>>) -> Poll<()> {
    std::future::poll_fn(|cx| Poll::Ready(s.as_mut().poll(cx))).await
}

#[test]
fn a_sleep_due_at_its_first_poll_has_elapsed_on_every_backend() {
    on_backends("due sleep", &every_backend(), |backend| {
        let world = World::new(backend);
        let mut lp: Loop = world.new_loop();
        block_on(&mut lp, &mut (), async {
            let mut zero = Box::pin(sleep(Duration::ZERO));
            assert!(!zero.is_elapsed());
            assert_eq!(poll_once(&mut zero).await, Poll::Ready(()));
            assert!(zero.is_elapsed(), "{backend}: sleep(0) completed");
            let mut past = Box::pin(sleep_until(Duration::ZERO));
            assert_eq!(poll_once(&mut past).await, Poll::Ready(()));
            assert!(past.is_elapsed(), "{backend}: a deadline in the past");
            // A reset makes it pending again.
            past.as_mut().reset_after(Duration::from_secs(3600));
            assert!(!past.is_elapsed());
            assert_eq!(poll_once(&mut past).await, Poll::Pending);
            assert!(!past.is_elapsed());
        })
        .unwrap();
        assert_eq!(lp.active_count(), 0, "{backend}");
    });
}

#[test]
fn a_reset_to_a_passed_deadline_completes_at_the_next_poll_on_every_backend() {
    on_backends("reset to the past", &every_backend(), |backend| {
        let world = World::new(backend);
        let mut lp: Loop = world.new_loop();
        let start = lp.now();
        let kept = block_on(&mut lp, &mut (), async {
            let mut s = Box::pin(sleep(Duration::from_secs(3600)));
            assert_eq!(poll_once(&mut s).await, Poll::Pending);
            s.as_mut().reset(Duration::ZERO);
            assert_eq!(poll_once(&mut s).await, Poll::Ready(()), "{backend}");
            assert!(s.is_elapsed());
            // reset_after(0): due now, at once too.
            s.as_mut().reset_after(Duration::from_secs(3600));
            assert_eq!(poll_once(&mut s).await, Poll::Pending);
            s.as_mut().reset_after(Duration::ZERO);
            assert_eq!(poll_once(&mut s).await, Poll::Ready(()), "{backend}");
            // Kept (in a Vec: not a future) past block_on.
            vec![s]
        })
        .unwrap();
        // Its hour-long timer is stopped, the Sleep still alive: nothing
        // keeps the loop.
        assert_eq!(lp.active_count(), 0, "{backend}: the timer still runs");
        assert_eq!(
            lp.run(RunMode::Default, &mut ()).unwrap(),
            RunOutcome::NoActiveWatchers
        );
        assert!(lp.now() - start < Duration::from_secs(60), "{backend}");
        drop(kept);
    });
}

#[test]
#[cfg_attr(target_os = "wasi", ignore = "a WASI guest has one thread")]
fn a_reset_from_another_thread_takes_effect_on_every_backend() {
    on_backends("reset from a thread", &every_backend(), |backend| {
        for absolute in [true, false] {
            let world = World::new(backend);
            let mut lp: Loop = world.new_loop();
            let start = lp.now();
            let shared = Arc::new(Mutex::new(Box::pin(sleep(Duration::from_secs(3600)))));
            let waiting = shared.clone();
            let task = spawn_on(
                &mut lp,
                timeout(
                    Duration::from_secs(20),
                    std::future::poll_fn(move |cx| waiting.lock().unwrap().as_mut().poll(cx)),
                ),
            )
            .unwrap();
            // The task waits on the hour-long timer.
            lp.run(RunMode::NoWait, &mut ()).unwrap();
            lp.run(RunMode::NoWait, &mut ()).unwrap();
            assert!(!task.is_finished());
            let deadline = lp.now() + Duration::from_millis(10);
            let resetter = shared.clone();
            std::thread::spawn(move || {
                let mut s = resetter.lock().unwrap();
                if absolute {
                    s.as_mut().reset(deadline);
                } else {
                    s.as_mut().reset_after(Duration::from_millis(10));
                }
            })
            .join()
            .unwrap();
            let r = block_on(&mut lp, &mut (), task).unwrap().unwrap();
            assert!(
                r.is_ok(),
                "{backend}: the reset (absolute: {absolute}) was lost"
            );
            assert!(shared.lock().unwrap().is_elapsed());
            let took = lp.now() - start;
            assert!(took >= Duration::from_millis(10), "{backend}: {took:?}");
            if let Some(_sim) = world.sim() {
                // Exact: the new deadline, counted from the reset's poll.
                assert_eq!(took, Duration::from_millis(10), "absolute: {absolute}");
            }
            assert_eq!(lp.active_count(), 0, "{backend}");
        }
    });
}
