//! [`WithServices`]: a backend composed with the OS services a loop would
//! compose with it (src/services.rs), for code that drives or wraps a
//! backend without a loop.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::{
    Backend, Capabilities, Change, FileStat, InternalFds, NoticeService, Notices, PollEvent,
    PollStatus, Wake,
};
use crate::services::{own, Own, Refused};
use crate::{Interest, RawFd};

/// A backend composed with the OS services that a loop would compose with
/// it: the backend's own ([`Backend::notices`]), or else the loop's kind
/// (the Unix notifier; none elsewhere), whose internal fds go to the
/// backend through `modify` and whose reports are taken out of each
/// poll's and routed to it. For code that drives a backend without a
/// loop, or wraps one and must see its notices (the replay recorder, the
/// crate's tests); a loop needs none of it.
///
/// ```
/// use evloop::backend::{Backend, NoticeService, Notices};
/// use evloop::backends::WithServices;
/// use evloop::backends::poll::Poll;
/// use std::time::Duration;
///
/// let mut b = WithServices::new(Box::new(Poll::new()));
/// let waker = b.waker(&mut Vec::new())?;
/// waker.wake();
/// let mut events = Vec::new();
/// b.poll(Some(Duration::from_secs(5)), &mut events)?;
/// assert!(events.is_empty()); // the wake fd is the notifier's
/// let mut notices = Notices::default();
/// b.take_notices(&mut notices, &mut Vec::new());
/// assert!(notices.woken);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct WithServices<'a> {
    backend: Box<dyn Backend + 'a>,
    own: Own,
    internal: Vec<RawFd>,
}

/// [`WithServices`]'s notifier's fds: in the backend.
struct InnerFds<'a> {
    backend: &'a mut dyn Backend,
    internal: &'a mut Vec<RawFd>,
}

impl InternalFds for InnerFds<'_> {
    fn add(&mut self, fd: RawFd) -> io::Result<()> {
        self.backend
            .modify(fd, Interest::NONE, Interest::READABLE)?;
        self.internal.push(fd);
        Ok(())
    }

    fn remove(&mut self, fd: RawFd) {
        if let Some(i) = self.internal.iter().position(|&f| f == fd) {
            self.internal.swap_remove(i);
            let _ = self.backend.modify(fd, Interest::READABLE, Interest::NONE);
        }
    }

    fn fd_limit(&self) -> Option<RawFd> {
        self.backend.capabilities().max_fd.map(|max| max + 1)
    }
}

impl std::fmt::Debug for WithServices<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WithServices")
            .field("backend", &self.backend.name())
            .field("internal", &self.internal)
            .finish()
    }
}

impl<'a> WithServices<'a> {
    /// `backend`, with the services.
    ///
    /// ```
    /// use evloop::backend::Backend;
    /// use evloop::backends::WithServices;
    /// let b = WithServices::new(Box::new(evloop::Sim::new().backend()));
    /// assert_eq!(b.name(), "sim");
    /// ```
    pub fn new(backend: Box<dyn Backend + 'a>) -> WithServices<'a> {
        let own = own(backend.name());
        WithServices {
            backend,
            own,
            internal: Vec::new(),
        }
    }

    /// Child exits through `SIGCHLD` even where pidfds work (the Unix
    /// notifier's test switch). Not part of the API.
    #[cfg(unix)]
    #[doc(hidden)]
    pub fn force_sigchld_fallback(&mut self) {
        self.own.force_sigchld_fallback();
    }

    /// Runs `f` on the service in use, with where its fds go.
    fn service<R>(
        &mut self,
        f: impl FnOnce(&mut dyn NoticeService, &mut dyn InternalFds) -> R,
    ) -> R {
        if let Some(s) = self.backend.notices() {
            return f(s, &mut Refused);
        }
        let mut fds = InnerFds {
            backend: &mut *self.backend,
            internal: &mut self.internal,
        };
        f(&mut self.own, &mut fds)
    }

    /// Takes the notifier's fds out of `events[from..]` and routes them.
    #[cold]
    fn route(&mut self, events: &mut Vec<PollEvent>, from: usize) {
        let mut i = from;
        while i < events.len() {
            if self.internal.contains(&events[i].fd) {
                let fd = events.remove(i).fd;
                self.service(|s, fds| s.ready(fd, fds));
            } else {
                i += 1;
            }
        }
    }
}

impl Backend for WithServices<'_> {
    fn name(&self) -> &'static str {
        self.backend.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.backend.capabilities()
    }

    fn modify(&mut self, fd: RawFd, old: Interest, new: Interest) -> io::Result<()> {
        self.backend.modify(fd, old, new)
    }

    fn modify_all(&mut self, changes: &[Change]) -> Result<(), (usize, io::Error)> {
        self.backend.modify_all(changes)
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        let from = events.len();
        let status = self.backend.poll(timeout, events)?;
        if !self.internal.is_empty() {
            self.route(events, from);
        }
        Ok(status)
    }

    fn now(&mut self) -> Duration {
        self.backend.now()
    }

    /// The backend's; the notifier's fds are re-created by
    /// [`NoticeService::reinit`], which the loop calls next.
    fn reinit(&mut self) -> io::Result<()> {
        self.backend.reinit()?;
        self.internal.clear();
        Ok(())
    }

    #[cfg(unix)]
    fn pollable_fd(&self) -> io::Result<std::os::fd::BorrowedFd<'_>> {
        self.backend.pollable_fd()
    }

    fn expose_changes(&mut self) -> io::Result<bool> {
        self.backend.expose_changes()
    }

    fn notices(&mut self) -> Option<&mut dyn NoticeService> {
        Some(self)
    }

    fn submit_pending(&mut self) -> io::Result<()> {
        self.backend.submit_pending()
    }

    fn completion_io(&mut self) -> Option<std::rc::Rc<dyn crate::backend::CompletionIo>> {
        self.backend.completion_io()
    }
}

