//! Signal watchers: the handle and the `Loop` methods. The watchers of
//! each signal are the signal component's (signals.rs); the process-wide
//! handler is the backend's (backends/unix/ on the OS backends).

use crate::handle::handle;
use crate::registry::Kind;
use crate::watchers::plain::Plain;
use crate::{Error, Loop, Result};

handle!(
    /// Handle to a signal watcher, returned by [`Loop::signal`].
    ///
    /// ```
    /// use evloop::{Loop, Signal};
    /// let mut lp: Loop = Loop::new()?;
    /// let s = lp.signal(Signal::TERM, |_, _, _| {})?;
    /// assert_eq!(lp.signal_number(s)?, Signal::TERM);
    /// # Ok::<(), evloop::Error>(())
    /// ```
    Signal,
    "signal",
    false
);

/// Defines the signal-number constants on [`Signal`] and [`Signal::name`]
/// from one list: `NAME = libc::SIGNAME`.
macro_rules! signal_numbers {
    ($($(#[$doc:meta])* $name:ident = $value:ident),* $(,)?) => {
        /// The platform's signal numbers, so that a program needs no direct
        /// dependency on `libc` to name them: `lp.signal(Signal::TERM, ..)`,
        /// `lp.kill(child, Signal::KILL)`, `sim.raise(at, Signal::HUP)`.
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
                pub const $name: i32 = libc::$value;
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
                    $(libc::$value => Some(stringify!($value)),)*
                    _ => None,
                }
            }
        }
    };
}

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
    /// sent ([`Loop::kill`](crate::Loop::kill)).
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

/// The highest signal number this platform has (and a signal set holds).
#[cfg(any(target_os = "macos", target_os = "ios"))]
pub(crate) const LAST_SIGNAL: i32 = 31;
#[cfg(not(any(target_os = "macos", target_os = "ios")))]
pub(crate) const LAST_SIGNAL: i32 = 64;

/// Refuses what no signal watcher can watch.
fn check_signal(signal: i32) -> Result<()> {
    let reason = if !(1..=LAST_SIGNAL).contains(&signal) {
        "signals are numbered from 1 to the platform's last"
    } else if signal == libc::SIGKILL || signal == libc::SIGSTOP {
        "SIGKILL and SIGSTOP cannot be caught"
    } else {
        return Ok(());
    };
    Err(Error::InvalidSignal { signal, reason })
}

impl<'s, S> Loop<'s, S> {
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
    /// lp.signal(Signal::TERM, |lp, log, me| {
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
    pub fn signal<F>(&mut self, signal: i32, callback: F) -> Result<Signal>
    where
        F: FnMut(&mut Loop<'s, S>, &mut S, Signal) + 's,
    {
        check_signal(signal)?;
        let key = self
            .watchers
            .insert(Kind::Signal { signal }, Plain::<Signal, F>::boxed(callback));
        let started = self.can_start(key.slot);
        if let Err(err) = started {
            self.watchers.remove(key.slot);
            return Err(err);
        }
        self.activate(key.slot);
        Ok(Signal(key))
    }

    /// Changes the signal a stopped signal watcher watches (libev's
    /// `ev_signal_set`); [`Loop::start`] then watches the new one.
    ///
    /// Errors, the watcher unchanged: [`Error::WatcherActive`] if it is
    /// active (stop it first: the backend watches its signal meanwhile);
    /// [`Error::InvalidSignal`] as for [`Loop::signal`]; a stale or
    /// foreign handle.
    ///
    /// ```
    /// use evloop::{Error, Loop};
    /// let mut lp: Loop = Loop::new()?;
    /// let s = lp.signal(libc::SIGUSR1, |_, _, _| {})?;
    /// assert!(matches!(lp.set_signal(s, libc::SIGUSR2), Err(Error::WatcherActive { .. })));
    /// lp.stop(s)?;
    /// lp.set_signal(s, libc::SIGUSR2)?;
    /// lp.start(s)?;
    /// assert_eq!(lp.signal_number(s)?, libc::SIGUSR2);
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn set_signal(&mut self, s: Signal, signal: i32) -> Result<()> {
        if self.entry_mut(&s)?.is_active() {
            return Err(Error::WatcherActive {
                kind: "signal",
                what: "signal",
            });
        }
        check_signal(signal)?;
        self.watchers.set_signal(s.0.slot, signal);
        Ok(())
    }

    /// The signal a signal watcher watches.
    ///
    /// ```
    /// # use evloop::{Loop, Signal};
    /// let mut lp: Loop = Loop::new()?;
    /// let s = lp.signal(Signal::HUP, |_, _, _| {})?;
    /// assert_eq!(lp.signal_number(s)?, Signal::HUP);
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn signal_number(&self, s: Signal) -> Result<i32> {
        match self.entry(&s)?.kind() {
            Kind::Signal { signal } => Ok(signal),
            _ => unreachable!("a signal handle names a signal watcher"),
        }
    }
}
