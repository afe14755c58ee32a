//! The simulated backend: virtual fds, a virtual clock, scheduled world
//! events, fault injection and an exact trace. No syscalls, fully
//! deterministic.
//!
//! A [`Sim`] is the world: sockets with a receive buffer and a send
//! capacity, and a schedule of things that happen to them at given virtual
//! times (bytes arrive, the peer frees send capacity, the peer hangs up, the
//! fd turns invalid, a spurious wakeup). [`Sim::backend`] gives the loop its
//! view of that world. When the loop would block and nothing is ready, the
//! clock jumps to the next scheduled event (or the timeout) instead of
//! sleeping; when nothing can ever happen and there is no timeout, the poll
//! reports [`PollStatus::Stalled`] and `run` returns
//! [`RunOutcome::Stalled`](crate::RunOutcome::Stalled) instead of hanging.
//!
//! Readiness is level-triggered, like epoll's default: an fd is readable
//! while its buffer holds bytes or its peer has hung up (reads then return
//! EOF), writable while it has send capacity. `HUP` is reported regardless
//! of interest, as epoll does.

use crate::RawFd;
use std::cell::{RefCell, RefMut};
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::backend::{
    Backend, Capabilities, ChildExit, InternalFds, NoticeService, Notices, PollEvent, PollStatus,
    SignalSet, Wake,
};
use crate::{ExitStatus, FileStat, Interest, Ready, Source, SourceFd, VirtualFd};

/// The first simulated pid handed out.
const FIRST_PID: u32 = 1000;

/// The first virtual fd number handed out (0-2 look like stdio).
const FIRST_FD: RawFd = 3;

/// The fd of a hole in [`World::registered`] (a forgotten entry).
const HOLE: RawFd = crate::source::NO_FD;

/// [`Socket::reg_slot`] of an unregistered socket.
const NOT_REGISTERED: u32 = u32::MAX;

/// The simulated world. Cloning gives another handle to the same world.
///
/// ```
/// use evloop::{Interest, Loop, RunMode, RunOutcome, Sim};
/// use std::io::Read;
/// use std::time::Duration;
///
/// let sim = Sim::new();
/// let sock = sim.socket("c1", 0);
/// sim.deliver(Duration::from_millis(5), &sock, b"ping");
/// let mut lp: Loop = Loop::with_backend(sim.backend());
/// lp.io(sock, Interest::READABLE, |_, _, ev| {
///     let mut buf = [0; 8];
///     let _ = ev.source.read(&mut buf);
/// }).unwrap();
/// // After the read nothing else can happen: the simulator says so.
/// assert_eq!(lp.run(RunMode::Default, &mut ()).unwrap(), RunOutcome::Stalled);
/// assert_eq!(sim.trace_lines(), [
///     "t=0ns modify fd3 - => r",
///     "t=0ns idle until t=5ms",
///     "t=5ms poll {fd3:r}",
///     "t=5ms dispatch fd3 r",
///     "t=5ms stalled",
/// ]);
/// ```
#[derive(Clone, Default)]
pub struct Sim {
    world: Rc<RefCell<World>>,
}

// Every operation on one fd or one scheduled action is O(1) or O(log n),
// so that a world of n sockets costs O(n log n) to build, register and
// tear down; only a poll walks every registered fd, as poll(2) does.
#[derive(Default)]
struct World {
    now: Duration,
    sockets: Vec<Socket>,
    /// Registered fds and their interest, in registration order (the order
    /// in which `poll` reports them). A forgotten fd leaves a hole (fd
    /// [`HOLE`]) instead of shifting every later entry; holes are squeezed
    /// out once they outnumber the live entries, so a poll's walk stays
    /// within twice the registered count. Each socket knows its entry
    /// ([`Socket::reg_slot`]). (A sentinel rather than an `Option` keeps
    /// entries at 8 bytes, as poll walks them.)
    registered: Vec<(RawFd, Interest)>,
    /// Entries in `registered` that are not holes.
    registered_live: usize,
    /// Scheduled actions, earliest (time, scheduling order) first.
    schedule: BinaryHeap<Reverse<Scheduled>>,
    seq: u64,
    spurious: bool,
    /// Injected modify failures still to happen, per fd.
    fail_modify: HashMap<RawFd, usize>,
    trace: Vec<Step>,
    modify_calls: u64,
    poll_calls: u64,
    /// Signals the loop watches, and those that arrived since it last
    /// took its notices.
    watched_signals: SignalSet,
    arrived_signals: SignalSet,
    /// Simulated child processes, by pid.
    children: HashMap<u32, SimChild>,
    /// How many pids [`Sim::spawn`] has handed out.
    spawned: u32,
    /// The loop watches any child ([`Backend::watch_any_child`]): every
    /// child that exits is reaped and reported.
    any_watched: bool,
    /// Watched children that exited, not yet taken by the loop.
    exits: Vec<ChildExit>,
    /// Set by the waker (from any thread); taken by `poll`.
    woken: Arc<AtomicBool>,
    /// The loop was woken, not yet told.
    woken_untold: bool,
    /// The wall clock: nanoseconds since the epoch at virtual time zero,
    /// moved by steps.
    wall_origin: i128,
    /// Whether the backend reports wall-clock steps (as a timerfd would),
    /// whether the loop watches them (only then is a step reported, and
    /// ends a wait), and whether one is untold.
    no_step_reports: bool,
    watching_steps: bool,
    stepped_untold: bool,
    /// Simulated files, by path.
    files: HashMap<PathBuf, SimFile>,
    next_inode: u64,
    /// Paths the loop asked for hints about, by token; whether hints are
    /// given (as inotify would); tokens hinted at, not yet told.
    watched_paths: HashMap<u64, PathBuf>,
    no_path_hints: bool,
    hinted: Vec<u64>,
}

/// A simulated file.
#[derive(Clone, Copy)]
struct SimFile {
    size: u64,
    /// Wall-clock nanoseconds of the last write.
    modified: u64,
    inode: u64,
}

/// A simulated child process.
struct SimChild {
    name: String,
    exited: Option<ExitStatus>,
    watched: bool,
    /// Reaped (reported to a watcher): gone for good.
    reaped: bool,
    /// The signals sent to it ([`Backend::signal_child`]), in order.
    signals: Vec<i32>,
}

impl SimChild {
    fn new(name: String) -> SimChild {
        SimChild {
            name,
            exited: None,
            watched: false,
            reaped: false,
            signals: Vec::new(),
        }
    }
}

struct Socket {
    name: String,
    inbuf: VecDeque<u8>,
    send_capacity: usize,
    sent: Vec<u8>,
    peer_closed: bool,
    closed: bool,
    invalid: bool,
    /// The other end, for sockets made by [`Sim::pair`].
    peer: Option<RawFd>,
    /// The peer closed with bytes we sent still unread (a TCP reset): the
    /// next read fails with `ConnectionReset`, once.
    reset: bool,
    /// Its entry in [`World::registered`], or [`NOT_REGISTERED`] (a `u32`
    /// fits in the struct's padding: poll reads every registered socket).
    reg_slot: u32,
}

struct Scheduled {
    at: Duration,
    seq: u64,
    action: Action,
}

// Ordered by (time, scheduling order) alone; `seq` is unique, so this
// agrees with equality.
impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Scheduled {}

impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

