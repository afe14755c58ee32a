//! `AsyncFd<T>`: an io source whose readiness futures wait on the loop.

use std::any::Any;
use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use super::executor::{Executor, Shared};
use super::reactor::{Direction, Waiter};
use crate::backend::{Adopt, CompletionIo};
use crate::{Error, Source, SourceFd};

/// An io source (a socket, a pipe; any [`Source`]) whose reads and writes
/// wait on the loop: `readable().await`, `writable().await`, or the
/// `read`/`write` methods that retry on `WouldBlock`. With the `futures`
/// feature it implements `futures_io::AsyncRead` and `AsyncWrite` (for
/// `AsyncFd<T>` and `&AsyncFd<T>`), where `&T` reads and writes.
///
/// The source is put in non-blocking mode (on Unix, any fd; on Windows,
/// sockets). An io watcher watches it from the first wait on: on
/// backends with edge triggering (epoll, kqueue) it is registered once,
/// for both directions; on the others, level-triggered, for what a
/// future waits for. Dropping the `AsyncFd` removes the watcher (at the
/// end of the task's poll, before the loop polls again) and closes the
/// source after that: the kernel never watches a closed fd.
///
/// ```
/// use evloop::exec::{block_on, AsyncFd};
/// use evloop::{Loop, Sim};
/// use std::time::Duration;
///
/// let sim = Sim::new();
/// let sock = sim.socket("peer", 1024);
/// sim.deliver(Duration::from_millis(30), &sock, b"ping");
/// let mut lp: Loop = Loop::with_backend(sim.backend());
/// let got = block_on(&mut lp, &mut (), async move {
///     let sock = AsyncFd::new(sock)?;
///     let mut buf = [0u8; 16];
///     let n = sock.read(&mut buf).await?;
///     sock.write_all(b"pong").await?;
///     Ok::<_, std::io::Error>(buf[..n].to_vec())
/// }).unwrap().unwrap();
/// assert_eq!(got, b"ping");
/// assert_eq!(lp.now(), Duration::from_millis(30));
/// ```
pub struct AsyncFd<T> {
    io: Rc<T>,
    shared: Rc<Shared>,
    slot: usize,
    /// The socket, if the loop's completion I/O reads and writes it
    /// (adopted by [`HyperIo`](crate::exec::hyper::HyperIo) on io_uring).
    adopted: Cell<Option<crate::RawFd>>,
    /// Its write side was shut through the completion I/O.
    #[cfg_attr(not(feature = "hyper"), allow(dead_code))]
    shut: Cell<bool>,
}

fn no_executor() -> io::Error {
    io::Error::other(Error::NoExecutor)
}

impl<T: Source + 'static> AsyncFd<T> {
    /// Wraps `io` for the executor of the task that calls it (an
    /// `Err` outside a task: use [`AsyncFd::with_executor`] there).
    ///
    /// ```
    /// use evloop::exec::AsyncFd;
    /// use std::net::TcpListener;
    /// let l = TcpListener::bind("127.0.0.1:0").unwrap();
    /// // Not inside a task: no executor to watch it with.
    /// assert!(AsyncFd::new(l).is_err());
    /// ```
    pub fn new(io: T) -> io::Result<AsyncFd<T>> {
        match Shared::current() {
            Some(shared) => AsyncFd::make(shared, io),
            None => Err(no_executor()),
        }
    }

    /// Wraps `io` for `executor` (from [`exec::Executor::of`](crate::exec::Executor::of)),
    /// from code outside its tasks.
    ///
    /// ```
    /// use evloop::exec::{AsyncFd, Executor};
    /// use evloop::{Loop, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let ex = Executor::of(&mut lp).unwrap();
    /// let sock = AsyncFd::with_executor(&ex, sim.socket("s", 0)).unwrap();
    /// drop(sock);
    /// ```
    pub fn with_executor(executor: &Executor, io: T) -> io::Result<AsyncFd<T>> {
        AsyncFd::make(executor.shared().clone(), io)
    }

    fn make(shared: Rc<Shared>, io: T) -> io::Result<AsyncFd<T>> {
        if let SourceFd::Os(fd) = io.source_fd() {
            set_nonblocking(&fd)?;
        }
        let io = Rc::new(io);
        let slot = shared.reactor.borrow_mut().add_io(io.clone());
        Ok(AsyncFd {
            io,
            shared,
            slot,
            adopted: Cell::new(None),
            shut: Cell::new(false),
        })
    }
}

