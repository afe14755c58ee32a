//! The recording backend: any backend, with everything that comes into
//! the loop through it written to the thread's trace.

use std::io::{self, Write};
use std::marker::PhantomData;
use std::path::Path;
use std::process::Command;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::format::{tag, Encoder};
use super::sink;
use crate::backend::{
    Backend, Capabilities, Change, InternalFds, NoticeService, Notices, PollEvent, PollStatus,
    Spawned, Wake,
};
use crate::backends::WithServices;
use crate::{FileStat, Interest, RawFd, Ready};

/// A backend that records: it wraps another (any [`Backend`]) and writes
/// to a trace everything that enters the loop through it, and, while it
/// lives, what the program reads and writes in its thread through the
/// recording layer ([`Recorded`](super::Recorded) sockets,
/// [`replay::fd_io`](super::fd_io)). [`Builder::record`](crate::Builder::record) and
/// [`Builder::record_to`](crate::Builder::record_to) make one around the
/// backend they choose; this is the way to record a backend built by
/// hand. Its name and capabilities are the wrapped backend's. The
/// [module documentation](crate::replay) has the format and the limits.
///
/// One recording (or replay) per thread at a time: a second one made
/// while another lives in the thread is refused.
///
/// ```
/// use evloop::replay::{MemoryTrace, Recorder, Replay};
/// use evloop::{Loop, RunMode, Sim};
/// use std::time::Duration;
///
/// let sim = Sim::new();
/// let trace = MemoryTrace::new();
/// {
///     let rec = Recorder::new(Box::new(sim.backend()), trace.clone())?;
///     let mut lp: Loop<Vec<Duration>> = Loop::with_backend(rec);
///     lp.timer(Duration::from_millis(5), Duration::ZERO, |lp, log, _| log.push(lp.now()))?;
///     let mut log = vec![];
///     lp.run(RunMode::Default, &mut log)?;
///     assert_eq!(log, [Duration::from_millis(5)]);
/// } // the loop (and its recorder) dropped: the trace is complete
/// let replay = Replay::from_bytes(trace.bytes())?;
/// assert_eq!(replay.recorded_backend(), "sim");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Recorder {
    /// The backend, with its OS services (its own, or the loop's kind
    /// held here, so that what they notice is recorded; their internal
    /// fds are never recorded).
    inner: WithServices<'static>,
    /// Not `Send`: the recording is the thread's.
    _thread: PhantomData<Rc<()>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("backend", &self.inner.name())
            .finish()
    }
}

impl Recorder {
    /// Records `inner` to `out` (a file, a socket, a [`MemoryTrace`]:
    /// streamed in blocks of 64 KiB, so the recording's memory stays
    /// bounded). Errors: this thread records or replays already.
    ///
    /// ```
    /// use evloop::replay::{MemoryTrace, Recorder};
    /// use evloop::Sim;
    /// let trace = MemoryTrace::new();
    /// let first = Recorder::new(Box::new(Sim::new().backend()), trace.clone())?;
    /// let err = Recorder::new(Box::new(Sim::new().backend()), std::io::sink()).unwrap_err();
    /// assert!(err.to_string().contains("already"), "{err}");
    /// drop(first);
    /// assert!(trace.bytes().starts_with(b"EVLOOPRC"));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new(inner: Box<dyn Backend>, out: impl Write + 'static) -> io::Result<Recorder> {
        let enc = Encoder::new(Box::new(out), inner.name(), inner.capabilities());
        sink::start_recording(enc)?;
        Ok(Recorder {
            inner: WithServices::new(inner),
            _thread: PhantomData,
        })
    }

    /// Records `inner` to the file at `path` (created, or truncated).
    ///
    /// ```
    /// use evloop::replay::{Recorder, Replay};
    /// use evloop::{Loop, Sim};
    /// let path = std::env::temp_dir().join(format!("evloop-doc-rec-{}", std::process::id()));
    /// drop(Loop::<()>::with_backend(Recorder::to_path(Box::new(Sim::new().backend()), &path)?));
    /// assert_eq!(Replay::open(&path)?.recorded_backend(), "sim");
    /// std::fs::remove_file(&path)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_path(inner: Box<dyn Backend>, path: impl AsRef<Path>) -> io::Result<Recorder> {
        let path = path.as_ref();
        let file = std::fs::File::create(path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot create the recording {}: {e}", path.display()),
            )
        })?;
        Recorder::new(inner, file)
    }
}

