//! `JoinSet`: a set of tasks to await as they finish, abort together,
//! and abort on drop (tokio's `JoinSet`, for the loop's `!Send` tasks).
//!
//! Each task's handle is polled with a waker of its own, which records
//! the task as ready and wakes whoever waits on the set: `join_next`
//! polls only the tasks that finished, in the order they finished, not
//! the whole set.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use slab::Slab;

use super::executor::{spawn_local, Executor, JoinError, JoinHandle};
use crate::Result;

/// What the tasks' wakers share with the set.
#[derive(Default)]
struct Notified {
    /// The keys of the tasks to poll (woken), in the order they were
    /// woken: join_next gives outcomes in finishing order.
    keys: Mutex<VecDeque<usize>>,
    /// Whoever awaits `join_next`.
    waker: Mutex<Option<Waker>>,
}

impl Notified {
    fn push(&self, key: usize) {
        self.keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(key);
    }
}

/// A task's waker: its key, pushed on the set's list.
struct EntryWaker {
    key: usize,
    notified: Arc<Notified>,
}

impl Wake for EntryWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.notified.push(self.key);
        let waker = self
            .notified
            .waker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

struct Entry<T> {
    handle: JoinHandle<T>,
    waker: Waker,
    /// An outcome had at once (not expected: a task runs in a pass).
    done: Option<std::result::Result<T, JoinError>>,
}

/// A set of tasks of the loop's executor, awaited in the order they
/// finish ([`join_next`](JoinSet::join_next)), aborted together
/// ([`abort_all`](JoinSet::abort_all)), and aborted when the set is
/// dropped: tokio's `JoinSet`, for `!Send` tasks. A server keeps its
/// connection tasks in one, to wait for them at shutdown (docs/async.md,
/// "Graceful shutdown").
///
/// ```
/// use evloop::exec::{block_on, sleep, JoinSet};
/// use evloop::{Loop, Sim};
/// use std::time::Duration;
///
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// let order = block_on(&mut lp, &mut (), async {
///     let mut set = JoinSet::new();
///     for ms in [30, 10, 20] {
///         set.spawn_local(async move {
///             sleep(Duration::from_millis(ms)).await;
///             ms
///         }).unwrap();
///     }
///     let mut order = vec![];
///     while let Some(done) = set.join_next().await {
///         order.push(done.unwrap());
///     }
///     order
/// }).unwrap();
/// assert_eq!(order, [10, 20, 30]);
/// ```
pub struct JoinSet<T> {
    entries: Slab<Entry<T>>,
    notified: Arc<Notified>,
}

impl<T> Default for JoinSet<T> {
    fn default() -> Self {
        JoinSet::new()
    }
}

impl<T> JoinSet<T> {
    /// An empty set.
    ///
    /// ```
    /// let set: evloop::exec::JoinSet<()> = evloop::exec::JoinSet::new();
    /// assert!(set.is_empty());
    /// ```
    pub fn new() -> JoinSet<T> {
        JoinSet {
            entries: Slab::new(),
            notified: Arc::new(Notified::default()),
        }
    }

    /// How many tasks the set holds: running, or finished and not yet
    /// taken by [`join_next`](JoinSet::join_next).
    ///
    /// ```
    /// use evloop::exec::{block_on, JoinSet};
    /// use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// block_on(&mut lp, &mut (), async {
    ///     let mut set = JoinSet::new();
    ///     set.spawn_local(async {}).unwrap();
    ///     assert_eq!(set.len(), 1);
    ///     set.join_next().await;
    ///     assert_eq!(set.len(), 0);
    /// }).unwrap();
    /// ```
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the set holds no task.
    ///
    /// ```
    /// let set: evloop::exec::JoinSet<u8> = Default::default();
    /// assert!(set.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds a task that is spawned already.
    fn insert(&mut self, handle: JoinHandle<T>) {
        let entry = self.entries.vacant_entry();
        let key = entry.key();
        let waker = Waker::from(Arc::new(EntryWaker {
            key,
            notified: self.notified.clone(),
        }));
        let e = entry.insert(Entry {
            handle,
            waker,
            done: None,
        });
        // Its own waker now, so that the keys come in finishing order.
        let mut cx = Context::from_waker(&e.waker);
        if let Poll::Ready(outcome) = std::pin::Pin::new(&mut e.handle).poll(&mut cx) {
            e.done = Some(outcome);
            self.notified.push(key);
        }
    }

