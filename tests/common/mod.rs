//! What the loop-level integration tests share: the list of backends a
//! scenario runs on (the simulator and every OS backend of the host), a
//! loop on one of them, a connection that works on each, and a watchdog,
//! so that a scenario that hangs or spins fails in seconds instead of
//! hanging the test run; a scenario written once as a `fn(&World)` runs on
//! each through [`on_every_world`] (or [`in_worlds`]), and [`RunTo`] runs a
//! loop and checks why the run ended. Then what several test files need
//! alike: children held open, the signal marker, the fork lock, a
//! backend's notices, the simulator's trace, the `net` echo handler, a
//! task serving one loopback connection ([`serve_one`]), and the
//! direct-dispatch programs ([`settle_points`]).
//!
//! On Windows (tests/replay_kernel.rs and replay_async.rs run there) the
//! parts built on Unix sockets, signals, `waitid` or the clock's setting
//! are left out (`cfg(unix)`).
#![allow(dead_code)] // each test binary uses its own part

use std::io::{self, Read, Write};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::Duration;

use evloop::{Loop, RunMode, RunOutcome, Sim, SimSocket, Source};

#[cfg(unix)]
pub mod pollable;
pub mod settle_points;
#[cfg(target_os = "linux")]
pub mod wasmtime;

/// How long a scenario may take before the watchdog fails it. Generous:
/// a scenario takes milliseconds; a hang never ends.
pub const WATCHDOG: Duration = Duration::from_secs(30);

/// Runs `f` on its own thread and returns what it returns; panics if `f`
/// panics (with its message) or if it has not finished after `limit` (it
/// hangs or spins; the thread is abandoned).
pub fn watchdog<T: Send + 'static>(
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    // A WASI guest has one thread: `f` runs on it, and tests/wasi/run.sh
    // bounds the whole guest's run instead.
    if cfg!(target_os = "wasi") {
        let _ = (what, limit);
        return f();
    }
    let (done, finished) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name(what.to_string())
        .spawn(move || {
            let out = f();
            let _ = done.send(());
            out
        })
        .expect("spawn a watched thread");
    match finished.recv_timeout(limit) {
        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => match thread.join() {
            Ok(out) => out,
            Err(panic) => std::panic::resume_unwind(panic),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: not finished after {limit:?}: it hangs or spins")
        }
    }
}

/// The backends a loop-level scenario runs on: the simulator, then every
/// OS backend of this host (`evloop::backends::AVAILABLE`, which includes
/// kqueue with `--features emulated-kqueue`).
pub fn backends() -> Vec<&'static str> {
    let mut all = vec!["sim"];
    // In a WASI guest the simulator alone: a kernel world needs socket
    // pairs, which a guest cannot make (its sockets are tested with a
    // peer outside: tests/wasi_echo.rs, tests/wasi_kit.rs).
    if cfg!(not(target_os = "wasi")) {
        all.extend_from_slice(evloop::backends::AVAILABLE);
    }
    all
}

