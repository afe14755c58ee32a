//! The phase hooks: prepare, check and fork watchers (a list each, queued
//! whole in their phase: before the poll, after it, at the first `run`
//! after `fork()`), and idle watchers (a list per priority, and libev's
//! rule for which of them run in an iteration). Each is a [`Kind`]; none
//! produces events of its own.

use std::marker::PhantomData;
use std::time::Duration;

use crate::handle::{handle, sealed::Sealed};
use crate::kind::{Context, Kind, Phase, Phases, Watcher};
use crate::kinds::rank;
use crate::pending::Priority;
use crate::slot_list::SlotList;
use crate::watchers::plain::Plain;
use crate::{Loop, Result};

/// What tells the three list hooks apart.
pub(crate) trait Hook: 'static {
    const NAME: &'static str;
    /// The phase it is queued in (none for fork watchers: they are queued
    /// after `fork()`).
    const PHASES: Phases;
}

/// The watchers of one list hook, in start order.
pub(crate) struct Hooks<H> {
    list: SlotList,
    hook: PhantomData<H>,
}

impl<H> Default for Hooks<H> {
    fn default() -> Self {
        Hooks {
            list: SlotList::default(),
            hook: PhantomData,
        }
    }
}

impl<H: Hook> Kind for Hooks<H> {
    const NAME: &'static str = H::NAME;
    const PHASES: Phases = H::PHASES;
    const PRODUCES_EVENTS: bool = false;

    fn start(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) -> Result<bool> {
        self.list.push(cx.links(), w.slot());
        Ok(true)
    }

    fn stop(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) {
        self.list.remove(cx.links(), w.slot());
    }

    fn phase(&mut self, cx: &mut Context<'_>, _: Phase) {
        cx.queue_list(self.list);
    }

    fn after_fork(&mut self, cx: &mut Context<'_>) -> Result<()> {
        if H::NAME == ForkHook::NAME {
            // Fork watchers run first thing in the next `run`.
            cx.queue_list(self.list);
        }
        Ok(())
    }
}

pub(crate) struct PrepareHook;
impl Hook for PrepareHook {
    const NAME: &'static str = "prepare";
    const PHASES: Phases = Phases::PREPARE;
}

pub(crate) struct CheckHook;
impl Hook for CheckHook {
    const NAME: &'static str = "check";
    const PHASES: Phases = Phases::CHECK;
}

pub(crate) struct ForkHook;
impl Hook for ForkHook {
    const NAME: &'static str = "fork";
    const PHASES: Phases = Phases::NONE;
}

/// Idle watchers: a list per priority, and the level chosen for this
/// iteration.
#[derive(Default)]
pub(crate) struct Idles {
    /// One list per priority, in start order.
    lists: [SlotList; Priority::COUNT],
    /// Active idle watchers in all.
    count: usize,
    /// The priority whose idle watchers run in this iteration, unless an
    /// expired timer at or above it holds them back (decided in the check
    /// phase, before this iteration's check watchers are queued: they do
    /// not hold idles back, as in libev).
    level: Option<Priority>,
}

impl Kind for Idles {
    const NAME: &'static str = "idle";
    const PHASES: Phases = Phases::CHECK.union(Phases::IDLE);
    const PRODUCES_EVENTS: bool = false;

    fn start(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) -> Result<bool> {
        let p = cx.entries.priority(w.slot());
        self.lists[p.index()].push(cx.links(), w.slot());
        self.count += 1;
        Ok(true)
    }

    fn stop(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) {
        let p = cx.entries.priority(w.slot());
        self.lists[p.index()].remove(cx.links(), w.slot());
        self.count -= 1;
    }

    /// It moves to the end of the new priority's list.
    fn priority_changed(&mut self, cx: &mut Context<'_>, w: Watcher<Self>, from: i32, to: i32) {
        let (Some(from), Some(to)) = (Priority::from_user(from), Priority::from_user(to)) else {
            return;
        };
        self.lists[from.index()].remove(cx.links(), w.slot());
        self.lists[to.index()].push(cx.links(), w.slot());
    }

