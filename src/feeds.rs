//! The backend's notices (what it noticed besides fd readiness: signals,
//! child exits, wake-ups, wall-clock steps, path hints): taken once per
//! iteration for the kinds' [`Phase::Polled`](crate::Phase::Polled)
//! ([`Context::notices`](crate::Context::notices)), then cleared.

use crate::Loop;

impl<S> Loop<'_, S> {
    /// Whether the backend may have notices for this loop: async watchers
    /// are active, or a kind wants them (it watches a signal or a child).
    #[inline]
    pub(crate) fn uses_notices(&self) -> bool {
        !self.asyncs.is_empty() || self.kinds_want_notices()
    }

    /// Whether the backend noticed something besides fd readiness during
    /// the last poll (a kernel backend has drained its wake fd by then, so
    /// waiting on would delay it). What it took is kept for the iteration.
    pub(crate) fn noticed_anything(&mut self) -> bool {
        if !self.uses_notices() {
            return false;
        }
        self.backend.take_notices(&mut self.notices);
        !self.notices.is_empty()
    }

    /// Takes what the backend noticed besides fd readiness, after the io
    /// events: the kinds see it in [`Phase::Polled`](crate::Phase::Polled)
    /// (signal watchers by signal number, child watchers in exit order),
    /// then [`Loop::queue_notices`] deals with the rest and clears it.
    pub(crate) fn take_notices(&mut self) {
        self.backend.take_notices(&mut self.notices);
    }

    /// After the kinds' [`Phase::Polled`](crate::Phase::Polled): queues
    /// the async watchers sent to (in start order); the notices are
    /// cleared.
    pub(crate) fn queue_notices(&mut self) {
        self.asyncs.collect(&mut self.watchers, &mut self.pending);
        self.notices.clear();
    }
}
