//! The executor: tasks, their wakers, join handles, the kind that polls
//! them in [`Phase::Polled`], and `block_on`.
//!
//! A task is a boxed `!Send` future in a slab of this loop's. Its waker
//! (`TaskWaker`, `Send + Sync`) pushes the task on a run queue shared
//! with every thread (`RunQueue`); a wake from another thread also wakes
//! the loop through the backend's waker, with the protocol of the async
//! watchers (kinds/asyncs.rs): the loop stores `sleeping`, fences, and
//! looks at the queue; a waker pushes, fences, and wakes the backend only
//! if it sees `sleeping`.
//!
//! The kind queues its one watcher when the run queue is not empty; the
//! watcher's callback (`pass`) polls the tasks that were queued when it
//! started, at most `budget` of them, in the order they were woken, and
//! after each poll carries out what the task asked of the loop (the
//! reactor's requests, reactor.rs). A task woken meanwhile waits for the
//! next iteration, so that a task that wakes itself cannot starve io.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context as TaskContext, Poll, Wake as StdWake, Waker};
use std::time::Duration;

// The wake-up protocol's atomics and the run queue's lock, which the
// model check (`--cfg loom`, `mod model` at the end of this file) replaces
// with loom's, as kinds/asyncs.rs does.
#[cfg(all(test, loom))]
use loom::sync::{
    atomic::{fence, AtomicBool},
    Mutex,
};
#[cfg(not(all(test, loom)))]
use std::sync::{
    atomic::{fence, AtomicBool},
    Mutex,
};

use slab::Slab;

use super::reactor::{Owner, Reactor};
use crate::backend::Wake;
use crate::unwind::Held;
use crate::{
    Context, Error, Kind, Loop, Phase, Phases, Ready, Result, RunMode, RunOutcome, Watcher,
};

/// How many tasks one pass polls at most, unless [`Executor::set_budget`]
/// says otherwise.
const DEFAULT_BUDGET: usize = 128;

/// What wakers share with the loop: the tasks woken, and how to wake the
/// loop from another thread.
pub(crate) struct RunQueue {
    queue: Mutex<Queue>,
    /// A `block_on` future (or several, nested) was woken.
    poked: AtomicBool,
    /// The loop is in, or about to enter, a poll that may block.
    sleeping: AtomicBool,
    /// The backend's waker, set when the executor's watcher starts.
    waker: OnceLock<Arc<dyn Wake>>,
}

/// The tasks woken and not yet polled, in wake order.
struct Queue {
    tasks: VecDeque<Arc<TaskWaker>>,
    /// The loop dropped its executor: a wake queues nothing (each queued
    /// waker holds the queue: kept, they would keep each other alive).
    closed: bool,
}

impl RunQueue {
    fn new() -> RunQueue {
        RunQueue {
            queue: Mutex::new(Queue {
                tasks: VecDeque::new(),
                closed: false,
            }),
            poked: AtomicBool::new(false),
            sleeping: AtomicBool::new(false),
            waker: OnceLock::new(),
        }
    }

    fn push(&self, task: Arc<TaskWaker>) {
        {
            let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            if q.closed {
                return;
            }
            q.tasks.push_back(task);
        }
        self.notify();
    }

    /// The next task to poll, its `queued` flag cleared. Before the poll:
    /// a wake during the poll queues the task again. A swap, not a store:
    /// a wake whose swap read the flag still set (and so queued nothing)
    /// then happens before this poll, which sees what that wake published.
    fn next(&self) -> Option<Arc<TaskWaker>> {
        let task = self
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .tasks
            .pop_front()?;
        task.queued.swap(false, Ordering::AcqRel);
        Some(task)
    }

    fn len(&self) -> usize {
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .tasks
            .len()
    }

    /// The loop drops its executor: the queued wakers go, and later wakes
    /// queue nothing.
    fn close(&self) {
        let tasks = {
            let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            q.closed = true;
            std::mem::take(&mut q.tasks)
        };
        drop(tasks);
    }

    /// Something was queued: wake the loop if it may be blocking (push,
    /// fence, load; the loop stores, fences, loads).
    fn notify(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            if let Some(w) = self.waker.get() {
                w.wake();
            }
        }
    }

    /// The loop, before a poll that may block: from now on a wake wakes
    /// the backend. True if something was woken already.
    fn sleep(&self) -> bool {
        self.sleeping.store(true, Ordering::SeqCst);
        // Store, fence, load; a waker pushes, fences, loads `sleeping`
        // (kinds/asyncs.rs explains why no wake-up is lost).
        fence(Ordering::SeqCst);
        self.has_work()
    }

    /// The loop, after the poll.
    fn wake_up(&self) {
        self.sleeping.store(false, Ordering::SeqCst);
    }

    /// The loop's `Polled` phase: the `block_on` wakes so far are taken
    /// (each `block_on` looks at its own flag after the iteration).
    fn clear_poked(&self) {
        self.poked.store(false, Ordering::SeqCst);
    }

    fn has_work(&self) -> bool {
        self.poked.load(Ordering::SeqCst) || self.len() > 0
    }
}

/// A task's waker: its place in the slab, and whether it is queued
/// already (a second wake before the poll adds nothing).
pub(crate) struct TaskWaker {
    slot: u32,
    generation: u32,
    queued: AtomicBool,
    run: Arc<RunQueue>,
}

impl StdWake for TaskWaker {
    fn wake(self: Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            let run = self.run.clone();
            run.push(self);
        }
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.run.push(self.clone());
        }
    }
}

