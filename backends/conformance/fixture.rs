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

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::backend::{
    Backend, Capabilities, FileStat, InternalFds, NoticeService, Notices, PollEvent, PollStatus,
    Wake,
};
use crate::backends::Factory;
use crate::backends::WithServices;
use crate::{Interest, Loop, RawFd, Ready, Sim, SimSocket, Source, SourceFd};
use std::path::Path;
use std::sync::Arc;

/// Reading and writing through a shared reference, so that the same helper
/// serves owned sources (`&mut T` in the callback) and borrowed ones
/// (`&mut &T`).
pub trait SharedStream {
    /// One `read(2)`.
    fn read_some(&self, buf: &mut [u8]) -> io::Result<usize>;
    /// One `write(2)`.
    fn write_some(&self, buf: &[u8]) -> io::Result<usize>;
    /// After a write would block: whether room comes within a short quiet
    /// period, without anyone reading (a TCP pair's window update still in
    /// flight moves queued bytes to the peer; a socketpair, a pipe and the
    /// simulator never do that: `false`). The kit's fill
    /// goes on filling then, so that a full stream stays full.
    fn room_comes_soon(&self) -> bool {
        false
    }
}

impl<T: SharedStream + ?Sized> SharedStream for &T {
    fn read_some(&self, buf: &mut [u8]) -> io::Result<usize> {
        (**self).read_some(buf)
    }
    fn write_some(&self, buf: &[u8]) -> io::Result<usize> {
        (**self).write_some(buf)
    }
    fn room_comes_soon(&self) -> bool {
        (**self).room_comes_soon()
    }
}

/// `Read`/`Write` through a shared reference, for each stream type.
macro_rules! stream_via_shared_ref {
    ($($t:ty),*) => {$(
        impl SharedStream for $t {
            fn read_some(&self, buf: &mut [u8]) -> io::Result<usize> {
                let mut s = self;
                ::std::io::Read::read(&mut s, buf)
            }
            fn write_some(&self, buf: &[u8]) -> io::Result<usize> {
                let mut s = self;
                ::std::io::Write::write(&mut s, buf)
            }
        }
    )*};
}

stream_via_shared_ref!(SimSocket);

