//! The backend's kernel set as the notifier and its parts (children,
//! clock steps, path hints) see it: a file of its own so that those parts
//! and the notifier that embeds them all name it without naming each
//! other.

use std::io;
use std::os::fd::RawFd;

/// A backend's kernel set, as the notifier sees it: where its internal
/// fds (the wake fd; on Linux pidfds, the clock-step timerfd, the inotify
/// instance) are watched for readability.
///
/// The backend implements it on whatever holds its kernel set (an epoll
/// fd, a `pollfd` array) and passes it to every [`Notifier`](super::Notifier) or
/// [`Wakeup`](super::Wakeup) call that may add or remove one of those fds. They are the
/// notifier's, not the loop's: the backend must never report them in
/// [`Backend::poll`](crate::backend::Backend::poll)'s events, and routes
/// their readiness to [`Notifier::ready`](super::Notifier::ready) instead.
///
/// A plain `Vec<RawFd>` implements it (a list the backend walks when it
/// builds each wait's set, as a `select` backend does); the examples use it.
///
/// ```
/// use evloop::backends::unix::InternalFds;
/// use std::io;
/// use std::os::fd::RawFd;
///
/// /// A `pollfd` array with the notifier's fds at its front.
/// struct Set { fds: Vec<libc::pollfd>, internal: usize }
///
/// impl InternalFds for Set {
///     fn add(&mut self, fd: RawFd) -> io::Result<()> {
///         let pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
///         self.fds.insert(self.internal, pfd);
///         self.internal += 1;
///         Ok(())
///     }
///     fn remove(&mut self, fd: RawFd) {
///         if let Some(i) = self.fds[..self.internal].iter().position(|p| p.fd == fd) {
///             self.fds.remove(i);
///             self.internal -= 1;
///         }
///     }
/// }
///
/// let mut set = Set { fds: Vec::new(), internal: 0 };
/// set.add(7)?;
/// set.remove(7);
/// assert_eq!(set.internal, 0);
/// assert_eq!(set.fd_limit(), None);
/// # Ok::<(), io::Error>(())
/// ```
pub trait InternalFds {
    /// Watches `fd` for readability.
    fn add(&mut self, fd: RawFd) -> io::Result<()>;
    /// Stops watching `fd` (it is about to be closed, or belongs to a
    /// kernel set being replaced); never fails.
    fn remove(&mut self, fd: RawFd);
    /// One more than the largest fd the set can hold, if it has such a
    /// limit (select: `FD_SETSIZE`): the notifier asks for its wake fd
    /// below it, and watches a child whose pidfd is not through
    /// `SIGCHLD` instead.
    fn fd_limit(&self) -> Option<RawFd> {
        None
    }
}

/// A list of fds the backend walks to build each wait's kernel set.
///
/// ```
/// use evloop::backends::unix::InternalFds;
/// let mut set: Vec<i32> = Vec::new();
/// set.add(5)?;
/// set.add(5)?; // held once
/// assert_eq!(set, [5]);
/// InternalFds::remove(&mut set, 5); // (not `Vec::remove`, by index)
/// assert!(set.is_empty());
/// # Ok::<(), std::io::Error>(())
/// ```
impl InternalFds for Vec<RawFd> {
    fn add(&mut self, fd: RawFd) -> io::Result<()> {
        if !self.contains(&fd) {
            self.push(fd);
        }
        Ok(())
    }

    fn remove(&mut self, fd: RawFd) {
        self.retain(|&f| f != fd);
    }
}
