//! Recording as a layer on top: the wrappers that put what a program
//! reads, writes and accepts in the thread's trace ([`Recorded`], over
//! net's [`Stream`] and [`Listener`]; [`fd_io`], over `backends::fd_io`),
//! and [`Builder::record`], the builder's way to wrap its backend in a
//! [`Recorder`](super::Recorder). Nothing below this module calls into
//! replay: net, fd_io and the builder know nothing of it.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::sink;
use super::Recorder;
use crate::backend::CompletionIo;
use crate::net::{Listener, Stream};
use crate::{Builder, Source, SourceFd};

/// A stream or a listener whose reads, writes, half-closes and accepts
/// are written to the trace while a loop of the thread records (and,
/// during a replay, reported as a divergence if it is a real descriptor:
/// a replay's sockets are virtual). Give the server a `Recorded` socket
/// where it is recorded and the replay's socket
/// ([`Replay::socket`](super::Replay::socket),
/// [`Replay::listener`](super::Replay::listener)) where it is replayed;
/// the program is generic over [`Stream`] or [`Listener`] and runs
/// unchanged on both. A listener's accepted streams come `Recorded` too.
/// With no recording or replay in the thread it costs a thread-local test
/// per call.
///
/// ```
/// use evloop::net::Stream;
/// use evloop::replay::Recorded;
/// use std::io::{Read, Write};
/// let (a, b) = std::os::unix::net::UnixStream::pair()?;
/// let mut a = Recorded::new(a);
/// a.write_all(b"hi")?; // nothing records here: only passed through
/// a.shutdown_write()?;
/// let mut got = String::new();
/// Recorded::new(b).read_to_string(&mut got)?;
/// assert_eq!(got, "hi");
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct Recorded<T>(T);

impl<T> Recorded<T> {
    /// `inner`, recorded.
    ///
    /// ```
    /// let l = evloop::replay::Recorded::new(std::net::TcpListener::bind("127.0.0.1:0")?);
    /// assert!(l.get_ref().local_addr()?.ip().is_loopback());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new(inner: T) -> Recorded<T> {
        Recorded(inner)
    }

    /// The wrapped socket (what is done through it directly is not
    /// recorded).
    ///
    /// ```
    /// assert_eq!(*evloop::replay::Recorded::new(3).get_ref(), 3);
    /// ```
    pub fn get_ref(&self) -> &T {
        &self.0
    }

    /// The wrapped socket, mutably (what is done through it directly is
    /// not recorded).
    ///
    /// ```
    /// let mut r = evloop::replay::Recorded::new(3);
    /// *r.get_mut() += 1;
    /// assert_eq!(r.into_inner(), 4);
    /// ```
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.0
    }

    /// The wrapped socket, unwrapped.
    ///
    /// ```
    /// assert_eq!(evloop::replay::Recorded::new(3).into_inner(), 3);
    /// ```
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T: Source> Source for Recorded<T> {
    /// The wrapped socket's; while a loop of the thread records, the fd is
    /// noted as recorded (an io watcher started on any other fd is said to
    /// be unrecorded).
    fn source_fd(&self) -> SourceFd<'_> {
        let src = self.0.source_fd();
        sink::wrapped(src);
        src
    }
}

impl<T: Read + Source> Read for Recorded<T> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let r = self.0.read(buf);
        let got = r.as_ref().map_or(0, |&n| n.min(buf.len()));
        sink::read(self.0.source_fd(), buf.len(), &r, &buf[..got]);
        r
    }
}