/// `block_on`'s future's waker: a flag, and the loop woken.
struct MainWaker {
    woken: AtomicBool,
    run: Arc<RunQueue>,
}

impl StdWake for MainWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Swaps, not stores: the loop's swap of `woken` may read a later
        // waker's `true`, and synchronises with the earlier ones only if
        // all are read-modify-writes (one release sequence, as
        // kinds/asyncs.rs's `any`). (loom also mis-models a store racing
        // a swap: tokio-rs/loom#254.)
        self.woken.swap(true, Ordering::SeqCst);
        self.run.poked.swap(true, Ordering::SeqCst);
        self.run.notify();
    }
}

/// A task in the slab: its future (out while it is polled) and its waker.
struct Task {
    generation: u32,
    future: Option<Pin<Box<dyn Future<Output = ()>>>>,
    waker: Arc<TaskWaker>,
}

/// What the loop's executor shares with its tasks, their futures and
/// wakers (`Rc`: the loop's thread only).
pub(crate) struct Shared {
    /// Unique in the process (timers find their executor by it).
    pub(crate) id: u64,
    tasks: RefCell<Slab<Task>>,
    next_generation: Cell<u32>,
    pub(crate) run: Arc<RunQueue>,
    pub(crate) reactor: RefCell<Reactor>,
    /// The executor's watcher, once started.
    watcher: Cell<Option<Watcher<Tasks>>>,
    /// The loop's time when the current pass started (a `sleep` made in a
    /// task counts from it).
    pub(crate) now: Cell<Duration>,
    budget: Cell<usize>,
    /// How many `block_on` calls are in progress (they keep the loop
    /// going while their future waits).
    holds: Cell<u32>,
    /// A pass is polling tasks.
    in_pass: Cell<bool>,
    /// Set when the loop drops its executor: spawns are refused.
    closed: Cell<bool>,
    /// The loop's completion I/O, if its backend has one (io_uring):
    /// sockets adopted by `HyperIo` read and write through it.
    pub(crate) completion: Option<Rc<dyn crate::backend::CompletionIo>>,
}

static EXECUTOR_IDS: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The executor whose task (or `block_on` future) is being polled on
    /// this thread, if any.
    static CURRENT: RefCell<Option<Rc<Shared>>> = const { RefCell::new(None) };
    /// Every executor of this thread, by id (so that a timer future,
    /// which is `Send`, finds its own when it is dropped).
    static EXECUTORS: RefCell<Vec<(u64, Weak<Shared>)>> = const { RefCell::new(Vec::new()) };
}

/// Sets the current executor while a task is polled (restored on drop,
/// a panic included).
pub(crate) struct Enter(Option<Rc<Shared>>);

impl Enter {
    pub(crate) fn new(shared: &Rc<Shared>) -> Enter {
        Enter(CURRENT.with(|c| c.replace(Some(shared.clone()))))
    }
}

impl Drop for Enter {
    fn drop(&mut self) {
        let previous = self.0.take();
        let _ = CURRENT.try_with(|c| *c.borrow_mut() = previous);
    }
}

impl Owner for Shared {
    fn reactor(&self) -> &RefCell<Reactor> {
        &self.reactor
    }

    fn kick<S>(&self, lp: &mut Loop<'_, S>) {
        Shared::kick(self, lp);
    }
}

impl Shared {
    /// The executor whose task is being polled on this thread.
    pub(crate) fn current() -> Option<Rc<Shared>> {
        CURRENT.try_with(|c| c.borrow().clone()).ok().flatten()
    }

    /// This thread's executor with that id, if it still exists.
    pub(crate) fn by_id(id: u64) -> Option<Rc<Shared>> {
        if let Some(cur) = Shared::current() {
            if cur.id == id {
                return Some(cur);
            }
        }
        EXECUTORS
            .try_with(|all| {
                let all = all.borrow();
                all.iter()
                    .find(|(i, _)| *i == id)
                    .and_then(|(_, w)| w.upgrade())
            })
            .ok()
            .flatten()
    }

    /// Whether the executor must run a pass (tasks queued, or requests
    /// for the loop made outside a pass).
    fn due(&self) -> bool {
        self.run.len() > 0 || (!self.in_pass.get() && self.reactor.borrow().has_requests())
    }

    fn spawn_boxed(self: &Rc<Self>, future: Pin<Box<dyn Future<Output = ()>>>) -> (u32, u32) {
        let generation = self.next_generation.get().wrapping_add(1);
        self.next_generation.set(generation);
        let mut tasks = self.tasks.borrow_mut();
        let entry = tasks.vacant_entry();
        let slot = entry.key() as u32;
        let waker = Arc::new(TaskWaker {
            slot,
            generation,
            queued: AtomicBool::new(false),
            run: self.run.clone(),
        });
        entry.insert(Task {
            generation,
            future: Some(future),
            waker: waker.clone(),
        });
        drop(tasks);
        waker.wake();
        (slot, generation)
    }

