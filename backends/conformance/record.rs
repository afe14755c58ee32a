//! What a scenario records, step by step, and the canonical form in which
//! records of different backends are compared.
//!
//! A scenario drives the loop in *steps*: one `Loop::run` call each
//! (`NoWait` or `Once`: one iteration; `Default` for the few scenarios that
//! run to completion). Per step the record keeps the io callbacks invoked
//! (by logical name: fd numbers differ between the kernels and the
//! simulator), the notes the callbacks and the scenario wrote (what reads
//! and writes returned), the `modify` calls the backend received, and how
//! `run` returned.
//!
//! # Normalisation
//!
//! Records are compared across backends in a canonical form. Two things are
//! normalised, because backends legitimately differ on them:
//!
//! 1. **`HUP` is dropped.** `select(2)` has no way to report a hang-up (it
//!    shows as readability, and the read returns EOF), and the kernels set
//!    it for different file types (a socketpair whose peer closed gives
//!    `IN|HUP` on epoll and poll; a pipe whose writer closed gives `HUP`
//!    alone). The scenarios assert the raw `HUP` bit per backend where it
//!    matters, and assert the EOF that every backend must deliver.
//! 2. **A pending error makes every requested direction ready, and a
//!    hang-up the write direction.** When the raw readiness has `ERROR`,
//!    the canonical readiness is the watcher's whole interest; with `HUP`,
//!    `WRITABLE` is added if the watcher asked for it. What is portable is
//!    that the next read or write returns at once (EOF, `EPIPE`, the
//!    pending error), not which direction bits a kernel sets with it (a
//!    full pipe whose reader left gives `POLLERR` alone; the simulator's
//!    full socket whose peer left gives `HUP` alone). A pending-error
//!    `ERROR` (the watcher stays active) is then dropped; the note of the
//!    failing write or read shows it.
//!
//! Not normalised, but checked on every dispatch: a hang-up reported to a
//! watcher that reads carries `READABLE` (every backend maps `POLLHUP`,
//! `EPOLLHUP`, `EV_EOF` so), so that code that only looks at
//! `is_readable()` reads, and sees the EOF.
//!
//! What is *not* normalised: an `ERROR` with which the loop stopped a
//! watcher (the backend refused the fd, or reported it invalid: libev's
//! `fd_kill`) shows as `killed`, and a watcher the loop stopped for any
//! other reason (one-shot) as `stopped`; both must agree everywhere.

use crate::RawFd;
use std::cell::Cell;
use std::fmt::Write as _;

use crate::{Interest, IoEvent, Loop, Ready, RunMode, RunOutcome, Source, Trigger};

use super::fixture::{fd_of, Modifies, ModifyCall, SharedStream};

/// One io callback invocation.
#[derive(Debug, Clone)]
pub struct Dispatch {
    /// The watcher's logical name.
    pub name: &'static str,
    /// What the callback received, raw.
    pub ready: Ready,
    /// The watcher's interest at the time.
    pub interest: Interest,
    /// Whether the loop had stopped the watcher before calling it.
    pub stopped: bool,
}

impl Dispatch {
    /// The loop stopped the watcher because the fd is unusable (`fd_kill`).
    pub fn killed(&self) -> bool {
        self.ready.is_error() && self.stopped && self.interest.trigger() != Trigger::Oneshot
    }

    /// The canonical form (see the module documentation).
    pub fn canonical(&self) -> String {
        let mut rw = self.ready & (Ready::READABLE | Ready::WRITABLE);
        let asked = Ready::from_interest(self.interest);
        if self.ready.is_error() {
            rw |= asked;
        } else if self.ready.is_hup() {
            rw |= asked & Ready::WRITABLE;
        }
        let mut s = format!("{}:{rw}", self.name);
        if self.killed() {
            s.push_str(" killed");
        } else if self.stopped {
            s.push_str(" stopped");
        }
        s
    }
}

