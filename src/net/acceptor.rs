//! The acceptor: a listening socket's io watcher that accepts until
//! `WouldBlock`, and backs off from a timer when the process is out of
//! descriptors.

use std::cell::Cell;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::rc::Rc;
use std::time::Duration;

use crate::backend::{Adopt, CompletionIo};
use crate::backends::net_sys;
use crate::{Interest, Io, Loop, Result, Source, Timer};

/// A listening socket an [`Acceptor`] accepts from: a `TcpListener`, or a
/// replay's listener ([`ReplayListener`](crate::replay::ReplayListener),
/// whose accepts give the connections of a recorded run), so that one
/// server runs on both. The accepted streams are what the acceptor's
/// callback gets.
///
/// ```
/// use evloop::net::Listener;
/// let l = std::net::TcpListener::bind("127.0.0.1:0")?;
/// let addr = l.prepare()?; // non-blocking now
/// assert_eq!(l.accept_stream().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
/// assert!(addr.ip().is_loopback());
/// # Ok::<(), std::io::Error>(())
/// ```
pub trait Listener: Source + 'static {
    /// What an accept gives.
    type Stream: Source;

    /// Makes the listener non-blocking, and says its address (for a
    /// `TcpListener` on WASI, whose runtime does not tell a guest the
    /// address of a preopened listener, `0.0.0.0:0`).
    fn prepare(&self) -> io::Result<SocketAddr>;

    /// Accepts one pending connection, non-blocking and close-on-exec;
    /// `WouldBlock` when none is pending.
    fn accept_stream(&self) -> io::Result<Self::Stream>;

    /// The listening socket the loop's completion I/O may accept on
    /// directly ([`Capabilities::completion`](crate::Capabilities::completion)):
    /// `Some` for std's `TcpListener` (and wrappers that only observe
    /// it), `None`, the default, otherwise.
    ///
    /// ```
    /// use evloop::net::Listener;
    /// let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    /// assert_eq!(l.completion_fd().is_some(), cfg!(unix));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn completion_fd(&self) -> Option<crate::RawFd> {
        None
    }

    /// Takes a connection the loop's completion I/O accepted ahead (for a
    /// listener with a [`completion_fd`](Listener::completion_fd)); the
    /// default accepts with [`accept_stream`](Listener::accept_stream).
    ///
    /// ```
    /// use evloop::net::Listener;
    /// # #[cfg(all(target_os = "linux", feature = "io-uring"))] {
    /// use evloop::backend::Backend;
    /// let Ok(mut ring) = evloop::backends::io_uring::IoUring::new() else { return };
    /// let Some(io) = ring.completion_io() else { return };
    /// let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// l.prepare().unwrap();
    /// // Not adopted: a plain accept.
    /// let err = l.accept_completed(&*io).unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
    /// # }
    /// ```
    fn accept_completed(&self, io: &dyn CompletionIo) -> io::Result<Self::Stream> {
        let _ = io;
        self.accept_stream()
    }
}

impl Listener for TcpListener {
    type Stream = TcpStream;

    fn prepare(&self) -> io::Result<SocketAddr> {
        self.set_nonblocking(true)?;
        local_addr(self)
    }

    fn accept_stream(&self) -> io::Result<TcpStream> {
        net_sys::accept(self)
    }

    #[cfg(unix)]
    fn completion_fd(&self) -> Option<crate::RawFd> {
        Some(std::os::fd::AsRawFd::as_raw_fd(self))
    }

    #[cfg(unix)]
    fn accept_completed(&self, io: &dyn CompletionIo) -> io::Result<TcpStream> {
        io.accept(std::os::fd::AsRawFd::as_raw_fd(self))
    }
}

/// The listener's address; on WASI, which cannot tell a guest the address
/// of its preopened listener, `0.0.0.0:0`.
#[cfg(not(target_os = "wasi"))]
fn local_addr(l: &TcpListener) -> io::Result<SocketAddr> {
    l.local_addr()
}

/// The listener's address; on WASI, which cannot tell a guest the address
/// of its preopened listener, `0.0.0.0:0`.
#[cfg(target_os = "wasi")]
fn local_addr(l: &TcpListener) -> io::Result<SocketAddr> {
    match l.local_addr() {
        Err(e) if e.kind() == io::ErrorKind::Unsupported => Ok(SocketAddr::from(([0, 0, 0, 0], 0))),
        other => other,
    }
}

