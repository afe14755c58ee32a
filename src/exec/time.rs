//! Timer futures on the loop's timer heap: `sleep`, `sleep_until`,
//! `timeout`.
//!
//! A `Sleep` is `Send + Sync` (hyper's `Timer` asks for that): it holds
//! its executor's id, not the executor, and finds it on this thread when
//! it is polled or dropped. A reset made on another thread (where the
//! executor cannot be reached) is kept in the `Sleep`, which wakes the
//! task that waits on it; that task's next poll, on the loop's thread,
//! carries it to the timer. Its deadline is in loop time
//! ([`Loop::now`](crate::Loop::now)): on the simulator it is virtual.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::executor::Shared;

/// Waits until a duration has passed, on the loop's clock (made by
/// [`sleep`] or [`sleep_until`]). Dropping it stops its timer watcher.
///
/// It is `Send + Sync`, as hyper's `rt::Sleep` must be, and works as
/// tokio's across threads where it can: [`reset`](Sleep::reset) and
/// [`reset_after`](Sleep::reset_after) from another thread take effect
/// (the waiting task is woken and re-arms the timer at its next poll on
/// the loop's thread; `reset_after` then counts from that poll), and
/// [`is_elapsed`](Sleep::is_elapsed) there tells what its last poll saw.
/// What cannot work away from the loop's thread is polling it (it has
/// no timers there: see Panics; once it has a timer, a poll away from
/// its loop, or after the loop is dropped, stays `Pending`) and a drop
/// there, which cannot reach the loop: its timer stays until it fires,
/// and wakes nobody.
///
/// # Panics
///
/// Polling it for the first time outside a task of an evloop executor
/// (or `block_on`) panics: it has no loop whose timers it could use.
///
/// ```
/// use evloop::exec::{block_on, sleep};
/// use evloop::{Loop, Sim};
/// use std::time::Duration;
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// block_on(&mut lp, &mut (), sleep(Duration::from_millis(250))).unwrap();
/// assert_eq!(lp.now(), Duration::from_millis(250));
/// ```
pub struct Sleep {
    when: When,
    /// The executor's id and the timer's slot, once polled.
    registered: Option<(u64, usize)>,
    /// Its poll said `Ready`, and it was not reset since.
    elapsed: bool,
    /// Reset where its executor could not be reached (another thread):
    /// the next poll gives the timer the new deadline.
    moved: bool,
    /// The waker of its last `Pending` poll, for a reset on another
    /// thread to wake.
    waker: Option<Waker>,
}

#[derive(Clone, Copy, Debug)]
enum When {
    /// From the loop's time at the first poll (made outside a task).
    After(Duration),
    /// A deadline in loop time.
    At(Duration),
}

/// A future that is ready `duration` after now, on the loop's clock
/// (the time of the executor's current pass, or of the first poll when
/// made outside a task). See [`Sleep`].
///
/// ```
/// use evloop::exec::{block_on, sleep};
/// use evloop::{Loop, Sim};
/// use std::time::Duration;
/// let mut lp: Loop<Vec<u64>> = Loop::with_backend(Sim::new().backend());
/// let mut log = vec![];
/// block_on(&mut lp, &mut log, async {
///     sleep(Duration::from_secs(1)).await;
///     sleep(Duration::from_secs(2)).await;
/// }).unwrap();
/// assert_eq!(lp.now(), Duration::from_secs(3));
/// ```
pub fn sleep(duration: Duration) -> Sleep {
    let when = match Shared::current() {
        Some(ex) => When::At(ex.now.get().saturating_add(duration)),
        None => When::After(duration),
    };
    Sleep::new(when)
}

/// A future that is ready when the loop's clock
/// ([`Loop::now`](crate::Loop::now)) reaches `deadline`.
///
/// ```
/// use evloop::exec::{block_on, sleep_until};
/// use evloop::{Loop, Sim};
/// use std::time::Duration;
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// block_on(&mut lp, &mut (), sleep_until(Duration::from_secs(7))).unwrap();
/// assert_eq!(lp.now(), Duration::from_secs(7));
/// ```
pub fn sleep_until(deadline: Duration) -> Sleep {
    Sleep::new(When::At(deadline))
}