/// The fd number of a source (virtual for the simulator).
pub fn fd_of(src: &(impl Source + ?Sized)) -> RawFd {
    match src.source_fd() {
        SourceFd::Os(fd) => raw(fd),
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

/// A transparent wrapper around the backend under test (a spy): it
/// records every `modify` call (to check fd_reify's "at most one call per
/// fd per iteration" on every backend), keeps the registrations the loop
/// made from them, and checks every `poll` against the contract:
///
/// - each fd at most once per call (the loop may invoke watchers straight
///   from the results; a second report of an fd would be a second
///   callback);
/// - only fds the loop has registered: a report of an fd never
///   registered, forgotten (`modify(fd, _, NONE)`) or refused (a failed
///   `modify`) is a registration left behind: a forget that did not reach
///   the kernel, an entry kept by number, the old file of a reused number
///   (the loop would drop such a report silently, so no record shows it);
/// - readiness within the registered interest: `READABLE` and `WRITABLE`
///   only as asked, unless the report is a hang-up, an error or an
///   invalid fd (which may come with either direction);
/// - with native one-shot declared ([`Capabilities::oneshot`]), a one-shot
///   registration reported once, then not again until the loop re-arms it
///   with a `modify`.
///
/// A failed check panics in `poll` (the scenario fails with the message).
/// The backend gets the OS services a loop would compose with it
/// ([`WithServices`]: its own, or the Unix notifier, whose internal fds
/// the probe never sees), and every service method is forwarded
/// unchanged, except [`NoticeService::check_fd`], deliberately: the
/// scenarios give the backend's `modify` the fds that `check_fd` would
/// refuse (`regular_file` checks the refusal there, as a backend that
/// cannot see the fd's kind at `Loop::io` must do it).
pub struct Probe<'s> {
    inner: WithServices<'s>,
    log: Modifies,
    /// The loop's registrations as the probe saw them, by fd.
    registered: Vec<Registration>,
    /// The backend declares native one-shot.
    native_oneshot: bool,
    /// Scratch of the duplicate check.
    fds: Vec<RawFd>,
}

/// One registration the loop made, as a [`Probe`] keeps it.
#[derive(Debug, Clone, Copy)]
struct Registration {
    fd: RawFd,
    interest: Interest,
    /// False once a native one-shot registration has been reported, until
    /// the next `modify` of the fd re-arms it.
    armed: bool,
}

impl<'s> Probe<'s> {
    /// Wraps `inner`; the calls go to the returned log.
    pub fn wrap(inner: Box<dyn Backend + 's>) -> (Probe<'s>, Modifies) {
        let log = Modifies::default();
        let native_oneshot = inner.capabilities().oneshot;
        (
            Probe {
                inner: WithServices::new(inner),
                log: log.clone(),
                registered: Vec::new(),
                native_oneshot,
                fds: Vec::new(),
            },
            log,
        )
    }

    /// Checks one report of a poll against the registrations (see the
    /// type's documentation).
    fn check_report(&mut self, ev: PollEvent) {
        let name = self.inner.name();
        let Some(reg) = self.registered.iter_mut().find(|r| r.fd == ev.fd) else {
            panic!(
                "{name} reported fd {} ({}) that the loop has not registered (never, or forgotten \
                 with modify(fd, _, NONE), or refused by a failed modify): a forget must leave \
                 nothing that can still report, and nothing kept by the number \
                 (docs/porting.md, modify)",
                ev.fd, ev.ready
            );
        };
        let asked = Ready::from_interest(reg.interest);
        let directions = ev.ready & (Ready::READABLE | Ready::WRITABLE);
        let abnormal = ev.ready.is_hup() || ev.ready.is_error() || ev.ready.is_invalid();
        assert!(
            abnormal || asked.contains(directions),
            "{name} reported fd {} as {} while its registration is {}: readiness the loop did \
             not ask for, and no HUP, ERROR or INVALID with it to explain it (an interest kept \
             from an earlier registration of the number? a hang-up or an error reported without \
             its bit?)",
            ev.fd,
            ev.ready,
            reg.interest
        );
        if self.native_oneshot && reg.interest.is_oneshot() {
            assert!(
                reg.armed,
                "{name} declares native one-shot, but reported fd {} ({}) again after its \
                 one-shot report, before the loop re-armed it: the kernel must disarm a \
                 one-shot registration when it reports it (docs/porting.md, one-shot)",
                ev.fd, ev.ready
            );
            reg.armed = false;
        }
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
        // A failed modify leaves the fd unregistered (the loop's view).
        self.registered.retain(|reg| reg.fd != fd);
        if r.is_ok() && !new.is_empty() {
            self.registered.push(Registration {
                fd,
                interest: new,
                armed: true,
            });
        }
        r
    }
    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        let before = events.len();
        let status = self.inner.poll(timeout, events);
        self.fds.clear();
        self.fds.extend(events[before..].iter().map(|e| e.fd));
        self.fds.sort_unstable();
        let n = self.fds.len();
        self.fds.dedup();
        assert_eq!(
            self.fds.len(),
            n,
            "{} reported an fd twice in one poll: {:?}",
            self.inner.name(),
            &events[before..]
        );
        if status.is_ok() {
            for &ev in &events[before..] {
                self.check_report(ev);
            }
        }
        status
    }
    fn now(&mut self) -> Duration {
        self.inner.now()
    }
    fn notices(&mut self) -> Option<&mut dyn NoticeService> {
        Some(self)
    }
    fn reinit(&mut self) -> io::Result<()> {
        // The loop registers every fd again, from `NONE`.
        self.registered.clear();
        Backend::reinit(&mut self.inner)
    }
}

