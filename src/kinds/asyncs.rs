//! Async watchers, as a [`Kind`]: watchers woken from other threads
//! through their senders, the protocol that wakes the loop only when it
//! needs it, the handle and the `Loop` methods.
//!
//! The kind takes part in the iteration through [`Kind::sleep`] and
//! [`Kind::wake`] (around the poll: the protocol below), in
//! [`Phase::Polled`] (it queues the watchers sent to, in start order,
//! after the signal and child watchers), and through [`Kind::due`] (a
//! send the loop has not taken yet is pending: `is_pending`,
//! `pending_count`, `backend_timeout`). When the loop is dropped, the
//! kind goes after the last cleanup callback, and its senders report the
//! loop gone from then on (`Drop for Asyncs`).
//!
//! Its two decisions go through the backend's services, so that a
//! recording has them and a replay makes them: whether something was
//! sent before a poll (`NoticeService::async_sent`) and which watchers'
//! sends a phase takes (`NoticeService::async_taken`), each watcher named
//! by its number (the order of first starts). The defaults pass the
//! answers through: one call each, no allocation (the list is kept).
//!
//! The protocol. Each async watcher has a flag its senders set; the loop
//! has one `any` flag that says some watcher's flag may be set, and a
//! `sleeping` flag that says it is in, or about to enter, a poll that may
//! block. A send
//! sets its watcher's flag (done, if it was already set: sends coalesce),
//! then `any`, then wakes the backend only if `sleeping` is set: libev's
//! rule that the wake fd is written only while the loop waits.
//!
//! No wake-up is lost. The loop stores `sleeping`, then a `SeqCst` fence,
//! then loads `any`; a sender sets `any`, then a fence, then loads
//! `sleeping`. The two fences are in one total order: whichever comes
//! second, its side's load sees the other side's store, so either the
//! loop sees `any` (and does not block) or the sender sees `sleeping`
//! (and wakes it). (`SeqCst` on the four accesses alone would do in the
//! C++ model too; the fences are what the loom model check below can
//! verify, loom treating `SeqCst` accesses as `AcqRel`: without them it
//! reports this very race.)
//!
//! The watcher's flag is set (`AcqRel`) before `any` is set,
//! and the loop swaps `any` (`SeqCst`) before it swaps the watchers'
//! flags, so a flag set before a send's `any` is seen by the scan that
//! follows the swap that sees `any`. A send sets `any` by a swap, not a
//! store: the loop's swap may read a later sender's `true`, and it
//! synchronises with every earlier send only if those writes are all
//! read-modify-writes (one release sequence). A flag is cleared when its watcher is
//! queued, before the callback runs: a send made after a callback started
//! is followed by another callback.

use std::collections::HashMap;
use std::sync::Arc;

// The protocol's atomics, which the model check (`--cfg loom`, at the end
// of this file; loom is a dev-dependency, so in the unit tests only)
// replaces with loom's to explore every interleaving.
#[cfg(all(test, loom))]
use loom::sync::atomic::{fence, AtomicBool, Ordering};
#[cfg(not(all(test, loom)))]
use std::sync::atomic::{fence, AtomicBool, Ordering};

use crate::backend::Wake;
use crate::handle::{handle, Key};
use crate::kind::{Context, Kind, Phase, Phases, Watcher};
use crate::kinds::rank;
use crate::slot_list::{Slot, SlotList};
use crate::watchers::plain::Plain;
use crate::{Error, Loop, Ready, Result};

/// What a loop shares with the senders of all its async watchers.
pub(crate) struct LoopWake {
    waker: Arc<dyn Wake>,
    /// Set while the loop is in, or about to enter, a poll that may block:
    /// only then does a send need to wake it.
    sleeping: AtomicBool,
    /// Set by a send since the loop last looked at its watchers' flags.
    any: AtomicBool,
}

/// What one async watcher shares with its senders.
pub(crate) struct AsyncFlag {
    /// Sent since the watcher was last queued.
    pending: AtomicBool,
    /// Cleared when the watcher is removed or its loop dropped.
    alive: AtomicBool,
    wake: Arc<LoopWake>,
}

