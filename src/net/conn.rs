//! Buffered connections: the [`Conns`] component (a slab of [`Conn`]s kept
//! in the loop's user state), each driven by one io watcher that owns its
//! stream and, when asked for, one timer.
//!
//! The state of every connection lives in `Conns`, inside the user's state
//! `S` (`S: AsMut<Conns<C>>`), so any callback can reach any connection
//! (`conns[id].write(lp, ..)`); the stream lives in the connection's io
//! watcher, so only that watcher's callback touches the socket. A write
//! made elsewhere queues the bytes and feeds the watcher an event
//! ([`Loop::feed_event`]), so they go out in the same iteration.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::ops::{Index, IndexMut};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::panic::{self, AssertUnwindSafe};
use std::time::Duration;

use slab::Slab;

use crate::backend::{Adopt, CompletionIo};
use crate::{Interest, Io, IoEvent, Loop, Ready, Result, SimSocket, Source, Timer, Trigger};

/// A byte stream a [`Conn`] can drive: readable, writable, watchable, and
/// able to shut down its writing side (the half-close of a graceful close).
///
/// ```
/// use evloop::net::Stream;
/// let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
/// let mut a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
/// a.shutdown_write().unwrap();
/// ```
pub trait Stream: Read + Write + Source + 'static {
    /// Shuts down the writing side: the peer reads end of file once it has
    /// read everything sent before.
    fn shutdown_write(&mut self) -> io::Result<()>;

    /// The socket the loop's completion I/O may read and write directly
    /// ([`Capabilities::completion`](crate::Capabilities::completion)):
    /// `Some` for a plain socket (std's TCP and Unix streams, and
    /// wrappers that only observe them), `None`, the default, for a stream
    /// whose bytes pass through a layer of its own (TLS, a simulator's
    /// socket): it is read and written through `Read` and `Write`.
    ///
    /// ```
    /// use evloop::net::Stream;
    /// let (a, _b) = std::os::unix::net::UnixStream::pair()?;
    /// assert!(a.completion_fd().is_some());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn completion_fd(&self) -> Option<crate::RawFd> {
        None
    }

    /// Reads through the loop's completion I/O (for a stream with a
    /// [`completion_fd`](Stream::completion_fd)). A wrapper that observes
    /// its stream's reads (replay's `Recorded`) observes these too.
    ///
    /// ```
    /// use evloop::net::Stream;
    /// # #[cfg(all(target_os = "linux", feature = "io-uring"))] {
    /// use evloop::backend::{Adopt, Backend};
    /// use std::io::Write;
    /// let Ok(mut ring) = evloop::backends::io_uring::IoUring::new() else { return };
    /// let Some(io) = ring.completion_io() else { return };
    /// let (mut a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
    /// b.write_all(b"hi").unwrap();
    /// // Not adopted: a plain recv.
    /// assert_eq!(a.read_completed(&*io, &mut [0; 8]).unwrap(), 2);
    /// # }
    /// ```
    fn read_completed(&mut self, io: &dyn CompletionIo, buf: &mut [u8]) -> io::Result<usize> {
        match self.completion_fd() {
            Some(fd) => io.recv(fd, buf),
            None => self.read(buf),
        }
    }

    /// Writes through the loop's completion I/O (see
    /// [`read_completed`](Stream::read_completed)).
    ///
    /// ```
    /// use evloop::net::Stream;
    /// # #[cfg(all(target_os = "linux", feature = "io-uring"))] {
    /// use evloop::backend::Backend;
    /// use std::io::Read;
    /// let Ok(mut ring) = evloop::backends::io_uring::IoUring::new() else { return };
    /// let Some(io) = ring.completion_io() else { return };
    /// let (mut a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
    /// assert_eq!(a.write_completed(&*io, b"hi").unwrap(), 2); // a plain send
    /// let mut got = [0; 2];
    /// b.read_exact(&mut got).unwrap();
    /// # }
    /// ```
    fn write_completed(&mut self, io: &dyn CompletionIo, bytes: &[u8]) -> io::Result<usize> {
        match self.completion_fd() {
            Some(fd) => io.send(fd, bytes),
            None => self.write(bytes),
        }
    }

    /// Shuts down the writing side through the loop's completion I/O,
    /// after what it took to send (see
    /// [`read_completed`](Stream::read_completed)).
    ///
    /// ```
    /// use evloop::net::Stream;
    /// # #[cfg(all(target_os = "linux", feature = "io-uring"))] {
    /// use evloop::backend::Backend;
    /// use std::io::Read;
    /// let Ok(mut ring) = evloop::backends::io_uring::IoUring::new() else { return };
    /// let Some(io) = ring.completion_io() else { return };
    /// let (mut a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
    /// a.shutdown_completed(&*io).unwrap();
    /// assert_eq!(b.read(&mut [0; 4]).unwrap(), 0); // end of file
    /// # }
    /// ```
    fn shutdown_completed(&mut self, io: &dyn CompletionIo) -> io::Result<()> {
        match self.completion_fd() {
            Some(fd) => io.shutdown_write(fd),
            None => self.shutdown_write(),
        }
    }

    /// The bytes the loop's completion I/O (`io`, where the connection's
    /// socket is adopted) took from this stream and has not sent yet: a
    /// graceful close waits for them. 0 without `io`. A wrapper that
    /// observes its stream (replay's `Recorded`) observes this answer
    /// too: a replay gives it back, as it gives back reads.
    ///
    /// ```
    /// use evloop::net::Stream;
    /// let (a, _b) = std::os::unix::net::UnixStream::pair()?;
    /// assert_eq!(a.unsent_completed(None), 0); // not adopted
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn unsent_completed(&self, io: Option<&dyn CompletionIo>) -> usize {
        match (io, self.completion_fd()) {
            (Some(io), Some(fd)) => io.unsent(fd),
            _ => 0,
        }
    }
}

impl Stream for TcpStream {
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }

    #[cfg(unix)]
    fn completion_fd(&self) -> Option<crate::RawFd> {
        Some(std::os::fd::AsRawFd::as_raw_fd(self))
    }
}

#[cfg(unix)]
impl Stream for UnixStream {
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }

    fn completion_fd(&self) -> Option<crate::RawFd> {
        Some(std::os::fd::AsRawFd::as_raw_fd(self))
    }
}

/// The simulator's sockets have no half-close: the call does nothing (a
/// test sees the graceful close in the connection's events instead).
impl Stream for SimSocket {
    fn shutdown_write(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Names a connection in its [`Conns`]; stale once the connection is gone
/// (its slot is reused under another generation).
///
/// ```
/// use evloop::net::{ConnEvent, ConnOptions, Conns};
/// use evloop::{Loop, Sim};
/// let sim = Sim::new();
/// let mut lp: Loop<Conns<()>> = Loop::with_backend(sim.backend());
/// let mut conns = Conns::new();
/// let id = conns.open(&mut lp, sim.socket("c", 64), ConnOptions::new(), (), |_, _, _, _| {}).unwrap();
/// assert!(conns.contains(id));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    index: u32,
    generation: u32,
}

/// Why a connection ended (the last event it gets, [`ConnEvent::Closed`]).
///
/// ```
/// use evloop::net::CloseReason;
/// assert!(CloseReason::Graceful.is_clean());
/// assert!(!CloseReason::IdleTimeout.is_clean());
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum CloseReason {
    /// [`Conn::close`] finished: everything queued was sent, the writing
    /// side was shut down, and the peer closed its side too (or did not
    /// within the linger time).
    Graceful,
    /// [`Conn::abort`]: closed at once, unsent data dropped.
    Aborted,
    /// Nothing was read or written for the idle timeout (or a graceful
    /// close could not flush within it): closed, unsent data dropped.
    IdleTimeout,
    /// The socket failed (reset by the peer, broken pipe, hung up with
    /// data still to send...).
    Error(io::Error),
}

impl CloseReason {
    /// Whether everything queued was delivered to the peer's kernel.
    ///
    /// ```
    /// use evloop::net::CloseReason;
    /// assert!(!CloseReason::Aborted.is_clean());
    /// ```
    pub fn is_clean(&self) -> bool {
        matches!(self, CloseReason::Graceful)
    }
}

/// What a connection's handler is told.
///
/// ```
/// use evloop::net::{CloseReason, ConnEvent};
/// let ev = ConnEvent::Closed(CloseReason::Graceful);
/// assert!(matches!(ev, ConnEvent::Closed(r) if r.is_clean()));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum ConnEvent {
    /// New bytes are in [`Conn::input`]. What the handler does not
    /// [`Conn::consume`] stays there for the next time.
    Data,
    /// The peer shut down its writing side: no more input will come.
    /// Writing is still possible; a server usually answers what it has
    /// and calls [`Conn::close`].
    Eof,
    /// The write queue fell to the low watermark after it had passed the
    /// high one: a producer that stopped because of
    /// [`Conn::is_congested`] can go on.
    Drained,
    /// The connection is gone, for the reason given: its last event. Its
    /// entry ([`Conns`]`[id]`, with the user's data) is still there during
    /// this call and removed right after.
    Closed(CloseReason),
}

