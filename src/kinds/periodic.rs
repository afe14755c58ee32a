//! Periodic watchers, a [`Kind`]: watchers due at wall-clock times, their
//! rules (an absolute time; `offset + k * interval`; a reschedule
//! callback), a heap of their next times (wall-clock nanoseconds since the
//! epoch), what happens when the wall clock is stepped, the handle and the
//! `Loop` methods.
//!
//! The wall clock can jump (NTP, an administrator, resume from suspend).
//! Steps come from the backend where it can tell (a `CLOCK_REALTIME`
//! timerfd on Linux: [`Notices::clock_stepped`](crate::backend::Notices), taken in
//! [`Phase::Polled`]); elsewhere the kind compares the wall and monotonic
//! clocks at every iteration ([`Periodics::notice_step`]) and bounds the
//! wait at [`MAX_WAIT_WITHOUT_STEP_REPORTS`], so that a step is seen within
//! a minute (libev's cap). After a step: an absolute periodic keeps its
//! time (it never fires early: its time is compared with the wall clock
//! itself); interval and rescheduled ones are realigned to the new clock
//! (those already due fire first, once); a tick that was missed (the clock
//! jumped over it, or the loop was busy) fires once, not once per missed
//! interval. Due periodics are queued in [`Phase::Expire`], after the
//! timers.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use crate::handle::handle;
use crate::kind::{Context, Kind, Phase, Phases, Watcher};
use crate::kinds::rank;
use crate::slot_list::Slot;
use crate::timer_heap::OwnTimerHeap;
use crate::timers::{clock_ns, from_ns, to_ns, NEVER};
use crate::unwind::Held;
use crate::watchers::plain::Plain;
use crate::{Error, Loop, Ready, Result};

/// The longest wait while periodic watchers are active and the backend does
/// not report wall-clock steps: a step is noticed within it.
pub(crate) const MAX_WAIT_WITHOUT_STEP_REPORTS: Duration = Duration::from_secs(60);

/// A change of (wall - monotonic) larger than this is a step, not drift.
const STEP: u64 = 1_000_000_000;

/// When a periodic watcher fires ([`Periodic::new`](crate::Periodic::new)).
///
/// ```
/// use evloop::Schedule;
/// use std::time::{Duration, SystemTime};
/// let _ = Schedule::At(SystemTime::now() + Duration::from_secs(60));
/// let hourly = Schedule::every(Duration::from_secs(3600)); // on the hour
/// let at_quarter_past = Schedule::every_from(Duration::from_secs(900), Duration::from_secs(3600));
/// let custom = Schedule::custom(|now| now + Duration::from_secs(1));
/// # let _ = (hourly, at_quarter_past, custom);
/// ```
pub enum Schedule {
    /// Once, at this wall-clock time.
    At(SystemTime),
    /// At the wall-clock times `offset + k * interval` (from the Unix
    /// epoch): an hourly periodic with offset 0 fires on the hour, however
    /// the clock moves.
    Every {
        /// The phase within the interval (taken modulo the interval).
        offset: Duration,
        /// The period, not zero.
        interval: Duration,
    },
    /// At the time the callback returns, given the current wall-clock time;
    /// called when the watcher starts, after each firing and after a
    /// wall-clock step. A time at or before the one it was given stops the
    /// watcher. A panic in it propagates (out of [`Periodic::new`],
    /// [`Loop::start`] or [`Loop::run`]), and counts as no time: the watcher
    /// is not created, or stays or becomes stopped (see the "Panics" of
    /// [`Loop::run`]).
    ///
    /// It is `'static`, unlike the callbacks (which may borrow for the
    /// loop's `'s`): it lives in the periodic kind, and a kind owns its
    /// state. What it shares with the rest of the program it holds by
    /// `Rc` (see [`Schedule::custom`]).
    ///
    /// [`Periodic::new`]: crate::Periodic::new
    /// [`Loop::start`]: crate::Loop::start
    /// [`Loop::run`]: crate::Loop::run
    Custom(Box<dyn FnMut(SystemTime) -> SystemTime>),
}

