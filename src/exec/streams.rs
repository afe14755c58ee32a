//! Signals and child exits as futures and streams.

use std::fmt;
use std::future::Future;

use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use super::executor::Shared;
use super::reactor::{Item, Watched};
use crate::{Error, ExitStatus, Result};

/// A stream slot of an executor's reactor: the current one when first
/// polled (a future made outside a task may be awaited in one).
struct Slot {
    watched: Watched,
    shared: Option<Rc<Shared>>,
    slot: usize,
    /// The error was given: the stream has ended.
    failed: bool,
}

impl Slot {
    fn new(watched: Watched) -> Slot {
        Slot {
            watched,
            shared: None,
            slot: 0,
            failed: false,
        }
    }

    #[allow(clippy::option_option)]
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Item>>> {
        if self.failed {
            return Poll::Ready(None);
        }
        if self.shared.is_none() {
            let Some(shared) = Shared::current() else {
                self.failed = true;
                return Poll::Ready(Some(Err(Error::NoExecutor)));
            };
            self.slot = shared.reactor.borrow_mut().add_stream(self.watched);
            self.shared = Some(shared);
        }
        let shared = self.shared.as_ref().expect("set above");
        let polled = shared
            .reactor
            .borrow_mut()
            .poll_stream(self.slot, cx.waker());
        match polled {
            Some(item) => Poll::Ready(item),
            None => Poll::Pending,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(shared) = &self.shared {
            if let Ok(mut reactor) = shared.reactor.try_borrow_mut() {
                reactor.close_stream(self.slot);
            }
        }
    }
}

/// The deliveries of one signal, as a stream (made by [`signals`]): each
/// item is the signal's number, once per delivery the loop saw (signals
/// that arrive together coalesce, as with a signal watcher). Dropping it
/// stops the watcher.
///
/// ```no_run
/// use evloop::exec::{block_on, signals};
/// use evloop::Loop;
/// let mut lp: Loop = Loop::new().unwrap();
/// block_on(&mut lp, &mut (), async {
///     let mut term = signals(libc::SIGTERM);
///     term.recv().await.unwrap().unwrap();
///     println!("shutting down");
/// }).unwrap();
/// ```
pub struct Signals {
    slot: Slot,
}

/// A stream of the deliveries of `signal` to this process, watched by
/// the current task's executor. An invalid signal (or no executor) is
/// the stream's first item, an `Err`, and then it ends.
///
/// ```
/// use evloop::exec::{block_on, signals};
/// use evloop::{Error, Loop, Sim};
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// let first = block_on(&mut lp, &mut (), async { signals(9).recv().await }).unwrap();
/// assert!(matches!(first, Some(Err(Error::InvalidSignal { signal: 9, .. }))));
/// ```
pub fn signals(signal: i32) -> Signals {
    Signals {
        slot: Slot::new(Watched::Signal(signal)),
    }
}

impl Signals {
    /// The next delivery (`None`: the stream ended after an error).
    ///
    /// ```no_run
    /// # use evloop::exec::signals;
    /// # async fn f() {
    /// let mut hup = signals(libc::SIGHUP);
    /// while let Some(Ok(_)) = hup.recv().await {
    ///     println!("reload");
    /// }
    /// # }
    /// ```
    pub async fn recv(&mut self) -> Option<Result<i32>> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// The poll form of [`Signals::recv`].
    ///
    /// ```
    /// use evloop::exec::{block_on, signals};
    /// use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let r = block_on(&mut lp, &mut (), async {
    ///     let mut s = signals(0);
    ///     std::future::poll_fn(|cx| s.poll_recv(cx)).await
    /// }).unwrap();
    /// assert!(r.unwrap().is_err());
    /// ```
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<i32>>> {
        self.slot.poll(cx).map(|item| {
            item.map(|r| {
                r.map(|item| match item {
                    Item::Signal(n) => n,
                    Item::Exit(..) => unreachable!("a signal slot"),
                })
            })
        })
    }
}

impl fmt::Debug for Signals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signals").finish_non_exhaustive()
    }
}

/// A child's exit: the process id and how it ended (`None` if someone
/// else reaped it first, as [`ChildEvent::status`](crate::ChildEvent)).
///
/// ```
/// use evloop::exec::Exit;
/// use evloop::ExitStatus;
/// let e: Exit = (42, Some(ExitStatus::Exited(0)));
/// assert!(e.1.unwrap().success());
/// ```
pub type Exit = (u32, Option<ExitStatus>);

/// The exit of one child process, as a future (made by [`child_exit`]).
/// Dropping it stops the watcher.
///
/// ```
/// use evloop::exec::{block_on, child_exit};
/// use evloop::{ExitStatus, Loop};
/// use std::process::Command;
/// let mut lp: Loop = Loop::new().unwrap();
/// let child = Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
/// let (pid, status) = block_on(&mut lp, &mut (), child_exit(child.id())).unwrap().unwrap();
/// assert_eq!((pid, status), (child.id(), Some(ExitStatus::Exited(3))));
/// ```
pub struct ChildWait {
    slot: Slot,
}

