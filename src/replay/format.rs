//! The trace's binary format (described in the module documentation of
//! [`crate::replay`]): encoding from borrowed data on the recorder's hot
//! path, decoding into [`Record`]s for the replay.

use std::fmt;
use std::io::{self, BufReader, Read, Write};
use std::time::{Duration, SystemTime};

use crate::backend::{
    Capabilities, Change, ChildExit, ClosedFd, Hangup, Level, Notices, PollEvent, PollStatus,
    SignalSet,
};
use crate::{ExitStatus, FileStat, Interest, RawFd, Ready};

/// The first bytes of every trace.
pub(crate) const MAGIC: &[u8; 8] = b"EVLOOPRC";
/// The format's version, after the magic (two bytes, little-endian).
pub(crate) const VERSION: u16 = 1;

/// The records' tags (the first byte of each record).
pub(crate) mod tag {
    pub const BEGIN: u8 = 1;
    pub const POLL: u8 = 2;
    pub const NOW: u8 = 3;
    pub const WALL: u8 = 4;
    pub const MODIFY: u8 = 5;
    pub const MODIFY_ALL: u8 = 6;
    pub const CHECK_FD: u8 = 7;
    pub const NOTICES: u8 = 8;
    pub const WATCH_SIGNAL: u8 = 9;
    pub const WATCH_CHILD: u8 = 10;
    pub const WATCH_ANY_CHILD: u8 = 11;
    pub const SIGNAL_CHILD: u8 = 12;
    pub const SPAWN: u8 = 13;
    pub const WAKER: u8 = 14;
    pub const WATCH_CLOCK_STEPS: u8 = 15;
    pub const STAT: u8 = 16;
    pub const WATCH_PATH: u8 = 17;
    pub const REINIT: u8 = 18;
    pub const ASYNC: u8 = 19;
    pub const UNRECORDED: u8 = 20;
    pub const UNSENT: u8 = 21;
    pub const READ: u8 = 32;
    pub const WRITE: u8 = 33;
    pub const ACCEPT: u8 = 34;
    pub const SHUTDOWN: u8 = 35;
    pub const END: u8 = 0xFF;
}

/// The buffer is handed to the writer once it holds this much: the
/// recording's memory is bounded by it (plus one record).
const FLUSH_AT: usize = 64 * 1024;

/// The io error kinds a trace names by number (any other is `Other`, its
/// name kept in the message). OS errors are kept by their number.
const KINDS: [io::ErrorKind; 20] = [
    io::ErrorKind::Other,
    io::ErrorKind::NotFound,
    io::ErrorKind::PermissionDenied,
    io::ErrorKind::ConnectionRefused,
    io::ErrorKind::ConnectionReset,
    io::ErrorKind::ConnectionAborted,
    io::ErrorKind::NotConnected,
    io::ErrorKind::AddrInUse,
    io::ErrorKind::AddrNotAvailable,
    io::ErrorKind::BrokenPipe,
    io::ErrorKind::AlreadyExists,
    io::ErrorKind::WouldBlock,
    io::ErrorKind::InvalidInput,
    io::ErrorKind::InvalidData,
    io::ErrorKind::TimedOut,
    io::ErrorKind::WriteZero,
    io::ErrorKind::Interrupted,
    io::ErrorKind::Unsupported,
    io::ErrorKind::UnexpectedEof,
    io::ErrorKind::OutOfMemory,
];

/// Writes records into a block and the block to the trace's writer. The
/// records on the hot path (a small read or write, a clock reading, a
/// poll's results) are written straight into the block; the others are
/// built in `buf` and copied.
pub(crate) struct Encoder {
    /// The record being built (the records off the hot path).
    buf: Vec<u8>,
    /// The block: `block[..pos]` is waiting for the writer.
    block: Box<[u8]>,
    pos: usize,
    out: Box<dyn Write>,
    /// A write to `out` failed: nothing more is recorded, and the
    /// recorder's next poll reports it (once).
    failed: Option<io::Error>,
    dead: bool,
}

/// The most a small record written straight into the block may take.
const SMALL: usize = 96;

/// Data up to this size is recorded on the hot path.
const SMALL_DATA: usize = 64;

impl Encoder {
    /// An encoder writing to `out`; the header (magic, version) and the
    /// `Begin` record are buffered at once.
    pub(crate) fn new(out: Box<dyn Write>, backend: &str, caps: Capabilities) -> Encoder {
        let mut e = Encoder {
            buf: Vec::with_capacity(256),
            block: vec![0u8; FLUSH_AT].into_boxed_slice(),
            pos: 0,
            out,
            failed: None,
            dead: false,
        };
        e.block[..8].copy_from_slice(MAGIC);
        e.block[8..10].copy_from_slice(&VERSION.to_le_bytes());
        e.pos = 10;
        let at = e.open(tag::BEGIN);
        e.str(backend);
        e.caps(caps);
        e.close(at);
        e
    }

    /// Whether nothing more is recorded (a write failed).
    #[inline]
    pub(crate) fn is_dead(&self) -> bool {
        self.dead
    }

    /// The write error that stopped the recording, once.
    pub(crate) fn take_failure(&mut self) -> Option<io::Error> {
        self.failed.take()
    }