/// The settings of a connection.
///
/// ```
/// use evloop::net::ConnOptions;
/// use std::time::Duration;
/// let opts = ConnOptions::new()
///     .read_buffer(4096)
///     .max_read_buffer(64 * 1024)
///     .watermarks(16 * 1024, 64 * 1024)
///     .idle_timeout(Some(Duration::from_secs(30)));
/// assert_eq!(opts.read_buffer_len(), 4096);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ConnOptions {
    read_buffer: usize,
    max_read_buffer: usize,
    low: usize,
    high: usize,
    idle: Option<Duration>,
    linger: Duration,
}

impl Default for ConnOptions {
    fn default() -> Self {
        ConnOptions::new()
    }
}

impl ConnOptions {
    /// The defaults: a 16 KiB read buffer that may grow to 1 MiB,
    /// watermarks of 64 KiB (low) and 256 KiB (high), no idle timeout, a
    /// linger of 5 s.
    ///
    /// ```
    /// let o = evloop::net::ConnOptions::new();
    /// assert_eq!(o.read_buffer_len(), 16 * 1024);
    /// assert_eq!(o.max_read_buffer_len(), 1 << 20);
    /// ```
    pub const fn new() -> Self {
        ConnOptions {
            read_buffer: 16 * 1024,
            max_read_buffer: 1 << 20,
            low: 64 * 1024,
            high: 256 * 1024,
            idle: None,
            linger: Duration::from_secs(5),
        }
    }

    /// The initial size of the input buffer (at least 1), allocated once
    /// per connection and reused: input that the handler consumes within
    /// this size costs no allocation. A message larger than it grows the
    /// buffer (see [`ConnOptions::max_read_buffer`]).
    ///
    /// ```
    /// let o = evloop::net::ConnOptions::new().read_buffer(1 << 20);
    /// assert_eq!(o.read_buffer_len(), 1 << 20);
    /// ```
    pub const fn read_buffer(mut self, bytes: usize) -> Self {
        self.read_buffer = if bytes == 0 { 1 } else { bytes };
        self
    }

    /// The input buffer's initial size.
    ///
    /// ```
    /// assert_eq!(evloop::net::ConnOptions::new().read_buffer(10).read_buffer_len(), 10);
    /// ```
    pub const fn read_buffer_len(&self) -> usize {
        self.read_buffer
    }

    /// The largest the input buffer may grow to, which is the largest
    /// message the handler can be handed whole (default 1 MiB, nginx's
    /// default `client_max_body_size`; tokio-util's length-delimited
    /// codec stops at 8 MiB). When the handler leaves a full buffer
    /// unconsumed, the buffer doubles, up to this size; once it is empty
    /// again it shrinks back to [`ConnOptions::read_buffer`]. A buffer full
    /// at this size that the handler consumes none of (and does not close
    /// or [pause](Conn::pause_reading)) ends the connection with
    /// [`CloseReason::Error`] of kind [`io::ErrorKind::InvalidData`]: the
    /// message cannot be taken. Never less than `read_buffer`: set it to
    /// `read_buffer`'s size for a buffer that never grows.
    ///
    /// ```
    /// let o = evloop::net::ConnOptions::new().read_buffer(4096).max_read_buffer(64 << 20);
    /// assert_eq!(o.max_read_buffer_len(), 64 << 20);
    /// ```
    pub const fn max_read_buffer(mut self, bytes: usize) -> Self {
        self.max_read_buffer = bytes;
        self
    }

    /// The input buffer's limit: [`ConnOptions::max_read_buffer`], or the
    /// initial size if that is larger.
    ///
    /// ```
    /// let o = evloop::net::ConnOptions::new().read_buffer(8192).max_read_buffer(0);
    /// assert_eq!(o.max_read_buffer_len(), 8192);
    /// ```
    pub const fn max_read_buffer_len(&self) -> usize {
        if self.max_read_buffer > self.read_buffer {
            self.max_read_buffer
        } else {
            self.read_buffer
        }
    }

    /// Backpressure: when more than `high` bytes wait to be sent, the
    /// connection stops reading (the peer is slow to read what it is sent,
    /// so do not take more work from it); it reads again, and the handler
    /// gets [`ConnEvent::Drained`], once no more than `low` wait. `low` is
    /// capped at `high`.
    ///
    /// ```
    /// let o = evloop::net::ConnOptions::new().watermarks(0, 1024);
    /// assert_eq!(o.watermark_levels(), (0, 1024));
    /// ```
    pub const fn watermarks(mut self, low: usize, high: usize) -> Self {
        self.low = if low > high { high } else { low };
        self.high = high;
        self
    }

    /// The (low, high) watermarks.
    ///
    /// ```
    /// assert_eq!(evloop::net::ConnOptions::new().watermark_levels(), (64 * 1024, 256 * 1024));
    /// ```
    pub const fn watermark_levels(&self) -> (usize, usize) {
        (self.low, self.high)
    }

    /// Close the connection ([`CloseReason::IdleTimeout`]) when nothing was
    /// read or written for this long (`None`, the default: never). Costs
    /// one timer per connection, pushed back with [`Timer::again`] when
    /// bytes move.
    ///
    /// ```
    /// use std::time::Duration;
    /// let o = evloop::net::ConnOptions::new().idle_timeout(Some(Duration::from_secs(10)));
    /// assert_eq!(o.idle_timeout_len(), Some(Duration::from_secs(10)));
    /// ```
    pub const fn idle_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.idle = timeout;
        self
    }

    /// The idle timeout.
    ///
    /// ```
    /// assert_eq!(evloop::net::ConnOptions::new().idle_timeout_len(), None);
    /// ```
    pub const fn idle_timeout_len(&self) -> Option<Duration> {
        self.idle
    }

    /// How long a graceful close waits, after its half-close, for the peer
    /// to close its side (reading and discarding what it still sends, so
    /// that closing does not reset the connection and destroy the reply in
    /// flight) before closing anyway (default 5 s). `Duration::ZERO`: no
    /// wait, the connection closes as soon as everything is sent and its
    /// writing side is shut down (what a server that closes after its
    /// reply, as an HTTP/1.0 one, wants: no timer, no further event).
    ///
    /// ```
    /// use std::time::Duration;
    /// let o = evloop::net::ConnOptions::new().linger(Duration::from_secs(1));
    /// assert_eq!(o.linger_len(), Duration::from_secs(1));
    /// ```
    pub const fn linger(mut self, wait: Duration) -> Self {
        self.linger = wait;
        self
    }

    /// The linger time.
    ///
    /// ```
    /// # use std::time::Duration;
    /// assert_eq!(evloop::net::ConnOptions::new().linger_len(), Duration::from_secs(5));
    /// ```
    pub const fn linger_len(&self) -> Duration {
        self.linger
    }
}

/// One buffered connection: its input, its write queue, its state and the
/// user's data. Reached through [`Conns`] (`conns[id]`).
///
/// ```
/// use evloop::net::{ConnEvent, ConnOptions, Conns};
/// use evloop::{Loop, RunMode, Sim};
/// use std::time::Duration;
///
/// let sim = Sim::new();
/// let sock = sim.socket("c", 1024);
/// let fd = sock.fd();
/// sim.deliver(Duration::from_millis(1), &sock, b"ping\n");
/// let mut lp: Loop<Conns<u32>> = Loop::with_backend(sim.backend());
/// let mut conns = Conns::new();
/// conns.open(&mut lp, sock, ConnOptions::new(), 0, |lp, conns, id, ev| {
///     if let ConnEvent::Data = ev {
///         let c = &mut conns[id];
///         c.data += c.input().len() as u32; // the user's data: a byte count
///         c.consume(c.input().len());
///         c.write(lp, b"pong\n");
///         c.close(lp);
///     }
/// })?;
/// lp.run(RunMode::Default, &mut conns)?;
/// assert_eq!(sim.sent(fd), b"pong\n");
/// # Ok::<(), evloop::Error>(())
/// ```
pub struct Conn<C> {
    /// The user's data for this connection.
    pub data: C,
    io: Io,
    timer: Option<Timer>,
    opts: ConnOptions,
    /// Its length is the buffer's size: `read_buffer`, more while a large
    /// message is being read.
    input: Vec<u8>,
    start: usize,
    end: usize,
    out: Vec<u8>,
    sent: usize,
    /// What the io watcher is registered for.
    interest: Interest,
    /// The connection's own io callback is running (it flushes and
    /// updates the interest when the handler returns).
    in_callback: bool,
    /// An event was fed to the io watcher and has not run yet.
    fed: bool,
    /// Where the connection is in its life (the write side and the close).
    state: State,
    /// What the read side knows, beside the state: the peer shut down its
    /// writing side (read end of file);
    eof: bool,
    /// [`Conn::pause_reading`] is in force;
    read_paused: bool,
    /// more than the high watermark was queued, and no more than the low
    /// one since.
    congested: bool,
    /// Tells this connection from the ones that held its slot before.
    generation: u32,
    /// Its socket is adopted by the loop's completion I/O: reads, writes
    /// and the half-close go through it ([`Port`]).
    adopted: bool,
    /// Flushing, half-closed through the completion I/O, which has not
    /// sent everything yet: the close waits for it (it is reported
    /// writable when it has).
    draining: bool,
}