impl<T> AsyncFd<T> {
    /// The source.
    ///
    /// ```
    /// use evloop::exec::{AsyncFd, Executor};
    /// use evloop::{Loop, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let ex = Executor::of(&mut lp).unwrap();
    /// let sock = AsyncFd::with_executor(&ex, sim.socket("s", 0)).unwrap();
    /// assert_eq!(sock.get_ref().fd(), 3);
    /// ```
    pub fn get_ref(&self) -> &T {
        &self.io
    }

    fn poll_ready(
        &self,
        dir: Direction,
        who: Waiter<'_>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        match self
            .shared
            .reactor
            .borrow_mut()
            .poll_io(self.slot, dir, who, cx.waker())
        {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }

    /// Ready when the source may be read (or hung up, or in error): the
    /// poll form of [`AsyncFd::readable`]. Like every poll method, it wakes
    /// only the last task that called a poll method for this direction
    /// (async-io's and tokio's rule: it has nowhere to keep more); the
    /// futures ([`AsyncFd::readable`], [`AsyncFd::read`], [`AsyncFd::accept`]...)
    /// wake every task that waits.
    ///
    /// ```
    /// use evloop::exec::{block_on, AsyncFd};
    /// use evloop::{Loop, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let s = sim.socket("s", 0);
    /// sim.deliver(Duration::from_millis(5), &s, b"x");
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// block_on(&mut lp, &mut (), async move {
    ///     let s = AsyncFd::new(s).unwrap();
    ///     std::future::poll_fn(|cx| s.poll_readable(cx)).await.unwrap();
    /// }).unwrap();
    /// ```
    pub fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_ready(Direction::Read, Waiter::Poll, cx)
    }