    /// Hands what is buffered to the writer, and flushes it.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        if self.dead {
            return Err(io::Error::other(
                "the recording stopped after a write error",
            ));
        }
        let r = self.write_block().and_then(|()| self.out.flush());
        self.failed_if(&r);
        r
    }

    /// Hands the block to the writer.
    #[cold]
    fn write_block(&mut self) -> io::Result<()> {
        let r = self.out.write_all(&self.block[..self.pos]);
        self.pos = 0;
        r
    }

    fn failed_if(&mut self, r: &io::Result<()>) {
        if let Err(e) = r {
            if !self.dead {
                self.dead = true;
                self.failed = Some(io::Error::new(e.kind(), e.to_string()));
            }
        }
    }

    /// Room for `n` bytes in the block (the block is written out first if
    /// it has less); false if the recording is dead.
    #[inline]
    fn room(&mut self, n: usize) -> bool {
        if self.pos + n > self.block.len() {
            let r = self.write_block();
            self.failed_if(&r);
        }
        !self.dead
    }

    /// The `End` record, then a flush: what a complete trace ends with.
    pub(crate) fn finish(&mut self) -> io::Result<()> {
        if !self.dead {
            let at = self.open(tag::END);
            self.close(at);
        }
        self.flush()
    }

    // --- record framing: tag, length (varint), payload ---

    /// Starts building a record off the hot path.
    fn open(&mut self, tag: u8) -> usize {
        self.buf.clear();
        self.buf.push(tag);
        self.buf.push(0);
        self.buf.len()
    }

    /// Ends the record being built, and puts it in the block.
    fn close(&mut self, start: usize) {
        let len = self.buf.len() - start;
        if len < 0x80 {
            self.buf[start - 1] = len as u8;
        } else {
            self.long_length(start, len);
        }
        let n = self.buf.len();
        if n > self.block.len() {
            // Larger than a block: written out on its own.
            let r = self.write_block();
            let r = r.and_then(|()| self.out.write_all(&self.buf));
            self.failed_if(&r);
        } else if self.room(n) {
            self.block[self.pos..self.pos + n].copy_from_slice(&self.buf);
            self.pos += n;
        }
    }

    /// A payload of 128 bytes or more: its length takes more than the one
    /// byte set aside.
    #[cold]
    fn long_length(&mut self, start: usize, len: usize) {
        let mut tmp = [0u8; 10];
        let n = put_varint(&mut tmp, 0, len as u64);
        self.buf[start - 1] = tmp[0];
        self.buf.splice(start..start, tmp[1..n].iter().copied());
    }

    // --- fields ---

    #[inline]
    fn u(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    #[inline]
    fn i(&mut self, v: i64) {
        self.u(zigzag(v));
    }

    #[inline]
    fn fd(&mut self, fd: RawFd) {
        self.i(fd as i64);
    }

    fn bytes(&mut self, b: &[u8]) {
        self.u(b.len() as u64);
        self.buf.extend_from_slice(b);
    }

    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    fn dur(&mut self, d: Duration) {
        self.u(d.as_secs());
        self.u(u64::from(d.subsec_nanos()));
    }

    fn err(&mut self, e: &io::Error) {
        match e.raw_os_error() {
            Some(code) => {
                self.buf.push(0);
                self.i(i64::from(code));
            }
            None => {
                self.buf.push(1);
                let kind = e.kind();
                let code = KINDS.iter().position(|&k| k == kind).unwrap_or(0);
                self.buf.push(code as u8);
                if code == 0 && kind != io::ErrorKind::Other {
                    self.str(&format!("{kind:?}: {e}"));
                } else {
                    self.str(&e.to_string());
                }
            }
        }
    }

    fn unit_result(&mut self, r: &io::Result<()>) {
        self.result(r.as_ref(), |_, ()| {});
    }

    /// A result: 0 then what `ok` writes of the value, or 1 then the error.
    fn result<T>(&mut self, r: Result<T, &io::Error>, ok: impl FnOnce(&mut Self, T)) {
        match r {
            Ok(v) => {
                self.buf.push(0);
                ok(self, v);
            }
            Err(e) => {
                self.buf.push(1);
                self.err(e);
            }
        }
    }

    fn caps(&mut self, c: Capabilities) {
        let flags = u8::from(c.edge)
            | u8::from(c.oneshot) << 1
            | u8::from(c.virtual_fds) << 2
            | u8::from(c.max_fd.is_some()) << 3;
        self.buf.push(flags);
        if let Some(m) = c.max_fd {
            self.fd(m);
        }
        self.buf.push(match c.hangup {
            Hangup::Always => 0,
            Hangup::Never => 1,
            Hangup::AsOfWakeup => 2,
        });
        self.buf.push(match c.closed_fd {
            ClosedFd::AtNextWait => 0,
            ClosedFd::ModifyFails => 1,
            ClosedFd::InvalidAfterChange => 2,
        });
        self.buf.push(match c.level {
            Level::Native => 0,
            Level::Rearmed => 1,
        });
    }

    fn stat_fields(&mut self, s: &FileStat) {
        self.buf.push(u8::from(s.exists));
        self.u(s.size);
        match s.modified.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(d) => {
                self.buf.push(0);
                self.dur(d);
            }
            Err(before) => {
                self.buf.push(1);
                self.dur(before.duration());
            }
        }
        self.u(s.inode);
        self.u(s.device);
        self.u(s.links);
        self.u(u64::from(s.mode));
    }

    // --- records ---

    /// A poll: its timeout, then its result and the events it appended.
    /// Written straight into the block, with its length as a padded
    /// three-byte varint (a record of up to 2 MiB), unless it is larger
    /// than a block.
    pub(crate) fn poll(
        &mut self,
        timeout: Option<Duration>,
        r: &io::Result<PollStatus>,
        events: &[PollEvent],
    ) {
        let (status, n) = match r {
            Ok(PollStatus::Done) => (0u8, events.len()),
            Ok(PollStatus::Stalled) => (1, events.len()),
            Err(_) => return self.poll_slow(timeout, r, events),
        };
        // tag, length (3), timeout (1 + 10 + 5), status, count (10), and
        // (fd (up to 10), ready) per event.
        let most = 30 + 11 * n;
        if most > self.block.len() / 2 || !self.room(most) {
            return self.poll_slow(timeout, r, events);
        }
        let dst = &mut self.block[self.pos..self.pos + most];
        dst[0] = tag::POLL;
        let mut k = 4;
        match timeout {
            None => {
                dst[k] = 0;
                k += 1;
            }
            Some(t) => {
                dst[k] = 1;
                k = put_varint(dst, k + 1, t.as_secs());
                k = put_varint(dst, k, u64::from(t.subsec_nanos()));
            }
        }
        dst[k] = status;
        k = put_varint(dst, k + 1, n as u64);
        for e in events {
            let z = zigzag(e.fd as i64);
            if z < 1 << 14 {
                // A padded two-byte varint: no loop.
                dst[k] = z as u8 | 0x80;
                dst[k + 1] = (z >> 7) as u8;
                dst[k + 2] = e.ready.bits();
                k += 3;
            } else {
                k = put_varint(dst, k, z);
                dst[k] = e.ready.bits();
                k += 1;
            }
        }
        let len = k - 4;
        dst[1] = len as u8 | 0x80;
        dst[2] = (len >> 7) as u8 | 0x80;
        dst[3] = (len >> 14) as u8;
        self.pos += k;
    }

    #[cold]
    fn poll_slow(
        &mut self,
        timeout: Option<Duration>,
        r: &io::Result<PollStatus>,
        events: &[PollEvent],
    ) {
        let at = self.open(tag::POLL);
        match timeout {
            None => self.buf.push(0),
            Some(t) => {
                self.buf.push(1);
                self.dur(t);
            }
        }
        match r {
            Ok(status) => {
                self.buf.push(match status {
                    PollStatus::Done => 0,
                    PollStatus::Stalled => 1,
                });
                self.u(events.len() as u64);
                for e in events {
                    self.fd(e.fd);
                    self.buf.push(e.ready.bits());
                }
            }
            Err(e) => {
                self.buf.push(2);
                self.err(e);
            }
        }
        self.close(at);
    }

    /// A clock reading (`NOW` or `WALL`).
    #[inline]
    pub(crate) fn clock(&mut self, tag: u8, d: Duration) {
        if !self.room(20) {
            return;
        }
        let dst = &mut self.block[self.pos..self.pos + 20];
        dst[0] = tag;
        let k = put_varint(dst, 2, d.as_secs());
        let k = put_varint(dst, k, u64::from(d.subsec_nanos()));
        dst[1] = (k - 2) as u8;
        self.pos += k;
    }

    pub(crate) fn modify(&mut self, c: Change, r: &io::Result<()>) {
        let at = self.open(tag::MODIFY);
        self.change(c);
        self.unit_result(r);
        self.close(at);
    }

    fn change(&mut self, c: Change) {
        self.fd(c.fd);
        self.buf.push(c.old.bits());
        self.buf.push(c.new.bits());
    }

    pub(crate) fn modify_all(&mut self, changes: &[Change], r: &Result<(), (usize, io::Error)>) {
        let at = self.open(tag::MODIFY_ALL);
        self.u(changes.len() as u64);
        for &c in changes {
            self.change(c);
        }
        match r {
            Ok(()) => self.buf.push(0),
            Err((i, e)) => {
                self.buf.push(1);
                self.u(*i as u64);
                self.err(e);
            }
        }
        self.close(at);
    }

    /// A call with integer arguments and a unit result: `CHECK_FD`,
    /// `WATCH_SIGNAL`, `WATCH_CHILD`, `WATCH_ANY_CHILD`, `SIGNAL_CHILD`,
    /// `WAKER`, `REINIT`, `SHUTDOWN`.
    pub(crate) fn call(&mut self, tag: u8, args: &[i64], r: &io::Result<()>) {
        let at = self.open(tag);
        for &a in args {
            self.i(a);
        }
        self.unit_result(r);
        self.close(at);
    }

    /// The completion I/O's unsent bytes on `fd`, as a connection's
    /// close asked.
    pub(crate) fn unsent(&mut self, fd: RawFd, n: u64) {
        let at = self.open(tag::UNSENT);
        self.fd(fd);
        self.u(n);
        self.close(at);
    }

    /// A note: `fd` is watched without the recording layer, so what is
    /// read from it is not in the trace.
    pub(crate) fn unrecorded(&mut self, fd: RawFd) {
        let at = self.open(tag::UNRECORDED);
        self.fd(fd);
        self.close(at);
    }

    pub(crate) fn notices(&mut self, n: &Notices) {
        let at = self.open(tag::NOTICES);
        self.u(n.signals.bits());
        let flags = u8::from(n.woken) | u8::from(n.clock_stepped) << 1;
        self.buf.push(flags);
        self.u(n.exits.len() as u64);
        for e in &n.exits {
            self.u(u64::from(e.pid));
            match e.status {
                ExitStatus::Exited(code) => {
                    self.buf.push(0);
                    self.i(i64::from(code));
                }
                ExitStatus::Signaled {
                    signal,
                    core_dumped,
                } => {
                    self.buf.push(if core_dumped { 2 } else { 1 });
                    self.i(i64::from(signal));
                }
                ExitStatus::Unknown => self.buf.push(3),
            }
        }
        self.u(n.paths.len() as u64);
        for &p in &n.paths {
            self.u(p);
        }
        self.close(at);
    }

    /// Async sends the loop acted on: seen before a poll (`None`: the
    /// poll does not block), or taken after it (the watchers' numbers, in
    /// the order they are queued).
    pub(crate) fn async_sends(&mut self, taken: Option<&[u32]>) {
        let at = self.open(tag::ASYNC);
        match taken {
            None => self.buf.push(0),
            Some(list) => {
                self.buf.push(1);
                self.u(list.len() as u64);
                for &n in list {
                    self.u(u64::from(n));
                }
            }
        }
        self.close(at);
    }

    pub(crate) fn spawn(&mut self, program: &str, r: &io::Result<u32>) {
        let at = self.open(tag::SPAWN);
        self.str(program);
        self.result(r.as_ref(), |w, pid| w.u(u64::from(*pid)));
        self.close(at);
    }

    pub(crate) fn flag(&mut self, tag: u8, on: bool) {
        let at = self.open(tag);
        self.buf.push(u8::from(on));
        self.close(at);
    }

    pub(crate) fn stat(&mut self, path: &str, s: &FileStat) {
        let at = self.open(tag::STAT);
        self.str(path);
        self.stat_fields(s);
        self.close(at);
    }

    pub(crate) fn watch_path(&mut self, path: &str, token: u64, r: &io::Result<()>) {
        let at = self.open(tag::WATCH_PATH);
        self.str(path);
        self.u(token);
        self.unit_result(r);
        self.close(at);
    }

    /// A read or a write (`READ`, `WRITE`) of `len` bytes asked for on
    /// `fd`: its result, and the bytes that moved (`data`). Small ones
    /// (what a callback moving a few bytes per event makes) are written
    /// straight into the block.
    #[inline(always)]
    pub(crate) fn transfer(
        &mut self,
        tag: u8,
        fd: RawFd,
        len: usize,
        r: Result<usize, &io::Error>,
        data: &[u8],
    ) {
        let n = data.len();
        let zfd = zigzag(fd as i64);
        // The common case in a fixed layout (padded two-byte varints for
        // the fd and the length asked for), so that every offset is
        // known: tag, length, fd (2), asked (2), 0 (ok), count, data.
        if r.is_err()
            || n > SMALL_DATA
            || zfd >= 1 << 14
            || len >= 1 << 14
            || self.pos + SMALL > self.block.len()
        {
            return self.transfer_slow(tag, fd, len, r, data);
        }
        let Some(dst) = self.block.get_mut(self.pos..self.pos + SMALL) else {
            return;
        };
        dst[0] = tag;
        dst[1] = (6 + n) as u8;
        dst[2] = zfd as u8 | 0x80;
        dst[3] = (zfd >> 7) as u8;
        dst[4] = len as u8 | 0x80;
        dst[5] = (len >> 7) as u8;
        dst[6] = 0;
        dst[7] = n as u8;
        match data {
            [] => {}
            [b] => dst[8] = *b,
            _ => dst[8..8 + n].copy_from_slice(data),
        }
        self.pos += 8 + n;
    }

    #[cold]
    fn transfer_slow(
        &mut self,
        tag: u8,
        fd: RawFd,
        len: usize,
        r: Result<usize, &io::Error>,
        data: &[u8],
    ) {
        if self.dead {
            return;
        }
        let at = self.open(tag);
        self.fd(fd);
        self.u(len as u64);
        self.result(r, |w, _| w.bytes(data));
        self.close(at);
    }

    pub(crate) fn accept(&mut self, listener: RawFd, r: Result<RawFd, &io::Error>) {
        let at = self.open(tag::ACCEPT);
        self.fd(listener);
        self.result(r, Self::fd);
        self.close(at);
    }
}

