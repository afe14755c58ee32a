//! Signal watchers: the component (the active watchers of each signal,
//! and the signals the backend has been asked to watch for this loop), its
//! [`Kind`] impl, the handle, the signal numbers ([`Signal`]'s constants)
//! and the `Loop` methods. The process-wide handler is the backend's
//! (backends/unix/ on the OS backends).
//!
//! Asking the backend to watch a signal can fail: it is asked as the first
//! watcher of that signal starts ([`Kind::start`], whose error the call
//! that started it returns), and told when the last one stops. After each
//! poll, in [`Phase::Polled`], the watchers of every signal that arrived
//! are queued, by signal number, then in start order.

use std::collections::HashMap;

use crate::backend::SignalSet;
use crate::handle::handle;
use crate::kind::{Context, Kind, Phase, Phases, Watcher};
use crate::kinds::rank;
use crate::slot_list::{Slot, SlotList};
use crate::watchers::plain::Plain;
use crate::{Error, Loop, Result};

/// The signal watchers of a loop.
pub(crate) struct Signals {
    /// Index `s`: the active watchers of signal `s`, in start order.
    lists: Vec<SlotList>,
    /// The signals the backend watches for this loop.
    watched: SignalSet,
    /// The signal each watcher watches (stopped ones included).
    signal_of: HashMap<Slot, i32>,
}

impl Default for Signals {
    fn default() -> Self {
        Signals {
            lists: vec![SlotList::default(); LAST_SIGNAL as usize + 1],
            watched: SignalSet::EMPTY,
            signal_of: HashMap::new(),
        }
    }
}

impl Signals {
    /// The signal the watcher in `slot` watches.
    fn signal(&self, slot: Slot) -> i32 {
        *self
            .signal_of
            .get(&slot)
            .expect("a signal watcher has a signal")
    }
}

impl Kind for Signals {
    const NAME: &'static str = "signal";
    const PHASES: Phases = Phases::POLLED;

    /// The first watcher of its signal has the backend watch it.
    fn start(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) -> Result<bool> {
        let signal = self.signal(w.slot());
        if !self.watched.contains(signal) {
            let backend = cx.backend().name();
            cx.services(|s, fds| s.watch_signal(signal, fds))
                .map_err(|source| Error::Backend {
                    backend,
                    op: "watch a signal",
                    source,
                })?;
            self.watched.insert(signal);
        }
        self.lists[signal as usize].push(cx.links(), w.slot());
        Ok(true)
    }

    /// The last watcher of its signal has the backend stop watching it.
    fn stop(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) {
        let signal = self.signal(w.slot());
        let list = &mut self.lists[signal as usize];
        list.remove(cx.links(), w.slot());
        if list.is_empty() {
            let mut still = SignalSet::EMPTY;
            for s in self.watched.iter().filter(|&s| s != signal) {
                still.insert(s);
            }
            self.watched = still;
            cx.services(|s, _| s.unwatch_signal(signal));
        }
    }

    fn remove(&mut self, _: &mut Context<'_>, w: Watcher<Self>) {
        self.signal_of.remove(&w.slot());
    }

    /// The watchers of each signal that arrived, by signal number.
    fn phase(&mut self, cx: &mut Context<'_>, _: Phase) {
        let arrived = cx.notices().signals;
        for signal in arrived.iter() {
            if self.watched.contains(signal) {
                cx.queue_list(self.lists[signal as usize]);
            }
        }
    }

    fn wants_notices(&self) -> bool {
        !self.watched.is_empty()
    }

    /// The backend forgot the signals it watched: they are watched again
    /// (in the child, the child's signals wake the child's loop).
    fn after_fork(&mut self, cx: &mut Context<'_>) -> Result<()> {
        let backend = cx.backend().name();
        for signal in self.watched.take().iter() {
            if !self.lists[signal as usize].is_empty() {
                cx.services(|s, fds| s.watch_signal(signal, fds))
                    .map_err(|source| Error::Backend {
                        backend,
                        op: "watch a signal again after fork",
                        source,
                    })?;
                self.watched.insert(signal);
            }
        }
        Ok(())
    }
}