impl LoopWake {
    fn new(waker: Arc<dyn Wake>) -> LoopWake {
        LoopWake {
            waker,
            sleeping: AtomicBool::new(false),
            any: AtomicBool::new(false),
        }
    }

    /// The loop, before a poll that may block: from now on a send wakes
    /// the backend. True if something was sent already.
    fn sleep(&self) -> bool {
        self.sleeping.store(true, Ordering::SeqCst);
        // Store, fence, load; the sender does the same the other way
        // round (Dekker's pattern: see the module doc).
        fence(Ordering::SeqCst);
        self.any.load(Ordering::SeqCst)
    }

    /// The loop, after the poll.
    fn wake_up(&self) {
        self.sleeping.store(false, Ordering::SeqCst);
    }

    /// The loop: whether a send was made since it last looked (then each
    /// flag is to be taken).
    fn take_any(&self) -> bool {
        self.any.swap(false, Ordering::SeqCst)
    }
}

impl AsyncFlag {
    fn new(wake: Arc<LoopWake>) -> AsyncFlag {
        AsyncFlag {
            pending: AtomicBool::new(false),
            alive: AtomicBool::new(true),
            wake,
        }
    }

    /// A sender, from any thread: see [`AsyncSender::send`].
    fn send(&self) -> Result<()> {
        if !self.alive.load(Ordering::Acquire) {
            return Err(Error::WatcherGone { kind: "async" });
        }
        if self.pending.swap(true, Ordering::AcqRel) {
            // Already sent: the loop will see it.
            return Ok(());
        }
        let w = &*self.wake;
        // A swap, not a store: the loop's swap of `any` may read another
        // sender's later `true`, and only a read-modify-write keeps this
        // send's flag in what that swap synchronises with (a release
        // sequence continues through RMWs, not through plain stores).
        // With a store, two watchers sent to at once could leave one flag
        // set, `any` clear and the loop asleep: the loom model below.
        w.any.swap(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if w.sleeping.load(Ordering::SeqCst) {
            w.waker.wake();
        }
        Ok(())
    }

    /// The loop: whether the watcher was sent to since it was last
    /// queued (and it is queued now).
    fn take(&self) -> bool {
        self.pending.swap(false, Ordering::AcqRel)
    }

    /// Whether the watcher was sent to since it was last queued (libev's
    /// `ev_async_pending`), from any thread.
    fn is_sent(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }
}

/// One async watcher, as its kind knows it.
struct Watched {
    key: Key,
    flag: Arc<AsyncFlag>,
    active: bool,
    /// Its number in the loop (see [`Asyncs::numbers`]).
    number: u32,
}

/// The async watchers of one loop: the wake state they share with their
/// senders, the active ones in start order, and every one's flag.
#[derive(Default)]
pub(crate) struct Asyncs {
    /// Made when the loop's first async watcher is created.
    wake: Option<Arc<LoopWake>>,
    /// The active async watchers, in start order.
    list: SlotList,
    /// Every async watcher.
    watched: HashMap<Slot, Watched>,
    /// Every async watcher by its number: the order of first starts,
    /// the same in a replay of the same program. What a recording names
    /// a watcher by (`NoticeService::async_taken`).
    numbers: HashMap<u32, Slot>,
    /// The number the next new watcher gets.
    next_number: u32,
    /// The numbers of the watchers whose sends a phase takes (kept, so
    /// that the steady state allocates nothing).
    taken: Vec<u32>,
}

impl Asyncs {
    /// The flag of the async watcher in `slot`, for another sender.
    fn flag(&self, slot: Slot) -> Option<Arc<AsyncFlag>> {
        self.watched.get(&slot).map(|w| w.flag.clone())
    }

    /// Whether the async watcher in `slot` was sent to since the loop
    /// last queued it (its callback will run if it is active: the loop
    /// takes the send at its next poll).
    fn is_sent(&self, slot: Slot) -> bool {
        self.watched.get(&slot).is_some_and(|w| w.flag.is_sent())
    }
}

impl Kind for Asyncs {
    const NAME: &'static str = "async";
    const PHASES: Phases = Phases::POLLED;