/// A trace kept in memory: a writer to record to, which any clone of it
/// can read back (what tests and the example use; a production recording
/// goes to a file). `Send` and `Sync`, so that a
/// [`Builder`](crate::Builder) can hold it.
///
/// ```
/// use evloop::replay::MemoryTrace;
/// use std::io::Write;
/// let t = MemoryTrace::new();
/// t.clone().write_all(b"abc")?;
/// assert_eq!(t.bytes(), b"abc");
/// assert_eq!(t.len(), 3);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Default, Debug)]
pub struct MemoryTrace(Arc<Mutex<Vec<u8>>>);

impl MemoryTrace {
    /// An empty trace.
    ///
    /// ```
    /// assert!(evloop::replay::MemoryTrace::new().is_empty());
    /// ```
    pub fn new() -> MemoryTrace {
        MemoryTrace::default()
    }

    /// A copy of the bytes written so far.
    ///
    /// ```
    /// assert!(evloop::replay::MemoryTrace::new().bytes().is_empty());
    /// ```
    pub fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// How many bytes were written.
    ///
    /// ```
    /// assert_eq!(evloop::replay::MemoryTrace::new().len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether nothing was written.
    ///
    /// ```
    /// assert!(evloop::replay::MemoryTrace::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Write for MemoryTrace {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Recorder {
    /// Writes the `End` record and flushes: the trace is complete.
    fn drop(&mut self) {
        if let Some(mut enc) = sink::stop_recording() {
            if let Err(e) = enc.finish() {
                tracing::warn!(error = %e, "evloop: the recording could not be completed: its replay will stop where it was cut off");
            }
        }
    }
}

impl Recorder {
    /// Runs `f` on the inner backend's services.
    fn service<R>(
        &mut self,
        f: impl FnOnce(&mut dyn NoticeService, &mut dyn InternalFds) -> R,
    ) -> R {
        f(&mut self.inner, &mut crate::services::Refused)
    }
}

impl Backend for Recorder {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn modify(&mut self, fd: RawFd, old: Interest, new: Interest) -> io::Result<()> {
        let r = self.inner.modify(fd, old, new);
        sink::with_encoder(|e| e.modify(Change { fd, old, new }, &r));
        r
    }

    fn modify_all(&mut self, changes: &[Change]) -> Result<(), (usize, io::Error)> {
        let r = self.inner.modify_all(changes);
        sink::with_encoder(|e| e.modify_all(changes, &r));
        r
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        let before = events.len();
        let r = self.inner.poll(timeout, events);
        let mut failed = None;
        sink::with_encoder(|e| {
            e.poll(timeout, &r, &events[before..]);
            failed = e.take_failure();
        });
        match failed {
            Some(e) => Err(io::Error::new(
                e.kind(),
                format!("writing the recording failed ({e}): the recording stopped there, the loop goes on unrecorded"),
            )),
            None => r,
        }
    }

    #[inline]
    fn now(&mut self) -> Duration {
        let t = self.inner.now();
        sink::with_encoder(|e| e.clock(tag::NOW, t));
        t
    }

    fn notices(&mut self) -> Option<&mut dyn NoticeService> {
        Some(self)
    }

    /// The recorded backend's: what adopted sockets read, write and accept
    /// is recorded at the net layer ([`Recorded`](super::Recorded)), and
    /// their reports as any poll's.
    fn submit_pending(&mut self) -> io::Result<()> {
        self.inner.submit_pending()
    }

    fn completion_io(&mut self) -> Option<std::rc::Rc<dyn crate::backend::CompletionIo>> {
        self.inner.completion_io()
    }

