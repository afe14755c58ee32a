//! hyper 1.x on the loop's executor (feature `hyper`): what hyper-util's
//! `rt::tokio` gives tokio users, for evloop.
//!
//! hyper 1.x is runtime-agnostic: it takes its io, its timer and (for
//! http2's background tasks) its executor through the traits of
//! `hyper::rt`. This module implements them on [`crate::exec`]:
//!
//! - [`HyperIo`]: `hyper::rt::Read` and `hyper::rt::Write` over an
//!   [`AsyncFd<T>`] (a `TcpStream`, a Unix stream, the simulator's
//!   `SimSocket`: any source that `&T` reads and writes).
//! - [`HyperTimer`]: `hyper::rt::Timer` on the loop's timer heap
//!   ([`sleep`]); hyper's deadlines (`Instant`s) are read on
//!   the loop's clock, so that on the simulator they are virtual.
//! - [`HyperExecutor`]: `hyper::rt::Executor` for `!Send` futures,
//!   spawned as tasks of the loop's executor (hyper's http2 needs one;
//!   http1 does not).
//!
//! A connection is one task: hyper's server connection (or a client's
//! connection future) is spawned with [`spawn_local`](super::spawn_local)
//! or [`exec::spawn_on`](crate::exec::spawn_on), and its requests
//! are served in the loop's iterations, between the other callbacks and
//! tasks. A panic in a service ends that connection's task only (its
//! join handle reports it); the loop and the other connections go on.
//!
//! hyper's server and client are features of hyper that evloop does not
//! turn on, so this example is compiled and run by the hyper suite
//! (`tests/hyper_suite/tests/hyper.rs`, `the_module_example_serves_hello`)
//! rather than as a doc test here:
//!
//! ```ignore
//! use evloop::exec::hyper::{HyperIo, HyperTimer};
//! use evloop::exec::{block_on, spawn_local, AsyncFd};
//! use evloop::Loop;
//! use http_body_util::{BodyExt, Full};
//! use hyper::body::{Bytes, Incoming};
//! use hyper::{service::service_fn, Request, Response};
//! use std::convert::Infallible;
//! use std::net::{TcpListener, TcpStream};
//!
//! async fn hello(_: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
//!     Ok(Response::new(Full::new(Bytes::from("hello"))))
//! }
//!
//! let mut lp: Loop = Loop::new().unwrap();
//! let body = block_on(&mut lp, &mut (), async {
//!     // The server: one task per connection.
//!     let listener = AsyncFd::<TcpListener>::bind("127.0.0.1:0")?;
//!     let addr = listener.get_ref().local_addr()?;
//!     spawn_local(async move {
//!         let (stream, _) = listener.accept().await.unwrap();
//!         hyper::server::conn::http1::Builder::new()
//!             .timer(HyperTimer::new())
//!             .serve_connection(HyperIo::new(stream), service_fn(hello))
//!             .await
//!             .unwrap();
//!     })
//!     .unwrap();
//!     // The client: its connection in a task of its own.
//!     let stream = AsyncFd::<TcpStream>::connect(addr).await?;
//!     let (mut sender, conn) =
//!         hyper::client::conn::http1::handshake(HyperIo::new(stream)).await.unwrap();
//!     spawn_local(conn).unwrap();
//!     let req = Request::get("/").body(http_body_util::Empty::<Bytes>::new()).unwrap();
//!     let res = sender.send_request(req).await.unwrap();
//!     assert_eq!(res.status(), 200);
//!     Ok::<_, std::io::Error>(res.into_body().collect().await.unwrap().to_bytes())
//! }).unwrap().unwrap();
//! assert_eq!(&body[..], b"hello");
//! ```

use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::io::{self, IoSlice, Read, Write};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use ::hyper::rt::ReadBufCursor;

use super::executor::Shared;
use super::{sleep, sleep_until, AsyncFd, Executor, Sleep};
use crate::{Error, Source, SourceFd};

/// The most one read copies: reads go through a buffer of the thread's
/// (see [`HyperIo`]), at most this long.
const SCRATCH_MAX: usize = 64 * 1024;

