//! The conformance kit (feature `conformance`): every scenario the crate's
//! own backends pass, the differential check against the simulator, the
//! fork check and the no-allocation check, for any backend, run from any
//! crate with one call.
//!
//! ```no_run
//! # mod mypoll {
//! #     pub struct MyPoll;
//! #     impl MyPoll {
//! #         pub fn new() -> std::io::Result<evloop::backends::poll::Poll> {
//! #             Ok(evloop::backends::poll::Poll::new())
//! #         }
//! #     }
//! # }
//! // tests/conformance.rs of the crate `mypoll`, which defines the backend
//! // `MyPoll`: a test binary of its own (the fork check forks), with this
//! // one test.
//! #[global_allocator]
//! static COUNTING: evloop::conformance::CountingAllocator =
//!     evloop::conformance::CountingAllocator;
//!
//! #[test]
//! fn conformance() {
//!     evloop::conformance::run("mypoll", || Ok(Box::new(mypoll::MyPoll::new()?)));
//! }
//! ```
//!
//! [`run`] runs every check in turn, each caught on its own
//! (`catch_unwind`): it prints one line per check as it ends, and a
//! summary, and panics at the end if any failed, listing each failure with
//! its message. The checks:
//!
//! - one per [`Scenario`]: the loop driven in steps over real socketpairs
//!   and pipes (an [`OsFixture`]), with peer actions
//!   between the steps, asserting what every backend must do and what this
//!   one declares in its [`Capabilities`](crate::backend::Capabilities) (never its
//!   name). The backend runs inside a spy ([`fixture::Probe`]) that keeps
//!   the registrations the loop made and fails any poll that reports an fd
//!   twice, an fd the loop has not registered (a forget that did not take:
//!   the loop would drop such a report unseen), readiness beyond the
//!   registered interest, or a native one-shot fd again before its re-arm;
//!   [`Scenario::OneshotDisarms`] drives the backend bare, outside a loop;
//! - `differential/<scenario>`, one per [compared](Scenario::compared)
//!   scenario: the same scenario on the simulator must give the same
//!   canonical record, step by step (each difference is shown, scenario by
//!   scenario);
//! - `fork`: `Loop::reinit_after_fork` in a forked child (Unix only);
//! - `notices/<check>`: signals, children, wake-ups and fork re-init
//!   through the loop's watchers ([`notices`]), skipped on a backend that
//!   does not provide the hooks;
//! - `pollable/<check>`: a backend that gives a pollable fd, held to its
//!   contract as another loop holding the fd sees it ([`pollable`]);
//!   skipped on a backend that has none;
//! - `no_allocation`: steady-state iterations allocate nothing (skipped
//!   unless [`CountingAllocator`] is the global allocator).
//!
//! On Windows the kit runs over TCP loopback pairs (the pairs and the
//! pipes alike: Windows has no socketpair, and its pipes are not sockets),
//! and does not run what cannot apply there, each named with its reason in
//! the report and, loudly, in [`run`]'s output: the `fork` check (no fork),
//! [`Scenario::WaitInterrupted`] (no signal interrupts a wait) and
//! [`Scenario::ClosedFdReuse`] (not written for Windows yet; see
//! [`Scenario::not_applicable`]).
//!
//! On WASI (`wasm32-wasip1`, the `wasi` backend under wasmtime) a guest
//! cannot create a socket, a pipe or a socketpair: it only accepts
//! connections on a listener the runtime preopened. The kit's pairs there
//! are two accepted connections that a host program relays to each other
//! (the fixture asks for each on a control connection: `fixture_wasi.rs`
//! has the protocol; the crate's `tests/wasi_kit.rs` is such a relay, and
//! `tests/wasi_kit_guest.rs` the guest), and the kit does not run what
//! cannot apply there: the `fork` check, the signal, child and
//! cross-thread wake-up notice checks (no processes, no signals, no
//! threads), [`Scenario::WaitInterrupted`] (no signals) and
//! [`Scenario::ClosedFdReuse`] (no dup: no file outlives its closed
//! number). Every other scenario runs, the differential and no-allocation
//! checks too; [`Scenario::FdReuse`] reuses the number with `fd_renumber`
//! (wasmtime never hands a closed number out again), and
//! [`Scenario::RegularFile`] runs where the runtime preopened a directory
//! (`wasmtime run --dir`). wasm32-wasip1 aborts at a panic, so a failed
//! check ends the guest there (`catch_unwind` catches nothing).
//!
//! The kit is tested itself: the crate's `tests/kit_mutants.rs` runs it on
//! twelve deliberately broken backends, each of which must fail it by the
//! checks of its flaw, and on the same backends unbroken, which must pass.
//!
//! `docs/porting.md` has the walkthrough. On Unix the kit installs a handler of
//! `SIGUSR1` (the signal with which it interrupts waits) for the rest of the
//! process, and forks: give it a test binary of its own. With
//! `EVLOOP_CONFORMANCE_SHOW=1` (and `--nocapture`) it prints each
//! scenario's record, raw and canonical.
#![allow(unsafe_code)] // fds, signals and fork in the fixture; fork; the allocator