/// The services, forwarded; `check_fd` left to the backend's `modify`.
impl NoticeService for Probe<'_> {
    fn watch_signal(&mut self, signal: i32, fds: &mut dyn InternalFds) -> io::Result<()> {
        self.inner.watch_signal(signal, fds)
    }
    fn unwatch_signal(&mut self, signal: i32) {
        self.inner.unwatch_signal(signal)
    }
    fn watch_child(&mut self, pid: u32, fds: &mut dyn InternalFds) -> io::Result<()> {
        self.inner.watch_child(pid, fds)
    }
    fn unwatch_child(&mut self, pid: u32, fds: &mut dyn InternalFds) {
        self.inner.unwatch_child(pid, fds)
    }
    fn watch_any_child(&mut self, fds: &mut dyn InternalFds) -> io::Result<()> {
        self.inner.watch_any_child(fds)
    }
    fn unwatch_any_child(&mut self) {
        self.inner.unwatch_any_child()
    }
    fn signal_child(&mut self, pid: u32, signal: i32) -> io::Result<()> {
        self.inner.signal_child(pid, signal)
    }
    fn spawn_child(
        &mut self,
        command: &mut std::process::Command,
        fds: &mut dyn InternalFds,
    ) -> io::Result<crate::Spawned> {
        self.inner.spawn_child(command, fds)
    }
    fn waker(&mut self, fds: &mut dyn InternalFds) -> io::Result<Arc<dyn Wake>> {
        self.inner.waker(fds)
    }
    fn ready(&mut self, fd: RawFd, fds: &mut dyn InternalFds) {
        self.inner.ready(fd, fds)
    }
    fn take_notices(&mut self, notices: &mut Notices, fds: &mut dyn InternalFds) {
        self.inner.take_notices(notices, fds)
    }
    fn wall_now(&mut self) -> Duration {
        self.inner.wall_now()
    }
    fn watch_clock_steps(&mut self, fds: &mut dyn InternalFds) -> bool {
        self.inner.watch_clock_steps(fds)
    }
    fn unwatch_clock_steps(&mut self, fds: &mut dyn InternalFds) {
        self.inner.unwatch_clock_steps(fds)
    }
    fn stat(&mut self, path: &Path) -> FileStat {
        self.inner.stat(path)
    }
    fn watch_path(&mut self, path: &Path, token: u64, fds: &mut dyn InternalFds) -> io::Result<()> {
        self.inner.watch_path(path, token, fds)
    }
    fn unwatch_path(&mut self, token: u64, fds: &mut dyn InternalFds) {
        self.inner.unwatch_path(token, fds)
    }
    fn reinit(&mut self, fds: &mut dyn InternalFds) -> io::Result<()> {
        NoticeService::reinit(&mut self.inner, fds)
    }
    fn wants_dispatch(&mut self) -> bool {
        self.inner.wants_dispatch()
    }
    fn dispatched(&mut self, fd: RawFd, ready: Ready) {
        self.inner.dispatched(fd, ready)
    }
}

/// What a scenario needs from the world around the backend under test.
///
/// To run the suite on a new kind of backend whose sources are not plain
/// fds (say, virtual fds of another simulator), implement this trait; for
/// an fd-based backend, [`OsFixture`] already does everything.
pub trait Fixture {
    /// One end of a connected, non-blocking stream pair (`socketpair(2)`).
    type Sock: SharedStream + Source + 'static;
    /// The read end of a non-blocking pipe.
    type PipeR: SharedStream + Source + 'static;
    /// The write end of a non-blocking pipe.
    type PipeW: SharedStream + Source + 'static;
    /// A source that can be invalidated behind the loop's back; dropping it
    /// does not close anything.
    type Doomed: SharedStream + Source + 'static;
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
    /// Called after the peer's end of a [`pair`](Fixture::pair) has been
    /// dropped and before `end` is written to, so that `end` knows that
    /// nobody reads any more. A socketpair knows at once (the default:
    /// nothing to do); a TCP connection only once the peer's stack has
    /// answered a write with a reset (the Windows fixture writes a byte).
    fn settle_peer_close(&self, end: &Self::Sock) {
        let _ = end;
    }
    /// A backend under test outside any loop (no [`Probe`] around it),
    /// for what the backend contract says that no loop shows: a native
    /// one-shot registration disarmed by its report
    /// ([`Scenario::OneshotDisarms`](super::Scenario::OneshotDisarms): the
    /// loop re-arms or forgets a reported one-shot fd before its next
    /// wait, so it never sees a backend that keeps reporting one). `None`
    /// (the default) skips those scenarios.
    fn bare_backend(&self) -> Option<Box<dyn Backend>> {
        None
    }
    /// The fixture as an [`OsFixture`], for the scenarios that only a
    /// kernel has (fd numbers reused, regular files); `None` (the default)
    /// skips them.
    fn as_os(&self) -> Option<&OsFixture> {
        None
    }
}