thread_local! {
    /// The buffer reads go through before hyper's own (one per thread:
    /// a read is over before the next one starts).
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// An [`AsyncFd<T>`] as hyper's io: `hyper::rt::Read` and
/// `hyper::rt::Write` (hyper-util's `TokioIo` for evloop). `T` is any
/// source that `&T` reads and writes: a `TcpStream`, a `UnixStream`, the
/// simulator's [`SimSocket`](crate::SimSocket).
///
/// Reads wait for readability on the loop, writes for writability, as
/// [`AsyncFd::poll_read`] and [`AsyncFd::poll_write`] do. hyper hands a read
/// uninitialized memory, which safe code may not read into: a read goes
/// through a buffer of the thread's (up to 64 KiB) and is copied into
/// hyper's, one copy of each byte received. Writes are vectored
/// (`writev` for a `TcpStream`: headers and body in one call).
/// `poll_shutdown` shuts the socket's write side (a kernel socket; on
/// the simulator it flushes only).
///
/// ```
/// use evloop::exec::hyper::HyperIo;
/// use evloop::exec::{block_on, AsyncFd};
/// use evloop::{Loop, Sim};
/// use hyper::rt::{Read, Write};
/// use std::time::Duration;
///
/// let sim = Sim::new();
/// let sock = sim.socket("peer", 1024);
/// let fd = sock.fd();
/// sim.deliver(Duration::from_millis(3), &sock, b"ping");
/// let mut lp: Loop = Loop::with_backend(sim.backend());
/// let got = block_on(&mut lp, &mut (), async move {
///     let mut io = HyperIo::new(AsyncFd::new(sock)?);
///     let mut bytes = [0u8; 16];
///     let mut buf = hyper::rt::ReadBuf::new(&mut bytes);
///     std::future::poll_fn(|cx| std::pin::Pin::new(&mut io).poll_read(cx, buf.unfilled())).await?;
///     let got = buf.filled().to_vec();
///     std::future::poll_fn(|cx| std::pin::Pin::new(&mut io).poll_write(cx, b"pong")).await?;
///     Ok::<_, std::io::Error>(got)
/// }).unwrap().unwrap();
/// assert_eq!(got, b"ping");
/// assert_eq!(sim.sent(fd), b"pong");
/// ```
pub struct HyperIo<T> {
    inner: AsyncFd<T>,
}

impl<T: Source + 'static> HyperIo<T> {
    /// Wraps an [`AsyncFd<T>`] for hyper. A connected `TcpStream` not yet
    /// watched is adopted by the loop's completion I/O where it has one
    /// (io_uring): hyper's reads and writes then make no syscall.
    ///
    /// ```
    /// use evloop::exec::hyper::HyperIo;
    /// use evloop::exec::{AsyncFd, Executor};
    /// use evloop::{Loop, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let ex = Executor::of(&mut lp).unwrap();
    /// let io = HyperIo::new(AsyncFd::with_executor(&ex, sim.socket("s", 0)).unwrap());
    /// assert_eq!(io.get_ref().fd(), 3);
    /// ```
    pub fn new(inner: AsyncFd<T>) -> HyperIo<T> {
        // hyper reads and writes only through the AsyncFd's own methods:
        // on io_uring a server's socket then takes the completion path.
        inner.adopt_completion();
        HyperIo { inner }
    }
}

impl<T> HyperIo<T> {
    /// The source.
    ///
    /// ```
    /// use evloop::exec::hyper::HyperIo;
    /// use evloop::exec::{AsyncFd, Executor};
    /// use evloop::{Loop, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let ex = Executor::of(&mut lp).unwrap();
    /// let io = HyperIo::new(AsyncFd::with_executor(&ex, sim.socket("db", 0)).unwrap());
    /// assert_eq!(io.get_ref().name(), "db");
    /// ```
    pub fn get_ref(&self) -> &T {
        self.inner.get_ref()
    }

    /// The [`AsyncFd<T>`] it wraps.
    ///
    /// ```
    /// use evloop::exec::hyper::HyperIo;
    /// use evloop::exec::{AsyncFd, Executor};
    /// use evloop::{Loop, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let ex = Executor::of(&mut lp).unwrap();
    /// let io = HyperIo::new(AsyncFd::with_executor(&ex, sim.socket("s", 0)).unwrap());
    /// assert_eq!(io.inner().get_ref().fd(), 3);
    /// ```
    pub fn inner(&self) -> &AsyncFd<T> {
        &self.inner
    }