mod alloc;
pub mod fixture;
#[cfg(unix)]
mod fork;
pub mod notices;
#[cfg_attr(windows, path = "os_only_windows.rs")]
#[cfg_attr(target_os = "wasi", path = "os_only_wasi.rs")]
mod os_only;
pub mod pollable;
mod record;
mod scenarios;

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

pub use crate::backends::Factory;
pub use alloc::CountingAllocator;

use fixture::{Fixture, OsFixture, SimFixture};
use record::Record;

/// How long a loop of the notice and pollable checks may wait for what it
/// expects before the check fails (only reached when it does).
///
/// ```
/// assert_eq!(evloop::conformance::WATCHDOG.as_secs(), 10);
/// ```
pub const WATCHDOG: std::time::Duration = std::time::Duration::from_secs(10);

/// A scenario of the kit: the loop on the backend under test, driven in
/// steps over sockets and pipes.
///
/// ```
/// use evloop::conformance::{Outcome, Scenario};
/// assert_eq!(Scenario::named("closed_fd"), Some(Scenario::ClosedFd));
/// assert!(Scenario::Readable.compared() && !Scenario::FdReuse.compared());
/// let poll = evloop::backends::factory("poll").unwrap();
/// assert_eq!(Scenario::Readable.check("poll", poll), Outcome::Passed);
/// assert_eq!(Scenario::Readable.check_sim(), Outcome::Passed);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scenario {
    /// Readable once per step while unread data is there, never without.
    Readable,
    /// Writable at once on a fresh socket; a watcher that stops itself is
    /// not called again until started.
    Writable,
    /// A full socket or pipe is not writable, not even spuriously.
    WritableAfterFull,
    /// Both directions on one watcher, and an interest change.
    Both,
    /// Several watchers on one fd: one registration, the union of their
    /// interests.
    SeveralWatchersOneFd,
    /// At most one `modify` per fd per iteration, none when changes cancel.
    InterestChangesWithinAnIteration,
    /// A socketpair's peer closes: readable (and `HUP` as declared), EOF;
    /// a writer's next write fails.
    HangupSocket,
    /// A pipe's writer closes: EOF; a full pipe's reader closes: an
    /// event, then `EPIPE`.
    HangupPipe,
    /// Level-triggered: reported on every iteration while unread.
    Level,
    /// One-shot: once, then silent until started again (native or
    /// emulated, as declared).
    Oneshot,
    /// Native one-shot, at the backend: a reported one-shot registration
    /// is not reported again until re-armed (where native one-shot is
    /// declared).
    OneshotDisarms,
    /// Spurious readiness: a report whose data another callback took, an
    /// event fed by hand.
    SpuriousReadiness,
    /// A wait interrupted again and again by a signal: no error, the timer
    /// once and not early.
    WaitInterrupted,
    /// Timers of 0.3 to 15 ms: never early, no busy loop (timeouts rounded
    /// up).
    Timeouts,
    /// The removal rule: remove a watcher, close its source, and the peer
    /// sees EOF at once.
    RemoveThenClose,
    /// A forget leaves nothing behind: a removed fd, still ready, is not
    /// reported again; watched again, it starts clean.
    Forget,
    /// The peer closes with our data unread: a reset, reported as declared.
    ResetByPeer,
    /// Edge-triggered: once per arrival if declared, refused if not.
    Edge,
    /// An fd closed behind the loop's back: `ERROR` and stopped, when
    /// declared.
    ClosedFd,
    /// Kernel only: a removed fd's number reused at once starts clean.
    FdReuse,
    /// Kernel only: an fd closed behind the loop's back while a dup of its
    /// file lives, then removed: its number reused at once starts clean.
    ClosedFdReuse,
    /// Kernel only: regular files and directories refused.
    RegularFile,
}

