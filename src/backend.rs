//! Backend plumbing: the [`Backend`] trait, what the loop needs from an I/O
//! multiplexer, and the types its methods take and return.
//!
//! A backend knows nothing of watchers, callbacks or timers. The loop tells
//! it, per fd, the old and new union of interests ([`Backend::modify`]) at
//! most once per fd per iteration, asks it to wait ([`Backend::poll`]) and
//! reads the clock through it ([`Backend::now`]), so that a simulated backend
//! can run the loop on virtual time. Signals, child exits, cross-thread
//! wake-ups, clock steps and path hints are OS services
//! ([`NoticeService`]) that the loop composes with any backend: on Unix
//! the loop's own notifier, whose internal fds it registers through
//! `modify` like any other; where the platform needs the backend itself
//! (Windows, kqueue) or the services are fake (the simulator), the
//! backend's own ([`Backend::notices`]). The loop itself makes no system
//! call.
//! `docs/porting.md` walks through writing one.
//!
//! A user of the watcher API needs this module only to write a backend or
//! to drive one directly. The four types here that watcher users hold are
//! re-exported at the crate root: [`Capabilities`] (what
//! [`Loop::capabilities`](crate::Loop::capabilities) returns),
//! [`ExitStatus`] (in a [`ChildEvent`](crate::ChildEvent)), [`FileStat`]
//! (in a [`StatEvent`](crate::StatEvent)) and [`Spawned`] (what
//! [`Child::spawn`](crate::Child::spawn) returns). The crate's backends are
//! in [`backends`](crate::backends), with the helpers a Unix backend needs
//! in [`backends::util`](crate::backends::util).

use crate::RawFd;
use std::io;
use std::path::Path;
use std::process::{ChildStderr, ChildStdin, ChildStdout, Command};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::{Interest, Ready};

/// One readiness report from [`Backend::poll`].
///
/// ```
/// use evloop::backend::PollEvent;
/// use evloop::Ready;
/// let ev = PollEvent { fd: 7, ready: Ready::READABLE | Ready::HUP };
/// assert!(ev.ready.is_hup());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollEvent {
    /// The descriptor number (virtual for simulated backends).
    pub fd: RawFd,
    /// What is ready. [`Ready::INVALID`] tells the loop the fd is gone.
    pub ready: Ready,
}

/// One change of registration, as [`Backend::modify`] takes it: what
/// [`Backend::modify_all`] makes a slice of.
///
/// ```
/// use evloop::backend::Change;
/// use evloop::Interest;
/// let c = Change { fd: 7, old: Interest::NONE, new: Interest::READABLE };
/// assert_ne!(c.old, c.new);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// The descriptor number.
    pub fd: RawFd,
    /// What the backend was last told for it.
    pub old: Interest,
    /// What it is to watch now.
    pub new: Interest,
}

/// What a backend can do, and how it reports what it cannot avoid
/// reporting differently. The loop reads it once, when it is created, and
/// uses `edge`, `oneshot`, `virtual_fds` and `max_fd` (it refuses what the
/// backend cannot do, and emulates one-shot); `level`, `hangup` and
/// `closed_fd` are declarations, which the conformance kit (feature
/// `conformance`) holds the backend to. Build it from the default, which
/// is a level-triggered backend of the `poll(2)` kind, so that a field
/// added later keeps its default:
///
/// ```
/// use evloop::backend::{Capabilities, ClosedFd, Hangup, Level};
/// let caps = Capabilities::default();
/// assert!(!caps.edge && !caps.oneshot && caps.max_fd.is_none());
/// assert_eq!((caps.hangup, caps.closed_fd), (Hangup::Always, ClosedFd::AtNextWait));
/// assert_eq!(caps.level, Level::Native);
///
/// // An io_uring readiness backend without multishot polls: native one-shot,
/// // no edge; readiness as of the wake-up; a closed fd noticed when its
/// // poll is next armed.
/// let uring = Capabilities {
///     oneshot: true,
///     hangup: Hangup::AsOfWakeup,
///     closed_fd: ClosedFd::InvalidAfterChange,
///     ..Capabilities::default()
/// };
/// assert!(uring.oneshot && !uring.edge);
///
/// // An edge-only mechanism (mio): edge native, one-shot left to the
/// // loop, level emulated by re-arming each reported fd.
/// let mio = Capabilities {
///     edge: true,
///     level: Level::Rearmed,
///     closed_fd: ClosedFd::ModifyFails,
///     ..Capabilities::default()
/// };
/// assert!(mio.edge && !mio.oneshot);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Edge-triggered registrations are supported
    /// ([`Trigger::Edge`](crate::Trigger::Edge)). When false the loop
    /// refuses edge watchers ([`Error::UnsupportedTrigger`](crate::Error::UnsupportedTrigger)).
    pub edge: bool,
    /// One-shot registrations are native (the kernel disarms the fd after one
    /// report). When false the loop emulates one-shot itself. Independent
    /// of `edge`: a backend may have either without the other.
    pub oneshot: bool,
    /// The backend watches virtual fds ([`SourceFd::Virtual`](crate::SourceFd))
    /// instead of OS descriptors.
    pub virtual_fds: bool,
    /// The largest fd the backend can watch, if bounded (select's
    /// `FD_SETSIZE - 1`).
    pub max_fd: Option<RawFd>,
    /// How a hang-up (the peer closed, the pipe's other end is gone) is
    /// reported.
    pub hangup: Hangup,
    /// When an fd closed behind the loop's back is noticed.
    pub closed_fd: ClosedFd,
    /// How level-triggered interest ([`Trigger::Level`](crate::Trigger::Level),
    /// every watcher's default) is provided: by the mechanism itself, or by
    /// re-arming an edge-only one. Either way level watchers behave alike;
    /// this says what it costs.
    pub level: Level,
    /// The backend offers completion I/O ([`Backend::completion_io`]):
    /// `evloop::net`'s sockets are then read, written and accepted by the
    /// kernel ahead of the loop (the io_uring backend, where the kernel
    /// has what it needs: Linux 6.0). A replay reports `false`: it replays
    /// what the sockets did, whichever path they took.
    pub completion: bool,
}

/// How a backend provides level-triggered interest ([`Capabilities::level`]).
/// The loop asks the same of both: a level registration is reported on
/// every wait while its condition holds, and a full socket is never
/// reported writable. The declaration says how, so that the cost is known
/// (and the conformance kit's `level` scenario says what to look at when
/// a re-arming backend fails it).
///
/// ```
/// use evloop::backend::Level;
/// use evloop::backends;
/// // The crate's backends are all level-triggered natively.
/// for name in backends::AVAILABLE {
///     assert_eq!(backends::open(name)?.capabilities().level, Level::Native);
/// }
/// # Ok::<(), evloop::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Level {
    /// The mechanism is level-triggered by nature, or offers it (`poll`,
    /// `select`, epoll without `EPOLLET`, kqueue without `EV_CLEAR`, a
    /// poll request issued again by each wait).
    #[default]
    Native,
    /// The mechanism is edge-triggered only (mio, an `EPOLLET`-only or
    /// `EV_CLEAR`-only design): the backend re-arms each fd that it reported
    /// with level interest before its next wait, and the kernel then checks
    /// the fd's readiness again and reports it if it still holds
    /// (`EPOLL_CTL_MOD` does, as does an `EV_ADD` of a registered filter).
    /// Costs one re-arm syscall per reported level fd per wait; an fd that
    /// was not reported costs nothing. `docs/porting.md`, "Edge-only
    /// mechanisms", has the rules.
    Rearmed,
}

