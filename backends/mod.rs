//! The backends compiled into the crate, one file each, and the choice of
//! one by name. The platform choice is made here, once, with `cfg`.
//!
//! | backend  | platforms            | edge | one-shot | fd limit         |
//! |----------|----------------------|------|----------|------------------|
//! | `epoll`  | Linux, Android       | yes  | native   | none             |
//! | `kqueue` | macOS, iOS, BSDs     | yes  | native   | none             |
//! | `poll`   | every Unix           | no   | emulated | none             |
//! | `select` | every Unix           | no   | emulated | `FD_SETSIZE - 1` |
//! | `sim`    | everywhere           | no   | emulated | virtual fds only |
//!
//! [`open`] creates an OS backend by name; [`Builder`](crate::Builder) uses
//! it to pick one from an explicit choice, the `EVLOOP_BACKEND` environment
//! variable or [`default_name`].
//!
//! ```
//! use evloop::backends;
//! assert!(backends::AVAILABLE.contains(&backends::default_name()));
//! for name in backends::AVAILABLE {
//!     assert_eq!(backends::open(name).unwrap().name(), *name);
//! }
//! ```

use crate::{Backend, Error};

pub mod sim;

#[cfg(any(target_os = "linux", target_os = "android"))]
pub mod epoll;

#[cfg(unix)]
pub mod fd_io;

// What the Unix backends share: the clock, the deadline of a wait, the
// check that an fd can be watched at all.
#[cfg(unix)]
pub(crate) mod unix;
#[cfg(unix)]
pub(crate) use unix::{Clock, Deadline};

#[cfg(unix)]
pub mod poll;

#[cfg(unix)]
pub mod select;

// The platform's backends. kqueue is written against `kqueue_sys`: the
// kernel's interface (through libc), or, for running it on Linux in tests,
// an emulation on top of epoll.
cfg_if::cfg_if! {
    if #[cfg(all(feature = "emulated-kqueue", target_os = "linux"))] {
        // Test builds only: the kqueue backend over an emulated kqueue.
        pub mod kqueue;
        mod kqueue_emulated;
        use kqueue_emulated as kqueue_sys;
        const PLATFORM_AVAILABLE: &[&str] = &["epoll", "poll", "select", "kqueue"];
        const PLATFORM_DEFAULT: &str = "epoll";
    } else if #[cfg(any(target_os = "linux", target_os = "android"))] {
        const PLATFORM_AVAILABLE: &[&str] = &["epoll", "poll", "select"];
        const PLATFORM_DEFAULT: &str = "epoll";
    } else if #[cfg(any(
        target_os = "macos",
        target_os = "ios",
        target_os = "freebsd",
        target_os = "netbsd",
        target_os = "openbsd",
        target_os = "dragonfly"
    ))] {
        pub mod kqueue;
        use libc as kqueue_sys;
        const PLATFORM_AVAILABLE: &[&str] = &["kqueue", "poll", "select"];
        const PLATFORM_DEFAULT: &str = "kqueue";
    } else if #[cfg(unix)] {
        const PLATFORM_AVAILABLE: &[&str] = &["poll", "select"];
        const PLATFORM_DEFAULT: &str = "poll";
    } else {
        // No OS backend: only the simulator (and custom backends) remain.
        const PLATFORM_AVAILABLE: &[&str] = &[];
        const PLATFORM_DEFAULT: &str = "none";
    }
}

/// The OS backends [`open`] can create on this platform, best first:
/// `["epoll", "poll", "select"]` on Linux, `["kqueue", "poll", "select"]` on
/// macOS and the BSDs, `["poll", "select"]` on other Unix systems. (The
/// simulator is not listed: create it with [`Sim::backend`](crate::Sim::backend).)
///
/// ```
/// let names = evloop::backends::AVAILABLE;
/// assert!(names.contains(&"poll") && names.contains(&"select"));
/// # #[cfg(all(target_os = "linux", not(feature = "emulated-kqueue")))]
/// assert_eq!(names, ["epoll", "poll", "select"]);
/// ```
pub const AVAILABLE: &[&str] = PLATFORM_AVAILABLE;

/// The backend a loop uses when nothing else is asked for: `epoll` on Linux,
/// `kqueue` on macOS and the BSDs, `poll` on other Unix systems (and
/// `"none"`, which [`open`] refuses, where there is no OS backend).
///
/// ```
/// let name = evloop::backends::default_name();
/// assert_eq!(name, evloop::backends::AVAILABLE[0]);
/// # #[cfg(target_os = "linux")]
/// assert_eq!(name, "epoll");
/// ```
pub fn default_name() -> &'static str {
    PLATFORM_DEFAULT
}

/// Creates the OS backend called `name` (one of [`AVAILABLE`]; exact,
/// lowercase).
///
/// Errors: [`Error::UnknownBackend`] if no backend of that name exists on
/// this platform, [`Error::Backend`] (`op` is `"create"`) if the kernel
/// refused to create it (for instance, out of file descriptors).
///
/// ```
/// use evloop::{backends, Error, Loop};
/// let poll = backends::open("poll").unwrap();
/// assert_eq!(poll.name(), "poll");
/// let lp: Loop = Loop::from_boxed(poll);
/// assert_eq!(lp.backend_name(), "poll");
///
/// let Err(err) = backends::open("iocp") else { panic!("iocp on Unix?") };
/// assert!(matches!(err, Error::UnknownBackend { .. }));
/// assert!(err.to_string().contains("\"iocp\""));
/// ```
pub fn open(name: &str) -> Result<Box<dyn Backend>, Error> {
    fn created<B: Backend + 'static>(
        backend: &'static str,
        made: std::io::Result<B>,
    ) -> Result<Box<dyn Backend>, Error> {
        match made {
            Ok(b) => Ok(Box::new(b)),
            Err(source) => Err(Error::Backend {
                backend,
                op: "create",
                source,
            }),
        }
    }
    match name {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        "epoll" => created("epoll", epoll::Epoll::new()),
        #[cfg(any(
            target_os = "macos",
            target_os = "ios",
            target_os = "freebsd",
            target_os = "netbsd",
            target_os = "openbsd",
            target_os = "dragonfly",
            all(feature = "emulated-kqueue", target_os = "linux")
        ))]
        "kqueue" => created("kqueue", kqueue::Kqueue::new()),
        #[cfg(unix)]
        "poll" => Ok(Box::new(poll::Poll::new())),
        #[cfg(unix)]
        "select" => Ok(Box::new(select::Select::new())),
        _ => Err(Error::UnknownBackend {
            name: name.to_string(),
            available: AVAILABLE,
            env_var: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_every_available_backend() {
        for name in AVAILABLE {
            assert_eq!(open(name).unwrap().name(), *name);
        }
        assert!(matches!(
            open("sim"),
            Err(Error::UnknownBackend { available, .. }) if available == AVAILABLE
        ));
    }
}
