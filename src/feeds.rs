//! The phase that feeds the watchers whose events do not come from fd
//! readiness or the timer heap: what the backend noticed besides fds
//! (signals, child exits, async sends; wall-clock steps and path hints are
//! the periodic and stat kinds', in the polled phase: kinds/).
//! [`Loop::run`](crate::Loop::run)'s iteration calls it in its order;
//! each kind's state is in its component (signals.rs, children.rs,
//! asyncs.rs).

use crate::Loop;

impl<S> Loop<'_, S> {
    /// Whether the backend may have notices for this loop: it watches a
    /// signal or a child for it, or async watchers are active.
    #[inline]
    pub(crate) fn uses_notices(&self) -> bool {
        !self.signals.watched().is_empty()
            || self.children.any()
            || !self.asyncs.is_empty()
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
    /// exit order), then async watchers sent to (in start order). The
    /// notices stay in `self.notices` for the kinds' polled phase
    /// ([`Context::notices`](crate::Context::notices)); the iteration
    /// clears them after it.
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
        self.asyncs.collect(&mut self.watchers, &mut self.pending);
        self.notices = notices;
    }
}
