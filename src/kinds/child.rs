//! Child watchers: the component (the active watchers of each watched
//! pid, the watchers of any child, and the exits each one was told of),
//! its [`Kind`] impl, the handle, what a callback receives
//! ([`ChildEvent`]), and the `Loop` methods (a watcher of one pid, of any
//! child, a child spawned and watched at once, a signal sent to a watched
//! child). Reaping and signalling are the backend's.
//!
//! The backend reaps a watched child when it exits and reports it once
//! (other loops watching the same pid are told by their own backends:
//! backends/unix/children.rs); in [`Phase::Polled`], after the signals,
//! every watcher of that pid is stopped and queued with the exit, whatever
//! its status, `ExitStatus::Unknown` (reaped by someone else) included, so
//! that no watcher waits for ever.
//!
//! A watcher of any child (libev's pid 0) stays active: each exit the
//! backend reports is appended to its backlog and the watcher queued
//! (after the watchers of that pid); its callback takes one exit per call
//! ([`Children::next_exit`]) and is queued again while more wait, so that
//! two children exiting in one iteration are two calls, never one.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::process::Command;

use crate::backend::ChildExit;
use crate::event_loop::Dispatch;
use crate::handle::handle;
use crate::kind::{Context, Kind, Phase, Phases, Watcher};
use crate::kinds::rank;
use crate::kinds::signal::LAST_SIGNAL;
use crate::slot_list::{Slot, SlotList};
use crate::{Error, ExitStatus, Loop, Ready, Result, Spawned};

/// The child watchers of a loop.
#[derive(Default)]
pub(crate) struct Children {
    /// What each watcher watches (stopped ones included): a pid, or any
    /// child (`None`).
    watches: HashMap<Slot, Option<u32>>,
    /// A watcher of a child that the backend watches already (spawned by
    /// it), until it starts.
    prewatched: Option<Slot>,
    /// The active watchers of each watched pid, in start order.
    by_pid: HashMap<u32, SlotList>,
    /// The active watchers of any child, in start order.
    any: SlotList,
    /// The exit each watcher was last told of (what its callback reads).
    exits: HashMap<Slot, ChildExit>,
    /// The exits an any-child watcher has yet to be called for, oldest
    /// first (only while it is active).
    backlog: HashMap<Slot, VecDeque<ChildExit>>,
}

impl Children {
    /// What the watcher in `slot` watches: a pid, or any child (`None`).
    fn watches(&self, slot: Slot) -> Option<u32> {
        *self
            .watches
            .get(&slot)
            .expect("a child watcher watches something")
    }

    /// A child exited (the backend reaped it, or was told of it): the
    /// watchers of its pid are stopped and queued, each with the exit;
    /// then every any-child watcher gets it in its backlog and is queued.
    fn exited(&mut self, cx: &mut Context<'_>, exit: ChildExit) {
        let mut queued = cx.queued;
        let pending = &mut *cx.pending;
        if let Some(mut list) = self.by_pid.remove(&exit.pid) {
            let exits = &mut self.exits;
            list.drain(&mut *cx.entries, |entries, slot| {
                entries.deactivate(slot);
                exits.insert(slot, exit);
                queued = queued.max(Some(entries.priority(slot)));
                entries.queue(pending, slot, Ready::EMPTY);
            });
        }
        let backlog = &mut self.backlog;
        self.any.for_each(&mut *cx.entries, |entries, slot| {
            backlog.entry(slot).or_default().push_back(exit);
            queued = queued.max(Some(entries.priority(slot)));
            entries.queue(pending, slot, Ready::EMPTY);
        });
        cx.queued = queued;
    }

    /// For an any-child watcher about to be called: its oldest exit not
    /// yet told becomes the one it is told of (and is returned), and true
    /// if more wait after it (the caller queues it again).
    fn next_exit(&mut self, slot: Slot) -> (Option<ChildExit>, bool) {
        let Some(backlog) = self.backlog.get_mut(&slot) else {
            return (None, false);
        };
        let Some(exit) = backlog.pop_front() else {
            return (None, false);
        };
        let more = !backlog.is_empty();
        if !more {
            self.backlog.remove(&slot);
        }
        self.exits.insert(slot, exit);
        (Some(exit), more)
    }
}

