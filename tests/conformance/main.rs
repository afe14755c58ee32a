//! The conformance kit (`evloop::conformance`, the published suite that
//! any crate runs on its backend with one call) on the crate's own
//! backends: every OS backend of the host (real socketpairs and pipes) and
//! the simulator, one test per scenario and backend, so that a failure
//! names both.
//!
//! ```sh
//! cargo test --test conformance                      # every backend
//! EVLOOP_CONFORMANCE_BACKEND=poll cargo test --test conformance
//! cargo test --test conformance -- --list            # scenario::backend
//! cargo test --test conformance_fork                 # fork + reinit
//! # the kqueue backend too, over an emulated kqueue (Linux):
//! EVLOOP_CONFORMANCE_BACKEND=kqueue cargo test --features emulated-kqueue --test conformance
//! # the io_uring backend (Linux, where io_uring_setup is allowed):
//! EVLOOP_CONFORMANCE_BACKEND=io_uring cargo test --features io-uring --test conformance
//! ```
//!
//! - `<scenario>::<backend>`: [`Scenario::check`] (or
//!   [`Scenario::check_sim`]) of the kit. The scenario asserts what every
//!   backend must do, and what the backend declares in its capabilities
//!   where backends legitimately differ (hang-up reporting, when a closed
//!   fd is noticed, edge triggering, native one-shot).
//! - `differential::<backend>`: [`conformance::differential`]: every
//!   *compared* scenario on the OS backend and on the simulator, which must
//!   produce the same canonical record, step by step; every difference is
//!   listed.
//! - `EVLOOP_CONFORMANCE_BACKEND=<name>` runs one backend's tests (the
//!   others pass as skipped); a name the suite does not know fails every
//!   test. `EVLOOP_CONFORMANCE_SHOW=1` (with `--nocapture`) prints each
//!   record, raw and canonical.
//!
//! The scenarios themselves are in `backends/conformance/` (the kit); a
//! new backend of the crate is added to the `backends` list below, a new
//! scenario of the kit to the `scenarios` list (a test fails until it is).
//!
//! On Windows (under Wine here: `cargo test --target x86_64-pc-windows-gnu
//! --test conformance` with the runner of `tests/wine/`) the same tests
//! run on `iocp`, `select` and the simulator, over TCP loopback pairs; a
//! scenario that cannot apply there passes as skipped and says why
//! ([`Scenario::not_applicable`]: `wait_interrupted`). The two tests of
//! the kit itself (`wrappers.rs`: broken backends it must catch) wrap the
//! Unix poll backend and run on Unix only; `tests/kit_mutants.rs` runs the
//! whole kit on twelve more (Linux).
#![cfg(any(unix, windows))]

#[cfg(unix)]
mod wrappers;

#[cfg(unix)]
use evloop::backends::Factory;
#[cfg(unix)]
use evloop::conformance;
use evloop::conformance::Scenario;

/// The environment variable that restricts the run to one backend.
pub const SELECT_VAR: &str = "EVLOOP_CONFORMANCE_BACKEND";

/// The run harness: selection, and the calls into the kit.
mod harness {
    use evloop::backends::Factory;
    use evloop::conformance::{self, Scenario};

    /// Whether the tests of `backend` run (see [`crate::SELECT_VAR`]).
    pub fn selected(backend: &str) -> bool {
        let Some(want) = std::env::var_os(crate::SELECT_VAR) else {
            return true;
        };
        let want = want.to_string_lossy();
        if want.is_empty() {
            return true;
        }
        let known = crate::known_backends();
        assert!(
            known.contains(&&*want),
            "{}={want:?} names no backend of this suite (known here: {})",
            crate::SELECT_VAR,
            known.join(", ")
        );
        if want != backend {
            eprintln!("skipped: {}={want}", crate::SELECT_VAR);
        }
        want == backend
    }

    fn scenario(name: &str) -> Scenario {
        Scenario::named(name).unwrap_or_else(|| panic!("the kit has no scenario {name}"))
    }

    /// The crate's OS backend called `backend`.
    pub fn factory(backend: &str) -> Factory {
        evloop::backends::factory(backend).unwrap_or_else(|| panic!("no {backend} backend here"))
    }

