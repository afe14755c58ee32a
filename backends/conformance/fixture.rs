//! Fixtures: what a scenario needs from the world around a backend.
//!
//! A scenario is written once against [`Fixture`]. [`OsFixture`] runs it on
//! an OS backend with real socketpairs and pipes; [`SimFixture`] runs it on
//! the simulator with `Sim::pair`. Peer actions are plain writes, reads and
//! drops on the other end, which take effect at once on both (a unix-domain
//! socket or a pipe delivers synchronously), so the loop can be stepped with
//! `RunMode::NoWait` between them without sleeping.
//!
//! A backend of OS fds needs nothing from this module: [`run`](super::run)
//! puts it in an [`OsFixture`]. A backend whose sources are something else
//! (another simulator; handles that are not fds) implements [`Fixture`]
//! for its world and runs the scenarios with
//! [`Scenario::check_on`](super::Scenario::check_on).

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use crate::backend::{Backend, Capabilities, PollEvent, PollStatus};
use crate::backends::Factory;
use crate::{Interest, Loop, Ready, Sim, SimSocket, Source, SourceFd};

/// Reading and writing through a shared reference, so that the same helper
/// serves owned sources (`&mut T` in the callback) and borrowed ones
/// (`&mut &T`).
pub trait Stream {
    /// One `read(2)`.
    fn read_some(&self, buf: &mut [u8]) -> io::Result<usize>;
    /// One `write(2)`.
    fn write_some(&self, buf: &[u8]) -> io::Result<usize>;
}

impl<T: Stream + ?Sized> Stream for &T {
    fn read_some(&self, buf: &mut [u8]) -> io::Result<usize> {
        (**self).read_some(buf)
    }
    fn write_some(&self, buf: &[u8]) -> io::Result<usize> {
        (**self).write_some(buf)
    }
}

/// `Read`/`Write` through a shared reference, for each stream type.
macro_rules! stream_via_shared_ref {
    ($($t:ty),*) => {$(
        impl Stream for $t {
            fn read_some(&self, buf: &mut [u8]) -> io::Result<usize> {
                let mut s = self;
                s.read(buf)
            }
            fn write_some(&self, buf: &[u8]) -> io::Result<usize> {
                let mut s = self;
                s.write(buf)
            }
        }
    )*};
}

stream_via_shared_ref!(UnixStream, File, SimSocket);

/// The fd number of a source (virtual for the simulator).
pub fn fd_of(src: &(impl Source + ?Sized)) -> RawFd {
    match src.source_fd() {
        SourceFd::Os(fd) => fd.as_raw_fd(),
        SourceFd::Virtual(v) => v.get(),
    }
}

/// Measures elapsed time on the backend's kind of clock: `Instant` for the
/// kernels, virtual time for the simulator.
#[derive(Clone)]
pub enum Stopwatch {
    /// Wall-clock (monotonic) time.
    Real(Instant),
    /// The simulator's virtual clock.
    Virtual(Sim, Duration),
}

impl Stopwatch {
    /// Time since the stopwatch was made.
    pub fn elapsed(&self) -> Duration {
        match self {
            Stopwatch::Real(t) => t.elapsed(),
            Stopwatch::Virtual(sim, t) => sim.now() - *t,
        }
    }
}

/// One `Backend::modify` call, as seen by [`Probe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModifyCall {
    /// The fd.
    pub fd: RawFd,
    /// The previous registration.
    pub old: Interest,
    /// The new one.
    pub new: Interest,
    /// Whether the backend accepted it.
    pub ok: bool,
}

/// The modify calls a [`Probe`] saw, shared with the test.
pub type Modifies = Rc<RefCell<Vec<ModifyCall>>>;

/// A transparent wrapper around the backend under test that records every
/// `modify` call (to check fd_reify's "at most one call per fd per
/// iteration" on every backend) and checks every `poll` against the
/// contract's "each fd at most once per call" (the loop may invoke
/// watchers straight from the results; a second report of an fd would be a
/// second callback). Everything else is forwarded unchanged, `dispatched`
/// and `reinit` included.
pub struct Probe<'s> {
    inner: Box<dyn Backend + 's>,
    log: Modifies,
}

impl<'s> Probe<'s> {
    /// Wraps `inner`; the calls go to the returned log.
    pub fn wrap(inner: Box<dyn Backend + 's>) -> (Probe<'s>, Modifies) {
        let log = Modifies::default();
        (
            Probe {
                inner,
                log: log.clone(),
            },
            log,
        )
    }
}

