//! `Loop::once`: an fd's readiness or a timeout, whichever comes first,
//! reported once to an `FnOnce`, after which everything is released
//! (libev's `ev_once`). Built from an io watcher and a timer; the once
//! component (onces.rs) pairs them.

use std::time::Duration;

use crate::event_loop::Dispatch;
use crate::handle::{handle, Key};
use crate::{Interest, Loop, Ready, Result, Source, Timer};

handle!(
    /// Handle to a [`Loop::once`], while it waits. The shared operations
    /// act on the once as a whole: [`Loop::is_active`] says whether it is
    /// still waiting, and [`Loop::remove`] cancels it (its callback is
    /// dropped uncalled, and an owned source with it). [`Loop::stop`]
    /// stops waiting for readiness; a timeout still comes (and
    /// [`Loop::start`] waits again). Once it has fired the handle is
    /// stale, like a removed watcher's.
    ///
    /// ```
    /// use evloop::{Interest, Loop, RunMode, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let quiet = sim.socket("quiet", 0);
    /// let mut lp: Loop<u32> = Loop::with_backend(sim.backend());
    /// let once = lp
    ///     .once(Some((quiet, Interest::READABLE)), Some(Duration::from_secs(1)), |_, n, _| *n += 1)
    ///     .unwrap();
    /// assert!(lp.is_active(once).unwrap());
    /// lp.remove(once).unwrap(); // cancelled: neither readiness nor the timeout is reported
    /// let mut n = 0;
    /// lp.run(RunMode::Default, &mut n).unwrap();
    /// assert_eq!((n, lp.active_count()), (0, 0));
    /// assert!(lp.is_active(once).is_err());
    /// ```
    OnceWatcher,
    "once",
    true // it may name the once's io watcher
);

/// What a [`Loop::once`] callback receives.
///
/// ```
/// use evloop::{Once, Ready};
/// let hit: Once<()> = Once::Ready { ready: Ready::READABLE, source: () };
/// assert!(matches!(hit, Once::Ready { ready, .. } if ready.is_readable()));
/// ```
#[derive(Debug)]
pub enum Once<T> {
    /// The source became ready first; here it is back.
    Ready {
        /// What was ready.
        ready: Ready,
        /// The source, handed back.
        source: T,
    },
    /// The timeout came first (the source, if any, is handed back).
    TimedOut {
        /// The source, if one was given.
        source: Option<T>,
    },
}

/// The io side of a once: owns the source and the callback until one of
/// them fires.
struct OnceIo<T, F> {
    source: Option<T>,
    cb: Option<F>,
}

impl<'s, S, T, F> Dispatch<'s, S> for OnceIo<T, F>
where
    T: Source + 'static,
    F: FnOnce(&mut Loop<'s, S>, &mut S, Once<T>),
{
    fn call(&mut self, lp: &mut Loop<'s, S>, state: &mut S, key: Key, ready: Ready) {
        let (Some(source), Some(cb)) = (self.source.take(), self.cb.take()) else {
            return;
        };
        if let Some(timeout) = lp.onces.take(key.slot) {
            let _ = lp.remove(Timer(timeout));
        }
        let _ = lp.remove(crate::Io(key));
        cb(lp, state, Once::Ready { ready, source });
    }

    fn timed_out(mut self: Box<Self>, lp: &mut Loop<'s, S>, state: &mut S) {
        if let Some(cb) = self.cb.take() {
            cb(
                lp,
                state,
                Once::TimedOut {
                    source: self.source.take(),
                },
            );
        }
    }
}

impl<'s, S> Loop<'s, S> {
    /// Waits once for `source` to become ready for `interest`, or for
    /// `timeout`, whichever comes first, and calls `callback` once with
    /// what happened; then the watchers it used are gone and the source is
    /// handed back in the [`Once`] (libev's `ev_once`). With neither a
    /// source nor a timeout, it reports a timeout at the next iteration.
    ///
    /// Returns a handle to cancel it ([`OnceWatcher`]). Errors: those of
    /// [`Loop::io`] for the source.
    ///
    /// ```
    /// use evloop::{Interest, Loop, Once, RunMode, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let quiet = sim.socket("quiet", 0);
    /// let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    /// lp.once(Some((quiet, Interest::READABLE)), Some(Duration::from_millis(20)), |lp, log, what| {
    ///     match what {
    ///         Once::Ready { ready, .. } => log.push(format!("ready {ready}")),
    ///         Once::TimedOut { source } => log.push(format!(
    ///             "timed out at {:?}, source back: {}", lp.now(), source.is_some()
    ///         )),
    ///     }
    /// }).unwrap();
    /// let mut log = vec![];
    /// lp.run(RunMode::Default, &mut log).unwrap();
    /// assert_eq!(log, ["timed out at 20ms, source back: true"]);
    /// assert_eq!(lp.active_count(), 0); // nothing left behind
    /// ```
    pub fn once<T, F>(
        &mut self,
        io: Option<(T, Interest)>,
        timeout: Option<Duration>,
        callback: F,
    ) -> Result<OnceWatcher>
    where
        T: Source + 'static,
        F: FnOnce(&mut Loop<'s, S>, &mut S, Once<T>) + 's,
    {
        let Some((source, interest)) = io else {
            // A timer alone: it is the whole once.
            let mut cb = Some(callback);
            let fire = move |lp: &mut Loop<'s, S>, state: &mut S, me: Timer| {
                let _ = lp.remove(me);
                if let Some(cb) = cb.take() {
                    cb(lp, state, Once::TimedOut { source: None });
                }
            };
            let after = timeout.unwrap_or(Duration::ZERO);
            let timer = self.timer(after, Duration::ZERO, fire)?;
            return Ok(OnceWatcher(timer.0));
        };
        let fd = self.check_source(source.source_fd())?;
        self.check_interest(fd, interest, None)?;
        let cb = Box::new(OnceIo {
            source: Some(source),
            cb: Some(callback),
        });
        let key = self.new_io(fd, interest, cb);
        if let Some(after) = timeout {
            let io_slot = key.slot;
            let fire = move |lp: &mut Loop<'s, S>, state: &mut S, me: Timer| {
                let _ = lp.remove(me);
                lp.onces.take(io_slot);
                lp.once_timed_out(io_slot, state);
            };
            let timer = self.timer(after, Duration::ZERO, fire)?;
            self.onces.pair(io_slot, timer.0);
        }
        Ok(OnceWatcher(key))
    }

    /// The timeout of the once whose io watcher is in `slot` came first
    /// (the io watcher is still there: had it fired, it would have removed
    /// this timeout).
    fn once_timed_out(&mut self, slot: crate::slot_list::Slot, state: &mut S) {
        self.watchers.cancel(&mut self.pending, slot);
        self.deactivate(slot);
        let e = self.watchers.remove(slot);
        let mut held = crate::unwind::Held::default();
        self.released(crate::handle::Key { slot, gen: e.gen }, e.kind(), &mut held);
        held.resume(); // (an io watcher holds nothing there)
        if let Some(cb) = e.cb {
            cb.timed_out(self, state);
        }
    }
}
