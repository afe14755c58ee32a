//! The OS services' notices (what they noticed besides fd readiness:
//! signals, child exits, wake-ups, wall-clock steps, path hints): the
//! internal fds the poll reported routed to the service, then the notices
//! taken once per iteration for the kinds'
//! [`Phase::Polled`](crate::Phase::Polled)
//! ([`Context::notices`](crate::Context::notices)), then cleared. The
//! composition itself is services.rs.

use crate::backend::{InternalFds, NoticeService};
use crate::{Loop, RawFd};

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
        self.take_notices();
        !self.results.notices.is_empty()
    }

    /// Takes what the backend noticed besides fd readiness, after the io
    /// events: the kinds see it in [`Phase::Polled`](crate::Phase::Polled)
    /// (signal watchers by signal number, child watchers in exit order),
    /// then [`Loop::clear_notices`] clears it.
    pub(crate) fn take_notices(&mut self) {
        let mut notices = std::mem::take(&mut self.results.notices);
        self.services(|s, fds| s.take_notices(&mut notices, fds));
        self.results.notices = notices;
    }

    /// After the kinds' [`Phase::Polled`](crate::Phase::Polled).
    pub(crate) fn clear_notices(&mut self) {
        self.results.notices.clear();
    }
}

impl<S> Loop<'_, S> {
    /// Runs `f` on the loop's OS service (`services::with`).
    pub(crate) fn services<R>(
        &mut self,
        f: impl FnOnce(&mut dyn NoticeService, &mut dyn InternalFds) -> R,
    ) -> R {
        crate::services::with(
            &mut *self.backend,
            &mut self.notifier,
            &mut self.fds,
            self.caps.max_fd,
            f,
        )
    }

    /// Routes the internal fds the last poll reported to the service
    /// (before its notices are taken): cold unless the loop has some.
    #[inline]
    pub(crate) fn route_internal(&mut self) {
        if let Some(list) = self.fds.internal_ready(self.results.all()) {
            self.route(list);
        }
    }

    #[cold]
    #[inline(never)]
    fn route(&mut self, list: Vec<RawFd>) {
        for &fd in &list {
            self.services(|s, fds| s.ready(fd, fds));
        }
        self.fds.routed(list);
    }
}

#[cfg(unix)]
impl<S> Loop<'_, S> {
    /// Child exits through `SIGCHLD` and `waitpid`, as on kernels without
    /// pidfds, for tests of that path (the loop's own notifier only). Not
    /// part of the API.
    ///
    /// ```
    /// let mut lp: evloop::Loop = evloop::Loop::new().unwrap();
    /// lp.force_sigchld_fallback();
    /// ```
    #[doc(hidden)]
    pub fn force_sigchld_fallback(&mut self) {
        self.notifier.force_sigchld_fallback();
    }
}