impl Sleep {
    fn new(when: When) -> Sleep {
        Sleep {
            when,
            registered: None,
            elapsed: false,
            moved: false,
            waker: None,
        }
    }

    /// Moves the deadline to `duration` after the loop's current time,
    /// whether or not it has fired (hyper's `Timer::reset`); a deadline
    /// that is already due makes the next poll `Ready`. From another
    /// thread than its loop's, the time counts from the next poll, which
    /// the reset asks for at once by waking the task that waits.
    ///
    /// ```
    /// use evloop::exec::{block_on, sleep};
    /// use evloop::{Loop, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// block_on(&mut lp, &mut (), async {
    ///     let mut s = Box::pin(sleep(Duration::from_secs(60)));
    ///     s.as_mut().reset_after(Duration::from_secs(1));
    ///     s.await
    /// }).unwrap();
    /// assert_eq!(lp.now(), Duration::from_secs(1));
    /// ```
    pub fn reset_after(self: Pin<&mut Self>, duration: Duration) {
        let this = self.get_mut();
        // Its own executor's clock once it has one.
        let ex = match this.registered {
            Some((id, _)) => Shared::by_id(id),
            None => Shared::current(),
        };
        match ex {
            Some(ex) => this.reset_to(ex.now.get().saturating_add(duration)),
            None => {
                this.when = When::After(duration);
                this.elapsed = false;
                if this.registered.is_some() {
                    this.moved_away();
                }
            }
        }
    }

    /// Moves the deadline to `deadline` in loop time, whether or not it
    /// has fired; a deadline already due makes the next poll `Ready`
    /// (tokio's rule). It works from any thread (see [`Sleep`]).
    ///
    /// ```
    /// use evloop::exec::{block_on, sleep};
    /// use evloop::{Loop, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// block_on(&mut lp, &mut (), async {
    ///     let mut s = Box::pin(sleep(Duration::from_secs(60)));
    ///     s.as_mut().reset(Duration::from_secs(2));
    ///     s.await
    /// }).unwrap();
    /// assert_eq!(lp.now(), Duration::from_secs(2));
    /// ```
    pub fn reset(self: Pin<&mut Self>, deadline: Duration) {
        self.get_mut().reset_to(deadline)
    }

    fn reset_to(&mut self, deadline: Duration) {
        self.when = When::At(deadline);
        self.elapsed = false;
        if let Some((id, slot)) = self.registered {
            match Shared::by_id(id) {
                Some(ex) => ex.reactor.borrow_mut().reset_timer(slot, deadline),
                None => self.moved_away(),
            }
        }
    }

    /// Reset where the executor cannot be reached: kept for the next
    /// poll, which the waiting task is woken for.
    fn moved_away(&mut self) {
        self.moved = true;
        if let Some(w) = &self.waker {
            w.wake_by_ref();
        }
    }

    /// The deadline in loop time, once known (it is, for a sleep made in
    /// a task).
    ///
    /// ```
    /// use evloop::exec::sleep_until;
    /// use std::time::Duration;
    /// assert_eq!(sleep_until(Duration::from_secs(3)).deadline(), Some(Duration::from_secs(3)));
    /// ```
    pub fn deadline(&self) -> Option<Duration> {
        match self.when {
            When::At(d) => Some(d),
            When::After(_) => None,
        }
    }

    /// Whether it has elapsed: its poll said `Ready`, or (on its loop's
    /// thread) its timer fired or its deadline is due at the executor's
    /// current time. A later `reset` makes it pending again. On another
    /// thread it tells what its last poll saw.
    ///
    /// ```
    /// use evloop::exec::{block_on, sleep};
    /// use evloop::{Loop, Sim};
    /// use std::time::Duration;
    /// assert!(!sleep(Duration::from_secs(1)).is_elapsed());
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// block_on(&mut lp, &mut (), async {
    ///     let mut s = Box::pin(sleep(Duration::ZERO));
    ///     s.as_mut().await; // due at its first poll
    ///     assert!(s.is_elapsed());
    /// }).unwrap();
    /// ```
    pub fn is_elapsed(&self) -> bool {
        if self.elapsed {
            return true;
        }
        match self.registered {
            Some((id, slot)) if !self.moved => Shared::by_id(id).is_some_and(|ex| {
                let reactor = ex.reactor.borrow();
                reactor.timer_elapsed(slot, ex.now.get())
            }),
            _ => false,
        }
    }

