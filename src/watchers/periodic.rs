//! Periodic watchers: the handle and the `Loop` methods. Schedules, the
//! wall-clock heap and what a clock step does are the periodic
//! component's (periodics.rs).

use std::time::SystemTime;

use crate::handle::handle;
use crate::periodics::Rule;
use crate::registry::Kind;
use crate::timers::to_ns;
use crate::watchers::plain::Plain;
use crate::{Error, Loop, Result, Schedule};

handle!(
    /// Handle to a periodic watcher, returned by [`Loop::periodic`].
    ///
    /// ```
    /// use evloop::{Loop, Schedule, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let p = lp.periodic(Schedule::every(Duration::from_secs(60)), |_, _, _| {}).unwrap();
    /// assert!(lp.is_active(p).unwrap());
    /// ```
    Periodic,
    "periodic",
    false
);

impl<'s, S> Loop<'s, S> {
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
    /// use evloop::{Loop, RunMode, Schedule, Sim};
    /// use std::time::{Duration, SystemTime};
    /// let sim = Sim::new();
    /// // The simulator's wall clock starts at the epoch plus one hour.
    /// sim.set_wall_clock(SystemTime::UNIX_EPOCH + Duration::from_secs(3600));
    /// let mut lp: Loop<Vec<u64>> = Loop::with_backend(sim.backend());
    /// // Every 10 minutes, at 5 minutes past: 1:05, 1:15, 1:25.
    /// let every = Schedule::every_from(Duration::from_secs(300), Duration::from_secs(600));
    /// lp.periodic(every, |lp, log, me| {
    ///     let t = lp.wall_now().duration_since(SystemTime::UNIX_EPOCH).unwrap();
    ///     log.push(t.as_secs() / 60);
    ///     if log.len() == 3 {
    ///         lp.stop(me).unwrap();
    ///     }
    /// }).unwrap();
    /// let mut log = vec![];
    /// lp.run(RunMode::Default, &mut log).unwrap();
    /// assert_eq!(log, [65, 75, 85]);
    /// ```
    pub fn periodic<F>(&mut self, schedule: Schedule<'s>, callback: F) -> Result<Periodic>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, Periodic) + 's,
    {
        let mut rule = Rule::new(schedule).map_err(|reason| Error::InvalidSchedule { reason })?;
        // Its first time is asked before the watcher exists: a custom
        // schedule that panics (user code) leaves nothing behind.
        let first = rule.first(to_ns(self.backend.wall_now()));
        let key = self
            .watchers
            .insert(Kind::Periodic, Plain::<Periodic, F>::boxed(callback));
        self.periodics.install(key.slot, rule);
        if let Some(at) = first {
            self.start_periodic(key.slot, at);
        }
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
    /// use evloop::{Error, Loop, Schedule, Sim};
    /// use std::time::{Duration, SystemTime};
    /// let sim = Sim::new();
    /// sim.set_wall_clock(SystemTime::UNIX_EPOCH + Duration::from_secs(100));
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let p = lp.periodic(Schedule::every(Duration::from_secs(60)), |_, _, _| {}).unwrap();
    /// let hourly = || Schedule::every(Duration::from_secs(3600));
    /// assert!(matches!(lp.set_schedule(p, hourly()), Err(Error::WatcherActive { .. })));
    /// lp.stop(p).unwrap();
    /// lp.set_schedule(p, hourly()).unwrap();
    /// lp.start(p).unwrap();
    /// assert_eq!(lp.periodic_at(p).unwrap(), Some(SystemTime::UNIX_EPOCH + Duration::from_secs(3600)));
    /// ```
    pub fn set_schedule(&mut self, p: Periodic, schedule: Schedule<'s>) -> Result<()> {
        if self.entry_mut(&p)?.is_active() {
            return Err(Error::WatcherActive {
                kind: "periodic",
                what: "schedule",
            });
        }
        let rule = Rule::new(schedule).map_err(|reason| Error::InvalidSchedule { reason })?;
        // The old schedule is dropped once the new one is in place: a
        // panic in its drop (user code) leaves the watcher whole.
        self.periodics.install(p.0.slot, rule);
        Ok(())
    }

    /// The wall-clock time an active periodic watcher fires next (libev's
    /// `ev_periodic_at`); `None` if it is stopped.
    ///
    /// ```
    /// use evloop::{Loop, Schedule, Sim};
    /// use std::time::{Duration, SystemTime};
    /// let sim = Sim::new();
    /// sim.set_wall_clock(SystemTime::UNIX_EPOCH + Duration::from_secs(100));
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let p = lp.periodic(Schedule::every(Duration::from_secs(60)), |_, _, _| {}).unwrap();
    /// let at = lp.periodic_at(p).unwrap().unwrap();
    /// assert_eq!(at, SystemTime::UNIX_EPOCH + Duration::from_secs(120));
    /// ```
    pub fn periodic_at(&self, p: Periodic) -> Result<Option<SystemTime>> {
        let active = self.entry(&p)?.is_active();
        Ok(active.then(|| self.periodics.next_at(p.0.slot)))
    }
}
