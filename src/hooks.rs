//! Where a watcher goes when it starts, stops and leaves the registry:
//! io watchers to their fd's list, timers to the heap, and every other
//! kind to its [`Role`](crate::Role) (kinds/mod.rs calls its hooks). No
//! kind beyond the core has an arm here.

use crate::RawFd;

use crate::handle::Key;
use crate::registry::Role;
use crate::slot_list::Slot;
use crate::unwind::Held;
use crate::{Interest, Loop, Result};

impl<'s, S> Loop<'s, S> {
    /// Starts a stopped watcher, asking first what may refuse: an io
    /// watcher's trigger mode and fd ([`Loop::check_interest`]), or its
    /// kind ([`Role::start`](crate::Role::start)).
    pub(crate) fn start_slot(&mut self, key: Key) -> Result<()> {
        let slot = key.slot;
        match self.registry[slot].role() {
            Role::Other { index, .. } => return self.start_other(index, key),
            Role::Io { fd, interest } => self.check_interest(fd, interest, None)?,
            Role::Timer => {}
        }
        self.activate(slot);
        Ok(())
    }

    /// Starts a core watcher (io, timer) whose start cannot fail: marks
    /// it active (the registry keeps the counts) and puts it where its
    /// phase finds it.
    pub(crate) fn activate(&mut self, slot: Slot) {
        if !self.registry.activate(slot) {
            return;
        }
        let w = &mut self.registry;
        match w[slot].role() {
            Role::Io { fd, interest } => self.fds.start(w, fd, slot, interest.trigger()),
            Role::Timer => self.timers.start(w, slot),
            Role::Other { .. } => unreachable!("a kind's watcher starts through its kind"),
        }
    }

    /// The one-shot watcher whose callback a direct batch is running,
    /// its disarm deferred, re-armed by that callback (the common
    /// pattern): the mark goes, and the watcher, still active and on its
    /// fd, stays as it is: that is what the general path's disarm and
    /// start would leave (the checks of [`Loop::start_slot`] cannot fail
    /// for it), and its fd, listed as reported by the batch and changed
    /// no further, wants the registration it had before the report again
    /// (which the next flush takes from the fd's entry). Returns whether
    /// `key` was that watcher.
    #[inline]
    pub(crate) fn rearm(&mut self, key: Key) -> bool {
        // The mark names a watcher of this loop: `key` must be this
        // loop's too.
        if self.results.is_disarming_version(key.slot, key.version) && self.registry.owns(key) {
            self.results.take_disarm();
            true
        } else {
            false
        }
    }

    /// Checks that the backend offers the trigger mode and that it agrees
    /// with the other active watchers on the fd (`except` excluded). A
    /// direct batch that may still hold an event for the fd is
    /// materialised first ([`Loop::settle_fd`]).
    pub(crate) fn check_interest(
        &mut self,
        fd: RawFd,
        interest: Interest,
        except: Option<Slot>,
    ) -> Result<()> {
        self.settle_fd(fd);
        self.fds
            .check_interest(&self.caps, &*self.backend, fd, interest, except)
    }

    /// Materialises a direct batch that may still hold an event for `fd`
    /// (it has not read that fd's result), and settles a deferred disarm:
    /// before anything that depends on which of the fd's watchers are
    /// active, since the event would disarm its one-shot watchers.
    #[inline]
    fn settle_fd(&mut self, fd: RawFd) {
        if self.results.is_open() && self.results.last_read() != Some(fd) {
            self.materialise_batch();
        } else {
            self.settle_disarm();
        }
    }

    /// Stops a watcher: takes it out of its fd's list, the heap or its
    /// kind. Does not touch a pending invocation.
    pub(crate) fn deactivate(&mut self, slot: Slot) {
        let e = &self.registry[slot];
        if let Role::Other { index, .. } = e.role() {
            let key = self.registry.key(slot, e.version());
            return self.stop_other(index, key);
        }
        if !self.registry.deactivate(slot) {
            return;
        }
        let w = &mut self.registry;
        match w[slot].role() {
            Role::Io { fd, .. } => self.fds.stop(w, fd, slot),
            Role::Timer => self.timers.stop(w, slot),
            Role::Other { .. } => {} // stopped above
        }
    }

    /// A stopped watcher is about to leave the registry: a timer's node
    /// leaves the heap now, while its entry still holds the node's place.
    pub(crate) fn leaving(&mut self, slot: Slot) {
        if let Role::Timer = self.registry[slot].role() {
            self.timers.remove(&mut self.registry, slot);
        }
    }

    /// A watcher left the registry (removed): what was kept for it goes
    /// too. A kind's hook may run user code (a custom schedule's `Drop`):
    /// it runs through `held`, so that a panic there finds the loop
    /// consistent and the watcher's own drop still happens.
    pub(crate) fn removed(&mut self, key: Key, kind: Role, held: &mut Held) {
        match kind {
            Role::Other { index, .. } => held.run(|| self.remove_other(index, key)).unwrap_or(()),
            // Before the source is closed and its number can be reused.
            Role::Io { fd, .. } => {
                self.settle_fd(fd);
                self.fds.remove_if_unwatched(fd, &mut *self.backend)
            }
            // Its node left the heap before its entry went ([`Loop::leaving`]).
            Role::Timer => {}
        }
    }
}