    fn spawn<F>(self: &Rc<Self>, future: F) -> Result<JoinHandle<F::Output>>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        if self.closed.get() {
            return Err(Error::ExecutorGone);
        }
        let join = Rc::new(JoinState {
            result: RefCell::new(None),
            waker: RefCell::new(None),
            aborted: Cell::new(false),
            finished: Cell::new(false),
        });
        let (slot, generation) = self.spawn_boxed(Box::pin(task(future, join.clone())));
        Ok(JoinHandle {
            join,
            executor: Rc::downgrade(self),
            slot,
            generation,
        })
    }

    /// Wakes task `slot` if it is still that task.
    fn wake_task(&self, slot: u32, generation: u32) {
        let waker = {
            let tasks = self.tasks.borrow();
            match tasks.get(slot as usize) {
                Some(t) if t.generation == generation => t.waker.clone(),
                _ => return,
            }
        };
        waker.wake();
    }

    /// Whether tasks or a `block_on` keep the loop going
    /// ([`Kind::keeps_alive`]: the executor's watcher itself is not
    /// referenced, so that a loop with no task returns from `run`).
    fn alive(&self) -> bool {
        !self.tasks.borrow().is_empty() || self.holds.get() > 0
    }

    /// Queues the executor's watcher in the current iteration if tasks
    /// are waiting (reactor callbacks call it after waking tasks: the
    /// tasks then run in this iteration, not after the next poll).
    pub(crate) fn kick<S>(&self, lp: &mut Loop<'_, S>) {
        if self.in_pass.get() || self.run.len() == 0 {
            return;
        }
        if let Some(w) = self.watcher.get() {
            // Queued once: a second feed merges with the first.
            let _ = lp.feed_event(w, Ready::EMPTY);
        }
    }
}

/// Polls the tasks queued when it starts, at most the budget, carrying
/// out each one's requests after its poll.
fn pass<S>(lp: &mut Loop<'_, S>, shared: &Rc<Shared>) {
    /// Ends the pass however it ends (a panic out of a task's drop
    /// included: the loop stays usable).
    struct InPass<'a>(&'a Shared);
    impl Drop for InPass<'_> {
        fn drop(&mut self) {
            self.0.in_pass.set(false);
        }
    }
    shared.now.set(lp.now());
    let _enter = Enter::new(shared);
    shared.in_pass.set(true);
    let _in_pass = InPass(shared);
    // Requests made outside a pass (a future dropped in a callback).
    Reactor::apply(lp, shared);
    let n = shared.run.len().min(shared.budget.get());
    for _ in 0..n {
        let Some(waker) = shared.run.next() else {
            break;
        };
        let slot = waker.slot as usize;
        let taken = {
            let mut tasks = shared.tasks.borrow_mut();
            match tasks.get_mut(slot) {
                Some(t) if t.generation == waker.generation => t.future.take(),
                _ => None,
            }
        };
        let Some(mut future) = taken else { continue };
        let as_waker = Waker::from(waker.clone());
        let mut cx = TaskContext::from_waker(&as_waker);
        // `task` catches a panic of the user's future, in its poll or its
        // drop, and reports it through the join handle (it is Ready
        // then); what can still unwind here is the drop of an outcome
        // nobody waits for (the handle is gone): contained, as tokio does.
        let polled = catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut cx)));
        match polled {
            Ok(Poll::Pending) => {
                if let Some(t) = shared.tasks.borrow_mut().get_mut(slot) {
                    t.future = Some(future);
                }
            }
            Ok(Poll::Ready(())) => {
                shared.tasks.borrow_mut().remove(slot);
                // Dropped here, with the executor current: what it held
                // asks the loop to stop its watchers.
                contain(move || drop(future));
            }
            Err(payload) => {
                shared.tasks.borrow_mut().remove(slot);
                contain(move || drop(future));
                contain(move || drop(payload));
            }
        }
        Reactor::apply(lp, shared);
    }
}

/// Runs `f`, containing a panic (and one of its payload's drop).
fn contain(f: impl FnOnce()) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
        if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            std::mem::forget(again);
        }
    }
}

/// A spawned future as a task: polls it, catching a panic, and stores
/// the outcome for the join handle. One box: the future is pinned inside
/// the task's own state (`pin!` in the async block), not boxed again.
///
/// The future is dropped inside the task's poll as soon as it is ready,
/// panics or is aborted, so that a panic of its drop is caught too: the
/// task's outcome is then `JoinError::Panicked` (tokio's rule).
async fn task<F: Future + 'static>(future: F, join: Rc<JoinState<F::Output>>) {
    let mut future = std::pin::pin!(Some(future));
    std::future::poll_fn(move |cx| {
        let polled = catch_unwind(AssertUnwindSafe(|| {
            if join.aborted.get() {
                future.set(None);
                return Poll::Ready(Err(JoinError::Aborted));
            }
            let Some(running) = future.as_mut().as_pin_mut() else {
                // Not polled again once ready (the executor drops it).
                return Poll::Ready(Err(JoinError::Aborted));
            };
            match running.poll(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(v) => {
                    future.set(None);
                    Poll::Ready(Ok(v))
                }
            }
        }));
        let outcome = match polled {
            Ok(Poll::Pending) => return Poll::Pending,
            Ok(Poll::Ready(outcome)) => outcome,
            Err(payload) => {
                // A panic of its poll leaves the future to drop (a panic
                // of that drop is not the first one: contained); a panic
                // of its drop leaves `None` (`Pin::set` writes it anyway).
                contain(|| future.set(None));
                Err(JoinError::Panicked(payload))
            }
        };
        join.finish(outcome);
        Poll::Ready(())
    })
    .await
}

/// What a task and its join handle share.
struct JoinState<T> {
    result: RefCell<Option<std::result::Result<T, JoinError>>>,
    waker: RefCell<Option<Waker>>,
    aborted: Cell<bool>,
    finished: Cell<bool>,
}

impl<T> JoinState<T> {
    fn finish(&self, outcome: std::result::Result<T, JoinError>) {
        self.finished.set(true);
        *self.result.borrow_mut() = Some(outcome);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }
}

