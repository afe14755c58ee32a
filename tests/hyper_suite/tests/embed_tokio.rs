//! A loop driven from tokio (tests/embed.rs drives it from mio): a
//! current-thread runtime's `AsyncFd` owns a `PollableLoop` on every
//! backend of the build that has a pollable fd (epoll; io_uring on a ring
//! without deferred task work; kqueue over the emulation), under the
//! watchdog: a level watcher that reads one byte per call, bytes written
//! from another thread, a timer (docs/recipes.md, "Nesting loops", shows
//! `run_from_tokio`).

// What evloop's own integration tests share (tests/common/).
#[path = "../../common/mod.rs"]
mod common;

use std::error::Error as StdError;

use common::pollable::{driven_from, inners, Driven};
use common::{watchdog, WATCHDOG};
use evloop::{PollableLoop, RunMode};
use tokio::io::unix::AsyncFd;

/// Runs `lp` from tokio: a current-thread runtime's `AsyncFd` owns the
/// pollable loop (`AsFd`), a wait is bounded by `next_timeout`, and the
/// readiness tokio caches is cleared only when `readable_now` says a run
/// left nothing (tokio's registrations are edge-triggered too, and have
/// no re-register).
fn run_from_tokio(
    lp: PollableLoop<'static, Driven>,
    st: &mut Driven,
) -> Result<(PollableLoop<'static, Driven>, u32), Box<dyn StdError>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    rt.block_on(async move {
        // SAFETY (tokio's contract: the fd stays open and the same while
        // tokio holds it): the pollable fd is the backend's own, open for
        // the loop's life, and nothing here reinitialises the loop (a
        // `reinit_after_fork` would replace it).
        let mut afd = unsafe { AsyncFd::register_with_interest(lp, tokio::io::Interest::READABLE) }
            .map_err(std::io::Error::from)?;
        let mut wakes = 0;
        while afd.get_ref().active_count() > 0 {
            afd.get_mut().flush_changes()?;
            let ready = match afd.get_mut().next_timeout() {
                None => Some(afd.readable_mut().await?),
                Some(t) => match tokio::time::timeout(t, afd.readable_mut()).await {
                    Ok(guard) => Some(guard?),
                    Err(_elapsed) => None,
                },
            };
            wakes += 1;
            match ready {
                Some(mut guard) => {
                    guard.get_inner_mut().run(RunMode::NoWait, st)?;
                    if !guard.get_inner().readable_now()? {
                        guard.clear_ready();
                    }
                }
                None => {
                    afd.get_mut().run(RunMode::NoWait, st)?;
                }
            }
        }
        Ok((afd.into_inner(), wakes))
    })
}

#[test]
fn a_loop_driven_from_tokio() {
    for name in inners() {
        watchdog(&format!("tokio drives {name}"), WATCHDOG, move || {
            driven_from(name, run_from_tokio)
        });
    }
}