    /// Ready when the source may be written (or hung up, or in error).
    /// Only the last task to call a poll method for writing is woken
    /// (see [`AsyncFd::poll_readable`]).
    ///
    /// ```
    /// use evloop::exec::{block_on, AsyncFd};
    /// use evloop::{Loop, Sim};
    /// let sim = Sim::new();
    /// let s = sim.socket("s", 64);
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// block_on(&mut lp, &mut (), async move {
    ///     let s = AsyncFd::new(s).unwrap();
    ///     std::future::poll_fn(|cx| s.poll_writable(cx)).await.unwrap();
    /// }).unwrap();
    /// ```
    pub fn poll_writable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_ready(Direction::Write, Waiter::Poll, cx)
    }

    /// Waits until the source may be read (a readiness the loop reported
    /// and no read has used up since: a read that says `WouldBlock`
    /// through [`AsyncFd::read_with`] clears it). Every task waiting on the
    /// source is woken by its readiness (here, and in every future of
    /// `AsyncFd`), as with async-io.
    ///
    /// ```
    /// use evloop::exec::{block_on, AsyncFd};
    /// use evloop::{Loop, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let s = sim.socket("s", 0);
    /// sim.deliver(Duration::from_millis(5), &s, b"x");
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// block_on(&mut lp, &mut (), async move { AsyncFd::new(s)?.readable().await }).unwrap().unwrap();
    /// assert_eq!(lp.now(), Duration::from_millis(5));
    /// ```
    pub fn readable(&self) -> ReadyFuture<'_, T> {
        ReadyFuture {
            io: self,
            dir: Direction::Read,
            key: None,
        }
    }

    /// Waits until the source may be written.
    ///
    /// ```
    /// use evloop::exec::{block_on, AsyncFd};
    /// use evloop::{Loop, Sim};
    /// let sim = Sim::new();
    /// let s = sim.socket("s", 64);
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// block_on(&mut lp, &mut (), async move { AsyncFd::new(s)?.writable().await }).unwrap().unwrap();
    /// ```
    pub fn writable(&self) -> ReadyFuture<'_, T> {
        ReadyFuture {
            io: self,
            dir: Direction::Write,
            key: None,
        }
    }

    fn poll_with<R>(
        &self,
        dir: Direction,
        mut key: Option<&mut Option<usize>>,
        cx: &mut Context<'_>,
        mut op: impl FnMut(&T) -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        fn who<'k>(key: &'k mut Option<&mut Option<usize>>) -> Waiter<'k> {
            match key {
                Some(key) => Waiter::Future(key),
                None => Waiter::Poll,
            }
        }
        // Optimistic: the operation first (a socket just accepted has its
        // request waiting), the readiness only once it would block; but
        // not when the loop is known to have reported nothing since the
        // last `WouldBlock` (edge-registered): that try would be a wasted
        // syscall per wait.
        let unready = self.shared.reactor.borrow().known_unready(self.slot, dir);
        if unready {
            match self.poll_ready(dir, who(&mut key), cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        loop {
            match op(&self.io) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.shared.reactor.borrow_mut().clear_io(self.slot, dir);
                }
                r => return Poll::Ready(r),
            }
            match self.poll_ready(dir, who(&mut key), cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Runs `op` (a non-blocking read of the source, or anything that
    /// needs it readable) until it gives something other than
    /// `WouldBlock`, waiting for readability in between: the poll form.
    ///
    /// ```
    /// use evloop::exec::{block_on, AsyncFd};
    /// use evloop::{Loop, Sim};
    /// use std::io::Read;
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let s = sim.socket("s", 0);
    /// sim.deliver(Duration::from_millis(5), &s, b"hey");
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let n = block_on(&mut lp, &mut (), async move {
    ///     let s = AsyncFd::new(s).unwrap();
    ///     let mut buf = [0u8; 8];
    ///     std::future::poll_fn(|cx| s.poll_read_with(cx, |mut io| io.read(&mut buf))).await
    /// }).unwrap().unwrap();
    /// assert_eq!(n, 3);
    /// ```
    pub fn poll_read_with<R>(
        &self,
        cx: &mut Context<'_>,
        op: impl FnMut(&T) -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        if let Some(e) = self.refused("poll_read_with") {
            return Poll::Ready(Err(e));
        }
        self.poll_with(Direction::Read, None, cx, op)
    }

    /// [`AsyncFd::poll_read_with`] for writing.
    ///
    /// ```
    /// use evloop::exec::{block_on, AsyncFd};
    /// use evloop::{Loop, Sim};
    /// use std::io::Write;
    /// let sim = Sim::new();
    /// let s = sim.socket("s", 64);
    /// let fd = s.fd();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// block_on(&mut lp, &mut (), async move {
    ///     let s = AsyncFd::new(s).unwrap();
    ///     std::future::poll_fn(|cx| s.poll_write_with(cx, |mut io| io.write(b"out"))).await
    /// }).unwrap().unwrap();
    /// assert_eq!(sim.sent(fd), b"out");
    /// ```
    pub fn poll_write_with<R>(
        &self,
        cx: &mut Context<'_>,
        op: impl FnMut(&T) -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        if let Some(e) = self.refused("poll_write_with") {
            return Poll::Ready(Err(e));
        }
        self.poll_with(Direction::Write, None, cx, op)
    }

    /// Runs `op` until it gives something other than `WouldBlock`,
    /// waiting for readability in between (async-io's `read_with`).
    ///
    /// ```
    /// use evloop::exec::{block_on, AsyncFd};
    /// use evloop::{Loop, Sim};
    /// use std::io::Read;
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let s = sim.socket("s", 0);
    /// sim.deliver(Duration::from_millis(5), &s, b"abc");
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let n = block_on(&mut lp, &mut (), async move {
    ///     let s = AsyncFd::new(s).unwrap();
    ///     let mut buf = [0u8; 8];
    ///     s.read_with(|mut io| io.read(&mut buf)).await
    /// }).unwrap().unwrap();
    /// assert_eq!(n, 3);
    /// ```
    pub async fn read_with<R>(&self, mut op: impl FnMut(&T) -> io::Result<R>) -> io::Result<R> {
        if let Some(e) = self.refused("read_with") {
            return Err(e);
        }
        let mut wait = self.waiting(Direction::Read);
        std::future::poll_fn(|cx| wait.poll_with(cx, &mut op)).await
    }

    /// [`AsyncFd::read_with`] for writing.
    ///
    /// ```
    /// use evloop::exec::{block_on, AsyncFd};
    /// use evloop::{Loop, Sim};
    /// use std::io::Write;
    /// let sim = Sim::new();
    /// let s = sim.socket("s", 64);
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let n = block_on(&mut lp, &mut (), async move {
    ///     AsyncFd::new(s).unwrap().write_with(|mut io| io.write(b"hi")).await
    /// }).unwrap().unwrap();
    /// assert_eq!(n, 2);
    /// ```
    pub async fn write_with<R>(&self, mut op: impl FnMut(&T) -> io::Result<R>) -> io::Result<R> {
        if let Some(e) = self.refused("write_with") {
            return Err(e);
        }
        let mut wait = self.waiting(Direction::Write);
        std::future::poll_fn(|cx| wait.poll_with(cx, &mut op)).await
    }

    /// A future's entry among the source's waiters, for its life.
    fn waiting(&self, dir: Direction) -> Waiting<'_, T> {
        Waiting {
            io: self,
            dir,
            key: None,
        }
    }
}

/// The waiter entry of one of `AsyncFd`'s futures: made at its first wait,
/// removed when the future is dropped.
struct Waiting<'a, T> {
    io: &'a AsyncFd<T>,
    dir: Direction,
    key: Option<usize>,
}

impl<T> Waiting<'_, T> {
    fn poll_with<R>(
        &mut self,
        cx: &mut Context<'_>,
        op: impl FnMut(&T) -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        self.io.poll_with(self.dir, Some(&mut self.key), cx, op)
    }
}

impl<T> Drop for Waiting<'_, T> {
    fn drop(&mut self) {
        unwait(self.io, self.dir, self.key);
    }
}

fn unwait<T>(io: &AsyncFd<T>, dir: Direction, key: Option<usize>) {
    if let Some(key) = key {
        if let Ok(mut reactor) = io.shared.reactor.try_borrow_mut() {
            reactor.unwait(io.slot, dir, key);
        }
    }
}

impl<T> AsyncFd<T>
where
    for<'a> &'a T: Read,
{
    /// Reads into `buf`, waiting until something can be read; `Ok(0)` at
    /// the end of the stream.
    ///
    /// ```
    /// use evloop::exec::{block_on, AsyncFd};
    /// use evloop::{Loop, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let s = sim.socket("s", 0);
    /// sim.close_peer(Duration::from_millis(5), &s);
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let n = block_on(&mut lp, &mut (), async move {
    ///     AsyncFd::new(s)?.read(&mut [0u8; 4]).await
    /// }).unwrap().unwrap();
    /// assert_eq!(n, 0);
    /// ```
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut wait = self.waiting(Direction::Read);
        let ring = self.ring();
        std::future::poll_fn(|cx| {
            let asked = buf.len();
            let r = match &ring {
                Some((ring, fd)) => wait.poll_with(cx, |_| ring.recv(*fd, buf)),
                None => wait.poll_with(cx, |mut io| io.read(buf)),
            };
            self.after_read(&r, asked);
            r
        })
        .await
    }

    /// The poll form of [`AsyncFd::read`].
    ///
    /// ```
    /// use evloop::exec::{block_on, AsyncFd};
    /// use evloop::{Loop, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let s = sim.socket("s", 0);
    /// sim.deliver(Duration::from_millis(1), &s, b"z");
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let n = block_on(&mut lp, &mut (), async move {
    ///     let s = AsyncFd::new(s).unwrap();
    ///     let mut buf = [0u8; 4];
    ///     std::future::poll_fn(|cx| s.poll_read(cx, &mut buf)).await
    /// }).unwrap().unwrap();
    /// assert_eq!(n, 1);
    /// ```
    pub fn poll_read(&self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let asked = buf.len();
        let r = match self.ring() {
            Some((ring, fd)) => self.poll_with(Direction::Read, None, cx, |_| ring.recv(fd, buf)),
            None => self.poll_read_with(cx, |mut io| io.read(buf)),
        };
        self.after_read(&r, asked);
        r
    }

    fn after_read(&self, r: &Poll<io::Result<usize>>, asked: usize) {
        if let Poll::Ready(Ok(n)) = r {
            if *n > 0 && *n < asked {
                self.shared.reactor.borrow_mut().read_short(self.slot);
            }
        }
    }
}

impl<T> AsyncFd<T>
where
    for<'a> &'a T: Write,
{
    /// Writes from `buf`, waiting until something can be written.
    ///
    /// ```
    /// use evloop::exec::{block_on, AsyncFd};
    /// use evloop::{Loop, Sim};
    /// let sim = Sim::new();
    /// let s = sim.socket("s", 64);
    /// let fd = s.fd();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// block_on(&mut lp, &mut (), async move { AsyncFd::new(s)?.write(b"abc").await }).unwrap().unwrap();
    /// assert_eq!(sim.sent(fd), b"abc");
    /// ```
    pub async fn write(&self, buf: &[u8]) -> io::Result<usize> {
        match self.ring() {
            Some((ring, fd)) => {
                let mut wait = self.waiting(Direction::Write);
                std::future::poll_fn(|cx| wait.poll_with(cx, |_| ring.send(fd, buf))).await
            }
            None => self.write_with(|mut io| io.write(buf)).await,
        }
    }

    /// Writes all of `buf`, waiting whenever the source is full.
    ///
    /// ```
    /// use evloop::exec::{block_on, AsyncFd};
    /// use evloop::{Loop, Sim};
    /// let sim = Sim::new();
    /// let s = sim.socket("s", 1 << 16);
    /// let fd = s.fd();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// block_on(&mut lp, &mut (), async move { AsyncFd::new(s)?.write_all(&[7u8; 1000]).await }).unwrap().unwrap();
    /// assert_eq!(sim.sent(fd).len(), 1000);
    /// ```
    pub async fn write_all(&self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write(buf).await? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                n => buf = &buf[n..],
            }
        }
        Ok(())
    }

    /// The poll form of [`AsyncFd::write`].
    ///
    /// ```
    /// use evloop::exec::{block_on, AsyncFd};
    /// use evloop::{Loop, Sim};
    /// let sim = Sim::new();
    /// let s = sim.socket("s", 64);
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let n = block_on(&mut lp, &mut (), async move {
    ///     let s = AsyncFd::new(s).unwrap();
    ///     std::future::poll_fn(|cx| s.poll_write(cx, b"ab")).await
    /// }).unwrap().unwrap();
    /// assert_eq!(n, 2);
    /// ```
    pub fn poll_write(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.ring() {
            Some((ring, fd)) => self.poll_with(Direction::Write, None, cx, |_| ring.send(fd, buf)),
            None => self.poll_write_with(cx, |mut io| io.write(buf)),
        }
    }

    /// [`AsyncFd::poll_write`] of several slices (hyper's vectored
    /// writes): one `writev`, or, through the completion I/O, as many
    /// slices as it takes.
    #[cfg_attr(not(feature = "hyper"), allow(dead_code))]
    pub(crate) fn poll_write_vectored(
        &self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let Some((ring, fd)) = self.ring() else {
            return self.poll_write_with(cx, |mut io| io.write_vectored(bufs));
        };
        self.poll_with(Direction::Write, None, cx, |_| {
            let mut taken = 0;
            for b in bufs.iter().filter(|b| !b.is_empty()) {
                match ring.send(fd, b) {
                    Ok(n) => {
                        taken += n;
                        if n < b.len() {
                            break;
                        }
                    }
                    Err(e) if taken == 0 => return Err(e),
                    Err(_) => break,
                }
            }
            Ok(taken)
        })
    }

    /// Flushes what the source buffers (nothing for a socket; through the
    /// completion I/O, what was taken goes with the loop's next wait).
    #[cfg_attr(not(any(feature = "hyper", feature = "futures")), allow(dead_code))]
    pub(crate) fn poll_flush_io(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.adopted.get().is_some() {
            return Poll::Ready(Ok(()));
        }
        self.poll_write_with(cx, |mut io| io.flush())
    }
}

impl<T> AsyncFd<T> {
    /// The loop's completion I/O and the fd, if this source is adopted.
    fn ring(&self) -> Option<(Rc<dyn CompletionIo>, crate::RawFd)> {
        let fd = self.adopted.get()?;
        Some((self.shared.completion.clone()?, fd))
    }

    /// The error of an operation on the source itself (`*_with`) when
    /// its bytes go through the loop's completion I/O instead.
    fn refused(&self, what: &str) -> Option<io::Error> {
        self.adopted.get()?;
        Some(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "AsyncFd::{what} on a socket the loop reads and writes by completion I/O \
                 (io_uring; adopted by HyperIo): its bytes are in the loop's buffers, not the \
                 socket's; use read, write and their poll forms (EVLOOP_IO_URING_COMPLETION=0 \
                 turns completion I/O off)"
            ),
        ))
    }

    /// Shuts down the write side through the completion I/O, once what it
    /// took was sent (pending until then); `None` if not adopted.
    #[cfg_attr(not(feature = "hyper"), allow(dead_code))]
    pub(crate) fn poll_shutdown_adopted(
        &self,
        cx: &mut Context<'_>,
    ) -> Option<Poll<io::Result<()>>> {
        let (ring, fd) = self.ring()?;
        if !self.shut.replace(true) {
            if let Err(e) = ring.shutdown_write(fd) {
                return Some(Poll::Ready(Err(e)));
            }
        }
        // Writable again once everything is sent (the backend's rule after
        // a shutdown).
        Some(
            self.poll_with(Direction::Write, None, cx, |_| match ring.unsent(fd) {
                0 => Ok(()),
                _ => Err(io::ErrorKind::WouldBlock.into()),
            }),
        )
    }
}

impl<T: Source + 'static> AsyncFd<T> {
    /// Hands a connected `TcpStream` to the loop's completion I/O, if the
    /// loop has one (io_uring) and the stream is not watched yet; whether
    /// it did. Its reads and writes then go through
    /// [`AsyncFd::read`], [`AsyncFd::write`] and their poll forms only.
    #[cfg_attr(not(feature = "hyper"), allow(dead_code))]
    pub(crate) fn adopt_completion(&self) -> bool {
        let Some(ring) = self.shared.completion.clone() else {
            return false;
        };
        let any: &dyn Any = &*self.io;
        let Some(stream) = any.downcast_ref::<TcpStream>() else {
            return false;
        };
        if self.shared.reactor.borrow().watched(self.slot) || stream.peer_addr().is_err() {
            return false;
        }
        let fd = crate::source::number(stream.source_fd());
        if ring.adopt(fd, Adopt::Stream).is_err() {
            return false;
        }
        self.adopted.set(Some(fd));
        true
    }
}

impl AsyncFd<TcpListener> {
    /// A non-blocking listener bound to `addr`, watched by the current
    /// task's executor.
    ///
    /// On WASI (wasm32-wasip1) it returns an `Err` of kind
    /// [`io::ErrorKind::Unsupported`] that names WASI: a guest cannot
    /// bind a socket; wrap its preopened listener with [`AsyncFd::new`]
    /// instead (`TcpListener::from_raw_fd(3)`).
    ///
    /// ```
    /// use evloop::exec::{block_on, AsyncFd};
    /// use evloop::Loop;
    /// use std::net::TcpListener;
    /// let mut lp: Loop = Loop::new().unwrap();
    /// let port = block_on(&mut lp, &mut (), async {
    ///     let l = AsyncFd::<TcpListener>::bind("127.0.0.1:0")?;
    ///     Ok::<_, std::io::Error>(l.get_ref().local_addr()?.port())
    /// }).unwrap().unwrap();
    /// assert!(port > 0);
    /// ```
    pub fn bind(addr: impl ToSocketAddrs) -> io::Result<AsyncFd<TcpListener>> {
        #[cfg(target_os = "wasi")]
        {
            use crate::backends::wasi;
            let _ = addr;
            Err(wasi::refused(wasi::CANNOT_BIND))
        }
        #[cfg(not(target_os = "wasi"))]
        AsyncFd::new(TcpListener::bind(addr)?)
    }

    /// Accepts a connection, waiting for one; the stream is watched by
    /// the same executor.
    ///
    /// ```
    /// use evloop::exec::{block_on, AsyncFd};
    /// use evloop::Loop;
    /// use std::net::{TcpListener, TcpStream};
    /// let mut lp: Loop = Loop::new().unwrap();
    /// block_on(&mut lp, &mut (), async {
    ///     let l = AsyncFd::<TcpListener>::bind("127.0.0.1:0")?;
    ///     let addr = l.get_ref().local_addr()?;
    ///     let client = AsyncFd::<TcpStream>::connect(addr).await?;
    ///     let (server, peer) = l.accept().await?;
    ///     assert_eq!(peer, client.get_ref().local_addr()?);
    ///     drop(server);
    ///     Ok::<_, std::io::Error>(())
    /// }).unwrap().unwrap();
    /// ```
    pub async fn accept(&self) -> io::Result<(AsyncFd<TcpStream>, SocketAddr)> {
        let (stream, addr) = self.read_with(|l| l.accept()).await?;
        Ok((AsyncFd::make(self.shared.clone(), stream)?, addr))
    }
}

impl AsyncFd<TcpStream> {
    /// Connects to `addr` without blocking the loop: the connection is
    /// started, then its writability awaited, then its error (if any)
    /// taken.
    ///
    /// On WASI (wasm32-wasip1) it returns an `Err` of kind
    /// [`io::ErrorKind::Unsupported`] that names WASI: a guest cannot
    /// create or connect a socket.
    ///
    /// ```
    /// use evloop::exec::{block_on, AsyncFd};
    /// use evloop::Loop;
    /// use std::net::{TcpListener, TcpStream};
    /// let l = TcpListener::bind("127.0.0.1:0").unwrap();
    /// let addr = l.local_addr().unwrap();
    /// let mut lp: Loop = Loop::new().unwrap();
    /// let s = block_on(&mut lp, &mut (), AsyncFd::<TcpStream>::connect(addr)).unwrap().unwrap();
    /// assert_eq!(s.get_ref().peer_addr().unwrap(), addr);
    /// ```
    pub async fn connect(addr: SocketAddr) -> io::Result<AsyncFd<TcpStream>> {
        connect(addr).await
    }
}

/// The fd non-blocking, with socket2 (which does not build for WASI).
#[cfg(any(unix, windows))]
fn set_nonblocking<'a, F>(fd: &'a F) -> io::Result<()>
where
    socket2::SockRef<'a>: From<&'a F>,
{
    socket2::SockRef::from(fd).set_nonblocking(true)
}

/// The fd non-blocking, on WASI.
#[cfg(target_os = "wasi")]
fn set_nonblocking(fd: &std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    crate::backends::net_sys::set_nonblocking(*fd)
}

/// The connect of [`AsyncFd::connect`] on WASI: refused.
#[cfg(target_os = "wasi")]
async fn connect(_: SocketAddr) -> io::Result<AsyncFd<TcpStream>> {
    Err(crate::backends::wasi::refused(
        "cannot connect a socket: a guest has only the sockets the runtime preopens and those \
         accepted from them",
    ))
}

/// The connect of [`AsyncFd::connect`] on Unix and Windows.
#[cfg(any(unix, windows))]
async fn connect(addr: SocketAddr) -> io::Result<AsyncFd<TcpStream>> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_nonblocking(true)?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if in_progress(&e) => {}
        Err(e) => return Err(e),
    }
    let stream = AsyncFd::new(TcpStream::from(socket))?;
    stream.writable().await?;
    if let Some(e) = stream.get_ref().take_error()? {
        return Err(e);
    }
    // Connected (a refused connection reports its error above, or on
    // peer_addr).
    stream.get_ref().peer_addr()?;
    Ok(stream)
}

#[cfg(any(unix, windows))]
fn in_progress(e: &io::Error) -> bool {
    if e.kind() == io::ErrorKind::WouldBlock {
        return true;
    }
    #[cfg(unix)]
    {
        e.raw_os_error() == Some(libc::EINPROGRESS)
    }
    #[cfg(not(unix))]
    {
        false
    }
}

impl<T> Drop for AsyncFd<T> {
    fn drop(&mut self) {
        // Given back before the watcher goes (and the socket closes).
        if let Some((ring, fd)) = self.ring() {
            ring.release(fd);
        }
        if let Ok(mut reactor) = self.shared.reactor.try_borrow_mut() {
            reactor.close_io(self.slot);
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for AsyncFd<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AsyncFd").field(&self.io).finish()
    }
}

/// The future of [`AsyncFd::readable`] and [`AsyncFd::writable`].
///
/// ```
/// use evloop::exec::{AsyncFd, Executor, ReadyFuture};
/// use evloop::{Loop, Sim};
/// let sim = Sim::new();
/// let mut lp: Loop = Loop::with_backend(sim.backend());
/// let ex = Executor::of(&mut lp).unwrap();
/// let s = AsyncFd::with_executor(&ex, sim.socket("s", 0)).unwrap();
/// let _ready: ReadyFuture<'_, _> = s.writable();
/// ```
#[must_use = "futures do nothing unless awaited"]
pub struct ReadyFuture<'a, T> {
    io: &'a AsyncFd<T>,
    dir: Direction,
    /// Its entry among the source's waiters.
    key: Option<usize>,
}

impl<T> Future for ReadyFuture<'_, T> {
    type Output = io::Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.io
            .poll_ready(this.dir, Waiter::Future(&mut this.key), cx)
    }
}