enum Action {
    Deliver(RawFd, Vec<u8>),
    FreeSend(RawFd, usize),
    ClosePeer(RawFd),
    Invalidate(RawFd),
    SpuriousWakeup,
    Raise(i32),
    Exit(u32, ExitStatus),
    ReapElsewhere(u32),
    Call(Box<dyn FnOnce()>),
    StepWall(i128),
    WriteFile(PathBuf, u64),
    RenameFile(PathBuf, PathBuf),
    RemoveFile(PathBuf),
}

/// One step of the simulator's trace.
///
/// ```
/// use evloop::backends::sim::StepKind;
/// use evloop::{Interest, Loop, RunMode, Sim};
/// let sim = Sim::new();
/// let mut lp: Loop = Loop::with_backend(sim.backend());
/// lp.io(sim.socket("s", 0), Interest::READABLE, |_, _, _| {}).unwrap();
/// lp.run(RunMode::Default, &mut ()).unwrap();
/// let steps = sim.trace();
/// assert!(matches!(steps[0].kind, StepKind::Modify { fd: 3, .. }));
/// assert_eq!(steps.last().unwrap().kind, StepKind::Stalled);
/// assert_eq!(steps[0].to_string(), "t=0ns modify fd3 - => r");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Virtual time of the step.
    pub at: Duration,
    /// What happened.
    pub kind: StepKind,
}

/// What a [`Step`] records (see [`Step`] for an example).
///
/// ```
/// use evloop::backends::sim::{Step, StepKind};
/// let s = Step { at: std::time::Duration::from_millis(5), kind: StepKind::Spurious };
/// assert_eq!(s.to_string(), "t=5ms spurious wakeup");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepKind {
    /// The loop changed an fd's registration (one call after fd_reify).
    Modify {
        /// The fd.
        fd: RawFd,
        /// Previous registration.
        old: Interest,
        /// New registration.
        new: Interest,
        /// Whether the call failed (injected fault or invalid fd).
        failed: bool,
    },
    /// A poll returned this ready set, in report order.
    Poll(Vec<PollEvent>),
    /// The loop invoked an io callback.
    Dispatch {
        /// The fd.
        fd: RawFd,
        /// The events passed to the callback.
        ready: Ready,
    },
    /// Nothing was ready: the clock jumped to `until`.
    Idle {
        /// The new virtual time.
        until: Duration,
    },
    /// A poll returned early with no events (an injected fault).
    Spurious,
    /// Nothing could ever become ready and no timeout was given.
    Stalled,
    /// A signal arrived ([`Sim::raise`]); `watched`: the loop watches it
    /// (an unwatched one is ignored, where a real process might die).
    Signal {
        /// The signal.
        signal: i32,
        /// Whether the loop watched it.
        watched: bool,
    },
    /// A simulated child exited ([`Sim::exit`]), or was reaped by someone
    /// else ([`Sim::reap_elsewhere`]: its status is
    /// [`ExitStatus::Unknown`]).
    ChildExit {
        /// Its pid.
        pid: u32,
        /// How.
        status: ExitStatus,
        /// Whether the loop watched it (then it was reaped and reported).
        watched: bool,
    },
    /// The loop spawned a simulated child
    /// ([`Child::spawn`](crate::Child::spawn)), named after the command's
    /// program, and watches it.
    Spawn {
        /// Its pid.
        pid: u32,
        /// Its name.
        name: String,
    },
    /// The loop sent a signal to a watched child
    /// ([`Child::kill`](crate::Child::kill)); nothing else happens to the
    /// child unless the test makes it exit ([`Sim::exit`]).
    Kill {
        /// The child's pid.
        pid: u32,
        /// The signal.
        signal: i32,
    },
    /// A scheduled call ran ([`Sim::call_at`]).
    Call,
    /// A simulated file was written (created if new) with this size.
    WriteFile {
        /// The path.
        path: PathBuf,
        /// Its new size.
        size: u64,
    },
    /// A simulated file was renamed over another path.
    RenameFile {
        /// From.
        from: PathBuf,
        /// To (replaced if it existed).
        to: PathBuf,
    },
    /// A simulated file was removed.
    RemoveFile {
        /// The path.
        path: PathBuf,
    },
    /// The wall clock was stepped by this many nanoseconds (negative:
    /// back).
    WallStep {
        /// The step.
        by_ns: i128,
    },
    /// The loop's waker was used (an async send while it waited).
    Woken,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t={:?} ", self.at)?;
        match &self.kind {
            StepKind::Modify {
                fd,
                old,
                new,
                failed,
            } => {
                write!(f, "modify fd{fd} {old} => {new}")?;
                if *failed {
                    f.write_str(" failed")?;
                }
                Ok(())
            }
            StepKind::Poll(events) => {
                f.write_str("poll {")?;
                for (i, e) in events.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "fd{}:{}", e.fd, e.ready)?;
                }
                f.write_str("}")
            }
            StepKind::Dispatch { fd, ready } => write!(f, "dispatch fd{fd} {ready}"),
            StepKind::Idle { until } => write!(f, "idle until t={until:?}"),
            StepKind::Spurious => f.write_str("spurious wakeup"),
            StepKind::Stalled => f.write_str("stalled"),
            StepKind::Signal { signal, watched } => {
                write!(f, "signal {signal}")?;
                if !*watched {
                    f.write_str(" (not watched)")?;
                }
                Ok(())
            }
            StepKind::ChildExit {
                pid,
                status,
                watched,
            } => {
                write!(f, "child {pid} {status}")?;
                if !*watched {
                    f.write_str(" (not watched)")?;
                }
                Ok(())
            }
            StepKind::Spawn { pid, name } => write!(f, "spawn child {pid} ({name})"),
            StepKind::Kill { pid, signal } => write!(f, "signal {signal} to child {pid}"),
            StepKind::Call => f.write_str("call"),
            StepKind::WriteFile { path, size } => {
                write!(f, "write {} ({size} bytes)", path.display())
            }
            StepKind::RenameFile { from, to } => {
                write!(f, "rename {} -> {}", from.display(), to.display())
            }
            StepKind::RemoveFile { path } => write!(f, "remove {}", path.display()),
            StepKind::WallStep { by_ns } => {
                let (sign, by) = if *by_ns < 0 {
                    ("-", -by_ns)
                } else {
                    ("+", *by_ns)
                };
                write!(f, "wall clock {sign}{:?}", Duration::from_nanos(by as u64))
            }
            StepKind::Woken => f.write_str("woken"),
        }
    }
}

/// Something that names a simulated fd: a [`SimSocket`] or its number.
///
/// ```
/// use evloop::backends::sim::SimFd;
/// use evloop::Sim;
/// let sim = Sim::new();
/// let s = sim.socket("s", 0);
/// assert_eq!((s.sim_fd(), (&s).sim_fd(), 3.sim_fd()), (3, 3, 3));
/// sim.deliver(std::time::Duration::ZERO, 3, b"by number");
/// ```
pub trait SimFd {
    /// The virtual fd number.
    fn sim_fd(&self) -> RawFd;
}

impl SimFd for SimSocket {
    fn sim_fd(&self) -> RawFd {
        self.fd
    }
}

impl SimFd for RawFd {
    fn sim_fd(&self) -> RawFd {
        *self
    }
}

impl<T: SimFd + ?Sized> SimFd for &T {
    fn sim_fd(&self) -> RawFd {
        (**self).sim_fd()
    }
}

impl Sim {
    /// An empty world at virtual time zero.
    ///
    /// ```
    /// let sim = evloop::Sim::new();
    /// assert_eq!(sim.now(), std::time::Duration::ZERO);
    /// ```
    pub fn new() -> Sim {
        Sim::default()
    }