/// One step: a `Loop::run` call.
#[derive(Debug, Clone)]
pub struct Step {
    /// How the loop was run.
    pub mode: RunMode,
    /// How `run` returned.
    pub outcome: RunOutcome,
    /// The io callbacks invoked, in invocation order.
    pub dispatched: Vec<Dispatch>,
    /// Notes written during the step, in order.
    pub notes: Vec<String>,
    /// `modify` calls since the previous step (including those made by
    /// removals between the steps), as `name: old => new [failed]`.
    pub modifies: Vec<String>,
}

impl Step {
    /// The canonical dispatches, sorted (the order in which a backend
    /// reports fds is its own business).
    pub fn canonical_dispatched(&self) -> Vec<String> {
        let mut v: Vec<String> = self.dispatched.iter().map(Dispatch::canonical).collect();
        v.sort();
        v
    }

    /// The notes, sorted (they follow the dispatch order).
    pub fn sorted_notes(&self) -> Vec<String> {
        let mut v = self.notes.clone();
        v.sort();
        v
    }

    /// The modify calls grouped by fd, each fd's calls in their order.
    /// Calls on different fds follow the dispatch order where callbacks
    /// make them (select and poll report in fd order, and fd numbers
    /// depend on what else the process has open), so only each fd's own
    /// sequence is compared.
    pub fn canonical_modifies(&self) -> Vec<String> {
        let mut v = self.modifies.clone();
        // Stable: one fd's calls keep their order.
        v.sort_by(|a, b| a.split(':').next().cmp(&b.split(':').next()));
        v
    }

    /// One line: mode, outcome, canonical dispatches, notes, and the modify
    /// calls if `with_modifies`.
    pub fn canonical(&self, with_modifies: bool) -> String {
        let mut s = format!(
            "{:?} -> {:?}: [{}] notes [{}]",
            self.mode,
            self.outcome,
            self.canonical_dispatched().join(", "),
            self.sorted_notes().join("; ")
        );
        if with_modifies {
            let _ = write!(s, " modifies [{}]", self.canonical_modifies().join("; "));
        }
        s
    }

    /// The raw readiness of the dispatch of `name` in this step.
    pub fn raw(&self, name: &str) -> Ready {
        let found = self.dispatched.iter().find(|d| d.name == name);
        found
            .unwrap_or_else(|| panic!("{name} was not dispatched: {self:?}"))
            .ready
    }
}

/// A scenario's result on one backend.
#[derive(Debug, Clone)]
pub struct Record {
    /// The backend.
    pub backend: &'static str,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Whether the modify calls are part of the comparison (false where
    /// they legitimately differ: native vs emulated one-shot).
    pub compare_modifies: bool,
}

impl Record {
    /// One canonical line per step.
    pub fn canonical(&self) -> Vec<String> {
        let m = self.compare_modifies;
        let lines = self.steps.iter().enumerate();
        lines
            .map(|(i, s)| format!("{i}: {}", s.canonical(m)))
            .collect()
    }
}

thread_local! {
    /// Whether the scenarios of this thread only record (the differential
    /// check): their expectations are then not asserted, so that a
    /// scenario goes on to its last step and the comparison shows every
    /// difference, not the first failed expectation.
    static RECORD_ONLY: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with the expectations of the scenarios it runs switched off
/// (see [`RECORD_ONLY`]), and switched on again after, even if it panics.
pub fn record_only<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            RECORD_ONLY.with(|r| r.set(self.0));
        }
    }
    let _restore = Restore(RECORD_ONLY.with(|r| r.replace(true)));
    f()
}

/// The loop's state in every scenario: collects dispatches and notes, and
/// cuts them into steps.
pub struct Log {
    backend: &'static str,
    dispatched: Vec<Dispatch>,
    notes: Vec<String>,
    steps: Vec<Step>,
    modifies: Modifies,
    names: Vec<(RawFd, &'static str)>,
    compare_modifies: bool,
    /// Expectations are not asserted ([`record_only`]).
    record_only: bool,
}

impl Log {
    /// A log for `backend`, reading modify calls from `modifies`.
    pub fn new(backend: &'static str, modifies: Modifies) -> Log {
        Log {
            backend,
            dispatched: Vec::new(),
            notes: Vec::new(),
            steps: Vec::new(),
            modifies,
            names: Vec::new(),
            compare_modifies: true,
            record_only: RECORD_ONLY.with(Cell::get),
        }
    }

