//! The Unix part of [`OsFixture`](super::OsFixture): unix-domain
//! socketpairs, pipes, fds closed behind the loop's back at high numbers,
//! and `SIGUSR1` to interrupt waits.

use std::cell::Cell;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::time::Duration;

use super::{RawSock, SharedStream};
use crate::RawFd;

/// What [`Fixture::pair`](super::Fixture::pair) gives on this platform.
pub type OsSock = UnixStream;
/// The read end of [`Fixture::pipe`](super::Fixture::pipe) on this
/// platform.
pub type OsPipeR = File;
/// The write end of [`Fixture::pipe`](super::Fixture::pipe) on this
/// platform.
pub type OsPipeW = File;

stream_via_shared_ref!(UnixStream, File);

fn set_nonblocking_cloexec(fd: RawFd) {
    // SAFETY: F_GETFL/F_SETFL/F_SETFD only change the flags of an fd that
    // the caller owns.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        assert!(fl >= 0, "F_GETFL: {}", io::Error::last_os_error());
        assert_eq!(libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK), 0);
        assert_eq!(libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC), 0);
    }
}

/// A non-blocking socketpair.
pub fn socketpair() -> (UnixStream, UnixStream) {
    let (a, b) = UnixStream::pair().expect("socketpair");
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    (a, b)
}

/// A non-blocking pipe: (read end, write end).
pub fn pipe() -> (File, File) {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors pipe() writes.
    let r = unsafe { libc::pipe(fds.as_mut_ptr()) };
    assert_eq!(r, 0, "pipe: {}", io::Error::last_os_error());
    for fd in fds {
        set_nonblocking_cloexec(fd);
    }
    // SAFETY: both fds were just created by pipe() and are owned by nobody.
    unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) }
}

/// Tests that need an fd number nobody else in this process can take
/// (closing one behind the loop's back, reusing one on purpose) dup their
/// fds to `HIGH_FD_BASE` or above while holding this lock. New fds take the
/// lowest free number, so the other tests running in parallel never get
/// such a number, and under the lock "the lowest free number from
/// `HIGH_FD_BASE`" is predictable. (It stays below select's `FD_SETSIZE`.)
static HIGH_FDS: Mutex<()> = Mutex::new(());

/// The lowest fd number handed out by [`dup_high`].
pub const HIGH_FD_BASE: RawFd = 900;

/// Takes the lock of the high fd numbers.
pub fn high_fds() -> MutexGuard<'static, ()> {
    HIGH_FDS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Duplicates `fd` to the lowest free number from [`HIGH_FD_BASE`] (the
/// caller holds [`high_fds`]). The duplicate is close-on-exec and owned by
/// the caller.
pub fn dup_high(fd: RawFd) -> RawFd {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit to fill in.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    let want = libc::FD_SETSIZE as libc::rlim_t;
    if lim.rlim_cur < want {
        assert!(
            lim.rlim_max >= want,
            "RLIMIT_NOFILE (hard limit {}) is too low for fd {HIGH_FD_BASE}",
            lim.rlim_max
        );
        lim.rlim_cur = want;
        // SAFETY: raises the soft limit, within the hard limit.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    }
    // SAFETY: duplicates an open fd; the new fd is owned by the caller.
    let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, HIGH_FD_BASE) };
    assert!(
        high >= HIGH_FD_BASE,
        "F_DUPFD: {}",
        io::Error::last_os_error()
    );
    high
}

/// The doomed fd of an [`OsFixture`](super::OsFixture), and the lock that keeps its number
/// from being reused until the scenario ends.
pub struct OsDoom {
    fd: RawFd,
    _lock: MutexGuard<'static, ()>,
}

thread_local! {
    /// Signals handled on this thread (the handler only counts).
    static INTERRUPTS: Cell<usize> = const { Cell::new(0) };
}

extern "C" fn count_interrupt(_: libc::c_int) {
    // A const-initialised thread-local `Cell` without destructor: a plain
    // TLS access, no allocation or lock.
    INTERRUPTS.with(|n| n.set(n.get() + 1));
}

/// The signal used to interrupt waits.
const INTERRUPT_SIGNAL: libc::c_int = libc::SIGUSR1;

fn install_interrupt_handler() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: installs a handler that only bumps a thread-local counter
        // (async-signal-safe), without SA_RESTART, so that a wait in
        // progress fails with EINTR. It stays installed for the process.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = count_interrupt as *const () as libc::sighandler_t;
            sa.sa_flags = 0;
            libc::sigemptyset(&mut sa.sa_mask);
            let r = libc::sigaction(INTERRUPT_SIGNAL, &sa, std::ptr::null_mut());
            assert_eq!(r, 0, "sigaction: {}", io::Error::last_os_error());
        }
    });
}
/// A socketpair whose first end can be closed behind the loop's back.
pub(crate) fn doomed_pair() -> (RawSock, UnixStream, OsDoom) {
    let lock = high_fds();
    let (a, b) = socketpair();
    // The high duplicate is the only descriptor of its socket once `a`
    // is dropped: closing it then releases the socket, which is what
    // makes epoll forget it (epoll keys registrations on the open file,
    // not on the number).
    let fd = dup_high(a.as_raw_fd());
    drop(a);
    (RawSock::owning_nothing(fd), b, OsDoom { fd, _lock: lock })
}

/// `close(2)` on the doomed fd.
pub(crate) fn close_behind_back(doom: &OsDoom) {
    // SAFETY: `doom.fd` was created by `doomed_pair` and is owned by
    // nobody (the watcher holds a `RawSock`, which never closes); no
    // other test can have reused the number while the lock is held.
    let r = unsafe { libc::close(doom.fd) };
    assert_eq!(r, 0, "close: {}", io::Error::last_os_error());
}

/// A read after the peer's reset returns the reset on every Unix.
pub(crate) fn reset_reads_as_eof() -> bool {
    false
}

/// A hang-up behind unread data is reported with it on every Unix.
pub(crate) fn fin_hidden_by_data() -> bool {
    false
}

/// A socketpair's end knows at once that its peer has gone.
pub(crate) fn settle_peer_close(_end: &UnixStream) {}

/// The waits of `f` interrupted by `SIGUSR1` about every `span / 20`.
pub(crate) fn interrupt_waits<R>(span: Duration, f: impl FnOnce() -> R) -> (R, usize) {
    install_interrupt_handler();
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() } as usize;
    let before = INTERRUPTS.with(Cell::get);
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let every = span / 20;
    let pest = std::thread::spawn(move || {
        // Not synchronisation: whenever the signals land, the loop must
        // behave the same; almost all land while it waits.
        while !stopped.load(Ordering::Relaxed) {
            std::thread::sleep(every);
            // SAFETY: `me` is the thread running `f`, which is alive
            // until this thread has been joined.
            unsafe { libc::pthread_kill(me as libc::pthread_t, INTERRUPT_SIGNAL) };
        }
    });
    // Stopped and joined even if `f` panics: no signal may reach the
    // thread after it has left.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    stop.store(true, Ordering::Relaxed);
    pest.join().unwrap();
    match r {
        Ok(r) => (r, INTERRUPTS.with(Cell::get) - before),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
