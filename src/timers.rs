//! The timer component: the loop's clock, the heap of armed timers
//! (timer_heap.rs; each timer's record, with its delay and period, is in
//! its registry entry), their expiry, and how long the next poll may wait
//! for them.
//!
//! Loop time is `u64` nanoseconds from the backend's origin (about 584
//! years), saturated one nanosecond before [`NEVER`]: a deadline that would
//! lie beyond the clock is `NEVER`, which never expires and bounds no
//! wait.

use std::time::Duration;

use crate::pending::{PendingQueues, Priority};
use crate::registry::Registry;
use crate::slot_list::Slot;
use crate::timer_heap::{Step, TimerHeap, TimerRecord, TimerRecords};

/// The expiry of an armed timer that can never fire: its deadline lies
/// beyond the end of the loop's clock. Such a timer stays active (and
/// keeps `run` going, if referenced) but bounds no wait.
pub(crate) const NEVER: u64 = u64::MAX;

/// A duration as integer nanoseconds, saturating.
#[inline]
pub(crate) fn to_ns(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(d.subsec_nanos() as u64)
}

/// The inverse of [`to_ns`].
#[inline]
pub(crate) fn from_ns(ns: u64) -> Duration {
    Duration::from_nanos(ns)
}

pub(crate) struct Timers {
    heap: TimerHeap,
    /// The cached loop time.
    now: u64,
    /// The wall-clock time (ns since the epoch) that goes with `now`, once
    /// something asked for it or periodic watchers were expired at it;
    /// forgotten when `now` changes.
    wall: Option<u64>,
}

impl Timers {
    /// Timers on a clock that reads `now`.
    pub fn new(now: Duration) -> Timers {
        Timers {
            heap: TimerHeap::default(),
            now: clock_ns(now),
            wall: None,
        }
    }

    /// The cached loop time, in nanoseconds.
    #[inline]
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Caches a new reading of the backend's clock.
    #[inline]
    pub fn set_now(&mut self, reading: Duration) {
        self.now = clock_ns(reading);
        self.wall = None;
    }

    /// The cached wall-clock time of this `now`, if there is one yet.
    #[inline]
    pub fn wall(&self) -> Option<u64> {
        self.wall
    }

    /// Caches the wall-clock time that goes with `now`.
    #[inline]
    pub fn set_wall(&mut self, wall: u64) {
        self.wall = Some(wall);
    }

    /// Armed timers.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Room for `n` more armed timers without growing.
    pub fn reserve(&mut self, n: usize) {
        self.heap.reserve(n);
    }

    /// Whether an armed timer will expire (within the clock's range).
    pub fn has_deadline<C>(&mut self, registry: &mut Registry<C>) -> bool {
        if self.heap.len() == 0 {
            return false;
        }
        match self.heap.earliest_bound() {
            None => false,
            Some(NEVER) => false,
            // A lazily restarted timer's bound may be earlier than its
            // true expiry: look at the true one.
            Some(_) => self.heap.peek(registry).is_some_and(|top| top.at != NEVER),
        }
    }

    /// Arms the timer whose record is `record` (a timer watcher's, found
    /// by its handle) at its delay from now, as far as the record goes:
    /// what is left for the heap is done by [`Timers::finish`].
    #[inline(always)]
    pub fn start_record(&mut self, record: &mut TimerRecord) -> Step {
        let at = self.now.saturating_add(record.after());
        self.heap.rekey::<false>(record, at)
    }

    /// Arms a timer watcher just inserted with the delay `after`
    /// (`Loop::timer`): [`Timers::start`], without the tests a new timer
    /// does not need.
    #[inline(always)]
    pub fn start_new<C>(&mut self, registry: &mut Registry<C>, slot: Slot, after: u64) {
        let at = self.now.saturating_add(after);
        self.heap.arm_new(registry, slot, at);
    }

    /// [`Timers::start_record`] of an active (armed) timer with a new
    /// delay and period (`Timer::set`: moved in place, a new start order,
    /// as a stop and start would give).
    #[inline(always)]
    pub fn reset_record(
        &mut self,
        record: &mut TimerRecord,
        after: Duration,
        repeat: Duration,
    ) -> Step {
        record.configure(to_ns(after), to_ns(repeat));
        let at = self.now.saturating_add(record.after());
        self.heap.rekey::<true>(record, at)
    }

    /// libev's `ev_timer_again` on the timer whose record is `record` (a
    /// repeating one, active if `ARMED`): armed at `repeat` from now, as
    /// far as the record goes ([`Timers::start_record`]).
    #[inline(always)]
    pub fn again_record<const ARMED: bool>(&mut self, record: &mut TimerRecord) -> Step {
        let at = self.now.saturating_add(record.repeat());
        self.heap.rekey::<ARMED>(record, at)
    }

    /// Disarms the timer whose record is `record` (lazily: timer_heap.rs).
    #[inline(always)]
    pub fn disarm(&mut self, record: &mut TimerRecord) {
        self.heap.disarm(record);
    }

    /// What a `*_record` call left for the heap, done for the timer in
    /// `slot`.
    #[inline(always)]
    pub fn finish<C>(&mut self, registry: &mut Registry<C>, slot: Slot, step: Step) {
        self.heap.finish(registry, slot, step);
    }

