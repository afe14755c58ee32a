//! The phases that feed the watchers whose events do not come from fd
//! readiness or the timer heap: what the backend noticed besides fds
//! (signals, child exits, wall-clock steps, path hints), the periodic
//! watchers due by the wall clock, and the stat watchers' paths.
//! [`Loop::run`](crate::Loop::run)'s iteration calls them in its order;
//! each kind's state is in its component (signals.rs, children.rs,
//! periodics.rs, stats.rs). (Async sends are the async kind's, in
//! kinds/asyncs.rs.)

use crate::pending::Priority;
use crate::unwind::Held;
use crate::Loop;

impl<S> Loop<'_, S> {
    /// Queues the periodic watchers due by the wall clock (after the
    /// timers, earliest first), having looked for a step of the clock if
    /// the backend does not report them. Returns the highest priority
    /// among them.
    pub(crate) fn expire_periodics(&mut self) -> Option<Priority> {
        let wall = crate::timers::to_ns(self.backend.wall_now());
        // What `now_wall` says in this iteration: the periodics' callbacks
        // see the time they were expired at.
        self.timers.set_wall(wall);
        if !self.periodics.steps_reported() {
            self.periodics.notice_step(wall, self.timers.now());
        }
        let mut held = Held::default();
        let highest = self
            .periodics
            .expire(wall, &mut self.watchers, &mut self.pending, &mut held);
        if self.periodics.done_with_steps() {
            self.backend.unwatch_clock_steps();
        }
        // A custom schedule that panicked: its watcher is stopped, the
        // others are expired; now the panic propagates (out of `run`).
        held.resume();
        highest
    }

    /// Looks at the paths of the stat watchers hinted at or due, and
    /// queues those that changed (after the timers and periodics). Returns
    /// the highest priority among them.
    pub(crate) fn look_at_paths(&mut self) -> Option<Priority> {
        let now = self.timers.now();
        let slots = self.stats.take_due(now);
        let mut highest = None;
        for &slot in &slots {
            let Some(w) = self.stats.get(slot) else {
                continue;
            };
            let seen = self.backend.stat(&w.path);
            let p = self
                .stats
                .looked(slot, seen, now, &mut self.watchers, &mut self.pending);
            highest = highest.max(p);
        }
        self.stats.done_looking(slots);
        highest
    }

    /// Whether the backend may have notices for this loop: it watches a
    /// signal or a child for it, or a kind wants them (async watchers
    /// are active).
    #[inline]
    pub(crate) fn uses_notices(&self) -> bool {
        !self.signals.watched().is_empty()
            || self.children.any()
            || (!self.periodics.is_empty() && self.periodics.steps_reported())
            || !self.stats.is_empty()
            || self.kinds_want_notices()
    }

    /// Whether the backend noticed something besides fd readiness during
    /// the last poll (a kernel backend has drained its wake fd by then, so
    /// waiting on would delay it). What it took is kept for
    /// [`Loop::queue_notices`].
    pub(crate) fn noticed_anything(&mut self) -> bool {
        if !self.uses_notices() {
            return false;
        }
        self.backend.take_notices(&mut self.notices);
        !self.notices.is_empty()
    }

    /// Queues what the backend noticed besides fd readiness, after the io
    /// events: signal watchers (by signal number), child watchers (in
    /// exit order); the async watchers sent to follow, in the polled
    /// phase.
    pub(crate) fn queue_notices(&mut self) {
        let mut notices = std::mem::take(&mut self.notices);
        self.backend.take_notices(&mut notices);
        for signal in notices.signals.iter() {
            if self.signals.watched().contains(signal) {
                self.watchers
                    .queue_list(&mut self.pending, self.signals.list(signal));
            }
        }
        for exit in notices.exits.drain(..) {
            self.children
                .exited(exit, &mut self.watchers, &mut self.pending);
        }
        if notices.clock_stepped {
            self.periodics.step_reported();
        }
        self.stats.hint(&notices.paths);
        notices.clear();
        self.notices = notices;
    }
}