/// How an [`Acceptor`] behaves.
///
/// ```
/// use evloop::net::AcceptOptions;
/// use std::time::Duration;
/// let opts = AcceptOptions::new().backoff(Duration::from_millis(200));
/// assert_eq!(opts.backoff_delay(), Duration::from_millis(200));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct AcceptOptions {
    backoff: Duration,
}

impl Default for AcceptOptions {
    fn default() -> Self {
        AcceptOptions::new()
    }
}

impl AcceptOptions {
    /// The defaults: a back-off of 50 ms.
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(evloop::net::AcceptOptions::new().backoff_delay(), Duration::from_millis(50));
    /// ```
    pub const fn new() -> Self {
        AcceptOptions {
            backoff: Duration::from_millis(50),
        }
    }

    /// How long the listener is left unwatched after an accept failed for
    /// lack of resources (`EMFILE`, `ENFILE`, `ENOBUFS`, `ENOMEM`) or for
    /// an unexpected reason, before accepting is tried again. Pending
    /// connections wait in the kernel's backlog meanwhile.
    ///
    /// ```
    /// use std::time::Duration;
    /// let o = evloop::net::AcceptOptions::new().backoff(Duration::from_millis(10));
    /// assert_eq!(o.backoff_delay(), Duration::from_millis(10));
    /// ```
    pub const fn backoff(mut self, delay: Duration) -> Self {
        self.backoff = delay;
        self
    }

    /// The back-off delay.
    ///
    /// ```
    /// # use std::time::Duration;
    /// assert!(evloop::net::AcceptOptions::new().backoff_delay() > Duration::ZERO);
    /// ```
    pub const fn backoff_delay(&self) -> Duration {
        self.backoff
    }
}

/// What the acceptor's watcher and its handle share.
#[derive(Default)]
struct Shared {
    timer: Cell<Option<Timer>>,
    /// Backing off: the io watcher is stopped and the timer runs.
    backing_off: Cell<bool>,
    /// Paused by the user: neither the io watcher nor the timer runs.
    paused: Cell<bool>,
    /// In an episode of resource exhaustion that was reported already.
    exhausted: Cell<bool>,
    accepted: Cell<u64>,
    errors_reported: Cell<u64>,
    failed_attempts: Cell<u64>,
    /// The listener is adopted by the loop's completion I/O, as `fd`.
    adopted: Cell<bool>,
    fd: Cell<Option<crate::RawFd>>,
}

impl Shared {
    /// Gives the listener back to the completion I/O before it is closed.
    fn release<S>(&self, lp: &mut Loop<'_, S>) {
        if let (true, Some(fd), Some(ring)) =
            (self.adopted.get(), self.fd.get(), lp.completion_io())
        {
            ring.release(fd);
            self.adopted.set(false);
        }
    }
}

/// A listening socket on the loop: accepts every pending connection when it
/// is readable and hands each to a callback, non-blocking and
/// close-on-exec.
///
/// When an accept fails for lack of resources (`EMFILE`, `ENFILE`,
/// `ENOBUFS`, `ENOMEM`), the acceptor stops watching the listener and
/// tries again after [`AcceptOptions::backoff`] (50 ms by default) instead
/// of spinning on a listener that stays readable; the connections it has
/// are served meanwhile, and pending ones wait in the kernel's backlog. The
/// callback gets the error once per episode (until an accept succeeds
/// again), not once per attempt. Transient errors (`ECONNABORTED`,
/// `EINTR`, `EPROTO`, and on Linux the network errors `accept(2)` passes
/// on) are skipped; any other error is reported and backed off from too.
///
/// ```
/// use evloop::net::{Acceptor, ListenOptions};
/// use evloop::{Break, Loop, RunMode};
///
/// let listener = ListenOptions::new().bind("127.0.0.1:0".parse().unwrap())?;
/// let addr = listener.local_addr()?;
/// let mut lp: Loop<Vec<std::net::TcpStream>> = Loop::new()?;
/// let acceptor = Acceptor::start(&mut lp, listener, |lp, accepted, res| {
///     accepted.push(res.expect("accept"));
///     lp.break_loop(Break::One);
/// })?;
/// let _client = std::net::TcpStream::connect(addr)?;
/// let mut accepted = Vec::new();
/// lp.run(RunMode::Default, &mut accepted)?;
/// assert_eq!((accepted.len(), acceptor.accepted()), (1, 1));
/// acceptor.close(&mut lp)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Acceptor {
    io: Io,
    addr: SocketAddr,
    shared: Rc<Shared>,
}

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acceptor")
            .field("io", &self.io)
            .field("addr", &self.addr)
            .field("accepted", &self.shared.accepted.get())
            .field("backing_off", &self.shared.backing_off.get())
            .finish()
    }
}

