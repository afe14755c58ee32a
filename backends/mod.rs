//! The backends compiled into the crate, one file each, and the choice of
//! one by name. The platform choice is made here, once, with `cfg`.
//!
//! | backend    | platforms                       | edge        | one-shot | fd limit         | hang-up       | closed fd noticed |
//! |------------|---------------------------------|-------------|----------|------------------|---------------|-------------------|
//! | `epoll`    | Linux, Android                  | yes         | native   | none             | always        | next change fails |
//! | `io_uring` | Linux, cargo feature `io-uring` | yes (5.13+) | native   | none             | as of wake-up | after next change |
//! | `kqueue`   | macOS, iOS, BSDs                | yes         | native   | none             | always        | after next change |
//! | `poll`     | every Unix                      | no          | emulated | none             | always        | next wait         |
//! | `select`   | every Unix                      | no          | emulated | `FD_SETSIZE - 1` | never         | next wait         |
//! | `iocp`     | Windows (the default)           | no          | native   | none             | as of wake-up | next wait         |
//! | `select`   | Windows (Winsock)               | no          | emulated | none             | never         | next wait         |
//! | `wasi`     | WASI preview 1 (`wasm32-wasip1`)| no          | emulated | none             | always        | next wait         |
//! | `sim`      | everywhere                      | no          | emulated | virtual fds only | always        | next wait         |
//!
//! kqueue, poll and select are built for FreeBSD, macOS and NetBSD;
//! illumos, which has no kqueue (and no event-ports backend here), gets
//! poll and select, with poll its default. CI type-checks and lints those
//! targets but runs nothing on them: the tests run on Linux. The Windows
//! backends (`x86_64-pc-windows-gnu`) run under Wine in CI.
//!
//! (The last two columns are [`Capabilities::hangup`](crate::backend::Capabilities::hangup)
//! and [`Capabilities::closed_fd`](crate::backend::Capabilities::closed_fd).)
//!
//! [`open`] creates an OS backend by name ([`factory`] gives its
//! [`Factory`]); [`Builder`](crate::Builder) uses it to pick one from an
//! explicit choice, the `EVLOOP_BACKEND` environment variable or
//! [`default_name`], among these and the backends registered with it.
//! [`util`] has what any Unix backend needs (the clock, the deadline of a
//! wait, the "never pollable" check), and `unix` (on Unix) signals, child
//! exits and wake-ups (`unix::Notifier`), for backends of other crates too.
//!
//! ```
//! use evloop::backends;
//! assert!(backends::AVAILABLE.contains(&backends::default_name()));
//! for name in backends::AVAILABLE {
//!     assert_eq!(backends::open(name).unwrap().name(), *name);
//! }
//! ```

use std::sync::RwLock;

use crate::backend::Backend;
use crate::Error;

pub mod sim;

// A backend with the OS services a loop would compose with it.
mod with_services;
pub use with_services::WithServices;

// The loop's OS services on Unix: signals, children, wake-ups (`unix/`,
// public), and the public helpers (the clock, the deadline of a wait,
// the check that an fd can be watched at all).
#[cfg(unix)]
pub mod unix;
#[cfg(any(unix, windows, target_os = "wasi"))]
pub mod util;
#[cfg(any(unix, windows, target_os = "wasi"))]
pub(crate) use util::{Clock, Deadline};

// What the Windows backends share: Winsock, console events, children,
// wake-ups (`windows/`).
#[cfg(windows)]
pub(crate) mod windows;

#[cfg(any(unix, target_os = "wasi"))]
pub mod fd_io;
// accept4 and the fd limit, for `evloop::net` only; on WASI also the
// non-blocking flag of a borrowed fd, for `evloop::exec`.
#[cfg(any(
    all(any(unix, windows), feature = "net"),
    all(target_os = "wasi", any(feature = "net", feature = "exec"))
))]
pub(crate) mod net_sys;
#[cfg(unix)]
pub mod poll;
#[cfg(unix)]
pub mod select;

