//! The periodic component: watchers due at wall-clock times, their rules
//! (an absolute time; `offset + k * interval`; a reschedule callback), a
//! heap of their next times (wall-clock nanoseconds since the epoch), and
//! what happens when the wall clock is stepped.
//!
//! The wall clock can jump (NTP, an administrator, resume from suspend).
//! Steps come from the backend where it can tell (a `CLOCK_REALTIME`
//! timerfd on Linux); elsewhere the loop compares the wall and monotonic
//! clocks at every iteration ([`Periodics::notice_step`]) and waits at
//! most [`MAX_WAIT_WITHOUT_STEP_REPORTS`], so that a step is seen within a
//! minute (libev's cap). After a step: an absolute periodic keeps its time
//! (it never fires early: its time is compared with the wall clock
//! itself); interval and rescheduled ones are realigned to the new clock
//! (those already due fire first, once); a tick that was missed (the clock
//! jumped over it, or the loop was busy) fires once, not once per missed
//! interval.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use crate::pending::{PendingQueues, Priority};
use crate::registry::Registry;
use crate::slot_list::Slot;
use crate::timer_heap::TimerHeap;
use crate::timers::{from_ns, to_ns};
use crate::unwind::Held;
use crate::Ready;

/// The longest wait while periodic watchers are active and the backend does
/// not report wall-clock steps: a step is noticed within it.
pub(crate) const MAX_WAIT_WITHOUT_STEP_REPORTS: Duration = Duration::from_secs(60);

/// A change of (wall - monotonic) larger than this is a step, not drift.
const STEP: u64 = 1_000_000_000;

/// When a periodic watcher fires ([`Loop::periodic`](crate::Loop::periodic)).
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
pub enum Schedule<'s> {
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
    /// watcher. A panic in it propagates (out of [`Loop::periodic`],
    /// [`Loop::start`] or [`Loop::run`]), and counts as no time: the watcher
    /// is not created, or stays or becomes stopped (see the "Panics" of
    /// [`Loop::run`]).
    ///
    /// [`Loop::periodic`]: crate::Loop::periodic
    /// [`Loop::start`]: crate::Loop::start
    /// [`Loop::run`]: crate::Loop::run
    Custom(Box<dyn FnMut(SystemTime) -> SystemTime + 's>),
}

impl<'s> Schedule<'s> {
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
    /// use evloop::{Loop, RunMode, Schedule, Sim};
    /// use std::time::{Duration, SystemTime};
    /// let sim = Sim::new();
    /// // Started 45 s past a minute:
    /// sim.set_wall_clock(SystemTime::UNIX_EPOCH + Duration::from_secs(12 * 3600 + 45));
    /// let mut lp: Loop<Vec<Duration>> = Loop::with_backend(sim.backend());
    /// lp.periodic(Schedule::every(Duration::from_secs(60)), |lp, after, me| {
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
    pub fn every(interval: Duration) -> Schedule<'s> {
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
    /// use evloop::{Loop, Schedule, Sim};
    /// use std::time::{Duration, SystemTime};
    /// let sim = Sim::new();
    /// let start = SystemTime::UNIX_EPOCH + Duration::from_secs(7 * 3600 + 50 * 60); // 07:50
    /// sim.set_wall_clock(start);
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let half_past = Schedule::every_from(Duration::from_secs(1800), Duration::from_secs(3600));
    /// let p = lp.periodic(half_past, |_, _, _| {}).unwrap();
    /// let at = lp.periodic_at(p).unwrap().unwrap();
    /// assert_eq!(at, SystemTime::UNIX_EPOCH + Duration::from_secs(8 * 3600 + 30 * 60)); // 08:30
    /// ```
    pub fn every_from(offset: Duration, interval: Duration) -> Schedule<'s> {
        Schedule::Every { offset, interval }
    }

    /// At the times `next` computes.
    pub fn custom(next: impl FnMut(SystemTime) -> SystemTime + 's) -> Schedule<'s> {
        Schedule::Custom(Box::new(next))
    }
}