/// Runs `scenario(backend)` on every backend of [`backends`], each under
/// the [`watchdog`].
pub fn on_every_backend(what: &str, scenario: fn(&'static str)) {
    on_backends(what, &backends(), scenario);
}

/// Runs `scenario(backend)` on each of `names`, each under the
/// [`watchdog`] (whose thread is named after `what` and the backend, so
/// that a failing assertion names both).
pub fn on_backends(what: &str, names: &[&'static str], scenario: fn(&'static str)) {
    for &name in names {
        watchdog(&format!("{what} on {name}"), WATCHDOG, move || {
            scenario(name)
        });
    }
}

/// Runs `scenario` in a [`World`] of each of `names`, each under the
/// [`watchdog`] (the world is made on the watched thread).
#[cfg(any(unix, target_os = "wasi"))]
pub fn in_worlds(what: &str, names: &[&'static str], scenario: fn(&World)) {
    for &name in names {
        watchdog(&format!("{what} on {name}"), WATCHDOG, move || {
            scenario(&World::new(name))
        });
    }
}

/// How a loop-level scenario runs a loop and checks why the run ended.
pub trait RunTo<S> {
    /// Runs `mode` and asserts that it ended with `outcome`.
    fn run_expect(&mut self, mode: RunMode, st: &mut S, outcome: RunOutcome);

    /// Runs `Default` and asserts that it ended for want of active
    /// watchers (what every scenario that must not hang ends with).
    #[track_caller]
    fn run_to_end(&mut self, st: &mut S) {
        self.run_expect(RunMode::Default, st, RunOutcome::NoActiveWatchers);
    }

    /// [`run_to_end`](RunTo::run_to_end) from `st`; returns the state the
    /// run left (what the callbacks logged, say).
    #[track_caller]
    fn finish(&mut self, mut st: S) -> S {
        self.run_to_end(&mut st);
        st
    }
}

impl<'s, S> RunTo<S> for Loop<'s, S> {
    #[track_caller]
    fn run_expect(&mut self, mode: RunMode, st: &mut S, outcome: RunOutcome) {
        let got = self.run(mode, st);
        match got {
            Ok(got) => assert_eq!(
                got,
                outcome,
                "{mode:?} run on {} ended {got:?}",
                self.backend_name()
            ),
            Err(e) => panic!("{mode:?} run on {}: {e}", self.backend_name()),
        }
    }
}

/// A world for one scenario: a loop on `backend`, and connections that
/// work on it (simulated sockets on the simulator, socket pairs on a
/// kernel).
#[cfg(any(unix, target_os = "wasi"))]
pub struct World {
    pub backend: &'static str,
    pub sim: Option<Sim>,
}

#[cfg(any(unix, target_os = "wasi"))]
impl World {
    pub fn new(backend: &'static str) -> World {
        World {
            backend,
            sim: (backend == "sim").then(Sim::new),
        }
    }

    /// A loop on this world's backend.
    pub fn new_loop<'s, S>(&self) -> Loop<'s, S> {
        match &self.sim {
            Some(sim) => Loop::with_backend(sim.backend()),
            None => Loop::builder()
                .backend(self.backend)
                .build()
                .unwrap_or_else(|e| panic!("{}: {e}", self.backend)),
        }
    }

    /// The simulator, if this world is the simulator's: for what only it
    /// can check (its trace, exact virtual times).
    pub fn sim(&self) -> Option<&Sim> {
        self.sim.as_ref()
    }

    /// A connection: the end the loop watches, and its peer.
    pub fn pair(&self) -> (Conn, Peer) {
        self.pair_sized(1 << 16)
    }

    /// A connection whose directions hold at most `buffer` unread bytes on
    /// the simulator (a kernel sizes its own buffers).
    pub fn pair_sized(&self, buffer: usize) -> (Conn, Peer) {
        match &self.sim {
            Some(sim) => {
                let (a, b) = sim.pair("conn", buffer);
                (Conn::Sim(a), Peer::Sim(b))
            }
            #[cfg(unix)]
            None => {
                let (a, b) = UnixStream::pair().unwrap();
                a.set_nonblocking(true).unwrap();
                (Conn::Os(a), Peer::Os(b))
            }
            // A WASI guest cannot make a pair (`backends` lists only the
            // simulator there).
            #[cfg(target_os = "wasi")]
            None => panic!("{}: no socket pairs in a WASI guest", self.backend),
        }
    }
}

/// The watched end of a connection, on either kind of backend.
#[cfg(any(unix, target_os = "wasi"))]
#[derive(Debug)]
pub enum Conn {
    Sim(SimSocket),
    #[cfg(unix)]
    Os(UnixStream),
}

#[cfg(any(unix, target_os = "wasi"))]
impl Source for Conn {
    fn source_fd(&self) -> evloop::SourceFd<'_> {
        match self {
            Conn::Sim(s) => s.source_fd(),
            #[cfg(unix)]
            Conn::Os(s) => s.source_fd(),
        }
    }
}

#[cfg(any(unix, target_os = "wasi"))]
impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Sim(s) => s.read(buf),
            #[cfg(unix)]
            Conn::Os(s) => s.read(buf),
        }
    }
}

