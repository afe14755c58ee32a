//! The conformance kit catches every planted bug: it runs
//! (`evloop::conformance::check`) on deliberately broken backends, each of
//! which must fail it, by the checks that its flaw breaks, and on the same
//! backends unbroken, which must pass it (so that a mutant fails for its
//! flaw, not for the harness).
//!
//! The backends are small ones written here (`kit_mutants/`): a poll
//! backend, an epoll backend, and the epoll backend in an edge-only mode
//! (level emulated by re-arming each reported fd, as over a mechanism that
//! is always edge-triggered), each with a [`Flaw`] switch.
//!
//! ```sh
//! cargo test --test kit_mutants -- --nocapture   # the table
//! ```
//!
//! One test, the mutants one after the other: the kit forks (its fork
//! check refuses to while another thread runs), so no other test may run
//! in this binary, and no watchdog thread either: `alarm(2)` is the
//! watchdog (its default action ends the process). Linux only (epoll).
#![cfg(target_os = "linux")]
#![allow(unsafe_code)] // the mini backends' syscalls; alarm

#[path = "kit_mutants/flaw.rs"]
mod flaw;
#[path = "kit_mutants/mini_epoll.rs"]
mod mini_epoll;
#[path = "kit_mutants/mini_poll.rs"]
mod mini_poll;

use evloop::backends::Factory;
use evloop::conformance::{self, Report};

use flaw::Flaw;
use mini_epoll::MiniEpoll;
use mini_poll::MiniPoll;

// The no-allocation check runs too: the base backends pass it.
#[global_allocator]
static COUNTING: conformance::CountingAllocator = conformance::CountingAllocator;

/// A broken backend, and the checks its flaw must fail (among others it
/// may fail too).
struct Mutant {
    name: &'static str,
    open: Factory,
    flaw: Flaw,
    caught_by: &'static [&'static str],
}

/// The unbroken backends: each must pass the whole kit.
const BASES: &[(&str, Factory)] = &[
    ("mini-poll", || MiniPoll::open(Flaw::None)),
    ("mini-epoll", || MiniEpoll::open(false, Flaw::None)),
    ("mini-epoll-edge-only", || MiniEpoll::open(true, Flaw::None)),
];

/// The twelve planted bugs of issue 22 (and what the kit must catch them
/// with).
const MUTANTS: &[Mutant] = &[
    Mutant {
        name: "no_level_rearm",
        open: || MiniEpoll::open(true, Flaw::NoLevelRearm),
        flaw: Flaw::NoLevelRearm,
        caught_by: &["level", "differential/level"],
    },
    Mutant {
        name: "eintr_as_error",
        open: || MiniPoll::open(Flaw::EintrAsError),
        flaw: Flaw::EintrAsError,
        caught_by: &["wait_interrupted", "differential/wait_interrupted"],
    },
    Mutant {
        name: "no_hup",
        open: || MiniPoll::open(Flaw::NoHup),
        flaw: Flaw::NoHup,
        caught_by: &["hangup_socket", "hangup_pipe", "reset_by_peer"],
    },
    Mutant {
        name: "no_error",
        open: || MiniPoll::open(Flaw::NoError),
        flaw: Flaw::NoError,
        caught_by: &["hangup_pipe", "reset_by_peer"],
    },
    Mutant {
        name: "timeout_rounded_down",
        open: || MiniPoll::open(Flaw::TimeoutRoundedDown),
        flaw: Flaw::TimeoutRoundedDown,
        caught_by: &["timeouts"],
    },
    Mutant {
        name: "no_reinit",
        open: || MiniEpoll::open(false, Flaw::NoReinit),
        flaw: Flaw::NoReinit,
        caught_by: &["fork"],
    },
    Mutant {
        name: "false_oneshot",
        open: || MiniPoll::open(Flaw::FalseOneshot),
        flaw: Flaw::FalseOneshot,
        caught_by: &["oneshot_disarms"],
    },
    Mutant {
        name: "wrong_closed_fd",
        open: || MiniPoll::open(Flaw::WrongClosedFd),
        flaw: Flaw::WrongClosedFd,
        caught_by: &["closed_fd"],
    },
    Mutant {
        name: "no_rebuild_after_failed_del",
        open: || MiniEpoll::open(false, Flaw::NoRebuild),
        flaw: Flaw::NoRebuild,
        caught_by: &["closed_fd_reuse"],
    },
    Mutant {
        name: "no_deregistration",
        open: || MiniPoll::open(Flaw::NoDeregistration),
        flaw: Flaw::NoDeregistration,
        caught_by: &["forget"],
    },
    Mutant {
        name: "entry_kept_after_forget",
        open: || MiniPoll::open(Flaw::EntryKeptAfterForget),
        flaw: Flaw::EntryKeptAfterForget,
        caught_by: &["forget"],
    },
    Mutant {
        name: "edge_claimed_level_delivered",
        open: || MiniPoll::open(Flaw::EdgeClaimedLevelDelivered),
        flaw: Flaw::EdgeClaimedLevelDelivered,
        caught_by: &["edge"],
    },
];

