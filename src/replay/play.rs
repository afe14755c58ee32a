//! The replay: a backend that answers the loop from a trace, sockets that
//! answer the program's reads from it, and the check of everything the
//! program does against it.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use super::format::{call_name, tag, Decoder, Record, Shown};
use super::sink;
use crate::backend::{
    Backend, Capabilities, Change, InternalFds, NoticeService, Notices, PollEvent, PollStatus,
    Spawned, Wake,
};
use crate::{FileStat, Interest, RawFd, Ready, Source, SourceFd, VirtualFd};

/// Where a replay stopped following its trace: the first thing the
/// program did that the recording does not have. What `run` returns then
/// carries it (an [`Error::Backend`](crate::Error::Backend) from the
/// `"replay"` backend, [`Divergence::of`] finds it), and so do
/// [`Replay::divergence`] and [`Replay::finish`].
///
/// ```
/// use evloop::replay::{MemoryTrace, Replay};
/// use evloop::{Loop, RunMode, Sim};
/// use std::time::Duration;
///
/// // Recorded: one timer of 5 ms.
/// let trace = MemoryTrace::new();
/// {
///     let mut lp: Loop = Loop::builder().register("sim", || Ok(Box::new(Sim::new().backend())))
///         .backend("sim").record(trace.clone()).build()?;
///     lp.timer(Duration::from_millis(5), Duration::ZERO, |_, _, _| {})?;
///     lp.run(RunMode::Default, &mut ())?;
/// }
/// // Replayed with a timer of 7 ms: the first poll waits for another time.
/// let replay = Replay::from_bytes(trace.bytes())?;
/// let mut lp: Loop = Loop::with_backend(replay.backend());
/// lp.timer(Duration::from_millis(7), Duration::ZERO, |_, _, _| {})?;
/// let err = lp.run(RunMode::Default, &mut ()).unwrap_err();
/// let d = evloop::replay::Divergence::of(&err).expect("a divergence");
/// assert_eq!(d.iteration, 0);
/// assert!(d.expected.starts_with("poll(timeout Some(5ms))"), "{d}");
/// assert!(d.actual.starts_with("poll(timeout Some(7ms))"), "{d}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// The polls replayed before it: during the callbacks of an iteration,
    /// that iteration's number ([`Loop::iteration`](crate::Loop::iteration)).
    pub iteration: u64,
    /// The records of the trace consumed before it (the `Begin` record
    /// not counted).
    pub record: u64,
    /// The fd the diverging call was about, if any.
    pub fd: Option<RawFd>,
    /// The fd of the io watcher whose callback was running, if one was.
    pub callback_fd: Option<RawFd>,
    /// The connection that `fd` (or, without one, `callback_fd`) was, if
    /// the replay accepted it from a [`ReplayListener`]: an fd number is
    /// reused as connections close, the n-th accept on a listener is not.
    /// (Boxed: a `Divergence` is an error, kept small.)
    pub connection: Option<Box<Accepted>>,
    /// What the trace has next.
    pub expected: String,
    /// What the program did instead.
    pub actual: String,
    /// What may have caused it, where the replay can tell.
    pub hint: Option<&'static str>,
}

impl Divergence {
    /// The divergence that an error of `run` (or of any loop call that
    /// reached the replay's backend) carries, if it does.
    ///
    /// ```
    /// let err = evloop::Error::Busy;
    /// assert!(evloop::replay::Divergence::of(&err).is_none());
    /// ```
    pub fn of(err: &crate::Error) -> Option<&Divergence> {
        match err {
            crate::Error::Backend { source, .. } => source
                .get_ref()
                .and_then(|e| e.downcast_ref::<Divergence>()),
            _ => None,
        }
    }
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the replay diverged at iteration {} (after {} records of the trace)",
            self.iteration, self.record
        )?;
        // The connection is named after the fd it is (`fd`, else the
        // callback's).
        let conn = |fd: RawFd| self.connection.as_ref().filter(|c| c.fd == fd);
        if let Some(fd) = self.fd {
            write!(f, ", on fd{fd}")?;
            if let Some(c) = conn(fd) {
                write!(f, " ({c})")?;
            }
        }
        if let Some(fd) = self.callback_fd {
            write!(f, ", in the callback of fd{fd}'s watcher")?;
            if let (None, Some(c)) = (self.fd, conn(fd)) {
                write!(f, " ({c})")?;
            }
        }
        write!(
            f,
            ": the recording has {}; the program did {}",
            self.expected, self.actual
        )?;
        if let Some(h) = self.hint {
            write!(f, " ({h})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Divergence {}

/// Which connection a [`Divergence`]'s fd was: the n-th accepted on a
/// listener, at which iteration ([`Divergence::connection`]).
///
/// ```
/// use evloop::replay::Accepted;
/// let c = Accepted { fd: 9, listener: 5, nth: 12, iteration: 40 };
/// assert_eq!(c.to_string(), "the connection of accept #12 on fd5, at iteration 40");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    /// The connection's fd.
    pub fd: RawFd,
    /// The listening fd that accepted it.
    pub listener: RawFd,
    /// Which accept on that listener it was, from 1 (failed accepts not
    /// counted): the same connection however its fd number was reused.
    pub nth: u64,
    /// The iteration ([`Loop::iteration`](crate::Loop::iteration)) whose
    /// accept returned it.
    pub iteration: u64,
}

impl fmt::Display for Accepted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the connection of accept #{} on fd{}, at iteration {}",
            self.nth, self.listener, self.iteration
        )
    }
}

/// What a replay that followed its trace to the end did.
///
/// ```
/// let s = evloop::replay::ReplaySummary::default();
/// assert_eq!((s.polls, s.complete), (0, false));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplaySummary {
    /// Records replayed.
    pub records: u64,
    /// Polls replayed (iterations).
    pub polls: u64,
    /// Reads answered from the trace, and their bytes.
    pub reads: u64,
    /// The bytes those reads returned.
    pub bytes_read: u64,
    /// Writes checked against the trace.
    pub writes: u64,
    /// The bytes those writes took.
    pub bytes_written: u64,
    /// Whether the trace ended as a complete recording does (the
    /// recording loop was dropped), rather than cut off.
    pub complete: bool,
    /// The fds the recording watched without the recording layer, in the
    /// order it noted them: io watchers on fds that were not
    /// [`Recorded`](super::Recorded) sockets', whose reads (through
    /// `backends::fd_io`, or a `Read` on the bare socket) are not in the
    /// trace. A replay that reached them without diverging did not need
    /// those reads.
    pub unrecorded_fds: Vec<RawFd>,
}

