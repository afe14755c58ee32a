//! Reports of wall-clock steps, for the loop's periodic watchers
//! ([`Backend::watch_clock_steps`](crate::backend::Backend::watch_clock_steps)).
//!
//! - **Linux, Android**: a timerfd on `CLOCK_REALTIME`, armed with
//!   `TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET` for a time far in the
//!   future, is an internal fd of the backend's kernel set. It never
//!   expires; when the clock is *set* (`clock_settime`, `settimeofday`,
//!   NTP's step, a resume that corrects the clock: anything but a slew),
//!   the kernel cancels it, the fd turns readable and a `read` fails with
//!   `ECANCELED` ([`Outcome::Stepped`]). The backend then notes the step
//!   and arms the timer again. A read that returns an expiry count means
//!   the clock got past the far time: a step too. (timerfd_create(2).)
//! - **Everywhere else**: nothing. macOS has no timer that is cancelled
//!   when the clock is set; FreeBSD has a timerfd with that flag only from
//!   14.0 (a binary that calls it does not start on 13, whose libc lacks
//!   the symbol), and kqueue's `EVFILT_TIMER` with `NOTE_ABSTIME` is not
//!   documented to fire or cancel on a step. `watch` returns false there
//!   and the loop looks for steps itself (it compares the wall and
//!   monotonic clocks each iteration and wakes at least once a minute).
//!
//! After `fork()` the timerfd is shared with the parent (one timer: a
//! cancellation read by one process is lost to the other), so `reinit`
//! makes a fresh one in the child, as it makes a fresh wake fd.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::backend::InternalFds;

/// What one `read(2)` of the timerfd said, from its return value and
/// `errno`: the decoding, apart from the system call so that the rare
/// cases can be tested without setting the machine's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// `ECANCELED`: the clock was set since the timer was armed (or since
    /// the last such read).
    Stepped,
    /// 8 bytes, an expiry count: the clock passed the far time, which only
    /// a step can do. Arm again.
    Expired,
    /// `EAGAIN`: nothing happened.
    Quiet,
    /// `EINTR`: read again.
    Interrupted,
    /// Anything else (the errno): give up on this read.
    Failed(i32),
}

impl Outcome {
    /// Decodes `read`'s result `n` (bytes, or -1) and `errno` (meaningful
    /// only when `n` is -1).
    pub(crate) fn of(n: isize, errno: i32) -> Outcome {
        match n {
            8 => Outcome::Expired,
            n if n >= 0 => Outcome::Failed(libc::EIO), // a short read: not a timerfd's
            _ => match errno {
                libc::ECANCELED => Outcome::Stepped,
                libc::EINTR => Outcome::Interrupted,
                e if e == libc::EAGAIN || e == libc::EWOULDBLOCK => Outcome::Quiet,
                e => Outcome::Failed(e),
            },
        }
    }

    /// Whether the outcome means the wall clock jumped.
    pub(crate) fn is_step(self) -> bool {
        matches!(self, Outcome::Stepped | Outcome::Expired)
    }
}

/// A backend's clock-step reports: the timerfd while the loop wants them,
/// and whether a step was seen since the loop last took the news.
#[derive(Debug, Default)]
pub(crate) struct ClockSteps {
    /// The timer, in the kernel set, while steps are watched.
    timer: Option<OwnedFd>,
    /// A step was seen and not yet taken.
    stepped: bool,
}

impl ClockSteps {
    /// Starts reporting steps: true if this platform can, and the timer is
    /// in `set` (already, or now). False where nothing reports steps, or if
    /// the timer cannot be created or added (the loop then looks for steps
    /// itself).
    pub(crate) fn watch(&mut self, set: &mut dyn InternalFds) -> bool {
        if self.timer.is_some() {
            return true;
        }
        let Ok(timer) = sys::create() else {
            return false;
        };
        if set.add(timer.as_raw_fd()).is_err() {
            return false;
        }
        self.timer = Some(timer);
        true
    }

    /// Stops: the timer leaves `set` and is closed. A step seen and not
    /// yet taken is forgotten (no periodic watcher is left to care).
    pub(crate) fn unwatch(&mut self, set: &mut dyn InternalFds) {
        if let Some(timer) = self.timer.take() {
            set.remove(timer.as_raw_fd());
        }
        self.stepped = false;
    }