/// For `evloop::net::Conns`: the half-close of a graceful close (none on
/// the simulator, whose sockets have none).
#[cfg(any(unix, target_os = "wasi"))]
impl evloop::net::Stream for Conn {
    fn shutdown_write(&mut self) -> io::Result<()> {
        match self {
            Conn::Sim(s) => s.shutdown_write(),
            #[cfg(unix)]
            Conn::Os(s) => s.shutdown(std::net::Shutdown::Write),
        }
    }
}

/// For watchers on a borrowed connection (`Io::borrowed`), whose
/// callbacks get `&Conn`.
#[cfg(any(unix, target_os = "wasi"))]
impl Read for &Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Sim(s) => (&*s).read(buf),
            #[cfg(unix)]
            Conn::Os(s) => (&*s).read(buf),
        }
    }
}

/// For futures (`evloop::exec::AsyncFd<Conn>`), which write through `&Conn`.
#[cfg(any(unix, target_os = "wasi"))]
impl Write for &Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Sim(s) => (&*s).write(buf),
            #[cfg(unix)]
            Conn::Os(s) => (&*s).write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(any(unix, target_os = "wasi"))]
impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Sim(s) => s.write(buf),
            #[cfg(unix)]
            Conn::Os(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The other end of a [`Conn`]: the test writes to it to make the watched
/// end readable. On the simulator the bytes arrive at once (virtual time
/// does not move while the loop is not blocked).
#[cfg(any(unix, target_os = "wasi"))]
#[derive(Debug)]
pub enum Peer {
    Sim(SimSocket),
    #[cfg(unix)]
    Os(UnixStream),
}

#[cfg(any(unix, target_os = "wasi"))]
impl Peer {
    /// Sends `bytes` to the watched end.
    pub fn send(&mut self, bytes: &[u8]) {
        match self {
            Peer::Sim(s) => s.write_all(bytes).unwrap(),
            #[cfg(unix)]
            Peer::Os(s) => s.write_all(bytes).unwrap(),
        }
    }

    /// Reads what the watched end has sent so far, without blocking (from
    /// a callback, say: the loop's thread must never wait on the peer).
    pub fn receive(&mut self) -> Vec<u8> {
        match self {
            Peer::Sim(s) => drain(s),
            #[cfg(unix)]
            Peer::Os(s) => {
                s.set_nonblocking(true).unwrap();
                let got = drain(s);
                s.set_nonblocking(false).unwrap();
                got
            }
        }
    }
}

/// The fd number of `s`: an OS fd's, or a virtual one's (a simulator's or
/// a replay's socket), so that a log line reads the same either way.
pub fn fd_of(s: &impl Source) -> evloop::RawFd {
    s.source_fd().number()
}

/// Reads what is there without blocking.
pub fn drain(conn: &mut impl Read) -> Vec<u8> {
    drain_to_eof(conn).0
}

/// Reads what is there without blocking; returns the bytes and whether
/// the end of file was seen.
pub fn drain_to_eof(conn: &mut impl Read) -> (Vec<u8>, bool) {
    let mut buf = vec![0; 1 << 16];
    let mut got = Vec::new();
    loop {
        match conn.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return (got, false),
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// Writes as much of `unsent` as `sock` takes without blocking (what it
/// took is drained from `unsent`); returns whether all of it went.
pub fn flush(sock: &mut impl Write, unsent: &mut Vec<u8>) -> bool {
    while !unsent.is_empty() {
        match sock.write(unsent) {
            Ok(n) => {
                unsent.drain(..n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) => panic!("write failed: {e}"),
        }
    }
    true
}

/// Asserts that `err` names WASI: a refusal of what a WASI guest lacks
/// (tests/wasi_guest.rs, tests/wasi_net_guest.rs).
#[cfg(target_os = "wasi")]
#[track_caller]
pub fn names_wasi(err: impl std::fmt::Display) {
    let text = err.to_string();
    assert!(
        text.contains("WASI (wasm32-wasip1)"),
        "does not name WASI: {text}"
    );
}

/// Milliseconds, the unit of most scenarios' delays.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Starts `sh -c script` and returns its pid. Dropping a `Child` neither
/// waits nor kills: the backend or loop under test reaps it.
pub fn spawn(script: &str) -> u32 {
    std::process::Command::new("sh")
        .args(["-c", script])
        .spawn()
        .unwrap()
        .id()
}

/// Waits (without reaping: `WNOWAIT`) until `pid` has exited.
#[cfg(unix)]
pub fn wait_exited(pid: u32) {
    // SAFETY: `info` is written by waitid; the child is left unreaped.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOWAIT,
        );
        assert_eq!(r, 0, "waitid: {}", std::io::Error::last_os_error());
    }
}

/// The path of example `name`'s binary, built now if it is not up to date.
///
/// `cargo test` builds the examples as plain binaries, but `cargo test
/// --all-targets` builds them as test harnesses instead, so a test cannot
/// count on finding them: it asks cargo, with this test build's features
/// (kqueue over the emulation, io_uring) so that the example knows the
/// same backends. Cargo releases its lock while tests run, and the build
/// is a no-op when the binary is fresh.
pub fn example(name: &str) -> std::path::PathBuf {
    let mut features = vec![];
    if cfg!(feature = "emulated-kqueue") {
        features.push("emulated-kqueue");
    }
    if cfg!(feature = "io-uring") {
        features.push("io-uring");
    }
    // One build at a time from this process: tests of one binary run in
    // parallel, and each would otherwise wait on cargo's lock in turn.
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let status = std::process::Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--example", name])
        .args(["--features", &features.join(",")])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("cargo runs");
    assert!(status.success(), "cargo build --example {name} failed");
    // The test binary is target/<profile>/deps/<test>-<hash>: the examples
    // are in target/<profile>/examples.
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().unwrap().parent().unwrap();
    let path = profile.join("examples").join(name);
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// The backends a scenario with real children runs on: every OS backend,
/// then those with a `SIGCHLD` fallback forced onto them (what they do on
/// a kernel without pidfds; elsewhere than Linux they use it anyway).
#[cfg(unix)]
pub fn child_kernels() -> Vec<&'static str> {
    let mut all = evloop::backends::AVAILABLE.to_vec();
    #[cfg(any(target_os = "linux", target_os = "android"))]
    all.push("epoll+sigchld");
    #[cfg(all(feature = "io-uring", target_os = "linux"))]
    all.push("io_uring+sigchld");
    all.extend(["poll+sigchld", "select+sigchld"]);
    all
}

/// A loop on one of [`child_kernels`].
#[cfg(unix)]
pub fn kernel_loop<'s, S>(name: &'static str) -> Loop<'s, S> {
    use evloop::backends;
    match name {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        "epoll+sigchld" => {
            let mut lp = Loop::with_backend(backends::epoll::Epoll::new().unwrap());
            lp.force_sigchld_fallback();
            lp
        }
        #[cfg(all(feature = "io-uring", target_os = "linux"))]
        "io_uring+sigchld" => {
            let mut lp = Loop::with_backend(backends::io_uring::IoUring::new().unwrap());
            lp.force_sigchld_fallback();
            lp
        }
        "poll+sigchld" => {
            let mut lp = Loop::with_backend(backends::poll::Poll::new());
            lp.force_sigchld_fallback();
            lp
        }
        "select+sigchld" => {
            let mut lp = Loop::with_backend(backends::select::Select::new());
            lp.force_sigchld_fallback();
            lp
        }
        _ => World::new(name).new_loop(),
    }
}