    /// Unwraps the [`AsyncFd<T>`] (an upgraded connection, say, that is
    /// no longer hyper's).
    ///
    /// ```
    /// use evloop::exec::hyper::HyperIo;
    /// use evloop::exec::{AsyncFd, Executor};
    /// use evloop::{Loop, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let ex = Executor::of(&mut lp).unwrap();
    /// let io = HyperIo::new(AsyncFd::with_executor(&ex, sim.socket("s", 0)).unwrap());
    /// let sock: AsyncFd<_> = io.into_inner();
    /// assert_eq!(sock.get_ref().fd(), 3);
    /// ```
    pub fn into_inner(self) -> AsyncFd<T> {
        self.inner
    }
}

impl<T: Source + 'static> From<AsyncFd<T>> for HyperIo<T> {
    /// [`HyperIo::new`].
    ///
    /// ```
    /// use evloop::exec::hyper::HyperIo;
    /// use evloop::exec::{AsyncFd, Executor};
    /// use evloop::{Loop, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let ex = Executor::of(&mut lp).unwrap();
    /// let io: HyperIo<_> = AsyncFd::with_executor(&ex, sim.socket("s", 0)).unwrap().into();
    /// assert_eq!(io.get_ref().fd(), 3);
    /// ```
    fn from(inner: AsyncFd<T>) -> HyperIo<T> {
        HyperIo::new(inner)
    }
}

impl<T: fmt::Debug> fmt::Debug for HyperIo<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("HyperIo").field(&self.inner).finish()
    }
}

impl<T> ::hyper::rt::Read for HyperIo<T>
where
    for<'a> &'a T: Read,
{
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let want = buf.remaining().min(SCRATCH_MAX);
        if want == 0 {
            return Poll::Ready(Ok(()));
        }
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            if scratch.len() < want {
                scratch.resize(want, 0);
            }
            let into = &mut scratch[..want];
            match self.inner.poll_read(cx, into) {
                Poll::Ready(Ok(n)) => {
                    buf.put_slice(&into[..n]);
                    Poll::Ready(Ok(()))
                }
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            }
        })
    }
}

impl<T: Source> ::hyper::rt::Write for HyperIo<T>
where
    for<'a> &'a T: Write,
{
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.inner.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.inner.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.poll_flush_io(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.inner.poll_flush_io(cx) {
            Poll::Ready(Ok(())) => {}
            other => return other,
        }
        if let Some(done) = self.inner.poll_shutdown_adopted(cx) {
            return done; // after what the completion I/O took was sent
        }
        Poll::Ready(shutdown_write(self.inner.get_ref()))
    }
}

/// Shuts a kernel socket's write side; a peer gone already, or an fd
/// that is not a socket (a pipe), is not an error (there is nothing to
/// shut). A virtual fd has no write side of its own to shut.
fn shutdown_write<T: Source>(io: &T) -> io::Result<()> {
    let SourceFd::Os(fd) = io.source_fd() else {
        return Ok(());
    };
    #[cfg(any(unix, windows))]
    let shut = socket2::SockRef::from(&fd).shutdown(std::net::Shutdown::Write);
    #[cfg(target_os = "wasi")]
    let shut = crate::backends::net_sys::shutdown_write(fd);
    match shut {
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
        #[cfg(unix)]
        Err(e) if e.raw_os_error() == Some(libc::ENOTSOCK) => Ok(()),
        other => other,
    }
}

/// hyper's timer on the loop's timer heap (hyper-util's `TokioTimer`
/// for evloop): for a server's `header_read_timeout`, http2's keep-alive
/// pings, a client's timeouts.
///
/// Its sleeps are [`Sleep`]s (this module implements
/// `hyper::rt::Sleep` for them), made on the executor of the task that
/// asks (hyper asks from the connection's task), and reset in place.
/// Its `now` is the loop's clock ([`Loop::now`](crate::Loop::now) as an
/// `Instant`, the time of the executor's current pass): on a kernel
/// backend it moves with `Instant::now()`; on the simulator it is
/// virtual, so hyper's timeouts happen at exact virtual times. An
/// `Instant` that hyper did not get from it (`Instant::now()` + a
/// timeout) is read on the same scale, which on a kernel backend is
/// the monotonic clock's, give or take the time since the pass started.
/// Outside a task it falls back to `Instant::now()`, and a sleep made
/// there counts from its first poll.
///
/// It is `Send + Sync` (hyper's builders ask for that) and holds
/// nothing: one value serves every loop of every thread.
///
/// ```
/// use evloop::exec::block_on;
/// use evloop::exec::hyper::HyperTimer;
/// use evloop::{Loop, Sim};
/// use hyper::rt::Timer;
/// use std::time::Duration;
///
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// block_on(&mut lp, &mut (), async {
///     let timer = HyperTimer::new();
///     let start = timer.now();
///     timer.sleep(Duration::from_millis(40)).await;
///     // The loop's clock: virtual, exact.
///     assert_eq!(timer.now() - start, Duration::from_millis(40));
///     timer.sleep_until(timer.now() + Duration::from_millis(10)).await;
/// }).unwrap();
/// assert_eq!(lp.now(), Duration::from_millis(50));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct HyperTimer {
    _private: (),
}