    /// Keeps the waker of a `Pending` poll (for a reset on another thread).
    fn pending(&mut self, waker: &Waker) -> Poll<()> {
        match &self.waker {
            Some(old) if old.will_wake(waker) => {}
            _ => self.waker = Some(waker.clone()),
        }
        Poll::Pending
    }

    fn ready(&mut self) -> Poll<()> {
        self.elapsed = true;
        self.waker = None;
        Poll::Ready(())
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if let Some((id, slot)) = this.registered {
            let Some(ex) = Shared::by_id(id) else {
                // The loop is gone: it will never fire.
                return Poll::Pending;
            };
            let now = ex.now.get();
            let mut reactor = ex.reactor.borrow_mut();
            if this.moved {
                // Reset on another thread: the timer learns it now.
                this.moved = false;
                let deadline = match this.when {
                    When::At(d) => d,
                    When::After(d) => now.saturating_add(d),
                };
                this.when = When::At(deadline);
                reactor.reset_timer(slot, deadline);
            }
            let fired = reactor.poll_timer(slot, cx.waker(), now);
            drop(reactor);
            return if fired {
                this.ready()
            } else {
                this.pending(cx.waker())
            };
        }
        let Some(ex) = Shared::current() else {
            panic!("evloop::exec::Sleep polled outside a task of an evloop executor");
        };
        let deadline = match this.when {
            When::At(d) => d,
            When::After(d) => ex.now.get().saturating_add(d),
        };
        this.when = When::At(deadline);
        this.moved = false;
        if deadline <= ex.now.get() {
            return this.ready();
        }
        let slot = ex.reactor.borrow_mut().add_timer(deadline, cx.waker());
        this.registered = Some((ex.id, slot));
        this.pending(cx.waker())
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some((id, slot)) = self.registered.take() {
            if let Some(ex) = Shared::by_id(id) {
                if let Ok(mut reactor) = ex.reactor.try_borrow_mut() {
                    reactor.close_timer(slot);
                }
            }
        }
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline())
            .finish()
    }
}

/// The error of a [`timeout`] whose time ran out first.
///
/// ```
/// use evloop::exec::Elapsed;
/// assert_eq!(Elapsed(()).to_string(), "the deadline has elapsed");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed(pub ());

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

/// `future`'s value, or [`Elapsed`] if `duration` passes first (then the
/// future is dropped, with its watchers).
///
/// ```
/// use evloop::exec::{block_on, sleep, timeout, Elapsed};
/// use evloop::{Loop, Sim};
/// use std::time::Duration;
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// let r = block_on(&mut lp, &mut (), async {
///     timeout(Duration::from_secs(1), sleep(Duration::from_secs(5))).await
/// }).unwrap();
/// assert_eq!(r, Err(Elapsed(())));
/// assert_eq!(lp.now(), Duration::from_secs(1));
/// ```
pub fn timeout<F: Future>(duration: Duration, future: F) -> Timeout<F> {
    Timeout {
        future: Box::pin(future),
        sleep: sleep(duration),
    }
}

/// The future of [`timeout`].
///
/// ```
/// use evloop::exec::{timeout, Timeout};
/// use std::time::Duration;
/// let t: Timeout<_> = timeout(Duration::from_secs(1), async { 1 });
/// drop(t);
/// ```
pub struct Timeout<F: Future> {
    future: Pin<Box<F>>,
    sleep: Sleep,
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Poll::Ready(v) = this.future.as_mut().poll(cx) {
            return Poll::Ready(Ok(v));
        }
        match Pin::new(&mut this.sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed(()))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<F: Future> fmt::Debug for Timeout<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeout")
            .field("sleep", &self.sleep)
            .finish()
    }
}