/// Writes `v` as a varint into `dst` at `k`; where it ends.
#[inline]
fn put_varint(dst: &mut [u8], mut k: usize, mut v: u64) -> usize {
    while v >= 0x80 {
        dst[k] = v as u8 | 0x80;
        v >>= 7;
        k += 1;
    }
    dst[k] = v as u8;
    k + 1
}

#[inline]
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// An io error as a trace keeps it: an OS error number, or a kind and a
/// message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IoErr {
    Os(i32),
    Kind(io::ErrorKind, String),
}

impl IoErr {
    pub(crate) fn to_io(&self) -> io::Error {
        match self {
            IoErr::Os(code) => io::Error::from_raw_os_error(*code),
            IoErr::Kind(kind, msg) => io::Error::new(*kind, msg.clone()),
        }
    }
}

impl fmt::Display for IoErr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_io())
    }
}

/// One decoded record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Record {
    Begin {
        backend: String,
        caps: Capabilities,
    },
    Poll {
        timeout: Option<Duration>,
        result: Result<(PollStatus, Vec<PollEvent>), IoErr>,
    },
    Now(Duration),
    Wall(Duration),
    Modify {
        change: Change,
        result: Result<(), IoErr>,
    },
    ModifyAll {
        changes: Vec<Change>,
        result: Result<(), (usize, IoErr)>,
    },
    /// A call with integer arguments and a unit result, by tag.
    Call {
        tag: u8,
        args: Vec<i64>,
        result: Result<(), IoErr>,
    },
    Notices(NoticesRec),
    Spawn {
        program: String,
        result: Result<u32, IoErr>,
    },
    ClockSteps(bool),
    /// Async sends seen before a poll: it did not block.
    SentBeforePoll,
    /// Async sends taken after a poll: the watchers' numbers, in the
    /// order they were queued.
    SendsTaken(Vec<u32>),
    Stat {
        path: String,
        stat: FileStat,
    },
    WatchPath {
        path: String,
        token: u64,
        result: Result<(), IoErr>,
    },
    Read {
        fd: RawFd,
        len: u64,
        result: Result<Vec<u8>, IoErr>,
    },
    Write {
        fd: RawFd,
        len: u64,
        result: Result<Vec<u8>, IoErr>,
    },
    Accept {
        fd: RawFd,
        result: Result<RawFd, IoErr>,
    },
    /// A note, not a call: the fd was watched without the recording
    /// layer (its reads are not recorded).
    Unrecorded(RawFd),
    /// The completion I/O's unsent bytes on an adopted stream, as a
    /// connection's close asked.
    Unsent {
        fd: RawFd,
        n: u64,
    },
    End,
}