    /// The backend to hand to [`Loop::with_backend`](crate::Loop::with_backend).
    ///
    /// ```
    /// let sim = evloop::Sim::new();
    /// let lp: evloop::Loop = evloop::Loop::with_backend(sim.backend());
    /// assert_eq!(lp.backend_name(), "sim");
    /// ```
    pub fn backend(&self) -> SimBackend {
        SimBackend {
            world: self.world.clone(),
        }
    }

    /// A new non-blocking socket with an empty receive buffer and
    /// `send_capacity` bytes of room in its send buffer.
    ///
    /// ```
    /// let sim = evloop::Sim::new();
    /// let a = sim.socket("a", 16);
    /// let b = sim.socket("b", 16);
    /// assert_eq!((a.fd(), b.fd()), (3, 4));
    /// ```
    pub fn socket(&self, name: &str, send_capacity: usize) -> SimSocket {
        self.new_socket(name.to_string(), send_capacity, None)
    }

    /// A connected pair, like `socketpair(2)`: bytes written to one end
    /// arrive at once in the other's receive buffer. Each direction holds at
    /// most `buffer` unread bytes; reading frees the writer's capacity, and
    /// dropping one end hangs up the other. Dropping an end that still has
    /// unread bytes resets the connection, as kernels do: the other end is
    /// reported `READABLE | HUP | ERROR`, and once its buffered bytes are
    /// read, the next read fails with `ConnectionReset` (once), then reads
    /// return EOF.
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// let sim = evloop::Sim::new();
    /// let (mut a, mut b) = sim.pair("p", 4);
    /// assert_eq!(b.write(b"hello").unwrap(), 4);
    /// let mut buf = [0; 8];
    /// assert_eq!(a.read(&mut buf).unwrap(), 4);
    /// assert_eq!(sim.send_capacity(&b), 4);
    /// drop(b);
    /// assert_eq!(a.read(&mut buf).unwrap(), 0); // EOF
    /// ```
    pub fn pair(&self, name: &str, buffer: usize) -> (SimSocket, SimSocket) {
        let next = FIRST_FD + self.world.borrow().sockets.len() as RawFd;
        let a = self.new_socket(format!("{name}.0"), buffer, Some(next + 1));
        let b = self.new_socket(format!("{name}.1"), buffer, Some(next));
        (a, b)
    }

    fn new_socket(&self, name: String, send_capacity: usize, peer: Option<RawFd>) -> SimSocket {
        let mut w = self.world.borrow_mut();
        let fd = FIRST_FD + w.sockets.len() as RawFd;
        w.sockets.push(Socket {
            name,
            inbuf: VecDeque::new(),
            send_capacity,
            sent: Vec::new(),
            peer_closed: false,
            closed: false,
            invalid: false,
            peer,
            reset: false,
            reg_slot: NOT_REGISTERED,
        });
        SimSocket {
            world: self.world.clone(),
            fd,
        }
    }

    /// Schedules `bytes` to arrive in `fd`'s receive buffer at virtual time
    /// `at`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let sim = evloop::Sim::new();
    /// let s = sim.socket("s", 0);
    /// sim.deliver(Duration::from_millis(3), &s, b"abc");
    /// ```
    pub fn deliver(&self, at: Duration, fd: impl SimFd, bytes: &[u8]) {
        self.schedule(at, Action::Deliver(fd.sim_fd(), bytes.to_vec()));
    }

    /// Schedules the peer to consume `n` bytes at `at`, freeing that much
    /// send capacity.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let sim = evloop::Sim::new();
    /// let s = sim.socket("s", 0);
    /// sim.free_send(Duration::from_millis(1), &s, 100);
    /// ```
    pub fn free_send(&self, at: Duration, fd: impl SimFd, n: usize) {
        self.schedule(at, Action::FreeSend(fd.sim_fd(), n));
    }

    /// Schedules the peer to hang up at `at`: the fd turns readable with
    /// `HUP`, reads return EOF once the buffer is drained, writes fail with
    /// `BrokenPipe`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let sim = evloop::Sim::new();
    /// let s = sim.socket("s", 0);
    /// sim.close_peer(Duration::from_millis(9), &s);
    /// ```
    pub fn close_peer(&self, at: Duration, fd: impl SimFd) {
        self.schedule(at, Action::ClosePeer(fd.sim_fd()));
    }

    /// Fault: at `at` the fd becomes invalid while registered (as if closed
    /// behind the loop's back). Polls report it as [`Ready::INVALID`], and
    /// interest changes on it fail with `EBADF`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let sim = evloop::Sim::new();
    /// let s = sim.socket("s", 0);
    /// sim.invalidate(Duration::from_millis(2), &s);
    /// ```
    pub fn invalidate(&self, at: Duration, fd: impl SimFd) {
        self.schedule(at, Action::Invalidate(fd.sim_fd()));
    }

    /// Fault: at `at` the poll in progress returns early with no events, as
    /// an `EINTR` would.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let sim = evloop::Sim::new();
    /// sim.spurious_wakeup(Duration::from_millis(2));
    /// ```
    pub fn spurious_wakeup(&self, at: Duration) {
        self.schedule(at, Action::SpuriousWakeup);
    }

    /// Fault: the next interest change for `fd` fails (`EINVAL`) and leaves
    /// the registration as it was.
    ///
    /// ```
    /// let sim = evloop::Sim::new();
    /// let s = sim.socket("s", 0);
    /// sim.fail_next_modify(&s);
    /// ```
    pub fn fail_next_modify(&self, fd: impl SimFd) {
        *self
            .world
            .borrow_mut()
            .fail_modify
            .entry(fd.sim_fd())
            .or_default() += 1;
    }

    /// A signal arrives at `at`: the loop's watchers of it are invoked
    /// (an unwatched signal is recorded and ignored).
    ///
    /// ```
    /// use evloop::{Loop, RunMode, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// sim.raise(Duration::from_millis(1), libc::SIGHUP);
    /// let mut lp: Loop<u32> = Loop::with_backend(sim.backend());
    /// evloop::Signal::new(&mut lp, libc::SIGHUP, |lp, n, me| { *n += 1; lp.remove(me).unwrap(); }).unwrap();
    /// let mut n = 0;
    /// lp.run(RunMode::Default, &mut n).unwrap();
    /// assert_eq!(n, 1);
    /// assert!(sim.trace_lines().contains(&"t=1ms signal 1".to_string()));
    /// ```
    pub fn raise(&self, at: Duration, signal: i32) {
        self.schedule(at, Action::Raise(signal));
    }

    /// A new simulated child process (running until [`Sim::exit`]); its pid.
    ///
    /// ```
    /// let sim = evloop::Sim::new();
    /// let (a, b) = (sim.spawn("a"), sim.spawn("b"));
    /// assert_ne!(a, b);
    /// ```
    pub fn spawn(&self, name: &str) -> u32 {
        self.world.borrow_mut().spawn(name.to_string())
    }