impl HyperTimer {
    /// The timer (it holds nothing: see [`HyperTimer`]).
    ///
    /// ```
    /// use evloop::exec::block_on;
    /// use evloop::exec::hyper::HyperTimer;
    /// use evloop::{Loop, Sim};
    /// use hyper::rt::Timer;
    /// use std::time::Duration;
    /// // As hyper uses it (`http1::Builder::timer(HyperTimer::new())`):
    /// let timer = HyperTimer::new();
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// block_on(&mut lp, &mut (), async { timer.sleep(Duration::from_millis(5)).await }).unwrap();
    /// assert_eq!(lp.now(), Duration::from_millis(5));
    /// ```
    pub const fn new() -> HyperTimer {
        HyperTimer { _private: () }
    }
}

impl ::hyper::rt::Timer for HyperTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn ::hyper::rt::Sleep>> {
        Box::pin(sleep(duration))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn ::hyper::rt::Sleep>> {
        Box::pin(sleep_at(deadline))
    }

    fn now(&self) -> Instant {
        match Shared::current() {
            Some(ex) => to_instant(&ex, ex.now.get()),
            None => Instant::now(),
        }
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn ::hyper::rt::Sleep>>, new_deadline: Instant) {
        let ex = Shared::current();
        match (sleep.as_mut().downcast_mut_pin::<Sleep>(), ex) {
            (Some(ours), Some(ex)) => ours.reset(to_loop_time(&ex, new_deadline)),
            _ => *sleep = Box::pin(sleep_at(new_deadline)),
        }
    }
}

/// hyper's sleeps are the executor's own: `Send + Sync`, reset in place.
impl ::hyper::rt::Sleep for Sleep {}

/// A sleep until `deadline` read on the current executor's clock (or,
/// outside a task, the time from now until it).
fn sleep_at(deadline: Instant) -> Sleep {
    match Shared::current() {
        Some(ex) => sleep_until(to_loop_time(&ex, deadline)),
        None => sleep(deadline.saturating_duration_since(Instant::now())),
    }
}

thread_local! {
    /// Per executor of this thread (by id): an `Instant` and the loop
    /// time it stands for, taken at the first use. Loop times map to
    /// instants, and back, through it.
    static ANCHORS: RefCell<Vec<(u64, Instant, Duration)>> = const { RefCell::new(Vec::new()) };
}

/// The executor's anchor: made at the first use (then `Instant::now()`
/// stands for the time of the executor's current pass).
fn anchor(ex: &Shared) -> (Instant, Duration) {
    ANCHORS.with(|all| {
        let mut all = all.borrow_mut();
        if let Some(&(_, at, loop_time)) = all.iter().find(|(id, ..)| *id == ex.id) {
            return (at, loop_time);
        }
        // Forget the executors that are gone.
        all.retain(|(id, ..)| Shared::by_id(*id).is_some());
        let made = (Instant::now(), ex.now.get());
        all.push((ex.id, made.0, made.1));
        made
    })
}

fn to_instant(ex: &Shared, loop_time: Duration) -> Instant {
    let (at, base) = anchor(ex);
    if loop_time >= base {
        at.checked_add(loop_time - base).unwrap_or(at)
    } else {
        at.checked_sub(base - loop_time).unwrap_or(at)
    }
}

fn to_loop_time(ex: &Shared, instant: Instant) -> Duration {
    let (at, base) = anchor(ex);
    match instant.checked_duration_since(at) {
        Some(after) => base.saturating_add(after),
        None => base.saturating_sub(at.duration_since(instant)),
    }
}