/// How a backend reports a hang-up ([`Capabilities::hangup`]). Whatever it
/// says, a watcher that reads gets [`Ready::READABLE`] with the hang-up,
/// reads, and sees EOF.
///
/// ```
/// use evloop::backend::Hangup;
/// use evloop::backends;
/// # #[cfg(target_os = "linux")]
/// assert_eq!(backends::open("epoll")?.capabilities().hangup, Hangup::Always);
/// assert_eq!(backends::open("select")?.capabilities().hangup, Hangup::Never);
/// # Ok::<(), evloop::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Hangup {
    /// As [`Ready::HUP`] (with `READABLE`) whenever the peer is gone at the
    /// time of the report; with [`Ready::ERROR`] too for a reset
    /// (epoll, poll, kqueue, the simulator).
    #[default]
    Always,
    /// Never: the mechanism has no such bit, and a hang-up or a pending
    /// error shows as plain readiness (select).
    Never,
    /// As of the moment the kernel found the fd ready: a report carries
    /// what was true then, so data then a close before the wait gives
    /// [`Ready::READABLE`] without `HUP` (the reads still see the data,
    /// then EOF); a peer already gone when the fd was armed gives `HUP`
    /// (an io_uring poll, completed at the first readiness).
    AsOfWakeup,
}

/// When a backend notices that an fd was closed behind the loop's back
/// ([`Capabilities::closed_fd`]). In every case the loop then gives the
/// fd's watchers [`Ready::ERROR`] and stops them (libev's `fd_kill`), and
/// in none may the backend spin or fail the whole wait for it.
///
/// ```
/// use evloop::backend::ClosedFd;
/// use evloop::backends;
/// # #[cfg(target_os = "linux")]
/// assert_eq!(backends::open("epoll")?.capabilities().closed_fd, ClosedFd::ModifyFails);
/// assert_eq!(backends::open("poll")?.capabilities().closed_fd, ClosedFd::AtNextWait);
/// # Ok::<(), evloop::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ClosedFd {
    /// The next wait reports it as [`Ready::INVALID`] (poll's `POLLNVAL`;
    /// select's `EBADF`, then a check of each fd; the simulator).
    #[default]
    AtNextWait,
    /// Silently dropped by the kernel with the file (no event, no spin);
    /// the next [`Backend::modify`] of the fd fails (epoll's `EBADF` from
    /// `EPOLL_CTL_MOD`).
    ModifyFails,
    /// Silent until the fd's registration next reaches the kernel (the
    /// loop's next change of its interest, or a re-arm); the wait that
    /// carries it reports the fd as [`Ready::INVALID`], while `modify`
    /// itself succeeds (kqueue's changelist, applied by the next `kevent`;
    /// an io_uring poll submitted again).
    InvalidAfterChange,
}

/// How a call to [`Backend::poll`] ended.
///
/// ```
/// use evloop::backend::{Backend, PollStatus};
/// use evloop::Sim;
/// // A simulator with nothing scheduled and no timeout can never wake up.
/// let mut b = Sim::new().backend();
/// assert_eq!(b.poll(None, &mut Vec::new()).unwrap(), PollStatus::Stalled);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollStatus {
    /// Events (possibly none) were collected, or the timeout elapsed.
    Done,
    /// Nothing can ever become ready and no timeout was given: waiting would
    /// block forever. Only a simulated backend can know this; the loop stops
    /// and returns [`RunOutcome::Stalled`](crate::RunOutcome::Stalled).
    Stalled,
}

/// How a child process ended, as its watcher receives it.
///
/// ```
/// use evloop::ExitStatus;
/// let ok = ExitStatus::Exited(0);
/// assert!(ok.success());
/// let killed = ExitStatus::Signaled { signal: libc::SIGKILL, core_dumped: false };
/// assert!(!killed.success());
/// assert_eq!(killed.to_string(), "killed by signal 9");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExitStatus {
    /// It called `exit` (or returned from `main`) with this code.
    Exited(i32),
    /// A signal ended it.
    Signaled {
        /// The signal's number.
        signal: i32,
        /// Whether it dumped core.
        core_dumped: bool,
    },
    /// It has exited, but someone else reaped it first, so its status is
    /// gone: known only to whoever reaped it (`std::process::Child::wait`
    /// or `try_wait`, a `waitpid` of the program's, or the kernel itself
    /// when `SIGCHLD` is ignored). The watcher is told so rather than left
    /// waiting for an exit that can no longer be read. (Loops of one
    /// process never take a status from each other: every loop watching a
    /// child gets the real one.)
    ///
    /// ```
    /// use evloop::{Child, ExitStatus, Loop, RunMode};
    /// use std::process::{Command, Stdio};
    /// // A child that exits when its stdin closes.
    /// let mut job = Command::new("sh").args(["-c", "read _; exit 3"])
    ///     .stdin(Stdio::piped()).spawn()?;
    /// let mut lp: Loop<Option<ExitStatus>> = Loop::new()?;
    /// Child::new(&mut lp, job.id(), |_, got, ev| *got = ev.status)?;
    /// drop(job.stdin.take());
    /// // Reaped here, not by the loop: the status is std's.
    /// assert_eq!(job.wait()?.code(), Some(3));
    /// let mut got = None;
    /// lp.run(RunMode::Default, &mut got)?; // returns: the watcher was told
    /// assert_eq!(got, Some(ExitStatus::Unknown));
    /// assert!(!ExitStatus::Unknown.success());
    /// assert_eq!(ExitStatus::Unknown.to_string(), "reaped elsewhere, exit status unknown");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    Unknown,
}

impl ExitStatus {
    /// Whether it exited with code 0 (false for
    /// [`Unknown`](ExitStatus::Unknown): nobody here knows).
    pub fn success(self) -> bool {
        self == ExitStatus::Exited(0)
    }
}

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitStatus::Exited(code) => write!(f, "exited with code {code}"),
            ExitStatus::Signaled {
                signal,
                core_dumped,
            } => {
                write!(f, "killed by signal {signal}")?;
                if *core_dumped {
                    f.write_str(" (core dumped)")?;
                }
                Ok(())
            }
            ExitStatus::Unknown => f.write_str("reaped elsewhere, exit status unknown"),
        }
    }
}