/// A listener on loopback and a task of the current executor accepting
/// one connection on it, handing it to `serve`.
pub fn serve_one<F, Fut>(serve: F) -> (std::net::SocketAddr, evloop::exec::JoinHandle<Fut::Output>)
where
    F: FnOnce(evloop::exec::AsyncFd<std::net::TcpStream>) -> Fut + 'static,
    Fut: std::future::Future + 'static,
{
    let listener = evloop::exec::AsyncFd::<std::net::TcpListener>::bind("127.0.0.1:0").unwrap();
    let addr = listener.get_ref().local_addr().unwrap();
    let task = evloop::exec::spawn_local(async move {
        let (stream, _) = listener.accept().await.unwrap();
        serve(stream).await
    })
    .unwrap();
    (addr, task)
}

/// A backend whose wall clock the test steps: `shift_ns` is added to the
/// inner backend's wall clock, and the loop notices the step by comparing
/// it with the monotonic clock.
pub struct Shifted {
    /// The backend that does the work.
    pub inner: Box<dyn evloop::backend::Backend>,
    /// The step, in nanoseconds (negative: back).
    pub shift_ns: std::sync::Arc<std::sync::atomic::AtomicI64>,
}

impl evloop::backend::NoticeService for Shifted {
    fn wall_now(&mut self) -> Duration {
        let real = match self.inner.notices() {
            Some(s) => s.wall_now(),
            None => evloop::backend::NoNotices.wall_now(),
        };
        Duration::from_nanos(
            (real.as_nanos() as i64 + self.shift_ns.load(std::sync::atomic::Ordering::Relaxed))
                as u64,
        )
    }
    fn take_notices(
        &mut self,
        n: &mut evloop::backend::Notices,
        fds: &mut dyn evloop::backend::InternalFds,
    ) {
        if let Some(s) = self.inner.notices() {
            s.take_notices(n, fds)
        }
    }
    fn dispatched(&mut self, fd: evloop::RawFd, ready: evloop::Ready) {
        if let Some(s) = self.inner.notices() {
            s.dispatched(fd, ready)
        }
    }
}