/// What one `take_notices` call added.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct NoticesRec {
    pub signals: SignalSet,
    pub woken: bool,
    pub clock_stepped: bool,
    pub exits: Vec<ChildExit>,
    pub paths: Vec<u64>,
}

/// How many integer arguments a `Call` record of this tag has.
fn call_args(tag: u8) -> Option<usize> {
    Some(match tag {
        tag::WATCH_ANY_CHILD | tag::WAKER | tag::REINIT => 0,
        tag::CHECK_FD | tag::WATCH_SIGNAL | tag::WATCH_CHILD | tag::SHUTDOWN => 1,
        tag::SIGNAL_CHILD => 2,
        _ => return None,
    })
}

/// The name of a `Call` record's call.
pub(crate) fn call_name(tag: u8) -> &'static str {
    match tag {
        tag::CHECK_FD => "check_fd",
        tag::WATCH_SIGNAL => "watch_signal",
        tag::WATCH_CHILD => "watch_child",
        tag::WATCH_ANY_CHILD => "watch_any_child",
        tag::SIGNAL_CHILD => "signal_child",
        tag::WAKER => "waker",
        tag::REINIT => "reinit",
        tag::SHUTDOWN => "shutdown_write",
        _ => "an unknown call",
    }
}

/// Up to 48 bytes, escaped, and the count of the rest.
pub(crate) struct Shown<'a>(pub &'a [u8]);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX: usize = 48;
        f.write_str("\"")?;
        for &b in self.0.iter().take(MAX) {
            write!(f, "{}", std::ascii::escape_default(b))?;
        }
        f.write_str("\"")?;
        if self.0.len() > MAX {
            write!(f, " (and {} more bytes)", self.0.len() - MAX)?;
        }
        Ok(())
    }
}