/// A watched child that exited, as a backend reports it.
///
/// ```
/// use evloop::backend::ChildExit;
/// use evloop::ExitStatus;
/// let e = ChildExit { pid: 4242, status: ExitStatus::Exited(3) };
/// assert_eq!(e.status, ExitStatus::Exited(3));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChildExit {
    /// The child's process id.
    pub pid: u32,
    /// How it ended.
    pub status: ExitStatus,
}

/// A child process that [`NoticeService::spawn_child`] started and watches (and
/// [`Child::spawn`](crate::Child::spawn) hands back with its watcher): its
/// pid and the pipes to it that the `Command` asked for
/// ([`Stdio::piped`](std::process::Stdio::piped)). There is deliberately
/// no `std::process::Child` here: its `wait` would take the status from
/// the loop (or fail with `ECHILD` once the loop has it).
///
/// ```
/// use evloop::{Child, Loop, Spawned};
/// use std::process::{Command, Stdio};
/// let mut lp: Loop = Loop::new()?;
/// let mut cmd = Command::new("true");
/// let (_w, s): (_, Spawned) = Child::spawn(&mut lp, cmd.stdout(Stdio::piped()), |_, _, _| {})?;
/// assert!(s.pid > 0 && s.stdout.is_some() && s.stdin.is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Spawned {
    /// The child's process id.
    pub pid: u32,
    /// The write end of its standard input, if piped.
    pub stdin: Option<ChildStdin>,
    /// The read end of its standard output, if piped.
    pub stdout: Option<ChildStdout>,
    /// The read end of its standard error, if piped.
    pub stderr: Option<ChildStderr>,
}

impl Spawned {
    /// Takes the pid and the pipes of a child that `std` started, and
    /// drops the `std::process::Child` (which neither waits for nor kills
    /// the process): for a [`NoticeService::spawn_child`] of another crate.
    ///
    /// ```
    /// use std::process::{Command, Stdio};
    /// let child = Command::new("true").stdin(Stdio::piped()).spawn()?;
    /// let pid = child.id();
    /// let s = evloop::Spawned::from_std(child);
    /// assert_eq!(s.pid, pid);
    /// assert!(s.stdin.is_some());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn from_std(mut child: std::process::Child) -> Spawned {
        Spawned {
            pid: child.id(),
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
        }
    }
}

/// A set of signal numbers, 1 to 64 (bit `n - 1` for signal `n`).
///
/// ```
/// use evloop::backend::SignalSet;
/// let mut s = SignalSet::EMPTY;
/// assert!(s.insert(libc::SIGINT) && s.insert(libc::SIGTERM));
/// assert!(!s.insert(0) && !s.insert(65));
/// assert!(s.contains(libc::SIGINT));
/// assert_eq!(s.iter().collect::<Vec<_>>(), [libc::SIGINT, libc::SIGTERM]);
/// assert_eq!(s.take(), SignalSet::from_bits((1 << 1) | (1 << 14)));
/// assert!(s.is_empty());
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SignalSet(u64);

impl SignalSet {
    /// No signal.
    pub const EMPTY: SignalSet = SignalSet(0);

    /// The set with these bits (bit `n - 1` for signal `n`).
    pub const fn from_bits(bits: u64) -> SignalSet {
        SignalSet(bits)
    }

    /// The bits (bit `n - 1` for signal `n`).
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// Adds `signal`; false if it is outside 1..=64.
    pub fn insert(&mut self, signal: i32) -> bool {
        match Self::bit(signal) {
            Some(bit) => {
                self.0 |= bit;
                true
            }
            None => false,
        }
    }

    /// Whether `signal` is in the set.
    pub fn contains(self, signal: i32) -> bool {
        Self::bit(signal).is_some_and(|bit| self.0 & bit != 0)
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Empties the set, returning what it held.
    pub fn take(&mut self) -> SignalSet {
        std::mem::take(self)
    }

    /// The signals in the set, lowest first.
    pub fn iter(self) -> impl Iterator<Item = i32> {
        (1..=64).filter(move |&s| self.contains(s))
    }

    fn bit(signal: i32) -> Option<u64> {
        (1..=64).contains(&signal).then(|| 1u64 << (signal - 1))
    }
}

impl std::ops::BitOrAssign for SignalSet {
    fn bitor_assign(&mut self, rhs: SignalSet) {
        self.0 |= rhs.0;
    }
}

impl std::fmt::Debug for SignalSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// What a backend noticed besides fd readiness, handed to the loop by
/// [`NoticeService::take_notices`] after each poll: signals that arrived,
/// watched children that exited, and whether its [`NoticeService::waker`] was
/// used. The loop keeps one and clears it after use, so that steady state
/// allocates nothing.
///
/// ```
/// use evloop::backend::{ChildExit, Notices};
/// use evloop::ExitStatus;
/// let mut n = Notices::default();
/// n.signals.insert(libc::SIGTERM);
/// n.exits.push(ChildExit { pid: 7, status: ExitStatus::Exited(0) });
/// n.woken = true;
/// assert!(!n.is_empty());
/// n.clear();
/// assert!(n.is_empty());
/// ```
#[derive(Default, Debug)]
pub struct Notices {
    /// Signals that arrived (each once, however many times it arrived).
    pub signals: SignalSet,
    /// Watched children that exited (each reported once, then forgotten),
    /// and every other child that exited while the backend watches any
    /// child ([`NoticeService::watch_any_child`]).
    pub exits: Vec<ChildExit>,
    /// Whether the backend's waker was used.
    pub woken: bool,
    /// Whether the wall clock was stepped (set, not slewed) since the
    /// last take: only from a backend that said it reports steps
    /// ([`NoticeService::watch_clock_steps`]).
    pub clock_stepped: bool,
    /// The tokens of watched paths ([`NoticeService::watch_path`]) that may have
    /// changed: a hint to look at them now.
    pub paths: Vec<u64>,
}

impl Notices {
    /// Whether nothing was noticed.
    pub fn is_empty(&self) -> bool {
        self.signals.is_empty()
            && self.exits.is_empty()
            && !self.woken
            && !self.clock_stepped
            && self.paths.is_empty()
    }

    /// Forgets everything (keeping the allocation).
    pub fn clear(&mut self) {
        self.signals = SignalSet::EMPTY;
        self.exits.clear();
        self.woken = false;
        self.clock_stepped = false;
        self.paths.clear();
    }
}

/// A file's attributes, as a stat watcher sees them
/// ([`Stat::new`](crate::Stat::new)). A missing (or unreadable) file is
/// a state like any other: `exists` is false, the link count 0, the rest
/// zero, so that creation and deletion are changes.
///
/// ```
/// use evloop::FileStat;
/// let gone = FileStat::MISSING;
/// assert!(!gone.exists && gone.links == 0);
/// let here = FileStat { exists: true, size: 3, links: 1, ..FileStat::MISSING };
/// assert_ne!(gone, here);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileStat {
    /// Whether the path names a file (following symbolic links).
    pub exists: bool,
    /// Size in bytes.
    pub size: u64,
    /// Last modification, with nanoseconds (the epoch when missing).
    pub modified: SystemTime,
    /// Inode number: a file saved by renaming a new one over it has a new
    /// one.
    pub inode: u64,
    /// Device number.
    pub device: u64,
    /// Hard link count (0 when missing).
    pub links: u64,
    /// Type and permission bits (`st_mode`; on Windows, the file
    /// attributes).
    pub mode: u32,
}