    fn reinit(&mut self) -> io::Result<()> {
        let r = Backend::reinit(&mut self.inner);
        sink::with_encoder(|e| e.call(tag::REINIT, &[], &r));
        r
    }
}

/// The services: the inner backend's own, or the recorder's Unix notifier
/// (its internal fds in the inner backend, never recorded), each call's
/// answer recorded.
impl NoticeService for Recorder {
    /// Recorded; an io watcher starting on an fd that is not a
    /// `Recorded` socket's is said to be unrecorded, here (a warning) and
    /// in the trace (a note the replay names when it diverges there):
    /// what the program reads from it outside the recording layer
    /// (`backends::fd_io::read`, a `Read` on the bare socket) cannot be
    /// replayed.
    fn check_fd(&mut self, fd: RawFd) -> io::Result<()> {
        let r = self.service(|s, _| s.check_fd(fd));
        let unrecorded = r.is_ok() && !sink::is_wrapped(fd);
        sink::with_encoder(|e| {
            e.call(tag::CHECK_FD, &[fd as i64], &r);
            if unrecorded {
                e.unrecorded(fd);
            }
        });
        if unrecorded {
            tracing::warn!(
                fd,
                "recording: an io watcher on fd {fd}, which is not an evloop::replay::Recorded socket: \
                 what is read from it is not recorded (unless through evloop::replay::fd_io), so a replay \
                 cannot give it back"
            );
        }
        r
    }

    fn dispatched(&mut self, fd: RawFd, ready: Ready) {
        self.service(|s, _| s.dispatched(fd, ready));
    }

    fn wants_dispatch(&mut self) -> bool {
        self.service(|s, _| s.wants_dispatch())
    }

    fn watch_signal(&mut self, signal: i32, _: &mut dyn InternalFds) -> io::Result<()> {
        let r = self.service(|s, fds| s.watch_signal(signal, fds));
        sink::with_encoder(|e| e.call(tag::WATCH_SIGNAL, &[i64::from(signal)], &r));
        r
    }

    fn unwatch_signal(&mut self, signal: i32) {
        self.service(|s, _| s.unwatch_signal(signal));
    }

    fn watch_child(&mut self, pid: u32, _: &mut dyn InternalFds) -> io::Result<()> {
        let r = self.service(|s, fds| s.watch_child(pid, fds));
        sink::with_encoder(|e| e.call(tag::WATCH_CHILD, &[i64::from(pid)], &r));
        r
    }

    fn unwatch_child(&mut self, pid: u32, _: &mut dyn InternalFds) {
        self.service(|s, fds| s.unwatch_child(pid, fds));
    }

    fn watch_any_child(&mut self, _: &mut dyn InternalFds) -> io::Result<()> {
        let r = self.service(|s, fds| s.watch_any_child(fds));
        sink::with_encoder(|e| e.call(tag::WATCH_ANY_CHILD, &[], &r));
        r
    }

    fn unwatch_any_child(&mut self) {
        self.service(|s, _| s.unwatch_any_child());
    }

    fn signal_child(&mut self, pid: u32, signal: i32) -> io::Result<()> {
        let r = self.service(|s, _| s.signal_child(pid, signal));
        sink::with_encoder(|e| e.call(tag::SIGNAL_CHILD, &[i64::from(pid), i64::from(signal)], &r));
        r
    }

    fn spawn_child(
        &mut self,
        command: &mut Command,
        _: &mut dyn InternalFds,
    ) -> io::Result<Spawned> {
        let r = self.service(|s, fds| s.spawn_child(command, fds));
        let program = command.get_program().to_string_lossy().into_owned();
        sink::with_encoder(|e| {
            let pid = match &r {
                Ok(s) => Ok(s.pid),
                Err(err) => Err(io::Error::new(err.kind(), err.to_string())),
            };
            e.spawn(&program, &pid);
        });
        r
    }

    fn waker(&mut self, _: &mut dyn InternalFds) -> io::Result<Arc<dyn Wake>> {
        let r = self.service(|s, fds| s.waker(fds));
        sink::with_encoder(|e| {
            let unit = match &r {
                Ok(_) => Ok(()),
                Err(err) => Err(io::Error::new(err.kind(), err.to_string())),
            };
            e.call(tag::WAKER, &[], &unit);
        });
        r
    }