    /// Runs a scenario on an OS backend.
    pub fn os(backend: &'static str, name: &str) {
        if selected(backend) {
            scenario(name)
                .check(backend, factory(backend))
                .assert_passed();
        }
    }

    /// Runs a scenario on the simulator.
    pub fn sim(name: &str) {
        if selected("sim") {
            scenario(name).check_sim().assert_passed();
        }
    }

    /// Every compared scenario on `backend` and on the simulator; fails
    /// with every difference.
    pub fn differential(backend: &'static str) {
        if !selected(backend) {
            return;
        }
        let diffs: Vec<String> = conformance::differential(backend, factory(backend))
            .into_iter()
            .filter_map(|(scenario, outcome)| match outcome {
                conformance::Outcome::Failed(why) => Some(format!("scenario {scenario}: {why}")),
                _ => None,
            })
            .collect();
        assert!(diffs.is_empty(), "{}", diffs.join("\n"));
    }
}

/// Generates one test per (scenario, backend) and one differential test per
/// OS backend. Backends are `name: os` (the crate's OS backend of that
/// name, through `evloop::backends::factory`) or `sim: sim`.
macro_rules! conformance {
    (
        backends $backends:tt
        scenarios { $($scenario:ident),* $(,)? }
        kernel_only { $($kernel:ident),* $(,)? }
    ) => {
        $( conformance!(@scenario $scenario $backends); )*
        $( conformance!(@kernel $kernel $backends); )*
        conformance!(@differential $backends);
        conformance!(@known $backends);

        /// The scenarios this file has tests for.
        fn listed() -> Vec<(&'static str, bool)> {
            let mut v = vec![$((stringify!($scenario), false)),*];
            v.extend([$((stringify!($kernel), true)),*]);
            v
        }
    };

    (@scenario $scenario:ident { $($(#[$m:meta])* $backend:ident : $kind:ident),* $(,)? }) => {
        mod $scenario {
            $( conformance!(@test $scenario $backend $kind $(#[$m])*); )*
        }
    };
    (@kernel $scenario:ident { $($(#[$m:meta])* $backend:ident : $kind:ident),* $(,)? }) => {
        mod $scenario {
            $( conformance!(@kernel_test $scenario $backend $kind $(#[$m])*); )*
        }
    };
    (@test $scenario:ident $backend:ident os $(#[$m:meta])*) => {
        $(#[$m])*
        #[test]
        fn $backend() {
            crate::harness::os(stringify!($backend), stringify!($scenario));
        }
    };
    (@test $scenario:ident $backend:ident sim $(#[$m:meta])*) => {
        #[test]
        fn $backend() {
            crate::harness::sim(stringify!($scenario));
        }
    };
    (@kernel_test $scenario:ident $backend:ident os $(#[$m:meta])*) => {
        conformance!(@test $scenario $backend os $(#[$m])*);
    };
    (@kernel_test $scenario:ident $backend:ident sim $(#[$m:meta])*) => {};

    (@differential { $($(#[$m:meta])* $backend:ident : $kind:ident),* $(,)? }) => {
        /// Each OS backend against the simulator, scenario by scenario.
        mod differential {
            $( conformance!(@diff_test $backend $kind $(#[$m])*); )*
        }
    };
    (@diff_test $backend:ident os $(#[$m:meta])*) => {
        $(#[$m])*
        #[test]
        fn $backend() {
            crate::harness::differential(stringify!($backend));
        }
    };
    (@diff_test $backend:ident sim $(#[$m:meta])*) => {};

    (@known { $($(#[$m:meta])* $backend:ident : $kind:ident),* $(,)? }) => {
        /// The backends this build of the suite runs.
        #[allow(clippy::vec_init_then_push)] // some are behind `cfg`
        pub fn known_backends() -> Vec<&'static str> {
            let mut v = Vec::new();
            $( $(#[$m])* v.push(stringify!($backend)); )*
            v
        }
    };
}

conformance! {
    backends {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        epoll: os,
        #[cfg(any(
            target_os = "macos",
            target_os = "ios",
            target_os = "freebsd",
            target_os = "netbsd",
            target_os = "openbsd",
            target_os = "dragonfly",
            all(feature = "emulated-kqueue", target_os = "linux")
        ))]
        kqueue: os,
        #[cfg(windows)]
        iocp: os,
        #[cfg(unix)]
        poll: os,
        select: os,
        #[cfg(all(feature = "io-uring", target_os = "linux"))]
        io_uring: os,
        sim: sim,
    }
    // On every backend; `Scenario::compared` says which the differential
    // check compares with the simulator.
    scenarios {
        readable,
        writable,
        writable_after_full,
        both,
        several_watchers_one_fd,
        interest_changes_within_an_iteration,
        hangup_socket,
        hangup_pipe,
        level,
        oneshot,
        oneshot_disarms,
        spurious_readiness,
        wait_interrupted,
        timeouts,
        remove_then_close,
        forget,
        reset_by_peer,
        edge,
        closed_fd,
    }
    // Kernel-only: fd number reuse, regular files.
    kernel_only {
        fd_reuse,
        closed_fd_reuse,
        regular_file,
    }
}

#[test]
fn every_os_backend_of_the_host_is_in_the_suite() {
    let known = known_backends();
    for name in evloop::backends::AVAILABLE {
        assert!(
            known.contains(name),
            "{name} is not in the conformance suite"
        );
    }
    assert!(known.contains(&"sim"));
}

#[test]
fn every_scenario_of_the_kit_has_its_tests() {
    let listed = listed();
    let kit: Vec<(&str, bool)> = Scenario::ALL
        .iter()
        .map(|s| (s.name(), s.kernel_only()))
        .collect();
    assert_eq!(
        listed, kit,
        "the scenarios list of conformance! is not the kit's"
    );
}

/// The removal rule's scenario is the one that catches a backend whose
/// registrations keep the file open and whose forget waits for the next
/// poll (`wrappers.rs`): every other scenario passes on it.
#[cfg(unix)]
#[test]
fn the_removal_rule_catches_a_delayed_forget() {
    let open: Factory = wrappers::DelayedForget::open;
    for &scenario in Scenario::ALL {
        let outcome = scenario.check("delayed-forget", open);
        if scenario == Scenario::RemoveThenClose {
            let conformance::Outcome::Failed(why) = outcome else {
                panic!("remove_then_close passed on a backend that delays its forget")
            };
            assert!(why.contains("the backend still holds the file"), "{why}");
            assert!(why.contains("peer of a"), "{why}");
        } else {
            outcome.assert_passed();
        }
    }
    // And the wrapped backend itself passes.
    let poll = harness::factory("poll");
    conformance::Scenario::RemoveThenClose
        .check("poll", poll)
        .assert_passed();
}

/// The differential check runs every compared scenario on its own, so that
/// a backend that differs in many shows each of them, whether its record
/// differs or the scenario could not finish.
#[cfg(unix)]
#[test]
fn the_differential_check_shows_every_difference() {
    let open: Factory = wrappers::LosesFirstReports::open;
    let results = conformance::differential("loses-first-reports", open);
    let compared: Vec<Scenario> = Scenario::ALL
        .iter()
        .copied()
        .filter(|s| s.compared())
        .collect();
    let checked: Vec<Scenario> = results.iter().map(|(s, _)| *s).collect();
    assert_eq!(checked, compared);
    let failed: Vec<&str> = results
        .iter()
        .filter(|(_, o)| o.failed())
        .map(|(s, _)| s.name())
        .collect();
    assert!(failed.len() >= 5, "only {failed:?} differ");
    for name in ["readable", "level", "hangup_pipe"] {
        assert!(failed.contains(&name), "{name} is not among {failed:?}");
    }
    let (_, readable) = &results[0];
    let conformance::Outcome::Failed(diff) = readable else {
        panic!("{readable:?}")
    };
    assert!(diff.contains("!= sim:"), "{diff}");
}

/// The kit's notifier checks (`conformance::notices`: signals, children,
/// wake-ups) on every OS backend of the host, one test per backend, but
/// `notices/fork_reinit`, which forks (`tests/conformance_fork.rs` runs
/// it: this binary runs its tests in threads). Every crate backend
/// declares signals, children and a waker: a check skipped on one fails
/// here, except where it cannot apply (Windows: signals, fork).
mod notices {
    use evloop::conformance::{notices, Outcome};

    fn check(backend: &'static str) {
        if !crate::harness::selected(backend) {
            return;
        }
        let open = crate::harness::factory(backend);
        let mut wrong = Vec::new();
        for &name in notices::NOTICE_CHECKS {
            if name == "notices/fork_reinit" {
                continue;
            }
            match notices::check_notice(name, backend, open) {
                Outcome::Passed => {}
                Outcome::Failed(why) => wrong.push(format!("{name}: {why}")),
                Outcome::Skipped(why) if cfg!(windows) => eprintln!("skipped {name}: {why}"),
                Outcome::Skipped(why) => {
                    wrong.push(format!("{name}: skipped on a crate backend: {why}"))
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn epoll() {
        check("epoll");
    }

    #[cfg(any(
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd",
        target_os = "netbsd",
        target_os = "openbsd",
        target_os = "dragonfly",
        all(feature = "emulated-kqueue", target_os = "linux")
    ))]
    #[test]
    fn kqueue() {
        check("kqueue");
    }

    #[cfg(unix)]
    #[test]
    fn poll() {
        check("poll");
    }

    #[test]
    fn select() {
        check("select");
    }

    #[cfg(all(feature = "io-uring", target_os = "linux"))]
    #[test]
    fn io_uring() {
        check("io_uring");
    }

    #[cfg(windows)]
    #[test]
    fn iocp() {
        check("iocp");
    }
}

/// The kit's pollable-fd checks (`conformance::pollable`) on every OS
/// backend of the host: those with a pollable fd (epoll, kqueue, an
/// io_uring ring without deferred task work) pass each, the others
/// (poll, select; io_uring's default ring where it defers task work) are
/// skipped, and none fails.
mod pollable {
    use evloop::conformance::{pollable, Outcome};

    /// Runs every check; `has_fd`: whether each must pass (else each must
    /// be skipped).
    fn check(backend: &'static str, open: evloop::backends::Factory, has_fd: bool) {
        let mut wrong = Vec::new();
        for &name in pollable::POLLABLE_CHECKS {
            match (pollable::check_pollable_loop(name, backend, open), has_fd) {
                (Outcome::Passed, true) | (Outcome::Skipped(_), false) => {}
                (outcome, _) => wrong.push(format!("{name}: {outcome:?}")),
            }
        }
        assert!(wrong.is_empty(), "{backend}:\n{}", wrong.join("\n"));
    }

    fn crate_backend(backend: &'static str, has_fd: bool) {
        if crate::harness::selected(backend) {
            check(
                backend,
                crate::harness::factory(backend),
                has_fd && cfg!(unix),
            );
        }
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn epoll() {
        crate_backend("epoll", true);
    }

    #[cfg(any(
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd",
        target_os = "netbsd",
        target_os = "openbsd",
        target_os = "dragonfly",
        all(feature = "emulated-kqueue", target_os = "linux")
    ))]
    #[test]
    fn kqueue() {
        crate_backend("kqueue", true);
    }

    #[cfg(unix)]
    #[test]
    fn poll() {
        crate_backend("poll", false);
    }

    #[test]
    fn select() {
        crate_backend("select", false);
    }

    /// The ring the crate makes by default defers task work where the
    /// kernel has it (no pollable fd then); one made without it has one.
    #[cfg(all(feature = "io-uring", target_os = "linux"))]
    #[test]
    fn io_uring() {
        use evloop::backends::io_uring::IoUring;
        if !crate::harness::selected("io_uring") {
            return;
        }
        let deferred =
            format!("{:?}", IoUring::new().unwrap()).contains("deferred_task_work: true");
        check("io_uring", crate::harness::factory("io_uring"), !deferred);
        check(
            "io_uring",
            || Ok(Box::new(IoUring::without_deferred_task_work()?)),
            true,
        );
    }
}