impl FileStat {
    /// A path that names no file.
    pub const MISSING: FileStat = FileStat {
        exists: false,
        size: 0,
        modified: SystemTime::UNIX_EPOCH,
        inode: 0,
        device: 0,
        links: 0,
        mode: 0,
    };

    /// The attributes of `path` through the standard library (following
    /// symbolic links): what the OS backends use.
    ///
    /// ```
    /// use evloop::FileStat;
    /// assert!(FileStat::of(std::path::Path::new("Cargo.toml")).exists);
    /// assert_eq!(FileStat::of(std::path::Path::new("/no/such/file")), FileStat::MISSING);
    /// ```
    pub fn of(path: &Path) -> FileStat {
        let Ok(m) = std::fs::metadata(path) else {
            return FileStat::MISSING;
        };
        let modified = m.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            FileStat {
                exists: true,
                size: m.size(),
                modified,
                inode: m.ino(),
                device: m.dev(),
                links: m.nlink(),
                mode: m.mode(),
            }
        }
        // Windows: the file index and volume serial are not in stable
        // std, so a file renamed over another is seen by its size and
        // time; `mode` holds the file attributes.
        #[cfg(windows)]
        {
            use std::os::windows::fs::MetadataExt;
            FileStat {
                exists: true,
                size: m.file_size(),
                modified,
                inode: 0,
                device: 0,
                links: 1,
                mode: m.file_attributes(),
            }
        }
        // WASI: std's inode and device numbers there are unstable, so a
        // file is seen by its size and time (as on Windows); WASI has no
        // permission bits (`mode` 0).
        #[cfg(target_os = "wasi")]
        {
            FileStat {
                exists: true,
                size: m.len(),
                modified,
                inode: 0,
                device: 0,
                links: 1,
                mode: 0,
            }
        }
    }
}

/// Ends a backend's wait from any thread: what an async watcher's sender
/// uses ([`NoticeService::waker`]).
///
/// ```
/// use evloop::backend::Wake;
/// use std::sync::atomic::{AtomicBool, Ordering};
/// struct Flag(AtomicBool);
/// impl Wake for Flag {
///     fn wake(&self) { self.0.store(true, Ordering::Release) }
/// }
/// let f = Flag(AtomicBool::new(false));
/// f.wake();
/// assert!(f.0.load(Ordering::Acquire));
/// ```
pub trait Wake: Send + Sync {
    /// Makes the backend's current poll return soon, or its next one not
    /// block, and report [`Notices::woken`]. Safe to call from any thread,
    /// at any time, any number of times, even after the backend is gone
    /// (then it does nothing harmful).
    fn wake(&self);
}

/// The error of a [`Backend`] hook that it does not provide (what the
/// defaults return).
///
/// ```
/// let err = evloop::backend::unsupported("clockwork", "signal watching");
/// assert_eq!(err.kind(), std::io::ErrorKind::Unsupported);
/// assert!(err.to_string().contains("clockwork"));
/// ```
pub fn unsupported(backend: &str, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("the {backend} backend does not provide {what}"),
    )
}

/// An I/O readiness multiplexer the loop runs on.
///
/// The crate's implementations are in [`backends`](crate::backends)
/// (epoll, poll, select, kqueue, io_uring, and the simulator); a crate may
/// define its own, with this module's types, and hand it to
/// [`Loop::with_backend`](crate::Loop::with_backend) (or name it with
/// [`Builder::register`](crate::Builder::register)).
///
/// Contract:
/// - `modify(fd, old, new)` is called only when `old != new`. `old` is what
///   the backend was last told for that fd ([`Interest::NONE`] for a new fd),
///   `new` is the union of the interests of the fd's active watchers
///   ([`Interest::NONE`] to forget the fd). An `Err` means the fd cannot be
///   watched; the loop stops its watchers and reports [`Ready::ERROR`] to
///   them, and considers the fd unregistered.
/// - `poll` appends to `events` (the loop clears it first) and waits at most
///   `timeout` (`None`: until something happens). Timeouts are rounded up,
///   never down. An interrupted wait (`EINTR`) is retried with the remaining
///   time: it is never an error, and never a return with no events before
///   the timeout. Each fd appears at most once per call, with everything
///   that is ready on it (the loop may invoke a watcher once per report).
/// - Level registrations (the default trigger) are reported on every poll
///   while their condition holds; a backend over an edge-only mechanism
///   provides that by re-arming each reported fd before its next wait, and
///   declares [`Level::Rearmed`].
/// - One-shot: when [`Capabilities::oneshot`] is false the loop emulates it
///   and the backend only ever sees level registrations. When it is true,
///   the backend receives interests whose [`Interest::trigger`] is
///   `Oneshot`; after an event on such an fd the loop records the fd as
///   `Interest::NONE.with_trigger(Trigger::Oneshot)` (still known to the
///   kernel, but disarmed), and that is the `old` of the next `modify`: the
///   backend must then re-arm (`EPOLL_CTL_MOD`) or forget (`DEL`), not add.
///   The loop makes that `modify` before it polls again, and a backend may
///   rely on it (epoll's table learns of the disarm then).
/// - Edge registrations arrive only if [`Capabilities::edge`] is true.
/// - `now` is monotonic.
/// - The loop's own internal fds (its Unix notifier's wake fd, pidfds,
///   timerfd and inotify instance) come through `modify` and `poll` like
///   any other fd, readable and level-triggered: a backend never tells
///   them apart.
///
/// [`Interest::trigger`]: crate::Interest::trigger
///
/// ```
/// use evloop::backend::{Backend, Capabilities, PollEvent, PollStatus};
/// use evloop::Interest;
/// use std::{io, os::fd::RawFd, time::Duration};
///
/// /// A backend with no fds: it only lets time pass (virtually).
/// struct Clockwork { now: Duration }
///
/// impl Backend for Clockwork {
///     fn name(&self) -> &'static str { "clockwork" }
///     fn capabilities(&self) -> Capabilities { Capabilities::default() }
///     fn modify(&mut self, _fd: RawFd, _old: Interest, _new: Interest) -> io::Result<()> {
///         Err(io::Error::new(io::ErrorKind::Unsupported, "clockwork watches no fds"))
///     }
///     fn poll(&mut self, timeout: Option<Duration>, _events: &mut Vec<PollEvent>)
///         -> io::Result<PollStatus> {
///         match timeout {
///             Some(t) => { self.now += t; Ok(PollStatus::Done) }
///             None => Ok(PollStatus::Stalled),
///         }
///     }
///     fn now(&mut self) -> Duration { self.now }
/// }
///
/// let mut lp = evloop::Loop::with_backend(Clockwork { now: Duration::ZERO });
/// lp.timer(Duration::from_secs(3), Duration::ZERO, |lp, _, _| {
///     assert_eq!(lp.now(), Duration::from_secs(3));
/// }).unwrap();
/// lp.run(evloop::RunMode::Default, &mut ()).unwrap();
/// assert_eq!(lp.now(), Duration::from_secs(3));
/// ```
pub trait Backend {
    /// A short lowercase name ("epoll", "poll", "sim", ...).
    fn name(&self) -> &'static str;