    /// The timer's period.
    pub fn repeat_of<C>(&self, registry: &Registry<C>, slot: Slot) -> Duration {
        from_ns(registry.record(slot.index()).repeat())
    }

    /// Sets the timer's period, keeping its expiry.
    pub fn set_repeat<C>(&mut self, registry: &mut Registry<C>, slot: Slot, repeat: Duration) {
        let record = registry.record_mut(slot.index());
        record.configure(record.after(), to_ns(repeat));
    }

    /// Arms a timer `after` from now.
    #[inline]
    pub fn start<C>(&mut self, registry: &mut Registry<C>, slot: Slot) {
        self.heap.restart(registry, slot, self.now);
    }

    /// Disarms a timer (lazily: timer_heap.rs).
    #[inline]
    pub fn stop<C>(&mut self, registry: &mut Registry<C>, slot: Slot) {
        self.heap.remove(registry, slot);
    }

    /// The timer watcher is leaving the registry: its node leaves the
    /// heap (before the entry, which holds its position, goes).
    pub fn remove<C>(&mut self, registry: &mut Registry<C>, slot: Slot) {
        self.heap.discard(registry, slot);
    }

    /// Time until an armed timer fires; `Duration::MAX` for never.
    pub fn remaining<C>(&self, registry: &Registry<C>, slot: Slot) -> Duration {
        match registry.record(slot.index()).expiry() {
            NEVER => Duration::MAX,
            at => from_ns(at.saturating_sub(self.now)),
        }
    }

    /// Queues every timer due by now, in deadline order; repeating ones
    /// are rescheduled, the others stopped. Returns the highest priority
    /// among them, if any expired (the idle rule needs it).
    pub fn expire<C>(
        &mut self,
        registry: &mut Registry<C>,
        pending: &mut PendingQueues,
    ) -> Option<Priority> {
        let now = self.now;
        // `now` is below NEVER, so timers parked there never come up.
        debug_assert!(now < NEVER);
        let mut highest = None;
        // Settle (sift lazily restarted timers) only once the bound is due.
        while self.heap.earliest_bound().is_some_and(|at| at <= now) {
            let Some(top) = self.heap.peek(registry) else {
                break;
            };
            if top.at > now {
                break;
            }
            let repeat = registry.record(top.slot.index()).repeat();
            if repeat > 0 {
                // A late repeating timer fires once and is rescheduled from
                // now, like libev: it does not replay every missed period.
                // Past the end of the clock it is parked at NEVER, so that
                // it cannot come up again.
                let next = top.at.saturating_add(repeat).max(now);
                self.heap.arm(registry, top.slot, next);
            } else {
                self.heap.pop(registry);
            }
            // Stopped if one-shot, and queued.
            let priority = registry.expired_timer(top.slot, repeat == 0, pending);
            highest = highest.max(Some(priority));
        }
        highest
    }

    /// How long a poll may wait for the earliest timer, given a fresh
    /// reading of the clock (`refresh`, called only when a timer is armed:
    /// the time the callbacks took counts, as in libev); `None` if no
    /// timer bounds the wait.
    pub fn wait_bound<C>(
        &mut self,
        registry: &mut Registry<C>,
        refresh: impl FnOnce() -> Duration,
    ) -> Option<Duration> {
        if self.heap.len() == 0 || self.heap.earliest_bound()? == NEVER {
            // Only timers beyond the end of the clock: nothing to wait for.
            return None;
        }
        self.set_now(refresh());
        let now = self.now;
        let mut next = self.heap.earliest_bound()?;
        if next <= now {
            // Due or stale: settle lazily restarted timers before deciding
            // not to block.
            next = self.heap.peek(registry)?.at;
        }
        if next == NEVER {
            return None;
        }
        Some(from_ns(next.saturating_sub(now)))
    }

    /// Whether a wait ended at a timer bound that turned out stale: the
    /// top timer was lazily restarted to a later time, which settling (it
    /// sifts such timers down) reveals. Nothing is due: wait on.
    pub fn woke_early<C>(&mut self, registry: &mut Registry<C>) -> bool {
        let now = self.now;
        if self.heap.earliest_bound().is_none_or(|at| at > now) {
            return false;
        }
        self.heap.peek(registry).is_some_and(|top| top.at > now)
    }
}

/// The wall-clock time of a backend's reading (since the epoch), within the
/// loop clock's range: a reading beyond it (a replayed trace can hold any)
/// is the range's end, not an overflow of `SystemTime`.
#[inline]
pub(crate) fn wall_time(d: Duration) -> std::time::SystemTime {
    std::time::SystemTime::UNIX_EPOCH + from_ns(clock_ns(d))
}

/// The loop time of a backend clock reading: nanoseconds, saturated just
/// below [`NEVER`], so that a deadline computed from it can reach `NEVER`
/// only by lying beyond the clock's range.
#[inline]
pub(crate) fn clock_ns(d: Duration) -> u64 {
    to_ns(d).min(NEVER - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nanosecond_conversion_round_trips_and_saturates() {
        let d = Duration::new(3, 141_592_653);
        assert_eq!(from_ns(to_ns(d)), d);
        assert_eq!(to_ns(Duration::MAX), u64::MAX);
        assert_eq!(clock_ns(Duration::MAX), NEVER - 1);
    }
}