    /// libev's idle rule: the idle watchers of the highest priority that
    /// has any run, unless something is pending at that priority or above.
    /// One priority level per iteration, so an idle watcher of a high
    /// priority runs while lower work is pending, and a low one waits for
    /// everything above it. Decided in the check phase (queued work, or a
    /// direct batch's io events at the default priority, hold it back);
    /// in the idle phase, timers and deadlines that expired meanwhile at
    /// or above it still do.
    fn phase(&mut self, cx: &mut Context<'_>, phase: Phase) {
        if self.count == 0 {
            self.level = None;
            return;
        }
        match phase {
            Phase::Check => {
                self.level = Priority::descending()
                    .find(|&p| !self.lists[p.index()].is_empty())
                    .filter(|&p| {
                        !(cx.pending().has_live_at_or_above(p)
                            || (p <= Priority::DEFAULT && cx.batch_busy))
                    });
            }
            _ => {
                if let Some(p) = self.level.take() {
                    if cx.expired.is_none_or(|t| t < p) {
                        cx.queue_list(self.lists[p.index()]);
                    }
                }
            }
        }
    }

    /// While one is active the loop never blocks.
    fn wait(&mut self, _: &mut Context<'_>) -> Option<Duration> {
        (self.count > 0).then_some(Duration::ZERO)
    }

    fn has_deadline(&self) -> bool {
        self.count > 0
    }
}

handle!(
    /// Handle to a prepare watcher, returned by [`Prepare::new`].
    ///
    /// ```
    /// use evloop::{Loop, Prepare, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let p = Prepare::new(&mut lp, |_, _, _| {}).unwrap();
    /// assert!(lp.is_active(p).unwrap());
    /// ```
    Prepare,
    "prepare",
    false
);

handle!(
    /// Handle to a check watcher, returned by [`Check::new`].
    ///
    /// ```
    /// use evloop::{Check, Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let c = Check::new(&mut lp, |_, _, _| {}).unwrap();
    /// assert!(lp.is_active(c).unwrap());
    /// ```
    Check,
    "check",
    false
);

handle!(
    /// Handle to an idle watcher, returned by [`Idle::new`].
    ///
    /// ```
    /// use evloop::{Idle, Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let idle = Idle::new(&mut lp, |lp, _, me| lp.remove(me).unwrap()).unwrap();
    /// lp.run(evloop::RunMode::Default, &mut ()).unwrap();
    /// assert!(lp.is_active(idle).is_err());
    /// ```
    Idle,
    "idle",
    false
);

handle!(
    /// Handle to a fork watcher, returned by `Fork::new` (Unix only).
    ///
    /// ```
    /// use evloop::{Fork, Loop, Sim};
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let f = Fork::new(&mut lp, |_, _, _| {}).unwrap();
    /// assert!(lp.is_active(f).unwrap());
    /// ```
    Fork,
    "fork",
    false
);

/// Creates and starts a watcher of one of these kinds (starting one
/// cannot fail).
fn hook<'s, S, K, H, F>(lp: &mut Loop<'s, S>, rank: u32, callback: F) -> Result<H>
where
    K: Kind + Default,
    H: Sealed + 's,
    F: FnMut(&mut Loop<'s, S>, &mut S, H) + 's,
{
    let key = lp.create::<K>(rank, Plain::<H, F>::boxed(callback), |_, _| {})?;
    Ok(H::from_key(key))
}

impl Prepare {
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
    /// use evloop::{Loop, Prepare, RunMode, Sim};
    /// let mut lp: Loop<u32> = Loop::with_backend(Sim::new().backend());
    /// Prepare::new(&mut lp, |lp, n, me| { *n += 1; lp.remove(me).unwrap(); }).unwrap();
    /// let mut n = 0;
    /// lp.run(RunMode::Default, &mut n).unwrap();
    /// assert_eq!(n, 1);
    /// ```
    pub fn new<'s, S, F>(lp: &mut Loop<'s, S>, callback: F) -> Result<Prepare>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, Prepare) + 's,
    {
        hook::<_, Hooks<PrepareHook>, Prepare, F>(lp, rank::PREPARE, callback)
    }
}