/// The exit of child `pid`, watched by the current task's executor. An
/// `Err` if the pid cannot be watched (not a child of this process, no
/// executor).
///
/// ```
/// use evloop::exec::{block_on, child_exit};
/// use evloop::{Loop, Sim};
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// assert!(block_on(&mut lp, &mut (), child_exit(0)).unwrap().is_err());
/// ```
pub fn child_exit(pid: u32) -> ChildWait {
    ChildWait {
        slot: Slot::new(Watched::Child(pid)),
    }
}

impl Future for ChildWait {
    type Output = Result<Exit>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Exit>> {
        self.get_mut().slot.poll(cx).map(|item| match item {
            Some(Ok(Item::Exit(pid, status))) => Ok((pid, status)),
            Some(Ok(Item::Signal(_))) => unreachable!("a child slot"),
            Some(Err(e)) => Err(e),
            None => Err(Error::ExecutorGone),
        })
    }
}

impl fmt::Debug for ChildWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChildWait").finish_non_exhaustive()
    }
}

/// The exits of every child of this process, as a stream (made by
/// [`child_exits`]), in the order the loop saw them.
///
/// ```
/// use evloop::exec::{block_on, child_exits};
/// use evloop::{ExitStatus, Loop};
/// use std::process::Command;
/// let mut lp: Loop = Loop::new().unwrap();
/// let statuses = block_on(&mut lp, &mut (), async {
///     let mut exits = child_exits();
///     let a = Command::new("sh").args(["-c", "exit 1"]).spawn().unwrap();
///     let b = Command::new("sh").args(["-c", "exit 2"]).spawn().unwrap();
///     let mut got = vec![];
///     while got.len() < 2 {
///         let (pid, status) = exits.recv().await.unwrap().unwrap();
///         got.push((pid == a.id() || pid == b.id(), status));
///     }
///     got.sort_by_key(|g| format!("{g:?}"));
///     got
/// }).unwrap();
/// assert_eq!(statuses, [(true, Some(ExitStatus::Exited(1))), (true, Some(ExitStatus::Exited(2)))]);
/// ```
pub struct ChildExits {
    slot: Slot,
}

/// A stream of the exits of every child of this process (libev's child
/// watcher of pid 0), watched by the current task's executor.
///
/// ```
/// use evloop::exec::child_exits;
/// let exits = child_exits(); // watched from its first poll on
/// drop(exits);
/// ```
pub fn child_exits() -> ChildExits {
    ChildExits {
        slot: Slot::new(Watched::AnyChild),
    }
}

impl ChildExits {
    /// The next exit (`None`: the stream ended after an error).
    ///
    /// ```
    /// use evloop::exec::child_exits;
    /// use evloop::Error;
    /// use std::future::Future;
    /// use std::task::{Context, Poll, Wake, Waker};
    /// use std::sync::Arc;
    /// struct Nop;
    /// impl Wake for Nop { fn wake(self: Arc<Self>) {} }
    /// // Polled outside any task: no executor to watch children with.
    /// let mut e = child_exits();
    /// let waker = Waker::from(Arc::new(Nop));
    /// let mut recv = std::pin::pin!(e.recv());
    /// let r = recv.as_mut().poll(&mut Context::from_waker(&waker));
    /// assert!(matches!(r, Poll::Ready(Some(Err(Error::NoExecutor)))));
    /// ```
    pub async fn recv(&mut self) -> Option<Result<Exit>> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// The poll form of [`ChildExits::recv`].
    ///
    /// ```
    /// use evloop::exec::{block_on, child_exits};
    /// use evloop::{ExitStatus, Loop};
    /// use std::process::Command;
    /// let mut lp: Loop = Loop::new().unwrap();
    /// let (_, status) = block_on(&mut lp, &mut (), async {
    ///     let mut e = child_exits();
    ///     Command::new("sh").args(["-c", "exit 9"]).spawn().unwrap();
    ///     std::future::poll_fn(|cx| e.poll_recv(cx)).await
    /// }).unwrap().unwrap().unwrap();
    /// assert_eq!(status, Some(ExitStatus::Exited(9)));
    /// ```
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Exit>>> {
        self.slot.poll(cx).map(|item| {
            item.map(|r| {
                r.map(|item| match item {
                    Item::Exit(pid, status) => (pid, status),
                    Item::Signal(_) => unreachable!("a child slot"),
                })
            })
        })
    }
}

impl fmt::Debug for ChildExits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChildExits").finish_non_exhaustive()
    }
}

#[cfg(feature = "futures")]
mod futures_impls {
    use super::*;

    impl futures_core::Stream for Signals {
        type Item = Result<i32>;
        fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<i32>>> {
            self.get_mut().poll_recv(cx)
        }
    }

    impl futures_core::Stream for ChildExits {
        type Item = Result<Exit>;
        fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Exit>>> {
            self.get_mut().poll_recv(cx)
        }
    }
}
