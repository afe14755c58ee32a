//! The async component: watchers woken from other threads through their
//! senders, and the protocol that wakes the loop only when it needs it.
//!
//! Each async watcher has a flag its senders set; the loop has one `any`
//! flag that says some watcher's flag may be set, and a `sleeping` flag
//! that says it is in, or about to enter, a poll that may block. A send
//! sets its watcher's flag (done, if it was already set: sends coalesce),
//! then `any`, then wakes the backend only if `sleeping` is set: libev's
//! rule that the wake fd is written only while the loop waits.
//!
//! No wake-up is lost. The loop stores `sleeping` and then loads `any`; a
//! sender stores `any` and then loads `sleeping`; all four are `SeqCst`, so
//! in their single total order either the loop's load comes after the
//! sender's store (the loop sees `any` and does not block) or the sender's
//! load comes after the loop's store (the sender sees `sleeping` and
//! wakes it). The watcher's flag is set (`AcqRel`) before `any` is stored,
//! and the loop swaps `any` (`SeqCst`) before it swaps the watchers'
//! flags, so a flag set before a send's `any` is seen by the scan that
//! follows the swap that sees `any`. A flag is cleared when its watcher is
//! queued, before the callback runs: a send made after a callback started
//! is followed by another callback.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::pending::PendingQueues;
use crate::registry::Registry;
use crate::slot_list::{LinkStore, Slot, SlotList};
use crate::{Error, Ready, Result, Wake};

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

#[derive(Default)]
pub(crate) struct Asyncs {
    /// Made when the loop's first async watcher is created.
    wake: Option<Arc<LoopWake>>,
    /// The active async watchers, in start order.
    list: SlotList,
    /// Every async watcher's flag.
    flags: HashMap<Slot, Arc<AsyncFlag>>,
}

impl Asyncs {
    /// Whether the loop has its backend's waker yet.
    pub fn has_waker(&self) -> bool {
        self.wake.is_some()
    }

    /// Keeps the backend's waker (the first async watcher's creation).
    pub fn set_waker(&mut self, waker: Arc<dyn Wake>) {
        self.wake = Some(Arc::new(LoopWake {
            waker,
            sleeping: AtomicBool::new(false),
            any: AtomicBool::new(false),
        }));
    }

    /// A new async watcher in `slot` (the waker is set): its flag, for
    /// its first sender.
    pub fn create(&mut self, slot: Slot) -> Arc<AsyncFlag> {
        let wake = self.wake.clone().expect("the waker is set first");
        let flag = Arc::new(AsyncFlag {
            pending: AtomicBool::new(false),
            alive: AtomicBool::new(true),
            wake,
        });
        self.flags.insert(slot, flag.clone());
        flag
    }

    /// The flag of the async watcher in `slot`, for another sender.
    pub fn flag(&self, slot: Slot) -> Option<Arc<AsyncFlag>> {
        self.flags.get(&slot).cloned()
    }

    /// An async watcher starts: sends made while it was stopped are
    /// dropped (as libev does).
    pub fn add(&mut self, links: &mut impl LinkStore, slot: Slot) {
        if let Some(flag) = self.flags.get(&slot) {
            flag.pending.store(false, Ordering::Release);
        }
        self.list.push(links, slot);
    }

    pub fn remove(&mut self, links: &mut impl LinkStore, slot: Slot) {
        self.list.remove(links, slot);
    }

    /// The watcher was removed: its senders now report it.
    pub fn forget(&mut self, slot: Slot) {
        if let Some(flag) = self.flags.remove(&slot) {
            flag.alive.store(false, Ordering::Release);
        }
    }

    /// The loop is being dropped: every sender now reports it.
    pub fn close_all(&mut self) {
        for (_, flag) in self.flags.drain() {
            flag.alive.store(false, Ordering::Release);
        }
    }

    /// Before a poll that may block: from now on a send wakes the backend.
    /// True if something was sent already (then the poll must not block).
    pub fn sleep(&self) -> bool {
        match &self.wake {
            Some(w) if !self.list.is_empty() => {
                w.sleeping.store(true, Ordering::SeqCst);
                w.any.load(Ordering::SeqCst)
            }
            _ => false,
        }
    }

    /// After the poll: sends need not wake the backend.
    pub fn wake_up(&self) {
        if let Some(w) = &self.wake {
            w.sleeping.store(false, Ordering::SeqCst);
        }
    }

    /// Queues every active async watcher sent to since it was last queued.
    pub fn collect<C>(&self, registry: &mut Registry<C>, pending: &mut PendingQueues) {
        let Some(w) = &self.wake else { return };
        if self.list.is_empty() || !w.any.swap(false, Ordering::SeqCst) {
            return;
        }
        self.list.for_each(registry, |registry, slot| {
            let sent = self
                .flags
                .get(&slot)
                .is_some_and(|f| f.pending.swap(false, Ordering::AcqRel));
            if sent {
                registry.queue(pending, slot, Ready::EMPTY);
            }
        });
    }

    /// Whether there are active async watchers (the loop then asks the
    /// backend for notices after each poll).
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// Wakes an async watcher from any thread: [`AsyncSender::send`] makes its
/// loop invoke the watcher's callback soon, from the loop's thread.
/// Returned by [`Loop::async_watcher`](crate::Loop::async_watcher) and
/// [`Loop::async_sender`](crate::Loop::async_sender); cheap to clone,
/// `Send` and `Sync`.
///
/// ```
/// use evloop::{Loop, RunMode};
/// let mut lp: Loop<u32> = Loop::new()?;
/// let (_, sender) = lp.async_watcher(|lp, n, me| {
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
    /// call. While the watcher is stopped, sends are dropped. The loop's
    /// wait is interrupted only if it is waiting (or about to).
    ///
    /// Errors: [`Error::WatcherGone`] if the watcher was removed or its
    /// loop dropped (nothing is sent). A send racing the loop's drop is
    /// safe: it reaches a watcher about to go, or reports it gone.
    ///
    /// ```
    /// # use evloop::{Loop, RunMode};
    /// let mut lp: Loop<u32> = Loop::new()?;
    /// let (a, sender) = lp.async_watcher(|_, n, _| *n += 1)?;
    /// sender.send()?;
    /// assert_eq!(lp.pending_count(), 0); // queued at the next iteration
    /// let mut n = 0;
    /// lp.run(RunMode::NoWait, &mut n)?;
    /// assert_eq!(n, 1);
    /// lp.remove(a)?;
    /// assert!(matches!(sender.send(), Err(evloop::Error::WatcherGone { .. })));
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn send(&self) -> Result<()> {
        let flag = &*self.flag;
        if !flag.alive.load(Ordering::Acquire) {
            return Err(Error::WatcherGone { kind: "async" });
        }
        if flag.pending.swap(true, Ordering::AcqRel) {
            // Already sent: the loop will see it.
            return Ok(());
        }
        let w = &*flag.wake;
        w.any.store(true, Ordering::SeqCst);
        if w.sleeping.load(Ordering::SeqCst) {
            w.waker.wake();
        }
        Ok(())
    }
}

impl std::fmt::Debug for AsyncSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncSender")
            .field("alive", &self.flag.alive.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
