//! Helpers for writing a backend: the clock, the deadline of a wait, and
//! (Unix) the check that an fd can ever be watched. The crate's own backends
//! use exactly these; a backend outside the crate should too, rather than
//! write its own timeout rounding and `EINTR` handling.
//!
//! - [`Clock`]: the monotonic clock a backend's [`Backend::now`] reads,
//!   from a fixed origin that survives `reinit`.
//! - [`Deadline`]: when a wait must end, so that a wait interrupted by a
//!   signal (`EINTR`), or woken by something the backend does not report
//!   (an internal fd, a completion it ignores), is resumed with the time
//!   that is *left*, rounded up to the kernel's unit, never down.
//! - `check_pollable` and `refuse_files` (Unix): regular files and
//!   directories are always "ready", so no backend watches them (`EPERM`,
//!   as `epoll_ctl` refuses them), and an fd that is not open cannot be
//!   watched at all.
//! - `readable_now` and `readable_within` (Unix): a `poll(2)` of one fd,
//!   for the holder of a loop's pollable fd.
//!
//! A level-triggered `poll(2)` wait with all three:
//!
//! ```
//! use evloop::backends::util::{refuse_files, Clock, Deadline};
//! use std::io;
//! use std::os::fd::AsRawFd;
//! use std::os::unix::net::UnixStream;
//! use std::time::Duration;
//!
//! let clock = Clock::new();
//! let (a, b) = UnixStream::pair()?;
//! refuse_files("mine", a.as_raw_fd())?; // a socket: fine
//! let mut fds = [libc::pollfd { fd: a.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
//! let deadline = Deadline::new(Some(Duration::from_millis(20)));
//! let n = loop {
//!     // SAFETY: `fds` is a valid array of one pollfd.
//!     let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, deadline.millis()) };
//!     if n >= 0 {
//!         break n;
//!     }
//!     let err = io::Error::last_os_error();
//!     if err.kind() != io::ErrorKind::Interrupted {
//!         return Err(err);
//!     }
//!     // EINTR: wait again for the time that is left.
//! };
//! assert_eq!(n, 0, "nothing to read");
//! assert!(clock.now() >= Duration::from_millis(20), "never early");
//! # drop(b);
//! # Ok::<(), io::Error>(())
//! ```
//!
//! [`Backend::now`]: crate::backend::Backend::now
#![allow(unsafe_code)]

#[cfg(any(unix, target_os = "wasi"))]
use std::io;
#[cfg(unix)]
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// The OS backends' clock: monotonic (`CLOCK_MONOTONIC` on Linux, read
/// directly; elsewhere [`Instant`]), measured from the moment it was made. Keep the same one
/// across [`Backend::reinit`](crate::backend::Backend::reinit), so that timers
/// already scheduled stay valid, and measure the waits' deadlines with the
/// same clock ([`Deadline`] uses [`Instant`] too), so that after a wait of
/// `t` rounded up, [`Clock::now`] has advanced by at least `t`.
///
/// ```
/// use evloop::backends::util::Clock;
/// use std::time::Duration;
/// let clock = Clock::new();
/// let t0 = clock.now();
/// std::thread::sleep(Duration::from_millis(2));
/// assert!(clock.now() - t0 >= Duration::from_millis(2));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Origin,
}

cfg_if::cfg_if! {
    if #[cfg(any(target_os = "linux", target_os = "android"))] {
        /// `CLOCK_MONOTONIC` at the origin (seconds, nanoseconds): where
        /// `Instant` reads the same clock, read directly, since the loop
        /// reads it after every poll and `Instant::elapsed`'s checked
        /// `timespec` arithmetic costs about fifty instructions more.
        type Origin = (i64, i64);

        fn origin() -> Origin {
            monotonic()
        }

        fn since(origin: &Origin) -> Duration {
            let (s, n) = monotonic();
            // Monotonic: never before the origin. The nanoseconds borrow
            // a second when they are fewer than the origin's.
            let (mut secs, mut nanos) = ((s - origin.0) as u64, n - origin.1);
            if nanos < 0 {
                secs = secs.wrapping_sub(1);
                nanos += 1_000_000_000;
            }
            Duration::new(secs, nanos as u32)
        }

        /// `CLOCK_MONOTONIC` now (through the vDSO: no syscall).
        #[inline]
        fn monotonic() -> (i64, i64) {
            let mut t = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `t` is a valid, writable timespec for the call to
            // fill; CLOCK_MONOTONIC always exists on Linux, so the call
            // cannot fail.
            unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
            // (`time_t` and `c_long` are 32 bits on some 32-bit targets.)
            #[allow(clippy::unnecessary_cast)]
            (t.tv_sec as i64, t.tv_nsec as i64)
        }
    } else {
        /// Elsewhere `Instant`'s clock is not always `CLOCK_MONOTONIC`
        /// (macOS: `CLOCK_UPTIME_RAW`), and [`Deadline`] measures with
        /// `Instant`: the two must agree.
        type Origin = Instant;

        fn origin() -> Origin {
            Instant::now()
        }

        fn since(origin: &Origin) -> Duration {
            origin.elapsed()
        }
    }
}