impl Kind for Children {
    const NAME: &'static str = "child";
    const PHASES: Phases = Phases::POLLED;

    /// The first watcher of a pid has the backend watch it (unless it
    /// watches it already: a spawned child), the first watcher of any
    /// child has it watch every child.
    fn start(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) -> Result<bool> {
        let slot = w.slot();
        let prewatched = self.prewatched.take() == Some(slot);
        match self.watches(slot) {
            Some(pid) => {
                if !prewatched && !self.by_pid.contains_key(&pid) {
                    cx.services(|s, fds| s.watch_child(pid, fds))
                        .map_err(|source| Error::Child { pid, source })?;
                }
                self.by_pid.entry(pid).or_default().push(cx.links(), slot);
            }
            None => {
                if self.any.is_empty() {
                    let backend = cx.backend().name();
                    cx.services(|s, fds| s.watch_any_child(fds))
                        .map_err(|source| Error::Backend {
                            backend,
                            op: "watch any child",
                            source,
                        })?;
                }
                self.any.push(cx.links(), slot);
            }
        }
        Ok(true)
    }

    /// The last watcher of a pid (or of any child) has the backend stop
    /// watching it; a watcher of any child drops the exits it was not yet
    /// called for.
    fn stop(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) {
        let slot = w.slot();
        match self.watches(slot) {
            Some(pid) => {
                let Some(list) = self.by_pid.get_mut(&pid) else {
                    return;
                };
                list.remove(cx.links(), slot);
                if list.is_empty() {
                    self.by_pid.remove(&pid);
                    cx.services(|s, fds| s.unwatch_child(pid, fds));
                }
            }
            None => {
                self.any.remove(cx.links(), slot);
                self.backlog.remove(&slot);
                if self.any.is_empty() {
                    cx.services(|s, _| s.unwatch_any_child());
                }
            }
        }
    }

    fn remove(&mut self, _: &mut Context<'_>, w: Watcher<Self>) {
        let slot = w.slot();
        self.watches.remove(&slot);
        self.exits.remove(&slot);
        self.backlog.remove(&slot);
        if self.prewatched == Some(slot) {
            self.prewatched = None;
        }
    }

    /// The exits the backend reported, in their order (after the signals).
    fn phase(&mut self, cx: &mut Context<'_>, _: Phase) {
        let notices = cx.notices;
        for &exit in &notices.exits {
            self.exited(cx, exit);
        }
    }

    fn wants_notices(&self) -> bool {
        !self.by_pid.is_empty() || !self.any.is_empty()
    }

    /// The watched children are the parent's: the watchers of pids stop
    /// (the backend has forgotten the pids). The watchers of any child
    /// stay, for this process's children: what they had yet to be told
    /// (the parent's children) is dropped, and the backend watches every
    /// child again.
    fn after_fork(&mut self, cx: &mut Context<'_>) -> Result<()> {
        self.backlog.clear();
        let pending = &mut *cx.pending;
        for (_, mut list) in self.by_pid.drain() {
            list.drain(&mut *cx.entries, |entries, slot| {
                entries.deactivate(slot);
                entries.cancel(pending, slot);
            });
        }
        if !self.any.is_empty() {
            self.any.for_each(&mut *cx.entries, |entries, slot| {
                entries.cancel(pending, slot);
            });
            let backend = cx.backend().name();
            cx.services(|s, fds| s.watch_any_child(fds))
                .map_err(|source| Error::Backend {
                    backend,
                    op: "watch any child again after fork",
                    source,
                })?;
        }
        Ok(())
    }
}

handle!(
    /// Handle to a child watcher, returned by [`Child::new`],
    /// [`Child::any`] and [`Child::spawn`].
    ///
    /// ```
    /// use evloop::{Child, Loop};
    /// use std::process::Command;
    /// let worker = Command::new("true").spawn()?;
    /// let mut lp: Loop = Loop::new()?;
    /// let c = Child::new(&mut lp, worker.id(), |_, _, _| {})?;
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
/// use evloop::{Child, ExitStatus, Loop, RunMode};
/// use std::process::Command;
/// let pid = Command::new("sh").args(["-c", "kill -KILL $$"]).spawn()?.id();
/// let mut lp: Loop<Option<ExitStatus>> = Loop::new()?;
/// Child::new(&mut lp, pid, move |_, got, ev| {
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
    /// The watcher being invoked (stopped, if it watches one pid: its
    /// child is gone; still active, if it watches any child).
    pub watcher: Child,
    /// The child's process id (for a watcher of any child, the one that
    /// exited; 0 for an event fed to it with [`Loop::feed_event`]).
    pub pid: u32,
    /// How it ended ([`ExitStatus::Unknown`] if someone else reaped it
    /// first); `None` only for an event fed with [`Loop::feed_event`]
    /// before the child exited.
    pub status: Option<ExitStatus>,
}