handle!(
    /// Handle to a signal watcher, returned by [`Signal::new`].
    ///
    /// ```
    /// use evloop::{Loop, Signal};
    /// let mut lp: Loop = Loop::new()?;
    /// let s = Signal::new(&mut lp, Signal::TERM, |_, _, _| {})?;
    /// assert_eq!(s.number(&lp)?, Signal::TERM);
    /// # Ok::<(), evloop::Error>(())
    /// ```
    Signal,
    "signal",
    false
);

/// Where the numbers come from: the platform's `libc`, or on WASI
/// wasi-libc's `<signal.h>` (Linux's numbering), which the `libc` crate
/// does not carry: no WASI runtime delivers a signal, but the simulator
/// raises them by number there too.
#[cfg(unix)]
use libc as sig;
#[cfg(target_os = "wasi")]
#[allow(missing_docs)]
mod sig {
    pub const SIGHUP: i32 = 1;
    pub const SIGINT: i32 = 2;
    pub const SIGQUIT: i32 = 3;
    pub const SIGILL: i32 = 4;
    pub const SIGTRAP: i32 = 5;
    pub const SIGABRT: i32 = 6;
    pub const SIGBUS: i32 = 7;
    pub const SIGFPE: i32 = 8;
    pub const SIGKILL: i32 = 9;
    pub const SIGUSR1: i32 = 10;
    pub const SIGSEGV: i32 = 11;
    pub const SIGUSR2: i32 = 12;
    pub const SIGPIPE: i32 = 13;
    pub const SIGALRM: i32 = 14;
    pub const SIGTERM: i32 = 15;
    pub const SIGCHLD: i32 = 17;
    pub const SIGCONT: i32 = 18;
    pub const SIGSTOP: i32 = 19;
    pub const SIGTSTP: i32 = 20;
    pub const SIGTTIN: i32 = 21;
    pub const SIGTTOU: i32 = 22;
    pub const SIGURG: i32 = 23;
    pub const SIGXCPU: i32 = 24;
    pub const SIGXFSZ: i32 = 25;
    pub const SIGVTALRM: i32 = 26;
    pub const SIGPROF: i32 = 27;
    pub const SIGWINCH: i32 = 28;
    pub const SIGIO: i32 = 29;
    pub const SIGSYS: i32 = 31;
}

