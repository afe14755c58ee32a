//! The loop's scenarios, each written once and run on every backend: the
//! simulator and every OS backend of the host (epoll, poll, select with
//! real fds; kqueue with `--features emulated-kqueue`, io_uring with
//! `--features io-uring`), each run under the watchdog, because the
//! simulator's `Stalled` once hid a run that blocked forever on a kernel.
//!
//! A scenario is a `fn(&World)` (tests/common): it makes its loop and its
//! connections from the world, asserts what the callbacks log, the
//! `RunOutcome` and the watchers' state, and, where the world is the
//! simulator's (`World::sim`), the exact trace and virtual times too. Time
//! on a kernel is a lower bound only: every delay a scenario waits for is
//! started by the loop's own timers, never raced against the machine.
//! Each module lists its scenarios in a table (`tests_on!`), one test each:
//! `every_backend` (the simulator, then every OS backend), `os_backends`
//! (for real TCP sockets or a half-close, which the simulator has not).
//! What only the simulator can show (faults it injects, a clock that never
//! moves) is in `sim_only`, once.
//!
//! ```sh
//! cargo test --test scenarios                          # all of them
//! cargo test --test scenarios loop_core::              # one module
//! cargo test --features emulated-kqueue --test scenarios
//! ```
//!
//! - `loop_core`: the core loop scenarios (issue: scenarios 1-7): arrivals,
//!   backpressure, priorities, idle/prepare/check order, timers, run modes,
//!   nesting, stale handles; and the two hangs the kernel runs found.
//! - `io_and_models`: io watchers sharing an fd, one-shot, fed events, the
//!   hand-built programs of the timer, pending-queue and direct-dispatch
//!   property tests, and the trace-level events.
//! - `doc_examples`: every doc example (in `src/`, `backends/` and
//!   README.md) whose run ends by running out of watchers, one test per
//!   item, named after it.
//! - `sim_only`: exact traces of what only the simulator has.

#[path = "../common/mod.rs"]
mod common;

/// `tests_on!(group, backends, [scenario, ...])`: a module `group` with
/// one test per scenario (a `fn(&World)` of the calling module, the test
/// named after it) that runs it in a world of each of `backends`, in
/// turn, each under the watchdog.
macro_rules! tests_on {
    ($group:ident, $backends:expr, [$($scenario:ident),* $(,)?]) => {
        mod $group {
            $(
                #[test]
                fn $scenario() {
                    let backends = $backends;
                    crate::common::in_worlds(stringify!($scenario), &backends[..], super::$scenario);
                }
            )*
        }
    };
}

mod doc_examples;
mod io_and_models;
mod loop_core;
mod sim_only;
