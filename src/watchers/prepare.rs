//! Prepare watchers: invoked at the start of every iteration (the loop's
//! `prepares` list, event_loop.rs).

use crate::handle::handle;
use crate::registry::Kind;
use crate::watchers::plain::Plain;
use crate::{Loop, Result};

handle!(
    /// Handle to a prepare watcher, returned by [`Loop::prepare`].
    ///
    /// ```
    /// use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let p = lp.prepare(|_, _, _| {}).unwrap();
    /// assert!(lp.is_active(p).unwrap());
    /// ```
    Prepare,
    "prepare",
    false
);

impl<'s, S> Loop<'s, S> {
    /// Creates and starts a prepare watcher: invoked at the start of every
    /// iteration, before fd changes reach the backend and before blocking.
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
    /// lp.prepare(|lp, n, me| { *n += 1; lp.remove(me).unwrap(); }).unwrap();
    /// let mut n = 0;
    /// lp.run(RunMode::Default, &mut n).unwrap();
    /// assert_eq!(n, 1);
    /// ```
    pub fn prepare<F>(&mut self, callback: F) -> Result<Prepare>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, Prepare) + 's,
    {
        let key = self
            .watchers
            .insert(Kind::Prepare, Plain::<Prepare, F>::boxed(callback));
        self.activate(key.slot);
        Ok(Prepare(key))
    }
}
