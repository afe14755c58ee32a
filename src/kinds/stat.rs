//! Stat watchers, a [`Kind`]: watched paths, what each was last seen as,
//! when each is looked at next, the handle, what a callback receives
//! ([`StatEvent`]) and the `Loop` methods.
//!
//! A stat watcher is correct on its own by polling: its path is looked at
//! every interval (a heap of monotonic times, like the timers'). Where the
//! backend can hint at changes (inotify, kqueue's `EVFILT_VNODE`), it
//! reports the watcher's token ([`Notices::paths`](crate::backend::Notices), taken
//! in [`Phase::Polled`]) and the path is looked at at once. A change is any
//! difference in the attributes, nanoseconds of the modification time
//! included (libev compares whole seconds and misses quick edits). Paths
//! are looked at in [`Phase::Expire`], after the timers and periodics.

use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use crate::event_loop::Dispatch;
use crate::handle::handle;
use crate::kind::{Context, Kind, Phase, Phases, Watcher};
use crate::kinds::rank;
use crate::slot_list::Slot;
use crate::timer_heap::OwnTimerHeap;
use crate::timers::{from_ns, to_ns};
use crate::{FileStat, Loop, Ready, Result};

/// The interval when none is given (libev's).
pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
/// The shortest interval (libev's): polling faster costs more than it finds.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(100);

pub(crate) struct Watched {
    /// Shared with the watcher's callback, which hands it to the user in
    /// each [`StatEvent`].
    pub path: Rc<Path>,
    interval: u64,
    /// What the last look before the current one saw.
    pub previous: FileStat,
    /// What the last look saw.
    pub current: FileStat,
    /// Reported by the backend's hints.
    token: u64,
}

#[derive(Default)]
pub(crate) struct Stats {
    heap: OwnTimerHeap,
    watched: HashMap<Slot, Watched>,
    by_token: HashMap<u64, Slot>,
    next_token: u64,
    active: usize,
    /// Hinted tokens not yet looked at, and a scratch list of due
    /// watchers (both kept for their capacity).
    hints: Vec<u64>,
    due: Vec<Slot>,
}

impl Stats {
    /// A new stat watcher in `slot`; returns its token for the backend's
    /// hints. The interval is clamped ([`DEFAULT_INTERVAL`] for zero, at
    /// least [`MIN_INTERVAL`]).
    fn configure(&mut self, slot: Slot, path: Rc<Path>, interval: Duration) -> u64 {
        let interval = match interval {
            Duration::ZERO => DEFAULT_INTERVAL,
            i => i.max(MIN_INTERVAL),
        };
        self.next_token += 1;
        let token = self.next_token;
        self.heap.add(slot);
        self.watched.insert(
            slot,
            Watched {
                path,
                interval: to_ns(interval),
                previous: FileStat::MISSING,
                current: FileStat::MISSING,
                token,
            },
        );
        self.by_token.insert(token, slot);
        token
    }

    fn get(&self, slot: Slot) -> Option<&Watched> {
        self.watched.get(&slot)
    }

    /// The watcher a hint names, if it is active.
    fn hinted(&self, token: u64) -> Option<Slot> {
        self.by_token
            .get(&token)
            .copied()
            .filter(|&s| self.heap.contains(s))
    }

    /// The active watchers to look at now: those hinted at, then those due
    /// at `now`, each once. The caller gives the list back
    /// ([`Stats::done_looking`]).
    fn take_due(&mut self, now: u64) -> Vec<Slot> {
        let mut out = std::mem::take(&mut self.due);
        let hints = std::mem::take(&mut self.hints);
        for &token in &hints {
            if let Some(slot) = self.hinted(token) {
                if !out.contains(&slot) {
                    out.push(slot);
                }
            }
        }
        self.hints = hints;
        self.hints.clear();
        self.due_at(now, &mut out);
        out
    }

    /// Gives the list of [`Stats::take_due`] back.
    fn done_looking(&mut self, mut list: Vec<Slot>) {
        list.clear();
        self.due = list;
    }

    /// The active watchers due for a look at `now`.
    fn due_at(&mut self, now: u64, out: &mut Vec<Slot>) {
        while self.heap.earliest_bound().is_some_and(|at| at <= now) {
            let Some(top) = self.heap.peek() else { break };
            if top.at > now {
                break;
            }
            if !out.contains(&top.slot) {
                out.push(top.slot);
            }
            // Looked at now: next look an interval on (a hint may come
            // sooner).
            self.reschedule(top.slot, now);
        }
    }

    fn reschedule(&mut self, slot: Slot, now: u64) {
        let Some(w) = self.watched.get(&slot) else {
            return;
        };
        self.heap.arm(slot, now.saturating_add(w.interval));
    }

    /// The path of watcher `slot` looks like `seen` now (at `now`): if that
    /// differs from the last look, the watcher is queued (its callback
    /// reads both), and looked at again an interval later.
    fn looked(&mut self, slot: Slot, seen: FileStat, now: u64, cx: &mut Context<'_>) {
        let Some(w) = self.watched.get_mut(&slot) else {
            return;
        };
        if seen == w.current {
            return;
        }
        w.previous = std::mem::replace(&mut w.current, seen);
        self.reschedule(slot, now);
        cx.queue_slot(slot, Ready::EMPTY);
    }