impl evloop::backend::Backend for Shifted {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn capabilities(&self) -> evloop::backend::Capabilities {
        self.inner.capabilities()
    }
    fn modify(
        &mut self,
        fd: evloop::RawFd,
        old: evloop::Interest,
        new: evloop::Interest,
    ) -> io::Result<()> {
        self.inner.modify(fd, old, new)
    }
    fn poll(
        &mut self,
        t: Option<Duration>,
        ev: &mut Vec<evloop::backend::PollEvent>,
    ) -> io::Result<evloop::backend::PollStatus> {
        self.inner.poll(t, ev)
    }
    fn now(&mut self) -> Duration {
        self.inner.now()
    }
    fn notices(&mut self) -> Option<&mut dyn evloop::backend::NoticeService> {
        Some(self)
    }
}

/// A directory of its own under the temporary directory (named by the
/// test, the backend, the process and the thread, so that tests running
/// at once never share one), emptied first and removed on drop.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    /// A new empty directory for `test` on `backend`.
    pub fn new(test: &str, backend: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "evloop-{test}-{backend}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// The path of `name` in it.
    pub fn join(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Steps `CLOCK_REALTIME` by `by_ns` nanoseconds (negative: back) from
/// what it reads; 0 sets it to what it reads, a step of microseconds,
/// which the kernel treats as any other set (it cancels the timers that
/// asked). Needs `CAP_SYS_TIME`: see [`may_set_clock`].
#[cfg(unix)]
pub fn step_clock(by_ns: i64) -> io::Result<()> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a writable timespec, read, moved, then set.
    unsafe {
        if libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) < 0 {
            return Err(io::Error::last_os_error());
        }
        let ns = now.tv_sec as i128 * 1_000_000_000 + now.tv_nsec as i128 + by_ns as i128;
        now.tv_sec = (ns.div_euclid(1_000_000_000)) as libc::time_t;
        now.tv_nsec = (ns.rem_euclid(1_000_000_000)) as libc::c_long;
        if libc::clock_settime(libc::CLOCK_REALTIME, &now) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// [`step_clock`] by nothing: sets `CLOCK_REALTIME` to what it reads.
#[cfg(unix)]
pub fn set_clock_to_now() -> io::Result<()> {
    step_clock(0)
}

/// Whether a test may set the machine's clock, which it must not do
/// unasked: `EVLOOP_TEST_SET_CLOCK=1` (with the privilege,
/// `CAP_SYS_TIME`), or `=try` (what `.ci/run` sets: where the process may
/// set the clock; where `clock_settime` says `EPERM`, a loud skip). Else
/// it says that `what` is not tested, and the test skips it.
#[cfg(unix)]
pub fn may_set_clock(what: &str) -> bool {
    let Some(mode) = std::env::var_os("EVLOOP_TEST_SET_CLOCK") else {
        eprintln!(
            "!!! SKIP: not setting the clock: {what} NOT tested (EVLOOP_TEST_SET_CLOCK=1, or =try, runs it)"
        );
        return false;
    };
    if mode == "try" {
        if let Err(e) = set_clock_to_now() {
            if e.raw_os_error() == Some(libc::EPERM) {
                eprintln!("!!! SKIP: the clock cannot be set here ({e}): {what} NOT tested");
                return false;
            }
            panic!("clock_settime: {e}");
        }
    }
    true
}

/// Held for writing by a test that forks (or sets the clock), through
/// [`alone`], so that no other test of its binary is inside a backend (or
/// holds a lock of the loop's) at that moment; every other test of such a
/// binary holds it for reading, through [`shared`].
pub static FORK: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// [`FORK`] for reading: what a test holds while it may be inside a backend.
pub fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    FORK.read().unwrap_or_else(|e| e.into_inner())
}

/// [`FORK`] for writing: no other test of the binary runs meanwhile.
pub fn alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    FORK.write().unwrap_or_else(|e| e.into_inner())
}