impl Backend for Probe<'_> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn modify(&mut self, fd: RawFd, old: Interest, new: Interest) -> io::Result<()> {
        let r = self.inner.modify(fd, old, new);
        self.log.borrow_mut().push(ModifyCall {
            fd,
            old,
            new,
            ok: r.is_ok(),
        });
        r
    }
    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        let before = events.len();
        let status = self.inner.poll(timeout, events);
        let mut fds: Vec<RawFd> = events[before..].iter().map(|e| e.fd).collect();
        fds.sort_unstable();
        let n = fds.len();
        fds.dedup();
        assert_eq!(
            fds.len(),
            n,
            "{} reported an fd twice in one poll: {:?}",
            self.inner.name(),
            &events[before..]
        );
        status
    }
    fn now(&mut self) -> Duration {
        self.inner.now()
    }
    fn dispatched(&mut self, fd: RawFd, ready: Ready) {
        self.inner.dispatched(fd, ready)
    }
    fn reinit(&mut self) -> io::Result<()> {
        self.inner.reinit()
    }
}

/// What a scenario needs from the world around the backend under test.
///
/// To run the suite on a new kind of backend whose sources are not plain
/// fds (say, virtual fds of another simulator), implement this trait; for
/// an fd-based backend, [`OsFixture`] already does everything.
pub trait Fixture {
    /// One end of a connected, non-blocking stream pair (`socketpair(2)`).
    type Sock: Stream + Source + 'static;
    /// The read end of a non-blocking pipe.
    type PipeR: Stream + Source + 'static;
    /// The write end of a non-blocking pipe.
    type PipeW: Stream + Source + 'static;
    /// A source that can be invalidated behind the loop's back; dropping it
    /// does not close anything.
    type Doomed: Stream + Source + 'static;
    /// What [`Fixture::close_behind_back`] needs (and any lock it holds).
    type Doom;

    /// The backend's name, as the tests are named.
    fn backend(&self) -> &'static str;
    /// Whether time is virtual (the simulator): then timings are exact.
    fn is_virtual(&self) -> bool;
    /// A fresh loop on the backend under test, wrapped in a [`Probe`].
    fn new_loop<'s, S>(&self) -> (Loop<'s, S>, Modifies);
    /// A connected pair: (the end the loop watches, the peer's end).
    fn pair(&self, name: &str) -> (Self::Sock, Self::Sock);
    /// A pipe: (read end, write end).
    fn pipe(&self, name: &str) -> (Self::PipeR, Self::PipeW);
    /// A connected pair whose first end can be made invalid behind the
    /// loop's back with [`Fixture::close_behind_back`].
    fn doomed_pair(&self, name: &str) -> (Self::Doomed, Self::Sock, Self::Doom);
    /// Invalidates the doomed source: `close(2)` on a kernel,
    /// `Sim::invalidate` on the simulator. The loop is not told.
    fn close_behind_back(&self, doom: &Self::Doom);
    /// A stopwatch on the backend's clock, started now.
    fn stopwatch(&self) -> Stopwatch;
    /// Runs `f` (which runs the loop) while its waits are interrupted about
    /// every `span / 20`: by a signal whose handler does nothing (so the
    /// wait fails with `EINTR`) on a kernel, by an injected spurious wakeup
    /// on the simulator. Returns `f`'s result and how many interruptions
    /// were delivered.
    fn interrupt_waits<R>(&self, span: Duration, f: impl FnOnce() -> R) -> (R, usize);
    /// The fixture as an [`OsFixture`], for the scenarios that only a
    /// kernel has (fd numbers reused, regular files); `None` (the default)
    /// skips them.
    fn as_os(&self) -> Option<&OsFixture> {
        None
    }
}

// ------------------------------------------------------------------ the OS

/// Runs the suite on an OS backend, with unix-domain socketpairs and pipes.
///
/// It installs a handler of `SIGUSR1` that only counts (without
/// `SA_RESTART`), the signal with which it interrupts waits, and keeps it
/// for the rest of the process. It duplicates fds to numbers from
/// [`HIGH_FD_BASE`] (raising the soft `RLIMIT_NOFILE` to `FD_SETSIZE` if
/// it is lower).
pub struct OsFixture {
    name: &'static str,
    open: Factory,
}

impl OsFixture {
    /// The fixture for the backend called `name`, which `open` creates,
    /// once per loop.
    pub fn new(name: &'static str, open: Factory) -> OsFixture {
        OsFixture { name, open }
    }

    /// A new backend under test (panics if `open` fails).
    pub fn open(&self) -> Box<dyn Backend> {
        (self.open)().unwrap_or_else(|e| panic!("cannot create the {} backend: {e}", self.name))
    }
}

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

/// An fd registered by number only: it owns nothing and closes nothing
/// when dropped, so a test can `close(2)` the fd behind the loop's back
/// without anything closing it a second time (std aborts on a double close
/// of an `OwnedFd` in debug builds).
pub struct RawSock {
    fd: RawFd,
}

impl AsFd for RawSock {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: deliberately weaker than `borrow_raw` asks: the fd is open
        // when the watcher is registered, and the test closes it while the
        // watcher is active to check what the loop does then. The loop only
        // passes the number to the backend; nothing reads through it after
        // the close but the kernel, which reports EBADF.
        unsafe { BorrowedFd::borrow_raw(self.fd) }
    }
}

