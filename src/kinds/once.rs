//! `Once::new`: an fd's readiness or a timeout, whichever comes first,
//! reported once to an `FnOnce`, after which the watcher is gone (libev's
//! `ev_once`). One watcher of the once kind: the loop watches its fd for
//! it ([`Context::watch_fd`]'s binding), and the kind keeps its deadline
//! (bounding the wait, expired after the timers).

use crate::RawFd;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use crate::event_loop::Dispatch;
use crate::handle::handle;
use crate::kind::{Context, Kind, Phase, Phases, Watcher};
use crate::kinds::rank;
use crate::slot_list::Slot;
use crate::timers::{from_ns, to_ns};
use crate::{Interest, Loop, Ready, Result, Source};

handle!(
    /// Handle to a [`Once::new`], while it waits. The shared operations
    /// act on the once as a whole (it is one watcher): [`Loop::is_active`]
    /// says whether it is still waiting, [`Loop::remove`] cancels it (its
    /// callback is dropped uncalled, and an owned source with it),
    /// [`Loop::stop`] pauses it (neither readiness nor the timeout is
    /// reported) and [`Loop::start`] resumes it (with the same deadline:
    /// if it passed meanwhile, the timeout comes at the next iteration).
    /// Once it has fired the handle is stale, like a removed watcher's.
    ///
    /// ```
    /// use evloop::{Interest, Loop, Once, RunMode, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let quiet = sim.socket("quiet", 0);
    /// let mut lp: Loop<u32> = Loop::with_backend(sim.backend());
    /// let io = Some((quiet, Interest::READABLE));
    /// let once = Once::new(&mut lp, io, Some(Duration::from_secs(1)), |_, n, _| *n += 1).unwrap();
    /// assert!(lp.is_active(once).unwrap());
    /// lp.remove(once).unwrap(); // cancelled: neither readiness nor the timeout is reported
    /// let mut n = 0;
    /// lp.run(RunMode::Default, &mut n).unwrap();
    /// assert_eq!((n, lp.active_count()), (0, 0));
    /// assert!(lp.is_active(once).is_err());
    /// ```
    Once,
    "once",
    true // it may watch an fd: a direct batch is materialised first
);

/// What a [`Once::new`] callback receives.
///
/// ```
/// use evloop::{OnceEvent, Ready};
/// let hit: OnceEvent<()> = OnceEvent::Ready { ready: Ready::READABLE, source: () };
/// assert!(matches!(hit, OnceEvent::Ready { ready, .. } if ready.is_readable()));
/// ```
#[derive(Debug)]
pub enum OnceEvent<T> {
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

/// One once: the fd it waits for (checked when it was created; its
/// source is in the callback), and its deadline on the loop's clock.
struct Waiting {
    fd: Option<(RawFd, Interest)>,
    deadline: Option<u64>,
}

/// The once kind: every once's fd and deadline, and the deadlines of the
/// active ones in order.
#[derive(Default)]
pub(crate) struct Onces {
    waiting: HashMap<Slot, Waiting>,
    due: BTreeSet<(u64, Slot)>,
}

impl Kind for Onces {
    const NAME: &'static str = "once";
    const PHASES: Phases = Phases::EXPIRE;

    fn start(&mut self, cx: &mut Context<'_>, w: Watcher<Self>) -> Result<bool> {
        let Some(once) = self.waiting.get(&w.slot()) else {
            return Ok(true);
        };
        if let Some((fd, interest)) = once.fd {
            cx.watch_checked(w.slot(), fd, interest);
        }
        if let Some(at) = once.deadline {
            self.due.insert((at, w.slot()));
        }
        Ok(true)
    }

    /// (The loop unwatches its fd.)
    fn stop(&mut self, _: &mut Context<'_>, w: Watcher<Self>) {
        if let Some(at) = self.waiting.get(&w.slot()).and_then(|o| o.deadline) {
            self.due.remove(&(at, w.slot()));
        }
    }

    fn remove(&mut self, _: &mut Context<'_>, w: Watcher<Self>) {
        self.waiting.remove(&w.slot());
    }

