//! The backend conformance suite: one set of scenarios, written once
//! against a [`Fixture`](fixture::Fixture), run on every OS backend of the
//! host (real socketpairs and pipes) and on the simulator.
//!
//! ```sh
//! cargo test --test conformance                      # every backend
//! EVLOOP_CONFORMANCE_BACKEND=poll cargo test --test conformance
//! cargo test --test conformance -- --list            # scenario::backend
//! cargo test --test conformance_fork                 # fork + reinit
//! # the kqueue backend too, over an emulated kqueue (Linux):
//! EVLOOP_CONFORMANCE_BACKEND=kqueue cargo test --features emulated-kqueue --test conformance
//! ```
//!
//! - `<scenario>::<backend>`: one test per scenario and backend. The
//!   scenario asserts what every backend must do, and spells out where
//!   backends legitimately differ (HUP reporting, when a closed fd is
//!   noticed, edge triggering).
//! - `differential::<backend>`: runs every *compared* scenario on the OS
//!   backend and on the simulator and checks that both produce the same
//!   canonical record, step by step: the same io callbacks (by logical
//!   name) with the same readiness, the same notes (what reads and writes
//!   returned), the same `modify` calls. `record.rs` says what is
//!   normalised and why.
//! - `EVLOOP_CONFORMANCE_BACKEND=<name>` runs one backend's tests (the
//!   others pass as skipped); a name the suite does not know fails every
//!   test. `EVLOOP_CONFORMANCE_SHOW=1` (with `--nocapture`) prints each
//!   record, raw and canonical.
//!
//! A new backend: see `docs/porting.md`. In short: if it watches OS fds,
//! make [`open_backend`] create it and add it to the `backends` list below;
//! the [`OsFixture`](fixture::OsFixture) does the rest.
#![cfg(unix)]

mod fixture;
mod os_only;
mod record;
mod scenarios;

use evloop::Backend;

/// The environment variable that restricts the run to one backend.
pub const SELECT_VAR: &str = "EVLOOP_CONFORMANCE_BACKEND";

/// Creates the OS backend called `name`. The crate's own come from
/// `evloop::backends::open`; a backend defined elsewhere gets an arm here
/// (and an entry in the `backends` list of `conformance!`).
pub fn open_backend(name: &str) -> Box<dyn Backend> {
    // A backend defined elsewhere:
    // if name == "mine" {
    //     return Box::new(my_crate::MyBackend::new().unwrap());
    // }
    evloop::backends::open(name).unwrap_or_else(|e| panic!("cannot open the {name} backend: {e}"))
}

/// The run harness: selection, and the differential comparison.
mod harness {
    use crate::fixture::{OsFixture, SimFixture};
    use crate::record::Record;

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

    /// Prints the record (raw and canonical) if `EVLOOP_CONFORMANCE_SHOW`
    /// is set (run with `--nocapture` to see it).
    fn show(record: &Record) {
        if std::env::var_os("EVLOOP_CONFORMANCE_SHOW").is_none() {
            return;
        }
        let mut out = format!("record on {}:\n", record.backend);
        for (line, step) in record.canonical().iter().zip(&record.steps) {
            let raw: Vec<String> = step
                .dispatched
                .iter()
                .map(|d| format!("{}:{}", d.name, d.ready))
                .collect();
            out += &format!("  {line}\n      raw [{}]\n", raw.join(", "));
        }
        println!("{out}");
    }

    /// Runs a scenario on an OS backend.
    pub fn os(backend: &'static str, scenario: fn(&OsFixture) -> Record) {
        if selected(backend) {
            let record = scenario(&OsFixture::new(backend));
            assert_eq!(record.backend, backend);
            show(&record);
        }
    }

    /// Runs a scenario on the simulator.
    pub fn sim(backend: &'static str, scenario: fn(&SimFixture) -> Record) {
        if selected(backend) {
            let record = scenario(&SimFixture::new());
            assert_eq!(record.backend, backend);
            show(&record);
        }
    }

    /// A compared scenario, on both kinds of fixture.
    pub type Compared = (
        &'static str,
        fn(&OsFixture) -> Record,
        fn(&SimFixture) -> Record,
    );