/// Where a connection is in its life. What the read side knows (the
/// peer's end of file, a pause, the congestion) is in flags beside it.
///
/// ```text
/// Open --close--> Flushing --queue sent: half-close--> Lingering --peer's EOF--> finish
///  |                 |  (the peer's EOF seen already: finish)  |
///  +-----------------+--- abort, idle timeout, linger's end ---+--> Ending --> finish
/// finish: Closed (the handler's last event), then the entry is removed
/// ```
///
/// An error met by the io callback (a read, a write, a hang-up) finishes
/// the connection at once, from any state.
#[derive(Debug)]
enum State {
    /// Reading for the handler and writing.
    Open,
    /// Closing gracefully ([`Conn::close`]): sending what is queued;
    /// input is read and dropped.
    Flushing,
    /// Everything queued was sent and the writing side is shut down: input
    /// is read and dropped until the peer's end of file, or until the
    /// linger time is up.
    Lingering,
    /// To be closed by the io callback, for this reason, whatever is
    /// queued: [`Conn::abort`], the idle timeout, the linger's end.
    Ending(CloseReason),
    /// Its [`ConnEvent::Closed`] is being delivered; the entry goes right
    /// after.
    Closed,
}

impl<C> std::fmt::Debug for Conn<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("io", &self.io)
            .field("input", &(self.end - self.start))
            .field("queued", &self.queued())
            .field("state", &self.state)
            .field("eof", &self.eof)
            .finish_non_exhaustive()
    }
}

impl<C> Conn<C> {
    /// The bytes read and not yet consumed.
    ///
    /// ```
    /// use evloop::net::{ConnEvent, ConnOptions, Conns};
    /// use evloop::{Loop, RunMode, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let sock = sim.socket("c", 1024);
    /// let fd = sock.fd();
    /// sim.deliver(Duration::from_millis(1), &sock, b"GET /\r\n");
    /// let mut lp: Loop<Conns<usize>> = Loop::with_backend(sim.backend());
    /// let mut conns = Conns::new();
    /// let id = conns.open(&mut lp, sock, ConnOptions::new(), 0, |lp, conns, id, ev| {
    ///     if let ConnEvent::Data = ev {
    ///         assert_eq!(conns[id].input(), b"GET /\r\n"); // what has arrived
    ///         conns[id].data += 1;
    ///         lp.break_loop(evloop::Break::One);
    ///     }
    /// })?;
    /// lp.run(RunMode::Default, &mut conns)?;
    /// assert_eq!((conns[id].data, conns[id].input().len(), sim.sent(fd).len()), (1, 7, 0));
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn input(&self) -> &[u8] {
        &self.input[self.start..self.end]
    }

    /// Drops the first `n` bytes of [`Conn::input`] (all of it if `n` is
    /// larger). Consuming outside the connection's own events does not
    /// restart reading that stopped on a full buffer: call
    /// [`Conn::resume_reading`] then.
    ///
    /// ```
    /// use evloop::net::{ConnEvent, ConnOptions, Conns};
    /// use evloop::{Loop, RunMode, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let sock = sim.socket("c", 1024);
    /// let fd = sock.fd();
    /// sim.deliver(Duration::from_millis(1), &sock, b"ab");
    /// sim.deliver(Duration::from_millis(2), &sock, b"cd");
    /// let mut lp: Loop<Conns<()>> = Loop::with_backend(sim.backend());
    /// let mut conns = Conns::new();
    /// conns.open(&mut lp, sock, ConnOptions::new(), (), |lp, conns, id, ev| {
    ///     if let ConnEvent::Data = ev {
    ///         let c = &mut conns[id];
    ///         if c.input().len() == 4 {
    ///             c.write(lp, c.input().to_ascii_uppercase().as_slice());
    ///             c.consume(4);
    ///             c.close(lp);
    ///         } // else: keep the 2 bytes, wait for the rest
    ///     }
    /// })?;
    /// lp.run(RunMode::Default, &mut conns)?;
    /// assert_eq!(sim.sent(fd), b"ABCD");
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn consume(&mut self, n: usize) {
        self.start += n.min(self.end - self.start);
        if self.start == self.end {
            self.clear_input();
        }
    }

    /// Queues `bytes` to be sent. Inside the connection's own handler they
    /// are written when the handler returns; from anywhere else (another
    /// connection's handler, a timer) the connection's watcher is fed an
    /// event and writes them in this iteration. `WRITABLE` is watched only
    /// while something is left unsent. Ignored once the connection is
    /// closing ([`Conn::close`], [`Conn::abort`]).
    ///
    /// The queue has no limit: a producer checks [`Conn::is_congested`]
    /// (or [`Conn::queued`]) and waits for [`ConnEvent::Drained`].
    ///
    /// ```
    /// use evloop::net::{ConnEvent, ConnOptions, Conns};
    /// use evloop::{Loop, RunMode, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let sock = sim.socket("c", 1024);
    /// let fd = sock.fd();
    /// let mut lp: Loop<Conns<()>> = Loop::with_backend(sim.backend());
    /// let mut conns = Conns::new();
    /// let id = conns.open(&mut lp, sock, ConnOptions::new(), (), |_, _, _, _| {})?;
    /// conns[id].write(&mut lp, b"hello"); // from outside: a fed event sends it
    /// lp.run(RunMode::NoWait, &mut conns)?;
    /// assert_eq!(sim.sent(fd), b"hello");
    /// assert_eq!(conns[id].queued(), 0);
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn write<S>(&mut self, lp: &mut Loop<'_, S>, bytes: &[u8]) {
        if self.is_closing() || bytes.is_empty() {
            return;
        }
        self.out.extend_from_slice(bytes);
        self.note_queued();
        self.wake(lp);
    }

    /// Queues the first `n` bytes of the input as output and consumes them
    /// (an echo, without a copy to a buffer of one's own).
    ///
    /// ```
    /// use evloop::net::{ConnEvent, ConnOptions, Conns};
    /// use evloop::{Loop, RunMode, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let sock = sim.socket("c", 1024);
    /// let fd = sock.fd();
    /// sim.deliver(Duration::from_millis(1), &sock, b"echo me");
    /// sim.close_peer(Duration::from_millis(2), &sock);
    /// let mut lp: Loop<Conns<()>> = Loop::with_backend(sim.backend());
    /// let mut conns = Conns::new();
    /// conns.open(&mut lp, sock, ConnOptions::new(), (), |lp, conns, id, ev| match ev {
    ///     ConnEvent::Data => {
    ///         let n = conns[id].input().len();
    ///         conns[id].write_from_input(lp, n);
    ///     }
    ///     ConnEvent::Eof => conns[id].close(lp),
    ///     _ => {}
    /// })?;
    /// lp.run(RunMode::Default, &mut conns)?;
    /// assert_eq!(sim.sent(fd), b"echo me");
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn write_from_input<S>(&mut self, lp: &mut Loop<'_, S>, n: usize) {
        let n = n.min(self.end - self.start);
        if !self.is_closing() && n > 0 {
            self.out
                .extend_from_slice(&self.input[self.start..self.start + n]);
            self.note_queued();
            self.wake(lp);
        }
        self.consume(n);
    }

    /// Bytes queued and not yet sent.
    ///
    /// ```
    /// # use evloop::net::{ConnOptions, Conns};
    /// # use evloop::{Loop, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop<Conns<()>> = Loop::with_backend(sim.backend());
    /// let mut conns = Conns::new();
    /// let id = conns.open(&mut lp, sim.socket("c", 0), ConnOptions::new(), (), |_, _, _, _| {})?;
    /// conns[id].write(&mut lp, b"12345");
    /// assert_eq!(conns[id].queued(), 5); // sent when the loop runs
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn queued(&self) -> usize {
        self.out.len() - self.sent
    }