    /// The simulated child `pid` exits at `at` with `status`: reaped and
    /// reported if watched then (by pid, or by a watcher of any child),
    /// else when a watcher starts. `pid` may be any number: one that
    /// [`Sim::spawn`] did not hand out is a child the program started some
    /// other way, which only a watcher of any child
    /// ([`Child::any`](crate::Child::any)) can see.
    ///
    /// ```
    /// use evloop::{Child, ExitStatus, Loop, RunMode, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let pid = sim.spawn("job");
    /// sim.exit(Duration::from_secs(1), pid, ExitStatus::Exited(2));
    /// sim.exit(Duration::from_secs(2), 4242, ExitStatus::Exited(0));
    /// let mut lp: Loop<Vec<u32>> = Loop::with_backend(sim.backend());
    /// Child::any(&mut lp, |lp, got, ev| {
    ///     got.push(ev.pid);
    ///     if got.len() == 2 {
    ///         lp.remove(ev.watcher).unwrap();
    ///     }
    /// }).unwrap();
    /// let mut got = vec![];
    /// lp.run(RunMode::Default, &mut got).unwrap();
    /// assert_eq!(got, [pid, 4242]);
    /// ```
    pub fn exit(&self, at: Duration, pid: u32, status: ExitStatus) {
        self.schedule(at, Action::Exit(pid, status));
    }

    /// The simulated child `pid` is reaped at `at` by someone other than
    /// the loop (as `std::process::Child::wait` or a `waitpid` of the
    /// program's would; it exits then if it has not yet): its status is
    /// gone. A watched child is reported with [`ExitStatus::Unknown`]; an
    /// unwatched one can no longer be watched.
    ///
    /// ```
    /// use evloop::{Child, ExitStatus, Loop, RunMode, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let pid = sim.spawn("job");
    /// sim.reap_elsewhere(Duration::from_secs(1), pid);
    /// let mut lp: Loop<Vec<Option<ExitStatus>>> = Loop::with_backend(sim.backend());
    /// Child::new(&mut lp, pid, |_, got, ev| got.push(ev.status)).unwrap();
    /// let mut got = vec![];
    /// lp.run(RunMode::Default, &mut got).unwrap(); // returns: the watcher is told
    /// assert_eq!(got, [Some(ExitStatus::Unknown)]);
    /// assert!(sim.trace_lines().contains(
    ///     &"t=1s child 1000 reaped elsewhere, exit status unknown".to_string()));
    /// assert!(Child::new(&mut lp, pid, |_, _, _| {}).is_err(), "reaped: not a child any more");
    /// ```
    pub fn reap_elsewhere(&self, at: Duration, pid: u32) {
        self.schedule(at, Action::ReapElsewhere(pid));
    }

    /// Runs `f` at virtual time `at`, while the loop waits: for example an
    /// [`AsyncSender::send`](crate::AsyncSender::send), as another thread
    /// would, but at a time the trace can show. `f` may use the `Sim`
    /// (deliver bytes, close or drop a socket), as a peer acting at that
    /// moment would.
    ///
    /// ```
    /// use evloop::{Async, Loop, RunMode, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    /// let (_, sender) = Async::new(&mut lp, |lp, log, me| {
    ///     log.push(format!("woken at {:?}", lp.now()));
    ///     lp.remove(me).unwrap();
    /// }).unwrap();
    /// sim.call_at(Duration::from_millis(7), move || sender.send().unwrap());
    /// let mut log = vec![];
    /// lp.run(RunMode::Default, &mut log).unwrap();
    /// assert_eq!(log, ["woken at 7ms"]);
    /// ```
    pub fn call_at(&self, at: Duration, f: impl FnOnce() + 'static) {
        self.schedule(at, Action::Call(Box::new(f)));
    }

    /// Sets the wall clock to read `t` now (it then advances with virtual
    /// time; by default it reads the epoch at virtual time zero).
    ///
    /// ```
    /// use evloop::Sim;
    /// use std::time::{Duration, SystemTime};
    /// let sim = Sim::new();
    /// sim.set_wall_clock(SystemTime::UNIX_EPOCH + Duration::from_secs(7));
    /// assert_eq!(sim.wall_clock(), SystemTime::UNIX_EPOCH + Duration::from_secs(7));
    /// ```
    pub fn set_wall_clock(&self, t: SystemTime) {
        let mut w = self.world.borrow_mut();
        let want = t
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as i128;
        w.wall_origin = want - w.now.as_nanos() as i128;
    }

    /// The wall clock now.
    ///
    /// ```
    /// let sim = evloop::Sim::new();
    /// assert_eq!(sim.wall_clock(), std::time::SystemTime::UNIX_EPOCH);
    /// ```
    pub fn wall_clock(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + self.world.borrow().wall_now()
    }

    /// The wall clock is stepped forward by `by` at virtual time `at` (the
    /// monotonic clock is not).
    ///
    /// ```
    /// use evloop::Sim;
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// sim.step_wall_clock_forward(Duration::from_secs(1), Duration::from_secs(3600));
    /// ```
    pub fn step_wall_clock_forward(&self, at: Duration, by: Duration) {
        self.schedule(at, Action::StepWall(by.as_nanos() as i128));
    }

    /// The wall clock is stepped back by `by` at virtual time `at`.
    ///
    /// ```
    /// use evloop::Sim;
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// sim.step_wall_clock_back(Duration::from_secs(1), Duration::from_secs(3600));
    /// ```
    pub fn step_wall_clock_back(&self, at: Duration, by: Duration) {
        self.schedule(at, Action::StepWall(-(by.as_nanos() as i128)));
    }

    /// Whether the simulated backend reports wall-clock steps (as a
    /// timerfd does on Linux; the default) or leaves the loop to notice
    /// them, as on systems without such a timer.
    ///
    /// ```
    /// let sim = evloop::Sim::new();
    /// sim.report_clock_steps(false);
    /// ```
    pub fn report_clock_steps(&self, on: bool) {
        self.world.borrow_mut().no_step_reports = !on;
    }

    /// At `at`, writes a simulated file of `size` bytes at `path` (creating
    /// it, or modifying it in place: same inode), stamped with the wall
    /// clock to the nanosecond.
    ///
    /// ```
    /// use evloop::Sim;
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// sim.write_file(Duration::from_millis(1), "/etc/app.conf", 100);
    /// ```
    pub fn write_file(&self, at: Duration, path: impl AsRef<Path>, size: u64) {
        self.schedule(at, Action::WriteFile(path.as_ref().to_path_buf(), size));
    }

    /// At `at`, renames the simulated file `from` over `to` (how editors
    /// save: `to` gets `from`'s inode).
    ///
    /// ```
    /// use evloop::Sim;
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// sim.write_file(Duration::ZERO, "/etc/app.conf.new", 100);
    /// sim.rename_file(Duration::from_millis(1), "/etc/app.conf.new", "/etc/app.conf");
    /// ```
    pub fn rename_file(&self, at: Duration, from: impl AsRef<Path>, to: impl AsRef<Path>) {
        let (from, to) = (from.as_ref().to_path_buf(), to.as_ref().to_path_buf());
        self.schedule(at, Action::RenameFile(from, to));
    }

    /// At `at`, removes the simulated file `path`.
    ///
    /// ```
    /// use evloop::Sim;
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// sim.remove_file(Duration::from_secs(1), "/tmp/lock");
    /// ```
    pub fn remove_file(&self, at: Duration, path: impl AsRef<Path>) {
        self.schedule(at, Action::RemoveFile(path.as_ref().to_path_buf()));
    }

    /// Whether the simulated backend hints at file changes (as inotify
    /// does; the default) or refuses, so that stat watchers poll.
    ///
    /// ```
    /// let sim = evloop::Sim::new();
    /// sim.path_hints(false);
    /// ```
    pub fn path_hints(&self, on: bool) {
        self.world.borrow_mut().no_path_hints = !on;
    }