    /// Runs every compared scenario on `backend` and on the simulator, and
    /// fails with every difference.
    pub fn differential(backend: &'static str, scenarios: &[Compared]) {
        if !selected(backend) {
            return;
        }
        let mut diffs = Vec::new();
        for (name, on_os, on_sim) in scenarios {
            let os = on_os(&OsFixture::new(backend)).canonical();
            let sim = on_sim(&SimFixture::new()).canonical();
            if os == sim {
                continue;
            }
            let mut d = format!("scenario {name}:\n");
            for i in 0..os.len().max(sim.len()) {
                let (o, s) = (os.get(i), sim.get(i));
                let mark = if o == s { "  " } else { "!=" };
                let show = |l: Option<&String>| l.map_or("(none)".to_string(), |l| l.clone());
                d += &format!("  {mark} sim:          {}\n", show(s));
                d += &format!("  {mark} {backend:<13} {}\n", show(o));
            }
            diffs.push(d);
        }
        assert!(
            diffs.is_empty(),
            "{backend} differs from the simulator:\n{}",
            diffs.join("\n")
        );
    }
}

/// Generates one test per (scenario, backend) and one differential test per
/// OS backend. Backends are `name: os` (an [`OsFixture`](fixture::OsFixture)
/// on `open_backend(name)`) or `name: sim`.
macro_rules! conformance {
    (
        backends $backends:tt
        compared $compared:tt
        per_backend { $($per:ident),* $(,)? }
        os_only { $($os:ident),* $(,)? }
    ) => {
        conformance!(@scenarios $compared $backends);
        conformance!(@scenarios { $($per),* } $backends);
        $( conformance!(@os_only $os $backends); )*
        conformance!(@differential $backends $compared);
        conformance!(@known $backends);
    };

    (@scenarios { $($scenario:ident),* $(,)? } $backends:tt) => {
        $( conformance!(@scenario $scenario $backends); )*
    };
    (@scenario $scenario:ident { $($(#[$m:meta])* $backend:ident : $kind:ident),* $(,)? }) => {
        mod $scenario {
            $(
                $(#[$m])*
                #[test]
                fn $backend() {
                    crate::harness::$kind(stringify!($backend), crate::scenarios::$scenario);
                }
            )*
        }
    };

    (@os_only $scenario:ident { $($(#[$m:meta])* $backend:ident : $kind:ident),* $(,)? }) => {
        mod $scenario {
            $( conformance!(@os_test $scenario $backend $kind $(#[$m])*); )*
        }
    };
    (@os_test $scenario:ident $backend:ident os $(#[$m:meta])*) => {
        $(#[$m])*
        #[test]
        fn $backend() {
            crate::harness::os(stringify!($backend), crate::os_only::$scenario);
        }
    };
    (@os_test $scenario:ident $backend:ident sim $(#[$m:meta])*) => {};

    (@differential { $($(#[$m:meta])* $backend:ident : $kind:ident),* $(,)? } $compared:tt) => {
        /// Each OS backend against the simulator, scenario by scenario.
        mod differential {
            $( conformance!(@diff_test $backend $kind $compared $(#[$m])*); )*
        }
    };
    (@diff_test $backend:ident os { $($scenario:ident),* $(,)? } $(#[$m:meta])*) => {
        $(#[$m])*
        #[test]
        fn $backend() {
            use crate::fixture::{OsFixture, SimFixture};
            use crate::record::Record;
            crate::harness::differential(
                stringify!($backend),
                &[$((
                    stringify!($scenario),
                    crate::scenarios::$scenario::<OsFixture> as fn(&OsFixture) -> Record,
                    crate::scenarios::$scenario::<SimFixture> as fn(&SimFixture) -> Record,
                )),*],
            );
        }
    };
    (@diff_test $backend:ident sim $($rest:tt)*) => {};

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
        poll: os,
        select: os,
        sim: sim,
    }
    // Same canonical record on every backend (checked by `differential`).
    compared {
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
        spurious_readiness,
        wait_interrupted,
        timeouts,
    }
    // Run on every backend, with the differences asserted per backend.
    per_backend {
        // select reports a reset as plain readability.
        reset_by_peer,
        // Only epoll and kqueue offer edge triggering.
        edge,
        // epoll and kqueue notice a closed fd only at the next change.
        closed_fd,
    }
    // Kernel-only: fd number reuse, regular files.
    os_only {
        fd_reuse,
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
