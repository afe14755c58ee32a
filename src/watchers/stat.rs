//! Stat watchers: the handle, what a callback receives ([`StatEvent`]) and
//! the `Loop` methods. Polling, hints and the comparison are the stat
//! component's (stats.rs).

use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use crate::event_loop::Dispatch;
use crate::handle::{handle, Key};
use crate::registry::Kind;
use crate::{FileStat, Loop, Ready, Result};

handle!(
    /// Handle to a stat watcher, returned by [`Loop::stat`].
    ///
    /// ```
    /// use evloop::{Loop, Sim};
    /// use std::time::Duration;
    /// let mut lp: Loop = Loop::with_backend(Sim::new().backend());
    /// let s = lp.stat("/etc/motd", Duration::ZERO, |_, _, _| {}).unwrap();
    /// assert!(!lp.file_stat(s).unwrap().exists); // no such file in the simulation
    /// ```
    Stat,
    "stat",
    false
);

/// What a stat watcher's callback receives: the watched path, and its
/// attributes before and after the change.
///
/// ```
/// use evloop::{FileStat, Loop, RunMode, Sim};
/// use std::path::PathBuf;
/// use std::time::Duration;
/// let sim = Sim::new();
/// sim.write_file(Duration::from_millis(3), "/tmp/app.conf", 12);
/// let mut lp: Loop<Vec<(PathBuf, bool, bool)>> = Loop::with_backend(sim.backend());
/// lp.stat("/tmp/app.conf", Duration::from_secs(1), |lp, log, ev| {
///     log.push((ev.path.to_path_buf(), ev.previous.exists, ev.current.exists));
///     lp.stop(ev.watcher).unwrap();
/// }).unwrap();
/// let mut log = vec![];
/// lp.run(RunMode::Default, &mut log).unwrap();
/// assert_eq!(log, [("/tmp/app.conf".into(), false, true)]); // created
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatEvent<'a> {
    /// The watcher being invoked.
    pub watcher: Stat,
    /// The path it watches, as given to [`Loop::stat`] (not made absolute
    /// or resolved: a relative path is looked up from the current
    /// directory at each look).
    pub path: &'a Path,
    /// What the path was seen as before.
    pub previous: FileStat,
    /// What it is now.
    pub current: FileStat,
}

/// A stat callback, stored as a [`Dispatch`]. The watched path is the
/// stat component's (`stats.rs`), shared: the event lends a counted
/// reference to it while the callback has the loop (and may remove the
/// watcher).
struct StatCallback<F>(F);

impl crate::Callback for Stat {
    type Event<'a> = StatEvent<'a>;
}

impl crate::watchers::adapt::Adapt for Stat {
    fn adapt<'s, S, F>(callback: F) -> crate::watchers::adapt::Adapted<'s, S>
    where
        F: for<'a> FnMut(&mut Loop<'s, S>, &mut S, StatEvent<'a>) + 's,
    {
        crate::watchers::adapt::Adapted(Box::new(StatCallback(callback)))
    }
}

impl<'s, S, F> Dispatch<'s, S> for StatCallback<F>
where
    F: for<'a> FnMut(&mut Loop<'s, S>, &mut S, StatEvent<'a>),
{
    fn call(&mut self, lp: &mut Loop<'s, S>, state: &mut S, key: Key, _ready: Ready) {
        // The component holds every live stat watcher's state: a callback
        // is only invoked for a live watcher.
        let Some(w) = lp.stats.get(key.slot) else {
            return;
        };
        let (path, previous, current) = (Rc::clone(&w.path), w.previous, w.current);
        let ev = StatEvent {
            watcher: Stat(key),
            path: &path,
            previous,
            current,
        };
        (self.0)(lp, state, ev)
    }
}

