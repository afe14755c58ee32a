//! What an io watcher watches: anything with a file descriptor, or a virtual
//! fd of a simulated backend.

use std::os::fd::{AsFd, BorrowedFd, RawFd};

/// The descriptor behind a [`Source`].
///
/// `Os` carries a [`BorrowedFd`], which cannot be forged without `unsafe`:
/// an io watcher therefore always refers to a descriptor that its owner
/// (the watcher itself, or a borrow the compiler checks) keeps open.
/// `Virtual` names an fd of a simulated backend; OS backends refuse it.
///
/// ```
/// use evloop::{Sim, Source, SourceFd};
/// let sock = Sim::new().socket("s", 0);
/// assert!(matches!(sock.source_fd(), SourceFd::Virtual(v) if v.get() == 3));
/// ```
#[derive(Debug, Clone, Copy)]
pub enum SourceFd<'a> {
    /// A real, open file descriptor.
    Os(BorrowedFd<'a>),
    /// A virtual descriptor number understood only by backends whose
    /// [`Capabilities::virtual_fds`](crate::backend::Capabilities::virtual_fds) is set.
    Virtual(VirtualFd),
}

/// A virtual descriptor number, as handed out by a simulated backend.
///
/// ```
/// use evloop::VirtualFd;
/// assert_eq!(VirtualFd::new(7).get(), 7);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VirtualFd(RawFd);

impl VirtualFd {
    /// Wraps a virtual descriptor number.
    pub const fn new(n: RawFd) -> Self {
        VirtualFd(n)
    }
    /// The number.
    pub const fn get(self) -> RawFd {
        self.0
    }
}

/// Something an io watcher can watch.
///
/// Every [`AsFd`] type is a source (sockets, pipes, `File`, `OwnedFd`, and
/// references to them). The simulated backend's sockets are sources too.
/// Implementing it for your own type is safe: an OS descriptor can only be
/// produced from something that already owns or borrows it.
///
/// ```
/// use evloop::{Source, SourceFd};
/// use std::os::unix::net::UnixStream;
/// let (a, _b) = UnixStream::pair().unwrap();
/// assert!(matches!(a.source_fd(), SourceFd::Os(_)));
/// ```
pub trait Source {
    /// The descriptor to register.
    fn source_fd(&self) -> SourceFd<'_>;
}

impl<T: AsFd + ?Sized> Source for T {
    fn source_fd(&self) -> SourceFd<'_> {
        SourceFd::Os(self.as_fd())
    }
}