/// How the trace ended, once it has.
enum TraceEnd {
    Clean,
    Cut,
    Corrupt(String),
}

/// The replay's state: the trace, where it is, and the first divergence.
pub(crate) struct Player {
    dec: Decoder,
    backend: String,
    caps: Capabilities,
    peeked: Option<Record>,
    end: Option<TraceEnd>,
    callback_fd: Option<RawFd>,
    now: Duration,
    wall: Duration,
    diverged: Option<Divergence>,
    summary: ReplaySummary,
    /// The fds noted as watched without the recording layer (as
    /// `summary.unrecorded_fds`, for lookups).
    unrecorded: HashSet<RawFd>,
    /// Each accept that gave a connection: its fd, the listener, the
    /// iteration (16 bytes per accept record of at least 5: within the
    /// bound on what a replay holds).
    accepts: Vec<(RawFd, RawFd, u64)>,
    /// The thread's replay is this one (to be released when it goes).
    claimed: bool,
}

/// Why the program's read on a replayed fd may have no record.
const READ_HINT: &str = "a read or write the recording lacks: at recording time it went outside evloop's recorded paths \
     (a Read or Write on a socket not wrapped in replay::Recorded, or backends::fd_io rather than replay::fd_io), or the program changed";

/// Why a write may differ from the recorded one on the same fd.
const WRITE_HINT: &str = "the program writes other bytes on this fd than the recording has next: its logic changed \
     (a fix, or a bug), it decided by something the trace lacks, or at recording time a write went outside evloop's \
     recorded paths";

/// Why a read's record may hold more than the read asked for.
const OVERLONG_READ: &str =
    "the trace's read returned more bytes than the read asked for: the trace is corrupt";

/// The fd numbers a replay accepts without a trace to justify them: the
/// loop's fd table is sized by the highest fd registered, so a trace's fd
/// number may exceed this only by the trace's size (in bytes).
pub(crate) const FD_FLOOR: i64 = 1 << 16;

/// Why an fd number is refused.
const FD_HINT: &str = "the trace's fd number is beyond what a replay of its size accepts (65,536 plus its length in bytes: \
     the loop's fd table is sized by the highest fd): the trace is corrupt, or its program held that many fds before it was recorded";

/// Why the program's call on an fd the recording noted as unrecorded may
/// have no record.
const UNRECORDED_HINT: &str = "at recording time this fd was watched without the recording layer (it was not a \
     replay::Recorded socket): what the program read from it there (backends::fd_io::read, a Read on the bare socket) \
     is not in the trace; wrap the socket in replay::Recorded, or read through replay::fd_io";

/// Why a poll's timeout may differ.
const TIMEOUT_HINT: &str =
    "the loop computed another wait: its timers or watchers differ (the program changed), \
     or it decided by something outside the loop (its own clock reading, another thread's state)";

/// Why a recorded async send may name no watcher.
const ASYNC_HINT: &str = "async watchers are numbered in the order the loop first started them: the replayed program \
     must create and start its async watchers as the recorded one did (it may leave out the threads that send)";

impl Player {
    /// The next record (the trace's end is noted, not returned; notes
    /// are taken in passing).
    fn next(&mut self) -> Option<Record> {
        if let Some(r) = self.peeked.take() {
            return Some(r);
        }
        if self.end.is_some() {
            return None;
        }
        loop {
            match self.dec.next() {
                // Kept once per fd: each note took bytes of the trace.
                Ok(Some(Record::Unrecorded(fd))) => {
                    if self.unrecorded.insert(fd) {
                        self.summary.unrecorded_fds.push(fd);
                    }
                }
                r => return self.end_or(r),
            }
        }
    }

    /// A decoded record, or the end it says the trace has.
    fn end_or(&mut self, r: io::Result<Option<Record>>) -> Option<Record> {
        match r {
            Ok(Some(Record::End)) => {
                self.end = Some(TraceEnd::Clean);
                None
            }
            Ok(Some(r)) => Some(r),
            Ok(None) => {
                self.end = Some(TraceEnd::Cut);
                None
            }
            Err(e) => {
                self.end = Some(TraceEnd::Corrupt(e.to_string()));
                None
            }
        }
    }

    /// What the trace has next, described.
    fn expected(&mut self) -> String {
        match self.next() {
            Some(r) => {
                let s = r.to_string();
                self.peeked = Some(r);
                s
            }
            None => match &self.end {
                Some(TraceEnd::Clean) | None => {
                    "its end (the recorded loop was dropped there)".to_string()
                }
                Some(TraceEnd::Cut) => "its end: the trace is cut off there (the recording did not finish: \
                     the process ended without dropping its loop, or the last block was not written)"
                    .to_string(),
                Some(TraceEnd::Corrupt(e)) => format!("an unreadable record ({e})"),
            },
        }
    }

    /// The record for the program's next call, described by `actual`
    /// (`None` once diverged, or if the trace ended: a divergence).
    fn take(&mut self, fd: Option<RawFd>, actual: impl FnOnce() -> String) -> Option<Record> {
        if self.diverged.is_some() {
            return None;
        }
        match self.next() {
            Some(r) => {
                self.summary.records += 1;
                Some(r)
            }
            None => {
                let expected = self.expected();
                self.diverge(fd, expected, actual(), None);
                None
            }
        }
    }

    /// The program's call was not `got`, the record taken for it.
    fn mismatch(
        &mut self,
        fd: Option<RawFd>,
        got: Record,
        actual: String,
        hint: Option<&'static str>,
    ) {
        self.summary.records -= 1;
        let expected = got.to_string();
        self.peeked = Some(got);
        self.diverge(fd, expected, actual, hint);
    }

    fn diverge(
        &mut self,
        fd: Option<RawFd>,
        expected: String,
        actual: String,
        hint: Option<&'static str>,
    ) {
        let hint = match fd {
            Some(fd) if self.unrecorded.contains(&fd) && matches!(hint, None | Some(READ_HINT)) => {
                Some(UNRECORDED_HINT)
            }
            _ => hint,
        };
        if self.diverged.is_none() {
            self.diverged = Some(Divergence {
                iteration: self.summary.polls,
                record: self.summary.records,
                fd,
                callback_fd: self.callback_fd,
                connection: fd
                    .or(self.callback_fd)
                    .and_then(|fd| self.accepted(fd))
                    .map(Box::new),
                expected,
                actual,
                hint,
            });
        }
    }