    /// The signals the loop asked the simulator to watch.
    ///
    /// ```
    /// use evloop::{Loop, Sim};
    /// let sim = Sim::new();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let s = evloop::Signal::new(&mut lp, libc::SIGUSR1, |_, _, _| {}).unwrap();
    /// assert!(sim.watched_signals().contains(libc::SIGUSR1));
    /// lp.remove(s).unwrap();
    /// assert!(sim.watched_signals().is_empty());
    /// ```
    pub fn watched_signals(&self) -> SignalSet {
        self.world.borrow().watched_signals
    }

    /// The signals the loop sent to the simulated child `pid`
    /// ([`Child::kill`](crate::Child::kill)), in order. They do nothing to
    /// it: the test makes it exit ([`Sim::exit`]) as it would.
    ///
    /// ```
    /// use evloop::{Child, ExitStatus, Loop, RunMode, Signal, Sim};
    /// use std::process::Command;
    /// let sim = Sim::new();
    /// let mut lp: Loop<Option<ExitStatus>> = Loop::with_backend(sim.backend());
    /// let (job, spawned) = Child::spawn(&mut lp, &mut Command::new("worker"), |_, got, ev| *got = ev.status).unwrap();
    /// job.kill(&mut lp, Signal::TERM).unwrap();
    /// assert_eq!(sim.signals_sent(spawned.pid), [Signal::TERM]);
    /// // It dies of it, a millisecond later.
    /// let status = ExitStatus::Signaled { signal: Signal::TERM, core_dumped: false };
    /// sim.exit(std::time::Duration::from_millis(1), spawned.pid, status);
    /// let mut got = None;
    /// lp.run(RunMode::Default, &mut got).unwrap();
    /// assert_eq!(got, Some(status));
    /// assert_eq!(sim.trace_lines()[..2], [
    ///     "t=0ns spawn child 1000 (worker)".to_string(),
    ///     format!("t=0ns signal {} to child 1000", Signal::TERM),
    /// ]);
    /// ```
    pub fn signals_sent(&self, pid: u32) -> Vec<i32> {
        self.world
            .borrow()
            .children
            .get(&pid)
            .map(|c| c.signals.clone())
            .unwrap_or_default()
    }

    /// The name a simulated child was spawned with.
    ///
    /// ```
    /// let sim = evloop::Sim::new();
    /// let pid = sim.spawn("worker");
    /// assert_eq!(sim.child_name(pid).as_deref(), Some("worker"));
    /// ```
    pub fn child_name(&self, pid: u32) -> Option<String> {
        self.world
            .borrow()
            .children
            .get(&pid)
            .map(|c| c.name.clone())
    }

    fn schedule(&self, at: Duration, action: Action) {
        let mut w = self.world.borrow_mut();
        let seq = w.seq;
        w.seq += 1;
        w.schedule.push(Reverse(Scheduled { at, seq, action }));
    }

    /// The virtual time.
    ///
    /// ```
    /// assert_eq!(evloop::Sim::new().now(), std::time::Duration::ZERO);
    /// ```
    pub fn now(&self) -> Duration {
        self.world.borrow().now
    }

    /// The trace so far.
    ///
    /// ```
    /// assert!(evloop::Sim::new().trace().is_empty());
    /// ```
    pub fn trace(&self) -> Vec<Step> {
        self.world.borrow().trace.clone()
    }

    /// The trace so far, one line per step (what tests compare literally).
    ///
    /// ```
    /// assert!(evloop::Sim::new().trace_lines().is_empty());
    /// ```
    pub fn trace_lines(&self) -> Vec<String> {
        self.world
            .borrow()
            .trace
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    /// Forgets the trace so far.
    ///
    /// ```
    /// evloop::Sim::new().clear_trace();
    /// ```
    pub fn clear_trace(&self) {
        self.world.borrow_mut().trace.clear();
    }

    /// How many times the loop changed a registration (backend calls).
    ///
    /// ```
    /// assert_eq!(evloop::Sim::new().modify_count(), 0);
    /// ```
    pub fn modify_count(&self) -> u64 {
        self.world.borrow().modify_calls
    }

    /// How many times the loop polled.
    ///
    /// ```
    /// assert_eq!(evloop::Sim::new().poll_count(), 0);
    /// ```
    pub fn poll_count(&self) -> u64 {
        self.world.borrow().poll_calls
    }

    /// Everything written to `fd` so far (what the peer received or will);
    /// for a [`Sim::pair`] end the bytes go to the other end instead.
    ///
    /// ```
    /// use std::io::Write;
    /// let sim = evloop::Sim::new();
    /// let mut s = sim.socket("s", 4);
    /// assert_eq!(s.write(b"hello").unwrap(), 4);
    /// assert_eq!(sim.sent(&s), b"hell");
    /// ```
    pub fn sent(&self, fd: impl SimFd) -> Vec<u8> {
        self.with_socket(fd.sim_fd(), |s| s.sent.clone())
    }

    /// Bytes waiting in `fd`'s receive buffer.
    ///
    /// ```
    /// let sim = evloop::Sim::new();
    /// let s = sim.socket("s", 0);
    /// assert_eq!(sim.buffered(&s), 0);
    /// ```
    pub fn buffered(&self, fd: impl SimFd) -> usize {
        self.with_socket(fd.sim_fd(), |s| s.inbuf.len())
    }

    /// Room left in `fd`'s send buffer.
    ///
    /// ```
    /// let sim = evloop::Sim::new();
    /// let s = sim.socket("s", 10);
    /// assert_eq!(sim.send_capacity(&s), 10);
    /// ```
    pub fn send_capacity(&self, fd: impl SimFd) -> usize {
        self.with_socket(fd.sim_fd(), |s| s.send_capacity)
    }

    /// What the loop has registered for `fd` ([`Interest::NONE`] if nothing).
    ///
    /// ```
    /// let sim = evloop::Sim::new();
    /// let s = sim.socket("s", 0);
    /// assert_eq!(sim.registered(&s), evloop::Interest::NONE);
    /// ```
    pub fn registered(&self, fd: impl SimFd) -> Interest {
        let w = self.world.borrow();
        w.registration(fd.sim_fd()).unwrap_or(Interest::NONE)
    }

    fn with_socket<R>(&self, fd: RawFd, f: impl FnOnce(&Socket) -> R) -> R {
        let w = self.world.borrow();
        let s = w
            .socket(fd)
            .unwrap_or_else(|| panic!("fd{fd} is not a socket of this simulation"));
        f(s)
    }
}

impl fmt::Debug for Sim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.world.borrow();
        f.debug_struct("Sim")
            .field("now", &w.now)
            .field("sockets", &w.sockets.len())
            .field("scheduled", &w.schedule.len())
            .finish()
    }
}

impl World {
    fn socket(&self, fd: RawFd) -> Option<&Socket> {
        self.sockets.get(usize::try_from(fd - FIRST_FD).ok()?)
    }

    fn socket_mut(&mut self, fd: RawFd) -> Option<&mut Socket> {
        self.sockets.get_mut(usize::try_from(fd - FIRST_FD).ok()?)
    }

    fn step(&mut self, kind: StepKind) {
        self.trace.push(Step { at: self.now, kind });
    }

    /// A new simulated child: the next pid from [`FIRST_PID`] on that no
    /// child has (an exit scheduled for an arbitrary pid may have taken
    /// one).
    fn spawn(&mut self, name: String) -> u32 {
        let mut pid = FIRST_PID + self.spawned;
        while self.children.contains_key(&pid) {
            self.spawned += 1;
            pid = FIRST_PID + self.spawned;
        }
        self.spawned += 1;
        self.children.insert(pid, SimChild::new(name));
        pid
    }

