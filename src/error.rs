//! The crate's error type.

use crate::RawFd;
use std::fmt;
use std::io;

/// Everything that can go wrong when using a [`Loop`](crate::Loop).
///
/// Every variant says what went wrong and why in its `Display` text.
///
/// ```
/// use evloop::{Error, Idle, Loop, Sim};
/// let sim = Sim::new();
/// let mut lp: Loop = Loop::with_backend(sim.backend());
/// let idle = Idle::new(&mut lp, |_, _, _| {}).unwrap();
/// lp.remove(idle).unwrap();
/// let err = lp.stop(idle).unwrap_err();
/// assert!(matches!(err, Error::StaleHandle { .. }));
/// assert!(err.to_string().contains("removed"));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The handle names a watcher that was removed (its slot may since have
    /// been reused by another watcher, which is left untouched).
    StaleHandle {
        /// The kind of watcher the handle was for ("io", "timer", ...).
        kind: &'static str,
    },
    /// The handle was made by another loop. Handles belong to the loop that
    /// created their watcher; another loop refuses them and never acts on
    /// a watcher of its own in their place.
    ForeignHandle {
        /// The kind of watcher the handle was for ("io", "timer", ...).
        kind: &'static str,
    },
    /// [`Loop::install`](crate::Loop::install): a kind of this type is
    /// installed already (each kind is one component per loop).
    KindInstalled {
        /// The kind's [`Kind::NAME`](crate::Kind::NAME).
        kind: &'static str,
    },
    /// [`Loop::watcher`](crate::Loop::watcher): the kind was not
    /// installed in this loop.
    KindNotInstalled {
        /// The kind's [`Kind::NAME`](crate::Kind::NAME).
        kind: &'static str,
    },
    /// A priority outside `MIN_PRIORITY..=MAX_PRIORITY`.
    InvalidPriority(i32),
    /// The fd is larger than the backend can watch (select's `FD_SETSIZE`).
    FdTooLarge {
        /// The fd.
        fd: RawFd,
        /// The largest fd the backend accepts.
        max: RawFd,
        /// The backend's name.
        backend: &'static str,
    },
    /// The fd cannot be watched, detected when the io watcher is created
    /// ([`Loop::io`](crate::Loop::io), [`Io::borrowed`](crate::Io::borrowed)):
    /// it is negative, it is not open, or the backend can never watch it
    /// (on every OS backend, a regular file or a directory, which would
    /// always be ready; on the simulator, a closed or invalidated socket).
    /// `reason` says which, in the backend's words.
    InvalidFd {
        /// The fd.
        fd: RawFd,
        /// Why it was refused.
        reason: String,
    },
    /// A virtual (simulated) fd given to an OS backend, or an OS fd given to
    /// a simulated one.
    WrongSourceKind {
        /// The backend's name.
        backend: &'static str,
        /// Whether the source was virtual.
        virtual_source: bool,
    },
    /// The trigger mode is not available on this backend.
    UnsupportedTrigger {
        /// The requested mode.
        trigger: crate::Trigger,
        /// The backend's name.
        backend: &'static str,
    },
    /// Two watchers on one fd asked for different trigger modes; the kernel
    /// keeps one registration per fd, so they cannot be mixed.
    TriggerConflict {
        /// The fd.
        fd: RawFd,
        /// The mode the fd already has.
        existing: crate::Trigger,
        /// The mode that was asked for.
        requested: crate::Trigger,
    },
    /// The io watcher's source is not of the requested type, or was borrowed
    /// rather than owned, so it cannot be handed back.
    SourceType,
    /// The operation is not possible while the io watcher's own callback
    /// is running, as that callback holds the source: taking the source
    /// back ([`Io::into_source`](crate::Io::into_source)) or giving it
    /// to a new callback ([`Io::set_callback`](crate::Io::set_callback)).
    Busy,
    /// The change is allowed only while the watcher is stopped (libev's
    /// rule for its `ev_TYPE_set` functions): stop it, change it, start
    /// it again.
    WatcherActive {
        /// The kind of watcher ("signal", "periodic", ...).
        kind: &'static str,
        /// What was to be changed ("signal", "schedule", ...).
        what: &'static str,
    },
    /// A signal that cannot be watched: out of range (signals are numbered
    /// from 1 to the platform's last, at most 64), or one that cannot be
    /// caught (`SIGKILL`, `SIGSTOP`).
    InvalidSignal {
        /// The signal number given.
        signal: i32,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A child process that cannot be watched (not a child of this
    /// process, already reaped), or a backend without child watching.
    Child {
        /// The process id given.
        pid: u32,
        /// What the backend said.
        source: io::Error,
    },
    /// [`Child::spawn`](crate::Child::spawn) could not start the command
    /// (`source` as `std::process::Command::spawn` reports it: a missing
    /// program, say), or not watch it (then the child was killed and
    /// reaped before the call returned).
    Spawn {
        /// The command's program.
        program: String,
        /// What went wrong.
        source: io::Error,
    },
    /// [`Child::kill`](crate::Child::kill) sent nothing: the child has exited
    /// and been reaped (by the loop, another loop, or someone else), so its
    /// pid may already name another process.
    ChildExited {
        /// The child's process id.
        pid: u32,
        /// How it ended, if its watcher has been told.
        status: Option<crate::ExitStatus>,
    },
    /// [`Child::kill`](crate::Child::kill) sent nothing for another reason:
    /// the watcher is stopped (the loop then cannot know whether its child
    /// has been reaped), it watches any child rather than one, the backend
    /// cannot send signals to children, or the system refused.
    Kill {
        /// The child's process id (0 for an any-child watcher).
        pid: u32,
        /// The signal.
        signal: i32,
        /// Why.
        source: io::Error,
    },
    /// A periodic watcher's schedule that cannot be kept (an interval of
    /// zero).
    InvalidSchedule {
        /// Why.
        reason: &'static str,
    },
    /// An async watcher's sender was used after the watcher was removed or
    /// its loop was dropped: the send did nothing.
    WatcherGone {
        /// The kind of watcher ("async").
        kind: &'static str,
    },
    /// No backend of that name exists on this platform, nor was one
    /// registered under it ([`backends::register`](crate::backends::register),
    /// [`Builder::register`](crate::Builder::register)).
    UnknownBackend {
        /// The requested name.
        name: String,
        /// The names that would have worked: this platform's backends,
        /// then those registered for the process, then those registered
        /// with the builder.
        available: Vec<&'static str>,
        /// The environment variable the name was read from
        /// (`Some("EVLOOP_BACKEND")`), or `None` if the program chose it.
        env_var: Option<&'static str>,
    },
    /// [`backends::register`](crate::backends::register) refused the name:
    /// the crate's own backends have it (on this platform or another), or
    /// it is registered already.
    BackendNameTaken {
        /// The name asked for.
        name: &'static str,
        /// Why it cannot be registered.
        reason: &'static str,
    },
    /// `Loop::pollable_fd`: the loop's backend
    /// has no descriptor of its own that another loop could watch (poll
    /// and select wait on the fds themselves, the simulator's fds are
    /// virtual, an io_uring ring with deferred task work is never woken
    /// by its completions). `reason` says why, in the backend's words.
    NoPollableFd {
        /// The backend's name.
        backend: &'static str,
        /// Why it has none.
        reason: String,
    },
    /// `Embed::new` (and
    /// `Embed::can_embed`): the loop cannot be
    /// embedded in this one, because its backend has no pollable fd
    /// ([`Error::NoPollableFd`]'s reasons), or because this loop's backend
    /// cannot watch that fd (the simulator watches only virtual fds;
    /// select, only fds below `FD_SETSIZE`).
    CannotEmbed {
        /// The backend of the loop to embed.
        inner: &'static str,
        /// The backend of the loop it was to be embedded in.
        outer: &'static str,
        /// Why not.
        reason: String,
    },
    /// `Embed::inner_mut`,
    /// `Embed::inner`,
    /// `Embed::unembed`: the embed watcher's
    /// callback is running and holds the embedded loop (it is the
    /// callback's argument); it can be reached that way, or after the
    /// callback returns.
    EmbeddedRunning,
    /// The process has made 2^32 - 1 loops: a loop's id, which its
    /// handles carry so that another loop refuses them, is never reused
    /// (a handle of a dropped loop must not be taken for a new loop's), so
    /// no new loop can be made.
    LoopIdsExhausted,
    /// An executor operation made outside any task
    /// (`exec::spawn_local`, `exec::AsyncFd::new`; feature `exec`): there
    /// is no current executor; use the loop's (`exec::Executor::of`).
    NoExecutor,
    /// A spawn on the executor of a loop that was dropped.
    ExecutorGone,
    /// `exec::block_on` (feature `exec`): the loop can never make
    /// progress again (its backend said so: the simulator with nothing
    /// left to happen), and the future is still pending.
    Stalled,
    /// The backend failed.
    Backend {
        /// The backend's name.
        backend: &'static str,
        /// What it was doing.
        op: &'static str,
        /// The OS error.
        source: io::Error,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoExecutor => f.write_str(
                "not inside a task of an evloop executor: there is no current executor (use exec::Executor::of or exec::spawn_on)",
            ),
            Error::ExecutorGone => {
                f.write_str("the executor's loop was dropped: it runs no new task")
            }
            Error::Stalled => f.write_str(
                "the loop stalled: nothing can ever happen again, and the future is still pending",
            ),
            Error::StaleHandle { kind } => write!(
                f,
                "stale {kind} handle: the watcher was removed (its slot may now belong to another watcher)"
            ),
            Error::ForeignHandle { kind } => write!(
                f,
                "foreign {kind} handle: it was made by another loop, and handles work only on the loop that created their watcher"
            ),
            Error::KindInstalled { kind } => write!(
                f,
                "the {kind} kind is installed in this loop already: a loop has one component per kind"
            ),
            Error::KindNotInstalled { kind } => write!(
                f,
                "the {kind} kind is not installed in this loop: install it (Loop::install) before creating its watchers"
            ),
            Error::InvalidPriority(p) => write!(
                f,
                "invalid priority {p}: priorities range from {} to {}",
                crate::MIN_PRIORITY,
                crate::MAX_PRIORITY
            ),
            Error::FdTooLarge { fd, max, backend } => write!(
                f,
                "fd {fd} is too large for the {backend} backend, which can watch fds up to {max}; use another backend (epoll or poll)"
            ),
            Error::InvalidFd { fd, reason } => write!(f, "invalid fd {fd}: {reason}"),
            Error::WrongSourceKind { backend, virtual_source: true } => write!(
                f,
                "a simulated (virtual) fd cannot be registered with the {backend} backend, which watches OS descriptors"
            ),
            Error::WrongSourceKind { backend, virtual_source: false } => write!(
                f,
                "an OS descriptor cannot be registered with the {backend} backend, which watches only simulated fds"
            ),
            Error::UnsupportedTrigger { trigger, backend } => write!(
                f,
                "{trigger:?}-triggered io watchers are not supported by the {backend} backend (only epoll and kqueue offer edge triggering)"
            ),
            Error::TriggerConflict { fd, existing, requested } => write!(
                f,
                "fd {fd} already has {existing:?}-triggered watchers; a {requested:?}-triggered watcher cannot share it"
            ),
            Error::SourceType => f.write_str(
                "the io watcher's source is not of the requested type, or it was borrowed and stays with its owner",
            ),
            Error::Busy => f.write_str(
                "the io watcher's callback is running and holds its source; the source can be taken back, or given to a new callback, only after it returns",
            ),
            Error::WatcherActive { kind, what } => write!(
                f,
                "the {kind} watcher is active: its {what} can be changed only while it is stopped (stop it, change it, start it again)"
            ),
            Error::InvalidSignal { signal, reason } => {
                write!(f, "signal {signal} cannot be watched: {reason}")
            }
            Error::Child { pid, source } => {
                write!(f, "cannot watch child process {pid}: {source}")
            }
            Error::Spawn { program, source } => {
                write!(f, "cannot spawn and watch {program:?}: {source}")
            }
            Error::ChildExited { pid, status } => {
                write!(f, "child process {pid} has exited")?;
                if let Some(status) = status {
                    write!(f, " ({status})")?;
                }
                f.write_str(
                    " and been reaped: no signal was sent (its pid may name another process now)",
                )
            }
            Error::Kill { pid, signal, source } => {
                write!(f, "cannot send signal {signal} to child process {pid}: {source}")
            }
            Error::InvalidSchedule { reason } => write!(f, "invalid periodic schedule: {reason}"),
            Error::WatcherGone { kind } => write!(
                f,
                "the {kind} watcher is gone (removed, or its loop dropped): nothing was sent"
            ),
            Error::UnknownBackend { name, available, env_var } => {
                write!(f, "unknown or unavailable backend {name:?}")?;
                if let Some(var) = env_var {
                    write!(f, " (named by the environment variable {var})")?;
                }
                write!(f, "; known here: {}", available.join(", "))
            }
            Error::BackendNameTaken { name, reason } => {
                write!(f, "cannot register a backend named {name:?}: {reason}")
            }
            Error::NoPollableFd { backend, reason } => {
                write!(f, "the {backend} backend has no pollable fd: {reason}")
            }
            Error::CannotEmbed { inner, outer, reason } => write!(
                f,
                "a loop on the {inner} backend cannot be embedded in a loop on the {outer} backend: {reason}"
            ),
            Error::EmbeddedRunning => f.write_str(
                "the embed watcher's callback is running and holds the embedded loop; reach it through the callback's argument, or after the callback returns",
            ),
            Error::LoopIdsExhausted => f.write_str(
                "no new loop can be made: this process has made 2^32 - 1 loops, and loop ids (which handles carry) are never reused",
            ),
            Error::Backend { backend, op, source } => {
                write!(f, "{backend} backend failed to {op}: {source}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Backend { source, .. }
            | Error::Child { source, .. }
            | Error::Spawn { source, .. }
            | Error::Kill { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// `Result` with [`Error`].
///
/// ```
/// fn make() -> evloop::Result<evloop::Loop<'static>> {
///     Ok(evloop::Loop::with_backend(evloop::Sim::new().backend()))
/// }
/// assert!(make().is_ok());
/// ```
pub type Result<T> = std::result::Result<T, Error>;