/// Creates a backend: how [`Builder::register`](crate::Builder::register)
/// and the conformance kit (feature `conformance`) are given one, and what
/// [`factory`] returns for the crate's own. A plain function, or a closure
/// that captures nothing; it may probe the kernel and fail (the error
/// reaches [`Builder::build`](crate::Builder::build) as
/// [`Error::Backend`]).
///
/// ```
/// use evloop::backend::Backend;
/// use evloop::backends::{poll::Poll, Factory};
/// let open: Factory = || Ok(Box::new(Poll::new()));
/// assert_eq!(open()?.name(), "poll");
/// # Ok::<(), std::io::Error>(())
/// ```
pub type Factory = fn() -> std::io::Result<Box<dyn Backend>>;

/// An OS backend this platform offers: its name, and how to create it.
/// Each backend's file defines its own (`OFFERED`).
struct Offered {
    name: &'static str,
    open: Factory,
}

// Each platform's backends, best first: named here once. kqueue is written
// against `kqueue_sys`: the kernel's interface (through libc), or, for
// running it on Linux in tests, an emulation on top of epoll.
cfg_if::cfg_if! {
    if #[cfg(all(feature = "emulated-kqueue", feature = "io-uring", target_os = "linux"))] {
        // Test builds only: the kqueue backend over an emulated kqueue,
        // and the io_uring backend.
        pub mod epoll;
        pub mod io_uring;
        pub mod kqueue;
        mod kqueue_emulated;
        use kqueue_emulated as kqueue_sys;
        const PLATFORM: [Offered; 5] = [
            epoll::OFFERED,
            io_uring::OFFERED,
            poll::OFFERED,
            select::OFFERED,
            kqueue::OFFERED,
        ];
    } else if #[cfg(all(feature = "emulated-kqueue", target_os = "linux"))] {
        // Test builds only: the kqueue backend over an emulated kqueue.
        pub mod epoll;
        pub mod kqueue;
        mod kqueue_emulated;
        use kqueue_emulated as kqueue_sys;
        const PLATFORM: [Offered; 4] = [epoll::OFFERED, poll::OFFERED, select::OFFERED, kqueue::OFFERED];
    } else if #[cfg(all(feature = "io-uring", target_os = "linux"))] {
        // The io_uring backend is opt-in: after epoll, never the default.
        pub mod epoll;
        pub mod io_uring;
        const PLATFORM: [Offered; 4] = [epoll::OFFERED, io_uring::OFFERED, poll::OFFERED, select::OFFERED];
    } else if #[cfg(any(target_os = "linux", target_os = "android"))] {
        pub mod epoll;
        const PLATFORM: [Offered; 3] = [epoll::OFFERED, poll::OFFERED, select::OFFERED];
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
        const PLATFORM: [Offered; 3] = [kqueue::OFFERED, poll::OFFERED, select::OFFERED];
    } else if #[cfg(unix)] {
        const PLATFORM: [Offered; 2] = [poll::OFFERED, select::OFFERED];
    } else if #[cfg(windows)] {
        // Readiness through the AFD driver on a completion port (as
        // wepoll, mio, polling and libuv), and Winsock's select.
        pub mod iocp;
        #[path = "windows/select.rs"]
        pub mod select;
        const PLATFORM: [Offered; 2] = [iocp::OFFERED, select::OFFERED];
    } else if #[cfg(target_os = "wasi")] {
        // WASI preview 1 (wasm32-wasip1): poll_oneoff.
        pub mod wasi;
        const PLATFORM: [Offered; 1] = [wasi::OFFERED];
    } else {
        // No OS backend: only the simulator (and custom backends) remain.
        const PLATFORM: [Offered; 0] = [];
    }
}

/// The names of [`PLATFORM`], for [`AVAILABLE`].
const fn names_of<const N: usize>(offered: &[Offered; N]) -> [&'static str; N] {
    let mut out = [""; N];
    let mut i = 0;
    while i < N {
        out[i] = offered[i].name;
        i += 1;
    }
    out
}