    /// What `fd` is registered for, if it is.
    fn registration(&self, fd: RawFd) -> Option<Interest> {
        let slot = self.socket(fd)?.reg_slot;
        (slot != NOT_REGISTERED).then(|| self.registered[slot as usize].1)
    }

    /// Registers `fd` (a socket of this world) for `interest`: a new fd
    /// goes to the end of the registration order, a registered one keeps
    /// its place.
    fn register(&mut self, fd: RawFd, interest: Interest) {
        let next = u32::try_from(self.registered.len())
            .ok()
            .filter(|&n| n != NOT_REGISTERED)
            .expect("more than 2^32 registrations");
        let Some(s) = self.socket_mut(fd) else {
            unreachable!("registering fd{fd}, which is not a socket")
        };
        if s.reg_slot == NOT_REGISTERED {
            s.reg_slot = next;
            self.registered.push((fd, interest));
            self.registered_live += 1;
        } else {
            let slot = s.reg_slot as usize;
            self.registered[slot].1 = interest;
        }
    }

    /// Forgets `fd`'s registration, if it has one.
    fn unregister(&mut self, fd: RawFd) {
        let Some(s) = self.socket_mut(fd) else { return };
        let slot = std::mem::replace(&mut s.reg_slot, NOT_REGISTERED);
        if slot == NOT_REGISTERED {
            return;
        }
        self.registered[slot as usize] = (HOLE, Interest::NONE);
        self.registered_live -= 1;
        if self.registered.len() - self.registered_live > self.registered_live {
            self.compact_registered();
        }
    }

    /// Squeezes the holes out of the registration list, keeping its order.
    /// It runs once the holes outnumber the live entries, so its cost is
    /// covered by the forgets that made them: O(1) per forget, amortised.
    fn compact_registered(&mut self) {
        let mut list = std::mem::take(&mut self.registered);
        list.retain(|&(fd, _)| fd != HOLE);
        for (slot, &(fd, _)) in list.iter().enumerate() {
            if let Some(s) = self.socket_mut(fd) {
                // In range: the list was shorter before the squeeze.
                s.reg_slot = slot as u32;
            }
        }
        self.registered = list;
    }

    /// Applies the scheduled actions due by now, in (time, schedule) order,
    /// up to the first call ([`Sim::call_at`]), which it returns for the
    /// caller to run with the world released.
    #[must_use]
    fn apply_due(&mut self) -> Option<Box<dyn FnOnce()>> {
        while self.schedule.peek().is_some_and(|s| s.0.at <= self.now) {
            let Some(Reverse(due)) = self.schedule.pop() else {
                unreachable!("peeked above")
            };
            match due.action {
                Action::Deliver(fd, bytes) => {
                    if let Some(s) = self.socket_mut(fd) {
                        s.inbuf.extend(bytes);
                    }
                }
                Action::FreeSend(fd, n) => {
                    if let Some(s) = self.socket_mut(fd) {
                        s.send_capacity += n;
                    }
                }
                Action::ClosePeer(fd) => {
                    if let Some(s) = self.socket_mut(fd) {
                        s.peer_closed = true;
                    }
                }
                Action::Invalidate(fd) => {
                    if let Some(s) = self.socket_mut(fd) {
                        s.invalid = true;
                    }
                }
                Action::SpuriousWakeup => self.spurious = true,
                Action::Raise(signal) => {
                    let watched = self.watched_signals.contains(signal);
                    if watched {
                        self.arrived_signals.insert(signal);
                    }
                    self.step(StepKind::Signal { signal, watched });
                }
                Action::Exit(pid, status) => {
                    // A pid never spawned here: a child started some other
                    // way.
                    let child = self
                        .children
                        .entry(pid)
                        .or_insert_with(|| SimChild::new(format!("pid {pid}")));
                    child.exited = Some(status);
                    let watched = child.watched || (self.any_watched && !child.reaped);
                    if watched {
                        child.reaped = true;
                        child.watched = false;
                        self.exits.push(ChildExit { pid, status });
                    }
                    self.step(StepKind::ChildExit {
                        pid,
                        status,
                        watched,
                    });
                }
                Action::ReapElsewhere(pid) => {
                    let Some(child) = self.children.get_mut(&pid) else {
                        continue;
                    };
                    if child.reaped {
                        continue; // the loop's, already
                    }
                    let status = ExitStatus::Unknown;
                    child.exited = Some(status);
                    child.reaped = true;
                    let watched = std::mem::take(&mut child.watched);
                    if watched {
                        self.exits.push(ChildExit { pid, status });
                    }
                    self.step(StepKind::ChildExit {
                        pid,
                        status,
                        watched,
                    });
                }
                Action::Call(f) => {
                    self.step(StepKind::Call);
                    return Some(f);
                }
                Action::WriteFile(path, size) => {
                    let modified = self.wall_now().as_nanos() as u64;
                    let inode = match self.files.get(&path) {
                        Some(f) => f.inode,
                        None => {
                            self.next_inode += 1;
                            self.next_inode
                        }
                    };
                    self.files.insert(
                        path.clone(),
                        SimFile {
                            size,
                            modified,
                            inode,
                        },
                    );
                    self.hint_at(&path);
                    self.step(StepKind::WriteFile { path, size });
                }
                Action::RenameFile(from, to) => {
                    if let Some(f) = self.files.remove(&from) {
                        self.files.insert(to.clone(), f);
                    }
                    self.hint_at(&from);
                    self.hint_at(&to);
                    self.step(StepKind::RenameFile { from, to });
                }
                Action::RemoveFile(path) => {
                    self.files.remove(&path);
                    self.hint_at(&path);
                    self.step(StepKind::RemoveFile { path });
                }
                Action::StepWall(by_ns) => {
                    self.wall_origin += by_ns;
                    // Told only while watched: a step nobody asked
                    // about must not end every wait (the loop would not
                    // take the notice and poll again at once).
                    self.stepped_untold = self.watching_steps && !self.no_step_reports;
                    self.step(StepKind::WallStep { by_ns });
                }
            }
        }
        if self.woken.swap(false, AtomicOrdering::AcqRel) {
            self.woken_untold = true;
            self.step(StepKind::Woken);
        }
        None
    }

    /// Whether the loop has notices to take (which end a wait).
    fn has_notices(&self) -> bool {
        !self.arrived_signals.is_empty()
            || !self.exits.is_empty()
            || self.woken_untold
            || self.stepped_untold
            || !self.hinted.is_empty()
    }

    /// A change at `path`: hints at every watched path there or in the
    /// same directory (as an inotify watch on the file and its directory).
    fn hint_at(&mut self, path: &Path) {
        if self.no_path_hints {
            return;
        }
        let dir = path.parent();
        for (&token, watched) in &self.watched_paths {
            if watched == path || (dir.is_some() && watched.parent() == dir) {
                self.hinted.push(token);
            }
        }
    }

    fn wall_now(&self) -> Duration {
        let ns = self.wall_origin + self.now.as_nanos() as i128;
        Duration::from_nanos(ns.clamp(0, u64::MAX as i128) as u64)
    }

    fn next_scheduled(&self) -> Option<Duration> {
        self.schedule.peek().map(|s| s.0.at)
    }