impl Stream for RawSock {
    fn read_some(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for `buf.len()` bytes; a closed fd gives
        // EBADF.
        let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
    fn write_some(&self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for `buf.len()` bytes; a closed fd gives
        // EBADF.
        let n = unsafe { libc::write(self.fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

/// The doomed fd of an [`OsFixture`], and the lock that keeps its number
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

impl Fixture for OsFixture {
    type Sock = UnixStream;
    type PipeR = File;
    type PipeW = File;
    type Doomed = RawSock;
    type Doom = OsDoom;

    fn backend(&self) -> &'static str {
        self.name
    }

    fn is_virtual(&self) -> bool {
        false
    }

    fn new_loop<'s, S>(&self) -> (Loop<'s, S>, Modifies) {
        let (probe, log) = Probe::wrap(self.open());
        (Loop::with_backend(probe), log)
    }

    fn pair(&self, _name: &str) -> (UnixStream, UnixStream) {
        socketpair()
    }

    fn pipe(&self, _name: &str) -> (File, File) {
        pipe()
    }

    fn doomed_pair(&self, _name: &str) -> (RawSock, UnixStream, OsDoom) {
        let lock = high_fds();
        let (a, b) = socketpair();
        // The high duplicate is the only descriptor of its socket once `a`
        // is dropped: closing it then releases the socket, which is what
        // makes epoll forget it (epoll keys registrations on the open file,
        // not on the number).
        let fd = dup_high(a.as_raw_fd());
        drop(a);
        (RawSock { fd }, b, OsDoom { fd, _lock: lock })
    }

    fn close_behind_back(&self, doom: &OsDoom) {
        // SAFETY: `doom.fd` was created by `doomed_pair` and is owned by
        // nobody (the watcher holds a `RawSock`, which never closes); no
        // other test can have reused the number while the lock is held.
        let r = unsafe { libc::close(doom.fd) };
        assert_eq!(r, 0, "close: {}", io::Error::last_os_error());
    }

    fn stopwatch(&self) -> Stopwatch {
        Stopwatch::Real(Instant::now())
    }

    fn interrupt_waits<R>(&self, span: Duration, f: impl FnOnce() -> R) -> (R, usize) {
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

    fn as_os(&self) -> Option<&OsFixture> {
        Some(self)
    }
}

// ------------------------------------------------------------ the simulator

/// Unread bytes one direction of a simulated pair holds.
const SIM_BUFFER: usize = 4096;

/// Runs the suite on the simulator: `Sim::pair` for socketpairs and pipes
/// (a pipe is a pair of which one end only reads and the other only
/// writes), `Sim::invalidate` for a close behind the loop's back,
/// `Sim::spurious_wakeup` for `EINTR`.
pub struct SimFixture {
    /// The simulated world.
    pub sim: Sim,
}

impl SimFixture {
    /// A fixture on a fresh world.
    pub fn new() -> SimFixture {
        SimFixture { sim: Sim::new() }
    }
}

impl Default for SimFixture {
    fn default() -> SimFixture {
        SimFixture::new()
    }
}

impl Fixture for SimFixture {
    type Sock = SimSocket;
    type PipeR = SimSocket;
    type PipeW = SimSocket;
    type Doomed = SimSocket;
    type Doom = RawFd;

    fn backend(&self) -> &'static str {
        "sim"
    }

    fn is_virtual(&self) -> bool {
        true
    }

    fn new_loop<'s, S>(&self) -> (Loop<'s, S>, Modifies) {
        let (probe, log) = Probe::wrap(Box::new(self.sim.backend()));
        (Loop::with_backend(probe), log)
    }

    fn pair(&self, name: &str) -> (SimSocket, SimSocket) {
        self.sim.pair(name, SIM_BUFFER)
    }

    fn pipe(&self, name: &str) -> (SimSocket, SimSocket) {
        self.sim.pair(name, SIM_BUFFER)
    }

    fn doomed_pair(&self, name: &str) -> (SimSocket, SimSocket, RawFd) {
        let (a, b) = self.sim.pair(name, SIM_BUFFER);
        let fd = a.fd();
        (a, b, fd)
    }

    fn close_behind_back(&self, doom: &RawFd) {
        self.sim.invalidate(self.sim.now(), *doom);
    }

    fn stopwatch(&self) -> Stopwatch {
        Stopwatch::Virtual(self.sim.clone(), self.sim.now())
    }

    fn interrupt_waits<R>(&self, span: Duration, f: impl FnOnce() -> R) -> (R, usize) {
        let now = self.sim.now();
        for k in 1..20 {
            self.sim.spurious_wakeup(now + span / 20 * k);
        }
        let count = || {
            let trace = self.sim.trace();
            let spurious = |s: &&crate::backends::sim::Step| {
                s.kind == crate::backends::sim::StepKind::Spurious
            };
            trace.iter().filter(spurious).count()
        };
        let before = count();
        let r = f();
        (r, count() - before)
    }
}