/// Why a task gave no value: it panicked, or it was aborted.
///
/// ```
/// use evloop::exec::{block_on, spawn_on, JoinError};
/// use evloop::{Loop, Sim};
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// let task = spawn_on(&mut lp, async { panic!("boom") }).unwrap();
/// let err = block_on(&mut lp, &mut (), task).unwrap().unwrap_err();
/// assert!(err.is_panic());
/// assert_eq!(err.to_string(), "the task panicked: boom");
/// ```
pub enum JoinError {
    /// The task's future panicked, in its poll or its drop (an aborted
    /// task's included); the payload, as `catch_unwind` gives it (the
    /// loop and the other tasks carry on).
    Panicked(Box<dyn Any + Send + 'static>),
    /// [`JoinHandle::abort`] was called before the task finished.
    Aborted,
}

impl JoinError {
    /// Whether the task panicked.
    ///
    /// ```
    /// use evloop::exec::JoinError;
    /// assert!(!JoinError::Aborted.is_panic());
    /// ```
    pub fn is_panic(&self) -> bool {
        matches!(self, JoinError::Panicked(_))
    }

    /// Whether the task was aborted.
    ///
    /// ```
    /// use evloop::exec::JoinError;
    /// assert!(JoinError::Aborted.is_aborted());
    /// ```
    pub fn is_aborted(&self) -> bool {
        matches!(self, JoinError::Aborted)
    }

    /// The panic's payload, to resume it with
    /// `std::panic::resume_unwind` (an aborted task gives it back).
    ///
    /// ```
    /// use evloop::exec::JoinError;
    /// assert!(JoinError::Aborted.into_panic().is_err());
    /// ```
    pub fn into_panic(self) -> std::result::Result<Box<dyn Any + Send + 'static>, JoinError> {
        match self {
            JoinError::Panicked(p) => Ok(p),
            other => Err(other),
        }
    }
}

fn panic_text(p: &(dyn Any + Send)) -> &str {
    if let Some(s) = p.downcast_ref::<&str>() {
        s
    } else if let Some(s) = p.downcast_ref::<String>() {
        s
    } else {
        "(a payload that is not a string)"
    }
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Panicked(p) => write!(f, "the task panicked: {}", panic_text(p.as_ref())),
            JoinError::Aborted => f.write_str("the task was aborted"),
        }
    }
}

impl fmt::Debug for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Panicked(p) => f
                .debug_tuple("Panicked")
                .field(&panic_text(p.as_ref()))
                .finish(),
            JoinError::Aborted => f.write_str("Aborted"),
        }
    }
}

impl std::error::Error for JoinError {}

/// A spawned task's outcome: await it for the task's value (or why there
/// is none), drop it to let the task run on detached, or
/// [`abort`](JoinHandle::abort) the task.
///
/// ```
/// use evloop::exec::{block_on, spawn_on};
/// use evloop::{Loop, Sim};
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// let task = spawn_on(&mut lp, async { 6 * 7 }).unwrap();
/// assert_eq!(block_on(&mut lp, &mut (), task).unwrap().unwrap(), 42);
/// ```
pub struct JoinHandle<T> {
    join: Rc<JoinState<T>>,
    executor: Weak<Shared>,
    slot: u32,
    generation: u32,
}

impl<T> JoinHandle<T> {
    /// Stops the task: its future is dropped in the executor's next pass
    /// (which the loop runs in its next iteration), with everything it
    /// holds (a socket's or a timer's watcher goes too), and the handle
    /// gives [`JoinError::Aborted`] ([`JoinError::Panicked`] if that drop
    /// panics). A task that finished already keeps its outcome.
    ///
    /// ```
    /// use evloop::exec::{block_on, sleep, spawn_on};
    /// use evloop::{Loop, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let task = spawn_on(&mut lp, async { sleep(Duration::from_secs(60)).await }).unwrap();
    /// task.abort();
    /// assert!(block_on(&mut lp, &mut (), task).unwrap().unwrap_err().is_aborted());
    /// assert_eq!(lp.active_count(), 0); // the timer is gone
    /// ```
    pub fn abort(&self) {
        if self.join.finished.get() {
            return;
        }
        self.join.aborted.set(true);
        if let Some(ex) = self.executor.upgrade() {
            ex.wake_task(self.slot, self.generation);
        }
    }

    /// Whether the task has finished (returned, panicked, or was aborted
    /// and dropped).
    ///
    /// ```
    /// use evloop::exec::spawn_on;
    /// use evloop::{Loop, RunMode, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let task = spawn_on(&mut lp, async {}).unwrap();
    /// assert!(!task.is_finished());
    /// lp.run(RunMode::NoWait, &mut ()).unwrap();
    /// assert!(task.is_finished());
    /// ```
    pub fn is_finished(&self) -> bool {
        self.join.finished.get()
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = std::result::Result<T, JoinError>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        if let Some(outcome) = self.join.result.borrow_mut().take() {
            return Poll::Ready(outcome);
        }
        if self.join.finished.get() {
            // Taken by an earlier poll: a finished future polled again.
            return Poll::Ready(Err(JoinError::Aborted));
        }
        if self.executor.strong_count() == 0 {
            // The loop and its tasks are gone: this one never finishes.
            return Poll::Ready(Err(JoinError::Aborted));
        }
        *self.join.waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("finished", &self.join.finished.get())
            .finish()
    }
}

