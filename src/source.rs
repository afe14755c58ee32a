//! What an io watcher watches: anything with a file descriptor (a socket
//! on Windows), or a virtual fd of a simulated backend.
//!
//! The platform's descriptor types are named here, once: the rest of the
//! crate says `RawFd` and means a file descriptor on Unix and a `SOCKET`
//! on Windows.

cfg_if::cfg_if! {
    if #[cfg(windows)] {
        use std::os::windows::io::{AsSocket as AsOs, BorrowedSocket as BorrowedOs};
        /// The number of an OS descriptor: on Windows, a socket
        /// ([`RawSocket`](std::os::windows::io::RawSocket)); on Unix, a
        /// file descriptor (`std::os::fd::RawFd`).
        ///
        /// ```
        /// let fd: evloop::RawFd = 3;
        /// assert_eq!(fd, 3);
        /// ```
        pub type RawFd = std::os::windows::io::RawSocket;

        fn borrow<T: AsOs + ?Sized>(source: &T) -> BorrowedOs<'_> {
            source.as_socket()
        }

        /// The number of a borrowed descriptor.
        pub(crate) fn raw(fd: BorrowedOs<'_>) -> RawFd {
            std::os::windows::io::AsRawSocket::as_raw_socket(&fd)
        }
    } else {
        use std::os::fd::{AsFd as AsOs, BorrowedFd as BorrowedOs};
        /// The number of an OS descriptor: on Unix, a file descriptor
        /// ([`std::os::fd::RawFd`]); on Windows, a socket (`RawSocket`).
        ///
        /// ```
        /// let fd: evloop::RawFd = 3;
        /// assert_eq!(fd, 3);
        /// ```
        pub type RawFd = std::os::fd::RawFd;

        fn borrow<T: AsOs + ?Sized>(source: &T) -> BorrowedOs<'_> {
            source.as_fd()
        }

        /// The number of a borrowed descriptor.
        pub(crate) fn raw(fd: BorrowedOs<'_>) -> RawFd {
            std::os::fd::AsRawFd::as_raw_fd(&fd)
        }
    }
}

/// "No descriptor": where the crate keeps an optional fd as a plain number
/// (-1 on Unix, `INVALID_SOCKET` on Windows).
pub(crate) const NO_FD: RawFd = !0;

/// The number of the descriptor behind a source, OS or virtual.
#[cfg_attr(not(feature = "net"), allow(dead_code))] // net and replay
pub(crate) fn number(fd: SourceFd<'_>) -> RawFd {
    fd.number()
}

/// The descriptor behind a [`Source`].
///
/// `Os` carries a borrowed descriptor (`BorrowedFd` on Unix,
/// `BorrowedSocket` on Windows), which cannot be forged without `unsafe`:
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
    /// A real, open file descriptor (on Windows, a socket).
    Os(BorrowedOs<'a>),
    /// A virtual descriptor number understood only by backends whose
    /// [`Capabilities::virtual_fds`](crate::backend::Capabilities::virtual_fds) is set.
    Virtual(VirtualFd),
}

impl SourceFd<'_> {
    /// The descriptor's number, OS or virtual (a socket's on Windows): the
    /// number a trace names it by, and a replay's sockets are asked for.
    ///
    /// ```
    /// use evloop::{Sim, Source};
    /// let sock = Sim::new().socket("s", 0);
    /// assert_eq!(sock.source_fd().number(), 3);
    /// # #[cfg(unix)] {
    /// let (a, _b) = std::os::unix::net::UnixStream::pair()?;
    /// assert_eq!(a.source_fd().number(), std::os::fd::AsRawFd::as_raw_fd(&a));
    /// # }
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn number(self) -> RawFd {
        match self {
            SourceFd::Os(fd) => raw(fd),
            SourceFd::Virtual(v) => v.get(),
        }
    }
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
/// Every `AsFd` type is a source on Unix (sockets, pipes, `File`, `OwnedFd`,
/// and references to them), every `AsSocket` type on Windows (`TcpStream`,
/// `TcpListener`, `UdpSocket`, `OwnedSocket`, ...). The simulated backend's
/// sockets are sources too.
/// Implementing it for your own type is safe: an OS descriptor can only be
/// produced from something that already owns or borrows it.
///
/// ```
/// use evloop::{Source, SourceFd};
/// let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
/// assert!(matches!(listener.source_fd(), SourceFd::Os(_)));
/// ```
pub trait Source {
    /// The descriptor to register.
    fn source_fd(&self) -> SourceFd<'_>;
}

impl<T: AsOs + ?Sized> Source for T {
    fn source_fd(&self) -> SourceFd<'_> {
        SourceFd::Os(borrow(self))
    }
}
