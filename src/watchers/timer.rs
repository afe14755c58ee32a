//! Timer watchers: the handle and the `Loop` methods. The timers
//! themselves (clock, heap, expiry) are the timer component, timers.rs.

use std::time::Duration;

use crate::event_loop::Dispatch;
use crate::handle::handle;
use crate::handle::Key;
use crate::settled::Settled;
use crate::slot_list::Slot;
use crate::timers::to_ns;
use crate::watchers::plain::Plain;
use crate::{Loop, Ready, Result};

handle!(
    /// Handle to a timer watcher, returned by [`Loop::timer`] (and by
    /// [`Timer::once`], stale once it fired).
    ///
    /// ```
    /// use evloop::{Loop, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let t = lp.timer(Duration::from_secs(1), Duration::ZERO, |_, _, _| {}).unwrap();
    /// assert_eq!(t.remaining(&lp).unwrap(), Duration::from_secs(1));
    /// ```
    Timer,
    "timer",
    false,
    true
);

impl<'s, S> Loop<'s, S> {
    /// Creates and starts a timer that fires `after` from the loop time
    /// ([`Loop::now`]) and then every `repeat` (zero: once). A one-shot
    /// timer is stopped before its callback runs.
    ///
    /// What keeps memory: a timer, like every watcher, stays in the loop
    /// with its callback (and what the closure captures) until
    /// [`Loop::remove`], whether it is active or not; a one-shot timer
    /// that has fired is stopped, not gone, so that [`Loop::start`] or
    /// [`Timer::again`] can arm it again. For a timer per request or per
    /// key, which fires once and is done, use [`Timer::once`]: it
    /// frees itself when it fires. (Or remove the timer in its callback:
    /// `lp.remove(me)`.) [`Loop::watcher_count`] shows what the loop holds.
    ///
    /// The loop's clock counts nanoseconds in a `u64` from the backend's
    /// origin, about 584 years; a deadline beyond that (`Duration::MAX`,
    /// say) never comes: the timer stays active but never fires, and a
    /// repeating timer that would be rescheduled past it is parked there.
    ///
    /// ```
    /// use evloop::{Loop, RunMode, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop<Vec<u64>> = Loop::with_backend(Sim::new().backend());
    /// lp.timer(Duration::from_millis(20), Duration::ZERO, |lp, log, _| {
    ///     log.push(lp.now().as_millis() as u64)
    /// }).unwrap();
    /// lp.timer(Duration::from_millis(10), Duration::ZERO, |lp, log, _| {
    ///     log.push(lp.now().as_millis() as u64)
    /// }).unwrap();
    /// let mut log = vec![];
    /// lp.run(RunMode::Default, &mut log).unwrap();
    /// assert_eq!(log, [10, 20]);
    /// ```
    pub fn timer<F>(&mut self, after: Duration, repeat: Duration, callback: F) -> Result<Timer>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, Timer) + 's,
    {
        let cb = Plain::<Timer, F>::boxed(callback);
        let after = to_ns(after);
        let key = self.registry.insert_active_timer(after, to_ns(repeat), cb);
        self.timers.start_new(&mut self.registry, key.slot, after);
        Ok(Timer(key))
    }

    /// [`Timer::set`] under its old name, kept for code written against
    /// it (copies of the peer harness made before benches/peers came into
    /// the repository call it); not listed.
    #[doc(hidden)]
    #[deprecated(note = "use `Timer::set`")]
    #[inline(always)]
    pub fn set_timer(&mut self, t: Timer, after: Duration, repeat: Duration) -> Result<()> {
        t.set(self, after, repeat)
    }

    /// [`Timer::again`] on a timer whose invocation is queued: cancelled
    /// first.
    #[cold]
    #[inline(never)]
    fn again_queued(&mut self, key: Key) -> Result<()> {
        self.registry.cancel(&mut self.pending, key.slot);
        (Timer(key)).again(self)
    }

    /// [`Loop::start`] of a timer: armed at its delay from now, unless it
    /// is active.
    #[inline(always)]
    pub(crate) fn start_timer(&mut self, key: Key) -> Result<()> {
        let settled = Settled::for_handle::<Timer>(self);
        let mut e = self.registry.timer_mut(key, settled)?;
        if !e.is_active() {
            e.set_active(true);
            let step = self.timers.start_record(e.record());
            self.timers.finish(&mut self.registry, key.slot, step);
        }
        Ok(())
    }

    /// [`Loop::stop`] of a timer: disarmed, and a queued invocation
    /// cancelled.
    #[inline(always)]
    pub(crate) fn stop_timer(&mut self, key: Key) -> Result<()> {
        let settled = Settled::for_handle::<Timer>(self);
        let mut e = self.registry.timer_mut(key, settled)?;
        if e.is_queued() {
            self.registry.cancel(&mut self.pending, key.slot);
            return self.stop_timer(key);
        }
        if e.is_active() {
            e.set_active(false);
            self.timers.disarm(e.record());
        }
        Ok(())
    }
}

