//! Child watchers: the handle, what a callback receives
//! ([`ChildEvent`]), and the `Loop` method. The watchers of each pid and
//! their exits are the child component's (children.rs); reaping is the
//! backend's.

use crate::event_loop::Dispatch;
use crate::handle::{handle, Key};
use crate::registry::Kind;
use crate::{ExitStatus, Loop, Ready, Result};

handle!(
    /// Handle to a child watcher, returned by [`Loop::child`].
    ///
    /// ```
    /// use evloop::{Loop, Sim};
    /// let sim = Sim::new();
    /// let pid = sim.spawn("worker");
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let c = lp.child(pid, |_, _, _| {}).unwrap();
    /// assert!(lp.is_active(c).unwrap());
    /// ```
    Child,
    "child",
    false
);

/// What a child watcher's callback receives.
///
/// ```
/// use evloop::{ExitStatus, Loop, RunMode, Sim};
/// use std::time::Duration;
/// let sim = Sim::new();
/// let pid = sim.spawn("worker");
/// sim.exit(Duration::from_millis(3), pid, ExitStatus::Exited(7));
/// let mut lp: Loop<Option<ExitStatus>> = Loop::with_backend(sim.backend());
/// lp.child(pid, move |_, got, ev| {
///     assert_eq!(ev.pid, pid);
///     *got = ev.status;
/// }).unwrap();
/// let mut got = None;
/// lp.run(RunMode::Default, &mut got).unwrap();
/// assert_eq!(got, Some(ExitStatus::Exited(7)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChildEvent {
    /// The watcher being invoked (stopped: its child is gone).
    pub watcher: Child,
    /// The child's process id.
    pub pid: u32,
    /// How it ended; `None` only for an event fed with
    /// [`Loop::feed_event`] before the child exited.
    pub status: Option<ExitStatus>,
}

/// A child callback, stored as a [`Dispatch`].
struct ChildCallback<F> {
    pid: u32,
    cb: F,
}

impl<'s, S, F> Dispatch<'s, S> for ChildCallback<F>
where
    F: FnMut(&mut Loop<'s, S>, &mut S, ChildEvent),
{
    fn call(&mut self, lp: &mut Loop<'s, S>, state: &mut S, key: Key, _ready: Ready) {
        let ev = ChildEvent {
            watcher: Child(key),
            pid: self.pid,
            status: lp.children.exit_of(key.slot).map(|e| e.status),
        };
        (self.cb)(lp, state, ev)
    }
}

impl<'s, S> Loop<'s, S> {
    /// Creates and starts a child watcher: when the child process `pid`
    /// exits, the backend reaps it (only it: other children are left to
    /// whoever waits for them), the watcher is stopped and its callback
    /// runs with how the child ended. A child that exited before this call
    /// is reported too. Works on any loop, in any thread; several watchers
    /// may watch one pid.
    ///
    /// Errors: [`Error::Child`](crate::Error::Child) if `pid` is not an
    /// unreaped child of this process, or the backend cannot watch
    /// children.
    ///
    /// ```
    /// use evloop::{ExitStatus, Loop, RunMode, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let pid = sim.spawn("job");
    /// sim.exit(Duration::from_millis(10), pid, ExitStatus::Exited(0));
    /// let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    /// lp.child(pid, |lp, log, ev| {
    ///     log.push(format!("{} {} at {:?}", ev.pid, ev.status.unwrap(), lp.now()));
    /// }).unwrap();
    /// let mut log = vec![];
    /// lp.run(RunMode::Default, &mut log).unwrap();
    /// assert_eq!(log, [format!("{pid} exited with code 0 at 10ms")]);
    /// ```
    pub fn child<F>(&mut self, pid: u32, callback: F) -> Result<Child>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, ChildEvent) + 's,
    {
        let cb = Box::new(ChildCallback { pid, cb: callback });
        let key = self.watchers.insert(Kind::Child { pid }, cb);
        if let Err(err) = self.can_start(key.slot) {
            self.watchers.remove(key.slot);
            return Err(err);
        }
        self.activate(key.slot);
        Ok(Child(key))
    }
}