impl Scenario {
    /// Every scenario, in the order [`run`] checks them.
    pub const ALL: &'static [Scenario] = &[
        Scenario::Readable,
        Scenario::Writable,
        Scenario::WritableAfterFull,
        Scenario::Both,
        Scenario::SeveralWatchersOneFd,
        Scenario::InterestChangesWithinAnIteration,
        Scenario::HangupSocket,
        Scenario::HangupPipe,
        Scenario::Level,
        Scenario::Oneshot,
        Scenario::OneshotDisarms,
        Scenario::SpuriousReadiness,
        Scenario::WaitInterrupted,
        Scenario::Timeouts,
        Scenario::RemoveThenClose,
        Scenario::Forget,
        Scenario::ResetByPeer,
        Scenario::Edge,
        Scenario::ClosedFd,
        Scenario::FdReuse,
        Scenario::ClosedFdReuse,
        Scenario::RegularFile,
    ];

    /// Its name: `readable`, `hangup_pipe`, ... (snake case, as the crate's
    /// tests are named).
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Readable => "readable",
            Scenario::Writable => "writable",
            Scenario::WritableAfterFull => "writable_after_full",
            Scenario::Both => "both",
            Scenario::SeveralWatchersOneFd => "several_watchers_one_fd",
            Scenario::InterestChangesWithinAnIteration => "interest_changes_within_an_iteration",
            Scenario::HangupSocket => "hangup_socket",
            Scenario::HangupPipe => "hangup_pipe",
            Scenario::Level => "level",
            Scenario::Oneshot => "oneshot",
            Scenario::OneshotDisarms => "oneshot_disarms",
            Scenario::SpuriousReadiness => "spurious_readiness",
            Scenario::WaitInterrupted => "wait_interrupted",
            Scenario::Timeouts => "timeouts",
            Scenario::RemoveThenClose => "remove_then_close",
            Scenario::Forget => "forget",
            Scenario::ResetByPeer => "reset_by_peer",
            Scenario::Edge => "edge",
            Scenario::ClosedFd => "closed_fd",
            Scenario::FdReuse => "fd_reuse",
            Scenario::ClosedFdReuse => "closed_fd_reuse",
            Scenario::RegularFile => "regular_file",
        }
    }

    /// The scenario called `name`.
    pub fn named(name: &str) -> Option<Scenario> {
        Scenario::ALL.iter().copied().find(|s| s.name() == name)
    }

    /// Whether every backend must give the same canonical record as the
    /// simulator (the differential check). The others differ by declared
    /// capabilities ([`ResetByPeer`](Scenario::ResetByPeer),
    /// [`Edge`](Scenario::Edge), [`ClosedFd`](Scenario::ClosedFd)) or
    /// exist only on a kernel.
    pub fn compared(self) -> bool {
        !matches!(
            self,
            Scenario::ResetByPeer
                | Scenario::OneshotDisarms
                | Scenario::Edge
                | Scenario::ClosedFd
                | Scenario::FdReuse
                | Scenario::ClosedFdReuse
                | Scenario::RegularFile
        )
    }

    /// Whether it needs a kernel ([`Fixture::as_os`]): fd numbers reused,
    /// regular files.
    pub fn kernel_only(self) -> bool {
        matches!(
            self,
            Scenario::FdReuse | Scenario::ClosedFdReuse | Scenario::RegularFile
        )
    }

    /// Why the scenario cannot apply to this platform's OS backends
    /// (`None` where it runs): on Windows, [`WaitInterrupted`](Scenario::WaitInterrupted),
    /// since nothing there interrupts a wait as a signal does on Unix, and
    /// [`ClosedFdReuse`](Scenario::ClosedFdReuse), whose Windows
    /// counterpart is not written; on WASI, `WaitInterrupted` (no
    /// signals), `ClosedFdReuse` (no dup), and
    /// [`RegularFile`](Scenario::RegularFile) when the runtime preopened
    /// no directory. The simulator runs every scenario everywhere.
    ///
    /// ```
    /// use evloop::conformance::Scenario;
    /// assert_eq!(Scenario::Readable.not_applicable(), None);
    /// if cfg!(any(windows, target_os = "wasi")) {
    ///     assert!(Scenario::WaitInterrupted.not_applicable().is_some());
    /// }
    /// ```
    pub fn not_applicable(self) -> Option<&'static str> {
        cfg_if::cfg_if! {
            if #[cfg(windows)] {
                match self {
                    Scenario::WaitInterrupted => Some(
                        "not applicable on Windows: no signal interrupts a wait there (console \
                         events run their handler on a thread of their own, and the backends' \
                         waits are not alertable, so no APC ends them either); a wait ends by \
                         its timeout, an event, or the loop's waker",
                    ),
                    Scenario::ClosedFdReuse => Some(
                        "not run on Windows: its Windows counterpart (one handle of a socket \
                         closed behind the loop's back while a duplicate lives, the watcher \
                         removed, the value reused) is not written yet; fd_reuse checks a \
                         reused value after a plain removal there",
                    ),
                    _ => None,
                }
            } else if #[cfg(target_os = "wasi")] {
                match self {
                    Scenario::WaitInterrupted => Some(
                        "not applicable on WASI: there are no signals, so nothing interrupts a \
                         wait (poll_oneoff ends by its clock subscription or an fd event)",
                    ),
                    Scenario::ClosedFdReuse => Some(
                        "not applicable on WASI: there is no dup, so no file outlives the \
                         number closed behind the loop's back",
                    ),
                    Scenario::RegularFile if os_only::kit_dir().is_none() => Some(
                        "not run on WASI here: a guest opens files only in a directory the \
                         runtime preopened, and it has none (wasmtime run --dir)",
                    ),
                    _ => None,
                }
            } else {
                let _ = self;
                None
            }
        }
    }

    /// Runs the scenario on the backend `open` creates (an OS backend:
    /// real socketpairs and pipes, TCP pairs on Windows, relayed TCP pairs
    /// on WASI), caught: the
    /// outcome says how it went; skipped where it
    /// [does not apply](Scenario::not_applicable).
    pub fn check(self, backend: &'static str, open: Factory) -> Outcome {
        if let Some(why) = self.not_applicable() {
            return Outcome::Skipped(why);
        }
        self.check_on(&OsFixture::new(backend, open))
    }

    /// Runs the scenario on the simulator (the reference of the
    /// differential check); kernel-only scenarios are skipped.
    pub fn check_sim(self) -> Outcome {
        self.check_on(&SimFixture::new())
    }

    /// Runs the scenario in the world of `fixture` (a backend whose
    /// sources are not OS fds: see [`fixture`]), caught; kernel-only
    /// scenarios are skipped where [`Fixture::as_os`] is `None`.
    pub fn check_on<F: Fixture>(self, fixture: &F) -> Outcome {
        match caught(|| self.record(fixture)) {
            Ok(Some(record)) => {
                show(&record);
                Outcome::Passed
            }
            Ok(None) => Outcome::Skipped(
                "this fixture lacks what the scenario needs (a kernel: Fixture::as_os; a bare \
                 backend: Fixture::bare_backend)",
            ),
            Err(message) => Outcome::Failed(message),
        }
    }

    /// Runs the scenario; `None` if it needs a kernel (or a bare backend)
    /// the fixture lacks.
    fn record<F: Fixture>(self, f: &F) -> Option<Record> {
        use scenarios as s;
        // Windows: a scenario that closes a socket behind the loop's back,
        // or reuses a handle value, runs alone among the kit's (handle
        // values are not kept apart by number there); nothing on Unix.
        let _handles =
            fixture::scenario_lock(matches!(self, Scenario::ClosedFd | Scenario::FdReuse));
        Some(match self {
            Scenario::Readable => s::readable(f),
            Scenario::Writable => s::writable(f),
            Scenario::WritableAfterFull => s::writable_after_full(f),
            Scenario::Both => s::both(f),
            Scenario::SeveralWatchersOneFd => s::several_watchers_one_fd(f),
            Scenario::InterestChangesWithinAnIteration => {
                s::interest_changes_within_an_iteration(f)
            }
            Scenario::HangupSocket => s::hangup_socket(f),
            Scenario::HangupPipe => s::hangup_pipe(f),
            Scenario::Level => s::level(f),
            Scenario::Oneshot => s::oneshot(f),
            Scenario::OneshotDisarms => s::oneshot_disarms(f)?,
            Scenario::SpuriousReadiness => s::spurious_readiness(f),
            Scenario::WaitInterrupted => s::wait_interrupted(f),
            Scenario::Timeouts => s::timeouts(f),
            Scenario::RemoveThenClose => s::remove_then_close(f),
            Scenario::Forget => s::forget(f),
            Scenario::ResetByPeer => s::reset_by_peer(f),
            Scenario::Edge => s::edge(f),
            Scenario::ClosedFd => s::closed_fd(f),
            Scenario::FdReuse => os_only::fd_reuse(f.as_os()?),
            Scenario::ClosedFdReuse => os_only::closed_fd_reuse(f.as_os()?),
            Scenario::RegularFile => os_only::regular_file(f.as_os()?),
        })
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How one check went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It passed.
    Passed,
    /// It failed, with the panic's message (the step, and what differed).
    Failed(String),
    /// It did not run, for this reason.
    Skipped(&'static str),
}

impl Outcome {
    /// Whether it failed.
    pub fn failed(&self) -> bool {
        matches!(self, Outcome::Failed(_))
    }

    /// Panics with the message if it failed (what a `#[test]` that runs
    /// one check calls); says so on stderr if it was skipped.
    #[track_caller]
    pub fn assert_passed(&self) {
        match self {
            Outcome::Passed => {}
            Outcome::Skipped(why) => eprintln!("skipped: {why}"),
            Outcome::Failed(message) => panic!("{message}"),
        }
    }
}

/// One check of a [`Report`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    /// The check: a scenario's name, `differential/<scenario>`, `fork`,
    /// `notices/<check>` or `no_allocation`.
    pub name: String,
    /// How it went.
    pub outcome: Outcome,
}

