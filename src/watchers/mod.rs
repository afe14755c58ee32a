//! The watcher API: one file per kind (its handle type, its callback
//! adaptor if it needs one, and the `Loop` methods that create and change
//! it), and here the operations every kind shares.
//!
//! These are thin: each checks the handle, then asks the registry (flags
//! and counts), the pending queues, and the loop's activation hooks
//! (`Loop::activate` / `Loop::deactivate` in event_loop.rs) to do the
//! work. The handle is checked through `Loop::entry_mut` or `Loop::entry`,
//! which materialise (or count) a direct dispatch batch for io handles.

pub(crate) mod io;
pub(crate) mod plain;
pub(crate) mod timer;

use crate::event_loop::BoxedCallback;
use crate::handle::Handle;
use crate::pending::Priority;
use crate::registry::Role;
use crate::slot_list::Slot;
use crate::unwind::Held;
use crate::watchers::plain::{Plain, Raw};
use crate::{Error, Kind, Loop, Ready, Result, Watcher};

/// The kinds of watcher whose callback [`Loop::set_callback`] replaces,
/// and what that callback receives after the loop and the state: its own
/// handle for timer, periodic, idle, prepare, check, signal, async and
/// fork watchers, a [`ChildEvent`](crate::ChildEvent) for child watchers,
/// a [`StatEvent`](crate::StatEvent) for stat watchers. Io watchers
/// ([`Io::set_callback`](crate::Io::set_callback), [`Io::set_borrowed_callback`](crate::Io::set_borrowed_callback)) and
/// cleanup watchers ([`Cleanup::set_callback`](crate::Cleanup::set_callback)) have methods of
/// their own; a [`Once::new`](crate::Once::new)'s callback runs once and is not replaced.
///
/// ```
/// use evloop::{Callback, Loop, Sim, Timer};
/// // A function generic over the kind: its callback gets `H::Event`.
/// fn count_calls<H: Callback>(lp: &mut Loop<u32>, h: H) {
///     lp.set_callback(h, |_, n, _| *n += 1).unwrap();
/// }
/// let mut lp: Loop<u32> = Loop::with_backend(Sim::new().backend());
/// let t: Timer = lp.timer(std::time::Duration::ZERO, std::time::Duration::ZERO, |_, _, _| {}).unwrap();
/// count_calls(&mut lp, t);
/// ```
pub trait Callback: Handle + adapt::Adapt {
    /// What the callback receives after `&mut Loop` and `&mut S` (a
    /// [`StatEvent`](crate::StatEvent) borrows its path for the call:
    /// hence the lifetime).
    type Event<'a>;
}

pub(crate) mod adapt {
    use crate::event_loop::BoxedCallback;
    use crate::Loop;

    /// A user callback in its kind's adaptor: what a watcher stores
    /// (opaque outside the crate).
    pub struct Adapted<'s, S>(pub(crate) BoxedCallback<'s, S>);

    /// How a kind wraps a user callback into the one trait object its
    /// watchers store (its adaptor, as its constructor does).
    pub trait Adapt {
        fn adapt<'s, S, F>(callback: F) -> Adapted<'s, S>
        where
            Self: super::Callback,
            F: for<'a> FnMut(&mut Loop<'s, S>, &mut S, <Self as super::Callback>::Event<'a>) + 's;
    }
}