    fn diverged_error(&self) -> io::Error {
        match &self.diverged {
            Some(d) => io::Error::other(d.clone()),
            None => io::Error::other("the replay diverged"),
        }
    }

    /// The connection `fd` was last accepted as, if it was.
    fn accepted(&self, fd: RawFd) -> Option<Accepted> {
        let at = self.accepts.iter().rposition(|a| a.0 == fd)?;
        let (_, listener, iteration) = self.accepts[at];
        let earlier = self.accepts[..at].iter().filter(|a| a.1 == listener);
        Some(Accepted {
            fd,
            listener,
            nth: earlier.count() as u64 + 1,
            iteration,
        })
    }

    /// Whether a trace's fd number may size the loop's fd table (see
    /// [`FD_FLOOR`]).
    fn fd_allowed(&self, fd: i64) -> bool {
        let limit = FD_FLOOR.saturating_add(i64::try_from(self.dec.consumed()).unwrap_or(i64::MAX));
        (0..=limit).contains(&fd)
    }

    // --- the backend's calls ---

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        let actual = || format!("poll(timeout {timeout:?})");
        let Some(rec) = self.take(None, actual) else {
            return Err(self.diverged_error());
        };
        match rec {
            Record::Poll { timeout: t, result } if t == timeout => {
                self.summary.polls += 1;
                self.callback_fd = None;
                match result {
                    Ok((status, evs)) => {
                        events.extend_from_slice(&evs);
                        Ok(status)
                    }
                    Err(e) => Err(e.to_io()),
                }
            }
            rec => {
                let hint = matches!(rec, Record::Poll { .. }).then_some(TIMEOUT_HINT);
                self.mismatch(None, rec, actual(), hint);
                Err(self.diverged_error())
            }
        }
    }

    fn clock(&mut self, wall: bool) -> Duration {
        let name = if wall { "wall_now()" } else { "now()" };
        let last = if wall { self.wall } else { self.now };
        let Some(rec) = self.take(None, || name.to_string()) else {
            return last;
        };
        match (rec, wall) {
            (Record::Now(t), false) => {
                self.now = t;
                t
            }
            (Record::Wall(t), true) => {
                self.wall = t;
                t
            }
            (rec, _) => {
                self.mismatch(None, rec, name.to_string(), None);
                last
            }
        }
    }

    fn modify(&mut self, c: Change) -> io::Result<()> {
        let actual = || format!("modify(fd{}, {} => {})", c.fd, c.old, c.new);
        let Some(rec) = self.take(Some(c.fd), actual) else {
            return Err(self.diverged_error());
        };
        match rec {
            Record::Modify { change, result } if change == c => result.map_err(|e| e.to_io()),
            rec => {
                self.mismatch(Some(c.fd), rec, actual(), None);
                Err(self.diverged_error())
            }
        }
    }

    fn modify_all(&mut self, changes: &[Change]) -> Result<(), (usize, io::Error)> {
        let actual = || {
            let list: Vec<String> = changes
                .iter()
                .map(|c| format!("fd{} {} => {}", c.fd, c.old, c.new))
                .collect();
            format!("modify_all[{}]", list.join(", "))
        };
        let fd = changes.first().map(|c| c.fd);
        let Some(rec) = self.take(fd, actual) else {
            return Err((0, self.diverged_error()));
        };
        match rec {
            Record::ModifyAll {
                changes: recorded,
                result,
            } if recorded == changes => result.map_err(|(i, e)| (i, e.to_io())),
            rec => {
                // The first change that differs names the fd.
                let fd = match &rec {
                    Record::ModifyAll { changes: rc, .. } => changes
                        .iter()
                        .zip(rc.iter().map(Some).chain(std::iter::repeat(None)))
                        .find(|(a, b)| Some(*a) != *b)
                        .map(|(a, _)| a.fd)
                        .or(fd),
                    _ => fd,
                };
                self.mismatch(fd, rec, actual(), None);
                Err((0, self.diverged_error()))
            }
        }
    }

    /// A call with integer arguments and a unit result.
    fn call(&mut self, t: u8, args: &[i64]) -> io::Result<()> {
        let fd = matches!(t, tag::CHECK_FD | tag::SHUTDOWN).then(|| args[0] as RawFd);
        let actual = || {
            let list: Vec<String> = args.iter().map(i64::to_string).collect();
            format!("{}({})", call_name(t), list.join(", "))
        };
        let Some(rec) = self.take(fd, actual) else {
            return Err(self.diverged_error());
        };
        match rec {
            Record::Call {
                tag: rt,
                args: ra,
                result,
            } if rt == t && ra == args => {
                // The fd of a registration sizes the loop's fd table.
                if t == tag::CHECK_FD && result.is_ok() && !self.fd_allowed(args[0]) {
                    let rec = Record::Call {
                        tag: rt,
                        args: ra,
                        result,
                    };
                    self.mismatch(fd, rec, actual(), Some(FD_HINT));
                    return Err(self.diverged_error());
                }
                result.map_err(|e| e.to_io())
            }
            rec => {
                let hint = (t == tag::SHUTDOWN).then_some(READ_HINT);
                self.mismatch(fd, rec, actual(), hint);
                Err(self.diverged_error())
            }
        }
    }

    fn take_notices(&mut self, notices: &mut Notices) {
        let Some(rec) = self.take(None, || "take_notices()".to_string()) else {
            return;
        };
        match rec {
            Record::Notices(n) => {
                notices.signals |= n.signals;
                notices.exits.extend_from_slice(&n.exits);
                notices.woken |= n.woken;
                notices.clock_stepped |= n.clock_stepped;
                notices.paths.extend_from_slice(&n.paths);
            }
            rec => self.mismatch(None, rec, "take_notices()".to_string(), None),
        }
    }

    /// Whether the recording saw an async send before this poll: its
    /// record, if it is next (the replayed program's own sends are not
    /// looked at).
    fn async_sent(&mut self) -> bool {
        if self.diverged.is_some() {
            return false;
        }
        match self.next() {
            Some(Record::SentBeforePoll) => {
                self.summary.records += 1;
                true
            }
            Some(rec) => {
                self.peeked = Some(rec);
                false
            }
            None => false,
        }
    }

    /// The async sends the recording took after this poll, if its record
    /// is next, in `taken` (whatever the replayed program's threads sent
    /// is dropped); each must name an active watcher of the program.
    fn async_taken(&mut self, taken: &mut Vec<u32>, active: &dyn Fn(u32) -> bool) {
        taken.clear();
        if self.diverged.is_some() {
            return;
        }
        match self.next() {
            Some(Record::SendsTaken(list)) => {
                self.summary.records += 1;
                if let Some(n) = list.iter().copied().find(|&n| !active(n)) {
                    let actual = format!(
                        "no active async watcher numbered #{n} (an async send the recording took for it)"
                    );
                    self.mismatch(None, Record::SendsTaken(list), actual, Some(ASYNC_HINT));
                    return;
                }
                taken.extend_from_slice(&list);
            }
            Some(rec) => self.peeked = Some(rec),
            None => {}
        }
    }

    fn spawn(&mut self, program: String) -> io::Result<u32> {
        let actual = || format!("spawn_child({program})");
        let Some(rec) = self.take(None, actual) else {
            return Err(self.diverged_error());
        };
        match rec {
            Record::Spawn { program: p, result } if p == program => result.map_err(|e| e.to_io()),
            rec => {
                self.mismatch(None, rec, actual(), None);
                Err(self.diverged_error())
            }
        }
    }

    fn clock_steps(&mut self) -> bool {
        let Some(rec) = self.take(None, || "watch_clock_steps()".to_string()) else {
            return false;
        };
        match rec {
            Record::ClockSteps(on) => on,
            rec => {
                self.mismatch(None, rec, "watch_clock_steps()".to_string(), None);
                false
            }
        }
    }

    fn stat(&mut self, path: String) -> FileStat {
        let actual = || format!("stat({path})");
        let Some(rec) = self.take(None, actual) else {
            return FileStat::MISSING;
        };
        match rec {
            Record::Stat { path: p, stat } if p == path => stat,
            rec => {
                self.mismatch(None, rec, actual(), None);
                FileStat::MISSING
            }
        }
    }

    fn watch_path(&mut self, path: String, token: u64) -> io::Result<()> {
        let actual = || format!("watch_path({path}, {token})");
        let Some(rec) = self.take(None, actual) else {
            return Err(self.diverged_error());
        };
        match rec {
            Record::WatchPath {
                path: p,
                token: t,
                result,
            } if p == path && t == token => result.map_err(|e| e.to_io()),
            rec => {
                self.mismatch(None, rec, actual(), None);
                Err(self.diverged_error())
            }
        }
    }

    // --- the program's sockets ---

    fn read(&mut self, fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
        let len = buf.len() as u64;
        let actual = || format!("a read of up to {len} bytes on fd{fd}");
        let Some(rec) = self.take(Some(fd), actual) else {
            return Err(io::ErrorKind::WouldBlock.into());
        };
        match rec {
            Record::Read {
                fd: rf,
                len: rl,
                result,
            } if rf == fd && rl == len => match result {
                Ok(bytes) if bytes.len() > buf.len() => {
                    let rec = Record::Read {
                        fd,
                        len,
                        result: Ok(bytes),
                    };
                    self.mismatch(Some(fd), rec, actual(), Some(OVERLONG_READ));
                    Err(io::ErrorKind::WouldBlock.into())
                }
                Ok(bytes) => {
                    buf[..bytes.len()].copy_from_slice(&bytes);
                    self.summary.reads += 1;
                    self.summary.bytes_read += bytes.len() as u64;
                    Ok(bytes.len())
                }
                Err(e) => Err(e.to_io()),
            },
            rec => {
                self.mismatch(Some(fd), rec, actual(), Some(READ_HINT));
                Err(io::ErrorKind::WouldBlock.into())
            }
        }
    }

    fn write(&mut self, fd: RawFd, buf: &[u8]) -> io::Result<usize> {
        let len = buf.len() as u64;
        let actual = || format!("a write of {len} bytes on fd{fd}: {}", Shown(buf));
        let Some(rec) = self.take(Some(fd), actual) else {
            return Err(io::ErrorKind::WouldBlock.into());
        };
        match rec {
            Record::Write {
                fd: rf,
                len: rl,
                result,
            } if rf == fd && rl == len => match result {
                Ok(taken) if buf.starts_with(&taken) => {
                    self.summary.writes += 1;
                    self.summary.bytes_written += taken.len() as u64;
                    Ok(taken.len())
                }
                Ok(taken) => {
                    let rec = Record::Write {
                        fd,
                        len,
                        result: Ok(taken),
                    };
                    self.mismatch(Some(fd), rec, actual(), None);
                    Err(io::ErrorKind::WouldBlock.into())
                }
                Err(e) => Err(e.to_io()),
            },
            rec => {
                let hint = match rec {
                    Record::Write { fd: rf, .. } if rf == fd => Some(WRITE_HINT),
                    Record::Read { .. } | Record::Write { .. } => Some(READ_HINT),
                    _ => None,
                };
                self.mismatch(Some(fd), rec, actual(), hint);
                Err(io::ErrorKind::WouldBlock.into())
            }
        }
    }

    /// The completion I/O's unsent bytes on `fd`: the recorded answer if
    /// the trace has one next (the recording's connection was adopted),
    /// else 0 (it was not, or the replay diverged).
    fn unsent(&mut self, fd: RawFd) -> usize {
        if self.diverged.is_some() {
            return 0;
        }
        match self.next() {
            Some(Record::Unsent { fd: rf, n }) if rf == fd => {
                self.summary.records += 1;
                usize::try_from(n).unwrap_or(usize::MAX)
            }
            Some(r) => {
                self.peeked = Some(r);
                0
            }
            None => 0,
        }
    }

    fn accept(&mut self, fd: RawFd) -> io::Result<RawFd> {
        let actual = || format!("an accept on fd{fd}");
        let Some(rec) = self.take(Some(fd), actual) else {
            return Err(io::ErrorKind::WouldBlock.into());
        };
        match rec {
            Record::Accept {
                fd: rf,
                result: Ok(new),
            } if rf == fd && !self.fd_allowed(new as i64) => {
                let rec = Record::Accept {
                    fd,
                    result: Ok(new),
                };
                self.mismatch(Some(fd), rec, actual(), Some(FD_HINT));
                Err(io::ErrorKind::WouldBlock.into())
            }
            Record::Accept { fd: rf, result } if rf == fd => {
                let new = result.map_err(|e| e.to_io())?;
                self.accepts.push((new, fd, self.summary.polls));
                Ok(new)
            }
            rec => {
                self.mismatch(Some(fd), rec, actual(), None);
                Err(io::ErrorKind::WouldBlock.into())
            }
        }
    }
}