fn show_result<T>(
    f: &mut fmt::Formatter<'_>,
    r: &Result<T, IoErr>,
    ok: impl FnOnce(&mut fmt::Formatter<'_>, &T) -> fmt::Result,
) -> fmt::Result {
    match r {
        Ok(v) => ok(f, v),
        Err(e) => write!(f, "error ({e})"),
    }
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Record::Begin { backend, .. } => write!(f, "the start of a recording on {backend}"),
            Record::Poll { timeout, result } => {
                write!(f, "poll(timeout {timeout:?}) -> ")?;
                match result {
                    Ok((status, events)) => {
                        write!(f, "{status:?} {{")?;
                        for (i, e) in events.iter().enumerate() {
                            if i > 0 {
                                f.write_str(", ")?;
                            }
                            write!(f, "fd{}:{}", e.fd, e.ready)?;
                        }
                        f.write_str("}")
                    }
                    Err(e) => write!(f, "error ({e})"),
                }
            }
            Record::Now(d) => write!(f, "now() -> {d:?}"),
            Record::Wall(d) => write!(f, "wall_now() -> {d:?}"),
            Record::Modify { change, result } => {
                write!(
                    f,
                    "modify(fd{}, {} => {}) -> ",
                    change.fd, change.old, change.new
                )?;
                show_result(f, result, |f, _| f.write_str("ok"))
            }
            Record::ModifyAll { changes, result } => {
                f.write_str("modify_all[")?;
                for (i, c) in changes.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "fd{} {} => {}", c.fd, c.old, c.new)?;
                }
                f.write_str("] -> ")?;
                match result {
                    Ok(()) => f.write_str("ok"),
                    Err((i, e)) => write!(f, "change {i} failed ({e})"),
                }
            }
            Record::Call { tag, args, result } => {
                write!(f, "{}(", call_name(*tag))?;
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    if i == 0 && matches!(*tag, tag::CHECK_FD | tag::SHUTDOWN) {
                        write!(f, "fd{a}")?;
                    } else {
                        write!(f, "{a}")?;
                    }
                }
                f.write_str(") -> ")?;
                show_result(f, result, |f, _| f.write_str("ok"))
            }
            Record::Notices(n) => {
                write!(
                    f,
                    "take_notices() -> signals {:?}, exits {:?}, woken {}, clock stepped {}, paths {:?}",
                    n.signals.iter().collect::<Vec<_>>(),
                    n.exits,
                    n.woken,
                    n.clock_stepped,
                    n.paths
                )
            }
            Record::Spawn { program, result } => {
                write!(f, "spawn_child({program}) -> ")?;
                show_result(f, result, |f, pid| write!(f, "pid {pid}"))
            }
            Record::ClockSteps(on) => write!(f, "watch_clock_steps() -> {on}"),
            Record::SentBeforePoll => {
                f.write_str("an async send seen before the poll (which then does not block)")
            }
            Record::SendsTaken(list) => {
                f.write_str("async sends taken for the watchers numbered [")?;
                for (i, n) in list.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "#{n}")?;
                }
                f.write_str("]")
            }
            Record::Stat { path, .. } => write!(f, "stat({path})"),
            Record::WatchPath {
                path,
                token,
                result,
            } => {
                write!(f, "watch_path({path}, {token}) -> ")?;
                show_result(f, result, |f, _| f.write_str("ok"))
            }
            Record::Read { fd, len, result } => {
                write!(f, "a read of up to {len} bytes on fd{fd} -> ")?;
                show_result(f, result, |f, b| {
                    write!(f, "{} bytes {}", b.len(), Shown(b))
                })
            }
            Record::Write { fd, len, result } => {
                write!(f, "a write of {len} bytes on fd{fd} -> ")?;
                show_result(f, result, |f, b| {
                    write!(f, "{} bytes taken, {}", b.len(), Shown(b))
                })
            }
            Record::Accept { fd, result } => {
                write!(f, "an accept on fd{fd} -> ")?;
                show_result(f, result, |f, new| write!(f, "fd{new}"))
            }
            Record::Unrecorded(fd) => write!(
                f,
                "a note that fd{fd} was watched without the recording layer"
            ),
            Record::Unsent { fd, n } => {
                write!(f, "the completion I/O's unsent bytes on fd{fd} -> {n}")
            }
            Record::End => f.write_str("the end of the recording"),
        }
    }
}

/// The longest record a trace may hold.
const MAX_RECORD: usize = 1 << 30;

/// Reads records back from a trace.
pub(crate) struct Decoder {
    input: BufReader<Box<dyn Read>>,
    payload: Vec<u8>,
    /// The bytes of the trace decoded so far (the header and whole
    /// records): what the replay's allocations are bounded by.
    consumed: u64,
}

fn corrupt(what: impl fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("not a readable evloop trace: {what}"),
    )
}