impl Schedule {
    /// Every `interval`, at the wall-clock times that are multiples of it
    /// since the Unix epoch (libev's `ev_periodic` with offset 0).
    ///
    /// **Aligned, not counted from now**: the first firing is at the next
    /// multiple, which can be anywhere from an instant to a whole
    /// interval away. `every(60 s)` started at 12:00:45 fires first at
    /// 12:01:00, 15 s later, then on every minute; `every(1 day)` fires at
    /// midnight UTC (the epoch's multiples are UTC: no time zone, no
    /// daylight saving), not a day after it started. That is what a
    /// "run on the hour" job wants. For "every `interval` from now" use a
    /// repeating [`Loop::timer`](crate::Loop::timer) (on the monotonic
    /// clock, so a set of the wall clock does not move it), or
    /// [`Schedule::every_from`] with the phase of the start time.
    ///
    /// ```
    /// use evloop::{Loop, Periodic, RunMode, Schedule, Sim};
    /// use std::time::{Duration, SystemTime};
    /// let sim = Sim::new();
    /// // Started 45 s past a minute:
    /// sim.set_wall_clock(SystemTime::UNIX_EPOCH + Duration::from_secs(12 * 3600 + 45));
    /// let mut lp: Loop<Vec<Duration>> = Loop::with_backend(sim.backend());
    /// Periodic::new(&mut lp, Schedule::every(Duration::from_secs(60)), |lp, after, me| {
    ///     after.push(lp.now()); // the monotonic time since the start
    ///     if after.len() == 2 {
    ///         lp.stop(me).unwrap();
    ///     }
    /// }).unwrap();
    /// let mut after = vec![];
    /// lp.run(RunMode::Default, &mut after).unwrap();
    /// // First on the minute, 15 s later; then every 60 s.
    /// assert_eq!(after, [Duration::from_secs(15), Duration::from_secs(75)]);
    /// ```
    pub fn every(interval: Duration) -> Schedule {
        Schedule::Every {
            offset: Duration::ZERO,
            interval,
        }
    }

    /// Every `interval`, at `offset` past each multiple of it since the
    /// Unix epoch: aligned like [`Schedule::every`], shifted by `offset`
    /// (taken modulo `interval`). `every_from(30 min, 1 h)` fires at half
    /// past each hour (UTC).
    ///
    /// ```
    /// use evloop::{Loop, Periodic, Schedule, Sim};
    /// use std::time::{Duration, SystemTime};
    /// let sim = Sim::new();
    /// let start = SystemTime::UNIX_EPOCH + Duration::from_secs(7 * 3600 + 50 * 60); // 07:50
    /// sim.set_wall_clock(start);
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let half_past = Schedule::every_from(Duration::from_secs(1800), Duration::from_secs(3600));
    /// let p = Periodic::new(&mut lp, half_past, |_, _, _| {}).unwrap();
    /// let at = p.next_at(&lp).unwrap().unwrap();
    /// assert_eq!(at, SystemTime::UNIX_EPOCH + Duration::from_secs(8 * 3600 + 30 * 60)); // 08:30
    /// ```
    pub fn every_from(offset: Duration, interval: Duration) -> Schedule {
        Schedule::Every { offset, interval }
    }

    /// At the times `next` computes (see [`Schedule::Custom`]).
    ///
    /// ```
    /// use evloop::{Loop, Periodic, Schedule, Sim};
    /// use std::cell::Cell;
    /// use std::rc::Rc;
    /// use std::time::{Duration, SystemTime};
    /// let sim = Sim::new();
    /// sim.set_wall_clock(SystemTime::UNIX_EPOCH + Duration::from_secs(100));
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// // Shared with the schedule by an `Rc`: it must own what it uses.
    /// let asked = Rc::new(Cell::new(0));
    /// let a = asked.clone();
    /// let later = Schedule::custom(move |now| {
    ///     a.set(a.get() + 1);
    ///     now + Duration::from_secs(5)
    /// });
    /// let p = Periodic::new(&mut lp, later, |_, _, _| {}).unwrap();
    /// assert_eq!(asked.get(), 1); // asked for its first time
    /// assert_eq!(p.next_at(&lp).unwrap(), Some(SystemTime::UNIX_EPOCH + Duration::from_secs(105)));
    /// ```
    pub fn custom(next: impl FnMut(SystemTime) -> SystemTime + 'static) -> Schedule {
        Schedule::Custom(Box::new(next))
    }
}

impl std::fmt::Debug for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Schedule::At(t) => f.debug_tuple("At").field(t).finish(),
            Schedule::Every { offset, interval } => f
                .debug_struct("Every")
                .field("offset", offset)
                .field("interval", interval)
                .finish(),
            Schedule::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