impl sink::Outside for Player {
    fn outside(&mut self, fd: RawFd, what: &str, path: &str) {
        if self.diverged.is_some() {
            return;
        }
        let expected = self.expected();
        self.diverge(
            Some(fd),
            expected,
            format!("{what} on the OS fd {fd} through {path}"),
            Some("a replay's sockets are virtual: the program must use the replay's (Replay::socket, Replay::listener), not real ones"),
        );
    }
}

impl Drop for Player {
    fn drop(&mut self) {
        if self.claimed {
            sink::stop_replay();
        }
    }
}

/// A recorded run, replayed: a backend that answers the loop from the
/// trace ([`Replay::backend`]), and sockets that answer the program's
/// reads from it ([`Replay::socket`], [`Replay::listener`]). Everything
/// the program asks of the loop's backend, reads, writes, accepts and
/// half-closes is checked against the trace, in order; the first
/// difference is a [`Divergence`], after which the replay answers nothing
/// more (reads and accepts `WouldBlock`, the next poll fails with it).
/// Cloning gives another handle to the same replay. One replay (or
/// recording) per thread at a time. `docs/replay.md` is the guide.
///
/// ```
/// use evloop::replay::{MemoryTrace, Replay};
/// use evloop::{Loop, RunMode, Sim};
/// use std::time::Duration;
///
/// // The program: a timer that logs the loop's time, twice.
/// fn program(lp: &mut Loop<Vec<Duration>>) -> evloop::Result<()> {
///     lp.timer(Duration::from_millis(3), Duration::from_millis(4), |lp, log, me| {
///         log.push(lp.now());
///         if log.len() == 2 {
///             lp.remove(me).unwrap();
///         }
///     })?;
///     Ok(())
/// }
/// let trace = MemoryTrace::new();
/// let mut recorded = vec![];
/// {
///     let mut lp = Loop::builder().register("sim", || Ok(Box::new(Sim::new().backend())))
///         .backend("sim").record(trace.clone()).build()?;
///     program(&mut lp)?;
///     lp.run(RunMode::Default, &mut recorded)?;
/// }
/// let replay = Replay::from_bytes(trace.bytes())?;
/// let mut replayed = vec![];
/// {
///     let mut lp = Loop::with_backend(replay.backend());
///     program(&mut lp)?;
///     lp.run(RunMode::Default, &mut replayed)?;
/// }
/// assert_eq!(replayed, recorded);
/// assert!(replay.finish()?.complete);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Replay {
    player: Rc<RefCell<Player>>,
}