impl fmt::Display for CheckResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            Outcome::Passed => write!(f, "ok       {}", self.name),
            Outcome::Skipped(why) => write!(f, "skipped  {}: {why}", self.name),
            Outcome::Failed(message) => {
                write!(f, "FAILED   {}:", self.name)?;
                for line in message.lines() {
                    write!(f, "\n           {line}")?;
                }
                Ok(())
            }
        }
    }
}

/// What [`run`] or [`check`] found: every check, in order.
///
/// ```
/// let poll = evloop::backends::factory("poll").unwrap();
/// let report = evloop::conformance::check("poll", poll);
/// assert!(report.passed(), "{report}");
/// assert!(report.results.iter().any(|r| r.name == "differential/readable"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The name the backend was checked under.
    pub backend: &'static str,
    /// Every check, in the order they ran.
    pub results: Vec<CheckResult>,
}

impl Report {
    /// Whether no check failed (skipped ones do not count).
    pub fn passed(&self) -> bool {
        !self.results.iter().any(|r| r.outcome.failed())
    }

    /// The checks that failed.
    pub fn failures(&self) -> impl Iterator<Item = &CheckResult> {
        self.results.iter().filter(|r| r.outcome.failed())
    }

    /// The checks that did not run, each with its reason (a scenario that
    /// [does not apply](Scenario::not_applicable) on this platform, the
    /// fork check on Windows, `no_allocation` without the counting
    /// allocator).
    ///
    /// ```
    /// use evloop::conformance::{CheckResult, Outcome, Report};
    /// let report = Report {
    ///     backend: "mine",
    ///     results: vec![
    ///         CheckResult { name: "readable".into(), outcome: Outcome::Passed },
    ///         CheckResult { name: "fork".into(), outcome: Outcome::Skipped("no fork here") },
    ///     ],
    /// };
    /// let skipped: Vec<&str> = report.skipped().map(|r| r.name.as_str()).collect();
    /// assert_eq!(skipped, ["fork"]);
    /// assert!(report.passed());
    /// ```
    pub fn skipped(&self) -> impl Iterator<Item = &CheckResult> {
        self.results
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Skipped(_)))
    }

    /// One line: how many checks passed, were skipped, failed.
    pub fn summary(&self) -> String {
        let count = |f: fn(&Outcome) -> bool| self.results.iter().filter(|r| f(&r.outcome)).count();
        format!(
            "conformance of {}: {} checks, {} passed, {} skipped, {} failed",
            self.backend,
            self.results.len(),
            count(|o| *o == Outcome::Passed),
            count(|o| matches!(o, Outcome::Skipped(_))),
            count(Outcome::failed),
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary())?;
        for r in &self.results {
            writeln!(f, "  {r}")?;
        }
        Ok(())
    }
}