impl<T: Write + Source> Write for Recorded<T> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let r = self.0.write(buf);
        let taken = r.as_ref().map_or(0, |&n| n.min(buf.len()));
        sink::wrote(self.0.source_fd(), buf.len(), &r, &buf[..taken]);
        r
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl<T: Stream> Stream for Recorded<T> {
    fn shutdown_write(&mut self) -> io::Result<()> {
        let r = self.0.shutdown_write();
        sink::shut_down(self.0.source_fd(), &r);
        r
    }

    fn completion_fd(&self) -> Option<crate::RawFd> {
        self.0.completion_fd()
    }

    fn read_completed(&mut self, io: &dyn CompletionIo, buf: &mut [u8]) -> io::Result<usize> {
        let r = self.0.read_completed(io, buf);
        let got = r.as_ref().map_or(0, |&n| n.min(buf.len()));
        sink::read(self.0.source_fd(), buf.len(), &r, &buf[..got]);
        r
    }

    fn write_completed(&mut self, io: &dyn CompletionIo, bytes: &[u8]) -> io::Result<usize> {
        let r = self.0.write_completed(io, bytes);
        let taken = r.as_ref().map_or(0, |&n| n.min(bytes.len()));
        sink::wrote(self.0.source_fd(), bytes.len(), &r, &bytes[..taken]);
        r
    }

    fn shutdown_completed(&mut self, io: &dyn CompletionIo) -> io::Result<()> {
        let r = self.0.shutdown_completed(io);
        sink::shut_down(self.0.source_fd(), &r);
        r
    }

    /// Recorded where the completion I/O answers it: a connection's
    /// graceful close waits on it, so its replay needs the same answer.
    fn unsent_completed(&self, io: Option<&dyn CompletionIo>) -> usize {
        let n = self.0.unsent_completed(io);
        if io.is_some() && self.0.completion_fd().is_some() {
            sink::unsent(self.0.source_fd(), n);
        }
        n
    }
}

impl<L: Listener> Listener for Recorded<L> {
    type Stream = Recorded<L::Stream>;

    fn prepare(&self) -> io::Result<SocketAddr> {
        self.0.prepare()
    }

    fn accept_stream(&self) -> io::Result<Recorded<L::Stream>> {
        let r = self.0.accept_stream();
        sink::accepted(self.0.source_fd(), r.as_ref().map(Source::source_fd));
        r.map(Recorded)
    }

    fn completion_fd(&self) -> Option<crate::RawFd> {
        self.0.completion_fd()
    }

    fn accept_completed(&self, io: &dyn CompletionIo) -> io::Result<Recorded<L::Stream>> {
        let r = self.0.accept_completed(io);
        sink::accepted(self.0.source_fd(), r.as_ref().map(Source::source_fd));
        r.map(Recorded)
    }
}

/// `backends::fd_io`'s `read` and `write` recorded: while a loop of the
/// thread records, each call and what it moved are written to the trace;
/// during a replay a call (on a real descriptor: the replay's sockets are
/// virtual) is reported as a divergence, makes no syscall and fails with
/// `WouldBlock`. Otherwise the same single syscall, after one
/// thread-local test. A program calls these where it wants its fd_io
/// calls recorded; `backends::fd_io` itself never tests for a recording.
///
/// ```
/// use evloop::replay::fd_io;
/// let (a, b) = std::os::unix::net::UnixStream::pair()?;
/// assert_eq!(fd_io::recorded_write(&a, b"hi")?, 2);
/// assert_eq!(fd_io::recorded_read(&b, &mut [0u8; 4])?, 2);
/// # Ok::<(), std::io::Error>(())
/// ```
#[cfg(any(unix, target_os = "wasi"))]
pub mod fd_io {
    use std::io;
    use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

    use super::super::format::tag;
    use super::sink;
    use crate::backends::fd_io as raw;

    /// As [`backends::fd_io::read`](crate::backends::fd_io::read), recorded.
    ///
    /// ```
    /// let (a, b) = std::os::unix::net::UnixStream::pair()?;
    /// drop(a);
    /// assert_eq!(evloop::replay::fd_io::recorded_read(&b, &mut [0u8; 4])?, 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[inline]
    pub fn recorded_read(fd: impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
        let fd = fd.as_fd();
        if !sink::active() {
            return raw::read(fd, buf);
        }
        observed(tag::READ, fd, buf.len(), |buf_len| {
            let r = raw::read(fd, buf);
            let got = r.as_ref().map_or(0, |&n| n.min(buf_len));
            (r, buf[..got].to_vec())
        })
    }

    /// As [`backends::fd_io::write`](crate::backends::fd_io::write),
    /// recorded.
    ///
    /// ```
    /// let (a, _b) = std::os::unix::net::UnixStream::pair()?;
    /// assert_eq!(evloop::replay::fd_io::recorded_write(&a, b"x")?, 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[inline]
    pub fn recorded_write(fd: impl AsFd, buf: &[u8]) -> io::Result<usize> {
        let fd = fd.as_fd();
        if !sink::active() {
            return raw::write(fd, buf);
        }
        observed(tag::WRITE, fd, buf.len(), |_| {
            let r = raw::write(fd, buf);
            let taken = r.as_ref().map_or(0, |&n| n.min(buf.len()));
            (r, buf[..taken].to_vec())
        })
    }