    /// Whether more than the high watermark is queued (and no more than
    /// the low one was queued since): reading is stopped meanwhile.
    ///
    /// ```
    /// # use evloop::net::{ConnOptions, Conns};
    /// # use evloop::{Loop, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop<Conns<()>> = Loop::with_backend(sim.backend());
    /// let mut conns = Conns::new();
    /// let opts = ConnOptions::new().watermarks(1, 4);
    /// let id = conns.open(&mut lp, sim.socket("c", 0), opts, (), |_, _, _, _| {})?;
    /// conns[id].write(&mut lp, b"12345");
    /// assert!(conns[id].is_congested());
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn is_congested(&self) -> bool {
        self.congested
    }

    /// Whether the peer shut down its writing side ([`ConnEvent::Eof`]
    /// was delivered).
    ///
    /// ```
    /// # use evloop::net::{ConnOptions, Conns};
    /// # use evloop::{Loop, Sim};
    /// # let sim = Sim::new();
    /// # let mut lp: Loop<Conns<()>> = Loop::with_backend(sim.backend());
    /// # let mut conns = Conns::new();
    /// let id = conns.open(&mut lp, sim.socket("c", 0), ConnOptions::new(), (), |_, _, _, _| {})?;
    /// assert!(!conns[id].is_eof());
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn is_eof(&self) -> bool {
        self.eof
    }

    /// Whether [`Conn::close`] or [`Conn::abort`] was called (or the idle
    /// timeout struck): the connection takes no more writes.
    ///
    /// ```
    /// # use evloop::net::{ConnOptions, Conns};
    /// # use evloop::{Loop, Sim};
    /// # let sim = Sim::new();
    /// # let mut lp: Loop<Conns<()>> = Loop::with_backend(sim.backend());
    /// # let mut conns = Conns::new();
    /// let id = conns.open(&mut lp, sim.socket("c", 0), ConnOptions::new(), (), |_, _, _, _| {})?;
    /// conns[id].close(&mut lp);
    /// assert!(conns[id].is_closing());
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn is_closing(&self) -> bool {
        !matches!(self.state, State::Open)
    }

    /// The connection's io watcher (for [`Loop::set_priority`], say; its
    /// interest is the connection's to manage).
    ///
    /// ```
    /// # use evloop::net::{ConnOptions, Conns};
    /// # use evloop::{Interest, Loop, Sim};
    /// # let sim = Sim::new();
    /// # let mut lp: Loop<Conns<()>> = Loop::with_backend(sim.backend());
    /// # let mut conns = Conns::new();
    /// let id = conns.open(&mut lp, sim.socket("c", 0), ConnOptions::new(), (), |_, _, _, _| {})?;
    /// assert_eq!((conns[id].watcher()).interest(&lp)?, Interest::READABLE);
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn watcher(&self) -> Io {
        self.io
    }

    /// Graceful close: stop reading (input is discarded from now on),
    /// send everything queued, shut down the writing side (the peer reads
    /// end of file), wait up to the linger time for the peer to close its
    /// side, then close. The handler then gets
    /// [`ConnEvent::Closed`]`(`[`CloseReason::Graceful`]`)`. The idle
    /// timeout, if any, still applies while queued data is sent.
    ///
    /// ```
    /// use evloop::net::{ConnEvent, ConnOptions, Conns};
    /// use evloop::{Loop, RunMode, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let sock = sim.socket("c", 1024);
    /// let fd = sock.fd();
    /// sim.close_peer(Duration::from_millis(3), &sock); // the peer closes too
    /// let mut lp: Loop<Conns<()>> = Loop::with_backend(sim.backend());
    /// let mut conns = Conns::new();
    /// let id = conns.open(&mut lp, sock, ConnOptions::new(), (), |lp, _, _, ev| {
    ///     if let ConnEvent::Closed(reason) = ev {
    ///         assert!(reason.is_clean());
    ///         assert_eq!(lp.now(), Duration::from_millis(3));
    ///     }
    /// })?;
    /// conns[id].write(&mut lp, b"last words");
    /// conns[id].close(&mut lp);
    /// lp.run(RunMode::Default, &mut conns)?;
    /// assert_eq!(sim.sent(fd), b"last words");
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn close<S>(&mut self, lp: &mut Loop<'_, S>) {
        if self.is_closing() {
            return;
        }
        self.state = State::Flushing;
        self.clear_input();
        self.wake(lp);
    }

    /// [`Conn::close`] with another linger time than
    /// [`ConnOptions::linger`]: for a shutdown that must not wait for
    /// clients that keep their connections open (a pool). With
    /// `Duration::ZERO` the connection still sends everything queued and
    /// shuts down its writing side, then closes at once, without waiting
    /// for the peer. On a connection closing
    /// already, it shortens the linger (a running one ends at the latest
    /// `linger` from now).
    ///
    /// ```
    /// use evloop::net::{ConnOptions, Conns};
    /// use evloop::{Loop, RunMode, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let sock = sim.socket("c", 1024);
    /// let fd = sock.fd(); // the simulated peer never closes
    /// let mut lp: Loop<Conns<()>> = Loop::with_backend(sim.backend());
    /// let mut conns = Conns::new();
    /// let id = conns.open(&mut lp, sock, ConnOptions::new(), (), |_, _, _, _| {})?;
    /// conns[id].write(&mut lp, b"bye");
    /// conns[id].close_with_linger(&mut lp, Duration::ZERO);
    /// lp.run(RunMode::Default, &mut conns)?;
    /// assert_eq!((sim.sent(fd), lp.now()), (b"bye".to_vec(), Duration::ZERO));
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn close_with_linger<S>(&mut self, lp: &mut Loop<'_, S>, linger: Duration) {
        match self.state {
            State::Open | State::Flushing => {
                self.opts.linger = linger;
                self.close(lp);
            }
            State::Lingering => {
                if let Some(t) = self.timer {
                    if t.remaining(lp).is_ok_and(|left| left > linger) {
                        let _ = t.set(lp, linger, Duration::ZERO);
                    }
                }
            }
            State::Ending(_) | State::Closed => {}
        }
    }

    /// Closes at once, dropping what is queued; the handler gets
    /// [`ConnEvent::Closed`]`(`[`CloseReason::Aborted`]`)`.
    ///
    /// ```
    /// use evloop::net::{CloseReason, ConnEvent, ConnOptions, Conns};
    /// use evloop::{Loop, RunMode, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop<Conns<bool>> = Loop::with_backend(sim.backend());
    /// let mut conns = Conns::new();
    /// let id = conns.open(&mut lp, sim.socket("c", 0), ConnOptions::new(), false, |_, conns, id, ev| {
    ///     if let ConnEvent::Closed(CloseReason::Aborted) = ev {
    ///         conns[id].data = true; // still there during its last event
    ///     }
    /// })?;
    /// conns[id].abort(&mut lp);
    /// lp.run(RunMode::Default, &mut conns)?;
    /// assert!(conns.is_empty());
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn abort<S>(&mut self, lp: &mut Loop<'_, S>) {
        self.end_with(CloseReason::Aborted);
        self.wake(lp);
    }

    /// Stops reading (until [`Conn::resume_reading`]), whatever the write
    /// queue holds: for a server that must finish something else first.
    ///
    /// ```
    /// # use evloop::net::{ConnOptions, Conns};
    /// # use evloop::{Interest, Loop, RunMode, Sim};
    /// # let sim = Sim::new();
    /// # let mut lp: Loop<Conns<()>> = Loop::with_backend(sim.backend());
    /// # let mut conns = Conns::new();
    /// let id = conns.open(&mut lp, sim.socket("c", 0), ConnOptions::new(), (), |_, _, _, _| {})?;
    /// conns[id].pause_reading(&mut lp);
    /// lp.run(RunMode::NoWait, &mut conns)?;
    /// assert_eq!((conns[id].watcher()).interest(&lp)?, Interest::NONE);
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn pause_reading<S>(&mut self, lp: &mut Loop<'_, S>) {
        if !self.read_paused {
            self.read_paused = true;
            self.wake(lp);
        }
    }

    /// Reads again after [`Conn::pause_reading`] (or after input was
    /// consumed outside the connection's events).
    ///
    /// ```
    /// # use evloop::net::{ConnOptions, Conns};
    /// # use evloop::{Interest, Loop, RunMode, Sim};
    /// # let sim = Sim::new();
    /// # let mut lp: Loop<Conns<()>> = Loop::with_backend(sim.backend());
    /// # let mut conns = Conns::new();
    /// let id = conns.open(&mut lp, sim.socket("c", 0), ConnOptions::new(), (), |_, _, _, _| {})?;
    /// conns[id].pause_reading(&mut lp);
    /// conns[id].resume_reading(&mut lp);
    /// lp.run(RunMode::NoWait, &mut conns)?;
    /// assert_eq!((conns[id].watcher()).interest(&lp)?, Interest::READABLE);
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn resume_reading<S>(&mut self, lp: &mut Loop<'_, S>) {
        self.read_paused = false;
        self.wake(lp);
    }

