//! What the Unix backends share: their clock, the deadline of a wait
//! (resumed after `EINTR` with the time left, rounded up), the check that
//! an fd can be watched at all, and (in the submodules) signals, child
//! exits, wake-ups, wall-clock steps and path hints:
//!
//! - `hub`: the process-wide signal hub and the per-backend slots its
//!   handler writes to;
//! - `wake`: the wake fd (an eventfd, or a pipe);
//! - `children`: reaping watched children (pidfds on Linux, `SIGCHLD`
//!   elsewhere);
//! - `clock_steps`: wall-clock step reports (a `CLOCK_REALTIME` timerfd
//!   on Linux, nothing elsewhere);
//! - `path_hints`: path change hints for stat watchers (inotify on Linux,
//!   nothing elsewhere);
//! - `notifier`: what a backend embeds to use them ([`Notifier`],
//!   [`Wakeup`]), with [`InternalFds`], how it lends them its kernel set.
#![allow(unsafe_code)]

pub(crate) mod children;
pub(crate) mod clock_steps;
pub(crate) mod hub;
pub(crate) mod notifier;
pub(crate) mod path_hints;
mod wake;

pub(crate) use notifier::{InternalFds, Notifier};

use std::io;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

/// The OS backends' clock: monotonic (`CLOCK_MONOTONIC` on Linux, through
/// [`Instant`]), measured from the backend's creation. It is kept across
/// `reinit`, so timers already scheduled stay valid.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    origin: Instant,
}

impl Clock {
    pub(crate) fn new() -> Clock {
        Clock {
            origin: Instant::now(),
        }
    }

    pub(crate) fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// When a wait must end, so that a wait interrupted by a signal (`EINTR`)
/// can be resumed with the time that is left rather than started afresh.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    timeout: Option<Duration>,
    at: Option<Instant>,
}

impl Deadline {
    /// A deadline `timeout` from now (`None`: never).
    pub(crate) fn new(timeout: Option<Duration>) -> Deadline {
        Deadline {
            timeout,
            at: timeout.and_then(|t| Instant::now().checked_add(t)),
        }
    }

    /// The time left (`None`: wait forever).
    pub(crate) fn remaining(&self) -> Option<Duration> {
        match (self.timeout, self.at) {
            (None, _) => None,
            (Some(_), Some(at)) => Some(at.saturating_duration_since(Instant::now())),
            // So far away that `Instant` cannot represent it.
            (Some(t), None) => Some(t),
        }
    }

    /// The time left in whole milliseconds, rounded up (so that a wait never
    /// ends before the deadline), clamped to `c_int::MAX`; -1 for forever.
    /// This is the timeout argument of `poll(2)` and `epoll_wait(2)`.
    pub(crate) fn millis(&self) -> libc::c_int {
        match self.remaining() {
            None => -1,
            Some(d) => {
                let ms = d.as_nanos().div_ceil(1_000_000);
                ms.min(libc::c_int::MAX as u128) as libc::c_int
            }
        }
    }
}

/// Whether `fd` can ever be watched: it must be open, and neither a
/// regular file nor a directory (see [`refuse_files`]). Each backend's
/// [`Backend::check_fd`](crate::Backend::check_fd) calls it, so that
/// `Loop::io` fails at once with the reason.
pub(crate) fn check_pollable(backend: &str, fd: RawFd) -> io::Result<()> {
    match file_type(fd) {
        Err(err) if err.raw_os_error() == Some(libc::EBADF) => Err(io::Error::new(
            err.kind(),
            format!("the {backend} backend cannot watch fd {fd}: it is not open ({err})"),
        )),
        _ => refuse_files(backend, fd),
    }
}

/// Refuses regular files and directories with `EPERM`, as `epoll_ctl`
/// does: they are always "ready", so watching them only makes a busy loop,
/// and every backend here refuses them alike. An fd that `fstat` cannot
/// inspect is let through (the wait reports it). poll, select and kqueue
/// call it when an fd is first registered.
pub(crate) fn refuse_files(backend: &str, fd: RawFd) -> io::Result<()> {
    let Ok(kind) = file_type(fd) else {
        return Ok(());
    };
    if kind == libc::S_IFREG || kind == libc::S_IFDIR {
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

/// The `S_IFMT` bits of `fstat(fd)`.
fn file_type(fd: RawFd) -> io::Result<libc::mode_t> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` has room for the stat structure fstat fills in; an
    // invalid fd makes it fail with EBADF and leave `st` alone.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded, so it initialised `st`.
    Ok(unsafe { st.assume_init() }.st_mode & libc::S_IFMT)
}

#[cfg(test)]
mod tests {
    use super::*;

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