    /// A call while the thread records (made, then written to the trace)
    /// or replays (reported, not made).
    #[cold]
    #[inline(never)]
    fn observed(
        t: u8,
        fd: BorrowedFd<'_>,
        len: usize,
        call: impl FnOnce(usize) -> (io::Result<usize>, Vec<u8>),
    ) -> io::Result<usize> {
        if sink::mode() == sink::REPLAYING {
            let what = if t == tag::READ { "a read" } else { "a write" };
            sink::outside(fd.as_raw_fd(), what, "evloop::replay::fd_io");
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let (r, moved) = call(len);
        sink::with_encoder(|e| e.transfer(t, fd.as_raw_fd(), len, r.as_ref().copied(), &moved));
        r
    }
}

/// Where a built loop is recorded.
#[derive(Clone)]
enum RecordTo {
    /// Taken by the first loop built.
    Writer(Arc<Mutex<Option<Box<dyn Write + Send>>>>),
    Path(PathBuf),
}

impl RecordTo {
    /// `backend`, wrapped in a recorder writing where this says.
    fn wrap(&self, backend: Box<dyn crate::backend::Backend>) -> io::Result<Recorder> {
        match self {
            RecordTo::Path(path) => Recorder::to_path(backend, path),
            RecordTo::Writer(slot) => {
                let taken = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
                match taken {
                    Some(out) => Recorder::new(backend, out),
                    None => Err(io::Error::other(
                        "Builder::record's writer was taken by a loop built before: record each loop to a writer of its own",
                    )),
                }
            }
        }
    }
}

impl Builder {
    /// Records the loop to `out`: the backend chosen is wrapped in a
    /// [`Recorder`], which writes everything that enters the loop from
    /// outside to a trace that [`Replay`](super::Replay) runs again (what
    /// the program reads and writes is recorded by the sockets it gives
    /// the loop wrapped in [`Recorded`]; the [`replay`](crate::replay)
    /// module has the format and the limits; `docs/replay.md` is the
    /// guide). The first loop built takes the writer; building another
    /// from this builder (or a clone) is refused
    /// ([`Error::Backend`](crate::Error::Backend), op "record"), as is a
    /// second recording in one thread.
    ///
    /// ```
    /// use evloop::replay::{MemoryTrace, Replay};
    /// use evloop::{Loop, RunMode};
    /// use std::time::Duration;
    ///
    /// let trace = MemoryTrace::new();
    /// let builder = Loop::builder().backend("poll").record(trace.clone());
    /// {
    ///     let mut lp: Loop = builder.build()?;
    ///     lp.timer(Duration::from_millis(1), Duration::ZERO, |_, _, _| {})?;
    ///     lp.run(RunMode::Default, &mut ())?;
    /// }
    /// assert!(builder.build::<()>().is_err(), "the writer was taken");
    /// assert_eq!(Replay::from_bytes(trace.bytes())?.recorded_backend(), "poll");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "replay")))]
    pub fn record(self, out: impl Write + Send + 'static) -> Builder {
        let out: Box<dyn Write + Send> = Box::new(out);
        self.recorded(RecordTo::Writer(Arc::new(Mutex::new(Some(out)))))
    }

    /// Records the loop (as [`Builder::record`] does) to the file at
    /// `path`, created (or truncated) by [`Builder::build`]; a path that
    /// cannot be created fails the build, naming it.
    ///
    /// ```
    /// use evloop::replay::Replay;
    /// use evloop::Loop;
    /// let path = std::env::temp_dir().join(format!("evloop-doc-record-to-{}", std::process::id()));
    /// drop(Loop::builder().backend("poll").record_to(&path).build::<()>()?);
    /// assert_eq!(Replay::open(&path)?.recorded_backend(), "poll");
    /// std::fs::remove_file(&path)?;
    /// let err = Loop::builder().record_to("/no/such/dir/trace").build::<()>().unwrap_err();
    /// assert!(err.to_string().contains("/no/such/dir/trace"), "{err}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "replay")))]
    pub fn record_to(self, path: impl Into<PathBuf>) -> Builder {
        self.recorded(RecordTo::Path(path.into()))
    }

    fn recorded(self, to: RecordTo) -> Builder {
        self.wrap_backend("record", move |backend| {
            Ok(Box::new(to.wrap(backend)?) as Box<dyn crate::backend::Backend>)
        })
    }
}