    /// The id of this connection, under `key` in its [`Conns`].
    fn id(&self, key: usize) -> ConnId {
        ConnId {
            index: key as u32,
            generation: self.generation,
        }
    }

    /// After bytes were queued: passed the high watermark?
    fn note_queued(&mut self) {
        if self.queued() > self.opts.high {
            self.congested = true;
        }
    }

    /// Makes the io callback run soon: at once if it is running (it looks
    /// at the state when the handler returns), else by a fed event, once.
    fn wake<S>(&mut self, lp: &mut Loop<'_, S>) {
        if !self.in_callback && !self.fed {
            self.fed = true;
            let _ = lp.feed_event(self.io, Ready::WRITABLE);
        }
    }

    /// Room left in the input buffer (moving the unconsumed bytes to the
    /// front when that makes room).
    fn room(&mut self) -> usize {
        if self.end == self.input.len() && self.start > 0 {
            self.input.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        self.input.len() - self.end
    }

    /// The bytes in the input buffer.
    fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// Empties the input buffer, and gives back what a large message
    /// grew it by.
    fn clear_input(&mut self) {
        self.start = 0;
        self.end = 0;
        if self.input.len() > self.opts.read_buffer {
            self.input.truncate(self.opts.read_buffer);
            self.input.shrink_to_fit();
        }
    }

    /// Whether the input buffer may still grow.
    fn can_grow(&self) -> bool {
        self.input.len() < self.opts.max_read_buffer_len()
    }

    /// Doubles the input buffer, up to its limit (called when the handler
    /// left it full: a message larger than it).
    fn grow(&mut self) {
        let size = self
            .input
            .len()
            .saturating_mul(2)
            .min(self.opts.max_read_buffer_len());
        self.input.resize(size, 0);
    }

    /// Whether reading is possible and wanted: while open, unless paused,
    /// congested or full; while closing (to drop what arrives), until the
    /// peer's end of file.
    fn can_read(&self) -> bool {
        !self.eof
            && match self.state {
                State::Open => {
                    !self.read_paused
                        && !self.congested
                        && (self.buffered() < self.input.len() || self.can_grow())
                }
                State::Flushing | State::Lingering => true,
                State::Ending(_) | State::Closed => false,
            }
    }

    /// Any state but `Ending` and `Closed` -> `Ending(reason)`: the io
    /// callback closes the connection when it runs next (a first reason
    /// stays).
    fn end_with(&mut self, reason: CloseReason) {
        if matches!(self.state, State::Open | State::Flushing | State::Lingering) {
            self.state = State::Ending(reason);
        }
    }

    /// `Ending(reason)` -> the reason, which the caller then finishes the
    /// connection with; any other state stays.
    fn take_ending(&mut self) -> Option<CloseReason> {
        match std::mem::replace(&mut self.state, State::Closed) {
            State::Ending(reason) => Some(reason),
            other => {
                self.state = other;
                None
            }
        }
    }

    fn wanted(&self) -> Interest {
        match (self.can_read(), self.queued() > 0 || self.draining) {
            (true, true) => Interest::BOTH,
            (true, false) => Interest::READABLE,
            (false, true) => Interest::WRITABLE,
            (false, false) => Interest::NONE,
        }
    }

    /// Writes what is queued until done or `WouldBlock`; whether any byte
    /// went out. Keeps the queue's allocation.
    fn flush(&mut self, stream: &mut impl Write) -> io::Result<bool> {
        let mut progress = false;
        while self.sent < self.out.len() {
            let offered = &self.out[self.sent..];
            let written = stream.write(offered);
            match written {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.sent += n;
                    progress = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
        } else if self.sent > self.out.len() / 2 {
            self.out.drain(..self.sent);
            self.sent = 0;
        }
        Ok(progress)
    }
}

/// The buffered connections of a loop, kept in the loop's user state: a
/// slab of [`Conn`]s indexed by [`ConnId`]. The loop's state type `S`
/// gives access to it with `AsMut<Conns<C>>` (implemented for `Conns`
/// itself, for a loop whose whole state is its connections).
///
/// ```
/// use evloop::net::{ConnEvent, ConnOptions, Conns};
/// use evloop::{Loop, RunMode, Sim};
/// use std::time::Duration;
///
/// // A server with more state than its connections.
/// #[derive(Default)]
/// struct Server { conns: Conns<()>, lines: usize }
/// impl AsMut<Conns<()>> for Server {
///     fn as_mut(&mut self) -> &mut Conns<()> { &mut self.conns }
/// }
///
/// let sim = Sim::new();
/// let sock = sim.socket("c", 1024);
/// sim.deliver(Duration::from_millis(1), &sock, b"a\nb\n");
/// sim.close_peer(Duration::from_millis(2), &sock);
/// let mut lp: Loop<Server> = Loop::with_backend(sim.backend());
/// let mut server = Server::default();
/// server.conns.open(&mut lp, sock, ConnOptions::new(), (), |lp, server: &mut Server, id, ev| {
///     match ev {
///         ConnEvent::Data => {
///             let c = &mut server.conns[id];
///             server.lines += c.input().iter().filter(|&&b| b == b'\n').count();
///             c.consume(c.input().len());
///         }
///         ConnEvent::Eof => server.conns[id].close(lp),
///         _ => {}
///     }
/// })?;
/// lp.run(RunMode::Default, &mut server)?;
/// assert_eq!(server.lines, 2);
/// assert!(server.conns.is_empty());
/// # Ok::<(), evloop::Error>(())
/// ```
pub struct Conns<C> {
    /// A freed key is reused; the generation in each `Conn` tells a stale
    /// `ConnId` from the connection now under its key.
    slab: Slab<Conn<C>>,
    /// The generation of the next connection opened: one counter for all
    /// (a stale id could name a new connection only after 2^32 opens).
    generation: u32,
}

impl<C> Default for Conns<C> {
    fn default() -> Self {
        Conns::new()
    }
}

impl<C> AsMut<Conns<C>> for Conns<C> {
    fn as_mut(&mut self) -> &mut Conns<C> {
        self
    }
}

impl<C> std::fmt::Debug for Conns<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conns").field("len", &self.len()).finish()
    }
}

impl<C> Index<ConnId> for Conns<C> {
    type Output = Conn<C>;
    fn index(&self, id: ConnId) -> &Conn<C> {
        self.get(id).expect("no such connection (closed?)")
    }
}

impl<C> IndexMut<ConnId> for Conns<C> {
    fn index_mut(&mut self, id: ConnId) -> &mut Conn<C> {
        self.get_mut(id).expect("no such connection (closed?)")
    }
}

impl<C> Conns<C> {
    /// No connections.
    ///
    /// ```
    /// let conns: evloop::net::Conns<()> = evloop::net::Conns::new();
    /// assert_eq!(conns.len(), 0);
    /// ```
    pub const fn new() -> Self {
        Conns {
            slab: Slab::new(),
            generation: 0,
        }
    }