/// Runs every check of the kit on the backend `open` creates, under the
/// name `backend` (used for the report only: nothing is asserted of the
/// backend's own [`name`](crate::backend::Backend::name)), printing one line per
/// check as it ends, and the summary. Panics at the end if any check
/// failed, with every failure and its message; returns the report
/// otherwise.
///
/// Where a panic aborts the program (`wasm32-wasip1`), nothing catches a
/// failed check: the program ends in it, and `run` prints each check's
/// name (`running  NAME`) before it runs, so that the output says which.
///
/// Give it a test binary of its own (a file under `tests/` with this one
/// test): it forks, and installs a `SIGUSR1` handler. Several backends are
/// checked one after the other in that one test (two tests would run in
/// parallel, and the fork check refuses to fork while another thread
/// runs).
pub fn run(backend: &'static str, open: Factory) -> Report {
    println!("conformance of {backend}:");
    // What the checks hold the backend to (a factory that fails here fails
    // every check below, with its error).
    if let Ok(b) = open() {
        println!("  declared: {}", declarations(&b.capabilities()));
    }
    // Where a panic aborts, each check is named before it runs (a failed
    // one ends the program).
    let announce = ANNOUNCE.with(|a| a.replace(cfg!(panic = "abort")));
    let report = check_each(backend, open, |r| println!("  {r}"));
    ANNOUNCE.with(|a| a.set(announce));
    println!("{}", report.summary());
    let skipped: Vec<String> = report.skipped().map(|r| format!("  {r}")).collect();
    if !skipped.is_empty() {
        // Loudly: a check that did not run proves nothing.
        println!(
            "NOT RUN on {backend} ({} of {} checks):\n{}",
            skipped.len(),
            report.results.len(),
            skipped.join("\n")
        );
    }
    if !report.passed() {
        let failed: Vec<String> = report.failures().map(|r| format!("  {r}")).collect();
        panic!(
            "{}\n{}\n(docs/porting.md, section 4: when a check fails)",
            report.summary(),
            failed.join("\n")
        );
    }
    report
}