/// The loop's executor, as a watcher kind: its one watcher is queued in
/// [`Phase::Polled`] while tasks are woken, and the other threads' wakes
/// wake the loop through the backend's waker. Installed by
/// [`exec::Executor::of`](crate::exec::Executor::of) (and everything that spawns); its live tasks keep
/// [`Loop::run`] going ([`Kind::keeps_alive`]).
///
/// ```
/// use evloop::exec::{spawn_on, Tasks};
/// use evloop::{Loop, Sim};
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// assert!(lp.kind::<Tasks>().is_none());
/// spawn_on(&mut lp, async {}).unwrap();
/// assert!(lp.kind::<Tasks>().is_some());
/// ```
pub struct Tasks {
    shared: Rc<Shared>,
}

impl Kind for Tasks {
    const NAME: &'static str = "executor";
    const PHASES: Phases = Phases::POLLED;

    fn start(&mut self, cx: &mut Context<'_>, _: Watcher<Self>) -> Result<bool> {
        // (On WASI the backend's waker does nothing: with one thread,
        // every wake is the loop's own, seen before it blocks.)
        if self.shared.run.waker.get().is_none() {
            let backend = cx.backend().name();
            let waker = cx
                .services(|s, fds| s.waker(fds))
                .map_err(|source| Error::Backend {
                    backend,
                    op: "give a waker (for the executor)",
                    source,
                })?;
            let _ = self.shared.run.waker.set(waker);
        }
        Ok(true)
    }

    fn phase(&mut self, cx: &mut Context<'_>, _: Phase) {
        self.shared.run.clear_poked();
        if let Some(w) = self.shared.watcher.get() {
            if cx.is_active(w) && self.shared.due() {
                cx.queue(w, Ready::EMPTY);
            }
        }
    }

    fn keeps_alive(&self) -> bool {
        self.shared.alive()
    }

    fn sleep(&mut self, _: &mut Context<'_>) -> bool {
        self.shared.run.sleep() || self.shared.due()
    }

    fn wake(&mut self) {
        self.shared.run.wake_up();
    }

    fn wants_notices(&self) -> bool {
        // The backend's wake-up is a notice: taking them keeps it drained.
        true
    }

    fn due(&self, each: &mut dyn FnMut(Watcher<Self>)) {
        if let Some(w) = self.shared.watcher.get() {
            if self.shared.due() {
                each(w);
            }
        }
    }

    fn is_due(&self, w: Watcher<Self>) -> bool {
        self.shared.watcher.get() == Some(w) && self.shared.due()
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        // The tasks hold the executor (their futures' sockets and timers
        // do): drop them now, so that nothing is kept alive by a cycle;
        // and the queued wakers (each holds the queue).
        self.shared.closed.set(true);
        self.shared.run.close();
        let tasks: Vec<Task> = self.shared.tasks.borrow_mut().drain().collect();
        let mut held = Held::default();
        {
            let _enter = Enter::new(&self.shared);
            // Each on its own: a panic in one drop must not leave the
            // others to be dropped while it unwinds (that aborts).
            for task in tasks {
                held.drop(task);
            }
        }
        self.shared.reactor.borrow_mut().close();
        let id = self.shared.id;
        let _ = EXECUTORS.try_with(|all| {
            all.borrow_mut()
                .retain(|(i, w)| *i != id && w.strong_count() > 0)
        });
        // The first panic, once the executor is closed.
        held.resume();
    }
}

/// A handle on a loop's executor, for spawning tasks from code that has
/// no `&mut Loop` (a task, or a callback's helper). Clone it freely; it
/// is `!Send` (the tasks run on the loop's thread).
///
/// ```
/// use evloop::exec::{block_on, Executor};
/// use evloop::{Loop, Sim};
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// let total = block_on(&mut lp, &mut (), async {
///     let ex = Executor::current().unwrap();
///     let a = ex.spawn(async { 1 }).unwrap();
///     let b = ex.spawn(async { 2 }).unwrap();
///     a.await.unwrap() + b.await.unwrap()
/// }).unwrap();
/// assert_eq!(total, 3);
/// ```
#[derive(Clone)]
pub struct Executor {
    shared: Rc<Shared>,
}

impl Executor {
    /// The executor whose task is running on this thread (inside a task
    /// or a `block_on` future), if any.
    ///
    /// ```
    /// use evloop::exec::Executor;
    /// assert!(Executor::current().is_none());
    /// ```
    pub fn current() -> Option<Executor> {
        Shared::current().map(|shared| Executor { shared })
    }

    /// Spawns a task on this executor; it is first polled in the loop's
    /// next pass. `Err(Error::ExecutorGone)` once the loop is dropped.
    ///
    /// ```
    /// use evloop::exec::Executor;
    /// use evloop::{Loop, RunMode, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let ex = Executor::of(&mut lp).unwrap();
    /// let task = ex.spawn(async { "done" }).unwrap();
    /// lp.run(RunMode::Default, &mut ()).unwrap();
    /// assert!(task.is_finished());
    /// ```
    pub fn spawn<F>(&self, future: F) -> Result<JoinHandle<F::Output>>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        self.shared.spawn(future)
    }

    /// How many tasks one pass polls at most (128 unless set; at least
    /// 1). Tasks woken beyond it, or during the pass, run in the next
    /// iteration, after the loop has polled for io without blocking.
    ///
    /// ```
    /// use evloop::exec::Executor;
    /// use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// Executor::of(&mut lp).unwrap().set_budget(16);
    /// ```
    pub fn set_budget(&self, tasks: usize) {
        self.shared.budget.set(tasks.max(1));
    }

    /// How many tasks are alive (spawned and not finished).
    ///
    /// ```
    /// use evloop::exec::Executor;
    /// use evloop::{Loop, RunMode, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let ex = Executor::of(&mut lp).unwrap();
    /// ex.spawn(async {}).unwrap();
    /// assert_eq!(ex.task_count(), 1);
    /// lp.run(RunMode::Default, &mut ()).unwrap();
    /// assert_eq!(ex.task_count(), 0);
    /// ```
    pub fn task_count(&self) -> usize {
        self.shared.tasks.borrow().len()
    }

    /// The executor's watcher: give it a priority
    /// ([`Loop::set_priority`]) to poll tasks before or after the other
    /// callbacks of an iteration.
    ///
    /// ```
    /// use evloop::exec::Executor;
    /// use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let ex = Executor::of(&mut lp).unwrap();
    /// lp.set_priority(ex.watcher(), 1).unwrap();
    /// ```
    pub fn watcher(&self) -> Watcher<Tasks> {
        self.shared
            .watcher
            .get()
            .expect("started when the executor was made")
    }
}