impl<'s, S> Loop<'s, S> {
    /// Creates and starts a stat watcher (libev's `ev_stat`): its callback
    /// runs when the attributes of `path` change (existence, size,
    /// modification time to the nanosecond, inode, device, link count,
    /// mode), with the path and the attributes before and after
    /// ([`StatEvent`]). A missing file is a state like any other, so
    /// creation and deletion are changes; a save by rename (what editors
    /// do) changes the inode. The watcher's start is the baseline: a file
    /// that exists then is not reported until it changes (feed an event,
    /// [`Loop::feed_event`], to handle it at once).
    ///
    /// It is correct on its own by polling, and quick where the backend
    /// hints at changes (inotify on Linux, kqueue's `EVFILT_VNODE`,
    /// watching the directory too, so that renames and re-creations are
    /// seen). Where no hint is possible (network file systems, inotify's
    /// limit reached) it polls alone.
    ///
    /// `interval` is how often it polls:
    ///
    /// - **`Duration::ZERO` means 5 seconds**, not "as often as possible"
    ///   (libev's rule: zero picks its default, 5 s). Without hints, a
    ///   change can take that long to be seen.
    /// - Anything shorter than 0.1 s is 0.1 s (libev's minimum: polling
    ///   faster costs more than it finds).
    /// - With hints, most changes are seen at once whatever the interval;
    ///   the polls catch what hints miss.
    ///
    /// A file that is appended to is read from this callback, not from an
    /// io watcher: a regular file is always ready, so [`Loop::io`] refuses
    /// it.
    /// `docs/recipes.md` follows a log file this way across rotation and
    /// truncation, as `tail -F` does.
    ///
    /// ```
    /// use evloop::{Loop, RunMode, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// sim.write_file(Duration::ZERO, "/srv/data", 10);
    /// sim.write_file(Duration::from_millis(500), "/srv/data", 20);
    /// sim.remove_file(Duration::from_millis(900), "/srv/data");
    /// let mut lp: Loop<Vec<String>> = Loop::with_backend(sim.backend());
    /// lp.timer(Duration::from_millis(1), Duration::ZERO, |lp, _, _| {
    ///     lp.stat("/srv/data", Duration::from_secs(1), |lp, log, ev| {
    ///         log.push(format!("{} -> {} at {:?}", ev.previous.size, ev.current.size, lp.now()));
    ///         if !ev.current.exists {
    ///             lp.remove(ev.watcher).unwrap();
    ///         }
    ///     }).unwrap();
    /// }).unwrap();
    /// let mut log = vec![];
    /// lp.run(RunMode::Default, &mut log).unwrap();
    /// assert_eq!(log, ["10 -> 20 at 500ms", "20 -> 0 at 900ms"]);
    /// ```
    pub fn stat<F>(
        &mut self,
        path: impl AsRef<Path>,
        interval: Duration,
        callback: F,
    ) -> Result<Stat>
    where
        F: for<'a> FnMut(&mut Loop<'s, S>, &mut S, StatEvent<'a>) + 's,
    {
        let path: Rc<Path> = Rc::from(path.as_ref());
        let key = self
            .watchers
            .insert(Kind::Stat, Box::new(StatCallback(callback)));
        self.stats.configure(key.slot, path, interval);
        self.activate(key.slot);
        Ok(Stat(key))
    }

    /// What a stat watcher last saw its path as.
    ///
    /// ```
    /// use evloop::{Loop, Sim};
    /// use std::time::Duration;
    /// let sim = Sim::new();
    /// let mut lp: Loop = Loop::with_backend(sim.backend());
    /// let s = lp.stat("/nothing/here", Duration::ZERO, |_, _, _| {}).unwrap();
    /// assert_eq!(lp.file_stat(s).unwrap(), evloop::FileStat::MISSING);
    /// ```
    pub fn file_stat(&self, s: Stat) -> Result<FileStat> {
        self.entry(&s)?;
        Ok(self
            .stats
            .get(s.0.slot)
            .map_or(FileStat::MISSING, |w| w.current))
    }
}