    /// What this backend supports.
    fn capabilities(&self) -> Capabilities;

    /// Changes the registration of `fd` from `old` to `new` (see the trait
    /// documentation for the contract).
    fn modify(&mut self, fd: RawFd, old: Interest, new: Interest) -> io::Result<()>;

    /// Makes `changes` in order, each as [`Backend::modify`] would (the
    /// same contract), and stops at the first that fails: `Err((i, e))`
    /// when `changes[i]` failed with `e` (those before it were made, those
    /// after it were not tried). The loop sends each flush's changes in
    /// one call (and the rest after a failure), so that a backend making
    /// one system call per change (epoll's `MOD` re-arming a one-shot fd
    /// after each event) pays the call's own overhead once. The default
    /// calls `modify` for each.
    ///
    /// ```
    /// use evloop::backend::{Backend, Change};
    /// use evloop::backends::sim::SimFd;
    /// use evloop::{Interest, Sim};
    /// let sim = Sim::new();
    /// let (a, b) = (sim.socket("a", 0), sim.socket("b", 0));
    /// let mut backend = sim.backend();
    /// let add = |fd| Change { fd, old: Interest::NONE, new: Interest::READABLE };
    /// assert!(backend.modify_all(&[add(a.sim_fd()), add(b.sim_fd())]).is_ok());
    /// assert_eq!(sim.modify_count(), 2);
    /// // A change the backend refuses (an fd it does not know): its index.
    /// let forget = Change { fd: b.sim_fd(), old: Interest::READABLE, new: Interest::NONE };
    /// let (i, _) = backend.modify_all(&[forget, add(99), add(b.sim_fd())]).unwrap_err();
    /// assert_eq!((i, sim.modify_count()), (1, 4));
    /// ```
    fn modify_all(&mut self, changes: &[Change]) -> Result<(), (usize, io::Error)> {
        for (i, c) in changes.iter().enumerate() {
            self.modify(c.fd, c.old, c.new).map_err(|e| (i, e))?;
        }
        Ok(())
    }

    /// Waits for readiness for at most `timeout` and appends what is ready.
    fn poll(
        &mut self,
        timeout: Option<Duration>,
        events: &mut Vec<PollEvent>,
    ) -> io::Result<PollStatus>;

    /// The current monotonic time, measured from an arbitrary fixed origin.
    fn now(&mut self) -> Duration;

    /// Re-creates the kernel objects after `fork()` (an epoll or kqueue
    /// handle is shared with the parent). The loop then re-registers every
    /// fd with `old == Interest::NONE` (its internal fds too: the services'
    /// wake fd, pidfds, timers are re-created by
    /// [`NoticeService::reinit`]). The default does nothing.
    fn reinit(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// The backend's own pollable descriptor, if it has one: a kernel
    /// object that another loop can watch for readability in place of
    /// this one's wait (epoll's epoll fd, kqueue's kqueue, an io_uring
    /// ring without deferred task work). It must be readable whenever a
    /// [`Backend::poll`] with a zero timeout would report an fd (the
    /// loop's internal fds included: a signal, a child's exit, a wake-up),
    /// once the changes [`Backend::modify`] made are exposed
    /// ([`Backend::expose_changes`]); spurious readability is allowed
    /// (the holder then runs the loop for nothing). What is reported when
    /// it is refused says why, in the backend's words: the loop passes it
    /// on (`Loop::pollable_fd`,
    /// [`Error::NoPollableFd`](crate::Error::NoPollableFd)). Backends
    /// that wait on the fds themselves (poll, select) or have no OS
    /// descriptors (the simulator) have none, and the default refuses.
    /// The error's text is the reason alone, without the backend's name
    /// (the loop's error adds it). A backend that gave one gives one (its
    /// current one, after [`Backend::reinit`]) for the rest of its life:
    /// `PollableLoop`'s `AsFd` cannot fail. Unix only. `docs/porting.md`
    /// ("A pollable fd") has the contract.
    ///
    /// ```
    /// use evloop::backend::Backend;
    /// use evloop::backends::poll::Poll;
    /// let err = Poll::new().pollable_fd().unwrap_err();
    /// assert!(err.to_string().contains("poll(2) is handed the watched fds"), "{err}");
    /// ```
    #[cfg(any(unix, target_os = "wasi"))]
    fn pollable_fd(&self) -> io::Result<std::os::fd::BorrowedFd<'_>> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "it does not implement Backend::pollable_fd (the trait's default refuses)",
        ))
    }

    /// Makes what [`Backend::modify`] has queued but not yet given the
    /// kernel show on `Backend::pollable_fd`, without waiting and
    /// without taking readiness out of the kernel, and says whether the
    /// backend still holds reports that its next [`Backend::poll`] will
    /// give but the fd does not show (a change the kernel refused here,
    /// completions read early): the loop's
    /// [`Loop::next_timeout`](crate::Loop::next_timeout) is then zero.
    /// The loop calls it when someone else is about to wait on that fd
    /// ([`Loop::flush_changes`](crate::Loop::flush_changes),
    /// `Loop::next_timeout`, the embed watcher), after sending its own
    /// changes; a second call with nothing queued only answers. kqueue
    /// submits its changelist (with `EV_RECEIPT`, which drains no event);
    /// io_uring submits its queued polls and re-arms the level fds its
    /// last poll reported. The default does nothing and holds nothing:
    /// right for a backend whose `modify` changes the kernel object at
    /// once (epoll).
    ///
    /// ```
    /// use evloop::backend::Backend;
    /// let mut b = evloop::backends::open("poll")?;
    /// assert!(!b.expose_changes()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn expose_changes(&mut self) -> io::Result<bool> {
        Ok(false)
    }

    /// The backend's own OS-notice service, for a platform where only the
    /// backend itself can provide signals, children, wake-ups and the
    /// rest (Windows: console events and process handles on the
    /// completion port; kqueue: `EVFILT_PROC` and `EVFILT_VNODE`), or
    /// where they are fake (the simulator, a replay). The default, `None`,
    /// is right for a readiness backend on Unix: the loop then provides
    /// them itself (the crate's Unix notifier, whose internal fds it
    /// registers with [`Backend::modify`] like any other and routes back
    /// to the notifier, never to a watcher).
    ///
    /// ```
    /// use evloop::backend::Backend;
    /// use evloop::Sim;
    /// assert!(Sim::new().backend().notices().is_some()); // the simulator's fakes
    /// # #[cfg(target_os = "linux")]
    /// assert!(evloop::backends::open("epoll")?.notices().is_none()); // the loop's
    /// # Ok::<(), evloop::Error>(())
    /// ```
    fn notices(&mut self) -> Option<&mut dyn NoticeService> {
        None
    }

    /// Hands the kernel what the backend queued for it since its last
    /// wait: [`Loop::run`](crate::Loop::run) calls it before it returns.
    /// A backend with completion I/O submits the sends its callbacks
    /// queued, so that a reply written in a callback is on its way when
    /// `run` returns, as a `write(2)` would have made it (a program that
    /// runs once and then waits for the peer's answer relies on it). Within
    /// `run`, the next wait submits them. The default: nothing.
    ///
    /// ```
    /// use evloop::backend::Backend;
    /// use evloop::Sim;
    /// assert!(Sim::new().backend().submit_pending().is_ok());
    /// ```
    fn submit_pending(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// The backend's completion I/O, if it offers one and it works on this
    /// kernel (the io_uring backend's, checked once when it starts):
    /// `evloop::net`'s connections and acceptors then read, write and
    /// accept through it instead of a syscall per readiness event. `None`
    /// (the default): everything goes through readiness.
    ///
    /// The handle is shared: an executor keeps one for its futures.
    ///
    /// ```
    /// use evloop::backend::Backend;
    /// use evloop::Sim;
    /// assert!(Sim::new().backend().completion_io().is_none());
    /// ```
    fn completion_io(&mut self) -> Option<Rc<dyn CompletionIo>> {
        None
    }
}