    /// How many connections are open (closing ones included).
    ///
    /// ```
    /// # use evloop::net::{ConnOptions, Conns};
    /// # use evloop::{Loop, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop<Conns<()>> = Loop::with_backend(sim.backend());
    /// let mut conns = Conns::new();
    /// assert!(conns.is_empty());
    /// let id = conns.open(&mut lp, sim.socket("c", 0), ConnOptions::new(), (), |_, _, _, _| {})?;
    /// assert_eq!(conns.len(), 1);
    /// assert!(conns.contains(id));
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.slab.len()
    }

    /// Whether there is none.
    ///
    /// ```
    /// # use evloop::net::{ConnOptions, Conns};
    /// # use evloop::{Loop, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop<Conns<()>> = Loop::with_backend(sim.backend());
    /// let mut conns = Conns::new();
    /// assert!(conns.is_empty());
    /// let id = conns.open(&mut lp, sim.socket("c", 0), ConnOptions::new(), (), |_, _, _, _| {})?;
    /// assert_eq!(conns.len(), 1);
    /// assert!(conns.contains(id));
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }

    /// Whether `id` names an open connection.
    ///
    /// ```
    /// # use evloop::net::{ConnOptions, Conns};
    /// # use evloop::{Loop, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop<Conns<()>> = Loop::with_backend(sim.backend());
    /// let mut conns = Conns::new();
    /// assert!(conns.is_empty());
    /// let id = conns.open(&mut lp, sim.socket("c", 0), ConnOptions::new(), (), |_, _, _, _| {})?;
    /// assert_eq!(conns.len(), 1);
    /// assert!(conns.contains(id));
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn contains(&self, id: ConnId) -> bool {
        self.get(id).is_some()
    }

    /// The connection `id`, if it is open.
    ///
    /// ```
    /// # use evloop::net::{ConnOptions, Conns};
    /// # use evloop::{Loop, Sim};
    /// # let sim = Sim::new();
    /// # let mut lp: Loop<Conns<u8>> = Loop::with_backend(sim.backend());
    /// let mut conns = Conns::new();
    /// let id = conns.open(&mut lp, sim.socket("c", 0), ConnOptions::new(), 7, |_, _, _, _| {})?;
    /// assert_eq!(conns.get(id).map(|c| c.data), Some(7));
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn get(&self, id: ConnId) -> Option<&Conn<C>> {
        let conn = self.slab.get(id.index as usize)?;
        (conn.generation == id.generation).then_some(conn)
    }

    /// The connection `id`, if it is open, to change.
    ///
    /// ```
    /// # use evloop::net::{ConnOptions, Conns};
    /// # use evloop::{Loop, Sim};
    /// # let sim = Sim::new();
    /// # let mut lp: Loop<Conns<u8>> = Loop::with_backend(sim.backend());
    /// let mut conns = Conns::new();
    /// let id = conns.open(&mut lp, sim.socket("c", 0), ConnOptions::new(), 7, |_, _, _, _| {})?;
    /// conns.get_mut(id).unwrap().data += 1;
    /// assert_eq!(conns[id].data, 8);
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn get_mut(&mut self, id: ConnId) -> Option<&mut Conn<C>> {
        let conn = self.slab.get_mut(id.index as usize)?;
        (conn.generation == id.generation).then_some(conn)
    }

    /// Every open connection, with its id (in slot order).
    ///
    /// ```
    /// # use evloop::net::{ConnOptions, Conns};
    /// # use evloop::{Loop, Sim};
    /// # let sim = Sim::new();
    /// # let mut lp: Loop<Conns<u8>> = Loop::with_backend(sim.backend());
    /// let mut conns = Conns::new();
    /// for n in 0..3 {
    ///     conns.open(&mut lp, sim.socket("c", 0), ConnOptions::new(), n, |_, _, _, _| {})?;
    /// }
    /// let data: Vec<u8> = conns.iter().map(|(_, c)| c.data).collect();
    /// assert_eq!(data, [0, 1, 2]);
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn iter(&self) -> impl Iterator<Item = (ConnId, &Conn<C>)> + '_ {
        self.slab.iter().map(|(key, c)| (c.id(key), c))
    }

    /// Every open connection, with its id, to change: to write to all of
    /// them (a chat's broadcast), say.
    ///
    /// ```
    /// # use evloop::net::{ConnOptions, Conns};
    /// # use evloop::{Loop, Sim};
    /// # let sim = Sim::new();
    /// # let mut lp: Loop<Conns<()>> = Loop::with_backend(sim.backend());
    /// let mut conns = Conns::new();
    /// let a = conns.open(&mut lp, sim.socket("a", 0), ConnOptions::new(), (), |_, _, _, _| {})?;
    /// let b = conns.open(&mut lp, sim.socket("b", 0), ConnOptions::new(), (), |_, _, _, _| {})?;
    /// for (id, c) in conns.iter_mut() {
    ///     if id != a {
    ///         c.write(&mut lp, b"to everyone but a\n");
    ///     }
    /// }
    /// assert_eq!((conns[a].queued(), conns[b].queued()), (0, 18));
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (ConnId, &mut Conn<C>)> + '_ {
        self.slab.iter_mut().map(|(key, c)| (c.id(key), c))
    }

    /// [`Conn::close`] on every connection: the shutdown of a server
    /// (after it stopped accepting).
    ///
    /// ```
    /// # use evloop::net::{ConnOptions, Conns};
    /// # use evloop::{Loop, RunMode, RunOutcome, Sim};
    /// # let sim = Sim::new();
    /// # let mut lp: Loop<Conns<()>> = Loop::with_backend(sim.backend());
    /// let mut conns = Conns::new();
    /// for _ in 0..3 {
    ///     conns.open(&mut lp, sim.socket("c", 64), ConnOptions::new(), (), |_, _, _, _| {})?;
    /// }
    /// conns.close_all(&mut lp);
    /// // The simulated peers never close: each closes after its linger.
    /// assert_eq!(lp.run(RunMode::Default, &mut conns)?, RunOutcome::NoActiveWatchers);
    /// assert!(conns.is_empty());
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn close_all<S>(&mut self, lp: &mut Loop<'_, S>) {
        for (_, c) in self.iter_mut() {
            c.close(lp);
        }
    }

    /// [`Conn::close_with_linger`] on every connection: a shutdown whose
    /// graceful close waits at most `linger` for the peers to close their
    /// side (`Duration::ZERO`: not at all, as a tokio server that drops
    /// its sockets), instead of [`ConnOptions::linger`] (5 s by default).
    ///
    /// ```
    /// # use evloop::net::{ConnOptions, Conns};
    /// # use evloop::{Loop, RunMode, RunOutcome, Sim};
    /// # use std::time::Duration;
    /// # let sim = Sim::new();
    /// # let mut lp: Loop<Conns<()>> = Loop::with_backend(sim.backend());
    /// let mut conns = Conns::new();
    /// for _ in 0..3 {
    ///     conns.open(&mut lp, sim.socket("c", 64), ConnOptions::new(), (), |_, _, _, _| {})?;
    /// }
    /// conns.close_all_with_linger(&mut lp, Duration::ZERO);
    /// // The simulated peers never close: no linger, all closed at once.
    /// assert_eq!(lp.run(RunMode::Default, &mut conns)?, RunOutcome::NoActiveWatchers);
    /// assert_eq!(lp.now(), Duration::ZERO);
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn close_all_with_linger<S>(&mut self, lp: &mut Loop<'_, S>, linger: Duration) {
        for (_, c) in self.iter_mut() {
            c.close_with_linger(lp, linger);
        }
    }

    /// Adds a connection: an io watcher that owns `stream` (non-blocking),
    /// and a timer if `options` has an idle timeout. `handler` gets the
    /// connection's [`ConnEvent`]s; it finds the connection as
    /// `state.as_mut()[id]`. The loop's state `S` must lead to this
    /// `Conns` (`AsMut`), since the watchers look their connection up
    /// there.
    ///
    /// Errors: those of [`Loop::io`] and [`Loop::timer`] (nothing is added
    /// then, and the stream is closed).
    ///
    /// ```
    /// use evloop::net::{ConnEvent, ConnOptions, Conns};
    /// use evloop::{Loop, RunMode};
    /// use std::io::{Read, Write};
    /// use std::os::unix::net::UnixStream;
    /// let (mine, mut peer) = UnixStream::pair().unwrap();
    /// mine.set_nonblocking(true).unwrap();
    /// let mut lp: Loop<Conns<()>> = Loop::new()?;
    /// let mut conns = Conns::new();
    /// conns.open(&mut lp, mine, ConnOptions::new(), (), |lp, conns, id, ev| match ev {
    ///     ConnEvent::Data => {
    ///         let n = conns[id].input().len();
    ///         conns[id].write_from_input(lp, n);
    ///     }
    ///     ConnEvent::Eof => conns[id].close(lp),
    ///     _ => {}
    /// })?;
    /// peer.write_all(b"over a socket pair")?;
    /// peer.shutdown(std::net::Shutdown::Write)?;
    /// lp.run(RunMode::Default, &mut conns)?; // until the connection is done
    /// let mut back = String::new();
    /// peer.read_to_string(&mut back)?;
    /// assert_eq!(back, "over a socket pair");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open<'s, S, T, F>(
        &mut self,
        lp: &mut Loop<'s, S>,
        stream: T,
        options: ConnOptions,
        data: C,
        handler: F,
    ) -> Result<ConnId>
    where
        S: AsMut<Conns<C>>,
        C: 's,
        T: Stream,
        F: FnMut(&mut Loop<'s, S>, &mut S, ConnId, ConnEvent) + 's,
    {
        // The key is known before the connection is in (its watchers need
        // its id); nothing is inserted if they cannot be made.
        let slot = self.slab.vacant_entry();
        let generation = self.generation;
        let id = ConnId {
            index: u32::try_from(slot.key()).expect("fewer than 2^32 connections"),
            generation,
        };
        let mut handler = handler;
        let completion_fd = stream.completion_fd();
        let io = lp.io(stream, Interest::READABLE, move |lp, state, ev| {
            let driven = panic::catch_unwind(AssertUnwindSafe(|| {
                drive::<S, C, T, F>(lp, state, ev, id, &mut handler)
            }));
            if let Err(payload) = driven {
                // The handler panicked: the connection's own callback is
                // no longer running, so a write from outside must wake it
                // again. The panic goes on to the caller of `run`.
                if let Some(c) = state.as_mut().get_mut(id) {
                    c.in_callback = false;
                }
                panic::resume_unwind(payload);
            }
        });
        let io = io?;
        // Adopted before the loop registers the fd (its next flush): the
        // backend then receives for it instead of polling it.
        let adopted = match (completion_fd, lp.completion_io()) {
            (Some(fd), Some(ring)) => ring.adopt(fd, Adopt::Stream).is_ok(),
            _ => false,
        };
        let timer = match options.idle {
            None => None,
            Some(idle) => match new_timer::<S, C>(lp, id, idle, idle) {
                Ok(t) => Some(t),
                Err(e) => {
                    release(lp, completion_fd, adopted);
                    let _ = lp.remove(io);
                    return Err(e);
                }
            },
        };
        let conn = Conn {
            data,
            io,
            timer,
            opts: options,
            input: vec![0; options.read_buffer],
            start: 0,
            end: 0,
            out: Vec::new(),
            sent: 0,
            interest: Interest::READABLE,
            in_callback: false,
            fed: false,
            state: State::Open,
            eof: false,
            read_paused: false,
            congested: false,
            generation,
            adopted,
            draining: false,
        };
        slot.insert(conn);
        self.generation = generation.wrapping_add(1);
        Ok(id)
    }

    /// Takes the connection `id` out: its id goes stale.
    fn remove(&mut self, id: ConnId) -> Option<Conn<C>> {
        self.get(id)?;
        Some(self.slab.remove(id.index as usize))
    }
}

