//! What a run is: how [`Loop::run`](crate::Loop::run) runs, how far a
//! break unwinds, why a run returned, and the loop's record of the runs in
//! progress (iterations, nesting depth, the watchers a nested run cannot
//! serve).

use crate::slot_list::Slot;

/// How [`Loop::run`](crate::Loop::run) runs.
///
/// ```
/// use evloop::{Idle, Loop, RunMode, RunOutcome, Sim};
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// Idle::new(&mut lp, |_, _, _| {}).unwrap();
/// assert_eq!(lp.run(RunMode::NoWait, &mut ()).unwrap(), RunOutcome::IterationDone);
/// assert_eq!(lp.iteration(), 1);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunMode {
    /// Iterate until no active, referenced watcher remains, or
    /// [`Loop::break_loop`](crate::Loop::break_loop) is called (libev's `ev_run(loop, 0)`).
    Default,
    /// One iteration, blocking until at least one event arrives if nothing
    /// is pending (`EVRUN_ONCE`).
    Once,
    /// One iteration that never blocks (`EVRUN_NOWAIT`).
    NoWait,
}

/// How far [`Loop::break_loop`](crate::Loop::break_loop) unwinds.
///
/// ```
/// use evloop::{Break, Idle, Loop, RunMode, RunOutcome, Sim};
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// Idle::new(&mut lp, |lp, _, _| lp.break_loop(Break::One)).unwrap();
/// assert_eq!(lp.run(RunMode::Default, &mut ()).unwrap(), RunOutcome::Broken);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Break {
    /// Make the innermost [`Loop::run`](crate::Loop::run) return.
    One,
    /// Make every nested [`Loop::run`](crate::Loop::run) return.
    All,
}

/// Why [`Loop::run`](crate::Loop::run) returned.
///
/// ```
/// use evloop::{Loop, RunMode, RunOutcome, Sim};
/// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
/// // No watchers: returns at once, without an iteration (as libuv does).
/// assert_eq!(lp.run(RunMode::Default, &mut ()).unwrap(), RunOutcome::NoActiveWatchers);
/// assert_eq!(lp.iteration(), 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    /// No active, referenced watcher is left.
    NoActiveWatchers,
    /// [`Loop::break_loop`](crate::Loop::break_loop) was called.
    Broken,
    /// The single iteration of [`RunMode::Once`] or [`RunMode::NoWait`] ended.
    IterationDone,
    /// Nothing can ever happen, so waiting would hang forever and `run`
    /// returns instead: either no active watcher can produce an event (only
    /// prepare and check watchers are left, which run around iterations and
    /// cause none: `run` returns after an iteration that runs them without
    /// waiting), or the backend knows it (a simulator: io watchers are
    /// active, no timer is armed and no event is scheduled).
    Stalled,
}

/// Where the loop is in its runs.
#[derive(Default)]
pub(crate) struct RunState {
    /// Iterations so far (polls).
    pub iteration: u64,
    /// `run` calls executing (nested ones count).
    pub depth: u32,
    pub break_req: Option<Break>,
    /// Per nested `run` in progress (innermost last): the watchers whose
    /// callbacks were running when it started.
    pub suspended: Vec<Vec<Slot>>,
    /// What the innermost `run` in progress is doing, for the queries its
    /// callbacks make (outside `run`: the default).
    pub phase: RunPhase,
    /// An error the loop's machinery met inside a callback's dispatch (an
    /// embed watcher's fd refused by the backend): the next `run` (or
    /// the one in progress, once the iteration's callbacks ran) returns
    /// it.
    pub failure: Option<crate::Error>,
}

/// The mode of the innermost `run` in progress, and whether it is invoking
/// its prepare watchers (then everything pending runs before the poll).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunPhase {
    pub mode: RunMode,
    pub preparing: bool,
}

impl Default for RunPhase {
    fn default() -> Self {
        RunPhase {
            mode: RunMode::Default,
            preparing: false,
        }
    }
}

impl RunState {
    /// Counts an iteration starting (`Loop::iteration`).
    #[inline]
    pub fn next_iteration(&mut self) {
        self.iteration += 1;
        tracing::trace!(iteration = self.iteration, depth = self.depth, "iteration");
    }
}