impl Decoder {
    /// Reads the header and the `Begin` record: the recorded backend's
    /// name and capabilities.
    pub(crate) fn new(input: Box<dyn Read>) -> io::Result<(Decoder, String, Capabilities)> {
        let mut d = Decoder {
            input: BufReader::with_capacity(64 * 1024, input),
            payload: Vec::new(),
            consumed: 10,
        };
        let mut head = [0u8; 10];
        d.input.read_exact(&mut head).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                corrupt("shorter than its header (the magic and the version)")
            } else {
                e
            }
        })?;
        if &head[..8] != MAGIC {
            return Err(corrupt(format!(
                "the magic is {}, not {}",
                Shown(&head[..8]),
                Shown(MAGIC)
            )));
        }
        let version = u16::from_le_bytes([head[8], head[9]]);
        if version != VERSION {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "an evloop trace of format version {version}: this evloop reads version {VERSION} only"
                ),
            ));
        }
        match d.next()? {
            Some(Record::Begin { backend, caps }) => Ok((d, backend, caps)),
            Some(other) => Err(corrupt(format!(
                "it starts with {other}, not a Begin record"
            ))),
            None => Err(corrupt("it ends after its header")),
        }
    }

    /// The next record; `None` at the end of the input (a trace cut off:
    /// a complete one ends with [`Record::End`]).
    pub(crate) fn next(&mut self) -> io::Result<Option<Record>> {
        let mut t = [0u8];
        // A loop, not a retry by recursion: a reader may be interrupted
        // any number of times in a row.
        loop {
            match self.input.read(&mut t) {
                Ok(0) => return Ok(None),
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let len = self.read_varint()?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= MAX_RECORD)
            .ok_or_else(|| corrupt(format!("a record of {len} bytes")))?;
        if !self.read_payload(len)? {
            // Cut off inside the record: as cut off before it.
            return Ok(None);
        }
        // The tag, the length's varint (at least one byte), the payload.
        self.consumed = self.consumed.saturating_add(2 + len as u64);
        let mut c = Cursor {
            b: &self.payload,
            pos: 0,
        };
        let r = c.record(t[0])?;
        if c.pos != c.b.len() {
            return Err(corrupt(format!(
                "a record (tag {}) of {} bytes has {} bytes left over",
                t[0],
                c.b.len(),
                c.b.len() - c.pos
            )));
        }
        Ok(Some(r))
    }

    /// The bytes of the trace decoded so far.
    pub(crate) fn consumed(&self) -> u64 {
        self.consumed
    }

    /// Reads a payload of `len` bytes into `payload`; false if the input
    /// ends first. The buffer grows with what arrives, a block at a time,
    /// never to a length the trace merely claims: a few bytes claiming a
    /// record of a gigabyte cost a block, not a gigabyte.
    fn read_payload(&mut self, len: usize) -> io::Result<bool> {
        const BLOCK: usize = 64 * 1024;
        self.payload.clear();
        while self.payload.len() < len {
            let have = self.payload.len();
            let n = (len - have).min(BLOCK);
            self.payload.resize(have + n, 0);
            match self.input.read_exact(&mut self.payload[have..]) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        // A long record's buffer is not kept for the short ones after it.
        if self.payload.capacity() > 4 * BLOCK && len <= BLOCK {
            self.payload.shrink_to(BLOCK);
        }
        Ok(true)
    }

    fn read_varint(&mut self) -> io::Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let mut b = [0u8];
            self.input
                .read_exact(&mut b)
                .map_err(|_| corrupt("cut off inside a record's length"))?;
            v |= u64::from(b[0] & 0x7F) << shift;
            if b[0] & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(corrupt("a record length longer than 64 bits"))
    }
}