/// A schedule, in wall-clock nanoseconds.
pub(crate) enum Rule {
    At(u64),
    Every { offset: u64, interval: u64 },
    Custom(Box<dyn FnMut(SystemTime) -> SystemTime>),
}

fn wall(ns: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + from_ns(ns)
}

fn wall_ns(t: SystemTime) -> u64 {
    to_ns(
        t.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or(Duration::ZERO),
    )
}

impl Rule {
    /// The rule of `schedule`. Fails for an interval of zero.
    pub fn new(schedule: Schedule) -> std::result::Result<Rule, &'static str> {
        Ok(match schedule {
            Schedule::At(t) => Rule::At(wall_ns(t)),
            Schedule::Every { offset, interval } => {
                let interval = to_ns(interval);
                if interval == 0 {
                    return Err("the interval of a periodic watcher cannot be zero");
                }
                Rule::Every {
                    offset: to_ns(offset) % interval,
                    interval,
                }
            }
            Schedule::Custom(next) => Rule::Custom(next),
        })
    }

    /// The first time at or after `now` (a start or a realignment), or
    /// `None` to stop (an absolute time is kept whatever `now` is). Runs a
    /// custom schedule: user code, which may panic.
    pub fn first(&mut self, now: u64) -> Option<u64> {
        match self {
            Rule::At(at) => Some(*at),
            Rule::Every { offset, interval } => {
                let past = now.saturating_sub(*offset);
                let k = past.div_ceil(*interval);
                Some(offset.saturating_add(k.saturating_mul(*interval)))
            }
            Rule::Custom(next) => Self::custom(next, now),
        }
    }

    /// The next time after a firing at `now`, or `None` to stop.
    fn after(&mut self, now: u64) -> Option<u64> {
        match self {
            Rule::At(_) => None,
            Rule::Every { offset, interval } => {
                // Strictly after now: missed ticks fire once.
                let past = now.saturating_sub(*offset);
                let k = past / *interval + 1;
                Some(offset.saturating_add(k.saturating_mul(*interval)))
            }
            Rule::Custom(next) => Self::custom(next, now),
        }
    }

    fn custom(next: &mut Box<dyn FnMut(SystemTime) -> SystemTime>, now: u64) -> Option<u64> {
        let at = wall_ns(next(wall(now)));
        (at > now).then_some(at)
    }
}

/// The periodic component: the watchers' rules and next times, and what
/// the kind knows of the wall clock.
#[derive(Default)]
pub(crate) struct Periodics {
    heap: OwnTimerHeap,
    rules: HashMap<Slot, Rule>,
    /// Active periodic watchers.
    active: usize,
    /// Whether the backend reports wall-clock steps.
    steps_reported: bool,
    /// A step was reported (or noticed) and not yet dealt with.
    stepped: bool,
    /// Wall minus monotonic time at the last look, to notice steps.
    last_offset: Option<i128>,
    /// The first time of the watcher being created ([`Periodic::new`]),
    /// asked before it existed: [`Kind::start`] takes it rather than ask
    /// the schedule again.
    primed: Option<(Slot, Option<u64>)>,
}

impl Periodics {
    /// Gives the periodic watcher in `slot` its rule (stopped); the rule
    /// it had, for the caller to drop (user code in its `Drop`) once the
    /// new one is in place.
    fn install(&mut self, slot: Slot, rule: Rule) -> Option<Rule> {
        self.heap.add(slot);
        self.rules.insert(slot, rule)
    }

    /// Whether the last periodic watcher just stopped while the backend
    /// reports steps for it (then the caller tells the backend to stop);
    /// true once.
    fn done_with_steps(&mut self) -> bool {
        let done = self.active == 0 && self.steps_reported;
        if done {
            self.steps_reported = false;
        }
        done
    }

    /// Looks for a step (when the backend does not report them): a change
    /// of wall minus monotonic time larger than a second.
    fn notice_step(&mut self, wall_now: u64, mono_now: u64) {
        let offset = wall_now as i128 - mono_now as i128;
        if let Some(last) = self.last_offset {
            if (offset - last).unsigned_abs() > STEP as u128 {
                self.stepped = true;
            }
        }
        self.last_offset = Some(offset);
    }