    /// The timer's fd, while steps are watched.
    pub(crate) fn fd(&self) -> Option<RawFd> {
        self.timer.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// The timer was reported readable: reads it empty, noting a step, and
    /// arms it again after one.
    pub(crate) fn ready(&mut self) {
        let Some(timer) = &self.timer else { return };
        let mut step = false;
        loop {
            match sys::read(timer.as_raw_fd()) {
                Outcome::Interrupted => continue,
                o if o.is_step() => step = true,
                Outcome::Quiet => break,
                o => {
                    tracing::debug!(?o, "reading the clock-step timer failed");
                    break;
                }
            }
        }
        if step {
            self.stepped = true;
            if let Err(err) = sys::arm(timer.as_raw_fd()) {
                tracing::debug!(%err, "re-arming the clock-step timer failed");
            }
        }
    }

    /// Whether a step was seen since the last call.
    pub(crate) fn take(&mut self) -> bool {
        std::mem::take(&mut self.stepped)
    }

    /// After `fork()`, once the backend has its new kernel set: the timer
    /// inherited from the parent is the parent's too, so the child gets its
    /// own (the inherited descriptor is closed, which leaves the parent's
    /// timer alone). Nothing to do if steps are not watched.
    pub(crate) fn reinit(&mut self, set: &mut dyn InternalFds) -> io::Result<()> {
        let Some(old) = self.timer.take() else {
            return Ok(());
        };
        set.remove(old.as_raw_fd());
        drop(old);
        self.stepped = false;
        let timer = sys::create()?;
        set.add(timer.as_raw_fd())?;
        self.timer = Some(timer);
        Ok(())
    }
}

cfg_if::cfg_if! {
    if #[cfg(any(target_os = "linux", target_os = "android"))] {
        mod sys {
            use super::Outcome;
            use std::io;
            use std::os::fd::{FromRawFd, OwnedFd, RawFd};

            /// How far ahead the timer is armed: a hundred years (saturated
            /// where `time_t` is 32 bits). The kernel clamps what it cannot
            /// represent; the timer must only never expire by itself.
            const FAR_SECS: libc::time_t = 100 * 366 * 24 * 3600;

            /// A new timerfd on `CLOCK_REALTIME`, armed.
            pub(super) fn create() -> io::Result<OwnedFd> {
                // SAFETY: plain system call with integer arguments.
                let fd = unsafe {
                    libc::timerfd_create(
                        libc::CLOCK_REALTIME,
                        libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
                    )
                };
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                // SAFETY: `fd` was just created and is owned by no one else.
                let timer = unsafe { OwnedFd::from_raw_fd(fd) };
                arm(fd)?;
                Ok(timer)
            }

            /// Arms `fd` for a time far ahead, to be cancelled when the
            /// clock is set.
            pub(super) fn arm(fd: RawFd) -> io::Result<()> {
                let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                // SAFETY: `now` is a writable timespec.
                if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) } < 0 {
                    return Err(io::Error::last_os_error());
                }
                let spec = libc::itimerspec {
                    it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
                    it_value: libc::timespec {
                        tv_sec: now.tv_sec.saturating_add(FAR_SECS),
                        tv_nsec: 0,
                    },
                };
                // SAFETY: `fd` is an open timerfd; `spec` is a valid
                // itimerspec that outlives the call; no old value is asked.
                let r = unsafe {
                    libc::timerfd_settime(
                        fd,
                        libc::TFD_TIMER_ABSTIME | libc::TFD_TIMER_CANCEL_ON_SET,
                        &spec,
                        std::ptr::null_mut(),
                    )
                };
                if r < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            }