impl fmt::Debug for Replay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.player.borrow();
        f.debug_struct("Replay")
            .field("recorded_backend", &p.backend)
            .field("summary", &p.summary)
            .field("diverged", &p.diverged.is_some())
            .finish()
    }
}

impl Replay {
    /// A replay of the trace `input` yields (read as the replay goes, in
    /// blocks: a long trace is never held whole). Errors: not a trace, a
    /// version this evloop does not read (both named), or this thread
    /// records or replays already.
    ///
    /// ```
    /// use evloop::replay::Replay;
    /// let err = Replay::from_reader(&b"GET / HTTP/1.1"[..]).unwrap_err();
    /// assert!(err.to_string().contains("not a readable evloop trace"), "{err}");
    /// ```
    pub fn from_reader(input: impl Read + 'static) -> io::Result<Replay> {
        let (dec, backend, caps) = Decoder::new(Box::new(input))?;
        let player = Rc::new(RefCell::new(Player {
            dec,
            backend,
            caps,
            peeked: None,
            end: None,
            callback_fd: None,
            now: Duration::ZERO,
            wall: Duration::ZERO,
            diverged: None,
            summary: ReplaySummary::default(),
            unrecorded: HashSet::new(),
            accepts: Vec::new(),
            claimed: false,
        }));
        sink::start_replay(player.clone())?;
        player.borrow_mut().claimed = true;
        Ok(Replay { player })
    }

    /// A replay of the trace in `bytes`.
    ///
    /// ```
    /// assert!(evloop::replay::Replay::from_bytes(Vec::new()).is_err());
    /// ```
    pub fn from_bytes(bytes: Vec<u8>) -> io::Result<Replay> {
        Replay::from_reader(io::Cursor::new(bytes))
    }