    /// The onces whose deadline has come are queued with no readiness
    /// (their callback then reports the timeout), earliest first.
    fn phase(&mut self, cx: &mut Context<'_>, _: Phase) {
        let now = cx.timers().now();
        while let Some(&(at, slot)) = self.due.first() {
            if at > now {
                break;
            }
            self.due.remove(&(at, slot));
            cx.queue_slot(slot, Ready::EMPTY);
        }
    }

    fn wait(&mut self, cx: &mut Context<'_>) -> Option<Duration> {
        let &(at, _) = self.due.first()?;
        Some(from_ns(at.saturating_sub(cx.timers().now())))
    }

    fn has_deadline(&self) -> bool {
        !self.due.is_empty()
    }
}

/// A once's callback, with the source it owns until it fires.
struct OnceCallback<T, F> {
    source: Option<T>,
    cb: Option<F>,
}

impl<'s, S, T, F> Dispatch<'s, S> for OnceCallback<T, F>
where
    T: Source + 'static,
    F: FnOnce(&mut Loop<'s, S>, &mut S, OnceEvent<T>),
{
    /// Readiness (if the fd was ready, even in the iteration its timeout
    /// came too), else the timeout; then the watcher is gone.
    fn call(
        &mut self,
        lp: &mut Loop<'s, S>,
        state: &mut S,
        slot: Slot,
        version: u32,
        ready: Ready,
    ) {
        let key = lp.registry.key(slot, version);
        let Some(cb) = self.cb.take() else { return };
        let _ = lp.remove(Once(key));
        let what = match self.source.take() {
            Some(source) if !ready.is_empty() => OnceEvent::Ready { ready, source },
            source => OnceEvent::TimedOut { source },
        };
        cb(lp, state, what);
    }
}

impl Once {
    /// Waits once for `source` to become ready for `interest`, or for
    /// `timeout`, whichever comes first, and calls `callback` once with
    /// what happened; then the watchers it used are gone and the source is
    /// handed back in the [`OnceEvent`] (libev's `ev_once`). With neither a
    /// source nor a timeout, it reports a timeout at the next iteration.
    ///
    /// Returns a handle to cancel it ([`Once`]). Errors: those of
    /// [`Loop::io`] for the source.
    ///
    /// ```
    /// use evloop::{Interest, Loop, Once, OnceEvent, RunMode, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let quiet = sim.socket("quiet", 0);
    /// let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    /// Once::new(&mut lp, Some((quiet, Interest::READABLE)), Some(Duration::from_millis(20)), |lp, log, what| {
    ///     match what {
    ///         OnceEvent::Ready { ready, .. } => log.push(format!("ready {ready}")),
    ///         OnceEvent::TimedOut { source } => log.push(format!(
    ///             "timed out at {:?}, source back: {}", lp.now(), source.is_some()
    ///         )),
    ///     }
    /// }).unwrap();
    /// let mut log = vec![];
    /// lp.run(RunMode::Default, &mut log).unwrap();
    /// assert_eq!(log, ["timed out at 20ms, source back: true"]);
    /// assert_eq!(lp.active_count(), 0); // nothing left behind
    /// ```
    pub fn new<'s, S, T, F>(
        lp: &mut Loop<'s, S>,
        io: Option<(T, Interest)>,
        timeout: Option<Duration>,
        callback: F,
    ) -> Result<Once>
    where
        T: Source + 'static,
        F: FnOnce(&mut Loop<'s, S>, &mut S, OnceEvent<T>) + 's,
    {
        let fd = match &io {
            Some((source, interest)) => {
                let fd = lp.check_source(source.source_fd())?;
                lp.check_interest(fd, *interest, None)?;
                Some((fd, *interest))
            }
            None => None,
        };
        // With neither, a timeout at the next iteration.
        let timeout = if fd.is_none() {
            Some(timeout.unwrap_or(Duration::ZERO))
        } else {
            timeout
        };
        let deadline = timeout.map(|t| lp.timers.now().saturating_add(to_ns(t)));
        let cb = Box::new(OnceCallback {
            source: io.map(|(source, _)| source),
            cb: Some(callback),
        });
        let key = lp.create::<Onces>(rank::ONCE, cb, |onces, key| {
            onces.waiting.insert(key.slot, Waiting { fd, deadline });
        })?;
        Ok(Once(key))
    }
}