/// What an accept error means for the acceptor.
enum Failure {
    /// Try the next pending connection at once.
    Transient,
    /// Out of a resource: back off, report once per episode.
    Exhausted,
    /// Anything else: back off, report every time.
    Other,
}

fn classify(err: &io::Error) -> Failure {
    if err.kind() == io::ErrorKind::Interrupted {
        return Failure::Transient;
    }
    match err.raw_os_error() {
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => Failure::Exhausted,
        Some(libc::ECONNABORTED | libc::EPROTO) => Failure::Transient,
        // accept(2) on Linux passes on pending network errors of the new
        // connection: retry, as its manual says.
        #[cfg(any(target_os = "linux", target_os = "android"))]
        Some(
            libc::ENETDOWN
            | libc::ENOPROTOOPT
            | libc::EHOSTDOWN
            | libc::ENONET
            | libc::EHOSTUNREACH
            | libc::EOPNOTSUPP
            | libc::ENETUNREACH,
        ) => Failure::Transient,
        _ => Failure::Other,
    }
}

impl Acceptor {
    /// Starts accepting on `listener` (made non-blocking here), with the
    /// default [`AcceptOptions`]. `on_accept` gets each accepted stream,
    /// or an error (see [`Acceptor`] for which, and how often).
    ///
    /// Errors: those of [`Loop::io`] and [`Loop::timer`].
    ///
    /// ```
    /// use evloop::net::{Acceptor, ListenOptions};
    /// use evloop::Loop;
    /// let l = ListenOptions::new().bind("127.0.0.1:0".parse().unwrap())?;
    /// let mut lp: Loop = Loop::new()?;
    /// let a = Acceptor::start(&mut lp, l, |_, _, _| {})?;
    /// assert!(a.local_addr().port() != 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn start<'s, S, L, F>(lp: &mut Loop<'s, S>, listener: L, on_accept: F) -> Result<Self>
    where
        L: Listener,
        F: FnMut(&mut Loop<'s, S>, &mut S, io::Result<L::Stream>) + 's,
    {
        Acceptor::with_options(lp, listener, AcceptOptions::new(), on_accept)
    }

    /// [`Acceptor::start`] with options.
    ///
    /// ```
    /// use evloop::net::{AcceptOptions, Acceptor, ListenOptions};
    /// use evloop::Loop;
    /// use std::time::Duration;
    /// let l = ListenOptions::new().bind("127.0.0.1:0".parse().unwrap())?;
    /// let mut lp: Loop = Loop::new()?;
    /// let opts = AcceptOptions::new().backoff(Duration::from_millis(100));
    /// let a = Acceptor::with_options(&mut lp, l, opts, |_, _, _| {})?;
    /// a.close(&mut lp)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_options<'s, S, L, F>(
        lp: &mut Loop<'s, S>,
        listener: L,
        options: AcceptOptions,
        mut on_accept: F,
    ) -> Result<Self>
    where
        L: Listener,
        F: FnMut(&mut Loop<'s, S>, &mut S, io::Result<L::Stream>) + 's,
    {
        let fd = crate::source::number(listener.source_fd());
        // A listener that cannot be made non-blocking or has no address is
        // not one the loop can serve.
        let io_err = |e: io::Error| crate::Error::InvalidFd {
            fd,
            reason: format!("not a usable listener: {e}"),
        };
        let addr = listener.prepare().map_err(io_err)?;
        let shared = Rc::new(Shared::default());
        let mine = shared.clone();
        let completion_fd = listener.completion_fd();
        let io = lp.io(listener, Interest::READABLE, move |lp, state, ev| {
            let sh = &*mine;
            loop {
                let accepted = match lp.completion_io().filter(|_| mine.adopted.get()) {
                    Some(ring) => ev.source.accept_completed(&*ring),
                    None => ev.source.accept_stream(),
                };
                match accepted {
                    Ok(stream) => {
                        sh.exhausted.set(false);
                        sh.accepted.set(sh.accepted.get() + 1);
                        on_accept(lp, state, Ok(stream));
                        if sh.paused.get() || !lp.is_active(ev.watcher).unwrap_or(false) {
                            return; // paused or closed from the callback
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                    Err(e) => {
                        let report = match classify(&e) {
                            Failure::Transient => continue,
                            Failure::Exhausted => !sh.exhausted.replace(true),
                            Failure::Other => true,
                        };
                        sh.failed_attempts.set(sh.failed_attempts.get() + 1);
                        // Stop watching the listener (it stays readable,
                        // so a level-triggered watcher would spin) and try
                        // again from the timer.
                        let _ = lp.stop(ev.watcher);
                        if let Some(t) = sh.timer.get() {
                            let _ = lp.start(t);
                        }
                        sh.backing_off.set(true);
                        if report {
                            sh.errors_reported.set(sh.errors_reported.get() + 1);
                            on_accept(lp, state, Err(e));
                        }
                        return;
                    }
                }
            }
        })?;
        // Adopted before the loop registers the listener: the backend then
        // accepts ahead instead of polling it.
        if let (Some(fd), Some(ring)) = (completion_fd, lp.completion_io()) {
            shared.adopted.set(ring.adopt(fd, Adopt::Listener).is_ok());
        }
        shared.fd.set(completion_fd);
        let mine = shared.clone();
        let timer = lp.timer(options.backoff, Duration::ZERO, move |lp, _, _| {
            mine.backing_off.set(false);
            if !mine.paused.get() {
                let _ = lp.start(io);
            }
        });
        let timer = match timer {
            Ok(t) => t,
            Err(e) => {
                shared.release(lp);
                let _ = lp.remove(io);
                return Err(e);
            }
        };
        lp.stop(timer)?;
        shared.timer.set(Some(timer));
        Ok(Acceptor { io, addr, shared })
    }

    /// The address the listener is bound to (`0.0.0.0:0` for a
    /// preopened listener on WASI: see [`Listener::prepare`]).
    ///
    /// ```
    /// # use evloop::net::{Acceptor, ListenOptions};
    /// # let l = ListenOptions::new().bind("127.0.0.1:0".parse().unwrap())?;
    /// # let mut lp: evloop::Loop = evloop::Loop::new()?;
    /// let a = Acceptor::start(&mut lp, l, |_, _, _| {})?;
    /// assert!(a.local_addr().ip().is_loopback());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The listener's io watcher (for [`Loop::set_priority`], say).
    ///
    /// ```
    /// # use evloop::net::{Acceptor, ListenOptions};
    /// # let l = ListenOptions::new().bind("127.0.0.1:0".parse().unwrap())?;
    /// # let mut lp: evloop::Loop = evloop::Loop::new()?;
    /// let a = Acceptor::start(&mut lp, l, |_, _, _| {})?;
    /// assert!(lp.is_active(a.watcher())?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn watcher(&self) -> Io {
        self.io
    }

    /// Connections accepted so far.
    ///
    /// ```
    /// # use evloop::net::{Acceptor, ListenOptions};
    /// # let l = ListenOptions::new().bind("127.0.0.1:0".parse().unwrap())?;
    /// # let mut lp: evloop::Loop = evloop::Loop::new()?;
    /// let a = Acceptor::start(&mut lp, l, |_, _, _| {})?;
    /// assert_eq!(a.accepted(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.get()
    }

    /// Errors handed to the callback so far (one per episode of
    /// exhaustion, plus each unexpected error).
    ///
    /// ```
    /// # use evloop::net::{Acceptor, ListenOptions};
    /// # let l = ListenOptions::new().bind("127.0.0.1:0".parse().unwrap())?;
    /// # let mut lp: evloop::Loop = evloop::Loop::new()?;
    /// let a = Acceptor::start(&mut lp, l, |_, _, _| {})?;
    /// assert_eq!(a.errors_reported(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn errors_reported(&self) -> u64 {
        self.shared.errors_reported.get()
    }