/// Ends the process if the test hangs (a thread would stop the kit's fork
/// check).
struct Watchdog;

impl Watchdog {
    fn arm(seconds: u32) -> Watchdog {
        // SAFETY: alarm(2) has no memory-safety preconditions; SIGALRM's
        // default action (ending the process) is what a hang should get.
        unsafe { libc::alarm(seconds) };
        Watchdog
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // SAFETY: as in `arm`: cancels the alarm.
        unsafe { libc::alarm(0) };
    }
}

/// The names of the checks that failed.
fn failed(report: &Report) -> Vec<&str> {
    report.failures().map(|r| r.name.as_str()).collect()
}

/// The first line of each failure's message, for the table.
fn first_lines(report: &Report) -> Vec<String> {
    report
        .failures()
        .map(|r| {
            let why = match &r.outcome {
                conformance::Outcome::Failed(m) => m.lines().next().unwrap_or(""),
                _ => "",
            };
            let short: String = why.chars().take(150).collect();
            format!("      {}: {short}", r.name)
        })
        .collect()
}

#[test]
fn the_kit_catches_every_planted_bug() {
    let _watchdog = Watchdog::arm(600);
    // The kit catches each check's panic and keeps its message in the
    // report: the default hook would print every one of them (with a
    // backtrace) between the lines of the table.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut problems = Vec::new();

    println!("base backends (must pass the kit):");
    for &(name, open) in BASES {
        let report = conformance::check(name, open);
        println!("  {}", report.summary());
        if !report.passed() {
            problems.push(format!("the base backend {name} fails the kit:\n{report}"));
        }
    }

    println!("\nmutants (must fail the kit; mutant -> failed checks):");
    let mut caught = 0;
    for m in MUTANTS {
        let report = conformance::check(m.name, m.open);
        let failed = failed(&report);
        let missing: Vec<&str> = m
            .caught_by
            .iter()
            .copied()
            .filter(|c| !failed.contains(c))
            .collect();
        let verdict = if failed.is_empty() {
            "MISSED"
        } else if missing.is_empty() {
            caught += 1;
            "caught"
        } else {
            "caught, NOT BY ITS FLAW'S CHECKS"
        };
        println!(
            "  {:<30} {verdict:<8} ({:?}) -> {}",
            m.name,
            m.flaw,
            failed.join(", ")
        );
        println!("{}", first_lines(&report).join("\n"));
        if failed.is_empty() {
            problems.push(format!("{}: the kit passed it: {report}", m.name));
        } else if !missing.is_empty() {
            problems.push(format!(
                "{}: failed {failed:?}, but not {missing:?}, the checks its flaw ({:?}) breaks",
                m.name, m.flaw
            ));
        }
    }
    std::panic::set_hook(hook);
    println!(
        "\n{caught} of {} mutants caught, each by name",
        MUTANTS.len()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    assert_eq!(caught, MUTANTS.len());
}