impl Executor {
    pub(crate) fn shared(&self) -> &Rc<Shared> {
        &self.shared
    }
}

impl fmt::Debug for Executor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Executor")
            .field("tasks", &self.task_count())
            .finish()
    }
}

/// Spawns a task on the executor of the task that calls it.
/// `Err(Error::NoExecutor)` outside a task (use [`exec::spawn_on`](crate::exec::spawn_on)
/// or [`Executor::spawn`] there).
///
/// ```
/// use evloop::exec::{block_on, spawn_local};
/// use evloop::{Error, Loop, Sim};
/// assert!(matches!(spawn_local(async {}), Err(Error::NoExecutor)));
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// let n = block_on(&mut lp, &mut (), async {
///     spawn_local(async { 5 }).unwrap().await.unwrap()
/// }).unwrap();
/// assert_eq!(n, 5);
/// ```
pub fn spawn_local<F>(future: F) -> Result<JoinHandle<F::Output>>
where
    F: Future + 'static,
    F::Output: 'static,
{
    match Shared::current() {
        Some(shared) => shared.spawn(future),
        None => Err(Error::NoExecutor),
    }
}

/// Gives the other tasks, and the loop's io, a turn: the task is woken
/// at once and polled again in the executor's next pass (the next
/// iteration, after a poll that does not block). In `block_on`'s own
/// future too: the loop runs an iteration (that does not block) before
/// polling it again.
///
/// ```
/// use evloop::exec::{block_on, spawn_local, yield_now};
/// use evloop::{Loop, Sim};
/// use std::cell::RefCell;
/// use std::rc::Rc;
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// let log = Rc::new(RefCell::new(vec![]));
/// let (a, b) = (log.clone(), log.clone());
/// block_on(&mut lp, &mut (), async move {
///     let first = spawn_local(async move {
///         a.borrow_mut().push("a1");
///         yield_now().await;
///         a.borrow_mut().push("a2");
///     }).unwrap();
///     let second = spawn_local(async move { b.borrow_mut().push("b") }).unwrap();
///     first.await.unwrap();
///     second.await.unwrap();
/// }).unwrap();
/// assert_eq!(*log.borrow(), ["a1", "b", "a2"]);
/// ```
pub fn yield_now() -> YieldNow {
    YieldNow(false)
}

/// The future of [`yield_now`].
///
/// ```
/// let _y: evloop::exec::YieldNow = evloop::exec::yield_now();
/// ```
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Executor {
    /// The loop's executor (made, and its watcher started, on first use).
    ///
    /// ```
    /// use evloop::exec::Executor;
    /// use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let ex = Executor::of(&mut lp).unwrap();
    /// assert_eq!(ex.task_count(), 0);
    /// ```
    pub fn of<S>(lp: &mut Loop<'_, S>) -> Result<Executor> {
        if let Some(k) = lp.kind::<Tasks>() {
            return Ok(Executor {
                shared: k.shared.clone(),
            });
        }
        let caps = lp.capabilities();
        let shared = Rc::new(Shared {
            id: EXECUTOR_IDS.fetch_add(1, Ordering::Relaxed),
            tasks: RefCell::new(Slab::new()),
            next_generation: Cell::new(0),
            run: Arc::new(RunQueue::new()),
            reactor: RefCell::new(Reactor::new(caps.edge)),
            watcher: Cell::new(None),
            now: Cell::new(lp.now()),
            budget: Cell::new(DEFAULT_BUDGET),
            holds: Cell::new(0),
            in_pass: Cell::new(false),
            closed: Cell::new(false),
            completion: lp.completion_io(),
        });
        lp.install(Tasks {
            shared: shared.clone(),
        })?;
        let for_pass = Rc::downgrade(&shared);
        let w = lp.watcher::<Tasks, _>(move |lp, _, _, _| {
            if let Some(shared) = for_pass.upgrade() {
                pass(lp, &shared);
            }
        })?;
        shared.watcher.set(Some(w));
        lp.start(w)?;
        // The tasks keep the loop going (Kind::keeps_alive), not the
        // watcher: with no task, `run` returns.
        lp.set_ref(w, false)?;
        let id = shared.id;
        let weak = Rc::downgrade(&shared);
        let _ = EXECUTORS.try_with(|all| all.borrow_mut().push((id, weak)));
        Ok(Executor { shared })
    }
}