    /// Queues the periodic watchers due at wall time `now`, earliest first
    /// (after realigning the schedules if the clock was stepped); each is
    /// rescheduled by its rule, or stopped.
    ///
    /// A custom schedule that panics (user code) is treated as one that
    /// gave no time: its watcher stops (after this firing, if it was
    /// due). The rest of the expiry still happens, and the first such
    /// panic is kept in `held` for the caller to resume once it has
    /// finished too.
    fn expire(&mut self, now: u64, cx: &mut Context<'_>, held: &mut Held) {
        if std::mem::take(&mut self.stepped) {
            self.realign(now, cx, held);
        }
        while self.heap.earliest_bound().is_some_and(|at| at <= now) {
            let Some(top) = self.heap.peek() else { break };
            if top.at > now {
                break;
            }
            let rule = self.rules.get_mut(&top.slot);
            match rule.and_then(|r| held.run(|| r.after(now)).flatten()) {
                Some(next) => self.heap.arm(top.slot, next),
                None => {
                    // Stops, this firing still delivered (queued below):
                    // what was queued for it already stays.
                    cx.entries.deactivate(top.slot);
                    self.heap.pop();
                    self.active -= 1;
                }
            }
            cx.queue_slot(top.slot, Ready::EMPTY);
        }
    }

    /// After a step: interval and custom periodics not yet due are moved
    /// to their first time from `now` (absolute ones keep theirs). One
    /// whose custom schedule panics is stopped (the panic kept in `held`),
    /// and the others are still realigned.
    fn realign(&mut self, now: u64, cx: &mut Context<'_>, held: &mut Held) {
        let Periodics {
            heap,
            rules,
            active,
            ..
        } = self;
        for (&slot, rule) in rules.iter_mut() {
            if matches!(rule, Rule::At(_)) || !heap.contains(slot) {
                continue;
            }
            if heap.expiry(slot) <= now {
                continue; // due: fires first, then is rescheduled
            }
            match held.run(|| rule.first(now)) {
                Some(Some(at)) => heap.arm(slot, at),
                Some(None) => {}
                None => {
                    // Panicked: stopped, as if it had given no time.
                    cx.entries.deactivate(slot);
                    heap.remove(slot);
                    *active -= 1;
                }
            }
        }
    }

    /// The wall time the periodic in `slot` (active) fires next.
    fn next_at(&self, slot: Slot) -> SystemTime {
        wall(self.heap.expiry(slot))
    }
}

/// The wall clock, as the backend reads it now, in nanoseconds: saturated
/// below [`NEVER`] as the loop's clock is, so that a periodic whose next
/// time lies beyond the clock's range (its rule saturates to `NEVER`) is
/// parked there, never due, rather than due again at once forever.
fn wall_now(cx: &mut Context<'_>) -> u64 {
    clock_ns(cx.services(|s, _| s.wall_now()))
}

impl Kind for Periodics {
    const NAME: &'static str = "periodic";
    /// Steps reported by the backend are taken after the poll; due
    /// watchers are queued after the timers.
    const PHASES: Phases = Phases::POLLED.union(Phases::EXPIRE);
    /// (Bounded by a deadline, [`Kind::has_deadline`], as a timer is.)
    const PRODUCES_EVENTS: bool = false;

    /// Its schedule is asked first (a custom one is user code): a panic
    /// in it propagates with the watcher stopped and the kind as it was.
    /// A schedule that gives no time declines (it stays stopped).
    fn start(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) -> Result<bool> {
        let slot = w.slot();
        let first = match self.primed.take().filter(|&(s, _)| s == slot) {
            Some((_, first)) => first,
            None => {
                let now = wall_now(cx);
                self.rules.get_mut(&slot).and_then(|r| r.first(now))
            }
        };
        let Some(at) = first else {
            return Ok(false);
        };
        if self.active == 0 {
            self.steps_reported = cx.services(|s, fds| s.watch_clock_steps(fds));
            self.last_offset = None;
        }
        self.heap.arm(slot, at);
        self.active += 1;
        Ok(true)
    }

    fn stop(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) {
        self.heap.remove(w.slot());
        self.active -= 1;
        if self.done_with_steps() {
            cx.services(|s, fds| s.unwatch_clock_steps(fds));
        }
    }

    /// Its rule goes, and is dropped last (a custom schedule's captures
    /// are user code: a panic in their `Drop` propagates from the
    /// removal, the loop consistent).
    fn remove(&mut self, _: &mut Context<'_>, w: Watcher<Self>) {
        self.heap.discard(w.slot());
        let rule = self.rules.remove(&w.slot());
        drop(rule);
    }

