//! Fork watchers: invoked after [`Loop::reinit_after_fork`], before the
//! next iteration's prepare watchers (the loop's `forks` list).

use crate::handle::handle;
use crate::registry::Kind;
use crate::watchers::plain::Plain;
use crate::{Loop, Result};

handle!(
    /// Handle to a fork watcher, returned by [`Loop::fork`].
    ///
    /// ```
    /// use evloop::{Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let f = lp.fork(|_, _, _| {}).unwrap();
    /// assert!(lp.is_active(f).unwrap());
    /// ```
    Fork,
    "fork",
    false
);

impl<'s, S> Loop<'s, S> {
    /// Creates and starts a fork watcher: its callback runs in the child
    /// after [`Loop::reinit_after_fork`], at the start of the next `run`
    /// (before its prepare watchers), to re-create what a child must not
    /// share with its parent (libev's `ev_fork`).
    ///
    /// ```
    /// use evloop::{Loop, RunMode, Sim};
    /// let mut lp: Loop<Vec<&str>> = Loop::with_backend(Sim::new().backend());
    /// lp.fork(|lp, log, me| { log.push("fork"); lp.remove(me).unwrap(); }).unwrap();
    /// lp.prepare(|lp, log, me| { log.push("prepare"); lp.remove(me).unwrap(); }).unwrap();
    /// lp.reinit_after_fork().unwrap(); // in the child, after fork()
    /// let mut log = vec![];
    /// lp.run(RunMode::Default, &mut log).unwrap();
    /// assert_eq!(log, ["fork", "prepare"]);
    /// ```
    pub fn fork<F>(&mut self, callback: F) -> Result<Fork>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, Fork) + 's,
    {
        let key = self
            .watchers
            .insert(Kind::Fork, Plain::<Fork, F>::boxed(callback));
        self.activate(key.slot);
        Ok(Fork(key))
    }
}