/// Reads the fields of one record's payload.
struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    /// How many of `n` items of at least `each` bytes the rest of the
    /// record can hold: the capacity to reserve for them (a count is the
    /// trace's word, the bytes are there).
    fn room_for(&self, n: u64, each: usize) -> usize {
        let left = (self.b.len() - self.pos) / each;
        usize::try_from(n).map_or(left, |n| n.min(left))
    }

    fn byte(&mut self) -> io::Result<u8> {
        let b = *self
            .b
            .get(self.pos)
            .ok_or_else(|| corrupt("a record shorter than its fields"))?;
        self.pos += 1;
        Ok(b)
    }

    fn u(&mut self) -> io::Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7F) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(corrupt("a varint longer than 64 bits"))
    }

    fn i(&mut self) -> io::Result<i64> {
        let u = self.u()?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }

    fn i32(&mut self) -> io::Result<i32> {
        i32::try_from(self.i()?).map_err(|_| corrupt("a number out of range"))
    }

    fn u32(&mut self) -> io::Result<u32> {
        u32::try_from(self.u()?).map_err(|_| corrupt("a number out of range"))
    }

    fn fd(&mut self) -> io::Result<RawFd> {
        Ok(self.i()? as RawFd)
    }

    fn bytes(&mut self) -> io::Result<Vec<u8>> {
        let n = usize::try_from(self.u()?).map_err(|_| corrupt("a length out of range"))?;
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| corrupt("bytes beyond the end of their record"))?;
        let v = self.b[self.pos..end].to_vec();
        self.pos = end;
        Ok(v)
    }

    fn str(&mut self) -> io::Result<String> {
        String::from_utf8(self.bytes()?).map_err(|_| corrupt("a string that is not UTF-8"))
    }

    fn dur(&mut self) -> io::Result<Duration> {
        let secs = self.u()?;
        let nanos = self.u32()?;
        if nanos >= 1_000_000_000 {
            return Err(corrupt("a duration with 10^9 nanoseconds or more"));
        }
        Ok(Duration::new(secs, nanos))
    }

    fn err(&mut self) -> io::Result<IoErr> {
        match self.byte()? {
            0 => Ok(IoErr::Os(self.i32()?)),
            1 => {
                let code = self.byte()?;
                let kind = *KINDS
                    .get(usize::from(code))
                    .ok_or_else(|| corrupt(format!("error kind {code}")))?;
                Ok(IoErr::Kind(kind, self.str()?))
            }
            b => Err(corrupt(format!("error form {b}"))),
        }
    }

    fn unit_result(&mut self) -> io::Result<Result<(), IoErr>> {
        self.result(|_| Ok(()))
    }

    /// A result as the encoder's `result` writes it: 0 then what `ok`
    /// reads, or 1 then the error.
    fn result<T>(
        &mut self,
        ok: impl FnOnce(&mut Self) -> io::Result<T>,
    ) -> io::Result<Result<T, IoErr>> {
        match self.byte()? {
            0 => Ok(Ok(ok(self)?)),
            1 => Ok(Err(self.err()?)),
            b => Err(corrupt(format!("result form {b}"))),
        }
    }

    fn change(&mut self) -> io::Result<Change> {
        Ok(Change {
            fd: self.fd()?,
            old: Interest::from_bits(self.byte()?),
            new: Interest::from_bits(self.byte()?),
        })
    }

    fn caps(&mut self) -> io::Result<Capabilities> {
        let flags = self.byte()?;
        let max_fd = if flags & 8 != 0 {
            Some(self.fd()?)
        } else {
            None
        };
        let hangup = match self.byte()? {
            0 => Hangup::Always,
            1 => Hangup::Never,
            2 => Hangup::AsOfWakeup,
            b => return Err(corrupt(format!("hang-up form {b}"))),
        };
        let closed_fd = match self.byte()? {
            0 => ClosedFd::AtNextWait,
            1 => ClosedFd::ModifyFails,
            2 => ClosedFd::InvalidAfterChange,
            b => return Err(corrupt(format!("closed-fd form {b}"))),
        };
        let level = match self.byte()? {
            0 => Level::Native,
            1 => Level::Rearmed,
            b => return Err(corrupt(format!("level form {b}"))),
        };
        Ok(Capabilities {
            edge: flags & 1 != 0,
            oneshot: flags & 2 != 0,
            virtual_fds: flags & 4 != 0,
            max_fd,
            hangup,
            closed_fd,
            level,
            completion: false,
        })
    }

    fn transfer(&mut self) -> io::Result<(RawFd, u64, Result<Vec<u8>, IoErr>)> {
        let fd = self.fd()?;
        let len = self.u()?;
        let result = self.result(Self::bytes)?;
        Ok((fd, len, result))
    }

    fn record(&mut self, t: u8) -> io::Result<Record> {
        Ok(match t {
            tag::BEGIN => Record::Begin {
                backend: self.str()?,
                caps: self.caps()?,
            },
            tag::POLL => {
                let timeout = match self.byte()? {
                    0 => None,
                    1 => Some(self.dur()?),
                    b => return Err(corrupt(format!("timeout form {b}"))),
                };
                let result = match self.byte()? {
                    s @ (0 | 1) => {
                        let n = self.u()?;
                        let mut events = Vec::with_capacity(self.room_for(n, 2));
                        for _ in 0..n {
                            events.push(PollEvent {
                                fd: self.fd()?,
                                ready: Ready::from_bits(self.byte()?),
                            });
                        }
                        let status = if s == 0 {
                            PollStatus::Done
                        } else {
                            PollStatus::Stalled
                        };
                        Ok((status, events))
                    }
                    2 => Err(self.err()?),
                    b => return Err(corrupt(format!("poll result form {b}"))),
                };
                Record::Poll { timeout, result }
            }
            tag::NOW => Record::Now(self.dur()?),
            tag::WALL => Record::Wall(self.dur()?),
            tag::MODIFY => Record::Modify {
                change: self.change()?,
                result: self.unit_result()?,
            },
            tag::MODIFY_ALL => {
                let n = self.u()?;
                let mut changes = Vec::with_capacity(self.room_for(n, 3));
                for _ in 0..n {
                    changes.push(self.change()?);
                }
                let result = match self.byte()? {
                    0 => Ok(()),
                    1 => {
                        // The failed change is one of the record's: the
                        // loop indexes its batch by it.
                        let i = usize::try_from(self.u()?)
                            .ok()
                            .filter(|&i| i < changes.len())
                            .ok_or_else(|| corrupt("a failed change index beyond its changes"))?;
                        Err((i, self.err()?))
                    }
                    b => return Err(corrupt(format!("result form {b}"))),
                };
                Record::ModifyAll { changes, result }
            }
            tag::NOTICES => {
                let signals = SignalSet::from_bits(self.u()?);
                let flags = self.byte()?;
                let n = self.u()?;
                let mut exits = Vec::new();
                for _ in 0..n {
                    let pid = self.u32()?;
                    let status = match self.byte()? {
                        0 => ExitStatus::Exited(self.i32()?),
                        s @ (1 | 2) => ExitStatus::Signaled {
                            signal: self.i32()?,
                            core_dumped: s == 2,
                        },
                        3 => ExitStatus::Unknown,
                        b => return Err(corrupt(format!("exit status form {b}"))),
                    };
                    exits.push(ChildExit { pid, status });
                }
                let n = self.u()?;
                let mut paths = Vec::new();
                for _ in 0..n {
                    paths.push(self.u()?);
                }
                Record::Notices(NoticesRec {
                    signals,
                    woken: flags & 1 != 0,
                    clock_stepped: flags & 2 != 0,
                    exits,
                    paths,
                })
            }
            tag::SPAWN => {
                let program = self.str()?;
                let result = self.result(Self::u32)?;
                Record::Spawn { program, result }
            }
            tag::WATCH_CLOCK_STEPS => Record::ClockSteps(self.byte()? != 0),
            tag::ASYNC => match self.byte()? {
                0 => Record::SentBeforePoll,
                1 => {
                    let n = self.u()?;
                    let mut list = Vec::with_capacity(self.room_for(n, 1));
                    for _ in 0..n {
                        list.push(self.u32()?);
                    }
                    Record::SendsTaken(list)
                }
                b => return Err(corrupt(format!("async sends form {b}"))),
            },
            tag::STAT => {
                let path = self.str()?;
                let exists = self.byte()? != 0;
                let size = self.u()?;
                let modified = match self.byte()? {
                    0 => SystemTime::UNIX_EPOCH.checked_add(self.dur()?),
                    1 => SystemTime::UNIX_EPOCH.checked_sub(self.dur()?),
                    b => return Err(corrupt(format!("time form {b}"))),
                }
                .ok_or_else(|| corrupt("a modification time this system cannot represent"))?;
                let stat = FileStat {
                    exists,
                    size,
                    modified,
                    inode: self.u()?,
                    device: self.u()?,
                    links: self.u()?,
                    mode: self.u32()?,
                };
                Record::Stat { path, stat }
            }
            tag::WATCH_PATH => Record::WatchPath {
                path: self.str()?,
                token: self.u()?,
                result: self.unit_result()?,
            },
            tag::READ => {
                let (fd, len, result) = self.transfer()?;
                Record::Read { fd, len, result }
            }
            tag::WRITE => {
                let (fd, len, result) = self.transfer()?;
                Record::Write { fd, len, result }
            }
            tag::ACCEPT => {
                let fd = self.fd()?;
                let result = self.result(Self::fd)?;
                Record::Accept { fd, result }
            }
            tag::UNRECORDED => Record::Unrecorded(self.fd()?),
            tag::UNSENT => Record::Unsent {
                fd: self.fd()?,
                n: self.u()?,
            },
            tag::END => Record::End,
            t => match call_args(t) {
                Some(n) => {
                    let mut args = Vec::with_capacity(n);
                    for _ in 0..n {
                        args.push(self.i()?);
                    }
                    Record::Call {
                        tag: t,
                        args,
                        result: self.unit_result()?,
                    }
                }
                None => return Err(corrupt(format!("unknown record tag {t}"))),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// A writer whose bytes a test can read.
    #[derive(Clone, Default)]
    struct Shared(Rc<RefCell<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_record_round_trips() {
        let out = Shared::default();
        let caps = Capabilities {
            edge: true,
            oneshot: true,
            max_fd: Some(1023),
            hangup: Hangup::AsOfWakeup,
            closed_fd: ClosedFd::ModifyFails,
            level: Level::Rearmed,
            ..Capabilities::default()
        };
        let mut e = Encoder::new(Box::new(out.clone()), "epoll", caps);
        let ev = [PollEvent {
            fd: 7,
            ready: Ready::READABLE | Ready::HUP,
        }];
        e.poll(Some(Duration::new(3, 5)), &Ok(PollStatus::Done), &ev);
        e.poll(None, &Err(io::Error::from_raw_os_error(4)), &[]);
        e.clock(tag::NOW, Duration::from_nanos(123_456_789_012));
        let ch = Change {
            fd: 9,
            old: Interest::NONE,
            new: Interest::BOTH,
        };
        e.modify(ch, &Err(io::Error::new(io::ErrorKind::InvalidInput, "no")));
        e.modify_all(&[ch, ch], &Err((1, io::Error::from_raw_os_error(9))));
        e.call(tag::SIGNAL_CHILD, &[1000, 15], &Ok(()));
        let n = Notices {
            woken: true,
            exits: vec![ChildExit {
                pid: 5,
                status: ExitStatus::Signaled {
                    signal: 9,
                    core_dumped: true,
                },
            }],
            paths: vec![3],
            ..Notices::default()
        };
        e.notices(&n);
        let big = vec![b'x'; 300];
        e.transfer(tag::READ, 7, 4096, Ok(300), &big);
        e.transfer(tag::WRITE, 7, 5, Ok(2), b"he");
        e.accept(5, Ok(8));
        let st = FileStat {
            exists: true,
            size: 10,
            modified: SystemTime::UNIX_EPOCH + Duration::new(5, 6),
            inode: 1,
            device: 2,
            links: 3,
            mode: 0o644,
        };
        e.stat("/etc/x", &st);
        e.async_sends(None);
        e.async_sends(Some(&[2, 0, 300]));
        e.unrecorded(11);
        e.unsent(7, 4096);
        e.finish().unwrap();
        let bytes = out.0.borrow().clone();
        let (mut d, name, got_caps) = Decoder::new(Box::new(io::Cursor::new(bytes))).unwrap();
        assert_eq!((name.as_str(), got_caps), ("epoll", caps));
        let mut all = Vec::new();
        while let Some(r) = d.next().unwrap() {
            all.push(r);
        }
        assert_eq!(all.len(), 16);
        assert_eq!(
            all[0],
            Record::Poll {
                timeout: Some(Duration::new(3, 5)),
                result: Ok((PollStatus::Done, ev.to_vec()))
            }
        );
        assert_eq!(
            all[1],
            Record::Poll {
                timeout: None,
                result: Err(IoErr::Os(4))
            }
        );
        assert_eq!(all[2], Record::Now(Duration::from_nanos(123_456_789_012)));
        assert!(
            matches!(&all[3], Record::Modify { result: Err(IoErr::Kind(io::ErrorKind::InvalidInput, m)), .. } if m == "no")
        );
        assert!(
            matches!(&all[4], Record::ModifyAll { changes, result: Err((1, IoErr::Os(9))) } if changes.len() == 2)
        );
        assert_eq!(
            all[5],
            Record::Call {
                tag: tag::SIGNAL_CHILD,
                args: vec![1000, 15],
                result: Ok(())
            }
        );
        assert!(
            matches!(&all[6], Record::Notices(n) if n.woken && n.exits.len() == 1 && n.paths == [3])
        );
        assert!(matches!(&all[7], Record::Read { fd: 7, len: 4096, result: Ok(b) } if *b == big));
        assert!(matches!(&all[8], Record::Write { fd: 7, len: 5, result: Ok(b) } if b == b"he"));
        assert_eq!(
            all[9],
            Record::Accept {
                fd: 5,
                result: Ok(8)
            }
        );
        assert_eq!(
            all[10],
            Record::Stat {
                path: "/etc/x".into(),
                stat: st
            }
        );
        assert_eq!(all[11], Record::SentBeforePoll);
        assert_eq!(all[12], Record::SendsTaken(vec![2, 0, 300]));
        assert_eq!(all[13], Record::Unrecorded(11));
        assert_eq!(all[14], Record::Unsent { fd: 7, n: 4096 });
        assert_eq!(all[15], Record::End);
    }

    #[test]
    fn bad_headers_are_named() {
        let err = |b: &[u8]| {
            Decoder::new(Box::new(io::Cursor::new(b.to_vec())))
                .err()
                .unwrap()
                .to_string()
        };
        assert!(
            err(b"EVL").contains("shorter than its header"),
            "{}",
            err(b"EVL")
        );
        assert!(err(b"NOTATRACE!").contains("the magic is"));
        let mut v = MAGIC.to_vec();
        v.extend_from_slice(&7u16.to_le_bytes());
        assert!(err(&v).contains("format version 7"), "{}", err(&v));
        let mut v = MAGIC.to_vec();
        v.extend_from_slice(&VERSION.to_le_bytes());
        assert!(err(&v).contains("ends after its header"));
        v.extend_from_slice(&[tag::NOW, 2, 0, 0]);
        assert!(err(&v).contains("not a Begin record"), "{}", err(&v));
    }
}