    fn phase(&mut self, cx: &mut Context<'_>, phase: Phase) {
        if phase == Phase::Polled {
            if cx.notices().clock_stepped {
                self.stepped = true;
            }
            return;
        }
        if self.active == 0 {
            return;
        }
        let wall = wall_now(cx);
        // What `now_wall` says in this iteration: the periodics' callbacks
        // see the time they were expired at.
        cx.timers().set_wall(wall);
        if !self.steps_reported {
            let mono = cx.timers().now();
            self.notice_step(wall, mono);
        }
        let mut held = Held::default();
        self.expire(wall, cx, &mut held);
        if self.done_with_steps() {
            cx.services(|s, fds| s.unwatch_clock_steps(fds));
        }
        // A custom schedule that panicked: its watcher is stopped, the
        // others are expired; now the panic propagates (out of `run`).
        held.resume();
    }

    /// Until the earliest periodic; at most a minute where the backend
    /// does not report steps, to look for one.
    fn wait(&mut self, cx: &mut Context<'_>) -> Option<Duration> {
        if self.active == 0 {
            return None;
        }
        let now = wall_now(cx);
        // A periodic parked at NEVER bounds no wait (a step can still
        // realign it).
        let mut bound = self
            .heap
            .peek()
            .filter(|top| top.at != NEVER)
            .map(|top| from_ns(top.at.saturating_sub(now)));
        if !self.steps_reported {
            let cap = Some(MAX_WAIT_WITHOUT_STEP_REPORTS);
            bound = bound.min(cap).or(cap);
        }
        bound
    }

    fn has_deadline(&self) -> bool {
        self.heap.len() > 0
    }

    fn wants_notices(&self) -> bool {
        self.active > 0 && self.steps_reported
    }
}

impl Drop for Periodics {
    /// The rules go with the loop: every custom schedule's captures are
    /// dropped even if some of those drops panic; the first panic then
    /// propagates (from the loop's drop).
    fn drop(&mut self) {
        let mut held = Held::default();
        for (_, rule) in self.rules.drain() {
            held.drop(rule);
        }
        held.resume();
    }
}

handle!(
    /// Handle to a periodic watcher, returned by [`Periodic::new`].
    ///
    /// ```
    /// use evloop::{Loop, Periodic, Schedule, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let p = Periodic::new(&mut lp, Schedule::every(Duration::from_secs(60)), |_, _, _| {}).unwrap();
    /// assert!(lp.is_active(p).unwrap());
    /// ```
    Periodic,
    "periodic",
    false
);