/// What an adopted descriptor is to [`CompletionIo::adopt`].
///
/// ```
/// use evloop::backend::Adopt;
/// assert_ne!(Adopt::Stream, Adopt::Listener);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adopt {
    /// A connected stream socket: received into the backend's buffers,
    /// sent from its copies of what was written.
    Stream,
    /// A listening TCP socket: connections accepted ahead by the kernel.
    Listener,
}

/// Completion I/O beside readiness (a backend offers it through
/// [`Backend::completion_io`]): a socket *adopted* by its owner is read by
/// the kernel into buffers the backend lends it, written from copies the
/// backend keeps until the kernel is done with them, and a listener's
/// connections are accepted ahead. The loop's readiness reports stay the
/// interface: an adopted fd is reported readable while received bytes,
/// its end of file, an error or an accepted connection wait, and writable
/// while the backend takes more bytes. Owners read with
/// [`recv`](CompletionIo::recv) and [`accept`](CompletionIo::accept),
/// write with [`send`](CompletionIo::send), which behave as the
/// non-blocking syscalls do (`WouldBlock` when there is nothing, or no
/// room), and make no syscall. On an fd that is not adopted they are the
/// plain syscalls.
///
/// Rules for the owner:
/// - adopt a socket before its first registration with the loop, and
///   [`release`](CompletionIo::release) it before it is closed (a
///   connection's removal);
/// - bytes [`send`](CompletionIo::send) took are sent, in order, even if
///   the fd is released and closed meanwhile (as a socket's send buffer
///   is), and [`shutdown_write`](CompletionIo::shutdown_write) takes
///   effect after them.
///
/// ```
/// use evloop::backend::CompletionIo;
/// use std::io;
///
/// /// Echoes what has arrived on an adopted socket.
/// fn echo(io: &dyn CompletionIo, fd: evloop::RawFd) -> io::Result<usize> {
///     let mut buf = [0u8; 512];
///     match io.recv(fd, &mut buf) {
///         Ok(n) => io.send(fd, &buf[..n]),
///         Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
///         Err(e) => Err(e),
///     }
/// }
/// # let _ = echo;
/// ```
pub trait CompletionIo {
    /// Takes `fd` (a socket, not yet registered with the loop) into
    /// completion I/O. An `Err` leaves it to readiness: the owner goes
    /// on with plain syscalls (the backend ran out of buffers to lend, or
    /// found the fd is not a socket).
    fn adopt(&self, fd: RawFd, role: Adopt) -> io::Result<()>;

    /// Gives `fd` back before it is closed: what was received and not
    /// read is dropped, accepted connections not taken are closed, bytes
    /// taken by [`send`](CompletionIo::send) still go out. Nothing for an
    /// fd that is not adopted.
    fn release(&self, fd: RawFd);

    /// Copies received bytes into `buf`: `Ok(0)` at the peer's end of
    /// file, the socket's error once everything before it was read,
    /// `WouldBlock` when nothing waits.
    fn recv(&self, fd: RawFd, buf: &mut [u8]) -> io::Result<usize>;

    /// Takes up to `bytes.len()` bytes to send, as many as the backend has
    /// room for; `WouldBlock` when it has none (the fd is reported
    /// writable again when it has), the socket's error once a send failed.
    fn send(&self, fd: RawFd, bytes: &[u8]) -> io::Result<usize>;

    /// Shuts down the writing side once everything taken was sent.
    fn shutdown_write(&self, fd: RawFd) -> io::Result<()>;

    /// Bytes [`send`](CompletionIo::send) took for `fd` that the kernel has
    /// not sent yet. After [`shutdown_write`](CompletionIo::shutdown_write)
    /// the fd is reported writable only once this is 0 (a graceful close
    /// waits for it).
    fn unsent(&self, fd: RawFd) -> usize;

    /// A connection accepted on the listener `fd`, non-blocking and
    /// close-on-exec; `WouldBlock` when none waits, the accept's error
    /// (out of descriptors: `EMFILE`) once.
    fn accept(&self, fd: RawFd) -> io::Result<std::net::TcpStream>;
}

/// Where an OS-notice service keeps its internal fds: the loop's fd
/// table and backend (for the loop's own Unix notifier), or a kernel set
/// of a backend's own. An internal fd is watched for readability and
/// never reported to a watcher: its readiness goes to
/// [`NoticeService::ready`].
///
/// A plain `Vec<RawFd>` implements it (a list a wait can be built from);
/// the examples use it.
///
/// ```
/// use evloop::backend::InternalFds;
/// let mut set: Vec<evloop::RawFd> = Vec::new();
/// set.add(5)?;
/// set.add(5)?; // held once
/// assert_eq!(set, [5]);
/// InternalFds::remove(&mut set, 5); // (not `Vec::remove`, by index)
/// assert!(set.is_empty() && set.fd_limit().is_none());
/// # Ok::<(), std::io::Error>(())
/// ```
pub trait InternalFds {
    /// Watches `fd` for readability.
    fn add(&mut self, fd: RawFd) -> io::Result<()>;
    /// Stops watching `fd` (it is about to be closed, or belongs to a
    /// kernel set being replaced); never fails.
    fn remove(&mut self, fd: RawFd);
    /// One more than the largest fd the set can hold, if it has such a
    /// limit (select: `FD_SETSIZE`): the notifier asks for its wake fd
    /// below it, and watches a child whose pidfd is not through
    /// `SIGCHLD` instead.
    fn fd_limit(&self) -> Option<RawFd> {
        None
    }
}

