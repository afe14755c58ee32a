//! TCP server helpers: what every server on the loop would otherwise write
//! by hand, and where hand-written servers break.
//!
//! - [`ListenOptions`]: a listening socket with the backlog and
//!   `SO_REUSEPORT` chosen (std's `TcpListener::bind` fixes the backlog
//!   at 128), non-blocking and close-on-exec.
//! - [`Acceptor`]: accepts until `WouldBlock`; accepted sockets are
//!   non-blocking and close-on-exec in one `accept4` call where the
//!   platform has it; out of descriptors (`EMFILE`, `ENFILE`) it stops
//!   watching the listener and retries from a timer instead of spinning,
//!   and reports the error once per episode, not per attempt.
//! - [`Conns`]: buffered connections (libevent's bufferevent, libuv's
//!   streams): a write queue that watches `WRITABLE` only while there is
//!   unsent data, high and low watermarks that stop reading while the peer
//!   is slow, reads into a reused buffer, an idle timeout, and a graceful
//!   close that flushes, half-closes and then closes.
//!
//! `docs/servers.md` is the guide: accepting, backpressure, half-close,
//! timeouts, fd exhaustion, signals and shutdown, one loop per core.
//!
//! On WASI (wasm32-wasip1) the acceptor and the connections work on a
//! listener the runtime preopened
//! (`backends::wasi::preopened_listeners`); what a guest cannot do
//! ([`ListenOptions::bind`], [`fd_limits`], [`raise_fd_limit`]) returns
//! an `Err` of kind [`io::ErrorKind::Unsupported`] that names WASI.
//!
//! A complete TCP echo server and client on loopback:
//!
//! ```
//! use evloop::net::{Acceptor, ConnEvent, ConnOptions, Conns, ListenOptions};
//! use evloop::{Loop, RunMode};
//! use std::io::{Read, Write};
//!
//! let listener = ListenOptions::new().bind("127.0.0.1:0".parse().unwrap())?;
//! let addr = listener.local_addr()?;
//! let client = std::thread::spawn(move || {
//!     let mut s = std::net::TcpStream::connect(addr).unwrap();
//!     s.write_all(b"hello, echo").unwrap();
//!     s.shutdown(std::net::Shutdown::Write).unwrap();
//!     let mut back = String::new();
//!     s.read_to_string(&mut back).unwrap();
//!     back
//! });
//!
//! // The loop's state is the connections themselves (a server with more
//! // state implements `AsMut<Conns<_>>` for its own type).
//! let mut lp: Loop<Conns<()>> = Loop::new()?;
//! let acceptor = Acceptor::start(&mut lp, listener, |lp, conns, accepted| {
//!     let Ok(stream) = accepted else { return }; // reported once per episode
//!     conns.open(lp, stream, ConnOptions::new(), (), |lp, conns, id, ev| match ev {
//!         ConnEvent::Data => {
//!             let c = &mut conns[id];
//!             let n = c.input().len();
//!             c.write_from_input(lp, n); // echo
//!         }
//!         ConnEvent::Eof => conns[id].close(lp), // flush, half-close, close
//!         _ => {}
//!     }).unwrap();
//!     lp.break_loop(evloop::Break::One); // one client in this example
//! })?;
//! let mut conns = Conns::new();
//! lp.run(RunMode::Default, &mut conns)?; // until the client is accepted
//! acceptor.close(&mut lp)?; // stop listening; serve what we have
//! lp.run(RunMode::Default, &mut conns)?; // until the connection is done
//! assert_eq!(client.join().unwrap(), "hello, echo");
//! assert!(conns.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod acceptor;
mod conn;

pub use acceptor::{AcceptOptions, Acceptor, Listener};
pub use conn::{CloseReason, Conn, ConnEvent, ConnId, ConnOptions, Conns, Stream};

use std::io;
use std::net::{SocketAddr, TcpListener};

#[cfg(any(unix, windows))]
use socket2::{Domain, Protocol, Socket, Type};

/// How to open a listening socket: backlog, `SO_REUSEADDR`,
/// `SO_REUSEPORT`. The socket is non-blocking and close-on-exec.
///
/// ```
/// use evloop::net::ListenOptions;
/// let l = ListenOptions::new().backlog(4096).bind("127.0.0.1:0".parse().unwrap()).unwrap();
/// assert!(l.local_addr().unwrap().port() != 0);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ListenOptions {
    backlog: i32,
    reuse_address: bool,
    reuse_port: bool,
}

impl Default for ListenOptions {
    fn default() -> Self {
        ListenOptions::new()
    }
}

impl ListenOptions {
    /// The defaults: a backlog of 1024, `SO_REUSEADDR` on (a restarted
    /// server can bind while old connections linger in `TIME_WAIT`),
    /// `SO_REUSEPORT` off.
    ///
    /// ```
    /// let opts = evloop::net::ListenOptions::new();
    /// assert_eq!(opts.backlog_len(), 1024);
    /// ```
    pub const fn new() -> Self {
        ListenOptions {
            backlog: 1024,
            reuse_address: true,
            reuse_port: false,
        }
    }

    /// The length of the queue of connections the kernel completes before
    /// the server accepts them (`listen(2)`'s backlog). The kernel caps it
    /// (Linux: `net.core.somaxconn`, 4096 by default since 5.4); beyond
    /// it, new connections are dropped or reset.
    ///
    /// ```
    /// let opts = evloop::net::ListenOptions::new().backlog(10_000);
    /// assert_eq!(opts.backlog_len(), 10_000);
    /// ```
    pub const fn backlog(mut self, backlog: i32) -> Self {
        self.backlog = backlog;
        self
    }