/// The declarations of `caps` that the checks hold a backend to, in one
/// line: `edge native, one-shot emulated, level Rearmed, hangup Always,
/// closed_fd ModifyFails`.
fn declarations(caps: &crate::backend::Capabilities) -> String {
    let edge = |native: bool| if native { "native" } else { "refused" };
    let emulated = |native: bool| if native { "native" } else { "emulated" };
    format!(
        "edge {}, one-shot {}, level {:?}, hangup {:?}, closed_fd {:?}{}",
        edge(caps.edge),
        emulated(caps.oneshot),
        caps.level,
        caps.hangup,
        caps.closed_fd,
        caps.max_fd
            .map_or(String::new(), |max| format!(", max_fd {max}")),
    )
}

/// [`run`] on the backend called `backend`: one of the crate's, or one
/// [registered](crate::backends::register) for the process, the way a
/// program names it (`EVLOOP_BACKEND`). Panics if no backend has that
/// name, listing those that do.
///
/// ```no_run
/// // tests/conformance.rs of a crate whose backend registers itself.
/// # fn open() -> std::io::Result<Box<dyn evloop::backend::Backend>> {
/// #     Ok(Box::new(evloop::backends::poll::Poll::new()))
/// # }
/// evloop::backends::register("mine", open).unwrap();
/// evloop::conformance::run_named("mine");
/// ```
pub fn run_named(backend: &'static str) -> Report {
    match crate::backends::factory(backend) {
        Some(open) => run(backend, open),
        None => panic!(
            "no backend is called {backend:?}; known here: {}",
            crate::backends::names().join(", ")
        ),
    }
}

