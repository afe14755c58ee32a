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
use crate::unwind::Held;
use crate::{Interest, Loop, Result};

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
        if !self.watchers.activate(slot) {
            return;
        }
        let w = &mut self.watchers;
        match w[slot].kind() {
            Kind::Io { fd, interest } => self.fds.attach(w, fd, slot, interest.trigger()),
            Kind::Timer => self.timers.start(slot),
            Kind::Async => self.asyncs.add(w, slot),
            Kind::Cleanup => self.cleanups.push(w, slot),
            Kind::Other { .. } => {} // started above
        }
    }

    /// What must hold before the watcher in `slot` starts: an io watcher's
    /// trigger mode must suit the backend and its fd (the kinds behind
    /// `Kind` say so in `Kind::start`).
    pub(crate) fn can_start(&mut self, slot: Slot) -> Result<()> {
        match self.watchers[slot].kind() {
            Kind::Io { fd, interest } => self.check_interest(fd, interest, None),
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
        self.fds
            .check_interest(&self.caps, self.backend.name(), fd, interest, except)
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
            }
            Kind::Timer => self.timers.forget(slot),
            Kind::Async => self.asyncs.forget(slot),
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
            Kind::Async => self.asyncs.remove(w, slot),
            Kind::Cleanup => self.cleanups.remove(w, slot),
            Kind::Other { .. } => {} // stopped above
        }
    }
}