/// Runs `scenario(backend)` on every OS backend, each under the
/// [`watchdog`], holding [`FORK`] for reading.
pub fn on_each_kernel(what: &str, scenario: fn(&'static str)) {
    let _shared = shared();
    on_backends(what, evloop::backends::AVAILABLE, scenario);
}

/// `sh -c "read _; exit code"`: it runs until the test drops its stdin.
pub fn held(code: i32) -> std::process::Child {
    std::process::Command::new("sh")
        .args(["-c", &format!("read _; exit {code}")])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// How many times [`marker`] ran.
#[cfg(unix)]
pub static MARKS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A signal handler of the test's own, which only counts: installed
/// before a watcher, it shows whether the watcher's end restores it.
#[cfg(unix)]
extern "C" fn marker(_: libc::c_int) {
    MARKS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// The current action of `signal`.
#[cfg(unix)]
pub fn action(signal: i32) -> libc::sigaction {
    // SAFETY: sigaction writes the current action to `now`.
    unsafe {
        let mut now: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::sigaction(signal, std::ptr::null(), &mut now), 0);
        now
    }
}

/// Installs [`marker`] for `signal`, with `SA_NODEFER` to recognise it.
#[cfg(unix)]
pub fn install_marker(signal: i32) {
    // SAFETY: a valid action whose handler only counts.
    unsafe {
        let mut mine: libc::sigaction = std::mem::zeroed();
        mine.sa_sigaction = marker as extern "C" fn(libc::c_int) as libc::sighandler_t;
        mine.sa_flags = libc::SA_NODEFER;
        assert_eq!(libc::sigaction(signal, &mine, std::ptr::null_mut()), 0);
    }
}

/// Whether `a` is the action [`install_marker`] installs.
#[cfg(unix)]
pub fn is_marker(a: &libc::sigaction) -> bool {
    a.sa_sigaction == marker as extern "C" fn(libc::c_int) as libc::sighandler_t
        && a.sa_flags & libc::SA_NODEFER != 0
}

/// The echo handler of `evloop::net`'s examples: what arrives goes back
/// out (`Conn::write_from_input`), and the end of the input closes the
/// connection.
pub fn echo<S: AsMut<evloop::net::Conns<C>>, C>(
    lp: &mut Loop<'_, S>,
    state: &mut S,
    id: evloop::net::ConnId,
    ev: evloop::net::ConnEvent,
) {
    let conn = &mut state.as_mut()[id];
    match ev {
        evloop::net::ConnEvent::Data => {
            let n = conn.input().len();
            conn.write_from_input(lp, n);
        }
        evloop::net::ConnEvent::Eof => conn.close(lp),
        _ => {}
    }
}

/// One log line of a scripted callback: what it did and what that
/// returned (an error by its message).
pub fn outcome<T: std::fmt::Debug>(what: String, r: evloop::Result<T>) -> String {
    format!("{what}: {:?}", r.map_err(|e| e.to_string()))
}

/// A simulator and one socket of it, `name`, with `send_capacity` bytes
/// of room in its send buffer.
pub fn sim_socket(name: &str, send_capacity: usize) -> (Sim, SimSocket) {
    let sim = Sim::new();
    let sock = sim.socket(name, send_capacity);
    (sim, sock)
}

/// The lines of the simulator's trace that contain `what`.
pub fn trace_with(sim: &Sim, what: &str) -> Vec<String> {
    sim.trace_lines()
        .into_iter()
        .filter(|l| l.contains(what))
        .collect()
}

/// Runs `scenario` in a [`World`] of each backend of [`backends`], each
/// under the [`watchdog`].
#[cfg(any(unix, target_os = "wasi"))]
pub fn on_every_world(what: &str, scenario: fn(&World)) {
    in_worlds(what, &backends(), scenario);
}

/// The OS backend `name`, opened directly (no loop), with the OS
/// services a loop would compose with it.
#[cfg(unix)]
pub fn open(name: &str) -> Served {
    Served::new(evloop::backends::open(name).unwrap_or_else(|e| panic!("cannot open {name}: {e}")))
}

/// A backend driven by hand, with the OS services the loop composes with
/// it ([`evloop::backends::WithServices`]), and the service's methods
/// without their `fds` argument (the composition keeps its fds itself).
/// The tests of the services at the backend level use it.
#[cfg(unix)]
pub struct Served {
    /// The backend and its services.
    pub backend: evloop::backends::WithServices<'static>,
}

#[cfg(unix)]
#[allow(dead_code)] // (each test binary uses some)
impl Served {
    /// `backend`, with the services.
    pub fn new(backend: Box<dyn evloop::backend::Backend>) -> Served {
        Served {
            backend: evloop::backends::WithServices::new(backend),
        }
    }

    /// Child exits through `SIGCHLD` (the notifier's test switch).
    pub fn force_sigchld_fallback(&mut self) {
        self.backend.force_sigchld_fallback();
    }

    /// Runs `f` on the services.
    pub fn service<R>(
        &mut self,
        f: impl FnOnce(
            &mut dyn evloop::backend::NoticeService,
            &mut dyn evloop::backend::InternalFds,
        ) -> R,
    ) -> R {
        f(&mut self.backend, &mut Vec::new())
    }

    /// The backend's name.
    pub fn name(&self) -> &'static str {
        evloop::backend::Backend::name(&self.backend)
    }

    /// A poll; the notifier's fds are taken out and routed to it.
    pub fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<evloop::backend::PollEvent>,
    ) -> io::Result<evloop::backend::PollStatus> {
        evloop::backend::Backend::poll(&mut self.backend, timeout, events)
    }

    /// [`NoticeService::take_notices`](evloop::backend::NoticeService::take_notices).
    pub fn take_notices(&mut self, n: &mut evloop::backend::Notices) {
        self.service(|s, fds| s.take_notices(n, fds));
    }
    /// [`NoticeService::watch_signal`](evloop::backend::NoticeService::watch_signal).
    pub fn watch_signal(&mut self, signal: i32) -> io::Result<()> {
        self.service(|s, fds| s.watch_signal(signal, fds))
    }
    /// [`NoticeService::unwatch_signal`](evloop::backend::NoticeService::unwatch_signal).
    pub fn unwatch_signal(&mut self, signal: i32) {
        self.service(|s, _| s.unwatch_signal(signal));
    }
    /// [`NoticeService::watch_child`](evloop::backend::NoticeService::watch_child).
    pub fn watch_child(&mut self, pid: u32) -> io::Result<()> {
        self.service(|s, fds| s.watch_child(pid, fds))
    }
    /// [`NoticeService::unwatch_child`](evloop::backend::NoticeService::unwatch_child).
    pub fn unwatch_child(&mut self, pid: u32) {
        self.service(|s, fds| s.unwatch_child(pid, fds));
    }
    /// [`NoticeService::watch_any_child`](evloop::backend::NoticeService::watch_any_child).
    pub fn watch_any_child(&mut self) -> io::Result<()> {
        self.service(|s, fds| s.watch_any_child(fds))
    }
    /// [`NoticeService::unwatch_any_child`](evloop::backend::NoticeService::unwatch_any_child).
    pub fn unwatch_any_child(&mut self) {
        self.service(|s, _| s.unwatch_any_child());
    }
    /// [`NoticeService::signal_child`](evloop::backend::NoticeService::signal_child).
    pub fn signal_child(&mut self, pid: u32, signal: i32) -> io::Result<()> {
        self.service(|s, _| s.signal_child(pid, signal))
    }
    /// [`NoticeService::spawn_child`](evloop::backend::NoticeService::spawn_child).
    pub fn spawn_child(&mut self, c: &mut std::process::Command) -> io::Result<evloop::Spawned> {
        self.service(|s, fds| s.spawn_child(c, fds))
    }
    /// [`NoticeService::waker`](evloop::backend::NoticeService::waker).
    pub fn waker(&mut self) -> io::Result<std::sync::Arc<dyn evloop::backend::Wake>> {
        self.service(|s, fds| s.waker(fds))
    }
    /// [`NoticeService::watch_clock_steps`](evloop::backend::NoticeService::watch_clock_steps).
    pub fn watch_clock_steps(&mut self) -> bool {
        self.service(|s, fds| s.watch_clock_steps(fds))
    }
    /// [`NoticeService::unwatch_clock_steps`](evloop::backend::NoticeService::unwatch_clock_steps).
    pub fn unwatch_clock_steps(&mut self) {
        self.service(|s, fds| s.unwatch_clock_steps(fds));
    }
    /// [`NoticeService::watch_path`](evloop::backend::NoticeService::watch_path).
    pub fn watch_path(&mut self, path: &std::path::Path, token: u64) -> io::Result<()> {
        self.service(|s, fds| s.watch_path(path, token, fds))
    }
    /// [`NoticeService::unwatch_path`](evloop::backend::NoticeService::unwatch_path).
    pub fn unwatch_path(&mut self, token: u64) {
        self.service(|s, fds| s.unwatch_path(token, fds));
    }
    /// The backend's `reinit`, then the service's (as the loop does after
    /// a fork; the notifier's fds are its own to re-create).
    pub fn reinit(&mut self) -> io::Result<()> {
        evloop::backend::Backend::reinit(&mut self.backend)?;
        self.service(|s, fds| s.reinit(fds))
    }
}