/// A connection's timer: its idle timeout, then its linger. Its callback
/// marks the connection and wakes its io watcher, which closes it.
fn new_timer<'s, S, C>(
    lp: &mut Loop<'s, S>,
    id: ConnId,
    after: Duration,
    repeat: Duration,
) -> Result<Timer>
where
    S: AsMut<Conns<C>>,
    C: 's,
{
    lp.timer(after, repeat, move |lp, state: &mut S, t| {
        match state.as_mut().get_mut(id) {
            Some(c) => {
                // After the half-close, the peer just did not close its
                // side in time: everything was sent.
                c.end_with(if matches!(c.state, State::Lingering) {
                    CloseReason::Graceful
                } else {
                    CloseReason::IdleTimeout
                });
                c.wake(lp);
            }
            None => {
                let _ = lp.remove(t);
            }
        }
    })
}

/// How many times one io event may read a full buffer and hand it over
/// before the watcher yields to the others.
const MAX_ROUNDS: usize = 4;

/// One run of a connection's io callback: what its event said, and how far
/// it got.
struct Pass {
    /// The hang-up and error bits of the event (`HUP`, `ERROR`).
    hangup: Ready,
    /// Whether the next read step reads: the event said readable (or hung
    /// up), or the last read filled the buffer and the handler made room.
    read_more: bool,
    /// The rounds of reading and handing over begun so far.
    rounds: usize,
    /// Bytes moved (the idle timer is pushed back).
    progress: bool,
    /// The watcher is edge-triggered (the user changed its trigger): reads
    /// go on until `WouldBlock`, since no event would report the rest.
    edge: bool,
}

impl Pass {
    fn new(ready: Ready, edge: bool) -> Pass {
        let hangup = ready.filter(Interest::NONE);
        Pass {
            hangup,
            read_more: ready.is_readable() || !hangup.is_empty(),
            rounds: 0,
            progress: false,
            edge,
        }
    }
}

/// The steps of [`drive`]. A round is `Write`, `Round`, then `Read` and
/// `Deliver` (or `Drained`, then the next round); `Settle` and `Finish`
/// end the run.
enum Step {
    /// Take the callback's part in the connection's wake-ups.
    Start,
    /// Finish a pending close (`Ending`); write what is queued; half-close
    /// a graceful close that has sent everything.
    Write,
    /// Begin a round, if the event has rounds left, with `Drained` if the
    /// queue fell to the low watermark.
    Round,
    /// Tell the handler [`ConnEvent::Drained`]; then write what it queued.
    Drained,
    /// Read what arrived: for the handler while open, to drop it while
    /// closing. Nothing to read and nothing to send after a hang-up: the
    /// peer is gone.
    Read,
    /// Hand the handler what a read found; then write what it queued.
    Deliver(Found),
    /// The event is done: the idle timer, the interest, and a wake-up for
    /// what no readiness would bring back.
    Settle,
    /// The connection ends, for this reason.
    Finish(CloseReason),
}

/// What one read step found.
struct Found {
    /// New input.
    data: bool,
    /// The peer's end of file.
    eof: bool,
    /// The input buffer filled up.
    full: bool,
    /// The bytes in the input buffer after the read.
    buffered: usize,
}