const PLATFORM_NAMES: [&str; PLATFORM.len()] = names_of(&PLATFORM);

/// The OS backends [`open`] can create on this platform, best first:
/// `["epoll", "poll", "select"]` on Linux, `["kqueue", "poll", "select"]` on
/// macOS and the BSDs, `["iocp", "select"]` on Windows, `["poll",
/// "select"]` on other Unix systems, `["wasi"]` on WASI. With the
/// `io-uring` feature, Linux lists `"io_uring"` right after `"epoll"` (it
/// is never the default; [`open`] fails with the kernel's reason where
/// io_uring is refused). (The simulator is not listed: create it with
/// [`Sim::backend`](crate::Sim::backend).)
///
/// ```
/// let names = evloop::backends::AVAILABLE;
/// assert!(names.contains(&"select"));
/// # #[cfg(unix)]
/// assert!(names.contains(&"poll"));
/// # #[cfg(windows)]
/// assert_eq!(names, ["iocp", "select"]);
/// # #[cfg(all(target_os = "linux", not(feature = "emulated-kqueue"), not(feature = "io-uring")))]
/// assert_eq!(names, ["epoll", "poll", "select"]);
/// # #[cfg(all(target_os = "linux", not(feature = "emulated-kqueue"), feature = "io-uring"))]
/// assert_eq!(names, ["epoll", "io_uring", "poll", "select"]);
/// ```
pub const AVAILABLE: &[&str] = &PLATFORM_NAMES;

/// The backend a loop uses when nothing else is asked for: `epoll` on Linux,
/// `kqueue` on macOS and the BSDs, `iocp` on Windows, `poll` on other Unix
/// systems, `wasi` on WASI (and
/// `"none"`, which [`open`] refuses, where there is no OS backend).
///
/// ```
/// let name = evloop::backends::default_name();
/// assert_eq!(name, evloop::backends::AVAILABLE[0]);
/// # #[cfg(target_os = "linux")]
/// assert_eq!(name, "epoll");
/// ```
pub fn default_name() -> &'static str {
    match AVAILABLE.first() {
        Some(best) => best,
        None => "none",
    }
}

/// Creates the backend called `name`: one of [`AVAILABLE`], or one
/// [registered](register) for the process (exact, case-sensitive).
///
/// Errors: [`Error::UnknownBackend`] if no backend of that name exists on
/// this platform, [`Error::Backend`] (`op` is `"create"`) if the kernel
/// refused to create it (for instance, out of file descriptors).
///
/// ```
/// use evloop::{backends, Error, Loop};
/// let poll = backends::open("poll").unwrap();
/// assert_eq!(poll.name(), "poll");
/// let lp: Loop = Loop::from(poll);
/// assert_eq!(lp.backend_name(), "poll");
///
/// let Err(err) = backends::open("iocp") else { panic!("iocp on Unix?") };
/// assert!(matches!(err, Error::UnknownBackend { .. }));
/// assert!(err.to_string().contains("\"iocp\""));
/// ```
pub fn open(name: &str) -> Result<Box<dyn Backend>, Error> {
    let Some((name, open)) = lookup(name) else {
        return Err(Error::UnknownBackend {
            name: name.to_string(),
            available: names(),
            env_var: None,
        });
    };
    open().map_err(|source| Error::Backend {
        backend: name,
        op: "create",
        source,
    })
}

/// The names of the crate's backends on every platform (and the
/// simulator's): never registered for a backend of another crate, so that
/// a name means the same backend wherever the program runs.
///
/// ```
/// use evloop::backends::{self, RESERVED};
/// assert!(backends::AVAILABLE.iter().all(|name| RESERVED.contains(name)));
/// assert!(backends::register("iocp", backends::factory("select").unwrap()).is_err());
/// ```
pub const RESERVED: &[&str] = &[
    "epoll", "io_uring", "kqueue", "poll", "select", "iocp", "wasi", "sim",
];