    fn readiness(&self, fd: RawFd) -> Ready {
        let Some(s) = self.socket(fd) else {
            return Ready::INVALID;
        };
        if s.invalid || s.closed {
            return Ready::INVALID;
        }
        let mut r = Ready::EMPTY;
        if !s.inbuf.is_empty() || s.peer_closed {
            r |= Ready::READABLE;
        }
        if s.peer_closed {
            r |= Ready::HUP;
        }
        if s.reset {
            r |= Ready::ERROR;
        }
        if s.send_capacity > 0 {
            r |= Ready::WRITABLE;
        }
        r
    }

    fn collect(&self, out: &mut Vec<PollEvent>) {
        for &(fd, interest) in &self.registered {
            if fd == HOLE {
                continue;
            }
            let r = self.readiness(fd);
            let reported = r.filter(interest) | (r & Ready::INVALID);
            if !reported.is_empty() {
                out.push(PollEvent {
                    fd,
                    ready: reported,
                });
            }
        }
    }
}

/// The loop's view of a [`Sim`]: the [`Backend`] implementation.
///
/// ```
/// use evloop::backend::Backend;
/// use evloop::Sim;
/// let mut b = Sim::new().backend();
/// assert_eq!(b.name(), "sim");
/// assert!(b.capabilities().virtual_fds);
/// assert_eq!(b.now(), std::time::Duration::ZERO);
/// ```
pub struct SimBackend {
    world: Rc<RefCell<World>>,
}

impl SimBackend {
    /// Applies the actions due by now; each call ([`Sim::call_at`]) runs
    /// with the world released, so that it may use the `Sim` (deliver,
    /// close or drop a socket) as a peer would.
    fn run_due<'w>(&'w self, mut w: RefMut<'w, World>) -> RefMut<'w, World> {
        while let Some(call) = w.apply_due() {
            drop(w);
            call();
            w = self.world.borrow_mut();
        }
        w
    }
}

impl fmt::Debug for SimBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SimBackend")
    }
}

impl Backend for SimBackend {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            edge: false,
            oneshot: false,
            virtual_fds: true,
            max_fd: None,
            hangup: crate::backend::Hangup::Always,
            closed_fd: crate::backend::ClosedFd::AtNextWait,
            level: crate::backend::Level::Native,
            completion: false,
        }
    }

    #[cfg(unix)]
    fn pollable_fd(&self) -> io::Result<std::os::fd::BorrowedFd<'_>> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "its fds and its clock are virtual: no OS descriptor becomes readable when a \
             simulated socket is ready",
        ))
    }

    fn modify(&mut self, fd: RawFd, old: Interest, new: Interest) -> io::Result<()> {
        let mut w = self.world.borrow_mut();
        w.modify_calls += 1;
        let injected = match w.fail_modify.get_mut(&fd) {
            Some(left) => {
                *left -= 1;
                if *left == 0 {
                    w.fail_modify.remove(&fd);
                }
                true
            }
            None => false,
        };
        let invalid = w.socket(fd).is_none_or(|s| s.invalid || s.closed);
        let failed = injected || (invalid && new != Interest::NONE);
        w.step(StepKind::Modify {
            fd,
            old,
            new,
            failed,
        });
        if injected {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("injected fault: interest change for fd{fd} refused"),
            ));
        }
        if new == Interest::NONE {
            // Forgetting always succeeds in the table, as a close would.
            w.unregister(fd);
            return Ok(());
        }
        if invalid {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        }
        w.register(fd, new);
        Ok(())
    }

    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus> {
        let mut w = self.world.borrow_mut();
        w.poll_calls += 1;
        w = self.run_due(w);
        let deadline = timeout.map(|t| w.now + t);
        loop {
            if w.spurious {
                w.spurious = false;
                w.step(StepKind::Spurious);
                return Ok(PollStatus::Done);
            }
            w.collect(events);
            if !events.is_empty() || deadline == Some(w.now) || w.has_notices() {
                let step = StepKind::Poll(events.clone());
                w.step(step);
                return Ok(PollStatus::Done);
            }
            let until = match (w.next_scheduled(), deadline) {
                (Some(n), Some(d)) => n.min(d),
                (Some(n), None) => n,
                (None, Some(d)) => d,
                (None, None) => {
                    w.step(StepKind::Stalled);
                    return Ok(PollStatus::Stalled);
                }
            };
            w.step(StepKind::Idle { until });
            w.now = until;
            w = self.run_due(w);
        }
    }

    fn now(&mut self) -> Duration {
        self.world.borrow().now
    }

    fn notices(&mut self) -> Option<&mut dyn NoticeService> {
        Some(self)
    }
}