/// hyper's executor for `!Send` futures: each future hyper hands it
/// becomes a task of the loop's executor (detached: it ends when its
/// future does, or with the loop). hyper's http2 (server and client)
/// spawns its streams and connection tasks through it; http1 needs no
/// executor.
///
/// [`HyperExecutor::new`] spawns on the executor of the task that hyper
/// calls it from (hyper calls it from the connection's task);
/// [`HyperExecutor::on`] on a given one, from anywhere on its thread.
/// It is `!Send`, as the tasks are: hyper's builders do not ask for
/// more.
///
/// # Panics
///
/// `execute` of a `HyperExecutor::new()` outside any task of an evloop
/// executor panics (hyper's `execute` has no way to return the error;
/// tokio's `spawn_local` panics there too). A future handed to it once
/// the loop is dropped is dropped.
///
/// ```
/// use evloop::exec::hyper::HyperExecutor;
/// use evloop::{Loop, Sim};
/// use hyper::rt::Executor;
/// use std::cell::Cell;
/// use std::rc::Rc;
///
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// let ran = Rc::new(Cell::new(false));
/// let r = ran.clone();
/// // A `!Send` future (it holds an `Rc`).
/// HyperExecutor::on(evloop::exec::Executor::of(&mut lp).unwrap()).execute(async move { r.set(true) });
/// lp.run(evloop::RunMode::Default, &mut ()).unwrap();
/// assert!(ran.get());
/// ```
#[derive(Clone, Debug, Default)]
pub struct HyperExecutor {
    executor: Option<Executor>,
}

impl HyperExecutor {
    /// Spawns on the executor current when hyper calls it.
    ///
    /// ```
    /// use evloop::exec::block_on;
    /// use evloop::exec::hyper::HyperExecutor;
    /// use evloop::{Loop, Sim};
    /// use hyper::rt::Executor as _;
    /// // As hyper uses it (`http2::Builder::new(HyperExecutor::new())`):
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let ran = std::rc::Rc::new(std::cell::Cell::new(false));
    /// let r = ran.clone();
    /// block_on(&mut lp, &mut (), async move {
    ///     HyperExecutor::new().execute(async move { r.set(true) })
    /// })
    ///     .unwrap();
    /// lp.run(evloop::RunMode::Default, &mut ()).unwrap();
    /// assert!(ran.get());
    /// ```
    pub fn new() -> HyperExecutor {
        HyperExecutor { executor: None }
    }

    /// Spawns on `executor` (from [`exec::Executor::of`](crate::exec::Executor::of)
    /// or [`Executor::current`]).
    ///
    /// ```
    /// use evloop::exec::hyper::HyperExecutor;
    /// use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// use hyper::rt::Executor as _;
    /// let ran = std::rc::Rc::new(std::cell::Cell::new(false));
    /// let r = ran.clone();
    /// HyperExecutor::on(evloop::exec::Executor::of(&mut lp).unwrap()).execute(async move { r.set(true) });
    /// lp.run(evloop::RunMode::Default, &mut ()).unwrap();
    /// assert!(ran.get());
    /// ```
    pub fn on(executor: Executor) -> HyperExecutor {
        HyperExecutor {
            executor: Some(executor),
        }
    }
}

impl From<Executor> for HyperExecutor {
    /// [`HyperExecutor::on`].
    ///
    /// ```
    /// use evloop::exec::Executor;
    /// use evloop::exec::hyper::HyperExecutor;
    /// use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let ex: HyperExecutor = Executor::of(&mut lp).unwrap().into();
    /// # drop(ex);
    /// ```
    fn from(executor: Executor) -> HyperExecutor {
        HyperExecutor::on(executor)
    }
}

impl<F> ::hyper::rt::Executor<F> for HyperExecutor
where
    F: Future + 'static,
    F::Output: 'static,
{
    fn execute(&self, future: F) {
        let spawned = match &self.executor {
            Some(ex) => ex.spawn(future),
            None => super::spawn_local(future),
        };
        match spawned {
            // Detached: the task runs on without its handle.
            Ok(_) => {}
            Err(Error::NoExecutor) => panic!(
                "evloop::exec::hyper::HyperExecutor::new(): hyper spawned a task outside any task \
                 of an evloop executor (use HyperExecutor::on(executor) there)"
            ),
            Err(e) => tracing::debug!("HyperExecutor: a future hyper spawned is dropped: {e}"),
        }
    }
}