/// [`run`] without printing or panicking: the report only.
pub fn check(backend: &'static str, open: Factory) -> Report {
    check_each(backend, open, |_| {})
}

fn check_each(backend: &'static str, open: Factory, mut each: impl FnMut(&CheckResult)) -> Report {
    let mut results = Vec::new();
    let mut push = |name: String, outcome: Outcome| {
        let r = CheckResult { name, outcome };
        each(&r);
        results.push(r);
    };
    for &scenario in Scenario::ALL {
        starting(scenario.name());
        push(scenario.name().to_string(), scenario.check(backend, open));
    }
    for (scenario, outcome) in differential(backend, open) {
        push(format!("differential/{scenario}"), outcome);
    }
    starting("fork");
    push("fork".into(), fork(backend, open));
    notices::each(backend, open, &mut push);
    pollable::each(backend, open, &mut push);
    starting("no_allocation");
    push("no_allocation".into(), no_allocation(backend, open));
    Report { backend, results }
}

thread_local! {
    /// Whether [`starting`] prints: set by [`run`] where a panic aborts.
    static ANNOUNCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Under [`run`] on a target that aborts at a panic (wasm32-wasip1),
/// where nothing catches a failed check and the program ends in it: the
/// check's name, printed before it runs, so that the output names it.
fn starting(name: &str) {
    if ANNOUNCE.with(std::cell::Cell::get) {
        println!("  running  {name}");
    }
}

/// Every [compared](Scenario::compared) scenario on the backend and on the
/// simulator: passed where their canonical records agree, failed with a
/// step-by-step diff (`!=` marking the steps that differ) where they do
/// not, or with the panic where one side did not finish. The scenarios only
/// record here (their own expectations are the scenario checks'), and each
/// is caught on its own, so that every difference shows.
pub fn differential(backend: &'static str, open: Factory) -> Vec<(Scenario, Outcome)> {
    let compared = Scenario::ALL.iter().copied().filter(|s| s.compared());
    compared
        .map(|scenario| {
            if let Some(why) = scenario.not_applicable() {
                return (scenario, Outcome::Skipped(why));
            }
            starting(&format!("differential/{scenario}"));
            let on = |f: &dyn Fn() -> Option<Record>| caught(|| record::record_only(f));
            let os = on(&|| scenario.record(&OsFixture::new(backend, open)));
            let sim = on(&|| scenario.record(&SimFixture::new()));
            let outcome = match (os, sim) {
                (Ok(Some(os)), Ok(Some(sim))) => compare(backend, &os, &sim),
                (Err(message), _) => Outcome::Failed(format!("on {backend}: {message}")),
                (_, Err(message)) => Outcome::Failed(format!("on the simulator: {message}")),
                (Ok(None), _) | (_, Ok(None)) => Outcome::Skipped("a kernel-only scenario"),
            };
            (scenario, outcome)
        })
        .collect()
}

/// The step-by-step comparison of two records.
fn compare(backend: &str, os: &Record, sim: &Record) -> Outcome {
    let (os, sim) = (os.canonical(), sim.canonical());
    if os == sim {
        return Outcome::Passed;
    }
    let mut d = format!("{backend} differs from the simulator:\n");
    let show = |l: Option<&String>| l.map_or("(none)".to_string(), |l| l.clone());
    for i in 0..os.len().max(sim.len()) {
        let (o, s) = (os.get(i), sim.get(i));
        let mark = if o == s { "  " } else { "!=" };
        d += &format!("{mark} sim:          {}\n", show(s));
        d += &format!("{mark} {backend:<13} {}\n", show(o));
    }
    Outcome::Failed(d)
}

/// The fork check (see the module documentation), caught; skipped on
/// Windows and WASI, which have no `fork`.
pub fn fork(backend: &'static str, open: Factory) -> Outcome {
    cfg_if::cfg_if! {
        if #[cfg(unix)] {
            match caught(|| fork::check(backend, open)) {
                Ok(()) => Outcome::Passed,
                Err(message) => Outcome::Failed(message),
            }
        } else if #[cfg(target_os = "wasi")] {
            let _ = (backend, open);
            Outcome::Skipped("not applicable on WASI: there are no processes to fork")
        } else {
            let _ = (backend, open);
            Outcome::Skipped(
                "not applicable on Windows: there is no fork (a child process starts afresh, \
                 so no backend state is ever shared with one, and reinit is never needed)",
            )
        }
    }
}