    /// The first start of the loop's first async watcher asks the
    /// backend for its waker; a watcher's first start makes its flag.
    /// Sends made while it was stopped are dropped (as libev does).
    fn start(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) -> Result<bool> {
        let wake = match &self.wake {
            Some(wake) => wake.clone(),
            None => {
                let backend = cx.backend().name();
                let waker =
                    cx.services(|s, fds| s.waker(fds))
                        .map_err(|source| Error::Backend {
                            backend,
                            op: "provide a waker",
                            source,
                        })?;
                self.wake.insert(Arc::new(LoopWake::new(waker))).clone()
            }
        };
        let watched = match self.watched.get_mut(&w.slot()) {
            Some(watched) if watched.key == w.key() => watched,
            _ => {
                let number = self.next_number;
                self.next_number = number.wrapping_add(1);
                let watched = Watched {
                    key: w.key(),
                    flag: Arc::new(AsyncFlag::new(wake)),
                    active: false,
                    number,
                };
                self.numbers.insert(number, w.slot());
                if let Some(stale) = self.watched.insert(w.slot(), watched) {
                    // (Not reached: a removed watcher is forgotten.)
                    stale.flag.alive.store(false, Ordering::Release);
                    self.numbers.remove(&stale.number);
                }
                self.watched.get_mut(&w.slot()).expect("inserted")
            }
        };
        watched.flag.pending.store(false, Ordering::Release);
        watched.active = true;
        self.list.push(cx.links(), w.slot());
        Ok(true)
    }

    fn stop(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) {
        self.list.remove(cx.links(), w.slot());
        if let Some(watched) = self.watched.get_mut(&w.slot()) {
            watched.active = false;
        }
    }

    /// Its senders report it gone from now on.
    fn remove(&mut self, _: &mut Context<'_>, w: Watcher<Self>) {
        if let Some(watched) = self.watched.remove(&w.slot()) {
            watched.flag.alive.store(false, Ordering::Release);
            self.numbers.remove(&watched.number);
        }
    }

    /// Queues every active async watcher sent to since it was last
    /// queued, in start order: the sends taken, as the backend's service
    /// passes them on (a recorder records them, a replay replaces them
    /// with the recorded ones: `NoticeService::async_taken`).
    fn phase(&mut self, cx: &mut Context<'_>, _: Phase) {
        let Some(wake) = &self.wake else { return };
        if self.list.is_empty() {
            return;
        }
        self.taken.clear();
        if wake.take_any() {
            let mut cur = self.list.first();
            while let Some(slot) = cur {
                cur = cx.links().link(slot).next;
                if let Some(w) = self.watched.get(&slot) {
                    if w.flag.take() {
                        self.taken.push(w.number);
                    }
                }
            }
        }
        let (numbers, watched, taken) = (&self.numbers, &self.watched, &mut self.taken);
        let active = |n: u32| {
            numbers
                .get(&n)
                .and_then(|slot| watched.get(slot))
                .is_some_and(|w| w.active)
        };
        cx.services(|s, _| s.async_taken(taken, &active));
        for &n in taken.iter() {
            if let Some(&slot) = numbers.get(&n) {
                if watched.get(&slot).is_some_and(|w| w.active) {
                    cx.queue_slot(slot, Ready::EMPTY);
                }
            }
        }
    }

    /// While one is active the backend's notices are taken after each
    /// poll (a kernel backend drains its wake fd then).
    fn wants_notices(&self) -> bool {
        !self.list.is_empty()
    }

    /// From now on a send wakes the backend. True if something was sent
    /// already (then the poll must not block), as the backend's service
    /// passes it on (`NoticeService::async_sent`: a replay answers from
    /// its trace).
    fn sleep(&mut self, cx: &mut Context<'_>) -> bool {
        match &self.wake {
            Some(w) if !self.list.is_empty() => {
                let sent = w.sleep();
                cx.services(|s, _| s.async_sent(sent))
            }
            _ => false,
        }
    }

    /// Sends need not wake the backend.
    fn wake(&mut self) {
        if let Some(w) = &self.wake {
            w.wake_up();
        }
    }

    /// The active watchers sent to (one queued already absorbs a new
    /// send: the loop does not count it twice).
    fn due(&self, each: &mut dyn FnMut(Watcher<Self>)) {
        if self.list.is_empty() {
            return;
        }
        for w in self.watched.values() {
            if w.active && w.flag.is_sent() {
                each(Watcher::new(w.key));
            }
        }
    }