    /// Looks at the paths of the watchers hinted at or due, and queues
    /// those that changed.
    fn look_at_paths(&mut self, cx: &mut Context<'_>) {
        let now = cx.timers().now();
        let slots = self.take_due(now);
        for &slot in &slots {
            let Some(w) = self.watched.get(&slot) else {
                continue;
            };
            let seen = cx.services(|s, _| s.stat(&w.path));
            self.looked(slot, seen, now, cx);
        }
        self.done_looking(slots);
    }
}

impl Kind for Stats {
    const NAME: &'static str = "stat";
    /// Hints are taken after the poll; paths are looked at after the
    /// timers and periodics.
    const PHASES: Phases = Phases::POLLED.union(Phases::EXPIRE);
    /// (Bounded by its next look, [`Kind::has_deadline`], as a timer is.)
    const PRODUCES_EVENTS: bool = false;

    /// The backend is asked to hint at changes of the path (welcome, not
    /// needed: without hints, polling), and the path is looked at: the
    /// baseline later looks are compared with.
    fn start(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) -> Result<bool> {
        let slot = w.slot();
        let now = cx.timers().now();
        let Some(watched) = self.watched.get_mut(&slot) else {
            return Ok(true);
        };
        let _ = cx.services(|s, fds| s.watch_path(&watched.path, watched.token, fds));
        let seen = cx.services(|s, _| s.stat(&watched.path));
        watched.current = seen;
        watched.previous = seen;
        let next = now.saturating_add(watched.interval);
        self.heap.arm(slot, next);
        self.active += 1;
        Ok(true)
    }

    fn stop(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) {
        self.heap.remove(w.slot());
        self.active -= 1;
        if let Some(watched) = self.watched.get(&w.slot()) {
            cx.services(|s, fds| s.unwatch_path(watched.token, fds));
        }
    }

    fn remove(&mut self, _: &mut Context<'_>, w: Watcher<Self>) {
        self.heap.discard(w.slot());
        if let Some(watched) = self.watched.remove(&w.slot()) {
            self.by_token.remove(&watched.token);
        }
    }

    fn phase(&mut self, cx: &mut Context<'_>, phase: Phase) {
        if self.active == 0 {
            // (A hint names an active watcher: none to look at.)
            return;
        }
        match phase {
            Phase::Polled => self.hints.extend_from_slice(&cx.notices().paths),
            _ => self.look_at_paths(cx),
        }
    }

    /// Until the next look.
    fn wait(&mut self, cx: &mut Context<'_>) -> Option<Duration> {
        if self.active == 0 {
            return None;
        }
        let now = cx.timers().now();
        let at = self.heap.peek()?.at;
        Some(from_ns(at.saturating_sub(now)))
    }

    fn has_deadline(&self) -> bool {
        self.active > 0
    }

    fn wants_notices(&self) -> bool {
        self.active > 0
    }
}

handle!(
    /// Handle to a stat watcher, returned by [`Stat::new`].
    ///
    /// ```
    /// use evloop::{Loop, Sim, Stat};
    /// use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let s = Stat::new(&mut lp, "/etc/motd", Duration::ZERO, |_, _, _| {}).unwrap();
    /// assert!(!s.file_stat(&lp).unwrap().exists); // no such file in the simulation
    /// ```
    Stat,
    "stat",
    false
);

/// What a stat watcher's callback receives: the watched path, and its
/// attributes before and after the change.
///
/// ```
/// use evloop::{FileStat, Loop, RunMode, Sim, Stat};
/// use std::path::PathBuf;
/// use std::time::Duration;
/// let sim = Sim::new();
/// sim.write_file(Duration::from_millis(3), "/tmp/app.conf", 12);
/// let mut lp: Loop<Vec<(PathBuf, bool, bool)>> = Loop::with_backend(sim.backend());
/// Stat::new(&mut lp, "/tmp/app.conf", Duration::from_secs(1), |lp, log, ev| {
///     log.push((ev.path.to_path_buf(), ev.previous.exists, ev.current.exists));
///     lp.stop(ev.watcher).unwrap();
/// }).unwrap();
/// let mut log = vec![];
/// lp.run(RunMode::Default, &mut log).unwrap();
/// assert_eq!(log, [("/tmp/app.conf".into(), false, true)]); // created
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatEvent<'a> {
    /// The watcher being invoked.
    pub watcher: Stat,
    /// The path it watches, as given to [`Stat::new`] (not made absolute
    /// or resolved: a relative path is looked up from the current
    /// directory at each look).
    pub path: &'a Path,
    /// What the path was seen as before.
    pub previous: FileStat,
    /// What it is now.
    pub current: FileStat,
}

/// A stat callback, stored as a [`Dispatch`]. The watched path is the
/// stat component's ([`Stats`]), shared: the event lends a counted
/// reference to it while the callback has the loop (and may remove the
/// watcher).
struct StatCallback<F>(F);