    /// Aborts every task of the set ([`JoinHandle::abort`]: each is
    /// dropped in the executor's next pass). They stay in the set until
    /// [`join_next`](JoinSet::join_next) gives their outcome
    /// (`JoinError::Aborted`, or what they returned if they finished
    /// first).
    ///
    /// ```
    /// use evloop::exec::{block_on, sleep, JoinSet};
    /// use evloop::{Loop, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// block_on(&mut lp, &mut (), async {
    ///     let mut set = JoinSet::new();
    ///     set.spawn_local(sleep(Duration::from_secs(60))).unwrap();
    ///     set.abort_all();
    ///     assert!(set.join_next().await.unwrap().unwrap_err().is_aborted());
    /// }).unwrap();
    /// assert_eq!(lp.now(), Duration::ZERO);
    /// ```
    pub fn abort_all(&mut self) {
        for (_, e) in self.entries.iter() {
            e.handle.abort();
        }
    }

    /// Lets every task run on without the set (their outcomes are
    /// dropped), and empties it.
    ///
    /// ```
    /// use evloop::exec::{Executor, JoinSet};
    /// use evloop::{Loop, RunMode, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let ex = Executor::of(&mut lp).unwrap();
    /// let mut set = JoinSet::new();
    /// set.spawn_local_on(async {}, &ex).unwrap();
    /// set.detach_all();
    /// assert!(set.is_empty());
    /// lp.run(RunMode::Default, &mut ()).unwrap();
    /// assert_eq!(ex.task_count(), 0); // it ran to its end
    /// ```
    pub fn detach_all(&mut self) {
        self.entries.clear();
        self.notified
            .keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// The outcome of a task that has finished, if any, without waiting.
    ///
    /// ```
    /// use evloop::exec::{Executor, JoinSet};
    /// use evloop::{Loop, RunMode, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let ex = Executor::of(&mut lp).unwrap();
    /// let mut set = JoinSet::new();
    /// set.spawn_local_on(async { 3 }, &ex).unwrap();
    /// assert!(set.try_join_next().is_none()); // not run yet
    /// lp.run(RunMode::NoWait, &mut ()).unwrap();
    /// assert_eq!(set.try_join_next().unwrap().unwrap(), 3);
    /// ```
    pub fn try_join_next(&mut self) -> Option<std::result::Result<T, JoinError>> {
        loop {
            let key = self
                .notified
                .keys
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front()?;
            if let Some(outcome) = self.poll_entry(key) {
                return Some(outcome);
            }
        }
    }

    /// Polls entry `key` with its own waker (which the task wakes when it
    /// finishes): its outcome if it finished.
    fn poll_entry(&mut self, key: usize) -> Option<std::result::Result<T, JoinError>> {
        let e = self.entries.get_mut(key)?;
        if let Some(outcome) = e.done.take() {
            self.entries.remove(key);
            return Some(outcome);
        }
        let mut cx = Context::from_waker(&e.waker);
        match std::pin::Pin::new(&mut e.handle).poll(&mut cx) {
            Poll::Ready(outcome) => {
                self.entries.remove(key);
                Some(outcome)
            }
            Poll::Pending => None,
        }
    }

    /// The outcome of the next task to finish: the poll form of
    /// [`join_next`](JoinSet::join_next). `Ready(None)` when the set is
    /// empty.
    ///
    /// ```
    /// use evloop::exec::{block_on, JoinSet};
    /// use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let v = block_on(&mut lp, &mut (), async {
    ///     let mut set = JoinSet::new();
    ///     set.spawn_local(async { 'x' }).unwrap();
    ///     std::future::poll_fn(|cx| set.poll_join_next(cx)).await
    /// }).unwrap();
    /// assert_eq!(v.unwrap().unwrap(), 'x');
    /// ```
    pub fn poll_join_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<T, JoinError>>> {
        if self.entries.is_empty() {
            return Poll::Ready(None);
        }
        // Registered first: a task finishing meanwhile wakes us.
        {
            let mut w = self
                .notified
                .waker
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            match &*w {
                Some(old) if old.will_wake(cx.waker()) => {}
                _ => *w = Some(cx.waker().clone()),
            }
        }
        match self.try_join_next() {
            Some(outcome) => Poll::Ready(Some(outcome)),
            None => Poll::Pending,
        }
    }

    /// Waits for the next task of the set to finish and gives its
    /// outcome (`Err(JoinError)` if it panicked or was aborted); `None`
    /// when the set is empty.
    ///
    /// ```
    /// use evloop::exec::{block_on, JoinSet};
    /// use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let n = block_on(&mut lp, &mut (), async {
    ///     let mut set = JoinSet::new();
    ///     set.spawn_local(async { 1 }).unwrap();
    ///     set.spawn_local(async { panic!("a bug") }).unwrap();
    ///     let mut ok = 0;
    ///     while let Some(r) = set.join_next().await {
    ///         ok += r.is_ok() as u32;
    ///     }
    ///     ok
    /// }).unwrap();
    /// assert_eq!(n, 1);
    /// ```
    pub async fn join_next(&mut self) -> Option<std::result::Result<T, JoinError>> {
        std::future::poll_fn(|cx| self.poll_join_next(cx)).await
    }

    /// Aborts every task and waits until each is gone (their outcomes
    /// are dropped); the set is then empty.
    ///
    /// ```
    /// use evloop::exec::{block_on, sleep, JoinSet};
    /// use evloop::{Loop, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// block_on(&mut lp, &mut (), async {
    ///     let mut set = JoinSet::new();
    ///     set.spawn_local(sleep(Duration::from_secs(60))).unwrap();
    ///     set.shutdown().await;
    ///     assert!(set.is_empty());
    /// }).unwrap();
    /// assert_eq!(lp.active_count(), 0);
    /// ```
    pub async fn shutdown(&mut self) {
        self.abort_all();
        while self.join_next().await.is_some() {}
    }
}

impl<T: 'static> JoinSet<T> {
    /// Spawns `future` as a task of the current task's executor
    /// ([`spawn_local`]) and adds it to the set. `Err(Error::NoExecutor)`
    /// outside a task (use [`spawn_local_on`](JoinSet::spawn_local_on)
    /// there).
    ///
    /// ```
    /// use evloop::exec::JoinSet;
    /// let mut set = JoinSet::new();
    /// // Not inside a task.
    /// assert!(set.spawn_local(async {}).is_err());
    /// assert!(set.is_empty());
    /// ```
    pub fn spawn_local<F>(&mut self, future: F) -> Result<()>
    where
        F: Future<Output = T> + 'static,
    {
        let handle = spawn_local(future)?;
        self.insert(handle);
        Ok(())
    }

    /// Spawns `future` on `executor` ([`Executor::spawn`]) and adds it to
    /// the set: for code outside the executor's tasks.
    ///
    /// ```
    /// use evloop::exec::{block_on, Executor, JoinSet};
    /// use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let ex = Executor::of(&mut lp).unwrap();
    /// let mut set = JoinSet::new();
    /// set.spawn_local_on(async { 2 }, &ex).unwrap();
    /// let r = block_on(&mut lp, &mut (), async move { set.join_next().await }).unwrap();
    /// assert_eq!(r.unwrap().unwrap(), 2);
    /// ```
    pub fn spawn_local_on<F>(&mut self, future: F, executor: &Executor) -> Result<()>
    where
        F: Future<Output = T> + 'static,
    {
        let handle = executor.spawn(future)?;
        self.insert(handle);
        Ok(())
    }
}

/// Dropping the set aborts its tasks (tokio's rule): a server's
/// connection tasks do not outlive the set that tracks them.
impl<T> Drop for JoinSet<T> {
    fn drop(&mut self) {
        self.abort_all();
    }
}

impl<T> fmt::Debug for JoinSet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinSet").field("len", &self.len()).finish()
    }
}