    fn is_due(&self, w: Watcher<Self>) -> bool {
        self.is_sent(w.slot())
    }

    /// A send the loop has not taken yet is taken back.
    fn clear_due(&mut self, w: Watcher<Self>) {
        if let Some(w) = self.watched.get(&w.slot()) {
            w.flag.take();
        }
    }
}

impl Drop for Asyncs {
    /// The loop is being dropped (its last cleanup callback has run):
    /// every sender now reports it.
    fn drop(&mut self) {
        for (_, w) in self.watched.drain() {
            w.flag.alive.store(false, Ordering::Release);
        }
    }
}

/// Wakes an async watcher from any thread: [`AsyncSender::send`] makes its
/// loop invoke the watcher's callback soon, from the loop's thread.
/// Returned by [`Async::new`](crate::Async::new) and
/// [`Async::sender`](crate::Async::sender); cheap to clone,
/// `Send` and `Sync`.
///
/// ```
/// use evloop::{Async, Loop, RunMode};
/// let mut lp: Loop<u32> = Loop::new()?;
/// let (_, sender) = Async::new(&mut lp, |lp, n, me| {
///     *n += 1;
///     lp.remove(me).unwrap();
/// })?;
/// let other = sender.clone();
/// std::thread::spawn(move || other.send().unwrap()).join().unwrap();
/// sender.send()?; // before the callback ran: coalesces with the first
/// let mut n = 0;
/// lp.run(RunMode::Default, &mut n)?;
/// assert_eq!(n, 1);
/// assert!(sender.send().is_err()); // the watcher is gone
/// # Ok::<(), evloop::Error>(())
/// ```
#[derive(Clone)]
pub struct AsyncSender {
    flag: Arc<AsyncFlag>,
}

impl AsyncSender {
    pub(crate) fn new(flag: Arc<AsyncFlag>) -> AsyncSender {
        AsyncSender { flag }
    }

    /// Asks the loop to invoke the watcher's callback. Sends made before
    /// the callback runs coalesce into that one call (libev's semantics);
    /// a send made once the callback has started is followed by another
    /// call. While the watcher is stopped, sends are dropped; during a
    /// replay too (the loop acts on the recording's sends:
    /// `docs/replay.md`, "Other threads: async sends"). The loop's
    /// wait is interrupted only if it is waiting (or about to).
    ///
    /// Errors: [`Error::WatcherGone`] if the watcher was removed or its
    /// loop dropped (nothing is sent). A send racing the loop's drop is
    /// safe: it reaches a watcher about to go, or reports it gone.
    ///
    /// ```
    /// # use evloop::{Async, Loop, RunMode};
    /// let mut lp: Loop<u32> = Loop::new()?;
    /// let (a, sender) = Async::new(&mut lp, |_, n, _| *n += 1)?;
    /// sender.send()?;
    /// assert!(lp.is_pending(a)?); // pending from the send (the loop takes it when it polls)
    /// let mut n = 0;
    /// lp.run(RunMode::NoWait, &mut n)?;
    /// assert_eq!(n, 1);
    /// lp.remove(a)?;
    /// assert!(matches!(sender.send(), Err(evloop::Error::WatcherGone { .. })));
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn send(&self) -> Result<()> {
        self.flag.send()
    }
}

impl std::fmt::Debug for AsyncSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncSender")
            .field("alive", &self.flag.alive.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

handle!(
    /// Handle to an async watcher, returned by [`Async::new`].
    ///
    /// ```
    /// use evloop::{Async, Loop};
    /// let mut lp: Loop = Loop::new()?;
    /// let (a, _sender) = Async::new(&mut lp, |_, _, _| {})?;
    /// let another = a.sender(&lp)?;
    /// another.send()?;
    /// # Ok::<(), evloop::Error>(())
    /// ```
    Async,
    "async",
    false
);

impl Async {
    /// Creates and starts an async watcher, and a sender that other threads
    /// use to make the loop run its callback ([`AsyncSender::send`]): the
    /// loop's way to be woken from outside (libev's `ev_async`). A loop may
    /// have any number of them; they share one wake-up of the backend,
    /// written only while the loop waits.
    ///
    /// Sends made before the callback runs coalesce into one call; a send
    /// made once it has started is followed by another call.
    ///
    /// Errors: [`Error::Backend`] if the backend cannot be woken from
    /// another thread.
    ///
    /// ```
    /// use evloop::{Async, Loop, RunMode};
    /// use std::sync::mpsc;
    /// let (results, done) = mpsc::channel();
    /// let mut lp: Loop<Vec<u64>> = Loop::new()?;
    /// let (_, sender) = Async::new(&mut lp, move |lp, got, me| {
    ///     got.extend(done.try_iter()); // what the worker has sent so far
    ///     if got.len() == 3 {
    ///         lp.remove(me).unwrap(); // all in: the loop has nothing left
    ///     }
    /// })?;
    /// // A worker thread hands its results over while the loop waits.
    /// let worker = std::thread::spawn(move || {
    ///     for n in 1..=3u64 {
    ///         results.send(n * n).unwrap();
    ///         // Wakes the loop. Once it has all three, it removes the
    ///         // watcher, maybe before the last send: that one then fails.
    ///         sender.send().ok();
    ///     }
    /// });
    /// let mut got = vec![];
    /// lp.run(RunMode::Default, &mut got)?;
    /// assert_eq!(got, [1, 4, 9]);
    /// worker.join().unwrap();
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn new<'s, S, F>(lp: &mut Loop<'s, S>, callback: F) -> Result<(Async, AsyncSender)>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, Async) + 's,
    {
        let cb = Plain::<Async, F>::boxed(callback);
        // Its first start makes its flag (and asks for the waker).
        let a = Async(lp.create::<Asyncs>(rank::ASYNC, cb, |_, _| {})?);
        Ok((a, a.sender(lp)?))
    }