impl NoticeService for WithServices<'_> {
    fn service_name(&self) -> &'static str {
        self.backend.name()
    }

    fn check_fd(&mut self, fd: RawFd) -> io::Result<()> {
        self.service(|s, _| s.check_fd(fd))
    }

    fn watch_signal(&mut self, signal: i32, _: &mut dyn InternalFds) -> io::Result<()> {
        self.service(|s, fds| s.watch_signal(signal, fds))
    }

    fn unwatch_signal(&mut self, signal: i32) {
        self.service(|s, _| s.unwatch_signal(signal));
    }

    fn watch_child(&mut self, pid: u32, _: &mut dyn InternalFds) -> io::Result<()> {
        self.service(|s, fds| s.watch_child(pid, fds))
    }

    fn unwatch_child(&mut self, pid: u32, _: &mut dyn InternalFds) {
        self.service(|s, fds| s.unwatch_child(pid, fds));
    }

    fn watch_any_child(&mut self, _: &mut dyn InternalFds) -> io::Result<()> {
        self.service(|s, fds| s.watch_any_child(fds))
    }

    fn unwatch_any_child(&mut self) {
        self.service(|s, _| s.unwatch_any_child());
    }

    fn signal_child(&mut self, pid: u32, signal: i32) -> io::Result<()> {
        self.service(|s, _| s.signal_child(pid, signal))
    }

    fn spawn_child(
        &mut self,
        command: &mut std::process::Command,
        _: &mut dyn InternalFds,
    ) -> io::Result<crate::Spawned> {
        self.service(|s, fds| s.spawn_child(command, fds))
    }

    fn waker(&mut self, _: &mut dyn InternalFds) -> io::Result<Arc<dyn Wake>> {
        self.service(|s, fds| s.waker(fds))
    }

    fn ready(&mut self, fd: RawFd, _: &mut dyn InternalFds) {
        self.service(|s, fds| s.ready(fd, fds));
    }

    fn take_notices(&mut self, notices: &mut Notices, _: &mut dyn InternalFds) {
        self.service(|s, fds| s.take_notices(notices, fds));
    }

    fn wall_now(&mut self) -> Duration {
        self.service(|s, _| s.wall_now())
    }

    fn watch_clock_steps(&mut self, _: &mut dyn InternalFds) -> bool {
        self.service(|s, fds| s.watch_clock_steps(fds))
    }

    fn unwatch_clock_steps(&mut self, _: &mut dyn InternalFds) {
        self.service(|s, fds| s.unwatch_clock_steps(fds));
    }

    fn stat(&mut self, path: &std::path::Path) -> FileStat {
        self.service(|s, _| s.stat(path))
    }

    fn watch_path(
        &mut self,
        path: &std::path::Path,
        token: u64,
        _: &mut dyn InternalFds,
    ) -> io::Result<()> {
        self.service(|s, fds| s.watch_path(path, token, fds))
    }

    fn unwatch_path(&mut self, token: u64, _: &mut dyn InternalFds) {
        self.service(|s, fds| s.unwatch_path(token, fds));
    }

    fn reinit(&mut self, _: &mut dyn InternalFds) -> io::Result<()> {
        self.service(|s, fds| s.reinit(fds))
    }

    fn wants_dispatch(&mut self) -> bool {
        self.service(|s, _| s.wants_dispatch())
    }

    fn dispatched(&mut self, fd: RawFd, ready: crate::Ready) {
        self.service(|s, _| s.dispatched(fd, ready));
    }

    fn async_sent(&mut self, sent: bool) -> bool {
        self.service(|s, _| s.async_sent(sent))
    }

    fn async_taken(&mut self, taken: &mut Vec<u32>, active: &dyn Fn(u32) -> bool) {
        self.service(|s, _| s.async_taken(taken, active));
    }
}