    /// Asserts `ok`, with `what` as the message (unless the scenario only
    /// records).
    #[track_caller]
    pub fn require(&self, ok: bool, what: impl FnOnce() -> String) {
        if !ok && !self.record_only {
            panic!("{}: {}", self.backend, what());
        }
    }

    /// Leaves the modify calls out of the cross-backend comparison.
    pub fn dont_compare_modifies(&mut self) {
        self.compare_modifies = false;
    }

    /// Names `src`'s fd in the modify log.
    pub fn name_fd(&mut self, src: &(impl Source + ?Sized), name: &'static str) {
        self.names.push((fd_of(src), name));
    }

    /// Records an io callback invocation (call it first in the callback).
    pub fn seen<T: ?Sized>(&mut self, lp: &Loop<'_, Log>, name: &'static str, ev: &IoEvent<'_, T>) {
        let interest = ev.watcher.interest(lp).unwrap();
        if ev.ready.is_hup() && interest.is_readable() {
            assert!(
                ev.ready.is_readable(),
                "{}: {name}: a hang-up without READABLE ({}) for a watcher that reads",
                self.backend,
                ev.ready
            );
        }
        self.dispatched.push(Dispatch {
            name,
            ready: ev.ready,
            interest,
            stopped: !lp.is_active(ev.watcher).unwrap(),
        });
    }

    /// Adds a note to the current step.
    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    fn modify_line(&self, m: &ModifyCall) -> String {
        let name = self.names.iter().rev().find(|(fd, _)| *fd == m.fd);
        let name = name.map_or_else(|| format!("fd{}", m.fd), |(_, n)| n.to_string());
        let failed = if m.ok { "" } else { " failed" };
        format!("{name}: {} => {}{failed}", m.old, m.new)
    }

    /// Runs the loop once in `mode` and records the step.
    pub fn step(&mut self, lp: &mut Loop<'_, Log>, mode: RunMode) -> &Step {
        let outcome = lp
            .run(mode, self)
            .unwrap_or_else(|e| panic!("{}: run({mode:?}) failed: {e}", self.backend));
        self.end_step(mode, outcome)
    }

    /// Records a step whose `run` call the scenario made itself.
    pub fn end_step(&mut self, mode: RunMode, outcome: RunOutcome) -> &Step {
        let calls = std::mem::take(&mut *self.modifies.borrow_mut());
        let modifies = calls.iter().map(|m| self.modify_line(m)).collect();
        self.steps.push(Step {
            mode,
            outcome,
            dispatched: std::mem::take(&mut self.dispatched),
            notes: std::mem::take(&mut self.notes),
            modifies,
        });
        self.steps.last().unwrap()
    }

    /// Asserts what the last step dispatched (canonical form, any order)
    /// and noted (any order).
    #[track_caller]
    pub fn expect(&self, dispatched: &[&str], notes: &[&str]) {
        if self.record_only {
            return;
        }
        let step = self.steps.last().expect("no step yet");
        let n = self.steps.len() - 1;
        let mut want: Vec<String> = dispatched.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(
            step.canonical_dispatched(),
            want,
            "{}: step {n} dispatched (raw: {:?})",
            self.backend,
            step.dispatched
        );
        let mut want: Vec<String> = notes.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(
            step.sorted_notes(),
            want,
            "{}: step {n} notes",
            self.backend
        );
    }

    /// Asserts the modify calls of the last step, in order.
    #[track_caller]
    pub fn expect_modifies(&self, modifies: &[&str]) {
        if self.record_only {
            return;
        }
        let step = self.steps.last().expect("no step yet");
        assert_eq!(
            step.modifies,
            modifies,
            "{}: step {} modify calls",
            self.backend,
            self.steps.len() - 1
        );
    }

