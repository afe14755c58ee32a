//! The activation hooks: the one place that knows where each kind of
//! watcher goes when it starts ([`Loop::activate`], after
//! [`Loop::can_start`] said it may), when it stops
//! ([`Loop::deactivate`]) and when it leaves the registry
//! ([`Loop::released`]). A new kind adds an arm to each `match` here (the
//! compiler points at them) and its component's calls.

use std::os::fd::RawFd;

use crate::handle::Key;
use crate::registry::Kind;
use crate::slot_list::Slot;
use crate::timers::to_ns;
use crate::unwind::Held;
use crate::{Error, Interest, Loop, Result, Trigger};

impl<'s, S> Loop<'s, S> {
    /// Starts a watcher: marks it active (the registry keeps the counts)
    /// and puts it where its kind's phase finds it. With
    /// [`Loop::deactivate`], the one place that knows where each kind goes.
    pub(crate) fn activate(&mut self, slot: Slot) {
        if let Kind::Other { index, .. } = self.watchers[slot].kind() {
            // (Starting can fail only in `Loop::start`, which asks first.)
            let key = Key {
                slot,
                gen: self.watchers[slot].gen,
            };
            if !self.watchers[slot].is_active() {
                let _ = self.start_other(index, key);
            }
            return;
        }
        if self.watchers[slot].kind() == Kind::Periodic {
            // Its schedule is asked first (a custom one is user code): a
            // panic in it leaves the watcher stopped and the loop as it
            // was.
            if !self.watchers[slot].is_active() {
                let now = to_ns(self.backend.wall_now());
                if let Some(at) = self.periodics.first(slot, now) {
                    self.start_periodic(slot, at);
                }
                // (None: its custom schedule gave no time; it stays
                // stopped.)
            }
            return;
        }
        if !self.watchers.activate(slot) {
            return;
        }
        let w = &mut self.watchers;
        match w[slot].kind() {
            Kind::Io { fd, .. } => self.fds.attach(w, fd, slot),
            Kind::Timer => self.timers.start(slot),
            Kind::Signal { signal } => self.signals.add(w, slot, signal),
            Kind::Child { pid } => self.children.add(w, slot, pid),
            Kind::ChildAny => self.children.add_any(w, slot),
            Kind::Periodic | Kind::Other { .. } => {} // started above
            Kind::Stat => {
                let Some(w) = self.stats.get(slot) else {
                    return;
                };
                let (path, token) = (w.path.clone(), self.stats.token(slot).unwrap_or(0));
                // A hint is welcome, not needed: without one, polling.
                let _ = self.backend.watch_path(&path, token);
                let seen = self.backend.stat(&path);
                self.stats.start(slot, self.timers.now(), seen);
            }
        }
    }

    /// Starts the (stopped) periodic watcher in `slot`, to fire first at
    /// `at`, which its schedule gave: nothing here runs user code.
    pub(crate) fn start_periodic(&mut self, slot: Slot, at: u64) {
        if !self.watchers.activate(slot) {
            return;
        }
        if self.periodics.is_empty() {
            let reported = self.backend.watch_clock_steps();
            self.periodics.first_started(reported);
        }
        self.periodics.start(slot, at);
    }

    /// What must hold before the watcher in `slot` starts: an io watcher's
    /// trigger mode must suit the backend and its fd; the backend must
    /// watch a signal watcher's signal, a child watcher's pid, or any
    /// child for a watcher of any (asked here, as that can fail and
    /// activation cannot).
    pub(crate) fn can_start(&mut self, slot: Slot) -> Result<()> {
        match self.watchers[slot].kind() {
            Kind::Io { fd, interest } => self.check_interest(fd, interest, None),
            Kind::Signal { signal } if self.signals.needs_watch(signal) => {
                let backend = self.backend.name();
                self.backend
                    .watch_signal(signal)
                    .map_err(|source| Error::Backend {
                        backend,
                        op: "watch a signal",
                        source,
                    })?;
                self.signals.watching(signal);
                Ok(())
            }
            Kind::Child { pid } if !self.children.is_watched(pid) => self
                .backend
                .watch_child(pid)
                .map_err(|source| Error::Child { pid, source }),
            Kind::ChildAny if !self.children.watches_any() => {
                let backend = self.backend.name();
                self.backend
                    .watch_any_child()
                    .map_err(|source| Error::Backend {
                        backend,
                        op: "watch any child",
                        source,
                    })
            }
            _ => Ok(()),
        }
    }