            /// One `read` of the timerfd, decoded.
            pub(super) fn read(fd: RawFd) -> Outcome {
                let mut ticks = 0u64;
                // SAFETY: `ticks` has room for the 8 bytes a timerfd read
                // writes; `fd` is open and non-blocking.
                let n = unsafe { libc::read(fd, (&mut ticks as *mut u64).cast(), 8) };
                let errno = if n < 0 {
                    io::Error::last_os_error().raw_os_error().unwrap_or(0)
                } else {
                    0
                };
                Outcome::of(n, errno)
            }
        }
    } else {
        mod sys {
            //! No timer reports clock steps here (see the module header).
            use super::Outcome;
            use std::io;
            use std::os::fd::{OwnedFd, RawFd};

            pub(super) fn create() -> io::Result<OwnedFd> {
                Err(io::Error::from(io::ErrorKind::Unsupported))
            }

            pub(super) fn arm(_fd: RawFd) -> io::Result<()> {
                Err(io::Error::from(io::ErrorKind::Unsupported))
            }

            pub(super) fn read(_fd: RawFd) -> Outcome {
                // There is never a timer to read (`create` fails).
                Outcome::of(-1, libc::EAGAIN)
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn decoding_a_read() {
        assert_eq!(Outcome::of(-1, libc::ECANCELED), Outcome::Stepped);
        assert_eq!(Outcome::of(8, 0), Outcome::Expired);
        assert_eq!(Outcome::of(-1, libc::EAGAIN), Outcome::Quiet);
        assert_eq!(Outcome::of(-1, libc::EWOULDBLOCK), Outcome::Quiet);
        assert_eq!(Outcome::of(-1, libc::EINTR), Outcome::Interrupted);
        assert_eq!(Outcome::of(-1, libc::EBADF), Outcome::Failed(libc::EBADF));
        assert_eq!(Outcome::of(3, 0), Outcome::Failed(libc::EIO));
        assert!(Outcome::Stepped.is_step() && Outcome::Expired.is_step());
        assert!(!Outcome::Quiet.is_step() && !Outcome::Failed(libc::EBADF).is_step());
    }

    /// A kernel set that records what it holds.
    #[derive(Default)]
    struct Recorder(Vec<RawFd>);

    impl InternalFds for Recorder {
        fn add(&mut self, fd: RawFd) -> io::Result<()> {
            self.0.push(fd);
            Ok(())
        }
        fn remove(&mut self, fd: RawFd) {
            self.0.retain(|&f| f != fd);
        }
    }

    /// Whether two fds of this process are one open file (`kcmp`); `None`
    /// where the kernel does not say.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub(crate) fn same_file(a: RawFd, b: RawFd) -> Option<bool> {
        const KCMP_FILE: libc::c_long = 0;
        // SAFETY: plain system call with integer arguments, about this
        // process's own descriptors.
        let pid = unsafe { libc::getpid() } as libc::c_long;
        // SAFETY: as above.
        let r = unsafe {
            libc::syscall(
                libc::SYS_kcmp,
                pid,
                pid,
                KCMP_FILE,
                a as libc::c_long,
                b as libc::c_long,
            )
        };
        (r >= 0).then_some(r == 0)
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn readable(fd: RawFd) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn the_timer_is_quiet_until_the_clock_is_set_and_goes_with_unwatch() {
        let mut set = Recorder::default();
        let mut steps = ClockSteps::default();
        assert!(steps.watch(&mut set));
        assert!(steps.watch(&mut set), "idempotent");
        let fd = steps.fd().unwrap();
        assert_eq!(set.0, [fd], "one timer in the set");
        // SAFETY: F_GETFD / F_GETFL on the open timer.
        let (fd_flags, fl) = unsafe {
            (
                libc::fcntl(fd, libc::F_GETFD),
                libc::fcntl(fd, libc::F_GETFL),
            )
        };
        assert_ne!(fd_flags & libc::FD_CLOEXEC, 0);
        assert_ne!(fl & libc::O_NONBLOCK, 0);
        assert!(!readable(fd), "armed far ahead: not readable");
        assert_eq!(sys::read(fd), Outcome::Quiet);
        steps.ready(); // a spurious report: nothing to read
        assert!(!steps.take());
        steps.unwatch(&mut set);
        assert_eq!(set.0, [], "out of the set");
        assert_eq!(steps.fd(), None);
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn reinit_makes_a_fresh_timer() {
        let mut set = Recorder::default();
        let mut steps = ClockSteps::default();
        steps.reinit(&mut set).unwrap();
        assert_eq!(steps.fd(), None, "nothing watched, nothing made");
        assert!(steps.watch(&mut set));
        let before = steps.fd().unwrap();
        // SAFETY: duplicates the open timer (the same timer), closed below.
        let keep = unsafe { libc::dup(before) };
        assert!(keep >= 0);
        steps.reinit(&mut set).unwrap();
        let after = steps.fd().unwrap();
        assert_eq!(set.0, [after]);
        assert!(!readable(after));
        assert_ne!(same_file(keep, after), Some(true), "a new timer");
        // SAFETY: closes the duplicate made above.
        unsafe { libc::close(keep) };
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    #[test]
    fn nothing_reports_steps_here() {
        let mut set = Recorder::default();
        let mut steps = ClockSteps::default();
        assert!(!steps.watch(&mut set));
        assert_eq!(set.0, []);
    }
}