    /// Asserts how the last step's `run` returned.
    #[track_caller]
    pub fn expect_outcome(&self, outcome: RunOutcome) {
        if self.record_only {
            return;
        }
        let step = self.steps.last().expect("no step yet");
        assert_eq!(step.outcome, outcome, "{}: step outcome", self.backend);
    }

    /// The last step.
    pub fn last(&self) -> &Step {
        self.steps.last().expect("no step yet")
    }

    /// The record, for comparison with other backends.
    pub fn into_record(self) -> Record {
        assert!(
            self.dispatched.is_empty() && self.notes.is_empty(),
            "{}: events after the last step",
            self.backend
        );
        Record {
            backend: self.backend,
            steps: self.steps,
            compare_modifies: self.compare_modifies,
        }
    }
}

// ------------------------------------------------------------- I/O helpers

/// Reads until `WouldBlock`, EOF or an error; describes what happened in a
/// backend-independent way: `read "data" then would-block`, `... then eof`,
/// `... then error ConnectionReset`.
pub fn drain(src: &(impl SharedStream + ?Sized)) -> (String, End) {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    let end = loop {
        match src.read_some(&mut buf) {
            Ok(0) => break End::Eof,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break End::WouldBlock,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => break End::Error(e.kind()),
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    // Long fills are summarised: their size depends on the kernel.
    let shown = if bytes.len() > 64 {
        "<many bytes>".into()
    } else {
        format!("{text:?}")
    };
    (format!("read {shown} then {end}"), end)
}

/// How a [`drain`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// `WouldBlock`.
    WouldBlock,
    /// Read returned 0.
    Eof,
    /// Another error.
    Error(std::io::ErrorKind),
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::WouldBlock => f.write_str("would-block"),
            End::Eof => f.write_str("eof"),
            End::Error(k) => write!(f, "error {k:?}"),
        }
    }
}

/// Writes until `WouldBlock`; returns how much went (at least one byte).
pub fn fill(src: &(impl SharedStream + ?Sized)) -> usize {
    let chunk = [b'f'; 16 * 1024];
    let mut total = 0;
    // Rounds of "would block, then room came" (TCP on Windows), bounded
    // in case a reader drains meanwhile.
    let mut rounds = 0;
    loop {
        match src.write_some(&chunk) {
            Ok(n) => total += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                rounds += 1;
                if rounds > 64 || !src.room_comes_soon() {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("fill: {e}"),
        }
    }
    assert!(total > 0, "fill: the stream was not writable");
    total
}

/// One write, described: `wrote 5`, `write would-block`, `write error
/// BrokenPipe`.
///
/// On Windows and WASI the streams are TCP connections, which say that the reader
/// has gone with a reset (`WSAECONNRESET`, or `WSAECONNABORTED`) where a
/// socketpair or a pipe says `EPIPE`: the same event, written
/// `BrokenPipe` there so that the records compare with the simulator's.
pub fn try_write(src: &(impl SharedStream + ?Sized), bytes: &[u8]) -> String {
    use std::io::ErrorKind;
    match src.write_some(bytes) {
        Ok(n) => format!("wrote {n}"),
        Err(e) if e.kind() == ErrorKind::WouldBlock => "write would-block".into(),
        Err(e) if cfg!(any(windows, target_os = "wasi")) && peer_gone(e.kind()) => {
            "write error BrokenPipe".into()
        }
        Err(e) => format!("write error {:?}", e.kind()),
    }
}

/// How a TCP write says that the peer has gone (see [`try_write`]).
fn peer_gone(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
    matches!(kind, BrokenPipe | ConnectionReset | ConnectionAborted)
}

/// Writes all of `bytes` (the peer's side of a scenario).
pub fn write_all(src: &(impl SharedStream + ?Sized), bytes: &[u8]) {
    let mut done = 0;
    while done < bytes.len() {
        done += src
            .write_some(&bytes[done..])
            .unwrap_or_else(|e| panic!("peer write: {e}"));
    }
}
