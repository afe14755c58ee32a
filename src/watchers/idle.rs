//! Idle watchers: the handle and the `Loop` method. The idle rule is the
//! idle component's, idles.rs.

use crate::handle::handle;
use crate::registry::Kind;
use crate::watchers::plain::Plain;
use crate::{Loop, Result};

handle!(
    /// Handle to an idle watcher, returned by [`Loop::idle`].
    ///
    /// ```
    /// use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let idle = lp.idle(|lp, _, me| lp.remove(me).unwrap()).unwrap();
    /// lp.run(evloop::RunMode::Default, &mut ()).unwrap();
    /// assert!(lp.is_active(idle).is_err());
    /// ```
    Idle,
    "idle",
    false
);

impl<'s, S> Loop<'s, S> {
    /// Creates and starts an idle watcher, for work to do when the loop has
    /// nothing more urgent; while one is active the loop never blocks.
    ///
    /// libev's rule decides which idle watchers run in an iteration: those
    /// of the highest priority that has any, and only if no io event,
    /// expired timer or other callback is pending at that priority or
    /// above (the iteration's check watchers aside). So a priority-2 idle
    /// watcher runs even while priority-0 work is pending, a priority -1
    /// one waits until everything above it is done, and one priority level
    /// runs per iteration.
    ///
    /// ```
    /// use evloop::{Loop, RunMode, Sim};
    /// let mut lp: Loop<u32> = Loop::with_backend(Sim::new().backend());
    /// lp.idle(|lp, n, me| { *n += 1; if *n == 3 { lp.stop(me).unwrap(); } }).unwrap();
    /// let mut n = 0;
    /// lp.run(RunMode::Default, &mut n).unwrap();
    /// assert_eq!(n, 3);
    /// ```
    pub fn idle<F>(&mut self, callback: F) -> Result<Idle>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, Idle) + 's,
    {
        let key = self
            .watchers
            .insert(Kind::Idle, Plain::<Idle, F>::boxed(callback));
        self.activate(key.slot);
        Ok(Idle(key))
    }
}
