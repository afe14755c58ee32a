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
    /// use evloop::Loop;
    /// use std::process::Command;
    /// let worker = Command::new("true").spawn()?;
    /// let mut lp: Loop = Loop::new()?;
    /// let c = lp.child(worker.id(), |_, _, _| {})?;
    /// assert!(lp.is_active(c)?);
    /// lp.run(evloop::RunMode::Default, &mut ())?; // reaps it
    /// assert!(!lp.is_active(c)?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    Child,
    "child",
    false
);

/// What a child watcher's callback receives.
///
/// ```
/// use evloop::{ExitStatus, Loop, RunMode};
/// use std::process::Command;
/// let pid = Command::new("sh").args(["-c", "kill -KILL $$"]).spawn()?.id();
/// let mut lp: Loop<Option<ExitStatus>> = Loop::new()?;
/// lp.child(pid, move |_, got, ev| {
///     assert_eq!(ev.pid, pid);
///     *got = ev.status;
/// })?;
/// let mut got = None;
/// lp.run(RunMode::Default, &mut got)?;
/// assert_eq!(got, Some(ExitStatus::Signaled { signal: libc::SIGKILL, core_dumped: false }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
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
    /// of one loop may watch one pid.
    ///
    /// Watch a child from one loop only, and do not wait for it elsewhere
    /// (`std::process::Child::wait`, `waitpid`): its status can be read
    /// once, by whoever reaps it first, and a watcher whose child was
    /// reaped by someone else is never called. There is no watcher of
    /// "any child" (libev's pid 0): pid 0 is refused like every pid that
    /// is not a child.
    ///
    /// Errors: [`Error::Child`](crate::Error::Child) if `pid` is not an
    /// unreaped child of this process, or the backend cannot watch
    /// children.
    ///
    /// ```
    /// use evloop::{Loop, RunMode};
    /// use std::process::Command;
    /// let job = Command::new("sh").args(["-c", "exit 3"]).spawn()?;
    /// let mut lp: Loop<Vec<String>> = Loop::new()?;
    /// lp.child(job.id(), |_, log, ev| log.push(ev.status.unwrap().to_string()))?;
    /// let mut log = vec![];
    /// // Returns once the child has exited: its watcher stopped, none is left.
    /// lp.run(RunMode::Default, &mut log)?;
    /// assert_eq!(log, ["exited with code 3"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
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
