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
    /// use evloop::Loop;
    /// let mut lp: Loop = Loop::new()?;
    /// let s = lp.signal(libc::SIGTERM, |_, _, _| {})?;
    /// assert_eq!(lp.signal_number(s)?, libc::SIGTERM);
    /// # Ok::<(), evloop::Error>(())
    /// ```
    Signal,
    "signal",
    false
);

/// The highest signal number this platform has (and a signal set holds).
#[cfg(any(target_os = "macos", target_os = "ios"))]
const LAST_SIGNAL: i32 = 31;
#[cfg(not(any(target_os = "macos", target_os = "ios")))]
const LAST_SIGNAL: i32 = 64;

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
    /// often it arrived in between, as libev coalesces).
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
    /// use evloop::{Loop, RunMode};
    /// use std::process::Command;
    /// let mut lp: Loop<Vec<&str>> = Loop::new()?;
    /// lp.signal(libc::SIGTERM, |lp, log, me| {
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
    /// # use evloop::Loop;
    /// let mut lp: Loop = Loop::new()?;
    /// let s = lp.signal(libc::SIGHUP, |_, _, _| {})?;
    /// assert_eq!(lp.signal_number(s)?, libc::SIGHUP);
    /// # Ok::<(), evloop::Error>(())
    /// ```
    pub fn signal_number(&self, s: Signal) -> Result<i32> {
        match self.entry(&s)?.kind() {
            Kind::Signal { signal } => Ok(signal),
            _ => unreachable!("a signal handle names a signal watcher"),
        }
    }
}