impl InternalFds for Vec<RawFd> {
    fn add(&mut self, fd: RawFd) -> io::Result<()> {
        if !self.contains(&fd) {
            self.push(fd);
        }
        Ok(())
    }

    fn remove(&mut self, fd: RawFd) {
        self.retain(|&f| f != fd);
    }
}

/// The OS services the loop composes with a readiness [`Backend`]:
/// signals, child processes (watch, spawn, signal), the waker, wall-clock
/// steps, path change hints, and the few OS reads watchers make (the wall
/// clock, a file's attributes, whether an fd can be watched). On Unix the
/// loop provides them itself (the crate's notifier, `backends::unix`,
/// with its internal fds registered through the backend's `modify`); a
/// backend offers its own through [`Backend::notices`] where the
/// platform needs it (Windows, kqueue) or where they are fake (the
/// simulator). Every method has a default: a service refuses
/// ([`unsupported`]) what it does not provide.
///
/// The `fds` argument is where internal fds go ([`InternalFds`]): the
/// loop's fd table for the loop's own service; for a backend's own
/// service, a set that refuses (it keeps its fds itself).
///
/// ```
/// use evloop::backend::{InternalFds, NoticeService, Notices};
/// /// Only a wall clock stuck at the epoch; everything else refused.
/// struct Stopped;
/// impl NoticeService for Stopped {
///     fn wall_now(&mut self) -> std::time::Duration { std::time::Duration::ZERO }
/// }
/// let mut fds: Vec<evloop::RawFd> = Vec::new();
/// let mut s = Stopped;
/// assert!(s.watch_signal(libc::SIGINT, &mut fds).is_err());
/// let mut n = Notices::default();
/// s.take_notices(&mut n, &mut fds);
/// assert!(n.is_empty() && s.wall_now().is_zero());
/// ```
pub trait NoticeService {
    /// A short name for error messages (the default: "notices").
    fn service_name(&self) -> &'static str {
        "notices"
    }

    /// Whether `fd` can ever be watched, asked once when an io watcher is
    /// created, so that [`Loop::io`](crate::Loop::io) can fail at once
    /// with the reason ([`Error::InvalidFd`](crate::Error::InvalidFd))
    /// instead of succeeding and reporting [`Ready::ERROR`] later. The
    /// loop's Unix service refuses fds that are not open, regular files
    /// and directories. The default accepts every fd (a refusal then
    /// comes from [`Backend::modify`]).
    fn check_fd(&mut self, fd: RawFd) -> io::Result<()> {
        let _ = fd;
        Ok(())
    }

    /// Starts reporting arrivals of `signal` (a number from 1 to the
    /// platform's last; the loop has refused `SIGKILL` and `SIGSTOP`) in
    /// [`Notices::signals`]. The loop calls it when its first watcher of
    /// that signal starts, and [`NoticeService::unwatch_signal`] when its
    /// last stops. Any number of loops, in any threads, may watch one
    /// signal: each hears every arrival. The Unix service shares a
    /// process-wide hub that installs a handler while some loop watches
    /// the signal and restores the previous disposition after. The
    /// default refuses ([`unsupported`]).
    fn watch_signal(&mut self, signal: i32, fds: &mut dyn InternalFds) -> io::Result<()> {
        let _ = (signal, fds);
        Err(unsupported(self.service_name(), "signal watching"))
    }

    /// Stops reporting `signal` (see [`NoticeService::watch_signal`]).
    fn unwatch_signal(&mut self, signal: i32) {
        let _ = signal;
    }

    /// Starts watching the child process `pid`: when it exits, the
    /// service reaps it (only it: never another child, never
    /// `waitpid(-1)`, unless asked to watch any child) and reports it once
    /// in [`Notices::exits`], then forgets it. A child that exited before
    /// this call is reported too. Any number of loops of one process may
    /// watch one pid: the child is reaped once, and each reports its
    /// status (a loop blocked in its poll is woken to do so). A child that
    /// someone else reaped first (`std::process::Child::wait`, `waitpid`)
    /// is reported with [`ExitStatus::Unknown`]: never dropped. Errors:
    /// `pid` is not an unreaped child of this process. The default
    /// refuses ([`unsupported`]).
    fn watch_child(&mut self, pid: u32, fds: &mut dyn InternalFds) -> io::Result<()> {
        let _ = (pid, fds);
        Err(unsupported(self.service_name(), "child watching"))
    }

    /// Stops watching `pid` without reaping it.
    fn unwatch_child(&mut self, pid: u32, fds: &mut dyn InternalFds) {
        let _ = (pid, fds);
    }

    /// Starts reporting the exit of *every* child process of this process
    /// (libev's child watcher of pid 0) in [`Notices::exits`]: the service
    /// reaps whatever child exits (`waitpid(-1)`), whoever started it,
    /// and reports each exit once. The exits of children that some loop of
    /// the process watches by pid are still reported to it too, with the
    /// real status, whoever reaps them. The loop calls it when its first
    /// any-child watcher starts, and
    /// [`NoticeService::unwatch_any_child`] when its last stops. The
    /// default refuses ([`unsupported`]).
    fn watch_any_child(&mut self, fds: &mut dyn InternalFds) -> io::Result<()> {
        let _ = fds;
        Err(unsupported(self.service_name(), "watching any child"))
    }

    /// Stops reaping and reporting children that no one watches by pid.
    fn unwatch_any_child(&mut self) {}

    /// Sends `signal` (0: none, only the checks) to the watched child
    /// `pid` only if it has not been reaped: a reaped child's pid may
    /// already name another process. The Unix service sends through the
    /// child's pidfd where it has one (Linux), and otherwise `kill(2)`
    /// while the process-wide table of watched children, under its lock,
    /// shows the child unreaped. Errors: of kind
    /// [`NotFound`](io::ErrorKind::NotFound) if the child has been reaped
    /// or is not watched here; others as `kill(2)` reports them. The
    /// default refuses ([`unsupported`]).
    fn signal_child(&mut self, pid: u32, signal: i32) -> io::Result<()> {
        let _ = (pid, signal);
        Err(unsupported(
            self.service_name(),
            "sending signals to children",
        ))
    }

    /// Starts `command` and watches the new child as
    /// [`NoticeService::watch_child`] does, with no moment in between at
    /// which someone could reap it first (the Unix service spawns under
    /// the lock of the process-wide table of watched children). The
    /// default spawns, then watches (and if watching fails, kills and
    /// reaps the child before returning the error).
    ///
    /// ```
    /// use evloop::backend::NoticeService;
    /// use evloop::Spawned;
    /// use std::process::{Command, Stdio};
    /// # #[cfg(unix)] {
    /// let mut fds: Vec<evloop::RawFd> = Vec::new();
    /// let mut n = evloop::backends::unix::Notifier::new("doc");
    /// let s: Spawned = n.spawn_child(Command::new("true").stdout(Stdio::piped()), &mut fds)?;
    /// assert!(s.pid > 0 && s.stdout.is_some() && s.stdin.is_none());
    /// n.unwatch_child(s.pid, &mut fds); // left unreaped: reaped when the program ends
    /// # }
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn spawn_child(
        &mut self,
        command: &mut Command,
        fds: &mut dyn InternalFds,
    ) -> io::Result<Spawned> {
        let mut child = command.spawn()?;
        if let Err(err) = self.watch_child(child.id(), fds) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(err);
        }
        Ok(Spawned::from_std(child))
    }

    /// Something other threads can use to end the loop's wait ([`Wake`]);
    /// each call may return the same one. The loop asks for it when its
    /// first async watcher is created. The default refuses
    /// ([`unsupported`]).
    fn waker(&mut self, fds: &mut dyn InternalFds) -> io::Result<Arc<dyn Wake>> {
        let _ = fds;
        Err(unsupported(self.service_name(), "a waker"))
    }

    /// One of the service's internal fds was reported readable: drain it
    /// (the wake fd), read it (a timer, inotify), or reap (a pidfd). The
    /// loop calls it after each poll, before
    /// [`NoticeService::take_notices`]. The default ignores it.
    fn ready(&mut self, fd: RawFd, fds: &mut dyn InternalFds) {
        let _ = (fd, fds);
    }

    /// Moves what the service noticed since the last call into `notices`
    /// (OR-ing signals and `woken`, appending exits and path tokens). The
    /// loop calls it after each poll while it watches a signal, a child,
    /// the clock or a path, or has asked for a waker. The default notices
    /// nothing.
    fn take_notices(&mut self, notices: &mut Notices, fds: &mut dyn InternalFds) {
        let _ = (notices, fds);
    }

    /// The wall clock (`CLOCK_REALTIME`): the time since the Unix epoch,
    /// for periodic watchers. It may be stepped (NTP, an administrator,
    /// resume from suspend). The default reads `SystemTime::now()`.
    fn wall_now(&mut self) -> Duration {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
    }

    /// Starts reporting steps of the wall clock in
    /// [`Notices::clock_stepped`]; false if the service cannot (the
    /// default), and the loop then looks for steps itself, comparing the
    /// wall and monotonic clocks each iteration and waking at least once a
    /// minute. Asked when the first periodic watcher starts. A step must
    /// end a blocked wait. The Unix service on Linux reports every set of
    /// the clock (a `CLOCK_REALTIME` timerfd with
    /// `TFD_TIMER_CANCEL_ON_SET`); kqueue and the others cannot.
    fn watch_clock_steps(&mut self, fds: &mut dyn InternalFds) -> bool {
        let _ = fds;
        false
    }

    /// Stops reporting wall-clock steps (the last periodic watcher
    /// stopped).
    fn unwatch_clock_steps(&mut self, fds: &mut dyn InternalFds) {
        let _ = fds;
    }

    /// The attributes of `path`, for stat watchers. The default reads them
    /// through the standard library ([`FileStat::of`]).
    fn stat(&mut self, path: &Path) -> FileStat {
        FileStat::of(path)
    }

    /// Starts hinting at changes of `path` (and of the directory holding
    /// it, so that a save by rename or a delete and re-create is caught)
    /// by reporting `token` in [`Notices::paths`]; the loop then looks at
    /// the path at once instead of at its next polling interval. Several
    /// tokens may name one path. A path that does not exist yet is fine
    /// (its creation is a change). The default refuses ([`unsupported`]):
    /// stat watchers then poll only. inotify on Linux, `EVFILT_VNODE` on
    /// kqueue; elsewhere refused.
    fn watch_path(&mut self, path: &Path, token: u64, fds: &mut dyn InternalFds) -> io::Result<()> {
        let _ = (path, token, fds);
        Err(unsupported(self.service_name(), "path change hints"))
    }

    /// Stops hinting for `token`.
    fn unwatch_path(&mut self, token: u64, fds: &mut dyn InternalFds) {
        let _ = (token, fds);
    }

    /// After `fork()` in the child, once the backend was re-created
    /// ([`Backend::reinit`]): forget every watched child and signal (the
    /// children are the parent's; the loop watches its signals again),
    /// and give the child a wake fd, timer and inotify instance of its own
    /// (in `fds`; those inherited are shared with the parent). Clock-step
    /// reports and watched paths stay on. The default does nothing.
    fn reinit(&mut self, fds: &mut dyn InternalFds) -> io::Result<()> {
        let _ = fds;
        Ok(())
    }

    /// The loop, about to block in a poll while an async watcher is
    /// active: `sent` says whether another thread sent to one of its
    /// async watchers already (then the poll does not block). What it
    /// returns is what the loop acts on: the default returns `sent`; the
    /// replay recorder records a `true`, and a replay answers from its
    /// trace instead (the replayed program's own sends are ignored).
    ///
    /// ```
    /// use evloop::backend::{NoNotices, NoticeService};
    /// assert!(NoNotices.async_sent(true));
    /// assert!(!NoNotices.async_sent(false));
    /// ```
    fn async_sent(&mut self, sent: bool) -> bool {
        sent
    }

    /// The loop, after a poll, with the async watchers whose sends it
    /// has taken (each named by its number in the loop: the order in
    /// which the loop first started them), in the order it is about to
    /// queue them; `active` says whether a number is one of its active
    /// async watchers. The loop queues what `taken` holds on return: the
    /// default leaves it; the replay recorder records it (when not
    /// empty), and a replay replaces it with the trace's (a number that
    /// is not `active` is a divergence). Called after every poll while an
    /// async watcher is active.
    ///
    /// ```
    /// use evloop::backend::{NoNotices, NoticeService};
    /// let mut taken = vec![0, 2];
    /// NoNotices.async_taken(&mut taken, &|n| n < 3);
    /// assert_eq!(taken, [0, 2]);
    /// ```
    fn async_taken(&mut self, taken: &mut Vec<u32>, active: &dyn Fn(u32) -> bool) {
        let _ = (taken, active);
    }

    /// Whether the loop should call [`NoticeService::dispatched`] for
    /// every io callback it invokes (a simulator records them in its
    /// trace). Asked once, when the loop is created; the default
    /// (`false`) keeps the call off the hot path.
    fn wants_dispatch(&mut self) -> bool {
        false
    }

    /// Called just before each io callback if
    /// [`NoticeService::wants_dispatch`] said so. The default does
    /// nothing.
    fn dispatched(&mut self, fd: RawFd, ready: Ready) {
        let _ = (fd, ready);
    }
}

/// The service of a platform that has none (and of a backend that
/// provides nothing): every notice refused, the OS's wall clock and
/// `stat`.
///
/// ```
/// use evloop::backend::{NoNotices, NoticeService};
/// let mut fds: Vec<evloop::RawFd> = Vec::new();
/// assert!(NoNotices.waker(&mut fds).is_err());
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct NoNotices;

impl NoticeService for NoNotices {}