impl<T> Drop for ReadyFuture<'_, T> {
    fn drop(&mut self) {
        unwait(self.io, self.dir, self.key);
    }
}

impl<T> fmt::Debug for ReadyFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadyFuture")
            .field("dir", &self.dir)
            .finish()
    }
}

#[cfg(feature = "futures")]
mod futures_impls {
    use super::*;

    /// futures-io's traits for `AsyncFd<T>` and `&AsyncFd<T>` alike: reads and
    /// writes take `&self`, so a shared reference does all an owned one does.
    macro_rules! futures_io_impls {
        ($($ty:ty),*) => {$(
            impl<T> futures_io::AsyncRead for $ty
            where
                for<'a> &'a T: Read,
            {
                fn poll_read(
                    self: Pin<&mut Self>,
                    cx: &mut Context<'_>,
                    buf: &mut [u8],
                ) -> Poll<io::Result<usize>> {
                    AsyncFd::poll_read(&self, cx, buf)
                }
            }

            impl<T> futures_io::AsyncWrite for $ty
            where
                for<'a> &'a T: Write,
            {
                fn poll_write(
                    self: Pin<&mut Self>,
                    cx: &mut Context<'_>,
                    buf: &[u8],
                ) -> Poll<io::Result<usize>> {
                    AsyncFd::poll_write(&self, cx, buf)
                }

                fn poll_flush(
                    self: Pin<&mut Self>,
                    cx: &mut Context<'_>,
                ) -> Poll<io::Result<()>> {
                    self.poll_flush_io(cx)
                }

                fn poll_close(
                    self: Pin<&mut Self>,
                    cx: &mut Context<'_>,
                ) -> Poll<io::Result<()>> {
                    self.poll_flush(cx)
                }
            }
        )*};
    }

    futures_io_impls!(AsyncFd<T>, &AsyncFd<T>);
}