/// The connection's io callback: one step after another (see [`Step`]),
/// the connection looked up again before each (a handler has the whole
/// state; the connection is gone only if the user replaced it).
fn drive<'s, S, C, T, F>(
    lp: &mut Loop<'s, S>,
    state: &mut S,
    ev: IoEvent<'_, T>,
    id: ConnId,
    handler: &mut F,
) where
    S: AsMut<Conns<C>>,
    C: 's,
    T: Stream,
    F: FnMut(&mut Loop<'s, S>, &mut S, ConnId, ConnEvent),
{
    let edge = ev
        .watcher
        .interest(lp)
        .is_ok_and(|i| i.trigger() == Trigger::Edge);
    let (me, stream, mut pass) = (ev.watcher, ev.source, Pass::new(ev.ready, edge));
    let mut step = Step::Start;
    loop {
        let Some(c) = state.as_mut().get_mut(id) else {
            release(lp, stream.completion_fd(), true);
            let _ = lp.remove(me);
            return;
        };
        step = match step {
            Step::Start => c.start_pass(),
            Step::Write => c.write_out::<S>(lp, id, stream, &mut pass),
            Step::Round => c.next_round(&mut pass),
            Step::Drained => {
                handler(lp, state, id, ConnEvent::Drained);
                Step::Write
            }
            Step::Read => {
                let adopted = c.adopted;
                c.read_in(&mut Port::new(lp, stream, adopted), &mut pass)
            }
            Step::Deliver(found) => deliver(lp, state, id, handler, found, &mut pass),
            Step::Settle => return c.settle(lp, me, &pass),
            Step::Finish(reason) => {
                let adopted = stream.completion_fd().filter(|_| c.adopted);
                return finish(lp, state, id, (me, adopted), handler, reason);
            }
        };
    }
}

/// The steps of [`drive`] that need only the connection.
impl<C> Conn<C> {
    /// Step `Start`: a wake-up from now on changes what this run does
    /// (it looks at the state after every handler call) instead of
    /// feeding an event; the one fed, if any, is this one.
    fn start_pass(&mut self) -> Step {
        self.fed = false;
        self.in_callback = true;
        Step::Write
    }

    /// Step `Write`.
    fn write_out<'s, S>(
        &mut self,
        lp: &mut Loop<'s, S>,
        id: ConnId,
        stream: &mut impl Stream,
        pass: &mut Pass,
    ) -> Step
    where
        S: AsMut<Conns<C>>,
        C: 's,
    {
        if let Some(reason) = self.take_ending() {
            return Step::Finish(reason);
        }
        match self.flush(&mut Port::new(lp, stream, self.adopted)) {
            Ok(p) => pass.progress |= p,
            Err(e) => return Step::Finish(CloseReason::Error(e)),
        }
        if matches!(self.state, State::Flushing) && self.queued() == 0 {
            return self.half_close::<S>(lp, id, stream);
        }
        Step::Round
    }

    /// `Flushing` -> `Lingering`, once everything queued is sent: shuts
    /// down the writing side and lets the timer count the linger; or, if
    /// the peer has closed its side already, finishes.
    fn half_close<'s, S>(
        &mut self,
        lp: &mut Loop<'s, S>,
        id: ConnId,
        stream: &mut impl Stream,
    ) -> Step
    where
        S: AsMut<Conns<C>>,
        C: 's,
    {
        let mut port = Port::new(lp, stream, self.adopted);
        if !self.draining {
            // Errors (the peer is gone already) change nothing: the
            // connection is closed soon either way.
            let _ = port.shutdown();
        }
        // Through the completion I/O, the shutdown waits for what it took
        // to send; so does the close (it would be lost with the loop).
        self.draining = port.unsent() > 0;
        if self.draining {
            return Step::Settle;
        }
        self.state = State::Lingering;
        // A zero linger waits for nothing: no timer, no further event.
        if self.eof || self.opts.linger.is_zero() {
            return Step::Finish(CloseReason::Graceful);
        }
        let linger = self.opts.linger;
        match self.timer {
            Some(t) => {
                let _ = t.set(lp, linger, Duration::ZERO);
            }
            None => match new_timer::<S, C>(lp, id, linger, Duration::ZERO) {
                Ok(t) => self.timer = Some(t),
                Err(e) => return Step::Finish(CloseReason::Error(io::Error::other(e.to_string()))),
            },
        }
        Step::Round
    }

    /// Step `Round`.
    fn next_round(&mut self, pass: &mut Pass) -> Step {
        if pass.rounds == MAX_ROUNDS {
            return Step::Settle;
        }
        pass.rounds += 1;
        if self.congested && self.queued() <= self.opts.low {
            self.congested = false;
            if matches!(self.state, State::Open) {
                return Step::Drained;
            }
        }
        Step::Read
    }

    /// Step `Read`.
    fn read_in(&mut self, stream: &mut impl Read, pass: &mut Pass) -> Step {
        if !(pass.read_more && self.can_read()) {
            if self.peer_gone(pass) {
                // A level-triggered HUP would come back forever.
                return Step::Finish(CloseReason::Error(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    "the peer hung up",
                )));
            }
            return Step::Settle;
        }
        let found = match self.read_some(stream, pass.edge) {
            Ok(found) => found,
            Err(e) => return Step::Finish(CloseReason::Error(e)),
        };
        pass.progress |= found.data;
        match self.state {
            State::Open => {
                pass.read_more = found.full;
                if found.data || found.eof {
                    Step::Deliver(found)
                } else {
                    Step::Settle
                }
            }
            // Closing: what the peer still sends is dropped.
            _ => {
                self.clear_input();
                if self.eof && matches!(self.state, State::Lingering) {
                    Step::Finish(CloseReason::Graceful)
                } else if found.eof {
                    Step::Write // flush and half-close, then finish
                } else {
                    Step::Settle
                }
            }
        }
    }

    /// Whether the event said the peer hung up (or the socket failed) and
    /// there is nothing to read and nothing to send: the peer is gone.
    fn peer_gone(&self, pass: &Pass) -> bool {
        !pass.hangup.is_empty() && self.queued() == 0 && !self.can_read()
    }

    /// Reads until a short read (`edge`: until `WouldBlock`), the end of
    /// file or a full buffer (while closing, a full buffer is emptied and
    /// reading goes on). A read that gives less than the room offered has
    /// emptied the socket for now, and the level-triggered watcher reports
    /// what comes next: reading on would cost a `recvfrom` that fails with
    /// `EAGAIN` per event (tokio's rule, and `exec::AsyncFd`'s). A buffer
    /// found full before any read is one the handler left full: it grows.
    fn read_some(&mut self, stream: &mut impl Read, edge: bool) -> io::Result<Found> {
        let dropping = !matches!(self.state, State::Open);
        let (mut data, mut eof, mut full) = (false, false, false);
        let mut first = true;
        loop {
            if self.room() == 0 {
                if dropping {
                    self.clear_input();
                    continue;
                }
                if !(first && self.can_grow()) {
                    full = true;
                    break;
                }
                self.grow();
            }
            first = false;
            let end = self.end;
            let read = stream.read(&mut self.input[end..]);
            match read {
                Ok(0) => {
                    self.eof = true;
                    eof = true;
                    break;
                }
                Ok(n) => {
                    self.end += n;
                    data = true;
                    if !edge && self.end < self.input.len() {
                        break; // a short read
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Found {
            data,
            eof,
            full,
            buffered: self.buffered(),
        })
    }

    /// Step `Settle`.
    fn settle<S>(&mut self, lp: &mut Loop<'_, S>, me: Io, pass: &Pass) {
        // Traffic pushes back the idle timeout, not the linger.
        if pass.progress && !matches!(self.state, State::Lingering) {
            if let Some(t) = self.timer {
                let _ = t.again(lp);
            }
        }
        let mut want = self.wanted();
        if pass.edge {
            want = want.with_trigger(Trigger::Edge);
        }
        if want != self.interest {
            self.interest = want;
            let _ = me.set_interest(lp, want);
        }
        // The rounds ran out with work left that no readiness would bring
        // back: come back next iteration for it. (Fed after the interest
        // change, which would narrow an event queued before it.)
        let mut come_back = Ready::EMPTY;
        if matches!(self.state, State::Open) && self.congested && self.queued() <= self.opts.low {
            // Right after a flush that ended the congestion: nothing is
            // queued and reading is still stopped. For the `Drained` and
            // the reads.
            come_back = Ready::WRITABLE;
        }
        if self.peer_gone(pass) {
            // The peer hung up, nothing is queued and nothing can be read
            // (the end of file came in the last round): the interest is
            // none, so the hang-up is not reported again. For the close,
            // with the event's hang-up bits.
            come_back = Ready::WRITABLE | pass.hangup;
        }
        if !come_back.is_empty() && !self.fed {
            self.fed = true;
            let _ = lp.feed_event(me, come_back);
        }
        self.in_callback = false;
    }
}

/// Step `Deliver`: the handler gets `Data` and `Eof`, as found. The next
/// round writes what it queued, and reads again only if the buffer was
/// full and the handler made room, or the buffer can grow. A buffer full
/// at its limit that the handler took nothing from, and left open and
/// reading, ends the connection: the message cannot be taken.
fn deliver<'s, S, C, F>(
    lp: &mut Loop<'s, S>,
    state: &mut S,
    id: ConnId,
    handler: &mut F,
    found: Found,
    pass: &mut Pass,
) -> Step
where
    S: AsMut<Conns<C>>,
    F: FnMut(&mut Loop<'s, S>, &mut S, ConnId, ConnEvent),
{
    if found.data {
        handler(lp, state, id, ConnEvent::Data);
    }
    if found.eof {
        handler(lp, state, id, ConnEvent::Eof);
    }
    if let Some(c) = state.as_mut().get_mut(id) {
        if c.buffered() >= found.buffered && !c.can_grow() {
            pass.read_more = false;
            if found.full && matches!(c.state, State::Open) && !c.read_paused && !c.eof {
                let limit = c.opts.max_read_buffer_len();
                return Step::Finish(CloseReason::Error(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "the input buffer is full at its limit (ConnOptions::max_read_buffer, \
                         {limit} bytes) and the handler consumed none of it"
                    ),
                )));
            }
        }
    }
    Step::Write
}

/// Step `Finish`: any state -> `Closed`, the handler's last event, then
/// the removal: the entry, its timer, and its io watcher (the stream is
/// closed when the callback returns).
fn finish<'s, S, C, F>(
    lp: &mut Loop<'s, S>,
    state: &mut S,
    id: ConnId,
    (me, adopted): (Io, Option<crate::RawFd>),
    handler: &mut F,
    reason: CloseReason,
) where
    S: AsMut<Conns<C>>,
    F: FnMut(&mut Loop<'s, S>, &mut S, ConnId, ConnEvent),
{
    if let Some(c) = state.as_mut().get_mut(id) {
        c.in_callback = true;
        c.state = State::Closed;
    }
    // The connection goes even if the handler panics on its last event.
    let told = panic::catch_unwind(AssertUnwindSafe(|| {
        handler(lp, state, id, ConnEvent::Closed(reason))
    }));
    if let Some(c) = state.as_mut().remove(id) {
        if let Some(t) = c.timer {
            let _ = lp.remove(t);
        }
    }
    // Given back before the close: what it took to send still goes out.
    release(lp, adopted, true);
    let _ = lp.remove(me);
    if let Err(payload) = told {
        panic::resume_unwind(payload);
    }
}

/// A connection's stream for one step: through the loop's completion I/O
/// when the connection's socket is adopted, else the stream itself.
struct Port<'a, T> {
    stream: &'a mut T,
    ring: Option<std::rc::Rc<dyn CompletionIo>>,
}

impl<'a, T: Stream> Port<'a, T> {
    fn new<S>(lp: &mut Loop<'_, S>, stream: &'a mut T, adopted: bool) -> Port<'a, T> {
        let ring = if adopted { lp.completion_io() } else { None };
        Port { stream, ring }
    }

    fn shutdown(&mut self) -> io::Result<()> {
        match self.ring.as_deref() {
            Some(ring) => self.stream.shutdown_completed(ring),
            None => self.stream.shutdown_write(),
        }
    }

    /// Bytes the completion I/O took and has not sent (asked of the
    /// stream, so that a recording has the answer).
    fn unsent(&mut self) -> usize {
        self.stream.unsent_completed(self.ring.as_deref())
    }
}

impl<T: Stream> Read for Port<'_, T> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.ring.as_deref() {
            Some(ring) => self.stream.read_completed(ring, buf),
            None => self.stream.read(buf),
        }
    }
}

impl<T: Stream> Write for Port<'_, T> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match self.ring.as_deref() {
            Some(ring) => self.stream.write_completed(ring, bytes),
            None => self.stream.write(bytes),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Gives an adopted socket back to the loop's completion I/O before its
/// watcher is removed (and the socket closed).
fn release<S>(lp: &mut Loop<'_, S>, fd: Option<crate::RawFd>, adopted: bool) {
    if let (true, Some(fd), Some(ring)) = (adopted, fd, lp.completion_io()) {
        ring.release(fd);
    }
}