/// The kinds whose callback receives its own handle ([`Plain`]).
macro_rules! plain_callback {
    ($($kind:ident),*) => {$(
        impl Callback for crate::$kind {
            type Event<'a> = crate::$kind;
        }
        impl adapt::Adapt for crate::$kind {
            fn adapt<'s, S, F>(callback: F) -> adapt::Adapted<'s, S>
            where
                F: FnMut(&mut Loop<'s, S>, &mut S, crate::$kind) + 's,
            {
                adapt::Adapted(Plain::<crate::$kind, F>::boxed(callback))
            }
        }
    )*};
}
plain_callback!(Timer, Periodic, Idle, Prepare, Check, Signal, Async, Fork);

impl<'s, S> Loop<'s, S> {
    /// Starts a stopped watcher (no effect if it is active). A timer starts
    /// counting its `after` delay from [`Loop::now`].
    ///
    /// ```
    /// # use evloop::{Idle, Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let idle = Idle::new(&mut lp, |_, _, _| {}).unwrap();
    /// lp.stop(idle).unwrap();
    /// lp.start(idle).unwrap();
    /// assert!(lp.is_active(idle).unwrap());
    /// ```
    pub fn start<H: Handle>(&mut self, h: H) -> Result<()> {
        if H::TIMER {
            return self.start_timer(h.key());
        }
        if H::IO {
            if self.rearm(h.key()) {
                return Ok(());
            }
            return self.start_io(h);
        }
        self.start_listed(h)
    }

    /// [`Loop::start`] of an io watcher that is not the re-arm of the
    /// one-shot watcher whose callback runs: out of line, so that the
    /// re-arm, inlined into that callback, is a compare and a store.
    #[inline(never)]
    fn start_io<H: Handle>(&mut self, h: H) -> Result<()> {
        self.start_listed(h)
    }

    /// [`Loop::start`] past the timer and re-arm fast paths.
    #[inline]
    fn start_listed<H: Handle>(&mut self, h: H) -> Result<()> {
        if self.entry_to_start(&h)?.is_active() {
            return Ok(());
        }
        self.start_slot(h.key())
    }

    /// Stops a watcher: it leaves the backend, heap or list, and a pending
    /// invocation is cancelled: after `stop` its callback is not called
    /// (until it is started again, or fed an event).
    ///
    /// ```
    /// use evloop::{Loop, RunMode, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop<u32> = Loop::with_backend(Sim::new().backend());
    /// let late = lp.timer(Duration::from_millis(5), Duration::ZERO, |_, n, _| *n += 1).unwrap();
    /// let stopper = lp.timer(Duration::from_millis(5), Duration::ZERO, move |lp, _, _| {
    ///     lp.stop(late).unwrap(); // `late` is already pending in this iteration
    /// }).unwrap();
    /// lp.set_priority(stopper, 1).unwrap(); // so that it runs first
    /// let mut n = 0;
    /// lp.run(RunMode::Default, &mut n).unwrap();
    /// assert_eq!(n, 0);
    /// ```
    pub fn stop<H: Handle>(&mut self, h: H) -> Result<()> {
        if H::TIMER {
            return self.stop_timer(h.key());
        }
        // Not `entry_mut`: a direct batch need not be materialised. It finds
        // an fd's watchers when it reaches the fd, so a stopped one is
        // skipped just as its cancelled entry would have been. A deferred
        // disarm is settled: the watcher it marks is inactive already.
        self.registry.lookup(h.key(), h.kind())?;
        if H::IO {
            self.settle_disarm();
        }
        let slot = h.key().slot;
        self.registry.cancel(&mut self.pending, slot);
        self.deactivate(slot);
        Ok(())
    }

    /// Stops and removes a watcher; its handle becomes stale. An owned io
    /// source is deregistered from the backend right away (so a new fd with
    /// the same number starts clean) and then closed. Removing a watcher
    /// from inside its own callback is allowed.
    ///
    /// ```
    /// # use evloop::{Error, Idle, Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let idle = Idle::new(&mut lp, |_, _, _| {}).unwrap();
    /// lp.remove(idle).unwrap();
    /// assert!(matches!(lp.remove(idle), Err(Error::StaleHandle { kind: "idle" })));
    /// ```
    pub fn remove(&mut self, h: impl Handle) -> Result<()> {
        self.stop(h)?;
        let slot = h.key().slot;
        self.leaving(slot);
        let e = self.registry.remove(slot);
        // The loop is done with the watcher before what the user gave it
        // is dropped (the callback's captures, an owned source, a custom
        // schedule): a panic in one of those `Drop`s propagates from here
        // with every count right, after the others were dropped too.
        let mut held = Held::default();
        self.removed(h.key(), e.role(), &mut held);
        held.drop(e);
        held.resume();
        Ok(())
    }

    /// Whether the watcher is active (started and not stopped).
    ///
    /// ```
    /// # use evloop::{Check, Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let c = Check::new(&mut lp, |_, _, _| {}).unwrap();
    /// assert!(lp.is_active(c).unwrap());
    /// ```
    pub fn is_active(&self, h: impl Handle) -> Result<bool> {
        let e = self.entry(&h)?;
        // A one-shot io watcher whose event waits in a direct batch, or
        // whose callback runs from one with its disarm deferred, is
        // disarmed all the same (the queued path disarms it as it queues).
        let disarmed_in_batch = match e.role() {
            Role::Io { fd, interest } if e.is_active() && interest.is_oneshot() => {
                self.results.is_disarming(h.key().slot) || self.results.holds(fd, e.receives())
            }
            _ => false,
        };
        Ok(e.is_active() && !disarmed_in_batch)
    }

    /// Whether the watcher's callback is due: an invocation is queued
    /// (libev's `ev_is_pending`), or, for an active async watcher, it was
    /// sent to and the loop has not taken the send yet (libev's
    /// `ev_async_pending`): from the moment of the send until its callback
    /// starts. A send made while the callback runs makes it pending again.
    ///
    /// ```
    /// use evloop::{Async, Check, Loop, Ready, RunMode, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let c = Check::new(&mut lp, |_, _, _| {}).unwrap();
    /// lp.feed_event(c, Ready::EMPTY).unwrap();
    /// assert!(lp.is_pending(c).unwrap());
    ///
    /// let (a, sender) = Async::new(&mut lp, |_, _, _| {}).unwrap();
    /// sender.send().unwrap();
    /// assert!(lp.is_pending(a).unwrap()); // before the loop has looked
    /// lp.run(RunMode::NoWait, &mut ()).unwrap();
    /// assert!(!lp.is_pending(a).unwrap()); // its callback ran
    /// ```
    pub fn is_pending(&self, h: impl Handle) -> Result<bool> {
        let e = self.entry(&h)?;
        // An io event not yet queued because it is dispatched directly is
        // pending all the same; so is a send the loop has not taken yet.
        let not_queued_yet = match e.role() {
            Role::Io { fd, .. } if e.is_active() => self.results.holds(fd, e.receives()),
            Role::Other { index, .. } if e.is_active() => self.kind_is_due(index, h.key()),
            _ => false,
        };
        Ok(e.pending.is_some() || e.deferred().is_some() || not_queued_yet)
    }

    /// Sets the priority, from [`MIN_PRIORITY`](crate::MIN_PRIORITY) to [`MAX_PRIORITY`](crate::MAX_PRIORITY)
    /// (default 0). Higher priorities are invoked first within an iteration.
    /// A pending invocation moves to the end of its new priority's queue.
    ///
    /// ```
    /// # use evloop::{Check, Error, Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let c = Check::new(&mut lp, |_, _, _| {}).unwrap();
    /// lp.set_priority(c, 2).unwrap();
    /// assert_eq!(lp.priority(c).unwrap(), 2);
    /// assert!(matches!(lp.set_priority(c, 3), Err(Error::InvalidPriority(3))));
    /// ```
    pub fn set_priority(&mut self, h: impl Handle, priority: i32) -> Result<()> {
        let Some(new) = Priority::from_user(priority) else {
            return Err(Error::InvalidPriority(priority));
        };
        let e = self.entry_mut(&h)?;
        let old = e.priority();
        if old == new {
            return Ok(());
        }
        let moved = match e.role() {
            Role::Other { index, .. } if e.is_active() => Some(index),
            _ => None,
        };
        let slot = h.key().slot;
        self.registry.set_priority(slot, new);
        if let Some(index) = moved {
            self.reprioritised_other(index, h.key(), old, new);
        }
        if let Some(pos) = self.registry[slot].pending.take() {
            let ready = self.pending.cancel(old, pos);
            self.registry.queue(&mut self.pending, slot, ready);
        }
        Ok(())
    }

    /// The watcher's priority.
    ///
    /// ```
    /// # use evloop::{Check, Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let c = Check::new(&mut lp, |_, _, _| {}).unwrap();
    /// assert_eq!(lp.priority(c).unwrap(), 0);
    /// ```
    pub fn priority(&self, h: impl Handle) -> Result<i32> {
        Ok(self.entry(&h)?.priority().user())
    }

    /// Whether an active watcher keeps [`RunMode::Default`](crate::RunMode)
    /// running (default true). An unreferenced watcher still works, but the
    /// loop may return while it is active: libuv's `uv_unref`, and libev's
    /// idiom of `ev_unref` after starting a watcher.
    ///
    /// ```
    /// use evloop::{Loop, RunMode, RunOutcome, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let t = lp.timer(Duration::from_secs(60), Duration::ZERO, |_, _, _| {}).unwrap();
    /// lp.set_ref(t, false).unwrap();
    /// assert_eq!(lp.run(RunMode::Default, &mut ()).unwrap(), RunOutcome::NoActiveWatchers);
    /// ```
    pub fn set_ref(&mut self, h: impl Handle, referenced: bool) -> Result<()> {
        self.entry_mut(&h)?;
        self.registry.set_referenced(h.key().slot, referenced);
        Ok(())
    }

    /// Queues an invocation of the watcher as if the event had happened
    /// (libev's `ev_feed_event`); the callback runs in this iteration's
    /// invoke phase, or the next one's.
    ///
    /// ```
    /// use evloop::{Interest, Loop, Ready, RunMode, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    /// let io = lp.io(sim.socket("s", 0), Interest::READABLE, |lp, log, ev| {
    ///     log.push(ev.ready.to_string());
    ///     lp.remove(ev.watcher).unwrap();
    /// }).unwrap();
    /// lp.feed_event(io, Ready::READABLE).unwrap();
    /// let mut log = vec![];
    /// lp.run(RunMode::Default, &mut log).unwrap();
    /// assert_eq!(log, ["r"]);
    /// ```
    pub fn feed_event(&mut self, h: impl Handle, ready: Ready) -> Result<()> {
        self.entry_mut(&h)?;
        self.registry.queue(&mut self.pending, h.key().slot, ready);
        Ok(())
    }

    /// Replaces a watcher's callback (libev's `ev_set_cb`), at any time:
    /// the watcher keeps its state (active or not, its priority, a pending
    /// invocation, which the new callback receives). Called from the
    /// watcher's own callback, it takes effect when that callback returns
    /// (which it finishes; it is dropped then); from anywhere else, at
    /// once, and the old callback is dropped before `set_callback`
    /// returns. A panic in the old callback's drop (of what it captured)
    /// propagates with the new callback already in place.
    ///
    /// For every kind but io ([`Io::set_callback`](crate::Io::set_callback)), cleanup
    /// ([`Cleanup::set_callback`](crate::Cleanup::set_callback)) and `once` (see [`Callback`]).
    /// Errors: a stale or foreign handle.
    ///
    /// ```
    /// use evloop::{Loop, RunMode, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop<Vec<String>> = Loop::with_backend(Sim::new().backend());
    /// // A state machine: each tick's callback installs the next one.
    /// lp.timer(Duration::from_secs(1), Duration::from_secs(1), |lp, log, me| {
    ///     log.push(format!("first at {:?}", lp.now()));
    ///     lp.set_callback(me, |lp, log, me| {
    ///         log.push(format!("then at {:?}", lp.now()));
    ///         lp.remove(me).unwrap();
    ///     }).unwrap();
    /// }).unwrap();
    /// let mut log = vec![];
    /// lp.run(RunMode::Default, &mut log).unwrap();
    /// assert_eq!(log, ["first at 1s", "then at 2s"]);
    /// ```
    pub fn set_callback<H, F>(&mut self, h: H, callback: F) -> Result<()>
    where
        H: Callback,
        F: for<'a> FnMut(&mut Loop<'s, S>, &mut S, H::Event<'a>) + 's,
    {
        self.entry_mut(&h)?;
        self.replace_callback(h.key().slot, H::adapt(callback).0);
        Ok(())
    }

    /// Puts `new` in place of the callback of the watcher in `slot` (live).
    /// If its callback is running (out of its entry), the running one is
    /// dropped when it returns (`Running` in event_loop.rs); otherwise the
    /// old one is dropped here, after the new one is in place.
    pub(crate) fn replace_callback(&mut self, slot: Slot, new: BoxedCallback<'s, S>) {
        let old = self.registry[slot].cb.store(new);
        drop(old);
    }

    /// Cancels the watcher's queued invocation, if any, and returns the
    /// events it carried (libev's `ev_clear_pending`); the watcher stays
    /// active. For an async watcher, a send not yet taken by the loop is
    /// cancelled too: [`Loop::is_pending`] says false afterwards.
    ///
    /// ```
    /// use evloop::{Check, Loop, Ready, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let c = Check::new(&mut lp, |_, _, _| {}).unwrap();
    /// lp.feed_event(c, Ready::READABLE).unwrap();
    /// assert_eq!(lp.clear_pending(c).unwrap(), Ready::READABLE);
    /// assert_eq!(lp.pending_count(), 0);
    /// assert!(lp.is_active(c).unwrap());
    /// ```
    pub fn clear_pending(&mut self, h: impl Handle) -> Result<Ready> {
        let kind = self.entry_mut(&h)?.role();
        let slot = h.key().slot;
        if let Role::Other { index, .. } = kind {
            // A send the loop has not taken yet is pending too: it goes.
            self.kind_clear_due(index, h.key());
        }
        Ok(self.registry.cancel(&mut self.pending, slot))
    }

    /// Installs a watcher kind from outside the crate, to create watchers
    /// of with [`Loop::watcher`]; [`Error::KindInstalled`] if one of its
    /// type is installed already.
    ///
    /// ```
    /// use evloop::{Error, Kind, Loop, Sim};
    /// struct Mine;
    /// impl Kind for Mine {
    ///     const NAME: &'static str = "mine";
    /// }
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// lp.install(Mine).unwrap();
    /// assert!(matches!(lp.install(Mine), Err(Error::KindInstalled { kind: "mine" })));
    /// ```
    pub fn install<K: Kind>(&mut self, kind: K) -> Result<()> {
        match self.kinds.install(kind) {
            Some(_) => Ok(()),
            None => Err(Error::KindInstalled { kind: K::NAME }),
        }
    }

    /// The installed kind `K`, if it is.
    ///
    /// ```
    /// use evloop::{Kind, Loop, Sim};
    /// struct Mine(u32);
    /// impl Kind for Mine {
    ///     const NAME: &'static str = "mine";
    /// }
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// assert!(lp.kind::<Mine>().is_none());
    /// lp.install(Mine(7)).unwrap();
    /// assert_eq!(lp.kind::<Mine>().unwrap().0, 7);
    /// ```
    pub fn kind<K: Kind>(&self) -> Option<&K> {
        self.kinds.get()
    }

    /// The installed kind `K`, to change, if it is.
    ///
    /// ```
    /// use evloop::{Kind, Loop, Sim};
    /// struct Mine(u32);
    /// impl Kind for Mine {
    ///     const NAME: &'static str = "mine";
    /// }
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// lp.install(Mine(7)).unwrap();
    /// lp.kind_mut::<Mine>().unwrap().0 += 1;
    /// assert_eq!(lp.kind::<Mine>().unwrap().0, 8);
    /// ```
    pub fn kind_mut<K: Kind>(&mut self) -> Option<&mut K> {
        self.kinds.get_mut()
    }

    /// Creates a stopped watcher of the installed kind `K`: start it with
    /// [`Loop::start`] (which asks [`Kind::start`]). Its callback gets
    /// the loop, the state, its handle and the readiness it was queued
    /// with. [`Error::KindNotInstalled`] if `K` is not installed.
    ///
    /// ```
    /// use evloop::{Error, Kind, Loop, Sim};
    /// struct Mine;
    /// impl Kind for Mine {
    ///     const NAME: &'static str = "mine";
    /// }
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// assert!(matches!(
    ///     lp.watcher::<Mine, _>(|_, _, _, _| {}),
    ///     Err(Error::KindNotInstalled { kind: "mine" })
    /// ));
    /// lp.install(Mine).unwrap();
    /// let w = lp.watcher::<Mine, _>(|_, _, _, _| {}).unwrap();
    /// lp.start(w).unwrap();
    /// assert!(lp.is_active(w).unwrap());
    /// ```
    pub fn watcher<K, F>(&mut self, callback: F) -> Result<Watcher<K>>
    where
        K: Kind,
        F: FnMut(&mut Loop<'s, S>, &mut S, Watcher<K>, Ready) + 's,
    {
        let Some(index) = self.kinds.index_of::<K>() else {
            return Err(Error::KindNotInstalled { kind: K::NAME });
        };
        Ok(Watcher::new(
            self.insert_of::<K>(index, Raw::<K, F>::boxed(callback)),
        ))
    }
}