    /// Whether the async watcher was sent to and the loop has not taken
    /// the send yet (libev's `ev_async_pending`): true from a send until
    /// the loop, after its next poll, queues the callback; false for a
    /// stopped watcher, whose sends are dropped. [`Loop::is_pending`]
    /// says whether the callback is due at all: sent, or queued.
    ///
    /// ```
    /// use evloop::{Async, Loop, RunMode};
    /// let mut lp: Loop<Vec<(bool, bool)>> = Loop::new()?;
    /// let (a, sender) = Async::new(&mut lp, |lp, seen, me| {
    ///     // Queued, then called: the send was taken.
    ///     seen.push((me.is_sent(lp).unwrap(), lp.is_pending(me).unwrap()));
    ///     lp.remove(me).unwrap();
    /// })?;
    /// assert!(!a.is_sent(&lp)?);
    /// std::thread::spawn(move || sender.send().unwrap()).join().unwrap();
    /// assert!(a.is_sent(&lp)? && lp.is_pending(a)?);
    /// let mut seen = vec![];
    /// lp.run(RunMode::Default, &mut seen)?;
    /// assert_eq!(seen, [(false, false)]);
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn is_sent<S>(self, lp: &Loop<'_, S>) -> Result<bool> {
        let active = lp.entry(&self)?.is_active();
        Ok(active && lp.kind::<Asyncs>().is_some_and(|k| k.is_sent(self.0.slot)))
    }

    /// Another sender for an async watcher.
    ///
    /// ```
    /// # use evloop::{Async, Loop};
    /// let mut lp: Loop = Loop::new()?;
    /// let (a, _) = Async::new(&mut lp, |_, _, _| {})?;
    /// assert!(a.sender(&lp).is_ok());
    /// lp.remove(a)?;
    /// assert!(a.sender(&lp).is_err()); // a stale handle
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn sender<S>(self, lp: &Loop<'_, S>) -> Result<AsyncSender> {
        lp.entry(&self)?;
        let flag = lp
            .kind::<Asyncs>()
            .and_then(|k| k.flag(self.0.slot))
            .expect("an async watcher has self flag from its first start");
        Ok(AsyncSender::new(flag))
    }
}