impl Clock {
    /// A clock whose origin is now.
    pub fn new() -> Clock {
        Clock { origin: origin() }
    }

    /// The time since the origin: what [`Backend::now`](crate::backend::Backend::now)
    /// returns.
    #[inline]
    pub fn now(&self) -> Duration {
        since(&self.origin)
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::new()
    }
}

/// When a wait must end. Make one per [`Backend::poll`](crate::backend::Backend::poll)
/// call, before the first wait, and ask it for the time left before each
/// wait: a wait interrupted by a signal (`EINTR`), or ended only by
/// something the backend does not pass to the loop (its internal fds, a
/// completion it ignores), then goes on for the time that is left instead
/// of starting afresh (a wait that never ends under a steady stream of
/// signals) or returning early (a [`RunMode::Once`](crate::RunMode::Once)
/// that returns with nothing done).
///
/// ```
/// use evloop::backends::util::Deadline;
/// use std::time::Duration;
///
/// assert_eq!(Deadline::new(None).remaining(), None); // forever
/// assert_eq!(Deadline::new(None).millis(), -1);
/// assert_eq!(Deadline::new(Some(Duration::ZERO)).millis(), 0);
/// // Rounded up: a 0.4 ms remainder is a 1 ms wait, not a busy loop.
/// assert_eq!(Deadline::new(Some(Duration::from_micros(400))).millis(), 1);
/// let d = Deadline::new(Some(Duration::from_secs(10)));
/// assert!(d.remaining().unwrap() <= Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    timeout: Option<Duration>,
    at: Option<Instant>,
}

impl Deadline {
    /// A deadline `timeout` from now (`None`: never).
    pub fn new(timeout: Option<Duration>) -> Deadline {
        Deadline {
            timeout,
            at: timeout.and_then(|t| Instant::now().checked_add(t)),
        }
    }

    /// The time left (`None`: wait forever; zero once it has passed). Pass
    /// it on with nanosecond precision (`kevent`'s `timespec`), or round it
    /// up to the kernel's unit (select's microseconds; [`Deadline::millis`]
    /// for milliseconds).
    pub fn remaining(&self) -> Option<Duration> {
        match (self.timeout, self.at) {
            (None, _) => None,
            (Some(_), Some(at)) => Some(at.saturating_duration_since(Instant::now())),
            // So far away that `Instant` cannot represent it.
            (Some(t), None) => Some(t),
        }
    }

    /// The time left in whole milliseconds, rounded up (so that a wait never
    /// ends before the deadline), clamped to `c_int::MAX` (waking early from
    /// a clamp is harmless: the loop polls again); -1 for forever. This is
    /// the timeout argument of `poll(2)` and `epoll_wait(2)`.
    pub fn millis(&self) -> libc::c_int {
        match self.remaining() {
            None => -1,
            Some(d) => {
                let ms = d.as_nanos().div_ceil(1_000_000);
                ms.min(libc::c_int::MAX as u128) as libc::c_int
            }
        }
    }
}