// ------------------------------------------------------------------ the OS

/// Runs the suite on an OS backend, with the platform's streams.
///
/// On Unix: unix-domain socketpairs and pipes. It installs a handler of
/// `SIGUSR1` that only counts (without `SA_RESTART`), the signal with
/// which it interrupts waits, and keeps it for the rest of the process. It
/// duplicates fds to numbers from `HIGH_FD_BASE` (raising the soft
/// `RLIMIT_NOFILE` to `FD_SETSIZE` if it is lower).
///
/// On Windows: connected TCP loopback pairs (non-blocking, `TCP_NODELAY`)
/// for both the pairs and the pipes (Windows has no socketpair, and its
/// pipes are not sockets, which is all a Windows backend watches); a
/// source closed behind the loop's back with `closesocket`. Waits are not
/// interrupted there ([`Scenario::not_applicable`](super::Scenario::not_applicable)).
///
/// On WASI: pairs of connections accepted on the preopened listener,
/// relayed to each other by a host program (a guest makes no socket of its
/// own; `fixture_wasi.rs` has the protocol), for both the pairs and the
/// pipes; peer actions made synchronous by waits on the other end; a
/// source closed behind the loop's back with `close`. Waits are not
/// interrupted there either.
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

// The platform's part of the OS fixture: its stream pair, its pipe, how a
// source is closed behind the loop's back, how a wait is interrupted.
cfg_if::cfg_if! {
    if #[cfg(windows)] {
        // TCP loopback pairs (Windows has no socketpair, and its pipes are
        // not sockets), handles closed with `closesocket`; no signals.
        #[path = "fixture_windows.rs"]
        mod os;
    } else if #[cfg(target_os = "wasi")] {
        // Connections accepted on the preopened listener, relayed to each
        // other by a host program (a WASI guest makes no socket of its
        // own); no signals.
        #[path = "fixture_wasi.rs"]
        mod os;
    } else {
        // Unix-domain socketpairs, pipes, fds closed at high numbers,
        // SIGUSR1.
        #[path = "fixture_unix.rs"]
        mod os;
    }
}
pub use os::*;
// What Unix and WASI share: an fd closed behind the loop's back by
// number, and no locks.
#[cfg(any(unix, target_os = "wasi"))]
#[path = "raw_sock.rs"]
mod raw_sock;
#[cfg(any(unix, target_os = "wasi"))]
pub use raw_sock::RawSock;
#[cfg(any(unix, target_os = "wasi"))]
pub(crate) use raw_sock::{creating, raw, scenario_lock};

impl Fixture for OsFixture {
    type Sock = OsSock;
    type PipeR = OsPipeR;
    type PipeW = OsPipeW;
    type Doomed = RawSock;
    type Doom = OsDoom;

    fn backend(&self) -> &'static str {
        self.name
    }

    fn is_virtual(&self) -> bool {
        false
    }

    fn new_loop<'s, S>(&self) -> (Loop<'s, S>, Modifies) {
        let _creating = creating();
        let (probe, log) = Probe::wrap(self.open());
        (Loop::with_backend(probe), log)
    }

    fn pair(&self, _name: &str) -> (OsSock, OsSock) {
        socketpair()
    }

    fn pipe(&self, _name: &str) -> (OsPipeR, OsPipeW) {
        pipe()
    }

    fn doomed_pair(&self, _name: &str) -> (RawSock, OsSock, OsDoom) {
        os::doomed_pair()
    }

    fn close_behind_back(&self, doom: &OsDoom) {
        os::close_behind_back(doom)
    }

    fn settle_peer_close(&self, end: &OsSock) {
        os::settle_peer_close(end)
    }

    fn stopwatch(&self) -> Stopwatch {
        Stopwatch::Real(Instant::now())
    }

    fn interrupt_waits<R>(&self, span: Duration, f: impl FnOnce() -> R) -> (R, usize) {
        os::interrupt_waits(span, f)
    }

    fn bare_backend(&self) -> Option<Box<dyn Backend>> {
        let _creating = creating();
        Some(self.open())
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

    fn bare_backend(&self) -> Option<Box<dyn Backend>> {
        Some(Box::new(self.sim.backend()))
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