    /// The backlog that [`ListenOptions::bind`] will ask for.
    ///
    /// ```
    /// assert_eq!(evloop::net::ListenOptions::new().backlog(7).backlog_len(), 7);
    /// ```
    pub const fn backlog_len(&self) -> i32 {
        self.backlog
    }

    /// `SO_REUSEADDR` (default on; not set on Windows, where it would let
    /// another socket take over the port).
    ///
    /// ```
    /// let opts = evloop::net::ListenOptions::new().reuse_address(false);
    /// # let _ = opts;
    /// ```
    pub const fn reuse_address(mut self, on: bool) -> Self {
        self.reuse_address = on;
        self
    }

    /// `SO_REUSEPORT` (default off): several sockets, one per loop and
    /// thread, may then listen on the same address, and the kernel spreads
    /// new connections across them (on Linux, by a hash of the peer's
    /// address and port).
    ///
    /// Windows, illumos (and Solaris) have no `SO_REUSEPORT`: there
    /// [`ListenOptions::bind`] with `reuse_port(true)` returns an `Err` of
    /// kind [`io::ErrorKind::Unsupported`] rather than listen without it.
    ///
    /// ```
    /// use evloop::net::ListenOptions;
    /// let opts = ListenOptions::new().reuse_port(true);
    /// let bound = opts.bind("127.0.0.1:0".parse().unwrap());
    /// if cfg!(any(windows, target_os = "illumos", target_os = "solaris")) {
    ///     assert_eq!(bound.unwrap_err().kind(), std::io::ErrorKind::Unsupported);
    /// } else {
    ///     let a = bound.unwrap();
    ///     let b = opts.bind(a.local_addr().unwrap()).unwrap(); // same port
    ///     assert_eq!(a.local_addr().unwrap(), b.local_addr().unwrap());
    /// }
    /// ```
    pub const fn reuse_port(mut self, on: bool) -> Self {
        self.reuse_port = on;
        self
    }

    /// Creates, configures, binds and listens. The listener is
    /// non-blocking and close-on-exec.
    ///
    /// On WASI (wasm32-wasip1) it returns an `Err` of kind
    /// [`io::ErrorKind::Unsupported`]: a guest cannot create or bind a
    /// socket; the runtime preopens its listeners (take them with
    /// `backends::wasi::preopened_listeners` and give one to an
    /// [`Acceptor`]).
    ///
    /// ```
    /// use evloop::net::ListenOptions;
    /// let l = ListenOptions::new().bind("127.0.0.1:0".parse().unwrap()).unwrap();
    /// // Already listening: a connect completes in the backlog.
    /// std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    /// ```
    pub fn bind(&self, addr: SocketAddr) -> io::Result<TcpListener> {
        listen(self, addr)
    }
}

/// [`ListenOptions::bind`] on WASI: refused.
#[cfg(target_os = "wasi")]
fn listen(_: &ListenOptions, _: SocketAddr) -> io::Result<TcpListener> {
    use crate::backends::wasi;
    Err(wasi::refused(wasi::CANNOT_BIND))
}

/// [`ListenOptions::bind`] on Unix and Windows.
#[cfg(any(unix, windows))]
fn listen(opts: &ListenOptions, addr: SocketAddr) -> io::Result<TcpListener> {
    // socket2 creates the socket close-on-exec (SOCK_CLOEXEC where the
    // platform has it).
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    // On Windows SO_REUSEADDR lets another socket take over a port in
    // use; a listener there may rebind a port in TIME_WAIT without it.
    #[cfg(not(windows))]
    socket.set_reuse_address(opts.reuse_address)?;
    if opts.reuse_port {
        set_reuse_port(&socket)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(opts.backlog)?;
    Ok(socket.into())
}

/// `SO_REUSEPORT` on, where the platform has it.
#[cfg(all(unix, not(any(target_os = "illumos", target_os = "solaris"))))]
fn set_reuse_port(socket: &Socket) -> io::Result<()> {
    socket.set_reuse_port(true)
}

/// Windows, illumos and Solaris have no `SO_REUSEPORT` (socket2 offers no
/// `set_reuse_port` there): the caller asked for load spreading the
/// kernel cannot give, so say so rather than listen without it.
#[cfg(any(windows, target_os = "illumos", target_os = "solaris"))]
fn set_reuse_port(_: &Socket) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "ListenOptions::reuse_port(true): this platform has no SO_REUSEPORT",
    ))
}

/// The soft and hard limits on open descriptors (`RLIMIT_NOFILE`; on
/// Windows, which limits sockets by memory only, both are `u64::MAX`).
/// On WASI (wasm32-wasip1), which has no `getrlimit`, an `Err` of kind
/// [`io::ErrorKind::Unsupported`] that names WASI.
///
/// ```
/// let (soft, hard) = evloop::net::fd_limits().unwrap();
/// assert!(soft <= hard);
/// ```
pub fn fd_limits() -> io::Result<(u64, u64)> {
    crate::backends::net_sys::fd_limits()
}

/// Raises the soft limit on open descriptors to the hard limit and returns
/// it: what a server that expects thousands of connections does first (the
/// soft limit is often 1024). On WASI (wasm32-wasip1) an `Err` of kind
/// [`io::ErrorKind::Unsupported`], as [`fd_limits`].
///
/// ```
/// let now = evloop::net::raise_fd_limit().unwrap();
/// assert_eq!(now, evloop::net::fd_limits().unwrap().0);
/// ```
pub fn raise_fd_limit() -> io::Result<u64> {
    let (soft, hard) = fd_limits()?;
    if soft < hard {
        // macOS refuses a soft limit above OPEN_MAX even when the hard
        // limit is "unlimited": keep the old limit then.
        if crate::backends::net_sys::set_fd_soft_limit(hard).is_err() {
            return Ok(soft);
        }
    }
    Ok(fd_limits()?.0)
}