/// Spawns a `!Send` future as a task of the loop's executor. Tasks are
/// polled in the loop's [`Phase::Polled`], in the order they were
/// woken, at most a budget per iteration
/// ([`Executor::set_budget`]); while one is alive the executor's
/// watcher keeps [`Loop::run`] going. A panic in a task (in its
/// poll, or in its future's drop, an abort's included) ends that task
/// only: its [`JoinHandle`] gives [`JoinError::Panicked`].
///
/// ```
/// use evloop::exec::{sleep, spawn_on};
/// use evloop::{Loop, RunMode, Sim};
/// use std::time::Duration;
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// spawn_on(&mut lp, async { sleep(Duration::from_secs(3)).await }).unwrap();
/// lp.run(RunMode::Default, &mut ()).unwrap();
/// assert_eq!(lp.now(), Duration::from_secs(3));
/// ```
pub fn spawn_on<S, F>(lp: &mut Loop<'_, S>, future: F) -> Result<JoinHandle<F::Output>>
where
    F: Future + 'static,
    F::Output: 'static,
{
    let ex = Executor::of(lp)?;
    let handle = ex.shared.spawn(future)?;
    ex.shared.kick(lp);
    Ok(handle)
}

/// Runs the loop until `future` is ready, and gives its value. The
/// future is polled on this thread with the loop's executor current
/// (it may spawn, sleep, read sockets); the loop's other watchers and
/// tasks run meanwhile: once the future is woken, the loop runs an
/// iteration that does not block before polling it again, so a future
/// that wakes itself (`yield_now`) leaves them their turn. Callable
/// from a callback (the loop runs nested). `Err(Error::Stalled)` if
/// the loop can never make progress again (the simulator knows), with
/// the future still pending. A panic of the future (its poll or drop)
/// propagates to the caller.
///
/// ```
/// use evloop::exec::{block_on, sleep};
/// use evloop::{Loop, Sim};
/// use std::time::Duration;
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// let v = block_on(&mut lp, &mut (), async {
///     sleep(Duration::from_millis(5)).await;
///     "slept"
/// }).unwrap();
/// assert_eq!((v, lp.now()), ("slept", Duration::from_millis(5)));
/// ```
pub fn block_on<'s, S, F: Future>(
    lp: &mut Loop<'s, S>,
    state: &mut S,
    future: F,
) -> Result<F::Output> {
    let ex = Executor::of(lp)?;
    let shared = ex.shared;
    let main = Arc::new(MainWaker {
        woken: AtomicBool::new(true),
        run: shared.run.clone(),
    });
    let waker = Waker::from(main.clone());
    // Boxed, to be dropped (with the watchers it holds) before the
    // requests are carried out one last time.
    let mut future = Box::pin(future);
    struct Hold<'a>(&'a Shared);
    impl Drop for Hold<'_> {
        fn drop(&mut self) {
            self.0.holds.set(self.0.holds.get() - 1);
        }
    }
    shared.holds.set(shared.holds.get() + 1);
    let _hold = Hold(&shared);
    loop {
        if main.woken.swap(false, Ordering::SeqCst) {
            shared.now.set(lp.now());
            let polled = {
                let _enter = Enter::new(&shared);
                future.as_mut().poll(&mut TaskContext::from_waker(&waker))
            };
            Reactor::apply(lp, &shared);
            shared.kick(lp);
            if let Poll::Ready(v) = polled {
                drop(future);
                Reactor::apply(lp, &shared);
                return Ok(v);
            }
        }
        // Woken already (it woke itself, `yield_now`, or a task it
        // waits for finished): an iteration that does not block, so
        // that the tasks, timers and io get their turn first (tokio's
        // `block_on` gives them one too).
        let mode = if main.woken.load(Ordering::SeqCst) {
            RunMode::NoWait
        } else {
            RunMode::Once
        };
        match lp.run(mode, state)? {
            RunOutcome::Stalled if !main.woken.load(Ordering::SeqCst) => {
                drop(future);
                Reactor::apply(lp, &shared);
                return Err(Error::Stalled);
            }
            _ => {}
        }
    }
}

/// The model check of the wake-up protocol and the run queue: loom runs
/// a loop's iterations against wakes from other threads in every
/// interleaving its memory model allows (the atomics and the queue's lock
/// above are loom's under `--cfg loom`).
/// `RUSTFLAGS="--cfg loom" cargo test --release --lib exec::executor::model`
/// (`.ci/run` does). What it checks: a loop that decides to block after a
/// wake it did not see is always woken through the backend (no lost
/// wake-up), a task is never in the queue twice, and every wake is
/// followed by a poll that sees what the waker published before it.
/// Each fails as it should when the code is broken: without either
/// fence, the `block_on` wake is lost; with the `queued` flag cleared
/// after the poll, or by a plain store, a wake during a poll is; without
/// the flag, a task is queued twice.
#[cfg(all(test, loom))]
mod model {
    use super::*;
    use loom::sync::atomic::AtomicUsize;

    /// A backend's waker that counts its wakes.
    struct Counting(AtomicUsize);