    fn take_notices(&mut self, notices: &mut Notices, _: &mut dyn InternalFds) {
        let mut fresh = Notices::default();
        self.service(|s, fds| s.take_notices(&mut fresh, fds));
        sink::with_encoder(|e| e.notices(&fresh));
        notices.signals |= fresh.signals;
        notices.exits.append(&mut fresh.exits);
        notices.woken |= fresh.woken;
        notices.clock_stepped |= fresh.clock_stepped;
        notices.paths.append(&mut fresh.paths);
    }

    fn wall_now(&mut self) -> Duration {
        let t = self.service(|s, _| s.wall_now());
        sink::with_encoder(|e| e.clock(tag::WALL, t));
        t
    }

    fn watch_clock_steps(&mut self, _: &mut dyn InternalFds) -> bool {
        let on = self.service(|s, fds| s.watch_clock_steps(fds));
        sink::with_encoder(|e| e.flag(tag::WATCH_CLOCK_STEPS, on));
        on
    }

    fn unwatch_clock_steps(&mut self, _: &mut dyn InternalFds) {
        self.service(|s, fds| s.unwatch_clock_steps(fds));
    }

    fn stat(&mut self, path: &Path) -> FileStat {
        let s = self.service(|s, _| s.stat(path));
        sink::with_encoder(|e| e.stat(&path.to_string_lossy(), &s));
        s
    }

    fn watch_path(&mut self, path: &Path, token: u64, _: &mut dyn InternalFds) -> io::Result<()> {
        let r = self.service(|s, fds| s.watch_path(path, token, fds));
        sink::with_encoder(|e| e.watch_path(&path.to_string_lossy(), token, &r));
        r
    }

    fn unwatch_path(&mut self, token: u64, _: &mut dyn InternalFds) {
        self.service(|s, fds| s.unwatch_path(token, fds));
    }

    fn ready(&mut self, fd: RawFd, _: &mut dyn InternalFds) {
        self.service(|s, fds| s.ready(fd, fds));
    }

    /// A send seen before the poll is recorded (nothing otherwise: the
    /// common answer costs no record).
    fn async_sent(&mut self, sent: bool) -> bool {
        let sent = self.service(|s, _| s.async_sent(sent));
        if sent {
            sink::with_encoder(|e| e.async_sends(None));
        }
        sent
    }

    /// The sends taken, recorded unless there are none.
    fn async_taken(&mut self, taken: &mut Vec<u32>, active: &dyn Fn(u32) -> bool) {
        self.service(|s, _| s.async_taken(taken, active));
        if !taken.is_empty() {
            sink::with_encoder(|e| e.async_sends(Some(taken)));
        }
    }

    fn reinit(&mut self, _: &mut dyn InternalFds) -> io::Result<()> {
        self.service(|s, fds| s.reinit(fds))
    }
}

/// Hands what this thread's recording has buffered to its writer, and
/// flushes the writer: so that a trace read while the loop still runs (or
/// after the process is killed) has everything up to now. The recording
/// otherwise writes in blocks of 64 KiB, and completes when its loop is
/// dropped. Errors: the thread records nothing, or the write failed.
///
/// ```
/// use evloop::replay::{flush_recording, Recorder};
/// use evloop::{Loop, Sim};
/// assert!(flush_recording().is_err()); // nothing recorded in this thread
/// let path = std::env::temp_dir().join(format!("evloop-doc-flush-{}", std::process::id()));
/// let lp: Loop = Loop::with_backend(Recorder::to_path(Box::new(Sim::new().backend()), &path)?);
/// flush_recording()?;
/// assert!(std::fs::metadata(&path)?.len() > 10);
/// drop(lp);
/// std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn flush_recording() -> io::Result<()> {
    let mut r = Err(io::Error::new(
        io::ErrorKind::NotFound,
        "no loop of this thread records",
    ));
    sink::with_encoder(|e| r = e.flush());
    r
}