impl Periodic {
    /// Creates and starts a periodic watcher: a timer on the wall clock
    /// (libev's `ev_periodic`). See [`Schedule`] for its three forms: an
    /// absolute time, `offset + k * interval` (an hourly watcher fires on
    /// the hour whatever the clock did), or a callback computing the next
    /// time.
    ///
    /// [`Schedule::every`] is aligned to the wall clock, not counted from
    /// the start: `every(60 s)` fires on each minute, the first time at
    /// the next one, however soon. For a period counted from now, use a
    /// repeating [`Loop::timer`].
    ///
    /// When the wall clock is stepped (NTP, an administrator, resume from
    /// suspend), an absolute periodic never fires early, interval and
    /// custom ones are realigned to the new clock, and a tick that was
    /// missed fires once, not once per missed interval. Periodic watchers
    /// that are due expire together with the timers, after them.
    ///
    /// Errors: [`Error::InvalidSchedule`] for an interval of zero.
    ///
    /// ```
    /// use evloop::{Loop, Periodic, RunMode, Schedule, Sim};
    /// use std::time::{Duration, SystemTime};
    /// let sim = Sim::new();
    /// // The simulator's wall clock starts at the epoch plus one hour.
    /// sim.set_wall_clock(SystemTime::UNIX_EPOCH + Duration::from_secs(3600));
    /// let mut lp: Loop<Vec<u64>> = Loop::with_backend(sim.backend());
    /// // Every 10 minutes, at 5 minutes past: 1:05, 1:15, 1:25.
    /// let every = Schedule::every_from(Duration::from_secs(300), Duration::from_secs(600));
    /// Periodic::new(&mut lp, every, |lp, log, me| {
    ///     let t = lp.read_wall_clock().duration_since(SystemTime::UNIX_EPOCH).unwrap();
    ///     log.push(t.as_secs() / 60);
    ///     if log.len() == 3 {
    ///         lp.stop(me).unwrap();
    ///     }
    /// }).unwrap();
    /// let mut log = vec![];
    /// lp.run(RunMode::Default, &mut log).unwrap();
    /// assert_eq!(log, [65, 75, 85]);
    /// ```
    pub fn new<'s, S, F>(lp: &mut Loop<'s, S>, schedule: Schedule, callback: F) -> Result<Periodic>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, Periodic) + 's,
    {
        let mut rule = Rule::new(schedule).map_err(|reason| Error::InvalidSchedule { reason })?;
        // Its first time is asked before the watcher exists: a custom
        // schedule that panics (user code) leaves nothing behind.
        let first = rule.first(clock_ns(lp.services(|s, _| s.wall_now())));
        let key = lp.create::<Periodics>(
            rank::PERIODIC,
            Plain::<Periodic, F>::boxed(callback),
            |periodics, key| {
                let old = periodics.install(key.slot, rule);
                debug_assert!(old.is_none(), "a new watcher has no rule");
                periodics.primed = Some((key.slot, first));
            },
        )?;
        Ok(Periodic(key))
    }

    /// Changes a stopped periodic watcher's schedule (libev's
    /// `ev_periodic_set`); [`Loop::start`] then computes its first time
    /// from the new one. A custom schedule is not called here.
    ///
    /// Errors, the watcher unchanged: [`Error::WatcherActive`] if it is
    /// active (stop it first); [`Error::InvalidSchedule`] for an interval
    /// of zero; a stale or foreign handle.
    ///
    /// ```
    /// use evloop::{Error, Loop, Periodic, Schedule, Sim};
    /// use std::time::{Duration, SystemTime};
    /// let sim = Sim::new();
    /// sim.set_wall_clock(SystemTime::UNIX_EPOCH + Duration::from_secs(100));
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let p = Periodic::new(&mut lp, Schedule::every(Duration::from_secs(60)), |_, _, _| {}).unwrap();
    /// let hourly = || Schedule::every(Duration::from_secs(3600));
    /// assert!(matches!(p.set_schedule(&mut lp, hourly()), Err(Error::WatcherActive { .. })));
    /// lp.stop(p).unwrap();
    /// p.set_schedule(&mut lp, hourly()).unwrap();
    /// lp.start(p).unwrap();
    /// assert_eq!(p.next_at(&lp).unwrap(), Some(SystemTime::UNIX_EPOCH + Duration::from_secs(3600)));
    /// ```
    pub fn set_schedule<S>(self, lp: &mut Loop<'_, S>, schedule: Schedule) -> Result<()> {
        if lp.entry_mut(&self)?.is_active() {
            return Err(Error::WatcherActive {
                kind: "periodic",
                what: "schedule",
            });
        }
        let rule = Rule::new(schedule).map_err(|reason| Error::InvalidSchedule { reason })?;
        // The old schedule is dropped once the new one is in place: a
        // panic in its drop (user code) leaves the watcher whole.
        let old = lp
            .builtin::<Periodics>(rank::PERIODIC)
            .0
            .install(self.0.slot, rule);
        drop(old);
        Ok(())
    }

    /// The wall-clock time an active periodic watcher fires next (libev's
    /// `ev_periodic_at`); `None` if it is stopped.
    ///
    /// ```
    /// use evloop::{Loop, Periodic, Schedule, Sim};
    /// use std::time::{Duration, SystemTime};
    /// let sim = Sim::new();
    /// sim.set_wall_clock(SystemTime::UNIX_EPOCH + Duration::from_secs(100));
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let p = Periodic::new(&mut lp, Schedule::every(Duration::from_secs(60)), |_, _, _| {}).unwrap();
    /// let at = p.next_at(&lp).unwrap().unwrap();
    /// assert_eq!(at, SystemTime::UNIX_EPOCH + Duration::from_secs(120));
    /// ```
    pub fn next_at<S>(self, lp: &Loop<'_, S>) -> Result<Option<SystemTime>> {
        let active = lp.entry(&self)?.is_active();
        let periodics = lp.kind::<Periodics>().filter(|_| active);
        Ok(periodics.map(|k| k.next_at(self.0.slot)))
    }
}