impl Timer {
    /// A one-shot timer that frees itself: `callback` runs once, `after`
    /// from the loop time ([`Loop::now`]), and the watcher is gone when it
    /// runs (removed just before, its closure dropped as the call
    /// returns), as if [`Loop::remove`] had been called: a server can
    /// make one per key or per request and forget it. The handle is
    /// stale from then on: every operation on it returns
    /// [`Error::StaleHandle`](crate::Error::StaleHandle), and never acts on a
    /// watcher created since in its place.
    ///
    /// Until it fires it is a timer like any other ([`Timer`]):
    /// [`Timer::remaining`], [`Timer::set`] (to push the expiry back),
    /// [`Loop::set_ref`] (an expiry that should not keep
    /// [`Loop::run`] going), [`Loop::remove`] to cancel it (the callback
    /// is dropped uncalled). It fires once whatever period `Timer::set`
    /// gives it; a stopped one ([`Loop::stop`], or [`Timer::again`], which
    /// stops a timer without a period) keeps its callback until it is
    /// started again or removed, as every watcher does, and
    /// [`Loop::set_callback`] makes it an ordinary timer (the new
    /// callback does not free it). [`Once::new`](crate::Once::new) is
    /// the same for an fd's readiness or a timeout, whichever comes first.
    ///
    /// ```
    /// use evloop::{Loop, RunMode, Sim, Timer};
    /// use std::time::Duration;
    /// let mut lp: Loop<Vec<u128>> = Loop::with_backend(Sim::new().backend());
    /// let key = String::from("session:42"); // captured: freed when it fires
    /// let t = Timer::once(&mut lp, Duration::from_millis(30), move |lp, log| {
    ///     assert_eq!(key, "session:42");
    ///     log.push(lp.now().as_millis());
    /// }).unwrap();
    /// assert_eq!(lp.watcher_count(), 1);
    /// let mut log = vec![];
    /// lp.run(RunMode::Default, &mut log).unwrap();
    /// assert_eq!(log, [30]);
    /// assert_eq!(lp.watcher_count(), 0); // nothing left behind
    /// assert!(t.remaining(&lp).is_err()); // the handle is stale
    /// ```
    pub fn once<'s, S, F>(lp: &mut Loop<'s, S>, after: Duration, callback: F) -> Result<Timer>
    where
        F: FnOnce(&mut Loop<'s, S>, &mut S) + 's,
    {
        let cb = Box::new(TimerOnce(Some(callback)));
        let after = to_ns(after);
        let key = lp.registry.insert_active_timer(after, 0, cb);
        lp.timers.start_new(&mut lp.registry, key.slot, after);
        Ok(Timer(key))
    }

    /// Changes a timer's delay and period. An active timer is restarted with
    /// the new values from [`Loop::now`]; a stopped one keeps them for its
    /// next [`Loop::start`].
    ///
    /// ```
    /// # use evloop::{Loop, Sim};
    /// # use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let t = lp.timer(Duration::from_secs(1), Duration::ZERO, |_, _, _| {}).unwrap();
    /// t.set(&mut lp, Duration::from_secs(5), Duration::from_secs(1)).unwrap();
    /// assert_eq!(t.remaining(&lp).unwrap(), Duration::from_secs(5));
    /// ```
    #[inline(always)]
    pub fn set<S>(self, lp: &mut Loop<'_, S>, after: Duration, repeat: Duration) -> Result<()> {
        let settled = Settled::for_handle::<Timer>(lp);
        let mut e = lp.registry.timer_mut(self.0, settled)?;
        if e.is_active() {
            // Moved in place (a new start order, as a stop and start would
            // give): at most one heap move, none if the expiry is later.
            let step = lp.timers.reset_record(e.record(), after, repeat);
            lp.timers.finish(&mut lp.registry, self.0.slot, step);
        } else {
            e.record().configure(to_ns(after), to_ns(repeat));
        }
        Ok(())
    }

    /// libev's `ev_timer_again`: a repeating timer is (re)started to fire
    /// `repeat` from now, whether it was active or not; a timer without a
    /// period is stopped. The classic use is an inactivity timeout that is
    /// pushed back on every read, in O(log n) and without allocation.
    ///
    /// ```
    /// use evloop::{Loop, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let t = lp.timer(Duration::ZERO, Duration::from_secs(30), |_, _, _| {}).unwrap();
    /// t.again(&mut lp).unwrap();
    /// assert_eq!(t.remaining(&lp).unwrap(), Duration::from_secs(30));
    /// ```
    #[inline(always)]
    pub fn again<S>(self, lp: &mut Loop<'_, S>) -> Result<()> {
        let settled = Settled::for_handle::<Timer>(lp);
        let mut e = lp.registry.timer_mut(self.0, settled)?;
        if e.is_queued() {
            // libev clears a pending invocation.
            return lp.again_queued(self.0);
        }
        // Armed at `repeat` from now (not at its `after`, as a start
        // would); a timer without a period is stopped.
        if e.record().repeat() == 0 {
            e.set_active(false);
            lp.timers.disarm(e.record());
            return Ok(());
        }
        let step = if e.is_active() {
            lp.timers.again_record::<true>(e.record())
        } else {
            e.set_active(true);
            lp.timers.again_record::<false>(e.record())
        };
        lp.timers.finish(&mut lp.registry, self.0.slot, step);
        Ok(())
    }

    /// A timer's period (zero for a one-shot timer): libev's `repeat`
    /// field, libuv's `uv_timer_get_repeat`.
    ///
    /// ```
    /// # use evloop::{Loop, Sim};
    /// # use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let t = lp.timer(Duration::from_secs(1), Duration::from_secs(2), |_, _, _| {}).unwrap();
    /// assert_eq!(t.repeat(&lp).unwrap(), Duration::from_secs(2));
    /// ```
    pub fn repeat<S>(self, lp: &Loop<'_, S>) -> Result<Duration> {
        lp.entry(&self)?;
        Ok(lp.timers.repeat_of(&lp.registry, self.0.slot))
    }

    /// Sets a timer's period without restarting it (libuv's
    /// `uv_timer_set_repeat`): it takes effect the next time the timer
    /// expires (or at the next [`Timer::again`]); setting zero makes an
    /// active repeating timer fire once more and stop.
    ///
    /// ```
    /// use evloop::{Loop, RunMode, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop<Vec<u128>> = Loop::with_backend(Sim::new().backend());
    /// lp.timer(Duration::from_millis(10), Duration::from_millis(10), |lp, log, me| {
    ///     log.push(lp.now().as_millis());
    ///     if log.len() == 2 {
    ///         me.set_repeat(lp, Duration::from_millis(50)).unwrap(); // from the next expiry on
    ///     }
    ///     if log.len() == 4 {
    ///         lp.stop(me).unwrap();
    ///     }
    /// }).unwrap();
    /// let mut log = vec![];
    /// lp.run(RunMode::Default, &mut log).unwrap();
    /// // The tick after the change was already scheduled 10 ms on.
    /// assert_eq!(log, [10, 20, 30, 80]);
    /// ```
    pub fn set_repeat<S>(self, lp: &mut Loop<'_, S>, repeat: Duration) -> Result<()> {
        lp.entry(&self)?;
        lp.timers.set_repeat(&mut lp.registry, self.0.slot, repeat);
        Ok(())
    }

    /// Time until an active timer fires (zero if it is due or inactive),
    /// relative to [`Loop::now`]; `Duration::MAX` if it never will (its
    /// deadline lies beyond the end of the loop's clock, about 584 years
    /// after the backend's origin).
    ///
    /// ```
    /// use evloop::{Loop, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let t = lp.timer(Duration::from_millis(1500), Duration::ZERO, |_, _, _| {}).unwrap();
    /// assert_eq!(t.remaining(&lp).unwrap(), Duration::from_millis(1500));
    /// lp.stop(t).unwrap();
    /// assert_eq!(t.remaining(&lp).unwrap(), Duration::ZERO);
    /// ```
    pub fn remaining<S>(self, lp: &Loop<'_, S>) -> Result<Duration> {
        if !lp.entry(&self)?.is_active() {
            return Ok(Duration::ZERO);
        }
        Ok(lp.timers.remaining(&lp.registry, self.0.slot))
    }
}

/// A [`Timer::once`] callback: the watcher is removed as it fires.
struct TimerOnce<F>(Option<F>);

impl<'s, S, F> Dispatch<'s, S> for TimerOnce<F>
where
    F: FnOnce(&mut Loop<'s, S>, &mut S),
{
    fn call(
        &mut self,
        lp: &mut Loop<'s, S>,
        state: &mut S,
        slot: Slot,
        version: u32,
        _ready: Ready,
    ) {
        let Some(cb) = self.0.take() else { return };
        // Removed first: the callback may reuse the slot, and its handle
        // is stale for anyone who kept it. (The emptied box is dropped
        // when the call returns, the watcher being gone.)
        let _ = lp.remove(Timer(lp.registry.key(slot, version)));
        cb(lp, state)
    }
}