    impl Wake for Counting {
        fn wake(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A loop's run queue and its tasks, each woken by threads of its own
    /// (after publishing a message: `sent`), and maybe a `block_on`
    /// future woken by one more; what the polls saw.
    struct World {
        run: Arc<RunQueue>,
        waker: Arc<Counting>,
        sent: Vec<Arc<AtomicUsize>>,
        /// The last count of `sent` each task's poll read.
        seen: RefCell<Vec<usize>>,
        wakes: Vec<usize>,
        main: Arc<MainWaker>,
        main_polls: Cell<usize>,
        done: Arc<AtomicUsize>,
        threads: usize,
    }

    impl World {
        /// `wakes[i]` threads each wake task `i` once (every task queued
        /// once already, as a spawn leaves it), and one more the
        /// `block_on` future if `main`.
        fn new(wakes: &[usize], main: bool) -> (World, Vec<loom::thread::JoinHandle<()>>) {
            let run = Arc::new(RunQueue::new());
            let waker = Arc::new(Counting(AtomicUsize::new(0)));
            let _ = run.waker.set(waker.clone());
            let tasks: Vec<_> = (0..wakes.len())
                .map(|slot| {
                    Arc::new(TaskWaker {
                        slot: slot as u32,
                        generation: 0,
                        queued: AtomicBool::new(false),
                        run: run.clone(),
                    })
                })
                .collect();
            for t in &tasks {
                t.wake_by_ref();
            }
            let sent: Vec<_> = wakes
                .iter()
                .map(|_| Arc::new(AtomicUsize::new(0)))
                .collect();
            let main_waker = Arc::new(MainWaker {
                woken: AtomicBool::new(false),
                run: run.clone(),
            });
            let done = Arc::new(AtomicUsize::new(0));
            let mut threads = vec![];
            for (i, &n) in wakes.iter().enumerate() {
                for _ in 0..n {
                    let (task, sent, done) = (tasks[i].clone(), sent[i].clone(), done.clone());
                    threads.push(loom::thread::spawn(move || {
                        sent.fetch_add(1, Ordering::Release);
                        task.wake_by_ref();
                        done.fetch_add(1, Ordering::SeqCst);
                    }));
                }
            }
            if main {
                let (m, done) = (main_waker.clone(), done.clone());
                threads.push(loom::thread::spawn(move || {
                    m.wake_by_ref();
                    done.fetch_add(1, Ordering::SeqCst);
                }));
            }
            let world = World {
                run,
                waker,
                seen: RefCell::new(vec![0; tasks.len()]),
                sent,
                wakes: wakes.to_vec(),
                main: main_waker,
                main_polls: Cell::new(0),
                done,
                threads: threads.len(),
            };
            (world, threads)
        }

        fn no_task_queued_twice(&self) {
            let q = self.run.queue.lock().unwrap();
            for (i, t) in q.tasks.iter().enumerate() {
                let twice = q.tasks.iter().skip(i + 1).any(|u| Arc::ptr_eq(t, u));
                assert!(!twice, "task {} queued twice", t.slot);
            }
        }

        /// Whether a task is queued, or the `block_on` future woken.
        fn work_left(&self) -> bool {
            !self.run.queue.lock().unwrap().tasks.is_empty()
                || self.run.poked.load(Ordering::SeqCst)
        }

        /// One iteration, as `Loop::run` makes it with the executor's
        /// kind: `sleep` before a poll that may block; the poll blocks
        /// until a backend wake, or for ever once every waker is done
        /// without one (then no work may be left: that would be a lost
        /// wake-up; the model lets the poll time out there); `wake`; the
        /// `Polled` phase (clears `poked`); the pass; then `block_on`'s
        /// look at its future's flag.
        fn iteration(&self) {
            let run = &*self.run;
            if !run.sleep() {
                loop {
                    // `done` first: a waker's backend wake comes before
                    // its `done`, so it is seen below if it was made.
                    let finished = self.done.load(Ordering::SeqCst) == self.threads;
                    if self.waker.0.load(Ordering::SeqCst) > 0 {
                        break;
                    }
                    if finished {
                        assert!(
                            !self.work_left(),
                            "lost wake-up: work is left and the loop sleeps unwoken"
                        );
                        break;
                    }
                    loom::thread::yield_now();
                }
            }
            run.wake_up();
            run.clear_poked();
            self.no_task_queued_twice();
            while let Some(task) = run.next() {
                // Queued again meanwhile is right (woken since `next`
                // cleared its flag); twice is not.
                self.no_task_queued_twice();
                // The poll: reads what was sent to the task.
                let slot = task.slot as usize;
                self.seen.borrow_mut()[slot] = self.sent[slot].load(Ordering::Acquire);
            }
            if self.main.woken.swap(false, Ordering::SeqCst) {
                self.main_polls.set(self.main_polls.get() + 1);
            }
        }

        /// After every waker is done: one more iteration, then each task's
        /// last poll saw every message sent to it.
        fn finish(&self, threads: Vec<loom::thread::JoinHandle<()>>, main: bool) {
            for t in threads {
                t.join().unwrap();
            }
            self.iteration();
            assert!(!self.work_left());
            assert_eq!(
                *self.seen.borrow(),
                self.wakes,
                "a wake not followed by a poll that sees its message"
            );
            assert_eq!(
                self.main_polls.get(),
                main as usize,
                "block_on's future polled once"
            );
        }
    }

    /// One task woken by two threads at once, while the loop polls it
    /// (it was queued already) and goes to sleep: the two wakes queue it
    /// at most once more, the loop sees the push or is woken, and the
    /// last poll sees both messages.
    #[test]
    fn a_task_woken_twice_while_the_loop_sleeps_is_queued_once_and_seen() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let (world, threads) = World::new(&[2], false);
            world.iteration();
            world.iteration();
            world.finish(threads, false);
        });
    }

    /// A task woken during its poll (after its `queued` flag is cleared):
    /// queued again, and the next poll sees the message.
    #[test]
    fn a_wake_during_a_poll_queues_the_task_again() {
        loom::model(|| {
            let (world, threads) = World::new(&[1], false);
            world.iteration();
            world.finish(threads, false);
        });
    }

    /// `block_on`'s future woken from another thread (`poked`, no queue
    /// lock to order it) while a task's wake races too: the loop that
    /// goes to sleep sees one or is woken.
    #[test]
    fn a_block_on_wake_from_another_thread_wakes_the_sleeping_loop() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let (world, threads) = World::new(&[1], true);
            world.iteration();
            world.iteration();
            world.finish(threads, true);
        });
    }
}