    /// Checks that the backend offers the trigger mode and that it agrees
    /// with the other active watchers on the fd (`except` excluded).
    pub(crate) fn check_interest(
        &self,
        fd: RawFd,
        interest: Interest,
        except: Option<Slot>,
    ) -> Result<()> {
        let trigger = interest.trigger();
        if trigger == Trigger::Edge && !self.caps.edge {
            return Err(Error::UnsupportedTrigger {
                trigger,
                backend: self.backend.name(),
            });
        }
        match self.fds.trigger_conflict(fd, trigger, except) {
            Some(existing) => Err(Error::TriggerConflict {
                fd,
                existing,
                requested: trigger,
            }),
            None => Ok(()),
        }
    }

    /// A watcher left the registry (removed): what its kind kept for it
    /// goes too. What holds user code (a custom schedule's captures) is
    /// dropped last, through `held`, so that a panic in its `Drop` finds
    /// the loop consistent.
    pub(crate) fn released(&mut self, key: Key, kind: Kind, held: &mut Held) {
        let slot = key.slot;
        match kind {
            Kind::Other { index, .. } => held.run(|| self.remove_other(index, key)).unwrap_or(()),
            // Before the source is closed and its number can be reused.
            Kind::Io { fd, .. } => {
                self.fds.forget_if_unwatched(fd, &mut *self.backend);
                // The io side of a `once` removed before it fired (the
                // once was cancelled): its timeout goes too.
                if let Some(timeout) = self.onces.take(slot) {
                    let _ = self.remove(crate::Timer(timeout));
                }
            }
            Kind::Timer => self.timers.forget(slot),
            Kind::Child { .. } | Kind::ChildAny => self.children.forget(slot),
            Kind::Periodic => {
                if let Some(rule) = self.periodics.forget(slot) {
                    held.drop(rule);
                }
            }
            Kind::Stat => {
                self.stats.forget(slot);
            }
            _ => {}
        }
    }

    /// Stops a watcher: takes it out of its kind's structure. Does not
    /// touch a pending invocation.
    pub(crate) fn deactivate(&mut self, slot: Slot) {
        if let Kind::Other { index, .. } = self.watchers[slot].kind() {
            let gen = self.watchers[slot].gen;
            return self.stop_other(index, Key { slot, gen });
        }
        if !self.watchers.deactivate(slot) {
            return;
        }
        let w = &mut self.watchers;
        match w[slot].kind() {
            Kind::Io { fd, .. } => self.fds.detach(w, fd, slot),
            Kind::Timer => self.timers.stop(slot),
            Kind::Signal { signal } => {
                if self.signals.remove(w, slot, signal) {
                    self.backend.unwatch_signal(signal);
                }
            }
            Kind::Child { pid } => {
                if self.children.remove(w, slot, pid) {
                    self.backend.unwatch_child(pid);
                }
            }
            Kind::ChildAny => {
                if self.children.remove_any(w, slot) {
                    self.backend.unwatch_any_child();
                }
            }
            Kind::Periodic => {
                self.periodics.stop(slot);
                if self.periodics.done_with_steps() {
                    self.backend.unwatch_clock_steps();
                }
            }
            Kind::Other { .. } => {} // stopped above
            Kind::Stat => {
                self.stats.stop(slot);
                if let Some(token) = self.stats.token(slot) {
                    self.backend.unwatch_path(token);
                }
            }
        }
    }
}
