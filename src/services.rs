//! The OS services the loop composes with its backend (libev's way:
//! signals, children, the waker, clock steps and path hints beside the
//! readiness mechanism, not inside it): the backend's own
//! ([`Backend::notices`]) where it has one, else the loop's, which on Unix
//! is the crate's notifier (`backends/unix/`). The notifier's internal fds
//! (its wake fd, pidfds, the clock-step timer, inotify) are registered with
//! the backend through `modify`, marked internal in the fd table, and
//! their readiness is routed back to the notifier after each poll, never
//! to a watcher.

use std::io;

use crate::backend::{Backend, InternalFds, NoticeService};
use crate::fd_table::FdTable;
use crate::{Interest, RawFd};

/// The loop's own service: the Unix notifier.
#[cfg(unix)]
pub(crate) type Own = crate::backends::unix::Notifier;

/// The loop's own service: none (a Windows backend brings its own).
#[cfg(not(unix))]
pub(crate) type Own = crate::backend::NoNotices;

/// The loop's own service for a loop on the backend `name`.
pub(crate) fn own(name: &'static str) -> Own {
    #[cfg(unix)]
    {
        crate::backends::unix::Notifier::new(name)
    }
    #[cfg(not(unix))]
    {
        let _ = name;
        crate::backend::NoNotices
    }
}

/// The loop's side of the internal fds: registered at once with the
/// backend (a removal must reach it before the fd is closed) and marked
/// in the fd table.
struct LoopFds<'a> {
    backend: &'a mut dyn Backend,
    fds: &'a mut FdTable,
    max_fd: Option<RawFd>,
}

impl InternalFds for LoopFds<'_> {
    fn add(&mut self, fd: RawFd) -> io::Result<()> {
        self.backend
            .modify(fd, Interest::NONE, Interest::READABLE)?;
        self.fds.set_internal(fd, true);
        Ok(())
    }

    fn remove(&mut self, fd: RawFd) {
        if self.fds.set_internal(fd, false) {
            let _ = self.backend.modify(fd, Interest::READABLE, Interest::NONE);
        }
    }

    fn fd_limit(&self) -> Option<RawFd> {
        self.max_fd.map(|max| max + 1)
    }
}

/// What a backend's own service is handed: it keeps its fds itself.
pub(crate) struct Refused;

impl InternalFds for Refused {
    fn add(&mut self, _fd: RawFd) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "a backend's own notice service keeps its internal fds itself",
        ))
    }

    fn remove(&mut self, _fd: RawFd) {}
}

/// Runs `f` on the service in use, with where its internal fds go.
pub(crate) fn with<R>(
    backend: &mut dyn Backend,
    own: &mut Own,
    fds: &mut FdTable,
    max_fd: Option<RawFd>,
    f: impl FnOnce(&mut dyn NoticeService, &mut dyn InternalFds) -> R,
) -> R {
    if let Some(service) = backend.notices() {
        return f(service, &mut Refused);
    }
    let mut set = LoopFds {
        backend,
        fds,
        max_fd,
    };
    f(own, &mut set)
}

/// Whether `fd` can ever be watched, as the service in use says: the
/// backend's own, or the loop's, which knows OS fds only (a backend of
/// virtual fds without a service of its own accepts them all).
pub(crate) fn check_fd(
    backend: &mut dyn Backend,
    own: &mut Own,
    virtual_fds: bool,
    fd: RawFd,
) -> io::Result<()> {
    match backend.notices() {
        Some(service) => service.check_fd(fd),
        None if virtual_fds => Ok(()),
        None => own.check_fd(fd),
    }
}
