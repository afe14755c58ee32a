//! The backend's notices (what it noticed besides fd readiness: signals,
//! child exits, wake-ups, wall-clock steps, path hints): taken once per
//! iteration for the kinds' [`Phase::Polled`](crate::Phase::Polled)
//! ([`Context::notices`](crate::Context::notices)), then cleared.

use crate::Loop;

impl<S> Loop<'_, S> {
    /// Whether the backend may have notices for this loop: a kind wants
    /// them (it watches a signal, a child, the clock, a path, or waits
    /// for wake-ups).
    #[inline]
    pub(crate) fn uses_notices(&self) -> bool {
        self.kinds_want_notices()
    }

    /// Whether the backend noticed something besides fd readiness during
    /// the last poll (a kernel backend has drained its wake fd by then, so
    /// waiting on would delay it). What it took is kept for the iteration.
    pub(crate) fn noticed_anything(&mut self) -> bool {
        if !self.uses_notices() {
            return false;
        }
        self.backend.take_notices(&mut self.results.notices);
        !self.results.notices.is_empty()
    }

    /// Takes what the backend noticed besides fd readiness, after the io
    /// events: the kinds see it in [`Phase::Polled`](crate::Phase::Polled)
    /// (signal watchers by signal number, child watchers in exit order),
    /// then [`Loop::clear_notices`] clears it.
    pub(crate) fn take_notices(&mut self) {
        self.backend.take_notices(&mut self.results.notices);
    }

    /// After the kinds' [`Phase::Polled`](crate::Phase::Polled).
    pub(crate) fn clear_notices(&mut self) {
        self.results.notices.clear();
    }
}
