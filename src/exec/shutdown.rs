//! `Shutdown`: a signal, given once, that many tasks await (tokio-util's
//! `CancellationToken`, tokio's `watch` used as a shutdown flag).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use slab::Slab;

struct Inner {
    triggered: AtomicBool,
    /// The waiting futures' wakers, by key (`None` once woken).
    waiters: Mutex<Slab<Option<Waker>>>,
}

/// A shutdown signal: [`trigger`](Shutdown::trigger) it once, from any
/// thread (a signal handler's task, an admin thread), and every task that
/// awaits [`triggered`](Shutdown::triggered) wakes, as does every later
/// await: it stays triggered. Clones share the signal: give one to each
/// connection task. It is `Send + Sync`.
///
/// A graceful shutdown combines it with a [`JoinSet`](super::JoinSet)
/// of the connection tasks and [`race`](super::race) (docs/async.md,
/// "Graceful shutdown").
///
/// ```
/// use evloop::exec::{block_on, sleep, spawn_local, Shutdown};
/// use evloop::{Loop, Sim};
/// use std::time::Duration;
///
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// let shutdown = Shutdown::new();
/// let waited = block_on(&mut lp, &mut (), async {
///     let waiters: Vec<_> = (0..3).map(|_| {
///         let s = shutdown.clone();
///         spawn_local(async move { s.triggered().await }).unwrap()
///     }).collect();
///     sleep(Duration::from_millis(50)).await;
///     shutdown.trigger();
///     for w in waiters {
///         w.await.unwrap();
///     }
/// }).unwrap();
/// assert!(shutdown.is_triggered());
/// assert_eq!(lp.now(), Duration::from_millis(50));
/// ```
#[derive(Clone)]
pub struct Shutdown {
    inner: Arc<Inner>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown::new()
    }
}

impl Shutdown {
    /// A signal not triggered yet.
    ///
    /// ```
    /// assert!(!evloop::exec::Shutdown::new().is_triggered());
    /// ```
    pub fn new() -> Shutdown {
        Shutdown {
            inner: Arc::new(Inner {
                triggered: AtomicBool::new(false),
                waiters: Mutex::new(Slab::new()),
            }),
        }
    }

    /// Triggers it: every task awaiting [`triggered`](Shutdown::triggered)
    /// is woken (from another thread, through the loop's waker). A second
    /// call does nothing.
    ///
    /// ```
    /// use evloop::exec::Shutdown;
    /// let s = Shutdown::new();
    /// let from_a_thread = s.clone();
    /// std::thread::spawn(move || from_a_thread.trigger()).join().unwrap();
    /// assert!(s.is_triggered());
    /// ```
    pub fn trigger(&self) {
        if self.inner.triggered.swap(true, Ordering::SeqCst) {
            return;
        }
        let woken: Vec<Waker> = {
            let mut waiters = self.lock();
            waiters.iter_mut().filter_map(|(_, w)| w.take()).collect()
        };
        woken.into_iter().for_each(Waker::wake);
    }

    /// Whether it was triggered.
    ///
    /// ```
    /// let s = evloop::exec::Shutdown::new();
    /// s.trigger();
    /// assert!(s.is_triggered());
    /// ```
    pub fn is_triggered(&self) -> bool {
        self.inner.triggered.load(Ordering::SeqCst)
    }

    /// A future ready once it is triggered (at once if it was). Dropping
    /// it leaves nothing behind, so it can be raced against each
    /// `accept` of a loop.
    ///
    /// ```
    /// use evloop::exec::{block_on, Shutdown};
    /// use evloop::{Loop, Sim};
    /// let s = Shutdown::new();
    /// s.trigger();
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// block_on(&mut lp, &mut (), s.triggered()).unwrap();
    /// ```
    pub fn triggered(&self) -> Triggered<'_> {
        Triggered {
            shutdown: self,
            key: None,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slab<Option<Waker>>> {
        self.inner.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl fmt::Debug for Shutdown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shutdown")
            .field("triggered", &self.is_triggered())
            .finish()
    }
}

/// The future of [`Shutdown::triggered`].
///
/// ```
/// use evloop::exec::{Shutdown, Triggered};
/// let s = Shutdown::new();
/// let _t: Triggered<'_> = s.triggered();
/// ```
#[must_use = "futures do nothing unless awaited"]
pub struct Triggered<'a> {
    shutdown: &'a Shutdown,
    /// Its entry among the waiters, once it waited.
    key: Option<usize>,
}

impl Future for Triggered<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.shutdown.is_triggered() {
            return Poll::Ready(());
        }
        let mut waiters = this.shutdown.lock();
        // Again under the lock: `trigger` sets the flag before it takes
        // the wakers, so either it sees this one or this sees the flag.
        if this.shutdown.is_triggered() {
            return Poll::Ready(());
        }
        match this.key.and_then(|k| waiters.get_mut(k)) {
            Some(Some(old)) if old.will_wake(cx.waker()) => {}
            Some(w) => *w = Some(cx.waker().clone()),
            None => this.key = Some(waiters.insert(Some(cx.waker().clone()))),
        }
        Poll::Pending
    }
}

impl Drop for Triggered<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            self.shutdown.lock().try_remove(key);
        }
    }
}

impl fmt::Debug for Triggered<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Triggered")
            .field("triggered", &self.shutdown.is_triggered())
            .finish()
    }
}
