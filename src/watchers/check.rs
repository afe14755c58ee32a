//! Check watchers: queued after every poll (the loop's `checks` list,
//! event_loop.rs).

use crate::handle::handle;
use crate::registry::Kind;
use crate::watchers::plain::Plain;
use crate::{Loop, Result};

handle!(
    /// Handle to a check watcher, returned by [`Loop::check`].
    ///
    /// ```
    /// use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let c = lp.check(|_, _, _| {}).unwrap();
    /// assert!(lp.is_active(c).unwrap());
    /// ```
    Check,
    "check",
    false
);

impl<'s, S> Loop<'s, S> {
    /// Creates and starts a check watcher: queued after every poll, after
    /// that iteration's io events and before its expired timers and idle
    /// watchers; within one priority it runs in that order (libuv's and
    /// Node's: `setImmediate` before `setTimeout(0)`).
    ///
    /// It keeps the loop alive (as in libev and libuv) but causes no
    /// iteration itself: with only prepare and check watchers active, `run`
    /// runs one iteration without waiting and returns
    /// [`RunOutcome::Stalled`](crate::RunOutcome::Stalled) rather than wait
    /// forever for an event nothing can produce.
    ///
    /// ```
    /// use evloop::{Loop, RunMode, Sim};
    /// let mut lp: Loop<u32> = Loop::with_backend(Sim::new().backend());
    /// lp.check(|lp, n, me| { *n += 1; lp.remove(me).unwrap(); }).unwrap();
    /// let mut n = 0;
    /// lp.run(RunMode::NoWait, &mut n).unwrap();
    /// assert_eq!(n, 1);
    /// ```
    pub fn check<F>(&mut self, callback: F) -> Result<Check>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, Check) + 's,
    {
        let key = self
            .watchers
            .insert(Kind::Check, Plain::<Check, F>::boxed(callback));
        self.activate(key.slot);
        Ok(Check(key))
    }
}