/// The model check of the wake-up protocol: loom runs a loop's
/// iterations against concurrent sends in every interleaving its memory
/// model allows (the atomics above are loom's under `--cfg loom`).
/// `RUSTFLAGS="--cfg loom" cargo test --release --lib kinds::asyncs::model`
/// (`.ci/run` does). What it checks: a loop that decides to block after a
/// send it did not see is always woken (no lost wake-up), and the send is
/// followed by exactly one call. Without the two fences it fails.
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

    /// Watchers of one loop and its wake state, the waker, and how many
    /// senders have finished.
    struct World {
        wake: Arc<LoopWake>,
        flags: Vec<Arc<AsyncFlag>>,
        waker: Arc<Counting>,
        done: Arc<AtomicUsize>,
        senders: usize,
    }

    impl World {
        /// `watchers` async watchers, each sent to once by each of
        /// `senders` threads of its own.
        fn new(watchers: usize, senders: usize) -> (World, Vec<loom::thread::JoinHandle<()>>) {
            let waker = Arc::new(Counting(AtomicUsize::new(0)));
            let wake = Arc::new(LoopWake::new(waker.clone()));
            let flags: Vec<_> = (0..watchers)
                .map(|_| Arc::new(AsyncFlag::new(wake.clone())))
                .collect();
            let done = Arc::new(AtomicUsize::new(0));
            let threads = flags
                .iter()
                .flat_map(|flag| (0..senders).map(move |_| flag.clone()))
                .map(|flag| {
                    let done = done.clone();
                    loom::thread::spawn(move || {
                        flag.send().unwrap();
                        done.fetch_add(1, Ordering::SeqCst);
                    })
                })
                .collect();
            let world = World {
                wake,
                flags,
                waker,
                done,
                senders: watchers * senders,
            };
            (world, threads)
        }

        /// One loop iteration: about to poll; if nothing was sent, the
        /// poll blocks until a wake, or for ever once every sender is done
        /// without one (then nothing may be left unsent to: that would be
        /// a lost wake-up; the model lets the poll time out there). Then
        /// after the poll, and the watchers' flags. Which watchers it
        /// called.
        fn iteration(&self) -> Vec<bool> {
            let w = &*self.wake;
            if !w.sleep() {
                loop {
                    // `done` first: a sender's wake comes before its
                    // `done`, so a wake is seen below if it was made.
                    let finished = self.done.load(Ordering::SeqCst) == self.senders;
                    if self.waker.0.load(Ordering::SeqCst) > 0 {
                        break;
                    }
                    if finished {
                        assert!(
                            self.flags.iter().all(|f| !f.pending.load(Ordering::SeqCst)),
                            "lost wake-up: a send is left and the loop sleeps unwoken"
                        );
                        break;
                    }
                    loom::thread::yield_now();
                }
            }
            w.wake_up();
            let any = w.take_any();
            self.flags.iter().map(|f| any && f.take()).collect()
        }
    }

    #[test]
    fn one_send_wakes_a_blocked_loop_and_is_called_once() {
        loom::model(|| {
            let (world, senders) = World::new(1, 1);
            let first = world.iteration()[0];
            for s in senders {
                s.join().unwrap();
            }
            let second = world.iteration()[0];
            assert!(first ^ second, "one call: {first}, {second}");
        });
    }

    /// Two watchers of one loop, one sender each: a send whose `any` the
    /// loop's swap did not read itself (the other sender's came later)
    /// must still have its flag seen by the scan after that swap. With
    /// `any` set by a plain store, the later store broke the first one's
    /// release sequence, and loom finds a flag left set with `any` clear
    /// (the third iteration does not call its watcher).
    #[test]
    fn two_watchers_sent_to_at_once_are_both_called() {
        // Three threads explore for hours unbounded. Four preemptions
        // take about 5 s; two already find the plain-store race.
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(4);
        model.check(|| {
            let (world, senders) = World::new(2, 1);
            let mut calls = [0; 2];
            let mut iteration = || {
                for (n, called) in calls.iter_mut().zip(world.iteration()) {
                    *n += called as usize;
                }
            };
            iteration();
            iteration();
            for s in senders {
                s.join().unwrap();
            }
            iteration();
            assert_eq!(calls, [1, 1], "each watcher called once");
        });
    }
}