#[cfg(any(unix, target_os = "wasi"))]
/// Whether `fd` is readable (or hung up, or in error) right now: one
/// `poll(2)` with a zero timeout, resumed after `EINTR`. For the holder
/// of a loop's pollable fd whose own wait is edge-triggered (tokio's
/// `AsyncFd`, mio): readiness left after a run shows here, where no new
/// edge would announce it ([`PollableLoop::readable_now`](crate::PollableLoop::readable_now)).
///
/// ```
/// use evloop::backends::util::readable_now;
/// use std::io::Write;
/// use std::os::fd::AsFd;
///
/// let (a, mut b) = std::os::unix::net::UnixStream::pair()?;
/// assert!(!readable_now(a.as_fd())?);
/// b.write_all(b"x")?;
/// assert!(readable_now(a.as_fd())?);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn readable_now(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<bool> {
    readable_within(fd, Duration::ZERO)
}

#[cfg(any(unix, target_os = "wasi"))]
/// Whether `fd` becomes readable (or hung up, or in error) within
/// `timeout`: `poll(2)`, resumed after `EINTR` for the time left.
///
/// ```
/// use evloop::backends::util::readable_within;
/// use std::io::Write;
/// use std::os::fd::AsFd;
/// use std::time::Duration;
///
/// let (a, mut b) = std::os::unix::net::UnixStream::pair()?;
/// let writer = std::thread::spawn(move || b.write_all(b"x"));
/// assert!(readable_within(a.as_fd(), Duration::from_secs(10))?);
/// writer.join().unwrap()?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn readable_within(fd: std::os::fd::BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let deadline = Deadline::new(Some(timeout));
    loop {
        // SAFETY: `p` is one valid pollfd, alive for the call; the fd is
        // borrowed, so open.
        let n = unsafe { libc::poll(&mut p, 1, deadline.millis()) };
        if n >= 0 {
            return Ok(n == 1 && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

#[cfg(unix)]
/// Whether `fd` can ever be watched: it must be open, and neither a
/// regular file nor a directory (see [`refuse_files`]). Call it from
/// [`NoticeService::check_fd`](crate::backend::NoticeService::check_fd) (the loop's Unix
/// service does), so that
/// [`Loop::io`](crate::Loop::io) fails at once with the reason; `backend`
/// (your backend's name) goes into the error's text.
///
/// ```
/// use evloop::backends::util::check_pollable;
/// use std::os::fd::AsRawFd;
///
/// let (a, _b) = std::os::unix::net::UnixStream::pair()?;
/// assert!(check_pollable("mine", a.as_raw_fd()).is_ok());
/// let file = std::fs::File::open("Cargo.toml")?;
/// let err = check_pollable("mine", file.as_raw_fd()).unwrap_err();
/// assert_eq!(err.raw_os_error(), None); // the text says EPERM and why
/// assert!(err.to_string().contains("regular file"));
/// assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
/// let err = check_pollable("mine", 1_000_000).unwrap_err();
/// assert!(err.to_string().contains("not open"));
/// # Ok::<(), std::io::Error>(())
/// ```
#[inline]
pub fn check_pollable(backend: &str, fd: RawFd) -> io::Result<()> {
    // One fstat answers both questions (open? a file?); the answer for a
    // socket or a pipe is inlined, the rest out of line.
    match fstat_type(fd) {
        Some(kind) if !never_pollable(kind) => Ok(()),
        answer => refuse_pollable(backend, fd, answer),
    }
}

#[cfg(unix)]
/// [`check_pollable`]'s refusals: `answer` is `fstat`'s (`None`: it
/// failed, and `errno` says why).
#[cold]
#[inline(never)]
fn refuse_pollable(backend: &str, fd: RawFd, answer: Option<libc::mode_t>) -> io::Result<()> {
    match answer {
        Some(kind) => refuse_kind(backend, fd, kind),
        None => {
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EBADF) {
                return Ok(());
            }
            Err(io::Error::new(
                err.kind(),
                format!("the {backend} backend cannot watch fd {fd}: it is not open ({err})"),
            ))
        }
    }
}

#[cfg(unix)]
/// Refuses regular files and directories with `EPERM` (as `epoll_ctl`
/// does): they are always "ready", so watching one only makes a busy loop,
/// and every backend refuses them alike (the conformance kit's
/// `regular_file` scenario). An fd that `fstat` cannot inspect is let
/// through: the wait reports it. Call it in
/// [`Backend::modify`](crate::backend::Backend::modify) when an fd is first
/// registered (the crate's poll, select and kqueue backends do; epoll's
/// kernel refuses them by itself).
///
/// ```
/// use evloop::backends::util::refuse_files;
/// use std::os::fd::AsRawFd;
///
/// let dir = std::fs::File::open(".")?;
/// let err = refuse_files("mine", dir.as_raw_fd()).unwrap_err();
/// assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
/// assert!(err.to_string().contains("the mine backend does not watch"));
/// assert!(refuse_files("mine", 1_000_000).is_ok(), "left to the wait");
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn refuse_files(backend: &str, fd: RawFd) -> io::Result<()> {
    match fstat_type(fd) {
        Some(kind) => refuse_kind(backend, fd, kind),
        None => Ok(()),
    }
}

#[cfg(unix)]
/// [`refuse_files`] for a file type already known.
fn refuse_kind(backend: &str, fd: RawFd, kind: libc::mode_t) -> io::Result<()> {
    if never_pollable(kind) {
        let err = io::Error::from_raw_os_error(libc::EPERM);
        return Err(io::Error::new(
            err.kind(),
            format!(
                "the {backend} backend does not watch fd {fd}: it is a regular file or a \
                 directory, always ready ({err})"
            ),
        ));
    }
    Ok(())
}

#[cfg(unix)]
/// Whether a file of this type (`S_IFMT` bits) is always ready: a
/// regular file or a directory.
#[inline]
fn never_pollable(kind: libc::mode_t) -> bool {
    kind == libc::S_IFREG || kind == libc::S_IFDIR
}

#[cfg(unix)]
/// The `S_IFMT` bits of `fstat(fd)`; `None` if it failed (`errno` says
/// why: read it before any other call).
#[inline]
fn fstat_type(fd: RawFd) -> Option<libc::mode_t> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` has room for the stat structure fstat fills in; an
    // invalid fd makes it fail with EBADF and leave `st` alone.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: fstat succeeded, so it initialised `st`.
    Some(unsafe { st.assume_init() }.st_mode & libc::S_IFMT)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// The clock never goes back, and agrees with `Instant` (the clock
    /// `Deadline` measures waits with): it reads no more than an
    /// `Instant` taken before it was made.
    #[test]
    fn the_clock_is_monotonic_and_agrees_with_instant() {
        let before = Instant::now();
        let clock = Clock::new();
        let mut last = Duration::ZERO;
        for _ in 0..100_000 {
            let now = clock.now();
            assert!(now >= last, "{now:?} after {last:?}");
            last = now;
        }
        let outer = before.elapsed();
        assert!(last <= outer, "{last:?} > {outer:?}");
    }

    #[test]
    fn millis_round_up() {
        let ms = |timeout: Option<Duration>| Deadline { timeout, at: None }.millis();
        assert_eq!(ms(None), -1);
        assert_eq!(ms(Some(Duration::ZERO)), 0);
        assert_eq!(ms(Some(Duration::from_nanos(1))), 1);
        assert_eq!(ms(Some(Duration::from_micros(999))), 1);
        assert_eq!(ms(Some(Duration::from_millis(1))), 1);
        assert_eq!(ms(Some(Duration::from_micros(1001))), 2);
        assert_eq!(ms(Some(Duration::MAX)), libc::c_int::MAX);
    }

    #[test]
    fn deadline_counts_down() {
        let d = Deadline::new(Some(Duration::from_secs(10)));
        let left = d.remaining().unwrap();
        assert!(left <= Duration::from_secs(10) && left > Duration::from_secs(9));
        assert_eq!(Deadline::new(None).remaining(), None);
        assert!(Deadline::new(Some(Duration::MAX)).remaining().is_some());
    }

    #[test]
    fn pollable_fds() {
        use std::os::fd::AsRawFd;
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(check_pollable("t", a.as_raw_fd()).is_ok());
        let file = std::fs::File::open("Cargo.toml").unwrap();
        let err = check_pollable("t", file.as_raw_fd()).unwrap_err();
        assert!(err.to_string().contains("regular file"), "{err}");
        let dir = std::fs::File::open(".").unwrap();
        assert!(check_pollable("t", dir.as_raw_fd()).is_err());
        // A number far above any open fd (other tests open fds meanwhile).
        let err = check_pollable("t", 1_000_000).unwrap_err();
        assert!(err.to_string().contains("not open"), "{err}");
    }
}