impl crate::Callback for Stat {
    type Event<'a> = StatEvent<'a>;
}

impl crate::watchers::adapt::Adapt for Stat {
    fn adapt<'s, S, F>(callback: F) -> crate::watchers::adapt::Adapted<'s, S>
    where
        F: for<'a> FnMut(&mut Loop<'s, S>, &mut S, StatEvent<'a>) + 's,
    {
        crate::watchers::adapt::Adapted(Box::new(StatCallback(callback)))
    }
}

impl<'s, S, F> Dispatch<'s, S> for StatCallback<F>
where
    F: for<'a> FnMut(&mut Loop<'s, S>, &mut S, StatEvent<'a>),
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
        // The component holds every live stat watcher's state: a callback
        // is only invoked for a live watcher.
        let Some(w) = lp.kind::<Stats>().and_then(|k| k.get(key.slot)) else {
            return;
        };
        let (path, previous, current) = (Rc::clone(&w.path), w.previous, w.current);
        let ev = StatEvent {
            watcher: Stat(key),
            path: &path,
            previous,
            current,
        };
        (self.0)(lp, state, ev)
    }
}

impl Stat {
    /// Creates and starts a stat watcher (libev's `ev_stat`): its callback
    /// runs when the attributes of `path` change (existence, size,
    /// modification time to the nanosecond, inode, device, link count,
    /// mode), with the path and the attributes before and after
    /// ([`StatEvent`]). A missing file is a state like any other, so
    /// creation and deletion are changes; a save by rename (what editors
    /// do) changes the inode. The watcher's start is the baseline: a file
    /// that exists then is not reported until it changes (feed an event,
    /// [`Loop::feed_event`], to handle it at once).
    ///
    /// It is correct on its own by polling, and quick where the backend
    /// hints at changes (inotify on Linux, kqueue's `EVFILT_VNODE`,
    /// watching the directory too, so that renames and re-creations are
    /// seen). Where no hint is possible (network file systems, inotify's
    /// limit reached) it polls alone.
    ///
    /// `interval` is how often it polls:
    ///
    /// - **`Duration::ZERO` means 5 seconds**, not "as often as possible"
    ///   (libev's rule: zero picks its default, 5 s). Without hints, a
    ///   change can take that long to be seen.
    /// - Anything shorter than 0.1 s is 0.1 s (libev's minimum: polling
    ///   faster costs more than it finds).
    /// - With hints, most changes are seen at once whatever the interval;
    ///   the polls catch what hints miss.
    ///
    /// A file that is appended to is read from this callback, not from an
    /// io watcher: a regular file is always ready, so [`Loop::io`] refuses
    /// it.
    /// `docs/recipes.md` follows a log file this way across rotation and
    /// truncation, as `tail -F` does.
    ///
    /// ```
    /// use evloop::{Loop, RunMode, Sim, Stat};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// sim.write_file(Duration::ZERO, "/srv/data", 10);
    /// sim.write_file(Duration::from_millis(500), "/srv/data", 20);
    /// sim.remove_file(Duration::from_millis(900), "/srv/data");
    /// let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    /// lp.timer(Duration::from_millis(1), Duration::ZERO, |lp, _, _| {
    ///     Stat::new(lp, "/srv/data", Duration::from_secs(1), |lp, log, ev| {
    ///         log.push(format!("{} -> {} at {:?}", ev.previous.size, ev.current.size, lp.now()));
    ///         if !ev.current.exists {
    ///             lp.remove(ev.watcher).unwrap();
    ///         }
    ///     }).unwrap();
    /// }).unwrap();
    /// let mut log = vec![];
    /// lp.run(RunMode::Default, &mut log).unwrap();
    /// assert_eq!(log, ["10 -> 20 at 500ms", "20 -> 0 at 900ms"]);
    /// ```
    pub fn new<'s, S, F>(
        lp: &mut Loop<'s, S>,
        path: impl AsRef<Path>,
        interval: Duration,
        callback: F,
    ) -> Result<Stat>
    where
        F: for<'a> FnMut(&mut Loop<'s, S>, &mut S, StatEvent<'a>) + 's,
    {
        let path: Rc<Path> = Rc::from(path.as_ref());
        let key = lp.create::<Stats>(
            rank::STAT,
            Box::new(StatCallback(callback)),
            |stats, key| {
                stats.configure(key.slot, path, interval);
            },
        )?;
        Ok(Stat(key))
    }
    /// What a stat watcher last saw its path as.
    ///
    /// ```
    /// use evloop::{Loop, Sim, Stat};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let s = Stat::new(&mut lp, "/nothing/here", Duration::ZERO, |_, _, _| {}).unwrap();
    /// assert_eq!(s.file_stat(&lp).unwrap(), evloop::FileStat::MISSING);
    /// ```
    pub fn file_stat<S>(self, lp: &Loop<'_, S>) -> Result<FileStat> {
        lp.entry(&self)?;
        Ok(lp
            .kinds
            .get::<Stats>()
            .and_then(|k| k.get(self.0.slot))
            .map_or(FileStat::MISSING, |w| w.current))
    }
}