impl Check {
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
    /// use evloop::{Check, Loop, RunMode, Sim};
    /// let mut lp: Loop<u32> = Loop::with_backend(Sim::new().backend());
    /// Check::new(&mut lp, |lp, n, me| { *n += 1; lp.remove(me).unwrap(); }).unwrap();
    /// let mut n = 0;
    /// lp.run(RunMode::NoWait, &mut n).unwrap();
    /// assert_eq!(n, 1);
    /// ```
    pub fn new<'s, S, F>(lp: &mut Loop<'s, S>, callback: F) -> Result<Check>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, Check) + 's,
    {
        hook::<_, Hooks<CheckHook>, Check, F>(lp, rank::CHECK, callback)
    }
}

impl Idle {
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
    /// use evloop::{Idle, Loop, RunMode, Sim};
    /// let mut lp: Loop<u32> = Loop::with_backend(Sim::new().backend());
    /// Idle::new(&mut lp, |lp, n, me| { *n += 1; if *n == 3 { lp.stop(me).unwrap(); } }).unwrap();
    /// let mut n = 0;
    /// lp.run(RunMode::Default, &mut n).unwrap();
    /// assert_eq!(n, 3);
    /// ```
    pub fn new<'s, S, F>(lp: &mut Loop<'s, S>, callback: F) -> Result<Idle>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, Idle) + 's,
    {
        hook::<_, Idles, Idle, F>(lp, rank::IDLE, callback)
    }
}

impl Fork {
    /// Creates and starts a fork watcher: its callback runs in the child
    /// after [`Loop::reinit_after_fork`], at the start of the next `run`
    /// (before its prepare watchers), to re-create what a child must not
    /// share with its parent (libev's `ev_fork`).
    ///
    /// Unix only: Windows has no `fork()`, and there the method does not
    /// exist (a program that calls it does not compile). On WASI, which
    /// has no `fork()` either, it returns [`Error::Backend`](crate::Error::Backend)
    /// naming WASI on every backend but a simulated one (virtual fds),
    /// whose `reinit_after_fork` simulates a fork.
    ///
    /// ```
    /// use evloop::{Fork, Loop, Prepare, RunMode, Sim};
    /// let mut lp: Loop<Vec<&str>> = Loop::with_backend(Sim::new().backend());
    /// Fork::new(&mut lp, |lp, log, me| { log.push("fork"); lp.remove(me).unwrap(); }).unwrap();
    /// Prepare::new(&mut lp, |lp, log, me| { log.push("prepare"); lp.remove(me).unwrap(); }).unwrap();
    /// lp.reinit_after_fork().unwrap(); // in the child, after fork()
    /// let mut log = vec![];
    /// lp.run(RunMode::Default, &mut log).unwrap();
    /// assert_eq!(log, ["fork", "prepare"]);
    /// ```
    #[cfg(any(unix, target_os = "wasi"))]
    pub fn new<'s, S, F>(lp: &mut Loop<'s, S>, callback: F) -> Result<Fork>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, Fork) + 's,
    {
        // A watcher that could never run is refused, not kept silently.
        #[cfg(target_os = "wasi")]
        if !lp.capabilities().virtual_fds {
            return Err(crate::Error::Backend {
                backend: lp.backend_name(),
                op: "watch for forks",
                source: crate::backends::wasi::refused(
                    "has no fork: a guest cannot start another process, so a fork watcher \
                     would never run",
                ),
            });
        }
        hook::<_, Hooks<ForkHook>, Fork, F>(lp, rank::FORK, callback)
    }
}