/// The backends registered for the whole process, in order.
static REGISTERED: RwLock<Vec<(&'static str, Factory)>> = RwLock::new(Vec::new());

fn registered_list() -> std::sync::RwLockReadGuard<'static, Vec<(&'static str, Factory)>> {
    // The list is only pushed to: a panic elsewhere leaves it whole.
    REGISTERED.read().unwrap_or_else(|e| e.into_inner())
}

/// The backend called `name`: the platform's, else one registered.
fn lookup(name: &str) -> Option<(&'static str, Factory)> {
    if let Some(o) = PLATFORM.iter().find(|o| o.name == name) {
        return Some((o.name, o.open));
    }
    registered_list().iter().find(|(n, _)| *n == name).copied()
}

/// Makes a backend of another crate available under `name` to every loop
/// of the process: [`open`], [`factory`], [`Loop::new`](crate::Loop::new)
/// and every [`Builder`](crate::Builder) (so `EVLOOP_BACKEND=name`), and
/// the conformance kit's `run_named` (feature `conformance`). Call it once, at the start of the program, before the
/// loops that should be able to use it are made; it does not change the
/// default ([`default_name`]).
///
/// Errors: [`Error::BackendNameTaken`] if `name` is one of the crate's
/// backends on any platform ([`RESERVED`]), is empty, or was registered
/// already (whatever the factory: a name is registered once).
///
/// ```
/// use evloop::backends::{self, poll::Poll};
/// use evloop::{Error, Loop};
///
/// // A backend of another crate (here the crate's poll, under a new name).
/// backends::register("renamed-poll", || Ok(Box::new(Poll::new()))).unwrap();
/// assert!(backends::names().contains(&"renamed-poll"));
/// let lp: Loop = Loop::builder().backend("renamed-poll").build()?;
/// assert_eq!(lp.backend_name(), "poll"); // what the backend calls itself
///
/// let Err(err) = backends::register("epoll", || Ok(Box::new(Poll::new()))) else { panic!() };
/// assert!(matches!(err, Error::BackendNameTaken { name: "epoll", .. }));
/// assert!(backends::register("renamed-poll", || Ok(Box::new(Poll::new()))).is_err());
/// # Ok::<(), evloop::Error>(())
/// ```
pub fn register(name: &'static str, open: Factory) -> Result<(), Error> {
    let taken = |reason| Err(Error::BackendNameTaken { name, reason });
    if name.is_empty() {
        return taken("a backend needs a name");
    }
    if RESERVED.contains(&name) {
        return taken("the crate's own backends (on some platform) are called that");
    }
    let mut list = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    if list.iter().any(|(n, _)| *n == name) {
        return taken("a backend is registered under that name already");
    }
    tracing::trace!(name, "backend registered for the process");
    list.push((name, open));
    Ok(())
}

/// Every name [`open`] knows: [`AVAILABLE`] (best first), then the
/// backends [registered](register) for the process, in order.
///
/// ```
/// let names = evloop::backends::names();
/// assert_eq!(&names[..evloop::backends::AVAILABLE.len()], evloop::backends::AVAILABLE);
/// ```
pub fn names() -> Vec<&'static str> {
    let mut names = AVAILABLE.to_vec();
    names.extend(registered_list().iter().map(|(n, _)| *n));
    names
}

/// How [`open`] creates the backend called `name` (one of [`AVAILABLE`],
/// or [registered](register)), as a [`Factory`]; `None` for any other
/// name.
///
/// ```
/// use evloop::backends;
/// let open = backends::factory("select").unwrap();
/// assert_eq!(open()?.name(), "select");
/// assert!(backends::factory("sim").is_none());
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn factory(name: &str) -> Option<Factory> {
    lookup(name).map(|(_, open)| open)
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
        for name in AVAILABLE {
            assert_eq!(factory(name).unwrap()().unwrap().name(), *name);
        }
    }
}