    /// A replay of the trace in the file at `path`.
    ///
    /// ```
    /// let err = evloop::replay::Replay::open("/no/such/trace").unwrap_err();
    /// assert!(err.to_string().contains("/no/such/trace"), "{err}");
    /// ```
    pub fn open(path: impl AsRef<Path>) -> io::Result<Replay> {
        let path = path.as_ref();
        let file = std::fs::File::open(path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot open the trace {}: {e}", path.display()),
            )
        })?;
        Replay::from_reader(file)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
    }

    /// The backend to build the replayed loop on
    /// ([`Loop::with_backend`](crate::Loop::with_backend)). It is called
    /// "replay"; its capabilities are the recorded backend's, with virtual
    /// fds (the program's sockets are the replay's).
    ///
    /// ```
    /// # use evloop::replay::{MemoryTrace, Replay, Recorder};
    /// # let trace = MemoryTrace::new();
    /// # drop(Recorder::new(Box::new(evloop::Sim::new().backend()), trace.clone())?);
    /// let replay = Replay::from_bytes(trace.bytes())?;
    /// let lp: evloop::Loop = evloop::Loop::with_backend(replay.backend());
    /// assert_eq!(lp.backend_name(), "replay");
    /// assert!(lp.capabilities().virtual_fds);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn backend(&self) -> ReplayBackend {
        ReplayBackend {
            player: self.player.clone(),
        }
    }

    /// The socket the program had as fd `fd` when it was recorded (one it
    /// made before the loop, or was handed): its reads return the recorded
    /// bytes, its writes are checked against the recorded ones. Sockets
    /// accepted by a [`net::Acceptor`](crate::net::Acceptor) on a
    /// [`Replay::listener`] come from the replay by themselves.
    ///
    /// ```
    /// # use evloop::replay::{MemoryTrace, Replay, Recorder};
    /// # let trace = MemoryTrace::new();
    /// # drop(Recorder::new(Box::new(evloop::Sim::new().backend()), trace.clone())?);
    /// let replay = Replay::from_bytes(trace.bytes())?;
    /// assert_eq!(replay.socket(7).fd(), 7);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn socket(&self, fd: RawFd) -> ReplaySocket {
        ReplaySocket {
            player: self.player.clone(),
            fd,
        }
    }

    /// The listening socket the program had as fd `fd` when it was
    /// recorded, for a [`net::Acceptor`](crate::net::Acceptor): its
    /// accepts return the recorded connections, as [`ReplaySocket`]s with
    /// the recorded fds.
    ///
    /// ```
    /// # use evloop::replay::{MemoryTrace, Replay, Recorder};
    /// # let trace = MemoryTrace::new();
    /// # drop(Recorder::new(Box::new(evloop::Sim::new().backend()), trace.clone())?);
    /// let replay = Replay::from_bytes(trace.bytes())?;
    /// assert_eq!(replay.listener(5).fd(), 5);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn listener(&self, fd: RawFd) -> ReplayListener {
        ReplayListener {
            player: self.player.clone(),
            fd,
        }
    }

    /// The name of the backend the trace was recorded on.
    ///
    /// ```
    /// # use evloop::replay::{MemoryTrace, Replay, Recorder};
    /// # let trace = MemoryTrace::new();
    /// # drop(Recorder::new(Box::new(evloop::Sim::new().backend()), trace.clone())?);
    /// assert_eq!(Replay::from_bytes(trace.bytes())?.recorded_backend(), "sim");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn recorded_backend(&self) -> String {
        self.player.borrow().backend.clone()
    }

    /// The first divergence, if the replay has diverged.
    ///
    /// ```
    /// # use evloop::replay::{MemoryTrace, Replay, Recorder};
    /// # let trace = MemoryTrace::new();
    /// # drop(Recorder::new(Box::new(evloop::Sim::new().backend()), trace.clone())?);
    /// assert!(Replay::from_bytes(trace.bytes())?.divergence().is_none());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn divergence(&self) -> Option<Divergence> {
        self.player.borrow().diverged.clone()
    }

    /// Ends the replay: what it did, if the program followed the whole
    /// trace; else the divergence: the first one, or, if the program
    /// stopped early, the records it did not reach. Call it once the
    /// replayed loop is dropped (dropping a loop makes calls a recording
    /// has too).
    ///
    /// ```
    /// # use evloop::replay::{MemoryTrace, Replay, Recorder};
    /// # let trace = MemoryTrace::new();
    /// # drop(Recorder::new(Box::new(evloop::Sim::new().backend()), trace.clone())?);
    /// let summary = Replay::from_bytes(trace.bytes())?.finish()?;
    /// assert!(summary.complete && summary.polls == 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn finish(&self) -> Result<ReplaySummary, Divergence> {
        let mut p = self.player.borrow_mut();
        if let Some(d) = &p.diverged {
            return Err(d.clone());
        }
        match p.next() {
            Some(rec) => {
                p.peeked = Some(rec);
                let expected = p.expected();
                p.diverge(
                    None,
                    expected,
                    "nothing more (the replayed program ended before the recording did)"
                        .to_string(),
                    None,
                );
                Err(p.diverged.clone().expect("just set"))
            }
            None => {
                if let Some(TraceEnd::Corrupt(e)) = &p.end {
                    let e = e.clone();
                    p.diverge(
                        None,
                        format!("an unreadable record ({e})"),
                        "nothing more".into(),
                        None,
                    );
                    return Err(p.diverged.clone().expect("just set"));
                }
                let mut s = p.summary.clone();
                s.complete = matches!(p.end, Some(TraceEnd::Clean));
                Ok(s)
            }
        }
    }
}

/// The loop's side of a [`Replay`]: what [`Replay::backend`] returns.
///
/// ```
/// # use evloop::replay::{MemoryTrace, Replay, Recorder};
/// use evloop::backend::Backend;
/// # let trace = MemoryTrace::new();
/// # drop(Recorder::new(Box::new(evloop::Sim::new().backend()), trace.clone())?);
/// let b = Replay::from_bytes(trace.bytes())?.backend();
/// assert_eq!(b.name(), "replay");
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct ReplayBackend {
    player: Rc<RefCell<Player>>,
}

impl fmt::Debug for ReplayBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReplayBackend")
    }
}

/// A waker that does nothing: a replay's wake-ups are in its trace.
struct NoWake;

impl Wake for NoWake {
    fn wake(&self) {}
}

impl Backend for ReplayBackend {
    fn name(&self) -> &'static str {
        "replay"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            virtual_fds: true,
            ..self.player.borrow().caps
        }
    }

    fn modify(&mut self, fd: RawFd, old: Interest, new: Interest) -> io::Result<()> {
        self.player.borrow_mut().modify(Change { fd, old, new })
    }

    fn modify_all(&mut self, changes: &[Change]) -> Result<(), (usize, io::Error)> {
        self.player.borrow_mut().modify_all(changes)
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        self.player.borrow_mut().poll(timeout, events)
    }

    fn now(&mut self) -> Duration {
        self.player.borrow_mut().clock(false)
    }

    fn reinit(&mut self) -> io::Result<()> {
        self.player.borrow_mut().call(tag::REINIT, &[])
    }

    fn notices(&mut self) -> Option<&mut dyn NoticeService> {
        Some(self)
    }
}

impl NoticeService for ReplayBackend {
    fn check_fd(&mut self, fd: RawFd) -> io::Result<()> {
        self.player.borrow_mut().call(tag::CHECK_FD, &[fd as i64])
    }

    fn dispatched(&mut self, fd: RawFd, _ready: Ready) {
        self.player.borrow_mut().callback_fd = Some(fd);
    }

    fn wants_dispatch(&mut self) -> bool {
        true
    }

    fn watch_signal(&mut self, signal: i32, _fds: &mut dyn InternalFds) -> io::Result<()> {
        self.player
            .borrow_mut()
            .call(tag::WATCH_SIGNAL, &[i64::from(signal)])
    }

    fn watch_child(&mut self, pid: u32, _fds: &mut dyn InternalFds) -> io::Result<()> {
        self.player
            .borrow_mut()
            .call(tag::WATCH_CHILD, &[i64::from(pid)])
    }

    fn watch_any_child(&mut self, _fds: &mut dyn InternalFds) -> io::Result<()> {
        self.player.borrow_mut().call(tag::WATCH_ANY_CHILD, &[])
    }

    fn signal_child(&mut self, pid: u32, signal: i32) -> io::Result<()> {
        self.player
            .borrow_mut()
            .call(tag::SIGNAL_CHILD, &[i64::from(pid), i64::from(signal)])
    }