/// The no-allocation check, caught; skipped unless [`CountingAllocator`]
/// is the global allocator.
pub fn no_allocation(backend: &'static str, open: Factory) -> Outcome {
    if !CountingAllocator::installed() {
        return Outcome::Skipped(
            "CountingAllocator is not the #[global_allocator] of this test binary",
        );
    }
    match caught(|| alloc::check(backend, open)) {
        Ok(()) => Outcome::Passed,
        Err(message) => Outcome::Failed(message),
    }
}

/// Runs `f`, turning a panic into its message.
/// A named check's outcome (`notices/...`, `pollable/...`): `f`'s, caught
/// (an `Err` is a skip, with its reason; a panic, a failure).
fn outcome_of(f: impl FnOnce() -> Result<(), &'static str>) -> Outcome {
    match caught(f) {
        Ok(Ok(())) => Outcome::Passed,
        Ok(Err(why)) => Outcome::Skipped(why),
        Err(message) => Outcome::Failed(message),
    }
}

/// Each of a group's checks by name (`check`, one of `names`), in turn,
/// each result handed to `push` as it ends.
fn each_named(
    names: &[&str],
    check: fn(&str, &'static str, Factory) -> Outcome,
    backend: &'static str,
    open: Factory,
    push: &mut dyn FnMut(String, Outcome),
) {
    for name in names {
        starting(name);
        push(name.to_string(), check(name, backend, open));
    }
}

/// [`each_named`], the results collected.
fn all_named(
    names: &[&str],
    check: fn(&str, &'static str, Factory) -> Outcome,
    backend: &'static str,
    open: Factory,
) -> Vec<CheckResult> {
    let mut results = Vec::new();
    each_named(names, check, backend, open, &mut |name, outcome| {
        results.push(CheckResult { name, outcome })
    });
    results
}

fn caught<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|panic| {
        if let Some(s) = panic.downcast_ref::<&str>() {
            s.to_string()
        } else if let Some(s) = panic.downcast_ref::<String>() {
            s.clone()
        } else {
            "panicked (not with a message)".to_string()
        }
    })
}

/// Prints the record (raw and canonical) if `EVLOOP_CONFORMANCE_SHOW` is
/// set (run with `--nocapture` to see it).
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