impl std::fmt::Debug for Schedule<'_> {
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
pub(crate) enum Rule<'s> {
    At(u64),
    Every { offset: u64, interval: u64 },
    Custom(Box<dyn FnMut(SystemTime) -> SystemTime + 's>),
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

impl<'s> Rule<'s> {
    /// The rule of `schedule`. Fails for an interval of zero.
    pub fn new(schedule: Schedule<'s>) -> Result<Rule<'s>, &'static str> {
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

    fn custom(next: &mut Box<dyn FnMut(SystemTime) -> SystemTime + '_>, now: u64) -> Option<u64> {
        let at = wall_ns(next(wall(now)));
        (at > now).then_some(at)
    }
}

#[derive(Default)]
pub(crate) struct Periodics<'s> {
    heap: TimerHeap,
    rules: HashMap<Slot, Rule<'s>>,
    /// Active periodic watchers.
    active: usize,
    /// Whether the backend reports wall-clock steps.
    steps_reported: bool,
    /// A step was reported (or noticed) and not yet dealt with.
    stepped: bool,
    /// Wall minus monotonic time at the last look, to notice steps.
    last_offset: Option<i128>,
}

impl<'s> Periodics<'s> {
    /// Gives the periodic watcher in `slot` its rule (stopped).
    pub fn install(&mut self, slot: Slot, rule: Rule<'s>) {
        self.heap.configure(slot, 0, 0);
        self.rules.insert(slot, rule);
    }

    /// Whether a periodic watcher is active.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.active == 0
    }

    /// Whether an active periodic is due at some time.
    pub fn has_deadline(&self) -> bool {
        self.heap.len() > 0
    }

    /// The first periodic starts: whether the backend reports steps.
    pub fn first_started(&mut self, steps_reported: bool) {
        self.steps_reported = steps_reported;
        self.last_offset = None;
    }

    /// The time the stopped periodic watcher in `slot` would first fire
    /// if it started at wall time `now`; `None` if its schedule gives none
    /// (a custom one that returned the past: it stays stopped). Changes
    /// nothing, so that a custom schedule that panics (user code) leaves
    /// the watcher stopped and every count as it was.
    pub fn first(&mut self, slot: Slot, now: u64) -> Option<u64> {
        self.rules.get_mut(&slot).and_then(|r| r.first(now))
    }

    /// A periodic watcher starts, to fire first at `at` (from
    /// [`Periodics::first`]).
    pub fn start(&mut self, slot: Slot, at: u64) {
        self.heap.arm(slot, at);
        self.active += 1;
    }

    /// A periodic watcher stops.
    pub fn stop(&mut self, slot: Slot) {
        self.heap.remove(slot);
        self.active -= 1;
    }

    /// Whether the last periodic watcher just stopped while the backend
    /// reports steps for it (then the caller tells the backend to stop);
    /// true once.
    pub fn done_with_steps(&mut self) -> bool {
        let done = self.active == 0 && self.steps_reported;
        if done {
            self.steps_reported = false;
        }
        done
    }

    /// The watcher was removed. Its rule is handed back, for the caller
    /// to drop (a custom schedule's captures are user code) once the loop
    /// is consistent.
    pub fn forget(&mut self, slot: Slot) -> Option<Rule<'s>> {
        self.heap.discard(slot);
        self.rules.remove(&slot)
    }

    /// Every rule, taken out (the loop is being dropped).
    pub fn take_rules(&mut self) -> Vec<Rule<'s>> {
        self.rules.drain().map(|(_, rule)| rule).collect()
    }

    /// The backend reported a wall-clock step.
    pub fn step_reported(&mut self) {
        self.stepped = true;
    }

    /// Looks for a step (when the backend does not report them): a change
    /// of wall minus monotonic time larger than a second.
    pub fn notice_step(&mut self, wall_now: u64, mono_now: u64) {
        let offset = wall_now as i128 - mono_now as i128;
        if let Some(last) = self.last_offset {
            if (offset - last).unsigned_abs() > STEP as u128 {
                self.stepped = true;
            }
        }
        self.last_offset = Some(offset);
    }

    /// Whether the loop must look for steps itself.
    pub fn steps_reported(&self) -> bool {
        self.steps_reported
    }

    /// Queues the periodic watchers due at wall time `now`, earliest first
    /// (after realigning the schedules if the clock was stepped); each is
    /// rescheduled by its rule, or stopped. Returns the highest priority
    /// among them, if any.
    ///
    /// A custom schedule that panics (user code) is treated as one that
    /// gave no time: its watcher stops (after this firing, if it was
    /// due). The rest of the expiry still happens, and the first such
    /// panic is kept in `held` for the caller to resume once it has
    /// finished too.
    pub fn expire<C>(
        &mut self,
        now: u64,
        registry: &mut Registry<C>,
        pending: &mut PendingQueues,
        held: &mut Held,
    ) -> Option<Priority> {
        if std::mem::take(&mut self.stepped) {
            self.realign(now, registry, held);
        }
        let mut highest = None;
        while self.heap.earliest_bound().is_some_and(|at| at <= now) {
            let Some(top) = self.heap.peek() else { break };
            if top.at > now {
                break;
            }
            let rule = self.rules.get_mut(&top.slot);
            match rule.and_then(|r| held.run(|| r.after(now)).flatten()) {
                Some(next) => self.heap.arm(top.slot, next),
                None => {
                    registry.deactivate(top.slot);
                    self.heap.pop();
                    self.active -= 1;
                }
            }
            highest = highest.max(Some(registry[top.slot].priority()));
            registry.queue(pending, top.slot, Ready::EMPTY);
        }
        highest
    }

    /// After a step: interval and custom periodics not yet due are moved
    /// to their first time from `now` (absolute ones keep theirs). One
    /// whose custom schedule panics is stopped (the panic kept in `held`),
    /// and the others are still realigned.
    fn realign<C>(&mut self, now: u64, registry: &mut Registry<C>, held: &mut Held) {
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
                    registry.deactivate(slot);
                    heap.remove(slot);
                    *active -= 1;
                }
            }
        }
    }

    /// How long until the earliest periodic, at wall time `now`.
    pub fn wait(&mut self, now: u64) -> Option<Duration> {
        let at = self.heap.peek()?.at;
        Some(from_ns(at.saturating_sub(now)))
    }

    /// The wall time the periodic in `slot` (active) fires next.
    pub fn next_at(&self, slot: Slot) -> SystemTime {
        wall(self.heap.expiry(slot))
    }
}