    /// The recorded child's pid, with no pipes: nothing is started.
    fn spawn_child(
        &mut self,
        command: &mut Command,
        _fds: &mut dyn InternalFds,
    ) -> io::Result<Spawned> {
        let program = command.get_program().to_string_lossy().into_owned();
        let pid = self.player.borrow_mut().spawn(program)?;
        Ok(Spawned {
            pid,
            stdin: None,
            stdout: None,
            stderr: None,
        })
    }

    fn waker(&mut self, _fds: &mut dyn InternalFds) -> io::Result<Arc<dyn Wake>> {
        self.player.borrow_mut().call(tag::WAKER, &[])?;
        Ok(Arc::new(NoWake))
    }

    fn take_notices(&mut self, notices: &mut Notices, _fds: &mut dyn InternalFds) {
        self.player.borrow_mut().take_notices(notices);
    }

    /// The recording's answer, not the replayed program's threads'.
    fn async_sent(&mut self, _sent: bool) -> bool {
        self.player.borrow_mut().async_sent()
    }

    /// The recording's sends, not the replayed program's threads'.
    fn async_taken(&mut self, taken: &mut Vec<u32>, active: &dyn Fn(u32) -> bool) {
        self.player.borrow_mut().async_taken(taken, active);
    }

    fn wall_now(&mut self) -> Duration {
        self.player.borrow_mut().clock(true)
    }

    fn watch_clock_steps(&mut self, _fds: &mut dyn InternalFds) -> bool {
        self.player.borrow_mut().clock_steps()
    }

    fn stat(&mut self, path: &Path) -> FileStat {
        self.player
            .borrow_mut()
            .stat(path.to_string_lossy().into_owned())
    }

    fn watch_path(
        &mut self,
        path: &Path,
        token: u64,
        _fds: &mut dyn InternalFds,
    ) -> io::Result<()> {
        self.player
            .borrow_mut()
            .watch_path(path.to_string_lossy().into_owned(), token)
    }
}

/// A socket of a replay ([`Replay::socket`], or accepted from a
/// [`ReplayListener`]): a virtual fd with the recorded number, whose reads
/// return the recorded results and whose writes are checked against the
/// recorded ones. A [`net::Stream`](crate::net::Stream), so that
/// [`net::Conns`](crate::net::Conns) drives it as it drove the real one.
///
/// ```
/// # use evloop::replay::{MemoryTrace, Replay, Recorder};
/// # let trace = MemoryTrace::new();
/// # drop(Recorder::new(Box::new(evloop::Sim::new().backend()), trace.clone())?);
/// use std::io::Read;
/// let replay = Replay::from_bytes(trace.bytes())?;
/// let mut s = replay.socket(9);
/// // The recording has no read on fd 9: a divergence, and no data.
/// assert_eq!(s.read(&mut [0; 4]).unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
/// assert_eq!(replay.divergence().unwrap().fd, Some(9));
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct ReplaySocket {
    player: Rc<RefCell<Player>>,
    fd: RawFd,
}

impl ReplaySocket {
    /// The recorded fd number.
    ///
    /// ```
    /// # use evloop::replay::{MemoryTrace, Replay, Recorder};
    /// # let trace = MemoryTrace::new();
    /// # drop(Recorder::new(Box::new(evloop::Sim::new().backend()), trace.clone())?);
    /// assert_eq!(Replay::from_bytes(trace.bytes())?.socket(4).fd(), 4);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn fd(&self) -> RawFd {
        self.fd
    }
}

impl fmt::Debug for ReplaySocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReplaySocket(fd{})", self.fd)
    }
}

impl Source for ReplaySocket {
    fn source_fd(&self) -> SourceFd<'_> {
        SourceFd::Virtual(VirtualFd::new(self.fd))
    }
}

impl Read for ReplaySocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.player.borrow_mut().read(self.fd, buf)
    }
}

impl Write for ReplaySocket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.player.borrow_mut().write(self.fd, buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl crate::net::Stream for ReplaySocket {
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.player
            .borrow_mut()
            .call(tag::SHUTDOWN, &[self.fd as i64])
    }

    /// The recording's answer (its connection's socket was adopted by
    /// io_uring's completion I/O), else 0.
    fn unsent_completed(&self, _: Option<&dyn crate::backend::CompletionIo>) -> usize {
        self.player.borrow_mut().unsent(self.fd)
    }
}

/// A listening socket of a replay ([`Replay::listener`]): a
/// [`net::Listener`](crate::net::Listener) whose accepts return the
/// recorded connections.
///
/// ```
/// # use evloop::replay::{MemoryTrace, Replay, Recorder};
/// # let trace = MemoryTrace::new();
/// # drop(Recorder::new(Box::new(evloop::Sim::new().backend()), trace.clone())?);
/// let l = Replay::from_bytes(trace.bytes())?.listener(3);
/// assert_eq!(format!("{l:?}"), "ReplayListener(fd3)");
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct ReplayListener {
    player: Rc<RefCell<Player>>,
    fd: RawFd,
}

impl ReplayListener {
    /// The recorded fd number.
    ///
    /// ```
    /// # use evloop::replay::{MemoryTrace, Replay, Recorder};
    /// # let trace = MemoryTrace::new();
    /// # drop(Recorder::new(Box::new(evloop::Sim::new().backend()), trace.clone())?);
    /// assert_eq!(Replay::from_bytes(trace.bytes())?.listener(3).fd(), 3);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn fd(&self) -> RawFd {
        self.fd
    }
}

impl fmt::Debug for ReplayListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReplayListener(fd{})", self.fd)
    }
}

impl Source for ReplayListener {
    fn source_fd(&self) -> SourceFd<'_> {
        SourceFd::Virtual(VirtualFd::new(self.fd))
    }
}

impl crate::net::Listener for ReplayListener {
    type Stream = ReplaySocket;