/// Polls `b` and gathers its notices, as the loop does (a poll, then
/// `take_notices`), until `done` holds or `limit` has passed. No poll may
/// report an fd: none is registered, and the backends' internal fds are
/// never reported.
#[cfg(unix)]
pub fn gather(
    b: &mut Served,
    limit: Duration,
    done: impl Fn(&evloop::backend::Notices) -> bool,
) -> evloop::backend::Notices {
    let mut all = evloop::backend::Notices::default();
    let deadline = std::time::Instant::now() + limit;
    let mut events: Vec<evloop::backend::PollEvent> = Vec::new();
    loop {
        events.clear();
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        b.poll(Some(left), &mut events).unwrap();
        assert_eq!(events, [], "{}: an internal fd was reported", b.name());
        b.take_notices(&mut all);
        if done(&all) || std::time::Instant::now() >= deadline {
            return all;
        }
    }
}

/// A loop on `backend` recording to `trace`, or `None`, said loudly,
/// where the backend cannot be made here (io_uring refused by the kernel).
pub fn recording_loop<'s, S>(
    backend: &str,
    trace: &evloop::replay::MemoryTrace,
) -> Option<Loop<'s, S>> {
    match Loop::builder()
        .backend(backend)
        .record(trace.clone())
        .build()
    {
        Ok(lp) => Some(lp),
        Err(e) => {
            eprintln!("!!! SKIP: the {backend} backend cannot be made here: {e}");
            None
        }
    }
}