/// A child callback, stored as a [`Dispatch`] (what it watches is its
/// kind's: one pid, or any child).
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
    fn call(
        &mut self,
        lp: &mut Loop<'s, S>,
        state: &mut S,
        slot: Slot,
        version: u32,
        _ready: Ready,
    ) {
        let key = lp.registry.key(slot, version);
        let children = lp
            .kinds
            .get_mut::<Children>()
            .expect("a child callback belongs to a child watcher");
        let exit = match children.watches(key.slot) {
            Some(pid) => children.exits.get(&key.slot).copied().ok_or(pid),
            None => {
                // One exit per call; queued again (before the call, so
                // that a panic in it loses none) while more wait.
                let (exit, more) = children.next_exit(key.slot);
                if more {
                    lp.registry.queue(&mut lp.pending, key.slot, Ready::EMPTY);
                }
                exit.ok_or(0)
            }
        };
        let ev = ChildEvent {
            watcher: Child(key),
            pid: exit.map_or_else(|pid| pid, |e| e.pid),
            status: exit.ok().map(|e| e.status),
        };
        (self.0)(lp, state, ev)
    }
}

impl Child {
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
    /// **After it fires** the watcher is stopped ([`Loop::is_active`] is
    /// false) and keeps nothing running, so it need not be removed for a
    /// [`RunMode::Default`](crate::RunMode::Default) run to return; but it
    /// stays in the loop, with its callback and what that holds, until
    /// [`Loop::remove`]d (from its own callback, say), and a program that
    /// watches a child at a time should remove each. Starting it again
    /// fails (its pid names no child any more), as does [`Child::kill`]
    /// ([`Error::ChildExited`]). (libev's child watcher stays active after
    /// its callback until the program stops it; evloop's watcher of one
    /// pid stops itself, since that pid can never exit again. The watcher
    /// of any child, [`Child::any`], stays active as libev's does.)
    ///
    /// A child's status can be read once, by whoever reaps it. If someone
    /// other than the loops reaps it first (`std::process::Child::wait`
    /// or `try_wait`, a `waitpid` of the program's, the kernel when
    /// `SIGCHLD` is ignored), its watchers are still stopped and called,
    /// with [`ExitStatus::Unknown`], so a
    /// [`RunMode::Default`](crate::RunMode::Default) run
    /// returns; if the loop reaps it first, that `wait` fails instead
    /// (`ECHILD`). So leave a watched child to the loop, or expect one of
    /// the two; [`Child::spawn`] starts a child and watches it with no
    /// `std::process::Child` to wait on. Pid 0 is refused: the watcher of
    /// any child (libev's pid 0) is [`Child::any`], which a pid cannot
    /// ask for by accident.
    ///
    /// Errors: [`Error::Child`](crate::Error::Child) if `pid` is not an
    /// unreaped child of this process, or the backend cannot watch
    /// children.
    ///
    /// ```
    /// use evloop::{Child, Loop, RunMode};
    /// use std::process::Command;
    /// let job = Command::new("sh").args(["-c", "exit 3"]).spawn()?;
    /// let mut lp: Loop<Vec<String>> = Loop::new()?;
    /// let w = Child::new(&mut lp, job.id(), |_, log, ev| log.push(ev.status.unwrap().to_string()))?;
    /// let mut log = vec![];
    /// // Returns once the child has exited: its watcher stopped, none is left.
    /// lp.run(RunMode::Default, &mut log)?;
    /// assert_eq!(log, ["exited with code 3"]);
    /// // Stopped, not removed: it still holds its slot and callback.
    /// assert!(!lp.is_active(w)? && lp.start(w).is_err());
    /// lp.remove(w)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Two loops, in two threads, watching one child: both hear it.
    ///
    /// ```
    /// use evloop::{Child, ExitStatus, Loop, RunMode};
    /// use std::process::{Command, Stdio};
    /// use std::sync::mpsc;
    /// // A child that exits with code 4 when its stdin closes.
    /// let mut job = Command::new("sh").args(["-c", "read _; exit 4"])
    ///     .stdin(Stdio::piped()).spawn()?;
    /// let pid = job.id();
    /// let (watching, started) = mpsc::channel();
    /// let other = std::thread::spawn(move || {
    ///     let mut lp: Loop<Option<ExitStatus>> = Loop::new().unwrap();
    ///     Child::new(&mut lp, pid, |_, got, ev| *got = ev.status).unwrap();
    ///     watching.send(()).unwrap();
    ///     let mut got = None;
    ///     lp.run(RunMode::Default, &mut got).unwrap();
    ///     got
    /// });
    /// let mut lp: Loop<Option<ExitStatus>> = Loop::new()?;
    /// Child::new(&mut lp, pid, |_, got, ev| *got = ev.status)?;
    /// started.recv()?; // both watch it: let it go
    /// drop(job.stdin.take());
    /// let mut got = None;
    /// lp.run(RunMode::Default, &mut got)?;
    /// assert_eq!(got, Some(ExitStatus::Exited(4)));
    /// assert_eq!(other.join().unwrap(), Some(ExitStatus::Exited(4)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new<'s, S, F>(lp: &mut Loop<'s, S>, pid: u32, callback: F) -> Result<Child>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, ChildEvent) + 's,
    {
        if pid == 0 {
            return Err(Error::Child {
                pid,
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "pid 0 names no child (a watcher of any child is Child::any)",
                ),
            });
        }
        let cb = Box::new(ChildCallback(callback));
        let key = lp.create::<Children>(rank::CHILD, cb, |children, key| {
            children.watches.insert(key.slot, Some(pid));
        })?;
        Ok(Child(key))
    }

    /// Creates and starts a watcher of *any* child (libev's child watcher
    /// of pid 0): while it is active, the backend reaps every child
    /// process of this process as it exits (`waitpid(-1)`), whoever
    /// started it, and the callback runs once per exit, with the child's
    /// pid and status in its [`ChildEvent`]. The watcher stays active
    /// after each call (as libev's does), until stopped or removed; a
    /// stop drops the exits it was not yet called for, and children that
    /// exit while it is stopped are left alone again.
    ///
    /// **It takes children from everyone else.** A child reaped by the
    /// loop has no status left for anyone: `std::process::Child::wait`
    /// (and `try_wait`, `Command::status`, `Command::output`) of a child
    /// that exits while the watcher is active fails with `ECHILD`, or
    /// returns before the loop saw it, and a library that waits for its
    /// own children breaks the same way. Use it in a program that owns
    /// all its children (a supervisor, a shell), as libev's pid 0 is
    /// used.
    ///
    /// Watchers of one pid ([`Child::new`], [`Child::spawn`]), on this loop
    /// or any other of the process, still get their child's real status:
    /// the loops share one table of watched children, and whoever reaps
    /// a child reports it to every watcher of its pid, and to every
    /// watcher of any child, each once (in a loop, the watchers of the
    /// pid run first, as in libev). The exits of children reaped by
    /// another loop's watcher of their pid reach this watcher too. A
    /// child watched by pid must be watched before it can exit: with a
    /// watcher of any child active in another thread, [`Child::new`] on a
    /// child that has already exited may find it reaped; [`Child::spawn`]
    /// cannot lose it.
    ///
    /// Works on every backend (epoll, poll, select, io_uring, kqueue:
    /// through `SIGCHLD`; the simulator: every scheduled exit, [`Sim::exit`]
    /// of any pid). After `Loop::reinit_after_fork` it keeps going in
    /// the forked child, for that process's children.
    ///
    /// Errors: [`Error::Backend`] if the backend cannot watch children
    /// (or `SIGCHLD`).
    ///
    /// [`Sim::exit`]: crate::Sim::exit
    ///
    /// ```
    /// use evloop::{Child, ExitStatus, Loop, RunMode};
    /// use std::collections::HashMap;
    /// use std::process::Command;
    /// let mut lp: Loop<HashMap<u32, ExitStatus>> = Loop::new()?;
    /// let any = Child::any(&mut lp, |_, got, ev| {
    ///     got.insert(ev.pid, ev.status.unwrap());
    /// })?;
    /// // Started with std, never waited for: the loop reaps them.
    /// let a = Command::new("sh").args(["-c", "exit 1"]).spawn()?.id();
    /// let b = Command::new("sh").args(["-c", "kill -TERM $$"]).spawn()?.id();
    /// let mut got = HashMap::new();
    /// while got.len() < 2 {
    ///     lp.run(RunMode::Once, &mut got)?;
    /// }
    /// assert_eq!(got[&a], ExitStatus::Exited(1));
    /// assert_eq!(got[&b], ExitStatus::Signaled { signal: evloop::Signal::TERM, core_dumped: false });
    /// assert!(lp.is_active(any)?, "it stays active: stop or remove it");
    /// lp.remove(any)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn any<'s, S, F>(lp: &mut Loop<'s, S>, callback: F) -> Result<Child>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, ChildEvent) + 's,
    {
        let cb = Box::new(ChildCallback(callback));
        let key = lp.create::<Children>(rank::CHILD, cb, |children, key| {
            children.watches.insert(key.slot, None);
        })?;
        Ok(Child(key))
    }

    /// Starts `command` as a child process and a watcher of it, at once:
    /// [`Child::new`] on the new pid, with no moment in between at which
    /// someone could reap it (not even a watcher of any child in another
    /// thread), and no `std::process::Child` whose `wait` would take the
    /// status from the watcher. What comes back is the watcher's handle
    /// and [`Spawned`]: the pid, and the pipes the command asked for
    /// (`Stdio::piped()`), to write to or watch with [`Loop::io`]. Send the
    /// child signals with [`Child::kill`]. The watcher behaves as any child
    /// watcher: stopped once the child has exited and its callback called;
    /// remove it when done with it.
    ///
    /// On the simulator, the command is not run: a simulated child named
    /// after its program is spawned ([`Sim::spawn`]), for the test to end
    /// with [`Sim::exit`].
    ///
    /// Errors: [`Error::Spawn`] if the command cannot be started (a
    /// missing program, say) or watched (then it is killed and reaped
    /// before this returns); nothing is left behind.
    ///
    /// [`Sim::spawn`]: crate::Sim::spawn
    /// [`Sim::exit`]: crate::Sim::exit
    ///
    /// ```
    /// use evloop::{Child, ExitStatus, Loop, RunMode};
    /// use std::io::Read;
    /// use std::process::{Command, Stdio};
    /// let mut lp: Loop<Option<ExitStatus>> = Loop::new()?;
    /// let mut job = Command::new("sh");
    /// job.args(["-c", "echo hello; exit 3"]).stdout(Stdio::piped());
    /// let (_watcher, spawned) = Child::spawn(&mut lp, &mut job, |lp, got, ev| {
    ///     *got = ev.status;
    ///     lp.remove(ev.watcher).unwrap(); // done with it
    /// })?;
    /// let mut out = String::new();
    /// spawned.stdout.unwrap().read_to_string(&mut out)?;
    /// assert_eq!(out, "hello\n");
    /// let mut got = None;
    /// lp.run(RunMode::Default, &mut got)?;
    /// assert_eq!(got, Some(ExitStatus::Exited(3)));
    /// // Nothing to start: an error, and no watcher.
    /// assert!(Child::spawn(&mut lp, &mut Command::new("/no/such/program"), |_, _, _| {}).is_err());
    /// assert_eq!(lp.active_count(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spawn<'s, S, F>(
        lp: &mut Loop<'s, S>,
        command: &mut Command,
        callback: F,
    ) -> Result<(Child, Spawned)>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, ChildEvent) + 's,
    {
        let spawned = lp
            .services(|s, fds| s.spawn_child(command, fds))
            .map_err(|source| Error::Spawn {
                program: command.get_program().to_string_lossy().into_owned(),
                source,
            })?;
        let pid = spawned.pid;
        let cb = Box::new(ChildCallback(callback));
        let key = lp.create::<Children>(rank::CHILD, cb, |children, key| {
            children.watches.insert(key.slot, Some(pid));
            // The backend watches it already: nothing to ask.
            children.prewatched = Some(key.slot);
        })?;
        Ok((Child(key), spawned))
    }

    /// Sends `signal` to the child that `watcher` watches, only while the
    /// child cannot have been reaped, so that the signal never reaches
    /// another process that has since been given its pid (which a plain
    /// `kill(pid)` after the exit could). On Linux it goes through the
    /// child's pidfd (`pidfd_send_signal`); elsewhere, and on the
    /// `SIGCHLD` fallback, `kill(2)` under the lock that every loop of the
    /// process reaps under, after checking that the child is unreaped. (A
    /// reap by someone other than the loops, `std`'s `wait` say, is not
    /// under that lock: leave watched children to the loop.) A signal to a
    /// child that has exited but is not yet reaped (a zombie) does
    /// nothing, and succeeds. `signal` 0 sends nothing and only checks.
    /// What the signal does to the child is reported by the watcher as
    /// usual (`ExitStatus::Signaled`, if it ends it).
    ///
    /// Errors: [`Error::ChildExited`] once the child has exited and been
    /// reaped (its exit reported, or about to be); [`Error::Kill`] if the
    /// watcher is stopped while the child is watched by no other watcher
    /// of this loop (the loop then cannot know whether it was reaped:
    /// start it again first), if it is a watcher of any child, or if the
    /// backend cannot send signals; [`Error::InvalidSignal`] for a number
    /// outside 0 to the platform's last; [`Error::StaleHandle`] for a
    /// removed watcher.
    ///
    /// On the simulator the signal is recorded ([`Sim::signals_sent`], a
    /// trace step) and does nothing else: the test decides what the child
    /// does ([`Sim::exit`]).
    ///
    /// [`Sim::signals_sent`]: crate::Sim::signals_sent
    /// [`Sim::exit`]: crate::Sim::exit
    ///
    /// ```
    /// use evloop::{Child, Error, ExitStatus, Loop, RunMode, Signal};
    /// use std::process::Command;
    /// let mut lp: Loop<Option<ExitStatus>> = Loop::new()?;
    /// let (job, _) = Child::spawn(&mut lp, Command::new("sleep").arg("60"), |_, got, ev| *got = ev.status)?;
    /// job.kill(&mut lp, Signal::TERM)?;
    /// let mut got = None;
    /// lp.run(RunMode::Default, &mut got)?;
    /// assert_eq!(got, Some(ExitStatus::Signaled { signal: Signal::TERM, core_dumped: false }));
    /// // Reaped: its pid may be another process's by now, so nothing is sent.
    /// let err = job.kill(&mut lp, Signal::TERM).unwrap_err();
    /// assert!(matches!(err, Error::ChildExited { .. }), "{err}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn kill<'s, S>(self, lp: &mut Loop<'s, S>, signal: i32) -> Result<()> {
        lp.entry(&self)?;
        let children = lp
            .kinds
            .get::<Children>()
            .expect("a child handle names a child self");
        let slot = self.0.slot;
        let Some(pid) = children.watches(slot) else {
            return Err(Error::Kill {
                pid: 0,
                signal,
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a self of any child names no one child to send it to",
                ),
            });
        };
        if !(0..=LAST_SIGNAL).contains(&signal) {
            return Err(Error::InvalidSignal {
                signal,
                reason: "signals are numbered from 1 to the platform's last (0: only the checks)",
            });
        }
        if !children.by_pid.contains_key(&pid) {
            if let Some(exit) = children.exits.get(&slot) {
                return Err(Error::ChildExited {
                    pid,
                    status: Some(exit.status),
                });
            }
            return Err(Error::Kill {
                pid,
                signal,
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "its self is stopped, so the loop cannot tell whether it has been reaped \
                     (and its pid reused): start the self first",
                ),
            });
        }
        lp.services(|s, _| s.signal_child(pid, signal))
            .map_err(|source| match source.kind() {
                io::ErrorKind::NotFound => Error::ChildExited { pid, status: None },
                _ => Error::Kill {
                    pid,
                    signal,
                    source,
                },
            })
    }
}