/// Defines the signal-number constants on [`Signal`] and [`Signal::name`]
/// from one list: `NAME = libc::SIGNAME`.
#[cfg(any(unix, target_os = "wasi"))]
macro_rules! signal_numbers {
    ($($(#[$doc:meta])* $name:ident = $value:ident),* $(,)?) => {
        /// The platform's signal numbers, so that a program needs no direct
        /// dependency on `libc` to name them: `Signal::new(&mut lp, Signal::TERM, ..)`,
        /// `child.kill(&mut lp, Signal::KILL)`, `sim.raise(at, Signal::HUP)`.
        ///
        /// Signal numbers are plain `i32`s throughout evloop, as they are
        /// for the kernel, for `libc` and in
        /// [`ExitStatus::Signaled`](crate::ExitStatus::Signaled): these
        /// constants work wherever a number does (a `libc::SIGTERM` still
        /// does too), in patterns included. The values are the platform's
        /// own (`SIGUSR1` is 10 on Linux, 30 on macOS and the BSDs); the
        /// list holds the signals that Linux, macOS, FreeBSD, NetBSD and
        /// OpenBSD all have. Real-time signals have no constant: they are
        /// numbered from `libc::SIGRTMIN()` where the platform has them.
        ///
        /// ```
        /// use evloop::{ExitStatus, Signal};
        /// assert_eq!(Signal::TERM, libc::SIGTERM);
        /// assert_eq!(Signal::name(Signal::INT), Some("SIGINT"));
        /// assert_eq!(Signal::name(0), None);
        /// let killed = ExitStatus::Signaled { signal: Signal::KILL, core_dumped: false };
        /// assert!(matches!(killed, ExitStatus::Signaled { signal: Signal::KILL, .. }));
        /// ```
        impl Signal {
            $(
                $(#[$doc])*
                pub const $name: i32 = sig::$value;
            )*

            /// The name of signal `signal` (`"SIGTERM"`), if it is one of
            /// the constants above.
            ///
            /// ```
            /// use evloop::Signal;
            /// assert_eq!(Signal::name(Signal::CHLD), Some("SIGCHLD"));
            /// assert_eq!(Signal::name(65), None);
            /// ```
            pub fn name(signal: i32) -> Option<&'static str> {
                match signal {
                    $(sig::$value => Some(stringify!($value)),)*
                    _ => None,
                }
            }
        }
    };
}

#[cfg(any(unix, target_os = "wasi"))]
signal_numbers! {
    /// `SIGHUP`: hangup (of the controlling terminal; by convention,
    /// "reload your configuration").
    HUP = SIGHUP,
    /// `SIGINT`: interrupt from the keyboard (Ctrl-C).
    INT = SIGINT,
    /// `SIGQUIT`: quit from the keyboard (`Ctrl-\`), with a core dump.
    QUIT = SIGQUIT,
    /// `SIGILL`: illegal instruction.
    ILL = SIGILL,
    /// `SIGTRAP`: trace or breakpoint trap.
    TRAP = SIGTRAP,
    /// `SIGABRT`: abort (`abort(3)`).
    ABRT = SIGABRT,
    /// `SIGBUS`: bus error (bad memory access).
    BUS = SIGBUS,
    /// `SIGFPE`: arithmetic exception.
    FPE = SIGFPE,
    /// `SIGKILL`: kill; cannot be caught (no watcher can watch it), only
    /// sent ([`Child::kill`](crate::Child::kill)).
    KILL = SIGKILL,
    /// `SIGUSR1`: for the program's own use.
    USR1 = SIGUSR1,
    /// `SIGSEGV`: invalid memory reference.
    SEGV = SIGSEGV,
    /// `SIGUSR2`: for the program's own use.
    USR2 = SIGUSR2,
    /// `SIGPIPE`: write to a pipe or socket with no reader.
    PIPE = SIGPIPE,
    /// `SIGALRM`: timer signal (`alarm(2)`).
    ALRM = SIGALRM,
    /// `SIGTERM`: termination, the polite request to stop (`kill`'s
    /// default).
    TERM = SIGTERM,
    /// `SIGCHLD`: a child stopped or exited (child watchers use it where
    /// there are no pidfds).
    CHLD = SIGCHLD,
    /// `SIGCONT`: continue if stopped.
    CONT = SIGCONT,
    /// `SIGSTOP`: stop; cannot be caught, only sent.
    STOP = SIGSTOP,
    /// `SIGTSTP`: stop from the keyboard (Ctrl-Z).
    TSTP = SIGTSTP,
    /// `SIGTTIN`: terminal input for a background process.
    TTIN = SIGTTIN,
    /// `SIGTTOU`: terminal output for a background process.
    TTOU = SIGTTOU,
    /// `SIGURG`: urgent condition on a socket.
    URG = SIGURG,
    /// `SIGXCPU`: CPU time limit exceeded.
    XCPU = SIGXCPU,
    /// `SIGXFSZ`: file size limit exceeded.
    XFSZ = SIGXFSZ,
    /// `SIGVTALRM`: virtual alarm clock.
    VTALRM = SIGVTALRM,
    /// `SIGPROF`: profiling timer expired.
    PROF = SIGPROF,
    /// `SIGWINCH`: the terminal window was resized.
    WINCH = SIGWINCH,
    /// `SIGIO`: I/O is possible on a descriptor (`O_ASYNC`).
    IO = SIGIO,
    /// `SIGSYS`: bad system call.
    SYS = SIGSYS,
}

/// Windows has no signals: a console's control events stand in for them,
/// numbered as libuv numbers them (Ctrl-C is `INT`, the console window's
/// close `HUP`), so that a program that watches `Signal::INT` to shut
/// down works on both. `KILL` and `TERM` can only be sent
/// ([`Child::kill`](crate::Child::kill) ends the child, as `TerminateProcess`).
///
/// ```
/// use evloop::Signal;
/// assert_eq!(Signal::name(Signal::BREAK), Some("CTRL_BREAK"));
/// ```
#[cfg(windows)]
impl Signal {
    /// `CTRL_CLOSE_EVENT`: the console window is closing (as libuv's
    /// `SIGHUP` on Windows). The process ends soon after the handlers
    /// return, whatever they do.
    pub const HUP: i32 = 1;
    /// `CTRL_C_EVENT`: Ctrl-C.
    pub const INT: i32 = 2;
    /// Not an event: [`Child::kill`](crate::Child::kill) with it terminates the child.
    pub const KILL: i32 = 9;
    /// Not an event: [`Child::kill`](crate::Child::kill) with it terminates the child.
    pub const TERM: i32 = 15;
    /// `CTRL_BREAK_EVENT`: Ctrl-Break (libuv's `SIGBREAK`).
    pub const BREAK: i32 = 21;
    /// `CTRL_LOGOFF_EVENT`: a user logs off (services only receive it).
    pub const LOGOFF: i32 = 30;
    /// `CTRL_SHUTDOWN_EVENT`: the system shuts down (services only).
    pub const SHUTDOWN: i32 = 31;

    /// The name of console event `signal` (`"CTRL_C"`), if it is one of
    /// the constants above.
    ///
    /// ```
    /// use evloop::Signal;
    /// assert_eq!(Signal::name(Signal::INT), Some("CTRL_C"));
    /// assert_eq!(Signal::name(3), None);
    /// ```
    pub fn name(signal: i32) -> Option<&'static str> {
        Some(match signal {
            Signal::HUP => "CTRL_CLOSE",
            Signal::INT => "CTRL_C",
            Signal::KILL => "SIGKILL",
            Signal::TERM => "SIGTERM",
            Signal::BREAK => "CTRL_BREAK",
            Signal::LOGOFF => "CTRL_LOGOFF",
            Signal::SHUTDOWN => "CTRL_SHUTDOWN",
            _ => return None,
        })
    }
}

/// The highest signal number this platform has (and a signal set holds).
#[cfg(any(target_os = "macos", target_os = "ios", windows))]
pub(crate) const LAST_SIGNAL: i32 = 31;
#[cfg(not(any(target_os = "macos", target_os = "ios", windows)))]
pub(crate) const LAST_SIGNAL: i32 = 64;

/// Refuses what no signal watcher can watch.
#[cfg(any(unix, target_os = "wasi"))]
fn check_signal(signal: i32) -> Result<()> {
    let reason = if !(1..=LAST_SIGNAL).contains(&signal) {
        "signals are numbered from 1 to the platform's last"
    } else if signal == sig::SIGKILL || signal == sig::SIGSTOP {
        "SIGKILL and SIGSTOP cannot be caught"
    } else {
        return Ok(());
    };
    Err(Error::InvalidSignal { signal, reason })
}

/// Refuses what is not a console control event.
#[cfg(windows)]
fn check_signal(signal: i32) -> Result<()> {
    match signal {
        Signal::HUP | Signal::INT | Signal::BREAK | Signal::LOGOFF | Signal::SHUTDOWN => Ok(()),
        _ => Err(Error::InvalidSignal {
            signal,
            reason: "Windows delivers only console events: Signal::INT (Ctrl-C), BREAK, \
                     HUP (close), LOGOFF and SHUTDOWN",
        }),
    }
}

impl Signal {
    /// Creates and starts a signal watcher: its callback runs, in the
    /// loop's thread, after `signal` arrived (once per iteration however
    /// often it arrived in between, as libev coalesces). `signal` is the
    /// platform's number: one of the constants on [`Signal`]
    /// (`Signal::TERM`), or `libc`'s.
    ///
    /// Any number of watchers may watch one signal, in any number of loops
    /// in the process, each in its own thread: every one is called. While
    /// some loop of the process watches a signal, its handler replaces the
    /// previous disposition; when the last watcher of it in the process
    /// stops, the previous disposition comes back (so a second Ctrl-C after
    /// shutdown is not swallowed).
    ///
    /// Errors: [`Error::InvalidSignal`] (out of range, `SIGKILL`,
    /// `SIGSTOP`); [`Error::Backend`] if the backend cannot watch signals.
    ///
    /// ```
    /// use evloop::{Loop, RunMode, Signal};
    /// use std::process::Command;
    /// let mut lp: Loop<Vec<&str>> = Loop::new()?;
    /// Signal::new(&mut lp, Signal::TERM, |lp, log, me| {
    ///     log.push("SIGTERM");
    ///     lp.remove(me).unwrap(); // shut down: the run has nothing left
    /// })?;
    /// // Another process sends it: here a shell, to its parent (this program).
    /// Command::new("sh").args(["-c", "kill -TERM $PPID"]).status()?;
    /// let mut log = vec![];
    /// lp.run(RunMode::Default, &mut log)?;
    /// assert_eq!(log, ["SIGTERM"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new<'s, S, F>(lp: &mut Loop<'s, S>, signal: i32, callback: F) -> Result<Signal>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, Signal) + 's,
    {
        check_signal(signal)?;
        let key = lp.create::<Signals>(
            rank::SIGNAL,
            Plain::<Signal, F>::boxed(callback),
            |signals, key| {
                signals.signal_of.insert(key.slot, signal);
            },
        )?;
        Ok(Signal(key))
    }
}

impl Signal {
    /// Changes the signal a stopped signal watcher watches (libev's
    /// `ev_signal_set`); [`Loop::start`] then watches the new one.
    ///
    /// Errors, the watcher unchanged: [`Error::WatcherActive`] if it is
    /// active (stop it first: the backend watches its signal meanwhile);
    /// [`Error::InvalidSignal`] as for [`Signal::new`]; a stale or
    /// foreign handle.
    ///
    /// ```
    /// use evloop::{Error, Loop};
    /// let mut lp: Loop = Loop::new()?;
    /// let s = evloop::Signal::new(&mut lp, libc::SIGUSR1, |_, _, _| {})?;
    /// assert!(matches!(s.set_number(&mut lp, libc::SIGUSR2), Err(Error::WatcherActive { .. })));
    /// lp.stop(s)?;
    /// s.set_number(&mut lp, libc::SIGUSR2)?;
    /// lp.start(s)?;
    /// assert_eq!(s.number(&lp)?, libc::SIGUSR2);
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn set_number<S>(self, lp: &mut Loop<'_, S>, signal: i32) -> Result<()> {
        if lp.entry_mut(&self)?.is_active() {
            return Err(Error::WatcherActive {
                kind: "signal",
                what: "signal",
            });
        }
        check_signal(signal)?;
        let (signals, _) = lp.builtin::<Signals>(rank::SIGNAL);
        signals.signal_of.insert(self.0.slot, signal);
        Ok(())
    }

    /// The signal a signal watcher watches.
    ///
    /// ```
    /// # use evloop::{Loop, Signal};
    /// let mut lp: Loop = Loop::new()?;
    /// let s = Signal::new(&mut lp, Signal::HUP, |_, _, _| {})?;
    /// assert_eq!(s.number(&lp)?, Signal::HUP);
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn number<S>(self, lp: &Loop<'_, S>) -> Result<i32> {
        lp.entry(&self)?;
        let signals = lp.kind::<Signals>();
        Ok(signals
            .expect("a signal handle names a signal watcher")
            .signal(self.0.slot))
    }
}