impl NoticeService for SimBackend {
    fn check_fd(&mut self, fd: RawFd) -> io::Result<()> {
        let w = self.world.borrow();
        match w.socket(fd) {
            Some(s) if !s.invalid && !s.closed => Ok(()),
            Some(_) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("simulated fd{fd} is closed or invalidated"),
            )),
            None => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("fd{fd} is not a socket of this simulator"),
            )),
        }
    }

    fn dispatched(&mut self, fd: RawFd, ready: Ready) {
        self.world
            .borrow_mut()
            .step(StepKind::Dispatch { fd, ready });
    }

    fn wants_dispatch(&mut self) -> bool {
        true
    }

    fn watch_signal(&mut self, signal: i32, _fds: &mut dyn InternalFds) -> io::Result<()> {
        self.world.borrow_mut().watched_signals.insert(signal);
        Ok(())
    }

    fn unwatch_signal(&mut self, signal: i32) {
        let mut w = self.world.borrow_mut();
        let mut still = SignalSet::EMPTY;
        for s in w.watched_signals.iter().filter(|&s| s != signal) {
            still.insert(s);
        }
        w.watched_signals = still;
    }

    fn watch_child(&mut self, pid: u32, _fds: &mut dyn InternalFds) -> io::Result<()> {
        let mut w = self.world.borrow_mut();
        let child = match w.children.get_mut(&pid) {
            Some(c) if !c.reaped => c,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("pid {pid} is not an unreaped child of this simulation"),
                ))
            }
        };
        match child.exited {
            // Exited before it was watched: reported at once.
            Some(status) => {
                child.reaped = true;
                w.exits.push(ChildExit { pid, status });
            }
            None => child.watched = true,
        }
        Ok(())
    }

    fn unwatch_child(&mut self, pid: u32, _fds: &mut dyn InternalFds) {
        if let Some(c) = self.world.borrow_mut().children.get_mut(&pid) {
            c.watched = false;
        }
    }

    fn watch_any_child(&mut self, _fds: &mut dyn InternalFds) -> io::Result<()> {
        let mut w = self.world.borrow_mut();
        w.any_watched = true;
        // Children that exited unwatched are reaped and reported at once,
        // in pid order.
        let mut exited: Vec<ChildExit> = w
            .children
            .iter_mut()
            .filter(|(_, c)| !c.reaped)
            .filter_map(|(&pid, c)| {
                let status = c.exited?;
                c.reaped = true;
                c.watched = false;
                Some(ChildExit { pid, status })
            })
            .collect();
        exited.sort_by_key(|e| e.pid);
        w.exits.append(&mut exited);
        Ok(())
    }

    fn unwatch_any_child(&mut self) {
        self.world.borrow_mut().any_watched = false;
    }

    fn signal_child(&mut self, pid: u32, signal: i32) -> io::Result<()> {
        let mut w = self.world.borrow_mut();
        match w.children.get_mut(&pid) {
            Some(c) if c.watched && !c.reaped => c.signals.push(signal),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("simulated child {pid} is not watched, or has been reaped"),
                ))
            }
        }
        w.step(StepKind::Kill { pid, signal });
        Ok(())
    }

    fn spawn_child(
        &mut self,
        command: &mut std::process::Command,
        _fds: &mut dyn InternalFds,
    ) -> io::Result<crate::Spawned> {
        let mut w = self.world.borrow_mut();
        let name = command.get_program().to_string_lossy().into_owned();
        let pid = w.spawn(name.clone());
        if let Some(c) = w.children.get_mut(&pid) {
            c.watched = true;
        }
        w.step(StepKind::Spawn { pid, name });
        Ok(crate::Spawned {
            pid,
            stdin: None,
            stdout: None,
            stderr: None,
        })
    }

    fn waker(&mut self, _fds: &mut dyn InternalFds) -> io::Result<Arc<dyn Wake>> {
        Ok(Arc::new(SimWaker(self.world.borrow().woken.clone())))
    }

    fn take_notices(&mut self, notices: &mut Notices, _fds: &mut dyn InternalFds) {
        let mut w = self.world.borrow_mut();
        notices.signals |= w.arrived_signals.take();
        notices.exits.append(&mut w.exits);
        notices.woken |= std::mem::take(&mut w.woken_untold);
        notices.clock_stepped |= std::mem::take(&mut w.stepped_untold);
        notices.paths.append(&mut w.hinted);
    }

    fn stat(&mut self, path: &Path) -> FileStat {
        match self.world.borrow().files.get(path) {
            Some(f) => FileStat {
                exists: true,
                size: f.size,
                modified: SystemTime::UNIX_EPOCH + Duration::from_nanos(f.modified),
                inode: f.inode,
                device: 1,
                links: 1,
                mode: 0o100644,
            },
            None => FileStat::MISSING,
        }
    }

    fn watch_path(
        &mut self,
        path: &Path,
        token: u64,
        _fds: &mut dyn InternalFds,
    ) -> io::Result<()> {
        let mut w = self.world.borrow_mut();
        if w.no_path_hints {
            return Err(crate::backend::unsupported(
                "sim",
                "path change hints (turned off)",
            ));
        }
        w.watched_paths.insert(token, path.to_path_buf());
        Ok(())
    }

    fn unwatch_path(&mut self, token: u64, _fds: &mut dyn InternalFds) {
        self.world.borrow_mut().watched_paths.remove(&token);
    }

    fn wall_now(&mut self) -> Duration {
        self.world.borrow().wall_now()
    }

    fn watch_clock_steps(&mut self, _fds: &mut dyn InternalFds) -> bool {
        let mut w = self.world.borrow_mut();
        w.watching_steps = !w.no_step_reports;
        w.watching_steps
    }

    fn unwatch_clock_steps(&mut self, _fds: &mut dyn InternalFds) {
        let mut w = self.world.borrow_mut();
        w.watching_steps = false;
        w.stepped_untold = false;
    }

    fn reinit(&mut self, _fds: &mut dyn InternalFds) -> io::Result<()> {
        // As after fork(): the backend forgets what it watched.
        let mut w = self.world.borrow_mut();
        w.watched_signals = SignalSet::EMPTY;
        w.arrived_signals = SignalSet::EMPTY;
        for c in w.children.values_mut() {
            c.watched = false;
        }
        w.any_watched = false;
        Ok(())
    }
}

/// The simulator's waker: a flag its next poll notices (any thread may set
/// it; the simulation itself never blocks).
struct SimWaker(Arc<AtomicBool>);

impl Wake for SimWaker {
    fn wake(&self) {
        self.0.store(true, AtomicOrdering::Release);
    }
}

/// A simulated non-blocking socket. Reads and writes follow the rules of a
/// real non-blocking socket (`WouldBlock`, partial writes, EOF after hangup),
/// so handler code can be written once for [`std::io::Read`]/[`Write`] and
/// run on real and simulated sockets alike.
///
/// ```
/// use std::io::{ErrorKind, Read, Write};
/// let sim = evloop::Sim::new();
/// let mut s = sim.socket("s", 3);
/// let mut buf = [0; 4];
/// assert_eq!(s.read(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
/// assert_eq!(s.write(b"hello").unwrap(), 3); // partial write
/// assert_eq!(s.write(b"lo").unwrap_err().kind(), ErrorKind::WouldBlock);
/// ```
pub struct SimSocket {
    world: Rc<RefCell<World>>,
    fd: RawFd,
}

impl SimSocket {
    /// The virtual fd number.
    ///
    /// ```
    /// assert_eq!(evloop::Sim::new().socket("s", 0).fd(), 3);
    /// ```
    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// The name given at creation.
    ///
    /// ```
    /// assert_eq!(evloop::Sim::new().socket("db", 0).name(), "db");
    /// ```
    pub fn name(&self) -> String {
        self.world
            .borrow()
            .socket(self.fd)
            .map(|s| s.name.clone())
            .unwrap_or_default()
    }

    fn do_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut w = self.world.borrow_mut();
        let s = w.socket_mut(self.fd).ok_or_else(ebadf)?;
        if s.invalid || s.closed {
            return Err(ebadf());
        }
        if s.inbuf.is_empty() {
            if s.reset {
                // Buffered bytes first, then the reset (once), then EOF.
                s.reset = false;
                return Err(io::ErrorKind::ConnectionReset.into());
            }
            return if s.peer_closed {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        }
        let n = buf.len().min(s.inbuf.len());
        for (dst, src) in buf.iter_mut().zip(s.inbuf.drain(..n)) {
            *dst = src;
        }
        if let Some(peer) = s.peer {
            if let Some(p) = w.socket_mut(peer) {
                p.send_capacity += n;
            }
        }
        Ok(n)
    }

    fn do_write(&self, buf: &[u8]) -> io::Result<usize> {
        let mut w = self.world.borrow_mut();
        let s = w.socket_mut(self.fd).ok_or_else(ebadf)?;
        if s.invalid || s.closed {
            return Err(ebadf());
        }
        if s.peer_closed {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        if buf.is_empty() {
            return Ok(0);
        }
        if s.send_capacity == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = buf.len().min(s.send_capacity);
        s.send_capacity -= n;
        match s.peer {
            Some(peer) => {
                if let Some(p) = w.socket_mut(peer) {
                    p.inbuf.extend(&buf[..n]);
                }
            }
            None => s.sent.extend_from_slice(&buf[..n]),
        }
        Ok(n)
    }
}

fn ebadf() -> io::Error {
    io::Error::from_raw_os_error(libc::EBADF)
}

impl fmt::Debug for SimSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimSocket(fd{})", self.fd)
    }
}

impl Source for SimSocket {
    fn source_fd(&self) -> SourceFd<'_> {
        SourceFd::Virtual(VirtualFd::new(self.fd))
    }
}

impl Read for SimSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.do_read(buf)
    }
}

impl Read for &SimSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.do_read(buf)
    }
}

impl Write for SimSocket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.do_write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for &SimSocket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.do_write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for SimSocket {
    /// Closing: the fd is no longer usable (like `close(2)`).
    fn drop(&mut self) {
        if let Ok(mut w) = self.world.try_borrow_mut() {
            let (peer, unread) = match w.socket_mut(self.fd) {
                Some(s) => {
                    s.closed = true;
                    (s.peer, !s.inbuf.is_empty())
                }
                None => (None, false),
            };
            if let Some(p) = peer.and_then(|p| w.socket_mut(p)) {
                p.peer_closed = true;
                // Closing with unread data resets the connection, as TCP
                // and Unix stream sockets do.
                if unread {
                    p.reset = true;
                }
            }
        }
    }
}
