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
    /// How it ended ([`ExitStatus::Unknown`] if someone else reaped it
    /// first); `None` only for an event fed with [`Loop::feed_event`]
    /// before the child exited.
    pub status: Option<ExitStatus>,
}

/// A child callback, stored as a [`Dispatch`] (the pid is the watcher's).
struct ChildCallback<F>(F);

impl crate::Callback for Child {
    type Event<'a> = ChildEvent;
}

impl crate::watchers::adapt::Adapt for Child {
    fn adapt<'s, S, F>(callback: F) -> crate::watchers::adapt::Adapted<'s, S>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, ChildEvent) + 's,
    {
        crate::watchers::adapt::Adapted(Box::new(ChildCallback(callback)))
    }
}

impl<'s, S, F> Dispatch<'s, S> for ChildCallback<F>
where
    F: FnMut(&mut Loop<'s, S>, &mut S, ChildEvent),
{
    fn call(&mut self, lp: &mut Loop<'s, S>, state: &mut S, key: Key, _ready: Ready) {
        let pid = match lp.watchers[key.slot].kind() {
            Kind::Child { pid } => pid,
            _ => unreachable!("a child callback belongs to a child watcher"),
        };
        let ev = ChildEvent {
            watcher: Child(key),
            pid,
            status: lp.children.exit_of(key.slot).map(|e| e.status),
        };
        (self.0)(lp, state, ev)
    }
}

impl<'s, S> Loop<'s, S> {
    /// Creates and starts a child watcher: when the child process `pid`
    /// exits, the backend reaps it (only it: other children are left to
    /// whoever waits for them), the watcher is stopped and its callback
    /// runs with how the child ended. A child that exited before this call
    /// is reported too. Works on any loop, in any thread.
    ///
    /// Any number of watchers may watch one child, on one loop or on many
    /// (loops in several threads, or several in one): the child is reaped
    /// once, by whichever loop's backend notices the exit first, and every
    /// watcher of it, on every loop, is stopped and called with its
    /// status; a loop blocked in another thread is woken for it.
    ///
    /// A child's status can be read once, by whoever reaps it. If someone
    /// other than the loops reaps it first (`std::process::Child::wait`
    /// or `try_wait`, a `waitpid` of the program's, the kernel when
    /// `SIGCHLD` is ignored), its watchers are still stopped and called,
    /// with [`ExitStatus::Unknown`], so a
    /// [`RunMode::Default`](crate::RunMode::Default) run
    /// returns; if the loop reaps it first, that `wait` fails instead
    /// (`ECHILD`). So leave a watched child to the loop, or expect one of
    /// the two. There is no watcher of "any child" (libev's pid 0): pid 0
    /// is refused like every pid that is not a child.
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
    ///
    /// Two loops, in two threads, watching one child: both hear it.
    ///
    /// ```
    /// use evloop::{ExitStatus, Loop, RunMode};
    /// use std::process::{Command, Stdio};
    /// use std::sync::mpsc;
    /// // A child that exits with code 4 when its stdin closes.
    /// let mut job = Command::new("sh").args(["-c", "read _; exit 4"])
    ///     .stdin(Stdio::piped()).spawn()?;
    /// let pid = job.id();
    /// let (watching, started) = mpsc::channel();
    /// let other = std::thread::spawn(move || {
    ///     let mut lp: Loop<Option<ExitStatus>> = Loop::new().unwrap();
    ///     lp.child(pid, |_, got, ev| *got = ev.status).unwrap();
    ///     watching.send(()).unwrap();
    ///     let mut got = None;
    ///     lp.run(RunMode::Default, &mut got).unwrap();
    ///     got
    /// });
    /// let mut lp: Loop<Option<ExitStatus>> = Loop::new()?;
    /// lp.child(pid, |_, got, ev| *got = ev.status)?;
    /// started.recv()?; // both watch it: let it go
    /// drop(job.stdin.take());
    /// let mut got = None;
    /// lp.run(RunMode::Default, &mut got)?;
    /// assert_eq!(got, Some(ExitStatus::Exited(4)));
    /// assert_eq!(other.join().unwrap(), Some(ExitStatus::Exited(4)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn child<F>(&mut self, pid: u32, callback: F) -> Result<Child>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, ChildEvent) + 's,
    {
        let cb = Box::new(ChildCallback(callback));
        let key = self.watchers.insert(Kind::Child { pid }, cb);
        if let Err(err) = self.can_start(key.slot) {
            self.watchers.remove(key.slot);
            return Err(err);
        }
        self.activate(key.slot);
        Ok(Child(key))
    }
}