    /// The address is not recorded: the unspecified one.
    fn prepare(&self) -> io::Result<SocketAddr> {
        Ok(SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    fn accept_stream(&self) -> io::Result<ReplaySocket> {
        let fd = self.player.borrow_mut().accept(self.fd)?;
        Ok(ReplaySocket {
            player: self.player.clone(),
            fd,
        })
    }
}

/// Async sends on the simulator: what the trace holds, exactly, and a
/// replay whose program sends nothing (or sends otherwise) that runs the
/// same callbacks at the same iterations and times.
#[cfg(test)]
mod tests {
    use super::super::format::{Decoder, Record};
    use super::super::{MemoryTrace, Recorder};
    use super::*;
    use crate::{Async, AsyncSender, Loop, Prepare, RunMode, Sim};

    /// How the program sends.
    #[derive(Clone, Copy, PartialEq)]
    enum Sends {
        /// As recorded.
        Recorded,
        /// Never (a replay without its threads).
        None,
        /// To every watcher in every callback.
        Other,
    }

    #[derive(Default)]
    struct St {
        log: Vec<String>,
        senders: Vec<AsyncSender>,
        a_calls: usize,
        armed: bool,
    }

    fn log(lp: &Loop<St>, st: &mut St, what: &str) {
        st.log
            .push(format!("{what} it{} {:?}", lp.iteration(), lp.now()));
    }

    fn other(st: &St, sends: Sends) {
        if sends == Sends::Other {
            for s in &st.senders {
                s.send().unwrap();
            }
        }
    }

    /// Three async watchers (#0 a, #1 b, #2 c). At 5 ms a timer sends to
    /// a twice and b once (a's coalesce); a's first call sends to c and to
    /// a itself (a second call); at 10 ms a thread sends to c (joined);
    /// at 15 ms a timer arms the prepare watcher, which sends to b before
    /// the poll; at 20 ms everything is removed. `watchers` below 3
    /// leaves the last out.
    fn program(lp: &mut Loop<'static, St>, st: &mut St, sends: Sends, watchers: usize) {
        let ms = Duration::from_millis;
        let mut handles = Vec::new();
        for name in ["a", "b", "c"].into_iter().take(watchers) {
            let (w, s) = Async::new(lp, move |lp, st: &mut St, _| {
                log(lp, st, name);
                other(st, sends);
                if name == "a" {
                    st.a_calls += 1;
                    if st.a_calls == 1 && sends == Sends::Recorded {
                        st.senders[2].send().unwrap();
                        st.senders[0].send().unwrap();
                    }
                }
            })
            .unwrap();
            handles.push(w);
            st.senders.push(s);
        }
        lp.timer(ms(5), Duration::ZERO, move |lp, st, _| {
            log(lp, st, "t5");
            other(st, sends);
            if sends == Sends::Recorded {
                st.senders[0].send().unwrap();
                st.senders[0].send().unwrap();
                st.senders[1].send().unwrap();
            }
        })
        .unwrap();
        lp.timer(ms(10), Duration::ZERO, move |lp, st, _| {
            log(lp, st, "t10");
            if sends == Sends::Recorded {
                let c = st.senders[2].clone();
                std::thread::spawn(move || c.send().unwrap())
                    .join()
                    .unwrap();
            }
        })
        .unwrap();
        lp.timer(ms(15), Duration::ZERO, |lp, st, _| {
            log(lp, st, "t15");
            st.armed = true;
        })
        .unwrap();
        let prepare = Prepare::new(lp, move |_, st, _| {
            if st.armed {
                st.armed = false;
                if sends == Sends::Recorded {
                    st.senders[1].send().unwrap();
                }
            }
            other(st, sends);
        })
        .unwrap();
        lp.timer(ms(20), Duration::ZERO, move |lp, st, _| {
            log(lp, st, "t20");
            for &w in &handles {
                lp.remove(w).unwrap();
            }
            lp.remove(prepare).unwrap();
        })
        .unwrap();
    }

    fn record() -> (MemoryTrace, Vec<String>) {
        let trace = MemoryTrace::new();
        let mut st = St::default();
        {
            let rec = Recorder::new(Box::new(Sim::new().backend()), trace.clone()).unwrap();
            let mut lp = Loop::with_backend(rec);
            program(&mut lp, &mut st, Sends::Recorded, 3);
            lp.run(RunMode::Default, &mut st).unwrap();
        }
        (trace, st.log)
    }

    fn replay(trace: &MemoryTrace, sends: Sends, watchers: usize) -> (Vec<String>, Replay) {
        let replay = Replay::from_bytes(trace.bytes()).unwrap();
        let mut st = St::default();
        {
            let mut lp = Loop::with_backend(replay.backend());
            program(&mut lp, &mut st, sends, watchers);
            let _ = lp.run(RunMode::Default, &mut st);
        }
        (st.log, replay)
    }

    #[test]
    #[cfg_attr(target_os = "wasi", ignore = "a WASI guest has one thread")]
    fn async_sends_are_recorded_in_order_and_replayed_without_the_senders() {
        let (trace, recorded) = record();
        assert_eq!(
            recorded,
            [
                "t5 it1 5ms",
                "a it2 5ms", // a's two sends coalesced; then b, in start order
                "b it2 5ms",
                "a it3 5ms", // a's send to itself during its call, and c's
                "c it3 5ms",
                "t10 it4 10ms",
                "c it5 10ms",
                "t15 it6 15ms",
                "b it7 15ms", // the prepare watcher's send, before the poll
                "t20 it8 20ms",
            ]
        );
        // The trace's async records: a send seen before each poll that
        // then did not block, and the watchers taken after it.
        let (mut dec, _, _) = Decoder::new(Box::new(io::Cursor::new(trace.bytes()))).unwrap();
        let mut sends = Vec::new();
        while let Some(r) = dec.next().unwrap() {
            if matches!(r, Record::SentBeforePoll | Record::SendsTaken(_)) {
                sends.push(r);
            }
        }
        let taken = |l: &[u32]| Record::SendsTaken(l.to_vec());
        assert_eq!(
            sends,
            [
                Record::SentBeforePoll,
                taken(&[0, 1]),
                Record::SentBeforePoll,
                taken(&[0, 2]),
                Record::SentBeforePoll,
                taken(&[2]),
                Record::SentBeforePoll,
                taken(&[1]),
            ]
        );
        for sends in [Sends::None, Sends::Other, Sends::Recorded] {
            let (log, replay) = replay(&trace, sends, 3);
            assert_eq!(log, recorded);
            let summary = replay.finish().unwrap();
            assert!(summary.complete, "{summary:?}");
        }
    }

    #[test]
    #[cfg_attr(target_os = "wasi", ignore = "a WASI guest has one thread")]
    fn a_recorded_send_to_a_watcher_the_program_lacks_is_a_divergence() {
        let (trace, _) = record();
        let (_, replay) = replay(&trace, Sends::None, 2);
        let d = replay.finish().unwrap_err();
        assert_eq!(d.iteration, 3, "{d}");
        assert!(d.expected.contains("[#0, #2]"), "{d}");
        assert!(
            d.actual.contains("no active async watcher numbered #2"),
            "{d}"
        );
        assert!(
            d.hint
                .unwrap()
                .contains("in the order the loop first started them"),
            "{d}"
        );
    }
}