    /// Accept attempts that failed and made the acceptor back off (at
    /// most one per back-off period while the condition lasts).
    ///
    /// ```
    /// # use evloop::net::{Acceptor, ListenOptions};
    /// # let l = ListenOptions::new().bind("127.0.0.1:0".parse().unwrap())?;
    /// # let mut lp: evloop::Loop = evloop::Loop::new()?;
    /// let a = Acceptor::start(&mut lp, l, |_, _, _| {})?;
    /// assert_eq!(a.failed_attempts(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn failed_attempts(&self) -> u64 {
        self.shared.failed_attempts.get()
    }

    /// Whether the acceptor is backing off (the listener unwatched until
    /// its timer fires).
    ///
    /// ```
    /// # use evloop::net::{Acceptor, ListenOptions};
    /// # let l = ListenOptions::new().bind("127.0.0.1:0".parse().unwrap())?;
    /// # let mut lp: evloop::Loop = evloop::Loop::new()?;
    /// let a = Acceptor::start(&mut lp, l, |_, _, _| {})?;
    /// assert!(!a.is_backing_off());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_backing_off(&self) -> bool {
        self.shared.backing_off.get()
    }

    /// Stops accepting for now (at a connection limit, say); connections
    /// wait in the backlog. The listener no longer keeps the loop running.
    ///
    /// ```
    /// # use evloop::net::{Acceptor, ListenOptions};
    /// # let l = ListenOptions::new().bind("127.0.0.1:0".parse().unwrap())?;
    /// # let mut lp: evloop::Loop = evloop::Loop::new()?;
    /// let a = Acceptor::start(&mut lp, l, |_, _, _| {})?;
    /// a.pause(&mut lp)?;
    /// assert!(!lp.is_active(a.watcher())?);
    /// a.resume(&mut lp)?;
    /// assert!(lp.is_active(a.watcher())?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pause<S>(&self, lp: &mut Loop<'_, S>) -> Result<()> {
        self.shared.paused.set(true);
        self.shared.backing_off.set(false);
        if let Some(t) = self.shared.timer.get() {
            lp.stop(t)?;
        }
        lp.stop(self.io)
    }

    /// Accepts again after [`Acceptor::pause`].
    ///
    /// ```
    /// # use evloop::net::{Acceptor, ListenOptions};
    /// # let l = ListenOptions::new().bind("127.0.0.1:0".parse().unwrap())?;
    /// # let mut lp: evloop::Loop = evloop::Loop::new()?;
    /// let a = Acceptor::start(&mut lp, l, |_, _, _| {})?;
    /// a.resume(&mut lp)?; // not paused: nothing to do
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resume<S>(&self, lp: &mut Loop<'_, S>) -> Result<()> {
        self.shared.paused.set(false);
        if self.shared.backing_off.get() {
            return Ok(()); // the timer restarts the listener
        }
        lp.start(self.io)
    }

    /// Stops accepting for good: removes the watchers and closes the
    /// listener (new connections are refused; the accepted ones are not
    /// touched).
    ///
    /// ```
    /// # use evloop::net::{Acceptor, ListenOptions};
    /// # let l = ListenOptions::new().bind("127.0.0.1:0".parse().unwrap())?;
    /// # let mut lp: evloop::Loop = evloop::Loop::new()?;
    /// let a = Acceptor::start(&mut lp, l, |_, _, _| {})?;
    /// let (io, addr) = (a.watcher(), a.local_addr());
    /// a.close(&mut lp)?;
    /// assert!(lp.is_active(io).is_err()); // removed
    /// assert!(std::net::TcpStream::connect(addr).is_err()); // refused
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn close<S>(self, lp: &mut Loop<'_, S>) -> Result<()> {
        if let Some(t) = self.shared.timer.take() {
            lp.remove(t)?;
        }
        self.shared.release(lp);
        lp.remove(self.io)
    }
}
